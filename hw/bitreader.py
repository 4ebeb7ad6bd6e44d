"""Bit reader: turns a stream of plane words into a bit window the decoder consumes at any bit count.

One reader sits on every input plane of the decoder (docs/datasheets/decoder_c1.md "Words and bits"). The consumer sees
the next ``window`` bits, takes ``take`` bits a cycle and, at the end of a superblock, ``skip``s the
rest of the current chunk (its zero padding).

Structure (chosen for area; the reader is replicated on every plane of every decoder):

* A **ring of N word slots** (``N`` a power of two, ``N * word >= window + 3 * word``; or any ``slots`` from
  the view's ``ceil(window / word) + 1`` up, for a consumer with registered takes). A word is written
  whole into the slot after the newest one, so there is no shifter on the write side; the read position
  ``rp`` is a bit pointer into the ring that wraps for free (with N not a power of two: a slot index
  counted modulo N and the bit in it). The window is a word-level rotation of the
  few slots from ``rp``'s word on, then one bit shift by ``rp mod word``: ``(window + word) * log2(word)``
  multiplexers instead of shifting the whole buffer every cycle.
* **Chunk ends are one flag per slot** (the slot's word had ``last``): chunks end on word boundaries,
  so the end of the current chunk is the end of the first flagged slot from ``rp`` on. The buffer may
  hold the tail of one chunk and the head of the next at the same time: the next superblock starts
  decoding in the cycle after the previous one finished (no bubble at superblock boundaries).

A word is accepted whenever a slot is free (``fill + rp mod word <= (N - 1) * word``, i.e. at least
``window + word`` bits of room): a registered condition, so ``inp.ready`` never depends combinationally
on the consumer. The extra word of slack covers a chunk's word padding (up to ``word - 1`` zero bits):
at a superblock's final beat the buffer may hold up to ``window`` bits of content plus the padding, and
the next chunk's first word must still be accepted in that cycle, or the next superblock would start
one cycle late.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from ..errors import ConfigError
from .shifter import shift_right

BYTE = 8


def word_layout(word: int) -> data.StructLayout:
    """Payload of a plane stream: ``word`` data bits (chunk bytes LSB first) and the chunk's last-word flag."""
    return data.StructLayout({"data": word, "last": 1})


def view_slots(word: int, window: int) -> int:
    """The fewest word slots a reader can have: its view, ``ceil(window / word) + 1`` (the window may start
    anywhere in the first slot)."""
    return -(-window // word) + 1


def thermometer(n, width: int):
    """Bits ``[0, n)`` set: a comparator per bit, far cheaper than a shifted mask. Bits ``n`` can never
    reach are constant zero (no always-false comparison for lint to flag)."""
    top = (1 << len(n)) - 1
    return Cat(*[(n > i) if i < top else Const(0, 1) for i in range(width)])


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
        win       Out(window)  next bits; bits at and above ``avail`` must be ignored (they may be stale)
        avail     Out(cw)      bits of the current chunk in the buffer
        end_seen  Out(1)       the current chunk's last word is in the buffer
        skip_ok   Out(1)       ``skip`` is possible now (= end_seen)
        skip_err  Out(1)       skipping after ``take`` would drop content: a word after the chunk's
                               content, a non-zero padding bit, or an empty chunk that is not one word
    """

    def __init__(self, word: int = 64, window: int = 64, refill_on_commit: bool = False,
                 full_skip_err: bool = False, slots: int | None = None, shift_outside: bool = False):
        """``refill_on_commit``: a slot that this cycle's commit frees takes the next word in the same cycle
        (``inp.ready`` then depends on ``commit``: for a consumer whose take is registered and at most a word,
        so that few slots keep up). ``full_skip_err``: with every slot full, a take that ends in the last slot
        while the chunk's last word is not in yet also raises ``skip_err`` (a well-formed chunk's content ends
        in its last word; with so few slots a lengthened chunk would otherwise wait for an end it cannot take
        in). ``slots``: the ring's word slots (default: the power of two of the rule above). Any count from
        the view's ``ceil(window / word) + 1`` up is accepted (a consumer whose take is registered a stage
        ahead needs no more); a count that is not a power of two keeps the
        read slot and bit apart and counts the slot modulo N. ``shift_outside``: no ``win``; the reader
        outputs the word-rotated ``view`` and the bit offset ``view_bit`` instead, so that two readers read
        in alternate cycles can share one shifter (hw/decoder_c1_v3.py)."""
        self.refill_on_commit, self.full_skip_err = bool(refill_on_commit), bool(full_skip_err)
        if not isinstance(word, int) or word < BYTE or word % BYTE or word & (word - 1):
            raise ConfigError(f"input word width must be a power-of-two multiple of 8 bits, got {word!r}")
        if not isinstance(window, int) or window < 1:
            raise ConfigError(f"bit reader window must be positive, got {window!r}")
        self.word, self.window = word, window
        if slots is None:
            slots = 1 << ceil_log2(-(-(window + 3 * word) // word))
        need = view_slots(word, window)
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < need:
            raise ConfigError(f"reader slots must be an integer >= {need}, got {slots!r}")
        self.slots, self.capacity = slots, slots * word
        self.shift_outside = bool(shift_outside)
        self.view_bits = need * word
        out = ({"view": Out(self.view_bits), "view_bit": Out(exact_log2(word))} if self.shift_outside
               else {"win": Out(window)})
        super().__init__({
            "inp": In(stream.Signature(word_layout(word))),
            "enable": In(1), "drain": In(1), "flush": In(1),
            "take": In(bits_for(window + 8)), "skip": In(1), "commit": In(1),
            **out, "avail": Out(bits_for(self.capacity)), "end_seen": Out(1),
            "skip_ok": Out(1), "skip_err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        IW, W, N = self.word, self.window, self.slots
        wb = exact_log2(IW)                      # bit-in-word part of a ring position
        cw = bits_for(self.capacity)
        pow2 = not N & (N - 1)
        # No reset on the word slots: they are read only as far as `nwords` (reset) says they hold words, and hold
        # stale words after the first wrap anyway (power-up content = stale; tests/test_hw_power_up.py).
        ring = Array(Signal(IW, name=f"slot{i}", reset_less=True) for i in range(N))
        ring_last = Signal(N)                    # slot i holds the last word of a chunk
        if pow2:                                 # one bit pointer that wraps with the ring
            rp = Signal(exact_log2(self.capacity))   # read position (bit)
            rp_word, rp_bit = rp[wb:], rp[:wb]
        else:                                    # the slot counted modulo N beside the bit in it
            rp_word = Signal(range(N))
            rp_bit = Signal(wb)
        nwords = Signal(range(N + 1))            # slots holding unread bits, from rp's slot on
        used = Signal()                          # some bit of the current chunk has been taken
        # The current chunk was taken exactly up to its end: its flagged slot was freed with its last
        # bit, so remember that the chunk ends at position 0 (else the next chunk would look like its tail).
        at_end = Signal()

        fill = Signal(cw)
        m.d.comb += fill.eq((nwords << wb) - rp_bit)

        def mod_n(v):                            # v mod N for 0 <= v < 2N
            return Mux(v >= N, v - N, v)

        if pow2:
            def slot(d):                         # the slot d after rp's
                return (rp_word + d)[:len(rp_word)]
        else:
            slot_at = [Signal(range(N), name=f"slot_at{d}") for d in range(N)]
            for d in range(N):
                m.d.comb += slot_at[d].eq(mod_n(rp_word + d))

            def slot(d):
                return slot_at[d]

        # Window: the slots from rp's slot on, rotated into place, then one shift by the bit offset.
        nview = -(-W // IW) + 1
        view = Signal(nview * IW)
        m.d.comb += view.eq(Cat(*[ring[slot(j % N)] for j in range(nview)]))
        if self.shift_outside:
            m.d.comb += [self.view.eq(view), self.view_bit.eq(rp_bit)]
        else:
            # an MSB-first log shifter keeping only the bits the window can reach (hw/shifter.py: cheaper than >>)
            m.d.comb += self.win.eq(shift_right(m, view, rp_bit, W, "win_shift"))

        # Where the current chunk ends: the end of the first flagged slot from rp's slot on.
        flag = [Signal(name=f"end_flag{d}") for d in range(N)]
        for d in range(N):
            m.d.comb += flag[d].eq(ring_last.bit_select(slot(d), 1) & (d < nwords))
        first = Signal(range(N + 1))            # slots up to and including the chunk's last one
        first_v = Const(0, bits_for(N))
        for d in reversed(range(N)):
            first_v = Mux(flag[d], d + 1, first_v)
        m.d.comb += first.eq(first_v)
        mark_end = Signal(cw)
        chunk_end = Signal(cw)
        m.d.comb += [
            mark_end.eq((first << wb) - rp_bit),
            chunk_end.eq(Mux(at_end, 0, mark_end)),
            self.end_seen.eq(at_end | Cat(*flag).any()),
            self.avail.eq(Mux(self.end_seen, chunk_end, fill)),
            self.skip_ok.eq(self.end_seen),
        ]

        # skip_err: the chunk's content must end in its last word, and what follows must be zero. Chunks
        # end on slot boundaries, so when 0 < rest < IW the padding is the top of the chunk's last slot
        # from bit (rp + take) mod IW up (rest = IW with nothing taken: the whole slot of an empty chunk).
        used_now = used | (self.take != 0)
        rest = Signal(cw)
        last_slot = Signal(IW)
        pad_from = Signal(wb)
        m.d.comb += [
            rest.eq(self.avail - self.take),
            # (a power of two wraps the sum for free; otherwise select among the slot_at indices, whose
            # modulo is already paid for)
            last_slot.eq(ring[(rp_word + first - 1)[:len(rp_word)]] if pow2 else
                         Array(ring[slot_at[d]] for d in range(N))[first - 1]),
            pad_from.eq(rp_bit + self.take),
        ]
        tail_any = (rest != 0) & (last_slot & ~thermometer(pad_from, IW)).any()
        with m.If(self.end_seen):
            m.d.comb += self.skip_err.eq(Mux(used_now, rest >= IW, rest != IW) | tail_any)
        with m.Else():
            err = (fill - self.take) >= IW
            if self.full_skip_err:
                err = err | ((nwords == N) & (fill >= self.take))
            m.d.comb += self.skip_err.eq(err)

        # Consume: advance rp; the slots it leaves are free.
        shift = Signal(cw)
        m.d.comb += shift.eq(Mux(self.commit, Mux(self.skip, chunk_end, self.take), 0))
        freed = Signal(range(N + 1))
        if pow2:
            m.d.comb += freed.eq((rp_bit + shift) >> wb)
        else:
            moved = Signal(cw + 1)
            m.d.comb += [moved.eq(rp_bit + shift), freed.eq(moved >> wb)]

        room = (nwords < N) | (freed != 0) if self.refill_on_commit else (nwords < N)
        m.d.comb += self.inp.ready.eq(self.drain | (self.enable & room))
        append = self.inp.valid & self.inp.ready & ~self.drain
        write_slot = Signal(range(N))
        m.d.comb += write_slot.eq(rp_word + nwords if pow2 else mod_n(rp_word + nwords))
        with m.If(append):
            m.d.sync += ring[write_slot].eq(self.inp.payload.data)
            m.d.sync += ring_last.bit_select(write_slot, 1).eq(self.inp.payload.last)
        position = [rp] if pow2 else [rp_word, rp_bit]
        with m.If(self.flush | self.drain):
            m.d.sync += [p.eq(0) for p in position] + [nwords.eq(0), used.eq(0), at_end.eq(0)]
        with m.Else():
            m.d.sync += [rp.eq(rp + shift)] if pow2 else [rp_word.eq(mod_n(rp_word + freed)), rp_bit.eq(moved[:wb])]
            m.d.sync += [
                nwords.eq(nwords - freed + append),
                used.eq(Mux(self.commit, Mux(self.skip, 0, used_now), used)),
                at_end.eq(Mux(self.commit,
                              Mux(self.skip, 0, at_end | (Cat(*flag).any() & (self.take == mark_end))),
                              at_end)),
            ]
        return m
