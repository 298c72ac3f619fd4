"""The Kubernetes lease store: leases as the annotations on each Node, its podCIDR the subnet,
as flannel's pkg/subnet/kube keeps them."""
