"""The cluster model the Ansible roles validate, and its loading. Its layers, each below the
next: the fields' types (``cluster_fields``), the settings valid field by field
(``cluster_settings``), the cross-field rules over them (``cluster_rules``), and here the model
that applies the rules; the per-node plan derived from it is ``cluster_plan``'s.

Every problem is reported as ``<field path>: <what is wrong>`` so a user can find the offending
line.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError, model_validator
from pydantic_core import PydanticCustomError

from pyflannel_controller.model.cluster_rules import cross_field_problems
from pyflannel_controller.model.cluster_settings import ClusterSettings, NodeOverrides
from pyflannel_runtime import PyflannelError


class ClusterModelError(PyflannelError, ValueError):
    """Invalid cluster model; ``problems`` holds one ``<path>: <message>`` line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class ClusterModel(ClusterSettings):
    """The cluster's settings with the cross-field rules applied."""

    @model_validator(mode="after")
    def _cross_field_rules(self) -> ClusterModel:
        problems = cross_field_problems(self)
        if problems:
            raise PydanticCustomError(
                "cluster_rules", "{problems}", {"problems": "\n".join(problems)}
            )
        return self


# --- loading ----------------------------------------------------------------------------------


def _field_names_at(loc: tuple[int | str, ...]) -> list[str]:
    if len(loc) == 1:
        return list(ClusterModel.model_fields)
    if len(loc) == 3 and loc[0] == "nodes":
        return list(NodeOverrides.model_fields)
    return []


def _describe(error: Mapping[str, Any]) -> list[str]:
    loc: tuple[int | str, ...] = tuple(error["loc"])
    path = ".".join(str(part) for part in loc)
    if error["type"] == "cluster_rules":
        return str(error["ctx"]["problems"]).splitlines()
    if error["type"] == "extra_forbidden":
        message = "unknown setting"
        close = difflib.get_close_matches(str(loc[-1]), _field_names_at(loc), n=1)
        if close:
            message += f" (did you mean {close[0]}?)"
    else:
        message = str(error["msg"]).removeprefix("Value error, ")
    return [f"{path}: {message}" if path else message]


def load_model(data: Any) -> ClusterModel:
    """Validate a decoded model file; raises ClusterModelError naming every bad field."""
    if not isinstance(data, Mapping):
        raise ClusterModelError(["the cluster model must be a mapping of settings"])
    try:
        return ClusterModel.model_validate(data)
    except ValidationError as err:
        problems = [line for e in err.errors() for line in _describe(e)]
        raise ClusterModelError(problems) from None
