"""C2 decoder v2 (hw/decoder_c2_v2.py) against the golden codec, under random stalls and backpressure.

Same contract as the retired v1 C2 decoder (its stimulus helpers and malformed streams live here now,
pinned to format 1.0: A = 1, no pairs): every value is compared bit for bit with golden ``decode_draft`` /
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
from cassandra_rtl.golden.codec import encode_tensor, superblock_chunks
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.hw.decoder import Err, Reg
from cassandra_rtl.hw.decoder_c2_v2 import DecoderC2v2
from cassandra_rtl.hw.simutil import DecodeJob, Stalls, decoder_planes, decoder_program, run_decoder
from hw_helpers import check, check_recovers, check_reset_mid_stream, weights

STALL = float(os.environ.get("HW_STALL", "0.3"))


# ------------------------------------------------------------------- format 1.0 cases (were in test_hw_decoder_c2.py)

def c2(bits, group=64, m=3, keep=None, keep_count=None, books=None, kind="weight"):
    """A format 1.0 C2 tensor (A = 1, no pair groups: explicit, whatever golden's defaults are)."""
    cfg = CodecConfig(scheme="c2", group_size=group, mantissa_bits=m, keep_ratio=keep, keep_count=keep_count,
                      kind=kind, chunk_superblocks=1, pair_codes=False)
    return encode_tensor(bits, cfg, books=books)


def _spread_patterns(step=61, seed=5):
    pats = np.arange(0, 65536, step, dtype=np.uint16)              # every exponent, both signs
    pats = np.concatenate([pats, np.array([0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF, 1, 0x807F,
                                           0x0080, 0x8001, 0x0040], np.uint16)])
    np.random.default_rng(seed).shuffle(pats)
    return pats


def _sorted_patterns(every: int = 1) -> np.ndarray:
    """Patterns in order, every ``every``-th MX block of 32 consecutive patterns: each block's X is its
    exponent, and elem = 0 / c < 0 / subnormal drafts all occur inside the blocks."""
    return np.arange(65536, dtype=np.uint16).reshape(-1, 32)[::every].reshape(-1)


def _error_case(kind, words=64):
    bits = weights(256, 21)
    enc = c2(bits, 64, 3, 0.5)
    planes = decoder_planes(enc, True, words)
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
    if kind in ("overrun_mx", "overrun_rest"):     # spec.mx / verif.rest chunk 0 ends one word early
        plane = "spec_mx" if kind == "overrun_mx" else "verif_rest"
        w = list(planes[plane])
        i = first_last[plane]
        w[i - 1] = (w[i - 1][0], 1)
        del w[i]
        planes[plane] = w
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


@pytest.mark.parametrize("kw", [{"bitmap_words": 2, "field_slots": 3}, {"code_lanes": 1},
                                {"verif_lanes": 4, "code_lanes": 2}, {"code_seg": 32, "code_depth": 64},
                                {"registered_out": True}])
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
    beat is preceded by an X-only step (F's offset > 2 IW - take); every other superblock reads X with its
    first beat."""
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


@pytest.mark.parametrize("group,keep", [(64, 1.0), (128, 0.5), (256, 0.5),
                                        pytest.param(256, 1.0, marks=pytest.mark.slow)])
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


class _HoldChecked(DecoderC2v2):
    """DecoderC2v2 with the stream rule of docs/HARDWARE.md 2 asserted in simulation (Amaranth's simulator
    raises on a failed Assert): a beat offered and not taken stays valid with the same payload the next
    cycle, also when an error is raised meanwhile (the default, registered_out=False, holds such errors)."""

    def elaborate(self, platform):
        from amaranth.hdl import Assert, ResetSignal, Signal
        m = super().elaborate(platform)
        out = self.out
        stalled = Signal(name="chk_stalled")
        payload = Signal(len(out.payload.as_value()), name="chk_payload")
        m.d.sync += [stalled.eq(out.valid & ~out.ready), payload.eq(out.payload.as_value())]
        m.d.comb += Assert(ResetSignal() | ~stalled | (out.valid & (out.payload.as_value() == payload)),
                           "out: valid held until ready, payload stable")
        return m


def _late_error_case(kind, full):
    """A spec.mx error in the tensor's last chunk (superblock 3 of 4, A = 1), so ingest finds it while the
    beats of the first superblocks wait at the output: the chunk ends a word early (OVERRUN), has an extra
    word (TOO_LONG), a non-zero padding bit (TOO_LONG) or one more keep-bitmap bit (KEEP)."""
    enc = c2(weights(256, 21), 64, 3, 0.5)
    planes = decoder_planes(enc, full, 64)
    w = list(planes["spec_mx"])
    ends = [i for i, (_, last) in enumerate(w) if last]
    first, i = ends[-2] + 1, ends[-1]                      # the last chunk's words
    assert i > first, "the last chunk needs two words"
    if kind == "overrun":
        w[i - 1] = (w[i - 1][0], 1)
        del w[i]
        bit = Err.OVERRUN
    elif kind == "extra_word":
        w.insert(i, (0, 0))
        bit = Err.TOO_LONG
    elif kind == "padding":
        used = len(superblock_chunks(enc, "spec.mx")[-1]) * 8
        assert used % 64 and used // 64 == i - first
        w[i] = (w[i][0] | 1 << (used % 64), 1)
        bit = Err.TOO_LONG
    else:                                                  # keep: one more bit in the last bitmap
        kept = w[first][0] & ((1 << 64) - 1)
        w[first] = (w[first][0] | 1 << next(b for b in range(64) if not kept >> b & 1), w[first][1])
        bit = Err.KEEP
    planes["spec_mx"] = w
    return DecodeJob(enc, full, planes=planes), bit


@pytest.mark.parametrize("registered_out", [False, True])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("kind", ["overrun", "extra_word", "padding", "keep"])
def test_c2v2_error_never_withdraws_an_offered_beat(kind, full, registered_out):
    """Ingest (spec.mx framing) and issue (KEEP) errors found while a beat waits under heavy backpressure: the
    beat stays offered until taken (asserted every cycle: without the register and without err_held the beat
    is withdrawn in every case here), then the error bit of the malformed chunk."""
    bad, bit = _late_error_case(kind, full)
    res = run_decoder(_HoldChecked(4, registered_out=registered_out), [bad], Stalls(0.0, 0.9, seed=12),
                      max_cycles=8000, expect_error=True)
    assert res.error_code == 1 << bit, f"expected error bit {bit}, got {res.error_code:#x}"


@pytest.mark.parametrize("kind", ["negative", "overrun_mx", "too_long", "keep"])
def test_c2v2_registered_out_errors(kind):
    """registered_out=True (the output register; a beat with X - delta < 0 sits there invalid) raises
    the same error bits as the default, with the errors ingest / issue find while a beat is held under
    backpressure, and recovers."""
    dut = DecoderC2v2(4, registered_out=True)
    bad, bit = _error_case(kind)
    res = run_decoder(dut, [bad], Stalls(STALL, STALL, seed=10), max_cycles=4000, expect_error=True)
    assert res.error_code == 1 << bit, f"expected error bit {bit}, got {res.error_code:#x}"
    assert res.busy == 0
    if kind in RECOVERY_KINDS:
        bad, _ = _error_case(kind)
        check_recovers(dut, bad, c2(weights(48, 2), 32, 3, 0.5), pre_wait=100)


@pytest.mark.parametrize("kind", ["code", "negative", "overrun_rest", "too_long"])
def test_c2v2_narrow_verification_ports_errors_and_recovery(kind):
    """Interface v2.1 (decoder_c2v2_l8: 128-bit spec.mx, 64-bit verification words): the verification planes'
    malformed chunks raise their bit at the narrow width too, and the decoder recovers."""
    dut = DecoderC2v2(8)
    assert dut.port_words == {"spec_mx": 128, "verif_codes": 64, "verif_rest": 64}
    bad, bit = _error_case(kind, dut.port_words)
    res = run_decoder(dut, [bad], Stalls(STALL, STALL, seed=9), max_cycles=4000, expect_error=True)
    assert res.error_code == 1 << bit, f"expected error bit {bit}, got {res.error_code:#x}"
    assert res.busy == 0
    bad, _ = _error_case(kind, dut.port_words)
    check_recovers(dut, bad, c2(weights(48, 2), 32, 3, 0.5), pre_wait=100)


# ----------------------------------------------------------------------------------------- misc contract

@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kw", [{"lanes": 0}, {"lanes": 3}, {"lanes": 64}, {"lanes": 4, "word": 48},
                                {"lanes": 8, "word": 64}, {"lanes": 4, "verif_lanes": 8},
                                {"lanes": 4, "verif_lanes": 3}, {"lanes": 4, "code_seg": 8},
                                {"lanes": 4, "code_lanes": 0}, {"lanes": 4, "bitmap_words": 1},
                                {"lanes": 4, "code_depth": 24}, {"lanes": 4, "verif_word": 48},
                                {"lanes": 4, "verif_word": 16}])
def test_c2v2_rejects_bad_parameters(kw):
    with pytest.raises(ConfigError):
        DecoderC2v2(**kw)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_c2v2_ports_and_registry_mirror_v1():
    from cassandra_rtl.hw.configs import CONFIG_INFO, build
    from cassandra_rtl.hw.decoder_c2 import DecoderC2
    v1, v2 = DecoderC2(8), build("decoder_c2v2_l8")
    assert isinstance(v2, DecoderC2v2) and CONFIG_INFO["decoder_c2v2_l8"]["word"] == v2.word == v1.word
    # interface v2.1: the same ports and flows, the verification planes at 64-bit words
    assert CONFIG_INFO["decoder_c2v2_l8"]["verif_word"] == v2.verif_word == 64
    members = dict(v2.signature.members.flatten())
    assert [members[(p, "payload")].shape.size - 1 for p in ("spec_mx", "verif_codes", "verif_rest")] == [128, 64, 64]
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


# ------------------------------------------------------------------------------------------- format 2.0

def c2f2(bits, group, m, keep=None, keep_count=None, A=1, pairs=None, kind="weight"):
    """A format 2.0 C2 tensor: chunks of ``A`` superblocks; ``pairs`` = None (no pair groups), "alt" (every
    other group of the first half of the golden book is a pair) or "all" (the first half all pairs). Golden
    only chooses pairs where they pay, which small random tensors rarely show, so the masks are set here."""
    cfg = CodecConfig(scheme="c2", group_size=group, mantissa_bits=m, keep_ratio=keep, keep_count=keep_count,
                      kind=kind, chunk_superblocks=A, pair_codes=False)
    enc = encode_tensor(bits, cfg)
    if pairs is None:
        return enc
    syms = enc.verif_book.symbols
    step = 2 if pairs == "alt" else 1
    mask = sum(1 << q for q in range(0, len(syms) // 2, step))
    return encode_tensor(bits, cfg, books=(None, Codebook(syms, mask)))


@pytest.mark.parametrize("lanes,full,m,keep,group,A,pairs", [
    (4, True, 3, 0.5, 64, 2, "alt"), (4, True, 3, 0.3, 32, 8, "all"), (4, False, 3, 1.0, 64, 8, None),
    (8, True, 2, 1.0, 128, 8, "alt"), (8, False, 5, 0.5, 128, 8, None), (4, True, 6, 0.3, 64, 1, "all"),
    (8, True, 3, 0.5, 32, 2, None),
    pytest.param(8, True, 7, 0.3, 256, 4, "alt", marks=pytest.mark.slow),
    pytest.param(16, True, 3, 0.5, 64, 16, "all", marks=pytest.mark.slow),
])
def test_c2v2_format2_random_tensor(lanes, full, m, keep, group, A, pairs):
    """Chunks of A superblocks (partial last chunk and superblock) and pair groups in the verification
    book, against golden, with idles on every input and backpressure."""
    bits = weights(3 * A * group - 37 + lanes, seed=lanes * 7 + m)
    enc = c2f2(bits, group, m, keep, A=A, pairs=pairs)
    assert enc.nchunks == 3 and (pairs is None) == (enc.verif_book.pairs == 0)
    run(DecoderC2v2(lanes), [DecodeJob(enc, full)], seed=lanes + m + A)


def test_c2v2_format2_back_to_back_with_v1():
    """2.0 and v1 tensors back to back (CHUNK / VERIF_PAIRS rewritten only when they change), both modes."""
    bits = weights(700, 4)
    a = c2f2(bits, 64, 3, 0.5, A=8, pairs="alt")
    b = c2(bits[:300], 32, 4, 1.0)
    d = c2f2(bits[:500], 128, 2, 0.3, A=2, pairs="all")
    jobs = [DecodeJob(a, True), DecodeJob(b, True), DecodeJob(d, False), DecodeJob(d, True), DecodeJob(a, False)]
    run(DecoderC2v2(4), jobs, seed=4)


@pytest.mark.parametrize("group,m,keep_count,A", [
    (32, 0, 1, 32),     # 42-bit superblocks: three start in one 128-bit word (the ingest holds the word)
    (32, 0, 32, 8),     # no bitmap, 72-bit superblocks
    (256, 7, 250, 4),   # 256-bit bitmaps, X + 8 fields past the two-word view (X-only steps)
])
def test_c2v2_format2_superblock_sizes(group, m, keep_count, A):
    bits = weights(2 * A * group + 3 * group // 2, seed=group + m)
    bits[:32] = 0x0001                                    # a block of subnormals (X = 0)
    bits[32:64] = 0x7F7F                                  # a block of X = 254 ...
    bits[64] = 0x7F80                                     # ... and one of Inf (X = 255)
    enc = c2f2(bits, group, m, keep_count=keep_count, A=A, pairs="alt")
    run(DecoderC2v2(8), [DecodeJob(enc, False), DecodeJob(enc, True)], seed=group)


@pytest.mark.parametrize("full", [False, True])
def test_c2v2_format2_bf16_pattern_spread(full):
    """The pattern spread of the v1 test (every exponent, X = 0..255, subnormal drafts, escapes) in chunks
    of 8 superblocks with pair groups."""
    enc = c2f2(_spread_patterns()[:1280], 128, 2, 0.75, A=8, pairs="all")
    run(DecoderC2v2(4), [DecodeJob(enc, full)], seed=9)


@pytest.mark.parametrize("group,keep,A", [(128, 0.5, 8), (32, 0.5, 32),
                                          pytest.param(256, 1.0, 4, marks=pytest.mark.slow)])
def test_c2v2_format2_no_bubbles(group, keep, A):
    """No stalls: one full beat per cycle inside and across chunks (superblocks back to back in a chunk)."""
    bits = weights(16 * group, 3)
    enc = c2f2(bits, group, 3, keep, A=A, pairs="alt")
    for full, per_beat in ((False, 8), (True, 4)):
        res = run(DecoderC2v2(8), [DecodeJob(enc, full)], stall=0.0)
        beats = len(res.meta[0])
        assert beats == 16 * group // per_beat
        assert res.cycles <= beats + 22, f"full={full}: {res.cycles} cycles for {beats} beats"


def _f2_error_case(kind):
    enc = c2f2(weights(600, 21), 64, 3, 0.3, A=4, pairs="alt")      # spec.mx chunk 0: 90 bytes
    planes = decoder_planes(enc, True, 64)
    job = DecodeJob(enc, True, planes=planes)
    first_last = {p: [i for i, (_, l) in enumerate(w) if l][0] for p, w in planes.items()}
    w = {p: list(v) for p, v in planes.items()}
    if kind in ("chunk", "chunk_g256"):   # CHUNK beyond 6, or A * G > 1024
        group = 256 if kind == "chunk_g256" else 64
        e = c2(weights(300, 1), group, 3, 0.5)
        prog = [(a, (3 if group == 256 else 7) if a == Reg.CHUNK else d)
                for a, d in decoder_program(e, True, force_format2=True)]
        return DecodeJob(e, True, program=prog), Err.CONFIG
    if kind == "pairs":                   # a pair bit at q >= Q
        prog = [(int(Reg.VERIF_PAIRS), 1 << 14) if a == Reg.VERIF_PAIRS else (a, d)
                for a, d in decoder_program(enc, True, force_format2=True)]
        job.program = prog
        return job, Err.CONFIG
    if kind in ("overrun_mx", "overrun_rest"):    # chunk 0 ends one word early
        p = "spec_mx" if kind == "overrun_mx" else "verif_rest"
        i = first_last[p]
        w[p][i - 1] = (w[p][i - 1][0], 1)
        del w[p][i]
    elif kind == "too_long_mx":            # an extra zero word before chunk 0's last
        w["spec_mx"].insert(first_last["spec_mx"], (0, 0))
    elif kind == "padding_mx":             # a non-zero top bit in chunk 0's last word
        i = first_last["spec_mx"]
        w["spec_mx"][i] = (w["spec_mx"][i][0] | 1 << 63, 1)
    elif kind == "overrun_codes":          # verif.codes chunk 0 ends after its first word
        w["verif_codes"] = [(w["verif_codes"][0][0], 1)] + w["verif_codes"][first_last["verif_codes"] + 1:]
    job.planes = w
    bit = {"overrun_mx": Err.OVERRUN, "overrun_rest": Err.OVERRUN, "too_long_mx": Err.TOO_LONG,
           "padding_mx": Err.TOO_LONG, "overrun_codes": Err.OVERRUN}[kind]
    return job, bit


@pytest.mark.parametrize("kind", ["chunk", "chunk_g256", "pairs", "overrun_mx", "overrun_rest", "too_long_mx",
                                  "padding_mx", "overrun_codes"])
def test_c2v2_format2_malformed_raises_error(kind):
    """Bad format 2.0 registers raise CONFIG; malformed chunks of several superblocks raise v1's bits."""
    dut = DecoderC2v2(4, word=64) if kind != "chunk_g256" else DecoderC2v2(4)
    bad, bit = _f2_error_case(kind)
    if kind == "chunk_g256":
        bad.planes = None
    res = run_decoder(dut, [bad], Stalls(STALL, STALL, seed=3), max_cycles=6000, expect_error=True)
    assert res.error_code == 1 << bit, f"expected error bit {bit}, got {res.error_code:#x}"
    assert res.busy == 0
    if kind in ("pairs", "overrun_mx"):
        bad, _ = _f2_error_case(kind)
        check_recovers(dut, bad, c2f2(weights(300, 2), 32, 3, 0.5, A=4, pairs="alt"), pre_wait=100)
