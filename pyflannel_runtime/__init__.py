"""pyflannel runtime: flannel-compatible network model, agent, backends and CNI plugin."""

__version__ = "0.2.0"

# Where flanneld writes its lease and the flannel CNI plugin reads it (flanneld's
# --subnet-file and the plugin's subnetFile both default to it). Kept here, where every
# entry point already loads it, so the CNI plugin's start-up pays nothing for it.
DEFAULT_SUBNET_FILE = "/run/flannel/subnet.env"


class PyflannelError(Exception):
    """What every error the runtime raises to a caller derives from, so an adapter (a collection
    module, a command line) catches one type. An error that callers also catch as a builtin keeps
    that base too (ConfigError is a ValueError, PathError an OSError). Here for the reason
    DEFAULT_SUBNET_FILE is: the CNI plugin's errors derive from it and its start-up loads
    nothing more for it."""
