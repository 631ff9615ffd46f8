"""Data-parallel training (course_lib.training.distributed, train_seq2seq under torchrun) with 2 CPU processes (gloo).

The check that matters: one step on 2 ranks with batches of b pairs each equals one step on 1 rank
with batches of 2b, i.e. DDP's gradient averaging plus the token weighting of each rank's loss give
exactly the gradient of the global batch's token-mean loss.
"""

import importlib
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import course_lib as cl
from course_lib.training.distributed import DistContext, init_distributed, shard_batches

# The end of each worker script: one_step's model gives its parameters and gradients, and run under torchrun the
# script saves them (with the history) to <folder>/rank<r>.pt.
RUN_ONE_STEP = textwrap.indent(textwrap.dedent('''
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return history, params, grads
'''), "    ") + textwrap.dedent('''
    if __name__ == "__main__":
        import torch.distributed as dist
        from course_lib.training.distributed import init_distributed
        context, device = init_distributed("cpu")
        history, params, grads = one_step(int(sys.argv[2]))
        torch.save({"steps": history.steps, "world_size": history.world_size, "loss": history.train_loss,
                    "params": params, "grads": grads}, f"{sys.argv[1]}/rank{context.rank}.pt")
        dist.destroy_process_group()
''')

# A tiny copy task with sentences of different lengths, so that the two ranks get different numbers of
# target tokens (an unweighted average of the ranks' mean losses would then be wrong).
WORKER = textwrap.dedent('''
    import sys
    import torch
    import course_lib as cl

    def tiny_data():
        words = "a b c d e f g h".split()
        pairs = [(words[: 1 + i % 7], words[i % 3: 1 + i % 3 + i % 5]) for i in range(8)]
        return cl.Seq2SeqData.from_splits(pairs, [], [], tokenizer="word", name="tiny")

    def one_step(batch_size):
        data = tiny_data()
        cl.set_seed(0)
        model = cl.Transformer(cl.TransformerConfig(len(data.src_vocab), len(data.tgt_vocab), num_hiddens=16,
                                                    ffn_num_hiddens=32, num_heads=2, num_enc_layers=1,
                                                    num_dec_layers=1, dropout=0.0))
        torch.manual_seed(123)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))  # away from the initialisation's symmetries
        history = cl.train_seq2seq(model, data, epochs=1, batch_size=batch_size, lr=1e-2, clip=None,
                                   device="cpu", progress=False, seed=0)
''') + RUN_ONE_STEP


def _torchrun(tmp_path, *args, nproc=2, timeout=120):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                           *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def _two_ranks(folder, script, *args):
    """Run ``folder/script`` on 2 ranks under torchrun; what each rank saved (``folder/rank<r>.pt``)."""
    done = _torchrun(folder, script, str(folder), *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return [torch.load(folder / f"rank{r}.pt") for r in range(2)]


def _import_worker(folder, name):
    """The worker script ``folder/<name>.py`` as a module, to run its ``one_step`` in this process."""
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp")
    (folder / "ddp_worker.py").write_text(WORKER)
    return folder


def test_two_ranks_with_batch_b_equal_one_rank_with_batch_2b(worker):
    b = 4
    ranks = _two_ranks(worker, "ddp_worker.py", str(b))
    ddp_worker = _import_worker(worker, "ddp_worker")
    history, params, grads = ddp_worker.one_step(2 * b)  # one process, batch 2b: the reference
    assert history.steps == 1 and history.world_size == 1
    for r, got in enumerate(ranks):
        assert got["steps"] == 1 and got["world_size"] == 2
        assert got["loss"][0] == pytest.approx(history.train_loss[0], rel=1e-5)  # the global batch's mean
        grad_diff = max((got["grads"][n] - g).abs().max().item() for n, g in grads.items())
        grad_scale = max(g.abs().max().item() for g in grads.values())
        # Adam's first step is lr * g / (|g| + eps): where |g| is at rounding level (~1e-9) its sign, and
        # so the update, is noise in either run. Compare the updates where the gradient is not negligible.
        param_diff = max(((got["params"][n] - p).abs() * (grads[n].abs() > 1e-5)).max().item()
                         for n, p in params.items() if n in grads)
        print(f"rank {r}: max |grad difference| {grad_diff:.2e} (largest |grad| {grad_scale:.2e}), "
              f"max |parameter difference| {param_diff:.2e} where |grad| > 1e-5")
        assert grad_diff < 1e-6
        assert param_diff < 1e-6
    # the two ranks agree exactly: DDP keeps the copies identical
    assert all(torch.equal(ranks[0]["params"][n], ranks[1]["params"][n]) for n in params)


def test_the_reference_distinguishes_averaging_from_summing(worker):
    """The tiny data gives the two ranks different token counts, so an unweighted mean would be detected."""
    data = _import_worker(worker, "ddp_worker").tiny_data()
    order = torch.randperm(len(data.train), generator=torch.Generator().manual_seed(0)).tolist()
    counts = [sum(len(data.train[i][1]) + 1 for i in part) for part in shard_batches(order, 4, 0, 2)][:1] + \
             [sum(len(data.train[i][1]) + 1 for i in part) for part in shard_batches(order, 4, 1, 2)][:1]
    assert counts[0] != counts[1]


LM_WORKER = textwrap.dedent('''
    import sys
    import torch
    import course_lib as cl
    from course_lib.data import LMData, SubwordTokenizer

    def tiny_lm_data():
        # a stream of 33 tokens: 8 windows of 4 + 1 tokens at offset 0, 7 at offsets 1-3 (an odd count: the
        # two ranks then get different numbers of windows in the one global batch of 2 x 4)
        tokenizer = SubwordTokenizer.train(["a b c d e f g h"] * 3, vocab_size=270)
        g = torch.Generator().manual_seed(0)
        stream = lambda n: torch.randint(4, 270, (n,), generator=g)
        return LMData(stream(33), stream(20), stream(20), tokenizer, "tiny")

    def one_step(batch_size):
        data = tiny_lm_data()
        cl.set_seed(0)
        model = cl.DecoderLM(cl.DecoderLMConfig(270, num_hiddens=16, num_heads=2, num_layers=1))
        torch.manual_seed(123)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        history = cl.train_lm(model, data, context=4, epochs=1, batch_size=batch_size, lr=1e-2, clip=None,
                              device="cpu", progress=False, seed=1)
''') + RUN_ONE_STEP


def test_language_model_two_ranks_with_batch_b_equal_one_rank_with_batch_2b(tmp_path):
    (tmp_path / "lm_worker.py").write_text(LM_WORKER)
    ranks = _two_ranks(tmp_path, "lm_worker.py", "4")
    lm_worker = _import_worker(tmp_path, "lm_worker")
    data = lm_worker.tiny_lm_data()
    starts = data.epoch_starts("train", 4, torch.Generator().manual_seed(1))  # the runs' first epoch
    assert len(starts) == 7  # an offset > 0: 4 windows on rank 0, 3 on rank 1
    history, params, grads = lm_worker.one_step(8)  # one process, batch 2b: the reference
    assert history.steps == 1
    for got in ranks:
        assert got["steps"] == 1 and got["world_size"] == 2
        assert got["loss"][0] == pytest.approx(history.train_loss[0], rel=1e-5)
        assert max((got["grads"][n] - g).abs().max().item() for n, g in grads.items()) < 1e-6
        assert max(((got["params"][n] - p).abs() * (grads[n].abs() > 1e-5)).max().item()
                   for n, p in params.items() if n in grads) < 1e-6


def test_cli_under_torchrun_logs_the_world_size_and_writes_one_checkpoint(tmp_path):
    out = tmp_path / "dates.pt"
    done = _torchrun(tmp_path, "-m", "course_lib", "train", "--task", "dates", "--examples", "300", "--epochs", "1",
                     "--batch-size", "32", "--device", "cpu", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("data parallel over 2 processes (gloo)") == 1  # rank 0 alone reports
    assert "world size 2" in done.stdout and done.stdout.count("saved ") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dates.pt"]
    from course_lib.cli import main

    assert main(["translate", "--checkpoint", str(out), "--device", "cpu", "March 3, 2001"]) == 0


def test_shard_batches_deals_like_distributed_sampler_and_keeps_ranks_in_step():
    order = list(range(10))
    parts = [list(shard_batches(order, 2, r, 2)) for r in range(2)]
    assert parts[0] == [[0, 2], [4, 6], [8]] and parts[1] == [[1, 3], [5, 7], [9]]
    # 9 items on 2 ranks with b = 4: the second global batch has one item only, dropped on both ranks
    assert [len(list(shard_batches(range(9), 4, r, 2))) for r in range(2)] == [1, 1]
    with pytest.raises(ValueError, match="rank must be in"):
        list(shard_batches(order, 2, 2, 2))


def test_without_torchrun_nothing_is_initialised(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_distributed("cpu") == (None, torch.device("cpu"))
    assert init_distributed() == (None, None)
    assert not torch.distributed.is_initialized()
    assert DistContext(0, 2, 0, "gloo").is_main


def test_bf16_autocast_trains_on_the_cpu():
    data = cl.Seq2SeqData.from_splits([(["a", "b"], ["b", "a"])] * 8, [], [], tokenizer="word", name="t")
    cl.set_seed(0)
    model = cl.Transformer(cl.TransformerConfig(len(data.src_vocab), len(data.tgt_vocab), num_hiddens=16,
                                                ffn_num_hiddens=32, num_heads=2, num_enc_layers=1, num_dec_layers=1))
    history = cl.train_seq2seq(model, data, epochs=20, batch_size=8, lr=1e-2, device="cpu", progress=False,
                               amp="bf16")
    assert history.amp == "bfloat16"
    assert history.train_loss[-1] < 0.5 * history.train_loss[0]
    with pytest.raises(ValueError, match="amp must be"):
        cl.train_seq2seq(model, data, epochs=1, amp="fp8", progress=False)
