"""The KV encoders' bulk Verilator harness (tb/bulk_encoder): batches of random KV-like vectors through the
exported encoder Verilog (encoder_kv_c1_l2 / encoder_kv_c2_l2; the 8-lane configurations in -m slow), every
emitted plane word compared with golden ``encode_kv`` (kind="kv": one chunk per vector, no pair codes),
under input idles and per-plane backpressure; the model-path drop-in ``rtl_kv_encoder``; mismatches, encoder
errors and refused configurations are reported, never silently passed."""
from __future__ import annotations

import copy
import dataclasses
import subprocess

import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.config import PRUNED
from cassandra_rtl.golden.kv import calibrate_kv_codebooks, encode_kv, kv_config
from cassandra_rtl.tb import bulk_encoder as BE
from cassandra_rtl.tb.decoder import data as D
from cassandra_rtl.tb.decoder.data import kv_vectors

pytestmark = pytest.mark.sim

QUICK = {"c1": "encoder_kv_c1_l2", "c2": "encoder_kv_c2_l2"}


def books_for(rng, x, cfg, style):
    if style == "calibrated":          # on the "prefill": the first half, so later vectors escape
        return calibrate_kv_codebooks(x[: max(1, len(x) // 2)], cfg)
    K = int(rng.integers(1, 16))
    if cfg.scheme == "c2":
        enc = encode_kv(x, cfg, calibrate_kv_codebooks(x, cfg))
        return None, D.rare_delta_book(enc, K)
    return D.escape_books(x.reshape(-1), cfg, rng, K)


def random_batches(rng, scheme, n_batches):
    out = []
    kinds = ["weights", "uniform", "specials", "ties", "small"]
    fixed = [(64, 1.0, 3), (64, 0.5, 3), (128, 1.0, 7), (128, 0.25, 0), (32, 1 / 32, 2), (32, 1.0, 0)]
    for i in range(n_batches):
        G, keep, m = fixed[i] if i < len(fixed) else (int(rng.choice([32, 64, 128])),
                                                      float(rng.choice([1.0, 0.75, 0.5, 0.3, 0.05])),
                                                      int(rng.integers(0, 8)))
        cfg = kv_config(G, scheme, m, keep)
        x = kv_vectors(rng, int(rng.integers(1, 7)), G, kinds[i % len(kinds)])
        style = "escape" if i % 3 == 2 else "calibrated"
        books = books_for(rng, x, cfg, style)
        if scheme == "c1" and cfg.prunes and PRUNED not in books[0].symbols:
            books = calibrate_kv_codebooks(x, cfg)
        out.append((x, cfg, books))
    return out


def escapes_in(batches) -> int:
    """Vectors' values whose exponent (C1) is missing from the book they are coded with: escapes."""
    n = 0
    for x, cfg, (spec, verif) in batches:
        e = (x.astype(np.int64) >> 7) & 0xFF
        book = verif if spec is None else spec
        n += int(np.isin(e, book.symbols, invert=True).sum())
    return n


@pytest.fixture(scope="module", params=["c1", "c2"])
def enc_config(request):
    if not BE.available():
        pytest.skip("Verilator not available")
    config = QUICK[request.param]
    BE.build_harness(config)
    return config


@pytest.mark.parametrize("idle,bp", [(0.0, 0.0), (0.3, 0.4)])
def test_random_kv_batches_equal_golden(enc_config, idle, bp):
    scheme = BE.scheme_of(enc_config)
    rng = np.random.default_rng(11 if idle else 5)
    batches = random_batches(rng, scheme, 18)
    assert escapes_in(batches) > 0          # the escape books do what they are for
    st = BE.EncoderStats()
    encs = BE.encode_many_with_rtl(batches, enc_config, idle=idle, backpressure=bp, seed=3, stats=st)
    nvec = sum(len(x) for x, _, _ in batches)
    assert st.vectors == nvec and st.mismatches == 0 and st.batches == len(batches)
    assert st.values == sum(x.size for x, _, _ in batches)
    assert st.cycles > st.values / 2          # 2 lanes: at most 2 values per cycle
    for (x, cfg, books), enc in zip(batches, encs):   # what comes back is golden's encoding of the batch
        ref = encode_kv(x, cfg, books)
        assert enc.planes == ref.planes


@pytest.fixture(scope="module")
def smollm2_rows():
    rng = np.random.default_rng(3)
    try:
        return D.smollm2_sample(rng, 64 * 64, rows=1)[0].reshape(-1, 64)
    except FileNotFoundError:
        return kv_vectors(rng, 64, 64, "weights")


def test_real_kv_like_rows(enc_config, smollm2_rows):
    """SmolLM2 weight rows as stand-in K/V vectors (head_dim 64), books calibrated on the first 8 vectors."""
    rows = smollm2_rows
    scheme = BE.scheme_of(enc_config)
    batches = []
    for keep in (1.0, 0.5):
        cfg = kv_config(64, scheme, 3, keep)
        books = calibrate_kv_codebooks(rows[:8], cfg)
        batches += [(rows[i:i + 8], cfg, books) for i in range(0, len(rows), 8)]
    st = BE.EncoderStats()
    BE.encode_many_with_rtl(batches, enc_config, backpressure=0.2, stats=st)
    assert st.vectors == 2 * len(rows) and st.mismatches == 0


def test_mismatch_is_counted_and_raised(enc_config):
    """Golden of other vectors than the RTL was given: the differing vectors are counted, strict raises."""
    scheme = BE.scheme_of(enc_config)
    rng = np.random.default_rng(8)
    cfg = kv_config(64, scheme, 3, 0.5)
    x = kv_vectors(rng, 6, 64, "weights")
    books = calibrate_kv_codebooks(x, cfg)
    y = x.copy()
    y[2] ^= 0x0001                          # one mantissa LSB in every value of vector 2
    y[4, 0] = x[4, 1] | 0x4000               # one value of vector 4 (another exponent)
    wrong = [encode_kv(y, cfg, books)]
    st = BE.EncoderStats()
    BE.encode_many_with_rtl([(x, cfg, books)], enc_config, stats=st, strict=False, golden=wrong)
    assert st.mismatches == 2 and st.vectors == 6
    with pytest.raises(BE.RtlError, match="differs from golden on 2 vector"):
        BE.encode_many_with_rtl([(x, cfg, books)], enc_config, golden=wrong)


def test_rtl_kv_encoder_is_a_drop_in_for_encode_kv(enc_config):
    scheme = BE.scheme_of(enc_config)
    rng = np.random.default_rng(9)
    fn = BE.rtl_kv_encoder(enc_config)
    cfg = kv_config(64, scheme, 3, 1.0)
    x = kv_vectors(rng, 9, 64, "weights")
    books = calibrate_kv_codebooks(x[:3], cfg)
    one = fn(x, cfg, books)
    ref = encode_kv(x, cfg, books)
    assert one.planes == ref.planes and one.shape == ref.shape and one.offsets.keys() == ref.offsets.keys()
    many = fn.many([(x[:3], cfg, books), (x[3:], cfg, books), (x[:0], cfg, books)])
    assert [e.nsb for e in many] == [3, 6, 0]
    assert fn.stats.vectors == 18 and fn.stats.mismatches == 0 and fn.stats.runs == 2
    assert fn.stats.as_dict()["kv_vectors_encoded"] == 18


def test_encoder_error_output_is_an_rtl_error(enc_config):
    """A config the encoder refuses (C1: pruning with a speculation book that lacks P -> CONFIG; C2: an empty
    verification book is legal, so a KEEP of 0 through a forged config) exits 3, reported as RtlError."""
    scheme = BE.scheme_of(enc_config)
    cfg = kv_config(64, scheme, 3, 0.5)
    x = kv_vectors(np.random.default_rng(1), 2, 64, "weights")
    books = calibrate_kv_codebooks(x, cfg)
    if scheme == "c1":
        books = (Codebook(tuple(s for s in books[0].symbols if s != PRUNED)), books[1])
    else:
        cfg = copy.copy(cfg)
        object.__setattr__(cfg, "keep_count", 0)     # KEEP = 0: CONFIG (golden would refuse it)
    params = BE._params(enc_config)
    with pytest.raises(BE.RtlError, match="encoder error output"):
        BE._run(BE.build_harness(enc_config), [(x, cfg, books)], params, scheme, 0.0, 0.0, 1)


def test_bad_job_file_exits_2(enc_config, tmp_path):
    job = tmp_path / "job.bin"
    job.write_bytes(b"not a job")
    res = subprocess.run([str(BE.build_harness(enc_config)), str(job), str(tmp_path / "out")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "bad job file" in res.stderr


def test_refused_configurations(enc_config):
    scheme = BE.scheme_of(enc_config)
    other = "c2" if scheme == "c1" else "c1"
    x = kv_vectors(np.random.default_rng(1), 2, 64, "weights")
    cfg = kv_config(64, scheme, 3, 1.0)
    books = calibrate_kv_codebooks(x, cfg)
    ocfg = kv_config(64, other, 3, 1.0)
    with pytest.raises(ConfigError, match="cannot go through"):
        BE.encode_many_with_rtl([(x, ocfg, calibrate_kv_codebooks(x, ocfg))], enc_config)
    a2 = dataclasses.replace(cfg, chunk_superblocks=2)
    with pytest.raises(ConfigError, match="one vector per chunk"):
        BE.encode_many_with_rtl([(x, a2, books)], enc_config)
    paired = tuple(None if b is None else Codebook(b.symbols, 1) if b.K >= 2 else b for b in books)
    if any(b is not None and b.pairs for b in paired):
        with pytest.raises(ConfigError, match="pair groups"):
            BE.encode_many_with_rtl([(x, cfg, paired)], enc_config)
    g256 = kv_config(256, scheme, 3, 1.0)
    y = kv_vectors(np.random.default_rng(2), 2, 256, "weights")
    with pytest.raises(ConfigError, match="G <= 128"):
        BE.encode_many_with_rtl([(y, g256, calibrate_kv_codebooks(y, g256))], enc_config)
    with pytest.raises(ConfigError, match="head_dim=64"):
        BE.encode_many_with_rtl([(x[:, :32], cfg, books)], enc_config)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["encoder_kv_c1_l8", "encoder_kv_c2_l8"])
def test_eight_lane_configurations(config):
    if not BE.available():
        pytest.skip("Verilator not available")
    rng = np.random.default_rng(21)
    batches = random_batches(rng, BE.scheme_of(config), 30)
    st = BE.EncoderStats()
    BE.encode_many_with_rtl(batches, config, idle=0.2, backpressure=0.3, stats=st)
    assert st.vectors == sum(len(x) for x, _, _ in batches) and st.mismatches == 0


@pytest.mark.slow
def test_many_random_batches_under_stalls(enc_config):
    rng = np.random.default_rng(1234)
    batches = random_batches(rng, BE.scheme_of(enc_config), 300)
    st = BE.EncoderStats()
    BE.encode_many_with_rtl(batches, enc_config, idle=0.25, backpressure=0.5, seed=9, stats=st)
    assert st.mismatches == 0 and st.vectors == sum(len(x) for x, _, _ in batches)


def test_no_ready_is_reported_as_a_hang(enc_config):
    """Every plane's ready held low (--backpressure 1): the encoder fills its writers and stops; the harness
    reports a hang (exit 4) instead of waiting forever."""
    scheme = BE.scheme_of(enc_config)
    cfg = kv_config(64, scheme, 3, 1.0)
    x = kv_vectors(np.random.default_rng(4), 8, 64, "uniform")
    books = calibrate_kv_codebooks(x, cfg)
    with pytest.raises(BE.RtlError, match="hang"):
        BE.encode_many_with_rtl([(x, cfg, books)], enc_config, backpressure=1.0)
