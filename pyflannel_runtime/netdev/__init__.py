"""External interface selection and MTU (spec §7, §5 MTU rules)."""

from pyflannel_runtime.netdev.kernel import select_external_interface
from pyflannel_runtime.netdev.mtu import backend_mtu
from pyflannel_runtime.netdev.types import ExternalInterface, InterfaceError

__all__ = ["ExternalInterface", "InterfaceError", "backend_mtu", "select_external_interface"]
