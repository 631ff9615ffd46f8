r"""Speculative decoding: a small draft model proposes, the target verifies several tokens in one step
(Leviathan et al. 2023; Chen et al. 2023; section 13.1).

A language model generates one token per forward step, and on an accelerator a step that reads one new
token costs about as much as one that reads a handful: the weights and the cache are read from memory
either way. A *draft* model, much cheaper than the *target*, proposes :math:`k` tokens
:math:`x_1, \dots, x_k` one after another, drawing :math:`x_i` from its distribution :math:`q_i`; the
target then reads them all in **one** step and gets its own distributions :math:`p_1, \dots, p_{k+1}` at
those positions (:math:`p_i` for the token after :math:`x_1, \dots, x_{i-1}`). The proposals are checked
in order:

- :math:`x_i` is **accepted** with probability :math:`\min\bigl(1, p_i(x_i) / q_i(x_i)\bigr)`;
- at the first rejection, the token at that position is drawn instead from the **residual**
  :math:`r_i = \max(0, p_i - q_i) / \sum_x \max(0, p_i(x) - q_i(x))`, and the later proposals are dropped;
- when all :math:`k` are accepted, a bonus token is drawn from :math:`p_{k+1}`.

Each round thus adds between 1 and :math:`k + 1` tokens for one step of the target. The rule makes every
token distributed exactly as the target's own: for one position, the probability of emitting :math:`x` is

.. math:: q(x)\min\Bigl(1, \frac{p(x)}{q(x)}\Bigr) + \Bigl(1 - \sum_y \min(p(y), q(y))\Bigr)\, r(x)
          = \min(p(x), q(x)) + \max(0, p(x) - q(x)) = p(x),

since :math:`1 - \sum_y \min(p(y), q(y)) = \sum_y \max(0, p(y) - q(y))` is the normaliser of :math:`r`;
by induction over the positions, whole sequences follow the target's distribution. "The target's
distribution" is the one :func:`~course_lib.decoding.sampling.sample_next` draws from:
:func:`~course_lib.decoding.sampling.next_token_probs` with the same temperature, top-k and top-p, applied to
both models' logits. At temperature 0 both distributions put all their mass on an argmax, a proposal is
accepted exactly when it is the target's argmax, and a rejection yields the target's argmax: the output is
the target's greedy output, token for token.

Both models are read through :class:`~course_lib.decoding.generation.LanguageModel`; their states must also
have ``len(state)`` (tokens read) and ``state.crop(length)`` (forget the rest, in place), as
:class:`~course_lib.DecoderLMState` does, so that rejected proposals are rolled back without a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from .._validation import check_non_negative_int, check_positive_int, check_tokens
from .generation import LanguageModel
from .sampling import _check_sampling, _greedy_probs, _probs

__all__ = ["SpeculativeStats", "speculative_generate"]


@dataclass(frozen=True)
class SpeculativeStats:
    """What a run of :func:`speculative_generate` did: the acceptance rate and the target steps it saved.

    Runs add up: ``sum(runs, SpeculativeStats())`` pools several prompts.

    Attributes:
        new_tokens: tokens generated.
        proposed: tokens the draft proposed (``k`` per round; fewer in a last round that needs fewer).
        accepted: proposals the target accepted.
        rejected: proposals the target rejected (at most one per round: the proposals after it are dropped
            untested).
        target_calls: the target's forward steps (one per round; the first also reads the prompt). Plain
            generation makes ``new_tokens`` of them.
        draft_calls: the draft's forward steps (one per proposal).

    Examples:
        >>> stats = SpeculativeStats(new_tokens=10, proposed=12, accepted=7, rejected=2, target_calls=3,
        ...                          draft_calls=12)
        >>> stats.acceptance_rate, stats.alpha, round(stats.tokens_per_target_call, 3)
        (0.5833333333333334, 0.7777777777777778, 3.333)
        >>> (stats + stats).accepted
        14
    """

    new_tokens: int = 0
    proposed: int = 0
    accepted: int = 0
    rejected: int = 0
    target_calls: int = 0
    draft_calls: int = 0

    @property
    def acceptance_rate(self) -> float:
        """accepted / proposed, the share of the draft's tokens kept (serving engines' "draft acceptance rate";
        NaN when nothing was proposed)."""
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def alpha(self) -> float:
        """accepted / (accepted + rejected): the share of the *tested* proposals accepted, which estimates
        Leviathan et al.'s :math:`\alpha`, the probability that a proposal passes (NaN when none was tested)."""
        tested = self.accepted + self.rejected
        return self.accepted / tested if tested else float("nan")

    @property
    def tokens_per_target_call(self) -> float:
        """new_tokens / target_calls: how many tokens one step of the target yields (1 without a draft)."""
        return self.new_tokens / self.target_calls if self.target_calls else float("nan")

    def __add__(self, other: SpeculativeStats) -> SpeculativeStats:
        if not isinstance(other, SpeculativeStats):
            return NotImplemented
        return SpeculativeStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token from (V,) non-negative weights (normalised by the draw): a () long tensor."""
    return torch.multinomial(probs, 1, generator=generator)[0]


def _accepts(ratio: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """(k,) bool: proposal i accepted with probability min(1, ratio[i]), independently (u < ratio, u ~ U[0, 1))."""
    return torch.rand(ratio.shape, generator=generator, dtype=ratio.dtype, device=ratio.device) < ratio


def _check_models(target: object, draft: object) -> None:
    for name, model in (("target", target), ("draft", draft)):
        if not isinstance(model, LanguageModel):
            raise TypeError(f"{name} must be a language model with vocab_size, init_state() and step_(tokens, "
                            f"state) (course_lib.decoding.generation.LanguageModel), got {type(model).__name__}")
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"target and draft must share one vocabulary: target.vocab_size = {target.vocab_size}, "
                         f"draft.vocab_size = {draft.vocab_size}")


def _check_state(state: Any, name: str) -> Any:
    if not (callable(getattr(state, "crop", None)) and hasattr(state, "__len__")):
        raise TypeError(f"speculative decoding rolls rejected tokens back with state.crop(length): the {name}'s "
                        f"init_state() returned a {type(state).__name__}, which has no crop or len")
    return state


@torch.no_grad()
def speculative_generate(target: LanguageModel, draft: LanguageModel, tokens: torch.Tensor, max_new_tokens: int, *,
                         k: int = 4, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                         generator: torch.Generator | None = None) -> tuple[torch.Tensor, SpeculativeStats]:
    r"""Continue a prompt with the target's distribution, ``draft`` proposing ``k`` tokens per target step.

    Each round: the draft proposes up to ``k`` tokens, each drawn from its
    :func:`~course_lib.decoding.sampling.next_token_probs` (one draft step per token, with its own cache);
    the target reads the tokens it has not read yet and the proposals in **one** step; proposal :math:`x_i`
    is accepted with probability :math:`\min(1, p_i(x_i)/q_i(x_i))`; the first rejected one is replaced by a
    draw from :math:`\max(0, p_i - q_i)` normalised, or, all accepted, a bonus token is drawn from
    :math:`p_{k+1}`; both caches then forget the rejected proposals (``state.crop``). The last round proposes
    only as many tokens as are still needed, minus one, so the output has exactly ``max_new_tokens`` new
    tokens and the target never reads past position ``T + max_new_tokens - 2``, as in plain generation.

    The output is distributed as the target's own sampling,
    ``generate(target, tokens, max_new_tokens, temperature=..., top_k=..., top_p=...)``: each token follows
    the distribution :func:`~course_lib.decoding.sampling.sample_next` draws from, for any draft (module
    docstring). At ``temperature=0`` it is the target's greedy output, token for token (up to argmax ties,
    which a step over several tokens may round differently from a step over one). The draft only changes the
    speed: how many proposals are accepted.

    One sequence at a time: sequences of a batch accept different numbers of tokens, so their caches would
    no longer line up (serving engines handle that with paged caches and per-sequence bookkeeping).

    Args:
        target: the model whose distribution the output follows (call ``.eval()`` first: dropout would act).
        draft: a cheaper model over the same vocabulary; its quality only sets the acceptance rate.
        tokens: (1, T) the prompt, ``torch.long``, T >= 1.
        max_new_tokens: how many tokens to add.
        k: the most tokens the draft proposes per round, >= 1.
        temperature: :math:`\tau \ge 0`, applied to both models; 0 is greedy.
        top_k: keep the ``top_k`` most likely tokens of both models (``None``: all).
        top_p: keep the nucleus of this mass of both models, in ``[0, 1]`` (``None``: all).
        generator: the ``torch.Generator`` of every draw, on the models' device (``None``: torch's global one).

    Returns:
        ``(out, stats)``: ``out`` (1, T + ``max_new_tokens``) the prompt and its continuation; ``stats`` a
        :class:`SpeculativeStats` (proposed, accepted and rejected tokens, target and draft steps).

    Raises:
        TypeError: a model that is not a :class:`~course_lib.decoding.generation.LanguageModel`, a state without
            ``crop``, tokens that are not ``torch.long``, a ``generator`` that is not a ``torch.Generator``.
        ValueError: models of different vocabularies, tokens not of shape (1, T) with T >= 1 or outside the
            vocabulary, ``k < 1``, a negative ``max_new_tokens`` or temperature, ``top_k < 1``, ``top_p``
            outside ``[0, 1]``.

    Examples:
        >>> cfg = lambda layers: DecoderLMConfig(vocab_size=20, num_hiddens=16, num_heads=4, num_layers=layers)
        >>> target, draft = DecoderLM(cfg(2)).eval(), DecoderLM(cfg(1)).eval()
        >>> prompt = torch.tensor([[1, 5, 7]])
        >>> out, stats = speculative_generate(target, draft, prompt, 8, k=3)  # greedy
        >>> torch.equal(out, target.generate(prompt, 8, temperature=0.0))  # the target's own greedy tokens
        True
        >>> stats.new_tokens, stats.target_calls <= 8, stats.accepted <= stats.proposed
        (8, True, True)
        >>> out, stats = speculative_generate(target, draft, prompt, 8, temperature=1.0, top_k=10,
        ...                                   generator=torch.Generator().manual_seed(0))
        >>> out.shape
        torch.Size([1, 11])
    """
    _check_models(target, draft)
    check_tokens(tokens, "tokens", "(1, T)", target.vocab_size)
    if tokens.shape[0] != 1 or tokens.shape[1] == 0:
        raise ValueError(f"tokens must have shape (1, T) with T >= 1, got {tuple(tokens.shape)}: speculative "
                         "decoding continues one sequence at a time (sequences of a batch accept different numbers "
                         "of tokens)")
    check_non_negative_int(max_new_tokens, "max_new_tokens")
    check_positive_int(k, "k")
    temperature, top_k, top_p = _check_sampling(temperature, top_k, top_p)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")

    def probs(logits: torch.Tensor) -> torch.Tensor:  # (..., V) -> (..., V): what sample_next draws from
        return _greedy_probs(logits) if temperature == 0.0 else _probs(logits, temperature, top_k, top_p)

    t_state = _check_state(target.init_state(), "target")
    d_state = _check_state(draft.init_state(), "draft")
    seq, end = tokens, tokens.shape[1] + max_new_tokens
    proposed = accepted = rejected = target_calls = draft_calls = 0
    while seq.shape[1] < end:
        n = min(k, end - seq.shape[1] - 1)  # proposals this round: a round adds at most n + 1 tokens
        # 1. The draft proposes n tokens, one step each, starting from what it has not read yet.
        x, drafted, q = seq[:, len(d_state):], [], []
        for _ in range(n):
            q.append(probs(draft.step_(x, d_state)[0, -1]))  # (V,) q_i
            drafted.append(_draw(q[-1], generator))
            x = drafted[-1].view(1, 1)
        drafted = torch.stack(drafted) if n else seq.new_empty(0)  # (n,)
        # 2. The target reads its unread tokens and the n proposals in one step: p_1 .. p_(n+1).
        t_in = torch.cat([seq[:, len(t_state):], drafted[None]], dim=1)
        p = probs(target.step_(t_in, t_state)[0, -(n + 1):])  # (n + 1, V)
        # 3. Accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), in order, up to the first rejection.
        m = 0
        if n:
            q = torch.stack(q)  # (n, V)
            rows = torch.arange(n, device=p.device)
            ratio = p[rows, drafted] / q[rows, drafted]  # q_i(x_i) > 0: x_i was drawn from q_i
            m = int(_accepts(ratio, generator).long().cumprod(0).sum())  # the accepted prefix
        if m < n:  # x_(m+1) rejected: draw from max(0, p - q), normalised by the draw
            residual = (p[m] - q[m]).clamp(min=0)
            # Rejection needs p(x) < q(x), so the residual has mass; rounding could only leave zeros when p = q.
            last = _draw(torch.where(residual.sum() > 0, residual, p[m]), generator)
        else:  # all accepted: the bonus token, from the target's next distribution
            last = _draw(p[n], generator)
        seq = torch.cat([seq, drafted[None, :m], last.view(1, 1)], dim=1)
        # 4. Both caches forget the rejected proposals; `last` is read at the next round.
        t_state.crop(seq.shape[1] - 1)
        d_state.crop(min(len(d_state), seq.shape[1] - 1))
        proposed, accepted, rejected = proposed + n, accepted + m, rejected + (m < n)
        target_calls, draft_calls = target_calls + 1, draft_calls + n
    return seq, SpeculativeStats(max_new_tokens, proposed, accepted, rejected, target_calls, draft_calls)
