"""Take ring: a word ring read at a *registered* bit count per cycle (the C2 v2 decoder's field reader).

The v1 BitReader (hw/bitreader.py) serves a consumer that decides in the same cycle how many bits it
takes from what it sees; here the consumer has decided earlier (its ``take`` comes from a register of
the stage before), so the reader's only loop is the pointer update:

    fire = (avail >= take) & downstream ready        (avail from registered state: nwords, off)
    pos  = round_up_to_word_if(end, off + take) + skip
    drop = min(pos / IW, nwords);  head, nwords, off <- head + drop, nwords - drop + appended, pos - drop * IW

Structure
* ``N`` word slots (a power of two is not required: head and write pointers count modulo N). A word is
  written whole into the slot after the newest one; ``inp.ready`` = a slot is free (registered state
  only, no combinational path from the consumer).
* The view is the two slots from the head on (``2 * IW`` bits) shifted right by the bit offset ``off``:
  ``window`` bits out, valid up to ``avail`` = bits buffered from ``off`` on. The consumer must keep
  ``off + take <= 2 * IW`` (``off`` is an output so that it can check).
* ``end`` (with ``fire``): the take finishes a chunk; the rest of the word holding the chunk's last bit is
  dropped (chunk padding: chunks end on word boundaries).
* ``skip`` (with ``fire``, after the take and the ``end`` round-up): bits the consumer does not read (the
  C2 v2 decoder: the next superblock's keep bitmap, which it takes from the words elsewhere). They need
  not be buffered yet: the offset then points past the buffered words (``avail`` = 0), and the words still
  to be skipped are dropped as they arrive (one per cycle), so a skip never waits for its bits.

Framing (chunk lengths, padding) is checked by the writer, which knows every chunk's length; this ring
has no chunk flags.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from .shifter import shift_right


class TakeRing(wiring.Component):
    """Words in, a ``window``-bit view out; the consumer takes a registered number of bits per cycle.

    Ports
        inp       In(stream IW)   words (whole words: ``inp.ready`` = a slot is free)
        flush     In(1)           empty the ring (start of a tensor, error)
        fire      In(1)           consume ``take`` bits (+ ``end`` padding + ``skip``) now (only when
                                  ``avail >= take``)
        take      In(tw)          bits consumed by ``fire``
        end       In(1)           with ``fire``: drop the rest of the word that holds the take's last bit
        skip      In(sw)          with ``fire``: bits dropped after that (may run past the buffered words)
        win       Out(window)     the next bits (bits at and above ``avail`` are stale)
        avail     Out(aw)         bits buffered from the read offset on (0..N * IW; 0 while skipping)
        off       Out(log2 IW)    the read offset inside the head word
    """

    def __init__(self, word: int = 128, window: int = 136, slots: int = 3, take_max: int | None = None,
                 skip_max: int = 0):
        if not isinstance(word, int) or word < 8 or word & (word - 1):
            raise ConfigError(f"take ring word must be a power of two >= 8 bits, got {word!r}")
        if not isinstance(window, int) or not 1 <= window <= 2 * word:
            raise ConfigError(f"take ring window must be 1..{2 * word} bits (two slots), got {window!r}")
        if not isinstance(slots, int) or not 2 <= slots <= 16:
            raise ConfigError(f"take ring slots must be 2..16, got {slots!r}")
        if not isinstance(skip_max, int) or skip_max < 0:
            raise ConfigError(f"take ring skip_max must be >= 0, got {skip_max!r}")
        self.word, self.window, self.slots = word, window, slots
        self.take_max = 2 * word if take_max is None else take_max
        self.skip_max = skip_max
        super().__init__({
            "inp": In(stream.Signature(word)),
            "flush": In(1), "fire": In(1), "take": In(bits_for(self.take_max)), "end": In(1),
            "skip": In(bits_for(max(1, skip_max))),
            "win": Out(window), "avail": Out(bits_for(slots * word)), "off": Out(exact_log2(word)),
        })

    def elaborate(self, platform):
        m = Module()
        IW, N = self.word, self.slots
        wb = exact_log2(IW)
        # Word slots without reset (as the other buffers: hw/bitreader.py): a slot is read only as far as `nwords`
        # (reset) says it holds a word, and after the first wrap every slot holds stale words anyway, so its
        # power-up content is one more stale word (tests/test_hw_power_up.py runs the decoders from random state).
        ring = Array(Signal(IW, name=f"slot{i}", reset_less=True) for i in range(N))
        head = Signal(range(N), name="head")             # slot of the word holding the read offset
        nwords = Signal(range(N + 1), name="nwords")     # words buffered from the head on
        pw = bits_for(2 * IW + self.take_max + self.skip_max)
        off = Signal(pw, name="off")                     # read offset from the head word's start (>= IW only
        #                                                  while a skip runs past the buffered words)
        off_lo = off[:wb]
        skipping = Signal(name="skipping")
        m.d.comb += [skipping.eq(off[wb:] != 0), self.off.eq(off_lo)]

        def mod_n(v):
            """v mod N for 0 <= v < 2N (pointer arithmetic without a power-of-two ring)."""
            return Mux(v >= N, v - N, v)

        nxt = Signal(range(N), name="head_next_slot")
        m.d.comb += nxt.eq(mod_n(head + 1))
        view = Signal(2 * IW, name="view")
        m.d.comb += [view.eq(Cat(ring[head], ring[nxt])),
                     self.win.eq(shift_right(m, view, off_lo, self.window, "win_sel"))]   # hw/shifter.py
        m.d.comb += self.avail.eq(Mux((nwords == 0) | skipping, 0, (nwords << wb) - off_lo))

        # Consume: pos = the new read position from the head word's start; words dropped = those wholly
        # before it that are buffered (the rest of a skip is dropped as the words arrive).
        taken = Signal(bits_for(IW + self.take_max), name="taken")   # off + take
        m.d.comb += taken.eq(off_lo + self.take)
        padded = Signal(bits_for(2 * IW + self.take_max), name="padded")
        m.d.comb += padded.eq(Mux(self.end, (taken + IW - 1) >> wb << wb, taken))
        pos = Signal(pw, name="pos")
        m.d.comb += pos.eq(Mux(self.fire, padded + self.skip, off))
        whole = Signal(pw - wb, name="whole")            # words from the head word to pos's word
        m.d.comb += whole.eq(pos[wb:])
        drop = Signal(range(N + 1), name="drop")
        m.d.comb += drop.eq(Mux(whole > nwords, nwords, whole))

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
            m.d.sync += [head.eq(mod_n(head + drop)), nwords.eq(nwords - drop + append),
                         off.eq(pos - (drop << wb))]
        return m
