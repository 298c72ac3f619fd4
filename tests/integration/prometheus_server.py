"""A real Prometheus (Debian's prometheus package) for the lab tests: on the machine's root
namespace, listening on a free port of 127.0.0.1, with a data directory of its own, scraping the
lab's agents every second through a file_sd document, evaluating the collection's alerting
rules; killed by PID when stopped."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pyflannel_lab.etcd_server import free_port

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "roles/agent/files/prometheus/pyflannel.rules.yml"
DASHBOARD = ROOT / "roles/agent/files/grafana/pyflannel.json"
JOB = "pyflannel"  # the job name the rules and docs/metrics.md give the agents' scrape config
INTERVAL = "1s"
STARTED_WITHIN = 60.0


class PrometheusError(AssertionError):
    pass


@dataclass
class Prometheus:
    process: subprocess.Popen[bytes]
    port: int
    workdir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>: its data; an error status or an error answer fails."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as got:
                answer = json.load(got)
        except urllib.error.HTTPError as err:
            raise PrometheusError(f"{path} {params}: {err.code} {err.read()[:500]!r}") from None
        if answer.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {answer}")
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (or scalar, as a one-item list)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise PrometheusError(f"not within {timeout:.0f} s: {what}\n{self.log_tail()}")
            if self.process.poll() is not None:
                raise PrometheusError(f"prometheus exited\n{self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, lines: int = 20) -> str:
        log = self.workdir / "prometheus.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        shutil.rmtree(self.workdir, ignore_errors=True)


def rules_without_waits(source: Path, target: Path) -> Path:
    """The rules of `source` with every `for:` duration 0 s: each alert fires at the first
    evaluation where its expression holds. Expressions, labels and annotations stay as shipped;
    the durations themselves are `promtool test rules`' to check."""
    document = yaml.safe_load(source.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target


def start_prometheus(workdir: Path, file_sd: Path, rules: Path) -> Prometheus:
    """Prometheus scraping the targets of `file_sd` as job "pyflannel" with `rules` loaded;
    returned once it is ready."""
    binary = shutil.which("prometheus")
    assert binary is not None, "prometheus (Debian's package) is missing: ./scripts/bootstrap"
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {
            "scrape_interval": INTERVAL,
            "scrape_timeout": INTERVAL,
            "evaluation_interval": INTERVAL,
        },
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": JOB,
                "file_sd_configs": [{"files": [str(file_sd)], "refresh_interval": INTERVAL}],
            }
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port("127.0.0.1")
    argv = [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with open(workdir / "prometheus.log", "ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    server = Prometheus(process, port, workdir)
    try:
        server.wait("/-/ready answers 200", lambda: _ready(server.url), STARTED_WITHIN)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def prometheus_for(file_sd: Path, workdir: Path) -> Iterator[Prometheus]:
    """A Prometheus scraping the nodes of `file_sd` with the shipped rules, their waits 0 s
    (`rules_without_waits`); stopped (by PID) and its data removed afterwards."""
    assert file_sd.is_file(), f"no file_sd document at {file_sd}: site.yml writes it"
    workdir.mkdir(parents=True, exist_ok=True)
    rules = rules_without_waits(RULES, workdir / "rules.yml")
    server = start_prometheus(workdir / "server", file_sd, rules)
    try:
        yield server
    finally:
        server.stop()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def dashboard_queries(variables: dict[str, str]) -> list[tuple[str, str]]:
    """Every panel's queries in the shipped Grafana dashboard, as (panel title, expression) with
    the dashboard's variables given their values."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in variables.items():
                expr = expr.replace(name, value)
            found.append((panel["title"], expr))
    return found
