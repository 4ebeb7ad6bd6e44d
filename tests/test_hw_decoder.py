"""C1 decoder (hw/decoder.py) against the golden codec, under random stalls and backpressure.

Every test decodes with the Amaranth simulator and compares every value bit for bit with
``decode_draft`` / ``decode_full``; malformed streams must raise the sticky error and never hang.
Knobs: HW_STALL (probability of an idle input cycle / a not-ready output cycle, default 0.3).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.codec import encode_tensor
from cassandra_rtl.golden.config import K_MAX, PRUNED, CodecConfig
from cassandra_rtl.hw.decoder import DecoderC1, Err, Reg
from cassandra_rtl.hw.simutil import DecodeJob, Stalls, chunk_words, decoder_planes, decoder_program, run_decoder
from hw_helpers import check, check_recovers, check_reset_mid_stream, weights

STALL = float(os.environ.get("HW_STALL", "0.3"))


@pytest.mark.parametrize("lanes,full,m,keep", [(4, False, 3, 0.5), (4, True, 3, 0.5), (8, True, 0, 0.3),
                                               pytest.param(8, False, 7, 1.0, marks=pytest.mark.slow)])
def test_decoder_random_tensor(lanes, full, m, keep):
    bits = weights(200 + lanes * 5, seed=lanes * 7 + m)          # partial last superblock
    enc = encode_tensor(bits, CodecConfig(group_size=64, mantissa_bits=m, keep_ratio=keep))
    jobs = [DecodeJob(enc, full)]
    check(run_decoder(DecoderC1(lanes), jobs, Stalls(STALL, STALL, seed=lanes + m)), jobs)


def test_decoder_bf16_patterns_and_reprogramming():
    """All exponents / specials (a spread of bf16 patterns, escapes everywhere), then a second tensor with
    other books and mode: codebook reprogramming between tensors."""
    rng = np.random.default_rng(5)
    pats = np.arange(0, 65536, 61, dtype=np.uint16)              # every exponent, both signs, NaN/Inf/subnormal
    pats = np.concatenate([pats, np.array([0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 1, 0x807F], np.uint16)])
    rng.shuffle(pats)
    enc1 = encode_tensor(pats[:512], CodecConfig(group_size=128, mantissa_bits=2, keep_ratio=0.75))
    enc2 = encode_tensor(weights(256, 9), CodecConfig(group_size=32, mantissa_bits=5, keep_count=32))
    jobs = [DecodeJob(enc1, True), DecodeJob(enc2, False), DecodeJob(enc1, False)]
    check(run_decoder(DecoderC1(4, 32), jobs, Stalls(STALL, STALL, seed=3)), jobs)


@pytest.mark.slow
@pytest.mark.parametrize("full", [False, True])
def test_decoder_all_65536_patterns(full):
    pats = np.arange(65536, dtype=np.uint16)
    np.random.default_rng(1).shuffle(pats)
    enc = encode_tensor(pats, CodecConfig(group_size=256, mantissa_bits=3, keep_ratio=0.5))
    jobs = [DecodeJob(enc, full)]
    check(run_decoder(DecoderC1(4, 32), jobs, Stalls(0.1, 0.1, seed=1), max_cycles=10**6), jobs)


@pytest.mark.parametrize("lanes,verif_lanes,m,keep", [(8, 4, 2, 0.3), (8, 2, 7, 0.5), (4, 1, 0, 0.9)])
def test_decoder_fewer_verification_lanes(lanes, verif_lanes, m, keep):
    """verif_lanes < lanes: full-mode beats hold at most Lv values (narrower verification ports), draft
    beats still L; both bit-exact, in one run with the tensors alternating modes."""
    bits = weights(300 + lanes, seed=verif_lanes * 13 + m)        # partial last superblock
    enc = encode_tensor(bits, CodecConfig(group_size=32, mantissa_bits=m, keep_ratio=keep))
    dut = DecoderC1(lanes, verif_lanes=verif_lanes)
    assert dut.port_words["verif_rest"] <= dut.port_words["spec_signman"]
    jobs = [DecodeJob(enc, True), DecodeJob(enc, False), DecodeJob(enc, True)]
    res = run_decoder(dut, jobs, Stalls(STALL, STALL, seed=lanes + verif_lanes))
    check(res, jobs)
    full_counts = [c for c, _, _ in res.meta[0]]
    draft_counts = [c for c, _, _ in res.meta[1]]
    assert max(full_counts) == verif_lanes and max(draft_counts) == lanes


@pytest.mark.parametrize("kind", ["overrun_rest", "too_long_rest"])
def test_decoder_fewer_verification_lanes_errors(kind):
    """Chunk errors on the narrow verification planes are still found (lanes above Lv are not errors)."""
    bits = weights(128, 21)
    enc = encode_tensor(bits, CodecConfig(group_size=64, mantissa_bits=3, keep_ratio=0.5))
    dut = DecoderC1(8, verif_lanes=4)
    planes = decoder_planes(enc, True, dut.port_words)
    w = list(planes["verif_rest"])
    first_last = [i for i, (_, l) in enumerate(w) if l][0]
    if kind == "overrun_rest":
        w[first_last - 1] = (w[first_last - 1][0], 1)
        del w[first_last]
        bit = Err.OVERRUN
    else:
        w.insert(first_last, (0, 0))
        bit = Err.TOO_LONG
    planes["verif_rest"] = w
    res = run_decoder(dut, [DecodeJob(enc, True, planes=planes)], Stalls(STALL, STALL, seed=9), max_cycles=4000,
                      expect_error=True)
    assert res.error_code == 1 << bit, f"expected only error bit {bit}, got {res.error_code:#x}"


def test_decoder_boundary_superblocks():
    """k = 1 (all pruned but one), k = G (nothing pruned), max-length codes (K = 15, rank 14 used), escapes."""
    bits = weights(160, 11)
    # Force rare exponents so a 15-entry book has its last rank in use and others escape.
    bits[::7] = (bits[::7] & 0x807F) | (np.arange(len(bits[::7])) % 40 + 100).astype(np.uint16) << 7
    jobs = []
    for keep in (1, 32):
        cfg = CodecConfig(group_size=32, mantissa_bits=4, keep_count=keep)
        enc = encode_tensor(bits, cfg)
        jobs.append(DecodeJob(enc, True))
    # Max-length codes: a full book of 15 symbols ordered so the most common exponent has rank 14.
    enc0 = encode_tensor(bits, CodecConfig(group_size=32, mantissa_bits=4, keep_count=20))
    exps = np.unique((bits >> 7) & 0xFF)
    common = np.bincount((bits >> 7) & 0xFF).argmax()
    others = [int(e) for e in exps if e != common][:K_MAX - 2]
    spec = Codebook(tuple(others + [PRUNED, int(common)]))
    verif = Codebook(tuple(others[:K_MAX]))
    enc_max = encode_tensor(bits, enc0.config, books=(spec, verif))
    assert spec.K == K_MAX
    jobs.append(DecodeJob(enc_max, True))
    check(run_decoder(DecoderC1(4, 32), jobs, Stalls(STALL, STALL, seed=4)), jobs)


def _malformed(enc, full, plane, words):
    planes = decoder_planes(enc, full, 32)
    planes[plane] = words
    return DecodeJob(enc, full, planes=planes)


def _error_case(kind):
    bits = weights(128, 21)
    enc = encode_tensor(bits, CodecConfig(group_size=64, mantissa_bits=3, keep_ratio=0.5))
    planes = decoder_planes(enc, True, 32)
    if kind == "code":            # a run of more than K zeros at the start of spec.codes
        w = list(planes["spec_codes"])
        w[0] = (0, w[0][1])
        return _malformed(enc, True, "spec_codes", w), Err.CODE
    if kind == "overrun":         # signman chunk of superblock 0 ends one word early
        w = list(planes["spec_signman"])
        first_last = [i for i, (_, l) in enumerate(w) if l][0]
        w[first_last - 1] = (w[first_last - 1][0], 1)
        del w[first_last]
        return _malformed(enc, True, "spec_signman", w), Err.OVERRUN
    if kind == "too_long":        # verif.rest chunk 0 gets an extra zero word before its last
        w = list(planes["verif_rest"])
        first_last = [i for i, (_, l) in enumerate(w) if l][0]
        w.insert(first_last, (0, 0))
        return _malformed(enc, True, "verif_rest", w), Err.TOO_LONG
    if kind == "keep":            # the register says another k than the stream keeps
        prog = [(a, d + 1 if a == Reg.KEEP else d) for a, d in decoder_program(enc, False)]
        return DecodeJob(enc, False, program=prog), Err.KEEP
    if kind == "no_book":         # START without writing SPEC_K
        prog = [(a, d) for a, d in decoder_program(enc, False) if a != Reg.SPEC_K]
        return DecodeJob(enc, False, program=prog), Err.NO_BOOK
    if kind == "config":
        prog = [(a, 100 if a == Reg.GROUP else d) for a, d in decoder_program(enc, False)]
        return DecodeJob(enc, False, program=prog), Err.CONFIG
    raise KeyError(kind)


@pytest.mark.parametrize("kind", ["code", "overrun", "too_long", "keep", "no_book", "config"])
def test_decoder_malformed_raises_sticky_error_and_recovers(kind):
    dut = DecoderC1(4, 32)
    bad, bit = _error_case(kind)
    res = run_decoder(dut, [bad], Stalls(STALL, STALL, seed=8), max_cycles=4000, expect_error=True)
    assert res.error_code >> bit & 1, f"expected error bit {bit}, got {res.error_code:#x}"
    assert res.busy == 0


def test_decoder_recovers_after_clear_error():
    """After an error: inputs drain, CLEAR_ERROR, then the next tensor decodes exactly."""
    dut = DecoderC1(4, 32)
    bad, _ = _error_case("code")
    good_enc = encode_tensor(weights(96, 2), CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=0.5))
    # Truncate the bad tensor's streams to a few words: the decoder drains what arrives, then we clear.
    # The bad tensor produced no `last`; all beats belong to the good tensor.
    bad.planes = {p: w[:3] for p, w in bad.planes.items()}
    check_recovers(dut, bad, good_enc, pre_wait=40)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kw", [{"lanes": 0}, {"lanes": 33}, {"lanes": 4, "word": 12}, {"lanes": 4, "word": 48}, {"lanes": 4, "window": 16},
                                {"lanes": 4, "verif_lanes": 0}, {"lanes": 4, "verif_lanes": 5},
                                {"lanes": 8, "verif_lanes": 4, "verif_word": 12}])
def test_decoder_rejects_bad_parameters(kw):
    with pytest.raises(ConfigError):
        DecoderC1(**kw)


def test_chunk_words_framing():
    assert chunk_words(b"", 32) == [(0, 1)]
    assert chunk_words(bytes([1, 2, 3, 4, 5]), 32) == [(0x04030201, 0), (0x05, 1)]


def test_decoder_reset_mid_stream_returns_to_idle():
    """A synchronous reset in the middle of a tensor: busy/error clear, registers and books reset, and the
    next tensor (fully reprogrammed) decodes exactly."""
    enc = encode_tensor(weights(256, 31), CodecConfig(group_size=64, mantissa_bits=3, keep_ratio=0.5))
    check_reset_mid_stream(DecoderC1(4, 32), enc, word=32, ticks=20)
