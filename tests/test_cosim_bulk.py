"""The bulk path (tb/bulk: compiled Verilator harness) on real data: SmolLM2-135M linear weights encoded by
the golden codec go through the exported decoder v3 (C1 decoder_c1v3_l4, C2 decoder_c2v3_l8), each tensor in
format 3.0, and must come out equal to the golden decode. A sample in `make test`; the sample through
decoder_c1v3_l8 (the CLI's default, minutes to verilate on a 2-core machine) and the whole model (106 M values)
are `make test-slow` / `make sim-full`."""
from __future__ import annotations

import numpy as np
import pytest

from cassandra_rtl.golden import escfield
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.hw.configs import CONFIG_INFO
from cassandra_rtl.tb import bulk
from cassandra_rtl.tb.decoder import data as D

pytestmark = pytest.mark.sim

C1_CONFIG = "decoder_c1v3_l4"      # the cheapest C1 harness; L = 8: C1_WIDE and tb.run.whole_model
C1_WIDE = "decoder_c1v3_l8"        # the CLI's default C1 configuration (slow: its harness takes minutes to build)


@pytest.fixture(scope="module")
def harness():
    if not bulk.available():
        pytest.skip("Verilator not available")
    return bulk.build_harness(C1_CONFIG)


@pytest.fixture(scope="module")
def smollm2_rows():
    try:
        return D.smollm2_sample(np.random.default_rng(2024), 1 << 18, rows=4)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("config", [C1_CONFIG, pytest.param(C1_WIDE, marks=pytest.mark.slow)])
@pytest.mark.parametrize("mode", ["draft", "full"])
@pytest.mark.parametrize("keep", [1.0, 0.75, 0.3])
def test_smollm2_sample_through_rtl(harness, smollm2_rows, mode, keep, config):
    cfg = CodecConfig(group_size=128, mantissa_bits=3, keep_ratio=keep)
    encs = [encode_tensor(x, cfg) for x in smollm2_rows]
    st = bulk.BulkStats()
    got = bulk.decode_many_with_rtl(encs, mode, config=config, stats=st)
    for enc, g in zip(encs, got):
        ref = decode_full(enc) if mode == "full" else decode_draft(enc)
        bad = np.flatnonzero(g.reshape(-1) != ref.reshape(-1))
        assert len(bad) == 0, f"{len(bad)} mismatches, first at {bad[:5]}"
    assert st.values == sum(e.numel for e in encs)


def test_random_configs_with_stalls(harness):
    """Random configurations and data under random idle cycles and backpressure in the C++ harness."""
    rng = np.random.default_rng(7)
    encs = []
    for _ in range(12):
        cfg = D.random_config(rng)
        n = D.random_numel(rng, cfg.group_size, 40)
        encs.append(D.encode(D.random_tensor(rng, n), cfg))
    for mode in ("draft", "full"):
        got = bulk.decode_many_with_rtl(encs, mode, config=C1_CONFIG, idle=0.3, backpressure=0.4, seed=11)
        for enc, g in zip(encs, got):
            ref = decode_full(enc) if mode == "full" else decode_draft(enc)
            assert np.array_equal(g.reshape(-1), ref.reshape(-1))


def test_reference_roundtrip_is_lossless(smollm2_rows):
    """The comparison above is against the golden decode; the golden full decode is the input itself."""
    enc = encode_tensor(smollm2_rows[0], CodecConfig(group_size=128, mantissa_bits=3, keep_ratio=0.75))
    assert np.array_equal(decode_full(enc), smollm2_rows[0])


def test_corrupt_stream_is_reported(harness):
    """A malformed stream must surface as RtlError (the decoder's error output), never as silent output."""
    rng = np.random.default_rng(3)
    enc = escfield.encode3(D.weights_like(rng, 128 * 8), CodecConfig(group_size=128, mantissa_bits=3, keep_count=100))
    planes = dict(enc.planes)
    b = bytearray(planes["spec.codes"])
    b[:4] = b"\x00\x00\x00\x00"           # a zero run longer than K at the start of superblock 0
    planes["spec.codes"] = bytes(b)
    bad = type(enc)(enc.shape, enc.config, enc.spec_book, enc.verif_book, planes, enc.offsets)
    with pytest.raises(bulk.RtlError):
        bulk.decode_with_rtl(bad, "draft", config=C1_CONFIG)


@pytest.mark.slow
@pytest.mark.model
def test_whole_smollm2_through_rtl():
    from cassandra_rtl.tb.run import whole_model

    if not bulk.available():
        pytest.skip("Verilator not available")
    try:
        res = whole_model(2)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert res["values"] >= 2 * 100_000_000
    assert res["mismatches"] == 0


# --------------------------------------------------------------------------------- Cassandra-2 decoder

C2_CONFIG = "decoder_c2v3_l8"


@pytest.fixture(scope="module")
def harness_c2():
    if not bulk.available():
        pytest.skip("Verilator not available")
    return bulk.build_harness(C2_CONFIG)      # Verilator, -DHARNESS_C2


def _check_c2(encs, mode, config=C2_CONFIG, **kw):
    st = bulk.BulkStats()
    got = bulk.decode_many_with_rtl(encs, mode, config=config, stats=st, **kw)
    for enc, g in zip(encs, got):
        ref = decode_full(enc) if mode == "full" else decode_draft(enc)
        bad = np.flatnonzero(g.reshape(-1) != ref.reshape(-1))
        assert len(bad) == 0, f"{len(bad)} mismatches, first at {bad[:5]}"
    assert st.values == sum(e.numel for e in encs)
    return st


@pytest.mark.parametrize("mode", ["draft", "full"])
@pytest.mark.parametrize("keep", [1.0, 0.5])
def test_c2_smollm2_sample_through_rtl(harness_c2, smollm2_rows, mode, keep):
    """4 x 256 Ki SmolLM2 values encoded C2 (G = 128, m = 3) through decoder_c2v3_l8: bit-exact, within 2 % of
    its nominal rate (8 values/cycle in draft mode, 4 in full mode)."""
    cfg = CodecConfig(scheme="c2", group_size=128, mantissa_bits=3, keep_ratio=keep)
    st = _check_c2([encode_tensor(x, cfg) for x in smollm2_rows], mode)
    info = CONFIG_INFO[C2_CONFIG]
    nominal = info["values_per_cycle_full"] if mode == "full" else info["values_per_cycle"]
    assert st.values_per_cycle > 0.98 * nominal, st


def test_c2_random_configs_with_stalls(harness_c2):
    """Random C2 configurations (every G incl. 256: 8 MX block headers per superblock, k = 1 / G, partial superblocks) and data
    (subnormal blocks, the whole exponent range, specials) under random idles and backpressure."""
    rng = np.random.default_rng(17)
    encs = []
    for _ in range(16):
        cfg = D.random_c2_config(rng)
        n = D.random_numel(rng, cfg.group_size, 40)
        encs.append(D.encode(D.random_c2_tensor(rng, n), cfg))
    for mode in ("draft", "full"):
        _check_c2(encs, mode, idle=0.3, backpressure=0.4, seed=13)


@pytest.mark.parametrize("head_dim,keep", [(64, 0.5), (128, 1.0), (128, 0.25)])
def test_c2_kv_stream_through_rtl(smollm2_rows, head_dim, keep):
    """The C2 KV stream (golden encode_kv in format 3.0 with a calibrated verification book: exactly the
    words tb/encoder checks encoder_kv_c2_* against) through decoder_c2v3_l8 in both modes, as stored:
    encoder -> decoder closes by transitivity, without glue."""
    if not bulk.available():
        pytest.skip("Verilator not available")
    from cassandra_rtl.golden.kv import calibrate_kv_codebooks, encode_kv, kv_config

    cfg = kv_config(head_dim, "c2", 3, keep)
    vecs = smollm2_rows[1][: head_dim * 512].reshape(-1, head_dim)
    enc = encode_kv(vecs, cfg, calibrate_kv_codebooks(vecs[: len(vecs) // 2], cfg))
    for mode in ("draft", "full"):
        _check_c2([enc], mode, idle=0.1, backpressure=0.1, seed=3)


def test_c2_corrupt_stream_is_reported(harness_c2):
    """An MX block's keep bits set to all ones (more kept values than KEEP allows) surface as RtlError, never as
    silent output."""
    rng = np.random.default_rng(5)
    enc = escfield.encode3(D.weights_like(rng, 128 * 8), D.c2cfg(128, 3, 100))
    planes = dict(enc.planes)
    b = bytearray(planes["spec.mx"])
    b[1:5] = b"\xff" * 4                     # MX block 0's 32 keep bits (after its X byte): all kept
    planes["spec.mx"] = bytes(b)
    bad = type(enc)(enc.shape, enc.config, enc.spec_book, enc.verif_book, planes, enc.offsets)
    with pytest.raises(bulk.RtlError):
        bulk.decode_with_rtl(bad, "draft", config=C2_CONFIG)


def test_c2_tensor_rejected_by_c1_harness(tmp_path):
    enc = D.encode(D.weights_like(np.random.default_rng(1), 64), D.c2cfg(32, 3, 32))
    with pytest.raises(ValueError, match="decoder_c2"):
        bulk.write_job(tmp_path / "job.bin", [enc], False, 8, 64, "c1")


@pytest.mark.slow
@pytest.mark.model
def test_whole_smollm2_through_rtl_c2(harness_c2):
    from cassandra_rtl.tb.run import whole_model

    try:
        res = whole_model(2, scheme="c2")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert res["values"] >= 2 * 100_000_000
    assert res["mismatches"] == 0
