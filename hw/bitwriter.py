"""Bit writer: packs variable-length bit groups into plane words, closing a chunk per superblock.

The encoder's twin of hw/bitreader.py: it produces exactly the word framing the decoder consumes
(docs/HARDWARE.md "Input words"): a chunk's bits LSB first in ``word``-bit words, the last word
zero-padded with ``last = 1``, and an empty chunk as one zero word with ``last = 1``.

Each accepted group appends ``n`` bits (bit 0 first) behind the buffered bits; ``close`` with a group
ends the chunk after it: the buffer is padded with zeros to the next word boundary at once and a *mark*
counts the buffered words up to the chunk's last one, so the next chunk's groups are accepted in the
very next cycle (no bubble between chunks) while the closed words drain. One word leaves per cycle
through a registered output. A group is accepted while at most one word of bits is buffered (after this
cycle's emission; ``slack`` more bits if asked, so that an occasional wide group - the C2 encoder's
chunk header - does not stall the groups behind it), and a closing group only when no closed chunk is
still draining (one mark); so the buffer never overflows: capacity = word + slack + widest group,
rounded up to whole words.
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
        ready   Out(1)      (depends combinationally on ``close``, never on ``valid``)
        out     Out(stream {data: word, last: 1})
        idle    Out(1)      nothing buffered and no word being offered
    """

    def __init__(self, word: int = 64, group: int = 64, slack: int = 0):
        if not isinstance(word, int) or word < BYTE or word % BYTE:
            raise ConfigError(f"word must be a positive multiple of 8 bits, got {word!r}")
        if not isinstance(group, int) or group < 1:
            raise ConfigError(f"group width must be positive, got {group!r}")
        if not isinstance(slack, int) or slack < 0:
            raise ConfigError(f"slack must be a non-negative number of bits, got {slack!r}")
        self.word, self.group, self.slack = word, group, slack
        self.words = -(-(word + group + slack) // word)   # buffer capacity in whole words
        self.capacity = self.words * word
        super().__init__({
            "bits": In(group), "n": In(bits_for(group)), "close": In(1), "valid": In(1), "ready": Out(1),
            "out": Out(stream.Signature(word_layout(word))), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        IW, C, NW = self.word, self.capacity, self.words
        acc = Signal(C)
        fill = Signal(range(C + 1))
        mark = Signal(range(NW + 1))   # buffered words through a closed chunk's last word (0: none)

        can_emit = Signal()
        m.d.comb += can_emit.eq(~self.out.valid | self.out.ready)
        # The bottom word may leave once complete and known not to be an open chunk's possible last
        # word: bits follow it, or its chunk is closed. (An open chunk's full word is held back until a
        # further bit arrives or the chunk closes.)
        emit = Signal()
        m.d.comb += emit.eq(can_emit & ((fill > IW) | (mark != 0)))
        after_fill = Signal(range(C + 1))
        after_mark = Signal(range(NW + 1))
        m.d.comb += [after_fill.eq(Mux(emit, fill - IW, fill)),
                     after_mark.eq(Mux(emit & (mark != 0), mark - 1, mark))]
        m.d.comb += [
            self.ready.eq((after_fill <= IW + self.slack) & ~(self.close & (after_mark != 0))),
            self.idle.eq((fill == 0) & (mark == 0) & ~self.out.valid),
        ]
        shifted = Signal(C)
        m.d.comb += shifted.eq(Mux(emit, acc >> IW, acc))
        new_fill = Signal(range(C + 1))
        m.d.comb += new_fill.eq(after_fill + self.n)
        # Words of the closing chunk: ceil(new_fill / IW), at least 1 (an empty chunk is one zero word).
        close_words = Signal(range(NW + 1))
        cw = 1
        for k in range(1, NW):
            cw = cw + (new_fill > k * IW)
        m.d.comb += close_words.eq(cw)
        accept = self.valid & self.ready

        with m.If(can_emit):
            m.d.sync += self.out.valid.eq(emit)
        with m.If(emit):
            m.d.sync += [self.out.payload.data.eq(acc[:IW]), self.out.payload.last.eq(mark == 1)]
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
