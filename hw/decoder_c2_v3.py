"""Cassandra-2 decoder v3: one bit reader on the block-interleaved ``spec.mx`` (golden/escfield.py:
per MX block ``[X][keep bits][kept fields]``) with no keep-bitmap FIFO and no ingest tracker; full mode as a
pass B over half a beat a cycle, escaped deltas read from the front of their verif.rest fields.

Every MX block's header sits right before its fields, so the beat that ends a block also reads the next
block's header from the same window, at an offset known from registers (its own field bits). The keep bits
and X of the block being decoded live in registers (H); a beat's take is a function of H and the position
counters alone, so the reader's loop never goes through the window.

    spec_mx -> BitReader (window 9 L + 40) --win--+--> fields: lane i = (m+2)-bit field number rank_i --> S
                                                  '--> header at the beat's field bits (X, keep bits) --> H
    H (X, keep bits, kept count per beat) + counters -> the beat's kept flags, rank_i, field bits (kept count
        x (m + 2)), take (loop: reader avail >= take -> commit -> read point; depth: a select, a 4 x 4 multiply,
        the header add, the reader's compare and pointer add)
    S -> draft arithmetic (FORMAT section 4, hw/decoder_c2.py ``draft_lane``) -> out (draft mode)
    S, half h -> codes of its draft-zero lanes (CodeReader VC) --> BC (span and prefix) -> ranks --> BR
              BR -> each lane's code, escape / pair flag, rest width and offset --> DF
              DF -> verif.rest window (BitReader RS) -> fields, S[b_q + t] or the escaped delta, X - delta,
                    low mantissa bits -> out (full mode: L / 2 values a beat, a beat a cycle)

Stage I takes one step a cycle: a *beat* (L values of the block in H; the block's last beat also loads the
next block's header unless the block ends its chunk), or at a chunk's first block a *header step* (the
block's X and keep bits only: one cycle per chunk in draft mode, hidden in full mode; the next chunk's words
start on a word boundary). S (two entries, so that stage I fires from registers) also holds each lane's
draft-zero flag and the codes of each half, counted from the fields in stage I, so pass B's take needs no
arithmetic on S. Pass B takes a half's codes in one step when the code reader's span (two 32-bit words from
the read point, >= 33 bits) holds them, else in parts (at least one code each: a code is <= 16 bits); BR
collects the parts' ranks and goes on with the last.

Errors: an error a stage finds waits until the stages after it are empty (their beats go out), then is
raised a cycle later with the pipeline halted and the readers flushed; the beat that failed is not emitted.
Ports, registers and error bits are the C2 decoder's (docs/datasheets/decoder_c2.md); the tensor's registers
come from a cluster's ``TensorRegisters("c2")`` (hw/tensor_regs.py). Formal properties: hw/formal.py
``decoder_c2v3_l4_w32`` (L = 4, 32-bit words; liveness with one idle cycle after a chunk's last beat).
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from ..golden.config import BF16_MANTISSA_BITS, ESCAPE_PAYLOAD_BITS, K_MAX, MX_BLOCK
from .bitreader import BitReader, thermometer, view_slots
from .code_reader import CodeReader, code_ranks, one_positions, popcount
from .decoder_c2 import MX_FIELD_MAX as MXF
from .decoder_c2 import X_BITS, c2_port_signature, draft_consts, draft_lane, prefix_sums
from .decoder import DecoderC1, Err
from .shifter import shift_right
from .tensor_regs import TENSOR_PARAMS, ClusterCore, TensorRegisters, wrap_cluster_core
from .zero_counter import prefix_counts

HEADER_BITS = X_BITS + MX_BLOCK          # a block's X and its keep bits (when the config prunes)
REST_LANE_BITS = ESCAPE_PAYLOAD_BITS + 8  # widest verif.rest field: an escape's 8 raw bits, then (s << 7) | f


def datapath(shape, name: str) -> Signal:
    """A datapath register: no reset, read only where a flag with a reset says it holds data (silicon powers up
    with any value: tests/test_hw_power_up.py)."""
    return Signal(shape, name=name, reset_less=True)


class _C2v3Interface:
    """The C2 decoder interface attributes both C2 v3 components set (checked by ``interface``)."""

    def _set_interface(self, lanes, word, verif_word) -> dict:
        """Sets lanes, word widths, full-mode lanes and port widths; returns the C2 decoder's port signature."""
        a = interface(lanes, word, verif_word)
        self.lanes, self.word, self.verif_word = a["lanes"], a["word"], a["verif_word"]
        self.verif_lanes = max(1, lanes // 2)
        self.port_words = {"spec_mx": self.word, "verif_codes": self.verif_word, "verif_rest": self.verif_word}
        return c2_port_signature(lanes, self.word, self.verif_word)


def interface(lanes, word, verif_word) -> dict:
    """The checked parameters of a C2 v3 decoder: L a power of two 4..16 (a beat lies in one MX block),
    spec_mx words a power of two of at least 32 bits (default max(64, 8 L): at L = 8 a beat's fields and its share
    of a block header, 8 (m + 2) keep + 10 bits, fit the word at m <= 4, at m = 5 / 6 / 7 up to keep 0.96 / 0.84 /
    0.75; without pruning the header is 2 bits a beat)."""
    if lanes not in (4, 8, 16):
        raise ConfigError(f"C2 decoder v3 lanes must be 4, 8 or 16, got {lanes!r}")
    word = max(64, 8 * lanes) if word is None else word
    if not isinstance(word, int) or word < 32 or word > 1024 or word & (word - 1):
        raise ConfigError(f"C2 decoder v3 spec_mx word must be a power of two in 32..1024 bits, got {word!r}")
    verif_word = 32 if verif_word is None else verif_word
    if not isinstance(verif_word, int) or verif_word < 32 or verif_word > 1024 or verif_word & (verif_word - 1):
        raise ConfigError(f"C2 decoder v3 verification word must be a power of two in 32..1024 bits, got {verif_word!r}")
    return dict(lanes=lanes, word=word, verif_word=verif_word)


class DecoderC2v3Core(_C2v3Interface, ClusterCore, DecoderC1):
    """Cassandra-2 decoder v3 core: ``lanes`` draft values a cycle from the block-interleaved spec.mx.

    Parameters
        lanes        L, values per beat (4, 8 or 16)
        word         bits per spec_mx word (default max(64, 8 L))
        verif_word   bits per word of verif_codes / verif_rest (default 32: full mode reads ~6 rest bits and
                     ~2 code bits per value at L / 2 values a cycle on SmolLM2)
        slots        word slots of the spec.mx reader (default: its view + 1, 4 at L = 8: a power of two, whose
                     slot pointer wraps for free; 3 is no smaller and loses 2 % of draft cycles at m = 7, keep 1.0)
    """

    # an error clears every stage in the cycle it is set (the stop list of ``_sticky_errors``): no beat is
    # pending while error (hw/formal_props.py asserts it)
    ERROR_CLEARS_BEATS = True

    def __init__(self, lanes: int = 8, word: int | None = None, verif_word: int | None = None,
                 slots: int | None = None):
        signature = self._set_interface(lanes, word, verif_word)
        self.window = MXF * lanes + HEADER_BITS
        self.slots = view_slots(self.word, self.window) + 1 if slots is None else slots
        wiring.Component.__init__(self, {**signature, "params": In(TENSOR_PARAMS)})

    def elaborate(self, platform):
        m = Module()
        L, W = self.lanes, self.window
        lg = exact_log2(L)
        p = self.params
        start, clear, busy, err, raise_err, numel = self._instance_control(m)
        fault = Signal(len(err), name="fault")       # an error of the datapath, raised a cycle later
        halt = Signal(name="halt")
        m.d.comb += halt.eq(fault.any())
        mm = p.m
        prune = Signal(name="prune")
        m.d.comb += prune.eq(p.k < p.g)

        R = BitReader(self.word, W, slots=self.slots, full_skip_err=True)
        m.submodules.spec_mx_rd = R
        wiring.connect(m, wiring.flipped(self.spec_mx), R.inp)
        draining = err.any() & ~busy
        m.d.comb += [R.enable.eq(busy), R.drain.eq(draining), R.flush.eq(halt)]
        full, Lv, VW = p.full, self.verif_lanes, self.verif_word
        VC = CodeReader(VW, Lv)
        RS = BitReader(VW, REST_LANE_BITS * Lv, slots=view_slots(VW, REST_LANE_BITS * Lv) + 1, full_skip_err=True)
        m.submodules.verif_codes_rd = VC
        m.submodules.verif_rest_rd = RS
        for port, blk in (("verif_codes", VC), ("verif_rest", RS)):
            wiring.connect(m, wiring.flipped(getattr(self, port)), blk.inp)
            m.d.comb += [blk.enable.eq(busy & full), blk.drain.eq(draining), blk.flush.eq(halt)]
        s_taken = Signal(name="s_taken")                # the beat in S leaves (out, or pass B's last half)

        # ------------------------------------------------------------------ position (registers)
        pre_init, init, running = Signal(name="pre_init"), Signal(name="init"), Signal(name="i_running")
        after = Signal(32, name="i_after")              # values of the tensor after the block in H
        h_valid = Signal(name="h_valid")                # H holds the block being decoded
        h_x = datapath(X_BITS, "h_x")
        h_keep = datapath(MX_BLOCK, "h_keep")           # its keep bits (all ones up to its size without pruning)
        h_beat = Signal(range(MX_BLOCK // L), name="h_beat")          # the next beat's index in the block
        h_last_beat = Signal(range(MX_BLOCK // L), name="h_last_beat")
        h_tail = Signal(range(L + 1), name="h_tail")    # values of the block's last beat
        h_pops = [datapath(range(L + 1), f"h_pop{b}") for b in range(MX_BLOCK // L)]  # kept values per beat
        sbb = Signal(range(256 // MX_BLOCK), name="i_sbb")    # the block's index in its superblock
        csb = Signal(range(64), name="i_csb")           # its superblock's index in the chunk
        kacc = Signal(range(256 + 1), name="i_kacc")    # kept values of the superblock before this beat

        gblocks = Signal(range(256 // MX_BLOCK + 1), name="g_blocks")
        m.d.comb += gblocks.eq(p.g >> exact_log2(MX_BLOCK))
        t_last = Signal(name="i_tensor_last")           # the block in H is the tensor's last (after == 0)
        sb_fin = Signal(name="i_sb_fin")                # ... ends its superblock
        c_fin = Signal(name="i_chunk_fin")              # ... ends its chunk
        m.d.comb += [sb_fin.eq((sbb == gblocks - 1) | t_last),
                     c_fin.eq(sb_fin & ((csb == p.chunk_sbs - 1) | t_last))]

        # ------------------------------------------------------------------ stage I: the step's take
        hstep = Signal(name="i_hstep")                  # a header step (a chunk's first block)
        m.d.comb += hstep.eq(~h_valid)
        b_fin = Signal(name="i_block_fin")              # the beat is its block's last
        m.d.comb += b_fin.eq(h_beat == h_last_beat)
        n = Signal(range(L + 1), name="i_n")
        m.d.comb += n.eq(Mux(b_fin, h_tail, L))
        kb = Signal(L, name="i_kept")                   # the beat's kept flags (zero past the block's end)
        m.d.comb += kb.eq(h_keep.word_select(h_beat, L))
        # the loop's take comes from registers through a select and a 4 x 4 multiply: the beat's kept count
        # (counted when the block's header was loaded) times m + 2
        pop = Signal(range(L + 1), name="i_pop")
        m.d.comb += pop.eq(Array(h_pops)[h_beat])
        fbits = Signal(range(MXF * L + 1), name="i_fbits")      # the beat's field bits
        m.d.comb += fbits.eq(Mux(hstep, 0, pop * (mm + 2)))
        load = Signal(name="i_load")                    # the step reads the next block's header
        m.d.comb += load.eq(hstep | (b_fin & ~c_fin))
        nb_next = Signal(range(MX_BLOCK + 1), name="i_nb_next")  # values of the next block: min(32, after)
        take = Signal(range(W + 1), name="i_take")
        m.d.comb += take.eq(fbits + Mux(load, X_BITS + Mux(prune, nb_next, 0), 0))
        skip = Signal(name="i_skip")                    # the beat ends its chunk: the reader skips its padding
        m.d.comb += skip.eq(~hstep & b_fin & c_fin)
        m.d.comb += [R.take.eq(take), R.skip.eq(skip)]

        # KEEP: a superblock's kept values are k, the tensor's last superblock's ceil(k * n_last / G)
        start_ok = Signal(name="start_ok")
        last_k, last_k_ready = self._last_keep(m, start_ok, numel, p)
        kept_now = Signal(range(256 + 1), name="i_kept_now")
        m.d.comb += kept_now.eq(kacc + pop)
        sb_end = Signal(name="i_sb_end")                # the beat ends its superblock
        m.d.comb += sb_end.eq(~hstep & b_fin & sb_fin)
        k_wait = sb_end & t_last & ~last_k_ready
        keep_bad = sb_end & (kept_now != Mux(t_last, last_k, p.k))

        # An error stage I finds waits in i_fault until the beats before it have gone out (S and pass B are
        # empty; the step that failed is not emitted), then is raised.
        i_fault = Signal(3, name="i_fault")             # OVERRUN, TOO_LONG, KEEP
        s_valid, s_free = Signal(name="s_valid"), Signal(name="s_free")
        live = Signal(name="i_live")
        m.d.comb += live.eq(running & ~i_fault.any() & ~halt & ~k_wait)
        ok = Signal(name="i_ok")                        # the step's bits are in (and its chunk's end, to skip)
        m.d.comb += ok.eq(live & (hstep | s_free) & (R.avail >= take) & (~skip | R.skip_ok | R.skip_err))
        long = skip & R.skip_err                        # the chunk holds more than its blocks
        fire = Signal(name="i_fire")
        m.d.comb += [fire.eq(ok & ~long & ~keep_bad), R.commit.eq(fire)]
        # KEEP is known from H before the superblock's last fields are read: it goes before OVERRUN / TOO_LONG
        i_err = Cat(live & R.end_seen & (R.avail < take) & ~keep_bad, ok & long & ~keep_bad, live & keep_bad)
        with m.If(i_err.any()):
            m.d.sync += i_fault.eq(i_err)

        # ------------------------------------------------------------------ fields and the next header
        win = R.win
        dense = [Signal(MXF, name=f"i_dense{r}") for r in range(L)]   # field number r of the beat
        with m.Switch(mm):
            for mv in range(BF16_MANTISSA_BITS + 1):
                with m.Case(mv):
                    m.d.comb += [dense[r].eq(win[r * (mv + 2): r * (mv + 2) + mv + 2]) for r in range(L)]
        rank = prefix_counts(m, kb, L, "i_rank")
        hdr = shift_right(m, win, fbits, HEADER_BITS, "i_hdr")
        keep_next = Signal(MX_BLOCK, name="i_keep_next")
        m.d.comb += keep_next.eq(Mux(prune, hdr[X_BITS:], (1 << MX_BLOCK) - 1) & thermometer(nb_next, MX_BLOCK))

        left = Signal(32, name="i_left")                # values after the block a load brings in
        m.d.comb += left.eq(after - nb_next)
        with m.If(init):
            m.d.sync += [after.eq(numel), nb_next.eq(Mux(numel < MX_BLOCK, numel, MX_BLOCK)), h_valid.eq(0),
                         sbb.eq(0), csb.eq(0), kacc.eq(0), running.eq(1)]
        with m.If(fire):
            with m.If(load):
                m.d.sync += [h_valid.eq(1), h_x.eq(hdr[:X_BITS]), h_keep.eq(keep_next), h_beat.eq(0),
                             h_last_beat.eq((nb_next - 1) >> lg), h_tail.eq(((nb_next - 1) & (L - 1)) + 1),
                             after.eq(left), nb_next.eq(Mux(left < MX_BLOCK, left, MX_BLOCK)),
                             t_last.eq(left == 0)]
                m.d.sync += [h_pops[b].eq(popcount(m, keep_next[b * L:(b + 1) * L], f"i_next_pop{b}"))
                             for b in range(MX_BLOCK // L)]
            with m.If(~hstep):
                m.d.sync += [h_beat.eq(Mux(b_fin, 0, h_beat + 1)), kacc.eq(Mux(sb_end, 0, kept_now))]
                with m.If(b_fin):
                    m.d.sync += [sbb.eq(Mux(sb_fin, 0, sbb + 1)), csb.eq(Mux(c_fin, 0, Mux(sb_fin, csb + 1, csb)))]
                    with m.If(c_fin):
                        m.d.sync += h_valid.eq(0)
                    with m.If(t_last):
                        m.d.sync += running.eq(0)

        # ------------------------------------------------------------------ S: the beat's fields
        # (lane i's field, its kept flag, and whether it is draft-zero: a full-mode code of its own)
        # S has two entries, the beat that out / pass B reads (rp) and the next (wp): stage I writes the free one, so
        # whether it may fire is a register, no path from out.ready or pass B into the spec.mx reader's commit
        ent = [{"valid": Signal(name=f"s{e}_valid"), "fld": [datapath(MXF, f"s{e}_field{i}") for i in range(L)],
                "kept": datapath(L, f"s{e}_kept"), "x": datapath(X_BITS, f"s{e}_x"),
                "dz": datapath(L, f"s{e}_dz"), "nd0": datapath(range(Lv + 1), f"s{e}_nd0"),
                "nd1": datapath(range(Lv + 1), f"s{e}_nd1"),             # codes of each half
                "n": datapath(range(L + 1), f"s{e}_n"), "sb_end": datapath(1, f"s{e}_sb_end"),
                "last": datapath(1, f"s{e}_last"), "cend": datapath(1, f"s{e}_cend")} for e in range(2)]
        s_wp, s_rp = Signal(name="s_wp"), Signal(name="s_rp")
        s_half = Signal(name="s_half")                  # full mode: the half pass B reads next
        head = {}
        for key in ("valid", "kept", "x", "dz", "nd0", "nd1", "n", "sb_end", "last", "cend"):
            head[key] = Signal.like(ent[0][key], name=f"s_{key}")
            m.d.comb += head[key].eq(Mux(s_rp, ent[1][key], ent[0][key]))
        s_fld = [Signal(MXF, name=f"s_field{i}") for i in range(L)]
        m.d.comb += [s_fld[i].eq(Mux(s_rp, ent[1]["fld"][i], ent[0]["fld"][i])) for i in range(L)]
        s_kept, s_x, s_dz, s_n = head["kept"], head["x"], head["dz"], head["n"]
        s_nd = [head["nd0"], head["nd1"]]
        s_sb_end, s_last, s_cend = head["sb_end"], head["last"], head["cend"]
        m.d.comb += [s_valid.eq(head["valid"]), s_free.eq(~Mux(s_wp, ent[1]["valid"], ent[0]["valid"]))]
        lane_fld = [dense[0] if i == 0 else Cat(*dense[:i + 1]).word_select(rank[i], MXF) for i in range(L)]
        emask = Cat(Const(1, 1), *[mm >= j for j in range(1, BF16_MANTISSA_BITS + 1)])
        in_beat = thermometer(n, L)
        dz = Signal(L, name="i_dz")                     # not kept, or kept with a zero element
        m.d.comb += dz.eq(in_beat & ~Cat(*[kb[i] & (lane_fld[i][:BF16_MANTISSA_BITS + 1] & emask).any()
                                           for i in range(L)]))
        with m.If(fire & ~hstep):
            m.d.sync += s_wp.eq(~s_wp)
            for e in range(2):
                with m.If(s_wp == e):
                    d = ent[e]
                    m.d.sync += [d["valid"].eq(1), d["kept"].eq(kb), d["x"].eq(h_x), d["n"].eq(n),
                                 d["sb_end"].eq(sb_end), d["last"].eq(b_fin & t_last), d["cend"].eq(skip),
                                 d["dz"].eq(dz), d["nd0"].eq(popcount(m, dz[:Lv], f"i_nd0_{e}")),
                                 d["nd1"].eq(popcount(m, dz[Lv:], f"i_nd1_{e}"))]
                    m.d.sync += [d["fld"][i].eq(lane_fld[i]) for i in range(L)]
        with m.If(s_taken):
            m.d.sync += [s_rp.eq(~s_rp), s_half.eq(0)]
            for e in range(2):
                with m.If(s_rp == e):
                    m.d.sync += ent[e]["valid"].eq(0)
        k = draft_consts(m, s_x, mm, "o_k")
        drafts = []
        for i in range(L):
            lane = {"field": s_fld[i], "kept": s_kept[i]}
            draft_lane(m, k, mm, lane, f"o_d{i}")
            drafts.append(lane)

        # ------------------------------------------------------------------ full mode, pass B: half a beat
        # B: the half's codes from VC (its draft-zero lanes, at most Lv) --> BC -> ranks --> BR;
        # BR: each lane's code, escape / pair flags, rest-field widths and offsets --> DF;
        # DF: the rest reader's window -> fields, lookups, exact values --> out (Lv values a beat).
        half_fin = Signal(name="b_half_fin")            # the half is the beat's last
        m.d.comb += half_fin.eq(s_half | (s_n <= Lv))
        b_nd = Signal(range(Lv + 1), name="b_nd")
        m.d.comb += b_nd.eq(Mux(s_half, s_nd[1], s_nd[0]))
        b_cend = Signal(name="b_cend")
        m.d.comb += b_cend.eq(half_fin & s_cend)
        b_fault = Signal(3, name="b_fault")             # CODE, OVERRUN, TOO_LONG
        bc_free = Signal(name="bc_free")
        b_live = Signal(name="b_live")
        m.d.comb += b_live.eq(s_valid & full & ~b_fault.any() & ~halt)
        # The half's codes in one take when the span holds them, else in parts: what a whole span holds (at least
        # one code: 33 bits or more from the read point), the rest next time (b_first: codes already taken)
        b_first = Signal(range(Lv + 1), name="b_first")
        b_need = Signal(range(Lv + 1), name="b_need")
        m.d.comb += b_need.eq(b_nd - b_first)
        b_c = Signal(range(Lv + 1), name="b_c")         # codes taken now
        m.d.comb += b_c.eq(Mux(VC.ones < b_need, VC.ones, b_need))
        b_complete = Signal(name="b_complete")
        m.d.comb += b_complete.eq(b_c == b_need)
        b_skip = Signal(name="b_skip")
        m.d.comb += b_skip.eq(b_complete & b_cend)
        b_ok = Signal(name="b_ok")
        m.d.comb += b_ok.eq(b_live & bc_free & (b_complete | (VC.whole & (b_c != 0)))
                            & (~b_skip | VC.skip_ok | VC.skip_err))
        b_long = b_skip & VC.skip_err
        b_fire = Signal(name="b_fire")
        m.d.comb += [b_fire.eq(b_ok & ~b_long), VC.take.eq(b_c), VC.skip.eq(b_skip), VC.commit.eq(b_fire)]
        short = b_live & (b_c == 0) & ~b_complete & VC.whole     # a whole span and no code of the half in it
        b_err = Cat(short & ~VC.end_in_span, short & VC.end_in_span, b_ok & b_long)
        with m.If(b_err.any() & ~halt):
            m.d.sync += b_fault.eq(b_err)
        m.d.comb += s_taken.eq(Mux(full, b_fire & b_complete & half_fin, s_valid & self.out.ready))
        with m.If(b_fire):
            m.d.sync += b_first.eq(Mux(b_complete, 0, b_first + b_c))
            with m.If(b_complete & ~half_fin):
                m.d.sync += s_half.eq(1)

        # BC: the half as pass B took it: VC's span and its prefix (the codes' positions come from registers), the
        # half's draft-zero flags, draft values and rest widths, which BR and DF carry on
        half = [{key: Mux(s_half, drafts[Lv + i][key], drafts[i][key]) for key in ("draft", "rest_w")}
                for i in range(Lv)]
        bc = {"valid": Signal(name="bc_valid"), "span": datapath(len(VC.span), "bc_span"),
              "pre": datapath(len(VC.span_prefix), "bc_pre"), "c": datapath(range(Lv + 1), "bc_c"),
              "first": datapath(range(Lv + 1), "bc_first"), "complete": datapath(1, "bc_complete")}
        br = {"valid": Signal(name="br_valid")}
        df = {"valid": Signal(name="df_valid")}
        for st, name in ((bc, "bc"), (br, "br"), (df, "df")):
            st.update(dz=datapath(Lv, f"{name}_dz"), inb=datapath(Lv, f"{name}_in"),
                      draft=[datapath(16, f"{name}_draft{i}") for i in range(Lv)],
                      rw=[datapath(4, f"{name}_rest_w{i}") for i in range(Lv)],
                      x=datapath(X_BITS, f"{name}_x"), n=datapath(range(Lv + 1), f"{name}_n"),
                      sb_end=datapath(1, f"{name}_sb_end"), last=datapath(1, f"{name}_last"),
                      cend=datapath(1, f"{name}_cend"))

        def carry(dst, src):
            """The half's lane data from one pass B stage to the next."""
            return ([dst[k].eq(src[k]) for k in ("dz", "inb", "x", "n", "sb_end", "last", "cend")]
                    + [dst["draft"][i].eq(src["draft"][i]) for i in range(Lv)]
                    + [dst["rw"][i].eq(src["rw"][i]) for i in range(Lv)])

        r_go = Signal(name="r_go")
        m.d.comb += bc_free.eq(~bc["valid"] | r_go)
        with m.If(b_fire):
            hn = Mux(s_half, s_n - Lv, Mux(s_n < Lv, s_n, Lv))
            m.d.sync += [bc["valid"].eq(1), bc["span"].eq(VC.span), bc["pre"].eq(VC.span_prefix), bc["c"].eq(b_c),
                         bc["first"].eq(b_first), bc["complete"].eq(b_complete),
                         bc["dz"].eq(Mux(s_half, s_dz[Lv:], s_dz[:Lv])), bc["inb"].eq(thermometer(hn, Lv)),
                         bc["x"].eq(s_x), bc["n"].eq(hn), bc["sb_end"].eq(half_fin & s_sb_end),
                         bc["last"].eq(half_fin & s_last), bc["cend"].eq(b_cend)]
            m.d.sync += [bc["draft"][i].eq(half[i]["draft"]) for i in range(Lv)]
            m.d.sync += [bc["rw"][i].eq(half[i]["rest_w"]) for i in range(Lv)]
        with m.Elif(r_go):
            m.d.sync += bc["valid"].eq(0)

        # BC -> BR: the ranks of the half's codes (the positions of the ones number 0 .. nd in the span)
        pos, head = one_positions(m, bc["span"], bc["pre"], VC.prefix_bits, Lv, "r_pos")
        ranks = code_ranks(m, pos, head, Lv, "r_rank")
        code_bad = Cat(*[(j < bc["c"]) & (ranks[j] > p.verif_q) for j in range(Lv)]).any()
        br_bad = Signal(name="br_code_err")
        br_q = [datapath(4, f"br_q{j}") for j in range(Lv)]
        br_dz, br_in, br_rw = br["dz"], br["inb"], br["rw"]
        br_valid = br["valid"]
        df_free = Signal(name="df_free")
        d_go = Signal(name="d_go")
        m.d.comb += [d_go.eq(br_valid & ~br_bad & df_free & ~halt), r_go.eq(bc["valid"] & ~halt & (~br_valid | d_go))]
        # a part's codes go to the half's code slots first .. first + c - 1; BR is valid with the last part
        with m.If(r_go):
            m.d.sync += [br_valid.eq(bc["complete"]), br_bad.eq(code_bad | ((bc["first"] != 0) & br_bad))]
            m.d.sync += carry(br, bc)
            for k in range(Lv):
                j = (k - bc["first"])[:bits_for(Lv)]
                with m.If((bc["first"] <= k) & (k < bc["first"] + bc["c"])):
                    m.d.sync += br_q[k].eq(Array(r[:4] for r in ranks)[j] if Lv > 1 else ranks[0][:4])
        with m.Elif(d_go):
            m.d.sync += br_valid.eq(0)

        slot = prefix_counts(m, br_dz, Lv, "d_slot")
        widths, d_lane = [], []
        for i in range(Lv):
            q = Signal(4, name=f"d_q{i}")
            m.d.comb += q.eq(Array(br_q)[slot[i]] if i else br_q[0])
            esc = Signal(name=f"d_esc{i}")
            pair = Signal(name=f"d_pair{i}")
            m.d.comb += [esc.eq(br_dz[i] & (q == p.verif_q)), pair.eq(br_dz[i] & ~esc & p.verif_pairs.bit_select(q, 1))]
            w = Signal(5, name=f"d_w{i}")
            m.d.comb += w.eq(Mux(br_in[i], Mux(br_dz[i], Mux(esc, ESCAPE_PAYLOAD_BITS, pair) + 8, br_rw[i]), 0))
            widths.append(w)
            d_lane.append({"esc": esc, "pair": pair, "base": Array(p.verif_base[e] for e in range(K_MAX))[q]})
        offs = prefix_sums(m, widths, bits_for(REST_LANE_BITS * Lv), "d_off")
        df_valid = df["valid"]
        df_off = [datapath(range(REST_LANE_BITS * Lv), f"df_off{i}") for i in range(Lv)]
        df_take = datapath(range(REST_LANE_BITS * Lv + 1), "df_take")
        df_esc, df_pair = datapath(Lv, "df_esc"), datapath(Lv, "df_pair")
        df_base = [datapath(4, f"df_base{i}") for i in range(Lv)]
        df_dz, df_draft, df_rw, df_x, df_n = df["dz"], df["draft"], df["rw"], df["x"], df["n"]
        df_sb_end, df_last, df_cend = df["sb_end"], df["last"], df["cend"]
        f_fire = Signal(name="f_fire")
        m.d.comb += df_free.eq(~df_valid | f_fire)
        with m.If(d_go):
            m.d.sync += [df_valid.eq(1), df_take.eq(offs[Lv]), df_esc.eq(Cat(*[ln["esc"] for ln in d_lane])),
                         df_pair.eq(Cat(*[ln["pair"] for ln in d_lane]))] + carry(df, br)
            m.d.sync += [df_off[i].eq(offs[i]) for i in range(Lv)] + [df_base[i].eq(d_lane[i]["base"]) for i in range(Lv)]
        with m.Elif(f_fire):
            m.d.sync += df_valid.eq(0)

        # F: rest fields [escape's 8 raw bits | a pair's suffix bit][(s << 7) | f] of a draft-zero lane, the
        # T low mantissa bits of any other; exponent X - delta, delta = the escape's bits or S[b_q + t]
        tab = Array(p.verif_tab[e] for e in range(K_MAX))
        full_vals, negs = [], []
        gt = Signal(K_MAX + 1, name="f_gt")             # gt[e]: S[e] > X (e = 15: none)
        m.d.comb += gt.eq(Cat(*[p.verif_tab[e] > df_x for e in range(K_MAX)], Const(0, 1)))
        for i in range(Lv):
            f = shift_right(m, RS.win, df_off[i], REST_LANE_BITS, f"f_field{i}") if i else RS.win[:REST_LANE_BITS]
            esc, pair, dzi = df_esc[i], df_pair[i], df_dz[i]
            t = pair & f[0]
            body = Signal(8, name=f"f_body{i}")
            m.d.comb += body.eq(Mux(esc, f[8:16], Mux(pair, f[1:9], f[0:8])))
            delta = Signal(X_BITS, name=f"f_delta{i}")
            m.d.comb += delta.eq(Mux(esc, f[:8], tab[(df_base[i] + t)[:4]]))
            low = f[:8] & ~(Const(0xFF, 8) << df_rw[i])[:8]
            v = Signal(16, name=f"f_value{i}")
            m.d.comb += v.eq(Mux(dzi, Cat(body[:7], (df_x - delta)[:8], body[7]), df_draft[i] | low))
            full_vals.append(Mux(i < df_n, v, 0))
            # X - delta < 0 off the reader's loop: which book entries exceed X comes from registers (gt), the
            # suffix bit picks one of the lane's two candidates
            b0 = df_base[i]
            n_t = Mux(t, gt.bit_select((b0 + 1)[:4], 1), gt.bit_select(b0, 1))
            negs.append(dzi & Mux(esc, f[:8] > df_x, n_t))
        f_neg = Cat(*negs).any()
        f_ready = Signal(name="f_ready")
        m.d.comb += f_ready.eq(df_valid & ~halt & (RS.avail >= df_take) & (~df_cend | RS.skip_ok | RS.skip_err))
        f_long = df_cend & RS.skip_err
        f_emit = Signal(name="f_emit")
        m.d.comb += [f_emit.eq(f_ready & ~f_long & ~f_neg),
                     RS.take.eq(df_take), RS.skip.eq(df_cend), RS.commit.eq(f_fire)]
        f_err = Cat(f_ready & ~f_long & f_neg, df_valid & RS.end_seen & (RS.avail < df_take), f_ready & f_long)

        # ------------------------------------------------------------------ out
        with m.If(full):
            m.d.comb += [self.out.valid.eq(f_emit), f_fire.eq(f_emit & self.out.ready),
                         self.out.payload.count.eq(df_n), self.out.payload.sb_end.eq(df_sb_end),
                         self.out.payload.last.eq(df_last)]
            m.d.comb += [self.out.payload.lanes[i].eq(full_vals[i]) for i in range(Lv)]
        with m.Else():
            m.d.comb += [self.out.valid.eq(s_valid), self.out.payload.count.eq(s_n),
                         self.out.payload.sb_end.eq(s_sb_end), self.out.payload.last.eq(s_last)]
            m.d.comb += [self.out.payload.lanes[i].eq(drafts[i]["draft"]) for i in range(L)]

        # ------------------------------------------------------------------ control state, errors
        m.d.sync += [pre_init.eq(0), init.eq(pre_init)]
        start_err = Signal(len(err), name="start_err")
        cfg_bad = p.bad | (numel == 0)
        with m.If(start & ~busy & ~err.any() & ~halt):
            m.d.comb += [start_err[Err.CONFIG].eq(cfg_bad), start_err[Err.NO_BOOK].eq(~cfg_bad & p.no_book)]
            with m.If(~cfg_bad & ~p.no_book):
                m.d.comb += start_ok.eq(1)
                m.d.sync += [busy.eq(1), pre_init.eq(1)]
        # an error waits until the stages after the one that found it are empty (their beats go out first)
        after_b = ~bc["valid"] & ~br_valid & ~df_valid
        s_empty = ~ent[0]["valid"] & ~ent[1]["valid"]
        with m.If(busy & ~halt):
            m.d.comb += [raise_err[Err.OVERRUN].eq(Mux(s_empty & after_b, i_fault[0], 0) | Mux(after_b, b_fault[1], 0)
                                                   | f_err[1]),
                         raise_err[Err.TOO_LONG].eq(Mux(s_empty & after_b, i_fault[1], 0) | Mux(after_b, b_fault[2], 0)
                                                    | f_err[2]),
                         raise_err[Err.KEEP].eq(Mux(s_empty & after_b, i_fault[2], 0)),
                         raise_err[Err.CODE].eq(Mux(after_b, b_fault[0], 0) | (br_valid & br_bad & ~df_valid)
                                                | f_err[0])]
        with m.If(init & p.bad_books):
            m.d.comb += raise_err[Err.CONFIG].eq(1)
        with m.If(self.out.valid & self.out.ready & self.out.payload.last):
            m.d.sync += busy.eq(0)
        self._sticky_errors(m, err, fault, raise_err, halt, start_err, clear, busy,
                            [pre_init.eq(0), init.eq(0), running.eq(0), ent[0]["valid"].eq(0), ent[1]["valid"].eq(0),
                             s_wp.eq(0), s_rp.eq(0), s_half.eq(0), b_first.eq(0), i_fault.eq(0), b_fault.eq(0),
                             bc["valid"].eq(0), br_valid.eq(0), df_valid.eq(0)])
        return m


class DecoderC2v3(_C2v3Interface, DecoderC1):
    """C2 decoder v3 with its own tensor registers: ``TensorRegisters("c2")`` and one ``DecoderC2v3Core``
    behind the C2 decoder interface. Parameters as ``DecoderC2v3Core``."""

    ERROR_CLEARS_BEATS = DecoderC2v3Core.ERROR_CLEARS_BEATS

    def __init__(self, lanes: int = 8, word: int | None = None, verif_word: int | None = None,
                 slots: int | None = None):
        self._core_args = (lanes, word, verif_word, slots)
        wiring.Component.__init__(self, self._set_interface(lanes, word, verif_word))

    def elaborate(self, platform):
        m = Module()
        wrap_cluster_core(m, self, TensorRegisters("c2"), DecoderC2v3Core(*self._core_args),
                          ("spec_mx", "verif_codes", "verif_rest"))
        return m
