"""Command line: train a translation model or a language model within a time budget, then use it.

Usage::

    python -m course_lib train --task dates --minutes 2 --out dates.pt
    python -m course_lib train --task fra-eng --minutes 3          # subword vocabulary (BPE), no <unk>
    python -m course_lib train --task fra-eng --download           # no copy of the pairs here: fetch them (opt-in)
    python -m course_lib train --task fra-eng --data path/to/fra.txt --model rnn --minutes 10
    python -m course_lib translate --checkpoint dates.pt "March 3, 2001"
    python -m course_lib translate --checkpoint dates.pt < dates.txt   # one output line per input line
    python -m course_lib train --task lm --minutes 3 --out lm.pt  # a decoder-only LM on English sentences
    python -m course_lib train --task lm --data my_text.txt --positional alibi --context 128
    python -m course_lib train --task lm --corpus python --epochs 1   # on the standard library's source
    python -m course_lib generate --checkpoint lm.pt "The cat" ""   # continue a prompt; "" starts afresh

``--minutes`` bounds the training; the held-out evaluation that follows is not counted (beam search over
fra-eng's 1,097 test sources adds a minute or more on a CPU, ``--beam-size 1`` less), and its time is printed.

Errors print one line on stderr and exit with status 2 when the command line itself is wrong (an unknown
option or task, a malformed value such as ``--device gpu``, an option the task does not take) and 1 when it is
right but cannot run here (a missing data file or checkpoint, a device this machine or this torch lacks, a
corrupt checkpoint); 130 on Ctrl-C. The device is checked before any data is read or model built.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn, TextIO, TypeVar

if TYPE_CHECKING:
    import torch

__all__ = ["main", "build_parser"]

PROG = "python -m course_lib"
SUBWORD_VOCAB_SIZE = 2000
LM_VOCAB_SIZE = 1000  # the English sentences of fra-eng are ~80k tokens: a larger vocabulary sees few of each
PYTHON_VOCAB_SIZE = 2048  # the standard library's source: ~660k training tokens (chapter 12)
LM_CONTEXT = 64
TRANSLATION_TASKS = ("dates", "fra-eng")
POSITIONAL = ("rotary", "alibi", "none", "sinusoidal", "learned")
# Beam search by default: on fra-eng after 3 CPU minutes, beam 4 gave 39.3 BLEU where greedy gave 36.0.
BEAM_SIZE = 4


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block) on stderr."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


T = TypeVar("T")


def _argument_type(parse: Callable[[str], T], kind: str, valid: Callable[[T], bool], rule: str) -> Callable[[str], T]:
    """An argparse ``type``: ``parse`` the text (else "expected <kind>"), then require ``valid`` (else the rule)."""

    def convert(text: str) -> T:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not valid(value):
            raise argparse.ArgumentTypeError(f"{rule}, got {text}")
        return value

    return convert


_positive_float = _argument_type(float, "a number", lambda v: v > 0 and math.isfinite(v), "must be a positive number")
_positive_int = _argument_type(int, "an integer", lambda v: v > 0, "must be a positive integer")
_fraction = _argument_type(float, "a number", lambda v: 0.0 <= v < 1.0, "must be in [0, 1)")
_seed = _argument_type(int, "an integer", lambda v: 0 <= v < 2**32, "must be in [0, 2**32)")
_probability = _argument_type(float, "a number", lambda v: 0.0 <= v <= 1.0, "must be in [0, 1]")
_non_negative_float = _argument_type(float, "a number", lambda v: v >= 0 and math.isfinite(v),
                                     "must be a number >= 0")
# The device types the library runs on (torch.device accepts more: meta, hpu, ...).
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


def _device(text: str) -> str:
    """An argparse ``type`` for ``--device``: a device string torch parses, of a type the library runs on."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a device such as cpu, cuda, cuda:1 or mps, got {text!r}") from None
    if device.type not in DEVICE_TYPES:
        raise argparse.ArgumentTypeError(f"course_lib runs on {', '.join(DEVICE_TYPES)}, got {text!r}")
    return text


class DeviceUnavailableError(RuntimeError):
    """The ``--device`` asked for is well formed but not on this machine (or not in this build of torch)."""


def check_device_available(text: str) -> None:
    """Raise :class:`DeviceUnavailableError` (one line, saying why) unless ``--device text`` can run here.

    Checked before any data is read or model built: torch itself would only fail at the first tensor moved
    there, after minutes of loading, with an ``AssertionError`` ("Torch not compiled with CUDA enabled").

    Examples:
        >>> check_device_available("cpu")  # always there
        >>> import torch
        >>> try:
        ...     check_device_available(f"cuda:{torch.cuda.device_count()}")  # one past the last GPU, or no GPU
        ... except DeviceUnavailableError as e:
        ...     print(str(e).split(":")[0])
        --device cuda
    """
    import torch

    device = torch.device(text)
    if device.type == "cuda":
        if not torch.backends.cuda.is_built():
            raise DeviceUnavailableError(
                f"--device {text}: this torch ({torch.__version__}) is built without CUDA; install a CUDA build "
                f"of torch (https://pytorch.org/get-started/locally/), or leave --device out to use the best "
                f"device there is")
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(f"--device {text}: torch sees no CUDA GPU here (torch.cuda.is_available() "
                                         f"is False: no GPU, or no driver); leave --device out to use the CPU")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise DeviceUnavailableError(f"--device {text}: this machine has {count} CUDA device(s), "
                                         f"cuda:0 to cuda:{count - 1}")
    elif device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise DeviceUnavailableError(f"--device {text}: Apple's MPS is not available here (it needs a Mac with "
                                         f"Apple silicon and a torch built with MPS); leave --device out")
    elif device.type == "xpu":
        xpu = getattr(torch, "xpu", None)
        if xpu is None or not xpu.is_available():
            raise DeviceUnavailableError(f"--device {text}: torch sees no Intel GPU (xpu) here")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m course_lib`` (sub-commands ``train``, ``translate`` and ``generate``)."""
    parser = _Parser(prog=PROG, description="Train and use the course's translation and language models.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train a model within a time budget and report held-out metrics")
    train.add_argument("--task", required=True, choices=[*TRANSLATION_TASKS, "lm"],
                       help="dates: date formats -> ISO (generated, character level); fra-eng: English -> "
                            "French (a tab-separated file); lm: a decoder-only language model on sentences "
                            "(the English side of the fra-eng file, or any text file)")
    train.add_argument("--data", metavar="PATH",
                       help="fra-eng: a tab-separated file of sentence pairs; lm: a text file, one sentence a "
                            "line (its first tab-separated column), or with --corpus python a folder of .py "
                            "modules (default: fra-eng/fra.txt in the folder COURSE_DATA_DIR names, else in "
                            "../shared/data; with --corpus python, the standard library)")
    train.add_argument("--download", action="store_true",
                       help="fra-eng and lm without --data: when there is no copy of the English-French pairs, "
                            "download D2L's archive (SHA-1 checked) into $COURSE_CACHE_DIR or ~/.cache/course_lib "
                            "(nothing is downloaded without it)")
    train.add_argument("--corpus", choices=["english", "python"],
                       help="lm only: english, the sentences of --data (default), or python, the standard "
                            "library's modules split by file (--data: another folder of .py files)")
    train.add_argument("--vocab", choices=["subword", "word"],
                       help="fra-eng only: byte-level BPE learned on the training split (no <unk>, default) or "
                            "the chapters' word-level vocabulary")
    train.add_argument("--vocab-size", type=_positive_int,
                       help=f"subword vocabulary size: per language for fra-eng (default {SUBWORD_VOCAB_SIZE}), "
                            f"of the corpus for lm (default {LM_VOCAB_SIZE})")
    train.add_argument("--model", choices=["transformer", "rnn"],
                       help="translation tasks: Transformer (default) or GRU with Bahdanau attention")
    train.add_argument("--context", type=_positive_int, metavar="L",
                       help=f"lm only: the tokens of a training window (default {LM_CONTEXT})")
    train.add_argument("--positional", choices=POSITIONAL,
                       help="lm only: rotary (RoPE, default), alibi, none, or the sinusoidal or learned vectors "
                            "added to the embeddings")
    train.add_argument("--minutes", type=_positive_float, default=2.0,
                       help="wall-clock training budget (default: %(default)s); the held-out evaluation after it "
                            "is not counted: beam search over fra-eng's test sentences adds a minute or more on a "
                            "CPU (--beam-size 1 less)")
    train.add_argument("--epochs", type=_positive_int, help="stop after this many epochs if sooner")
    train.add_argument("--examples", type=_positive_int,
                       help="dates: pairs to generate; fra-eng: read only the first (shortest) pairs; lm: read "
                            "only the first lines (default: the loader's)")
    train.add_argument("--batch-size", type=_positive_int,
                       help="pairs (translation, default 64) or windows (lm, default 32) per step and process")
    train.add_argument("--lr", type=_positive_float, help="peak learning rate (default: per model)")
    train.add_argument("--label-smoothing", type=_fraction, default=0.0, metavar="EPS",
                       help="label smoothing of the training loss, in [0, 1) (default: %(default)s)")
    train.add_argument("--seed", type=_seed, default=0, help="default: %(default)s")
    train.add_argument("--beam-size", type=_positive_int,
                       help=f"translation tasks: decoding for the held-out metrics, 1 = greedy, else beam search "
                            f"(default: {BEAM_SIZE})")
    train.add_argument("--out", metavar="FILE", help="checkpoint to write (default: TASK-MODEL.pt, "
                                                     "lm-POSITIONAL.pt for the language model)")
    train.add_argument("--device", type=_device,
                       help="cpu, cuda, cuda:1, mps, ... (default: CUDA, then MPS, then the CPU; under torchrun, "
                            "cuda:LOCAL_RANK); checked before anything is loaded")
    train.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                       help="auto: bf16 (or fp16) autocast on CUDA, fp32 on the CPU; bf16: bf16 autocast on any "
                            "device; fp32: no autocast (default: %(default)s)")
    train.add_argument("--compile", action="store_true", help="compile the model with torch.compile (GPU runs)")

    tr = commands.add_parser("translate", help="translate sentences with a trained checkpoint")
    tr.add_argument("--checkpoint", required=True, metavar="FILE", help="written by the train command")
    tr.add_argument("sentences", nargs="*", help="sentences to translate (default: read stdin, one per line)")
    tr.add_argument("--beam-size", type=_positive_int, default=BEAM_SIZE,
                    help="1 = greedy, else beam search (default: %(default)s)")
    tr.add_argument("--batch-size", type=_positive_int, default=64, help="default: %(default)s")
    tr.add_argument("--max-len", type=_positive_int, help="tokens to generate at most")
    tr.add_argument("--device", type=_device, help="default: CUDA, then MPS, then the CPU")

    gen = commands.add_parser("generate", help="continue sentences with a trained language model (train --task lm)")
    gen.add_argument("--checkpoint", required=True, metavar="FILE", help="written by train --task lm")
    gen.add_argument("prompts", nargs="*",
                     help='beginnings of sentences to continue; "" starts a new sentence (default: read stdin, '
                          "one prompt per line)")
    gen.add_argument("--max-new-tokens", type=_positive_int, default=40,
                     help="tokens to add at most; a sentence also ends at its <eos> (default: %(default)s)")
    gen.add_argument("--temperature", type=_non_negative_float, default=0.8,
                     help="sampling temperature; 0 is greedy decoding (default: %(default)s)")
    gen.add_argument("--top-k", type=_positive_int, default=50,
                     help="sample among the k most likely tokens (default: %(default)s)")
    gen.add_argument("--top-p", type=_probability, help="then sample within the nucleus of this probability mass "
                                                       "(top-p, in [0, 1]; default: off)")
    gen.add_argument("--seed", type=_seed, default=0, help="of the sampling (default: %(default)s)")
    gen.add_argument("--device", type=_device, help="default: CUDA, then MPS, then the CPU")
    return parser


def _check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors for options given to a task they do not apply to; then fill in the per-task defaults."""
    if args.command != "train":
        return
    if args.task == "dates":
        for option in ("data", "download"):
            if getattr(args, option):
                parser.error(f"--{option} applies to --task fra-eng and lm only (the dates task is generated)")
    if args.data is not None and args.download:
        parser.error("--download fetches the English-French pairs when there is no --data: give one or the other")
    if args.task == "lm":
        for option in ("model", "vocab", "beam_size"):
            if getattr(args, option) is not None:
                parser.error(f"--{option.replace('_', '-')} applies to the translation tasks "
                             f"({', '.join(TRANSLATION_TASKS)}), not to --task lm")
        args.corpus = args.corpus or "english"
        if args.corpus == "python" and args.examples is not None:
            parser.error("--examples applies to --corpus english only (the python corpus is split by file)")
        if args.corpus == "python" and args.download:
            parser.error("--download fetches the English-French pairs: --corpus python reads the standard library")
        args.vocab_size = args.vocab_size or (PYTHON_VOCAB_SIZE if args.corpus == "python" else LM_VOCAB_SIZE)
        args.context = args.context or LM_CONTEXT
        args.positional = args.positional or "rotary"
        args.batch_size = args.batch_size or 32
        return
    for option in ("context", "positional", "corpus"):
        if getattr(args, option) is not None:
            parser.error(f"--{option} applies to --task lm only")
    args.vocab = args.vocab or "subword"
    args.vocab_size = args.vocab_size or SUBWORD_VOCAB_SIZE
    args.model = args.model or "transformer"
    args.beam_size = args.beam_size or BEAM_SIZE
    args.batch_size = args.batch_size or 64


def data_file(args: argparse.Namespace) -> str:
    """The text file fra-eng and lm read: ``--data``, else the data folder's copy, else (``--download``) the cache's.

    Raises:
        DataNotFoundError: no such file, a folder instead of a file, or no copy and no ``--download``; the message
            says what to type.

    Examples:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> args = build_parser().parse_args(["train", "--task", "fra-eng", "--data", folder])
        >>> try:
        ...     data_file(args)
        ... except FileNotFoundError as e:
        ...     print(str(e).replace(folder, "DIR"))
        --data DIR is a folder: give the file itself, or set COURSE_DATA_DIR=DIR if it holds fra-eng/fra.txt
    """
    from pathlib import Path

    from .data import FRA_ENG_FILE, DataNotFoundError, find_data_file
    from .data.download import FRA_ENG_URL, cache_dir, download_fra_eng

    if args.data is not None:
        path = Path(args.data)
        if path.is_dir():
            inside = path / FRA_ENG_FILE
            hint = f" ({inside} is there)" if inside.is_file() else ""
            raise DataNotFoundError(f"--data {args.data} is a folder: give the file itself{hint}, or set "
                                    f"COURSE_DATA_DIR={args.data} if it holds {FRA_ENG_FILE}")
        if not path.is_file():
            raise DataNotFoundError(f"--data {args.data}: no such file")
        return str(path)
    try:
        return str(find_data_file(FRA_ENG_FILE))
    except DataNotFoundError as e:
        if not args.download:
            reason = str(e).removesuffix(" (nothing is downloaded)")  # the library's words; the CLI has --download
            raise DataNotFoundError(f"{reason}; or add --download to fetch it ({FRA_ENG_URL}, SHA-1 checked, into "
                                    f"{cache_dir()}), or give a file with --data PATH") from None
    path = download_fra_eng(quiet=True)
    print(f"English-French pairs: {path} (downloaded once from {FRA_ENG_URL}, SHA-1 checked, and kept: later runs "
          f"with --download read it there)", file=sys.stderr, flush=True)
    return str(path)


def _load_data(args: argparse.Namespace):
    from . import data as data_lib

    if args.task == "dates":
        kwargs = {"seed": args.seed}
        if args.examples is not None:
            kwargs["n_examples"] = args.examples
        return data_lib.load_dates(**kwargs)
    path = data_file(args)
    if args.vocab == "subword":
        return data_lib.load_fra_eng_subwords(path=path, vocab_size=args.vocab_size, seed=args.seed,
                                              max_examples=args.examples)
    return data_lib.load_fra_eng(path=path, seed=args.seed, max_examples=args.examples)


def _build_model(kind: str, data):
    src_size, tgt_size = len(data.src_vocab), len(data.tgt_vocab)
    if kind == "rnn":
        from .models.rnn import BahdanauSeq2Seq, Seq2SeqRNNConfig

        config = Seq2SeqRNNConfig(src_size, tgt_size, embed_size=64, hidden_size=128, num_layers=2, dropout=0.1)
        return BahdanauSeq2Seq(config), {"lr": 3e-3, "warmup_steps": 0}
    from .models.transformer import Transformer, TransformerConfig

    config = TransformerConfig(src_size, tgt_size, num_hiddens=128, ffn_num_hiddens=256, num_heads=4,
                               num_enc_layers=2, num_dec_layers=2, dropout=0.1)
    # Peak 2e-3 (measured: 36.0 BLEU against 31.9 at 1e-3 after 3 CPU minutes on fra-eng subwords).
    return Transformer(config), {"lr": 2e-3, "warmup_steps": 200}


def default_device() -> torch.device:
    """The device a command runs on without ``--device``: :func:`course_lib.try_gpu` (CUDA, MPS, CPU)."""
    from .utils import try_gpu

    return try_gpu()


def _train(args: argparse.Namespace, out: TextIO) -> int:
    import torch

    from .training.distributed import init_distributed

    # Under torchrun: join the process group (gloo on the CPU, NCCL on GPUs); otherwise nothing changes.
    context, device = init_distributed(args.device)
    try:
        if context is not None and not context.is_main:
            out = open(os.devnull, "w")  # only rank 0 reports
        return _train_in_process(args, out, context, device or (torch.device(args.device) if args.device
                                                                 else default_device()))
    finally:
        if context is not None:
            import torch.distributed as dist

            dist.destroy_process_group()


def _report_training(history, out: TextIO) -> None:
    """The one line both tasks print when training ends: steps, epochs, time, why it stopped, the losses."""
    valid = f"; valid loss {history.valid_loss[-1]:.3f}" if history.valid_loss else ""
    print(f"trained {history.steps} steps ({history.epochs} full epochs) in {history.seconds:.1f} s, "
          f"stopped by {history.stopped_by}; train loss {history.train_loss[-1]:.3f}{valid}; "
          f"world size {history.world_size}, autocast {history.amp}", file=out, flush=True)


def _train_in_process(args: argparse.Namespace, out: TextIO, context, device) -> int:
    if args.task == "lm":
        return _train_lm(args, out, context, device)
    from .training.checkpoint import save_checkpoint
    from .training.train import evaluate, train_seq2seq
    from .utils import num_parameters, set_seed

    data = _load_data(args)
    set_seed(args.seed)  # the model's initial weights (DDP then copies rank 0's to every rank)
    model, defaults = _build_model(args.model, data)
    lr = args.lr if args.lr is not None else defaults["lr"]
    world = (f"; data parallel over {context.world_size} processes ({context.backend}), "
             f"{args.batch_size} pairs each per step" if context is not None else "")
    print(f"{args.task}: {len(data.train)} train / {len(data.valid)} valid / {len(data.test)} test pairs; "
          f"{args.model} with {num_parameters(model):,} parameters on {device}{world}", file=out, flush=True)
    amp = {"auto": True, "bf16": "bf16", "fp32": False}[args.precision]
    history = train_seq2seq(model, data, minutes=args.minutes, epochs=args.epochs, lr=lr,
                            batch_size=args.batch_size, warmup_steps=defaults["warmup_steps"], device=device,
                            seed=args.seed, progress=sys.stderr.isatty() and (context is None or context.is_main),
                            amp=amp, compile=args.compile, label_smoothing=args.label_smoothing)
    if context is not None and not context.is_main:
        return 0  # rank 0 evaluates and writes the one checkpoint
    _report_training(history, out)
    split = "test" if len(data.test) else "valid"
    decoding = "beam" if args.beam_size > 1 else "greedy"
    start = time.perf_counter()
    metrics = evaluate(model, data, split, decoding=decoding, beam_size=args.beam_size)
    scored = "sacrebleu on detokenised text" if data.tokenizer == "subword" else "token BLEU"
    print(f"{split}: exact match {metrics['exact_match']:.3f}, BLEU {metrics['bleu']:.1f} ({scored}), "
          f"{metrics['n_unk']} translations with <unk> ({metrics['n']} sources, {decoding} decoding; evaluated "
          f"in {time.perf_counter() - start:.1f} s, after the --minutes budget)", file=out, flush=True)
    path = args.out if args.out else f"{args.task}-{args.model}.pt"
    meta = {"task": args.task, "tokenizer": data.tokenizer, "data": getattr(data, "name", args.task),
            "seed": args.seed, "steps": history.steps, "seconds": history.seconds,
            "metrics": {"split": split, "exact_match": metrics["exact_match"], "bleu": metrics["bleu"],
                        "n": metrics["n"], "n_unk": metrics["n_unk"], "decoding": decoding}}
    if data.tokenizer == "subword":
        meta["subword"] = {"src": data.src_tokenizer.to_json(), "tgt": data.tgt_tokenizer.to_json()}
    save_checkpoint(path, model, data.src_vocab, data.tgt_vocab, meta=meta)
    print(f"saved {path}", file=out, flush=True)
    return 0


def _train_lm(args: argparse.Namespace, out: TextIO, context, device) -> int:
    import math

    from .data import load_english_lm, load_python_lm
    from .models.decoder_lm import DecoderLM, DecoderLMConfig
    from .training.checkpoint import save_lm_checkpoint
    from .training.train import evaluate_lm, train_lm
    from .utils import num_parameters, set_seed

    if args.corpus == "python":
        data = load_python_lm(vocab_size=args.vocab_size, seed=args.seed, root=args.data)
    else:
        data = load_english_lm(path=data_file(args), vocab_size=args.vocab_size, seed=args.seed,
                               max_examples=args.examples)
    split = "test" if len(data.test) > args.context else "valid"
    for name in ("train", split):
        data.window_starts(name, args.context)  # a clear error when a split is shorter than one window
    set_seed(args.seed)  # the model's initial weights (DDP then copies rank 0's to every rank)
    # Learned positions exist for the trained window only; the other encodings can read longer inputs.
    max_len = args.context if args.positional == "learned" else max(2048, 4 * args.context)
    config = DecoderLMConfig(data.vocab_size, num_hiddens=128, num_heads=4, num_kv_heads=2, num_layers=4,
                             dropout=0.1, tie_embeddings=True, positional=args.positional, max_len=max_len)
    model = DecoderLM(config)
    world = (f"; data parallel over {context.world_size} processes ({context.backend}), "
             f"{args.batch_size} windows each per step" if context is not None else "")
    info = data.info
    units, counts = ("files", {k: len(v) for k, v in info["documents"].items()}) if "documents" in info else \
        ("sentences", info["sentences"])
    print(f"lm: {counts['train']:,} train / {counts['valid']:,} valid / "
          f"{counts['test']:,} test {units}, {len(data.train):,} training tokens "
          f"(byte-level BPE, {data.vocab_size} tokens); decoder ({args.positional} positions) with "
          f"{num_parameters(model):,} parameters on {device}{world}", file=out, flush=True)
    amp = {"auto": True, "bf16": "bf16", "fp32": False}[args.precision]
    history = train_lm(model, data, context=args.context, minutes=args.minutes, epochs=args.epochs,
                       lr=args.lr if args.lr is not None else 2e-3, batch_size=args.batch_size, warmup_steps=100,
                       device=device, seed=args.seed,
                       progress=sys.stderr.isatty() and (context is None or context.is_main), amp=amp,
                       compile=args.compile, label_smoothing=args.label_smoothing)
    if context is not None and not context.is_main:
        return 0  # rank 0 evaluates and writes the one checkpoint
    _report_training(history, out)
    start = time.perf_counter()
    loss = evaluate_lm(model, data, split, args.context)
    n_tokens = len(data.window_starts(split, args.context)) * args.context
    print(f"{split}: perplexity {math.exp(loss):.2f} (cross-entropy {loss:.3f} nats per token over "
          f"{n_tokens:,} tokens, windows of {args.context}; evaluated in {time.perf_counter() - start:.1f} s)",
          file=out, flush=True)
    path = args.out if args.out else f"lm-{args.positional}.pt"
    meta = {"task": "lm", "data": data.name, "path": info.get("path", info.get("root")), "seed": args.seed,
            "context": args.context,
            "steps": history.steps, "seconds": history.seconds,
            "metrics": {"split": split, "perplexity": math.exp(loss), "cross_entropy": loss, "n_tokens": n_tokens}}
    save_lm_checkpoint(path, model, data.tokenizer, meta=meta)
    print(f"saved {path}", file=out, flush=True)
    return 0


def _generate(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    import torch

    from .training.checkpoint import load_lm_checkpoint

    device = torch.device(args.device) if args.device else default_device()
    model, tokenizer, _ = load_lm_checkpoint(args.checkpoint, device=device)
    eos = tokenizer.vocab.eos
    generator = torch.Generator(device=device).manual_seed(args.seed)

    def run(prompt: str) -> str:
        # A sentence of the training stream starts after an <eos>: so does every prompt.
        tokens = tokenizer.tokenize(prompt)
        ids = torch.tensor([[eos, *tokenizer.vocab.encode(tokens)]], device=device)
        new = model.generate(ids, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                             top_p=args.top_p, generator=generator, eos_id=eos)[0, ids.shape[1]:].tolist()
        new = new[:new.index(eos)] if eos in new else new
        return tokenizer.detokenize(tokens + tokenizer.vocab.decode(new))

    if args.prompts:
        for prompt in args.prompts:
            print(run(prompt), file=out, flush=True)
        return 0
    for line in stdin:
        print(run(line.rstrip("\r\n")), file=out, flush=True)
    return 0


def _translate(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    import torch

    from .decoding.search import translate
    from .training.checkpoint import CheckpointError, load_checkpoint

    device = torch.device(args.device) if args.device else default_device()
    model, src_vocab, tgt_vocab, meta = load_checkpoint(args.checkpoint, device=device)
    tokenizer = meta.get("tokenizer")
    detokenizer = None
    if tokenizer == "subword":
        from .data import SubwordTokenizer

        try:
            src_tok = SubwordTokenizer.from_json(meta["subword"]["src"])
            tgt_tok = SubwordTokenizer.from_json(meta["subword"]["tgt"])
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{args.checkpoint}: its subword tokenizers are missing or malformed ({e})") from e
        if src_tok.vocab != src_vocab or tgt_tok.vocab != tgt_vocab:
            raise CheckpointError(f"{args.checkpoint}: its subword tokenizers do not match its vocabularies")
        tokenizer, detokenizer = src_tok, tgt_tok.detokenize
    elif tokenizer not in ("char", "word"):
        raise CheckpointError(
            f"{args.checkpoint}: its meta data does not say how to tokenize (tokenizer={tokenizer!r})")

    def run(lines: Sequence[str]) -> list[str]:
        return translate(model, list(lines), src_vocab, tgt_vocab, tokenizer,
                         decoding="beam" if args.beam_size > 1 else "greedy", beam_size=args.beam_size,
                         max_len=args.max_len, batch_size=args.batch_size, detokenizer=detokenizer)

    if args.sentences:
        for line in run(args.sentences):
            print(line, file=out)
        return 0
    if stdin.isatty():
        # Interactive: answer each line as soon as it is typed.
        for line in stdin:
            print(run([line.rstrip("\r\n")])[0], file=out, flush=True)
        return 0
    lines = [line.rstrip("\r\n") for line in stdin]
    for start in range(0, len(lines), args.batch_size):
        for line in run(lines[start:start + args.batch_size]):
            print(line, file=out)
        out.flush()
    return 0


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Run the command line; returns the exit status (0 on success, 1 on a runtime error).

    Usage errors exit through argparse with status 2 (``SystemExit``).

    Args:
        argv: the arguments without the program name (default ``sys.argv[1:]``).
        stdin, stdout: streams to read sentences from and write results to (default the process's).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_options(parser, args)
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    try:
        if args.device is not None:
            check_device_available(args.device)  # before any data is read or model built
        if args.command == "train":
            return _train(args, stdout)
        if args.command == "generate":
            return _generate(args, stdin, stdout)
        return _translate(args, stdin, stdout)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, ImportError, RuntimeError) as e:
        # Runtime errors: the command line is right, this machine or its files cannot run it (usage errors, 2,
        # are argparse's, raised above).
        message = " ".join(str(e).split()) or type(e).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 1
