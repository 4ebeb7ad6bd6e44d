"""The Leviathan/Chen acceptance rule alone: with known p and q on a small vocabulary, the emitted token
must be distributed exactly as p (chi-square goodness of fit, conservative threshold)."""
import functools
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


# ------------------------------------------------------------------------------------------------------
# Engine-level distribution test with power.
#
# The whole engine path (prefill sample, draft, row-exact verify, acceptance, residual, bonus, rollback, the
# next step) on a tiny target with a 2-token vocabulary; the law of the first three generated tokens is
# compared with the exact target law (enumerated) by chi-square. The draft is *hostile* on purpose: at every
# context it proposes from the target's own distribution with the less likely token's mass cut to 1 %, so
# every rejection must emit that token — the case a wrong residual gets wrong. Three wrong rules, written
# here and patched into the engine (never in the engine itself), must fail on every seed while the
# engine's rule passes:
#   resample_p : on rejection sample from p instead of normalize(max(p - q, 0));
#   half_q     : residual normalize(max(p - q/2, 0));
#   unclipped  : the ratio p/q is used unclipped.  Literally ``u < p/q`` with u ~ U[0, 1) *is* the correct
#                rule (u < 1 <= p/q accepts anyway), so the unclipped ratio is used the only way it changes
#                the rule: normalised by its maximum over the vocabulary instead of clipped at 1
#                (accept with (p/q)(x) / max_y (p/q)(y)).
# ------------------------------------------------------------------------------------------------------
POWER_V = 2
POWER_PROMPT = [1, 0, 0, 1, 1, 0, 1]
POWER_SP = SamplingParams(temperature=16.0)  # flattens the tiny model: the less likely token has p ~ 0.2-0.35
POWER_TOKENS = 3


@functools.lru_cache(maxsize=2)
def _power_target(numerics: str = "torch"):
    """The tiny target, with bf16 ``F.linear`` (``torch``) or every linear layer the NPU tile's (``npu``)."""
    from cassandra_rtl.model.testing import tiny_checkpoint

    ck = tiny_checkpoint(seed=5, std=0.3, vocab=POWER_V, n_layers=1, dim=32, hidden_dim=64, n_heads=2,
                         n_kv_heads=1, head_dim=16)
    return ck.build().set_numerics(numerics)


def _exact_law(m, prompt, sp, n_tokens):
    probs = {(): 1.0}
    for _ in range(n_tokens):
        nxt = {}
        for seq, pr in probs.items():
            lg = m(torch.tensor(prompt + list(seq)), 0, m.new_cache(), exact=False)[-1]
            p = probs_from_logits(lg, sp)
            for t in range(p.numel()):
                nxt[seq + (t,)] = pr * float(p[t])
        probs = nxt
    return probs


def _hostile_drafter(m):
    from cassandra_rtl.model.engine import Drafter
    from cassandra_rtl.model.sampling import sample

    class Hostile(Drafter):
        name = "hostile"

        def __init__(self):
            self.q = {}

        def propose(self, ids, pos, gamma, sp, gen):
            seq, out, qs = list(ids), [], []
            for _ in range(gamma):
                key = tuple(seq)
                if key not in self.q:
                    lg = m(torch.tensor(seq), 0, m.new_cache(), exact=False)[-1]
                    q = probs_from_logits(lg, sp).clone()
                    q[int(q.argmin())] *= 0.01
                    self.q[key] = q / q.sum()
                q = self.q[key]
                t = sample(q, gen)
                out.append(t)
                qs.append(q)
                seq.append(t)
            return out, torch.stack(qs)

    return Hostile()


def _rule(accept, residual):
    from cassandra_rtl.model.sampling import sample

    def rule(p, q, draft, gen):
        for i, x in enumerate(draft):
            if float(torch.rand((), generator=gen, dtype=torch.float64)) < accept(p[i], q[i], x):
                continue
            r = residual(p[i], q[i])
            s = float(r.sum())
            if s <= 0.0:
                r, s = p[i], float(p[i].sum())
            return i, sample(r / s, gen)
        return len(draft), sample(p[len(draft)], gen)

    return rule


def _clipped(p, q, x):
    return min(1.0, float(p[x] / q[x]))


def _max_normalised(p, q, x):
    r = torch.where(q > 0, p / q, torch.zeros_like(p))
    return float(r[x] / r.max())


WRONG_RULES = {
    "resample_p": _rule(_clipped, lambda p, q: p.clone()),
    "half_q": _rule(_clipped, lambda p, q: torch.clamp(p - q / 2, min=0.0)),
    "unclipped": _rule(_max_normalised, lambda p, q: torch.clamp(p - q, min=0.0)),
}


def engine_law_stat(rule: str, seed: int, n: int, monkeypatch=None, numerics: str = "torch"):
    """(chi-square, threshold, df, acceptance) of ``n`` engine runs with ``rule`` ("correct" = the engine's
    own) against the exact law of the first POWER_TOKENS tokens, the target under ``numerics``."""
    import cassandra_rtl.model.engine as engine_mod
    from cassandra_rtl.model.engine import Engine

    torch.set_num_threads(1)
    m = _power_target(numerics)
    exact = _exact_law(m, POWER_PROMPT, POWER_SP, POWER_TOKENS)
    eng, d = Engine(m), _hostile_drafter(m)
    saved = engine_mod.speculative_accept
    if rule != "correct":
        engine_mod.speculative_accept = WRONG_RULES[rule]
    try:
        counts, acc, dr = {}, 0, 0
        for s in range(n):
            r = eng.generate(POWER_PROMPT, POWER_TOKENS + 1, drafter=d, gamma=2, sp=POWER_SP,
                             seed=seed * 1_000_003 + s)
            key = tuple(r.tokens[:POWER_TOKENS])
            counts[key] = counts.get(key, 0) + 1
            acc += r.stats.accepted
            dr += r.stats.drafted
    finally:
        engine_mod.speculative_accept = saved
    keys = sorted(exact, key=lambda k: -exact[k])
    big = [k for k in keys if exact[k] * n >= 5]
    obs = [counts.get(k, 0) for k in big] + [n - sum(counts.get(k, 0) for k in big)]
    exp = [exact[k] for k in big] + [max(0.0, 1.0 - sum(exact[k] for k in big))]
    stat, df = chi2(obs, exp, n)
    return stat, chi2_threshold(df), df, acc / max(1, dr)


# runs per (rule, seed): enough that the weakest wrong rule (half_q, ~0.15 chi-square units per run) lands
# ~2.5x above the threshold; the strong ones need fewer (quick set < 30 s on a loaded 2-core machine)
QUICK_RUNS = {"correct": 600, "half_q": 600, "resample_p": 200, "unclipped": 60}


@pytest.mark.parametrize("rule", ["correct", *WRONG_RULES])
def test_engine_sampling_law_has_power(rule):
    """Quick: the engine's rule passes, each wrong rule (patched into the engine by this test) fails, seed 0."""
    stat, thr, df, acc = engine_law_stat(rule, 0, QUICK_RUNS[rule])
    assert df >= 5 and 0.3 < acc or rule == "unclipped"
    if rule == "correct":
        assert 0.3 < acc < 0.9  # the hostile draft is rejected often: the residual decides the law
        assert stat < thr, (stat, thr)
    else:
        assert stat >= thr, f"{rule} not caught: chi2 {stat:.1f} < {thr:.1f}"


@pytest.mark.parametrize("rule", ["correct", "resample_p"])
def test_engine_sampling_law_under_npu_numerics(rule):
    """The same law under the NPU tile's numerics (every linear layer the tile's, batched verify): the engine's
    rule passes and a wrong one is caught (seed 0, the quick sizes)."""
    stat, thr, df, acc = engine_law_stat(rule, 0, QUICK_RUNS[rule], numerics="npu")
    assert df >= 5 and 0.3 < acc < 0.9
    assert (stat < thr) if rule == "correct" else (stat >= thr), (rule, stat, thr)


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["correct", *WRONG_RULES])
def test_engine_sampling_law_power_many_seeds(rule):
    """Slow: 1,000 runs on each of seeds 1..5; wrong rules caught on every seed, the correct rule on none."""
    caught = [engine_law_stat(rule, seed, 1000)[:2] for seed in range(1, 6)]
    hits = sum(s >= t for s, t in caught)
    assert hits == (0 if rule == "correct" else 5), caught


if __name__ == "__main__":  # power study: python tests/test_model_sampler.py N SEEDS (N = 0: the quick sizes)
    import sys
    import time

    n_, seeds_ = int(sys.argv[1]), int(sys.argv[2])
    for rule_ in ["correct", *WRONG_RULES]:
        for seed_ in range(seeds_):
            t0 = time.time()
            st, th, df_, ac = engine_law_stat(rule_, seed_, n_ or QUICK_RUNS[rule_])
            print(f"{rule_:<11} n {n_ or QUICK_RUNS[rule_]} seed {seed_}: chi2 {st:8.1f} threshold {th:5.1f} df {df_} acceptance {ac:.2f} "
                  f"{'FAIL' if st >= th else 'pass'} ({time.time() - t0:.1f} s)", flush=True)


@pytest.mark.parametrize("numerics", ["torch", "npu"])
def test_sampling_check_passes_correct_and_catches_a_wrong_rule(numerics):
    """model/sampling_check.py (what `--compare` runs when sampling): PIT + KS on the engine's output, under
    either numerics of the target."""
    import cassandra_rtl.model.engine as engine_mod
    from cassandra_rtl.model.engine import Engine
    from cassandra_rtl.model.sampling_check import ks_uniform, sampling_check

    assert ks_uniform([(i + 0.5) / 100 for i in range(100)])[1] > 0.99
    assert ks_uniform([0.01 * (i % 10) for i in range(100)])[1] < 1e-3
    m = _power_target(numerics)
    eng, d = Engine(m), _hostile_drafter(m)
    ok = sampling_check(eng, d, POWER_PROMPT, POWER_SP, max_new_tokens=8, gamma=3, runs=60)
    assert ok["ok"] and ok["values"] == 480 and 0.3 < ok["acceptance"] < 0.9, ok
    saved = engine_mod.speculative_accept
    engine_mod.speculative_accept = WRONG_RULES["resample_p"]
    try:
        bad = sampling_check(eng, d, POWER_PROMPT, POWER_SP, max_new_tokens=8, gamma=3, runs=60)
    finally:
        engine_mod.speculative_accept = saved
    assert not bad["ok"], bad
    with pytest.raises(ValueError):
        sampling_check(eng, d, POWER_PROMPT, SamplingParams(), runs=1)
