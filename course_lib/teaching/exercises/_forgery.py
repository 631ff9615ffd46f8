"""Answers that hand in the library's own implementation: found in the answer's code, and refused while it runs.

Each checker names the library's *references* for its exercise: the course_lib functions and classes that
compute what the exercise asks the student to write (``scoring.masked_softmax`` -> ``cl.masked_softmax``).
An answer that reaches one of them scores 0, with a message saying how it reached it. Two independent
looks, so that neither a wrapper, an alias nor an import inside the function gets through:

- **statically**, in the answer cell: the answer's definition (its ``def`` or ``class`` in the cell's
  source, which IPython keeps in :mod:`linecache`; the compiled code where there is no source) and, in
  turn, every function or class of the student's that it names. A name that is bound to a reference
  (``ms = cl.masked_softmax``), an attribute path that ends at one (``cl.masked_softmax``,
  ``course_lib.attention.masks.masked_softmax``, ``getattr(cl, "masked_softmax")``), an import of one inside
  the function, or a base class that is one, is reported with its line;
- **dynamically**, while the checker runs the answer: a hook watches the references' code; a
  reference called *by the student's code* (the nearest caller that is not torch or the standard library
  is not course_lib: a notebook cell, ``exec``, a file of the student's) refuses to run, and the check
  scores 0 even if the answer swallows the refusal. A reference called by the library itself (the
  checker computing its expected values, ``cl.MultiHeadAttention`` using its own softmax) runs as usual.

Only a check is watched: outside :func:`~course_lib.exercises.check` the references run for anyone.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import dis
import functools
import importlib
import inspect
import linecache
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# course_lib/ (this file is course_lib/teaching/exercises/_forgery.py): the package whose files are the library's.
_PACKAGE_DIR = next(p for p in Path(__file__).resolve().parents if (p / "__init__.py").exists()
                    and not (p.parent / "__init__.py").exists())
_INFRASTRUCTURE = tuple({str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                          sys.base_exec_prefix)})


class ReferenceRefused(BaseException):
    """Raised inside the answer when it calls a reference during a check.

    A ``BaseException``, so that ``except Exception`` in an answer does not hide it; an answer that
    catches it anyway still scores 0 (the check remembers the call).
    """


@dataclass(frozen=True)
class Reference:
    """One reference implementation: its dotted name (``course_lib.attention.masks.masked_softmax``) and object."""

    name: str
    obj: object

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def where(self) -> str:
        module = sys.modules.get(getattr(self.obj, "__module__", "") or "")
        file = getattr(module, "__file__", None)
        return Path(file).resolve().relative_to(_PACKAGE_DIR.parent).as_posix() if file else self.name


def resolve(names: tuple[str, ...]) -> tuple[Reference, ...]:
    """The objects behind dotted names relative to ``course_lib`` (``"attention.masks.masked_softmax"``)."""
    out = []
    for name in names:
        module_name, _, attribute = f"course_lib.{name}".rpartition(".")
        out.append(Reference(f"course_lib.{name}", getattr(importlib.import_module(module_name), attribute)))
    return tuple(out)


# ----------------------------------------------------------------------------------------------------- who is who


def _file_kind(filename: str) -> str:
    """``"library"`` (course_lib), ``"infrastructure"`` (standard library, torch, other packages) or ``"student"``."""
    if filename.startswith("<") and not filename.startswith("<frozen"):
        return "student"  # <string>, <ipython-input-...>, <stdin>: typed or exec'd code
    if filename.startswith("<frozen"):
        return "infrastructure"
    path = str(Path(filename).resolve())
    if path == str(_PACKAGE_DIR) or path.startswith(str(_PACKAGE_DIR) + "/"):
        return "library"
    if any(path.startswith(prefix + "/") for prefix in _INFRASTRUCTURE):
        return "infrastructure"
    return "student"


def _is_students(obj: object) -> bool:
    """Whether ``obj`` is a function or class whose code is the student's (not a package's, not course_lib's)."""
    obj = _unwrap(obj)
    code = getattr(obj, "__code__", None)
    if code is not None:
        return _file_kind(code.co_filename) == "student"
    if isinstance(obj, type):
        for member in vars(obj).values():
            function = _unwrap(member.fget if isinstance(member, property) else member)
            if isinstance(function, types.FunctionType):
                return _file_kind(function.__code__.co_filename) == "student"
        file = getattr(sys.modules.get(obj.__module__), "__file__", None)
        return _file_kind(file) == "student" if file else obj.__module__ == "__main__"
    return False


def _unwrap(obj: object) -> object:
    """The function behind partials, bound methods, static/class methods and ``functools.wraps`` wrappers."""
    for _ in range(20):
        if isinstance(obj, functools.partial):
            obj = obj.func
        elif isinstance(obj, (types.MethodType, staticmethod, classmethod)):
            obj = obj.__func__
        elif callable(obj) and hasattr(obj, "__wrapped__"):
            obj = obj.__wrapped__
        else:
            break
    return obj


def _matches(obj: object, references: tuple[Reference, ...]) -> Reference | None:
    """The reference ``obj`` is (or wraps, or subclasses, or is an instance of), if any."""
    obj = _unwrap(obj)
    for ref in references:
        if obj is ref.obj:
            return ref
        if isinstance(ref.obj, type):
            if isinstance(obj, type) and issubclass(obj, ref.obj):
                return ref
            if not isinstance(obj, type) and isinstance(obj, ref.obj):
                return ref
    return None


# ----------------------------------------------------------------------------------------------------- static look


@dataclass
class _Scan:
    references: tuple[Reference, ...]
    seen: set[int] = field(default_factory=set)

    def finding(self, answer: object) -> str | None:
        obj = _unwrap(answer)
        ref = _matches(obj, self.references)
        if ref is not None and obj is not ref.obj:
            if isinstance(obj, type):
                base = next(b for b in obj.__mro__ if b is ref.obj)
                return f"builds on course_lib's own {ref.short} (class {obj.__name__}({base.__name__}))"
            return f"is an instance of course_lib's own {ref.short} ({ref.where})"
        if ref is not None:
            return f"is course_lib's own {ref.short} ({ref.where})"
        return self._definition(obj, top=True)

    # one function or class of the student's
    def _definition(self, obj: object, top: bool = False) -> str | None:
        if id(obj) in self.seen:
            return None
        self.seen.add(id(obj))
        if isinstance(obj, type):
            for base in obj.__mro__[1:]:
                ref = _matches(base, self.references)
                if ref is not None:
                    return f"builds on course_lib's own {ref.short} (class {obj.__name__}({base.__name__}))"
            for member in vars(obj).values():
                function = _unwrap(member.fget if isinstance(member, property) else member)
                if isinstance(function, types.FunctionType) and _file_kind(function.__code__.co_filename) == "student":
                    found = self._function(function)
                    if found:
                        return found
            return None
        if isinstance(obj, types.FunctionType):
            return self._function(obj)
        if not top:
            return None
        # an instance of the student's class (a module handed in as the answer)
        return self._definition(type(obj)) if _is_students(type(obj)) else None

    def _namespace(self, function: types.FunctionType) -> dict[str, object]:
        names = dict(vars(builtins))
        names.update(function.__globals__)
        for name, cell in zip(function.__code__.co_freevars, function.__closure__ or (), strict=False):
            with contextlib.suppress(ValueError):  # an empty cell
                names[name] = cell.cell_contents
        return names

    def _function(self, function: types.FunctionType) -> str | None:
        code = function.__code__
        names = self._namespace(function)
        node = _definition_node(code)
        found = self._ast(node, names, code.co_filename) if node is not None else self._bytecode(code, names)
        return found

    def _follow(self, obj: object) -> str | None:
        """A name the answer uses: a reference is a finding, a function or class of the student's is scanned."""
        ref = _matches(obj, self.references)
        if ref is not None:
            return ref
        if _is_students(obj):
            return self._definition(_unwrap(obj))
        return None

    def _ast(self, node: ast.AST, names: dict[str, object], filename: str) -> str | None:
        local: dict[str, object] = {}

        def where(n: ast.AST) -> str:
            text = linecache.getline(filename, n.lineno).strip()
            return f"line {n.lineno}: `{text}`" if text else f"line {n.lineno}"

        # imports inside the function come first: they bind names the rest may use
        for n in ast.walk(node):
            if isinstance(n, ast.Import):
                for alias in n.names:
                    if alias.name.split(".")[0] == "course_lib":
                        with contextlib.suppress(ImportError):
                            module = importlib.import_module(alias.name)
                            local[alias.asname or alias.name.split(".")[0]] = (
                                module if alias.asname else importlib.import_module("course_lib"))
            elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "course_lib" and not n.level:
                with contextlib.suppress(ImportError):
                    module = importlib.import_module(n.module)
                    for alias in n.names:
                        obj = getattr(module, alias.name, None)
                        if obj is None:
                            with contextlib.suppress(ImportError):
                                obj = importlib.import_module(f"{n.module}.{alias.name}")
                        ref = _matches(obj, self.references)
                        if ref is not None:
                            return f"imports course_lib's own {ref.short} ({where(n)})"
                        local[alias.asname or alias.name] = obj
        scope = {**names, **local}
        for n in ast.walk(node):
            target = None
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load):
                target = _attribute_path(n)
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr"
                  and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)):
                base = _attribute_path(n.args[0]) if isinstance(n.args[0], ast.Attribute) else (
                    [n.args[0].id] if isinstance(n.args[0], ast.Name) else None)
                target = [*base, n.args[1].value] if base else None
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                target = [n.id]
            if not target or target[0] not in scope:
                continue
            obj = _walk_attributes(scope[target[0]], target[1:])
            if obj is _MISSING:
                continue
            found = self._follow(obj)
            if isinstance(found, Reference):
                if len(target) > 1:
                    return f"calls course_lib's own {found.short} as `{'.'.join(target)}` ({where(n)})"
                if target[0] == found.short:
                    return f"calls course_lib's own {found.short} ({where(n)})"
                return f"uses `{target[0]}`, which is course_lib's own {found.short} ({where(n)})"
            if found:
                return found
        return None

    def _bytecode(self, code: types.CodeType, names: dict[str, object]) -> str | None:
        """Without the source (code compiled from a string): the names the code loads, attributes and imports."""
        globals_, attributes, imports = set(), set(), set()
        for instruction in dis.get_instructions(code):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF"):
                globals_.add(instruction.argval)
            elif instruction.opname in ("LOAD_ATTR", "LOAD_METHOD", "IMPORT_FROM"):
                attributes.add(instruction.argval)
            elif instruction.opname == "IMPORT_NAME":
                imports.add(instruction.argval)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                found = self._bytecode(const, names)
                if found:
                    return found
        reaches_library = any(m.split(".")[0] == "course_lib" for m in imports) or any(
            isinstance(names.get(g), types.ModuleType) and names[g].__name__.split(".")[0] == "course_lib"
            for g in globals_)
        for ref in self.references:
            if reaches_library and ref.short in attributes:
                return f"calls course_lib's own {ref.short} (in {code.co_name})"
        for name in sorted(globals_):
            if name in names:
                found = self._follow(names[name])
                if isinstance(found, Reference):
                    return f"uses `{name}`, which is course_lib's own {found.short} (in {code.co_name})"
                if found:
                    return found
        return None


_MISSING = object()


def _attribute_path(node: ast.Attribute) -> list[str] | None:
    """``cl.attention.masks.masked_softmax`` -> ``["cl", "attention", "masks", "masked_softmax"]``; ``None``
    unless rooted at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _walk_attributes(obj: object, attributes: list[str]) -> object:
    """``getattr`` along ``attributes``, through modules and classes only (no property of an instance runs)."""
    for name in attributes:
        if not isinstance(obj, (types.ModuleType, type)):
            return _MISSING
        obj = inspect.getattr_static(obj, name, _MISSING) if isinstance(obj, type) else getattr(obj, name, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


def _definition_node(code: types.CodeType) -> ast.AST | None:
    """The ``def``/``lambda`` node of ``code`` in its source (a notebook cell, through linecache), if there is one."""
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return None
    try:
        tree = ast.parse("".join(lines))
    except SyntaxError:
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if node.name == code.co_name and code.co_firstlineno in (first, node.lineno):
                return node
        elif isinstance(node, ast.Lambda) and code.co_name == "<lambda>" and node.lineno == code.co_firstlineno:
            best = best or node
    return best


def static_finding(answer: object, references: tuple[Reference, ...]) -> str | None:
    """How ``answer`` reaches one of ``references``, found in its code (see the module docstring), or ``None``."""
    if not references:
        return None
    return _Scan(references).finding(answer)


# ----------------------------------------------------------------------------------------------------- dynamic look


def _deciding_caller(frame: types.FrameType) -> tuple[str, types.FrameType | None]:
    """The kind of the nearest caller of ``frame`` that is not infrastructure (torch's ``Module.__call__``, ...)."""
    caller = frame.f_back
    while caller is not None:
        kind = _file_kind(caller.f_code.co_filename)
        if kind != "infrastructure":
            return kind, caller
        caller = caller.f_back
    return "infrastructure", None


def _code_objects(ref: Reference) -> dict[types.CodeType, Reference]:
    codes = {}
    obj = _unwrap(ref.obj)
    members = vars(obj).values() if isinstance(obj, type) else [obj]
    for member in members:
        function = _unwrap(member.fget if isinstance(member, property) else member)
        code = getattr(function, "__code__", None)
        if code is not None and _file_kind(code.co_filename) == "library":
            codes[code] = ref
    return codes


class Watcher:
    """Refuses the references to the student's code while it is active (``with watcher:``, re-entrant).

    ``refused`` describes the first refused call (``None`` while there is none). Python 3.12+:
    ``sys.monitoring`` calls back only when a reference's code starts, so nothing else is slowed down and
    :func:`~course_lib.exercises.check` keeps it active for the whole check. Before 3.12: a call-only
    ``sys.settrace`` hook (no line is traced, no C call seen), which still costs a callback per Python call,
    so the check activates it only while the answer itself runs (:func:`watched`). Either way the hook is
    removed when the block ends, and a tracer already there is restored.
    """

    def __init__(self, references: tuple[Reference, ...]) -> None:
        self.refused: str | None = None
        self._codes: dict[types.CodeType, Reference] = {}
        for ref in references:
            self._codes.update(_code_objects(ref))
        self._depth = 0
        self._tool: int | None = None
        self._previous_trace = None

    @property
    def cheap(self) -> bool:
        """Whether watching costs nothing but at the references' calls (``sys.monitoring``)."""
        return hasattr(sys, "monitoring")

    def _starts(self, frame: types.FrameType) -> None:
        ref = self._codes[frame.f_code]
        kind, caller = _deciding_caller(frame)
        owner = None
        if kind == "library" and frame.f_code.co_varnames[:1] == ("self",):
            owner = type(frame.f_locals.get("self"))  # a method of a reference run for the student's subclass
        if kind == "student" or (owner is not None and _is_students(owner)):
            if caller is not None and kind == "student":
                text = linecache.getline(caller.f_code.co_filename, caller.f_lineno).strip()
                how = f"`{text}`" if text else f"line {caller.f_lineno} of {caller.f_code.co_name}"
            else:
                how = f"class {owner.__name__}, a subclass"
            self.refused = self.refused or f"called course_lib's own {ref.short} while it was checked ({how})"
            raise ReferenceRefused(f"course_lib's {ref.short} refuses to run inside the answer of a check")

    def _tracer(self, frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code in self._codes:
            self._starts(frame)
        return None  # no line events

    def __enter__(self) -> Watcher:
        self._depth += 1
        if self._depth > 1 or not self._codes:
            return self
        monitoring = getattr(sys, "monitoring", None)
        self._tool = next((t for t in _TOOL_IDS if monitoring is not None and monitoring.get_tool(t) is None), None)
        if self._tool is not None:
            monitoring.use_tool_id(self._tool, "course_lib checks")
            monitoring.register_callback(self._tool, monitoring.events.PY_START,
                                         lambda code, offset: self._starts(sys._getframe(1)))
            for code in self._codes:
                monitoring.set_local_events(self._tool, code, monitoring.events.PY_START)
        else:
            self._previous_trace = sys.gettrace()
            sys.settrace(self._tracer)
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth > 0 or not self._codes:
            return
        if self._tool is not None:
            monitoring = sys.monitoring
            for code in self._codes:
                monitoring.set_local_events(self._tool, code, 0)
            monitoring.register_callback(self._tool, monitoring.events.PY_START, None)
            monitoring.free_tool_id(self._tool)
            self._tool = None
        else:
            sys.settrace(self._previous_trace)


_TOOL_IDS = (3, 4)  # sys.monitoring tools no debugger, coverage tool or profiler claims


def watched(answer: object, watcher: Watcher) -> object:
    """``answer`` as the checker calls it: a function that runs the answer with ``watcher`` active.

    A class (or an object that is not a plain function) is returned as is: the check then keeps the watcher
    active throughout.
    """
    if isinstance(answer, type) or not callable(answer):
        return answer

    @functools.wraps(answer)
    def run(*args: object, **kwargs: object) -> object:
        with watcher:
            return answer(*args, **kwargs)

    return run


@contextlib.contextmanager
def watching(references: tuple[Reference, ...]) -> Iterator[Watcher]:
    """While the block runs, a reference called by the student's code raises :class:`ReferenceRefused`."""
    with Watcher(references) as watcher:
        yield watcher
