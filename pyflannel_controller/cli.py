"""``python -m pyflannel_controller``: the commands that run on the controller only (today
``render``), beside the node's ``pyflannel`` command, whose helpers it shares. A node installs
no controller code, so its ``pyflannel`` has no such command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pyflannel_runtime.cli.main import CommandError, Subparsers, add_command, run


def _read_model_file(path: str) -> str:
    from pyflannel_runtime.fsutil import read_small_file

    try:
        return read_small_file(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CommandError(f"{path}: cannot read the cluster model: {err}") from None


def _render(args: argparse.Namespace) -> int:
    from pyflannel_controller.model.cluster import ClusterModelError, load_model
    from pyflannel_controller.model.model_file import ModelFileError, parse_model_text
    from pyflannel_controller.render.render import render_node
    from pyflannel_runtime.ops.files import FilesError, sync_files

    text = _read_model_file(args.model)
    is_json = args.model.endswith(".json")
    try:
        data = parse_model_text(text, is_json=is_json)
    except ModelFileError as err:
        kind = "JSON" if is_json else "YAML"
        raise CommandError(f"{args.model}: not valid {kind}: {err}") from None
    # Everything is validated and rendered before the first byte is written.
    try:
        files = render_node(load_model(data), args.node)
    except ClusterModelError as err:
        problems = "\n".join(f"  {line}" for line in err.problems)
        raise CommandError(f"{args.model}: invalid cluster model:\n{problems}") from None
    # All of the node's files are written, or none is changed.
    try:
        plan = sync_files(files, root=args.out)
    except FilesError as err:
        raise CommandError(f"cannot write the files: {err}") from None
    if not args.quiet:
        for file in plan.files:
            print(f"{file.target}: {', '.join(file.reasons) or 'unchanged'}")
    return 0


def _register_render(subparsers: Subparsers) -> None:
    render = add_command(
        subparsers,
        "render",
        _render,
        "write one node's files from the cluster model",
        "Write one node's files below DIR: the CNI conflist, the agent's environment file, "
        "the systemd unit, net-conf.json with the kubernetes datastore (with etcd the agent "
        "reads <prefix>/config instead: see pyflannel config publish), and subnet.env when "
        "the node's subnet is pinned. Nothing is written unless the whole model is valid, and "
        "then all of the files are written or none is changed. Prints each file with what "
        "changed (created, content, mode) or 'unchanged'.",
    )
    render.add_argument(
        "--model", required=True, metavar="FILE", help="cluster model, YAML or JSON"
    )
    render.add_argument("--node", required=True, metavar="NAME", help="the node to render for")
    render.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="root the files go under, e.g. / or a staging dir",
    )
    render.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing; the exit status tells"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pyflannel_controller",
        description="The controller's pyflannel commands: what needs the cluster model.",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    _register_render(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)
