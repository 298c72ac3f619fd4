"""External interface selection: which interface and addresses flannel uses, and its MTU."""

from pyflannel_runtime.netdev.kernel import select_external_interface
from pyflannel_runtime.netdev.types import ExternalInterface, InterfaceError

__all__ = ["ExternalInterface", "InterfaceError", "select_external_interface"]
