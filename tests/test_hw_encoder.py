"""Online KV encoder (hw/encoder.py) against golden format 3.0 (``escfield.encode3(..., kind="kv", books=...)``),
word for word, under random input idles and output backpressure; encoder -> decoder v3 round trips; framing
errors."""
from __future__ import annotations

import os

import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden import escfield
from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.codec import encode_tensor
from cassandra_rtl.golden.config import PRUNED, CodecConfig
from cassandra_rtl.hw.decoder_c1_v3 import DecoderC1v3
from cassandra_rtl.hw.encoder import FRAME_ERR, EncoderKvC1
from cassandra_rtl.hw.decoder import Err
from cassandra_rtl.hw.simutil import (DecodeJob, Stalls, encoder_program, expected_plane_words, run_decoder,
                                      run_encoder)

STALL = float(os.environ.get("HW_STALL", "0.3"))


def kv_vectors(n: int, G: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, G)) * rng.choice([0.05, 1.0, 8.0], size=(n, 1))).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    bits[0, : G // 4] = bits[0, G // 4]            # ties at the selection threshold
    bits[-1, 3] = 0x7FC1                           # NaN ranks above Inf
    bits[-1, 5] = 0xFF80
    return bits


def encode_kv(bits, G, m, k, books=None):
    """(config, books, the golden format 3.0 tensor) of a KV tensor, books calibrated on its first half."""
    cfg = CodecConfig(group_size=G, mantissa_bits=m, keep_count=k, kind="kv")
    if books is None:                               # calibrate on a "prefill" (here: the first vectors)
        pre = encode_tensor(bits[: max(1, len(bits) // 2)], cfg)
        books = (pre.spec_book, pre.verif_book)
        if cfg.prunes and PRUNED not in books[0].symbols:
            books = (Codebook(books[0].symbols[:14] + (PRUNED,)), books[1])
    return cfg, books, escfield.encode3(bits, cfg, books=books)


@pytest.mark.parametrize("lanes,G,m,k", [(2, 128, 3, 40),        # the default configuration's shape
                                         (4, 32, 3, 12), (8, 64, 7, 64), (8, 64, 0, 1),
                                         pytest.param(2, 64, 7, 64, marks=pytest.mark.slow),
                                         pytest.param(2, 256, 3, 100, marks=pytest.mark.slow),   # 32 rows
                                         pytest.param(16, 64, 2, 40, marks=pytest.mark.slow)])
def test_encoder_matches_golden(lanes, G, m, k):
    bits = kv_vectors(4, G, seed=lanes + G + k)
    cfg, books, enc = encode_kv(bits, G, m, k)
    dut = EncoderKvC1(lanes, max_group=max(G, 32))
    res = run_encoder(dut, bits, encoder_program(cfg, books), Stalls(STALL, STALL, seed=k))
    assert res.error_code == 0
    exp = expected_plane_words(enc, dut.word)
    for port, words in exp.items():
        assert res.planes[port] == words, port


@pytest.mark.parametrize("lanes,pipelined_emit", [(2, True), (4, False), (8, False)])
def test_encoder_pipelined_emit_either_way(lanes, pipelined_emit):
    """The stage-3 register between packer and writers (default on at L >= 4) changes latency only: the
    words equal golden both ways (pruning, k < G), under input idles and output backpressure."""
    G, m, k = 64, 3, 20
    bits = kv_vectors(3, G, seed=5)
    cfg, books, enc = encode_kv(bits, G, m, k)
    dut = EncoderKvC1(lanes, max_group=G, pipelined_emit=pipelined_emit)
    assert dut.pipelined_emit is pipelined_emit
    res = run_encoder(dut, bits, encoder_program(cfg, books), Stalls(STALL, STALL, seed=9))
    assert res.error_code == 0
    for port, words in expected_plane_words(enc, dut.word).items():
        assert res.planes[port] == words, port


def test_encoder_decoder_round_trip():
    """encoder -> decoder v3 (32-bit words, full) == input, and the draft equals the golden draft; the
    escapes (NaN / Inf exponents outside the books) travel in the companion fields."""
    G, lanes = 64, 4
    bits = kv_vectors(3, G, seed=77)
    cfg, books, enc = encode_kv(bits, G, 3, 24)
    assert escfield.escapes_per_chunk(enc, "spec.codes").sum() + escfield.escapes_per_chunk(enc, "verif.codes").sum()
    res = run_encoder(EncoderKvC1(lanes, 32, max_group=64), bits, encoder_program(cfg, books),
                      Stalls(STALL, STALL, seed=5))
    assert res.error_code == 0
    jobs = [DecodeJob(enc, True, planes=res.planes),
            DecodeJob(enc, False, planes={p: res.planes[p] for p in ("spec_codes", "spec_signman")})]
    dres = run_decoder(DecoderC1v3(lanes, code_word=32, word=32), jobs, Stalls(STALL, STALL, seed=6))
    assert dres.error_code == 0
    assert np.array_equal(dres.values[0], bits.reshape(-1))
    from cassandra_rtl.golden.codec import decode_draft
    assert np.array_equal(dres.values[1], decode_draft(enc).reshape(-1))


def test_encoder_framing_error_is_sticky_and_drains():
    G, lanes = 32, 4
    bits = kv_vectors(2, G, seed=3)
    cfg, books, _ = encode_kv(bits, G, 3, 16)
    dut = EncoderKvC1(lanes, 32, max_group=32)
    # `last` one beat early on the first vector.
    res = run_encoder(dut, bits, encoder_program(cfg, books), frame_last=lambda v, b: int(b == G // lanes - 2),
                      max_cycles=500)
    assert res.error_code >> FRAME_ERR & 1


def test_encoder_requires_books():
    G, lanes = 32, 4
    bits = kv_vectors(1, G, seed=4)
    cfg, books, _ = encode_kv(bits, G, 3, 16)
    prog = [(a, d) for a, d in encoder_program(cfg, books) if a not in (0x06, 0x07)]
    res = run_encoder(EncoderKvC1(lanes, 32, max_group=32), bits, prog, max_cycles=300)
    assert res.error_code >> Err.NO_BOOK & 1


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kw", [{"lanes": 3}, {"lanes": 64}, {"lanes": 4, "word": 12}, {"lanes": 4, "max_group": 100},
                                {"lanes": 4, "pipelined_emit": "yes"}])
def test_encoder_rejects_bad_parameters(kw):
    with pytest.raises(ConfigError):
        EncoderKvC1(**kw)


def test_encoder_group_above_buffer_is_config_error():
    """GROUP > max_group raises CONFIG on the first beat (it once blocked the input forever)."""
    G, lanes = 32, 4
    bits = kv_vectors(1, G, seed=8)
    cfg, books, _ = encode_kv(bits, G, 3, 16)
    prog = encoder_program(cfg, books) + [(0x04, 64)]
    res = run_encoder(EncoderKvC1(lanes, 32, max_group=32), bits, prog, max_cycles=300)
    assert res.error_code == 1 << Err.CONFIG


def test_encoder_error_keeps_completed_vectors():
    """A framing error in vector 2: vectors 0 and 1 (complete before it) are still encoded exactly."""
    G, lanes = 32, 4
    bits = kv_vectors(3, G, seed=14)
    cfg, books, _ = encode_kv(bits, G, 3, 16)
    enc = escfield.encode3(bits[:2], cfg, books=books)
    res = run_encoder(EncoderKvC1(lanes, 32, max_group=G), bits, encoder_program(cfg, books),
                      Stalls(STALL, STALL, seed=3),
                      frame_last=lambda v, b: int(b == (0 if v == 2 else G // lanes - 1)), max_cycles=3000)
    assert res.error_code == 1 << FRAME_ERR
    for port, words in expected_plane_words(enc, 32).items():
        assert res.planes[port] == words, port


def test_encoder_default_config_matches_golden():
    """The registered default (encoder_kv_c1_l2: L = 2, 64-bit words, max_group 128) at head_dim 64 with
    pruning: the select passes, the load behind the emission and reprogramming between batches."""
    from cassandra_rtl.hw.configs import build
    dut = build("encoder_kv_c1_l2")
    a, b = kv_vectors(3, 64, seed=41), kv_vectors(2, 128, seed=42)
    cfg_a, books_a, enc_a = encode_kv(a, 64, 2, 20)
    cfg_b, books_b, enc_b = encode_kv(b, 128, 5, 128)
    res = run_encoder(dut, a, encoder_program(cfg_a, books_a), Stalls(STALL, STALL, seed=9),
                      after=(encoder_program(cfg_b, books_b), b), wait_for_host=True)
    assert res.error_code == 0
    ea, eb = expected_plane_words(enc_a, 64), expected_plane_words(enc_b, 64)
    for port in ea:
        assert res.planes[port] == ea[port] + eb[port], port


@pytest.mark.slow
def test_encoder_all_patterns():
    """All 65,536 bf16 patterns in 64-value vectors (L = 2, pruning and not)."""
    pats = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).reshape(-1, 64)
    for m, k, sl in ((3, 50, slice(0, None, 2)), (6, 64, slice(1, None, 2))):
        bits = pats[sl]
        cfg, books, enc = encode_kv(bits, 64, m, k)
        dut = EncoderKvC1(2, 64, max_group=64)
        res = run_encoder(dut, bits, encoder_program(cfg, books), max_cycles=2_000_000)
        assert res.error_code == 0
        for port, words in expected_plane_words(enc, 64).items():
            assert res.planes[port] == words, port
