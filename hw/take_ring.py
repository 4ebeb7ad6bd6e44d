"""Take ring: a word ring read at a *registered* bit count per cycle (the C2 v2 decoder's field reader).

The v1 BitReader (hw/bitreader.py) serves a consumer that decides in the same cycle how many bits it
takes from what it sees; here the consumer has decided earlier (its ``take`` comes from a register of
the stage before), so the reader's only loop is the pointer update:

    fire = (avail >= take) & downstream ready        (avail from registered state: nwords, off)
    off, head, nwords <- off + take (mod IW), head + words dropped, nwords - dropped + appended

Structure
* ``N`` word slots (a power of two is not required: head and write pointers count modulo N). A word is
  written whole into the slot after the newest one; ``inp.ready`` = a slot is free (registered state
  only, no combinational path from the consumer).
* The view is the two slots from the head on (``2 * IW`` bits) shifted right by the bit offset ``off``:
  ``window`` bits out, valid up to ``avail`` = bits buffered from ``off`` on. The consumer must keep
  ``off + take <= 2 * IW``.
* ``end`` (with ``fire``): the take finishes a chunk. The rest of the word holding the chunk's last bit
  is dropped (chunk padding; chunks end on word boundaries) and the offset is loaded with ``next_off``,
  where the next chunk's content starts in its first word (the C2 v2 decoder writes only the words that
  hold X bytes and fields into this ring, so that offset is the bitmap's length modulo IW).

Framing (chunk lengths, padding) is checked by the writer, which knows every chunk's length; this ring
has no chunk flags.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError


class TakeRing(wiring.Component):
    """Words in, a ``window``-bit view out; the consumer takes a registered number of bits per cycle.

    Ports
        inp       In(stream IW)   words (whole words: ``inp.ready`` = a slot is free)
        flush     In(1)           empty the ring (start of a tensor, error)
        fire      In(1)           consume ``take`` bits now (only when ``avail >= take``)
        take      In(tw)          bits consumed by ``fire``
        end       In(1)           with ``fire``: drop the rest of the current word, offset <- ``next_off``
        next_off  In(log2 IW)     bit offset of the next chunk's content in its first word
        set_off   In(1)           load the offset with ``next_off`` now (the first chunk of a tensor)
        win       Out(window)     the next bits (bits at and above ``avail`` are stale)
        avail     Out(aw)         bits buffered from the read offset on (0..N * IW)
    """

    def __init__(self, word: int = 128, window: int = 136, slots: int = 3, take_max: int | None = None):
        if not isinstance(word, int) or word < 8 or word & (word - 1):
            raise ConfigError(f"take ring word must be a power of two >= 8 bits, got {word!r}")
        if not isinstance(window, int) or not 1 <= window <= 2 * word:
            raise ConfigError(f"take ring window must be 1..{2 * word} bits (two slots), got {window!r}")
        if not isinstance(slots, int) or not 3 <= slots <= 16:
            raise ConfigError(f"take ring slots must be 3..16, got {slots!r}")
        self.word, self.window, self.slots = word, window, slots
        self.take_max = 2 * word if take_max is None else take_max
        super().__init__({
            "inp": In(stream.Signature(word)),
            "flush": In(1), "fire": In(1), "take": In(bits_for(self.take_max)), "end": In(1),
            "next_off": In(exact_log2(word)), "set_off": In(1),
            "win": Out(window), "avail": Out(bits_for(slots * word)),
        })

    def elaborate(self, platform):
        m = Module()
        IW, N = self.word, self.slots
        wb = exact_log2(IW)
        ring = Array(Signal(IW, name=f"slot{i}") for i in range(N))
        head = Signal(range(N), name="head")             # slot of the word holding the read offset
        nwords = Signal(range(N + 1), name="nwords")     # words buffered from the head on
        off = Signal(wb, name="off")                     # read offset inside the head word

        def mod_n(v):
            """v mod N for 0 <= v < 2N (pointer arithmetic without a power-of-two ring)."""
            return Mux(v >= N, v - N, v)

        nxt = Signal(range(N), name="head_next_slot")
        m.d.comb += nxt.eq(mod_n(head + 1))
        view = Signal(2 * IW, name="view")
        m.d.comb += [view.eq(Cat(ring[head], ring[nxt])), self.win.eq(view >> off)]
        m.d.comb += self.avail.eq(Mux(nwords == 0, 0, (nwords << wb) - off))

        # Consume: bits through the take; words dropped = those fully consumed, or (end) every word the
        # take touched.
        pos = Signal(bits_for(IW + self.take_max), name="pos")   # off + take
        m.d.comb += pos.eq(off + self.take)
        drop = Signal(range(N + 1), name="drop")
        with m.If(self.fire):
            m.d.comb += drop.eq(Mux(self.end, (pos + IW - 1) >> wb, pos >> wb))

        m.d.comb += self.inp.ready.eq(nwords < N)
        append = Signal(name="append")
        m.d.comb += append.eq(self.inp.valid & self.inp.ready)
        wslot = Signal(range(N), name="wslot")
        m.d.comb += wslot.eq(mod_n(head + nwords))
        with m.If(append):
            m.d.sync += ring[wslot].eq(self.inp.payload)
        with m.If(self.flush):
            m.d.sync += [head.eq(0), nwords.eq(0), off.eq(0)]
        with m.Else():
            m.d.sync += [head.eq(mod_n(head + drop)), nwords.eq(nwords - drop + append)]
            with m.If(self.fire):
                m.d.sync += off.eq(Mux(self.end, self.next_off, pos[:wb]))
            with m.If(self.set_off):
                m.d.sync += off.eq(self.next_off)
        return m
