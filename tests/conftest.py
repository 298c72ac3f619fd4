"""Settings every test shares."""

from hypothesis import HealthCheck, settings

# A loaded 2-core machine must not fail a property test: no per-example deadline and no
# health checks that measure time or generated size. Examples are still checked in full.
settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ci")
