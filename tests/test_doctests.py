"""The ``Examples:`` in the public docstrings run and print what they show (part of make unit and make test)."""

import doctest
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import course_lib

MODULES = sorted(
    name for _, name, _ in pkgutil.walk_packages(course_lib.__path__, "course_lib.")
    if not name.endswith("__main__")
)
_LISTING = Path(__file__).resolve().parents[1] / "tools" / "docstring_examples.py"


def _listing():
    spec = importlib.util.spec_from_file_location("docstring_examples", _LISTING)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _examples(name):
    return [t for t in doctest.DocTestFinder().find(importlib.import_module(name)) if t.examples]


def test_at_least_ten_public_entries_show_an_example():
    documented = {t.name for name in MODULES for t in _examples(name)}
    assert len(documented) >= 10, sorted(documented)
    for entry in ("MultiHeadAttention", "Transformer", "masked_softmax", "nadaraya_watson", "beam_search",
                  "lengths_to_mask", "causal_mask"):
        assert any(d.endswith("." + entry) for d in documented), entry


def test_every_public_class_and_function_shows_an_example():
    listing = _listing()
    missing = [name for name, obj in listing.public_objects().items() if not listing.has_example(obj)]
    assert not missing, (f"public names without a runnable example (an `Examples:` section with `>>>` lines; "
                         f"`python tools/docstring_examples.py` lists them): {missing}")


@pytest.mark.parametrize("name", [n for n in MODULES if _examples(n)])
def test_docstring_examples_run(name):
    import torch

    torch.manual_seed(0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    for test in _examples(name):
        test.globs.setdefault("torch", torch)
        for public in course_lib.__all__:  # examples may use any public name, as a reader would after an import
            test.globs.setdefault(public, getattr(course_lib, public))
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, f"{failed} of {attempted} examples in {name} failed (see the output above)"
