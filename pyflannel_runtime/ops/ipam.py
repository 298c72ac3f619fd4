"""The node's pod-address leaks, found and released as the collection's ipam module and
`pyflannel ipam` do (pyflannel_runtime.ipam.node). Here so that modules reach the node runtime
through ops alone."""

from pyflannel_runtime.ipam.node import IpamError, manage_leaks

__all__ = ["IpamError", "manage_leaks"]
