"""No module, role, playbook, plugin or script hands a value to a shell: Ansible's shell, raw
and script modules are not used, the command module gets an argv list wherever a value is
templated into it, no Python runs a shell (shell=True, os.system, os.popen,
create_subprocess_shell, ["sh", "-c", ...]) and the scripts neither eval nor `sh -c`. Each
exception is listed below with why it is safe; a listed exception that no longer matches fails,
so the list stays true.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Ansible: the modules that run a shell or a raw command line on the host.
YAML_RULES = {
    "shell module": re.compile(r"^\s*-?\s*(ansible\.(builtin|legacy)\.)?shell\s*:"),
    "raw module": re.compile(r"^\s*-?\s*(ansible\.(builtin|legacy)\.)?raw\s*:"),
    "script module": re.compile(r"^\s*-?\s*(ansible\.(builtin|legacy)\.)?script\s*:"),
    # The command module's free form: a templated value is split on its own blanks and quotes.
    "templated command line": re.compile(
        r"^\s*-?\s*((ansible\.(builtin|legacy)\.)?command|cmd)\s*:\s*[^\s{\[].*\{\{"
    ),
}
PYTHON_RULES = {
    "shell=True": re.compile(r"\bshell\s*=\s*True\b"),
    "os.system": re.compile(r"\bos\.system\s*\("),
    "os.popen": re.compile(r"\bos\.popen\s*\("),
    "create_subprocess_shell": re.compile(r"\bcreate_subprocess_shell\s*\("),
    "sh -c": re.compile(r"""["'](/bin/)?(ba)?sh["']\s*,\s*["']-c["']"""),
}
SCRIPT_RULES = {
    "eval": re.compile(r"^\s*eval\b|[;&|]\s*eval\b"),
    "sh -c": re.compile(r"\b(ba)?sh\s+-c\b"),
    # An Ansible ad-hoc module argument with a shell variable in it: it is a command line.
    "templated ad-hoc argument": re.compile(r"""\s-a\s+["'][^"']*\$"""),
}

# (file, rule) -> why it is safe.
EXCEPTIONS = {
    ("scripts/lab", "templated ad-hoc argument"): (
        "`lab logs NODE LINES`: LINES is checked to be a number just before, and the command "
        "module splits the line into words without a shell"
    ),
}


def files(*patterns: str) -> Iterator[Path]:
    for pattern in patterns:
        yield from sorted(p for p in ROOT.glob(pattern) if p.is_file())


def yaml_files() -> Iterator[Path]:
    yield from files("roles/**/*.yml", "molecule/**/*.yml", "*.yml", "playbooks/**/*.yml")


def python_files() -> Iterator[Path]:
    yield from files("plugins/**/*.py", "pyflannel_runtime/**/*.py")


def script_files() -> Iterator[Path]:
    for path in files("scripts/*", "roles/**/files/*", "roles/**/templates/*.j2"):
        if path.read_bytes()[:2] == b"#!":
            yield path


def findings(text: str, rules: dict[str, re.Pattern[str]]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        for name, rule in rules.items():
            if rule.search(code):
                yield number, name


def test_nothing_passes_a_value_through_a_shell() -> None:
    found: dict[tuple[str, str], list[int]] = {}
    for paths, rules in (
        (yaml_files(), YAML_RULES),
        (python_files(), PYTHON_RULES),
        (script_files(), SCRIPT_RULES),
    ):
        for path in paths:
            for number, rule in findings(path.read_text(errors="replace"), rules):
                found.setdefault((str(path.relative_to(ROOT)), rule), []).append(number)
    unexplained = {key: lines for key, lines in found.items() if key not in EXCEPTIONS}
    assert not unexplained, unexplained
    assert set(EXCEPTIONS) <= set(found), f"stale exceptions: {set(EXCEPTIONS) - set(found)}"


def test_the_rules_catch_what_they_are_for() -> None:
    yaml = """
- name: A
  ansible.builtin.shell: "echo {{ x }}"
- name: B
  shell: ls
- name: C
  ansible.builtin.raw: reboot
- name: D
  ansible.builtin.command: "ip link delete {{ item }}"
- name: E
  ansible.builtin.command:
    cmd: "ip link delete {{ item }}"
- name: F
  ansible.builtin.command:
    argv: [ip, link, delete, "{{ item }}"]
- name: G
  ansible.builtin.command: ip link show
"""
    assert [rule for _, rule in findings(yaml, YAML_RULES)] == [
        "shell module",
        "shell module",
        "raw module",
        "templated command line",
        "templated command line",
    ]
    python = """
subprocess.run(cmd, shell=True)
os.system("ip link")
os.popen(command)
await asyncio.create_subprocess_shell(line)
subprocess.run(["sh", "-c", f"ip link del {name}"])
subprocess.run(["ip", "link", "del", name])  # shell=True would be wrong here
"""
    assert [rule for _, rule in findings(python, PYTHON_RULES)] == [
        "shell=True",
        "os.system",
        "os.popen",
        "create_subprocess_shell",
        "sh -c",
    ]
    script = """#!/usr/bin/env bash
eval "$x"
bash -c "ip link del $dev"
ansible all -m command -a "journalctl --lines $n"
ansible all -m command -a 'journalctl --lines 50'
"""
    assert [rule for _, rule in findings(script, SCRIPT_RULES)] == [
        "eval",
        "sh -c",
        "templated ad-hoc argument",
    ]
