#!/usr/bin/python
"""Documentation only: the action plugin of this name (plugins/action/wheelhouse.py) runs on the
controller."""

from __future__ import annotations

DOCUMENTATION = r"""
module: wheelhouse
short_description: Build (once) or check the agent's wheelhouse on the controller
version_added: 0.1.0
description:
  - Builds the wheels of the pyflannel runtime and its dependencies into one archive on the
    controller, which the pyflannel.network.runtime role unpacks on each node and installs offline.
  - A build is cached under the digest of what goes into it (the runtime's source and the Python it
    is built for), so that runs, tests and molecule scenarios share one.
  - With O(archive), checks a prebuilt wheelhouse instead.
  - An action plugin; it runs on the controller and contacts no host.
extends_documentation_fragment:
  - pyflannel.network.attributes
attributes:
  check_mode:
    support: full
    details: Builds in either mode; the build changes nothing on any host.
  diff_mode:
    support: none
options:
  source:
    description:
      - The pyflannel source tree to build from.
      - By default the runtime's source the collection carries at its root (the repository itself
        in-tree; the copy in the tarball where the collection is installed).
    type: path
  cache_dir:
    description: Where builds are kept, by digest.
    type: path
    default: ~/.cache/pyflannel/wheelhouse
  archive:
    description: A prebuilt wheelhouse archive to check and use instead of building (not with O(source)).
    type: path
requirements:
  - pyflannel_runtime and pip on the controller
"""

EXAMPLES = r"""
- name: Build the wheelhouse once for the run
  pyflannel.network.wheelhouse:
  run_once: true
  register: __flannel_wheelhouse
"""

RETURN = r"""
archive:
  description: The wheelhouse archive on the controller.
  returned: success
  type: str
digest:
  description: What a node records as installed (the build's source digest, or a prebuilt archive's sha256).
  returned: success
  type: str
project_wheel:
  description: The file name of the runtime's own wheel in the archive.
  returned: success
  type: str
python:
  description: The Python version the wheels were built for.
  returned: success
  type: str
  sample: "3.11"
"""
