"""A token <-> id vocabulary with the four special tokens every seq2seq vocabulary shares.

Ids ``0..3`` are always ``<pad> <bos> <eos> <unk>``, then the reserved tokens (in the order given),
then the corpus tokens by decreasing frequency, ties broken alphabetically, so the same corpus gives
the same ids on every machine and Python version (``Counter.most_common`` alone would not: its ties
follow insertion order).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from .._validation import check_positive_int

__all__ = ["BOS", "EOS", "PAD", "SPECIAL_TOKENS", "UNK", "Vocab"]

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)


def _check_token(token: object, what: str) -> str:
    if not isinstance(token, str):
        raise TypeError(f"{what} must be a str, got {type(token).__name__} ({token!r})")
    return token


class Vocab:
    """Map tokens to ids and back.

    Build one from a corpus with :meth:`Vocab.build`; ``Vocab(tokens)`` takes the full id -> token
    list (as stored by :meth:`to_dict`).

    Args:
        idx_to_token: every token in id order; it must start with ``<pad> <bos> <eos> <unk>`` and
            hold no token twice.

    Attributes:
        pad, bos, eos, unk: the ids 0, 1, 2, 3.
        idx_to_token: the tokens in id order (a tuple).
        token_to_idx: the inverse mapping (a dict).

    Examples:
        >>> vocab = Vocab.build([["the", "cat"], ["the", "dog"]])
        >>> vocab, len(vocab)
        (Vocab(size=7, tokens=['the', 'cat', 'dog']), 7)
        >>> vocab["cat"], vocab["zebra"]  # an unknown token gives <unk> = 3
        (5, 3)
        >>> Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "a"]).idx_to_token[4]
        'a'
    """

    pad, bos, eos, unk = 0, 1, 2, 3

    def __init__(self, idx_to_token: Sequence[str]) -> None:
        if isinstance(idx_to_token, str):
            raise TypeError("idx_to_token must be a sequence of str tokens, got a single str")
        tokens = tuple(_check_token(t, f"idx_to_token[{i}]") for i, t in enumerate(idx_to_token))
        if tokens[:4] != SPECIAL_TOKENS:
            raise ValueError(f"idx_to_token must start with {list(SPECIAL_TOKENS)}, got {list(tokens[:4])}")
        token_to_idx: dict[str, int] = {}
        for i, t in enumerate(tokens):
            if t in token_to_idx:
                raise ValueError(f"idx_to_token holds {t!r} twice (ids {token_to_idx[t]} and {i})")
            token_to_idx[t] = i
        self.idx_to_token = tokens
        self.token_to_idx = token_to_idx

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], min_freq: int = 1,
              reserved_tokens: Sequence[str] = ()) -> Vocab:
        """Count the tokens of a corpus and keep those seen at least ``min_freq`` times.

        Args:
            sentences: token sequences (a ``str`` counts as its sequence of characters).
            min_freq: rarer tokens are left out (they will map to ``<unk>``).
            reserved_tokens: tokens given ids right after the four specials, whatever their count.

        Returns:
            The vocabulary: specials, reserved tokens, then corpus tokens by (count desc, token asc).

        Raises:
            TypeError: a token or reserved token is not a str, or ``min_freq`` is not an int.
            ValueError: ``min_freq < 1``, or a reserved token is a special token or repeated.

        Examples:
            >>> Vocab.build([["the", "cat"], ["the", "dog"]], reserved_tokens=["<sep>"]).idx_to_token
            ('<pad>', '<bos>', '<eos>', '<unk>', '<sep>', 'the', 'cat', 'dog')
            >>> Vocab.build(["abca"], min_freq=2).idx_to_token  # a str is its characters
            ('<pad>', '<bos>', '<eos>', '<unk>', 'a')
        """
        min_freq = check_positive_int(min_freq, "min_freq")
        if isinstance(reserved_tokens, str):
            raise TypeError("reserved_tokens must be a sequence of str, got a single str (wrap it in a list)")
        reserved = [_check_token(t, f"reserved_tokens[{i}]") for i, t in enumerate(reserved_tokens)]
        for t in reserved:
            if t in SPECIAL_TOKENS:
                raise ValueError(f"reserved_tokens must not repeat a special token, got {t!r}")
        if len(set(reserved)) != len(reserved):
            raise ValueError(f"reserved_tokens holds a token twice: {reserved}")
        counter: Counter[str] = Counter()
        for i, sentence in enumerate(sentences):
            for t in sentence:
                _check_token(t, f"a token of sentence {i}")
            counter.update(sentence)
        taken = set(SPECIAL_TOKENS) | set(reserved)
        kept = sorted((t for t, c in counter.items() if c >= min_freq and t not in taken),
                      key=lambda t: (-counter[t], t))
        return cls([*SPECIAL_TOKENS, *reserved, *kept])

    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __contains__(self, token: object) -> bool:
        return token in self.token_to_idx

    def __getitem__(self, token: str) -> int:
        """The id of ``token``; an unknown token gives ``self.unk``."""
        return self.token_to_idx.get(_check_token(token, "token"), self.unk)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.idx_to_token == other.idx_to_token

    def __hash__(self) -> int:
        return hash(self.idx_to_token)

    def __repr__(self) -> str:
        head = ", ".join(repr(t) for t in self.idx_to_token[4:12])
        more = ", ..." if len(self) > 12 else ""
        return f"Vocab(size={len(self)}, tokens=[{head}{more}])"

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Ids of ``tokens`` (unknown tokens -> ``<unk>``); no ``<bos>``/``<eos>`` is added.

        Raises:
            TypeError: ``tokens`` is a single str or holds a non-str.

        Examples:
            >>> Vocab.build([["the", "cat"], ["the"]]).encode(["the", "zebra", "cat"])
            [4, 3, 5]
        """
        if isinstance(tokens, str):
            raise TypeError("tokens must be a sequence of str tokens, got a single str (use list(text) for "
                            "characters)")
        return [self[t] for t in tokens]

    def to_token(self, idx: int) -> str:
        """The token with id ``idx``.

        Raises:
            ValueError: ``idx`` is not in ``[0, len(self))``.

        Examples:
            >>> vocab = Vocab.build([["the", "cat"], ["the"]])
            >>> vocab.to_token(2), vocab.to_token(5)
            ('<eos>', 'cat')
        """
        if not 0 <= idx < len(self):
            raise ValueError(f"token id {idx} is out of range for a vocabulary of size {len(self)}")
        return self.idx_to_token[idx]

    def decode(self, ids: Sequence[int] | torch.Tensor, strip_special: bool = True) -> list[str]:
        """Tokens of ``ids`` up to (not including) the first ``<eos>``.

        ``<pad>`` and ``<bos>`` are dropped when ``strip_special``; ``<unk>`` is always kept since it
        stands for a real (unknown) token and a metric should count it as wrong.

        Args:
            ids: a list of ints or a 1-D integer tensor.
            strip_special: drop ``<pad>`` and ``<bos>``.

        Returns:
            The tokens.

        Raises:
            TypeError: ``ids`` is not a sequence of ints or a 1-D integer tensor.
            ValueError: ``ids`` is a tensor of another rank, or an id is out of range.

        Examples:
            >>> vocab = Vocab.build([["the", "cat"], ["the"]])  # ids: <pad> <bos> <eos> <unk> the cat
            >>> vocab.decode(torch.tensor([1, 4, 3, 5, 2, 5, 0]))  # stops at the first <eos> = 2
            ['the', '<unk>', 'cat']
            >>> vocab.decode([1, 4, 2], strip_special=False)
            ['<bos>', 'the']
        """
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"ids must be 1-D (one sequence), got shape {tuple(ids.shape)}")
            if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
                raise TypeError(f"ids must be an integer tensor, got dtype {ids.dtype}")
            ids = ids.tolist()
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"ids must hold ints, got {type(i).__name__} ({i!r})")
            if i == self.eos:
                break
            if strip_special and i in (self.pad, self.bos):
                continue
            out.append(self.to_token(i))
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly description that :meth:`from_dict` turns back into an equal vocabulary.

        Examples:
            >>> Vocab.build([["the", "cat"], ["the"]]).to_dict()
            {'idx_to_token': ['<pad>', '<bos>', '<eos>', '<unk>', 'the', 'cat']}
        """
        return {"idx_to_token": list(self.idx_to_token)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Vocab:
        """Rebuild a vocabulary from :meth:`to_dict`'s output.

        Raises:
            TypeError: ``d`` is not a dict.
            KeyError: ``d`` has no ``"idx_to_token"``.
            ValueError: the stored tokens are not a valid vocabulary.

        Examples:
            >>> import json
            >>> vocab = Vocab.build([["the", "cat"], ["the"]])
            >>> Vocab.from_dict(json.loads(json.dumps(vocab.to_dict()))) == vocab
            True
        """
        if not isinstance(d, dict):
            raise TypeError(f"d must be a dict (from Vocab.to_dict), got {type(d).__name__}")
        if "idx_to_token" not in d:
            raise KeyError(f"d must have the key 'idx_to_token' (from Vocab.to_dict), got keys {sorted(d)}")
        return cls(d["idx_to_token"])
