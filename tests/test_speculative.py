"""course_lib.decoding.speculative: speculative decoding against the target's own decoding.

- Greedy: token for token the target's own greedy ``generate``, for drafts good, bad and identical, several
  seeds, prompt lengths and k (float64 models).
- Sampling, exactly: the implementation is run along every path of its random choices (its two draws, a
  token from weights and the accept decisions, replaced by an enumerator that follows each outcome and
  multiplies the probabilities the implementation gave it), which yields the exact probability of every
  output sequence; it must equal the target's own sampling distribution, the product of the probabilities of
  softmax(z / tau) on the top-k / top-p sets written out here from their definitions, to 1e-12 in float64.
- Sampling, statistically: seeded runs with real randomness, each sequence's frequency within 5 standard
  deviations of its exact probability.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
import torch

from course_lib import DecoderLM, DecoderLMConfig, SpeculativeStats, speculative_generate
from course_lib.decoding import speculative

F64 = torch.float64
INF = float("inf")


# ------------------------------------------------------------------------------------------- models


def _seed(seed: int, prefix: tuple[int, ...], V: int) -> int:
    """A seed for each (seed, prefix): the prefix read as a number in base V + 1."""
    code = sum((t + 1) * (V + 1) ** i for i, t in enumerate(prefix))
    return (seed * 1_000_003 + code) % (2**61 - 1)


class TableState:
    """The tokens read so far; crop forgets the ones after ``length``."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def crop(self, length: int) -> TableState:
        assert 0 <= length <= len(self.tokens)
        del self.tokens[length:]
        return self


class TableLM:
    """A language model given by a table: the logits after a prefix are drawn once (seeded by the prefix), float64.

    ``scale`` sets how peaked the distributions are; ``mask`` puts -inf on a seeded token in some rows, so
    that both models have tokens of probability 0.
    """

    def __init__(self, vocab_size: int, seed: int, scale: float = 1.5, mask: bool = False) -> None:
        self.vocab_size, self.seed, self.scale, self.mask = vocab_size, seed, scale, mask
        self.table: dict[tuple[int, ...], torch.Tensor] = {}
        self.steps = 0

    def logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        if prefix not in self.table:
            g = torch.Generator().manual_seed(_seed(self.seed, prefix, self.vocab_size))
            z = self.scale * torch.randn(self.vocab_size, generator=g, dtype=F64)
            if self.mask and torch.rand((), generator=g) < 0.5:
                z[int(torch.randint(self.vocab_size, (), generator=g))] = -INF
            self.table[prefix] = z
        return self.table[prefix]

    def init_state(self) -> TableState:
        return TableState()

    def step_(self, tokens: torch.Tensor, state: TableState) -> torch.Tensor:
        self.steps += 1
        out = []
        for t in tokens[0].tolist():
            state.tokens.append(t)
            out.append(self.logits(tuple(state.tokens)))
        return torch.stack(out)[None]  # (1, T_new, V)


class NoisyTableLM(TableLM):
    """A draft close to ``target``: its logits plus seeded Gaussian noise of standard deviation ``noise``."""

    def __init__(self, target: TableLM, seed: int, noise: float) -> None:
        super().__init__(target.vocab_size, seed)
        self.target, self.noise = target, noise

    def logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        if prefix not in self.table:
            g = torch.Generator().manual_seed(_seed(self.seed, prefix, self.vocab_size))
            self.table[prefix] = self.target.logits(prefix) + self.noise * torch.randn(
                self.vocab_size, generator=g, dtype=F64)
        return self.table[prefix]


def decoder_lm(seed: int, vocab_size: int, layers: int, sharpen: float = 30.0, **config) -> DecoderLM:
    """A random float64 DecoderLM whose output layer is scaled up: peaked, varied next-token distributions."""
    torch.manual_seed(seed)
    model = DecoderLM(DecoderLMConfig(vocab_size=vocab_size, num_hiddens=16, num_heads=4, num_layers=layers,
                                      **config)).to(F64).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    return model


def perturbed(model: DecoderLM, seed: int, noise: float) -> DecoderLM:
    """A draft that agrees with ``model`` part of the time: its copy with Gaussian noise added to every weight."""
    draft = DecoderLM(model.config).to(F64).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mine, theirs in zip(draft.parameters(), model.parameters(), strict=True):
            mine.copy_(theirs + noise * theirs.abs().mean() * torch.randn(theirs.shape, generator=g, dtype=F64))
    return draft


# ------------------------------------------------------------------- the target's own distribution


def sampling_probs(z: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> list[float]:
    """What sample_next draws from, written from the definitions: softmax(z / tau) over the tokens with fewer
    than top_k strictly larger logits, then over those whose strictly more likely tokens hold less than top_p."""
    z = z.tolist()
    V = len(z)
    if temperature == 0.0:
        best = max(range(V), key=lambda i: (z[i], -i))  # the first index of the maximum
        return [float(i == best) for i in range(V)]
    z = [v / temperature for v in z]

    def softmax(values: list[float]) -> list[float]:
        top = max(v for v in values if v != -INF)
        e = [0.0 if v == -INF else math.exp(v - top) for v in values]
        return [x / sum(e) for x in e]

    if top_k is not None:
        z = [v if sum(w > v for w in z) < top_k else -INF for v in z]
    if top_p is not None:
        pi = softmax(z)
        z = [v if sum(pj for pj in pi if pj > pi[i]) < top_p else -INF for i, v in enumerate(z)]
    return softmax(z)


def target_distribution(logits_of, prompt: list[int], n_new: int, V: int, **sampling) -> dict[tuple, float]:
    """P(continuation) = prod_i P(y_i | prompt, y_<i) under the target's own sampling, for all V ** n_new."""
    out = {}
    for ys in itertools.product(range(V), repeat=n_new):
        prob, prefix = 1.0, list(prompt)
        for y in ys:
            prob *= sampling_probs(logits_of(tuple(prefix)), **sampling)[y]
            prefix.append(y)
        out[ys] = prob
    return out


# ---------------------------------------------------- the implementation's exact output distribution


class Paths:
    """Runs a function along every path of its random choices, depth first.

    At each choice the function asks ``choose(options)`` with ``(value, probability)`` pairs; the first
    run takes option 0 everywhere and queues the others; each path's weight is the product of the
    probabilities of the options it took.
    """

    def __init__(self) -> None:
        self.script: tuple[int, ...] = ()
        self.taken: list[int] = []
        self.weight = 1.0
        self.queue: list[tuple[int, ...]] = []

    def choose(self, options: list[tuple[object, float]]) -> object:
        options = [(value, p) for value, p in options if p > 0.0]
        i = len(self.taken)
        if i < len(self.script):
            pick = self.script[i]
        else:
            pick = 0
            self.queue += [(*self.taken, j) for j in range(1, len(options))]
        self.taken.append(pick)
        value, p = options[pick]
        self.weight *= p
        return value

    def run(self, fn) -> list[tuple[object, float]]:
        results, self.queue = [], [()]
        while self.queue:
            self.script, self.taken, self.weight = self.queue.pop(), [], 1.0
            results.append((fn(), self.weight))
        return results


def exact_speculative_distribution(monkeypatch, target, draft, prompt: list[int], n_new: int, *, k: int,
                                   **sampling) -> tuple[dict[tuple, float], float]:
    """P(continuation) under speculative_generate itself: its draws replaced by an enumeration of their outcomes.

    Also returns the largest probability of rejecting a first proposal met on the way (the rule has work to do
    only where the draft disagrees with the target).

    ``_draw(weights)`` takes token i with probability weights[i] / sum(weights); ``_accepts(ratio)``
    accepts proposal i with probability a_i = min(1, ratio[i]), independently, and only the accepted
    prefix matters: m accepted then a rejection has probability a_1 ... a_m (1 - a_(m+1)).
    """
    paths, rejection = Paths(), [0.0]

    def draw(weights, generator):
        w = weights.tolist()
        return paths.choose([(torch.tensor(i), v / sum(w)) for i, v in enumerate(w)])

    def accepts(ratio, generator):
        a = [min(1.0, r) for r in ratio.tolist()]
        n, rejection[0] = len(a), max(rejection[0], 1.0 - a[0])
        options = []
        for m in range(n + 1):
            p = math.prod(a[:m]) * (1.0 - a[m] if m < n else 1.0)
            options.append((torch.tensor([True] * m + [False] * (n - m)), p))
        return paths.choose(options)

    monkeypatch.setattr(speculative, "_draw", draw)
    monkeypatch.setattr(speculative, "_accepts", accepts)
    tokens = torch.tensor([prompt])
    runs = paths.run(lambda: tuple(speculative_generate(target, draft, tokens, n_new, k=k, **sampling)[0][0,
                                                         len(prompt):].tolist()))
    out = defaultdict(float)
    for ys, weight in runs:
        out[ys] += weight
    monkeypatch.undo()
    return dict(out), rejection[0]


def largest_gap(a: dict[tuple, float], b: dict[tuple, float]) -> float:
    return max(abs(a.get(key, 0.0) - b.get(key, 0.0)) for key in set(a) | set(b))


# ------------------------------------------------------------------------------------ greedy decoding


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_greedy_output_is_the_targets_own_greedy_output(seed, k):
    target = decoder_lm(seed, vocab_size=11, layers=2)
    draft = perturbed(target, 100 + seed, noise=0.5)
    prompt = torch.randint(0, 11, (1, 1 + seed), generator=torch.Generator().manual_seed(seed))
    out, stats = speculative_generate(target, draft, prompt, 25, k=k)
    assert torch.equal(out, target.generate(prompt, 25, temperature=0.0))
    assert stats.new_tokens == 25 and stats.accepted + stats.rejected <= stats.proposed == stats.draft_calls
    assert stats.target_calls == 25 - stats.accepted  # each round: its accepted proposals and one more token
    assert stats.rejected <= stats.target_calls


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_output_is_the_greedy_loop_over_a_table(seed, k):
    # logits drawn afresh for every prefix: no repetitive output, a draft right about half the time
    target = TableLM(7, seed=seed)
    draft = NoisyTableLM(target, seed=50 + seed, noise=1.5)
    prefix = [seed, 3]
    for _ in range(30):  # the reference: argmax after argmax
        prefix.append(int(target.logits(tuple(prefix)).argmax()))
    out, stats = speculative_generate(target, draft, torch.tensor([[seed, 3]]), 30, k=k)
    assert out[0].tolist() == prefix
    assert 0 < stats.accepted < stats.proposed and stats.target_calls == 30 - stats.accepted  # some in, some out


@pytest.mark.parametrize("k", [1, 4])
def test_greedy_identity_holds_for_a_useless_draft_and_filters_change_nothing(k):
    target = decoder_lm(5, vocab_size=9, layers=2)
    constant = decoder_lm(6, vocab_size=9, layers=1, sharpen=0.0)  # equal logits: always proposes token 0
    prompt = torch.tensor([[3, 1, 4]])
    expected = target.generate(prompt, 20, temperature=0.0)
    out, stats = speculative_generate(target, constant, prompt, 20, k=k)
    assert torch.equal(out, expected)
    out, _ = speculative_generate(target, constant, prompt, 20, k=k, top_k=2, top_p=0.3)
    assert torch.equal(out, expected)


def test_a_perfect_draft_has_every_proposal_accepted_and_k_plus_one_tokens_per_target_step():
    target = decoder_lm(7, vocab_size=13, layers=2)
    prompt = torch.tensor([[2, 7]])
    for temperature in (0.0, 1.0):  # p = q (up to rounding): the ratio is 1 and u < 1
        out, stats = speculative_generate(target, target, prompt, 21, k=4, temperature=temperature,
                                          generator=torch.Generator().manual_seed(0))
        assert stats == SpeculativeStats(new_tokens=21, proposed=16, accepted=16, rejected=0, target_calls=5,
                                         draft_calls=16)
        # rounds of 4 + 1 tokens; the last needs 1 token, so it proposes none
    assert torch.equal(out[:, :2], prompt) and stats.tokens_per_target_call == 21 / 5


def test_the_target_never_reads_past_the_position_plain_generation_reaches():
    # learned positions cover max_len = 8 tokens; a prompt of 3 and 6 new tokens reads positions 0 .. 7
    target = decoder_lm(8, vocab_size=7, layers=2, positional="learned", max_len=8)
    draft = decoder_lm(9, vocab_size=7, layers=1, positional="learned", max_len=8)
    prompt = torch.tensor([[1, 2, 3]])
    out, _ = speculative_generate(target, draft, prompt, 6, k=5)
    assert torch.equal(out, target.generate(prompt, 6, temperature=0.0))


# --------------------------------------------------------------------- sampling: exact distributions


SETTINGS = [
    dict(temperature=1.0, top_k=None, top_p=None),
    dict(temperature=0.7, top_k=None, top_p=None),
    dict(temperature=1.3, top_k=2, top_p=None),
    dict(temperature=1.0, top_k=None, top_p=0.8),
    dict(temperature=0.9, top_k=3, top_p=0.7),
    dict(temperature=0.0, top_k=None, top_p=None),
]


@pytest.mark.parametrize("sampling", SETTINGS, ids=lambda s: "-".join(f"{v}" for v in s.values()))
@pytest.mark.parametrize("V, n_new, k", [(3, 3, 2), (4, 2, 1), (4, 3, 3), (5, 2, 4)])
def test_exact_output_distribution_is_the_targets_sampling_distribution(monkeypatch, sampling, V, n_new, k):
    target = TableLM(V, seed=V * 10 + k, mask=True)
    draft = TableLM(V, seed=V * 10 + k + 503, scale=1.0, mask=True)  # another table: often disagrees
    prompt = [1, 0]
    got, rejection = exact_speculative_distribution(monkeypatch, target, draft, prompt, n_new, k=k, **sampling)
    expected = target_distribution(target.logits, prompt, n_new, V, **sampling)
    assert abs(sum(got.values()) - 1.0) < 1e-12
    assert largest_gap(got, expected) < 1e-12
    assert rejection > 0.9  # somewhere the draft disagrees with the target: the rule has work to do


@pytest.mark.parametrize("sampling", [SETTINGS[0], SETTINGS[4]], ids=["plain", "filtered"])
def test_exact_distribution_with_decoder_lms_and_their_caches(monkeypatch, sampling):
    # float64 DecoderLMs: proposals are rolled back in the preallocated caches with crop
    target = decoder_lm(11, vocab_size=3, layers=2, sharpen=10.0)
    draft = decoder_lm(12, vocab_size=3, layers=1, sharpen=10.0)
    prompt = [2, 0, 1]

    def logits_of(prefix: tuple[int, ...]) -> torch.Tensor:
        with torch.no_grad():
            return target(torch.tensor([prefix]))[0, -1]

    got, rejection = exact_speculative_distribution(monkeypatch, target, draft, prompt, 3, k=2, **sampling)
    expected = target_distribution(logits_of, prompt, 3, 3, **sampling)
    assert largest_gap(got, expected) < 1e-12 and rejection > 0.5


# ---------------------------------------------------------------------- sampling: seeded frequencies


@pytest.mark.parametrize("sampling", [SETTINGS[0], SETTINGS[4]], ids=["plain", "filtered"])
def test_seeded_frequencies_match_the_targets_distribution(sampling):
    # 20,000 runs with real randomness; each continuation's frequency within 5 standard deviations
    # sqrt(P (1 - P) / n) of its exact probability P under the target (a chance failure: below 1e-5 per cell)
    V, n_new, n = 4, 2, 20_000
    target = TableLM(V, seed=21, mask=True)
    draft = NoisyTableLM(target, seed=23, noise=2.0)
    expected = target_distribution(target.logits, [0], n_new, V, **sampling)
    g = torch.Generator().manual_seed(0)
    counts = defaultdict(int)
    accepted = proposed = 0
    prompt = torch.tensor([[0]])
    for _ in range(n):
        out, stats = speculative_generate(target, draft, prompt, n_new, k=3, generator=g, **sampling)
        counts[tuple(out[0, 1:].tolist())] += 1
        accepted, proposed = accepted + stats.accepted, proposed + stats.proposed
    for ys, P in expected.items():
        f = counts.get(ys, 0) / n
        if P == 0.0:
            assert f == 0.0, ys
        else:
            assert abs(f - P) <= 5 * math.sqrt(P * (1 - P) / n), (ys, f, P)
    assert 0.2 < accepted / proposed < 0.95  # the draft is neither useless nor the target


def test_the_generator_makes_runs_reproducible_and_the_global_one_is_left_alone():
    target, draft = decoder_lm(1, vocab_size=9, layers=2), decoder_lm(2, vocab_size=9, layers=1)
    prompt = torch.tensor([[4, 2]])
    state = torch.random.get_rng_state()
    a = speculative_generate(target, draft, prompt, 12, temperature=1.0, generator=torch.Generator().manual_seed(3))
    b = speculative_generate(target, draft, prompt, 12, temperature=1.0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and a[1] == b[1]
    assert torch.equal(torch.random.get_rng_state(), state)


def test_zero_new_tokens_returns_the_prompt_without_a_step():
    target, draft = TableLM(3, seed=0), TableLM(3, seed=1)
    out, stats = speculative_generate(target, draft, torch.tensor([[1, 2]]), 0)
    assert out.tolist() == [[1, 2]] and stats == SpeculativeStats() and target.steps == draft.steps == 0


def test_stats_add_up_and_report_their_rates():
    a = SpeculativeStats(new_tokens=10, proposed=8, accepted=6, rejected=1, target_calls=4, draft_calls=8)
    b = SpeculativeStats(new_tokens=5, proposed=4, accepted=1, rejected=2, target_calls=3, draft_calls=4)
    assert sum([a, b], SpeculativeStats()) == SpeculativeStats(15, 12, 7, 3, 7, 12)
    assert a.acceptance_rate == 0.75 and a.alpha == 6 / 7 and a.tokens_per_target_call == 2.5
    empty = SpeculativeStats()
    assert math.isnan(empty.acceptance_rate) and math.isnan(empty.alpha) and math.isnan(empty.tokens_per_target_call)


class FixedLM(TableLM):
    """The same logits after every prefix."""

    def __init__(self, logits: list[float]) -> None:
        super().__init__(len(logits), seed=0)
        self.fixed = torch.tensor(logits, dtype=F64)

    def logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        return self.fixed


def test_alpha_estimates_the_probability_that_a_proposal_passes():
    # The draft always proposes token 0 (q = one-hot); the target gives it p(0) = 1/4 (uniform): each tested
    # proposal passes with probability min(1, p(0)/q(0)) = 1/4. 2,000 runs of 30 tokens with k = 3.
    target, draft = FixedLM([0.0, 0.0, 0.0, 0.0]), FixedLM([5.0, -INF, -INF, -INF])
    g, total = torch.Generator().manual_seed(0), SpeculativeStats()
    for _ in range(2000):
        total += speculative_generate(target, draft, torch.tensor([[1]]), 30, k=3, temperature=1.0, generator=g)[1]
    tested = total.accepted + total.rejected
    assert abs(total.alpha - 0.25) <= 5 * math.sqrt(0.25 * 0.75 / tested)
    assert total.acceptance_rate < total.alpha  # untested proposals (after a rejection) count as not accepted
    # a round ends at its first rejection or after k acceptances: the tokens it yields are accepted + 1
    assert total.new_tokens == total.accepted + total.target_calls


# ------------------------------------------------------------------------------------------ bad input


class NoCrop(TableLM):
    def init_state(self) -> list:
        return []


@pytest.mark.parametrize("call, error, words", [
    (lambda t, d: speculative_generate(t, TableLM(6, 1), torch.tensor([[1]]), 3), ValueError,
     "target and draft must share one vocabulary: target.vocab_size = 5, draft.vocab_size = 6"),
    (lambda t, d: speculative_generate(t, "draft", torch.tensor([[1]]), 3), TypeError, "draft must be a language"),
    (lambda t, d: speculative_generate(t, d, torch.tensor([[1], [2]]), 3), ValueError, "shape (1, T)"),
    (lambda t, d: speculative_generate(t, d, torch.zeros(1, 0, dtype=torch.long), 3), ValueError, "T >= 1"),
    (lambda t, d: speculative_generate(t, d, torch.tensor([[7]]), 3), ValueError, "tokens holds ids outside"),
    (lambda t, d: speculative_generate(t, d, torch.tensor([[1.0]]), 3), TypeError, "torch.long"),
    (lambda t, d: speculative_generate(t, d, torch.tensor([[1]]), -1), ValueError, "max_new_tokens"),
    (lambda t, d: speculative_generate(t, d, torch.tensor([[1]]), 3, k=0), ValueError, "k must be"),
    (lambda t, d: speculative_generate(t, d, torch.tensor([[1]]), 3, temperature=-1.0), ValueError, "temperature"),
    (lambda t, d: speculative_generate(t, d, torch.tensor([[1]]), 3, top_k=0), ValueError, "top_k"),
    (lambda t, d: speculative_generate(t, d, torch.tensor([[1]]), 3, top_p=1.5), ValueError, "top_p"),
    (lambda t, d: speculative_generate(t, d, torch.tensor([[1]]), 3, generator=1), TypeError, "generator"),
    (lambda t, d: speculative_generate(t, NoCrop(5, 1), torch.tensor([[1]]), 3), TypeError,
     "the draft's init_state() returned a list"),
])
def test_bad_arguments_are_named(call, error, words):
    with pytest.raises(error) as info:
        call(TableLM(5, 0), TableLM(5, 1))
    assert words in str(info.value)
