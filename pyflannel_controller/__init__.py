"""The controller's half of pyflannel: the typed cluster model and its plan (``model``), the
files it renders for a node (``render``), the inventory check behind the collection's preflight
(``inventory``), the agents' restart batches (``rolling``), the nodes' wheelhouse
(``wheelhouse``) and ``python -m pyflannel_controller render`` (``cli``). The lab that boots
hosts to run it all against is development tooling apart from it (``pyflannel_lab``).

It builds on the node runtime (``pyflannel_runtime``: the wire formats, the backend specs, the
file writer), never the other way round: a node installs the runtime's wheel, which carries none
of this package (docs/architecture.md).
"""
