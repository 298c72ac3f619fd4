"""flannel's wire formats, byte for byte: net-conf.json, the lease JSON and its etcd keys,
subnet.env, and the vxlan backend's lease data. Every node reads and writes them, and so does Go
flannel beside it. Built on the Go-JSON core and the standard library only."""
