"""Which public names of ``course_lib`` show a runnable example (a ``>>>`` line) in their docstring.

Public = a class or function named in ``course_lib.__all__`` or in the ``__all__`` of a subpackage it
exports (``course_lib.data``, ``course_lib.attention.sparse``, ``course_lib.teaching.diagrams``), counted once
per object.
Constants (``KERNELS``, ``BOOK_STYLE``, ...) and the subpackages themselves are left out: a constant has
no docstring of its own. With ``--methods``, the public methods (and properties) a class defines
itself are listed too. ``make unit`` runs every example (tests/test_doctests.py).

``python tools/docstring_examples.py`` prints the names without an example and the count;
``--all`` prints every name with ``+`` (has one) or ``-`` (has none).
"""

from __future__ import annotations

import argparse
import inspect
import sys
import types

import course_lib


def public_objects() -> dict[str, object]:
    """Qualified name -> object for every public class and function, each object once."""
    found: dict[str, object] = {}
    seen: set[int] = set()
    for package in (course_lib, course_lib.data, course_lib.attention.sparse, course_lib.teaching.diagrams):
        prefix = package.__name__.replace("course_lib", "cl", 1)
        for name in package.__all__:
            obj = getattr(package, name)
            if isinstance(obj, types.ModuleType) or not (inspect.isclass(obj) or callable(obj)):
                continue
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            found[f"{prefix}.{name}"] = obj
    return found


def public_methods(cls: type) -> dict[str, object]:
    """The public methods and properties ``cls`` defines itself (not inherited ones, not dunders)."""
    out = {}
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member) or isinstance(member, property):
            out[name] = member
    return out


def has_example(obj: object) -> bool:
    return ">>>" in (inspect.getdoc(obj) or "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--all", action="store_true", help="print every name, + with an example, - without")
    parser.add_argument("--methods", action="store_true", help="also list the classes' public methods")
    args = parser.parse_args(argv)
    objects = public_objects()
    with_example = 0
    for qualname, obj in objects.items():
        ok = has_example(obj)
        with_example += ok
        if args.all or not ok:
            print(("+ " if ok else "- ") + qualname)
    n_methods = m_with = 0
    if args.methods:
        for qualname, obj in objects.items():
            if not inspect.isclass(obj):
                continue
            for name, member in public_methods(obj).items():
                ok = has_example(member)
                n_methods += 1
                m_with += ok
                if args.all or not ok:
                    print(("  + " if ok else "  - ") + f"{qualname}.{name}")
    print(f"{with_example} of {len(objects)} public classes and functions have an example")
    if args.methods:
        print(f"{m_with} of {n_methods} public methods and properties have an example")
    return 0


if __name__ == "__main__":
    sys.exit(main())
