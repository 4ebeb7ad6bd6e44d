"""Cassandra-1 decoder v2: the same ports, registers and errors as DecoderC1 (hw/decoder.py), built as a
pipeline without a cross-plane loop (issue 12; docs/HARDWARE.md section 2b).

Stages (every arrow into a stage is a register):

    spec_codes  -> CodePlane (S bits/cycle, ranks into a ring) --\
                                                                  I: issue (pops need [+ END] codes)
                                                                  |   kept = rank != rank(P); kp/pp prefix
                                                                  |   counts; reader offsets and takes
                                                                  v   (registered beat, errors carried in it)
    spec_signman -> BitReader ---------------------------------> F: fetch: fires when every plane the mode
    verif_rest   -> BitReader ---------------------------------> |  reads has the beat's bits (registered
    verif_codes  -> CodePlane (ranks into a ring) -------------> |  takes); fields at registered offsets,
                                                                  |  book lookups, assembly
                                                                  v
                                                                out register (count, sb_end, last)

Loops that close in one cycle (logic depth in generic gates, estimated):
  * code plane A/B (hw/code_plane.py): segment position <- +1 or a replay position (~15);
  * issue: ring read pointer -> window of L+1 entries (6 mux levels) -> all-codes / END checks -> pop count
    -> read pointer (+ the F-stage fire that frees the beat register) (~30);
  * fetch: reader bit pointer += registered take when every reader's ``avail`` covers its take (~25).
The v1 decoder's single loop (window -> zero counter -> book -> prefix counts -> lane fit over all planes
-> reader shift, ~225 levels at L = 8) is gone: the planes only meet in F, through registered takes.

Differences from v1 at the ports: none in the payloads, registers, error bits or framing. The latency is
longer (START -> first beat about 6 cycles, a word -> its beat about 5) and beats are no longer cut at
escapes: every beat is full except a partial superblock's last beat (the code plane spends one extra cycle
per escape instead, absorbed by its spare bandwidth). Errors are raised from registered state, up to two
cycles after v1 would raise them; the beats before the erroneous one are still emitted, the erroneous one
and everything after it are not (as in v1).
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from ..golden.config import ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, K_MAX, PRUNED
from .bitreader import BitReader
from .code_plane import END_LONG_RUN, END_PAD_ERR, CodePlane, Kind
from .decoder import FIELD_MAX, DecoderC1, Err
from .zero_counter import prefix_counts

GMAX = max(ALLOWED_GROUP_SIZES)


def default_segment(lanes: int, word: int) -> int:
    """Code bits parsed per cycle: 4 per value (SmolLM2's codes average 1.8-2.8 bits, + chunk padding)."""
    return max(16, min(word, 1 << (4 * lanes - 1).bit_length()))


class DecoderC1v2(DecoderC1):
    """Cassandra-1 decoder v2, ``lanes`` bf16 values per cycle (draft or full mode, set per tensor).

    Parameters
        lanes             L, values per output beat in draft mode (1..32)
        word              IW, bits per input word on every plane (a power of two >= 16; default 8*L)
        verif_lanes       Lv <= L, values per beat in full mode (default L)
        seg, code_lanes   the speculation code plane: bits parsed per cycle (default 4*L, >= 16) and codes
                          per pass (default 2*L)
        code_depth        its ring entries (default: twice the smallest the code plane allows)
        verif_seg, verif_code_lanes   the same for the verification code plane (default from Lv)
    """

    def __init__(self, lanes: int = 8, word: int | None = None, verif_lanes: int | None = None,
                 seg: int | None = None, code_lanes: int | None = None, verif_seg: int | None = None,
                 verif_code_lanes: int | None = None, code_depth: int | None = None):
        word = 8 * lanes if isinstance(lanes, int) and word is None else word
        super().__init__(lanes=lanes, word=word, verif_lanes=verif_lanes, verif_word=word)
        if word < 16:
            raise ConfigError(f"decoder v2 input word must be >= 16 bits, got {word!r}")
        Lv = self.verif_lanes
        self.seg = default_segment(lanes, word) if seg is None else seg
        self.verif_seg = default_segment(Lv, word) if verif_seg is None else verif_seg
        # codes per pass: 2 per value lane. A segment with more codes takes a second pass right after the
        # first (no bubble: stage A sees the lane limit itself); the zero counter, ring and writer shrink.
        self.code_lanes = min(self.seg, 2 * lanes) if code_lanes is None else code_lanes
        self.verif_code_lanes = min(self.verif_seg, 2 * Lv) if verif_code_lanes is None else verif_code_lanes
        # validate the code plane parameters here (one clear message), not at elaboration
        # the verification plane of a decoder with Lv < L parses each word over >= 4 passes: 2 word slots
        self.verif_word_slots = 2 if word // self.verif_seg >= 4 else 4
        # The speculation ring at twice the smallest depth: B holds a pass while the ring lacks room for it
        # (a registered bound), and at the smallest depth those holds cost the cycles the plane needs at chunk
        # ends (measured, decoder_c1v2_l8_v4 draft keep 1.0: 7.63 values/cycle at 32 entries, 7.93 at 64).
        if code_depth is None:
            code_depth = 2 * CodePlane.resolve(word, self.seg, self.code_lanes, pops=lanes + 1)[3]
        self.code_depth = code_depth
        CodePlane.resolve(word, self.seg, self.code_lanes, depth=code_depth, pops=lanes + 1)
        CodePlane.resolve(word, self.verif_seg, self.verif_code_lanes, pops=Lv + 1, word_slots=self.verif_word_slots)

    def elaborate(self, platform):
        m = Module()
        L, Lv, IW = self.lanes, self.verif_lanes, self.word
        r, start, clear, busy, err, raise_err = self._control_signals(m)
        full, mm = r["full"], r["m"]

        # ------------------------------------------------------------------ planes
        S = CodePlane(IW, self.seg, self.code_lanes, depth=self.code_depth, pops=L + 1)
        V = CodePlane(IW, self.verif_seg, self.verif_code_lanes, pops=Lv + 1, word_slots=self.verif_word_slots)
        M = BitReader(IW, FIELD_MAX * L)
        R = BitReader(IW, FIELD_MAX * Lv)
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
        # every cycle from the registers, used one cycle after START: no multiplier on a START path)
        g = r["g"]
        nsb = Signal(32, name="nsb")                    # superblocks of the tensor
        last_n = Signal(range(GMAX + 1), name="last_n")  # values of the last superblock
        last_k = Signal(range(GMAX + 1), name="last_k")  # values it keeps: ceil(k * last_n / G)
        rank_p = Signal(4, name="rank_p")               # rank of the pruned mark P (15: not in the book)
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
        rp_v = Const(K_MAX, 4)
        for i in reversed(range(K_MAX)):
            rp_v = Mux((r["spec_tab"][i] == PRUNED) & (i < r["spec_k"]), i, rp_v)
        m.d.sync += rank_p.eq(rp_v)

        # ------------------------------------------------------------------ control: START -> INIT -> issue
        pre_init = Signal()          # START accepted; the tensor constants settle (last_k: two cycles)
        init = Signal()
        issuing = Signal()
        sbs_left = Signal(32)
        sb_left = Signal(range(GMAX + 1))
        sb_k = Signal(range(GMAX + 1))
        kept_cnt = Signal(range(GMAX + 1))
        m.d.comb += [S.start.eq(init), S.chunks.eq(nsb), V.start.eq(init & full), V.chunks.eq(nsb),
                     S.k.eq(r["spec_k"]), V.k.eq(r["verif_k"])]

        # ------------------------------------------------------------------ I: issue
        lanes_max = Signal(range(L + 1))
        m.d.comb += lanes_max.eq(Mux(full, Lv, L))
        need = Signal(range(L + 1))
        fin = Signal()
        m.d.comb += [need.eq(Mux(sb_left < lanes_max, sb_left, lanes_max)), fin.eq(sb_left <= lanes_max)]
        sw = S.win
        scount = S.count
        is_code = [Signal(name=f"i_code{j}") for j in range(L + 1)]
        for j in range(L + 1):
            m.d.comb += is_code[j].eq(sw[j].kind[1] == 0)          # CODE or ESC
        codes_ok = Signal(name="i_codes_ok")                        # entries 0..need-1 are codes
        ok = Const(1, 1)
        for j in range(L):
            ok = ok & ((j >= need) | is_code[j])
        m.d.comb += codes_ok.eq(ok)
        have = Signal(name="i_have")
        m.d.comb += have.eq(scount >= need + fin)
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
        tail_kind = tail[8:10]
        tail_bad = (tail_kind != Kind.END) | (tail[0] if END_PAD_ERR == 1 else 0)
        e_long = Signal()
        m.d.comb += e_long.eq(fin & have & codes_ok & tail_bad)

        kept = Signal(L, name="i_kept")
        pruned = Signal(L, name="i_pruned")
        for j in range(L):
            is_p = (sw[j].kind == Kind.CODE) & (sw[j].val[:4] == rank_p)
            m.d.comb += [kept[j].eq((j < need) & ~is_p), pruned[j].eq((j < need) & is_p)]
        kp = prefix_counts(m, kept, L, "kp")
        pp = prefix_counts(m, pruned, L, "pp")
        kc, pc = kp[L], pp[L]
        e_keep = Signal()
        m.d.comb += e_keep.eq(fin & have & codes_ok & ~tail_bad & ((kept_cnt + kc) != sb_k))

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
        b_last = Signal()
        b_kept = Signal(L)
        b_esc = Signal(L)
        b_val = [Signal(8, name=f"b_val{j}") for j in range(L)]
        b_pp = [Signal(range(Lv + 1), name=f"b_pp{j}") for j in range(Lv)]
        b_sm_off = [Signal(range(FIELD_MAX * L + 1), name=f"b_sm_off{j}") for j in range(L)]
        b_rest_off = [Signal(range(FIELD_MAX * Lv + 1), name=f"b_rest_off{j}") for j in range(Lv)]
        b_sm_take = Signal(range(FIELD_MAX * L + 1))
        b_rest_take = Signal(range(FIELD_MAX * Lv + 1))
        b_pc = Signal(range(Lv + 1))

        f_fire = Signal()
        adv1 = Signal()
        m.d.comb += adv1.eq(~b_valid | f_fire)
        i_go = Signal()          # a good beat leaves I
        i_stop = Signal()        # an error beat leaves I
        # The pop does not wait for the tail / KEEP checks (they need the kept count): a beat that carries an
        # error is raised in F and everything is flushed, so what it popped does not matter.
        early = Signal()
        m.d.comb += early.eq(e_code | e_over)
        m.d.comb += [i_go.eq(issuing & adv1 & ((have & codes_ok) | early)),
                     i_stop.eq(i_go & i_err.any())]
        m.d.comb += S.pop.eq(Mux(issuing & adv1 & have & codes_ok, need + fin, 0))     # <= count
        with m.If(adv1):
            m.d.sync += b_valid.eq(i_go)
        with m.If(i_go):
            m.d.sync += [b_err.eq(i_err), b_n.eq(need), b_fin.eq(fin), b_last.eq(fin & (sbs_left == 1)),
                         b_kept.eq(kept), b_sm_take.eq(kc * fm), b_pc.eq(pc),
                         b_rest_take.eq(kc * fr + pc * FIELD_MAX)]
            for j in range(L):
                m.d.sync += [b_esc[j].eq(sw[j].kind == Kind.ESC), b_val[j].eq(sw[j].val),
                             b_sm_off[j].eq(kp[j] * fm)]
            for j in range(Lv):
                m.d.sync += [b_pp[j].eq(pp[j]), b_rest_off[j].eq(kp[j] * fr + pp[j] * FIELD_MAX)]

        # issue state
        next_last = sbs_left == 2
        m.d.sync += pre_init.eq(0)
        with m.If(pre_init):
            m.d.sync += init.eq(1)
        with m.If(init):
            m.d.sync += [init.eq(0), issuing.eq(1), sbs_left.eq(nsb), kept_cnt.eq(0),
                         sb_left.eq(Mux(nsb == 1, last_n, g)), sb_k.eq(Mux(nsb == 1, last_k, r["k"]))]
        with m.If(i_go):
            with m.If(fin):
                m.d.sync += [sbs_left.eq(sbs_left - 1), kept_cnt.eq(0),
                             sb_left.eq(Mux(next_last, last_n, g)), sb_k.eq(Mux(next_last, last_k, r["k"]))]
                with m.If(sbs_left == 1):
                    m.d.sync += issuing.eq(0)
            with m.Else():
                m.d.sync += [sb_left.eq(sb_left - need), kept_cnt.eq(kept_cnt + kc)]
        with m.If(i_stop):
            m.d.sync += issuing.eq(0)

        # ------------------------------------------------------------------ F: fetch
        out_free = ~self.out.valid | self.out.ready
        m.d.comb += [M.take.eq(b_sm_take), M.skip.eq(b_fin), R.take.eq(b_rest_take), R.skip.eq(b_fin)]
        m_have = (M.avail >= b_sm_take) & (~b_fin | M.end_seen)
        m_over = M.end_seen & (M.avail < b_sm_take)
        m_long = b_fin & M.end_seen & (M.avail >= b_sm_take) & M.skip_err
        r_have = (R.avail >= b_rest_take) & (~b_fin | R.end_seen)
        r_over = R.end_seen & (R.avail < b_rest_take)
        r_long = b_fin & R.end_seen & (R.avail >= b_rest_take) & R.skip_err
        vw = V.win
        vcount = V.count
        v_is_code = [vw[j].kind[1] == 0 for j in range(Lv + 1)]
        v_have = vcount >= b_pc + b_fin
        vok = Const(1, 1)
        for j in range(Lv):
            vok = vok & ((j >= b_pc) | v_is_code[j])
        v_codes_ok = Signal()
        m.d.comb += v_codes_ok.eq(vok)
        v_code_err, v_over = Const(0, 1), Const(0, 1)
        before = Const(1, 1)
        for j in range(Lv):
            here = before & (j < b_pc) & (j < vcount) & ~v_is_code[j]
            long_end = (vw[j].kind == Kind.END) & ((vw[j].val & END_LONG_RUN) != 0)
            v_code_err = v_code_err | (here & ((vw[j].kind == Kind.BAD) | long_end))
            v_over = v_over | (here & (vw[j].kind == Kind.END) & ~long_end)
            before = before & v_is_code[j]
        vtail = Signal(len(vw[0].as_value()), name="f_vtail")
        m.d.comb += vtail.eq(Array(vw[j].as_value() for j in range(Lv + 1))[b_pc])
        v_long = b_fin & v_have & v_codes_ok & ((vtail[8:10] != Kind.END) | vtail[0])

        f_err = Signal(4, name="f_err")
        with m.If(b_valid):
            with m.If(b_err.any()):
                m.d.comb += f_err.eq(b_err)
            with m.Else():
                m.d.comb += f_err.eq(Cat(full & v_code_err,
                                         m_over | (full & (r_over | (v_over & ~v_code_err))),
                                         m_long | (full & (r_long | v_long)),
                                         0))
        f_ready = Signal()
        m.d.comb += f_ready.eq(m_have & (~full | (r_have & v_have & v_codes_ok)))
        m.d.comb += f_fire.eq(b_valid & ~f_err.any() & out_free & f_ready)
        m.d.comb += [M.commit.eq(f_fire), R.commit.eq(f_fire & full),
                     V.pop.eq(Mux(f_fire & full, b_pc + b_fin, 0))]

        # fields, book lookups and assembly (registered into out)
        adv = out_free
        with m.If(adv):
            m.d.sync += self.out.valid.eq(f_fire)
        with m.If(f_fire):
            m.d.sync += [self.out.payload.count.eq(b_n), self.out.payload.sb_end.eq(b_fin),
                         self.out.payload.last.eq(b_last)]
            vents = Array(vw[j].as_value() for j in range(Lv))
            for i in range(L):
                smf = Signal(FIELD_MAX, name=f"f_sm{i}")
                m.d.comb += smf.eq((M.win >> b_sm_off[i]) & ~(Const(0xFF, FIELD_MAX) << fm))
                t = Signal(FIELD_MAX, name=f"f_lo{i}")
                m.d.comb += t.eq(smf << fr)
                sym = Signal(9, name=f"f_sym{i}")
                m.d.comb += sym.eq(Mux(b_esc[i], b_val[i], r["spec_tab"][b_val[i][:4]]))
                draft = Cat(t[:BF16_MANTISSA_BITS], sym[:BF16_EXPONENT_BITS], t[BF16_MANTISSA_BITS])
                if i < Lv:
                    width = Mux(b_kept[i], fr, FIELD_MAX)
                    rf = Signal(FIELD_MAX, name=f"f_rest{i}")
                    m.d.comb += rf.eq((R.win >> b_rest_off[i]) & ~(Const(0xFF, FIELD_MAX) << width))
                    ve = Signal(10, name=f"f_vent{i}")
                    m.d.comb += ve.eq(vents[b_pp[i]])
                    vexp = Signal(BF16_EXPONENT_BITS, name=f"f_vexp{i}")
                    m.d.comb += vexp.eq(Mux(ve[8:10] == Kind.ESC, ve[:8], r["verif_tab"][ve[:4]]))
                    exact_pruned = Cat(rf[:BF16_MANTISSA_BITS], vexp, rf[BF16_MANTISSA_BITS])
                    value = Mux(b_kept[i], draft | Mux(full, rf, 0), Mux(full, exact_pruned, 0))
                else:
                    value = Mux(b_kept[i], draft, 0)
                m.d.sync += self.out.payload.lanes[i].eq(Mux(i < b_n, value, 0))

        # ------------------------------------------------------------------ control state, errors
        cfg_bad = self._config_error(r)
        no_book = ~r["spec_loaded"] | (r["full"] & ~r["verif_loaded"])
        with m.If(start & ~busy & ~err.any()):
            m.d.comb += [raise_err[Err.CONFIG].eq(cfg_bad), raise_err[Err.NO_BOOK].eq(~cfg_bad & no_book)]
            with m.If(~cfg_bad & ~no_book):
                m.d.sync += [busy.eq(1), pre_init.eq(1)]
        with m.If(busy):
            m.d.comb += raise_err[:4].eq(f_err)
        with m.If(f_fire & b_last):
            m.d.sync += busy.eq(0)
        with m.If(raise_err.any()):
            m.d.sync += [err.eq(err | raise_err), busy.eq(0), pre_init.eq(0), init.eq(0), issuing.eq(0),
                         b_valid.eq(0)]
        with m.Elif(clear & ~busy):
            m.d.sync += err.eq(0)
        return m
