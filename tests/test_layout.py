"""The library's layout: packages in layers that import only downwards, a light ``import course_lib``, and the
old module names that still resolve for one release."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "course_lib"
# Lower layers never import higher ones; a package may import within itself and below.
LAYERS = [
    {"_validation", "utils", "progress"},
    {"data", "metrics", "smoothing", "pooling", "nadaraya_watson"},
    {"attention"},
    {"decoding"},
    {"models"},
    {"training"},
    {"teaching", "assignments", "cli", "exercises", "kernels", "__init__", "__main__"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _top(module: str) -> str:
    """course_lib.attention.masks -> attention; course_lib -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path) -> list[str]:
    """The course_lib modules (or names) a file imports relatively, as absolute dotted names."""
    rel = path.relative_to(ROOT.parent).with_suffix("")
    module = ".".join(rel.parts)
    package = module.removesuffix(".__init__") if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            found += [f"{target}.{alias.name}" for alias in node.names] if node.module is None else [target]
        elif isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [n for n in names if n.startswith("course_lib")]
    return found


def upward_imports() -> list[str]:
    problems = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        source = "__init__" if rel.parts == ("course_lib", "__init__") else rel.parts[1]
        for target in imports_of(path):
            layer = LAYER.get(_top(target))
            if layer is not None and layer > LAYER[source]:
                problems.append(f"{rel.as_posix()} imports {target} (layer {layer} above {LAYER[source]})")
    return problems


def test_every_top_level_name_has_a_layer():
    tops = {p.stem if p.is_file() else p.name for p in ROOT.iterdir() if p.suffix == ".py" or
            (p.is_dir() and (p / "__init__.py").exists())}
    assert tops == set(LAYER), f"new top-level modules or packages must be placed in a layer: {tops ^ set(LAYER)}"


def test_lower_layers_never_import_higher_ones():
    assert not upward_imports()


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    fake = tmp_path / "course_lib" / "attention"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("from ..training.train import train_lm\n")
    (tmp_path / "course_lib" / "utils.py").write_text("from .models import transformer\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path / "course_lib")
    assert len(upward_imports()) == 2


@pytest.mark.parametrize("heavy", ["matplotlib", "transformers"])
def test_import_course_lib_does_not_import(heavy):
    code = f"import course_lib, sys; print({heavy!r} in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_the_teaching_names_load_on_first_use():
    code = ("import course_lib as cl, sys; cl.show_heatmaps; cl.diagrams.kv_cache_diagram; "
            "print('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "True\n"


def test_the_old_module_names_still_resolve_for_one_release():
    import course_lib as cl
    from course_lib.attention import attention_pool, parameter_free_self_attention, softmax_attention
    from course_lib.exercises import check
    from course_lib.kernels import KERNELS, gaussian_kernel

    assert (attention_pool, softmax_attention, parameter_free_self_attention) == (
        cl.attention_pool, cl.softmax_attention, cl.parameter_free_self_attention)
    assert gaussian_kernel is cl.gaussian_kernel and KERNELS is cl.KERNELS
    assert check.__module__ == "course_lib.teaching.exercises._core"
