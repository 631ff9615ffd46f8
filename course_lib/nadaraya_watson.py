r"""Nadaraya–Watson kernel regression: attention pooling with a fixed or learned kernel (chapter 2).

The estimator (Nadaraya 1964, Watson 1964) follows from kernel density estimates of
:math:`p(x, y)` and :math:`p(x)`:

.. math:: \hat f(x) = \sum_{i=1}^n \frac{K((x - x_i)/h)}{\sum_j K((x - x_j)/h)}\, y_i ,

attention pooling with query :math:`x`, keys :math:`x_i`, values :math:`y_i` and weights given by
the kernel.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import nn

from ._validation import (
    check_floating,
    check_ndim,
    check_non_negative_int,
    check_positive,
    check_same_size,
    check_scalar_regression,
    check_tensor,
)
from .progress import progress as progress_bar
from .smoothing import gaussian_kernel, get_kernel

__all__ = ["nadaraya_watson", "NWKernelRegression", "fit_nw_kernel_regression",
           "leave_one_out"]


def _as_2d(x: torch.Tensor, name: str) -> torch.Tensor:
    check_floating(x, name)
    check_ndim(x, name, (1, 2), "(n,) or (n, d)")
    return x[:, None] if x.dim() == 1 else x


def nadaraya_watson(x_train: torch.Tensor, y_train: torch.Tensor, x_query: torch.Tensor,
                    kernel: str | Callable[[torch.Tensor], torch.Tensor] = "gaussian",
                    bandwidth: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Nadaraya–Watson estimate at each query.

    Args:
        x_train: (n,) or (n, d) training inputs (the keys).
        y_train: (n,) or (n, m) training targets (the values).
        x_query: (q,) or (q, d) query inputs; same d as ``x_train``.
        kernel: ``"gaussian"``, ``"boxcar"``, ``"triangular"``, ``"epanechnikov"`` or a callable
            ``K(u)`` of the scaled distance (radial for d > 1: it receives :math:`\lVert u\rVert`).
        bandwidth: h > 0.

    Returns:
        ``(y_hat, weights)``: ``y_hat`` is (q,) or (q, m) like ``y_train``; ``weights`` is (q, n),
        rows non-negative and summing to 1.

    A compact kernel gives no weight to points farther than h. A query with no training point
    within reach has no estimate: its ``y_hat`` and its row of ``weights`` are NaN and a
    ``RuntimeWarning`` says how many queries this hit (never a silent number such as 0).

    Raises:
        ValueError: unknown kernel name, ``bandwidth <= 0``, ``x_train``/``y_train`` of different
            lengths, ``x_query`` of another input dimension than ``x_train``, or a kernel that
            returns negative values.
        TypeError: non-floating inputs, or inputs of different dtypes.

    Examples:
        >>> x = torch.tensor([0.0, 1.0, 2.0])
        >>> y_hat, w = nadaraya_watson(x, 2 * x, torch.tensor([1.0]), kernel="boxcar", bandwidth=1.5)
        >>> y_hat, w
        (tensor([2.]), tensor([[0.3333, 0.3333, 0.3333]]))
    """
    X, Q = _as_2d(x_train, "x_train"), _as_2d(x_query, "x_query")
    check_floating(y_train, "y_train")
    check_ndim(y_train, "y_train", (1, 2), "(n,) or (n, m)")
    # Quote the shapes as given (not the (n, 1) views) so the message matches the caller's code.
    check_same_size(x_train, "x_train", 0, y_train, "y_train", 0)
    if Q.shape[1] != X.shape[1]:
        raise ValueError(
            f"x_query and x_train must have the same input dimension d: x_query has shape "
            f"{tuple(x_query.shape)} (d={Q.shape[1]}) and x_train has shape {tuple(x_train.shape)} "
            f"(d={X.shape[1]})"
        )
    if not x_train.dtype == x_query.dtype == y_train.dtype:
        raise TypeError(
            f"x_train, y_train and x_query must share a dtype, got {x_train.dtype}, {y_train.dtype} "
            f"and {x_query.dtype}"
        )
    check_positive(bandwidth, "bandwidth")
    # Distances (q, n): squared for the Gaussian, plain for the compact kernels.
    diff = (Q[:, None, :] - X[None, :, :]) / bandwidth  # (q, n, d)
    if kernel in ("gaussian", gaussian_kernel):
        # exp(-u^2/2) normalised is a softmax of -u^2/2: stable even when every exp underflows.
        weights = torch.softmax(-diff.pow(2).sum(-1) / 2, dim=-1)
    else:
        k = get_kernel(kernel)
        u = diff[..., 0] if diff.shape[-1] == 1 else diff.norm(dim=-1)
        raw = k(u)  # (q, n)
        if bool((raw < 0).any()):
            raise ValueError("kernel returned negative values; a smoothing kernel must be >= 0")
        total = raw.sum(-1, keepdim=True)
        empty = total.squeeze(-1) == 0
        weights = raw / total.where(~empty[:, None], torch.ones_like(total))
        if bool(empty.any()):
            warnings.warn(
                f"{int(empty.sum())} of {len(Q)} queries have no training point within bandwidth "
                f"{bandwidth} of the {kernel if isinstance(kernel, str) else 'given'} kernel; "
                "their estimates (and weight rows) are NaN",
                RuntimeWarning,
                stacklevel=2,
            )
            weights = weights.masked_fill(empty[:, None], float("nan"))
    Y = y_train[:, None] if y_train.dim() == 1 else y_train
    y_hat = weights @ Y
    return (y_hat[:, 0] if y_train.dim() == 1 else y_hat), weights


class NWKernelRegression(nn.Module):
    r"""Nadaraya–Watson regression with a learnable Gaussian width :math:`w` (chapter 2).

    .. math:: f(x) = \sum_i \operatorname{softmax}_i\!\left(-\tfrac12 ((x - x_i) w)^2\right) y_i

    :math:`w` plays the role of :math:`1/h`: a larger :math:`w` means a narrower kernel.

    Args:
        init_w: starting value of :math:`w`.

    Examples:
        >>> x = torch.linspace(0, 5, 20)
        >>> model = NWKernelRegression(init_w=2.0)
        >>> with recording_attention(model):
        ...     y_hat = model(torch.tensor([1.0, 2.5]), x, torch.sin(x))  # queries (2,), keys and values (20,)
        >>> y_hat.shape, model.attention_weights.shape
        (torch.Size([2]), torch.Size([2, 20]))
        >>> torch.allclose(y_hat, nadaraya_watson(x, torch.sin(x), torch.tensor([1.0, 2.5]), bandwidth=0.5)[0])
        True
    """

    def __init__(self, init_w: float = 1.0) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(float(init_w)))
        self.record_weights = False  # see course_lib.recording_attention
        self.attention_weights: torch.Tensor | None = None

    def forward(
        self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> torch.Tensor:
        """Predict at each query.

        Args:
            queries: (n_queries,)
            keys: (n_keys,) shared by every query, or (n_queries, n_keys) one
                set per query (used for leave-one-out training).
            values: same shape as ``keys``.

        Returns:
            (n_queries,); while :func:`course_lib.recording_attention` is
            on, the weights (n_queries, n_keys) are kept in
            ``.attention_weights``.
        """
        check_scalar_regression(queries, keys, values)
        # scores -((x - x_i) w)^2 / 2, one row per query: (n_queries, n_keys)
        scores = -((queries[:, None] - keys) * self.w).pow(2) / 2
        weights = torch.softmax(scores, dim=-1)
        if self.record_weights:
            self.attention_weights = weights.detach()
        return (weights * values).sum(-1)  # (n_queries,)


def leave_one_out(x: torch.Tensor) -> torch.Tensor:
    """For each i, all entries of ``x`` but the i-th.

    Args:
        x: (n,)

    Returns:
        (n, n - 1); row i is ``x`` without ``x[i]``.

    Examples:
        >>> leave_one_out(torch.tensor([0.0, 1.0, 2.0, 3.0]))
        tensor([[1., 2., 3.],
                [0., 2., 3.],
                [0., 1., 3.],
                [0., 1., 2.]])
    """
    check_tensor(x, "x")
    check_ndim(x, "x", 1, "(n,)")
    n = len(x)
    keep = ~torch.eye(n, dtype=torch.bool, device=x.device)
    return x.expand(n, n)[keep].reshape(n, n - 1)


def fit_nw_kernel_regression(x_train: torch.Tensor, y_train: torch.Tensor, epochs: int = 50,
                             lr: float = 0.5, init_w: float = 1.0, progress: bool = False
                             ) -> tuple[NWKernelRegression, list[float]]:
    """Fit the width of :class:`NWKernelRegression` by SGD on the leave-one-out loss.

    Each training point is predicted from the *other* points (a held-out-point loss): fitting on
    the full set would let the width shrink to 0, where each point just predicts itself.

    Args:
        x_train, y_train: (n,) training data.
        epochs: full-batch gradient steps.
        lr: SGD learning rate.
        init_w: starting width parameter.
        progress: show a progress bar (:func:`course_lib.progress`: live, or one line).

    Returns:
        The fitted model and the loss (half mean squared error) before each step.

    Examples:
        >>> x = torch.linspace(0, 5, 20)
        >>> model, losses = fit_nw_kernel_regression(x, torch.sin(x), epochs=5)
        >>> len(losses), losses[-1] < losses[0], model.w.item() > 1.0  # a narrower kernel fits better here
        (5, True, True)
    """
    check_floating(x_train, "x_train")
    check_ndim(x_train, "x_train", 1, "(n,)")
    check_floating(y_train, "y_train")
    check_ndim(y_train, "y_train", 1, "(n,)")
    check_same_size(x_train, "x_train", 0, y_train, "y_train", 0)
    check_non_negative_int(epochs, "epochs")
    check_positive(lr, "lr")
    if len(x_train) < 2:
        raise ValueError(f"need at least 2 training points for leave-one-out, got {len(x_train)}")
    model = NWKernelRegression(init_w).to(x_train.device, x_train.dtype)
    keys, values = leave_one_out(x_train), leave_one_out(y_train)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in progress_bar(range(epochs), desc="fitting w", disable=not progress):
        optimizer.zero_grad()
        loss = 0.5 * (model(x_train, keys, values) - y_train).pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses
