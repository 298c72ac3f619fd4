"""``pyflannel``, the node's operator command line: ``main`` holds the entry point and the small
commands, each larger command has a module of its own (``status``, ``ipam``,
``connectivity``). On top of ``ops``: nothing in the runtime imports it."""
