r"""Rotary position embedding, RoPE (Su et al. 2021), and the attention kernel that applies it (chapter 11).

RoPE is derived from one requirement: the score of a query at position :math:`m` and a key at
position :math:`n` should depend on the positions only through :math:`m - n`,

.. math:: \langle f(\mathbf q, m), f(\mathbf k, n)\rangle = g(\mathbf q, \mathbf k, m - n).

Rotations satisfy it: split the :math:`d_h` features into :math:`d_h/2` pairs and turn pair :math:`i`
by the angle :math:`m\theta_i`, with the frequencies :math:`\theta_i = \text{base}^{-2i/d_h}` of the
sinusoidal encoding. With :math:`\mathbf R_m` the block-diagonal matrix of these 2 x 2 rotations,
:math:`\mathbf R_m^\top\mathbf R_n = \mathbf R_{n-m}`, so
:math:`(\mathbf R_m\mathbf q)^\top(\mathbf R_n\mathbf k) = \mathbf q^\top\mathbf R_{n-m}\mathbf k`.

Two layouts of the pairs are in use, the same function up to a fixed permutation of the features:

- *interleaved* (the paper, Meta's original Llama code, GPT-J): pair :math:`i` is
  :math:`(x_{2i}, x_{2i+1})`;
- *rotate-half* (GPT-NeoX, Hugging Face's Llama, the default here): pair :math:`i` is
  :math:`(x_i, x_{i + d_h/2})`.

:func:`rotary_permutation` maps one to the other; applied to the rows of each head of
:math:`\mathbf W_q` and :math:`\mathbf W_k`, it converts a model between the layouts (that is how
Hugging Face converts Meta's checkpoints).

Precision: the angles :math:`m\theta_i` are computed in float64 (float32 on Apple's MPS, which has no
float64) and their cosines and sines are then cast to the input's dtype. Hugging Face computes the
angles in float32, which moves them by up to about :math:`m \cdot 6\cdot 10^{-8}` radians.
"""

from __future__ import annotations

import torch

from ..._validation import check_bool, check_even, check_floating, check_positions, check_real
from ..contract import AttentionKernel, Capabilities, check_kernel
from ..masks import MaskMod, query_offset
from ..score_mods import ScoreMod
from .fused import fused_kernel

__all__ = ["RotaryEmbedding", "RotaryKernel", "rotary_embedding", "rotary_frequencies", "rotary_permutation"]


def _check_head_size(head_size: object, name: str = "head_size") -> int:
    return check_even(head_size, name, "RoPE turns pairs of features")


def rotary_frequencies(head_size: int, base: float = 10000.0) -> torch.Tensor:
    r"""The rotation frequencies :math:`\theta_i = \text{base}^{-2i/d_h}`, :math:`i = 0, \dots, d_h/2 - 1`.

    Args:
        head_size: :math:`d_h`, even.
        base: the base of the geometric progression (10000 in the paper; Llama 3 uses 500000).

    Returns:
        (head_size / 2,) float64, from 1 down to :math:`\text{base}^{-(d_h - 2)/d_h}`.

    Examples:
        >>> rotary_frequencies(4, base=100.0)
        tensor([1.0000, 0.1000], dtype=torch.float64)
    """
    head_size = _check_head_size(head_size)
    base = check_real(base, "base", greater_than=1.0)
    return base ** (-torch.arange(0, head_size, 2, dtype=torch.float64) / head_size)


def rotary_permutation(head_size: int) -> torch.Tensor:
    """The feature order that turns the interleaved layout into the rotate-half layout.

    ``x_half = x_interleaved[..., perm]`` puts the first element of every pair first and the second
    elements after them, so that pair ``(2i, 2i + 1)`` becomes ``(i, i + d_h/2)``; ``perm.argsort()`` is
    the way back. Hence ``rotary_embedding(x[..., perm]) == rotary_embedding(x, interleaved=True)[..., perm]``.

    Args:
        head_size: :math:`d_h`, even.

    Returns:
        (head_size,) int64: ``[0, 2, 4, ..., d_h - 2, 1, 3, ..., d_h - 1]``.

    Examples:
        >>> rotary_permutation(6)
        tensor([0, 2, 4, 1, 3, 5])
        >>> x = torch.randn(3, 6)
        >>> torch.allclose(rotary_embedding(x[..., rotary_permutation(6)]),
        ...                rotary_embedding(x, interleaved=True)[..., rotary_permutation(6)])
        True
    """
    head_size = _check_head_size(head_size)
    return torch.arange(head_size).view(head_size // 2, 2).t().flatten()


def _angle_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64


def _angles(positions: torch.Tensor, head_size: int, base: float) -> torch.Tensor:
    """(..., T) integer positions -> (..., T, d_h / 2) angles m theta_i, in float64 where the device has it."""
    dtype = _angle_dtype(positions.device)
    inv_freq = base ** (-torch.arange(0, head_size, 2, dtype=dtype, device=positions.device) / head_size)
    return positions.to(dtype).unsqueeze(-1) * inv_freq


def _rotate(x: torch.Tensor, angles: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Turn pair i of ``x`` (..., T, d_h) by ``angles`` (..., T, d_h / 2), in the given layout."""
    return _turn(x, angles.cos().to(x.dtype), angles.sin().to(x.dtype), interleaved)


def _turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Turn pair i of ``x`` (..., T, d_h) by the angle whose cosine and sine are given, (..., T, d_h / 2)."""
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d_h / 2) each: the pairs (x_2i, x_2i+1)
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    x1, x2 = x.chunk(2, dim=-1)  # the pairs (x_i, x_i+d/2)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def rotary_embedding(x: torch.Tensor, positions: torch.Tensor | None = None, *, base: float = 10000.0,
                     interleaved: bool = False) -> torch.Tensor:
    r"""Rotate every pair of features of ``x`` by its position times the pair's frequency: RoPE.

    .. math:: \begin{pmatrix} y_a \\ y_b \end{pmatrix} =
       \begin{pmatrix} \cos m\theta_i & -\sin m\theta_i \\ \sin m\theta_i & \cos m\theta_i \end{pmatrix}
       \begin{pmatrix} x_a \\ x_b \end{pmatrix},\qquad \theta_i = \text{base}^{-2i/d_h},

    with :math:`(a, b) = (i, i + d_h/2)` (rotate-half, as Hugging Face's Llama) or :math:`(2i, 2i+1)`
    (``interleaved``, as the paper). Apply it to the queries and the keys (never the values): then
    :math:`\langle\mathrm{RoPE}(\mathbf q, m), \mathrm{RoPE}(\mathbf k, n)\rangle` depends on :math:`m - n` only.

    Args:
        x: (..., T, d_h) queries or keys, :math:`d_h` even; with heads, (B, H, T, d_h).
        positions: the positions of the T rows, integers (a tensor or a list): (T,), or any shape that
            broadcasts to ``x.shape[:-1]`` with T in its last axis (e.g. (B, 1, T), one row per
            sequence). Default ``0, ..., T - 1``.
        base: of the frequencies (:func:`rotary_frequencies`); > 1.
        interleaved: pairs :math:`(x_{2i}, x_{2i+1})` instead of :math:`(x_i, x_{i+d_h/2})`.

    Returns:
        Shaped and typed like ``x``; norms are preserved and position 0 is left unchanged.

    Raises:
        TypeError: ``x`` not floating point, ``positions`` not integers, ``interleaved`` not a bool.
        ValueError: an odd :math:`d_h`, ``positions`` of a shape that does not fit ``x``, ``base <= 1``.

    Examples:
        >>> x = torch.tensor([[1.0, 0.0]])  # one row, one pair
        >>> rotary_embedding(x, positions=[1], base=10.0)  # turned by 1 radian: (cos 1, sin 1)
        tensor([[0.5403, 0.8415]])
        >>> q, k = torch.randn(1, 4), torch.randn(1, 4)
        >>> s_72 = rotary_embedding(q, [7]) @ rotary_embedding(k, [2]).T
        >>> s_50 = rotary_embedding(q, [5]) @ rotary_embedding(k, [0]).T
        >>> torch.allclose(s_72, s_50, atol=1e-5)  # only m - n = 5 matters
        True
    """
    check_floating(x, "x")
    if x.dim() < 2:
        raise ValueError(f"x must be at least 2-D (..., T, d_h), got shape {tuple(x.shape)}")
    head_size = _check_head_size(x.shape[-1], "the last axis of x (the head size d_h)")
    base = check_real(base, "base", greater_than=1.0)
    check_bool(interleaved, "interleaved")
    if positions is None:
        positions = torch.arange(x.shape[-2], device=x.device)
    else:
        positions = check_positions(positions, tuple(x.shape[:-1])).to(x.device)
    return _rotate(x, _angles(positions, head_size, base), interleaved)


class RotaryKernel:
    r"""Attention with rotary positions: rotate the queries and keys by their positions, then attend with ``inner``.

    A kernel (registered as ``"rotary"``) that wraps another, so that ``MultiHeadAttention(d, h,
    kernel=RotaryKernel())`` is rotary self-attention without a change to the module. The positions are
    the library's bottom-right convention: keys at ``0 .. n_keys - 1``, the queries at the last
    ``n_queries`` of them. A :class:`~course_lib.attention.cache.KVCache` therefore keeps *unrotated* keys,
    and the kernel rotates all of them at each step: since only the differences of positions matter,
    this gives the scores of rotating each key once at its absolute position (as Hugging Face does), and
    stays right when a cache is trimmed or offset (a sliding window) or when a sequence is left-padded
    with masked keys.

    Args:
        inner: the kernel that attends to the rotated queries and keys (default the fused kernel; by name,
            ``attention_kernel("rotary", inner="flash")``).
        base: of the frequencies (:func:`rotary_frequencies`); > 1.
        interleaved: the pair layout (:func:`rotary_embedding`).

    Examples:
        >>> mha = MultiHeadAttention(16, 4, num_kv_heads=2, kernel=RotaryKernel())
        >>> x = torch.randn(2, 5, 16)
        >>> mha(x, x, x, causal=True).shape
        torch.Size([2, 5, 16])
        >>> q = k = v = torch.randn(1, 1, 3, 4)
        >>> out, _ = RotaryKernel(explicit_kernel)(q, k, v, causal=True)
        >>> by_hand, _ = explicit_kernel(rotary_embedding(q), rotary_embedding(k), v, causal=True)
        >>> torch.allclose(out, by_hand)
        True
    """

    name = "rotary"

    def __init__(self, inner: AttentionKernel = fused_kernel, *, base: float = 10000.0,
                 interleaved: bool = False) -> None:
        self.inner = check_kernel(inner, "inner")
        self.base = check_real(base, "base", greater_than=1.0)
        self.interleaved = check_bool(interleaved, "interleaved")

    @property
    def supports(self) -> Capabilities:
        """What the inner kernel supports."""
        return self.inner.supports

    def __repr__(self) -> str:
        layout = ", interleaved=True" if self.interleaved else ""
        return f"RotaryKernel({self.inner!r}, base={self.base:g}{layout})"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False, dropout_p: float = 0.0,
                 scale: float | None = None, score_mod: ScoreMod | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args and returns: see :mod:`course_lib.attention.contract`; ``d`` must be even."""
        n_q, n_k, head_size = q.shape[-2], k.shape[-2], q.shape[-1]
        if head_size % 2:
            raise ValueError(f"RotaryKernel needs an even head size (it rotates pairs of features), got queries "
                             f"of shape {tuple(q.shape)}")
        # One table for positions min(0, offset) .. n_k - 1: the keys use its last n_k rows, the queries
        # its last n_q rows (bottom-right aligned).
        start = min(0, query_offset(n_q, n_k))
        angles = _angles(torch.arange(start, n_k, device=q.device), head_size, self.base)  # (n, d_h / 2)
        q = _rotate(q, angles[angles.shape[0] - n_q:], self.interleaved)
        k = _rotate(k, angles[angles.shape[0] - n_k:], self.interleaved)
        return self.inner(q, k, v, mask, causal=causal, dropout_p=dropout_p, scale=scale, score_mod=score_mod,
                          need_weights=need_weights)


class RotaryEmbedding:
    r"""RoPE where a model makes its keys: each key rotated once, at its position, before it enters the cache.

    :class:`RotaryKernel` rotates the queries and *all* keys at every call, so that the cache holds unrotated
    keys and a decoding step re-rotates the whole cache (O(T) work per step, per layer). Serving engines
    (Hugging Face, vLLM, llama.cpp) rotate each new key once, at its absolute position, and cache it rotated:
    since a score depends only on the difference of positions, the two give the same attention (tested).
    A :class:`~course_lib.MultiHeadAttention` given ``rotary=RotaryEmbedding(...)`` does this: the new queries
    and keys are rotated at positions ``cache.position, cache.position + 1, ...`` before the cache's update.

    The cosines and sines of every position are kept in a table (angles in float64, as
    :func:`rotary_embedding` computes them, cast to the inputs' dtype), extended by doubling when a longer
    sequence comes, so a step looks its positions up instead of computing them.

    Args:
        head_size: :math:`d_h`, even.
        base: of the frequencies (:func:`rotary_frequencies`); > 1.
        interleaved: the pair layout (:func:`rotary_embedding`).

    Examples:
        >>> rope = RotaryEmbedding(4)
        >>> x = torch.randn(1, 2, 3, 4)  # (B, H, T, d_h)
        >>> torch.allclose(rope(x, start=5), rotary_embedding(x, positions=[5, 6, 7]))
        True
    """

    def __init__(self, head_size: int, base: float = 10000.0, *, interleaved: bool = False) -> None:
        self.head_size = _check_head_size(head_size)
        self.base = check_real(base, "base", greater_than=1.0)
        self.interleaved = check_bool(interleaved, "interleaved")
        self._tables: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def __repr__(self) -> str:
        layout = ", interleaved=True" if self.interleaved else ""
        return f"RotaryEmbedding({self.head_size}, base={self.base:g}{layout})"

    def table(self, stop: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The cosines and sines of positions ``0 .. stop - 1`` at least: two (n, d_h / 2) tensors, n >= ``stop``.

        Examples:
            >>> cos, sin = RotaryEmbedding(4, base=100.0).table(2, torch.device("cpu"), torch.float64)
            >>> cos[1].tolist()  # cos(1 x 1), cos(1 x 0.1)
            [0.5403023058681398, 0.9950041652780258]
        """
        key = (device, dtype)
        cos, sin = self._tables.get(key, (None, None))
        if cos is None or cos.shape[0] < stop:
            n = max(stop, 64, 2 * (0 if cos is None else cos.shape[0]))
            angles = _angles(torch.arange(n, device=device), self.head_size, self.base)
            cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
            self._tables[key] = (cos, sin)
        return cos, sin

    def __call__(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Rotate ``x`` (..., T, d_h) at the positions ``start .. start + T - 1``.

        Returns:
            Shaped and typed like ``x``.
        """
        n = x.shape[-2]
        cos, sin = self.table(start + n, x.device, x.dtype)
        return _turn(x, cos[start:start + n], sin[start:start + n], self.interleaved)
