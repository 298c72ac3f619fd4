"""The host-gw backend: one route per peer through the external interface (flannel's
pkg/backend/hostgw)."""
