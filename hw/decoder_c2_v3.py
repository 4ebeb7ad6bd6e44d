"""Cassandra-2 decoder v3 (prototype, draft mode): one bit reader on the block-interleaved ``spec.mx``
(golden/escfield.py: per MX block ``[X][keep bits][kept fields]``), no keep-bitmap FIFO, no ingest tracker.

Every MX block's header sits right before its fields, so the beat that ends a block also reads the next
block's header from the same window, at an offset known from registers (its own field bits). The keep bits
and X of the block being decoded live in two registers (H); a beat's take is a function of H and the
position counters alone, so the reader's loop never goes through the window.

    spec_mx -> BitReader (window 9 L + 40) --win--+--> fields: lane i = (m+2)-bit field number rank_i --> S
                                                  '--> header at the beat's field bits (X, keep bits) --> H
    H (X, keep bits, kept count per beat) + counters -> the beat's kept flags, rank_i, field bits (a table of
        j (m + 2)), take (loop: reader avail >= take -> commit -> read point; depth: two small selects, the
        header add, the reader's compare and pointer add)
    S -> draft arithmetic (FORMAT section 4, hw/decoder_c2_v2.py ``draft_lane``) -> out

Stage I takes one step a cycle: a *beat* (L values of the block in H; the block's last beat also loads the
next block's header unless the block ends its chunk), or at a chunk's first block a *header step* (the
block's X and keep bits only: one cycle per chunk, the next chunk's words start on a word boundary).

Ports, registers and error bits are the C2 decoder's (docs/datasheets/decoder_c2.md); the tensor's registers
come from a cluster's ``TensorRegisters("c2")`` (hw/tensor_regs.py). Not yet in the prototype: full mode
(START in full mode raises CONFIG; the verification ports are not read), the cocotb benches and formal.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In
from amaranth.utils import exact_log2

from ..errors import ConfigError
from ..golden.config import BF16_MANTISSA_BITS, MX_BLOCK
from .bitreader import BitReader, thermometer, view_slots
from .code_reader import popcount
from .decoder import DecoderC1, Err
from .decoder_c2_v2 import MXF, X_BITS, c2v2_signature, draft_consts, draft_lane
from .shifter import shift_right
from .tensor_regs import TENSOR_PARAMS, ClusterCore, TensorRegisters
from .zero_counter import prefix_counts

HEADER_BITS = X_BITS + MX_BLOCK          # a block's X and its keep bits (when the config prunes)


def interface(lanes, word, verif_word) -> dict:
    """The checked parameters of a C2 v3 decoder: L a power of two 4..16 (a beat lies in one MX block),
    spec_mx words a power of two of at least 64 bits (default max(64, 8 L): at L = 8 a beat's fields and its share
    of a block header, 8 (m + 2) keep + 10 bits, fit the word at m <= 4, at m = 5 / 6 / 7 up to keep 0.96 / 0.84 /
    0.75; without pruning the header is 2 bits a beat)."""
    if lanes not in (4, 8, 16):
        raise ConfigError(f"C2 decoder v3 lanes must be 4, 8 or 16, got {lanes!r}")
    word = max(64, 8 * lanes) if word is None else word
    if not isinstance(word, int) or word < 64 or word > 1024 or word & (word - 1):
        raise ConfigError(f"C2 decoder v3 spec_mx word must be a power of two in 64..1024 bits, got {word!r}")
    verif_word = 64 if verif_word is None else verif_word
    return dict(lanes=lanes, word=word, verif_word=verif_word)


class DecoderC2v3Core(ClusterCore, DecoderC1):
    """Cassandra-2 decoder v3 prototype core: ``lanes`` draft values a cycle from the block-interleaved spec.mx.

    Parameters
        lanes        L, values per beat (4, 8 or 16)
        word         bits per spec_mx word (default max(64, 8 L))
        verif_word   bits per word of verif_codes / verif_rest (default 64; not read by the prototype)
        slots        word slots of the spec.mx reader (default: its view + 1, so a word can arrive while the
                     view is full)
    """

    def __init__(self, lanes: int = 8, word: int | None = None, verif_word: int | None = None,
                 slots: int | None = None):
        a = interface(lanes, word, verif_word)
        self.lanes, self.word, self.verif_word = a["lanes"], a["word"], a["verif_word"]
        self.verif_lanes = max(1, lanes // 2)
        self.window = MXF * lanes + HEADER_BITS
        self.slots = view_slots(self.word, self.window) + 1 if slots is None else slots
        self.port_words = {"spec_mx": self.word, "verif_codes": self.verif_word, "verif_rest": self.verif_word}
        wiring.Component.__init__(self, {**c2v2_signature(lanes, self.word, self.verif_word),
                                         "params": In(TENSOR_PARAMS)})

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
        for port in (self.verif_codes, self.verif_rest):      # full mode is not in the prototype
            m.d.comb += port.ready.eq(draining)

        # ------------------------------------------------------------------ position (registers)
        pre_init, init, running = Signal(name="pre_init"), Signal(name="init"), Signal(name="i_running")
        after = Signal(32, name="i_after")              # values of the tensor after the block in H
        h_valid = Signal(name="h_valid")                # H holds the block being decoded
        h_x = Signal(X_BITS, name="h_x")
        h_keep = Signal(MX_BLOCK, name="h_keep")        # its keep bits (all ones up to its size without pruning)
        h_beat = Signal(range(MX_BLOCK // L), name="h_beat")          # the next beat's index in the block
        h_last_beat = Signal(range(MX_BLOCK // L), name="h_last_beat")
        h_tail = Signal(range(L + 1), name="h_tail")    # values of the block's last beat
        h_pops = [Signal(range(L + 1), name=f"h_pop{b}") for b in range(MX_BLOCK // L)]  # kept values per beat
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
        # the loop's take comes from registers through two small selects: the beat's kept count (counted when
        # the block's header was loaded) and its field bits from a table of j (m + 2)
        pop = Signal(range(L + 1), name="i_pop")
        m.d.comb += pop.eq(Array(h_pops)[h_beat])
        fb_tab = [Signal(range(MXF * L + 1), name=f"fb_tab{j}") for j in range(L + 1)]
        m.d.sync += [fb_tab[j].eq(j * (mm + 2)) for j in range(L + 1)]
        fbits = Signal(range(MXF * L + 1), name="i_fbits")      # the beat's field bits
        m.d.comb += fbits.eq(Mux(hstep, 0, Array(fb_tab)[pop]))
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

        # An error stage I finds waits in i_fault until the beat in S has gone out (it is emitted, the step
        # that failed is not), then is raised.
        i_fault = Signal(3, name="i_fault")             # OVERRUN, TOO_LONG, KEEP
        s_valid, s_free = Signal(name="s_valid"), Signal(name="s_free")
        live = Signal(name="i_live")
        m.d.comb += live.eq(running & ~i_fault.any() & ~halt & ~k_wait)
        ok = Signal(name="i_ok")                        # the step's bits are in (and its chunk's end, to skip)
        m.d.comb += ok.eq(live & (hstep | s_free) & (R.avail >= take) & (~skip | R.skip_ok | R.skip_err))
        long = skip & R.skip_err                        # the chunk holds more than its blocks
        fire = Signal(name="i_fire")
        m.d.comb += [fire.eq(ok & ~long & ~keep_bad), R.commit.eq(fire)]
        i_err = Cat(live & R.end_seen & (R.avail < take), ok & long, ok & ~long & keep_bad)
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

        # ------------------------------------------------------------------ S -> out: the draft values
        s_fld = [Signal(MXF, name=f"s_field{i}") for i in range(L)]
        s_kept, s_x = Signal(L, name="s_kept"), Signal(X_BITS, name="s_x")
        s_n = Signal(range(L + 1), name="s_n")
        s_sb_end, s_last = Signal(name="s_sb_end"), Signal(name="s_last")
        m.d.comb += s_free.eq(~s_valid | self.out.ready)
        with m.If(fire & ~hstep):
            m.d.sync += [s_valid.eq(1), s_kept.eq(kb), s_x.eq(h_x), s_n.eq(n), s_sb_end.eq(sb_end),
                         s_last.eq(b_fin & t_last)]
            m.d.sync += [s_fld[i].eq(dense[0] if i == 0 else Cat(*dense[:i + 1]).word_select(rank[i], MXF))
                         for i in range(L)]
        with m.Elif(self.out.ready):
            m.d.sync += s_valid.eq(0)
        k = draft_consts(m, s_x, mm, "o_k")
        for i in range(L):
            lane = {"field": s_fld[i], "kept": s_kept[i]}
            draft_lane(m, k, mm, lane, f"o_d{i}")
            m.d.comb += self.out.payload.lanes[i].eq(lane["draft"])
        m.d.comb += [self.out.valid.eq(s_valid), self.out.payload.count.eq(s_n),
                     self.out.payload.sb_end.eq(s_sb_end), self.out.payload.last.eq(s_last)]

        # ------------------------------------------------------------------ control state, errors
        m.d.sync += [pre_init.eq(0), init.eq(pre_init)]
        start_err = Signal(len(err), name="start_err")
        cfg_bad = p.bad | (numel == 0) | p.full          # full mode: not in the prototype
        with m.If(start & ~busy & ~err.any() & ~halt):
            m.d.comb += start_err[Err.CONFIG].eq(cfg_bad)
            with m.If(~cfg_bad):
                m.d.comb += start_ok.eq(1)
                m.d.sync += [busy.eq(1), pre_init.eq(1)]
        with m.If(busy & ~halt & ~s_valid):
            m.d.comb += [raise_err[Err.OVERRUN].eq(i_fault[0]), raise_err[Err.TOO_LONG].eq(i_fault[1]),
                         raise_err[Err.KEEP].eq(i_fault[2])]
        with m.If(self.out.valid & self.out.ready & s_last):
            m.d.sync += busy.eq(0)
        m.d.sync += fault.eq(Mux(halt, 0, raise_err))
        with m.If(halt):
            m.d.sync += [err.eq(err | fault), busy.eq(0), pre_init.eq(0), init.eq(0), running.eq(0),
                         s_valid.eq(0), i_fault.eq(0)]
        with m.Elif(start_err.any()):
            m.d.sync += err.eq(err | start_err)
        with m.Elif(clear & ~busy):
            m.d.sync += err.eq(0)
        return m


class DecoderC2v3(DecoderC1):
    """C2 decoder v3 with its own tensor registers: ``TensorRegisters("c2")`` and one ``DecoderC2v3Core``
    behind the C2 decoder interface. Parameters as ``DecoderC2v3Core``."""

    def __init__(self, lanes: int = 8, word: int | None = None, verif_word: int | None = None,
                 slots: int | None = None):
        a = interface(lanes, word, verif_word)
        self._core_args = (lanes, word, verif_word, slots)
        self.lanes, self.word, self.verif_word = a["lanes"], a["word"], a["verif_word"]
        self.verif_lanes = max(1, lanes // 2)
        self.port_words = {"spec_mx": self.word, "verif_codes": self.verif_word, "verif_rest": self.verif_word}
        wiring.Component.__init__(self, c2v2_signature(lanes, self.word, self.verif_word))

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = TensorRegisters("c2")
        m.submodules.core = core = DecoderC2v3Core(*self._core_args)
        for port in ("spec_mx", "verif_codes", "verif_rest"):
            wiring.connect(m, wiring.flipped(getattr(self, port)), getattr(core, port))
        wiring.connect(m, core.out, wiring.flipped(self.out))
        m.d.comb += [core.params.eq(regs.params), regs.accept.eq(~core.busy),
                     regs.cfg.payload.eq(self.cfg.payload), core.cfg.payload.eq(self.cfg.payload),
                     regs.cfg.valid.eq(self.cfg.valid), core.cfg.valid.eq(self.cfg.valid),
                     self.cfg.ready.eq(core.cfg.ready),
                     self.busy.eq(core.busy), self.error.eq(core.error), self.error_code.eq(core.error_code)]
        return m
