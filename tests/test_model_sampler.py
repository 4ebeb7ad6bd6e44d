"""The Leviathan/Chen acceptance rule alone: with known p and q on a small vocabulary, the emitted token
must be distributed exactly as p (chi-square goodness of fit, conservative threshold)."""
import math

import pytest
import torch

from cassandra_rtl.model.sampling import SamplingParams, greedy_accept, probs_from_logits, speculative_accept


def chi2_threshold(df: int, z: float = 4.75) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile at ~1e-6 upper tail (z = 4.75)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2(counts, probs, n) -> tuple[float, int]:
    stat, df = 0.0, -1
    for c, p in zip(counts, probs):
        e = n * p
        if e > 0:
            stat += (c - e) ** 2 / e
            df += 1
        else:
            assert c == 0, "a token of probability 0 was emitted"
    return stat, df


P = torch.tensor([0.05, 0.40, 0.10, 0.30, 0.15], dtype=torch.float64)
Q = torch.tensor([0.30, 0.10, 0.25, 0.05, 0.30], dtype=torch.float64)
BONUS = torch.tensor([0.2, 0.2, 0.2, 0.2, 0.2], dtype=torch.float64)


def _first_token_counts(q_mode: str, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    counts = [0] * len(P)
    p = torch.stack([P, BONUS])
    for _ in range(n):
        if q_mode == "dist":
            x = int(torch.multinomial(Q, 1, generator=g))
            acc, nxt = speculative_accept(p, Q[None], [x], g)
        else:  # deterministic proposal of token 1 (q one-hot), as n-gram lookup / greedy drafts
            x = 1
            acc, nxt = speculative_accept(p, None, [x], g)
        counts[x if acc == 1 else nxt] += 1
    return counts


@pytest.mark.parametrize("q_mode", ["dist", "onehot"])
def test_acceptance_rule_preserves_target_distribution(q_mode):
    n = 10000
    counts = _first_token_counts(q_mode, n)
    stat, df = chi2(counts, P.tolist(), n)
    assert stat < chi2_threshold(df), (counts, stat)


def test_chi2_detects_a_wrong_rule():
    """The statistic must be able to fail: accepting every draft token gives q, not p."""
    g = torch.Generator().manual_seed(1)
    n = 20000
    counts = [0] * len(P)
    for _ in range(n):
        counts[int(torch.multinomial(Q, 1, generator=g))] += 1
    stat, df = chi2(counts, P.tolist(), n)
    assert stat > chi2_threshold(df)


def test_second_position_and_bonus():
    """Two draft tokens: the joint law of the first two emitted tokens is p0(x) * p1(y)."""
    g = torch.Generator().manual_seed(2)
    p0, p1 = P, torch.tensor([0.5, 0.1, 0.1, 0.2, 0.1], dtype=torch.float64)
    q0, q1 = Q, torch.tensor([0.1, 0.5, 0.2, 0.1, 0.1], dtype=torch.float64)
    p = torch.stack([p0, p1, BONUS])
    q = torch.stack([q0, q1])
    n = 12000
    counts = [0] * 25
    for _ in range(n):
        d = [int(torch.multinomial(q0, 1, generator=g)), int(torch.multinomial(q1, 1, generator=g))]
        acc, nxt = speculative_accept(p, q, d, g)
        emitted = d[:acc] + [nxt]
        if len(emitted) < 2:  # rejected at 0: the next token would come from the target at position 1
            emitted.append(int(torch.multinomial(p1, 1, generator=g)))
        counts[emitted[0] * 5 + emitted[1]] += 1
    probs = [float(p0[i] * p1[j]) for i in range(5) for j in range(5)]
    stat, df = chi2(counts, probs, n)
    assert stat < chi2_threshold(df), stat


def test_top_p_and_temperature():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    p = probs_from_logits(logits, SamplingParams(temperature=1.0, top_p=0.7))
    full = torch.softmax(logits.double(), -1)
    # 0.6439 < 0.7 so token 1 (which crosses 0.7) is kept, the rest dropped
    assert p[2] == 0 and p[3] == 0 and p[0] > 0 and p[1] > 0
    assert torch.allclose(p[:2], full[:2] / full[:2].sum())
    hot = probs_from_logits(logits, SamplingParams(temperature=0.5))
    assert hot[0] > full[0]


def test_greedy_accept():
    lg = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    assert greedy_accept(lg, [1, 0]) == (2, 2)
    assert greedy_accept(lg, [1, 2]) == (1, 0)
    assert greedy_accept(lg, [0, 0]) == (0, 1)


def test_bad_sampling_params():
    from cassandra_rtl.errors import ConfigError

    with pytest.raises(ConfigError):
        SamplingParams(temperature=-1)
    with pytest.raises(ConfigError):
        SamplingParams(temperature=1, top_p=0)
