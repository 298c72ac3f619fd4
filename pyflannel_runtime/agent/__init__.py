"""pyflanneld, the node agent.

The agent lives as long as the node, so its package trims pyroute2's start-up imports before
any of its modules imports pyroute2 (`pyflannel_runtime.netlink.lean_pyroute2`).
"""

from pyflannel_runtime.netlink.lean_pyroute2 import defer_package_imports

defer_package_imports()
