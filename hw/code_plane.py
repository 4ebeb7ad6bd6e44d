"""Code plane: a rank-unary code plane parsed at a fixed number of bits per cycle into a ring of codes.

The C1 decoder v2 (hw/decoder_c1_v2.py) reads ``spec.codes`` and ``verif.codes`` through this block; the
C2 decoder v2 may read its ``verif.codes`` the same way. docs/datasheets/decoder_c1.md.

A rank-unary code ends at its only one bit, so a code plane can be consumed a *fixed* number of bits per
cycle (a segment of ``S`` bits) while the number of codes that come out varies; the decoder's consumer
then pops codes from a ring at its own rate. Nothing downstream feeds back into the parse except the
ring's fill level (registered).

Stages
  W  word ring: ``NW`` slots of ``IW`` bits (+ the chunk ``last`` flag); ``inp.ready`` = a slot is free
     (registered state only).
  A  pass select (loop A, ~8 levels: position register <- position + 1 or the replay position of B): the
     segment at the pass position, bits below the pass's start offset masked, and the 8 bits after it
     (escape payload lookahead) -> ZeroCounter(S, Lc[+1]) -> registered into B.
  B  ranks (rank_0 = carry + end_0 - 1 - start, rank_j = end_j - 1 - end_{j-1}), escape / bad-code flags,
     the first escape's raw 8 bits; the codes (plus a chunk END marker) are rotated into the ring at the
     write pointer. Loop B (the zero-run carry across segments and the replay decision, ~15 levels):
     a pass ends early, and A re-parses the same segment from a later bit (one bubble), when
       * an escape (rank = K) is found: the next code starts after its 8 raw bits (FORMAT v1); if those
         run into the next segment, A resumes there at the bit after them,
       * the segment holds more than ``Lc`` codes (only if ``Lc < S``).
  R  ring of ``D`` entries; the consumer sees the ``pops`` entries from the read pointer (``win``) and
     their number (``count``), and pops any number of them per cycle (``pop``, loop R: rp <- rp + pop).

Format 2.0 (pair groups, docs/FORMAT.md 3.1): a code is ``q`` zeros then a one, ``q`` the *group* of its
symbol; the escape is the run ``q = Q`` (number of groups; ``Q = K`` when the book has no pairs, v1), so
the ``k`` input is ``Q``. Which symbol of a pair group a code stands for is told by a suffix bit in the
value's companion field, which this block does not see.

Entries (``entry_layout``): ``kind`` CODE (``val`` bits 0..3 = the run q < Q; with ``pair_flags`` bit 4 =
``pairs[q]``, the group holds two symbols), ESC (``val`` = the escaped 8-bit symbol),
BAD (a code with a zero run longer than Q: an impossible code), END (the chunk ended here; ``val`` bit 0
``pad_err``: the chunk's last word holds no content, or an escape payload runs past the chunk's end;
bit 1 ``long_run``: the zero run in front of the chunk's end is longer than Q). Every chunk yields its codes
then one END, so a consumer checks chunk framing by where END sits among the codes it expects.

Parsing runs only for the ``chunks`` chunks given with ``start`` (one tensor): the book size ``k`` is
taken as it is during that time (a decoder writes it only between tensors); words after the tensor's last
chunk stay buffered for the next tensor. ``flush`` empties everything, ``drain`` accepts and drops words.

A pass that ends the tensor's last chunk is followed by one idle cycle of stage A, so A never parses past
the tensor's end before B has seen it.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from ..errors import ConfigError
from ..golden.config import ESCAPE_PAYLOAD_BITS, K_MAX, MAX_CODE_BITS
from .bitreader import BYTE, thermometer, word_layout
from .shifter import shift_right
from .zero_counter import ZeroCounter

WORD_SLOTS = 4
CARRY_MAX = 31                      # zero-run carry saturates here (anything > K_MAX is an impossible code)


class Kind(enum.IntEnum):
    CODE = 0
    ESC = 1
    BAD = 2
    END = 3


END_PAD_ERR = 1 << 0
END_LONG_RUN = 1 << 1

# ``compact_entries`` (with an escape FIFO, no pair flags): 5 bits instead of 6. ``end`` = 0: a CODE, ``val`` its
# run q; ``end`` = 1: ESC when ``val`` bit 3 (COMPACT_ESC) is set (the payload is in the FIFO), BAD with bit 2
# (COMPACT_BAD), else END (``val`` bits 0..1 as END_PAD_ERR / END_LONG_RUN). ``compact_kind`` gives the Kind.
compact_layout = data.StructLayout({"val": 4, "end": 1})
COMPACT_BAD = 1 << 2
COMPACT_ESC = 1 << 3


def compact_kind(entry):
    """Kind of a ``compact_layout`` entry (one or two gate levels)."""
    return Mux(entry.end, Mux(entry.val[3], Kind.ESC, Mux(entry.val[2], Kind.BAD, Kind.END)), Kind.CODE)


entry_layout = data.StructLayout({"val": ESCAPE_PAYLOAD_BITS, "kind": 2})


def rotate_window(m, items, shift, outputs, name):
    """``out[j] = items[(shift + j) mod len(items)]`` for ``j < outputs``: a log rotator, most significant
    shift bit first, each stage keeping only the positions later stages can still need."""
    n = len(items)
    nb = exact_log2(n)
    vec = list(items)
    full = outputs >= n                                 # every position is needed: a full rotator
    for b in reversed(range(nb)):
        step = 1 << b
        keep = n if full else (min(n, outputs + step - 1) if b else outputs)
        nxt = []
        for i in range(keep):
            s = Signal(len(vec[0]), name=f"{name}_r{b}_{i}")
            hi = vec[(i + step) % n] if (b == nb - 1 or full) else vec[i + step]
            m.d.comb += s.eq(Mux(shift[b], hi, vec[i]))
            nxt.append(s)
        vec = nxt
    return vec[:outputs]


def rotate_into(m, items, shift, size, name):
    """``out[(shift + j) mod size] = items[j]`` (zero elsewhere) for a ``size``-slot ring: a log rotator,
    least significant shift bit first (widths grow from len(items) to size)."""
    nb = exact_log2(size)
    assert len(items) <= size // 2 + 1, "positions must not wrap before the last stage"
    zero = Const(0, len(items[0]))
    vec = list(items)
    for b in range(nb):
        step = 1 << b
        width = min(size, len(vec) + step) if b < nb - 1 else size
        nxt = []
        for i in range(width):
            lo = vec[i] if i < len(vec) else zero
            src = (i - step) % size if b == nb - 1 else i - step
            hi = vec[src] if 0 <= src < len(vec) else zero
            s = Signal(len(items[0]), name=f"{name}_w{b}_{i}")
            m.d.comb += s.eq(Mux(shift[b], hi, lo))
            nxt.append(s)
        vec = nxt
    return vec


def highest_one_end(m, vec, width, name):
    """``j + 1`` for the highest set bit ``j`` of ``vec`` (0 when none): a log-depth tree of halves, each
    node (any one in it, the end of its highest one) from its two children."""
    nodes = [(vec[j], Const(j + 1, width)) for j in range(len(vec))]
    level = 0
    while len(nodes) > 1:
        nxt = []
        for i in range(0, len(nodes) - 1, 2):
            (a_lo, e_lo), (a_hi, e_hi) = nodes[i], nodes[i + 1]
            e = Signal(width, name=f"{name}_l{level}_{i // 2}")
            m.d.comb += e.eq(Mux(a_hi, e_hi, e_lo))
            nxt.append((a_lo | a_hi, e))
        if len(nodes) % 2:
            nxt.append(nodes[-1])
        nodes = nxt
        level += 1
    a, e = nodes[0]
    out = Signal(width, name=f"{name}_end")
    m.d.comb += out.eq(Mux(a, e, 0))
    return out


class CodePlane(wiring.Component):
    """Rank-unary code plane words in, a ring of decoded codes out.

    Parameters
        word    IW, bits per input word (a power of two >= 16)
        seg     S, bits parsed per cycle (a power of two, 16..IW; default min(IW, 32))
        lanes   Lc, codes one pass can deliver (default S: a pass never truncates for lack of lanes)
        depth   D, ring entries (a power of two >= max(2 Lc, Lc + 1 + P); default the smallest)
        pops    P, entries visible to the consumer per cycle (``win``)
        word_slots  NW, input word slots (2, 4 or 8; default 4). A pass needs its word and, for the word's
                last segment, the next one (escape lookahead); with 2 slots a word arriving in the cycle after
                one is freed costs a pass cycle, so 2 suits planes parsed over >= 4 passes per word
        pair_flags  CODE entries carry ``pairs[q]`` in ``val`` bit 4 (a ``pairs`` input is added; default
                False: the C2 decoder v2's interface)
        partial_writes  B may write part of a pass when the ring lacks room for all of it: the codes that fit
                (never the escape, never the chunk's END) go in and A re-parses the segment after the last one
                written (one replay cycle, taken only while the ring is nearly full). Without it B holds a pass
                until ``fill + codes found + 1 <= D`` (a registered bound that cannot credit the consumer's pop
                of the same cycle, so it needs a ring twice as deep for the same rate; default False: the C2
                decoder v2's interface)
        esc_fifo    E > 0: escape payloads go to an E-entry side FIFO instead of the ring entries, which
                shrink to ``val`` = 4 bits (+ the pair bit): ESC entries then carry no value, the consumer
                reads the payloads in order from ``esc`` and pops them with ``esc_pop``. B holds a pass
                while the FIFO is full, so E must exceed the most ESC entries a consumer can need at once
                (the decoder's L codes + END: E >= L + 1), or a beat could wait on a held pass. 0: payloads
                in the entries (default; the C2 decoder v2's interface)
        compact_entries  (with ``esc_fifo``, without ``pair_flags``) 5-bit entries ``compact_layout`` instead of
                6: ``end`` = 0 is a CODE with its run in ``val``; ``end`` = 1 is an ESC (``val`` bit 3), a BAD (bit
                2) or an END (bits 0..1 its flags); ``compact_kind`` decodes the kind (default False: the C2
                decoder v2's interface)
        fast_consumed  B's ``b_consumed`` (the end of the pass's last code) from a log-depth search for the
                segment's highest one beside the zero counter, instead of the zero counter's last-lane select
                behind its full count (default False: the C2 decoder v2's netlist)

    Ports
        inp     In(stream {data: IW, last: 1})   plane words, chunk framing as docs/datasheets/decoder_c1.md "Words and bits"
        k       In(4)      groups Q of the book (0..15; = K without pairs), stable while parsing
        pairs   In(15)     (only with ``pair_flags``) the book's pair mask, stable while parsing
        start   In(1)      begin a tensor: parse ``chunks`` chunks from the buffered words on
        chunks  In(32)     chunks of this tensor (sampled with ``start``)
        enable  In(1)      accept words
        drain   In(1)      accept and drop words (also empties the block)
        flush   In(1)      empty the block (words, passes, ring); stops parsing
        win     Out(P x entry_layout)  ring entries from the read pointer; entry j is valid for j < count
        esc     Out(min(E, P) x 8)     (only with ``esc_fifo``) escape payloads from the FIFO's read pointer
        esc_pop In(bits_for(min(E, P)))  (only with ``esc_fifo``) payloads consumed this cycle
        count   Out(bits_for(D))       entries in the ring
        pop     In(bits_for(P))        entries consumed this cycle (<= count, <= P)
        parsing Out(1)     chunks of the current tensor remain to be parsed
    """

    @staticmethod
    def resolve(word: int = 64, seg: int | None = None, lanes: int | None = None, depth: int | None = None,
                pops: int = 9, word_slots: int = WORD_SLOTS) -> tuple[int, int, int, int, int]:
        """The parameters with their defaults filled in; ConfigError (one line) when they are invalid."""
        if not isinstance(word, int) or word < 2 * BYTE or word & (word - 1):
            raise ConfigError(f"code plane word must be a power of two >= 16 bits, got {word!r}")
        seg = min(word, 32) if seg is None else seg
        if not isinstance(seg, int) or seg < 2 * BYTE or seg & (seg - 1) or seg > word:
            raise ConfigError(f"code plane segment must be a power of two in 16..word ({word}), got {seg!r}")
        lanes = seg if lanes is None else lanes
        if not isinstance(lanes, int) or not 1 <= lanes <= seg:
            raise ConfigError(f"code plane lanes must be 1..segment ({seg}), got {lanes!r}")
        if not isinstance(pops, int) or not 1 <= pops <= 64:
            raise ConfigError(f"code plane pops must be 1..64, got {pops!r}")
        min_depth = 1 << ceil_log2(max(2 * lanes, pops + lanes + 1))
        depth = min_depth if depth is None else depth
        if not isinstance(depth, int) or depth & (depth - 1) or depth < min_depth:
            raise ConfigError(f"code plane depth must be a power of two >= {min_depth}, got {depth!r}")
        if word_slots not in (2, 4, 8):
            raise ConfigError(f"code plane word slots must be 2, 4 or 8, got {word_slots!r}")
        return word, seg, lanes, depth, pops

    def __init__(self, word: int = 64, seg: int | None = None, lanes: int | None = None,
                 depth: int | None = None, pops: int = 9, word_slots: int = WORD_SLOTS, pair_flags: bool = False,
                 esc_fifo: int = 0, partial_writes: bool = False, compact_entries: bool = False,
                 fast_consumed: bool = False):
        word, seg, lanes, depth, pops = self.resolve(word, seg, lanes, depth, pops, word_slots)
        if not isinstance(esc_fifo, int) or esc_fifo < 0 or (esc_fifo and (esc_fifo < 2 or esc_fifo & (esc_fifo - 1))):
            raise ConfigError(f"code plane escape FIFO must be 0 or a power of two >= 2, got {esc_fifo!r}")
        self.word_slots = word_slots
        self.pair_flags = bool(pair_flags)
        self.partial_writes = bool(partial_writes)
        self.esc_fifo = esc_fifo
        self.esc_pops = min(esc_fifo, pops)
        vbits = 4 + int(self.pair_flags) if esc_fifo else ESCAPE_PAYLOAD_BITS
        self.entry_layout = data.StructLayout({"val": vbits, "kind": 2})
        self.compact_entries = bool(compact_entries)
        self.fast_consumed = bool(fast_consumed)
        if self.compact_entries:
            if not esc_fifo or self.pair_flags:
                raise ConfigError("code plane compact entries need an escape FIFO and no pair flags")
            self.entry_layout = compact_layout
        self.word, self.seg, self.lanes, self.depth, self.pops = word, seg, lanes, depth, pops
        ports = {"pairs": In(K_MAX)} if self.pair_flags else {}
        if esc_fifo:
            ports["esc"] = Out(data.ArrayLayout(ESCAPE_PAYLOAD_BITS, self.esc_pops))
            ports["esc_pop"] = In(bits_for(self.esc_pops))
        super().__init__({
            **ports,
            "inp": In(stream.Signature(word_layout(word))),
            "k": In(range(K_MAX + 1)),
            "start": In(1), "chunks": In(32),
            "enable": In(1), "drain": In(1), "flush": In(1),
            "win": Out(data.ArrayLayout(self.entry_layout, pops)),
            "count": Out(bits_for(depth)),
            "pop": In(bits_for(pops)),
            "parsing": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        IW, S, Lc, D, P = self.word, self.seg, self.lanes, self.depth, self.pops
        NW = self.word_slots
        nwb = exact_log2(NW)
        SPW = IW // S                                   # segments per word
        sbits = exact_log2(SPW)
        pbits = exact_log2(NW * SPW)                    # segment position in the word ring
        bw = bits_for(S)                                # positions 0..S
        truncating = Lc < S
        empty = Signal()
        m.d.comb += empty.eq(self.flush | self.drain)

        # ------------------------------------------------------------------ W: word ring
        # The word ring, the code ring and the escape FIFO have no reset: each is read only as far as its
        # (reset) count says, and holds stale entries after the first wrap anyway (tests/test_hw_power_up.py).
        wring = [Signal(IW, name=f"word{i}", reset_less=True) for i in range(NW)]
        wlast = Signal(NW)
        head = Signal(range(NW))                        # slot of the oldest word (the one B is in)
        nwords = Signal(range(NW + 1))
        freed = Signal()                                # B finished the head word this cycle
        m.d.comb += self.inp.ready.eq(self.drain | (self.enable & (nwords < NW)))
        append = Signal()
        m.d.comb += append.eq(self.inp.valid & self.inp.ready & ~self.drain)
        wslot = (head + nwords)[:nwb]
        with m.If(append):
            for i in range(NW):
                with m.If(wslot == i):
                    m.d.sync += [wring[i].eq(self.inp.payload.data), wlast[i].eq(self.inp.payload.last)]

        # ------------------------------------------------------------------ R: the ring of codes
        entry_layout = self.entry_layout
        ring = [Signal(entry_layout, name=f"ent{i}", reset_less=True) for i in range(D)]
        wp = Signal(exact_log2(D) + 1)
        rp = Signal(exact_log2(D) + 1)
        fill = Signal(bits_for(D))                      # = wp - rp, kept as a register (no subtractor in
        m.d.comb += self.count.eq(fill)                 # the consumer's loop)
        win = rotate_window(m, [r.as_value() for r in ring], rp[:exact_log2(D)], P, "rd")
        for j in range(P):
            m.d.comb += self.win[j].eq(win[j])

        # ------------------------------------------------------------------ A: pass select + zero counter
        apos = Signal(pbits)                            # segment of the next pass (word slot, segment)
        astart = Signal(range(S))                       # first bit of that segment the pass parses
        chunks_left = Signal(32)
        m.d.comb += self.parsing.eq(chunks_left != 0)
        b_valid = Signal()
        b_chunk_last = Signal()
        b_count = Signal(range(Lc + 1))                 # codes the pass in B found (<= Lc)

        a_slot = Signal(nwb)
        a_sidx = Signal(max(1, sbits))
        m.d.comb += [a_slot.eq(apos[sbits:] if SPW > 1 else apos), a_sidx.eq(apos[:sbits] if SPW > 1 else 0)]
        a_off = Signal(nwb)                             # word slots from the head to A's word
        m.d.comb += a_off.eq(a_slot - head)
        a_word = Signal(IW)
        a_next = Signal(IW)
        with m.Switch(a_slot):
            for i in range(NW):
                with m.Case(i):
                    m.d.comb += [a_word.eq(wring[i]), a_next.eq(wring[(i + 1) % NW])]
        a_wlast = Signal()
        m.d.comb += a_wlast.eq(wlast.bit_select(a_slot, 1))
        seg_last_in_word = Signal()
        m.d.comb += seg_last_in_word.eq(a_sidx == SPW - 1)
        a_seg = Signal(S)
        a_look = Signal(ESCAPE_PAYLOAD_BITS)
        if SPW > 1:
            m.d.comb += a_seg.eq(a_word.word_select(a_sidx, S))
            with m.If(seg_last_in_word):
                m.d.comb += a_look.eq(a_next[:ESCAPE_PAYLOAD_BITS])
            with m.Else():
                m.d.comb += a_look.eq(a_word.word_select(a_sidx + 1, S)[:ESCAPE_PAYLOAD_BITS])
        else:
            m.d.comb += [a_seg.eq(a_word), a_look.eq(a_next[:ESCAPE_PAYLOAD_BITS])]
        a_chunk_last = Signal()
        m.d.comb += a_chunk_last.eq(seg_last_in_word & a_wlast)
        masked = Signal(S)
        m.d.comb += masked.eq(a_seg & ~thermometer(astart, S))
        # (the zero counter's window is at least 24 bits: a narrower segment is zero-extended, the constant
        # bits cost nothing after synthesis)
        zc = ZeroCounter(max(S, MAX_CODE_BITS), Lc + 1 if truncating else Lc)
        m.submodules.zc = zc
        m.d.comb += zc.data.eq(masked)
        a_cnt = Signal(range(Lc + 1))
        cnt = Const(0, bits_for(Lc))
        for j in range(Lc):
            cnt = Mux(zc.valid[j], j + 1, cnt)
        m.d.comb += a_cnt.eq(cnt)

        # B accepts its pass (writes it into the ring) when the ring has room for the most it can write
        # (its codes + END; a registered bound, so no rank logic in this path); otherwise it holds.
        b_accept = Signal()
        b_more = Signal()                                # the pass in B stopped at the lane limit
        E = self.esc_fifo
        efill = Signal(range(E + 1)) if E else None      # escape payloads in the side FIFO
        room = (fill + b_count + 1) <= D
        if E:
            room = room & (efill < E)                   # a registered bound, as the ring's
        room_part = Signal()                             # partial_writes: B writes only the codes that fit
        if not self.partial_writes:
            m.d.comb += b_accept.eq(b_valid & room)
        # fire: B is free, the word is buffered (and the next one for the lookahead), and A is not past the
        # end of a chunk B has not finished.
        word_in = a_off < nwords
        look_in = ~seg_last_in_word | a_wlast | ((a_off + 1) < nwords)
        a_fire = Signal()
        # (a pass that stopped at the lane limit is continued by A itself, also at a chunk's last segment; past
        # a chunk end A waits for B only at the tensor's last chunk: the next words may be the next tensor's)
        more_chunks = chunks_left[1:] != 0
        m.d.comb += a_fire.eq((chunks_left != 0) & (~b_valid | (b_accept & (~b_chunk_last | b_more | more_chunks)))
                              & word_in & look_in & ~empty)
        a_more = zc.valid[Lc] if truncating else Const(0, 1)   # more than Lc codes from astart on

        # the end of the last code in the masked segment (with at most Lc codes in it: the pass's last code)
        if self.fast_consumed:
            consumed = highest_one_end(m, masked, bw, "a_hi")
        else:
            consumed = zc.consumed

        # ------------------------------------------------------------------ B registers (from A)
        b_end = [Signal(bw, name=f"b_end{j}") for j in range(Lc)]
        b_lane = Signal(Lc)
        b_consumed = Signal(bw)                          # end of the last code found (0 if none)
        b_ext = Signal(S + ESCAPE_PAYLOAD_BITS)
        b_start = Signal(range(S))
        b_pos = Signal(pbits)
        b_lastw = Signal()                               # the pass's segment is the last of its word
        replay = Signal()
        r_pos = Signal(pbits)
        r_start = Signal(range(S))
        with m.If(empty):
            m.d.sync += b_valid.eq(0)
        with m.Elif(a_fire | b_accept):
            m.d.sync += b_valid.eq(a_fire & ~replay)
        with m.If(a_fire):
            m.d.sync += [b_lane.eq(zc.valid[:Lc]), b_count.eq(a_cnt), b_ext.eq(Cat(masked, a_look)),
                         b_start.eq(astart), b_pos.eq(apos), b_lastw.eq(seg_last_in_word),
                         b_chunk_last.eq(a_chunk_last), b_consumed.eq(consumed if not truncating else
                                                                      Mux(zc.valid[Lc], zc.end[Lc - 1],
                                                                          consumed))]
            if truncating:
                m.d.sync += b_more.eq(zc.valid[Lc])
            for j in range(Lc):
                m.d.sync += b_end[j].eq(zc.end[j])
        # A's position
        with m.If(empty):
            m.d.sync += [apos.eq(0), astart.eq(0)]
        with m.Elif(replay):
            m.d.sync += [apos.eq(r_pos), astart.eq(r_start)]
        with m.Elif(a_fire & a_more):                  # loop A: continue the segment after its Lc-th code
            m.d.sync += astart.eq(zc.end[Lc - 1])
        with m.Elif(a_fire):
            m.d.sync += [apos.eq(apos + 1), astart.eq(0)]

        # ------------------------------------------------------------------ B: ranks, escapes, ring write
        K = self.k                                       # Q: runs of Q are escapes, longer ones bad
        carry = Signal(range(CARRY_MAX + 1))
        wcontent = Signal()                              # the current word holds content so far
        chunk_first = Signal(init=1)                     # the current word is its chunk's first
        carry_in = Signal(range(CARRY_MAX + 1))
        m.d.comb += carry_in.eq(Mux(b_start == 0, carry, 0))
        rank = [Signal(bw + 1, name=f"b_rank{j}") for j in range(Lc)]
        esc = [Signal(name=f"b_esc{j}") for j in range(Lc)]
        bad = [Signal(name=f"b_bad{j}") for j in range(Lc)]
        for j in range(Lc):
            prev = b_end[j - 1] if j else b_start
            r = b_end[j] - 1 - prev
            if j == 0:
                r = r + carry_in
            m.d.comb += [rank[j].eq(r), esc[j].eq(b_lane[j] & (rank[j] == K)), bad[j].eq(b_lane[j] & (rank[j] > K))]
        esc_any = Signal()
        esc_idx = Signal(range(Lc))                     # first escape lane
        esc_end = Signal(bw)                            # its code's end (the payload follows)
        ei, ee = Const(0, bits_for(Lc)), Const(0, bw)
        for j in reversed(range(Lc)):
            ei = Mux(esc[j], j, ei)
            ee = Mux(esc[j], b_end[j], ee)
        m.d.comb += [esc_any.eq(Cat(*esc).any()), esc_idx.eq(ei), esc_end.eq(ee)]
        # the 8 payload bits at the escape's end, through an MSB-first shifter (hw/shifter.py: cheaper than >>)
        payload = shift_right(m, b_ext, esc_end, ESCAPE_PAYLOAD_BITS, "b_payload")
        q = Signal(bw + 1)                              # bit after the escape payload
        m.d.comb += q.eq(esc_end + ESCAPE_PAYLOAD_BITS)
        # outcome of the pass (``*_p``: if B accepts it whole)
        same_seg = Signal()                              # A re-parses this segment from r_start
        partial = Signal()                               # stopped at the lane limit (A continues it)
        straddle = Signal()                              # the payload runs into the next segment
        overrun = Signal()                               # ... but the chunk ends with this segment
        overrun_p = esc_any & (q > S) & b_chunk_last
        n_codes = Signal(range(Lc + 1))
        m.d.comb += n_codes.eq(Mux(esc_any, Mux(overrun_p, esc_idx, esc_idx + 1), b_count))
        whole = Signal()                                 # B writes the whole pass (always without partial_writes)
        k_part = Signal(range(Lc + 1))                   # codes a partial write takes
        if self.partial_writes:
            # Room-limited partial write: when the registered bound says the pass may not fit, B writes the
            # codes that fit in the free entries, up to (not including) an escape (its payload and the replay
            # after it stay with a whole pass) and never END (the pass re-parsed after the last code written
            # ends the chunk). Whole or partial is decided from registers (fill, codes found, FIFO fill) and
            # the first lane's escape flag only, so A's fire stays off the rank / escape logic.
            free = Signal(range(D + 1))
            m.d.comb += free.eq(D - fill)
            k_room = Mux(free < b_count, free, b_count)
            m.d.comb += k_part.eq(Mux(esc_any & (esc_idx < k_room), esc_idx, k_room))
            # Only while the ring runs low (fill < 2 P: about two beats left): a partial write costs A a
            # replay cycle, so with a fuller ring B holds instead, as without partial writes (partial writes
            # at any fill thrash: each leaves the ring full and A one pass behind; measured on the SmolLM2
            # sample, decoder_c1v2_l8_v4 draft keep 1.0, v1.0 streams: 7.894 values/cycle at any fill,
            # 7.914 below 2 P, 7.901 below 2 P + 4). The last code written is never the pass's last (free <
            # codes found), so it ends before the segment's end and A re-parses inside the same segment.
            m.d.comb += [whole.eq(room), room_part.eq(~room & (free != 0) & (free < b_count) & (fill < 2 * P)
                                                      & ~esc[0])]
            m.d.comb += b_accept.eq(b_valid & (room | room_part))
        else:
            m.d.comb += whole.eq(1)
        acc_whole = b_accept & whole
        part_end = Signal(bw)                            # end of the last code a partial write takes
        pe = Const(0, bw)
        for j in range(Lc):
            pe = Mux(k_part == j + 1, b_end[j], pe)
        m.d.comb += part_end.eq(pe)
        m.d.comb += [
            same_seg.eq(acc_whole & esc_any & (q < S)),
            partial.eq(acc_whole & ~esc_any & b_more),
            straddle.eq(acc_whole & esc_any & (q > S) & ~b_chunk_last),
            overrun.eq(acc_whole & overrun_p),
            # an escape always redirects A when A may already be parsing the wrong bits: the same segment
            # after the payload, the next segment after a straddling payload, or (a lane-limited pass whose
            # escape payload runs to the segment's end) the next segment from bit 0; a partial write sends A
            # back to the bit after its last code
            replay.eq(same_seg | straddle | (acc_whole & esc_any & b_more) | (b_accept & room_part)),
        ]
        done = Signal()                                   # the segment is finished
        m.d.comb += done.eq(acc_whole & ~same_seg & ~partial)
        m.d.comb += [r_pos.eq(Mux(same_seg | room_part, b_pos, b_pos + 1)),
                     r_start.eq(Mux(room_part, part_end, Mux(same_seg, q, Mux(straddle, q - S, 0))))]
        content = Signal()
        m.d.comb += content.eq(wcontent | (n_codes != 0) | (b_start != 0))
        end_now = Signal()
        m.d.comb += end_now.eq(done & b_chunk_last)
        carry_next = Signal(range(CARRY_MAX + 1))
        run = Mux(b_count != 0, S - b_consumed, carry_in + S - b_start)
        m.d.comb += carry_next.eq(Mux(esc_any, 0, Mux(run > CARRY_MAX, CARRY_MAX, run)))
        end_entry = Signal(entry_layout)
        m.d.comb += [end_entry.kind.eq(Kind.END) if not self.compact_entries else end_entry.end.eq(1),
                     end_entry.val.eq(Cat(overrun | (~content & ~chunk_first), (carry_next > K) & ~esc_any))]
        items = []
        for j in range(Lc + 1):
            e = Signal(entry_layout, name=f"b_item{j}")
            if j < Lc:
                code = Signal(entry_layout, name=f"b_code{j}")
                cval = rank[j][:4]
                if self.pair_flags:                  # the group's pair bit (q < Q <= 15 for a CODE)
                    cval = Cat(cval, self.pairs.bit_select(rank[j][:4], 1))
                if self.compact_entries:           # CODE: the run; ESC / BAD: flags of an end-kind entry
                    m.d.comb += [code.end.eq(esc[j] | bad[j]),
                                 code.val.eq(Mux(esc[j], COMPACT_ESC, Mux(bad[j], COMPACT_BAD, cval)))]
                else:
                    m.d.comb += [code.kind.eq(Mux(esc[j], Kind.ESC, Mux(bad[j], Kind.BAD, Kind.CODE))),
                                 code.val.eq(Mux(esc[j], 0 if self.esc_fifo else payload, cval))]
                m.d.comb += e.eq(Mux(j < n_codes, code, end_entry))
            else:
                m.d.comb += e.eq(end_entry)
            items.append(e.as_value())
        n_write = Signal(range(Lc + 2))
        m.d.comb += n_write.eq(Mux(acc_whole, n_codes + end_now, Mux(b_accept, k_part, 0)))
        placed = rotate_into(m, items, wp[:exact_log2(D)], D, "wr")
        wmask = rotate_into(m, [(n_write > j) for j in range(Lc + 1)], wp[:exact_log2(D)], D, "we")
        with m.If(~empty):
            for i in range(D):
                with m.If(wmask[i]):
                    m.d.sync += ring[i].eq(placed[i])

        # escape side FIFO: B pushes the written escape's payload (at most one per pass), the consumer pops
        if E:
            efifo = [Signal(ESCAPE_PAYLOAD_BITS, name=f"esc{i}", reset_less=True) for i in range(E)]
            ewp = Signal(exact_log2(E))
            erp = Signal(exact_log2(E))
            push = Signal()
            m.d.comb += push.eq(acc_whole & esc_any & ~overrun)
            ewin = rotate_window(m, efifo, erp, self.esc_pops, "er") if E > 1 else efifo
            for j in range(self.esc_pops):
                m.d.comb += self.esc[j].eq(ewin[j])
            with m.If(empty):
                m.d.sync += [ewp.eq(0), erp.eq(0), efill.eq(0)]
            with m.Else():
                m.d.sync += [ewp.eq(ewp + push), erp.eq(erp + self.esc_pop), efill.eq(efill + push - self.esc_pop)]
                with m.If(push):
                    for i in range(E):
                        with m.If(ewp == i):
                            m.d.sync += efifo[i].eq(payload)

        self._probes = dict(fill=fill, a_fire=a_fire, b_valid=b_valid, b_accept=b_accept, whole=whole,
                            room_part=room_part, replay=replay, b_count=b_count, apos=apos, astart=astart,
                            n_write=n_write, pop=self.pop)     # simulation probes (traces, tests)
        # B state: carry, content flags, chunk count, word ring head
        m.d.comb += freed.eq(done & b_lastw)
        with m.If(empty):
            m.d.sync += [carry.eq(0), wcontent.eq(0), chunk_first.eq(1), chunks_left.eq(0),
                         head.eq(0), nwords.eq(0), wp.eq(0), rp.eq(0), fill.eq(0)]
        with m.Else():
            m.d.sync += [head.eq(head + freed), nwords.eq(nwords - freed + append),
                         wp.eq(wp + n_write), rp.eq(rp + self.pop), fill.eq(fill + n_write - self.pop)]
            with m.If(b_accept):
                with m.If(end_now):
                    m.d.sync += [carry.eq(0), wcontent.eq(0), chunk_first.eq(1), chunks_left.eq(chunks_left - 1)]
                with m.Elif(freed):
                    m.d.sync += [carry.eq(carry_next), wcontent.eq(0), chunk_first.eq(0)]
                with m.Elif(done):
                    m.d.sync += [carry.eq(carry_next), wcontent.eq(content)]
                with m.Else():                           # same segment again: after an escape / lane limit
                    m.d.sync += [carry.eq(0), wcontent.eq(content)]
            with m.If(self.start):
                m.d.sync += chunks_left.eq(self.chunks)
        return m
