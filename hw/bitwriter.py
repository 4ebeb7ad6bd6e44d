"""Bit writer: packs variable-length bit groups into plane words, closing a chunk per superblock.

The encoder's twin of hw/bitreader.py: it produces exactly the word framing the decoder consumes
(docs/datasheets/decoder_c1.md "Words and bits"): a chunk's bits LSB first in ``word``-bit words, the last word
zero-padded with ``last = 1``, and an empty chunk as one zero word with ``last = 1``.

Each accepted group appends ``n`` bits (bit 0 first) behind the buffered bits; ``close`` with a group
ends the chunk after it: the buffer is padded with zeros to the next word boundary at once and a *mark*
counts the buffered words up to the chunk's last one, so the next chunk's groups are accepted in the
very next cycle (no bubble between chunks) while the closed words drain. The output word is the bottom
word of the buffer itself (``out`` valid, data and last come straight from registers; no separate
output register): it is offered once it is complete and known not to be an open chunk's last word
(bits follow it, or its chunk is closed), and new bits only ever land above it. A group is accepted
while at most one word of bits is buffered after this cycle's emission (``slack`` more bits if asked,
so that an occasional wide group does not stall the groups behind it), and a closing group only when
no closed chunk is still draining (one mark); so the buffer never overflows: capacity = word + slack +
widest group bits.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from ..errors import ConfigError
from .bitreader import BYTE, word_layout


class BitWriter(wiring.Component):
    """Ports
        bits    In(group)   the group's bits, bit 0 first (bits at and above ``n`` must be zero)
        n       In(bw)      number of bits in the group (may be 0)
        close   In(1)       the group is the chunk's last
        valid   In(1)       a group is offered; ``ready`` accepts it this cycle
        ready   Out(1)      (depends combinationally on ``close`` and ``out.ready``, never on ``valid``)
        out     Out(stream {data: word, last: 1})
        idle    Out(1)      nothing buffered
    """

    def __init__(self, word: int = 64, group: int = 64, slack: int = 0):
        if not isinstance(word, int) or word < BYTE or word % BYTE:
            raise ConfigError(f"word must be a positive multiple of 8 bits, got {word!r}")
        if not isinstance(group, int) or group < 1:
            raise ConfigError(f"group width must be positive, got {group!r}")
        if not isinstance(slack, int) or slack < 0:
            raise ConfigError(f"slack must be a non-negative number of bits, got {slack!r}")
        self.word, self.group, self.slack = word, group, slack
        self.capacity = word + group + slack               # buffer bits (never exceeded, see above)
        self.words = -(-self.capacity // word)             # words a closed chunk can occupy
        super().__init__({
            "bits": In(group), "n": In(bits_for(group)), "close": In(1), "valid": In(1), "ready": Out(1),
            "out": Out(stream.Signature(word_layout(word))), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        IW, C, NW = self.word, self.capacity, self.words
        acc = Signal(C, name="acc")                        # buffered bits, bottom word = the output word
        fill = Signal(range(NW * IW + 1), name="fill")     # bits buffered (a closed chunk: whole words)
        mark = Signal(range(NW + 1), name="mark")          # buffered words through a closed chunk's last word

        # The bottom word is offered once complete and known not to be an open chunk's possible last word.
        m.d.comb += [self.out.valid.eq((fill > IW) | (mark != 0)), self.out.payload.data.eq(acc[:IW]),
                     self.out.payload.last.eq(mark == 1)]
        emit = Signal(name="emit")
        m.d.comb += emit.eq(self.out.valid & self.out.ready)
        after_fill = Signal.like(fill, name="after_fill")
        after_mark = Signal.like(mark, name="after_mark")
        m.d.comb += [after_fill.eq(Mux(emit, fill - IW, fill)),
                     after_mark.eq(Mux(emit & (mark != 0), mark - 1, mark))]
        m.d.comb += [
            self.ready.eq((after_fill <= IW + self.slack) & ~(self.close & (after_mark != 0))),
            self.idle.eq((fill == 0) & (mark == 0)),
        ]
        shifted = Signal(C, name="acc_shifted")
        m.d.comb += shifted.eq(Mux(emit, acc >> IW, acc))
        new_fill = Signal.like(fill, name="new_fill")
        m.d.comb += new_fill.eq(after_fill + self.n)
        # Words of the closing chunk: ceil(new_fill / IW), at least 1 (an empty chunk is one zero word).
        close_words = Signal(range(NW + 1), name="close_words")
        cw = 1
        for k in range(1, NW):
            cw = cw + (new_fill > k * IW)
        m.d.comb += close_words.eq(cw)
        accept = self.valid & self.ready

        with m.If(accept):
            m.d.sync += acc.eq(shifted | (self.bits << after_fill))
            with m.If(self.close):
                # Bits above `fill` are always zero, so rounding up pads the chunk's last word with zeros.
                m.d.sync += [fill.eq(close_words * IW), mark.eq(close_words)]
            with m.Else():
                m.d.sync += [fill.eq(new_fill), mark.eq(after_mark)]
        with m.Else():
            m.d.sync += [acc.eq(shifted), fill.eq(after_fill), mark.eq(after_mark)]
        return m
