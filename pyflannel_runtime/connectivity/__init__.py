"""The connectivity suite: named scenarios over every path pod traffic takes, each with a
verdict per node pair and the most likely cause of a failure.

Pure parts (``scenarios``, ``wire``, ``snmp``, ``firewall_facts``, ``causes``, ``summary``)
are shared by the node side and the controller's summary; the rest runs on a node:
``responder`` (the listeners in the probe pods and on the host, a process of its own while the
suite runs), ``probes`` (the client side of each scenario) and ``ops.connectivity`` (probe
pods through the CNI plugin, the run, the clean-up).
"""
