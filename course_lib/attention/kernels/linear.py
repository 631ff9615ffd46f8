r"""Linear attention: Nadaraya–Watson smoothing with a feature-map kernel, in O(n) (chapter 10).

Chapter 2's Nadaraya–Watson estimator weighs the values by a kernel of query and key,
:math:`\hat{\mathbf v}(\mathbf q) = \sum_j k(\mathbf q, \mathbf k_j)\,\mathbf v_j / \sum_j k(\mathbf q, \mathbf k_j)`.
Softmax attention is that estimator with :math:`k(\mathbf q, \mathbf k) = \exp(\mathbf q\cdot\mathbf k/\sqrt d)`
(:func:`nadaraya_watson_attention` computes it for any kernel). Linear attention (Katharopoulos et al.
2020) takes a kernel that is a dot product of features,
:math:`k(\mathbf q, \mathbf k) = \phi(\mathbf q)\cdot\phi(\mathbf k)` with
:math:`\phi(x) = \operatorname{elu}(x) + 1 > 0`; then associativity moves the sum over keys inside:

.. math:: \hat{\mathbf v}_i = \frac{\phi(\mathbf q_i)^\top \sum_j \phi(\mathbf k_j)\mathbf v_j^\top}
          {\phi(\mathbf q_i)^\top \sum_j \phi(\mathbf k_j)}
          = \frac{\phi(\mathbf q_i)^\top \mathbf S}{\phi(\mathbf q_i)^\top \mathbf z},

and :math:`\mathbf S` (:math:`d_\phi \times d_v`) and :math:`\mathbf z` (:math:`d_\phi`) are computed once for
all queries: O(n) time and memory instead of O(n^2). With the causal rule the sums run over
:math:`j \le i` and become a recurrence, an RNN whose state is :math:`(\mathbf S_t, \mathbf z_t)`
(:func:`linear_attention_step`):
:math:`\mathbf S_t = \mathbf S_{t-1} + \phi(\mathbf k_t)\mathbf v_t^\top`,
:math:`\mathbf z_t = \mathbf z_{t-1} + \phi(\mathbf k_t)`.

:func:`linear_attention` computes this in three equal ways (``mode``): ``"parallel"`` (every position at
once; with ``causal``, prefix sums of the outer products), ``"recurrent"`` (the RNN, one step per
position), ``"chunked"`` (the quadratic form inside chunks of ``chunk_size`` positions, the state carried
from chunk to chunk). :class:`LinearKernel` plugs it into :class:`~course_lib.MultiHeadAttention`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..._validation import (
    check_bool,
    check_choice,
    check_keep_mask,
    check_key_mask,
    check_positive_int,
    check_qkv,
)
from ..contract import Capabilities, check_supported, kv_groups, repeat_kv
from ..masks import MaskMod, keep_mask, query_offset
from ..score_mods import ScoreMod

__all__ = ["LINEAR_ATTENTION_MODES", "LinearAttentionState", "LinearKernel", "elu_feature_map",
           "feature_map_kernel", "linear_attention", "linear_attention_step", "nadaraya_watson_attention"]

LINEAR_ATTENTION_MODES = ("parallel", "recurrent", "chunked")

FeatureMap = Callable[[torch.Tensor], torch.Tensor]


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    r"""The feature map of Katharopoulos et al. (2020), :math:`\phi(x) = \operatorname{elu}(x) + 1`, elementwise.

    Positive everywhere (so every kernel value :math:`\phi(\mathbf q)\cdot\phi(\mathbf k)` is positive and
    the Nadaraya–Watson weights are defined), and the identity plus one for :math:`x > 0`.

    Args:
        x: (..., d) queries or keys.

    Returns:
        (..., d) features.

    Examples:
        >>> elu_feature_map(torch.tensor([-1.0, 0.0, 2.0]))
        tensor([0.3679, 1.0000, 3.0000])
    """
    return F.elu(x) + 1


def feature_map_kernel(feature_map: FeatureMap | None = None) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    r"""The kernel :math:`k(\mathbf q, \mathbf k) = \phi(\mathbf q)\cdot\phi(\mathbf k)` as a function of q and k.

    Args:
        feature_map: :math:`\phi`, elementwise or (..., d) -> (..., d_phi); default :func:`elu_feature_map`.

    Returns:
        A function ``(q (..., n_q, d), k (..., n_k, d)) -> (..., n_q, n_k)`` of kernel values, for
        :func:`nadaraya_watson_attention`.

    Examples:
        >>> kernel = feature_map_kernel()
        >>> kernel(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 0.0], [1.0, -1.0]]))
        tensor([[3.0000, 2.7358]])
    """
    phi = elu_feature_map if feature_map is None else _check_feature_map(feature_map)
    return lambda q, k: phi(q) @ phi(k).transpose(-2, -1)


def nadaraya_watson_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              similarity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                              mask: torch.Tensor | None = None, *, causal: bool = False
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Chapter 2's Nadaraya–Watson estimator with any kernel of query and key: attention written as smoothing.

    .. math:: \alpha_{ij} = \frac{k(\mathbf q_i, \mathbf k_j)}{\sum_{j'} k(\mathbf q_i, \mathbf k_{j'})},\qquad
              \hat{\mathbf v}_i = \sum_j \alpha_{ij} \mathbf v_j .

    With :math:`k = \exp(\mathbf q\cdot\mathbf k/\sqrt d)` it is softmax attention; with
    :func:`feature_map_kernel` it is linear attention, computed the O(n^2) way (the weights are formed);
    with a Gaussian kernel of 1-D inputs it is :func:`course_lib.nadaraya_watson`. Masked pairs get
    weight 0; a query whose kernel values are all 0 gets all-zero weights and the zero vector.

    Args:
        q: (..., n_q, d) queries; k: (..., n_k, d) keys; v: (..., n_k, d_v) values (leading axes broadcast).
        similarity: the kernel, ``(q, k) -> (..., n_q, n_k)`` non-negative values.
        mask: optional bool keep-mask broadcastable to (..., n_q, n_k), ``True`` = attend.
        causal: the bottom-right aligned look-ahead rule, and-ed with ``mask``.

    Returns:
        ``(output, weights)``: (..., n_q, d_v) and (..., n_q, n_k), rows summing to 1 (or 0).

    Examples:
        >>> q, k, v = torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)
        >>> softmax_kernel = lambda q, k: torch.exp(q @ k.transpose(-2, -1) / 2)  # exp(q.k / sqrt(4))
        >>> out, _ = nadaraya_watson_attention(q, k, v, softmax_kernel, causal=True)
        >>> reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out, reference, atol=1e-6)
        True
    """
    check_qkv(q, k, v, same_size=False)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    if mask is not None:
        check_keep_mask(mask, (*lead, q.shape[-2], k.shape[-2]))
    check_bool(causal, "causal")
    if not callable(similarity):
        raise TypeError(f"similarity must be a function (q, k) -> kernel values, got {type(similarity).__name__}")
    values = similarity(q, k)  # (..., n_q, n_k)
    keep = keep_mask(mask, causal, q.shape[-2], k.shape[-2], q.device)
    if keep is not None:
        values = values.masked_fill(~keep, 0.0)
    total = values.sum(-1, keepdim=True)
    weights = values / total.masked_fill(total == 0, 1.0)
    return weights @ v, weights


class LinearAttentionState(NamedTuple):
    r"""The recurrent state of causal linear attention after t steps.

    Attributes:
        S: (..., d_phi, d_v), :math:`\sum_{j \le t} \phi(\mathbf k_j)\mathbf v_j^\top`.
        z: (..., d_phi), :math:`\sum_{j \le t} \phi(\mathbf k_j)`.

    Examples:
        >>> q, v = torch.randn(2, 5, 4), torch.randn(2, 5, 3)  # d = d_phi = 4 (elu + 1 features), d_v = 3
        >>> state = None
        >>> for t in range(5):
        ...     out, state = linear_attention_step(q[:, t], q[:, t], v[:, t], state)
        >>> state.S.shape, state.z.shape  # the same size after 5 steps as after 1
        (torch.Size([2, 4, 3]), torch.Size([2, 4]))
        >>> torch.allclose(out, linear_attention(q, q, v, causal=True)[:, -1], atol=1e-5)
        True
    """

    S: torch.Tensor
    z: torch.Tensor


def _step(state: LinearAttentionState | None, fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor
          ) -> tuple[torch.Tensor, LinearAttentionState]:
    """One RNN step on features: fq, fk (..., d_phi), v (..., d_v)."""
    outer = fk[..., :, None] * v[..., None, :]  # phi(k_t) v_t^T: (..., d_phi, d_v)
    S, z = (outer, fk) if state is None else (state.S + outer, state.z + fk)
    num = (fq[..., None, :] @ S).squeeze(-2)  # (..., d_v)
    den = (fq * z).sum(-1, keepdim=True)
    return num / den.masked_fill(den == 0, 1.0), LinearAttentionState(S, z)


def linear_attention_step(q_t: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor,
                          state: LinearAttentionState | None = None, *, feature_map: FeatureMap | None = None
                          ) -> tuple[torch.Tensor, LinearAttentionState]:
    r"""One step of causal linear attention as an RNN: update the state with the new key and value, read it out.

    .. math:: \mathbf S_t = \mathbf S_{t-1} + \phi(\mathbf k_t)\mathbf v_t^\top,\quad
              \mathbf z_t = \mathbf z_{t-1} + \phi(\mathbf k_t),\quad
              \hat{\mathbf v}_t = \frac{\phi(\mathbf q_t)^\top\mathbf S_t}{\phi(\mathbf q_t)^\top\mathbf z_t}.

    The state has a fixed size, (d_phi x d_v) + d_phi per head, however many steps came before: a
    decoder with linear attention needs no growing key/value cache.

    Args:
        q_t, k_t: (..., d) the query and key of step t; v_t: (..., d_v) its value.
        state: the state after step t - 1, ``None`` before the first step.
        feature_map: :math:`\phi` (default :func:`elu_feature_map`).

    Returns:
        ``(output, state)``: (..., d_v), and the :class:`LinearAttentionState` after step t.

    Examples:
        >>> q, k, v = torch.randn(6, 4), torch.randn(6, 4), torch.randn(6, 3)
        >>> state, outs = None, []
        >>> for t in range(6):
        ...     out, state = linear_attention_step(q[t], k[t], v[t], state)
        ...     outs.append(out)
        >>> state.S.shape, torch.allclose(torch.stack(outs), linear_attention(q, k, v, causal=True), atol=1e-6)
        (torch.Size([4, 3]), True)
    """
    check_qkv(q_t.unsqueeze(-2), k_t.unsqueeze(-2), v_t.unsqueeze(-2))
    phi = elu_feature_map if feature_map is None else _check_feature_map(feature_map)
    if state is not None and not isinstance(state, LinearAttentionState):
        raise TypeError(f"state must be a LinearAttentionState or None, got {type(state).__name__}")
    return _step(state, phi(q_t), phi(k_t), v_t)


def _check_feature_map(feature_map: object) -> FeatureMap:
    if not callable(feature_map):
        raise TypeError(f"feature_map must be a function of a tensor (or None), got {type(feature_map).__name__}")
    return feature_map


def _parallel(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Numerator (..., n, d_v) and denominator (..., n, 1) with every position at once."""
    if not causal:  # phi(Q) (phi(K)^T V): (n, d_phi) @ (d_phi, d_v), never (n, n)
        return fq @ (fk.transpose(-2, -1) @ v), fq @ fk.sum(-2).unsqueeze(-1)
    # S_i = sum_{j <= i} phi(k_j) v_j^T: (..., n, d_phi, d_v)
    S = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=-3)
    z = torch.cumsum(fk, dim=-2)  # (..., n, d_phi)
    return (fq[..., None, :] @ S).squeeze(-2), (fq * z).sum(-1, keepdim=True)


def _recurrent(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The RNN: one state update per key; causal queries read the state at their own step."""
    lead = torch.broadcast_shapes(fq.shape[:-2], fk.shape[:-2], v.shape[:-2])
    S = torch.zeros(*lead, fk.shape[-1], v.shape[-1], dtype=fq.dtype, device=fq.device)
    z = torch.zeros(*lead, fk.shape[-1], dtype=fq.dtype, device=fq.device)
    nums, dens = [], []
    for t in range(fk.shape[-2]):
        S = S + fk[..., t, :, None] * v[..., t, None, :]
        z = z + fk[..., t, :]
        if causal:
            nums.append((fq[..., t, None, :] @ S).squeeze(-2))
            dens.append((fq[..., t, :] * z).sum(-1, keepdim=True))
    if causal and nums:
        return torch.stack(nums, -2), torch.stack(dens, -2)
    return fq @ S, fq @ z.unsqueeze(-1)  # without the causal rule every query reads the final state


def _chunked(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, causal: bool,
             chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The quadratic form inside chunks of ``chunk`` positions, the state summed over the chunks before."""
    n = fq.shape[-2]
    # Pad to whole chunks: zero features add nothing, and the padded queries are dropped.
    fq, fk, v = (F.pad(t, (0, 0, 0, -t.shape[-2] % chunk)).unflatten(-2, (-1, chunk)) for t in (fq, fk, v))
    S = fk.transpose(-2, -1) @ v  # each chunk's phi(K_c)^T V_c: (..., n_c, d_phi, d_v)
    z = fk.sum(-2)  # (..., n_c, d_phi)
    if not causal:
        num, den = fq @ S.sum(-3, keepdim=True), fq @ z.sum(-2)[..., None, :, None]
    else:
        # The state of the chunks strictly before each chunk: an exclusive prefix sum over chunks.
        S_before = torch.cumsum(F.pad(S, (0, 0, 0, 0, 1, 0))[..., :-1, :, :], dim=-3)
        z_before = torch.cumsum(F.pad(z, (0, 0, 1, 0))[..., :-1, :], dim=-2)
        within = (fq @ fk.transpose(-2, -1)).tril()  # (..., n_c, C, C): phi(q_i).phi(k_j) for j <= i in the chunk
        num = fq @ S_before + within @ v
        den = fq @ z_before.unsqueeze(-1) + within.sum(-1, keepdim=True)
    return num.flatten(-3, -2)[..., :n, :], den.flatten(-3, -2)[..., :n, :]


def _linear(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
            feature_map: FeatureMap | None, mode: str, chunk_size: int) -> torch.Tensor:
    """Linear attention on checked inputs; ``mask`` a key mask (..., 1, n_k) or None."""
    groups = kv_groups(q, k)
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # grouped-query heads: one key/value head per query head
    phi = elu_feature_map if feature_map is None else feature_map
    fq, fk = phi(q), phi(k)  # (..., n, d_phi)
    if mask is not None:  # a padded key gets zero features: it adds nothing to S or z
        fk = fk * mask.transpose(-2, -1).to(fk.dtype) if mask.dim() >= 2 else fk * mask[..., None].to(fk.dtype)
    n_q, n_k = q.shape[-2], k.shape[-2]
    front = 0
    if causal and n_q != n_k:  # align bottom-right by zero rows in front: query i sits at key i + n_k - n_q
        front = query_offset(n_q, n_k)
        if front > 0:
            fq = F.pad(fq, (0, 0, front, 0))
        else:
            fk, v = F.pad(fk, (0, 0, -front, 0)), F.pad(v, (0, 0, -front, 0))
    if mode == "parallel":
        num, den = _parallel(fq, fk, v, causal)
    elif mode == "recurrent":
        num, den = _recurrent(fq, fk, v, causal)
    else:
        num, den = _chunked(fq, fk, v, causal, chunk_size)
    out = num / den.masked_fill(den == 0, 1.0)  # no key (or all features 0): num = 0, the output 0
    return out[..., max(front, 0):, :]


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                     causal: bool = False, feature_map: FeatureMap | None = None, mode: str = "parallel",
                     chunk_size: int = 64) -> torch.Tensor:
    r"""Linear attention (Katharopoulos et al. 2020): softmax's kernel replaced by a dot product of features.

    :math:`\hat{\mathbf v}_i = \phi(\mathbf q_i)^\top\mathbf S / \phi(\mathbf q_i)^\top\mathbf z` with
    :math:`\mathbf S = \sum_j \phi(\mathbf k_j)\mathbf v_j^\top`, :math:`\mathbf z = \sum_j \phi(\mathbf k_j)`
    (sums over :math:`j \le i + n_k - n_q` with ``causal``): O(n) in the sequence length. The three modes give
    the same result up to rounding:

    - ``"parallel"``: every position at once (with ``causal``, prefix sums of the outer products,
      O(n d_phi d_v) memory);
    - ``"recurrent"``: the RNN of :func:`linear_attention_step`, one position after the other;
    - ``"chunked"``: the quadratic form inside chunks of ``chunk_size`` positions, the state of the chunks
      before added (what fast implementations do).

    There is no :math:`1/\sqrt d` factor: the normalisation by :math:`\phi(\mathbf q)^\top\mathbf z` makes the
    weights sum to 1 whatever the scale of the features.

    Args:
        q: (..., n_q, d) queries; k: (..., n_k, d) keys; v: (..., n_k, d_v) values. Leading axes broadcast;
            4-D keys (B, H_kv, n_k, d) may have fewer heads than the queries when ``H_kv`` divides ``H``.
        mask: optional bool *key* mask, ``True`` = a real key, broadcastable to (..., 1, n_k) (as
            :func:`course_lib.padding_mask` gives); padded keys get zero features. A mask with a query axis
            cannot be honoured without the (n_q, n_k) matrix and is refused.
        causal: the bottom-right aligned look-ahead rule.
        feature_map: :math:`\phi`, non-negative, elementwise or (..., d) -> (..., d_phi); default
            :func:`elu_feature_map`.
        mode: ``"parallel"``, ``"recurrent"`` or ``"chunked"``.
        chunk_size: positions per chunk in ``"chunked"`` mode, >= 1.

    Returns:
        (..., n_q, d_v). A query that sees no key (or whose kernel values are all 0) gets the zero vector.

    Examples:
        >>> q, k, v = torch.randn(2, 9, 4), torch.randn(2, 9, 4), torch.randn(2, 9, 3)
        >>> outs = [linear_attention(q, k, v, causal=True, mode=m, chunk_size=4) for m in LINEAR_ATTENTION_MODES]
        >>> outs[0].shape, all(torch.allclose(outs[0], o, atol=1e-6) for o in outs)
        (torch.Size([2, 9, 3]), True)
        >>> weights = feature_map_kernel()(q, k).tril()  # the same as Nadaraya-Watson weights, O(n^2)
        >>> torch.allclose(outs[0], (weights / weights.sum(-1, keepdim=True)) @ v, atol=1e-6)
        True
    """
    check_qkv(q, k, v)
    k_lead = list(k.shape[:-2])
    if q.dim() == k.dim() == 4:
        k_lead[1] = q.shape[1]  # grouped-query heads
    lead = torch.broadcast_shapes(q.shape[:-2], tuple(k_lead))
    if mask is not None:
        check_key_mask(check_keep_mask(mask, (*lead, q.shape[-2], k.shape[-2])), "linear attention")
        mask = mask.to(q.device)
    check_bool(causal, "causal")
    if feature_map is not None:
        _check_feature_map(feature_map)
    check_choice(mode, "mode", LINEAR_ATTENTION_MODES)
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    return _linear(q, k, v, mask, causal, feature_map, mode, chunk_size)


class LinearKernel:
    """:func:`linear_attention` as an attention kernel (registered as ``"linear"``).

    ``MultiHeadAttention(d, h, kernel="linear")`` replaces each head's softmax by the feature-map kernel.
    What it declares it cannot do (:class:`~course_lib.attention.contract.Capabilities`) is refused before
    it runs: masks with a query axis (padding enters as zero features of the padded keys, so the mask must
    mark keys only, broadcastable to (B, H, 1, n_keys), as :func:`course_lib.padding_mask` gives),
    attention dropout (there are no weights to drop in the O(n) form), a ``scale`` (the feature map has no
    score scale) and score modifiers. ``need_weights`` forms the (n_q, n_k) weights with
    :func:`nadaraya_watson_attention` (same output up to rounding).

    Args:
        feature_map, mode, chunk_size: as in :func:`linear_attention`.

    Examples:
        >>> mha = MultiHeadAttention(16, 4, kernel=LinearKernel(mode="chunked", chunk_size=4)).eval()
        >>> x = torch.randn(2, 7, 16)
        >>> y = mha(x, x, x, mask=padding_mask(torch.tensor([7, 5]), 7), causal=True)
        >>> y.shape, torch.allclose(y[1, :5], mha(x[1:, :5], x[1:, :5], x[1:, :5], causal=True)[0], atol=1e-6)
        (torch.Size([2, 7, 16]), True)
    """

    name = "linear"
    supports = Capabilities(dropout=False, query_masks=False, score_mods=False, scale=False)

    def __init__(self, feature_map: FeatureMap | None = None, mode: str = "parallel", chunk_size: int = 64) -> None:
        self.feature_map = None if feature_map is None else _check_feature_map(feature_map)
        self.mode = check_choice(mode, "mode", LINEAR_ATTENTION_MODES)
        self.chunk_size = check_positive_int(chunk_size, "chunk_size")

    def __repr__(self) -> str:
        phi = "elu+1" if self.feature_map is None else getattr(self.feature_map, "__name__", repr(self.feature_map))
        return f"LinearKernel(feature_map={phi}, mode={self.mode!r}, chunk_size={self.chunk_size})"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | MaskMod | None = None, *, causal: bool = False, dropout_p: float = 0.0,
                 scale: float | None = None, score_mod: ScoreMod | None = None,
                 need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args and returns: see :mod:`course_lib.attention.contract` (a key mask only; no dropout, scale or
        score modifier)."""
        check_supported(self, mask=mask, dropout_p=dropout_p, scale=scale, score_mod=score_mod)
        if need_weights:
            groups = kv_groups(q, k)
            return nadaraya_watson_attention(q, repeat_kv(k, groups), repeat_kv(v, groups),
                                             feature_map_kernel(self.feature_map), mask, causal=causal)
        return _linear(q, k, v, mask, causal, self.feature_map, self.mode, self.chunk_size), None
