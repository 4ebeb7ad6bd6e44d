"""Online KV encoder, Cassandra-2 (hw/encoder_c2.py) against golden format 3.0 (``escfield.encode3(scheme="c2",
kind="kv", books=(None, verif))``), word for word, under random input idles and output backpressure; golden round trip;
framing / book / config errors."""
from __future__ import annotations

import os

import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden import escfield
from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.codec import decode_draft, decode_full, superblock_chunks
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.golden.kv import calibrate_kv_codebooks
from cassandra_rtl.hw.decoder import CTRL_CLEAR_ERROR, Err, Reg
from cassandra_rtl.hw.encoder import FRAME_ERR
from cassandra_rtl.hw.encoder_c2 import EncoderKvC2
from cassandra_rtl.hw.simutil import Stalls, chunk_words, run_encoder

STALL = float(os.environ.get("HW_STALL", "0.3"))


def kv_vectors(n: int, G: int, seed: int) -> np.ndarray:
    """Random KV vectors whose MX blocks span several scales, with ties at the selection threshold,
    NaN / Inf, an all-zero block and a block of subnormals."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, G)) * rng.choice([0.05, 1.0, 8.0], size=(n, 1))).astype(np.float32)
    x *= np.exp2(rng.integers(-6, 6, size=(n, G)) * (rng.random((n, G)) < 0.2))  # spread inside blocks
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    bits[0, : G // 4] = bits[0, G // 4]            # ties at the selection threshold
    bits[-1, 3] = 0x7FC1                           # NaN ranks above Inf; X = 255 in this block
    bits[-1, 5] = 0xFF80
    if n > 1:
        bits[1, :32] = 0                           # an all-zero MX block (X = 0)
        bits[1, 32 % G: 32 % G + 32] = rng.integers(0, 0x80, 32) | (rng.integers(0, 2, 32) << 15)  # subnormals
        bits[1, 32 % G + 7] = 0x0080               # the smallest normal next to subnormals
    return bits


def c2_config(G, m, k):
    return CodecConfig(scheme="c2", group_size=G, mantissa_bits=m, keep_count=k, kind="kv")


def encode_kv(bits, G, m, k, verif=None):
    """Golden C2 encoding (format 3.0) with the verification book calibrated on a "prefill" (the first half)."""
    cfg = c2_config(G, m, k)
    if verif is None:
        verif = calibrate_kv_codebooks(bits[: max(1, len(bits) // 2)], cfg)[1]
    return cfg, verif, escfield.encode3(bits, cfg, books=(None, verif))


def program(cfg, verif) -> list[tuple[int, int]]:
    """Register writes of the C2 encoder: MBITS, KEEP, GROUP and the verification book (K last)."""
    w = [(Reg.MBITS, cfg.mantissa_bits), (Reg.KEEP, cfg.keep_count), (Reg.GROUP, cfg.group_size)]
    w += [(Reg.VERIF_SYM + r, s) for r, s in enumerate(verif.symbols)] + [(Reg.VERIF_K, verif.K)]
    return [(int(a), int(d)) for a, d in w]


def expected_words(enc, word_bits) -> dict[str, list[tuple[int, int]]]:
    return {p.replace(".", "_"): [w for c in superblock_chunks(enc, p) for w in chunk_words(c, word_bits)]
            for p in ("spec.mx", "verif.codes", "verif.rest")}


def run_c2(dut, vectors, prog, stalls=None, max_cycles=100_000, frame_last=None, after=None):
    """Simulate the encoder: ``prog`` on cfg, then the vectors on ``inp`` (``after``: more cfg writes and
    vectors once the first batch is in). Returns (planes, cycles first beat -> last word, error_code)."""
    res = run_encoder(dut, vectors, prog, stalls, max_cycles, frame_last, after=after, wait_for_host=True)
    return res.planes, res.cycles, res.error_code


def check_matches(lanes, G, m, k, n=3, seed=0, verif=None, bits=None, word=None, stall=STALL, max_group=None,
                  pipelined_emit=None):
    bits = kv_vectors(n, G, seed=seed) if bits is None else bits
    cfg, verif, enc = encode_kv(bits, G, m, k, verif)
    dut = EncoderKvC2(lanes, word, max_group=max_group or G, pipelined_emit=pipelined_emit)
    planes, _, err = run_c2(dut, bits, program(cfg, verif), Stalls(stall, stall, seed=seed + k))
    assert err == 0
    for port, words in expected_words(enc, dut.word).items():
        assert planes[port] == words, port
    return enc, planes


@pytest.mark.parametrize("lanes,G,m,k", [
    (2, 128, 3, 40),       # the default configuration's shape (encoder_kv_c2_l2): 4 MX blocks, keep bits
    (4, 32, 3, 12),        # prunes: X and keep bits
    (8, 64, 7, 64),        # k = G: X alone, m = 7 (spec.mx writer at 9 bits/value + the header)
    (8, 64, 0, 1),         # k = 1, m = 0
    (4, 64, 2, 64),        # k = G, m small: many draft-zero values
    (8, 32, 5, 31),
    pytest.param(16, 128, 3, 40, marks=pytest.mark.slow),
    pytest.param(16, 64, 7, 1, marks=pytest.mark.slow),
    pytest.param(2, 64, 4, 20, marks=pytest.mark.slow),
    pytest.param(32, 256, 3, 100, marks=pytest.mark.slow),
])
def test_encoder_c2_matches_golden(lanes, G, m, k):
    check_matches(lanes, G, m, k, n=3, seed=lanes + G + m)


@pytest.mark.parametrize("lanes,pipelined_emit", [(2, True), (4, False), (8, False)])
def test_encoder_c2_pipelined_emit_either_way(lanes, pipelined_emit):
    """The stage-3 register (default on at L >= 4) changes latency only: the words equal golden both ways,
    with block headers (pruning: X + keep bits) and under input idles and output backpressure."""
    check_matches(lanes, 64, 3, 20, n=3, seed=11, pipelined_emit=pipelined_emit)


def test_encoder_c2_group_below_buffer():
    """G = 32 on a buffer of 128: one MX block (one header) per vector."""
    check_matches(8, 32, 4, 9, n=3, seed=12, max_group=128)


def test_encoder_c2_reprogram_between_vectors():
    """New MBITS / KEEP / book after a batch: the registers apply from the next vector on."""
    G, lanes = 32, 4
    a, b = kv_vectors(2, G, seed=21), kv_vectors(2, G, seed=22)
    cfg_a, verif_a, enc_a = encode_kv(a, G, 3, 10)
    cfg_b, verif_b, enc_b = encode_kv(b, G, 6, 32)
    dut = EncoderKvC2(lanes, 32, max_group=G)
    planes, _, err = run_c2(dut, a, program(cfg_a, verif_a), Stalls(STALL, STALL, seed=2),
                            after=(program(cfg_b, verif_b), b))
    assert err == 0
    ea, eb = expected_words(enc_a, 32), expected_words(enc_b, 32)
    for port in ea:
        assert planes[port] == ea[port] + eb[port], port


def test_encoder_c2_escapes_and_empty_book():
    """Every delta escapes (K = 0 book) / a book missing most deltas; golden decodes the result back."""
    bits = kv_vectors(2, 32, seed=9)
    enc, _ = check_matches(4, 32, 2, 16, bits=bits, verif=Codebook(()))
    assert np.array_equal(decode_full(enc), bits)
    check_matches(4, 32, 1, 32, bits=bits, verif=Codebook((3,)))


def test_encoder_c2_round_trip_golden():
    """Encoder output re-framed as a golden EncodedTensor decodes (full) to the input and (draft) to the
    golden draft; several vectors, so the next vector loads while the current one is emitted."""
    G, lanes = 64, 8
    bits = kv_vectors(4, G, seed=31)
    cfg, verif, enc = encode_kv(bits, G, 3, 24)
    dut = EncoderKvC2(lanes, max_group=G)
    planes, _, err = run_c2(dut, bits, program(cfg, verif), Stalls(STALL, STALL, seed=3))
    assert err == 0
    nbytes = dut.word // 8
    rebuilt = {}
    for p in ("spec.mx", "verif.codes", "verif.rest"):
        chunks, cur = [], b""
        for data, last in planes[p.replace(".", "_")]:
            cur += int(data).to_bytes(nbytes, "little")
            if last:
                chunks.append(cur)
                cur = b""
        want = superblock_chunks(enc, p)
        rebuilt[p] = b"".join(c[: len(w)] for c, w in zip(chunks, want))   # strip word padding
    from dataclasses import replace
    hw = replace(enc, planes=rebuilt)
    assert np.array_equal(decode_full(hw), bits)
    assert np.array_equal(decode_draft(hw), decode_draft(enc))


def test_encoder_c2_decoder_c2_round_trip():
    """encoder -> hw DecoderC2v3 (32-bit words, full) == input, and its draft == the golden draft."""
    from cassandra_rtl.hw.decoder_c2_v3 import DecoderC2v3
    from cassandra_rtl.hw.simutil import DecodeJob, run_decoder
    G, lanes = 64, 4
    bits = kv_vectors(3, G, seed=77)
    cfg, verif, enc = encode_kv(bits, G, 3, 24)
    planes, _, err = run_c2(EncoderKvC2(lanes, 32, max_group=G), bits, program(cfg, verif),
                            Stalls(STALL, STALL, seed=5))
    assert err == 0
    jobs = [DecodeJob(enc, True, planes=planes), DecodeJob(enc, False, planes={"spec_mx": planes["spec_mx"]})]
    dres = run_decoder(DecoderC2v3(lanes, word=32), jobs, Stalls(STALL, STALL, seed=6))
    assert dres.error_code == 0
    assert np.array_equal(dres.values[0], bits.reshape(-1))
    assert np.array_equal(dres.values[1], decode_draft(enc).reshape(-1))


def test_encoder_c2_all_patterns():
    """All 65,536 bf16 patterns in 64-value vectors (mixed blocks), pruning and not."""
    rng = np.random.default_rng(5)
    pats = rng.permutation(np.arange(1 << 16, dtype=np.uint32)).astype(np.uint16)[:2048].reshape(-1, 64)
    check_matches(16, 64, 3, 50, bits=pats[:8], stall=0.0)


@pytest.mark.slow
def test_encoder_c2_all_patterns_full():
    pats = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).reshape(-1, 64)
    check_matches(16, 64, 3, 50, bits=pats[::16], stall=0.0)
    check_matches(16, 64, 6, 64, bits=pats[1::16], stall=0.0)


def test_encoder_c2_framing_error_is_sticky_and_drains():
    G, lanes = 32, 4
    bits = kv_vectors(2, G, seed=3)
    cfg, verif, _ = encode_kv(bits, G, 3, 16)
    dut = EncoderKvC2(lanes, 32, max_group=32)
    _, _, err = run_c2(dut, bits, program(cfg, verif), frame_last=lambda v, b: int(b == G // lanes - 2),
                       max_cycles=500)
    assert err >> FRAME_ERR & 1


def test_encoder_c2_requires_verif_book():
    G, lanes = 32, 4
    bits = kv_vectors(1, G, seed=4)
    cfg, verif, _ = encode_kv(bits, G, 3, 16)
    prog = [(a, d) for a, d in program(cfg, verif) if a != Reg.VERIF_K]
    _, _, err = run_c2(EncoderKvC2(lanes, 32, max_group=32), bits, prog, max_cycles=300)
    assert err == 1 << Err.NO_BOOK


@pytest.mark.parametrize("reg,value", [(Reg.MBITS, 8), (Reg.KEEP, 0), (Reg.KEEP, 33), (Reg.GROUP, 64),
                                       (Reg.GROUP, 48)])
def test_encoder_c2_bad_config(reg, value):
    """A bad MBITS / KEEP / GROUP (G above max_group or not a format size) raises CONFIG on the first
    beat; CLEAR_ERROR then lets a good config through (encoded correctly)."""
    G, lanes = 32, 4
    bits = kv_vectors(1, G, seed=6)
    cfg, verif, enc = encode_kv(bits, G, 2, 20)
    bad = program(cfg, verif) + [(int(reg), value)]
    dut = EncoderKvC2(lanes, 32, max_group=32)
    _, _, err = run_c2(dut, bits, bad, max_cycles=300)
    assert err == 1 << Err.CONFIG
    # Recovery: the bad vector was drained; clear, reprogram, encode again.
    recover = (program(cfg, verif) + [(int(Reg.CTRL), CTRL_CLEAR_ERROR)], bits)
    dut = EncoderKvC2(lanes, 32, max_group=32)
    planes, _, err = run_c2(dut, bits, bad, after=recover, max_cycles=2000)
    assert err == 0
    exp = expected_words(enc, 32)
    for port, words in exp.items():
        assert planes[port] == words, port


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kw", [{"lanes": 3}, {"lanes": 64}, {"lanes": 4, "word": 12}, {"lanes": 4, "max_group": 100},
                                {"lanes": 4, "pipelined_emit": 1}])
def test_encoder_c2_rejects_bad_parameters(kw):
    with pytest.raises(ConfigError):
        EncoderKvC2(**kw)


def test_encoder_c2_error_keeps_completed_vectors():
    """A framing error in vector 2: vectors 0 and 1 (complete before it) are still encoded exactly, vector 2
    emits nothing, and nothing hangs."""
    G, lanes = 32, 4
    bits = kv_vectors(3, G, seed=13)
    cfg, verif, enc = encode_kv(bits[:2], G, 3, 16)
    dut = EncoderKvC2(lanes, 32, max_group=G)
    planes, _, err = run_c2(dut, bits, program(cfg, verif), Stalls(STALL, STALL, seed=4),
                            frame_last=lambda v, b: int(b == (0 if v == 2 else G // lanes - 1)), max_cycles=3000)
    assert err == 1 << FRAME_ERR
    for port, words in expected_words(enc, 32).items():
        assert planes[port] == words, port
