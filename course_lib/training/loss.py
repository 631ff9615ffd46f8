r"""The training loss of a language model: cross-entropy of the next token, with its gradient written out.

For logits :math:`\mathbf z` over V tokens, :math:`\mathbf p = \operatorname{softmax}(\mathbf z)` and a target
distribution :math:`\mathbf q` (one-hot on the target, or :math:`(1-\epsilon)` on it and :math:`\epsilon/V`
everywhere with label smoothing), the loss :math:`-\sum_v q_v \log p_v` has the gradient

.. math:: \frac{\partial L}{\partial \mathbf z} = \mathbf p - \mathbf q,

since :math:`\partial \log p_v / \partial z_u = [u = v] - p_u` and :math:`\sum_v q_v = 1`. Autograd, going back
through ``log_softmax`` and ``nll_loss``, fills a tensor of zeros the size of the logits, scatters the target
into it, and reads it with the log-probabilities again; :func:`cross_entropy` writes
:math:`\mathbf p - \mathbf q` over the saved log-probabilities instead (an exponential, a scaling and a
subtraction at each target, all in place), which on a CPU takes about two thirds of autograd's time (the loss
alone, forward and backward, on 2,048 x 2,000 logits: ``benchmarks/bench_decoder_lm.py``).
"""

from __future__ import annotations

import torch

from .._validation import check_floating, check_int, check_probability, check_tensor

__all__ = ["cross_entropy"]

_HALF = (torch.float16, torch.bfloat16)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = -100,
                  label_smoothing: float = 0.0) -> torch.Tensor:
    r"""The mean cross-entropy of the counted targets: ``torch.nn.functional.cross_entropy`` on flattened rows,
    with the gradient :math:`\mathbf p - \mathbf q` written out (see the module's docstring).

    Equal to ``F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=ignore_index,
    label_smoothing=label_smoothing)`` in value and gradient (tested in float64 to 1e-12), except that it is 0,
    not NaN, when every target is ignored, and that half-precision logits are normalised in float32 (the loss is
    float32, under autocast too; their gradient comes back in their own dtype). It has no second derivative
    (``create_graph=True`` raises) and does not support ``torch.func`` transforms: use ``F.cross_entropy`` for
    those. On CUDA an id outside ``[0, V)`` fails the kernel (a device-side assert, as in ``F.cross_entropy``)
    instead of raising ``ValueError``: a check on the host would wait for the device at every call. What
    :func:`~course_lib.train_lm` minimises.

    Args:
        logits: (..., V) unnormalised scores of the next token.
        targets: (...) token ids in ``[0, V)``, ``torch.long``, or ``ignore_index`` where no target counts
            (padding; the position after the last).
        ignore_index: the id of a target that is not counted.
        label_smoothing: :math:`\epsilon` in [0, 1): the target distribution puts :math:`1 - \epsilon` on the
            target and :math:`\epsilon` spread evenly over the whole vocabulary.

    Returns:
        A scalar: the sum of the counted positions' losses divided by their number.

    Raises:
        RuntimeError: on a second backward pass through one call, or a double backward (``create_graph=True``):
            the backward pass writes the gradient over the saved log-probabilities. Call it again instead of
            ``retain_graph=True``; use ``F.cross_entropy`` for second derivatives.

    Examples:
        >>> logits = torch.zeros(2, 3, 5)  # uniform over V = 5 tokens: every counted target costs log 5
        >>> cross_entropy(logits, torch.tensor([[1, 2, -100], [3, -100, -100]]))
        tensor(1.6094)
        >>> logits = torch.tensor([[2.0, 0.0, 0.0]], requires_grad=True)
        >>> cross_entropy(logits, torch.tensor([0])).backward()
        >>> logits.grad  # softmax minus one-hot
        tensor([[-0.2130,  0.1065,  0.1065]])
    """
    check_floating(logits, "logits")
    check_tensor(targets, "targets")
    if logits.dim() < 1:
        raise ValueError("logits must have a vocabulary axis, (..., V), got a 0-d tensor")
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets must have shape {tuple(logits.shape[:-1])} (the logits' shape without the "
                         f"vocabulary axis) for logits of shape {tuple(logits.shape)}, got {tuple(targets.shape)}")
    if targets.dtype != torch.long:
        raise TypeError(f"targets must hold token ids as torch.long, got dtype {targets.dtype}")
    ignore_index = check_int(ignore_index, "ignore_index")
    label_smoothing = check_probability(label_smoothing, "label_smoothing")
    vocab = logits.shape[-1]
    if vocab == 0:
        raise ValueError(f"logits must score at least one token, got shape {tuple(logits.shape)}")
    if targets.device.type != "cuda":  # (on CUDA the check would wait for the device; gather's assert fails)
        outside = ((targets < 0) | (targets >= vocab)) & (targets != ignore_index)
        if bool(outside.any()):
            raise ValueError(f"targets must be token ids in [0, {vocab}) or ignore_index={ignore_index}, got "
                             f"{targets[outside][0].item()}")
    return _CrossEntropy.apply(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index, label_smoothing)


class _CrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of (N, V) logits; the backward pass turns the saved log-probabilities into p - q."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int,
                label_smoothing: float) -> torch.Tensor:
        log_p = torch.log_softmax(logits, -1, dtype=torch.float32 if logits.dtype in _HALF else None)  # (N, V)
        counted = targets != ignore_index  # (N,)
        safe = targets.masked_fill(~counted, 0)
        # (N,): 1/n on the n counted rows, 0 on the ignored ones: the mean, and the gradient's scale
        weight = counted.to(log_p.dtype) / counted.sum().clamp(min=1)
        # each row's loss, 0 on an ignored row whatever its logits hold (as F.cross_entropy); a product and a
        # sum, not `@`, which autocast would run in half precision
        row = -(1.0 - label_smoothing) * log_p.gather(1, safe[:, None]).squeeze(1)
        if label_smoothing > 0:
            row = row - label_smoothing * log_p.mean(-1)
        loss = (row.masked_fill(~counted, 0.0) * weight).sum()
        ctx.save_for_backward(log_p, safe, weight)
        ctx.label_smoothing, ctx.spent = label_smoothing, False
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        if torch.is_grad_enabled():  # create_graph=True: a second derivative was asked for
            raise RuntimeError("cross_entropy has no second derivative (its backward pass writes p - q in place): "
                               "use torch.nn.functional.cross_entropy where create_graph=True is needed")
        if ctx.spent:
            raise RuntimeError("cross_entropy's backward pass writes the gradient over its saved log-probabilities, "
                               "so it runs once per call: call cross_entropy again instead of retain_graph=True")
        ctx.spent = True
        log_p, safe, weight = ctx.saved_tensors
        eps = ctx.label_smoothing
        w = (weight * grad_loss)[:, None]  # (N, 1)
        grad = log_p.exp_().mul_(w)  # p, scaled, in the log-probabilities' place
        if eps > 0:
            grad.sub_(w * (eps / grad.shape[-1]))
        grad.scatter_add_(1, safe[:, None], w * -(1.0 - eps))  # minus q's (1 - eps) on the target
        return grad, None, None, None  # (autograd casts it to half logits' dtype)
