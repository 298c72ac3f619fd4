"""pyflannel runtime: flannel-compatible network model, agent, backends and CNI plugin."""

__version__ = "0.1.0"
