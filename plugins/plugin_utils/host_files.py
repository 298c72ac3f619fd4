"""Whether files a task wants on a host are already there as wanted, from the states
pyflannel.network.node_facts reported earlier in the run (``paths``, digested with
``digest_key``): the files and pki_files actions then skip the module run, and the roles skip
tasks whose files need nothing.

Only an exact match skips: a path the facts do not hold, a file of another type, mode, owner,
group or digest, or no digest at all means the module runs and decides, as it always did. A
wrong or missing fact therefore costs a module run, never a change left undone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.pyflannel.network.plugins.module_utils.file_state import file_digest


def _account_matches(wanted: Any, name: Any, number: Any) -> bool:
    """``wanted`` None keeps what is there; a name or a number names the account."""
    return wanted is None or str(wanted) in (str(name), str(number))


def as_wanted(
    state: Mapping[str, Any] | None,
    content: str | bytes,
    mode: str | int,
    owner: Any = None,
    group: Any = None,
    key: str | None = None,
) -> bool:
    """The reported ``state`` of one file is ``content`` with exactly ``mode`` (octal text or
    a number), and ``owner`` and ``group`` when given."""
    if not isinstance(state, Mapping) or state.get("type") != "file" or not state.get("digest"):
        return False
    data = content.encode() if isinstance(content, str) else content
    try:
        wanted_mode = int(mode, 8) if isinstance(mode, str) else int(mode)
        mode_there = int(str(state.get("mode")), 8)
    except ValueError:  # the module names a bad mode
        return False
    return (
        mode_there == wanted_mode
        and _account_matches(owner, state.get("owner"), state.get("uid"))
        and _account_matches(group, state.get("group"), state.get("gid"))
        and state["digest"] == file_digest(data, key)
    )


def _read_text(path: str) -> str | None:
    """A controller file's text (pki_files' src: an absolute path to a plain file); None when it
    cannot be read as one, and the module's action plugin then reads it as it always does."""
    try:
        with open(path, encoding="utf-8") as source:
            return source.read()
    except (OSError, UnicodeDecodeError):
        return None


def unchanged(
    files: Any,
    states: Any,
    key: str | None,
    path_key: str = "path",
    defaults: Mapping[str, Any] | None = None,
) -> bool:
    """Every file of ``files`` (dicts with ``path_key``, content or a controller file's ``src``,
    mode, owner and group, as the files and pki_files modules take them, ``defaults`` for what
    an entry leaves out) is as wanted in ``states``; False for no files, no states, or anything
    malformed (the module then says what)."""
    if not isinstance(files, Sequence) or not files or not isinstance(states, Mapping):
        return False
    for entry in files:
        if not isinstance(entry, Mapping):
            return False
        wanted = {
            "mode": "0644",
            **(defaults or {}),
            **{k: v for k, v in entry.items() if v is not None},
        }
        if "content" not in wanted and isinstance(wanted.get("src"), str):
            wanted["content"] = _read_text(wanted["src"])
        if not isinstance(wanted.get("content"), str) or not as_wanted(
            states.get(str(wanted.get(path_key))),
            wanted["content"],
            wanted["mode"],
            wanted.get("owner"),
            wanted.get("group"),
            key,
        ):
            return False
    return True
