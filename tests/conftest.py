"""Shared test setup: a headless matplotlib backend, one torch thread, a small hypothesis profile."""

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot: the tests run without a display

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# The test machine is small and shared: one thread keeps the timings predictable.
torch.set_num_threads(1)

settings.register_profile(
    "course",
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("course")


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every figure a test opened, so figures do not pile up across tests."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")
