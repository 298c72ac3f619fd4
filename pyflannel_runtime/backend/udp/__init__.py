"""The udp backend: the flannel0 TUN device and the worker processes that carry its packets to
the peers in UDP datagrams (flannel's pkg/backend/udp)."""
