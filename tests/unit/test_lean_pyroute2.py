"""The agent's package defers pyroute2's package imports (pyflannel_runtime/netlink/lean_pyroute2.py).

Each case runs in a fresh interpreter: what is imported is the point.
"""

from __future__ import annotations

import json
import subprocess
import sys


def probe(code: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_the_agent_loads_only_the_rtnetlink_part_of_pyroute2() -> None:
    seen = probe(
        "import json, sys\n"
        "import pyflannel_runtime.agent.main\n"
        "from pyroute2 import IPRoute\n"
        "with IPRoute() as ip:\n"
        "    links = ip.get_links()\n"
        "print(json.dumps({'links': len(links), 'modules': sorted(sys.modules)}))\n"
    )
    modules = set(seen["modules"])  # type: ignore[arg-type]
    assert seen["links"]
    assert {"pyroute2.iproute.linux", "pyroute2.netlink.exceptions"} <= modules
    assert not {"pyroute2.ndb", "pyroute2.ipdb", "pyroute2.plan9", "sqlite3"} & modules


def test_any_other_name_loads_the_whole_package_as_before() -> None:
    seen = probe(
        "import json, sys\n"
        "import pyflannel_runtime.agent\n"
        "import pyroute2\n"
        "from pyroute2 import IPRoute\n"
        "lean = 'pyroute2.ndb' in sys.modules\n"
        "from pyroute2 import NDB\n"
        "from pyroute2.iproute import IPRoute as platform_iproute\n"
        "print(json.dumps({'lean': lean, 'ndb': NDB.__module__, 'version': pyroute2.__version__,\n"
        "    'same_iproute': IPRoute is platform_iproute, 'same_package': pyroute2 is\n"
        "    sys.modules['pyroute2'], 'families': len(pyroute2.modules)}))\n"
    )
    assert seen["lean"] is False
    assert seen["ndb"] == "pyroute2.ndb.main"
    assert (
        seen["version"]
        == probe("import json, pyroute2; print(json.dumps({'version': pyroute2.__version__}))")[
            "version"
        ]
    )
    assert seen["same_iproute"] is True
    assert seen["same_package"] is True
    assert isinstance(seen["families"], int) and seen["families"] > 10


def test_a_missing_name_is_an_attribute_error() -> None:
    seen = probe(
        "import json\n"
        "import pyflannel_runtime.agent\n"
        "import pyroute2\n"
        "errors = []\n"
        "for name in ('__wrapped__', 'NoSuchThing'):\n"
        "    try:\n"
        "        getattr(pyroute2, name)\n"
        "    except AttributeError as err:\n"
        "        errors.append(str(err))\n"
        "print(json.dumps({'errors': errors}))\n"
    )
    assert seen["errors"] == [
        "module 'pyroute2' has no attribute '__wrapped__'",
        "module 'pyroute2' has no attribute 'NoSuchThing'",
    ]


def test_pyroute2_imported_first_is_left_as_it_is() -> None:
    seen = probe(
        "import json, sys\n"
        "import pyroute2\n"
        "whole = pyroute2\n"
        "import pyflannel_runtime.agent\n"
        "print(json.dumps({'same': sys.modules['pyroute2'] is whole,\n"
        "    'ndb': 'pyroute2.ndb' in sys.modules}))\n"
    )
    assert seen == {"same": True, "ndb": True}
