"""``cross_entropy``: torch's cross-entropy in value and gradient, with the gradient p - q written out."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import course_lib as cl
from course_lib.training.loss import cross_entropy


def _torch_loss_and_grad(logits, targets, **kwargs):
    x = logits.detach().clone().requires_grad_(True)
    loss = F.cross_entropy(x.flatten(0, -2), targets.flatten(), **kwargs)
    loss.backward()
    return loss.detach(), x.grad


def _ours_loss_and_grad(logits, targets, **kwargs):
    x = logits.detach().clone().requires_grad_(True)
    loss = cross_entropy(x, targets, **kwargs)
    loss.backward()
    return loss.detach(), x.grad


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 9), st.sampled_from([0.0, 0.1, 0.5]),
       st.floats(0.0, 0.9), st.integers(0, 2**16))
def test_value_and_gradient_equal_torchs_in_float64(batch, steps, vocab, ignored, eps, seed):
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(batch, steps, vocab, generator=g, dtype=torch.float64)
    targets = torch.randint(0, vocab, (batch, steps), generator=g)
    targets[torch.rand(batch, steps, generator=g) < ignored] = -100
    targets.view(-1)[0] = int(torch.randint(0, vocab, (1,), generator=g))  # at least one counted target
    want_loss, want_grad = _torch_loss_and_grad(logits, targets, label_smoothing=eps)
    loss, grad = _ours_loss_and_grad(logits, targets, label_smoothing=eps)
    torch.testing.assert_close(loss, want_loss, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=0, atol=1e-12)


def test_the_gradient_is_softmax_minus_the_target_distribution_over_the_count():
    logits = torch.tensor([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0], [3.0, -1.0, 0.0]], dtype=torch.float64)
    targets = torch.tensor([2, -100, 0])
    eps = 0.3
    q = torch.full((3, 3), eps / 3, dtype=torch.float64)
    q[0, 2] += 1 - eps
    q[2, 0] += 1 - eps
    want = (torch.softmax(logits, -1) - q) / 2  # two counted rows; the ignored row gets nothing
    want[1] = 0
    _, grad = _ours_loss_and_grad(logits, targets, label_smoothing=eps)
    torch.testing.assert_close(grad, want, rtol=0, atol=1e-15)


def test_a_custom_ignore_index():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 5, generator=g, dtype=torch.float64)
    targets = torch.tensor([1, 7, 4, 0])  # 7: not a token of 5, but the ignored id
    want_loss, want_grad = _torch_loss_and_grad(logits, targets.masked_fill(targets == 7, -100), label_smoothing=0.2)
    loss, grad = _ours_loss_and_grad(logits, targets, ignore_index=7, label_smoothing=0.2)
    torch.testing.assert_close(loss, want_loss, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=0, atol=1e-12)


def test_the_upstream_gradient_scales_the_gradient():
    logits = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0, 1, 2, 3, 0, 1])
    (2.5 * cross_entropy(logits, targets)).backward()
    want, = torch.autograd.grad(2.5 * F.cross_entropy(logits, targets), logits)
    torch.testing.assert_close(logits.grad, want, rtol=0, atol=1e-12)


def test_every_target_ignored_is_zero_with_a_zero_gradient():
    logits = torch.randn(2, 3, 4, requires_grad=True)
    loss = cross_entropy(logits, torch.full((2, 3), -100))
    loss.backward()
    assert loss.item() == 0.0 and torch.all(logits.grad == 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_logits_are_normalised_in_float32(dtype):
    g = torch.Generator().manual_seed(4)
    logits = (4 * torch.randn(8, 50, generator=g)).to(dtype).requires_grad_(True)
    targets = torch.randint(0, 50, (8,), generator=g)
    loss = cross_entropy(logits, targets)
    loss.backward()
    want_loss, want_grad = _torch_loss_and_grad(logits.detach().float(), targets)
    assert loss.dtype == torch.float32 and logits.grad.dtype == dtype
    torch.testing.assert_close(loss, want_loss, rtol=0, atol=1e-6)
    torch.testing.assert_close(logits.grad.float(), want_grad, rtol=0, atol=1e-3)


def test_the_inputs_are_left_unchanged():
    logits = torch.randn(3, 5, requires_grad=True)
    before = logits.detach().clone()
    targets = torch.tensor([4, 0, -100])
    cross_entropy(logits, targets).backward()
    assert torch.equal(logits.detach(), before) and torch.equal(targets, torch.tensor([4, 0, -100]))


def test_a_second_backward_pass_is_refused_not_wrong():  # (so gradcheck, which runs two, cannot be used)
    logits = torch.randn(3, 5, requires_grad=True)
    loss = cross_entropy(logits, torch.tensor([1, 2, 3]))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once per call"):
        loss.backward()


def test_under_autocast_the_loss_stays_float32():
    g = torch.Generator().manual_seed(5)
    logits = 5 * torch.randn(64, 1000, generator=g)
    targets = torch.randint(0, 1000, (64,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = cross_entropy(logits, targets, label_smoothing=0.1)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, F.cross_entropy(logits, targets, label_smoothing=0.1), rtol=0, atol=1e-5)


def test_what_an_ignored_row_holds_does_not_reach_the_loss():
    logits = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    logits[:, 0] = float("-inf")  # a token no row may produce; the ignored row's placeholder target is 0
    targets = torch.tensor([1, 2, -100])
    torch.testing.assert_close(cross_entropy(logits, targets), F.cross_entropy(logits, targets), rtol=0, atol=1e-12)
    logits[2] = float("nan")
    shifted = targets - (targets >= 0).long()
    for eps in (0.0, 0.1):
        torch.testing.assert_close(cross_entropy(logits[:, 1:], shifted, label_smoothing=eps),
                                   F.cross_entropy(logits[:, 1:], shifted, label_smoothing=eps), rtol=0, atol=1e-12)
    zero = cross_entropy(torch.randn(2, 4), torch.full((2,), -100))
    assert zero.item() == 0.0 and math.copysign(1.0, zero.item()) == 1.0  # 0, not -0


def test_a_double_backward_is_refused_not_silently_wrong():
    x = torch.randn(4, 3, dtype=torch.float64)
    A = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    W = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    loss = cross_entropy(torch.tanh(x @ A) @ W, torch.tensor([0, 1, 2, 1]))
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(loss, W, create_graph=True)


def test_non_contiguous_one_dimensional_and_empty_logits():
    g = torch.Generator().manual_seed(7)
    z = torch.randn(5, 4, 3, generator=g, dtype=torch.float64).transpose(0, 2)  # (3, 4, 5), not contiguous
    t = torch.randint(0, 5, (3, 4), generator=g)
    for got, want in zip(_ours_loss_and_grad(z, t), _torch_loss_and_grad(z, t), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    z1 = torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True)
    a, = torch.autograd.grad(cross_entropy(z1, torch.tensor(2)), z1)
    b, = torch.autograd.grad(F.cross_entropy(z1, torch.tensor(2)), z1)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert cross_entropy(torch.randn(0, 5), torch.zeros(0, dtype=torch.long)).item() == 0.0


def test_an_ignore_index_inside_the_vocabulary():
    g = torch.Generator().manual_seed(8)
    logits = torch.randn(6, 4, generator=g, dtype=torch.float64)
    targets = torch.tensor([0, 1, 0, 3, 2, 0])
    for got, want in zip(_ours_loss_and_grad(logits, targets, ignore_index=0),
                         _torch_loss_and_grad(logits, targets, ignore_index=0), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_bad_inputs_name_the_argument():
    logits = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"targets must have shape \(2, 3\)"):
        cross_entropy(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="targets must hold token ids as torch.long"):
        cross_entropy(logits, torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"token ids in \[0, 4\) or ignore_index=-100, got 4"):
        cross_entropy(logits, torch.tensor([[0, 1, 2], [3, 4, 0]]))
    with pytest.raises(ValueError, match=r"got -1"):
        cross_entropy(logits, torch.tensor([[0, 1, 2], [3, -1, 0]]))
    with pytest.raises(TypeError, match="logits must be a floating-point"):
        cross_entropy(torch.zeros(2, 3, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="ignore_index must be an int"):
        cross_entropy(logits, torch.zeros(2, 3, dtype=torch.long), ignore_index=1.5)
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\)"):
        cross_entropy(logits, torch.zeros(2, 3, dtype=torch.long), label_smoothing=1.0)
    with pytest.raises(ValueError, match="logits must have a vocabulary axis"):
        cross_entropy(torch.tensor(1.0), torch.tensor(0))


def test_exported_flat():
    assert cl.cross_entropy is cross_entropy
