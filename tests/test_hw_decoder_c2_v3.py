"""C2 decoder v3 (hw/decoder_c2_v3.py) in Amaranth's simulator against the golden codec: the
format 3.0 layout of golden/escfield.py (block-interleaved spec.mx, escaped deltas in verif.rest) goes in, the
values must equal the layout's golden decode and the golden format 2.0 decode of the same tensor, value for value,
in draft and full mode.

Cases: random configurations (G, m, keep, chunk size, pair books) and data kinds with partial last superblocks and
blocks at 4, 8 and 16 lanes with random idles and backpressure; every bf16 pattern (escapes: uniform exponents) and
a SmolLM2 sample (`-m slow`) through the exported RTL in the bulk Verilator harness;
the cycle count of a tensor without stalls (draft: a beat a cycle, one header step per chunk; full: half a beat a
cycle); chunks with a word too many or cut short, a wrong KEEP, a missing book, recovery after CLEAR_ERROR."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cassandra_rtl.golden import escfield
from cassandra_rtl.golden.codec import decode_draft, decode_full
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.hw.decoder_c2_v3 import DecoderC2v3
from cassandra_rtl.hw.simutil import DecodeJob, Stalls, run_decoder
from cassandra_rtl.tb.decoder import data as D
from hw_helpers import bulk_harness, check_recovers, escfield_check, with_chunk

pytestmark = pytest.mark.sim

CONFIG = "decoder_c2v3_l8"

CODE, OVERRUN, TOO_LONG, KEEP, NO_BOOK = 1, 2, 4, 8, 16       # error_code bits (hw/decoder.Err)


def c2(**kw) -> CodecConfig:
    return CodecConfig(scheme="c2", **kw)


def pair(bits, cfg, full=False):
    std, v3 = escfield.encode(bits, cfg)
    ref = escfield.decode(v3, full).reshape(-1)
    assert np.array_equal(ref, (decode_full if full else decode_draft)(std).reshape(-1))   # == format 2.0's
    return v3, ref


def decode(lanes, v3s, stalls=Stalls(), full=False, **kw):
    return run_decoder(DecoderC2v3(lanes), [DecodeJob(v3, full) for v3 in v3s], stalls, **kw)


@pytest.mark.parametrize("lanes,seed,full", [(8, 1, False), (8, 2, True), (8, 3, True), (4, 4, True), (16, 5, True),
                                             (16, 6, False)])
def test_random_configs_with_stalls(lanes, seed, full):
    rng = np.random.default_rng(seed)
    v3s, refs = [], []
    for _ in range(6):
        cfg = dataclasses.replace(D.random_config(rng), scheme="c2")
        v3, ref = pair(D.random_tensor(rng, D.random_numel(rng, cfg.group_size, 5)), cfg, full)
        v3s.append(v3)
        refs.append(ref)
    res = decode(lanes, v3s, Stalls(0.3, 0.3, seed=seed), full, max_cycles=50_000)
    assert res.error_code == 0
    for j, (got, ref) in enumerate(zip(res.values, refs)):
        bad = np.flatnonzero(got != ref)
        assert len(got) == len(ref) and len(bad) == 0, f"tensor {j}: {len(bad)} mismatches, first at {bad[:5]}"


@pytest.fixture(scope="module")
def harness():
    return bulk_harness(CONFIG)


@pytest.mark.parametrize("mode", ["draft", "full"])
def test_every_bf16_pattern(harness, mode):
    bits = np.random.default_rng(5).permutation(np.arange(1 << 16, dtype=np.uint32)).astype(np.uint16)
    pairs = [escfield.encode(bits, c2(group_size=G, mantissa_bits=m, keep_ratio=keep, chunk_superblocks=A,
                                      pair_codes=pairs_))
             for G, m, keep, A, pairs_ in ((128, 3, 0.5, 8, True), (32, 7, 1.0, 32, False), (256, 0, 0.25, 4, True))]
    # uniform exponents: escapes move delta bytes from verif.codes to verif.rest, the pair keeps its bytes
    for std, v3 in pairs:
        assert len(v3.planes["verif.codes"]) < len(std.planes["verif.codes"])
        assert (len(v3.planes["verif.codes"]) + len(v3.planes["verif.rest"])
                == len(std.planes["verif.codes"]) + len(std.planes["verif.rest"]))
    escfield_check(pairs, mode, CONFIG, idle=0.2, backpressure=0.2, seed=5)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["draft", "full"])
def test_smollm2_sample(harness, mode):
    try:
        rows = D.smollm2_sample(np.random.default_rng(2024), 1 << 17, rows=4)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    cfg = c2(group_size=128, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=8, pair_codes=True)
    st = escfield_check([escfield.encode(x, cfg) for x in rows], mode, CONFIG)
    nominal = 8 if mode == "draft" else 4
    print(f"SmolLM2 sample, {mode}: {st.values:,} values, {st.values_per_cycle:.3f} values/cycle "
          f"({st.values_per_cycle / nominal:.3f} of nominal)")
    assert st.values_per_cycle >= 0.98 * nominal


@pytest.mark.parametrize("full", [False, True], ids=["draft", "full"])
@pytest.mark.parametrize("G,A,keep", [(32, 4, 0.5), (128, 8, 1.0), (64, 1, 0.3)])
def test_a_beat_a_cycle_and_a_header_step_per_chunk(G, A, keep, full):
    """No idles, no backpressure: from the first beat to the last, the output is valid every cycle; in draft mode
    except one cycle per chunk after the first (the header step of the chunk's first block), full mode hides it
    (4 values a beat). m = 4: a draft beat and its share of a block header are at most 8 * 6 * keep + 10 bits of
    the 64-bit word."""
    rng = np.random.default_rng(6)
    cfg = c2(group_size=G, mantissa_bits=4, keep_ratio=keep, chunk_superblocks=A)
    nchunks = 5
    v3, ref = pair(D.weights_like(rng, nchunks * cfg.chunk_values), cfg, full)
    res = decode(8, [v3], full=full, trace=True)
    assert res.error_code == 0 and np.array_equal(res.values[0], ref)
    beats = res.trace[res.trace.index("B"):res.trace.rindex("B") + 1]
    assert beats.count("B") == len(ref) // (4 if full else 8)
    assert beats.count(".") == (0 if full else nchunks - 1), beats


def test_a_chunk_with_a_word_too_many_is_refused_after_the_beats_before_it():
    rng = np.random.default_rng(7)
    cfg = c2(group_size=64, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2)
    v3, ref = pair(D.weights_like(rng, 64 * 9), cfg)
    res = decode(8, [with_chunk(v3, "spec.mx", 2, lambda b: b + bytes(16))], Stalls(0.2, 0.3, seed=7),
                 expect_error=True)
    end = 3 * cfg.chunk_values                 # values up to the end of chunk 2
    assert res.error_code == TOO_LONG and res.busy == 0
    assert end - 8 <= len(res.values[0]) < end and np.array_equal(res.values[0], ref[:len(res.values[0])])


def test_a_chunk_cut_short_is_refused():
    """Chunk 1 loses its last 20 bytes: OVERRUN, or KEEP when the cut leaves a block header in the zero padding
    of the chunk's last word (its keep bits read as zeros), inside chunk 1."""
    rng = np.random.default_rng(8)
    cfg = c2(group_size=128, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2)
    v3, ref = pair(D.weights_like(rng, 128 * 6), cfg)
    res = decode(8, [with_chunk(v3, "spec.mx", 1, lambda b: b[:-20])], Stalls(0.2, 0.3, seed=8), expect_error=True)
    assert res.error_code in (OVERRUN, KEEP)
    assert cfg.chunk_values <= len(res.values[0]) < 2 * cfg.chunk_values
    assert np.array_equal(res.values[0][:cfg.chunk_values], ref[:cfg.chunk_values])     # chunk 0 is whole


def test_a_superblock_that_keeps_other_than_keep_values_is_refused():
    """KEEP programmed one above what the stream keeps: KEEP at the first superblock's final beat, the beats before
    it emitted. A tensor of one partial superblock (24 of G = 64 values) keeps ceil(k * 24 / 64): 12 for k = 32 (the
    stream's) and also for k = 31, 13 for k = 33 (the decoder's serial multiplier and rounding)."""
    rng = np.random.default_rng(9)
    cfg = c2(group_size=64, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2)
    v3, _ = pair(D.weights_like(rng, 64 * 5), cfg)
    res = decode(8, [dataclasses.replace(v3, config=dataclasses.replace(cfg, keep_count=33))], expect_error=True)
    assert res.error_code == KEEP and 64 - 8 <= len(res.values[0]) < 64
    v3, ref = pair(D.weights_like(rng, 24), cfg)
    res = decode(8, [dataclasses.replace(v3, config=dataclasses.replace(cfg, keep_count=33))], expect_error=True)
    assert res.error_code == KEEP and 16 <= len(res.values[0]) < 24
    res = decode(8, [dataclasses.replace(v3, config=dataclasses.replace(cfg, keep_count=31))])
    assert res.error_code == 0 and np.array_equal(res.values[0], ref)


def test_full_mode_without_a_verification_book_is_refused():
    from cassandra_rtl.hw.decoder import Reg
    from cassandra_rtl.hw.simutil import decoder_program

    v3, _ = pair(D.weights_like(np.random.default_rng(10), 64), c2(group_size=64, mantissa_bits=3, keep_ratio=0.5))
    program = [(a, d) for a, d in decoder_program(v3, True) if a != Reg.VERIF_K]
    res = run_decoder(DecoderC2v3(8), [DecodeJob(v3, True, program=program)], max_cycles=2000, expect_error=True)
    assert res.error_code == NO_BOOK and res.busy == 0 and not any(len(v) for v in res.values)


@pytest.mark.parametrize("plane", ["verif.codes", "verif.rest"])
def test_a_verification_chunk_with_a_word_too_many_is_refused(plane):
    rng = np.random.default_rng(12)
    cfg = c2(group_size=64, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2, pair_codes=True)
    v3, ref = pair(D.weights_like(rng, 64 * 9), cfg, True)
    res = decode(8, [with_chunk(v3, plane, 2, lambda b: b + bytes(8))], Stalls(0.2, 0.3, seed=12), True,
                 expect_error=True)
    end = 3 * cfg.chunk_values
    assert res.error_code == TOO_LONG and res.busy == 0
    assert end - 4 <= len(res.values[0]) < end and np.array_equal(res.values[0], ref[:len(res.values[0])])


def test_a_verification_code_chunk_cut_short_is_refused():
    rng = np.random.default_rng(13)
    cfg = c2(group_size=128, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2, pair_codes=True)
    v3, ref = pair(D.weights_like(rng, 128 * 6), cfg, True)
    res = decode(8, [with_chunk(v3, "verif.codes", 1, lambda b: b[:-8])], Stalls(0.2, 0.3, seed=13), True,
                 expect_error=True)
    assert res.error_code in (CODE, OVERRUN)
    assert cfg.chunk_values - 4 <= len(res.values[0]) < 2 * cfg.chunk_values
    assert np.array_equal(res.values[0][:cfg.chunk_values - 4], ref[:cfg.chunk_values - 4])


def test_an_exponent_below_zero_is_refused():
    """Every verification book symbol programmed as 255: the first draft-zero value whose delta exceeds its block's X
    (all of them: weights have X < 255) raises CODE, nothing of its beat goes out."""
    from cassandra_rtl.hw.decoder import Reg
    from cassandra_rtl.hw.simutil import decoder_program

    rng = np.random.default_rng(14)
    cfg = c2(group_size=64, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2, pair_codes=True)
    v3, _ = pair(D.weights_like(rng, 64 * 3), cfg, True)
    program = [(a, 255 if Reg.VERIF_SYM <= a < Reg.VERIF_SYM + 15 else d) for a, d in decoder_program(v3, True)]
    res = run_decoder(DecoderC2v3(8), [DecodeJob(v3, True, program=program)], max_cycles=5000, expect_error=True)
    assert res.error_code == CODE and res.busy == 0 and sum(len(v) for v in res.values) < 4


def test_error_drains_and_recovers_after_clear_error():
    rng = np.random.default_rng(11)
    cfg = c2(group_size=32, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2)
    bad, _ = pair(D.weights_like(rng, 32 * 6), cfg)
    bad = with_chunk(bad, "spec.mx", 1, lambda b: b[:-4])
    good, ref = pair(D.weights_like(rng, 32 * 3 + 5), cfg)
    check_recovers(DecoderC2v3(8), DecodeJob(bad, False), good, pre_wait=100, ref=ref, full=False)
    bad_full = with_chunk(pair(D.weights_like(rng, 32 * 6), cfg, True)[0], "verif.rest", 1, lambda b: b + bytes(8))
    good, ref = pair(D.weights_like(rng, 32 * 3 + 5), cfg, True)
    check_recovers(DecoderC2v3(8), DecodeJob(bad_full, True), good, pre_wait=100, ref=ref)


@pytest.mark.parametrize("seed", range(4))
def test_recovery_after_an_error_in_the_middle_of_a_half(seed):
    """L = 16 (8 codes a half, often taken in parts from 32-bit words): a verif.codes chunk cut short stops pass B
    wherever it is, also between the parts of a half; after CLEAR_ERROR the next tensor decodes exactly."""
    rng = np.random.default_rng(30 + seed)
    cfg = c2(group_size=64, mantissa_bits=3, keep_ratio=0.3, chunk_superblocks=2, pair_codes=True)
    bad, _ = pair(D.weights_like(rng, 64 * 6), cfg, True)
    bad = with_chunk(bad, "verif.codes", 1, lambda b: b[:len(b) // 2])
    good, ref = pair(D.weights_like(rng, 64 * 3 + 5), cfg, True)
    check_recovers(DecoderC2v3(16), DecodeJob(bad, True), good, pre_wait=100, ref=ref)
