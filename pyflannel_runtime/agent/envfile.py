"""The agent's environment file: the FLANNELD_* settings its systemd unit hands to pyflanneld
(``EnvironmentFile=``), as ``python -m pyflannel_controller render`` writes them.

``pyflannel status`` and ``pyflannel config publish`` read it, so that on a node they reach
the lease store, the health server and the subnet file exactly as the agent does.
"""

from __future__ import annotations

import re

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.fsutil import read_small_file

AGENT_ENV_FILE = "/etc/pyflannel/pyflanneld.env"
# A few dozen short lines; anything much larger is not one.
_LIMIT = 64 * 1024
# systemd's whitespace is ASCII only, and only \n ends a line.
_ASSIGNMENT = re.compile(r"[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*(.*?)[ \t\r]*")
_ESCAPED = re.compile(r'\\([\\"`$])')


class EnvFileError(PyflannelError):
    """The file could not be read; ``str()`` says which and why."""


def parse_env_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile= syntax as far as the renderer uses it: ``KEY=VALUE`` lines,
    ``#`` and ``;`` comments; a double-quoted value loses its quotes and the backslashes
    before ``\\ " ` $``, a single-quoted one its quotes. Lines that are no assignment are
    ignored, as systemd ignores them."""
    values: dict[str, str] = {}
    for line in text.split("\n"):
        if line.lstrip(" \t").startswith(("#", ";")):
            continue
        match = _ASSIGNMENT.fullmatch(line)
        if match is None:
            continue
        key, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = _ESCAPED.sub(r"\1", value[1:-1])
        elif len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        values[key] = value
    return values


def read_env_file(path: str) -> dict[str, str]:
    try:
        data = read_small_file(path, _LIMIT)
    except OSError as err:
        raise EnvFileError(f"cannot read the agent's environment file: {err}") from None
    return parse_env_file(data.decode("utf-8", errors="replace"))
