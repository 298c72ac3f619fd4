"""Role variables as Ansible gives them, converted by the types of the roles' argument specs.

``-e key=value`` values and INI ``[group:vars]`` values are strings. ansible-core checks each
role's variables against its ``meta/argument_specs.yml`` but hands the tasks the values
unconverted, so the typed cluster model would see ``"7"`` for an int. Here every variable a role
documents is converted exactly as Ansible converts a module option of that type (its own
ArgumentSpecValidator: ints from digit strings, bools from Ansible's truthy and falsy words,
lists from comma-separated strings, dicts from JSON or ``k=v`` text), on the controller, before
the model sees it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

_ROLES = Path(__file__).resolve().parents[2] / "roles"
# What of an option's spec decides its conversion; choices, defaults and the like are checked
# by ansible-core's own role validation and by the cluster model, with their own messages.
_CONVERSION_KEYS = ("type", "elements")


def _conversion(option: Mapping[str, Any]) -> dict[str, Any]:
    spec = {key: option[key] for key in _CONVERSION_KEYS if key in option}
    # Node paths are the node's: a "path" expanded here would get the controller's ~ and $VARs
    # (a module expands them on the node). The model wants them absolute anyway.
    if spec.get("type") == "path":
        spec["type"] = "str"
    return spec


@functools.cache
def role_options() -> Mapping[str, Mapping[str, Any]]:
    """Every variable the collection's roles document, with its conversion (``type``,
    ``elements``) and whether it is secret (``no_log``). Roles that share a variable document
    it with the same type (tests/unit/plugins/test_role_values.py)."""
    options: dict[str, dict[str, Any]] = {}
    for spec_file in sorted(_ROLES.glob("*/meta/argument_specs.yml")):
        specs = yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}
        for entry in (specs.get("argument_specs") or {}).values():
            for name, option in ((entry or {}).get("options") or {}).items():
                options.setdefault(
                    name, {**_conversion(option), "no_log": bool(option.get("no_log"))}
                )
    return options


@functools.cache
def _validator(name: str) -> ArgumentSpecValidator:
    spec = {key: value for key, value in role_options()[name].items() if key != "no_log"}
    return ArgumentSpecValidator({name: spec})


def _reasons(messages: list[str]) -> str:
    """Ansible's reasons, without its preamble ("argument 'x' is of type str and we were unable
    to convert to int: ") and without those that only repeat that the value is no int."""
    reasons = [message.partition(": ")[2] or message for message in messages]
    return "; ".join(r for r in reasons if "cannot be converted to" not in r)


def convert_role_value(name: str, value: Any) -> tuple[Any, str | None]:
    """A documented role variable's value converted to its spec's type (None stays None), or
    the value unchanged and why it cannot be: ``<variable>: <value> cannot be converted to
    <type>...`` (a secret's value is not shown)."""
    option = role_options()[name]
    if value is None:
        return value, None
    result = _validator(name).validate({name: value})
    if not result.error_messages:
        return result.validated_parameters[name], None
    wanted = option.get("type", "str")
    if option.get("elements"):
        wanted += f" of {option['elements']}"
    shown = "its value" if option["no_log"] else repr(value)
    problem = f"{name}: {shown} cannot be converted to {wanted}"
    # Ansible's reasons may quote the value.
    reasons = "" if option["no_log"] else _reasons(result.error_messages)
    return value, f"{problem}: {reasons}" if reasons else problem


def convert_role_values(host: str, values: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``values`` with every documented role variable converted to its spec's type; variables
    the roles do not document pass unchanged. Each value that cannot be converted is a problem
    ``<host>: <variable>: <value> cannot be converted to <type>...``."""
    options = role_options()
    converted = dict(values)
    problems = []
    for name, value in values.items():
        if name in options:
            converted[name], problem = convert_role_value(name, value)
            if problem is not None:
                problems.append(f"{host}: {problem}")
    return converted, problems
