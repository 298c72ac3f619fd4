"""The etcd v3 lease store: leases under <prefix>/subnets through etcd's JSON gateway, as
flannel's pkg/subnet/etcd keeps them."""
