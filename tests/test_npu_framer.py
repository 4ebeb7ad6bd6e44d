"""hw/npu/framer.py: ByteFramer (aligned memory words + chunk lengths -> per-chunk framed plane words) and
U16Unpack (aligned words of little-endian u16s -> one u16 a cycle), in Amaranth's simulator.

The reference is the decoders' framing rule as the rest of the project computes it: ``hw.simutil.chunk_words``
per chunk for random byte strings, and ``tb.bulk.frame_plane`` on the planes of a tensor encoded by the
golden codec. The memory image around a range is built here: random bytes before the range in its first
word (``skip``) and after it in its last word, so a framer that lets any of them through fails. The word
streams of all ranges are offered back to back and continuously, so a framer that takes one word too many
steals the next range's first word and fails too.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codec import PLANES, encode_tensor, plane_offsets
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.hw.npu.framer import ByteFramer, U16Unpack
from cassandra_rtl.hw.simutil import chunk_words
from cassandra_rtl.tb.bulk import frame_plane
from hw_helpers import weights


# ------------------------------------------------------------------------------------------ stimulus

@dataclass
class Range:
    """One decoder range: its chunks, where they start in memory, and what the DMA delivers."""
    chunks: list[bytes]
    skip: int
    words: list[int]                # aligned memory words (W bytes each, little-endian)

    @property
    def lens(self) -> list[int]:
        return [len(c) for c in self.chunks]


def memory_range(chunks: list[bytes], skip: int, W: int, rng: random.Random) -> Range:
    """The DMA's words for ``chunks`` placed at an address with ``addr % W == skip``: junk before and after
    (``ceil((skip + bytes) / W)`` words; none for a range of no chunks, which is never fetched)."""
    body = b"".join(chunks)
    nwords = -(-(skip + len(body)) // W) if chunks else 0
    image = bytes(rng.getrandbits(8) for _ in range(skip)) + body
    image += bytes(rng.getrandbits(8) for _ in range(nwords * W - len(image)))
    words = [int.from_bytes(image[i * W:(i + 1) * W], "little") for i in range(nwords)]
    return Range(chunks, skip, words)


def random_lengths(n: int, O: int, rng: random.Random) -> list[int]:
    """Chunk lengths mixing the edges: 0, 1, exact multiples of the output word, and long chunks."""
    kinds = [lambda: 0, lambda: 1, lambda: O * rng.randint(1, 5), lambda: O * rng.randint(1, 3) - 1,
             lambda: O * rng.randint(4, 7) + rng.randint(1, O - 1), lambda: rng.randint(0, 3 * O)]
    return [rng.choice(kinds)() for _ in range(n)]


def random_range(n: int, W: int, O: int, rng: random.Random, skip: int | None = None) -> Range:
    chunks = [bytes(rng.getrandbits(8) for _ in range(nb)) for nb in random_lengths(n, O, rng)]
    return memory_range(chunks, rng.randrange(W) if skip is None else skip, W, rng)


def expected_words(rngs: list[Range], out_bits: int) -> list[tuple[int, int]]:
    return [w for r in rngs for c in r.chunks for w in chunk_words(c, out_bits)]


# ------------------------------------------------------------------------------------------ simulation

@dataclass
class FramerRun:
    out: list[tuple[int, int]]      # (data, last) of every word taken
    words_per_range: list[int]      # input words taken in each busy period
    busy_after_last: list[int]      # busy in the cycle after each word with last = 1 was taken
    cycles: int                     # from the first start to the end of the last busy period
    extra_activity: bool            # a word offered or taken after the last range ended


def run_framer(dut: ByteFramer, rngs: list[Range], idle: float = 0.0, backpressure: float = 0.0,
               seed: int = 0, gap: int = 0, late: dict[int, int] | None = None) -> FramerRun:
    """Offer every range's words and lengths back to back on ``inp`` / ``lens`` (random idles), start each
    range as soon as ``busy`` is low (after ``gap`` cycles), take ``out`` under random backpressure.
    ``late``: {input word index: cycles after the start of its range before it is offered}."""
    from amaranth.sim import Simulator

    rng = random.Random(seed)
    words = [w for r in rngs for w in r.words]
    lens = [n for r in rngs for n in r.lens]
    n_last = sum(len(r.chunks) for r in rngs)
    late = dict(late or {})
    word_range = [k for k, r in enumerate(rngs) for _ in r.words]
    started = {}                    # range index -> cycle of its start
    max_cycles = 200 + 40 * (len(words) + len(expected_words(rngs, dut.out_bits)) + len(rngs) * (gap + 4))
    res = FramerRun([], [], [], 0, False)

    async def bench(ctx):
        wi = li = ri = 0
        in_offer = len_offer = False
        start_cycle = end_cycle = None
        busy_prev = 0
        taken = 0                       # input words in the current busy period
        last_seen = False
        wait = gap
        after = 0
        lasts = 0
        for cycle in range(max_cycles):
            busy = ctx.get(dut.busy)
            if last_seen:
                res.busy_after_last.append(busy)
                last_seen = False
            if busy_prev and not busy:
                res.words_per_range.append(taken)
                taken = 0
                end_cycle = cycle
            busy_prev = busy
            # host: the next range once the framer is idle
            ctx.set(dut.start, 0)
            if not busy and ri < len(rngs):
                if wait:
                    wait -= 1
                else:
                    r = rngs[ri]
                    ctx.set(dut.start, 1)
                    ctx.set(dut.skip, r.skip)
                    ctx.set(dut.nchunks, len(r.chunks))
                    start_cycle = cycle if start_cycle is None else start_cycle
                    started[ri] = cycle
                    ri += 1
                    wait = gap
            # DMA word and length sources: once offered, held until taken
            if wi in late and cycle < started.get(word_range[wi], max_cycles) + late[wi]:
                pass
            elif not in_offer and wi < len(words) and not (idle and rng.random() < idle):
                in_offer = True
                ctx.set(dut.inp.payload, words[wi])
            if not len_offer and li < len(lens) and not (idle and rng.random() < idle):
                len_offer = True
                ctx.set(dut.lens.payload, lens[li])
            ctx.set(dut.inp.valid, in_offer)
            ctx.set(dut.lens.valid, len_offer)
            out_ready = not (backpressure and rng.random() < backpressure)
            ctx.set(dut.out.ready, out_ready)
            _, _, in_rdy, len_rdy, out_valid, out_p = await ctx.tick().sample(
                dut.inp.ready, dut.lens.ready, dut.out.valid, dut.out.payload)
            if in_offer and in_rdy:
                in_offer = False
                wi += 1
                taken += 1
            if len_offer and len_rdy:
                len_offer = False
                li += 1
            if out_valid and out_ready:
                res.out.append((int(out_p.data), int(out_p.last)))
                last_seen = bool(out_p.last)
                lasts += last_seen
            done = ri == len(rngs) and not busy and lasts >= n_last
            if done:
                after += 1
                if (in_offer and in_rdy) or out_valid:
                    res.extra_activity = True
                if after > 8:
                    break
        res.cycles = (end_cycle or 0) - (start_cycle or 0)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return res


def check_run(res: FramerRun, rngs: list[Range], out_bits: int):
    exp = expected_words(rngs, out_bits)
    assert len(res.out) == len(exp), f"{len(res.out)} words out, {len(exp)} expected"
    for i, (got, ref) in enumerate(zip(res.out, exp)):
        assert got == ref, f"word {i}: got ({got[0]:#x}, {got[1]}), expected ({ref[0]:#x}, {ref[1]})"
    # exactly the words the DMA delivers for each range (ranges with chunks: one busy period each)
    assert res.words_per_range == [len(r.words) for r in rngs if r.chunks]
    assert not res.extra_activity
    # busy falls right after a range's final word (every range here has a chunk byte in its last word)
    ends = np.cumsum([len(r.chunks) for r in rngs if r.chunks]) - 1
    assert [res.busy_after_last[e] for e in ends] == [0] * len(ends)


CONFIGS = [(W, ob) for W in (8, 16) for ob in (32, 64, 128)]


@pytest.mark.parametrize("W,out_bits", CONFIGS)
def test_random_ranges_with_stalls(W, out_bits):
    """Random chunk lengths (0, 1, multiples of the output word, > 4 words), every skip, trailing junk,
    ranges back to back (one with no chunks), random idles and backpressure."""
    O = out_bits // 8
    rng = random.Random(W * 1000 + out_bits)
    rngs = [random_range(rng.randint(1, 9), W, O, rng, skip=s) for s in range(W)]
    rngs.insert(3, random_range(0, W, O, rng, skip=2))            # nchunks = 0: nothing happens
    dut = ByteFramer(W, out_bits)
    res = run_framer(dut, rngs, idle=0.3, backpressure=0.3, seed=W + out_bits)
    check_run(res, rngs, out_bits)


@pytest.mark.parametrize("gap", [0, 3])
def test_edge_ranges(gap):
    """Zero-length chunks only (skip 0: no word; skip > 0: one word of junk, taken and dropped, however late
    it comes), a single
    byte at the last byte of a word, a chunk exactly filling words from address 0, a range ending on a word
    boundary after a skip."""
    W, out_bits = 8, 32
    rng = random.Random(5 + gap)
    mk = lambda lens, skip: memory_range([bytes(rng.getrandbits(8) for _ in range(n)) for n in lens], skip, W, rng)
    rngs = [mk([0, 0, 0], 0), mk([5, 0, 9], 3), mk([0], 0), mk([1], 7), mk([16], 0), mk([0, 0], 5),
            mk([4, 4, 0, 4], 4), mk([0, 12], 4), mk([3], 5)]
    assert [len(r.words) for r in rngs] == [0, 3, 0, 1, 2, 1, 2, 2, 1]
    dut = ByteFramer(W, out_bits)
    # the junk-only word of the [0, 0] range comes 12 cycles after its chunks were framed: busy must wait
    res = run_framer(dut, rngs, idle=0.2, backpressure=0.2, seed=gap, gap=gap, late={6: 12})
    exp = expected_words(rngs, out_bits)
    assert res.out == exp
    assert res.words_per_range == [len(r.words) for r in rngs]
    assert not res.extra_activity


@pytest.mark.parametrize("W,out_bits", [(16, 64), (8, 128)])
def test_golden_planes(W, out_bits):
    """Every plane of a tensor encoded by the golden codec, at random byte addresses, one range per plane:
    the words are tb.bulk.frame_plane's, the lengths plane_offsets'."""
    enc = encode_tensor(weights(4096, seed=11), CodecConfig(group_size=64, mantissa_bits=3))
    rng = random.Random(out_bits)
    rngs, exp = [], []
    for plane in PLANES[enc.config.scheme][0] + PLANES[enc.config.scheme][1]:
        off = plane_offsets(enc, plane)
        data = bytes(enc.planes[plane])
        chunks = [data[off[c]:off[c + 1]] for c in range(len(off) - 1)]
        rngs.append(memory_range(chunks, rng.randrange(W), W, rng))
        fb, fl = frame_plane(enc, plane, out_bits)
        exp += [(int.from_bytes(row.tobytes(), "little"), int(l)) for row, l in zip(fb, fl)]
    assert len({len(c) for r in rngs for c in r.chunks}) > 3          # chunk lengths of several sizes
    dut = ByteFramer(W, out_bits)
    res = run_framer(dut, rngs, idle=0.25, backpressure=0.25, seed=3)
    assert res.out == exp
    assert res.words_per_range == [len(r.words) for r in rngs]


@pytest.mark.parametrize("W,out_bits", [(8, 64), (16, 128), (16, 64), (8, 128), (4, 128), (8, 32)])
def test_throughput(W, out_bits):
    """No idles, no backpressure: one word a cycle on the busier side, no bubble per chunk."""
    O = out_bits // 8
    rng = random.Random(W + out_bits)
    rngs = [random_range(150, W, O, rng)]
    dut = ByteFramer(W, out_bits)
    res = run_framer(dut, rngs)
    check_run(res, rngs, out_bits)
    words_in, words_out = len(rngs[0].words), len(res.out)
    assert max(words_in, words_out) > 300
    assert res.cycles <= max(words_in, words_out) * 1.05 + 8, (res.cycles, words_in, words_out)


def test_one_output_word_per_chunk_per_cycle():
    """Chunks of one output word or less (lengths 0..O): one chunk a cycle, however short."""
    W, out_bits = 16, 64
    rng = random.Random(9)
    chunks = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 8))) for _ in range(200)]
    rngs = [memory_range(chunks, 3, W, rng)]
    res = run_framer(ByteFramer(W, out_bits), rngs)
    check_run(res, rngs, out_bits)
    assert res.cycles <= 200 + 4


@pytest.mark.parametrize("skip", [0, 5])
def test_start_latency(skip):
    """Sources valid from the start: ``out.valid`` 3 cycles after the cycle of ``start`` (the framer),
    2 cycles after it (U16Unpack); busy from the next cycle on."""
    from amaranth.sim import Simulator

    W = 8
    fr, un = ByteFramer(W, 64), U16Unpack(W)
    seen = {}

    async def bench(ctx):
        ctx.set(fr.inp.valid, 1)
        ctx.set(fr.inp.payload, 0x0807060504030201)
        ctx.set(fr.lens.valid, 1)
        ctx.set(fr.lens.payload, 2)
        ctx.set(un.inp.valid, 1)
        for name, dut in (("fr", fr), ("un", un)):
            ctx.set(dut.start, 1)
        ctx.set(fr.skip, skip)
        ctx.set(fr.nchunks, 1)
        ctx.set(un.count, 3)
        for cycle in range(8):
            for name, dut in (("fr", fr), ("un", un)):
                if ctx.get(dut.out.valid) and name not in seen:
                    seen[name] = cycle
            seen.setdefault("busy", []).append(ctx.get(fr.busy))
            await ctx.tick()
            ctx.set(fr.start, 0)
            ctx.set(un.start, 0)

    sim = Simulator(wiring_pair(fr, un))
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert (seen["fr"], seen["un"]) == (3, 2)
    assert seen["busy"][:2] == [0, 1]


def wiring_pair(*duts):
    from amaranth.hdl import Module
    m = Module()
    for i, d in enumerate(duts):
        m.submodules[f"d{i}"] = d
    return m


def test_framer_config_errors():
    for W, ob in [(2, 64), (12, 64), (128, 64), (8, 8), (8, 48), (8, 1024), (8.0, 64)]:
        with pytest.raises(ConfigError, match="power of two"):
            ByteFramer(W, ob)
    for W in (2, 6, 128):
        with pytest.raises(ConfigError, match="power of two"):
            U16Unpack(W)


# ------------------------------------------------------------------------------------------ U16Unpack

def run_unpack(dut: U16Unpack, tables: list[list[int]], idle=0.0, backpressure=0.0, seed=0, max_cycles=50_000):
    """Each table at a W-aligned address, padded to whole words with junk; the words offered back to back."""
    from amaranth.sim import Simulator

    W = dut.in_bytes
    rng = random.Random(seed)
    words, per_table = [], []
    for t in tables:
        raw = b"".join(v.to_bytes(2, "little") for v in t)
        raw += bytes(rng.getrandbits(8) for _ in range(-len(raw) % W))
        per_table.append(len(raw) // W)
        words += [int.from_bytes(raw[i:i + W], "little") for i in range(0, len(raw), W)]
    got, taken_per, state = [], [], {"cycles": 0, "extra": False}

    async def bench(ctx):
        wi = ti = 0
        offer = False
        busy_prev, taken, after, first = 0, 0, 0, None
        for cycle in range(max_cycles):
            busy = ctx.get(dut.busy)
            if busy_prev and not busy:
                taken_per.append(taken)
                taken = 0
                state["cycles"] = cycle - first
            busy_prev = busy
            ctx.set(dut.start, 0)
            if not busy and ti < len(tables):
                ctx.set(dut.start, 1)
                ctx.set(dut.count, len(tables[ti]))
                first = cycle if first is None else first
                ti += 1
            if not offer and wi < len(words) and not (idle and rng.random() < idle):
                offer = True
                ctx.set(dut.inp.payload, words[wi])
            ctx.set(dut.inp.valid, offer)
            ready = not (backpressure and rng.random() < backpressure)
            ctx.set(dut.out.ready, ready)
            _, _, in_rdy, valid, val = await ctx.tick().sample(dut.inp.ready, dut.out.valid, dut.out.payload)
            if offer and in_rdy:
                offer, wi, taken = False, wi + 1, taken + 1
            if valid and ready:
                got.append(int(val))
            if ti == len(tables) and not busy and len(got) >= sum(map(len, tables)):
                after += 1
                state["extra"] |= bool((offer and in_rdy) or valid)
                if after > 6:
                    break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got, taken_per, per_table, state


@pytest.mark.parametrize("W", [8, 16])
def test_u16_unpack_stalls(W):
    rng = random.Random(W)
    L = W // 2
    counts = [1, L - 1, L, L + 1, 0, 3 * L, 37, 2]
    tables = [[rng.getrandbits(16) for _ in range(n)] for n in counts]
    got, taken, per_table, state = run_unpack(U16Unpack(W), tables, idle=0.3, backpressure=0.3, seed=W)
    assert got == [v for t in tables for v in t]
    assert taken == [n for n, t in zip(per_table, tables) if t]
    assert not state["extra"]


def test_u16_unpack_rate():
    """One u16 a cycle with the source and sink always ready."""
    rng = random.Random(1)
    tables = [[rng.getrandbits(16) for _ in range(301)]]
    got, taken, per_table, state = run_unpack(U16Unpack(8), tables)
    assert got == tables[0] and taken == per_table
    assert state["cycles"] <= 301 + 3


def test_length_table_feeds_framer():
    """U16Unpack.out wired to ByteFramer.lens: the chunk-length table and the plane from memory."""
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.sim import Simulator

    W, out_bits = 16, 64
    rng = random.Random(21)
    rngs = [random_range(n, W, out_bits // 8, rng) for n in (13, 1, 29)]
    m = Module()
    m.submodules.unpack = unpack = U16Unpack(W)
    m.submodules.framer = framer = ByteFramer(W, out_bits)
    wiring.connect(m, unpack.out, framer.lens)
    tables = []
    for r in rngs:
        raw = b"".join(n.to_bytes(2, "little") for n in r.lens)
        raw += bytes(rng.getrandbits(8) for _ in range(-len(raw) % W))
        tables += [int.from_bytes(raw[i:i + W], "little") for i in range(0, len(raw), W)]
    words = [w for r in rngs for w in r.words]
    got = []

    async def bench(ctx):
        ri = wi = ti = 0
        for _ in range(20_000):
            ctx.set(framer.start, 0)
            ctx.set(unpack.start, 0)
            if not ctx.get(framer.busy) and not ctx.get(unpack.busy) and ri < len(rngs):
                r = rngs[ri]
                ctx.set(framer.start, 1)
                ctx.set(framer.skip, r.skip)
                ctx.set(framer.nchunks, len(r.chunks))
                ctx.set(unpack.start, 1)
                ctx.set(unpack.count, len(r.chunks))
                ri += 1
            ctx.set(unpack.inp.valid, ti < len(tables))
            ctx.set(unpack.inp.payload, tables[ti] if ti < len(tables) else 0)
            ctx.set(framer.inp.valid, wi < len(words))
            ctx.set(framer.inp.payload, words[wi] if wi < len(words) else 0)
            ctx.set(framer.out.ready, rng.random() < 0.8)
            _, _, t_rdy, w_rdy, ov, ordy, op = await ctx.tick().sample(
                unpack.inp.ready, framer.inp.ready, framer.out.valid, framer.out.ready, framer.out.payload)
            ti += bool(t_rdy and ti < len(tables))
            wi += bool(w_rdy and wi < len(words))
            if ov and ordy:
                got.append((int(op.data), int(op.last)))
            if ri == len(rngs) and not ctx.get(framer.busy) and len(got) >= len(expected_words(rngs, out_bits)):
                break
        assert (ti, wi) == (len(tables), len(words))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == expected_words(rngs, out_bits)
