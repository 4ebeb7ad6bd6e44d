"""C2 decoder v2 (hw/decoder_c2_v2.py) against the golden codec, under random stalls and backpressure.

Same contract as the v1 C2 decoder (tests/test_hw_decoder_c2.py, whose stimulus helpers and malformed
streams are reused here): every value is compared bit for bit with golden ``decode_draft`` /
``decode_full`` computed at test time, and the beat structure (sb_end, last) with the golden superblock
sizes; malformed streams raise the sticky error, never hang, and the next tensor decodes after CLEAR_ERROR.
Knobs: HW_STALL (probability of an idle input cycle / a not-ready output cycle, default 0.3).
"""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.hw.decoder_c2_v2 import DecoderC2v2
from cassandra_rtl.hw.simutil import DecodeJob, Stalls, run_decoder
from hw_helpers import check, check_recovers, check_reset_mid_stream, weights
from test_hw_decoder_c2 import ERROR_KINDS, RECOVERY_KINDS, _error_case, _sorted_patterns, _spread_patterns, c2

STALL = float(os.environ.get("HW_STALL", "0.3"))


def run(dut, jobs, seed=0, stall=STALL, **kw):
    res = run_decoder(dut, jobs, Stalls(stall, stall, seed=seed), **kw)
    check(res, jobs)
    return res


# ------------------------------------------------------------------------------------------ random data

@pytest.mark.parametrize("lanes,full,m,keep,group", [
    (4, False, 3, 0.5, 64), (4, True, 3, 0.5, 64), (4, True, 0, 1.0, 32), (8, True, 7, 0.3, 128),
    (8, False, 2, 1.0, 128), (8, False, 5, 0.75, 256), (2, True, 6, 0.9, 64),
    pytest.param(8, True, 5, 0.75, 256, marks=pytest.mark.slow),
    pytest.param(16, True, 3, 0.5, 128, marks=pytest.mark.slow),
    pytest.param(16, False, 4, 1.0, 256, marks=pytest.mark.slow),
])
def test_c2v2_random_tensor(lanes, full, m, keep, group):
    bits = weights(3 * group - 37 + lanes, seed=lanes * 7 + m)        # partial last superblock
    enc = c2(bits, group, m, keep)
    run(DecoderC2v2(lanes), [DecodeJob(enc, full)], seed=lanes + m)


def test_c2v2_weight_like_with_specials_and_reprogramming(weight_bits):
    """Weight-like values with a 5 % sprinkle of arbitrary patterns, four tensors back to back with other
    configs, books and modes (registers reprogrammed between them, plane streams continuous)."""
    a = c2(weight_bits(300, seed=1, special=0.05), 128, 3, 0.5)
    b = c2(weight_bits(200, seed=2, special=0.05), 32, 6, 1.0)
    jobs = [DecodeJob(a, True), DecodeJob(b, False), DecodeJob(b, True), DecodeJob(a, False)]
    run(DecoderC2v2(4), jobs, seed=2)


def test_c2v2_kv_kind_same_stream():
    """``kind`` does not change the bitstream: a KV tensor [vectors, head_dim] decodes the same way."""
    enc = c2(weights(4 * 64, 17).reshape(4, 64), 64, 3, 0.5, kind="kv")
    run(DecoderC2v2(4), [DecodeJob(enc, True), DecodeJob(enc, False)], seed=17)


@pytest.mark.parametrize("kw", [{"bitmap_words": 1}, {"code_lanes": 1},
                                {"verif_lanes": 4, "code_lanes": 2}, {"code_seg": 32, "code_depth": 64}])
def test_c2v2_small_buffers_and_lane_counts(kw):
    """Minimal bitmap FIFO, one code per code-plane pass, full-rate full mode (Lv = L) with few code
    lanes, other reader sizes: slower or not, never wrong, never stuck."""
    bits = weights(400, 23)
    jobs = [DecodeJob(c2(bits, 64, 3, 0.5), True), DecodeJob(c2(bits, 128, 2, 1.0), True),
            DecodeJob(c2(bits, 64, 4, 0.3), False)]
    run(DecoderC2v2(4, **kw), jobs, seed=23)


# ----------------------------------------------------------------------------------------- bf16 patterns

@pytest.mark.parametrize("full", [False, True])
def test_c2v2_bf16_pattern_spread(full):
    """A spread of all bf16 patterns (specials, subnormals, every exponent) in blocks whose X ranges over
    0..255: subnormal drafts, c < 0 drafts, elem = 0 with sign, deltas far outside the book (escapes)."""
    pats = _spread_patterns()[:640]
    enc = c2(pats, 128, 2, 0.75)
    run(DecoderC2v2(4), [DecodeJob(enc, full)], seed=6)


def test_c2v2_small_exponent_blocks():
    """Blocks of subnormals and tiny normals only (X in 0..3): the subnormal draft path, X = 0, +0 blocks."""
    rng = np.random.default_rng(8)
    pats = rng.integers(0, 0x200, 256).astype(np.uint16) | (rng.integers(0, 2, 256).astype(np.uint16) << 15)
    pats[:32] &= 0x807F                                            # one block of pure subnormals (X = 0)
    pats[32:64] = 0                                                # one block of +0 only
    jobs = [DecodeJob(c2(pats, 64, m, keep_count=k), full)
            for m, k, full in ((0, 40, True), (7, 64, True), (3, 1, False), (5, 64, False))]
    run(DecoderC2v2(4), jobs, seed=8)


def test_c2v2_sorted_pattern_blocks_full():
    """Every 32nd MX block of the sorted patterns (2,048 values, every exponent), full mode, L = 8."""
    enc = c2(_sorted_patterns(32), 256, 4, 1.0)
    run(DecoderC2v2(8), [DecodeJob(enc, True)], stall=0.0, max_cycles=10**5)


@pytest.mark.slow
@pytest.mark.parametrize("full", [False, True])
def test_c2v2_all_65536_patterns(full):
    """All 65,536 patterns, G = 256, no pruning; draft at L = 16, full at L = 8 (Lv = 4)."""
    enc = c2(_sorted_patterns(), 256, 4, 1.0)
    dut = DecoderC2v2(8) if full else DecoderC2v2(16, word=256)
    run(dut, [DecodeJob(enc, full)], stall=0.0, max_cycles=10**6)


@pytest.mark.slow
@pytest.mark.parametrize("full", [False, True])
def test_c2v2_all_65536_patterns_shuffled(full):
    """All patterns shuffled (random X per block), G = 256 with pruning, stalls; full mode escapes almost
    every delta (one code per cycle from the code plane)."""
    pats = np.arange(65536, dtype=np.uint16)
    np.random.default_rng(1).shuffle(pats)
    enc = c2(pats, 256, 3, 0.5)
    run(DecoderC2v2(8), [DecodeJob(enc, full)], seed=1, stall=0.1, max_cycles=10**6)


# ------------------------------------------------------------------------------------- boundary configs

@pytest.mark.parametrize("group,m,keep_count,numel", [
    (32, 0, 32, 70),        # k = G (no bitmap), m = 0, last MX block of 6 values
    (32, 7, 1, 70),         # k = 1: one kept value per superblock, m = 7 (9-bit fields)
    (64, 7, 64, 65),        # k = G, m = 7, last superblock of one value
    (256, 1, 255, 300),     # k = G - 1 at G = 256: a 256-bit bitmap, partial last superblock (44 values)
    (128, 3, 50, 161),      # partial last MX block (1 value) after a full superblock
])
def test_c2v2_boundary_configs(group, m, keep_count, numel):
    bits = weights(numel, numel + m)
    bits[3] = 0x8000
    bits[5] = 0x0001
    bits[7] = 0x7F80
    enc = c2(bits, group, m, keep_count=keep_count)
    run(DecoderC2v2(4), [DecodeJob(enc, True), DecodeJob(enc, False)], seed=numel)


def test_c2v2_split_first_beat():
    """L = 8, 128-bit words, G = 256 with pruning, m = 7 and a last superblock of 250 values: its X bytes
    start at bit 122 of the chunk's second word and X + 8 fields exceed the two-word view, so the first
    beat is preceded by an X-only step (``split``); every other superblock reads X with its first beat."""
    bits = weights(256 + 250, 5)
    enc = c2(bits, 256, 7, keep_count=250)
    dut = DecoderC2v2(8)
    run(dut, [DecodeJob(enc, False), DecodeJob(enc, True)], seed=5)


def test_c2v2_verif_escapes_and_empty_book():
    """K = 0 verification book (every delta escapes) and a full 15-entry book whose common deltas sit at
    the high ranks (long codes)."""
    bits = weights(192, 41)
    enc_k0 = c2(bits, 64, 2, 0.5, books=(None, Codebook(())))
    enc0 = c2(bits, 64, 2, 0.5)
    common = list(enc0.verif_book.symbols)
    rare = [d for d in range(40, 60) if d not in common]
    book = Codebook(tuple(rare[:15 - min(len(common), 5)] + common[:5]))
    enc_long = c2(bits, 64, 2, 0.5, books=(None, book))
    run(DecoderC2v2(4), [DecodeJob(enc_k0, True), DecodeJob(enc_long, True)], seed=41)


@pytest.mark.parametrize("group,keep", [(64, 1.0), (128, 0.5), (256, 0.5), (256, 1.0)])
def test_c2v2_no_bubbles_at_superblock_boundaries(group, keep):
    """No stalls: one full beat per cycle in draft mode (L = 8) and per Lv = 4 values in full mode, across
    superblock boundaries (incl. G = 256 with its two bitmap words): the cycle count is the beat count
    plus a fixed start-up (setup and pipeline fill), independent of the number of superblocks."""
    bits = weights(16 * group, 3)
    enc = c2(bits, group, 3, keep)
    for full, per_beat in ((False, 8), (True, 4)):
        res = run(DecoderC2v2(8), [DecodeJob(enc, full)], stall=0.0)
        beats = len(res.meta[0])
        assert beats == 16 * group // per_beat
        assert res.cycles <= beats + 20, f"full={full}: {res.cycles} cycles for {beats} beats"


# -------------------------------------------------------------------------------------- malformed streams

@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_c2v2_malformed_raises_sticky_error_and_recovers(kind):
    """Each malformed stream of the v1 test raises the same error bit and drops busy; for one case per bit,
    the decoder drains the rest of the bad tensor's words and, after CLEAR_ERROR, decodes the next tensor."""
    dut = DecoderC2v2(4)
    bad, bit = _error_case(kind)
    res = run_decoder(dut, [bad], Stalls(STALL, STALL, seed=8), max_cycles=4000, expect_error=True)
    assert res.error_code == 1 << bit, f"expected error bit {bit}, got {res.error_code:#x}"
    assert res.busy == 0
    if kind not in RECOVERY_KINDS:
        return
    bad, _ = _error_case(kind)
    check_recovers(dut, bad, c2(weights(48, 2), 32, 3, 0.5), pre_wait=100)


# ----------------------------------------------------------------------------------------- misc contract

@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kw", [{"lanes": 0}, {"lanes": 3}, {"lanes": 64}, {"lanes": 4, "word": 48},
                                {"lanes": 8, "word": 64}, {"lanes": 4, "verif_lanes": 8},
                                {"lanes": 4, "verif_lanes": 3}, {"lanes": 4, "code_seg": 8},
                                {"lanes": 4, "code_lanes": 0}, {"lanes": 4, "bitmap_words": 0},
                                {"lanes": 4, "code_depth": 24}])
def test_c2v2_rejects_bad_parameters(kw):
    with pytest.raises(ConfigError):
        DecoderC2v2(**kw)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_c2v2_ports_and_registry_mirror_v1():
    from cassandra_rtl.hw.configs import CONFIG_INFO, build
    from cassandra_rtl.hw.decoder_c2 import DecoderC2
    v1, v2 = DecoderC2(8), build("decoder_c2v2_l8")
    assert isinstance(v2, DecoderC2v2) and CONFIG_INFO["decoder_c2v2_l8"]["word"] == v2.word == v1.word
    assert dict(v1.signature.members.flatten()).keys() == dict(v2.signature.members.flatten()).keys()
    for path, member in v1.signature.members.flatten():
        assert dict(v2.signature.members.flatten())[path].flow == member.flow
    del v1, v2
    gc.collect()


def test_c2v2_reset_mid_stream_returns_to_idle():
    """A synchronous reset in the middle of a tensor: busy/error clear, registers reset, and the tensor
    (fully reprogrammed, planes sent afresh) decodes exactly."""
    enc = c2(weights(256, 31), 64, 3, 0.5)
    dut = DecoderC2v2(4)
    check_reset_mid_stream(dut, enc, word=dut.word, ticks=20)
