"""Saving and loading trained models: seq2seq models with their vocabularies, language models with their tokenizer.

A checkpoint is one ``torch.save`` file holding only plain data (dicts, lists, str, numbers,
tensors), so the loaders read it with ``torch.load(weights_only=True)``: loading a checkpoint never
runs code from the file. The model is rebuilt from its class name and its config (a frozen dataclass
stored as a dict), then the weights are loaded into it.

Two kinds of file, told apart by their ``format`` entry:

- ``"course_lib.decoding.protocol"`` (:func:`save_checkpoint` / :func:`load_checkpoint`, version
  :data:`FORMAT_VERSION`): a translation model and its source and target vocabularies;
- ``"course_lib.lm"`` (:func:`save_lm_checkpoint` / :func:`load_lm_checkpoint`, version
  :data:`LM_FORMAT_VERSION`): a :class:`~course_lib.models.decoder_lm.DecoderLM` and the byte-level BPE
  tokenizer of its corpus (stored as the tokenizer's JSON).

Each loader names the other when it is given the other kind of file. The seq2seq format is unchanged
by the addition of the language models: every seq2seq checkpoint written before still loads.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..utils import try_gpu

__all__ = ["CheckpointError", "FORMAT_VERSION", "LM_FORMAT_VERSION", "save_checkpoint", "load_checkpoint",
           "save_lm_checkpoint", "load_lm_checkpoint"]

FORMAT = "course_lib.decoding.protocol"
FORMAT_VERSION = 1
LM_FORMAT = "course_lib.lm"
LM_FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A file that is not a usable course_lib checkpoint (corrupted, wrong format, mismatched weights).

    Examples:
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "model.pt"
        ...     _ = path.write_bytes(b"not a checkpoint")
        ...     try:
        ...         load_checkpoint(path)
        ...     except CheckpointError as e:
        ...         print(isinstance(e, ValueError), "is not a readable checkpoint" in str(e))
        True True
    """


def _model_classes() -> dict[str, tuple[type[nn.Module], type]]:
    """The models a checkpoint can rebuild: class name -> (model class, config class)."""
    # Imported here, not at module level: the models import much more than a checkpoint needs.
    from ..models.rnn import BahdanauSeq2Seq, Seq2SeqRNN, Seq2SeqRNNConfig
    from ..models.transformer import Transformer, TransformerConfig

    return {
        "BahdanauSeq2Seq": (BahdanauSeq2Seq, Seq2SeqRNNConfig),
        "Seq2SeqRNN": (Seq2SeqRNN, Seq2SeqRNNConfig),
        "Transformer": (Transformer, TransformerConfig),
    }


def _check_plain(value: Any, where: str) -> None:
    """Raise ``TypeError`` unless ``value`` is plain data that ``torch.load(weights_only=True)`` accepts."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{where} has a key of type {type(key).__name__}; use str keys")
            _check_plain(item, f"{where}[{key!r}]")
        return
    raise TypeError(
        f"{where} holds a {type(value).__name__}; a checkpoint stores only dicts, lists, str, numbers, "
        f"bools, None and tensors"
    )


def save_checkpoint(path: str | os.PathLike, model: nn.Module, src_vocab, tgt_vocab,
                    meta: dict[str, Any] | None = None) -> Path:
    """Write the model, its config and both vocabularies to ``path`` (atomically).

    Args:
        path: the file to write (parent folders are created).
        model: a :class:`~course_lib.models.rnn.BahdanauSeq2Seq`, :class:`~course_lib.models.rnn.Seq2SeqRNN` or
            :class:`~course_lib.models.transformer.Transformer` (anything with a frozen-dataclass ``config``
            whose class is registered).
        src_vocab, tgt_vocab: :class:`course_lib.data.Vocab` objects (stored with ``to_dict()``).
        meta: optional plain data to keep alongside (task, tokenizer, metrics, ...).

    Returns:
        The path written.

    Examples:
        >>> vocab = Vocab.build([list("0123456789-")])
        >>> model = Transformer(TransformerConfig(len(vocab), len(vocab), num_hiddens=8, ffn_num_hiddens=16,
        ...                                       num_heads=2))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = save_checkpoint(Path(folder) / "runs" / "dates.pt", model, vocab, vocab, meta={"task": "dates"})
        ...     print(path.relative_to(folder), sorted(torch.load(path, weights_only=True)))
        runs/dates.pt ['config', 'format', 'format_version', 'meta', 'model_class', 'src_vocab', 'state_dict',
                       'tgt_vocab']
    """
    classes = _model_classes()
    name = type(model).__name__
    if name not in classes or not isinstance(model, classes[name][0]):
        raise TypeError(f"cannot checkpoint a {name}: known models are {sorted(classes)}")
    config = getattr(model, "config", None)
    if not dataclasses.is_dataclass(config) or not isinstance(config, classes[name][1]):
        raise TypeError(f"model.config must be a {classes[name][1].__name__}, got {type(config).__name__}")
    meta = _checked_meta(meta)
    content = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_class": name,
        "config": dataclasses.asdict(config),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "src_vocab": src_vocab.to_dict(),
        "tgt_vocab": tgt_vocab.to_dict(),
        "meta": meta,
    }
    _check_plain(content["config"], "config")
    return _write(path, content)


def _checked_meta(meta: dict[str, Any] | None) -> dict[str, Any]:
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise TypeError(f"meta must be a dict, got {type(meta).__name__}")
    _check_plain(meta, "meta")
    return meta


def _write(path: str | os.PathLike, content: dict[str, Any]) -> Path:
    """``torch.save`` the content to ``path`` atomically (parent folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename, so an interrupted save never leaves a half-written file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(content, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


def _check_state_dict(model: nn.Module, state_dict: dict, path: Path) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    wrong = [f"{k} (checkpoint {tuple(state_dict[k].shape)}, model {tuple(expected[k].shape)})"
             for k in sorted(set(expected) & set(state_dict))
             if not isinstance(state_dict[k], torch.Tensor) or state_dict[k].shape != expected[k].shape]
    problems = []
    for label, items in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong)):
        if items:
            more = f" and {len(items) - 3} more" if len(items) > 3 else ""
            problems.append(f"{label}: {', '.join(items[:3])}{more}")
    if problems:
        raise CheckpointError(
            f"{path}: the weights do not match the model its config describes ({'; '.join(problems)})"
        )


_KINDS = {FORMAT: ("seq2seq", "load_checkpoint (the translate command)"),
          LM_FORMAT: ("language-model", "load_lm_checkpoint (the generate command)")}


def _read(path: Path, fmt: str, version: int, entries: tuple[str, ...]) -> dict[str, Any]:
    """The content of a checkpoint file of format ``fmt``, safely loaded and checked for its entries."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {path}")
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        # torch's own message suggests weights_only=False, which would run code from the file: not shown.
        raise CheckpointError(
            f"{path} is not a readable checkpoint: the file is corrupted or truncated, or it holds objects "
            f"that a safe (weights_only) load refuses ({type(e).__name__})"
        ) from e
    found = content.get("format") if isinstance(content, dict) else None
    if found != fmt:
        if found in _KINDS:
            kind, loader = _KINDS[found]
            raise CheckpointError(f"{path} is a course_lib {kind} checkpoint: load it with {loader}")
        raise CheckpointError(f"{path} is a torch file but not a course_lib {_KINDS[fmt][0]} checkpoint")
    if content.get("format_version") != version:
        raise CheckpointError(
            f"{path} has checkpoint format version {content.get('format_version')!r}; this course_lib "
            f"reads version {version}"
        )
    missing = [k for k in entries if k not in content]
    if missing:
        raise CheckpointError(f"{path} lacks the entries {missing}")
    return content


def _load_weights(model: nn.Module, content: dict[str, Any], path: Path) -> None:
    state_dict = content["state_dict"]
    if not isinstance(state_dict, dict):
        raise CheckpointError(f"{path}: state_dict is a {type(state_dict).__name__}, not a dict")
    _check_state_dict(model, state_dict, path)
    model.load_state_dict(state_dict)


def _rebuild(content: dict[str, Any], classes: dict[str, tuple[type[nn.Module], type]], path: Path
             ) -> tuple[Any, nn.Module]:
    """``(config, model)``: the stored model rebuilt from its class name (one of ``classes``: name ->
    (model class, config class)) and config, with the stored weights loaded."""
    name = content["model_class"]
    if name not in classes:
        raise CheckpointError(f"{path} holds a model of unknown class {name!r}; known: {sorted(classes)}")
    model_class, config_class = classes[name]
    stored = dict(content["config"]) if isinstance(content["config"], dict) else content["config"]
    if name in ("BahdanauSeq2Seq", "Seq2SeqRNN") and isinstance(stored, dict) and "num_hiddens" in stored:
        stored["hidden_size"] = stored.pop("num_hiddens")  # the GRU size's name before course_lib 0.1's rename
    try:
        config = config_class(**stored)
        model = model_class(config)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: its {name} config cannot build a model: {_first_line(e)}") from e
    _load_weights(model, content, path)
    return config, model


def load_checkpoint(path: str | os.PathLike, device: torch.device | str | None = None):
    """Rebuild a model saved by :func:`save_checkpoint`, with its vocabularies.

    Args:
        path: the checkpoint file.
        device: where to put the model; default :func:`course_lib.try_gpu`.

    Returns:
        ``(model, src_vocab, tgt_vocab, meta)``; the model is in eval mode.

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: the file is corrupted or truncated, is not a course_lib seq2seq checkpoint (a
            language-model checkpoint is named as such), has an unknown format version or model class,
            or holds weights that do not fit its config.

    Examples:
        >>> vocab = Vocab.build([list("0123456789-")])
        >>> model = Transformer(TransformerConfig(len(vocab), len(vocab), num_hiddens=8, ffn_num_hiddens=16,
        ...                                       num_heads=2))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = save_checkpoint(Path(folder) / "dates.pt", model, vocab, vocab, meta={"task": "dates"})
        ...     again, src_vocab, tgt_vocab, meta = load_checkpoint(path, device="cpu")
        >>> again.config == model.config, src_vocab == vocab, meta, again.training
        (True, True, {'task': 'dates'}, False)
        >>> all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values()))
        True
    """
    path = Path(path)
    content = _read(path, FORMAT, FORMAT_VERSION, ("model_class", "config", "state_dict", "src_vocab", "tgt_vocab"))
    config, model = _rebuild(content, _model_classes(), path)
    from ..data import Vocab

    try:
        src_vocab = Vocab.from_dict(content["src_vocab"])
        tgt_vocab = Vocab.from_dict(content["tgt_vocab"])
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"{path}: the stored vocabularies are malformed: {_first_line(e)}") from e
    for side, vocab in (("src", src_vocab), ("tgt", tgt_vocab)):
        size = getattr(config, f"{side}_vocab_size", len(vocab))
        if len(vocab) != size:
            raise CheckpointError(
                f"{path}: the {side} vocabulary has {len(vocab)} tokens but the model was built for {size}"
            )
    device = torch.device(device) if device is not None else try_gpu()
    return model.to(device).eval(), src_vocab, tgt_vocab, content.get("meta", {})


def save_lm_checkpoint(path: str | os.PathLike, model: nn.Module, tokenizer, meta: dict[str, Any] | None = None
                       ) -> Path:
    """Write a language model, its config and its tokenizer to ``path`` (atomically).

    Args:
        path: the file to write (parent folders are created).
        model: a :class:`~course_lib.models.decoder_lm.DecoderLM`.
        tokenizer: the :class:`course_lib.data.SubwordTokenizer` of its corpus (stored as its JSON); its
            vocabulary size must be the model's.
        meta: optional plain data to keep alongside (corpus, context length, perplexity, ...).

    Returns:
        The path written.

    Examples:
        >>> import tempfile, pathlib
        >>> from course_lib.data import LMData, generated_sentences
        >>> data = LMData.from_sentences(generated_sentences(100), vocab_size=270)
        >>> model = DecoderLM(DecoderLMConfig(data.vocab_size, num_hiddens=16, num_heads=2, num_layers=1))
        >>> folder = tempfile.mkdtemp()
        >>> path = save_lm_checkpoint(pathlib.Path(folder) / "lm.pt", model, data.tokenizer, {"context": 16})
        >>> loaded, tokenizer, meta = load_lm_checkpoint(path, device="cpu")
        >>> loaded.config == model.config, meta, tokenizer.vocab == data.tokenizer.vocab
        (True, {'context': 16}, True)
    """
    from ..data import SubwordTokenizer
    from ..models.decoder_lm import DecoderLM

    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    if not isinstance(tokenizer, SubwordTokenizer):
        raise TypeError(f"tokenizer must be a course_lib.data.SubwordTokenizer, got {type(tokenizer).__name__}")
    if len(tokenizer) != model.config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model was built for "
                         f"vocab_size={model.config.vocab_size}")
    content = {
        "format": LM_FORMAT,
        "format_version": LM_FORMAT_VERSION,
        "model_class": "DecoderLM",
        "config": dataclasses.asdict(model.config),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "tokenizer": tokenizer.to_json(),
        "meta": _checked_meta(meta),
    }
    _check_plain(content["config"], "config")
    return _write(path, content)


def load_lm_checkpoint(path: str | os.PathLike, device: torch.device | str | None = None):
    """Rebuild a language model saved by :func:`save_lm_checkpoint`, with its tokenizer.

    Args:
        path: the checkpoint file.
        device: where to put the model; default :func:`course_lib.try_gpu`.

    Returns:
        ``(model, tokenizer, meta)``: the :class:`~course_lib.models.decoder_lm.DecoderLM` in eval mode, the
        :class:`course_lib.data.SubwordTokenizer` and the stored meta data.

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: the file is corrupted or truncated, is not a language-model checkpoint (a
            seq2seq checkpoint is named as such), has an unknown format version or model class, holds
            weights that do not fit its config, or a tokenizer that is malformed or of another size.

    Examples:
        >>> import tempfile, pathlib
        >>> from course_lib.data import LMData, generated_sentences
        >>> data = LMData.from_sentences(generated_sentences(100), vocab_size=270)
        >>> model = DecoderLM(DecoderLMConfig(data.vocab_size, num_hiddens=16, num_heads=2, num_layers=1))
        >>> path = save_lm_checkpoint(pathlib.Path(tempfile.mkdtemp()) / "lm.pt", model, data.tokenizer)
        >>> loaded, tokenizer, meta = load_lm_checkpoint(path, device="cpu")
        >>> loaded.training, len(tokenizer) == model.config.vocab_size, meta
        (False, True, {})
        >>> all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
        True
    """
    from ..data import SubwordTokenizer
    from ..models.decoder_lm import DecoderLM, DecoderLMConfig

    path = Path(path)
    content = _read(path, LM_FORMAT, LM_FORMAT_VERSION, ("model_class", "config", "state_dict", "tokenizer"))
    config, model = _rebuild(content, {"DecoderLM": (DecoderLM, DecoderLMConfig)}, path)
    try:
        tokenizer = SubwordTokenizer.from_json(content["tokenizer"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: the stored tokenizer is malformed: {_first_line(e)}") from e
    if len(tokenizer) != config.vocab_size:
        raise CheckpointError(f"{path}: the tokenizer has {len(tokenizer)} tokens but the model was built for "
                              f"{config.vocab_size}")
    device = torch.device(device) if device is not None else try_gpu()
    return model.to(device).eval(), tokenizer, content.get("meta", {})
