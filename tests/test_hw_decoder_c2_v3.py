"""C2 decoder v3 prototype (hw/decoder_c2_v3.py, draft mode) in Amaranth's simulator against the golden codec: the
block-interleaved spec.mx of golden/escfield.py goes in, the values must equal the layout's golden decode and the
golden format 2.0 draft decode of the same tensor, value for value.

Cases: random configurations (G, m, keep, chunk size) and data kinds with partial last superblocks and blocks at
4, 8 and 16 lanes with random idles and backpressure; every bf16 pattern; the cycle count of a tensor without
stalls (a beat a cycle, one header step per chunk); chunks with a word too many or cut short, a wrong KEEP, full
mode (not in the prototype: CONFIG), recovery after CLEAR_ERROR."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cassandra_rtl.golden import escfield
from cassandra_rtl.golden.codec import decode_draft
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.hw.decoder_c2_v3 import DecoderC2v3
from cassandra_rtl.hw.simutil import DecodeJob, Stalls, run_decoder
from cassandra_rtl.tb.decoder import data as D
from hw_helpers import check_recovers, with_chunk

pytestmark = pytest.mark.sim

OVERRUN, TOO_LONG, KEEP, CONFIG = 2, 4, 8, 32        # error_code bits (hw/decoder.Err)


def c2(**kw) -> CodecConfig:
    return CodecConfig(scheme="c2", **kw)


def pair(bits, cfg):
    std, v3 = escfield.encode(bits, cfg)
    ref = escfield.decode(v3, False).reshape(-1)
    assert np.array_equal(ref, decode_draft(std).reshape(-1))        # the layout's decode == format 2.0's
    return v3, ref


def decode(lanes, v3s, stalls=Stalls(), **kw):
    return run_decoder(DecoderC2v3(lanes), [DecodeJob(v3, False) for v3 in v3s], stalls, **kw)


@pytest.mark.parametrize("lanes,seed", [(8, 1), (8, 2), (4, 3), (16, 4)])
def test_random_configs_with_stalls(lanes, seed):
    rng = np.random.default_rng(seed)
    v3s, refs = [], []
    for _ in range(6):
        cfg = dataclasses.replace(D.random_config(rng), scheme="c2")
        v3, ref = pair(D.random_tensor(rng, D.random_numel(rng, cfg.group_size, 5)), cfg)
        v3s.append(v3)
        refs.append(ref)
    res = decode(lanes, v3s, Stalls(0.3, 0.3, seed=seed), max_cycles=50_000)
    assert res.error_code == 0
    for j, (got, ref) in enumerate(zip(res.values, refs)):
        bad = np.flatnonzero(got != ref)
        assert len(got) == len(ref) and len(bad) == 0, f"tensor {j}: {len(bad)} mismatches, first at {bad[:5]}"


def test_every_bf16_pattern():
    bits = np.random.default_rng(5).permutation(np.arange(1 << 16, dtype=np.uint32)).astype(np.uint16)
    for cfg in (c2(group_size=128, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=8),
                c2(group_size=32, mantissa_bits=7, keep_ratio=1.0, chunk_superblocks=32)):
        v3, ref = pair(bits, cfg)
        res = decode(8, [v3], max_cycles=20_000)
        assert res.error_code == 0 and np.array_equal(res.values[0], ref)


@pytest.mark.parametrize("G,A,keep", [(32, 4, 0.5), (128, 8, 1.0), (64, 1, 0.3)])
def test_a_beat_a_cycle_and_a_header_step_per_chunk(G, A, keep):
    """No idles, no backpressure: from the first beat to the last, the output is valid every cycle except one
    cycle per chunk after the first (the header step of the chunk's first block); m = 4: a beat and its share of a
    block header are at most 8 * 6 * keep + 10 bits (keep 0.5: 34) of the 64-bit word."""
    rng = np.random.default_rng(6)
    cfg = c2(group_size=G, mantissa_bits=4, keep_ratio=keep, chunk_superblocks=A)
    nchunks = 5
    v3, ref = pair(D.weights_like(rng, nchunks * cfg.chunk_values), cfg)
    res = decode(8, [v3], trace=True)
    assert res.error_code == 0 and np.array_equal(res.values[0], ref)
    beats = res.trace[res.trace.index("B"):res.trace.rindex("B") + 1]
    assert beats.count("B") == len(ref) // 8
    assert beats.count(".") == nchunks - 1, beats


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


def test_full_mode_is_refused_with_config():
    v3, _ = pair(D.weights_like(np.random.default_rng(10), 64), c2(group_size=64, mantissa_bits=3, keep_ratio=0.5))
    res = run_decoder(DecoderC2v3(8), [DecodeJob(v3, True)], max_cycles=2000, expect_error=True)
    assert res.error_code == CONFIG and res.busy == 0 and not any(len(v) for v in res.values)


def test_error_drains_and_recovers_after_clear_error():
    rng = np.random.default_rng(11)
    cfg = c2(group_size=32, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=2)
    bad, _ = pair(D.weights_like(rng, 32 * 6), cfg)
    bad = with_chunk(bad, "spec.mx", 1, lambda b: b[:-4])
    good, ref = pair(D.weights_like(rng, 32 * 3 + 5), cfg)
    check_recovers(DecoderC2v3(8), DecodeJob(bad, False), good, pre_wait=100, ref=ref, full=False)
