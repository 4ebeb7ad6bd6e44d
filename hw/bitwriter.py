"""Bit writer: packs variable-length bit groups into plane words, closing a chunk per superblock.

The encoder's twin of hw/bitreader.py: it produces exactly the word framing the decoder consumes
(docs/HARDWARE.md "Input words"): a chunk's bits LSB first in ``word``-bit words, the last word
zero-padded with ``last = 1``, and an empty chunk as one zero word with ``last = 1``.

Each accepted group appends ``n`` bits (bit 0 first) behind the buffered bits; ``close`` with a group
ends the chunk after it. One word leaves per cycle through a registered output. A group is accepted
while at most one word of bits is buffered (after this cycle's emission), so the buffer never
overflows: capacity = word + widest group.
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
        ready   Out(1)
        out     Out(stream {data: word, last: 1})
        idle    Out(1)      nothing buffered and no chunk being closed
    """

    def __init__(self, word: int = 64, group: int = 64):
        if not isinstance(word, int) or word < BYTE or word % BYTE:
            raise ConfigError(f"word must be a positive multiple of 8 bits, got {word!r}")
        if not isinstance(group, int) or group < 1:
            raise ConfigError(f"group width must be positive, got {group!r}")
        self.word, self.group = word, group
        self.capacity = word + group
        super().__init__({
            "bits": In(group), "n": In(bits_for(group)), "close": In(1), "valid": In(1), "ready": Out(1),
            "out": Out(stream.Signature(word_layout(word))), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        IW, C = self.word, self.capacity
        acc = Signal(C)
        fill = Signal(range(C + 1))
        closing = Signal()         # the chunk is complete: flush what is left, the final word with last

        can_emit = ~self.out.valid | self.out.ready
        # A full word is held back until a further bit arrives or the chunk closes: only then is it
        # known whether it is the chunk's last word. So at close, fill > 0 unless the chunk is empty.
        full_word = (fill > IW) | ((fill == IW) & closing)
        # While closing, the tail (or an empty chunk's zero word) goes out as the final word.
        emit_tail = closing & (fill < IW)
        emit = can_emit & (full_word | emit_tail)
        tail_is_last = closing & (fill <= IW)
        after_fill = Signal(range(C + 1))
        m.d.comb += after_fill.eq(Mux(emit, Mux(full_word, fill - IW, 0), fill))
        m.d.comb += [
            self.ready.eq(~closing & (after_fill <= IW)),
            self.idle.eq((fill == 0) & ~closing & ~self.out.valid),
        ]
        shifted = Signal(C)
        m.d.comb += shifted.eq(Mux(emit, Mux(full_word, acc >> IW, 0), acc))
        accept = self.valid & self.ready

        with m.If(can_emit):
            m.d.sync += self.out.valid.eq(emit)
        with m.If(emit):
            m.d.sync += [self.out.payload.data.eq(acc[:IW]),
                         self.out.payload.last.eq(tail_is_last)]
        with m.If(accept):
            m.d.sync += [acc.eq(shifted | (self.bits << after_fill)), fill.eq(after_fill + self.n)]
            with m.If(self.close):
                m.d.sync += closing.eq(1)
        with m.Else():
            m.d.sync += [acc.eq(shifted), fill.eq(after_fill)]
        # The final word of a closing chunk has gone: the next chunk starts empty.
        with m.If(emit & tail_is_last):
            m.d.sync += closing.eq(0)
        return m
