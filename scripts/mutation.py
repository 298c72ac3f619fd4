"""Mutation score of the pure cores: mutmut over the modules in pyproject's ``[tool.mutmut]``.

Each mutant runs only the unit tests that executed the function it changes (mutmut records
which test calls which function in one traced run first), in a process forked from one that
has already imported everything, so a mutant costs a fraction of a second. Besides mutmut's own
mutations, each `and`/`or` loses one operand in turn (`drop_operand`). Equivalent mutants
(no test can tell them apart from the original) are listed with the reason in
``scripts/mutation-equivalents.toml`` and left out of the score.

    scripts/mutation                       # every module, from scratch
    scripts/mutation -m subnet/allocation  # one module afresh (repeatable; a path fragment);
                                           # the other modules' last results are kept
    scripts/mutation --resume              # keep results; retry survivors and changed code
    scripts/mutation --report-only         # the last results again
    scripts/mutation -j 2                  # two workers (default: half the cores, at least 1)

Prints the score per module and every surviving mutant as a diff line; exits 1 when a module
scores under ``--min-score`` (90 by default) or an equivalence entry no longer matches a mutant.
mutmut's own progress goes to ``mutants/mutmut.log``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import sys
import time
import tomllib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "scripts" / "mutation-equivalents.toml"
WORK = Path("mutants")  # mutmut's fixed work directory, relative to the repository root

# mutmut's exit codes per mutant: a test run that fails, or never ends, or that mypy --strict
# (part of scripts/test) refuses, catches the mutant.
KILLED = {1, 3, 36, 37, 24, -24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    function: str
    line: int
    removed: tuple[str, ...]
    added: tuple[str, ...]
    no_tests: bool


@dataclass(frozen=True)
class Equivalent:
    path: str
    function: str
    removed: tuple[str, ...]
    added: tuple[str, ...]
    why: str


@dataclass
class Score:
    path: str
    total: int = 0
    killed: int = 0
    equivalent: int = 0
    survivors: list[Mutant] = field(default_factory=list)

    @property
    def percent(self) -> float:
        counted = self.total - self.equivalent
        return 100.0 * self.killed / counted if counted else 100.0


def _lines(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.strip().splitlines())


def load_equivalents() -> list[Equivalent]:
    data = tomllib.loads(EQUIVALENTS.read_text())
    return [
        Equivalent(e["path"], e["function"], _lines(e["line"]), _lines(e["mutant"]), e["why"])
        for e in data.get("equivalent", [])
    ]


def mutated_modules() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    return list(config["only_mutate"])


def select(modules: list[str], fragments: list[str]) -> list[str]:
    if not fragments:
        return modules
    chosen = [m for m in modules if any(f in m for f in fragments)]
    if not chosen:
        sys.exit(f"no module in [tool.mutmut] only_mutate matches {fragments}")
    return chosen


# --- running mutmut --------------------------------------------------------------------------


def drop_operand(node: Any) -> Iterable[Any]:
    """`a and b` as `a`, then as `b` (likewise `or`): a guard that lost one of its conditions.
    mutmut swaps `and` for `or`, which tests tell apart from the original while still missing
    a condition whose own case none of them tries (such as a guard's `not same(old, new)`).
    The operand keeps the operation's parentheses: a line break inside may need them."""
    for operand in (node.left, node.right):
        yield operand.with_changes(
            lpar=[*node.lpar, *operand.lpar], rpar=[*operand.rpar, *node.rpar]
        )


def add_operators() -> None:
    """Give mutmut `drop_operand`; before any mutant is made (mutmut forks its workers, which
    inherit it)."""
    import libcst as cst
    from mutmut.mutation import file_mutation

    operators = list(file_mutation.mutation_operators)
    if (cst.BooleanOperation, drop_operand) not in operators:
        file_mutation.mutation_operators = [*operators, (cst.BooleanOperation, drop_operand)]


@contextmanager
def output_to(log: Path) -> Iterator[None]:
    """mutmut and its forked workers write progress to fds 1 and 2; keep it in a file."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("a") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def prepare(paths: list[str], resume: bool) -> None:
    """Have mutmut regenerate the selected modules' mutants, keeping other modules' results.

    Fresh, their results go; resumed, results of unchanged functions stay and only survivors
    are forgotten, so mutmut tries them again against the current tests. mutmut's record of
    which test calls which function is rebuilt every time: it keeps only the modules of its
    last run.
    """
    (WORK / "mutmut-stats.json").unlink(missing_ok=True)
    for path in paths:
        (WORK / path).unlink(missing_ok=True)
        meta_path = WORK / f"{path}.meta"
        if not meta_path.exists():
            continue
        if not resume:
            meta_path.unlink()
            continue
        meta = json.loads(meta_path.read_text())
        codes = meta["exit_code_by_key"]
        for key, code in codes.items():
            if code in SURVIVED or code in NO_TESTS:
                codes[key] = None
        meta_path.write_text(json.dumps(meta, indent=4))


def run_mutmut(paths: list[str], workers: int, resume: bool, everything: bool) -> None:
    if everything and not resume:
        shutil.rmtree(WORK, ignore_errors=True)
    elif WORK.exists():
        prepare(paths, resume)
    WORK.mkdir(exist_ok=True)
    # Imported here: mutmut sets the fork start method when imported.
    from mutmut.__main__ import cli
    from mutmut.configuration import config

    add_operators()
    config().only_mutate = paths
    # Same examples every run, so a verdict does not depend on the draw (tests/conftest.py).
    os.environ["HYPOTHESIS_PROFILE"] = "mutation"
    with output_to(WORK / "mutmut.log"):
        try:
            cli.main(["run", "--max-children", str(workers)], standalone_mode=False)
            failed = None
        except SystemExit as stop:
            failed = stop.code or None
    if failed:
        sys.exit(f"mutmut stopped ({failed}); see {WORK / 'mutmut.log'}")


# --- the report ------------------------------------------------------------------------------


def function_lines(source: str) -> dict[str, tuple[int, int]]:
    """Line range of each top-level function and method, under mutmut's mangled name."""
    spans: dict[str, tuple[int, int]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            spans[f"x_{node.name}"] = (node.lineno, node.end_lineno or node.lineno)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    key = f"x\u01c1{node.name}\u01c1{item.name}"
                    spans[key] = (item.lineno, item.end_lineno or item.lineno)
    return spans


def describe(name: str, path: str, code: int, spans: dict[str, tuple[int, int]]) -> Mutant:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    removed: list[str] = []
    added: list[str] = []
    for line in get_diff_for_mutant(name, path=path).splitlines()[2:]:
        if line.startswith("-"):
            removed.append(line[1:].strip())
        elif line.startswith("+"):
            added.append(line[1:].strip())
    mangled = name.partition("__mutmut_")[0].rpartition(".")[2]
    function = mangled[2:].replace("\u01c1", ".")  # x_name or x<sep>Class<sep>name
    first, last = spans.get(mangled, (1, 0))
    source_lines = (ROOT / path).read_text().splitlines()
    line = next(
        (
            n
            for n in range(first, last + 1)
            if removed and source_lines[n - 1].strip() == removed[0]
        ),
        first,
    )
    return Mutant(name, path, function, line, tuple(removed), tuple(added), code in NO_TESTS)


def ensure_mutated(path: str) -> None:
    """A run restricted to other modules leaves a plain copy of this one in mutants/; the
    diffs need the mutated file back (mutmut keeps the results of unchanged functions)."""
    if "__mutmut_orig" not in (WORK / path).read_text():
        from mutmut.__main__ import create_mutants_for_file

        add_operators()
        (WORK / path).unlink()  # a newer plain copy would pass for already mutated
        create_mutants_for_file(Path(path), WORK / path)


def score(paths: list[str], equivalents: list[Equivalent]) -> tuple[list[Score], set[Equivalent]]:
    used: set[Equivalent] = set()
    scores = []
    for path in paths:
        ensure_mutated(path)
        result = Score(path)
        meta = json.loads((WORK / f"{path}.meta").read_text())
        spans = function_lines((ROOT / path).read_text())
        for name, code in sorted(meta["exit_code_by_key"].items()):
            result.total += 1
            if code in KILLED:
                result.killed += 1
                continue
            mutant = describe(name, path, code, spans)
            match = next(
                (
                    e
                    for e in equivalents
                    if (e.path, e.function, e.removed, e.added)
                    == (path, mutant.function, mutant.removed, mutant.added)
                ),
                None,
            )
            if match is not None and code in SURVIVED:
                used.add(match)
                result.equivalent += 1
            else:
                result.survivors.append(mutant)
        scores.append(result)
    return scores, used


def report(scores: list[Score], stale: list[Equivalent], min_score: float, seconds: float) -> int:
    width = max(len(s.path) for s in scores)
    print(f"{'module':<{width}}  mutants  killed  equivalent  survived  score")
    for s in scores:
        print(
            f"{s.path:<{width}}  {s.total:>7}  {s.killed:>6}  {s.equivalent:>10}  "
            f"{len(s.survivors):>8}  {s.percent:5.1f} %"
        )
    for s in scores:
        for m in s.survivors:
            label = "no test runs it" if m.no_tests else "survived"
            print(f"\n{m.path}:{m.line} {m.function} ({label}; {m.name.rpartition('.')[2]})")
            for line in m.removed:
                print(f"  - {line}")
            for line in m.added:
                print(f"  + {line}")
    for e in stale:
        print(f"\nstale equivalence entry ({e.path} {e.function}): no surviving mutant matches")
        for line in e.removed:
            print(f"  - {line}")
    print(f"\nmutation run: {seconds:.0f} s")
    low = [s.path for s in scores if s.percent < min_score]
    if low:
        print(f"under {min_score:g} %: {', '.join(low)}")
    return 1 if low or stale else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--module", action="append", default=[], metavar="FRAGMENT")
    parser.add_argument("-j", "--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--report-only", action="store_true", help="score the last run again")
    parser.add_argument("--min-score", type=float, default=90.0)
    args = parser.parse_args()

    os.chdir(ROOT)
    paths = select(mutated_modules(), args.module)
    equivalents = load_equivalents()
    started = time.monotonic()
    if not args.report_only:
        run_mutmut(paths, args.jobs, args.resume, everything=not args.module)
    scores, used = score(paths, equivalents)
    checked = set(paths)
    stale = [e for e in equivalents if e.path in checked and e not in used]
    return report(scores, stale, args.min_score, time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
