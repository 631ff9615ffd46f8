"""The speed benchmarks (benchmarks/bench_attention.py, bench_transformer.py) run, compare like with like, and
judge their targets correctly. Timings themselves are not asserted: CI machines are shared; `make bench` on a
quiet machine measures them."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks/ is a package of the repository, not of course_lib
from benchmarks import bench_attention as ba  # noqa: E402
from benchmarks import bench_decoder_lm as bd  # noqa: E402
from benchmarks import bench_transformer as bt  # noqa: E402

sys.path.pop(0)
CPU = torch.device("cpu")


def _result(label: str, ours: float, torch_s: float, d2l: float) -> ba.Result:
    return ba.Result(label, "(B, T, d, h)", ours, torch_s, ours / torch_s, ours / torch_s, d2l, ours / d2l,
                     ours / d2l, bare_s=ours, bare_ratio=1.0)


def test_every_contender_is_timed_and_computes_the_same_function():
    # bench_config checks, before timing, that torch's module, D2L's and the bare calls agree with ours
    # (assert_close): a wrong floor would raise here.
    timings = ba.bench_config(batch=3, length=7, num_hiddens=16, num_heads=2, device=CPU, repeats=2, n_inner=1)
    assert set(timings.wall) == {"ours", "torch", "d2l", "bare"}
    assert all(len(times) == 2 and min(times) > 0 for times in timings.wall.values())


def test_the_targets_name_the_faster_peer_and_the_long_size_alone_has_the_d2l_target():
    short = _result("short", ours=0.9, torch_s=1.2, d2l=1.0)  # D2L is the faster peer here
    ((what, value, target),) = short.targets()
    assert what.startswith("ours/d2l") and value == 0.9 and target == ba.TARGET_FASTER_PEER
    long = _result("long", ours=0.8, torch_s=0.9, d2l=1.0)  # torch is the faster peer here
    (faster, d2l) = long.targets()
    assert faster[0].startswith("ours/torch") and round(faster[1], 6) == round(0.8 / 0.9, 6)
    assert d2l == ("ours/d2l", 0.8, ba.TARGET_D2L_LONG)


def test_the_table_prints_each_target_met_or_missed():
    text = ba.format_table([_result("short", 0.9, 1.2, 1.0), _result("long", 0.8, 0.9, 1.0)], CPU)
    lines = text.splitlines()
    assert "short: ours/d2l (the faster peer) = 0.90, target <= 1.00: met" in lines
    assert "long: ours/d2l = 0.80, target <= 0.70: MISSED" in lines
    assert ba.target_line("x", 0.70, 0.70).endswith("met")  # the target itself is met
    assert ba.target_line("x", 0.7049, 0.70).endswith("MISSED")  # rounding to 0.70 does not meet it


def test_the_training_step_benchmark_runs_both_models_on_the_same_function():
    setup = bt.StepSetup(batch=4, min_len=3, max_len=5, vocab=40, num_hiddens=16, ffn_num_hiddens=32, num_heads=2,
                         num_layers=1)
    timings, max_diff = bt.bench_train_step(setup, CPU, repeats=2)
    assert set(timings.wall) == {"ours", "torch"} and max_diff < 1e-4


def test_the_loss_benchmark_times_ours_and_torchs_loss_on_the_same_logits():
    steps = bd.loss_steps(bd.Setup(vocab=50), batch=2, length=8)
    assert set(steps) == {"ours", "torch"}
    torch.testing.assert_close(steps["ours"](), steps["torch"](), rtol=0, atol=1e-6)
