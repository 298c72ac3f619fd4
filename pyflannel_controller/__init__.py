"""The controller's half of pyflannel: the typed cluster model and its plan (``model``), the
files it renders for a node (``render``), the inventory check behind the collection's preflight
(``inventory``), the nodes' wheelhouse (``wheelhouse``), ``python -m pyflannel_controller render``
(``cli``), and the lab that boots hosts to run it all against (``lab``).

It builds on the node runtime (``pyflannel_runtime``: the wire formats, the backend specs, the
file writer), never the other way round: a node installs the runtime's wheel, which carries none
of this package (docs/architecture.md).
"""
