"""The vxlan backend: the flannel.<VNI> and flannel-v6.<VNI> devices and each peer's
neighbour, FDB and route entries on them (flannel's pkg/backend/vxlan)."""
