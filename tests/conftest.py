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


_NOTEBOOK_HELPERS = {"solution_namespace", "_solution_namespace", "solution_cells", "_solution_cells"}


def pytest_collection_modifyitems(items):
    """Mark the tests that run notebooks (test_assignments.py, the worked solutions) as ``notebooks``."""
    for item in items:
        code = getattr(getattr(item, "function", None), "__code__", None)
        names = set(code.co_names) if code is not None else set()
        if item.path.name == "test_assignments.py" or names & _NOTEBOOK_HELPERS:
            item.add_marker(pytest.mark.notebooks)


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every figure a test opened, so figures do not pile up across tests."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")
