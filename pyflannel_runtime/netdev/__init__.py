"""External interface selection: which interface and addresses flannel uses, and its MTU.

The kernel's side (``netdev.kernel``, through pyroute2) is imported by the agent only; the
controller's preflight runs the same selection (``netdev.selection``) on facts a node reported,
and importing this package must not load pyroute2 there.
"""
