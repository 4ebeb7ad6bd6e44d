"""Cassandra-2 decoder v2: the decoupled, pipelined C2 decoder. Reads format 2.0 (docs/FORMAT.md
section 4 and the chunk / pair-group changes), and so format v1 bit for bit (A = 1, no pairs).

docs/datasheets/decoder_c2.md is the contract; the port-level interface (stream ports and payloads, register
map, busy / error / error_code, error bits, sticky error with drain and CLEAR_ERROR, chunk framing) is
v1's (section 2a) plus the format 2.0 registers CHUNK (log2 A) and VERIF_PAIRS (SPEC_PAIRS is ignored:
C2 has no speculation book), so every harness runs it by config name.

Why v1 is slow: its one-cycle loop runs spec.mx fields -> elements -> draft-zero flags -> verif code lanes
and rest prefix sums -> lane fit -> every reader's take. But C2's draft reads no variable-length field:
every superblock's spec.mx bits follow from (G, m, k, n_s), and once the keep bitmap is known the bits of
every beat are known too. So the v2 draft path has no cross-plane loop at all:

  spec_mx --> INGEST (chunk position tracker: where each word lies among the chunk's superblocks; framing
                |      checked here: OVERRUN / TOO_LONG / padding)
                |-- words holding keep-bitmap bits --> BITMAP FIFO (whole words, no shifter)
                '-- every word --> TakeRing F (hw/take_ring.py; skips the bitmaps it does not read)
  ISSUE  (stage I, registered): a beat's kept flags = L bits of the bitmap FIFO's two head words at the
         bitmap pointer, prefix counts, field offsets kp_i*(m+2) (+ the X bytes on a superblock's first
         beat), its take; at a superblock's final beat the skip of the next bitmap (and the chunk's
         padding at a chunk's last superblock); KEEP check.
  FETCH  (stage S2, registered): fires when F's avail covers I.take (a registered compare); cuts the beat's
         lane fields from the 9L bits behind its X bytes (lane i = packed (m+2)-bit field kp_i, per-m
         constant slices) and registers them with the beat's X byte (the block's: one MX block per beat,
         since L divides 32; a first beat loads the X register) and, for full mode, the first Lv lanes'
         draft-zero flags and their prefix counts; advances F by I.take. When a first beat's X bytes and
         fields do not fit the two-word view from F's offset, an X-only step goes first (one cycle, X
         register only).
  CODES  (S2 -> S4, registered; full mode): pops the beat's delta codes from the code ring of
         hw/code_plane.py (which parses verif.codes on its own, ahead of the beats; escaped deltas from its
         escape FIFO): per draft-zero lane the table index b_q of its group (or the escaped delta) and its
         pair flag; the rest-field widths (+1 for a pair group's suffix bit) and their prefix sums (offsets,
         take).
  VERIFY -> OUT: the draft values (FORMAT section 4, one copy of the L drafts); full mode takes the beat's
         rest bits from verif.rest (registered take), picks each pair's symbol S[b_q + t] by its suffix bit t
         (the rest field's first bit) and assembles the exact values. As in the C1 decoder v2,
         ``out`` is this logic, no register (``registered_out=False``): out.valid = S4's beat with its rest
         bits in, no error and no exponent X - delta < 0 (registered state only, never ready); such a beat
         raises CODE the next cycle. Errors found by ingest / issue while a beat waits for ready are held
         until it is taken (a flush never withdraws an offered beat). ``registered_out=True``: an output
         register (a beat with X - delta < 0 registered there but never valid, out_pend & ~neg_r).
Ports (interface v2.1, docs/datasheets/decoder_c2.md): spec_mx at IW bits, verif_codes / verif_rest at VW bits
(``verif_word``; full mode reads at most 9 Lv rest bits and Lv codes a cycle: 64 at L = 8).

Loops that must close in one cycle (logic depth, unit gates, estimated):
  * TakeRing F pointer: avail (from nwords, off) >= I.take -> fire -> off/head/nwords update (~28: two
    adds, the end round-up, the drop clamp);
  * ISSUE: bitmap pointer / superblock counters -> next beat's registers, enabled by fire (~30, the data
    path through the bitmap select, popcount and the offset multiplies ends in a register, not a loop);
  * INGEST: the chunk position (q, superblock in chunk) -> compares against the layout registers (~20);
  * verif.rest reader (RestReader, 2 slots): avail >= S4.rest_take -> commit -> pointer (~30); a slot
    the commit frees takes the next word in the same cycle (verif_rest.ready depends on the commit);
    without the output register the commit is out.valid & ready, so the loop also runs rp -> window ->
    suffix bits -> the X - delta < 0 candidates' select -> out.valid (~40; the book compares S[e] > X
    start at registers, off the loop);
  * verif.codes: hw/code_plane.py (shared with the C1 decoder v2) parses a fixed 16 bits per cycle into
    a ring of codes; its loops are the segment position (~8) and the zero-run carry / replay (~15);
    the beat pops its codes (pointer add).
Errors are raised from registered state or at the stage that would otherwise act on bad data; a beat
that errs is not issued, so no wrong value is ever emitted.
Area and clock of the named configurations: docs/datasheets/decoder_c2.md (generated figures in
docs/report/hardware.md).
"""
from __future__ import annotations

import contextlib

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.utils import bits_for, ceil_log2, exact_log2

from ..errors import ConfigError
from ..golden.config import ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, K_MAX, MX_BLOCK
from .bitreader import BitReader, thermometer
from .decoder import (BF16_BITS, ERROR_BITS, FIELD_MAX, MAX_CHUNK_LOG, SB_COUNT_BITS, DecoderC1, Err, Format2Registers,
                      Reg)
from .decoder_c2 import c2_port_signature, draft_consts, draft_lane, prefix_sums
from .code_plane import END_LONG_RUN, END_PAD_ERR, CodePlane
from .code_plane import Kind as CpKind
from .shifter import shift_right
from .take_ring import TakeRing
from .zero_counter import prefix_counts

G_MAX = max(ALLOWED_GROUP_SIZES)
X_BITS = 8
X_REGION = X_BITS * G_MAX // MX_BLOCK            # 64: the X bytes of a superblock
MXF = BF16_MANTISSA_BITS + 2                     # widest (m+2)-bit spec.mx field: 9
MAX_LANES = 32                                   # a beat lies inside one MX block: L divides 32
SB_BITS_MAX = G_MAX + X_REGION + MXF * G_MAX     # spec.mx bits of one superblock (2,624)
REST_MAX = FIELD_MAX + 1                         # widest verif.rest field: a pair's suffix bit + 8 bits


def _pow2(v) -> bool:
    return isinstance(v, int) and v >= 1 and not v & (v - 1)


class RestReader(BitReader):
    """The verif.rest reader: hw/bitreader.py's BitReader with ``slots`` word slots (default 2) instead of
    the ``window + 3 IW`` its one-cycle consumers need, a slot freed by a commit refilled in the same cycle
    (``refill_on_commit``) and the full-buffer ``skip_err`` (``full_skip_err``). Here the take comes from a
    register (S4) and is at most ``window <= IW`` bits a cycle: when the read position leaves a slot, the freed
    slot takes the next word at once, so the next cycle holds more than IW bits (>= one beat's take), also
    when a chunk's final beat frees both slots (one word then is still >= window): two slots never hold a
    beat back on a stream without idles (measured, section 2c). ``inp.ready`` therefore depends on this
    cycle's ``commit`` (ready may depend on the consumer; valid never does)."""

    def __init__(self, word: int, window: int, slots: int = 2):
        if not _pow2(slots) or slots < 2 or window > word:
            raise ConfigError(f"rest reader needs a power-of-two slot count >= 2 and window <= word, "
                              f"got {slots!r} slots, window {window!r}, word {word!r}")
        super().__init__(word, window, refill_on_commit=True, full_skip_err=True)
        self.slots, self.capacity = slots, slots * word


class DecoderC2v2(Format2Registers, DecoderC1):
    """Cassandra-2 decoder v2, ``lanes`` bf16 values per beat in draft mode, ``verif_lanes`` in full mode.

    Parameters
        lanes        L, draft values per beat: a power of two 1..32 (a beat then lies in one MX block)
        word         IW, bits per input word on every plane: a power of two >= 64 with 9L <= IW + 1 (a
                     beat's fields fit the two-word view from any offset); default max(64, 16 * L)
        verif_lanes  Lv, full-mode values per beat: a power of two <= L (default L / 2, at least 1: full
                     mode reads ~3x the bits per value of the draft, so at one memory bandwidth it needs
                     fewer values per cycle)
        code_seg     S, bits of verif.codes the code plane parses per cycle (hw/code_plane.py; default 16 at
                     Lv <= 4, 32 at Lv >= 8: at Lv = 8 16 bits a cycle held v1.0 full mode at keep 0.3 to 0.897 of
                     nominal on SmolLM2, 32 gives 0.992 at no measurable area)
        code_lanes   Lc, codes one code-plane pass delivers (default min(S, max(5, Lv + 1)), 6 at Lv = 4; a
                     segment with more codes is re-parsed from the next code, one bubble in the code plane only)
        code_depth   entries of the code ring (default: the power of two >= 2 (Lc + 1) + 2 (Lv + 1), so the
                     plane's room check never holds it back while a beat waits; at Lv = 4 16 entries with
                     Lc = 6: -1.25 k GE at L = 8 for 0.991 instead of 0.995 of nominal in v1.0 full mode at
                     keep 0.3 and 0.994 in format 2.0)
        bitmap_words depth of the bitmap word FIFO, 2..16 (default G_MAX / IW + 2: a beat reads two words,
                     and the next superblock's first bitmap word is taken in while the current one is
                     decoded, so superblocks follow without a bubble)
        field_slots  word slots of the spec.mx field ring F (default 3: F holds only the words with X / field
                     bits, the words wholly inside a keep bitmap go to the bitmap FIFO alone; 4 removes the
                     0.4-2 % of extra cycles at A > 1 with m >= 5 and keep >= 0.7, docs/datasheets/decoder_c2.md;
                     bitmap_words = 3 costs cycles at G = 256 with pruning and A > 1)
        code_word_slots  word slots of the code plane (2, 4 or 8; default 2: verif.codes is parsed in 16-bit
                     segments, VW / 16 passes per word, so a second slot hides every word's arrival)
        verif_word   VW, bits per input word on the verification planes verif.codes and verif.rest: a power of
                     two 32..1024 (default max(64, the power of two >= 9 Lv): full mode reads at most 9 Lv
                     rest bits and Lv codes a cycle, the code plane parses 16 bits a cycle; 64 at L = 8)
        registered_out  ``out`` is a register VERIFY writes (True) or VERIFY's logic (default False,
                     as the C1 decoder v2): out.valid = a beat in S4 whose rest bits are in and that no error
                     stops (registered state only, never ready), the payload from S4 and the rest reader's
                     held bits (stable until ready); errors found elsewhere while that beat waits for ready
                     are held (the beat completes first, as with the register), docs/datasheets/decoder_c2.md
    """

    def __init__(self, lanes: int = 8, word: int | None = None, verif_lanes: int | None = None,
                 code_seg: int | None = None, code_lanes: int | None = None, code_depth: int | None = None,
                 bitmap_words: int | None = None, field_slots: int | None = None, code_word_slots: int = 2,
                 verif_word: int | None = None, registered_out: bool = False):
        if not _pow2(lanes) or lanes > MAX_LANES:
            raise ConfigError(f"lanes must be a power of two 1..{MAX_LANES} (a beat lies in one MX block), "
                              f"got {lanes!r}")
        word = max(64, 16 * lanes) if word is None else word
        if not _pow2(word) or word < 64 or word > 1024 or MXF * lanes > word + 1:
            raise ConfigError(f"input word must be a power of two in 64..1024 bits with 9 * lanes <= word + 1 "
                              f"(a beat's fields fit two words from any offset), got {word!r} at {lanes} lanes")
        verif_lanes = max(1, lanes // 2) if verif_lanes is None else verif_lanes
        if not _pow2(verif_lanes) or verif_lanes > lanes:
            raise ConfigError(f"verif_lanes must be a power of two 1..lanes ({lanes}), got {verif_lanes!r}")
        verif_word = max(64, 1 << ceil_log2(REST_MAX * verif_lanes)) if verif_word is None else verif_word
        if not _pow2(verif_word) or not 32 <= verif_word <= 1024:
            raise ConfigError(f"verification word must be a power of two in 32..1024 bits, got {verif_word!r}")
        if code_seg is None:            # the code plane's bits per cycle: Lv codes of ~2-4 bits at keep 0.3
            code_seg = min(verif_word, 16 if verif_lanes <= 4 else 32)
        lv4 = verif_lanes == 4          # L = 8: a 16-entry ring and 6 codes a pass (measured, see above)
        if code_lanes is None:
            code_lanes = min(code_seg, 6 if lv4 else max(5, verif_lanes + 1))
        if code_depth is None:          # room for two passes and two beats' pops: the plane never waits
            code_depth = 16 if lv4 else 1 << ceil_log2(2 * (code_lanes + 1) + 2 * (verif_lanes + 1))
        code_depth = CodePlane.resolve(verif_word, code_seg, code_lanes, code_depth, verif_lanes + 1,
                                       code_word_slots)[3]                                     # or ConfigError
        bitmap_words = G_MAX // word + 2 if bitmap_words is None else bitmap_words
        if not isinstance(bitmap_words, int) or not 2 <= bitmap_words <= 16:
            raise ConfigError(f"bitmap_words must be 2..16 (a beat's kept flags may span two words), "
                              f"got {bitmap_words!r}")
        field_slots = 3 if field_slots is None else field_slots
        if not isinstance(field_slots, int) or not 3 <= field_slots <= 16:
            raise ConfigError(f"field_slots must be 3..16, got {field_slots!r}")
        self.lanes, self.word, self.verif_lanes, self.verif_word = lanes, word, verif_lanes, verif_word
        self.port_words = {"spec_mx": word, "verif_codes": verif_word, "verif_rest": verif_word}
        self.code_seg, self.code_lanes, self.code_depth = code_seg, code_lanes, code_depth
        self.bitmap_words, self.field_slots, self.code_word_slots = bitmap_words, field_slots, code_word_slots
        self.registered_out = bool(registered_out)
        # escape payloads in the code plane's side FIFO (ring entries 10 -> 7 bits): >= Lv + 1 entries, so
        # a beat of Lv escapes (+ END) never waits on a held pass
        self.code_esc_fifo = 1 << ceil_log2(verif_lanes + 1)
        # F window: the X region + L widest fields (at most the two-word view)
        self.fwin = min(2 * word, X_REGION + MXF * lanes)
        self.rest_slots = 2 if REST_MAX * verif_lanes <= verif_word else 0   # RestReader, else BitReader
        wiring.Component.__init__(self, c2_port_signature(lanes, word, verif_word))

    # format 2.0 registers (CHUNK, VERIF_PAIRS; C2 has no speculation book): Format2Registers (hw/decoder.py)
    PAIR_BOOKS = ("verif",)

    # ------------------------------------------------------------------------------------------ layout
    def _layout(self, m, r, n, ks, prune, name):
        """Registered spec.mx layout of a superblock of ``n`` values with ``ks`` kept (one cycle late):
        bitmap bits, X bits, all its bits, and the bits after its bitmap (X + fields)."""
        bm = Signal(range(G_MAX + 1), name=f"{name}_bm_c")
        xb = Signal(range(X_REGION + 1), name=f"{name}_xb_c")
        xf = Signal(range(SB_BITS_MAX + 1), name=f"{name}_xf_c")
        m.d.comb += [bm.eq(Mux(prune, n, 0)), xb.eq(((n + MX_BLOCK - 1) >> 5) << 3),
                     xf.eq(xb + ks * (r["m"] + 2))]
        lay = {"n": Signal(range(G_MAX + 1), name=f"{name}_n"),
               "ks": Signal(range(G_MAX + 1), name=f"{name}_ks"),
               "xb": Signal(range(X_REGION + 1), name=f"{name}_xb"),
               "bm": Signal(range(G_MAX + 1), name=f"{name}_bm"),
               "xf": Signal(range(SB_BITS_MAX + 1), name=f"{name}_xf"),        # X + fields
               "B": Signal(range(SB_BITS_MAX + 1), name=f"{name}_bits"),       # bitmap + X + fields
               "B2": Signal(range(2 * SB_BITS_MAX + 1), name=f"{name}_bits2")}  # two superblocks
        m.d.sync += [lay["n"].eq(n), lay["ks"].eq(ks), lay["xb"].eq(xb), lay["bm"].eq(bm), lay["xf"].eq(xf),
                     lay["B"].eq(bm + xf), lay["B2"].eq((bm + xf) << 1)]
        return lay

    @staticmethod
    def _book_groups(m, k, pairs, name):
        """Groups of the verification book (registered from the registers every cycle): Q = K -
        popcount(pairs), the group bases b_q = q + popcount(pairs[0:q]) (a 15-entry table), and ``bad``: a
        pair bit at q >= Q (the mask does not describe K symbols)."""
        pc = prefix_sums(m, [pairs[i] for i in range(K_MAX)], bits_for(K_MAX), f"{name}_pc")   # (<= 15)
        q = Signal(range(K_MAX + 1), name=f"{name}_q")
        bases = [Signal(4, name=f"{name}_b{i}") for i in range(K_MAX)]
        bad = Signal(name=f"{name}_pairs_bad")
        ok_q = Signal(5, name=f"{name}_q_c")
        m.d.comb += ok_q.eq(k - pc[K_MAX])
        m.d.sync += q.eq(ok_q[:4])
        over = pc[K_MAX] > k
        for i in range(K_MAX):
            m.d.sync += bases[i].eq(i + pc[i])
            over = over | (pairs[i] & (ok_q[:4] <= i))
        m.d.sync += bad.eq(over)
        return q, bases, bad

    # ------------------------------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        L, Lv, IW = self.lanes, self.verif_lanes, self.word
        wb = exact_log2(IW)
        r, start, clear, busy, err, raise_err = self._control_signals(m)
        full = r["full"]
        prune = Signal(name="prune")
        m.d.comb += prune.eq(r["k"] < r["g"])
        fw = Signal(4, name="fw")                                      # m + 2
        m.d.comb += fw.eq(r["m"] + 2)
        bn = Signal(range(L + 1), name="beat_n")                       # values per beat of the mode
        m.d.comb += bn.eq(Mux(full, Lv, L))
        flush = Signal(name="flush")                   # an error abandons the tensor: empty every buffer
        m.d.comb += flush.eq(raise_err.any())
        amask = Signal(MAX_CHUNK_LOG, name="chunk_mask")              # A - 1
        verif_q, verif_base, verif_pbad = self._book_groups(m, r["verif_k"], r["verif_pairs"], "verif")

        # ---- tensor setup: the layouts of a full superblock and of the last one. k_s of the last
        # superblock: k when it is whole (n_last = G, 3 cycles), else by a radix-4 serial multiply (MSB digit
        # first, Horner: no wide multiplier in any one-cycle path; 8 cycles). The tensor's superblock count
        # goes straight into the ingest counter in_rem, which the issue stage and the code plane also read in
        # the first decoding cycle (before ingest counts it down).
        setup = Signal(range(16), name="setup")                        # 0 = idle / done
        lay_ok = Signal(name="lay_ok")
        n_last = Signal(range(G_MAX + 1), name="n_last")
        mul_acc = Signal(2 * bits_for(G_MAX) + 2, name="mul_acc")    # k * (n_last's leading digits)
        ks_last = Signal(range(G_MAX + 1), name="ks_last")
        in_rem = Signal(SB_COUNT_BITS, name="in_rem")             # superblocks not yet finished (this one too)
        lay_full = self._layout(m, r, r["g"], r["k"], prune, "lf")
        lay_full["ks"] = r["k"]                                    # a full superblock keeps k (no copy)
        lay_last = self._layout(m, r, n_last, ks_last, prune, "ll")
        g_mask = Signal(bits_for(G_MAX), name="g_mask")
        m.d.comb += g_mask.eq(r["g"] - 1)
        setup_err = Signal(name="setup_config_err")    # a bad pair mask (checked once registered)
        ndig = -(-bits_for(G_MAX) // 2)                                 # radix-4 digits of n_last (5)
        mul_d = Signal(2, name="mul_digit")
        with m.Switch(setup):
            for st in range(2, 2 + ndig):
                with m.Case(st):
                    m.d.comb += mul_d.eq(Cat(n_last, Const(0, 1)).word_select(ndig + 1 - st, 2))
        with m.If(setup != 0):
            m.d.sync += setup.eq(setup + 1)
            with m.Switch(setup):
                with m.Case(1):
                    m.d.sync += [n_last.eq(((r["numel"] - 1) & g_mask) + 1), mul_acc.eq(0)]
                    with m.Switch(r["g"]):
                        for g in ALLOWED_GROUP_SIZES:
                            with m.Case(g):
                                m.d.sync += in_rem.eq((r["numel"] + g - 1) >> exact_log2(g))
                with m.Case(*range(2, 2 + ndig)):
                    m.d.sync += mul_acc.eq((mul_acc << 2) + r["k"] * mul_d)
                    with m.If(setup == 2):
                        m.d.comb += setup_err.eq(full & verif_pbad)
                        with m.If(n_last == r["g"]):
                            m.d.sync += [ks_last.eq(r["k"]), setup.eq(3 + ndig)]
                with m.Case(2 + ndig):
                    with m.Switch(r["g"]):
                        for g in ALLOWED_GROUP_SIZES:
                            with m.Case(g):
                                m.d.sync += ks_last.eq((mul_acc + g - 1) >> exact_log2(g))
                with m.Case(3 + ndig):          # the layouts are registered from ks_last in this cycle
                    m.d.sync += [setup.eq(0), lay_ok.eq(1)]
        f_init = Signal(name="f_init")                 # F has not skipped the tensor's first bitmap yet
        started = Signal(name="started")                              # decoding (layouts valid)
        m.d.comb += started.eq(busy & lay_ok)
        drain = Signal(name="drain")
        m.d.comb += drain.eq(err.any() & ~busy)

        # ---- spec.mx ingest. A chunk holds its superblocks' [bitmap][X][fields] back to back; the tracker
        # knows where the next word lies among them: q = start of the current superblock relative to the
        # word's first bit (<= 0 when it began in an earlier word), s_in = its index in the chunk. A word
        # in which two or more superblocks start takes one cycle per extra start (only when a superblock
        # has fewer bits than half a word). The chunk ends in the word when its last superblock ends there:
        # the current one, or the next one if that starts in the word too.
        F = TakeRing(IW, self.fwin, slots=self.field_slots, take_max=self.fwin, skip_max=G_MAX)
        m.submodules.spec_mx_ring = F
        nbw = self.bitmap_words
        # no reset on the FIFO words: read only as far as bm_count (reset) says (tests/test_hw_power_up.py)
        bm_slots = Array(Signal(IW, name=f"bm_slot{i}", reset_less=True) for i in range(nbw))
        bm_head = Signal(range(nbw), name="bm_head")
        bm_count = Signal(range(nbw + 1), name="bm_count")
        qw = bits_for(2 * SB_BITS_MAX + IW) + 1
        in_q = Signal(signed(qw), name="in_q")
        in_s = Signal(MAX_CHUNK_LOG, name="in_s")                 # superblock index in the chunk
        in_on = Signal(name="in_on")
        in_cur_last = Signal(name="in_cur_last")
        m.d.comb += in_cur_last.eq(in_rem == 1)
        in_B = Signal(range(SB_BITS_MAX + 1), name="in_B")
        in_bm = Signal(range(G_MAX + 1), name="in_bm")
        m.d.comb += [in_B.eq(Mux(in_cur_last, lay_last["B"], lay_full["B"])),
                     in_bm.eq(Mux(in_cur_last, lay_last["bm"], lay_full["bm"]))]
        has_next = Signal(name="in_has_next")
        has_next2 = Signal(name="in_has_next2")
        m.d.comb += [has_next.eq((in_s != amask) & ~in_cur_last),
                     has_next2.eq(has_next & (in_s + 1 != amask) & (in_rem != 2))]
        qb = Signal(signed(qw), name="in_qb")                     # start of the next superblock
        m.d.comb += qb.eq(in_q + in_B)
        adv1 = Signal(name="in_adv1")                              # the next superblock starts in this word
        adv2 = Signal(name="in_adv2")                              # ... and the one after it too
        final_w = Signal(name="in_final_word")                     # the chunk ends in this word
        nB = Signal(range(SB_BITS_MAX + 1), name="in_next_B")      # bits of the next superblock
        m.d.comb += nB.eq(Mux(in_rem == 2, lay_last["B"], lay_full["B"]))
        qe = Signal(signed(qw), name="in_qe")                     # end of the next superblock
        m.d.comb += qe.eq(qb + nB)
        fin2 = Signal(name="in_final2")                            # the next superblock ends the chunk here
        m.d.comb += [adv1.eq(has_next & (qb <= IW)),
                     adv2.eq(adv1 & has_next2 & (in_q + lay_full["B2"] <= IW)),
                     fin2.eq(adv1 & ~has_next2 & (qe <= IW)),
                     final_w.eq((~has_next & (qb <= IW)) | fin2)]
        to_bm = Signal(name="to_bm")                               # the word holds bitmap bits
        m.d.comb += to_bm.eq(prune & ((in_q + in_bm > 0) | (adv1 & (qb < IW))))
        # A word wholly inside the current superblock's bitmap holds nothing F reads: it goes to the bitmap
        # FIFO only (F's skips leave those words out, see ISSUE), so F's slots hold X / field words only and
        # the next superblock's bitmap words pass while F is still full of the current one's fields.
        to_f = Signal(name="to_f")
        m.d.comb += to_f.eq(~(prune & (in_q <= 0) & (in_q + in_bm >= IW)))
        mx = self.spec_mx
        in_go = Signal(name="in_go")
        err_held = Signal(3, name="err_held")          # errors held while a beat waits for ready (see errors)
        m.d.comb += in_go.eq(in_on & started & ~err_held.any())
        m.d.comb += mx.ready.eq(drain | (in_go & ~adv2 & (~to_bm | (bm_count < nbw)) & (~to_f | F.inp.ready)))
        acc = Signal(name="mx_accept")
        m.d.comb += acc.eq(mx.valid & mx.ready & ~drain)
        pad_from = Signal(range(IW + 1), name="in_pad_from")       # content bits of the chunk's last word
        m.d.comb += pad_from.eq(Mux(has_next, qe, qb))
        pad_bad = Signal(name="in_pad_bad")
        m.d.comb += pad_bad.eq((mx.payload.data & ~thermometer(pad_from, IW)).any())
        in_err_ov = Signal(name="in_err_overrun")
        in_err_tl = Signal(name="in_err_too_long")
        m.d.comb += [in_err_ov.eq(acc & mx.payload.last & ~final_w),
                     in_err_tl.eq(acc & final_w & (~mx.payload.last | pad_bad))]
        m.d.comb += [F.inp.valid.eq(acc & to_f), F.inp.payload.eq(mx.payload.data), F.flush.eq(flush | drain)]
        bm_push = Signal(name="bm_push")
        bm_pop = Signal(range(3), name="bm_pop")
        m.d.comb += bm_push.eq(acc & to_bm)
        bm_wslot = Signal(range(nbw), name="bm_wslot")
        m.d.comb += bm_wslot.eq(Mux(bm_head + bm_count >= nbw, bm_head + bm_count - nbw, bm_head + bm_count))
        with m.If(bm_push):
            m.d.sync += bm_slots[bm_wslot].eq(mx.payload.data)
        bm_nxt = Signal(range(nbw), name="bm_head_next")
        m.d.comb += bm_nxt.eq(Mux(bm_head == nbw - 1, 0, bm_head + 1))
        with m.If(flush | drain | start):
            m.d.sync += [bm_head.eq(0), bm_count.eq(0)]
        with m.Else():
            m.d.sync += bm_count.eq(bm_count + bm_push - bm_pop)
            with m.If(bm_pop == 1):
                m.d.sync += bm_head.eq(bm_nxt)
            with m.Elif(bm_pop == 2):
                m.d.sync += bm_head.eq(Mux(bm_head >= nbw - 2, bm_head + 2 - nbw, bm_head + 2))
        with m.If(in_go & adv2):
            m.d.sync += [in_s.eq(in_s + 1), in_rem.eq(in_rem - 1), in_q.eq(qb)]
        with m.Elif(acc):
            with m.If(final_w):
                m.d.sync += [in_q.eq(0), in_s.eq(0), in_rem.eq(in_rem - 1 - fin2)]
                with m.If(in_rem == 1 + fin2):
                    m.d.sync += in_on.eq(0)
            with m.Elif(adv1):
                m.d.sync += [in_s.eq(in_s + 1), in_rem.eq(in_rem - 1), in_q.eq(qb - IW)]
            with m.Else():
                m.d.sync += in_q.eq(in_q - IW)

        # ---- ISSUE (stage I)
        sb_left = Signal(range(G_MAX + 1), name="is_sb_left")  # values of the superblock not yet issued
        sb_last = Signal(name="is_sb_last")                    # the current superblock is the tensor's last
        nxt_last = Signal(name="is_nxt_last")                  # the next one is
        after = Signal(SB_COUNT_BITS, name="is_after")         # superblocks after the current one
        xpend = Signal(name="is_xpend")                        # the next beat reads the X region
        vpos = Signal(range(G_MAX + 1), name="is_vpos")        # values issued in this superblock
        kacc = Signal(range(G_MAX + 1), name="is_kacc")        # kept values issued in this superblock
        cs = Signal(MAX_CHUNK_LOG, name="is_cs")               # the superblock's index in its chunk
        bptr = Signal(wb, name="is_bptr")                      # bitmap bit of the beat in the FIFO head word
        is_on = Signal(name="is_on")
        sb_init = Signal(name="is_sb_init")                    # START: load the first superblock

        def load_superblock(t):
            """Counters of a superblock that starts with ``t`` superblocks left in the tensor, itself included
            (t a register; the last one has n_last values)."""
            one = t <= 1
            return [sb_left.eq(Mux(one, n_last, r["g"])), sb_last.eq(one), nxt_last.eq(t <= 2),
                    after.eq(t - 1), xpend.eq(1), vpos.eq(0), kacc.eq(0)]

        ls = {k: Mux(sb_last, lay_last[k], lay_full[k]) for k in lay_full}
        n = Signal(range(L + 1), name="is_n")
        m.d.comb += n.eq(Mux(sb_left < bn, sb_left, bn))
        bm_two = Signal(2 * IW, name="bm_two")
        m.d.comb += bm_two.eq(Cat(bm_slots[bm_head], bm_slots[bm_nxt]))
        lane_mask = Signal(L, name="is_lane_mask")
        m.d.comb += lane_mask.eq(thermometer(n, L))
        kept = Signal(L, name="is_kept")
        kept_sel = shift_right(m, bm_two[:IW + L - 1], bptr, L, "is_kept_sel")       # hw/shifter.py
        m.d.comb += kept.eq(Mux(prune, kept_sel, Const((1 << L) - 1, L)) & lane_mask)
        kp = prefix_counts(m, kept, L, "is_kp")
        xbase = Signal(range(X_REGION + 1), name="is_xbase")
        m.d.comb += xbase.eq(Mux(xpend, ls["xb"], 0))
        tnx = Signal(range(MXF * L + 1), name="is_take_fields")
        m.d.comb += tnx.eq(kp[L] * fw)
        take = Signal(range(self.fwin + 1), name="is_take")
        m.d.comb += take.eq(xbase + tnx)
        final = Signal(name="is_final")
        m.d.comb += final.eq(n == sb_left)
        chunk_last = Signal(name="is_chunk_last")              # the superblock is its chunk's last
        m.d.comb += chunk_last.eq((cs == amask) | sb_last)
        kept_now = Signal(range(G_MAX + L + 1), name="is_kept_now")
        m.d.comb += kept_now.eq(kacc + kp[L])
        keep_bad = Signal(name="is_keep_bad")
        m.d.comb += keep_bad.eq((kept_now > ls["ks"]) | (final & (kept_now != ls["ks"])))
        # bitmap FIFO: the beat's flags may run into the next word; the final beat of a superblock pops the
        # words up to the one where the next superblock's bitmap starts (the words in between hold no
        # bitmap bit, so they were never pushed)
        bt = Signal(wb + 1, name="is_bm_end")                  # bptr + n
        m.d.comb += bt.eq(bptr + n)
        straddle = Signal(name="is_bm_straddle")
        m.d.comb += straddle.eq(bt > IW)
        bm_ok = Signal(name="is_bm_ok")
        m.d.comb += bm_ok.eq(~prune | (bm_count > straddle))
        e_hi = Signal(name="is_bm_last_word")                  # the bitmap's last bit is in the second word
        m.d.comb += e_hi.eq(straddle)
        bu = Signal(range(IW + L + SB_BITS_MAX + 1), name="is_next_bitmap")   # next bitmap start
        m.d.comb += bu.eq(bt + lay_full["xf"])
        pops = Signal(range(3), name="is_bm_pops")
        bptr_next = Signal(wb, name="is_bptr_next")
        with m.If(~final):
            m.d.comb += [pops.eq(bt[wb]), bptr_next.eq(bt[:wb])]
        with m.Elif(chunk_last):
            m.d.comb += [pops.eq(e_hi + 1), bptr_next.eq(0)]
        with m.Else():
            m.d.comb += [pops.eq(e_hi + (bu[wb:] != e_hi)), bptr_next.eq(bu[:wb])]

        # F's skip of the next superblock's bitmap: its bits in the words F holds, i.e. without the words
        # wholly inside it (never pushed into F, see INGEST). The bitmap starts at bit p_lo of a word (the
        # next chunk's first word at a chunk end: 0).
        def f_skip(p_lo, bmn, name):
            e = Signal(bits_for(IW - 1 + G_MAX), name=f"{name}_end")           # p_lo + bits
            whole = Signal(range(G_MAX // IW + 1), name=f"{name}_whole")     # words wholly inside the bitmap
            sk = Signal(range(G_MAX + 1), name=name)
            m.d.comb += [e.eq(p_lo + bmn), whole.eq(e[wb:] - ((p_lo != 0) & (e[wb:] != 0))),
                         sk.eq(bmn - (whole << wb))]
            return sk
        f_skip_next = f_skip(Mux(chunk_last, 0, bu[:wb]), Mux(nxt_last, lay_last["bm"], lay_full["bm"]),
                             "is_f_skip")

        I = {"v": Signal(name="I_valid"), "take": Signal(len(take), name="I_take"),
             "tnx": Signal(len(tnx), name="I_take_fields"), "xbits": Signal(len(xbase), name="I_xbits"),
             "slack": Signal(bits_for(2 * IW), name="I_slack"), "xdone": Signal(name="I_xdone"),
             "kept": Signal(L, name="I_kept"), "n": Signal(range(L + 1), name="I_n"),
             "xb": Signal(4, name="I_xb"),
             "xload": Signal(name="I_xload"), "blk": Signal(3, name="I_blk"), "final": Signal(name="I_final"),
             "last": Signal(name="I_last"), "cend": Signal(name="I_chunk_end"),
             "skip": Signal(range(G_MAX + 1), name="I_skip")}
        fire1 = Signal(name="fire1")
        i_free = Signal(name="i_free")
        m.d.comb += i_free.eq(~I["v"] | fire1)
        can_issue = Signal(name="can_issue")
        m.d.comb += can_issue.eq(is_on & started & ~f_init & ~sb_init & bm_ok & i_free & ~err_held.any())
        issue = Signal(name="issue")
        m.d.comb += issue.eq(can_issue & ~keep_bad)
        keep_err = Signal(name="keep_err")
        m.d.comb += keep_err.eq(can_issue & keep_bad)
        with m.If(i_free):
            m.d.sync += I["v"].eq(issue)
        with m.If(issue):
            m.d.sync += [I["take"].eq(take), I["tnx"].eq(tnx), I["xbits"].eq(xbase), I["slack"].eq(2 * IW - take),
                         I["xdone"].eq(0), I["kept"].eq(kept), I["n"].eq(n),
                         I["xload"].eq(xpend), I["blk"].eq(vpos[5:8]), I["final"].eq(final),
                         I["last"].eq(final & sb_last), I["cend"].eq(final & chunk_last),
                         I["skip"].eq(Mux(final & ~sb_last, f_skip_next, 0))]
            m.d.sync += I["xb"].eq(xbase >> 3)
            m.d.sync += [xpend.eq(0), bptr.eq(bptr_next)]
            with m.If(final):
                m.d.sync += load_superblock(after)
                m.d.sync += cs.eq(Mux(chunk_last, 0, cs + 1))
                with m.If(sb_last):
                    m.d.sync += is_on.eq(0)
            with m.Else():
                m.d.sync += [vpos.eq(vpos + n), kacc.eq(kept_now), sb_left.eq(sb_left - n)]
        m.d.comb += bm_pop.eq(Mux(issue & prune, pops, 0))
        with m.If(sb_init & lay_ok):            # in_rem (still the tensor's count) and n_last are set by setup
            m.d.sync += [sb_init.eq(0), cs.eq(0), bptr.eq(0)] + load_superblock(in_rem)

        # ---- FETCH (stage S2): fires when F holds the beat's bits. A first beat whose X bytes and fields
        # would run past F's two-word view (F's offset > 2 IW - take) takes its X bytes alone first.
        # S2 holds the beat's lane fields (FETCH cuts them from F's window, see DRAFT below) and, for full mode,
        # the first Lv lanes' draft-zero flags and their prefix counts (registers as wide as lane i reaches)
        S2 = {"v": Signal(name="S2_valid"), "fld": [Signal(MXF, name=f"S2_field{i}") for i in range(L)],
              "x": Signal(X_BITS, name="S2_x"),
              "kept": Signal(L, name="S2_kept"), "n": Signal(range(L + 1), name="S2_n"),
              "dz": Signal(Lv, name="S2_dz"), "pz": [Signal(range(i + 1), name=f"S2_pz{i}") for i in range(Lv + 1)],
              "final": Signal(name="S2_final"), "last": Signal(name="S2_last"), "cend": Signal(name="S2_chunk_end")}
        s2_free = Signal(name="s2_free")
        over = Signal(name="f_over")                   # X + fields do not fit the view from F's offset
        m.d.comb += over.eq(I["xload"] & ~I["xdone"] & (F.off > I["slack"]))
        eff_take = Signal(len(take), name="f_take")
        m.d.comb += eff_take.eq(Mux(I["xdone"], I["tnx"], I["take"]))
        fire_x = Signal(name="fire_x")                 # the X-only step (loads the X register, no beat)
        m.d.comb += [fire1.eq(I["v"] & s2_free & ~over & (F.avail >= eff_take)),
                     fire_x.eq(I["v"] & over & (F.avail >= I["xbits"]))]
        f_skip0 = Signal(name="f_skip_first")          # START: skip the first superblock's bitmap
        f_skip0_bits = f_skip(Const(0, wb), Mux(r["numel"] <= r["g"], lay_last["bm"], lay_full["bm"]),
                              "f_skip0_bits")
        m.d.comb += f_skip0.eq(f_init & started)
        # (take / end / skip from registers only, F uses them when it fires: the stall chain ends at F.fire)
        m.d.comb += [F.fire.eq(fire1 | fire_x | f_skip0),
                     F.take.eq(Mux(f_init, 0, Mux(over, I["xbits"], eff_take))),
                     F.end.eq(~f_init & ~over & I["cend"]),
                     F.skip.eq(Mux(f_init, f_skip0_bits, Mux(over, 0, I["skip"])))]
        with m.If(f_skip0):
            m.d.sync += f_init.eq(0)
        with m.If(fire_x):
            m.d.sync += I["xdone"].eq(1)
        # X of the beat's MX block (L divides 32: one block per beat): a superblock's first beat reads its X
        # bytes from the window (byte 0: the first beat is in block 0) and loads them into xreg; the later
        # beats (and a first beat after its X-only step) read xreg. Fields: the window behind the X bytes
        # (xb = 0 except on a first beat: one of 9 byte shifts).
        xreg = Signal(X_REGION, name="xreg")
        xnow = Signal(name="f_xload")                  # this fire reads the X bytes from the window
        m.d.comb += xnow.eq(I["xload"] & ~I["xdone"])
        with m.If(fire_x | (fire1 & xnow)):
            m.d.sync += xreg.eq(F.win[:X_REGION])
        fsrc = shift_right(m, F.win, Cat(Const(0, 3), Mux(I["xdone"], 0, I["xb"])), MXF * L, "f_fields")

        # ---- DRAFT (in FETCH, into S2): the lane fields and the full-mode draft-zero flags. The window behind
        # the X bytes is cut into L packed (m+2)-bit fields by per-m constant slices; lane i takes packed field
        # kp_i (kp_i <= i, from I's registered kept flags), a small mux instead of a shifter per lane. A lane is
        # draft-zero iff it is in the beat and not (kept with a non-zero element): its flag needs no draft value.
        packed = []
        for j in range(L):
            pf = Signal(MXF, name=f"packed{j}")
            with m.Switch(r["m"]):
                for mm in range(BF16_MANTISSA_BITS + 1):
                    with m.Case(mm):
                        w = mm + 2
                        m.d.comb += pf.eq(fsrc[j * w:(j + 1) * w])
            packed.append(pf)
        f_kp = prefix_counts(m, I["kept"], L, "f_kp")               # kp_i <= i
        fields = []
        for i in range(L):
            f = Signal(MXF, name=f"fld{i}")
            m.d.comb += f.eq(Array(packed[:i + 1])[f_kp[i][:bits_for(i)]] if i else packed[0])
            fields.append(f)
        emask = Signal(BF16_MANTISSA_BITS + 1, name="f_emask")        # element bits 0..m
        m.d.comb += emask.eq(Cat(Const(1, 1), *[r["m"] >= j for j in range(1, BF16_MANTISSA_BITS + 1)]))
        f_in_beat = thermometer(I["n"], L)
        dz = Signal(Lv, name="dz")                                    # draft-zero lanes (full mode: < Lv)
        m.d.comb += dz.eq(Cat(*[f_in_beat[i] & ~(I["kept"][i] & (fields[i][:BF16_MANTISSA_BITS + 1] & emask).any())
                                for i in range(Lv)]))
        pz = prefix_counts(m, dz, Lv, "pz")
        with m.If(s2_free):
            m.d.sync += S2["v"].eq(fire1)
        with m.If(fire1):
            m.d.sync += [S2["fld"][i].eq(f) for i, f in enumerate(fields)]
            m.d.sync += [S2["dz"].eq(dz)] + [S2["pz"][i].eq(pz[i]) for i in range(Lv + 1)]
            m.d.sync += S2["x"].eq(Mux(xnow, F.win[:X_BITS], xreg.word_select(I["blk"], X_BITS)))
            m.d.sync += [S2[k].eq(I[k]) for k in ("kept", "n", "final", "last", "cend")]
        # CODES reads S2 directly; its rest widths come from the fields there (FORMAT section 4: the cut bits
        # T of a kept non-zero element, 8 for a draft-zero lane, 0 outside the beat)
        in_beat = thermometer(S2["n"], L)
        k3 = draft_consts(m, S2["x"], r["m"], "c_dk")
        c_rw = []
        for i in range(Lv):
            ln = {"field": S2["fld"][i], "kept": S2["kept"][i]}
            draft_lane(m, k3, r["m"], ln, f"c_d{i}")
            rw = Signal(4, name=f"c_rw{i}")
            m.d.comb += rw.eq(Mux(in_beat[i], ln["rest_w"], 0))
            c_rw.append(rw)

        # ---- CODES (S2 -> S4): the beat's delta codes from the code ring (full mode)
        # verif.codes: the shared fixed-rate code plane (hw/code_plane.py) parses the tensor's chunks ahead
        # of the beats into a ring of codes (group q, pair flag) / escapes / END markers; a beat pops its nd
        # codes (+ END on a chunk's last beat).
        CP = CodePlane(word=self.verif_word, seg=self.code_seg, lanes=self.code_lanes, depth=self.code_depth, pops=Lv + 1,
                       word_slots=self.code_word_slots, pair_flags=True, esc_fifo=self.code_esc_fifo)
        m.submodules.verif_codes_plane = CP
        wiring.connect(m, wiring.flipped(self.verif_codes), CP.inp)
        cp_init = Signal(name="cp_init")                # the code plane has not been started for the tensor
        nchunks = Signal(SB_COUNT_BITS, name="nchunks")        # chunks of the tensor (read by CP at its start)
        m.d.comb += nchunks.eq((in_rem + amask) >> r["chunk"])       # the tensor's count at CP's start
        m.d.comb += [CP.k.eq(verif_q), CP.pairs.eq(r["verif_pairs"]), CP.chunks.eq(nchunks),
                     CP.start.eq(cp_init & started & full),
                     CP.enable.eq(started & full), CP.drain.eq(drain), CP.flush.eq(flush)]
        with m.If(started):
            m.d.sync += cp_init.eq(0)

        nd = Signal(range(Lv + 1), name="c_nd")
        m.d.comb += nd.eq(S2["pz"][Lv])
        need = Signal(range(Lv + 2), name="c_need")
        m.d.comb += need.eq(nd + S2["cend"])
        tab = list(r["verif_tab"]) + [Const(0, BF16_EXPONENT_BITS)]
        tab_arr = Array(tab)
        base_arr = Array(verif_base + [Const(0, 4)])
        # escaped deltas come from the code plane's side FIFO, in order: entry j takes FIFO entry ep_j (the
        # escapes among the beat's entries before it); the beat pops ep[nd] of them
        escl = Signal(Lv, name="c_escl")
        m.d.comb += escl.eq(Cat(*[(j < nd) & (CP.win[j].kind == CpKind.ESC) for j in range(Lv)]))
        ep = prefix_counts(m, escl, Lv, "c_ep")
        esc_win = Array(CP.esc[j] for j in range(CP.esc_pops))
        # Exponents: X - S[b_q + t] (t: the pair's suffix bit, read at VERIFY), or X - the escaped delta. This
        # stage keeps, per lane, the table index b_q (or the escaped delta); VERIFY does the one lookup
        # S[b_q + t] per lane and the X - delta < 0 check.
        ent_d, ent_esc, ent_pair = [], [], []
        for j in range(Lv):
            ent = CP.win[j]
            is_esc = ent.kind == CpKind.ESC
            b = Signal(4, name=f"c_base{j}")
            m.d.comb += b.eq(base_arr[ent.val[:4]])
            pay = esc_win[ep[j]] if j else CP.esc[0]
            d = Signal(X_BITS, name=f"c_dsel{j}")                  # escaped delta, or the table index b_q
            pr = Signal(name=f"c_pair{j}")
            m.d.comb += [d.eq(Mux(is_esc, pay, b)), pr.eq((ent.kind == CpKind.CODE) & ent.val[4])]
            ent_d.append(d)
            ent_esc.append(is_esc)
            ent_pair.append(pr)
        # A marker among the first nd entries: END -> OVERRUN (CODE if the zero run before the chunk end is
        # longer than Q), BAD -> CODE; on a chunk's last beat, anything but a clean END in place nd ->
        # TOO_LONG. The beat is judged as soon as a marker shows up among the entries present.
        q_have = Signal(name="c_have")
        q_err_ov = Signal(name="c_overrun")
        q_err_code = Signal(name="c_code")
        q_err_tl = Signal(name="c_too_long")
        clean = Const(1, 1)                      # entries before j are present codes / escapes
        ov_terms, code_terms, tl_terms, seen_terms = [], [], [], []
        for j in range(Lv + 1):
            ent = CP.win[j]
            kind, val = ent.kind, ent.val
            present = CP.count > j
            is_code = (kind == CpKind.CODE) | (kind == CpKind.ESC)
            marker = clean & present & ~is_code
            is_end = kind == CpKind.END
            ov_terms.append((j < nd) & marker & is_end & ~(val & END_LONG_RUN).any())
            code_terms.append((j < nd) & marker & (~is_end | (val & END_LONG_RUN).any()))
            tl_terms.append((j == nd) & S2["cend"] & clean & present & (~is_end | (val & END_PAD_ERR).any()))
            seen_terms.append((j < need) & marker)
            clean = clean & present & is_code
        m.d.comb += [q_err_ov.eq(Cat(*ov_terms).any()), q_err_code.eq(Cat(*code_terms).any()),
                     q_err_tl.eq(Cat(*tl_terms).any()),
                     q_have.eq((CP.count >= need) | Cat(*seen_terms).any())]
        # per lane: its code (entry pz_i), pair flag; rest widths and offsets
        c_lane = []
        widths = []
        for i in range(Lv):
            sel = S2["pz"][i]
            ln = {"pair": Signal(name=f"c_lpair{i}"), "d": Signal(X_BITS, name=f"c_ld{i}"),
                  "esc": Signal(name=f"c_lesc{i}")}
            pick = (lambda v: Array(v[:i + 1])[sel]) if i else (lambda v: v[0])
            m.d.comb += [ln["d"].eq(pick(ent_d)), ln["esc"].eq(pick(ent_esc)),
                         ln["pair"].eq(S2["dz"][i] & pick(ent_pair))]
            c_lane.append(ln)
            widths.append(c_rw[i] + ln["pair"])
        ro = prefix_sums(m, widths, bits_for(REST_MAX * Lv), "ro")

        S4 = {"v": Signal(name="S4_valid"),
              "fld": [Signal(MXF, name=f"S4_field{i}") for i in range(L)], "kept": Signal(L, name="S4_kept"),
              "x": Signal(X_BITS, name="S4_x"),
              "dz": Signal(Lv, name="S4_dz"), "pair": Signal(Lv, name="S4_pair"),
              "d": [Signal(X_BITS, name=f"S4_dsel{i}") for i in range(Lv)], "esc": Signal(Lv, name="S4_esc"),
              "ro": [Signal(range(REST_MAX * i + 1), name=f"S4_ro{i}") for i in range(Lv + 1)],   # lane i <= 9 i
              "n": Signal(range(L + 1), name="S4_n"), "final": Signal(name="S4_final"),
              "last": Signal(name="S4_last"), "cend": Signal(name="S4_chunk_end"),
              "err_ov": Signal(name="S4_err_overrun"), "err_code": Signal(name="S4_err_code"),
              "err_tl": Signal(name="S4_err_too_long")}
        s4_free = Signal(name="s4_free")
        c_fire = Signal(name="c_fire")
        m.d.comb += c_fire.eq(S2["v"] & s4_free & (~full | q_have))
        m.d.comb += s2_free.eq(~S2["v"] | c_fire)
        c_err = Signal(name="c_err")
        m.d.comb += c_err.eq(full & (q_err_ov | q_err_code | q_err_tl))
        m.d.comb += [CP.pop.eq(Mux(c_fire & full & ~c_err, need, 0)),
                     CP.esc_pop.eq(Mux(c_fire & full & ~c_err, ep[Lv], 0))]
        with m.If(s4_free):
            m.d.sync += S4["v"].eq(c_fire)
        with m.If(c_fire):
            m.d.sync += [S4["fld"][i].eq(S2["fld"][i]) for i in range(L)]
            m.d.sync += [S4[k].eq(S2[k]) for k in ("kept", "x", "dz", "n", "final", "last", "cend")]
            m.d.sync += [S4["ro"][i].eq(ro[i]) for i in range(Lv + 1)]
            m.d.sync += S4["pair"].eq(Cat(*[ln["pair"] for ln in c_lane]))
            m.d.sync += [S4["d"][i].eq(c_lane[i]["d"]) for i in range(Lv)]
            m.d.sync += S4["esc"].eq(Cat(*[ln["esc"] for ln in c_lane]))
            m.d.sync += [S4["err_ov"].eq(full & q_err_ov), S4["err_code"].eq(full & q_err_code),
                         S4["err_tl"].eq(full & q_err_tl)]

        # ---- VERIFY -> OUT: full mode takes the rest bits of the beat
        VW = self.verif_word
        R = RestReader(VW, REST_MAX * Lv) if self.rest_slots else BitReader(VW, REST_MAX * Lv)
        m.submodules.verif_rest_rd = R
        wiring.connect(m, wiring.flipped(self.verif_rest), R.inp)
        m.d.comb += [R.enable.eq(started & full), R.drain.eq(drain), R.flush.eq(flush)]
        rest_take = Signal(range(REST_MAX * Lv + 1), name="v_rest_take")
        m.d.comb += rest_take.eq(S4["ro"][Lv])
        rest_have = Signal(name="v_rest_have")
        m.d.comb += rest_have.eq(R.avail >= rest_take)
        rest_ov = Signal(name="v_rest_overrun")
        m.d.comb += rest_ov.eq(R.end_seen & ~rest_have)
        m.d.comb += [R.take.eq(rest_take), R.skip.eq(S4["cend"])]

        # assembly of the exact values (full mode): a pair group's suffix bit t is the rest field's first
        # bit and picks S[b_q + t]; the 8 bits after it are (s << 7) | f
        drafts, v_lanes = [], []
        k4 = draft_consts(m, S4["x"], r["m"], "v_dk")
        for i in range(L):                 # the draft values (FORMAT section 4) from S4's fields
            ln = {"field": S4["fld"][i], "kept": S4["kept"][i]}
            draft_lane(m, k4, r["m"], ln, f"v_d{i}")
            drafts.append(ln["draft"])
            v_lanes.append(ln)
        values = []
        neg_terms = []
        if not self.registered_out:
            # X - delta < 0 off the rest reader's loop: which book entries exceed X (from registers only), so
            # the suffix bit t just selects between a lane's two candidates (entry b_q or b_q + 1)
            gt = Signal(K_MAX + 1, name="v_gt")                    # gt[e] = S[e] > X (e = 15: none)
            m.d.comb += gt.eq(Cat(*[r["verif_tab"][e] > S4["x"] for e in range(K_MAX)], Const(0, 1)))
        for i in range(L):
            if i < Lv:
                rf = Signal(REST_MAX, name=f"rest_f{i}")
                m.d.comb += rf.eq(shift_right(m, R.win, S4["ro"][i], REST_MAX, f"rest_sel{i}"))
                t = Signal(name=f"suffix{i}")
                m.d.comb += t.eq(S4["pair"][i] & rf[0])
                body = Signal(FIELD_MAX, name=f"rest_body{i}")
                m.d.comb += body.eq(Mux(S4["pair"][i], rf[1:], rf[:FIELD_MAX]))
                # a non-draft-zero lane's cut bits: T of a kept lane (its draft lane's rest width), none
                # outside the beat (not kept); a kept zero element is draft-zero and does not use them
                rw = Signal(4, name=f"v_rw{i}")
                m.d.comb += rw.eq(Mux(S4["kept"][i], v_lanes[i]["rest_w"], 0))
                low = Signal(FIELD_MAX, name=f"rest_low{i}")
                m.d.comb += low.eq(rf[:FIELD_MAX] & ~(Const(0xFF, FIELD_MAX) << rw))
                e = Signal(BF16_EXPONENT_BITS, name=f"vexp{i}")
                dl = Signal(X_BITS, name=f"vdelta{i}")                  # S[b_q + t], or the escaped delta
                m.d.comb += [dl.eq(Mux(S4["esc"][i], S4["d"][i], tab_arr[(S4["d"][i][:4] + t)[:4]])),
                             e.eq(S4["x"] - dl)]
                if self.registered_out:
                    neg_terms.append(S4["dz"][i] & (dl > S4["x"]))          # X - delta < 0
                else:
                    b0 = S4["d"][i][:4]
                    n_t = Mux(t, gt.bit_select((b0 + 1)[:4], 1), gt.bit_select(b0, 1))
                    neg_terms.append(S4["dz"][i] & Mux(S4["esc"][i], S4["d"][i] > S4["x"], n_t))
                fullv = Signal(BF16_BITS, name=f"full{i}")
                m.d.comb += fullv.eq(Mux(S4["dz"][i], Cat(body[:BF16_MANTISSA_BITS], e, body[BF16_MANTISSA_BITS]),
                                         drafts[i] | low))
                values.append(Mux(full, fullv, drafts[i]))
            else:
                values.append(drafts[i])
        neg = Signal(name="v_neg")                             # some exponent of the beat is < 0 (CODE)
        m.d.comb += neg.eq(full & Cat(*neg_terms).any())

        v_ready = Signal(name="v_ready")                       # the beat's rest bits are in
        m.d.comb += v_ready.eq(~full | ((rest_have | rest_ov)
                                        & ~(S4["cend"] & rest_have & ~R.skip_ok & ~R.skip_err)))
        # X - delta < 0 (CODE) depends on a pair's suffix bit, read from verif.rest in this stage.
        # registered_out: kept out of the rest reader's loop (rp -> window -> suffix -> lookup -> compare ->
        # commit -> rp): the beat fires without it, the check is registered with the beat (neg_r), and a beat
        # with a negative exponent never shows: out.valid = out_pend & ~neg_r (both set by the same fire, so
        # valid never rises for it), no beat fires behind it, and CODE is raised from neg_r the next cycle.
        # Else out is this stage's logic: out.valid = S4's beat with its rest bits in, no error
        # and no negative exponent (from registers only: S4, the rest reader's slots, the book), a beat with
        # a negative exponent is never valid and raises CODE (registered, v_err_r); VERIFY fires on
        # valid & ready (the loop rp -> ... -> neg -> valid -> commit -> rp closes in one cycle).
        v_err = Signal(ERROR_BITS, name="v_err")
        v_bad = Signal(name="v_bad")                           # the beat errs (no fire); neg-free
        with m.If(S4["v"] & full & v_ready):
            ov = S4["err_ov"] | rest_ov
            tl = ~ov & ~S4["err_code"] & (S4["err_tl"] | (S4["cend"] & R.skip_err))
            code_neg = neg if not self.registered_out else tl & neg    # CODE before TOO_LONG (v1)
            m.d.comb += [
                v_bad.eq(ov | S4["err_code"] | tl),
                v_err[Err.OVERRUN].eq(ov),
                v_err[Err.CODE].eq(~ov & (S4["err_code"] | code_neg)),
                v_err[Err.TOO_LONG].eq(tl & ~neg),
            ]
        fire_v = Signal(name="fire_v")
        if self.registered_out:
            adv = Signal(name="adv")
            m.d.comb += adv.eq(~self.out.valid | self.out.ready)
            neg_r = Signal(name="v_neg_r")
            out_pend = Signal(name="out_pend")                 # the output register holds a fired beat
            m.d.comb += self.out.valid.eq(out_pend & ~neg_r)
            m.d.comb += fire_v.eq(S4["v"] & adv & v_ready & ~v_bad & ~neg_r)
            m.d.sync += neg_r.eq(fire_v & neg)
            with m.If(adv):
                m.d.sync += out_pend.eq(fire_v)
            odom = m.d.sync
            ocond = m.If(fire_v)
        else:
            neg_r = Const(0, 1)
            m.d.comb += [self.out.valid.eq(S4["v"] & v_ready & ~v_bad & ~neg),
                         fire_v.eq(self.out.valid & self.out.ready)]
            odom = m.d.comb
            ocond = contextlib.nullcontext()
        m.d.comb += s4_free.eq(~S4["v"] | fire_v)
        m.d.comb += R.commit.eq(fire_v & full)
        with ocond:
            odom += [self.out.payload.count.eq(S4["n"]), self.out.payload.sb_end.eq(S4["final"]),
                     self.out.payload.last.eq(S4["last"])]
            # lanes at and above the beat's count are 0 already: not kept (no draft), no draft-zero flag and
            # rest width 0 (no rest bits)
            odom += [self.out.payload.lanes[i].eq(values[i]) for i in range(L)]

        # ---- START, errors, busy
        cfg_bad = self._config_error(r)
        no_book = full & ~r["verif_loaded"]
        with m.If(start & ~busy & ~err.any()):
            m.d.comb += [raise_err[Err.CONFIG].eq(cfg_bad), raise_err[Err.NO_BOOK].eq(~cfg_bad & no_book)]
            with m.If(~cfg_bad & ~no_book):
                m.d.sync += [busy.eq(1), setup.eq(1), lay_ok.eq(0), in_on.eq(1), in_q.eq(0), in_s.eq(0),
                             in_rem.eq(0), is_on.eq(1), sb_init.eq(1), f_init.eq(1), cp_init.eq(1),
                             amask.eq((1 << r["chunk"]) - 1)]
        # The issue stage's KEEP check and VERIFY's errors are registered before they are raised (they hold
        # their beat, which is not issued / not fired, so nothing wrong goes out in that cycle): the flush
        # they cause then starts from a register instead of ending the issue and rest-reader loops.
        keep_err_r = Signal(name="keep_err_r")
        v_err_r = Signal(ERROR_BITS, name="v_err_r")
        # Without the output register, the errors found outside VERIFY (ingest framing, KEEP) while a beat is
        # offered and not taken are held (err_held) until it is taken, so a flush never withdraws a valid beat
        # (docs/datasheets/decoder_c1.md: valid is held until ready); meanwhile ingest and issue stop (err_held), as the
        # flush would stop them. VERIFY's own errors and the setup's CONFIG come with no beat offered.
        ext_err = Signal(3, name="ext_err")                    # OVERRUN, TOO_LONG, KEEP from ingest / issue
        m.d.comb += ext_err.eq(Cat(in_err_ov, in_err_tl, keep_err_r) | err_held)
        ext_raise = Signal(3, name="ext_raise")
        if self.registered_out:
            m.d.comb += ext_raise.eq(ext_err)
        else:
            out_stall = Signal(name="out_stall")
            m.d.comb += [out_stall.eq(self.out.valid & ~self.out.ready), ext_raise.eq(Mux(out_stall, 0, ext_err))]
            m.d.sync += err_held.eq(Mux(busy & out_stall & ~flush, ext_err, 0))
        stop = Signal(name="err_stop")                         # an error raised now or held
        m.d.comb += stop.eq(flush | ext_err.any())
        m.d.sync += [keep_err_r.eq(busy & keep_err & ~stop), v_err_r.eq(Mux(busy & ~stop, v_err, 0))]
        with m.If(busy):
            m.d.comb += [
                raise_err[Err.CONFIG].eq(setup_err),
                raise_err[Err.OVERRUN].eq(ext_raise[0] | v_err_r[Err.OVERRUN]),
                raise_err[Err.TOO_LONG].eq(ext_raise[1] | v_err_r[Err.TOO_LONG]),
                raise_err[Err.KEEP].eq(ext_raise[2]),
                raise_err[Err.CODE].eq(v_err_r[Err.CODE] | neg_r),
            ]
        with m.If(fire_v & S4["last"] & ~neg):
            m.d.sync += busy.eq(0)
        with m.If(flush):
            m.d.sync += [I["v"].eq(0), S2["v"].eq(0), S4["v"].eq(0), sb_init.eq(0)]
        with m.If(raise_err.any()):
            m.d.sync += [err.eq(err | raise_err), busy.eq(0), in_on.eq(0), is_on.eq(0), setup.eq(0),
                         lay_ok.eq(0)]
        with m.Elif(clear & ~busy):
            m.d.sync += err.eq(0)
        return m
