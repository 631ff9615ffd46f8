"""Shared test setup: a headless matplotlib backend, one torch thread, a small hypothesis profile, the
``notebooks`` marker, and the fixtures that run a test module's notebook solutions."""

import functools
import hashlib
import http.server
import io
import sys
import threading
import zipfile
from pathlib import Path

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
    """Mark the tests that run notebooks (test_assignments.py, the worked solutions) as ``notebooks``, and
    skip nbval's cells of the notebooks that read the data file where it is absent."""
    for item in items:
        code = getattr(getattr(item, "function", None), "__code__", None)
        names = set(code.co_names) if code is not None else set()
        if (item.path.name == "test_assignments.py" or names & _NOTEBOOK_HELPERS
                or "solutions" in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.notebooks)
    _skip_data_notebooks_without_data([item for item in items if item.path.suffix == ".ipynb"])


def _skip_data_notebooks_without_data(cells):
    """nbval compares the stored outputs of section 8.1 and chapter 11, made with the English-French file;
    on a machine without it (a fresh clone, no ../shared) they train on other data and print other
    numbers, so their cells are skipped, saying why. test_notebooks_without_data.py runs them there."""
    if not cells:
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    try:
        import book_build
    finally:
        sys.path.pop(0)
    reason = book_build.missing_data()
    if reason is None:
        return
    needs_data = {path.name for path in book_build.data_notebooks()}
    skip = pytest.mark.skip(reason=f"nbval: this notebook's stored outputs come from the English-French file, "
                                   f"which is not here ({reason})")
    for cell in cells:
        if cell.path.name in needs_data:
            cell.add_marker(skip)


@pytest.fixture
def solutions(request):
    """``solutions(*labels, **names)``: the namespace after running the worked solutions ``labels`` of the test
    module's ``NOTEBOOK`` in turn (see ``exercise_helpers.solution_namespace``). Marks the test ``notebooks``."""
    from exercise_helpers import solution_namespace

    return functools.partial(solution_namespace, request.module.NOTEBOOK)


@pytest.fixture
def solution_function(request):
    """``solution_function(label, name)``: the function ``name`` that the worked solution ``label`` of the test
    module's ``NOTEBOOK`` defines; only the cells that define it run (fast: not marked ``notebooks``)."""
    from exercise_helpers import solution_namespace

    def defined(label: str, name: str):
        return solution_namespace(request.module.NOTEBOOK, label, defining=name)[name]

    return defined


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every figure a test opened, so figures do not pile up across tests."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


# --- the opt-in download of the English-French pairs, against a local server ----------------------------

FRA_ENG_LINES = "".join(f"Go {i}.\tVa {i}\u202f!\tCC-BY 2.0 (France)\n" for i in range(40)).encode()


def _fra_eng_archive() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("fra-eng/_about.txt", "Tatoeba")
        z.writestr("fra-eng/fra.txt", FRA_ENG_LINES)
    return buffer.getvalue()


@pytest.fixture
def fra_eng_server():
    """A local HTTP server on 127.0.0.1 serving a small English-French archive at /fra-eng.zip:
    ``(url, sha1, hits)``, the requests' paths in ``hits`` (the opt-in download of the library and of the
    command line's --download is tested against it)."""
    body = _fra_eng_archive()
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            hits.append(self.path)
            if self.path != "/fra-eng.zip":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/fra-eng.zip", hashlib.sha1(body).hexdigest(), hits
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def no_course_data(tmp_path, monkeypatch):
    """An empty data folder and an empty cache folder."""
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path
