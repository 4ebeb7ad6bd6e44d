"""Cassandra-1 decoder v3: one position stage, one set of field extractors and book lookups for both modes; full
mode runs them twice per beat (docs/datasheets/decoder_c1.md).

It reads format 3.0 (golden/escfield.py): every code is ``q`` zeros and a one, the raw
symbol of an escape sits at the front of its value's companion field. Ports, registers and error bits are
those of the C1 decoder interface (hw/decoder.py, docs/datasheets/decoder_c1.md). ``DecoderC1v3Core`` reads
the tensor's registers from a cluster's ``TensorRegisters`` (hw/tensor_regs.py); ``DecoderC1v3`` is one of
each behind the C1 decoder interface.

Stages (every arrow into a stage is a register):

    spec_codes  -> CodeReader SC --> P: the parse loop in ones: take min(need, ones) codes; the reader's
                                     |  (slot, ones used) follow (loop depth: two small adds and a compare)
                                     v  PD: the span, its ones before every byte, the ones used
    verif_codes -> CodeReader VC --> VB: the same, captured (frozen while a decided pass B waits for RK)
                                     v
                                     R: positions of the ones number used - 1 .. used + L - 1 (one select
                                     |  network, PD in pass A, VB in pass B) --> RK
                                     v
                                     D: ranks -> each code's group q; per lane kept, pair, escape, field width
                                     |  and offset --> DF. Pass B's count is decided from counts while RK holds
                                     v  pass A (its pruned count straight from the ranks): VC commits then.
    spec_signman -> BitReader SM -+
    verif_rest   -> BitReader RS -+-> F: one window shifter (SM in pass A, RS in pass B), a FIELD_BITS extractor
                                      per lane and one for an escape field's tail, lookup at base[q] + t, value
                                      assembly -> out

Draft mode: pass A every cycle (L values a cycle). Full mode: R runs A k, B k, A k+1, ...; D and F follow a
cycle apart (L / 2 values a cycle); H holds pass A's draft values for pass B. F extracts a pass in one step when
it holds at most one escape field (16 bits; every other field has at most FIELD_BITS = 9), else in one step per
escape field, each after one more cycle, the values of the earlier steps waiting in H: the window and the lane
extractors are sized for one escape field, not for L.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In
from amaranth.utils import bits_for

from ..errors import ConfigError
from ..golden.config import ALLOWED_GROUP_SIZES, BF16_MANTISSA_BITS, ESCAPE_PAYLOAD_BITS, K_MAX
from .bitreader import BitReader, thermometer, view_slots
from .code_reader import CodeReader, code_ranks, one_positions, popcount, popcounts
from .decoder import DecoderC1, Err
from .decoder_c2 import prefix_sums
from .shifter import shift_right
from .tensor_regs import TENSOR_PARAMS, ClusterCore, TensorRegisters, wrap_cluster_core

GMAX = max(ALLOWED_GROUP_SIZES)
FIELD_BITS = 9           # widest field without an escape: a pruned value's [t][(s << 7) | f]
ESC_FIELD_BITS = ESCAPE_PAYLOAD_BITS + 8   # widest escape field: an escaped pruned value's [e][(s << 7) | f]


def lowest_one(v):
    """The lowest set bit of ``v`` alone (zero when none): ``v & -v`` without a carry chain (a prefix OR)."""
    seen, out = Const(0, 1), []
    for i in range(len(v)):
        out.append(v[i] & ~seen)
        seen = seen | v[i]
    return Cat(*out)


def two_or_more(v, lowest=None):
    """Two or more bits of ``v`` set: ``v`` without its lowest set bit (``lowest``, when it is at hand) is not zero."""
    return (v & ~(lowest_one(v) if lowest is None else lowest)).any()


def onehot_select(mask, values, width: int):
    """``values[i]`` for the one bit ``i`` set in ``mask`` (zero when none): an AND-OR, no priority."""
    out = Const(0, width)
    for i in range(len(mask)):
        out = out | Mux(mask[i], values[i][:width], 0)
    return out


def at_or_after_first(v):
    """Bit i set when some bit j <= i of ``v`` is set (an inclusive prefix OR)."""
    seen, out = Const(0, 1), []
    for i in range(len(v)):
        seen = seen | v[i]
        out.append(seen)
    return Cat(*out)


def sum_equals(x, y, z):
    """``x + y == z`` modulo 2^len(z), without a carry chain: the sum bits x ^ y ^ z must equal the carries
    (x & y) | ((x ^ y) & ~z) moved up one bit (the carry into bit i + 1 when the sum is z)."""
    n = len(z)
    carries = ((x & y) | ((x ^ y) & ~z)) << 1
    return ((x ^ y ^ z) ^ carries)[:n] == 0


def field_window(lanes: int) -> int:
    """Bits F extracts a step's fields from: ``lanes`` fields of ``FIELD_BITS`` with one of them an escape field."""
    return FIELD_BITS * lanes + ESC_FIELD_BITS - FIELD_BITS


def interface(lanes, code_word, word, verif_word) -> dict:
    """The C1 decoder interface parameters of a v3 decoder, checked: lanes 4 or 8, 32-bit or wider code words on
    both code planes (a code reader's span of two words holds a 16-bit code anywhere), verif_rest as wide."""
    if lanes not in (4, 8):
        raise ConfigError(f"decoder v3 lanes must be 4 or 8, got {lanes!r}")
    word = 8 * lanes if word is None else word
    verif_word = code_word if verif_word is None else verif_word
    if code_word != verif_word:     # verif_codes and verif_rest share the verification word width
        raise ConfigError(f"decoder v3 needs code_word == verif_word, got {code_word!r} / {verif_word!r}")
    if not isinstance(code_word, int) or not 32 <= code_word <= 512 or code_word & (code_word - 1):
        raise ConfigError(f"decoder v3 needs code words of a power of two in 32..512 bits (a code reader's span "
                          f"is two words), got {code_word!r}")
    window = 2 * code_word          # the code readers' span
    return dict(lanes=lanes, word=word, window=window, verif_lanes=lanes, verif_word=verif_word,
                verif_window=window, code_word=code_word)


class DecoderC1v3Core(ClusterCore, DecoderC1):
    """Cassandra-1 decoder v3: ``lanes`` values a cycle in draft mode, ``lanes / 2`` in full mode.

    Parameters
        lanes        L, values per beat (4 or 8)
        code_word    bits per word on both code planes (default 32)
        word         bits per word on ``spec_signman`` (default 8 L)
        verif_word   bits per word on ``verif_codes`` and ``verif_rest`` (default ``code_word``; full mode reads
                     them every other cycle); equal to ``code_word``
    """

    # an error clears every stage in the cycle it is set (the stop list of ``_sticky_errors``): no beat is
    # pending while error (hw/formal_props.py asserts it)
    ERROR_CLEARS_BEATS = True

    def __init__(self, lanes: int = 8, code_word: int = 32, word: int | None = None, verif_word: int | None = None):
        super().__init__(**interface(lanes, code_word, word, verif_word), extra_ports={"params": In(TENSOR_PARAMS)})
        self.field_window = field_window(lanes)

    def elaborate(self, platform):
        m = Module()
        L, W, FW = self.lanes, self.window, self.field_window
        p = self.params
        start, clear, busy, err, raise_err, numel = self._instance_control(m)
        # An error the datapath finds (raise_err) is registered in `fault` and takes effect a cycle later: the
        # pipeline halts for that cycle (nothing moves, nothing is emitted), then every stage is cleared and
        # the readers flushed (START's own errors are set at once, below).
        fault = Signal(len(err), name="fault")
        halt = Signal(name="halt")
        m.d.comb += halt.eq(fault.any())
        full, mm = p.full, p.m

        # ------------------------------------------------------------------ planes
        SC = CodeReader(self.code_word, L)
        VC = CodeReader(self.code_word, L)
        # the field readers are read in alternate cycles (pass A: SM, pass B: RS): one window shifter (in F)
        # full_skip_err: with every slot full and the chunk's last word not in, a beat that ends the chunk
        # raises TOO_LONG instead of waiting for a word the full reader cannot take
        SM = BitReader(self.word, FW, slots=view_slots(self.word, FW), shift_outside=True, full_skip_err=True)
        RS = BitReader(self.verif_word, FW, slots=view_slots(self.verif_word, FW), shift_outside=True,
                       full_skip_err=True)
        m.submodules.spec_codes_rd = SC
        m.submodules.verif_codes_rd = VC
        m.submodules.spec_signman_rd = SM
        m.submodules.verif_rest_rd = RS
        for port, blk in (("spec_codes", SC), ("verif_codes", VC), ("spec_signman", SM), ("verif_rest", RS)):
            wiring.connect(m, wiring.flipped(getattr(self, port)), blk.inp)
        draining = err.any() & ~busy
        for blk, used in ((SC, 1), (SM, 1), (VC, full), (RS, full)):
            m.d.comb += [blk.enable.eq(busy & used), blk.drain.eq(draining), blk.flush.eq(halt)]

        # ------------------------------------------------------------------ tensor constants
        # (shared by the cluster: hw/tensor_regs.py)
        spec_q, verif_q, q_p, chunk_a = p.spec_q, p.verif_q, p.q_p, p.chunk_sbs

        pre_init, init, running = Signal(name="pre_init"), Signal(name="init"), Signal(name="p_running")
        after = Signal(32, name="p_after")              # values of the tensor after the current superblock
        sb_left = Signal(range(GMAX + 1), name="p_sb_left")
        csb_left = Signal(range(65), name="p_csb_left")  # superblocks left in the chunk, this one too

        # ------------------------------------------------------------------ P: the speculation parse loop
        need = Signal(range(L + 1), name="p_need")
        m.d.comb += need.eq(Mux(sb_left < L, sb_left, L))
        cnt = Signal(range(L + 1), name="p_cnt")         # codes the beat takes: a count of ones
        m.d.comb += cnt.eq(Mux(SC.ones < need, SC.ones, need))
        p_fin = Signal(name="p_fin")                    # the beat ends its superblock
        p_last = Signal(name="p_last")
        p_cend = Signal(name="p_cend")                  # ... and its chunk
        m.d.comb += [p_fin.eq(cnt == sb_left), p_last.eq(p_fin & (after == 0)),
                     p_cend.eq(p_fin & ((csb_left == 1) | p_last))]
        p_whole = SC.whole
        # An error P finds waits in p_fault until the beats before it have left (PD, BJ, DF empty): those are
        # emitted, the beat P could not parse (or that would end its chunk with content left) is not.
        p_fault = Signal(3, name="p_fault")              # CODE, OVERRUN, TOO_LONG
        p_live = Signal(name="p_live")
        m.d.comb += p_live.eq(running & ~p_fault.any() & ~halt)
        p_ok = Signal(name="p_ok")
        m.d.comb += p_ok.eq(p_live & (cnt != 0) & ((cnt == need) | p_whole) & (~p_cend | SC.skip_ok | SC.skip_err))
        pd_free = Signal()
        p_try = Signal(name="p_try")
        p_long = Signal(name="p_long")                  # the beat would end its chunk with content left
        p_go = Signal(name="p_go")
        m.d.comb += [p_try.eq(p_ok & pd_free), p_long.eq(p_cend & SC.skip_err), p_go.eq(p_try & ~p_long),
                     SC.take.eq(cnt), SC.skip.eq(p_cend), SC.commit.eq(p_go)]
        p_err = Signal(3, name="p_err")
        p_none = Signal(name="p_none")                  # no complete code left in the span
        m.d.comb += [p_none.eq(p_live & (cnt == 0)),
                     p_err.eq(Cat(p_none & SC.whole & ~SC.end_in_span, p_none & SC.end_in_span, p_try & p_long))]
        with m.If(p_err.any()):
            m.d.sync += p_fault.eq(p_err)
        pd_valid = Signal(name="pd_valid")
        pd_span = Signal(W, name="pd_span")
        pd_pre = Signal(len(SC.span_prefix), name="pd_pre")
        pd_cnt = Signal(range(L + 1), name="pd_cnt")
        pd_fin, pd_cend, pd_last = Signal(name="pd_fin"), Signal(name="pd_cend"), Signal(name="pd_last")
        # The loop closes on sb_left alone; the next superblock's length and what follows it come from
        # registers (after, g), never from the beat's count.
        g = p.g
        next_sb = Signal(range(GMAX + 1), name="p_next_sb")
        m.d.comb += next_sb.eq(Mux(after < g, after, g))
        with m.If(init):
            first_sb = Mux(numel < g, numel, g)
            m.d.sync += [after.eq(numel - first_sb), sb_left.eq(first_sb),
                         csb_left.eq(chunk_a), running.eq(1)]
        with m.If(p_go):
            m.d.sync += [pd_span.eq(SC.span), pd_pre.eq(SC.span_prefix),
                         pd_cnt.eq(cnt), pd_fin.eq(p_fin), pd_cend.eq(p_cend),
                         pd_last.eq(p_last)]
            with m.If(p_fin):
                m.d.sync += [sb_left.eq(next_sb), after.eq(after - next_sb),
                             csb_left.eq(Mux(csb_left == 1, chunk_a, csb_left - 1))]
            with m.Else():
                m.d.sync += sb_left.eq(sb_left - cnt)
            with m.If(p_last):
                m.d.sync += running.eq(0)

        # ------------------------------------------------------------------ verification window capture
        vb_span = Signal(W, name="vb_span")
        vb_pre = Signal(len(VC.span_prefix), name="vb_pre")
        vb_ones = Signal(range(L + 1), name="vb_ones")  # codes in the window, at most L (what a pass can take)
        vb_whole, vb_fresh = Signal(name="vb_whole"), Signal(name="vb_fresh")
        vb_end = Signal(name="vb_end")

        # ------------------------------------------------------------------ R: code positions of a pass
        # In full mode R alternates: pass A of beat k (P's span), then pass B of beat k (the captured
        # verification span); r_turn_b says which comes next (a register: the span R decodes never waits for a
        # go). Pass B's code count is decided below ("R: loads") from counts, while RK holds pass A of the beat.
        r_turn_b = Signal(name="r_turn_b")
        # The span is word-aligned and its prefix counted from the one before the read point (number 0): the
        # pass's codes end at the ones number 1 .. n, the first starts after one 0 (at bit 0 when there is none,
        # at a chunk's first word: the prefix's entry 0 is then 1).
        rspan, rpre_all = Signal(W, name="r_span"), Signal(len(pd_pre), name="r_pre")
        m.d.comb += [rspan.eq(Mux(r_turn_b, vb_span, pd_span)), rpre_all.eq(Mux(r_turn_b, vb_pre, pd_pre))]
        rpos, r_head = one_positions(m, rspan, rpre_all, SC.prefix_bits, L, "r_pos")
        rk_valid, rk_b = Signal(name="rk_valid"), Signal(name="rk_b")
        rk_pos = [Signal(bits_for(W - 1), name=f"rk_pos{j}") for j in range(L + 1)]
        rk_head = Signal(name="rk_head")                # no one 0: the first code starts at bit 0
        rk_n = Signal(range(L + 1), name="rk_n")         # codes of this pass (A: the beat's; B: taken now)
        rk_first = Signal(range(L + 1), name="rk_first")  # B: the beat's pruned codes taken before
        rk_done = Signal(name="rk_done")                # B: the beat's last pruned code is taken
        rk_fin, rk_cend, rk_last = Signal(name="rk_fin"), Signal(name="rk_cend"), Signal(name="rk_last")

        # BJ: the beat whose pass B is pending: its kept lanes and pruned count (from D's pass A)
        bj_kept = Signal(L, name="bj_kept")
        bj_pidx = [Signal(range(L), name=f"bj_pidx{i}") for i in range(L)]
        bj_np = Signal(range(L + 1), name="bj_np")
        bj_done = Signal(range(L + 1), name="bj_done")
        bj_cnt = Signal(range(L + 1), name="bj_cnt")
        bj_fin, bj_cend, bj_last = Signal(name="bj_fin"), Signal(name="bj_cend"), Signal(name="bj_last")

        # ------------------------------------------------------------------ D: decode the codes of a pass
        ranks = code_ranks(m, rk_pos, rk_head, L, "d_rank")
        book_q = Mux(rk_b, verif_q, spec_q)
        d_code_err = Const(0, 1)
        for j in range(L):
            d_code_err = d_code_err | ((j < rk_n) & (ranks[j] > book_q))

        # DF: the decoded beat, per lane
        df_valid = Signal(name="df_valid")
        df_done = Signal(name="df_done")                # every lane decoded (pass B may take two cycles)
        df_b = Signal(name="df_b")
        df_q = [Signal(4, name=f"df_q{i}") for i in range(L)]
        df_esc = Signal(L, name="df_esc")
        df_pair = Signal(L, name="df_pair")
        df_kept = Signal(L, name="df_kept")
        beat_bits = ESC_FIELD_BITS * L                  # a pass's fields, escapes in every lane
        df_off = [Signal(range(beat_bits), name=f"df_off{i}") for i in range(L)]
        df_take = Signal(range(beat_bits + 1), name="df_take")
        # F's steps (below): a step extracts the fields up to the second escape field it has not extracted
        f_rem = Signal(L, name="f_rem")                 # the escape fields of the lanes not yet extracted
        f_done = Signal(L, name="f_done")               # lanes extracted by earlier steps (their values in H)
        f_more = Signal(name="f_more")                  # another step follows this one (f_rem has two or more)
        f_stk = Signal(range(beat_bits + 1), name="f_step_take")   # this step's bits, when f_more
        f_stk_ok = Signal(name="f_step_found")          # f_stk is found (a cycle after the step begins)
        df_cnt = Signal(range(L + 1), name="df_cnt")
        df_fin, df_cend, df_last = Signal(name="df_fin"), Signal(name="df_cend"), Signal(name="df_last")

        lq = [Signal(4, name=f"d_q{i}") for i in range(L)]
        lesc, lpair, lkept = Signal(L, name="d_esc"), Signal(L, name="d_pair"), Signal(L, name="d_kept")
        lw = [Signal(5, name=f"d_w{i}") for i in range(L)]
        in_beat = Signal(L, name="d_in_beat")
        m.d.comb += in_beat.eq(thermometer(Mux(rk_b, bj_cnt, rk_n), L))
        # pass B: lane i (pruned) takes code slot pidx_i - first, pidx_i = pruned lanes before it (BJ, counted
        # when D decoded pass A)
        pruned_b = Signal(L, name="d_pruned_b")
        m.d.comb += pruned_b.eq(~bj_kept & in_beat)
        pidx = bj_pidx
        for i in range(L):
            slot = Signal(range(L), name=f"d_slot{i}")
            now = Signal(name=f"d_now{i}")
            m.d.comb += [slot.eq(Mux(rk_b, pidx[i] - rk_first, i)),
                         now.eq(Mux(rk_b, pruned_b[i] & (pidx[i] >= rk_first) & (pidx[i] < rk_first + rk_n), 1))]
            q_new = Array(ranks)[slot][:4]
            q = Signal(4, name=f"d_qsel{i}")
            m.d.comb += q.eq(Mux(now, q_new, df_q[i]))
            esc = Mux(now, q == book_q, df_esc[i])
            pair = Mux(now, Mux(rk_b, p.verif_pairs, p.spec_pairs).bit_select(q, 1), df_pair[i])
            # q_p = 15 stands for "no P": an escape at Q = 15 is a kept value
            kept = Mux(rk_b, bj_kept[i], in_beat[i] & ((q != q_p) | (q == spec_q)))
            m.d.comb += [lq[i].eq(q), lesc[i].eq(esc), lpair[i].eq(pair & ~esc), lkept[i].eq(kept)]
            prefix = Mux(lesc[i], ESCAPE_PAYLOAD_BITS, lpair[i])
            spec_w = Mux(lkept[i], prefix + 1 + mm, 0)
            rest_w = Mux(lkept[i], BF16_MANTISSA_BITS - mm, prefix + 8)
            m.d.comb += lw[i].eq(Mux(in_beat[i], Mux(rk_b, rest_w, spec_w), 0))
        offs = prefix_sums(m, lw, bits_for(beat_bits), "d_off")     # field offsets (Sklansky, log2 L adder levels)
        a_pidx = popcounts(m, ~lkept & in_beat, "d_np")
        n_pruned = a_pidx[L]
        # pass A's pruned count straight from its ranks (pass B's count waits for it in the same cycle)
        p_grp = p.p_pruned                              # codes of group q_p are pruned values (not escapes)
        # rank_i == q_p tested on the positions without a carry chain (rank = pos[i + 1] - pos[i] - 1, 4 bits):
        # pos[i + 1] == pos[i] + (q_p + 1) mod 16 (sum_equals); lane 0 at a span's head: pos[1] == q_p
        q_p1 = Signal(4, name="d_q_p1")                 # registered: q_p holds still while a tensor runs
        m.d.sync += q_p1.eq(q_p + 1)
        is_p = [Mux(rk_head, rk_pos[1][:4] == q_p, sum_equals(rk_pos[0][:4], q_p1, rk_pos[1][:4]))]
        is_p += [sum_equals(rk_pos[i][:4], q_p1, rk_pos[i + 1][:4]) for i in range(1, L)]
        a_pruned = Signal(L, name="d_a_pruned")
        m.d.comb += a_pruned.eq(Cat(*[is_p[i] & (i < rk_n) for i in range(L)]) & p_grp.replicate(L))
        a_np = Signal(range(L + 1), name="d_a_np")
        m.d.comb += a_np.eq(popcount(m, a_pruned, "d_a_np"))
        f_fire = Signal()
        df_free = Signal()
        m.d.comb += df_free.eq(~df_valid | f_fire | (df_b & ~df_done))
        d_go = Signal(name="d_go")
        # KEEP: the kept values of every superblock, counted at pass A, must be k (the last superblock's: last_k,
        # which a serial multiplier finds in the first cycles of the tensor; its final beat waits for it)
        k_wait = Signal(name="d_k_wait")
        m.d.comb += d_go.eq(rk_valid & df_free & ~halt & ~k_wait)
        kept_acc = Signal(range(GMAX + 1), name="d_kept_acc")
        kept_now = Signal(range(GMAX + 1), name="d_kept_now")
        m.d.comb += kept_now.eq(kept_acc + rk_n - a_np)
        start_ok = Signal(name="start_ok")              # START taken: a tensor begins
        last_k, last_k_ready = self._last_keep(m, start_ok, numel, p)
        m.d.comb += k_wait.eq(rk_valid & ~rk_b & rk_fin & rk_last & ~last_k_ready)
        d_keep_err = Signal(name="d_keep_err")
        m.d.comb += d_keep_err.eq(d_go & ~rk_b & rk_fin & (kept_now != Mux(rk_last, last_k, p.k)))
        with m.If(d_go & ~rk_b):
            m.d.sync += kept_acc.eq(Mux(rk_fin, 0, kept_now))
        with m.If(init):
            m.d.sync += kept_acc.eq(0)
        d_wide = Signal(L, name="d_wide")               # escape fields: kept lanes in pass A, pruned in pass B
        m.d.comb += d_wide.eq(in_beat & lesc & Mux(rk_b, ~lkept, lkept))
        with m.If(d_go):
            m.d.sync += [df_valid.eq(1), df_b.eq(rk_b), df_done.eq(~rk_b | rk_done),
                         df_take.eq(offs[L]), df_esc.eq(lesc), df_pair.eq(lpair), df_kept.eq(lkept),
                         f_rem.eq(d_wide), f_done.eq(0), f_stk_ok.eq(0),
                         f_more.eq(two_or_more(d_wide))]
            m.d.sync += [df_q[i].eq(lq[i]) for i in range(L)] + [df_off[i].eq(offs[i]) for i in range(L)]
            with m.If(rk_b):
                m.d.sync += [df_cnt.eq(bj_cnt), df_fin.eq(bj_fin), df_cend.eq(bj_cend), df_last.eq(bj_last)]
            with m.Else():
                m.d.sync += [df_cnt.eq(rk_n), df_fin.eq(rk_fin), df_cend.eq(rk_cend), df_last.eq(rk_last)]
        with m.Elif(f_fire):
            m.d.sync += df_valid.eq(0)

        # ------------------------------------------------------------------ R: loads (A from PD, B from VB)
        # Pass B's count is decided (VC commits) as soon as the beat's pruned count is known: from RK while it
        # holds pass A, from BJ once D has decoded it; never waiting for a go. A decided pass B that cannot
        # load into RK yet waits in b_pend with the verification window frozen (its positions come from it).
        rk_free = ~rk_valid | d_go
        rk_a = Signal(name="r_rk_a")                    # RK holds pass A of the beat whose pass B is next
        m.d.comb += rk_a.eq(rk_valid & ~rk_b)
        a_now = Signal(name="r_a_now")                  # D decodes pass A this cycle (BJ <- its lanes)
        m.d.comb += a_now.eq(d_go & ~rk_b & full)
        b_pend = Signal(name="b_pend")
        pb_c, pb_first = Signal(range(L + 1), name="pb_c"), Signal(range(L + 1), name="pb_first")
        pb_done = Signal(name="pb_done")
        b_need = Signal(range(L + 1), name="r_b_need")
        m.d.comb += b_need.eq(Mux(rk_a, a_np, bj_np) - bj_done)
        b_cend = Mux(rk_a, rk_cend, bj_cend)
        b_c = Signal(range(L + 1), name="r_b_c")        # codes pass B takes now
        m.d.comb += b_c.eq(Mux(vb_ones < b_need, vb_ones, b_need))
        b_complete = Signal(name="r_b_complete")
        m.d.comb += b_complete.eq(b_c == b_need)
        # pass B may take codes when the captured window is current and holds the codes it needs (or all it can)
        # An error found here waits in b_fault until every beat before this one has been emitted (no complete
        # pass B left in RK or DF), like P's p_fault; this beat is not emitted.
        b_fault = Signal(3, name="b_fault")              # CODE, OVERRUN, TOO_LONG
        b_try = Signal(name="r_b_try")
        m.d.comb += b_try.eq(r_turn_b & ~b_pend & ~b_fault.any() & ~halt & vb_fresh
                             & (b_complete | (vb_whole & (b_c != 0)))
                             & (~(b_complete & b_cend) | VC.skip_ok | VC.skip_err))
        b_long = b_complete & b_cend & VC.skip_err       # the beat would end its chunk with content left
        b_decide = Signal(name="r_b_decide")
        m.d.comb += b_decide.eq(b_try & ~b_long)
        r_load_b = Signal(name="r_load_b")
        r_load_a = Signal(name="r_load_a")
        m.d.comb += [r_load_b.eq((b_decide | b_pend) & rk_free & ~halt),
                     r_load_a.eq(~r_turn_b & pd_valid & rk_free & ~halt),
                     pd_free.eq(~pd_valid | r_load_a),
                     VC.take.eq(b_c), VC.skip.eq(b_complete & b_cend), VC.commit.eq(b_decide)]
        b_none = r_turn_b & ~b_pend & ~b_fault.any() & (b_need != 0) & (vb_ones == 0) & vb_fresh
        b_err = Cat(b_none & vb_whole & ~vb_end, b_none & vb_end, b_try & b_long)
        with m.If(b_err.any() & ~halt):
            m.d.sync += b_fault.eq(b_err)
        b_drained = ~(rk_valid & rk_b & rk_done) & ~(df_valid & df_b & df_done)
        d_err = Signal(3, name="d_err")
        m.d.comb += d_err.eq(Cat(d_go & d_code_err, 0, 0) | Mux(b_drained, b_fault, 0))
        # the window is not captured while a decided pass B has not loaded, so the enable is a register: in the
        # cycle pass B is decided VC has not moved since the last capture (it only took words in: the span keeps
        # its first word, its second can only arrive, the ones before the read point are the same), so the span
        # captured then numbers the decided codes' ones as the span they were decided from does; it is not fresh
        # (VC commits in that cycle)
        with m.If(~b_pend):
            m.d.sync += [vb_span.eq(VC.span), vb_pre.eq(VC.span_prefix),
                         vb_ones.eq(Mux(VC.ones > L, L, VC.ones)), vb_whole.eq(VC.whole), vb_end.eq(VC.end_in_span)]
        # fresh: captured in the last cycle (VC does not commit in a capturing cycle)
        m.d.sync += [vb_fresh.eq(~(b_decide | b_pend)), b_pend.eq((b_decide | b_pend) & ~r_load_b)]
        with m.If(b_decide):
            m.d.sync += [bj_done.eq(bj_done + b_c), pb_c.eq(b_c), pb_first.eq(bj_done), pb_done.eq(b_complete)]
        # R's positions are captured whenever RK is free and R has a window (pass B's, even when pass B
        # cannot load yet: RK then stays invalid), so their enable does not wait for pass B's decision
        with m.If(rk_free & (r_turn_b | pd_valid)):
            m.d.sync += [rk_pos[j].eq(rpos[j]) for j in range(L + 1)] + [rk_head.eq(r_head)]
        with m.If(r_load_a | r_load_b):
            m.d.sync += [rk_valid.eq(1), rk_b.eq(r_load_b)]
        with m.Elif(d_go):
            m.d.sync += rk_valid.eq(0)
        with m.If(r_load_a):
            m.d.sync += [rk_n.eq(pd_cnt), rk_fin.eq(pd_fin), rk_cend.eq(pd_cend), rk_last.eq(pd_last),
                         pd_valid.eq(0), r_turn_b.eq(full), bj_done.eq(0)]
        with m.If(r_load_b):
            done = Mux(b_pend, pb_done, b_complete)
            m.d.sync += [rk_n.eq(Mux(b_pend, pb_c, b_c)), rk_first.eq(Mux(b_pend, pb_first, bj_done)),
                         rk_done.eq(done)]
            with m.If(done):
                m.d.sync += r_turn_b.eq(0)
        with m.If(a_now):                               # BJ <- pass A of the beat (D decodes it now)
            m.d.sync += [bj_pidx[i].eq(a_pidx[i]) for i in range(L)]
            m.d.sync += [bj_kept.eq(lkept), bj_np.eq(n_pruned), bj_cnt.eq(rk_n), bj_fin.eq(rk_fin),
                         bj_cend.eq(rk_cend), bj_last.eq(rk_last)]
        with m.If(p_go):
            m.d.sync += pd_valid.eq(1)

        # ------------------------------------------------------------------ F: fields, lookups, values
        # A pass's fields are extracted in steps, each with at most one escape field (16 bits; every other
        # field is at most FIELD_BITS): one step unless the pass has two escape fields or more. A step's lanes
        # are those not done before the second escape field left; its bits are the offset of that lane, found
        # in the cycle before the step (f_stk), else the pass's remaining bits. After a step that is not the last
        # the offsets are rebased and its values wait in H.
        e_first = Signal(L, name="f_esc_lane")           # the step's escape field (one-hot, or none)
        e_rest = Signal(L, name="f_rem_after")           # escape fields after it
        in_step = Signal(L, name="f_in_step")
        m.d.comb += [e_first.eq(lowest_one(f_rem)), e_rest.eq(f_rem & ~e_first),
                     in_step.eq(~f_done & ~at_or_after_first(e_rest))]
        e_next = lowest_one(e_rest)                     # the next step's first lane
        stk_found = Signal(len(f_stk), name="f_stk_found")
        m.d.comb += stk_found.eq(onehot_select(e_next, df_off, len(stk_found)))
        take = Signal(len(df_take), name="f_take")
        m.d.comb += take.eq(Mux(f_more, f_stk, df_take))
        step_ok = ~f_more | f_stk_ok
        rd_avail = Mux(df_b, RS.avail, SM.avail)
        rd_end = Mux(df_b, RS.end_seen, SM.end_seen)
        rd_skip_ok = Mux(df_b, RS.skip_ok | RS.skip_err, SM.skip_ok | SM.skip_err)
        rd_skip_err = Mux(df_b, RS.skip_err, SM.skip_err)
        f_view = Signal(max(SM.view_bits, RS.view_bits), name="f_view")
        f_bit = Signal(max(len(SM.view_bit), len(RS.view_bit)), name="f_view_bit")
        m.d.comb += [f_view.eq(Mux(df_b, RS.view, SM.view)), f_bit.eq(Mux(df_b, RS.view_bit, SM.view_bit))]
        fwin = shift_right(m, f_view, f_bit, FW, "f_win")
        f_ready = Signal(name="f_ready")
        f_long = Signal(name="f_long")                  # the beat would end its chunk with content left: not sent
        f_step = Signal(name="f_step")                  # a step that is not the pass's last
        last_step = df_cend & ~f_more                   # the pass's last step ends its chunk
        m.d.comb += [f_ready.eq(~halt & df_valid & df_done & step_ok & (rd_avail >= take)
                                & (~last_step | rd_skip_ok)),
                     f_long.eq(last_step & rd_skip_err), f_step.eq(f_ready & f_more)]
        emit = ~full | df_b
        m.d.comb += [self.out.valid.eq(f_ready & ~f_more & ~f_long & emit),
                     f_fire.eq(f_ready & ~f_more & ~f_long & (~emit | self.out.ready))]
        for rd, is_b in ((SM, 0), (RS, 1)):
            m.d.comb += [rd.take.eq(take), rd.skip.eq(last_step), rd.commit.eq((f_fire | f_step) & (df_b == is_b))]
        f_err = Signal(3, name="f_err")
        m.d.comb += f_err.eq(Cat(0, df_valid & df_done & step_ok & rd_end & (rd_avail < take), f_ready & f_long))
        with m.If(df_valid & df_done & f_more & ~f_stk_ok):
            m.d.sync += [f_stk.eq(stk_found), f_stk_ok.eq(1)]
        with m.If(f_step):
            m.d.sync += [df_off[i].eq(df_off[i] - f_stk) for i in range(L)]
            m.d.sync += [df_take.eq(df_take - f_stk), f_done.eq(f_done | in_step), f_rem.eq(e_rest),
                         f_more.eq(two_or_more(e_rest, e_next)), f_stk_ok.eq(0)]

        hold = [Signal(16, name=f"h_value{i}") for i in range(L)]
        base = Mux(df_b, p.verif_base.as_value(), p.spec_base.as_value())
        bases = [base[4 * i: 4 * i + 4] for i in range(K_MAX)]
        tab = Array(Mux(df_b, p.verif_tab[i], p.spec_tab[i]) for i in range(K_MAX))
        mant_mask = Signal(BF16_MANTISSA_BITS, name="f_rest_mask")
        sm_mask = Signal(8, name="f_sm_mask")
        cut = Signal(3, name="f_cut")                   # 7 - m: the mantissa bits the draft drops
        m.d.comb += [cut.eq(BF16_MANTISSA_BITS - mm), mant_mask.eq(thermometer(cut, BF16_MANTISSA_BITS)),
                     sm_mask.eq(thermometer(mm + 1, 8))]
        # the step's escape field ends past FIELD_BITS: its last bits from its lane's offset (every lane before it
        # in the step has at most FIELD_BITS), the rest from its lane's own extractor
        e_off = onehot_select(e_first, df_off, bits_for(FW - ESC_FIELD_BITS))
        e_tail = shift_right(m, fwin[FIELD_BITS:], e_off, ESC_FIELD_BITS - FIELD_BITS, "f_esc_tail")
        for i in range(L):
            # lane i's field starts within the step's first i fields (one of them may be its escape field)
            reach = FIELD_BITS * (i + 1) + ESC_FIELD_BITS - FIELD_BITS
            narrow = shift_right(m, fwin[:reach], df_off[i][:bits_for(reach - FIELD_BITS)], FIELD_BITS,
                                 f"f_field{i}") if i else fwin[:FIELD_BITS]
            f = Cat(narrow, e_tail)                     # bits past FIELD_BITS are read by the escape lane only
            esc, pair = df_esc[i], df_pair[i]
            body = Signal(8, name=f"f_body{i}")         # the field after its prefix (escape / suffix bit)
            m.d.comb += body.eq(Mux(esc, f[8:16], Mux(pair, f[1:9], f[0:8])))
            t = pair & f[0]
            idx = Signal(4, name=f"f_idx{i}")
            m.d.comb += idx.eq(Array(bases)[df_q[i]] + t)
            exp = Signal(8, name=f"f_exp{i}")
            m.d.comb += exp.eq(Mux(esc, f[:8], tab[idx][:8]))
            smd = Signal(15, name=f"f_sm{i}")           # (s << 7) | top m mantissa bits, aligned
            m.d.comb += smd.eq((body & sm_mask) << cut)
            draft = Signal(16, name=f"f_draft{i}")
            m.d.comb += draft.eq(Mux(df_kept[i], Cat(smd[:7], exp, smd[7]), 0))
            exact = Mux(df_kept[i], hold[i] | (f[:7] & mant_mask), Cat(body[:7], exp, body[7]))
            value = Mux(df_b, exact, draft)
            m.d.comb += self.out.payload.lanes[i].eq(Mux(i < df_cnt, Mux(f_done[i], hold[i], value), 0))
            # H: pass A's draft values for pass B, and the values of a step that is not the pass's last
            with m.If((f_fire | f_step) & in_step[i]):
                m.d.sync += hold[i].eq(value)
        m.d.comb += [self.out.payload.count.eq(df_cnt), self.out.payload.sb_end.eq(df_fin),
                     self.out.payload.last.eq(df_last)]

        # ------------------------------------------------------------------ control state, errors
        cfg_bad = p.bad | (numel == 0)
        no_book = p.no_book
        m.d.sync += [pre_init.eq(0), init.eq(pre_init)]
        # START's own errors (CONFIG, NO_BOOK) are set at once, as in every C1 decoder: the block is idle, nothing
        # to halt, and the path is registers to err; the datapath's go through `fault`
        start_err = Signal(len(err), name="start_err")
        with m.If(start & ~busy & ~err.any() & ~halt):
            m.d.comb += [start_err[Err.CONFIG].eq(cfg_bad), start_err[Err.NO_BOOK].eq(~cfg_bad & no_book)]
            with m.If(~cfg_bad & ~no_book):
                m.d.comb += start_ok.eq(1)
                m.d.sync += [busy.eq(1), pre_init.eq(1)]
        with m.If(busy & ~halt):
            drained = ~pd_valid & ~rk_valid & ~r_turn_b & ~df_valid
            m.d.comb += [raise_err[:3].eq(Mux(drained, p_fault, 0) | d_err | f_err),
                         raise_err[Err.KEEP].eq(d_keep_err)]
        with m.If(init & p.bad_books):
            m.d.comb += raise_err[Err.CONFIG].eq(1)
        with m.If(f_fire & emit & df_last):
            m.d.sync += busy.eq(0)
        self._sticky_errors(m, err, fault, raise_err, halt, start_err, clear, busy,
                            [pre_init.eq(0), init.eq(0), running.eq(0), pd_valid.eq(0), rk_valid.eq(0),
                             r_turn_b.eq(0), df_valid.eq(0), b_pend.eq(0), p_fault.eq(0), b_fault.eq(0)])
        return m


class DecoderC1v3(DecoderC1):
    """Decoder v3 with its own tensor registers: ``TensorRegisters`` and one ``DecoderC1v3Core`` behind the C1
    decoder interface (one ``cfg`` port for every register). A cluster instead shares one ``TensorRegisters``
    among its cores (hw/tensor_regs.py). Parameters as ``DecoderC1v3Core``."""

    ERROR_CLEARS_BEATS = DecoderC1v3Core.ERROR_CLEARS_BEATS

    def __init__(self, lanes: int = 8, code_word: int = 32, word: int | None = None, verif_word: int | None = None):
        super().__init__(**interface(lanes, code_word, word, verif_word))
        self._core_args = (lanes, code_word, word, verif_word)
        self.field_window = field_window(lanes)

    def elaborate(self, platform):
        m = Module()
        wrap_cluster_core(m, self, TensorRegisters(), DecoderC1v3Core(*self._core_args),
                          ("spec_codes", "spec_signman", "verif_codes", "verif_rest"))
        return m
