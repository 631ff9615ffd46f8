r"""Choosing the next token from a language model's logits: temperature, top-k, top-p (chapter 12).

A language model gives, at each step, logits :math:`\mathbf z \in \mathbb R^V` over the vocabulary.
Sampling draws the next token from :math:`\operatorname{softmax}(\mathbf z / \tau)`; the temperature
:math:`\tau` sharpens (:math:`\tau < 1`) or flattens (:math:`\tau > 1`) the distribution, and as
:math:`\tau \to 0` it puts all its mass on the argmax: greedy decoding. Two filters cut off the unlikely
tail before the draw, so that one rare token cannot derail a sample:

- **top-k** keeps the :math:`k` largest logits (Fan et al. 2018);
- **top-p**, *nucleus sampling* (Holtzman et al. 2020), keeps the smallest set of most likely tokens
  whose probabilities add up to at least :math:`p`: few tokens where the model is sure, many where it
  is not.

Both return the logits with :math:`-\infty` outside the kept set, so they compose with each other and
with the temperature (``softmax`` gives the removed tokens probability 0). The set depends on the values
only, never on the order of the vocabulary: tokens *tied* with the last kept one are all kept, and the
most likely token (with its ties) is always kept. :func:`sample_next` applies temperature, top-k and
top-p in that order (as Hugging Face's ``generate`` does) and draws one token per row;
:func:`next_token_probs` gives the distribution it draws from (speculative decoding compares two of
them). Shapes: ``V`` is the vocabulary size, ``...`` any leading axes (a batch).
"""

from __future__ import annotations

import torch

from .._validation import check_floating, check_int, check_real

__all__ = ["next_token_probs", "sample_next", "top_k_filter", "top_p_filter"]


def _check_logits(logits: object, name: str = "logits") -> torch.Tensor:
    """A floating tensor (..., V), V >= 1, without NaN or +inf, each row with a finite entry."""
    check_floating(logits, name)
    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise ValueError(f"{name} must have shape (..., V) with V >= 1, got {tuple(logits.shape)}")
    # Generation calls this at every step: one reduction and one synchronisation in the usual case (all finite),
    # both checks at once otherwise.
    if bool(torch.isfinite(logits).all()):
        return logits
    bad, dead = torch.stack([(torch.isnan(logits) | (logits == float("inf"))).any(),
                             (logits == float("-inf")).all(dim=-1).any()]).tolist()
    if bad:
        raise ValueError(f"{name} must not hold NaN or +inf")
    if dead:
        raise ValueError(f"every row of {name} must hold at least one finite logit (a row is all -inf)")
    return logits


def _check_top_k(k: object, name: str = "k") -> int:
    check_int(k, name)
    if k < 1:
        raise ValueError(f"{name} must be a positive int (the number of tokens kept), got {k}")
    return int(k)


def _check_top_p(p: object, name: str = "p") -> float:
    p = check_real(p, name)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be in [0, 1] (a probability mass), got {p}")
    return p


def _top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    if k >= logits.shape[-1]:
        return logits.clone()
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest logit
    return logits.masked_fill(logits < kth, float("-inf"))


def _top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    if p >= 1.0:
        return logits.clone()
    ordered = logits.sort(dim=-1, descending=True).values  # (..., V)
    probs = torch.softmax(ordered.float() if ordered.dtype in (torch.float16, torch.bfloat16) else ordered, dim=-1)
    above = probs.cumsum(dim=-1) - probs  # (..., V) the mass of the tokens before each one in this order
    n_keep = (above < p).sum(dim=-1, keepdim=True).clamp(min=1)  # (..., 1) a prefix; >= 1: the top stays
    last = ordered.gather(-1, n_keep - 1)  # (..., 1) the smallest kept logit
    return logits.masked_fill(logits < last, float("-inf"))


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    r"""The logits of the ``k`` most likely tokens of each row, :math:`-\infty` for the others.

    Token :math:`i` is kept when :math:`z_i` is at least the :math:`k`-th largest logit of its row. Ties:
    every token equal to the :math:`k`-th largest is kept, so a row may keep more than :math:`k`
    tokens, and the kept set does not depend on the order of the vocabulary. :math:`k \ge V` keeps every
    token; :math:`k = 1` keeps the argmax (and its ties).

    Args:
        logits: (..., V) floating-point; no NaN, every row with a finite entry.
        k: a positive int.

    Returns:
        (..., V), a new tensor of ``logits``' dtype: the kept logits unchanged, the others ``-inf``.

    Raises:
        TypeError: ``logits`` is not a floating-point tensor, or ``k`` not an int.
        ValueError: ``k < 1``, or ``logits`` of shape ``()`` / ``(..., 0)``, holding NaN or +inf, or with a
            row of ``-inf`` only.

    Examples:
        >>> logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
        >>> top_k_filter(logits, 2)
        tensor([[-inf, 3., 2., -inf]])
        >>> top_k_filter(torch.tensor([2.0, 1.0, 2.0, 0.0]), 1)  # a tie at the top: both kept
        tensor([2., -inf, 2., -inf])
    """
    return _top_k(_check_logits(logits), _check_top_k(k))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    r"""Nucleus filtering: keep the most likely tokens until their probability reaches ``p`` (Holtzman et al. 2020).

    With :math:`\pi = \operatorname{softmax}(\mathbf z)` of a row, token :math:`i` is kept when the tokens
    *strictly more likely* than it hold less than :math:`p` of the mass,

    .. math:: \sum_{j:\ \pi_j > \pi_i} \pi_j < p ,

    which, the tokens sorted by probability, keeps the shortest prefix whose mass reaches :math:`p`. Ties
    with the last kept token are all kept (the set does not depend on the order of the vocabulary), and
    the most likely token is always kept (its "mass above" is 0). Edge cases: as :math:`p \to 0` only the
    most likely token (and its ties) remains, which is greedy decoding, and ``p = 0`` gives exactly that;
    ``p = 1`` keeps every token: the logits are returned unchanged (a copy), whatever the rounding of the
    cumulative sum. The probabilities are computed in the logits' dtype (float32 for half precision).

    Args:
        logits: (..., V) floating-point; no NaN, every row with a finite entry.
        p: the mass to reach, in ``[0, 1]``.

    Returns:
        (..., V), a new tensor of ``logits``' dtype: the kept logits unchanged, the others ``-inf``.

    Raises:
        TypeError: ``logits`` is not a floating-point tensor, or ``p`` not a real number.
        ValueError: ``p`` outside ``[0, 1]``; ``logits`` of shape ``()`` / ``(..., 0)``, holding NaN or
            +inf, or with a row of ``-inf`` only.

    Examples:
        >>> logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()  # probabilities 0.5, 0.3, 0.15, 0.05
        >>> top_p_filter(logits, 0.75).exp()  # 0.5 < 0.75, then 0.5 + 0.3 >= 0.75: two tokens
        tensor([0.5000, 0.3000, 0.0000, 0.0000])
        >>> top_p_filter(logits, 0.8).exp()  # the mass before the third token is 0.8, not < 0.8
        tensor([0.5000, 0.3000, 0.0000, 0.0000])
        >>> top_p_filter(logits, 0.0).exp()  # p -> 0: the most likely token only (greedy)
        tensor([0.5000, 0.0000, 0.0000, 0.0000])
    """
    return _top_p(_check_logits(logits), _check_top_p(p))


def _check_sampling(temperature: object, top_k: object, top_p: object) -> tuple[float, int | None, float | None]:
    temperature = check_real(temperature, "temperature", at_least=0.0)
    if top_k is not None:
        top_k = _check_top_k(top_k, "top_k")
    if top_p is not None:
        top_p = _check_top_p(top_p, "top_p")
    return temperature, top_k, top_p


def _probs(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """:func:`next_token_probs` for checked arguments, ``temperature > 0``."""
    # Shifted by the row's maximum first (softmax does not see it), so that a tiny temperature gives
    # -inf or large negative numbers, never +inf and NaN.
    z = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if top_k is not None:
        z = _top_k(z, top_k)
    if top_p is not None:
        z = _top_p(z, top_p)
    return torch.softmax(z.float() if z.dtype in (torch.float16, torch.bfloat16) else z, dim=-1)


def _greedy_probs(logits: torch.Tensor) -> torch.Tensor:
    """The limit temperature -> 0: probability 1 on the argmax of each row (the first index on a tie)."""
    dtype = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype
    probs = torch.zeros(logits.shape, dtype=dtype, device=logits.device)
    return probs.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)


def next_token_probs(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> torch.Tensor:
    r"""The probabilities :func:`sample_next` draws from: softmax(z / tau), after top-k and top-p.

    The same steps as :func:`sample_next`, in its order (temperature, then :func:`top_k_filter`, then
    :func:`top_p_filter` of the tempered distribution), ending with the probabilities instead of a draw:
    ``sample_next(logits, ...)`` returns token ``i`` with probability ``next_token_probs(logits, ...)[..., i]``.
    ``temperature=0`` gives the limit :math:`\tau \to 0`: probability 1 on the argmax (the first index on a
    tie), the token ``sample_next`` returns there.

    Args:
        logits: (..., V) floating-point next-token logits (no NaN, every row with a finite entry).
        temperature: :math:`\tau \ge 0`.
        top_k: keep the ``top_k`` most likely tokens (``None``: all).
        top_p: keep the nucleus of this mass, in ``[0, 1]`` (``None``: all).

    Returns:
        (..., V) probabilities (each row sums to 1; 0 outside the kept set), in the logits' dtype (float32
        for half precision).

    Raises:
        TypeError or ValueError naming the argument, as :func:`sample_next`.

    Examples:
        >>> logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
        >>> next_token_probs(logits, top_k=2)  # softmax of (2, 1): the two most likely tokens
        tensor([0.7311, 0.2689, 0.0000, 0.0000])
        >>> next_token_probs(logits, temperature=0.0)  # greedy: all the mass on the argmax
        tensor([1., 0., 0., 0.])
    """
    logits = _check_logits(logits)
    temperature, top_k, top_p = _check_sampling(temperature, top_k, top_p)
    return _greedy_probs(logits) if temperature == 0.0 else _probs(logits, temperature, top_k, top_p)


def sample_next(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    r"""Draw one token per row from :math:`\operatorname{softmax}(\mathbf z/\tau)`, filtered by top-k and top-p.

    In order: the logits are divided by the temperature :math:`\tau`, :func:`top_k_filter` keeps the
    ``top_k`` largest, :func:`top_p_filter` keeps the nucleus of mass ``top_p`` *of the tempered and
    top-k-filtered distribution*, and one token is drawn from the softmax of what remains.
    ``temperature=0`` is the limit :math:`\tau \to 0`: the argmax of each row (the first index on a tie),
    without a draw (``generator`` is not used); since the filters always keep the most likely token,
    ``top_k`` and ``top_p`` do not change it.

    Args:
        logits: (..., V) floating-point next-token logits (no NaN, every row with a finite entry).
        temperature: :math:`\tau \ge 0`.
        top_k: keep the ``top_k`` most likely tokens (``None``: all).
        top_p: keep the nucleus of this mass, in ``[0, 1]`` (``None``: all).
        generator: the ``torch.Generator`` of the draw, on the logits' device (``None``: torch's global one).

    Returns:
        (...) ``torch.long`` token ids in ``[0, V)``, on the logits' device.

    Raises:
        TypeError or ValueError naming the argument: a bad tensor, a negative or non-finite temperature,
        ``top_k < 1``, ``top_p`` outside ``[0, 1]``, a ``generator`` that is not a ``torch.Generator``.

    Examples:
        >>> logits = torch.tensor([[2.0, 1.0, 0.5, -1.0], [0.0, 0.0, 3.0, 0.0]])
        >>> sample_next(logits, temperature=0.0)  # greedy: the argmax of each row
        tensor([0, 2])
        >>> g = torch.Generator().manual_seed(0)
        >>> draws = sample_next(logits[0].expand(1000, 4), top_k=2, generator=g)
        >>> sorted(set(draws.tolist()))  # only the two most likely tokens are ever drawn
        [0, 1]
        >>> sample_next(logits, top_p=0.5, generator=g)  # row 0: 0.61 >= 0.5, the nucleus is token 0
        tensor([0, 2])
    """
    logits = _check_logits(logits)
    temperature, top_k, top_p = _check_sampling(temperature, top_k, top_p)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = _probs(logits, temperature, top_k, top_p)
    flat = probs.reshape(-1, probs.shape[-1])  # multinomial takes (B, V)
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])
