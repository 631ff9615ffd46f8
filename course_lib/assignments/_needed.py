"""Which cells of a submission grading runs: those the graded answers need, not the chapter's training.

A chapter notebook trains models, plots and measures between its exercises; the autograded answers need
none of that (each checker builds its own cases and models). Grading therefore runs only

- the cells that define an answer the tests take (``my_masked_softmax``, ``EncoderBlock``, ...),
- the cells that call ``grader.check`` (the public tests, as the student ran them),
- and, in turn, the cell that last defined each name those cells use before them (the setup cell's
  ``torch`` and ``cl``, an ``import torch.nn as nn``, a helper function the student wrote, ...),

and skips every other code cell (otter's ``ignore`` mark in the cell's metadata). The rule reads the
submission itself, at grading time (:class:`course_lib.assignments.otter_plugin.GradeWhatAnswersNeed`),
so an answer that uses a helper of the student's or a name the chapter defined still finds it, and a
chapter added or changed later needs nothing marked by hand. A name is "used" wherever it is loaded in
the cell, inside functions and classes too; "defined" means bound at the cell's top level, or changed
there through an attribute or item (``model.weight = ...``, ``table[k] = ...``).
"""

from __future__ import annotations

import ast
import re

import nbformat

_LINE_MAGIC = re.compile(r"^(\s*)[%!].*$", re.MULTILINE)


def _parse(source: str) -> ast.Module | None:
    """The cell's code without IPython's magics (``%%time`` cells: their body); ``None`` if it does not parse."""
    if source.lstrip().startswith("%%"):
        source = source.lstrip().split("\n", 1)[1] if "\n" in source.lstrip() else ""
    try:
        return ast.parse(_LINE_MAGIC.sub(r"\1pass", source))
    except SyntaxError:
        return None


def _targets(node: ast.AST) -> set[str]:
    """The names an assignment target binds or changes (``a``, ``a, b``, ``a.x``, ``a[i]``)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, (ast.Tuple, ast.List)):
        return set().union(*(_targets(e) for e in node.elts)) if node.elts else set()
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        return _targets(node.value)
    return set()


class _Binder(ast.NodeVisitor):
    """Collects the names a cell binds or changes at its top level; function and class bodies are their own."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.names.add(node.name)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        pass

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.names |= _targets(target)
        self.generic_visit(node)

    def _target(self, node: ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor | ast.NamedExpr) -> None:
        self.names |= _targets(node.target)
        self.generic_visit(node)

    visit_AnnAssign = visit_AugAssign = visit_For = visit_AsyncFor = visit_NamedExpr = _target

    def visit_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self.names |= _targets(node.optional_vars)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(a.asname or a.name.split(".")[0] for a in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.names.update(a.asname or a.name for a in node.names)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.names.add(node.name)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self.names |= _targets(target)


def defined(tree: ast.Module) -> set[str]:
    """Names the cell binds or changes at its top level (inside ``if``, ``for``, ``with``, ``try`` too)."""
    binder = _Binder()
    binder.visit(tree)
    return binder.names


def used(tree: ast.Module) -> set[str]:
    """The free names the cell loads: at its top level and in function and class bodies (what they call at
    run time), less each function's parameters and locals and each comprehension's variables."""
    out: set[str] = set()

    def visit(node: ast.AST, local: frozenset[str]) -> None:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id not in local:
                out.add(node.id)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for outer in [*getattr(node, "decorator_list", []), *args.defaults, *args.kw_defaults,
                          *[a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.annotation],
                          getattr(node, "returns", None)]:
                if outer is not None:
                    visit(outer, local)
            params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
            params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
            body = node.body if isinstance(node.body, list) else [ast.Expr(node.body)]
            inner = local | params | defined(ast.Module(body=body, type_ignores=[]))
            declared = {n for s in ast.walk(ast.Module(body=body, type_ignores=[]))
                        if isinstance(s, (ast.Global, ast.Nonlocal)) for n in s.names}
            for statement in body:
                visit(statement, frozenset(inner - declared))
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = local | {n for g in node.generators for n in _targets(g.target)}
            for child in ast.iter_child_nodes(node):
                visit(child, frozenset(inner))
            return
        for child in ast.iter_child_nodes(node):
            visit(child, local)

    visit(tree, frozenset())
    return out


def cells_to_run(sources: list[str | None], answers: set[str]) -> set[int]:
    """The indices of the code cells grading runs (see the module docstring).

    Args:
        sources: the notebook's cells in order, ``None`` for a cell that is not code.
        answers: the names the autograder's tests take.
    """
    trees = {i: _parse(s) for i, s in enumerate(sources) if s is not None}
    binds = {i: defined(t) if t is not None else set() for i, t in trees.items()}
    uses = {i: used(t) if t is not None else set() for i, t in trees.items()}
    roots = {i for i, s in enumerate(sources) if s is not None and ("grader.check" in s or binds[i] & answers)}

    def definer(name: str, before: int) -> int | None:
        earlier = [j for j in binds if j < before and name in binds[j]]
        if earlier:
            return max(earlier)
        later = [j for j in binds if name in binds[j]]  # a function body may use a name bound after it
        return max(later) if later else None

    needed, todo = set(roots), list(roots)
    while todo:
        i = todo.pop()
        for name in uses[i] - binds[i]:  # a name the cell binds itself is its own
            j = definer(name, i)
            if j is not None and j not in needed:
                needed.add(j)
                todo.append(j)
    return needed


def mark_cells_to_skip(nb: nbformat.NotebookNode, answers: set[str]) -> list[int]:
    """Mark every code cell grading does not need with otter's ``ignore``; return their indices."""
    sources = [c.source if c.cell_type == "code" else None for c in nb.cells]
    run = cells_to_run(sources, answers)
    skipped = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and i not in run:
            cell.metadata.setdefault("otter", {})["ignore"] = True
            skipped.append(i)
    return skipped
