"""The README and docs/ as a reader meets them: every shell command they give is run by a test or
marked as an example with its reason, every link between them resolves, the README opens with
the two set-up commands (CI runs its test command) and stays short, and no page speaks of this
project's issues. The convention is in docs/development.md, "Commands in the docs"."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pytest_names import pytest_names

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200

MAIN_JOB = "tests/integration/test_main_job.py::test_lab_up_status_logs_down"
CI = "tests/unit/test_docs.py::test_ci_runs_the_readmes_test_command"
TOUR = "tests/integration/test_cli_tour.py::test_every_tour_command_runs_as_written"
SITE = "tests/integration/test_site.py::"
DAY2 = "tests/integration/test_site_day2.py::"
OUTSIDE = SITE + "test_the_installed_tarballs_playbooks_provision_the_reset_lab_from_outside"
BUNDLE = "tests/integration/test_bundle_live.py::"

# Each shell command the docs give, as written (its comment left off), and the test that runs
# it: the same program with the same options, on a lab or in a namespace of its own (inventory
# paths and values may be the test's own).
RUN_BY: dict[str, str] = {
    "./scripts/lab up": MAIN_JOB,
    "./scripts/lab status": MAIN_JOB,
    "./scripts/lab logs node2": MAIN_JOB,
    "./scripts/lab down": MAIN_JOB,
    "./scripts/test": CI,
    "./scripts/lab netns up": "tests/integration/test_lab_netns_cli.py::"
    "test_lab_up_prints_status_and_reachability_then_down_cleans_up",
    "./scripts/lab netns down": "tests/integration/test_lab_netns_cli.py::"
    "test_lab_up_prints_status_and_reachability_then_down_cleans_up",
    "./scripts/sanity": "tests/integration/test_ansible_sanity.py::"
    "test_ansible_test_sanity_is_clean",
    "molecule test -s default -s host-gw -s udp -s kubernetes": "tests/integration/"
    "test_molecule.py::test_backend_scenarios_on_shared_hosts",
    "ansible-playbook -i inventories/lab site.yml": SITE
    + "test_site_converges_and_the_rerun_changes_nothing",
    "ansible-playbook -i inventories/mycluster site.yml": SITE
    + "test_site_converges_and_the_rerun_changes_nothing",
    "ansible-playbook -i inventories/lab site.yml --check --diff": SITE
    + "test_check_mode_reports_route_drift_and_a_normal_run_repairs_it",
    "ansible-playbook -i inventories/lab site.yml -e flannel_backend_type=host-gw": SITE
    + "test_switching_the_backend_converges",
    "ansible-playbook -i inventories/lab reset.yml": SITE
    + "test_reset_removes_ours_and_only_ours_and_a_second_reset_changes_nothing",
    "ansible-playbook -i inventory/mycluster/inventory.ini site.yml": SITE
    + "test_a_kubespray_ini_inventory_with_string_values_drives_the_same_cluster",
    "ansible-playbook -i inventory/mycluster/inventory.ini site.yml -e flannel_vxlan_vni=7": SITE
    + "test_switching_the_vni_given_as_a_key_value_extra_var_converges",
    "ansible-playbook -i inventories/lab site.yml --limit node2": DAY2
    + "test_a_limited_rerun_and_check_change_nothing_and_check_every_pod",
    # docs/rerun.md
    "ansible-playbook -i inventories/lab site.yml --limit node2 -e flannel_verify_connectivity=always": (
        DAY2 + "test_a_limited_rerun_and_check_change_nothing_and_check_every_pod"
    ),
    "ansible-playbook -i inventories/lab site.yml --tags flannel_preflight,flannel_verify,"
    "flannel_connectivity": SITE
    + "test_a_restarted_host_comes_back_with_its_subnet_and_pods_reach_it",
    "ansible-playbook -i inventories/lab site.yml --tags flannel_preflight,flannel_connectivity": (
        "tests/integration/test_site_connectivity.py::test_the_suite_can_be_skipped_and_run_alone"
    ),
    "ansible-playbook -i inventories/lab site.yml --limit '!node3'": DAY2
    + "test_a_powered_off_node_is_named_and_the_others_converge_without_it",
    "ansible-playbook -i inventories/lab site.yml --limit node4": DAY2
    + "test_a_new_node_joins_with_a_limited_run",
    "ansible-playbook -i inventories/lab remove-node.yml -e node=node3": DAY2
    + "test_removed_nodes_leave_every_peer_within_seconds",
    "ansible-playbook -i inventories/lab site.yml -e flannel_agent_restart_batch=2": "tests/"
    "integration/test_site_roll.py::test_another_backend_rolls",
    "ansible-playbook -i inventories/lab site.yml -e flannel_disruption_probe=true": "tests/"
    "integration/test_site_disruption.py::TestVxlan::"
    "test_a_settings_change_and_a_new_runtime_roll_under_the_connections",
    "ansible-playbook -i inventories/mycluster site.yml -e flannel_etcd_username=pyflannel"
    " -e @vault/etcd-agent.yml": "tests/integration/test_site_etcd_auth.py::"
    "test_the_flow_converges_with_authentication_and_the_rerun_changes_nothing",
    "ansible-galaxy collection build": OUTSIDE,
    "ansible-galaxy collection install pyflannel-network-0.2.0.tar.gz": OUTSIDE,
    "ansible-playbook -i mycluster pyflannel.network.site": OUTSIDE,
    "ansible-playbook -i mycluster pyflannel.network.reset": OUTSIDE,
    # The in-tree site.yml and remove-node.yml import these plays.
    "ansible-playbook -i mycluster pyflannel.network.site --check --diff": SITE
    + "test_check_mode_reports_route_drift_and_a_normal_run_repairs_it",
    "ansible-playbook -i mycluster pyflannel.network.remove_node -e node=node3": DAY2
    + "test_removed_nodes_leave_every_peer_within_seconds",
    # The tour: every line of its block, as written.
    "export 'PATH=$PWD/.venv/bin:$PATH'": TOUR,
    "pyflannel --version": TOUR,
    "pyflannel config check examples/net-conf.json": TOUR,
    "python -m pyflannel_controller render --model examples/cluster-etcd.yml --node node3"
    " --out /tmp/pyflannel-tour/node3": TOUR,
    "python -m pyflannel_controller render --model examples/cluster-kubernetes.yml --node node1"
    " --out /tmp/pyflannel-tour/node1": TOUR,
    "pyflannel cni install --bin-dir /tmp/pyflannel-tour/cni-bin": TOUR,
    "pyflannel config publish examples/net-conf.json --dry-run": TOUR,
    "pyflannel config publish examples/net-conf.json": TOUR,
    "pyflannel status --leases-only": TOUR,
    "pyflanneld --help": TOUR,
    # docs/diagnostics.md
    "pyflannel status --wait 120": "tests/integration/test_status_live.py::"
    "test_status_wait_returns_once_a_stopped_agent_is_back",
    "pyflannel bundle": BUNDLE + "test_a_bundle_is_written_when_etcd_does_not_answer",
    "pyflannel bundle -o /var/tmp/node1.tar.gz": BUNDLE
    + "test_a_nodes_bundle_holds_its_status_leases_files_kernel_firewall_and_cni_state",
    "pyflannel bundle -o - '>' node1.tar.gz": BUNDLE
    + "test_a_bundle_goes_to_standard_output_with_dash",
    # docs/metrics.md
    "promtool check rules roles/agent/files/prometheus/pyflannel.rules.yml": "tests/unit/"
    "test_prometheus_rules.py::test_promtool_checks_the_rules",
    "promtool test rules tests/prometheus/pyflannel.rules.test.yml": "tests/unit/"
    "test_prometheus_rules.py::test_the_rules_unit_tests_pass",
}

FENCE = re.compile(r"^(\s*)```(\S*)")
SHELL_LANGUAGES = {"sh", "bash", "shell"}
EXAMPLE_MARKER = re.compile(r"^\s*<!--\s*example:(.*?)-->\s*$")


@dataclass(frozen=True)
class Command:
    """One command of a fenced shell block: where it is, as written, and why it is an example
    (empty when the block carries no marker)."""

    doc: str
    line: int
    text: str
    example: str


def canonical(line: str) -> str:
    """A command as the registry spells it: its words, quoted only where the shell needs it,
    without its comment."""
    return shlex.join(shlex.split(line, comments=True))


def shell_commands(text: str, doc: str = "doc") -> list[Command]:
    """Every command in the fenced sh blocks of a Markdown text, continuation lines joined,
    blank and comment lines left out."""
    commands: list[Command] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        fence = FENCE.match(lines[number])
        number += 1
        if fence is None:
            continue
        language, opened_at = fence.group(2), number
        marker = EXAMPLE_MARKER.match(lines[opened_at - 2]) if opened_at >= 2 else None
        body: list[tuple[int, str]] = []
        while number < len(lines) and not FENCE.match(lines[number]):
            body.append((number + 1, lines[number]))
            number += 1
        number += 1  # the closing fence
        if language not in SHELL_LANGUAGES:
            continue
        pending, started = "", 0
        for at, line in body:
            if not pending:
                started = at
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            whole, pending = pending + line, ""
            if not whole.strip() or whole.lstrip().startswith("#"):
                continue
            reason = marker.group(1).strip() if marker else ""
            commands.append(Command(doc, started, canonical(whole), reason))
    return commands


def unaccounted(commands: list[Command], run_by: dict[str, str]) -> list[str]:
    """The commands neither a test runs nor an example marker explains."""
    return [
        f"{c.doc}:{c.line}: {c.text}" for c in commands if not c.example and c.text not in run_by
    ]


def all_commands() -> list[Command]:
    return [c for doc in DOCS for c in shell_commands(doc.read_text(), doc.relative_to(ROOT).name)]


def test_every_shell_command_in_the_docs_is_run_by_a_test_or_marked_an_example() -> None:
    missing = unaccounted(all_commands(), RUN_BY)
    assert missing == [], (
        "add each to RUN_BY in tests/unit/test_docs.py with the test that runs it, or mark its "
        "block <!-- example: why no test runs it --> (docs/development.md)"
    )


def test_an_unmarked_untested_command_is_reported() -> None:
    doc = "\n".join(
        [
            "```sh",
            "./scripts/test          # registered",
            "./scripts/lab frobnicate --all   # neither",
            "```",
            "<!-- example: needs a bare-metal cluster -->",
            "```sh",
            "ansible-playbook -i prod site.yml",
            "```",
            "```",
            "not a shell block",
            "```",
        ]
    )
    assert unaccounted(shell_commands(doc), RUN_BY) == ["doc:3: ./scripts/lab frobnicate --all"]
    example = [c for c in shell_commands(doc) if c.example]
    assert [(c.text, c.example) for c in example] == [
        ("ansible-playbook -i prod site.yml", "needs a bare-metal cluster")
    ]


def test_continuation_lines_make_one_command() -> None:
    doc = "```sh\npytest -s a.py \\\n  b.py   # both\n# a comment\n\nls\n```\n"
    assert [(c.line, c.text) for c in shell_commands(doc)] == [
        (2, "pytest -s a.py b.py"),
        (6, "ls"),
    ]


def test_every_test_the_registry_names_exists() -> None:
    missing = []
    for test_id in sorted(set(RUN_BY.values())):
        path, _, name = test_id.partition("::")
        if not (ROOT / path).is_file() or name not in pytest_names(ROOT / path):
            missing.append(test_id)
    assert missing == []


def test_every_registered_command_is_still_in_the_docs() -> None:
    written = {c.text for c in all_commands()}
    assert sorted(set(RUN_BY) - written) == []


def test_every_example_marker_gives_a_reason_and_marks_a_shell_block() -> None:
    wrong = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        fenced = False
        for number, line in enumerate(lines, 1):
            fenced ^= FENCE.match(line) is not None
            marker = EXAMPLE_MARKER.match(line)
            if marker is None or fenced:
                continue
            following = FENCE.match(lines[number]) if number < len(lines) else None
            if not marker.group(1).strip():
                wrong.append(f"{doc.name}:{number}: no reason")
            elif following is None or following.group(2) not in SHELL_LANGUAGES:
                wrong.append(f"{doc.name}:{number}: no sh block right after it")
    assert wrong == []


def test_the_readme_opens_with_the_two_set_up_commands() -> None:
    first_block = [c for c in shell_commands(README.read_text()) if c.line < 20]
    assert [c.text for c in first_block] == ["./scripts/lab up", "./scripts/test"]
    assert not any(c.example for c in first_block)


def test_ci_runs_the_readmes_test_command() -> None:
    test_command = shell_commands(README.read_text())[1].text
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert f"exec {test_command}" in ci


def test_the_readme_stays_short() -> None:
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def unfenced(text: str) -> list[str]:
    """The lines outside fenced blocks."""
    kept, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            kept.append(line)
    return kept


def prose(text: str) -> str:
    """The text without its fenced blocks and inline code, where brackets are not links."""
    return "\n".join(re.sub(r"`[^`]*`", "", line) for line in unfenced(text))


def anchors(text: str) -> set[str]:
    """The heading anchors GitHub makes: lower case, punctuation dropped, spaces as hyphens, a
    repeated one numbered."""
    seen: dict[str, int] = {}
    found = set()
    for line in unfenced(text):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(doc: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(doc.read_text())):
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_relative_link_resolves(doc: Path) -> None:
    assert broken_links(doc) == []


def test_anchors_are_githubs() -> None:
    text = "# Top\n## The `routes` module\n```\n# not a heading\n```\n## Top\n### pod→pod, TCP\n"
    assert anchors(text) == {"top", "the-routes-module", "top-1", "podpod-tcp"}


# This project's issues, as a process speaks of them ("issue 26"); flannel's, which the docs cite
# for users to read ("flannel #954", "flannel issues #1182"), are fine.
ISSUE_NUMBER = re.compile(r"(?:(\S+)\s+)?\b(issues?\s+#?\d+)", re.IGNORECASE)
CITED_PROJECTS = {"flannel", "flannel's", "kubespray"}


def issue_numbers(text: str) -> list[str]:
    return [
        m.group(2)
        for m in ISSUE_NUMBER.finditer(" ".join(text.split()))
        if (m.group(1) or "").strip("(").lower() not in CITED_PROJECTS
    ]


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_the_docs_name_no_issue_numbers_of_this_project(doc: Path) -> None:
    assert issue_numbers(doc.read_text()) == []


def test_issue_numbers_are_found() -> None:
    found = issue_numbers("Issue 12: figures (issue 26)\nat the closing of\nissue 26")
    assert found == ["Issue 12", "issue 26", "issue 26"]
    assert issue_numbers("(flannel\nissues #1182, #1505) and flannel issue #2554") == []
