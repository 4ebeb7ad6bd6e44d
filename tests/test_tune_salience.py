"""Draft selection: salience, calibration, exact draft/byte emulation, the float32 proxy (tiny random model)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.model.loader import bits_to_bf16
from cassandra_rtl.model.proxy import ProxyModel, input_norm_key
from cassandra_rtl.model.salience import (calibrate, draft_bits, kept_mask, norms_from_json, norms_to_json,
                                          salience, salience_fn, spec_nbytes)
from cassandra_rtl.model.testing import tiny_checkpoint


pytestmark = pytest.mark.usefixtures("one_torch_thread")



@pytest.fixture(scope="module")
def ck():
    return tiny_checkpoint(seed=3)


@pytest.fixture(scope="module")
def norms(ck):
    return calibrate(ck, ("one two three", "def f(x): return x", "2 + 2 = 4"), n_new=4)


def _bits(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16), x


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("keep", [1.0, 0.75, 0.3])
@pytest.mark.parametrize("m", [0, 2, 7])
@pytest.mark.parametrize("with_sal", [False, True])
@pytest.mark.parametrize("layout", [(1, False), (4, True), (16, False)], ids=["1.0", "A4-pairs", "A16"])
def test_emulation_equals_golden(scheme, keep, m, with_sal, layout):
    bits, x = _bits((24, 200), seed=int(keep * 10) + m)
    sal = np.abs(x) * np.linspace(0.1, 2.0, 200)[None] if with_sal else None
    cfg = CodecConfig(scheme=scheme, keep_ratio=keep, mantissa_bits=m, group_size=64,
                      chunk_superblocks=layout[0], pair_codes=layout[1])
    enc = encode_tensor(bits, cfg, salience=sal)
    kept = kept_mask(bits, cfg, sal)
    assert np.array_equal(draft_bits(bits, cfg, kept), decode_draft(enc).reshape(bits.shape))
    assert spec_nbytes(bits, cfg, kept) == enc.spec_nbytes


def test_calibration_norms_cover_every_linear(ck, norms):
    a = ck.args
    for name, b in ck.bits.items():
        if b.ndim != 2:
            continue
        key = input_norm_key(name, a.tie_embeddings)
        assert key in norms, name
        assert norms[key].shape == (b.shape[1],)
        assert norms[key].dtype == np.float16
        assert np.all(np.isfinite(norms[key].astype(np.float32)))
        assert float(norms[key].max()) == 1.0  # scaled to max 1 per activation
    back = norms_from_json(norms_to_json(norms))
    assert all(np.array_equal(back[k], norms[k]) for k in norms)


def test_wanda_salience_is_weight_times_channel_norm(ck, norms):
    name = "layers.1.w_down"
    b = ck.bits[name]
    s = salience(name, b, "wanda", norms)
    w = np.abs(bits_to_bf16(b).float().numpy()).astype(np.float64)
    xn = norms["layers.1.mlp_act"].astype(np.float64)
    assert np.allclose(s, w * xn[None, :])
    assert salience(name, b, "magnitude", norms) is None
    assert salience("layers.1.attn_norm", ck.bits["layers.1.attn_norm"], "wanda", norms) is None
    # with uneven channel norms Wanda keeps different values than magnitude
    cfg = CodecConfig(keep_ratio=0.5, mantissa_bits=3, group_size=32)
    assert not np.array_equal(kept_mask(b, cfg, s), kept_mask(b, cfg, None))


def test_wanda_in_the_golden_encoder_is_lossless(ck, norms):
    fn = salience_fn("wanda", norms)
    cfg = CodecConfig(keep_ratio=0.5, mantissa_bits=2, group_size=32)
    for name in ("tok_emb", "layers.0.wq", "layers.2.w_gate"):
        b = ck.bits[name]
        enc = encode_tensor(b, cfg, salience=fn(name, b))
        assert np.array_equal(decode_full(enc).reshape(b.shape), b)


def test_proxy_matches_the_bf16_transformer():
    ck = tiny_checkpoint(seed=3, std=0.1)  # std 0.25 amplifies bf16 rounding noise across layers (chaotic)
    seq = list(range(5, 45))
    m = ck.build()
    ref = m(torch.tensor(seq), 0, m.new_cache(), exact=False).float()
    px = ProxyModel(ck.args, ck.bits)
    got, kv = px.forward(seq, head_rows=slice(0, len(seq)), return_kv=True)
    # same function up to bf16 rounding (the tiny model's flat distributions make argmax near-ties common)
    corr = torch.corrcoef(torch.stack([got.reshape(-1), ref.reshape(-1)]))[0, 1]
    assert corr > 0.995
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9
    # incremental decoding with a K/V cache equals the full forward
    lg, past = px.forward(seq[:30], head_rows=slice(-1, None), return_kv=True)
    lg2, _ = px.forward(seq[30:], head_rows=slice(-1, None), return_kv=True, past=past)
    assert torch.allclose(lg2[0], got[-1], atol=1e-3)
    # reading the given K/V for earlier positions (its own K/V here) equals the causal forward
    got2, _ = px.forward(seq, head_rows=slice(0, len(seq)), kv=kv)
    assert torch.allclose(got2, got, atol=1e-3)
