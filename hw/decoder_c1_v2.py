"""Cassandra-1 decoder v2: DecoderC1's ports, registers and errors (hw/decoder.py) plus the format 2.0
registers CHUNK / SPEC_PAIRS / VERIF_PAIRS, built as a pipeline without a cross-plane loop
(docs/datasheets/decoder_c1.md). Reads format 2.0 (chunks of A = 2^CHUNK superblocks, books with pair
groups) and, as its case A = 1 without pairs, every v1.0 stream bit for bit.

Stages (every arrow into a stage is a register):

    spec_codes  -> CodePlane (S bits/cycle, runs q into a ring) --\
                                                                    I: issue (pops need [+ END at a chunk
                                                                    |  end]); kept = q != q_P; base b_q and
                                                                    |  suffix flag per lane; kp/pp/sp prefix
                                                                    |  counts; offsets, takes, errors
                                                                    v  (beat register)
    verif_codes -> CodePlane (+ pair flag per code) -------------> J: the beat's verification codes: pair
                                                                    |  flag prefix count -> rest offsets /
                                                                    v  take; each lane's code (J register)
    spec_signman -> BitReader -----------------------------------> F: fetch: fires when every reader the
    verif_rest   -> BitReader -----------------------------------> |  mode uses has the beat's bits
                                                                    |  (registered takes); fields 9 bits wide
                                                                    |  at registered offsets (suffix bit t
                                                                    |  first), book lookups at b_q + t
                                                                    v
                                                                  out (count, sb_end, last): F's logic,
                                                                  no register (``registered_out``)

Loops that close in one cycle (logic depth in generic gates; synthesised: docs/datasheets/decoder_c1.md):
  * code plane A/B (hw/code_plane.py): segment position <- +1 or a replay position (critical: ~40);
  * issue: ring read pointer -> window of L+1 entries (6 mux levels) -> all-codes / END checks -> pop count
    -> read pointer (+ J's move that frees the beat register) (< 40);
  * J: V ring read pointer -> window -> codes present -> pop -> read pointer (+ F's fire) (< 40);
  * fetch: reader bit pointer += registered take when every reader's ``avail`` covers its take (< 40).
The v1 decoder's single loop (window -> zero counter -> book -> prefix counts -> lane fit over all planes
-> reader shift, ~225 levels at L = 8) is gone: the planes only meet in J and F, through registered takes.

Differences from v1 at the ports: the format 2.0 registers; none in the payloads, error bits or framing
(plane words are framed per chunk, one superblock per chunk in v1.0). The latency is longer (START ->
first beat 7 cycles with the words buffered, a word -> its beat about 5) and beats are cut at escapes only
rarely: every beat is full except a partial superblock's last beat and a beat that ends before a third
escaped code (``max_beat_escapes``; v1 cut at every escape; the code plane spends one extra cycle per escape,
absorbed by its spare bandwidth). Errors are raised from registered state, up to four cycles
after v1 would raise them; the beats before the erroneous one are still emitted, the erroneous one and
everything after it are not (as in v1).
"""
from __future__ import annotations

import contextlib

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.utils import bits_for, ceil_log2, exact_log2

from ..errors import ConfigError
from ..golden.config import ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, K_MAX
from .bitreader import BitReader, view_slots
from .code_plane import END_LONG_RUN, END_PAD_ERR, CodePlane, Kind, compact_kind
from .decoder import FIELD_MAX, SB_COUNT_BITS, DecoderC1, Err, Format2Registers, Reg
from .shifter import shift_right
from .tensor_regs import book_groups, pruned_group
from .zero_counter import prefix_counts

GMAX = max(ALLOWED_GROUP_SIZES)
MAX_CHUNK_SUPERBLOCKS = 64          # format 2.0: A = 2^CHUNK in 1..64, A * G <= 1024
SUFFIX_FIELD = FIELD_MAX + 1        # a field with its pair suffix bit in front (9 bits)


def reader_slots(word: int, window: int) -> int:
    """The fewest power-of-two slots holding the view (``view_slots``) and one more word."""
    return 1 << ceil_log2(view_slots(word, window) + 1)


def default_segment(lanes: int, word: int) -> int:
    """Code bits parsed per cycle: 4 per value (SmolLM2's codes average 1.8-2.8 bits, + chunk padding)."""
    return max(16, min(word, 1 << (4 * lanes - 1).bit_length()))


class DecoderC1v2(Format2Registers, DecoderC1):
    """Cassandra-1 decoder v2, ``lanes`` bf16 values per cycle (draft or full mode, set per tensor).

    Parameters
        lanes             L, values per output beat in draft mode (1..32)
        word              IW, bits per input word on every plane (a power of two >= 16; default 8*L)
        verif_lanes       Lv <= L, values per beat in full mode (default L)
        code_word         bits per input word on ``spec_codes`` (default IW; >= the segment: one pass of 4 L bits a
                          cycle, SmolLM2's codes need ~2.7 L)
        verif_word        bits per input word on the two verification planes (default IW; full mode at Lv lanes
                          reads at most 9 Lv rest bits a beat, so Lv = 4 fits a 32-bit port at SmolLM2's rates)
        seg, code_lanes   the speculation code plane: bits parsed per cycle (default 4*L, >= 16) and codes
                          per pass (default 2*L)
        code_depth        its ring entries (default: the smallest the code plane allows; it writes partial passes)
        verif_seg, verif_code_lanes   the same for the verification code plane (default from Lv)
        share_lookups     lanes idle in full mode do the verification-book lookups (default True)
        max_beat_escapes  a beat ends before this many + 1 escaped codes (default 2; None: no limit)
        compact_entries   5-bit speculation ring entries (hw/code_plane.py ``compact_entries``; default True:
                          decoder_c1v2_l8_v4 -32 FFs, the plane -0.7 k GE)
        registered_out    ``out`` is a register written by F (True) or F's logic (default False:
                          the beat waits in the J register; out.valid from registered state only)
        signman_slots, rest_slots  reader word slots (default: the signman view's 3 at L = 8 with 64-bit words;
                          the rest reader's BitReader rule, 4)
        fast_consumed     both code planes' ``fast_consumed`` (hw/code_plane.py; default True: the
                          verification plane's pass end was decoder_c1v2_l8's ECP5 critical path, 22.8 -> 24.3 MHz)
        partial_writes    the speculation plane writes the codes of a pass that fit when the ring lacks room for
                          all of it (hw/code_plane.py; default False: the replay each one costs put a
                          bubble before the last beat of a tensor whose last superblock has 8 codes at L = 4, the
                          liveness counterexample, and holding the pass instead is as fast or faster on SmolLM2)
    """

    def __init__(self, lanes: int = 8, word: int | None = None, verif_lanes: int | None = None,
                 verif_word: int | None = None, code_word: int | None = None, seg: int | None = None, code_lanes: int | None = None, verif_seg: int | None = None,
                 verif_code_lanes: int | None = None, code_depth: int | None = None, verif_word_slots: int | None = None,
                 share_lookups: bool = True, max_beat_escapes: int | None = 2, compact_entries: bool = True,
                 registered_out: bool = False, signman_slots: int | None = None, rest_slots: int | None = None,
                 fast_consumed: bool = True, partial_writes: bool = False):
        word = 8 * lanes if isinstance(lanes, int) and word is None else word
        super().__init__(lanes=lanes, word=word, verif_lanes=verif_lanes, verif_word=word if verif_word is None else verif_word,
                         code_word=code_word)
        if min(word, self.verif_word, self.code_word) < 16:
            raise ConfigError(f"decoder v2 input words must be >= 16 bits, got {word!r} / {self.code_word!r} / "
                              f"{self.verif_word!r}")
        VW, CW = self.verif_word, self.code_word
        Lv = self.verif_lanes
        self.seg = default_segment(lanes, CW) if seg is None else seg
        self.verif_seg = default_segment(Lv, VW) if verif_seg is None else verif_seg
        # codes per pass: 2 per value lane. A segment with more codes takes a second pass right after the
        # first (no bubble: stage A sees the lane limit itself); the zero counter, ring and writer shrink.
        self.code_lanes = min(self.seg, 2 * lanes) if code_lanes is None else code_lanes
        # the verification plane holds codes of pruned values only (at most Lv a beat, 0.5-0.7 Lv at SmolLM2's
        # keep ratios): 1.5 per lane (decoder_c1v2_l8_v4: -1.0 k GE against 2 Lv; full-mode rate unchanged at
        # keep 0.1-0.5, docs/datasheets/decoder_c1.md "Area cuts")
        self.verif_code_lanes = min(self.verif_seg, Lv + Lv // 2) if verif_code_lanes is None else verif_code_lanes
        # validate the code plane parameters here (one clear message), not at elaboration
        # the verification plane of a decoder with Lv < L parses each word over >= 4 passes: 2 word slots
        # (and 2 also when Lv <= L / 2: full mode then needs at most half of the plane's parse rate, and the
        # second word arrives in time; decoder_c1v2_l8_v4: -0.6 k GE, full-mode cycle counts unchanged, 2b)
        if verif_word_slots is None:
            verif_word_slots = 2 if VW // self.verif_seg >= 4 or 2 * Lv <= lanes else 4
        self.verif_word_slots = verif_word_slots
        self.share_lookups = bool(share_lookups)
        # escaped codes per beat (None: up to L); a beat ends before the next one.
        # A limit of L or more never cuts a beat of L codes: it is no limit (the default 2 at L = 2).
        if max_beat_escapes is not None and (not isinstance(max_beat_escapes, int) or max_beat_escapes < 1):
            raise ConfigError(f"max_beat_escapes must be None or a positive integer, got {max_beat_escapes!r}")
        self.max_beat_escapes = None if max_beat_escapes is None or max_beat_escapes >= lanes else max_beat_escapes
        self.compact_entries = bool(compact_entries)
        self.registered_out = bool(registered_out)
        self.fast_consumed = bool(fast_consumed)
        self.partial_writes = bool(partial_writes)
        # reader word slots: the signman reader holds only its view (3 words at L = 8: full rate in
        # draft mode); the rest reader keeps a spare word (its port runs at ~90 % at keep 0.3 in full mode:
        # 3 slots there cost 3.981 -> 3.944 values/cycle, decoder_c1v2_l8_v4)
        self.signman_slots = view_slots(self.word, SUFFIX_FIELD * lanes) if signman_slots is None else signman_slots
        self.rest_slots = (reader_slots(self.verif_word, SUFFIX_FIELD * Lv) if rest_slots is None else rest_slots)
        for what, n, w, win in (("signman", self.signman_slots, self.word, SUFFIX_FIELD * lanes),
                                ("rest", self.rest_slots, self.verif_word, SUFFIX_FIELD * Lv)):
            if not isinstance(n, int) or n < view_slots(w, win):
                raise ConfigError(f"{what} reader slots must be an integer >= {view_slots(w, win)}, got {n!r}")
        # The speculation ring at the smallest depth. With the lane-limited second pass and the registered room
        # bound, holding a pass that does not fit costs nothing (decoder_c1v2_l8_v4 draft keep 1.0: 7.916
        # values/cycle without partial writes, 7.915 with), so partial writes are off (``partial_writes``).
        if code_depth is None:
            code_depth = CodePlane.resolve(CW, self.seg, self.code_lanes, pops=lanes + 1)[3]
        self.code_depth = code_depth
        CodePlane.resolve(CW, self.seg, self.code_lanes, depth=code_depth, pops=lanes + 1)
        CodePlane.resolve(VW, self.verif_seg, self.verif_code_lanes, pops=Lv + 1, word_slots=self.verif_word_slots)

    # format 2.0 registers (CHUNK, SPEC_PAIRS, VERIF_PAIRS): Format2Registers (hw/decoder.py)

    def elaborate(self, platform):
        m = Module()
        L, Lv, IW = self.lanes, self.verif_lanes, self.word
        r, start, clear, busy, err, raise_err = self._control_signals(m)
        full, mm = r["full"], r["m"]

        # ------------------------------------------------------------------ planes
        # escape payloads in a side FIFO of >= (escapes a beat can hold) + 1 entries (the ring entries shrink
        # from 10 to 6 bits)
        esc_entries = 1 << ceil_log2((self.max_beat_escapes or L) + 1)
        S = CodePlane(self.code_word, self.seg, self.code_lanes, depth=self.code_depth, pops=L + 1,
                      esc_fifo=esc_entries, partial_writes=self.partial_writes, compact_entries=self.compact_entries,
                      fast_consumed=self.fast_consumed)
        V = CodePlane(self.verif_word, self.verif_seg, self.verif_code_lanes, pops=Lv + 1, word_slots=self.verif_word_slots,
                      pair_flags=True, fast_consumed=self.fast_consumed)
        # BitReader's own slot rule (window + 3 words of room) is for a consumer that decides its take in the
        # same cycle; here every take is registered a stage ahead, so fewer slots keep the planes at full rate
        # (signman_slots / rest_slots above; measured: docs/datasheets/decoder_c1.md)
        M = BitReader(IW, SUFFIX_FIELD * L, slots=self.signman_slots)
        R = BitReader(self.verif_word, SUFFIX_FIELD * Lv, slots=self.rest_slots)
        m.submodules.spec_codes_cp = S
        m.submodules.verif_codes_cp = V
        m.submodules.spec_signman_rd = M
        m.submodules.verif_rest_rd = R
        self._planes = {"spec_codes": S, "verif_codes": V, "spec_signman": M, "verif_rest": R}   # sim probes
        for port, blk in (("spec_codes", S), ("verif_codes", V), ("spec_signman", M), ("verif_rest", R)):
            wiring.connect(m, wiring.flipped(getattr(self, port)), blk.inp)
        draining = err.any() & ~busy
        for blk, used in ((S, 1), (M, 1), (V, full), (R, full)):
            m.d.comb += [blk.enable.eq(busy & used), blk.drain.eq(draining), blk.flush.eq(raise_err.any())]

        # ------------------------------------------------------------------ tensor constants (registered
        # every cycle from the registers, used two cycles after START: no multiplier or table on a START path)
        g = r["g"]
        nsb = Signal(SB_COUNT_BITS, name="nsb")        # superblocks of the tensor (28 bits)
        nchunks = Signal(SB_COUNT_BITS, name="nchunks")       # chunks of A superblocks: ceil(nsb / A)
        last_n = Signal(range(GMAX + 1), name="last_n")  # values of the last superblock
        last_k = Signal(range(GMAX + 1), name="last_k")  # values it keeps: ceil(k * last_n / G)
        numel = r["numel"]
        ln = Signal(range(GMAX + 1))
        with m.Switch(g):
            for gv in ALLOWED_GROUP_SIZES:
                with m.Case(gv):
                    sh = exact_log2(gv)
                    m.d.sync += nsb.eq((numel + gv - 1) >> sh)
                    m.d.comb += ln.eq(((numel - 1) & (gv - 1)) + 1)
                    m.d.sync += last_k.eq((r["k"] * last_n + gv - 1) >> sh)
        m.d.sync += last_n.eq(ln)
        chunk_a = Signal(range(MAX_CHUNK_SUPERBLOCKS + 1), name="chunk_a")      # A
        m.d.sync += [chunk_a.eq(Const(1, 1) << r["chunk"]),
                     nchunks.eq(((nsb - 1) >> r["chunk"]) + 1)]
        # Book groups (format 2.0 pair codes): Q feeds the code planes (runs of Q are escapes), the base
        # table maps a code's group q to its first symbol, the pair masks tell which codes have a suffix bit.
        spec_q, spec_base, spec_pbad = book_groups(m, r["spec_k"], r["spec_pairs"], "spec")
        verif_q, verif_base, verif_pbad = book_groups(m, r["verif_k"], r["verif_pairs"], "verif")
        # the group of the pruned mark P (15: not in the book), and P in a pair group (a bad mask: CONFIG)
        q_p, p_paired = pruned_group(m, r, spec_base)

        # ------------------------------------------------------------------ control: START -> INIT -> issue
        pre_init = Signal()          # START accepted; the tensor constants settle (last_k, q_p: two cycles)
        init = Signal()
        issuing = Signal()
        sbs_left = Signal(SB_COUNT_BITS)
        sb_left = Signal(range(GMAX + 1))
        sb_k = Signal(range(GMAX + 1))
        kept_cnt = Signal(range(GMAX + 1))
        csb_left = Signal(range(MAX_CHUNK_SUPERBLOCKS + 1))   # superblocks left in the chunk (this one too)
        sb_cend = Signal()                              # this superblock is its chunk's last
        m.d.comb += [S.start.eq(init), S.chunks.eq(nchunks), V.start.eq(init & full), V.chunks.eq(nchunks),
                     S.k.eq(spec_q), V.k.eq(verif_q), V.pairs.eq(r["verif_pairs"])]

        # ------------------------------------------------------------------ I: issue
        lanes_max = Signal(range(L + 1))
        m.d.comb += lanes_max.eq(Mux(full, Lv, L))
        need = Signal(range(L + 1))
        fin = Signal()               # the superblock's last beat
        cend = Signal()              # ... of the chunk's last superblock: its END is popped too
        sw = S.win
        if self.compact_entries:                        # back to kinds (1-2 gate levels, hw/code_plane.compact_kind)
            dec_layout = data.StructLayout({"val": 4, "kind": 2})
            sw = [Signal(dec_layout, name=f"i_ent{j}") for j in range(L + 1)]
            for j in range(L + 1):
                m.d.comb += [sw[j].val.eq(S.win[j].val), sw[j].kind.eq(compact_kind(S.win[j]))]
        scount = S.count
        is_code = [Signal(name=f"i_code{j}") for j in range(L + 1)]
        for j in range(L + 1):
            m.d.comb += is_code[j].eq(sw[j].kind[1] == 0)          # CODE or ESC
        codes_ok = Signal(name="i_codes_ok")                        # entries 0..need-1 are codes
        have = Signal(name="i_have")
        pop_n = Signal(range(L + 2), name="i_pop_n")                # need + cend
        if self.max_beat_escapes is None:
            m.d.comb += [need.eq(Mux(sb_left < lanes_max, sb_left, lanes_max)), fin.eq(sb_left <= lanes_max),
                         cend.eq(fin & sb_cend)]
            ok = Const(1, 1)
            for j in range(L):
                ok = ok & ((j >= need) | is_code[j])
            m.d.comb += [codes_ok.eq(ok), have.eq(scount >= need + cend), pop_n.eq(need + cend)]
        else:
            # A beat holds at most E_b escaped codes: it ends before the superblock's (E_b + 1)-th
            # escaped code in the window (lane c, ``cut``), so the escape FIFO needs only E_b + 1 payloads and
            # each lane selects among E_b of them. The cut is found beside the uncut checks (need_sb), not
            # after them: lane c is in the ring, so a cut beat has its codes when the lanes before c are codes.
            eb = self.max_beat_escapes
            need_sb = Signal(range(L + 1), name="i_need_sb")
            fin_sb = Signal(name="i_fin_sb")
            m.d.comb += [need_sb.eq(Mux(sb_left < lanes_max, sb_left, lanes_max)), fin_sb.eq(sb_left <= lanes_max)]
            escw = Signal(L, name="i_escw")
            for j in range(L):
                m.d.comb += escw[j].eq((sw[j].kind == Kind.ESC) & (j < scount))
            ecnt = prefix_counts(m, escw, eb + 1, "i_ecnt")
            third = Signal(L, name="i_cut_at")                         # one-hot: lane c, or none
            for j in range(L):
                m.d.comb += third[j].eq(escw[j] & (ecnt[j] == eb) & (j < need_sb))
            cut = Signal(name="i_cut")
            cutpos = Signal(range(L), name="i_cut_pos")
            cp = Const(0, bits_for(L - 1))
            for j in range(1, L):
                cp = cp | Mux(third[j], j, 0)
            m.d.comb += [cut.eq(third.any()), cutpos.eq(cp)]
            m.d.comb += [need.eq(Mux(cut, cutpos, need_sb)), fin.eq(fin_sb & ~cut), cend.eq(fin_sb & sb_cend & ~cut)]
            ok_sb, ok_cut, pre = Const(1, 1), Const(0, 1), Const(1, 1)
            for j in range(L):
                ok_sb = ok_sb & ((j >= need_sb) | is_code[j])
                ok_cut = ok_cut | (third[j] & pre)
                pre = pre & is_code[j]
            cend_sb = fin_sb & sb_cend
            m.d.comb += [codes_ok.eq(Mux(cut, ok_cut, ok_sb)), have.eq(cut | (scount >= need_sb + cend_sb)),
                         pop_n.eq(Mux(cut, cutpos, need_sb + cend_sb))]
        # first non-code entry among the needed ones that are already in the ring: an error now
        e_code, e_over = Const(0, 1), Const(0, 1)
        before = Const(1, 1)
        for j in range(L):
            here = before & (j < need) & (j < scount) & ~is_code[j]
            long_end = (sw[j].kind == Kind.END) & ((sw[j].val & END_LONG_RUN) != 0)
            e_code = e_code | (here & ((sw[j].kind == Kind.BAD) | long_end))
            e_over = e_over | (here & (sw[j].kind == Kind.END) & ~long_end)
            before = before & is_code[j]
        tail = Signal(len(sw[0].as_value()), name="i_tail")
        m.d.comb += tail.eq(Array(sw[j].as_value() for j in range(L + 1))[need])
        kb = len(sw[0].val)                             # kind bits follow the value bits
        tail_kind = tail[kb:kb + 2]
        tail_bad = (tail_kind != Kind.END) | (tail[0] if END_PAD_ERR == 1 else 0)
        e_long = Signal()
        m.d.comb += e_long.eq(cend & have & codes_ok & tail_bad)

        kept = Signal(L, name="i_kept")
        pruned = Signal(L, name="i_pruned")
        spair = Signal(L, name="i_spair")               # a kept value whose code has a suffix bit
        base = [Signal(4, name=f"i_base{j}") for j in range(L)]
        for j in range(L):
            is_c = sw[j].kind == Kind.CODE
            q = sw[j].val[:4]
            is_p = is_c & (q == q_p)
            m.d.comb += [kept[j].eq((j < need) & ~is_p), pruned[j].eq((j < need) & is_p),
                         spair[j].eq((j < need) & is_c & r["spec_pairs"].bit_select(q, 1)),
                         base[j].eq(spec_base[q])]
        kp = prefix_counts(m, kept, L, "kp")
        pp = prefix_counts(m, pruned, L, "pp")
        sp = prefix_counts(m, spair, L, "sp")
        # escaped symbols come from the plane's side FIFO, in order: lane j takes entry ep_j
        escl = Signal(L, name="i_esc")
        for j in range(L):
            m.d.comb += escl[j].eq((j < need) & (sw[j].kind == Kind.ESC))
        ep = prefix_counts(m, escl, L, "ep")
        # lane j takes FIFO entry ep_j <= j (one per escaped lane before it): a (j+1)-way select per lane
        def esc_of(j):
            n = min(j + 1, S.esc_pops, self.max_beat_escapes or L)
            return Array(S.esc[i] for i in range(n))[ep[j][:bits_for(n - 1)] if n > 1 else 0]
        kc, pc = kp[L], pp[L]
        e_keep = Signal()
        # at a chunk's end a bad tail is TOO_LONG, which wins; elsewhere the entry after the superblock's codes is
        # the next superblock's first code (or not yet in the ring), which says nothing about this KEEP check
        m.d.comb += e_keep.eq(fin & have & codes_ok & ~(cend & tail_bad) & ((kept_cnt + kc) != sb_k))

        i_err = Signal(4)                    # CODE, OVERRUN, TOO_LONG, KEEP (error_code bits 0..3)
        m.d.comb += i_err.eq(Cat(e_code, e_over & ~e_code, e_long, e_keep))
        fm = Signal(range(FIELD_MAX + 1))
        fr = Signal(range(BF16_MANTISSA_BITS + 1))
        m.d.comb += [fm.eq(mm + 1), fr.eq(BF16_MANTISSA_BITS - mm)]

        # beat register (I -> F)
        b_valid = Signal()
        b_err = Signal(4)
        b_n = Signal(range(L + 1))
        b_fin = Signal()
        b_cend = Signal()
        b_last = Signal()
        b_kept = Signal(L)
        b_esc = Signal(L)
        b_spair = Signal(L)
        eb = self.max_beat_escapes
        if eb is None:
            b_val = [Signal(8, name=f"b_val{j}") for j in range(L)]     # ESC: the symbol; CODE: its group's base
            b_escp = []
        else:
            # with at most eb escaped codes a beat, their symbols travel once per beat (the beat's first eb FIFO
            # entries, in lane order) and each lane holds only its group's base
            b_val = [Signal(4, name=f"b_val{j}") for j in range(L)]
            b_escp = [Signal(8, name=f"b_esc_sym{e}") for e in range(eb)]
        b_pp = [Signal(range(j + 1), name=f"b_pp{j}") for j in range(Lv)]     # pp_j <= j
        # Field offsets, each as wide as its lane can reach: lane j's field follows j fields of at most 9 bits
        # (kept: m + 1 + a suffix bit; pruned rest: 8 + a suffix bit), so its offset is <= 9 j. The narrow
        # registers are what let synthesis drop the window bits a lane never selects (a 72-bit shifter per
        # lane otherwise: -2.2 k GE at L = 8, docs/datasheets/decoder_c1.md "Area cuts").
        b_sm_off = [Signal(range(SUFFIX_FIELD * j + 1), name=f"b_sm_off{j}") for j in range(L)]
        b_rest_off = [Signal(range(FIELD_MAX * j + 1), name=f"b_rest_off{j}") for j in range(Lv)]
        b_sm_take = Signal(range(SUFFIX_FIELD * L + 1))
        b_rest_take = Signal(range(FIELD_MAX * Lv + 1))
        b_pc = Signal(range(Lv + 1))

        j_go = Signal()          # the beat in the beat register moves on to J's register
        adv1 = Signal()
        m.d.comb += adv1.eq(~b_valid | j_go)
        i_go = Signal()          # a good beat leaves I
        i_stop = Signal()        # an error beat leaves I
        # The pop does not wait for the tail / KEEP checks (they need the kept count): a beat that carries an
        # error is raised in F and everything is flushed, so what it popped does not matter.
        early = Signal()
        m.d.comb += early.eq(e_code | e_over)
        m.d.comb += [i_go.eq(issuing & adv1 & ((have & codes_ok) | early)),
                     i_stop.eq(i_go & i_err.any())]
        m.d.comb += [S.pop.eq(Mux(issuing & adv1 & have & codes_ok, pop_n, 0)),     # <= count
                     S.esc_pop.eq(Mux(issuing & adv1 & have & codes_ok, ep[L], 0))]
        with m.If(adv1):
            m.d.sync += b_valid.eq(i_go)
        with m.If(i_go):
            # signman fields: m + 1 bits, + the suffix bit of a pair code (prefix sums of the widths)
            m.d.sync += [b_err.eq(i_err), b_n.eq(need), b_fin.eq(fin), b_cend.eq(cend),
                         b_last.eq(fin & (sbs_left == 1)), b_kept.eq(kept), b_spair.eq(spair),
                         b_sm_take.eq(kc * fm + sp[L]), b_pc.eq(pc),
                         b_rest_take.eq(kc * fr + pc * FIELD_MAX)]
            for e in range(len(b_escp)):
                m.d.sync += b_escp[e].eq(S.esc[e])
            for j in range(L):
                m.d.sync += [b_esc[j].eq(sw[j].kind == Kind.ESC),
                             b_val[j].eq(Mux(sw[j].kind == Kind.ESC, esc_of(j), base[j]) if eb is None else base[j]),
                             b_sm_off[j].eq(kp[j] * fm + sp[j])]
            for j in range(Lv):
                m.d.sync += [b_pp[j].eq(pp[j]), b_rest_off[j].eq(kp[j] * fr + pp[j] * FIELD_MAX)]

        # issue state
        next_last = sbs_left == 2
        m.d.sync += pre_init.eq(0)
        with m.If(pre_init):
            m.d.sync += init.eq(1)
        with m.If(init):
            m.d.sync += [init.eq(0), issuing.eq(1), sbs_left.eq(nsb), kept_cnt.eq(0),
                         sb_left.eq(Mux(nsb == 1, last_n, g)), sb_k.eq(Mux(nsb == 1, last_k, r["k"])),
                         csb_left.eq(chunk_a), sb_cend.eq((chunk_a == 1) | (nsb == 1))]
        with m.If(i_go):
            with m.If(fin):
                m.d.sync += [sbs_left.eq(sbs_left - 1), kept_cnt.eq(0),
                             sb_left.eq(Mux(next_last, last_n, g)), sb_k.eq(Mux(next_last, last_k, r["k"]))]
                with m.If(sb_cend):
                    m.d.sync += [csb_left.eq(chunk_a), sb_cend.eq((chunk_a == 1) | next_last)]
                with m.Else():
                    m.d.sync += [csb_left.eq(csb_left - 1), sb_cend.eq((csb_left == 2) | next_last)]
                with m.If(sbs_left == 1):
                    m.d.sync += issuing.eq(0)
            with m.Else():
                m.d.sync += [sb_left.eq(sb_left - need), kept_cnt.eq(kept_cnt + kc)]
        with m.If(i_stop):
            m.d.sync += issuing.eq(0)

        # ------------------------------------------------------------------ J: verification codes
        # The beat's verification codes are at the front of V's ring. A pair code among them widens its
        # pruned value's rest field by the suffix bit, so J adds the prefix count of their pair flags to the
        # rest offsets and take and registers them with each pruned lane's code (F's takes stay registered:
        # no path from V's read pointer reaches the readers' pointers or F's fire).
        vw = V.win
        vcount = V.count
        v_is_code = [vw[j].kind[1] == 0 for j in range(Lv + 1)]
        vpair = Signal(Lv, name="j_vpair")
        for j in range(Lv):
            m.d.comb += vpair[j].eq((vw[j].kind == Kind.CODE) & vw[j].val[4])
        vp = prefix_counts(m, vpair, Lv, "vp")
        vp_of = Array(vp[j] for j in range(Lv + 1))
        v_have = vcount >= b_pc + b_cend
        vok = Const(1, 1)
        for j in range(Lv):
            vok = vok & ((j >= b_pc) | v_is_code[j])
        v_codes_ok = Signal()
        m.d.comb += v_codes_ok.eq(vok)
        v_in = v_have & v_codes_ok                      # the beat's verification codes are in
        v_code_err, v_over = Const(0, 1), Const(0, 1)
        before = Const(1, 1)
        for j in range(Lv):
            here = before & (j < b_pc) & (j < vcount) & ~v_is_code[j]
            long_end = (vw[j].kind == Kind.END) & ((vw[j].val & END_LONG_RUN) != 0)
            v_code_err = v_code_err | (here & ((vw[j].kind == Kind.BAD) | long_end))
            v_over = v_over | (here & (vw[j].kind == Kind.END) & ~long_end)
            before = before & v_is_code[j]
        vtail = Signal(len(vw[0].as_value()), name="j_vtail")
        m.d.comb += vtail.eq(Array(vw[j].as_value() for j in range(Lv + 1))[b_pc])
        v_long = b_cend & v_have & v_codes_ok & ((vtail[8:10] != Kind.END) | vtail[0])
        j_err = Signal(4, name="j_err")
        with m.If(b_err.any()):
            m.d.comb += j_err.eq(b_err)
        with m.Else():
            m.d.comb += j_err.eq(Mux(full, Cat(v_code_err, v_over & ~v_code_err, v_long, 0), 0))

        # J register (J -> F): the beat, with the rest offsets / take final and each lane's verification code
        c_valid = Signal()
        c_err = Signal(4)
        c_n = Signal(range(L + 1))
        c_fin = Signal()
        c_cend = Signal()
        c_last = Signal()
        c_kept = Signal(L)
        c_esc = Signal(L)
        c_spair = Signal(L)
        c_val = [Signal(len(b_val[j]), name=f"c_val{j}") for j in range(L)]
        c_escp = [Signal(8, name=f"c_esc_sym{e}") for e in range(len(b_escp))]
        c_sm_off = [Signal(range(SUFFIX_FIELD * j + 1), name=f"c_sm_off{j}") for j in range(L)]
        c_rest_off = [Signal(range(SUFFIX_FIELD * j + 1), name=f"c_rest_off{j}") for j in range(Lv)]
        c_ve = [Signal(len(vw[0].as_value()), name=f"c_vent{j}") for j in range(Lv)]
        c_sm_take = Signal(range(SUFFIX_FIELD * L + 1))
        c_rest_take = Signal(range(SUFFIX_FIELD * Lv + 1))

        f_fire = Signal()
        adv2 = Signal()
        m.d.comb += adv2.eq(~c_valid | f_fire)
        m.d.comb += j_go.eq(b_valid & adv2 & (~full | v_in | j_err.any()))
        m.d.comb += V.pop.eq(Mux(j_go & full & v_in, b_pc + b_cend, 0))
        with m.If(adv2):
            m.d.sync += c_valid.eq(j_go)
        with m.If(j_go):
            # pruned lane j is the beat's pp_j-th pruned value, pp_j <= j: (j+1)-way selects
            def vent_of(j):
                return Array(vw[i].as_value() for i in range(j + 1))[b_pp[j]]
            m.d.sync += [c_err.eq(j_err), c_n.eq(b_n), c_fin.eq(b_fin), c_cend.eq(b_cend), c_last.eq(b_last),
                         c_kept.eq(b_kept), c_esc.eq(b_esc), c_spair.eq(b_spair), c_sm_take.eq(b_sm_take),
                         c_rest_take.eq(b_rest_take + vp_of[b_pc])]
            for j in range(L):
                m.d.sync += [c_val[j].eq(b_val[j]), c_sm_off[j].eq(b_sm_off[j])]
            for e in range(len(b_escp)):
                m.d.sync += c_escp[e].eq(b_escp[e])
            for j in range(Lv):
                m.d.sync += [c_rest_off[j].eq(b_rest_off[j] + Array(vp[i] for i in range(j + 1))[b_pp[j]]),
                             c_ve[j].eq(vent_of(j))]

        # ------------------------------------------------------------------ F: fetch
        # registered_out: out is a register F writes when it fires (a beat there waits for ready). Else out is
        # F's logic itself: valid = a beat in F that every reader covers and no error stops (from registers
        # only, never from ready), the payload from the J register and the readers' held bits (stable until
        # ready), and F fires on valid & ready (-134 FFs; the output path is F's ~20 levels)
        out_free = (~self.out.valid | self.out.ready) if self.registered_out else self.out.ready
        m.d.comb += [M.take.eq(c_sm_take), M.skip.eq(c_cend), R.take.eq(c_rest_take), R.skip.eq(c_cend)]
        m_have = (M.avail >= c_sm_take) & (~c_cend | M.end_seen)
        m_over = M.end_seen & (M.avail < c_sm_take)
        m_long = c_cend & M.end_seen & (M.avail >= c_sm_take) & M.skip_err
        r_have = (R.avail >= c_rest_take) & (~c_cend | R.end_seen)
        r_over = R.end_seen & (R.avail < c_rest_take)
        r_long = c_cend & R.end_seen & (R.avail >= c_rest_take) & R.skip_err

        f_err = Signal(4, name="f_err")
        with m.If(c_valid):
            with m.If(c_err.any()):
                m.d.comb += f_err.eq(c_err)
            with m.Else():
                m.d.comb += f_err.eq(Cat(0, m_over | (full & r_over), m_long | (full & r_long), 0))
        f_ready = Signal()
        m.d.comb += f_ready.eq(m_have & (~full | r_have))
        if self.registered_out:
            m.d.comb += f_fire.eq(c_valid & ~f_err.any() & out_free & f_ready)
        else:
            m.d.comb += [self.out.valid.eq(c_valid & ~f_err.any() & f_ready), f_fire.eq(self.out.valid & out_free)]
        m.d.comb += [M.commit.eq(f_fire), R.commit.eq(f_fire & full)]

        # fields, book lookups and assembly (into out). A field is read 9 bits wide at its offset: with a
        # suffix bit, bit 0 is t (the symbol is the group's base + t) and the v1 field follows it.
        if self.registered_out:
            with m.If(out_free):
                m.d.sync += self.out.valid.eq(f_fire)
        odom = m.d.sync if self.registered_out else m.d.comb
        # Book lookups: one 15-entry lookup per lane. A full-mode beat has Lv values, so with L >= 2 Lv lanes
        # Lv..2 Lv-1 are idle then and their lookups serve lanes 0..Lv-1's verification codes: those lanes read
        # a table that the (registered) mode selects, verif_tab in full mode, spec_tab in draft mode (Lv
        # lookups fewer).
        shared = min(Lv, L - Lv) if self.share_lookups else 0
        hi_tab = None
        if shared:
            hi_tab = Array(Signal(9, name=f"f_hi_tab{e}") for e in range(K_MAX))
            for e in range(K_MAX):
                m.d.comb += hi_tab[e].eq(Mux(full, r["verif_tab"][e], r["spec_tab"][e]))
        with (m.If(f_fire) if self.registered_out else contextlib.nullcontext()):
            odom += [self.out.payload.count.eq(c_n), self.out.payload.sb_end.eq(c_fin),
                     self.out.payload.last.eq(c_last)]
            lane_t, lane_sidx, lane_v = [], [], []
            for i in range(L):
                # (MSB-first log shifters that keep only the bits later stages reach: hw/shifter.py)
                sm9 = shift_right(m, M.win, c_sm_off[i], SUFFIX_FIELD, f"f_sm9_{i}")
                smf = Signal(FIELD_MAX, name=f"f_sm{i}")
                m.d.comb += smf.eq(Mux(c_spair[i], sm9[1:], sm9[:FIELD_MAX]) & ~(Const(0xFF, FIELD_MAX) << fm))
                t = Signal(FIELD_MAX, name=f"f_lo{i}")
                m.d.comb += t.eq(smf << fr)
                sidx = Signal(4, name=f"f_sidx{i}")
                m.d.comb += sidx.eq(c_val[i][:4] + (c_spair[i] & sm9[0]))
                lane_t.append(t)
                lane_sidx.append(sidx)
                if i < Lv:
                    ve = c_ve[i]
                    v_pair = (ve[8:10] == Kind.CODE) & ve[4]
                    rf9 = shift_right(m, R.win, c_rest_off[i], SUFFIX_FIELD, f"f_rest9_{i}")
                    width = Mux(c_kept[i], fr, FIELD_MAX)
                    rf = Signal(FIELD_MAX, name=f"f_rest{i}")
                    m.d.comb += rf.eq(Mux(~c_kept[i] & v_pair, rf9[1:], rf9[:FIELD_MAX])
                                      & ~(Const(0xFF, FIELD_MAX) << width))
                    vidx = Signal(4, name=f"f_vidx{i}")
                    m.d.comb += vidx.eq(verif_base[ve[:4]] + (v_pair & rf9[0]))
                    lane_v.append((ve, rf, vidx))
            look = []                                   # lane i's lookup (spec_tab, or hi_tab for shared lanes)
            for i in range(L):
                if i >= Lv and i - Lv < shared:
                    idx = Signal(4, name=f"f_hidx{i}")
                    m.d.comb += idx.eq(Mux(full, lane_v[i - Lv][2], lane_sidx[i]))
                    lk = Signal(9, name=f"f_look{i}")
                    m.d.comb += lk.eq(hi_tab[idx])
                else:
                    lk = r["spec_tab"][lane_sidx[i]]
                look.append(lk)
            for i in range(L):
                t = lane_t[i]
                sym = Signal(9, name=f"f_sym{i}")
                if eb is None:
                    esym = c_val[i]
                else:                                   # lane i's escape is the beat's e-th, e = ESC lanes before i
                    e_i = prefix_counts(m, c_esc[:i], eb, f"f_ei{i}")[i] if i else Const(0, 1)
                    esym = Array(c_escp[e] for e in range(min(i + 1, eb)))[e_i[:bits_for(min(i, eb - 1))] if i and eb > 1 else 0]
                m.d.comb += sym.eq(Mux(c_esc[i], esym, look[i]))
                draft = Cat(t[:BF16_MANTISSA_BITS], sym[:BF16_EXPONENT_BITS], t[BF16_MANTISSA_BITS])
                if i < Lv:
                    ve, rf, vidx = lane_v[i]
                    vexp = Signal(BF16_EXPONENT_BITS, name=f"f_vexp{i}")
                    vlook = look[i + Lv][:BF16_EXPONENT_BITS] if i < shared else r["verif_tab"][vidx]
                    m.d.comb += vexp.eq(Mux(ve[8:10] == Kind.ESC, ve[:8], vlook))
                    exact_pruned = Cat(rf[:BF16_MANTISSA_BITS], vexp, rf[BF16_MANTISSA_BITS])
                    value = Mux(c_kept[i], draft | Mux(full, rf, 0), Mux(full, exact_pruned, 0))
                else:
                    value = Mux(c_kept[i], draft, 0)
                odom += self.out.payload.lanes[i].eq(Mux(i < c_n, value, 0))

        # ------------------------------------------------------------------ control state, errors
        cfg_bad = self._config_error(r)
        no_book = ~r["spec_loaded"] | (r["full"] & ~r["verif_loaded"])
        with m.If(start & ~busy & ~err.any()):
            m.d.comb += [raise_err[Err.CONFIG].eq(cfg_bad), raise_err[Err.NO_BOOK].eq(~cfg_bad & no_book)]
            with m.If(~cfg_bad & ~no_book):
                m.d.sync += [busy.eq(1), pre_init.eq(1)]
        with m.If(busy):
            m.d.comb += raise_err[:4].eq(f_err)
        # a pair mask that does not describe the book (bits at q >= Q, P in a pair): CONFIG, from the
        # registered group tables in the INIT cycle (before anything is parsed)
        with m.If(init & (spec_pbad | p_paired | (full & verif_pbad))):
            m.d.comb += raise_err[Err.CONFIG].eq(1)
        with m.If(f_fire & c_last):
            m.d.sync += busy.eq(0)
        with m.If(raise_err.any()):
            m.d.sync += [err.eq(err | raise_err), busy.eq(0), pre_init.eq(0), init.eq(0), issuing.eq(0),
                         b_valid.eq(0), c_valid.eq(0)]
        with m.Elif(clear & ~busy):
            m.d.sync += err.eq(0)
        return m
