"""Bit reader: turns a stream of plane words into a bit window the decoder consumes at any bit count.

One reader sits on every input plane of the decoder (docs/HARDWARE.md, "Input words"). Words are
appended behind the buffered bits; the consumer sees the next ``window`` bits, takes ``take`` bits a
cycle and, at the end of a superblock, ``skip``s the rest of the current chunk (its zero padding).

Chunk boundaries are kept as *end marks*: a bit vector parallel to the data, with a one on the last
bit of every chunk (the last bit of a word that had ``last`` set). Marks shift with the data, so the
buffer may hold the tail of one chunk and the head of the next at the same time: the next superblock
starts decoding in the cycle after the previous one finished (no bubble at superblock boundaries).

Buffer capacity ``C = window + 2 * word``: a word is accepted whenever ``fill <= window + word`` (a
registered condition, so ``inp.ready`` never depends combinationally on the consumer). The extra word
of slack covers a chunk's word padding (up to ``word - 1`` zero bits): at a superblock's final beat the
buffer may hold up to ``window`` bits of content plus the padding, and the next chunk's first word must
still be accepted in that cycle, or the next superblock would start one cycle late.
"""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from ..errors import ConfigError
from .zero_counter import onehot_to_index

BYTE = 8


def word_layout(word: int) -> data.StructLayout:
    """Payload of a plane stream: ``word`` data bits (chunk bytes LSB first) and the chunk's last-word flag."""
    return data.StructLayout({"data": word, "last": 1})


class BitReader(wiring.Component):
    """Plane words in, a ``window``-bit view of the current chunk out.

    Ports
        inp       In(stream {data: word, last: 1})
        enable    In(1)   accept words (the decoder is running and reads this plane)
        drain     In(1)   accept and discard words (error recovery: never hang the upstream channel)
        flush     In(1)   empty the buffer (start of a tensor / error)
        take      In(bw)  bits the consumer would take this cycle (<= avail)
        skip      In(1)   after ``take``, drop the rest of the current chunk (only when ``skip_ok``)
        commit    In(1)   apply ``take`` / ``skip`` this cycle (``skip_err`` is computed from the
                          uncommitted ``take``, so the consumer can decide on it without a loop)
        win       Out(window)  next bits; bits at and above ``avail`` must be ignored
        avail     Out(cw)      bits of the current chunk in the buffer
        end_seen  Out(1)       the current chunk's last word is in the buffer
        skip_ok   Out(1)       ``skip`` is possible now (= end_seen)
        skip_err  Out(1)       skipping after ``take`` would drop content: a word after the chunk's
                               content, a non-zero padding bit, or an empty chunk that is not one word
    """

    def __init__(self, word: int = 64, window: int = 64):
        if not isinstance(word, int) or word < BYTE or word % BYTE:
            raise ConfigError(f"input word width must be a positive multiple of 8 bits, got {word!r}")
        if not isinstance(window, int) or window < 1:
            raise ConfigError(f"bit reader window must be positive, got {window!r}")
        self.word, self.window = word, window
        self.capacity = window + 2 * word
        super().__init__({
            "inp": In(stream.Signature(word_layout(word))),
            "enable": In(1), "drain": In(1), "flush": In(1),
            "take": In(bits_for(window + 8)), "skip": In(1), "commit": In(1),
            "win": Out(window), "avail": Out(bits_for(self.capacity)), "end_seen": Out(1),
            "skip_ok": Out(1), "skip_err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        C, IW, W = self.capacity, self.word, self.window
        cw = bits_for(C)
        buf = Signal(C)
        marks = Signal(C)
        fill = Signal(cw)
        used = Signal()            # some bit of the current chunk has been taken
        # The current chunk was taken exactly up to its end: its mark left the buffer with its last bit,
        # so remember that the chunk ends at position 0 (else the next chunk would look like its tail).
        at_end = Signal()

        # Where the current chunk ends: one past its lowest end mark.
        lowest = Signal(C)
        mark_end = Signal(cw)
        chunk_end = Signal(cw)
        m.d.comb += [
            lowest.eq(marks & (~marks + 1)),
            mark_end.eq(onehot_to_index(lowest, cw) + 1),
            chunk_end.eq(Mux(at_end, 0, mark_end)),
            self.end_seen.eq(at_end | marks.any()),
            self.avail.eq(Mux(self.end_seen, chunk_end, fill)),
            self.win.eq(buf[:W]),
            self.skip_ok.eq(self.end_seen),
        ]

        # skip_err: the chunk's content must end in its last word, and what follows must be zero.
        used_now = used | (self.take != 0)
        rest = Signal(cw)
        tail = Signal(C)
        m.d.comb += [
            rest.eq(self.avail - self.take),
            tail.eq(buf & (Const((1 << C) - 1, C) << self.take) & ~(Const((1 << C) - 1, C) << chunk_end)),
        ]
        with m.If(self.end_seen):
            m.d.comb += self.skip_err.eq(Mux(used_now, rest >= IW, rest != IW) | (tail.any()))
        with m.Else():
            m.d.comb += self.skip_err.eq((fill - self.take) >= IW)

        # Consume, then append behind what is left.
        shift = Signal(cw)
        m.d.comb += shift.eq(Mux(self.commit, Mux(self.skip, chunk_end, self.take), 0))
        kept_buf = Signal(C)
        kept_marks = Signal(C)
        kept_fill = Signal(cw)
        m.d.comb += [kept_buf.eq(buf >> shift), kept_marks.eq(marks >> shift), kept_fill.eq(fill - shift)]

        can_take_word = fill <= W + IW
        m.d.comb += self.inp.ready.eq(self.drain | (self.enable & can_take_word))
        append = self.inp.valid & self.inp.ready & ~self.drain
        new_buf = Signal(C)
        new_marks = Signal(C)
        m.d.comb += [
            new_buf.eq(kept_buf | (self.inp.payload.data << kept_fill)),
            new_marks.eq(kept_marks | (self.inp.payload.last << (kept_fill + (IW - 1)))),
        ]
        with m.If(self.flush | self.drain):
            m.d.sync += [buf.eq(0), marks.eq(0), fill.eq(0), used.eq(0), at_end.eq(0)]
        with m.Else():
            m.d.sync += [
                buf.eq(Mux(append, new_buf, kept_buf)),
                marks.eq(Mux(append, new_marks, kept_marks)),
                fill.eq(Mux(append, kept_fill + IW, kept_fill)),
                used.eq(Mux(self.commit, Mux(self.skip, 0, used_now), used)),
                at_end.eq(Mux(self.commit,
                              Mux(self.skip, 0, at_end | (marks.any() & (self.take == mark_end))), at_end)),
            ]
        return m
