"""Decoder C1 v3 (hw/decoder_c1_v3.py) against the golden codec: format 3.0
(golden/escfield.py) of each tensor goes through the exported RTL in the bulk Verilator harness (tb/bulk) and
must equal the golden format 2.0 decode of the same tensor, value for value, in draft and full mode.

Cases: every bf16 pattern; random configurations (G, m, keep, chunk size, pair books) and data kinds
(weights, uniform patterns, specials, sparse) with partial last superblocks; books that force escapes and
deep ranks (the longest codes, 16 bits); random idle cycles and backpressure; a SmolLM2 sample (the last
two in `-m slow`); passes whose every lane holds an escape field (F in up to 8 steps)."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from cassandra_rtl.golden import escfield
from cassandra_rtl.golden.codec import decode_draft, decode_full
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.tb import bulk
from cassandra_rtl.tb.decoder import data as D
from hw_helpers import bulk_harness, escfield_check, with_chunk

pytestmark = pytest.mark.sim

CONFIG = "decoder_c1v3_l8"


@pytest.fixture(scope="module")
def harness():
    return bulk_harness(CONFIG)


def check(pairs, mode, **kw):
    return escfield_check(pairs, mode, CONFIG, **kw)


@pytest.mark.parametrize("mode", ["draft", "full"])
def test_every_bf16_pattern(harness, mode):
    bits = np.random.default_rng(1).permutation(np.arange(1 << 16, dtype=np.uint32)).astype(np.uint16)
    pairs = [escfield.encode(bits, CodecConfig(group_size=G, mantissa_bits=m, keep_ratio=keep, chunk_superblocks=A,
                                                 pair_codes=True))
             for G, m, keep, A in ((128, 3, 0.5, 8), (32, 7, 1.0, 32), (256, 0, 0.25, 4))]
    # uniform patterns spread the exponents over far more than 15 symbols: escapes in both code planes
    assert any(len(v3.planes["spec.codes"]) < len(std.planes["spec.codes"]) for std, v3 in pairs)
    # an escape moves 8 bits (one byte) between two planes of the same chunk: every plane pair keeps its bytes
    for std, v3 in pairs:
        for code, field in (("spec.codes", "spec.signman"), ("verif.codes", "verif.rest")):
            assert len(v3.planes[code]) + len(v3.planes[field]) == len(std.planes[code]) + len(std.planes[field])
    check(pairs, mode)


@pytest.mark.parametrize("mode", ["draft", "full"])
def test_random_configs_with_stalls(harness, mode):
    rng = np.random.default_rng(11 if mode == "full" else 12)
    pairs = []
    for _ in range(16):
        cfg = D.random_config(rng)
        n = D.random_numel(rng, cfg.group_size, 24)
        pairs.append(escfield.encode(D.random_tensor(rng, n), cfg))
    check(pairs, mode, idle=0.3, backpressure=0.3, seed=5)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["draft", "full"])
def test_forced_escapes_and_deep_ranks(harness, mode):
    rng = np.random.default_rng(3)
    pairs = []
    for G, m, keep, A in ((128, 3, 0.5, 8), (64, 2, 0.75, 1), (32, 5, 0.3, 16)):
        cfg = CodecConfig(group_size=G, mantissa_bits=m, keep_ratio=keep, chunk_superblocks=A, pair_codes=False)
        bits = D.weights_like(rng, 40 * G + 17)
        pairs.append(escfield.encode(bits, cfg, books=D.escape_books(bits, cfg, rng, K=4)))
        pairs.append(escfield.encode(bits, cfg, books=D.deep_rank_books(bits, cfg)))
    check(pairs, mode, idle=0.2, backpressure=0.2, seed=9)


@pytest.mark.parametrize("mode", ["draft", "full"])
def test_passes_of_escape_fields_in_every_lane(harness, mode):
    """Books of the rarest symbols: nearly every value escapes, so F takes a pass in up to 8 steps (its window holds
    one escape field), in both passes and at the widest fields (m = 7: 16-bit speculation fields), with stalls."""
    rng = np.random.default_rng(5)
    pairs = []
    for G, m, keep, A in ((128, 7, 0.5, 4), (64, 3, 0.75, 2), (32, 0, 0.25, 8)):
        cfg = CodecConfig(group_size=G, mantissa_bits=m, keep_ratio=keep, chunk_superblocks=A, pair_codes=False)
        bits = D.weights_like(rng, 12 * G + 5)
        spec, verif = D.escape_books(bits, cfg, rng, K=2)
        std, v3 = escfield.encode(bits, cfg, books=(spec, verif))
        # escapes in both code planes: each moves its 8 raw bits from the code plane into a field plane
        for code in ("spec.codes", "verif.codes"):
            assert len(v3.planes[code]) < len(std.planes[code])
        pairs.append((std, v3))
    check(pairs, mode, idle=0.2, backpressure=0.3, seed=4)


@pytest.fixture(scope="module")
def smollm2_rows():
    try:
        return D.smollm2_sample(np.random.default_rng(2024), 1 << 17, rows=4)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["draft", "full"])
def test_smollm2_sample(harness, smollm2_rows, mode):
    cfg = CodecConfig(group_size=128, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=8, pair_codes=True)
    st = check([escfield.encode(x, cfg) for x in smollm2_rows], mode)
    nominal = 8 if mode == "draft" else 4
    print(f"SmolLM2 sample, {mode}: {st.values:,} values, {st.values_per_cycle:.3f} values/cycle "
          f"({st.values_per_cycle / nominal:.3f} of nominal)")
    assert st.values_per_cycle >= 0.98 * nominal


def rtl_error(v3, mode):
    """(error_code, values emitted before it) of a stream the decoder must refuse."""
    with pytest.raises(bulk.RtlError) as exc:
        bulk.decode_many_with_rtl([v3], mode, config=CONFIG, jobs=1, idle=0.2, backpressure=0.3, seed=3)
    code = re.search(r"error_code=(\d+)", str(exc.value))
    done = re.search(r"after (\d+) of", str(exc.value))
    assert code and done, str(exc.value)
    return int(code.group(1)), int(done.group(1))


CODE, OVERRUN, TOO_LONG = 1, 2, 4         # error_code bits (hw/decoder.Err)


@pytest.mark.parametrize("plane,mode", [("spec.codes", "draft"), ("spec.signman", "draft"),
                                        ("verif.codes", "full"), ("verif.rest", "full")])
def test_a_chunk_with_a_word_too_many_is_refused_after_the_beats_before_it(harness, plane, mode):
    """An extra zero word at the end of chunk 2 of one plane: TOO_LONG, raised at the beat that ends the chunk;
    every beat before it is emitted (the harness counts them), none after it. m = 7 with pair books: the field
    planes' beats are wide, so the field readers are full when the chunk's end is due."""
    rng = np.random.default_rng(21)
    cfg = CodecConfig(group_size=64, mantissa_bits=7, keep_ratio=0.5, chunk_superblocks=2, pair_codes=True)
    std, v3 = escfield.encode(D.weights_like(rng, 64 * 9), cfg)
    width = {"spec.codes": 32, "spec.signman": 64, "verif.codes": 32, "verif.rest": 32}[plane] // 8
    code, done = rtl_error(with_chunk(v3, plane, 2, lambda b: b + bytes(width)), mode)
    end = 3 * cfg.chunk_values                 # values up to the end of chunk 2
    assert code == TOO_LONG
    assert end - 8 <= done < end


@pytest.mark.parametrize("mode", ["draft", "full"])
def test_a_chunk_cut_short_is_refused(harness, mode):
    """Chunk 1 of spec.codes loses its last byte (its last codes): CODE or OVERRUN inside chunk 1."""
    rng = np.random.default_rng(22)
    cfg = CodecConfig(group_size=128, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2, pair_codes=True)
    std, v3 = escfield.encode(D.weights_like(rng, 128 * 6), cfg)
    code, done = rtl_error(with_chunk(v3, "spec.codes", 1, lambda b: b[:-1]), mode)
    assert code in (CODE, OVERRUN)
    assert cfg.chunk_values <= done < 2 * cfg.chunk_values


KEEP = 8


@pytest.mark.parametrize("mode", ["draft", "full"])
def test_a_superblock_that_keeps_other_than_keep_values_is_refused(harness, mode):
    """KEEP programmed one above what the stream keeps: KEEP at the first superblock's final beat, the beats
    before it emitted. A tensor of one partial superblock (24 of G = 64 values) keeps ceil(k * 24 / 64): 12 for
    k = 32 (the stream's) and also for k = 31, 13 for k = 33 (the decoder's serial multiplier and rounding)."""
    rng = np.random.default_rng(23)
    cfg = CodecConfig(group_size=64, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2, pair_codes=True)
    _, v3 = escfield.encode(D.weights_like(rng, 64 * 5), cfg)
    code, done = rtl_error(dataclasses.replace(v3, config=dataclasses.replace(cfg, keep_count=33)), mode)
    assert code == KEEP and 64 - 8 <= done < 64
    std, v3 = escfield.encode(D.weights_like(rng, 24), cfg)
    code, done = rtl_error(dataclasses.replace(v3, config=dataclasses.replace(cfg, keep_count=33)), mode)
    assert code == KEEP and 16 <= done < 24
    check([(std, dataclasses.replace(v3, config=dataclasses.replace(cfg, keep_count=31)))], mode)


@pytest.mark.slow
@pytest.mark.model
def test_whole_smollm2_through_rtl(harness):
    """SmolLM2's 106 M linear weights in format 3.0, draft and full: every value equal to the golden
    decode of the format 2.0 twin (tb.run.whole_model)."""
    from cassandra_rtl.tb.run import whole_model

    try:
        res = whole_model(2, config=CONFIG)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert res["values"] >= 2 * 100_000_000
    assert res["mismatches"] == 0
    for mode, m in res["modes"].items():
        assert m["values_per_cycle"] >= 0.99 * (8 if mode == "draft" else 4), mode


def test_error_drains_and_recovers_after_clear_error():
    """In Amaranth's simulator: a chunk cut short raises its error, the rest of the bad tensor's words drain;
    CLEAR_ERROR, then a good tensor in full mode decodes exactly (tests/hw_helpers.check_recovers)."""
    from cassandra_rtl.hw.decoder_c1_v3 import DecoderC1v3
    from cassandra_rtl.hw.simutil import DecodeJob
    from hw_helpers import check_recovers

    rng = np.random.default_rng(24)
    cfg = CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2, pair_codes=True)
    _, bad = escfield.encode(D.weights_like(rng, 32 * 6), cfg)
    bad = with_chunk(bad, "spec.codes", 1, lambda b: b[:-1])
    std, good = escfield.encode(D.weights_like(rng, 32 * 3 + 5), cfg)
    check_recovers(DecoderC1v3(8), DecodeJob(bad, False), good, pre_wait=100, ref=decode_full(std).reshape(-1))


def test_start_while_in_error_is_ignored():
    """In Amaranth's simulator: after an error, a tensor programmed with START but without CLEAR_ERROR does not
    start: the error bits stay as they were, busy stays low and no beat comes out."""
    from cassandra_rtl.hw.decoder_c1_v3 import DecoderC1v3
    from cassandra_rtl.hw.simutil import DecodeJob, Stalls, run_decoder

    rng = np.random.default_rng(25)
    cfg = CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2, pair_codes=True)
    _, bad = escfield.encode(D.weights_like(rng, 32 * 6), cfg)
    bad = with_chunk(bad, "spec.codes", 1, lambda b: b[:-1])
    _, good = escfield.encode(D.weights_like(rng, 32 * 3), cfg)
    res = run_decoder(DecoderC1v3(8), [DecodeJob(bad, False), DecodeJob(good, True)], Stalls(0.0, 0.0),
                      max_cycles=3000)
    assert res.error_code in (CODE, OVERRUN) and res.busy == 0
    assert sum(len(v) for v in res.values) < 2 * cfg.chunk_values          # only the bad tensor's first beats
    assert all(not last for meta in res.meta for _, _, last in meta)


@pytest.mark.parametrize("full", [False, True], ids=["draft", "full"])
def test_superblock_and_chunk_boundaries_without_bubbles(full):
    """In Amaranth's simulator, no idles, no backpressure (G = 32, chunks of 4 superblocks, pair books): from
    the first beat to the last, a beat every cycle in draft mode and every other cycle in full mode (pass A,
    then pass B, of each beat), across superblock and chunk boundaries; the values are golden's."""
    from cassandra_rtl.hw.decoder_c1_v3 import DecoderC1v3
    from cassandra_rtl.hw.simutil import DecodeJob, Stalls, run_decoder

    rng = np.random.default_rng(26)
    cfg = CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=4, pair_codes=True)
    std, v3 = escfield.encode(D.weights_like(rng, 32 * 12), cfg)
    res = run_decoder(DecoderC1v3(8), [DecodeJob(v3, full)], Stalls(0.0, 0.0), trace=True)
    ref = (decode_full(std) if full else decode_draft(std)).reshape(-1)
    assert res.error_code == 0 and np.array_equal(np.concatenate(res.values), ref)
    assert [c for c, _, _ in res.meta[0]] == [8] * (12 * 4)          # 4 full beats a superblock
    beats = res.trace[res.trace.index("B"):res.trace.rindex("B") + 1]
    assert beats == ("B." * (len(res.meta[0]) - 1) + "B" if full else "B" * len(res.meta[0])), beats


def test_sum_equals_is_modular_addition():
    """decoder_c1_v3.sum_equals (pass B's pruned-code test without a carry chain) == (x + y) mod 16 == z, for
    every 4-bit x, y, z in Amaranth's simulator."""
    from amaranth.hdl import Module, Signal
    from amaranth.sim import Simulator

    from cassandra_rtl.hw.decoder_c1_v3 import sum_equals
    x, y, z, o = Signal(4), Signal(4), Signal(4), Signal()
    m = Module()
    m.d.comb += o.eq(sum_equals(x, y, z))
    wrong = []

    async def bench(ctx):
        for a in range(16):
            for b in range(16):
                for c in range(16):
                    ctx.set(x, a)
                    ctx.set(y, b)
                    ctx.set(z, c)
                    if ctx.get(o) != ((a + b) % 16 == c):
                        wrong.append((a, b, c))
    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not wrong, wrong[:5]
