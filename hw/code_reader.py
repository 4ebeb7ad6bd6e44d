"""Code reader: a rank-unary code plane whose read point is counted in codes, not bits.

Every rank-unary code ends at a one (FORMAT.md section 7; escapes too in format 3.0,
golden/escfield.py), so the codes a beat takes are a number of ones, and where the read point lands
follows from the ones' positions. The reader keeps the ones per word beside every stored word (a popcount
when the word is written), so its loop closes on small counters:

    loop (one cycle): slot s, ones used in it u -> a0 = pop[s] - u, a1 = pop[s + 1] -> the consumer's
                      take t = min(need, a0 + a1) -> s += (t > a0), u = u + t or t - a0 -> s, u

The positions of the codes themselves never enter the loop: the consumer registers the ``span`` (slots s and
s + 1 of the current chunk, word-aligned) and its ones before every byte counted from the read point, and decodes
it later: the next codes end at the ones numbered 1, 2, ... from there, one number 0 is the one before the read
point (hw/decoder_c1_v3.py, stage R: its selects compare with constants).

* The **span** is two words: from the read point to the end of the next word, 33 to 64 bits. ``ones`` codes
  end in it; a beat that wants more takes what the span holds when it is ``whole`` (two words in, or the
  chunk's last word in), like a zero counter's window.
* **Chunks** end on word boundaries, one flag per slot. The span stops at the current chunk's last word;
  ``skip`` moves the read point to the next chunk's first word after the take. A chunk's content ends at
  its last one, so a skip is clean only when the take's last one is the last one of the chunk's last word
  (``skip_err`` otherwise: content left, a word after the content, non-zero padding, or an empty chunk that
  is not one zero word).
* A word is accepted whenever a slot is free (a registered condition); ``drain`` accepts and discards
  (error recovery), ``flush`` empties the ring.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from .bitreader import BYTE, word_layout
from .zero_counter import prefix_counts, select_one


def popcount(m, bits, name: str):
    """Ones in ``bits``: a balanced tree of adders (a chain of ``len(bits)`` adders is far deeper)."""
    level = [bits[i] for i in range(len(bits))]
    depth = 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            s = Signal(bits_for(2 << depth), name=f"{name}_l{depth}_{i // 2}")
            m.d.comb += s.eq(level[i] + level[i + 1])
            nxt.append(s)
        if len(level) % 2:
            nxt.append(level[-1])
        level, depth = nxt, depth + 1
    return level[0]


def popcounts(m, bits, name):
    """Exclusive prefix popcounts ``out[j]`` = ones in ``bits[0:j]``, j = 0..len(bits): a Sklansky tree of
    adders as wide as the count (it never saturates, unlike zero_counter.prefix_counts with a cap)."""
    n = len(bits)
    width = bits_for(n)
    node = [bits[j] for j in range(n)]
    span, level = 1, 0
    while span < n:
        nxt = list(node)
        for j in range(n):
            if (j // span) % 2 == 1:
                s = Signal(width, name=f"{name}_l{level}_{j}")
                m.d.comb += s.eq(node[j] + node[(j // span) * span - 1])
                nxt[j] = s
        node = nxt
        span *= 2
        level += 1
    return [Const(0, width)] + node


def one_positions(m, span, span_prefix, prefix_bits: int, count: int, name: str):
    """From a registered ``span`` and ``span_prefix`` of a ``CodeReader``: the positions of the span's ones number
    0 .. ``count`` (one select network each, compares with constants), and ``head``: there is no one 0 (the
    first code starts at bit 0). The codes then have the ranks ``pos[1]`` (head) or ``pos[1] - pos[0] - 1``, and
    ``pos[j + 1] - pos[j] - 1`` after."""
    nbytes = len(span) // BYTE
    groups = [span[BYTE * b: BYTE * (b + 1)] for b in range(nbytes)]
    pre = [span_prefix[prefix_bits * b: prefix_bits * (b + 1)].as_signed() for b in range(nbytes + 1)]
    pos = []
    for j in range(count + 1):
        pj = Signal(bits_for(len(span) - 1), name=f"{name}{j}")
        m.d.comb += pj.eq(select_one(m, groups, pre, Const(j, bits_for(count)), f"{name}_sel{j}"))
        pos.append(pj)
    return pos, pre[0] == 1


def code_ranks(m, pos, head, count: int, name: str) -> list:
    """The ranks (zero runs) of the ``count`` codes that end at the ones ``pos[1 ..]`` (``one_positions``; with
    ``head`` the first code starts at bit 0, else after the one ``pos[0]``)."""
    ranks = []
    for j in range(count):
        rk = Signal(len(pos[0]), name=f"{name}{j}")
        diff = pos[j + 1] - pos[j] - 1
        m.d.comb += rk.eq(Mux(head, pos[1], diff) if j == 0 else diff)
        ranks.append(rk)
    return ranks


class CodeReader(wiring.Component):
    """Code plane words in; the next codes out as a count of ones and a span aligned at the read point.

    Parameters
        word       bits per plane word (a power of two >= 32: a span of two words holds a 16-bit code at any
                   read point)
        max_take   most codes taken at once (the consumer's lanes)
        slots      word slots of the ring (a power of two >= 4: the span, the next chunk's first word and
                   one in flight)

    Ports
        inp        In(stream {data: word, last: 1})
        enable     In(1)   accept words
        drain      In(1)   accept and discard words (error recovery)
        flush      In(1)   empty the ring
        take       In      codes the consumer takes (<= ``ones``)
        skip       In(1)   after ``take``, move to the next chunk's first word (only when ``skip_ok``)
        commit     In(1)   apply ``take`` / ``skip``
        span       Out(2 word)  slots s and s + 1: zero past the current chunk's last word
        span_prefix Out         per byte b = 0 .. 2 word / 8 (two's complement, ``prefix_bits`` each): the ones of
                                ``span`` before byte b, minus (u - 1); one number 0 is the one before the read point
                                (none when u = 0: entry 0 is then 1)
        ones       Out     codes that end in the span
        whole      Out(1)  the span is complete (two words in, or it holds the chunk's last word)
        end_in_span Out(1) the span holds the chunk's last word: no code of the chunk lies beyond it
        skip_ok    Out(1)  the chunk's last word is in the ring
        skip_err   Out(1)  skipping after ``take`` would leave content of the chunk (see the module docstring)
    """

    def __init__(self, word: int = 32, max_take: int = 8, slots: int = 4):
        if not isinstance(word, int) or word < 4 * BYTE or word & (word - 1):
            raise ConfigError(f"code reader word must be a power of two >= 32 bits, got {word!r}")
        if not isinstance(max_take, int) or not 1 <= max_take <= word:
            raise ConfigError(f"code reader max_take must be 1..{word}, got {max_take!r}")
        if not isinstance(slots, int) or slots < 4 or slots & (slots - 1):
            raise ConfigError(f"code reader slots must be a power of two >= 4, got {slots!r}")
        self.word, self.max_take, self.slots = word, max_take, slots
        self.window = 2 * word
        self.prefix_bits = bits_for(self.window) + 1          # -(word - 1) .. window + 1, two's complement
        super().__init__({
            "inp": In(stream.Signature(word_layout(word))),
            "enable": In(1), "drain": In(1), "flush": In(1),
            "take": In(bits_for(max_take)), "skip": In(1), "commit": In(1),
            "span": Out(self.window),
            "span_prefix": Out((self.window // BYTE + 1) * self.prefix_bits),
            "ones": Out(bits_for(self.window)), "whole": Out(1), "end_in_span": Out(1),
            "skip_ok": Out(1), "skip_err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        IW, N = self.word, self.slots
        pw = bits_for(IW)
        # No reset on the slots and their counts: read only as far as `nwords` (reset) says they hold words.
        nb = IW // BYTE
        ring = Array(Signal(IW, name=f"slot{i}", reset_less=True) for i in range(N))
        pops = Array(Signal(pw, name=f"pop{i}", reset_less=True) for i in range(N))
        ring_last = Signal(N)                    # slot i holds the last word of a chunk
        s = Signal(exact_log2(N), name="s")      # the read point's slot
        u = Signal(pw, name="u")                 # ones of slot s already taken
        nwords = Signal(range(N + 1), name="nwords")

        def slot(d):
            return (s + d)[:len(s)]

        # ------------------------------------------------------------------ the span and its ones
        here, nxt = ring[slot(0)], ring[slot(1)]
        in0, last0, pop0 = nwords != 0, ring_last.bit_select(slot(0), 1), pops[slot(0)]
        in1 = Signal(name="in1")                 # slot s + 1 is in and belongs to the current chunk
        m.d.comb += in1.eq((nwords >= 2) & ~last0)
        last1, pop1 = ring_last.bit_select(slot(1), 1), pops[slot(1)]
        a0, a1 = Signal(pw, name="a0"), Signal(pw, name="a1")
        m.d.comb += [a0.eq(Mux(in0, pop0 - u, 0)), a1.eq(Mux(in1, pop1, 0)), self.ones.eq(a0 + a1),
                     self.whole.eq((nwords >= 2) | (in0 & last0)),
                     self.end_in_span.eq((in0 & last0) | (in1 & last1))]
        m.d.comb += [self.span.eq(Cat(here, Mux(in1, nxt, 0))),
                     ]
        # the span's ones before every byte, counted from the span itself: off the loop (the consumer registers
        # them, so its select network starts from the prefix)
        in_byte = [popcount(m, self.span[BYTE * b: BYTE * (b + 1)], f"span_byte{b}") for b in range(2 * nb)]
        pw_ = self.prefix_bits
        base = Signal(pw_, name="span_base")                 # u - 1: the one before the read point is number 0
        m.d.comb += base.eq(u - 1)
        for b, pre in enumerate(prefix_counts(m, in_byte, self.window, "span_pc")):
            rel = Signal(pw_, name=f"span_rel{b}")
            m.d.comb += [rel.eq(pre - base), self.span_prefix[pw_ * b: pw_ * (b + 1)].eq(rel)]

        # ------------------------------------------------------------------ a take and where it lands
        t = self.take
        step = Signal(name="step")               # the take's last one is in slot s + 1
        m.d.comb += step.eq(t > a0)
        u_after = Signal(pw, name="u_after")
        m.d.comb += u_after.eq(Mux(step, t - a0, u + t))
        left_in_slot = u_after != Mux(step, pop1, pop0)
        flag = [ring_last.bit_select(slot(d), 1) & (d < nwords) for d in range(N)]
        m.d.comb += self.skip_ok.eq(Cat(*flag).any())
        ends_here = Mux(step, in1 & last1, in0 & last0)      # the take ends in the chunk's last word
        with m.If(self.skip_ok):
            m.d.comb += self.skip_err.eq(~ends_here | left_in_slot)
        with m.Else():                           # a word after the take's slot belongs to the chunk: content left
            m.d.comb += self.skip_err.eq((nwords > step + 1) | left_in_slot)

        freed = Signal(range(3), name="freed")
        m.d.comb += freed.eq(Mux(self.commit, step + self.skip, 0))
        m.d.comb += self.inp.ready.eq(self.drain | (self.enable & (nwords < N)))
        append = self.inp.valid & self.inp.ready & ~self.drain
        write_slot = Signal(len(s), name="write_slot")
        m.d.comb += write_slot.eq(s + nwords)
        data = self.inp.payload.data
        with m.If(append):
            m.d.sync += [ring[write_slot].eq(data), pops[write_slot].eq(popcount(m, data, "in_pop")),
                         ring_last.bit_select(write_slot, 1).eq(self.inp.payload.last)]
        with m.If(self.flush | self.drain):
            m.d.sync += [s.eq(0), u.eq(0), nwords.eq(0)]
        with m.Else():
            m.d.sync += [s.eq(s + freed), nwords.eq(nwords - freed + append)]
            with m.If(self.commit):
                m.d.sync += u.eq(Mux(self.skip, 0, u_after))
        return m
