"""Hypothesis profiles for every test.

* ``ci`` (the default): no per-example deadline and no health checks that only measure how
  fast examples are generated; on a busy 2-core machine those fail tests that are right.
* ``mutation``: ``ci`` with a fixed seed and no example database, so that a mutant killed
  once is killed again and ``bench/mutation.py`` scores the same on every run.

``HYPOTHESIS_PROFILE`` picks one.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "mutation", parent=settings.get_profile("ci"), derandomize=True, database=None
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
