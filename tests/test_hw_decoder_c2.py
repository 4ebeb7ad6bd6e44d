"""C2 decoder (hw/decoder_c2.py) against the golden codec, under random stalls and backpressure.

Every test decodes with the Amaranth simulator and compares every value bit for bit with the golden
``decode_draft`` / ``decode_full`` computed at test time; malformed streams must raise the sticky error,
never hang, and the decoder must decode the next tensor after CLEAR_ERROR.
Knobs: HW_STALL (probability of an idle input cycle / a not-ready output cycle, default 0.3).
"""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.codec import encode_tensor, superblock_chunks
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.hw.decoder import Err, Reg
from cassandra_rtl.hw.decoder_c2 import DecoderC2
from cassandra_rtl.hw.simutil import DecodeJob, Stalls, decoder_planes, decoder_program, run_decoder
from hw_helpers import check, check_recovers, check_reset_mid_stream, weights

STALL = float(os.environ.get("HW_STALL", "0.3"))


def c2(bits, group=64, m=3, keep=None, keep_count=None, books=None, kind="weight"):
    cfg = CodecConfig(scheme="c2", group_size=group, mantissa_bits=m, keep_ratio=keep, keep_count=keep_count,
                      kind=kind)
    return encode_tensor(bits, cfg, books=books)


def run(dut, jobs, seed=0, stall=STALL, **kw):
    res = run_decoder(dut, jobs, Stalls(stall, stall, seed=seed), **kw)
    check(res, jobs)
    return res


# ------------------------------------------------------------------------------------------ random data

@pytest.mark.parametrize("lanes,full,m,keep,group", [
    (4, False, 3, 0.5, 64), (4, True, 3, 0.5, 64), (4, True, 0, 1.0, 32), (8, True, 7, 0.3, 128),
    (8, False, 2, 1.0, 128),
    pytest.param(8, True, 5, 0.75, 256, marks=pytest.mark.slow),
    pytest.param(16, True, 3, 0.5, 128, marks=pytest.mark.slow),
    pytest.param(16, False, 4, 1.0, 256, marks=pytest.mark.slow),
])
def test_c2_random_tensor(lanes, full, m, keep, group):
    bits = weights(3 * group - 37 + lanes, seed=lanes * 7 + m)        # partial last superblock
    enc = c2(bits, group, m, keep)
    run(DecoderC2(lanes), [DecodeJob(enc, full)], seed=lanes + m)


def test_c2_weight_like_with_specials_and_reprogramming(weight_bits):
    """Weight-like values with a 2 % sprinkle of arbitrary patterns (±0, subnormals, Inf/NaN, huge),
    three tensors back to back with other configs, books and modes (registers reprogrammed between them)."""
    a = c2(weight_bits(300, seed=1, special=0.05), 128, 3, 0.5)
    b = c2(weight_bits(200, seed=2, special=0.05), 32, 6, 1.0)
    jobs = [DecodeJob(a, True), DecodeJob(b, False), DecodeJob(b, True), DecodeJob(a, False)]
    run(DecoderC2(4), jobs, seed=2)


def test_c2_kv_kind_same_stream():
    """``kind`` does not change the bitstream: a KV tensor [vectors, head_dim] decodes the same way."""
    enc = c2(weights(4 * 64, 17).reshape(4, 64), 64, 3, 0.5, kind="kv")
    run(DecoderC2(4), [DecodeJob(enc, True), DecodeJob(enc, False)], seed=17)


# ----------------------------------------------------------------------------------------- bf16 patterns

def _spread_patterns(step=61, seed=5):
    pats = np.arange(0, 65536, step, dtype=np.uint16)              # every exponent, both signs
    pats = np.concatenate([pats, np.array([0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF, 1, 0x807F,
                                           0x0080, 0x8001, 0x0040], np.uint16)])
    np.random.default_rng(seed).shuffle(pats)
    return pats


@pytest.mark.parametrize("full", [False, True])
def test_c2_bf16_pattern_spread(full):
    """A spread of all bf16 patterns (specials, subnormals, every exponent) in blocks whose X ranges over
    0..255: subnormal drafts, c < 0 drafts, elem = 0 with sign, deltas far outside the book (escapes)."""
    pats = _spread_patterns()[:640]
    enc = c2(pats, 128, 2, 0.75)
    run(DecoderC2(4), [DecodeJob(enc, full)], seed=6)


def test_c2_small_exponent_blocks():
    """Blocks of subnormals and tiny normals only (X in 0..3): the subnormal draft path and X = 0."""
    rng = np.random.default_rng(8)
    pats = rng.integers(0, 0x200, 256).astype(np.uint16) | (rng.integers(0, 2, 256).astype(np.uint16) << 15)
    pats[:32] &= 0x807F                                            # one block of pure subnormals (X = 0)
    pats[32:64] = 0                                                # one block of +0 only
    jobs = [DecodeJob(c2(pats, 64, m, keep_count=k), full)
            for m, k, full in ((0, 40, True), (7, 64, True), (3, 1, False), (5, 64, False))]
    run(DecoderC2(4), jobs, seed=8)


@pytest.mark.slow
def test_c2_all_65536_patterns_shuffled_draft():
    """All patterns shuffled (random X per block), draft mode, L = 8, with stalls (~40 s). (Full mode on
    shuffled patterns escapes almost every delta, one value per beat: ~7 min, so it is not run.)"""
    pats = np.arange(65536, dtype=np.uint16)
    np.random.default_rng(1).shuffle(pats)
    enc = c2(pats, 256, 3, 0.5)
    run(DecoderC2(8), [DecodeJob(enc, False)], seed=1, stall=0.1, max_cycles=10**6)


def _sorted_patterns(every: int = 1) -> np.ndarray:
    """Patterns in order, every ``every``-th MX block of 32 consecutive patterns: each block's X is its
    exponent, and elem = 0 / c < 0 / subnormal drafts all occur inside the blocks."""
    return np.arange(65536, dtype=np.uint16).reshape(-1, 32)[::every].reshape(-1)


@pytest.mark.slow
@pytest.mark.parametrize("full", [False, True])
def test_c2_all_65536_patterns(full):
    """All 65,536 patterns, L = 16, G = 256, no pruning, no stalls (~1-2 min in full mode)."""
    enc = c2(_sorted_patterns(), 256, 4, 1.0)
    run(DecoderC2(16, word=128), [DecodeJob(enc, full)], stall=0.0, max_cycles=10**5)


def test_c2_sorted_pattern_blocks_full():
    """Every 32nd MX block of the sorted patterns (2,048 values, every exponent), full mode, L = 8."""
    enc = c2(_sorted_patterns(32), 256, 4, 1.0)
    run(DecoderC2(8), [DecodeJob(enc, True)], stall=0.0, max_cycles=10**5)


# ------------------------------------------------------------------------------------- boundary configs

@pytest.mark.parametrize("group,m,keep_count,numel", [
    (32, 0, 32, 70),        # k = G (no bitmap), m = 0, last MX block of 6 values
    (32, 7, 1, 70),         # k = 1: one kept value per superblock, m = 7 (9-bit fields)
    (64, 7, 64, 65),        # k = G, m = 7, last superblock of one value
    (256, 1, 255, 300),     # k = G - 1 at G = 256: a 256-bit bitmap, partial last superblock (44 values)
    (128, 3, 50, 161),      # partial last MX block (1 value) after a full superblock
])
def test_c2_boundary_configs(group, m, keep_count, numel):
    bits = weights(numel, numel + m)
    bits[3] = 0x8000
    bits[5] = 0x0001
    bits[7] = 0x7F80
    enc = c2(bits, group, m, keep_count=keep_count)
    run(DecoderC2(4), [DecodeJob(enc, True), DecodeJob(enc, False)], seed=numel)


def test_c2_verif_escapes_and_empty_book():
    """K = 0 verification book (every delta escapes: one draft-zero value per beat at most) and a full
    15-entry book whose common deltas sit at the high ranks (long codes)."""
    bits = weights(192, 41)
    enc_k0 = c2(bits, 64, 2, 0.5, books=(None, Codebook(())))
    enc0 = c2(bits, 64, 2, 0.5)
    common = list(enc0.verif_book.symbols)
    rare = [d for d in range(40, 60) if d not in common]
    book = Codebook(tuple(rare[:15 - min(len(common), 5)] + common[:5]))
    enc_long = c2(bits, 64, 2, 0.5, books=(None, book))
    run(DecoderC2(4), [DecodeJob(enc_k0, True), DecodeJob(enc_long, True)], seed=41)


@pytest.mark.parametrize("mx_window,extra", [(None, 0), (100, 1)])
def test_c2_full_rate_without_stalls(mx_window, extra):
    """No stalls: one full beat per cycle. The X bytes never cost a cycle; with a bitmap (k < G, G = 64)
    the default window reads the whole header on the first beat (no bubble), the minimum window
    (9L + 64 = 100 bits at L = 4) spends one HEAD cycle per superblock."""
    bits = weights(1024, 3)
    for keep in (1.0, 0.5):
        enc = c2(bits, 64, 3, keep)
        res = run(DecoderC2(4, mx_window=mx_window), [DecodeJob(enc, True)], stall=0.0)
        cycles = 1024 // 4 + (extra if keep < 1 else 0) * (1024 // 64)
        assert len(res.meta[0]) == 1024 // 4
        assert cycles <= res.cycles <= cycles + 8, f"keep {keep}: {res.cycles} cycles, expected ~{cycles}"


def test_c2_head_cycles_path():
    """The HEAD path for full superblocks (window too small to merge the header): random data with
    stalls, G = 64 and G = 256 (a 256-bit bitmap read in three 100-bit cycles), and a KEEP error."""
    dut = DecoderC2(4, mx_window=100)
    assert dut.merge_groups == (32,)
    a = c2(weights(300, 12), 64, 3, 0.5)
    b = c2(weights(600, 13), 256, 6, 0.3)
    run(dut, [DecodeJob(a, True), DecodeJob(b, True), DecodeJob(b, False)], seed=12)
    bad, bit = _error_case("keep")
    res = run_decoder(DecoderC2(4, mx_window=100), [bad], Stalls(STALL, STALL, seed=3), max_cycles=4000,
                      expect_error=True)
    assert res.error_code == 1 << bit and res.busy == 0


def test_c2_wide_window_merges_g256():
    """mx_window = 9L + 320 also merges G = 256 headers (320 bits): full rate without stalls, exact with."""
    dut = DecoderC2(4, mx_window=9 * 4 + 320)
    assert dut.merge_groups == (32, 64, 128, 256)
    enc = c2(weights(512, 14), 256, 5, 0.5)
    res = run(dut, [DecodeJob(enc, True)], stall=0.0)
    assert 512 // 4 <= res.cycles <= 512 // 4 + 8
    run(DecoderC2(4, mx_window=9 * 4 + 320), [DecodeJob(enc, True), DecodeJob(enc, False)], seed=14)


# -------------------------------------------------------------------------------------- malformed streams

def _error_case(kind):
    bits = weights(256, 21)
    enc = c2(bits, 64, 3, 0.5)
    planes = decoder_planes(enc, True, 64)
    prog = decoder_program(enc, True)
    job = DecodeJob(enc, True, planes=planes)
    first_last = {p: [i for i, (_, l) in enumerate(w) if l][0] for p, w in planes.items()}
    if kind == "code":            # a run of more than K zeros at the start of verif.codes
        w = list(planes["verif_codes"])
        w[0] = (0, w[0][1])
        planes["verif_codes"] = w
        return job, Err.CODE
    if kind == "negative":        # the book maps rank 0 to delta 255: X - delta < 0
        job.program = [(a, 255 if a == Reg.VERIF_SYM else d) for a, d in prog]
        return job, Err.CODE
    if kind == "overrun_mx":      # spec.mx chunk 0 ends one word early
        w = list(planes["spec_mx"])
        i = first_last["spec_mx"]
        w[i - 1] = (w[i - 1][0], 1)
        del w[i]
        planes["spec_mx"] = w
        return job, Err.OVERRUN
    if kind == "overrun_x":       # spec.mx chunk 0 ends right after the bitmap, before its X bytes
        w = list(planes["spec_mx"])
        planes["spec_mx"] = [(w[0][0], 1)] + w[first_last["spec_mx"] + 1:]
        return job, Err.OVERRUN
    if kind == "overrun_head":    # G = 128: spec.mx chunk 0 ends inside the 128-bit bitmap
        enc = c2(bits, 128, 3, 0.5)
        planes = decoder_planes(enc, True, 64)
        w = planes["spec_mx"]
        planes["spec_mx"] = [(w[0][0], 1)] + w[[i for i, (_, l) in enumerate(w) if l][0] + 1:]
        return DecodeJob(enc, True, planes=planes), Err.OVERRUN
    if kind == "overrun_rest":    # verif.rest chunk 0 ends one word early
        w = list(planes["verif_rest"])
        i = first_last["verif_rest"]
        w[i - 1] = (w[i - 1][0], 1)
        del w[i]
        planes["verif_rest"] = w
        return job, Err.OVERRUN
    if kind == "too_long":        # verif.rest chunk 0 gets an extra zero word before its last
        w = list(planes["verif_rest"])
        w.insert(first_last["verif_rest"], (0, 0))
        planes["verif_rest"] = w
        return job, Err.TOO_LONG
    if kind == "padding":         # a non-zero bit after the last field of spec.mx chunk 0
        used = 64 + 16 + 32 * 5                   # bitmap, 2 X, 32 fields of m + 2 = 5 bits
        assert len(superblock_chunks(enc, "spec.mx")[0]) * 8 == used and used % 64
        w = list(planes["spec_mx"])
        i = first_last["spec_mx"]
        w[i] = (w[i][0] | 1 << (used % 64), 1)
        planes["spec_mx"] = w
        return job, Err.TOO_LONG
    if kind == "keep":            # one more bit set in superblock 0's keep bitmap
        w = list(planes["spec_mx"])
        kept0 = w[0][0] & ((1 << 64) - 1)
        free = next(b for b in range(64) if not kept0 >> b & 1)
        w[0] = (w[0][0] | 1 << free, w[0][1])
        planes["spec_mx"] = w
        return job, Err.KEEP
    if kind == "no_book":         # full mode without VERIF_K written
        return DecodeJob(enc, True, program=[(a, d) for a, d in prog if a != Reg.VERIF_K]), Err.NO_BOOK
    if kind == "config":
        return DecodeJob(enc, True, program=[(a, 100 if a == Reg.GROUP else d) for a, d in prog]), Err.CONFIG
    raise KeyError(kind)


ERROR_KINDS = ["code", "negative", "overrun_mx", "overrun_x", "overrun_head", "overrun_rest", "too_long", "padding", "keep",
               "no_book", "config"]


# One case per error bit also checks the recovery (the others take the same clear/drain path).
RECOVERY_KINDS = {"code", "overrun_mx", "too_long", "keep", "no_book", "config"}


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_c2_malformed_raises_sticky_error_and_recovers(kind):
    """Each malformed stream raises its error bit and drops busy; for one case per bit, the decoder then
    drains the rest of the bad tensor's words, and after CLEAR_ERROR decodes the next tensor exactly."""
    dut = DecoderC2(4)
    bad, bit = _error_case(kind)
    res = run_decoder(dut, [bad], Stalls(STALL, STALL, seed=8), max_cycles=4000, expect_error=True)
    assert res.error_code >> bit & 1, f"expected error bit {bit}, got {res.error_code:#x}"
    assert res.busy == 0
    if kind not in RECOVERY_KINDS:
        return

    bad, _ = _error_case(kind)
    good_enc = c2(weights(48, 2), 32, 3, 0.5)
    # The bad tensor's words are all sent (the decoder drains them); the host waits, clears, then programs
    # and streams the good tensor.
    check_recovers(dut, bad, good_enc, pre_wait=100)


# ----------------------------------------------------------------------------------------- misc contract

@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kw", [{"lanes": 0}, {"lanes": 33}, {"lanes": 4, "word": 12}, {"lanes": 4, "window": 16},
                                {"lanes": 4, "mx_window": 64}, {"lanes": 8, "mx_window": 2000},
                                {"lanes": 4, "mx_window": "wide"}])
def test_c2_rejects_bad_parameters(kw):
    with pytest.raises(ConfigError):
        DecoderC2(**kw)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_c2_ports_mirror_c1():
    dut = DecoderC2(8)
    names = {str(p[0][0]) for p in dut.signature.members.flatten()}
    assert {"spec_mx", "verif_codes", "verif_rest", "cfg", "out", "busy", "error", "error_code"} <= names
    assert "spec_codes" not in names and dut.word == 128
    del dut
    gc.collect()                      # the never-elaborated component warns here, inside this test's filter


def test_c2_reset_mid_stream_returns_to_idle():
    """A synchronous reset in the middle of a tensor: busy/error clear, registers reset, and the next tensor
    (fully reprogrammed, planes sent afresh) decodes exactly."""
    enc = c2(weights(256, 31), 64, 3, 0.5)
    dut = DecoderC2(4)
    check_reset_mid_stream(dut, enc, word=dut.word, ticks=12)
