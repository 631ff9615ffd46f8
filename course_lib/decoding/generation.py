r"""A language model's generation: continue prompts token by token, with the model's key/value cache (chapters 11, 12).

The loop is the same for every way of choosing the next token: feed the prompt once, then feed each
chosen token, reading the logits of the next one. Choosing is :func:`~course_lib.decoding.sampling.sample_next`:
the argmax (temperature 0, greedy decoding) or a draw from :math:`\operatorname{softmax}(\mathbf z/\tau)`
over the ``top_k`` largest logits and within the nucleus of mass ``top_p``. The model is read through
:class:`LanguageModel`: a vocabulary size, an empty decoding state and an in-place step;
:class:`~course_lib.DecoderLM` is one (its ``generate`` calls :func:`generate`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from .._validation import check_non_negative_int, check_positive_int, check_real, check_token_id, check_tokens
from .sampling import sample_next

__all__ = ["LanguageModel", "generate"]


@runtime_checkable
class LanguageModel(Protocol):
    """What :func:`generate` needs from a language model.

    Attributes:
        vocab_size: V.

    Methods:
        ``init_state()``: the decoding state before the first token (empty caches).
        ``step_(tokens, state)``: feed (B, T_new) tokens, appending to ``state`` in place; returns the
        (B, T_new, V) logits of the next token at each new position.
    """

    vocab_size: int

    def init_state(self) -> Any: ...

    def step_(self, tokens: torch.Tensor, state: Any) -> torch.Tensor: ...


@torch.no_grad()
def generate(model: LanguageModel, tokens: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
             eos_id: int | None = None) -> torch.Tensor:
    r"""Continue each prompt token by token, with the model's cache (each step runs the new position only).

    Each new token is :func:`~course_lib.decoding.sampling.sample_next` of the last position's logits: drawn
    from :math:`\operatorname{softmax}(\mathbf z / \tau)` among the ``top_k`` largest logits :math:`\mathbf z`
    and within the nucleus of mass ``top_p``; :math:`\tau = 0` is the limit, greedy decoding (the argmax).

    Args:
        model: a :class:`LanguageModel` (call ``model.eval()`` first: dropout would act).
        tokens: (B, T) the prompts, ``torch.long`` (all of length T, at least one token).
        max_new_tokens: how many tokens to add.
        temperature: :math:`\tau \ge 0`; 0 is greedy.
        top_k: sample among the ``top_k`` most likely tokens only (``None``: all).
        top_p: sample within the nucleus of this probability mass only, in ``[0, 1]`` (``None``: all).
        generator: the ``torch.Generator`` the draws use (``None``: torch's global one).
        eos_id: a sequence stops after this token: it is repeated after it, and generation ends when
            every sequence has stopped.

    Returns:
        (B, T + n) the prompts and their continuations, n <= ``max_new_tokens`` (smaller only when every
        sequence stopped at ``eos_id``).

    Examples:
        >>> model = DecoderLM(DecoderLMConfig(vocab_size=20, num_hiddens=16, num_heads=4)).eval()
        >>> out = generate(model, torch.tensor([[1, 5]]), 4, temperature=0.0)  # greedy
        >>> out.shape, torch.equal(out, model.generate(torch.tensor([[1, 5]]), 4, temperature=0.0))
        (torch.Size([1, 6]), True)
    """
    check_tokens(tokens, "tokens", "(batch, T)", model.vocab_size)
    if tokens.shape[1] == 0:
        raise ValueError(f"tokens must hold at least one token, got shape {tuple(tokens.shape)}")
    check_non_negative_int(max_new_tokens, "max_new_tokens")
    temperature = check_real(temperature, "temperature", at_least=0.0)
    if top_k is not None:
        check_positive_int(top_k, "top_k")
    if top_p is not None and not 0.0 <= check_real(top_p, "top_p") <= 1.0:
        raise ValueError(f"top_p must be in [0, 1] (a probability mass), got {top_p}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if eos_id is not None:
        check_token_id(eos_id, "eos_id", model.vocab_size)
    out, state = [tokens], model.init_state()
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    step_input = tokens
    for _ in range(max_new_tokens):
        logits = model.step_(step_input, state)[:, -1]  # (B, V): the next token's logits
        step_input = sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p,
                                 generator=generator)[:, None]  # (B, 1)
        if eos_id is not None:
            step_input = step_input.masked_fill(done[:, None], eos_id)
            done = done | (step_input[:, 0] == eos_id)
        out.append(step_input)
        if eos_id is not None and bool(done.all()):
            break
    return torch.cat(out, dim=1)
