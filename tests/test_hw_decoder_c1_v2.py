"""C1 decoder v2 (hw/decoder_c1_v2.py) and its code plane (hw/code_plane.py) against the golden codec.

Same contract as v1 (tests/test_hw_decoder.py): every test decodes with the Amaranth simulator and
compares every value bit for bit with ``decode_draft`` / ``decode_full`` (tests/hw_helpers.py), under
random idles on every input and random backpressure; malformed streams must raise the sticky error and
never hang. Knobs: HW_STALL (default 0.3).
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.codec import encode_tensor, plane_chunks
from cassandra_rtl.golden.config import K_MAX, PRUNED, CodecConfig
from cassandra_rtl.hw.code_plane import COMPACT_BAD, COMPACT_ESC, CodePlane, Kind
from cassandra_rtl.hw.decoder import Err, Reg
from cassandra_rtl.hw.decoder_c1_v2 import DecoderC1v2
from cassandra_rtl.hw.simutil import DecodeJob, Stalls, chunk_words, decoder_planes, decoder_program, run_decoder
from hw_helpers import check, check_recovers, check_reset_mid_stream, weights

STALL = float(os.environ.get("HW_STALL", "0.3"))
V1 = dict(chunk_superblocks=1, pair_codes=False)     # format 1.0 streams, whatever golden's defaults are


# ------------------------------------------------------------------------------------------- code plane

def parse_chunk(chunk: bytes, K: int, word: int, pairs: int = 0):
    """Reference parse of one chunk (docs/FORMAT.md 3.1 and 5): the entries the code plane must produce.
    ``K`` is the escape run (Q, the groups, in format 2.0); with ``pairs`` a CODE's value carries the pair
    bit of its group in bit 4. An END's flags are None when an escape payload runs past the chunk (pad_err
    set, long_run any)."""
    bits = [(b >> i) & 1 for b in chunk for i in range(8)]
    nw = max(1, -(-len(chunk) * 8 // word))
    total = nw * word
    bits += [0] * (total - len(bits))
    out, pos, run, end = [], 0, 0, 0
    while pos < total:
        if not bits[pos]:
            run, pos = run + 1, pos + 1
            continue
        r, run, pos = run, 0, pos + 1
        if r == K:
            if pos + 8 > total:
                return out + [(Kind.END, None)]
            out.append((Kind.ESC, sum(bits[pos + i] << i for i in range(8))))
            pos += 8
        else:
            out.append((Kind.BAD, None) if r > K else (Kind.CODE, r | (((pairs >> r) & 1) << 4)))
        end = pos
    pad = int(end <= (nw - 1) * word and not (nw == 1 and end == 0))
    return out + [(Kind.END, pad | (int(min(31, total - end) > K) << 1))]


def run_code_plane(dut: CodePlane, chunks, K, seed, idle=0.3, pairs=0, probe=None, max_pop=None):
    """Returns the cycles in which ``dut._probes[probe]`` was set (``probe`` given); the consumer pops at most
    ``max_pop`` entries a cycle (default ``dut.pops``)."""
    from amaranth.sim import Simulator

    words = [w for c in chunks for w in chunk_words(c, dut.word)]
    expect = [e for c in chunks for e in parse_chunk(c, K, dut.word, pairs)]
    got = []
    rng = random.Random(seed)
    hits = [0]

    async def bench(ctx):
        ctx.set(dut.k, K)
        if dut.pair_flags:
            ctx.set(dut.pairs, pairs)
        ctx.set(dut.enable, 1)
        ctx.set(dut.chunks, len(chunks))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        wi = 0
        for _ in range(40 * len(expect) + 50 * len(words)):
            send = wi < len(words) and rng.random() >= idle
            ctx.set(dut.inp.valid, send)
            if send:
                ctx.set(dut.inp.payload.data, words[wi][0])
                ctx.set(dut.inp.payload.last, words[wi][1])
            n = min(ctx.get(dut.count), rng.randint(0, max_pop or dut.pops))
            if probe:
                hits[0] += int(ctx.get(dut._probes[probe]))
            ne = 0
            for j in range(n):
                e = ctx.get(dut.win[j])
                val = int(e.val)
                if dut.compact_entries:         # end = 0: a CODE (val = q); else ESC / BAD flags or an END
                    kind = (Kind.CODE if not e.end else Kind.ESC if val & COMPACT_ESC else
                            Kind.BAD if val & COMPACT_BAD else Kind.END)
                    val = val if kind in (Kind.CODE, Kind.END) else 0
                else:
                    kind = Kind(e.kind)
                if dut.esc_fifo and kind == Kind.ESC:      # the payload comes from the side FIFO
                    val = int(ctx.get(dut.esc[ne]))
                    ne += 1
                got.append((kind, val))
            ctx.set(dut.pop, n)
            if dut.esc_fifo:
                ctx.set(dut.esc_pop, ne)
            accepted = send and ctx.get(dut.inp.ready)
            await ctx.tick()
            wi += int(accepted)
            if len(got) >= len(expect) and not ctx.get(dut.parsing):
                break
        assert not ctx.get(dut.count), "entries after the last chunk's END"

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert len(got) == len(expect)
    for i, (g, x) in enumerate(zip(got, expect)):
        if x[1] is None:
            assert g[0] == x[0] and (x[0] != Kind.END or g[1] & 1), (i, g, x)
        else:
            assert g == x, (i, g, x)
    return hits[0]


def random_chunks(rng, K, n):
    chunks = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.15:
            chunks.append(b"")
        elif kind < 0.6:                      # codes of the book's ranks, some escapes
            bits = []
            for _ in range(rng.randint(1, 40)):
                r = K if (K == 0 or rng.random() < 0.1) else rng.randrange(K)
                bits += [0] * r + [1] + ([rng.randint(0, 1) for _ in range(8)] if r == K else [])
            bits += [0] * (-len(bits) % 8)
            chunks.append(bytes(sum(bits[8 * i + j] << j for j in range(8)) for i in range(len(bits) // 8)))
        else:                                 # arbitrary bytes: bad codes, long runs, payloads past the end
            chunks.append(bytes(rng.randrange(256) if rng.random() < 0.7 else 0 for _ in range(rng.randint(1, 24))))
    return chunks


@pytest.mark.parametrize("word,seg,lanes,K", [(64, 32, 16, 0), (32, 16, 1, 0), (32, 16, 4, 3),
                                              pytest.param(64, 32, 32, 15, marks=pytest.mark.slow),
                                              pytest.param(64, 16, 8, 1, marks=pytest.mark.slow)])
def test_code_plane_matches_reference_parse(word, seg, lanes, K):
    """Random chunks (codes, escapes, arbitrary bytes) against the reference parse, with lane-limited passes
    (lanes < seg: a segment parsed in several passes, escapes inside them)."""
    rng = random.Random(word + seg + lanes + K)
    run_code_plane(CodePlane(word, seg, lanes, pops=9), random_chunks(rng, K, 7), K, seed=K)


def test_code_plane_escape_fifo():
    """With an escape side FIFO (4 entries: the plane holds passes while it is full) the entries and the
    payloads, read back in order, are the reference parse's; escape-dense chunks (K = 1, 2)."""
    rng = random.Random(78)
    for K in (1, 2):
        run_code_plane(CodePlane(32, 16, 8, pops=9, esc_fifo=4), random_chunks(rng, K, 6), K, seed=K)


@pytest.mark.parametrize("word,seg,lanes,K", [(32, 32, 16, 3), (32, 16, 16, 0), (64, 32, 6, 5)])
def test_code_plane_fast_consumed(word, seg, lanes, K):
    """fast_consumed (the pass's end from a highest-one search beside the zero counter) parses
    like the reference, whole and lane-limited passes (lanes < seg), with escapes and arbitrary bytes."""
    rng = random.Random(80 + lanes + K)
    run_code_plane(CodePlane(word, seg, lanes, pops=9, fast_consumed=True), random_chunks(rng, K, 7), K, seed=K)


def test_code_plane_compact_entries():
    """compact_entries (5-bit entries, ESC / BAD as flags of an end-kind entry, a CODE its run q): the
    same parse as the reference, with escapes (payloads from the side FIFO), bad codes and ENDs; K = 9 puts
    runs q = 8 (COMPACT_ESC's bit) and q = 4 (COMPACT_BAD's) among the codes."""
    rng = random.Random(79)
    for K in (1, 9):
        run_code_plane(CodePlane(32, 16, 8, pops=9, esc_fifo=4, compact_entries=True), random_chunks(rng, K, 6), K,
                       seed=K)


def test_code_plane_partial_writes():
    """partial_writes (an option, off in every decoder), on decoder_c1v2_l4's plane
    (16 entries, P = 5: a partial write needs 8 <= fill < 10): with a slow consumer (at most 3 pops a cycle
    against 8 codes a pass) B writes parts of passes and A re-parses after them; the entries are still the
    reference parse's, escapes (side FIFO) and bad codes included."""
    rng = random.Random(81)
    for K in (1, 3):
        dut = CodePlane(32, 16, 8, pops=5, esc_fifo=4, compact_entries=True, partial_writes=True)   # D = 16
        parts = run_code_plane(dut, random_chunks(rng, K, 8), K, seed=K, idle=0.0, probe="room_part", max_pop=3)
        assert parts > 0, "no partial write happened: the test does not reach the path"


def test_code_plane_pair_flags():
    """With pair_flags, every CODE entry carries its group's pair bit (format 2.0); k is Q, the groups."""
    rng = random.Random(77)
    Q, pairs = 6, 0b100101
    run_code_plane(CodePlane(32, 16, 8, pops=9, pair_flags=True), random_chunks(rng, Q, 6), Q, seed=3, pairs=pairs)


# ---------------------------------------------------------------------------------------------- decoder

@pytest.mark.parametrize("lanes,full,m,keep", [(4, False, 3, 0.5), (8, True, 0, 0.3),
                                               pytest.param(4, True, 3, 0.5, marks=pytest.mark.slow),
                                               pytest.param(8, False, 7, 1.0, marks=pytest.mark.slow)])
def test_v2_random_tensor(lanes, full, m, keep):
    bits = weights(200 + lanes * 5, seed=lanes * 7 + m)          # partial last superblock
    enc = encode_tensor(bits, CodecConfig(group_size=64, mantissa_bits=m, keep_ratio=keep, **V1))
    jobs = [DecodeJob(enc, full)]
    check(run_decoder(DecoderC1v2(lanes), jobs, Stalls(STALL, STALL, seed=lanes + m)), jobs)


def test_v2_bf16_patterns_and_reprogramming():
    """A spread of bf16 patterns (every exponent, specials, escapes everywhere), then other books and modes
    back to back: per-tensor books, codebook reprogramming between tensors."""
    rng = np.random.default_rng(5)
    pats = np.arange(0, 65536, 61, dtype=np.uint16)
    pats = np.concatenate([pats, np.array([0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 1, 0x807F], np.uint16)])
    rng.shuffle(pats)
    enc1 = encode_tensor(pats[:384], CodecConfig(group_size=128, mantissa_bits=2, keep_ratio=0.75))
    enc2 = encode_tensor(weights(160, 9), CodecConfig(group_size=32, mantissa_bits=5, keep_count=32))
    jobs = [DecodeJob(enc1, True), DecodeJob(enc2, False)]
    check(run_decoder(DecoderC1v2(4, 32), jobs, Stalls(STALL, STALL, seed=3)), jobs)


@pytest.mark.slow
@pytest.mark.parametrize("full,fmt2", [(False, False), (True, False), (False, True), (True, True)])
def test_v2_all_65536_patterns(full, fmt2):
    """Every bf16 pattern once; with fmt2: format 2.0, chunks of 4 superblocks of 256, all-pairs books."""
    pats = np.arange(65536, dtype=np.uint16)
    np.random.default_rng(1).shuffle(pats)
    if fmt2:
        enc = paired_tensor(pats, CodecConfig(group_size=256, mantissa_bits=3, keep_ratio=0.5,
                                              chunk_superblocks=4, pair_codes=True))
    else:
        enc = encode_tensor(pats, CodecConfig(group_size=256, mantissa_bits=3, keep_ratio=0.5, **V1))
    jobs = [DecodeJob(enc, full)]
    check(run_decoder(DecoderC1v2(4, 32), jobs, Stalls(0.1, 0.1, seed=1), max_cycles=10**6), jobs)


def test_v2_fewer_verification_lanes():
    """verif_lanes < lanes: full-mode beats hold at most Lv values, draft beats L; alternating modes."""
    bits = weights(212, seed=4 * 13 + 2)                          # partial last superblock
    enc = encode_tensor(bits, CodecConfig(group_size=32, mantissa_bits=2, keep_ratio=0.3))
    dut = DecoderC1v2(8, verif_lanes=4)
    jobs = [DecodeJob(enc, True), DecodeJob(enc, False)]
    res = run_decoder(dut, jobs, Stalls(STALL, STALL, seed=12))
    check(res, jobs)
    assert max(c for c, _, _ in res.meta[0]) == 4 and max(c for c, _, _ in res.meta[1]) == 8


def _forced_books_tensor():
    bits = weights(160, 11)
    bits[::7] = (bits[::7] & 0x807F) | (np.arange(len(bits[::7])) % 40 + 100).astype(np.uint16) << 7
    return bits


def test_v2_escapes_and_long_codes():
    """A full book of 15 with the most common exponent at rank 14 (15-bit codes) and escapes in both books,
    then books of K = 0 (every code an escape: speculation without pruning; verification with pruning)."""
    bits = _forced_books_tensor()
    enc0 = encode_tensor(bits, CodecConfig(group_size=32, mantissa_bits=4, keep_count=20))
    exps = np.unique((bits >> 7) & 0xFF)
    common = np.bincount((bits >> 7) & 0xFF).argmax()
    others = [int(e) for e in exps if e != common][:K_MAX - 2]
    spec = Codebook(tuple(others + [PRUNED, int(common)]))
    assert spec.K == K_MAX
    jobs = [DecodeJob(encode_tensor(bits, enc0.config, books=(spec, Codebook(tuple(others[:K_MAX])))), True)]
    cfg_all = CodecConfig(group_size=32, mantissa_bits=4, keep_count=32)
    jobs.append(DecodeJob(encode_tensor(bits[:48], cfg_all, books=(Codebook(()), Codebook(()))), True))
    jobs.append(DecodeJob(encode_tensor(bits[:80], enc0.config, books=(Codebook((PRUNED,)), Codebook(()))), True))
    check(run_decoder(DecoderC1v2(4, 32), jobs, Stalls(STALL, STALL, seed=4)), jobs)


def test_v2_beats_hold_at_most_two_escapes():
    """A beat ends before its third escaped code (the escape FIFO holds 4 payloads, each lane
    selects one of 2). With books of K = 0 every code is an escape, so draft beats carry at most 2 values
    and full-mode beats too; every value equals golden's. Without the limit (max_beat_escapes=None, a 16-entry
    FIFO) the same tensor comes out in beats of 8 / 4."""
    bits = _forced_books_tensor()[:96]
    enc = encode_tensor(bits, CodecConfig(group_size=32, mantissa_bits=4, keep_count=32),
                        books=(Codebook(()), Codebook(())))
    jobs = [DecodeJob(enc, False), DecodeJob(enc, True)]
    res = run_decoder(DecoderC1v2(8, verif_lanes=4), jobs, Stalls(STALL, STALL, seed=5))
    check(res, jobs)
    assert max(c for c, _, _ in res.meta[0]) == 2 and max(c for c, _, _ in res.meta[1]) == 2
    res = run_decoder(DecoderC1v2(8, verif_lanes=4, max_beat_escapes=None), jobs, Stalls(STALL, STALL, seed=5))
    check(res, jobs)
    assert max(c for c, _, _ in res.meta[0]) == 8 and max(c for c, _, _ in res.meta[1]) == 4


@pytest.mark.slow
def test_v2_boundary_keep_counts():
    """k = 1 (all pruned but one) and k = G (nothing pruned, empty verification chunks)."""
    bits = _forced_books_tensor()
    jobs = [DecodeJob(encode_tensor(bits, CodecConfig(group_size=32, mantissa_bits=4, keep_count=keep)), True)
            for keep in (1, 32)]
    check(run_decoder(DecoderC1v2(4, 32), jobs, Stalls(STALL, STALL, seed=5)), jobs)


def test_v2_superblock_boundaries_without_bubbles():
    """G = 32 at L = 4 (a superblock every 8 beats), no stalls: one beat per cycle across the boundaries
    and across two back-to-back tensors, so the run takes the beats plus the fixed pipeline latency and
    the host's register writes (a bubble per superblock would add 1 cycle per superblock: 24 here)."""
    enc = encode_tensor(weights(12 * 32, 3), CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=0.5, **V1))
    jobs = [DecodeJob(enc, False), DecodeJob(enc, False)]
    res = run_decoder(DecoderC1v2(4, 32), jobs, Stalls())
    check(res, jobs)
    beats = sum(len(mt) for mt in res.meta)
    overhead = res.cycles - beats
    assert beats == 2 * 12 * 32 // 4
    assert overhead < 2 * (len(decoder_program(enc, False)) + 12), overhead


@pytest.mark.parametrize("n", [8, 36, 40, 44, 72])
def test_v2_last_superblock_without_bubbles(n):
    """The formal liveness stimulus (one symbol, m = 0, G = 32, keep all, L = 4, no stalls): a beat every
    cycle from the first to the last. n = 40 and 72 end with a superblock of 8 one-bit codes, the whole
    first segment of the last code word: with partial writes B wrote 7 of them into
    the nearly full ring, A re-parsed for the 8th and the chunk's END came a cycle late (the
    decoder_c1v2_l4_liveness counterexample at n = 40)."""
    bits = np.full(n, 0x3F80, dtype=np.uint16)
    enc = encode_tensor(bits, CodecConfig(group_size=32, mantissa_bits=0, keep_ratio=1.0, **V1))
    jobs = [DecodeJob(enc, False)]
    res = run_decoder(DecoderC1v2(4, 32), jobs, Stalls(), trace=True)
    check(res, jobs)
    beats = res.trace[res.trace.index("B"):]
    assert beats.count("B") == (n // 32) * 8 + -(-(n % 32) // 4)       # 8 beats a superblock, then ceil(rest / 4)
    assert "." not in beats, res.trace


# ------------------------------------------------------------------------------------ format 2.0

def all_pairs(book: Codebook) -> Codebook:
    """The book with as many pair groups as it can hold (greedy from the front, never pairing P): every
    code of the stream then has a suffix bit unless it is P's, an escape or a leftover singleton."""
    syms, mask, i, q = book.symbols, 0, 0, 0
    while i < len(syms):
        if i + 1 < len(syms) and PRUNED not in (syms[i], syms[i + 1]):
            mask, i = mask | (1 << q), i + 2
        else:
            i += 1
        q += 1
    return Codebook(syms, mask)


def paired_tensor(bits, cfg: CodecConfig):
    """Encode with golden's books turned into all_pairs books (golden's own DP often pairs few groups)."""
    enc = encode_tensor(bits, cfg)
    return encode_tensor(bits, cfg, books=(all_pairs(enc.spec_book), all_pairs(enc.verif_book)))


F2 = dict(chunk_superblocks=8, pair_codes=True)


@pytest.mark.parametrize("lanes,full,chunk,pairs,keep", [
    (4, True, 8, "all", 0.5), (8, False, 2, "golden", 1.0), (4, True, 1, "all", 0.3),
    pytest.param(8, True, 8, "golden", 0.3, marks=pytest.mark.slow),
    pytest.param(4, False, 32, "all", 1.0, marks=pytest.mark.slow),
    pytest.param(8, True, 4, "none", 0.5, marks=pytest.mark.slow),
    pytest.param(4, True, 2, "all", 1.0, marks=pytest.mark.slow)])
def test_v2_format2_tensor(lanes, full, chunk, pairs, keep):
    """Format 2.0 streams: chunks of A superblocks (a partial last chunk and a partial last superblock:
    869 values = 27 superblocks of 32 + 5) and books with pair groups (golden's, or as many pairs as the
    book holds), both modes; values, superblock ends and `last` as golden's, under idles / backpressure."""
    bits = weights(869, seed=lanes + chunk)
    cfg = CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=keep, chunk_superblocks=chunk,
                      pair_codes=pairs != "none")
    enc = paired_tensor(bits, cfg) if pairs == "all" else encode_tensor(bits, cfg)
    if pairs == "all":
        assert enc.spec_book.pairs and (enc.verif_book.pairs or keep == 1.0)
    jobs = [DecodeJob(enc, full)]
    check(run_decoder(DecoderC1v2(lanes, 32), jobs, Stalls(STALL, STALL, seed=lanes + chunk)), jobs)


def test_v2_format2_escapes_pairs_and_mixed_sequence():
    """Escapes in both books next to pair codes (a 15-entry speculation book with 7 pairs: Q = 8, and a
    verification book with pairs), m = 7 (9-bit signman fields with their suffix bits) and m = 0; then a
    v1.0 tensor and a format 2.0 tensor back to back with other chunk sizes: the harness rewrites CHUNK /
    SPEC_PAIRS / VERIF_PAIRS only when they change, so stale values would decode wrongly."""
    bits = _forced_books_tensor()
    exps = np.unique((bits >> 7) & 0xFF)
    common = np.bincount((bits >> 7) & 0xFF).argmax()
    others = [int(e) for e in exps if e != common][:K_MAX - 2]
    spec = Codebook(tuple([PRUNED] + others + [int(common)]), pairs=0b1111111 << 1)
    verif = Codebook(tuple(others[:9]), pairs=0b1011)
    assert spec.K == K_MAX and spec.Q == 8
    jobs = [DecodeJob(encode_tensor(bits, CodecConfig(group_size=32, mantissa_bits=m, keep_count=20,
                                                      chunk_superblocks=a, pair_codes=True),
                                    books=(spec, verif)), full)
            for m, a, full in ((7, 4, True), (0, 2, True), (7, 1, False))]
    jobs.insert(2, DecodeJob(encode_tensor(bits, CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=0.5, **V1)),
                             True))
    check(run_decoder(DecoderC1v2(4, 32), jobs, Stalls(STALL, STALL, seed=6)), jobs)


def test_v2_format2_no_bubbles_inside_chunks():
    """A = 4, G = 32 at L = 4, pair codes, no stalls: superblock boundaries inside and between chunks cost
    no cycle (one beat per cycle), as in test_v2_superblock_boundaries_without_bubbles."""
    cfg = CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=4, pair_codes=True)
    enc = paired_tensor(weights(12 * 32, 3), cfg)
    jobs = [DecodeJob(enc, False), DecodeJob(enc, False)]
    res = run_decoder(DecoderC1v2(4, 32), jobs, Stalls())
    check(res, jobs)
    beats = sum(len(mt) for mt in res.meta)
    assert beats == 2 * 12 * 32 // 4
    assert res.cycles - beats < 2 * (len(decoder_program(enc, False)) + 12), res.cycles - beats


def _error_case(kind, chunk=1):
    """A malformed job and the error bit it must raise. ``chunk`` > 1: format 2.0 (chunks of that many
    superblocks, books with pair groups), so a chunk below spans several superblocks."""
    bits = weights(128 * chunk, 21)
    if chunk == 1:
        enc = encode_tensor(bits, CodecConfig(group_size=64, mantissa_bits=3, keep_ratio=0.5, **V1))
    else:
        enc = paired_tensor(bits, CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=0.5,
                                              chunk_superblocks=chunk, pair_codes=True))
    planes = decoder_planes(enc, True, 32)

    def malformed(plane, words):
        planes[plane] = words
        return DecodeJob(enc, True, planes=planes)

    def first_last(plane):
        return [i for i, (_, last) in enumerate(planes[plane]) if last][0]

    if kind in ("code", "verif_code"):        # a run of more than K zeros at the start of a code plane
        plane = "spec_codes" if kind == "code" else "verif_codes"
        w = list(planes[plane])
        w[0] = (0, w[0][1])
        return malformed(plane, w), Err.CODE
    if kind in ("overrun", "overrun_rest", "overrun_codes"):   # a chunk of superblock 0 ends one word early
        plane = {"overrun": "spec_signman", "overrun_rest": "verif_rest", "overrun_codes": "spec_codes"}[kind]
        w = list(planes[plane])
        i = first_last(plane)
        w[i - 1] = (w[i - 1][0], 1)
        del w[i]
        return malformed(plane, w), Err.OVERRUN
    if kind == "too_long":                    # verif.rest chunk 0 gets an extra zero word before its last
        w = list(planes["verif_rest"])
        w.insert(first_last("verif_rest"), (0, 0))
        return malformed("verif_rest", w), Err.TOO_LONG
    if kind == "too_long_codes":              # a code chunk gets a zero word after its last word (in a code
        w = list(planes["spec_codes"])        # plane an inserted word would lengthen a zero run: CODE)
        i = first_last("spec_codes")
        w[i] = (w[i][0], 0)
        w.insert(i + 1, (0, 1))
        return malformed("spec_codes", w), Err.TOO_LONG
    if kind == "keep":
        prog = [(a, d + 1 if a == Reg.KEEP else d) for a, d in decoder_program(enc, False)]
        return DecodeJob(enc, False, program=prog), Err.KEEP
    if kind == "no_book":
        prog = [(a, d) for a, d in decoder_program(enc, False) if a != Reg.SPEC_K]
        return DecodeJob(enc, False, program=prog), Err.NO_BOOK
    if kind == "config":
        prog = [(a, 100 if a == Reg.GROUP else d) for a, d in decoder_program(enc, False)]
        return DecodeJob(enc, False, program=prog), Err.CONFIG
    if kind == "run_past_q":                  # the first code a run of Q + 1 zeros (< K with pairs: legal in v1)
        Q = enc.spec_book.Q
        assert Q < enc.spec_book.K
        w = list(planes["spec_codes"])
        w[0] = ((w[0][0] & ~((2 << (Q + 1)) - 1)) | (1 << (Q + 1)), w[0][1])
        return malformed("spec_codes", w), Err.CODE
    if kind in ("chunk_too_big", "chunk_saturates"):       # A * G > 1024, or a CHUNK beyond 6
        val = 6 if kind == "chunk_too_big" else 100
        prog = [(a, d) for a, d in decoder_program(enc, False) if a != Reg.CHUNK]
        return DecodeJob(enc, False, program=[(int(Reg.CHUNK), val)] + prog), Err.CONFIG
    if kind in ("pairs_past_q", "p_in_pair"):   # a pair mask that does not describe the book
        book = enc.spec_book
        if kind == "pairs_past_q":
            mask = book.pairs | (1 << book.Q)           # Q' = Q - 1: bit Q is above the groups
        else:
            assert book.symbols[0] == PRUNED and book.K >= 2
            mask = 1                                        # group 0 = {P, S[1]}
        prog = [(a, mask if a == Reg.SPEC_PAIRS else d) for a, d in decoder_program(enc, False, force_format2=True)]
        return DecodeJob(enc, False, program=prog), Err.CONFIG
    raise KeyError(kind)


QUICK_ERRORS = ["code", "overrun", "too_long_codes", "keep"]
SLOW_ERRORS = ["verif_code", "overrun_rest", "overrun_codes", "too_long", "no_book", "config"]
FORMAT2_ERRORS = ["run_past_q", "chunk_too_big", "chunk_saturates", "pairs_past_q", "p_in_pair"]


@pytest.mark.parametrize("kind", QUICK_ERRORS + [pytest.param(k, marks=pytest.mark.slow) for k in SLOW_ERRORS])
def test_v2_malformed_raises_sticky_error(kind):
    """The expected error bit (and no other) is raised and busy drops."""
    bad, bit = _error_case(kind)
    res = run_decoder(DecoderC1v2(4, 32), [bad], Stalls(STALL, STALL, seed=8), max_cycles=4000, expect_error=True)
    assert res.error_code == 1 << bit, f"expected only error bit {bit}, got {res.error_code:#x}"
    assert res.busy == 0


@pytest.mark.parametrize("kind", ["overrun", "too_long", "run_past_q", "chunk_too_big", "pairs_past_q"]
                         + [pytest.param(k, marks=pytest.mark.slow) for k in
                            ["code", "verif_code", "overrun_rest", "overrun_codes", "too_long_codes", "keep",
                             "chunk_saturates", "p_in_pair"]])
def test_v2_format2_malformed_raises_sticky_error(kind):
    """Format 2.0 (chunks of 4 superblocks, pair groups): a chunk that overruns or runs long, a run longer
    than Q, CHUNK out of range, a bad pair mask: the expected error bit alone, busy drops."""
    bad, bit = _error_case(kind, chunk=4)
    res = run_decoder(DecoderC1v2(4, 32), [bad], Stalls(STALL, STALL, seed=9), max_cycles=6000, expect_error=True)
    assert res.error_code == 1 << bit, f"expected only error bit {bit}, got {res.error_code:#x}"
    assert res.busy == 0


@pytest.mark.parametrize("full", [False, True])
def test_v2_keep_error_in_a_superblock_that_does_not_end_its_chunk(full):
    """KEEP one above the stream's k: superblock 0 (32 values, 16 kept) ends a beat but not its chunk of two, and
    must raise KEEP there; the last superblock (1 value) is consistent with either k. Before the fix (CHANGELOG.md, 2026-12-02) the
    check at a superblock's final beat also required the code after it to be a chunk's END, so KEEP was lost
    unless the superblock ended its chunk (found by review, reproduced here first)."""
    enc = encode_tensor(weights(33, 5), CodecConfig(group_size=32, mantissa_bits=3, keep_count=16,
                                                    chunk_superblocks=2, pair_codes=False))
    prog = [(a, d + 1 if a == Reg.KEEP else d) for a, d in decoder_program(enc, full)]
    res = run_decoder(DecoderC1v2(4, 32), [DecodeJob(enc, full, program=prog)], Stalls(0.2, 0.2, seed=3),
                      max_cycles=3000, expect_error=True)
    assert res.error_code == 1 << Err.KEEP, f"expected only KEEP, got {res.error_code:#x}"
    assert res.busy == 0


@pytest.mark.parametrize("kind", ["code", pytest.param("run_past_q", marks=pytest.mark.slow)]
                         + [pytest.param(k, marks=pytest.mark.slow) for k in QUICK_ERRORS[1:] + SLOW_ERRORS])
def test_v2_error_drains_and_recovers_after_clear_error(kind):
    """After the error the inputs drain (the rest of the bad tensor's words are accepted and dropped);
    CLEAR_ERROR, then a good tensor decodes exactly (tests/hw_helpers.check_recovers)."""
    bad, _ = _error_case(kind, chunk=4 if kind in FORMAT2_ERRORS else 1)
    good = encode_tensor(weights(96, 2), CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=0.5))
    check_recovers(DecoderC1v2(4, 32), bad, good, pre_wait=200)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kw", [{"lanes": 0}, {"lanes": 33}, {"lanes": 4, "word": 12}, {"lanes": 4, "word": 48},
                                {"lanes": 1}, {"lanes": 4, "verif_lanes": 5}, {"lanes": 4, "seg": 24},
                                {"lanes": 4, "seg": 64}, {"lanes": 4, "code_lanes": 0}])
def test_v2_rejects_bad_parameters(kw):
    with pytest.raises(ConfigError):
        DecoderC1v2(**kw)


def test_v2_reset_mid_stream_returns_to_idle():
    enc = encode_tensor(weights(256, 31), CodecConfig(group_size=64, mantissa_bits=3, keep_ratio=0.5))
    check_reset_mid_stream(DecoderC1v2(4, 32), enc, word=32, ticks=20)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_v2_port_interface_is_v1s():
    """Same ports and payload layouts as v1 (so every harness runs v2 by configuration name)."""
    from cassandra_rtl.hw.decoder import DecoderC1
    v1, v2 = DecoderC1(8), DecoderC1v2(8)
    assert v1.signature == v2.signature
    assert v1.port_words == v2.port_words


def test_code_plane_on_golden_chunks():
    """The speculation and verification code planes of a golden tensor (with escapes; format 2.0: chunks of
    4 superblocks, golden's pair groups, so the escape run is Q) parse as the golden decoder reads them."""
    enc = encode_tensor(_forced_books_tensor(), CodecConfig(group_size=32, mantissa_bits=4, keep_count=20,
                                                            chunk_superblocks=4, pair_codes=True))
    for plane, book in (("spec.codes", enc.spec_book), ("verif.codes", enc.verif_book)):
        run_code_plane(CodePlane(64, 32, pops=9), plane_chunks(enc, plane), book.Q, seed=1, idle=STALL)
