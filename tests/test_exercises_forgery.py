"""Answers that hand in the library's own implementation score 0 (course_lib/teaching/exercises/_forgery.py).

Each answer is written as a student writes it: the source of a notebook cell, compiled under a cell's file
name and kept in linecache as IPython keeps it (the static look reads it from there), or compiled from a
string with no source anywhere (the static look falls back to the bytecode). The dynamic look is tested on
answers that neither look can read (a name built at run time), and on answers that swallow the refusal.
"""

from __future__ import annotations

import itertools
import linecache
import sys

import pytest
import torch

import course_lib as cl
from course_lib.exercises import check

_cells = itertools.count()


def cell(source: str, namespace: dict | None = None, *, keep_source: bool = True) -> dict:
    """Run ``source`` as a notebook cell (IPython's file name and linecache entry) in ``namespace``."""
    ns = namespace if namespace is not None else {"__name__": "__main__", "cl": cl, "torch": torch}
    filename = f"/tmp/ipykernel_4242/{next(_cells)}.py"
    if keep_source:
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)
    return ns


OWN_SOFTMAX = '''
def own(X, valid_lens):
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    keep = torch.arange(X.shape[-1]) < lens
    return torch.softmax(X.masked_fill(~keep, torch.finfo(X.dtype).min), dim=-1) * keep
'''

FORGERIES = {
    "wrapper": ("def answer(X, valid_lens):\n    return cl.masked_softmax(X, valid_lens)\n",
                "as `cl.masked_softmax`"),
    "wrapper through a submodule": (
        "def answer(X, valid_lens):\n    return cl.attention.masks.masked_softmax(X, valid_lens)\n",
        "as `cl.attention.masks.masked_softmax`"),
    "alias": ("ms = cl.masked_softmax\n\ndef answer(X, valid_lens):\n    return ms(X, valid_lens)\n",
              "`ms`, which is course_lib's own masked_softmax"),
    "lambda": ("answer = lambda X, valid_lens: cl.masked_softmax(X, valid_lens)\n", "as `cl.masked_softmax`"),
    "import inside the function": (
        "def answer(X, valid_lens):\n    from course_lib.attention.masks import masked_softmax as m\n"
        "    return m(X, valid_lens)\n", "imports course_lib's own masked_softmax"),
    "module import inside the function": (
        "def answer(X, valid_lens):\n    import course_lib as L\n    return L.masked_softmax(X, valid_lens)\n",
        "as `L.masked_softmax`"),
    "helper": ("def helper(X, v):\n    return cl.masked_softmax(X, v)\n\n"
               "def answer(X, valid_lens):\n    return helper(X, valid_lens)\n", "as `cl.masked_softmax`"),
    "getattr with a constant": ('def answer(X, valid_lens):\n    return getattr(cl, "masked_softmax")(X, valid_lens)\n',
                                "as `cl.masked_softmax`"),
    "partial": ("import functools\nanswer = functools.partial(cl.masked_softmax)\n", "course_lib's own"),
    "the other reference": ("def answer(X, valid_lens):\n    return cl.softmax_with_keep(X, None)\n",
                            "softmax_with_keep"),
}


@pytest.mark.parametrize("keep_source", [True, False], ids=["cell source", "bytecode only"])
@pytest.mark.parametrize("name", list(FORGERIES))
def test_an_answer_reaching_the_library_scores_zero_with_a_reason(name, keep_source):
    source, how = FORGERIES[name]
    answer = cell(source, keep_source=keep_source)["answer"]
    result = check("scoring.masked_softmax", answer, quiet=True)
    assert result.uses_library and not result.passed and result.status == "uses the library", result.message
    assert "0 points" in result.message and "masked_softmax" in result.message
    if keep_source or name in ("partial",):
        assert how in result.message, result.message


def test_what_no_reading_of_the_code_can_see_is_refused_while_it_runs():
    # The name is built at run time: only the dynamic look sees it.
    ns = cell(OWN_SOFTMAX + '''
def answer(X, valid_lens):
    return getattr(cl, "masked_" + "softmax")(X, valid_lens)

def swallows(X, valid_lens):
    try:
        return getattr(cl, "masked_" + "softmax")(X, valid_lens)
    except BaseException:  # the refusal, hidden: the check still remembers the call
        return own(X, valid_lens)
''')
    for answer in (ns["answer"], ns["swallows"]):
        result = check("scoring.masked_softmax", answer, quiet=True)
        assert result.uses_library and "while it was checked" in result.message, result.message
        assert 'getattr(cl, "masked_" + "softmax")' in result.message
    assert sys.getprofile() is None and sys.gettrace() is None, "the check must leave no hook behind"
    # outside a check the library's function runs for anyone, the student included
    X = torch.randn(2, 3, 4)
    assert torch.equal(ns["answer"](X, torch.tensor([2, 3])), cl.masked_softmax(X, torch.tensor([2, 3])))


def test_a_class_built_on_the_reference_scores_zero():
    ns = cell('''
import torch.nn as nn

class Subclass(cl.TransformerEncoderBlock):
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads):
        super().__init__(num_hiddens, ffn_num_hiddens, num_heads)

class Inside(nn.Module):
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads):
        super().__init__()
        self.block = getattr(cl, "TransformerEncoder" + "Block")(num_hiddens, ffn_num_hiddens, num_heads)

    def forward(self, X, mask=None):
        return self.block(X, mask)
''')
    sub = check("transformer.encoder_block", ns["Subclass"], quiet=True)
    assert sub.uses_library and "class Subclass(TransformerEncoderBlock)" in sub.message, sub.message
    inside = check("transformer.encoder_block", ns["Inside"], quiet=True)
    assert inside.uses_library and "while it was checked" in inside.message, inside.message


def test_own_answers_that_use_other_library_parts_and_compare_with_the_reference_pass():
    # The answer cell may compare with the library outside the answer; the answer may use other parts.
    ns = cell(OWN_SOFTMAX + '''
def answer(X, valid_lens):
    return own(X, valid_lens)

X = torch.randn(2, 3, 4)
print(torch.allclose(answer(X, None), cl.masked_softmax(X, None)))
''')
    result = check("scoring.masked_softmax", ns["answer"], quiet=True)
    assert result.passed, result.message
    block = cell('''
import torch.nn as nn

class EncoderBlock(nn.Module):
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads):
        super().__init__()
        self.attention = cl.MultiHeadAttention(num_hiddens, num_heads, bias=True)
        self.norm1 = nn.LayerNorm(num_hiddens)
        self.ffn = cl.PositionWiseFFN(num_hiddens, ffn_num_hiddens)
        self.norm2 = nn.LayerNorm(num_hiddens)

    def forward(self, X, mask=None):
        Y = self.norm1(X + self.attention(X, X, X, mask))
        return self.norm2(Y + self.ffn(Y))
''')["EncoderBlock"]
    result = check("transformer.encoder_block", block, quiet=True)
    assert result.passed, result.message


def test_every_reference_names_a_library_object():
    from course_lib.teaching.exercises import _core, _forgery, list_exercises

    for exercise in list_exercises():
        for ref in _forgery.resolve(_core._REFERENCES[exercise]):
            assert ref.name.startswith("course_lib.") and callable(ref.obj), (exercise, ref)
