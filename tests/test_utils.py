"""utils: seeding, device choice and parameter counting."""

import os
import random

import numpy as np
import pytest
import torch
from torch import nn

from course_lib.utils import by_device, model_device, num_parameters, seeded, set_seed, try_gpu


@pytest.fixture
def restore_determinism(monkeypatch):
    """set_seed switches on deterministic algorithms globally: undo that after the test."""
    # setenv first so that monkeypatch records the original state and restores it afterwards.
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    state = torch.random.get_rng_state()
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
    torch.random.set_rng_state(state)


def test_set_seed_makes_every_generator_reproducible(restore_determinism):
    set_seed(123)
    first = (torch.rand(5), random.random(), np.random.rand(3))
    set_seed(123)
    second = (torch.rand(5), random.random(), np.random.rand(3))
    assert torch.equal(first[0], second[0])
    assert first[1] == second[1]
    assert np.array_equal(first[2], second[2])
    set_seed(124)
    assert not torch.equal(torch.rand(5), first[0])


def test_set_seed_matches_torch_manual_seed(restore_determinism):
    set_seed(7)
    ours = torch.rand(4)
    expected = torch.rand(4, generator=torch.Generator().manual_seed(7))
    assert torch.equal(ours, expected)


def test_set_seed_returns_a_generator_seeded_the_same_way(restore_determinism):
    g = set_seed(42)
    assert isinstance(g, torch.Generator) and g.device.type == "cpu"
    assert g.initial_seed() == 42
    assert torch.equal(torch.rand(6, generator=g), torch.rand(6, generator=torch.Generator().manual_seed(42)))


def test_set_seed_requests_deterministic_algorithms_only_when_asked(restore_determinism):
    torch.use_deterministic_algorithms(False)
    set_seed(0, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()
    set_seed(0)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"  # cuBLAS needs it for determinism


@pytest.mark.parametrize(("seed", "error"), [(-1, ValueError), (2**32, ValueError), (1.5, TypeError),
                                             ("0", TypeError), (True, TypeError)])
def test_set_seed_rejects_bad_seeds(seed, error, restore_determinism):
    with pytest.raises(error, match="seed must be"):
        set_seed(seed)


def _fake_devices(monkeypatch, n_cuda, mps):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n_cuda > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n_cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize(
    "n_cuda, mps, i, expected",
    [
        (2, True, 0, "cuda:0"),  # CUDA first, even with MPS
        (2, True, 1, "cuda:1"),
        (0, True, 0, "mps"),  # then Apple's MPS
        (0, True, 1, "cpu"),  # MPS has one device
        (1, False, 1, "cpu"),  # index past the last GPU
        (0, False, 0, "cpu"),
    ],
)
def test_try_gpu_picks_cuda_then_mps_then_the_cpu(monkeypatch, n_cuda, mps, i, expected):
    _fake_devices(monkeypatch, n_cuda, mps)
    assert try_gpu(i) == torch.device(expected)


def test_try_gpu_returns_a_usable_device():
    assert torch.zeros(1, device=try_gpu()).device.type == try_gpu().type


def test_the_cli_defaults_to_try_gpu(monkeypatch):
    from course_lib import cli

    _fake_devices(monkeypatch, 0, True)
    assert cli.default_device() == torch.device("mps")
    _fake_devices(monkeypatch, 1, True)
    assert cli.default_device() == torch.device("cuda:0")


def test_seeded_restores_every_global_setting_it_changes(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch_state, py_state, np_state = torch.random.get_rng_state(), random.getstate(), np.random.get_state()
    with seeded(5):
        assert torch.are_deterministic_algorithms_enabled()
        inside = torch.rand(3)
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert random.getstate() == py_state and np.random.get_state()[1].tolist() == np_state[1].tolist()
    assert torch.are_deterministic_algorithms_enabled() == enabled
    assert torch.is_deterministic_algorithms_warn_only_enabled() == warn_only
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    with seeded(5):
        assert torch.equal(torch.rand(3), inside)


def test_model_device_is_where_the_parameters_are():
    assert model_device(nn.Linear(2, 2)) == torch.device("cpu")
    assert model_device(nn.ReLU()) == torch.device("cpu")


def test_try_gpu_rejects_a_negative_index():
    with pytest.raises(ValueError, match="i must be non-negative"):
        try_gpu(-1)
    with pytest.raises(TypeError, match="i must be an int"):
        try_gpu("cuda")


def test_num_parameters_counts_weights_and_biases():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2, bias=False))
    assert num_parameters(model) == 3 * 4 + 4 + 4 * 2
    model[0].weight.requires_grad_(False)
    assert num_parameters(model) == 4 + 4 * 2
    assert num_parameters(model, trainable_only=False) == 3 * 4 + 4 + 4 * 2
    assert num_parameters(nn.ReLU()) == 0


def test_set_seed_accepts_numpy_integers(restore_determinism):
    set_seed(np.int64(5))
    assert torch.equal(torch.rand(3), torch.rand(3, generator=torch.Generator().manual_seed(5)))


def test_glue_publishes_the_value_for_myst_nb(monkeypatch):
    myst_nb = pytest.importorskip("myst_nb", reason="myst_nb comes with the book extra (pip install -e '.[book]')")

    recorded = []
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display: recorded.append((name, value, display)))
    from course_lib.utils import glue

    glue("ratio", 2.5)
    assert recorded == [("ratio", 2.5, False)]  # recorded, not displayed


def test_glue_does_nothing_without_myst_nb(monkeypatch):
    import sys

    from course_lib.utils import glue

    monkeypatch.setitem(sys.modules, "myst_nb", None)  # import fails
    assert glue("ratio", 2.5) is None


def test_by_device_picks_the_gpu_value_on_cuda_only():
    assert by_device(cpu=8, gpu=30, device="cpu") == 8
    assert by_device(cpu=8, gpu=30, device=torch.device("cuda", 0)) == 30  # a device object, no GPU needed
    assert by_device(cpu="small", gpu="large", device="meta") == "small"
    expected = 30 if torch.cuda.is_available() else 8
    assert by_device(8, 30) == expected


def test_stacked_linear_equals_the_layers_and_follows_their_weights():
    from course_lib.utils import stacked_linear

    torch.manual_seed(0)
    layers, memo, x = (torch.nn.Linear(4, 3), torch.nn.Linear(4, 2)), {}, torch.randn(6, 4)
    with torch.no_grad():
        first = stacked_linear(x, layers, memo)
        layers[1].weight.add_(1.0)  # an optimizer's in-place step: the kept stack must not be used again
        second = stacked_linear(x, layers, memo)
    expected = torch.cat([layer(x) for layer in layers], -1)
    torch.testing.assert_close(second, expected)
    assert not torch.allclose(first, second)
    out = stacked_linear(x, layers, memo)  # with autograd: the gradient reaches each layer's weight
    out.sum().backward()
    torch.testing.assert_close(layers[0].weight.grad, x.sum(0).expand(3, 4))
    torch.testing.assert_close(layers[1].weight.grad, x.sum(0).expand(2, 4))
