"""Module tests in community.general's style: module args patched in, exit_json and fail_json
turned into exceptions, the result dict asserted on. The collection is imported by its FQCN
through collections/ansible_collections/pyflannel/network (a link to the repository root), which
pytest's ``pythonpath`` setting in pyproject.toml puts on the path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class ModuleExit(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result)
        self.result = result


def _exit(self: Any, **result: Any) -> None:
    raise ModuleExit({"failed": False, **result})


def _fail(self: Any, msg: str, **result: Any) -> None:
    raise ModuleExit({**result, "failed": True, "msg": msg})


RunModule = Callable[..., dict[str, Any]]


def module_result(
    main: Callable[[], None], args: dict[str, Any], check: bool = False, diff: bool = False
) -> dict[str, Any]:
    """A module's result dict for ``args``, as Ansible would get it."""
    full = {**args, "_ansible_check_mode": check, "_ansible_diff": diff}
    # Collected here, as exit_json would return them: ansible's own store of warnings
    # changes hands once other parts of ansible (ansible.errors, say) are imported.
    warnings: list[str] = []
    with (
        patch_module_args(full),
        mock.patch.object(basic.AnsibleModule, "exit_json", _exit),
        mock.patch.object(basic.AnsibleModule, "fail_json", _fail),
        mock.patch.object(basic.AnsibleModule, "warn", lambda self, text: warnings.append(text)),
        pytest.raises(ModuleExit) as done,
    ):
        main()
    return {**done.value.result, "warnings": warnings} if warnings else done.value.result


@pytest.fixture
def run_module() -> RunModule:
    """``run_module(main, args, check=False, diff=False)`` -> the module's result dict."""
    return module_result
