"""What each backend is, without running it: its name, its options with their ranges, whether it
carries IPv6, the devices it creates and the MAC its lease advertises. Pure (the wire formats and
the Go-JSON core only), so the cluster model on the controller and the lease stores on a node
both ask it, and neither needs a datapath."""
