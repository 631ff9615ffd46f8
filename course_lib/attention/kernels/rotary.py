r"""Rotary position embedding, RoPE (Su et al. 2021), its scalings for longer contexts, and the attention kernel
that applies it (chapter 11).

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

**Longer contexts.** A model trained on contexts of :math:`L` tokens has seen pair :math:`i` turned by
angles up to :math:`L\theta_i` only. Pair :math:`i` has the wavelength :math:`\lambda_i = 2\pi/\theta_i`
and makes :math:`r_i = L/\lambda_i` turns over the training context: the fast pairs (:math:`r_i \gg 1`)
have met every angle, the slow ones (:math:`r_i < 1`) meet angles beyond :math:`L\theta_i` for the first
time at a longer input. A *scaling* (``scaling=``, a dict of plain values named as Hugging Face's
``rope_parameters``; :func:`rope_scaling_parameters`) changes the frequencies so that an input
``factor`` = :math:`s` times longer stays within, or near, the trained angles. Every one of them is
computed by :func:`rotary_frequencies`, and every angle the library uses by :func:`rope_angles`:

- ``"linear"``, *position interpolation* (Chen et al. 2023): position :math:`m` is read as :math:`m/s`,
  i.e. :math:`\theta_i' = \theta_i/s`. Every angle of an input of :math:`sL` tokens is one the model has
  seen, but neighbouring tokens now differ by :math:`s` times smaller angles on the fast pairs, which the
  model used to tell nearby positions apart: it needs a short fine-tune (1,000 steps in the paper).
- ``"ntk"``, *NTK-aware* base scaling (bloc97, 2023; named after the neural-tangent-kernel argument that
  a network learns high frequencies badly, so they should not be squeezed): change the base,
  :math:`b' = b\,s^{d_h/(d_h-2)}`. Then :math:`\theta_0 = 1` is unchanged, the slowest pair
  :math:`\theta_{d_h/2-1} = b^{-(d_h-2)/d_h}` is divided by exactly :math:`s`, and pair :math:`i` in between
  by :math:`s^{2i/(d_h-2)}`: the fast pairs extrapolate (they have seen every angle already), the slow
  ones interpolate. Hugging Face has no static form of it (a model that uses it states the new base as
  its ``rope_theta``); ``"ntk"`` is this library's name.
- ``"dynamic"``, Hugging Face's dynamic NTK (emozilla, 2023): the NTK base recomputed for the length of
  the input, :math:`b' = b\,(s\,T/L - (s - 1))^{d_h/(d_h-2)}` for :math:`T > L` tokens (``T`` = the
  largest position + 1, ``L`` = ``original_max_position_embeddings``, Hugging Face's
  ``config.max_position_embeddings``), and :math:`b` itself up to :math:`L`: a model is unchanged on the
  lengths it was trained on and needs no fine-tune. The angles of a token then depend on the length of
  the input it is in; Hugging Face, and :class:`RotaryEmbedding` here, rotate each key once, when it
  enters the cache, with the base of that step.
- ``"yarn"``, YaRN (Peng et al. 2023), interpolation *by parts* plus a temperature: pairs that turn more
  than ``beta_fast`` (32) times over :math:`L` keep :math:`\theta_i`, pairs that turn fewer than
  ``beta_slow`` (1) times are interpolated, :math:`\theta_i/s`, and in between the two are blended with a
  weight that is linear in the index :math:`i`: :math:`\theta_i' = \gamma_i\theta_i + (1-\gamma_i)\theta_i/s`,
  :math:`\gamma_i = 1 - \operatorname{clamp}((i - i_{\text{low}})/(i_{\text{high}} - i_{\text{low}}), 0, 1)`,
  where :math:`i_{\text{low}}, i_{\text{high}}` are the (fractional) indices at which :math:`r_i` equals
  ``beta_fast`` and ``beta_slow``, :math:`i(r) = d_h\ln(L/(2\pi r))/(2\ln b)`, rounded outwards when
  ``truncate`` (Hugging Face's default) and clipped to :math:`[0, d_h - 1]`. Interpolated pairs also make
  the attention more uniform at long inputs; YaRN sharpens it again by multiplying the scores by
  :math:`1/t` with :math:`\sqrt{1/t} = 0.1\ln s + 1` (``attention_factor``, DeepSeek's ``mscale`` /
  ``mscale_all_dim`` variant included): the cosines and sines are multiplied by :math:`\sqrt{1/t}`, so
  that both the query and the key carry it.
- ``"llama3"``, Llama 3.1's frequency-dependent scaling (Meta 2024): the same three bands, drawn in
  wavelengths: :math:`\lambda_i < L/\text{high\_freq\_factor}` unchanged, :math:`\lambda_i >
  L/\text{low\_freq\_factor}` divided by ``factor``, and in between
  :math:`\theta_i' = (1-\gamma)\theta_i/s + \gamma\theta_i` with
  :math:`\gamma = (L/\lambda_i - \text{low\_freq\_factor})/(\text{high\_freq\_factor} - \text{low\_freq\_factor})`,
  linear in the number of turns :math:`r_i`; no temperature. Llama 3.1: base 500000, :math:`s = 8`,
  factors 1 and 4, :math:`L = 8192`.

Each is computed as Hugging Face's ``transformers.modeling_rope_utils`` computes it (``ROPE_INIT_FUNCTIONS``,
same parameter names and defaults; tested against it), in float64.

Precision: the angles :math:`m\theta_i` are computed in float64 (float32 on Apple's MPS, which has no
float64) and their cosines and sines are then cast to the input's dtype. Hugging Face computes the
frequencies and angles in float32, which moves them by up to about :math:`m \cdot 6\cdot 10^{-8}` radians.
"""

from __future__ import annotations

import math
import numbers

import torch

from ..._validation import _as_tensor, check_bool, check_even, check_floating, check_positions, check_real
from ..contract import AttentionKernel, Capabilities, check_kernel
from ..masks import MaskMod, query_offset
from ..score_mods import ScoreMod
from .fused import fused_kernel

__all__ = ["RotaryEmbedding", "RotaryKernel", "apply_rotary", "rope_angles", "rope_scaling_parameters",
           "rotary_embedding", "rotary_frequencies", "rotary_permutation"]

# Every scaling's fields: (required, optional with their defaults). The defaults are Hugging Face's
# (transformers.modeling_rope_utils: _compute_yarn_parameters reads beta_fast or 32, beta_slow or 1,
# truncate True, and derives attention_factor from factor, mscale and mscale_all_dim when it is absent).
_SCALINGS: dict[str, tuple[tuple[str, ...], dict[str, object]]] = {
    "linear": (("factor",), {}),
    "ntk": (("factor",), {}),
    "dynamic": (("factor", "original_max_position_embeddings"), {}),
    "yarn": (("factor", "original_max_position_embeddings"),
             {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True, "mscale": None, "mscale_all_dim": None,
              "attention_factor": None}),
    "llama3": (("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"), {}),
}


def _check_head_size(head_size: object, name: str = "head_size") -> int:
    return check_even(head_size, name, "RoPE turns pairs of features")


def _check_rope_scaling(scaling: object, name: str) -> dict[str, object] | None:
    """``scaling`` validated, as a new dict with every default filled in (``None`` stays ``None``)."""
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise TypeError(f"{name} must be None or a dict of plain values such as {{'rope_type': 'linear', "
                        f"'factor': 4.0}}, got {type(scaling).__name__}")
    if "rope_type" not in scaling:
        hint = " (Hugging Face's older name 'type' is 'rope_type' here)" if "type" in scaling else ""
        raise ValueError(f"{name} must name its 'rope_type', one of {sorted(_SCALINGS)}{hint}, got keys "
                         f"{sorted(scaling)}")
    rope_type = scaling["rope_type"]
    if not isinstance(rope_type, str) or rope_type not in _SCALINGS:
        raise ValueError(f"{name}['rope_type'] must be one of {sorted(_SCALINGS)}, got {rope_type!r}")
    required, optional = _SCALINGS[rope_type]
    if "rope_theta" in scaling:
        raise ValueError(f"{name}['rope_theta']: the base is not part of the scaling; give it as base= "
                         f"(DecoderLMConfig.rope_base)")
    unknown = sorted(set(scaling) - {"rope_type", *required, *optional})
    if unknown:
        raise ValueError(f"{name} has keys that rope_type {rope_type!r} does not take: {unknown} (it takes "
                         f"{sorted([*required, *optional])})")
    missing = [key for key in required if key not in scaling]
    if missing:
        raise ValueError(f"{name} with rope_type {rope_type!r} needs {missing}")
    params: dict[str, object] = {"rope_type": rope_type}
    for key in (*required, *optional):
        value = scaling.get(key)
        if value is None and key in optional:  # absent or None: the default, as Hugging Face reads it
            params[key] = optional[key]
        else:
            params[key] = _check_scaling_field(value, f"{name}[{key!r}]", key)
    if rope_type == "yarn" and not params["beta_fast"] > params["beta_slow"]:
        raise ValueError(f"{name}['beta_fast'] must be greater than {name}['beta_slow'] (turns over the "
                         f"training context), got {params['beta_fast']} and {params['beta_slow']}")
    if rope_type == "llama3" and not params["high_freq_factor"] > params["low_freq_factor"]:
        raise ValueError(f"{name}['high_freq_factor'] must be greater than {name}['low_freq_factor'], got "
                         f"{params['high_freq_factor']} and {params['low_freq_factor']}")
    if rope_type == "yarn" and params["attention_factor"] is None:
        params["attention_factor"] = _yarn_attention_factor(params)
    return params


def _check_scaling_field(value: object, field: str, key: str) -> object:
    """One field of a RoPE scaling, checked by its kind (``field`` names it in the messages)."""
    if key == "original_max_position_embeddings":
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{field} must be a positive int (the training context), got {value!r}")
        if value < 1:
            raise ValueError(f"{field} must be a positive int (the training context), got {value!r}")
        return int(value)
    if key == "truncate":
        return check_bool(value, field)
    if key == "factor":
        return check_real(value, field, at_least=1.0)
    return check_real(value, field, greater_than=0.0)  # betas, band factors, mscales, attention_factor


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's :math:`\\sqrt{1/t} = 0.1\\,m\\ln s + 1` (1 for :math:`s \\le 1`), Hugging Face's ``get_mscale``."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_attention_factor(params: dict[str, object]) -> float:
    """The default attention factor: the paper's, or DeepSeek's ratio when both mscales are given."""
    factor, mscale, mscale_all_dim = params["factor"], params["mscale"], params["mscale_all_dim"]
    if mscale and mscale_all_dim:
        return _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
    return _yarn_mscale(factor)


def rope_scaling_parameters(scaling: dict | None) -> dict[str, object] | None:
    """A RoPE scaling validated, with every default filled in (what :func:`rotary_frequencies` computes from).

    The fields and defaults are Hugging Face's (``rope_parameters`` of transformers 5, ``rope_scaling`` of 4),
    without ``rope_theta`` (the base is an argument of its own) and with the training context of
    ``"dynamic"`` in the dict as ``original_max_position_embeddings`` (Hugging Face reads it from
    ``config.max_position_embeddings``):

    =========== ============================================== ==========================================
    rope_type   required                                       optional (default)
    =========== ============================================== ==========================================
    ``linear``  ``factor``                                     --
    ``ntk``     ``factor``                                     -- (this library's; see the module)
    ``dynamic`` ``factor``, ``original_max_position_embeddings`` --
    ``yarn``    ``factor``, ``original_max_position_embeddings`` ``beta_fast`` (32), ``beta_slow`` (1),
                                                               ``truncate`` (True), ``mscale``,
                                                               ``mscale_all_dim`` (None),
                                                               ``attention_factor`` (0.1 ln s + 1)
    ``llama3``  ``factor``, ``original_max_position_embeddings``, --
                ``low_freq_factor``, ``high_freq_factor``
    =========== ============================================== ==========================================

    Args:
        scaling: ``None`` (plain RoPE) or a dict of plain values with a ``"rope_type"``.

    Returns:
        ``None``, or a new dict: the fields given, each default filled in, and for ``"yarn"`` the
        ``attention_factor`` computed when it was not given.

    Raises:
        TypeError or ValueError naming the field: an unknown ``rope_type``, a missing or unknown field, a
        ``factor`` below 1, a non-positive factor, a training context that is not a positive int,
        ``beta_fast <= beta_slow``, ``high_freq_factor <= low_freq_factor``, ``rope_theta`` in the dict.

    Examples:
        >>> params = rope_scaling_parameters({"rope_type": "yarn", "factor": 4.0,
        ...                                   "original_max_position_embeddings": 32})
        >>> params["beta_fast"], params["beta_slow"], params["truncate"], round(params["attention_factor"], 4)
        (32.0, 1.0, True, 1.1386)
        >>> rope_scaling_parameters({"rope_type": "linear", "factor": 0.5})
        Traceback (most recent call last):
        ...
        ValueError: scaling['factor'] must be at least 1.0, got 0.5
    """
    return _check_rope_scaling(scaling, "scaling")


def _inv_freq(head_size: int, base: float, params: dict[str, object] | None, seq_len: int | None,
              dtype: torch.dtype, device: torch.device | None) -> torch.Tensor:
    """The (d_h / 2,) frequencies of a validated scaling (Hugging Face's ROPE_INIT_FUNCTIONS, in ``dtype``)."""
    d = head_size
    exponents = torch.arange(0, d, 2, dtype=dtype, device=device) / d  # 2i / d_h
    rope_type = None if params is None else params["rope_type"]
    if rope_type in ("ntk", "dynamic"):
        if d == 2:
            raise ValueError(f"{rope_type!r} scaling changes the base by s^(d_h/(d_h-2)): it needs a head size "
                             f"above 2, got 2")
        s = params["factor"]
        if rope_type == "dynamic":  # the NTK scale the current length needs; none up to the training context
            original = params["original_max_position_embeddings"]
            length = original if seq_len is None else max(int(seq_len), original)
            s = s * length / original - (s - 1)
        base = base * s ** (d / (d - 2))
    theta = 1.0 / base ** exponents  # θ_i = base^(-2i/d_h)
    if rope_type == "linear":
        return theta / params["factor"]
    if rope_type == "yarn":
        s, original = params["factor"], params["original_max_position_embeddings"]

        def index_of(turns: float) -> float:  # the (fractional) i at which pair i turns `turns` times over L
            return d * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

        low, high = index_of(params["beta_fast"]), index_of(params["beta_slow"])
        if params["truncate"]:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001  # as Hugging Face: no division by zero
        ramp = ((torch.arange(d // 2, dtype=dtype, device=device) - low) / (high - low)).clamp(0, 1)
        return theta / s * ramp + theta * (1 - ramp)  # ramp 0: extrapolate (keep θ_i); 1: interpolate (θ_i / s)
    if rope_type == "llama3":
        s, original = params["factor"], params["original_max_position_embeddings"]
        low, high = params["low_freq_factor"], params["high_freq_factor"]
        wavelength = 2 * math.pi / theta
        gamma = (original / wavelength - low) / (high - low)  # turns over L, mapped to 0 .. 1 across the band
        blended = (1 - gamma) * theta / s + gamma * theta
        return torch.where(wavelength < original / high, theta,
                           torch.where(wavelength > original / low, theta / s, blended))
    return theta  # no scaling, and the NTK-aware bases


def _attention_factor(params: dict[str, object] | None) -> float:
    return 1.0 if params is None or params["rope_type"] != "yarn" else params["attention_factor"]


def rotary_frequencies(head_size: int, base: float = 10000.0, scaling: dict | None = None, *,
                       seq_len: int | None = None) -> torch.Tensor:
    r"""The rotation frequencies :math:`\theta_i = \text{base}^{-2i/d_h}`, :math:`i = 0, \dots, d_h/2 - 1`, or
    their scaled values (see the module's *Longer contexts*).

    Args:
        head_size: :math:`d_h`, even.
        base: the base of the geometric progression (10000 in the paper; Llama 3 uses 500000).
        scaling: ``None`` or a RoPE scaling (:func:`rope_scaling_parameters`).
        seq_len: for ``"dynamic"`` only, the length :math:`T` of the input (the largest position + 1);
            ``None`` is the training context, where the frequencies are unscaled.

    Returns:
        (head_size / 2,) float64, from 1 down to :math:`\text{base}^{-(d_h - 2)/d_h}` unscaled (Hugging Face's
        ``inv_freq``).

    Examples:
        >>> rotary_frequencies(4, base=100.0)
        tensor([1.0000, 0.1000], dtype=torch.float64)
        >>> rotary_frequencies(4, base=100.0, scaling={"rope_type": "linear", "factor": 4.0})
        tensor([0.2500, 0.0250], dtype=torch.float64)
        >>> rotary_frequencies(4, base=100.0, scaling={"rope_type": "ntk", "factor": 4.0})  # the slowest / 4
        tensor([1.0000, 0.0250], dtype=torch.float64)
    """
    head_size = _check_head_size(head_size)
    base = check_real(base, "base", greater_than=1.0)
    params = _check_rope_scaling(scaling, "scaling")
    if seq_len is not None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral):
            raise TypeError(f"seq_len must be None or an int (the length of the input), got {seq_len!r}")
        if seq_len < 0:
            raise ValueError(f"seq_len must be non-negative, got {seq_len}")
    return _inv_freq(head_size, base, params, seq_len, torch.float64, None)


def _angle_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64


_FROM_POSITIONS = object()


def _cos_sin(positions: torch.Tensor, head_size: int, base: float, params: dict[str, object] | None, *,
             seq_len: int | None | object = _FROM_POSITIONS) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rope_angles` on checked arguments: (..., T) int64 positions -> cos, sin (..., T, d_h / 2).

    ``seq_len``: dynamic NTK's length (``None``: the training context, unscaled); by default the largest
    position + 1.
    """
    dtype = _angle_dtype(positions.device)
    if seq_len is _FROM_POSITIONS:
        seq_len = int(positions.max()) + 1 if params is not None and params["rope_type"] == "dynamic" and \
            positions.numel() else None
    inv_freq = _inv_freq(head_size, base, params, seq_len, dtype, positions.device)
    angles = positions.to(dtype).unsqueeze(-1) * inv_freq  # (..., T, d_h / 2): m θ_i
    factor = _attention_factor(params)
    if factor == 1.0:
        return angles.cos(), angles.sin()
    return angles.cos() * factor, angles.sin() * factor


def rope_angles(positions: torch.Tensor | list[int], head_size: int, base: float = 10000.0,
                scaling: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The cosines and sines of the angles :math:`m\theta_i` that turn pair :math:`i` at position :math:`m`.

    The one function the library computes rotation angles with: :func:`rotary_embedding`,
    :class:`RotaryKernel` and :class:`RotaryEmbedding` (the table of a model that caches its keys rotated)
    call it. YaRN's attention factor is already in the result (both are multiplied by it), and
    ``"dynamic"`` scaling uses the largest position + 1 as the length of the input, as Hugging Face does.

    Args:
        positions: integer positions (a tensor or a list), (..., T); they may be negative.
        head_size: :math:`d_h`, even.
        base: of the frequencies (:func:`rotary_frequencies`); > 1.
        scaling: ``None`` or a RoPE scaling (:func:`rope_scaling_parameters`).

    Returns:
        ``(cos, sin)``, each (..., T, head_size / 2), float64 (float32 on MPS), on the positions' device.

    Examples:
        >>> cos, sin = rope_angles(torch.arange(3), 4, base=100.0)
        >>> cos.shape, sin[2]  # sin(2 θ_i), θ = (1, 0.1)
        (torch.Size([3, 2]), tensor([0.9093, 0.1987], dtype=torch.float64))
        >>> cos, sin = rope_angles([5], 8, scaling={"rope_type": "yarn", "factor": 4.0,
        ...                                          "original_max_position_embeddings": 16})
        >>> (cos**2 + sin**2).sqrt()  # YaRN's attention factor 0.1 ln 4 + 1 on every pair
        tensor([[1.1386, 1.1386, 1.1386, 1.1386]], dtype=torch.float64)
    """
    positions = _as_tensor(positions, "positions", "integer positions")
    positions = check_positions(positions, tuple(positions.shape))
    head_size = _check_head_size(head_size)
    base = check_real(base, "base", greater_than=1.0)
    return _cos_sin(positions, head_size, base, _check_rope_scaling(scaling, "scaling"))


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


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Turn pair i of ``x`` (..., T, d_h) by the angles whose ``cos``, ``sin`` are (..., T, d_h / 2)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d_h / 2) each: the pairs (x_2i, x_2i+1)
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return _turn_whole(x, *_whole_width(cos, sin))


def _whole_width(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., d_h / 2) cosines and sines -> (cos, cos) and (-sin, sin), (..., d_h): :func:`_turn_whole`'s factors."""
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)


def _turn_whole(x: torch.Tensor, cos2: torch.Tensor, sin2: torch.Tensor) -> torch.Tensor:
    """Rotate-half pairs (x_i, x_i+d/2) turned as x * (cos, cos) + (x_b, x_a) * (-sin, sin).

    The same floats as (x_a cos - x_b sin, x_a sin + x_b cos) (a - b == a + (-b) exactly), in two whole-width
    products instead of four on strided halves.
    """
    return x * cos2 + x.roll(x.shape[-1] // 2, dims=-1) * sin2


def _turn_halves(x: torch.Tensor, cos2: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    """Rotate-half pairs (x_a, x_b) turned by ``sign`` times the angles: (x_a cos - s x_b sin, x_b cos + s x_a sin).

    One whole-width product by (cos, cos) (``cos2``), then each half's sine term added in place: no rolled
    copy, and three passes where four products on the halves take longer (a half is a run of d_h / 2 floats,
    too short for the vectorised loops at d_h = 32).
    """
    half = x.shape[-1] // 2
    out = x * cos2  # x's memory order (heads of a (B, T, h, d_h) projection)
    out[..., :half].addcmul_(x[..., half:], sin, value=-sign)
    out[..., half:].addcmul_(x[..., :half], sin, value=sign)
    return out


class _TurnHalves(torch.autograd.Function):
    """:func:`_turn_halves` under autograd: a rotation's gradient is the rotation back (its transpose), so the
    backward pass turns the incoming gradient by minus the angles (tested with gradcheck)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, cos2: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos2, sin)
        return _turn_halves(x, cos2, sin, 1.0)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        cos2, sin = ctx.saved_tensors
        return _turn_halves(grad, cos2, sin, -1.0), None, None


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False
                 ) -> torch.Tensor:
    r"""Turn pair :math:`i` of every row of ``x`` by the angle whose cosine and sine are given (:func:`rope_angles`).

    :math:`(x_a, x_b) \mapsto (x_a\cos - x_b\sin,\ x_a\sin + x_b\cos)`, with :math:`(a, b) = (i, i + d_h/2)`
    (rotate-half) or :math:`(2i, 2i + 1)` (``interleaved``); Hugging Face's ``apply_rotary_pos_emb`` with
    ``cos``, ``sin`` given once per pair instead of repeated over both halves.

    Args:
        x: (..., T, d_h) queries or keys, floating point.
        cos, sin: (..., T, d_h / 2), broadcasting to ``x``'s leading axes (e.g. (T, d_h / 2)); cast to ``x``'s
            dtype.
        interleaved: the pair layout.

    Returns:
        Shaped and typed like ``x``.

    Examples:
        >>> cos, sin = rope_angles([1], 2, base=10.0)
        >>> apply_rotary(torch.tensor([[1.0, 0.0]]), cos, sin)  # turned by 1 radian
        tensor([[0.5403, 0.8415]])
    """
    check_floating(x, "x")
    head_size = _check_head_size(x.shape[-1] if x.dim() else 0, "the last axis of x (the head size d_h)")
    for name, t in (("cos", cos), ("sin", sin)):
        check_floating(t, name)
        if t.dim() == 0 or t.shape[-1] != head_size // 2:
            raise ValueError(f"{name} must have d_h / 2 = {head_size // 2} entries in its last axis (x has shape "
                             f"{tuple(x.shape)}), got shape {tuple(t.shape)}")
    return _rotate(x, cos, sin, check_bool(interleaved, "interleaved"))


def rotary_embedding(x: torch.Tensor, positions: torch.Tensor | None = None, *, base: float = 10000.0,
                     interleaved: bool = False, scaling: dict | None = None) -> torch.Tensor:
    r"""Rotate every pair of features of ``x`` by its position times the pair's frequency: RoPE.

    .. math:: \begin{pmatrix} y_a \\ y_b \end{pmatrix} =
       \begin{pmatrix} \cos m\theta_i & -\sin m\theta_i \\ \sin m\theta_i & \cos m\theta_i \end{pmatrix}
       \begin{pmatrix} x_a \\ x_b \end{pmatrix},\qquad \theta_i = \text{base}^{-2i/d_h},

    with :math:`(a, b) = (i, i + d_h/2)` (rotate-half, as Hugging Face's Llama) or :math:`(2i, 2i+1)`
    (``interleaved``, as the paper). Apply it to the queries and the keys (never the values): then
    :math:`\langle\mathrm{RoPE}(\mathbf q, m), \mathrm{RoPE}(\mathbf k, n)\rangle` depends on :math:`m - n` only.
    With ``scaling``, the frequencies are scaled (:func:`rotary_frequencies`) and YaRN's attention factor
    multiplies the result.

    Args:
        x: (..., T, d_h) queries or keys, :math:`d_h` even; with heads, (B, H, T, d_h).
        positions: the positions of the T rows, integers (a tensor or a list): (T,), or any shape that
            broadcasts to ``x.shape[:-1]`` with T in its last axis (e.g. (B, 1, T), one row per
            sequence). Default ``0, ..., T - 1``.
        base: of the frequencies (:func:`rotary_frequencies`); > 1.
        interleaved: pairs :math:`(x_{2i}, x_{2i+1})` instead of :math:`(x_i, x_{i+d_h/2})`.
        scaling: ``None`` or a RoPE scaling for longer contexts (:func:`rope_scaling_parameters`).

    Returns:
        Shaped and typed like ``x``; without YaRN's attention factor, norms are preserved and position 0 is
        left unchanged.

    Raises:
        TypeError: ``x`` not floating point, ``positions`` not integers, ``interleaved`` not a bool.
        ValueError: an odd :math:`d_h`, ``positions`` of a shape that does not fit ``x``, ``base <= 1``, a
        malformed ``scaling`` (naming the field).

    Examples:
        >>> x = torch.tensor([[1.0, 0.0]])  # one row, one pair
        >>> rotary_embedding(x, positions=[1], base=10.0)  # turned by 1 radian: (cos 1, sin 1)
        tensor([[0.5403, 0.8415]])
        >>> rotary_embedding(x, positions=[4], base=10.0, scaling={"rope_type": "linear", "factor": 4.0})
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
    params = _check_rope_scaling(scaling, "scaling")
    if positions is None:
        positions = torch.arange(x.shape[-2], device=x.device)
    else:
        positions = check_positions(positions, tuple(x.shape[:-1])).to(x.device)
    cos, sin = _cos_sin(positions, head_size, base, params)
    return _rotate(x, cos, sin, interleaved)


class RotaryKernel:
    r"""Attention with rotary positions: rotate the queries and keys by their positions, then attend with ``inner``.

    A kernel (registered as ``"rotary"``) that wraps another, so that ``MultiHeadAttention(d, h,
    kernel=RotaryKernel())`` is rotary self-attention without a change to the module. The positions are
    the library's bottom-right convention: keys at ``0 .. n_keys - 1``, the queries at the last
    ``n_queries`` of them. A :class:`~course_lib.attention.cache.KVCache` behind this kernel therefore keeps
    *unrotated* keys, and the kernel rotates all of them at each step: since only the differences of
    positions matter, this gives the scores of rotating each key once at its absolute position and caching
    it rotated (:class:`RotaryEmbedding`, what :class:`~course_lib.DecoderLM` and Hugging Face do, without
    re-rotating the cache), and stays right when a cache is trimmed or offset (a sliding window) or when a
    sequence is left-padded with masked keys. With ``"dynamic"`` scaling the frequencies follow the number
    of keys, so every key is turned with the base of the current length (:class:`RotaryEmbedding` and
    Hugging Face turn each key with the base of the step at which it entered the cache; the two agree on a
    whole sequence at once).

    Args:
        inner: the kernel that attends to the rotated queries and keys (default the fused kernel; by name,
            ``attention_kernel("rotary", inner="flash")``).
        base: of the frequencies (:func:`rotary_frequencies`); > 1.
        interleaved: the pair layout (:func:`rotary_embedding`).
        scaling: ``None`` or a RoPE scaling for longer contexts (:func:`rope_scaling_parameters`).

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
        >>> RotaryKernel(scaling={"rope_type": "linear", "factor": 4})
        RotaryKernel(fused_kernel, base=10000, scaling={'rope_type': 'linear', 'factor': 4})
    """

    name = "rotary"

    def __init__(self, inner: AttentionKernel = fused_kernel, *, base: float = 10000.0,
                 interleaved: bool = False, scaling: dict | None = None) -> None:
        self.inner = check_kernel(inner, "inner")
        self.base = check_real(base, "base", greater_than=1.0)
        self.interleaved = check_bool(interleaved, "interleaved")
        self._params = _check_rope_scaling(scaling, "scaling")
        self.scaling = None if scaling is None else dict(scaling)  # as given (the defaults stay implicit)

    @property
    def supports(self) -> Capabilities:
        """What the inner kernel supports."""
        return self.inner.supports

    def __repr__(self) -> str:
        layout = ", interleaved=True" if self.interleaved else ""
        scaling = "" if self.scaling is None else f", scaling={self.scaling!r}"
        return f"RotaryKernel({self.inner!r}, base={self.base:g}{layout}{scaling})"

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
        cos, sin = _cos_sin(torch.arange(start, n_k, device=q.device), head_size, self.base, self._params)
        n = cos.shape[0]
        q = _rotate(q, cos[n - n_q:], sin[n - n_q:], self.interleaved)
        k = _rotate(k, cos[n - n_k:], sin[n - n_k:], self.interleaved)
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

    The cosines and sines of every position are kept in a table (:func:`rope_angles`'s, computed in float64 and
    cast to the inputs' dtype; with ``scaling``, the scaled frequencies and YaRN's attention factor), extended
    by doubling when a longer sequence comes, so a step looks its positions up instead of computing them.

    ``"dynamic"`` scaling changes the frequencies with the length of the input, so its angles cannot be
    tabulated once: a call whose last position ``stop - 1`` lies within the training context
    (``stop <= original_max_position_embeddings``) reads the plain table, and a longer one computes its new
    rows with the base of length ``stop`` -- as Hugging Face's ``dynamic_rope_update`` does in a generation
    from an empty cache (it recomputes ``inv_freq`` when the length exceeds the longest seen). A key therefore
    keeps the rotation of the step that cached it, and a decoding run differs (slightly) from scoring the
    whole sequence at once, in Hugging Face and here alike. (Hugging Face also keeps the longest base between
    calls until an input within the training context resets it; here each call depends on its positions only.)

    Args:
        head_size: :math:`d_h`, even.
        base: of the frequencies (:func:`rotary_frequencies`); > 1.
        interleaved: the pair layout (:func:`rotary_embedding`).
        scaling: ``None`` or a RoPE scaling for longer contexts (:func:`rope_scaling_parameters`).

    Examples:
        >>> rope = RotaryEmbedding(4)
        >>> x = torch.randn(1, 2, 3, 4)  # (B, H, T, d_h)
        >>> torch.allclose(rope(x, start=5), rotary_embedding(x, positions=[5, 6, 7]))
        True
        >>> yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
        >>> torch.allclose(RotaryEmbedding(4, scaling=yarn)(x, start=5),
        ...                rotary_embedding(x, positions=[5, 6, 7], scaling=yarn))
        True
    """

    def __init__(self, head_size: int, base: float = 10000.0, *, interleaved: bool = False,
                 scaling: dict | None = None) -> None:
        self.head_size = _check_head_size(head_size)
        self.base = check_real(base, "base", greater_than=1.0)
        self.interleaved = check_bool(interleaved, "interleaved")
        self._params = _check_rope_scaling(scaling, "scaling")
        self.scaling = None if scaling is None else dict(scaling)  # as given (the defaults stay implicit)
        dynamic = self._params is not None and self._params["rope_type"] == "dynamic"
        self._dynamic_from = self._params["original_max_position_embeddings"] if dynamic else None
        # (device, dtype) -> cos, sin (n, d_h / 2) and their whole-width factors (n, d_h) for the rotate-half layout
        self._tables: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, ...]] = {}

    def __repr__(self) -> str:
        layout = ", interleaved=True" if self.interleaved else ""
        scaling = "" if self.scaling is None else f", scaling={self.scaling!r}"
        return f"RotaryEmbedding({self.head_size}, base={self.base:g}{layout}{scaling})"

    def table(self, stop: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The cosines and sines of positions ``0 .. stop - 1`` at least: two (n, d_h / 2) tensors, n >= ``stop``.

        With ``"dynamic"`` scaling, the table's frequencies are those of the training context (unscaled):
        :meth:`__call__` reads it only for inputs that end within that context.

        Examples:
            >>> cos, sin = RotaryEmbedding(4, base=100.0).table(2, torch.device("cpu"), torch.float64)
            >>> cos[1].tolist()  # cos(1 x 1), cos(1 x 0.1)
            [0.5403023058681398, 0.9950041652780258]
        """
        return self._table(stop, device, dtype)[:2]

    def _table(self, stop: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        key = (device, dtype)
        tables = self._tables.get(key)
        if tables is None or tables[0].shape[0] < stop:
            n = max(stop, 64, 2 * (0 if tables is None else tables[0].shape[0]))
            cos, sin = _cos_sin(torch.arange(n, device=device), self.head_size, self.base, self._params,
                                seq_len=None)
            cos, sin = cos.to(dtype), sin.to(dtype)
            tables = self._tables[key] = (cos, sin, *_whole_width(cos, sin))
        return tables

    def __call__(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Rotate ``x`` (..., T, d_h) at the positions ``start .. start + T - 1``.

        Returns:
            Shaped and typed like ``x``.
        """
        n = x.shape[-2]
        stop = start + n
        if self._dynamic_from is not None and stop > self._dynamic_from:  # the base of length `stop`
            cos, sin = _cos_sin(torch.arange(start, stop, device=x.device), self.head_size, self.base,
                                self._params, seq_len=stop)
            return _rotate(x, cos, sin, self.interleaved)
        cos, sin, cos2, sin2 = self._table(stop, x.device, x.dtype)
        if self.interleaved:
            return _rotate(x, cos[start:stop], sin[start:stop], self.interleaved)
        if x.requires_grad and torch.is_grad_enabled():  # training: the turn back is the gradient
            return _TurnHalves.apply(x, cos2[start:stop], sin[start:stop])
        return _turn_whole(x, cos2[start:stop], sin2[start:stop])  # a step looks its factors up
