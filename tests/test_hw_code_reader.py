"""Code reader (hw/code_reader.py) against a software model: chunked rank-unary code streams read back as counts of
ones and word-aligned spans, with random idle cycles on both sides; the chunk-end rules of ``skip_err``."""
from __future__ import annotations

import gc
import random

import pytest
from amaranth.sim import Simulator

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.hw.code_reader import CodeReader

WORD = 32
LANES = 8


def ref_words(chunks: list[list[int]], word: int = WORD) -> list[tuple[int, int]]:
    """(data, last) words of chunks of code ranks: rank r is r zeros and a one, LSB first; a chunk is zero-padded to
    whole words, an empty chunk is one zero word."""
    out = []
    for ranks in chunks:
        bits, n = 0, 0
        for r in ranks:
            bits |= 1 << (n + r)
            n += r + 1
        nw = max(1, -(-n // word))
        out += [((bits >> (word * i)) & ((1 << word) - 1), int(i == nw - 1)) for i in range(nw)]
    return out


def ref_ranks(span: int, prefix: list[int], used: int, n: int) -> list[int]:
    """The ranks of the ``n`` codes that end at the span's ones number used .. used + n - 1 (the model of stage R);
    ``prefix``: the reader's ones before every byte, counted from one number used - 1."""
    ones = [i for i in range(2 * WORD) if span >> i & 1]
    assert [sum(1 for p in ones if p < 8 * b) - (used - 1) for b in range(len(prefix))] == prefix
    ends = ones[used: used + n]
    starts = [ones[used - 1] + 1 if used else 0] + [e + 1 for e in ends[:-1]]
    return [e - s for s, e in zip(starts, ends)]


def run(words, chunks, expect_err_at=None, seed=0, idle=0.3):
    """Feed ``words``, take the codes of ``chunks`` chunk by chunk (at most LANES a cycle; fewer only when the span
    is whole) and skip at each chunk's end. Returns the ranks read per chunk; with ``expect_err_at`` = chunk index,
    asserts ``skip_err`` at that chunk's end and stops there."""
    dut = CodeReader(WORD, LANES)
    rng = random.Random(seed)
    got = []
    first_word = [0]                        # each chunk's first word in ``words`` (well-formed streams)
    for ranks in chunks:
        first_word.append(first_word[-1] + len(ref_words([ranks])))

    def whole_model(ci, wi, consumed):
        """The span is whole: two words of the chunk from the read point's word are in, or its last word is."""
        ranks, nw = chunks[ci], first_word[ci + 1] - first_word[ci]
        fed = min(max(wi - first_word[ci], 0), nw)
        rs = (sum(r + 1 for r in ranks[:consumed]) - 1) // WORD if consumed else 0
        return fed - rs >= 2 or (rs == nw - 1 and fed == nw)

    async def bench(ctx):
        ctx.set(dut.enable, 1)
        wi = 0
        for ci, ranks in enumerate(chunks):
            read, left = [], len(ranks)
            for _ in range(2000):
                offer = wi < len(words) and rng.random() >= idle
                ctx.set(dut.inp.valid, offer)
                if offer:
                    ctx.set(dut.inp.payload.data, words[wi][0])
                    ctx.set(dut.inp.payload.last, words[wi][1])
                took_word = offer and ctx.get(dut.inp.ready)
                ones = ctx.get(dut.ones)
                if expect_err_at is None:
                    assert ctx.get(dut.whole) == whole_model(ci, wi, len(ranks) - left)
                t = min(left, LANES, ones)
                go = rng.random() >= idle and (t == min(left, LANES) or (ctx.get(dut.whole) and t > 0))
                skip = go and t == left
                ctx.set(dut.take, t)
                ctx.set(dut.skip, skip)
                if skip and not (ctx.get(dut.skip_ok) or ctx.get(dut.skip_err)):
                    go = skip = False               # the chunk's last word is not in yet
                if skip and ctx.get(dut.skip_err):
                    assert ci == expect_err_at, f"chunk {ci}: skip_err on a well-formed chunk"
                    got.append(read)
                    return
                ctx.set(dut.commit, go)
                if go and t:
                    pb = dut.prefix_bits
                    raw = ctx.get(dut.span_prefix)
                    prefix = [raw >> (pb * b) & ((1 << pb) - 1) for b in range(2 * WORD // 8 + 1)]
                    prefix = [p - (1 << pb) if p >> (pb - 1) else p for p in prefix]     # two's complement
                    read += ref_ranks(ctx.get(dut.span), prefix, 1 - prefix[0], t)
                    left -= t
                await ctx.tick()
                wi += took_word
                ctx.set(dut.commit, 0)
                if skip:
                    break
            else:
                raise AssertionError(f"chunk {ci}: no progress ({left} codes left)")
            assert ci != expect_err_at, f"chunk {ci}: skipped without skip_err"
            got.append(read)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


def random_chunks(rng: random.Random, n: int) -> list[list[int]]:
    def rank():
        return min(15, int(rng.expovariate(0.6))) if rng.random() < 0.95 else rng.randrange(16)
    return [[rank() for _ in range(rng.choice([0, 1, 7, 8, 9, rng.randrange(60)]))] for _ in range(n)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_streams_read_back_code_by_code(seed):
    rng = random.Random(seed)
    chunks = random_chunks(rng, 40) + [[15] * 9, [0] * 64, []]       # 16-bit codes, a dense chunk, an empty one
    assert run(ref_words(chunks), chunks, seed=seed) == chunks


@pytest.mark.parametrize("case", ["extra zero word", "non-zero padding", "extra code", "empty chunk of two words"])
def test_a_chunk_with_content_past_its_codes_raises_skip_err(case):
    rng = random.Random(7)
    chunks = random_chunks(rng, 3) + [[1, 0, 3] * 5] + random_chunks(rng, 2)
    bad = 3
    words = [ref_words(chunks[:bad]), ref_words([chunks[bad]]), ref_words(chunks[bad + 1:])]
    mid = words[1]
    if case == "extra zero word":
        mid = [(d, 0) for d, _ in mid] + [(0, 1)]
    elif case == "non-zero padding":
        mid[-1] = (mid[-1][0] | 1 << (WORD - 1), 1)
    elif case == "extra code":
        mid = ref_words([chunks[bad] + [2]])
    else:
        chunks[bad] = []
        mid = [(0, 0), (0, 1)]
    got = run(words[0] + mid + words[2], chunks, expect_err_at=bad, idle=0.2)
    assert got[:bad] == chunks[:bad]


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameters_are_checked():
    for kw in ({"word": 16}, {"word": 48}, {"max_take": 0}, {"slots": 3}, {"slots": 2}):
        with pytest.raises(ConfigError):
            CodeReader(**kw)
    gc.collect()                            # the refused objects warn here, where the warning is filtered
