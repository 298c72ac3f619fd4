"""Settings for every test: hypothesis runs without wall-clock limits.

A busy 2-core CI machine can take seconds for what takes milliseconds on a quiet one, so the
``pyflannel`` profile drops hypothesis's deadline and its timing and data-size health checks;
under CI=true the examples are also derandomized, so a CI run is repeatable. The ``mutation``
profile (``HYPOTHESIS_PROFILE=mutation``, set by scripts/mutation) is always derandomized and
keeps no example database, so that a mutant killed once is killed on every run.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests import parallel

settings.register_profile(
    "pyflannel",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=os.environ.get("CI") == "true",
)
settings.register_profile(
    "mutation", parent=settings.get_profile("pyflannel"), derandomize=True, database=None
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pyflannel"))

parallel.configure_worker_lab()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """./scripts/test's workers take whole modules, the longest first (tests/parallel.py)."""
    return parallel.make_scheduler(config, log)
