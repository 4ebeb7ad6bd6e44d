"""Speculative decoding on a tiny random model: greedy is token-identical to plain greedy decoding
(batch invariance included), KV rollback, and the sampling path preserves the target distribution."""
import math

import pytest
import torch

from cassandra_rtl.golden.kv import kv_config
from cassandra_rtl.model.drafters import (NgramDrafter, build_cassandra, int8_model, layerskip_drafter,
                                          search_skip_layers, search_skip_layers_auto, uniform_cfg)
from cassandra_rtl.model.engine import Engine
from cassandra_rtl.model.sampling import SamplingParams, probs_from_logits
from cassandra_rtl.model.testing import tiny_checkpoint

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    ck = tiny_checkpoint(seed=0)
    return ck, ck.build()


def prompts(n, vocab=320, length=10):
    out = []
    for s in range(n):
        g = torch.Generator().manual_seed(100 + s)
        out.append(torch.randint(0, vocab, (length + s,), generator=g).tolist())
    return out


def test_exact_multi_token_pass_equals_single_token_steps(tiny):
    """Batch invariance: logits of a k-token verify pass are bit-identical to k 1-token decode steps."""
    ck, m = tiny
    prompt = prompts(1)[0]
    toks = [5, 17, 250, 3, 99, 42, 7]
    c1 = m.new_cache()
    m(torch.tensor(prompt), 0, c1, exact=False)
    single = torch.cat([m(torch.tensor([t]), len(prompt) + i, c1) for i, t in enumerate(toks)])
    c2 = m.new_cache()
    m(torch.tensor(prompt), 0, c2, exact=False)
    multi = m(torch.tensor(toks), len(prompt), c2, exact=True)
    assert torch.equal(single, multi)
    assert torch.equal(c1.k, c2.k) and torch.equal(c1.v, c2.v)


@pytest.mark.parametrize("keep,mbits,adaptive", [(1.0, 3, False), (1.0, 1, True), (0.5, 2, False)])
def test_cassandra_greedy_lossless(tiny, keep, mbits, adaptive):
    ck, m = tiny
    d, tcost = build_cassandra(ck, m, uniform_cfg(keep, mbits), kv_config(32, mantissa_bits=mbits))
    plain = Engine(m)
    spec = Engine(m, tcost)
    rejected = 0
    for p in prompts(3):
        ref = plain.generate(p, 24)
        r = spec.generate(p, 24, drafter=d, gamma=4, adaptive=adaptive)
        assert r.tokens == ref.tokens
        rejected += r.stats.drafted - r.stats.accepted
        s = r.summary()
        assert 0 <= s["acceptance_rate"] <= 1 and s["tokens_per_step"] >= 1
        assert s["generated"] == 24
    assert rejected > 0  # the test exercised rejections and rollback


def test_baseline_drafts_greedy_lossless(tiny):
    ck, m = tiny
    plain = Engine(m)
    for p in prompts(2):
        ref = plain.generate(p, 20)
        for d in (layerskip_drafter(m, [1]), NgramDrafter()):
            assert plain.generate(p, 20, drafter=d, gamma=3).tokens == ref.tokens
    skip = search_skip_layers(m, prompts(1), 1)
    assert len(skip) == 1 and 0 < skip[0] < m.args.n_layers - 1
    skip2, info = search_skip_layers_auto(m, prompts(1))
    assert 1 <= len(skip2) <= m.args.n_layers - 2 and len(info["search"]) == m.args.n_layers - 2
    assert skip2 == search_skip_layers_auto(m, prompts(1))[0]  # deterministic


def test_kv_rollback(tiny):
    """After speculative decoding, the target cache equals plain decoding's for every committed position and
    holds zeros beyond (rejected drafts' K/V removed); the draft's committed KV is the format's spec view."""
    ck, m = tiny
    d, tcost = build_cassandra(ck, m, uniform_cfg(0.5, 1), kv_config(32, mantissa_bits=1))
    p = prompts(1)[0]
    plain = Engine(m)
    ref = plain.generate(p, 20)
    ref_cache = plain.cache
    spec = Engine(m, tcost)
    r = spec.generate(p, 20, drafter=d, gamma=5)
    assert r.tokens == ref.tokens and r.stats.accepted < r.stats.drafted
    n = len(p) + len(r.tokens) - 1  # committed positions (the last token's K/V is not computed yet)
    # positions past n may hold the last verify step's accepted-but-truncated tokens only if max_new cut it
    assert torch.equal(spec.cache.k[:, :, :n], ref_cache.k[:, :, :n])
    assert torch.equal(spec.cache.v[:, :, :n], ref_cache.v[:, :, :n])
    assert not spec.cache.k[:, :, n + 8:].any()
    # the draft's cache for committed positions = decode_kv_draft of the target's K/V: mantissa cut to 1 bit
    dk = d.cache.k[:, :, :n].contiguous().view(torch.int16)
    assert not (dk & 0x3F).any()
    assert d.cache.k[:, :, :n].any()


def test_context_limit_and_bad_args(tiny):
    from cassandra_rtl.errors import ConfigError, InputError

    ck, m = tiny
    e = Engine(m)
    with pytest.raises(InputError):
        e.generate(list(range(m.args.max_seq_len)), 4)
    with pytest.raises(InputError):
        e.generate([], 4)
    with pytest.raises(ConfigError):
        e.generate([1, 2], 4, drafter=NgramDrafter(), gamma=0)
    # generation stops at the context end without error
    r = e.generate(list(range(m.args.max_seq_len - 3)), 50, drafter=NgramDrafter(), gamma=4)
    assert len(r.tokens) <= 3


def test_int8_baseline(tiny):
    ck, m = tiny
    q, cost = int8_model(ck)
    r = Engine(q, cost).generate(prompts(1)[0], 12)
    s = r.summary()
    assert len(r.tokens) == 12
    assert s["modeled_speedup"]["orin"] > 1.0  # fewer weight bytes than bf16


def _exact_joint(m, prompt, sp, n_tokens):
    """Exact law of the first n generated tokens under the target with sampling params sp (enumerated)."""
    V = m.args.vocab_size
    probs = {(): 1.0}
    for _ in range(n_tokens):
        nxt = {}
        for seq, pr in probs.items():
            c = m.new_cache()
            lg = m(torch.tensor(prompt + list(seq)), 0, c, exact=False)[-1]
            p = probs_from_logits(lg, sp)
            for t in torch.nonzero(p > 0).flatten().tolist():
                nxt[seq + (t,)] = pr * float(p[t])
        probs = nxt
    return probs


@pytest.mark.parametrize("draft", ["layerskip", pytest.param("cassandra", marks=pytest.mark.slow)])
def test_speculative_sampling_matches_target_distribution(draft):
    """Whole path on a tiny model: law of 3 generated tokens (1 from prefill, 2 from a verify step) vs the
    exact target law, by chi-square, on a 6-token vocabulary. With the layer-skip draft (acceptance ~0.9)
    the test has power: resampling from p instead of the residual max(p - q, 0) gives a statistic of ~50
    against a threshold of ~40 (checked by hand when this test was written)."""
    from test_model_sampler import chi2, chi2_threshold

    ck = tiny_checkpoint(seed=3, std=0.3, vocab=6)
    m = ck.build()
    prompt = prompts(1, vocab=6)[0]
    sp = SamplingParams(temperature=1.0, top_p=0.95)
    exact = _exact_joint(m, prompt, sp, 3)
    if draft == "layerskip":
        d, eng = layerskip_drafter(m, [1, 2]), Engine(m)
    else:
        d, tcost = build_cassandra(ck, m, uniform_cfg(0.5, 1), kv_config(32, mantissa_bits=1))
        eng = Engine(m, tcost)
    n = 1000 if draft == "layerskip" else 600
    counts = {}
    rejected = 0
    for s in range(n):
        r = eng.generate(prompt, 3, drafter=d, gamma=2, sp=sp, seed=s)
        key = tuple(r.tokens)
        counts[key] = counts.get(key, 0) + 1
        rejected += r.stats.drafted - r.stats.accepted
    assert rejected > 0
    assert set(counts) <= set(exact)
    # pool cells with small expectation into one
    keys = sorted(exact, key=lambda k: -exact[k])
    big = [k for k in keys if exact[k] * n >= 5]
    small_p = sum(exact[k] for k in keys if k not in big)
    obs = [counts.get(k, 0) for k in big] + [n - sum(counts.get(k, 0) for k in big)]
    exp = [exact[k] for k in big] + [small_p]
    stat, df = chi2(obs, exp, n)
    assert df >= 3
    assert stat < chi2_threshold(df), (stat, df)
