"""pyflannel runtime: flannel-compatible network model, agent, backends and CNI plugin."""

__version__ = "0.1.0"

# Where flanneld writes its lease and the flannel CNI plugin reads it (flanneld's
# --subnet-file and the plugin's subnetFile both default to it). Kept here, where every
# entry point already loads it, so the CNI plugin's start-up pays nothing for it.
DEFAULT_SUBNET_FILE = "/run/flannel/subnet.env"
