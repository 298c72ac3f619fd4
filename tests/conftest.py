"""Settings for every test: hypothesis runs without wall-clock limits.

A busy 2-core CI machine can take seconds for what takes milliseconds on a quiet one, so the
profile drops hypothesis's deadline and its timing and data-size health checks; under CI=true
the examples are also derandomized, so a CI run is repeatable.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "pyflannel",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=os.environ.get("CI") == "true",
)
settings.load_profile("pyflannel")
