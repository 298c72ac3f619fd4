"""Public entry point for external-interface selection; the implementation is in `netdev`."""

from pyflannel_runtime.netdev import (
    ExternalInterface,
    InterfaceError,
    backend_mtu,
    select_external_interface,
)

__all__ = ["ExternalInterface", "InterfaceError", "backend_mtu", "select_external_interface"]
