"""Online KV-cache encoder, Cassandra-1: one KV vector (= one superblock of G = head_dim values) at a
time in, the four C1 planes out, bit-exactly what ``golden.codec.encode_tensor(..., kind="kv",
books=(spec, verif))`` emits (docs/FORMAT.md sections 2, 3; docs/HARDWARE.md section 3).

Per vector (see docs/HARDWARE.md section 3 for the throughput this gives):

1. LOAD   ``G/L`` input beats of L values are written into one of two vector buffers ("slots", G x 16
          flip-flops each: the selection below reads every key in parallel). Vectors alternate
          between the slots; a slot is refilled behind the emission of the vector it holds.
2. SELECT exact top-``k`` by the magnitude key ``bits & 0x7FFF`` with ties to the lower index, as a
          radix-4 select: for each 2-bit digit of the 15-bit key, MSB digit first, count the values
          that match the threshold prefix found so far and whose digit is >= 1, >= 2, >= 3 (three
          G-input popcounts per cycle, 8 cycles); the result is the k-th largest key ``t`` and ``r``,
          how many values equal to ``t`` are kept (the first ``r`` of them by index). Skipped when
          ``k = G`` (nothing is pruned). Runs on one slot while the other slot's vector is emitted.
3. EMIT   ``G/L`` beats: lane i is kept iff ``key > t`` or (``key == t`` and fewer than ``r`` equal
          keys came before it - a running count plus an L-lane prefix count). Per lane the code of its
          symbol (a CAM lookup in the programmed book: rank or escape), its sign/mantissa field and its
          verification code / rest field; per plane an L-field packer (prefix sum of the field widths)
          feeds a BitWriter, which closes the superblock's chunk after the last beat.

``KvEncoderBase`` holds what every KV encoder scheme shares (ports, registers, the two-slot pipeline with
its loader and select unit, keep decision, code CAM, field packer, plane writers); the Cassandra-2 encoder
(hw/encoder_c2.py) is built from the same pieces.
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from ..golden.config import (ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, ESCAPE_PAYLOAD_BITS,
                             K_MAX, MAGNITUDE_MASK, MAX_CODE_BITS, PRUNED)
from .bitreader import word_layout
from .bitwriter import BitWriter
from .decoder import (BF16_BITS, ERROR_BITS, FIELD_MAX, MAX_LANES, MAX_WORD, SYMBOL_BITS, Err, Reg, cfg_layout,
                      codebook_register_cases)
from .zero_counter import prefix_counts

KEY_BITS = bits_for(MAGNITUDE_MASK)       # 15
FRAME_ERR = 6                             # error_code bit: `last` not on the vector's final beat
# Radix of the top-k select: SELECT_BITS key bits per cycle. 2 (radix 4) takes 8 cycles with 3 G-input
# popcounts per cycle; 1 (radix 2) took 15 cycles with one popcount (docs/HARDWARE.md section 3).
SELECT_BITS = 2
SELECT_RADIX = 1 << SELECT_BITS
SELECT_DIGITS = -(-KEY_BITS // SELECT_BITS)
SELECT_KEY_BITS = SELECT_DIGITS * SELECT_BITS


def popcount(bits: list):
    """Balanced adder tree (a linear sum would be a G-deep carry chain)."""
    level = list(bits)
    while len(level) > 1:
        nxt = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0] if level else Const(0, 1)


def in_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({"lanes": data.ArrayLayout(BF16_BITS, lanes), "last": 1})


def bf16_fields(v):
    """(sign, biased exponent, mantissa) slices of a bf16 pattern."""
    return v[BF16_BITS - 1], v[BF16_MANTISSA_BITS:BF16_BITS - 1], v[:BF16_MANTISSA_BITS]


class KvEncoderBase(wiring.Component):
    """Shared skeleton of the online KV encoders. A subclass sets ``PLANES`` (its output plane ports) and
    writes ``elaborate`` from the pieces below.

    Parameters
        lanes      L, values per input beat (divides every allowed G)
        word       IW, bits per output word on every plane
        max_group  largest G the vector buffer holds (32..256)
    """

    PLANES: tuple[str, ...] = ()

    def __init__(self, lanes: int = 8, word: int | None = None, max_group: int = 128):
        word = 8 * lanes if word is None else word
        if not isinstance(lanes, int) or not 1 <= lanes <= MAX_LANES or min(ALLOWED_GROUP_SIZES) % lanes:
            raise ConfigError(f"lanes must divide {min(ALLOWED_GROUP_SIZES)} (1..{MAX_LANES}), got {lanes!r}")
        if not isinstance(word, int) or word < 8 or word % 8 or word > MAX_WORD:
            raise ConfigError(f"word must be a multiple of 8 bits in 8..{MAX_WORD}, got {word!r}")
        if max_group not in ALLOWED_GROUP_SIZES:
            raise ConfigError(f"max_group must be one of {ALLOWED_GROUP_SIZES}, got {max_group!r}")
        self.lanes, self.word, self.max_group = lanes, word, max_group
        plane = stream.Signature(word_layout(word))
        ports = {"inp": In(stream.Signature(in_layout(lanes))), "cfg": In(stream.Signature(cfg_layout))}
        ports.update({p: Out(plane) for p in self.PLANES})
        ports.update({"busy": Out(1), "error": Out(1), "error_code": Out(ERROR_BITS)})
        super().__init__(ports)

    # ------------------------------------------------------------------------------------------ registers
    def _registers(self, m):
        r = {
            "m": Signal(range(BF16_MANTISSA_BITS + 1), name="reg_m"),
            "k": Signal(range(max(ALLOWED_GROUP_SIZES) + 1), name="reg_k", init=1),
            "g": Signal(range(max(ALLOWED_GROUP_SIZES) + 1), name="reg_g", init=self.max_group),
            "spec_k": Signal(range(K_MAX + 1), name="reg_spec_k"),
            "verif_k": Signal(range(K_MAX + 1), name="reg_verif_k"),
            "spec_loaded": Signal(name="spec_loaded"), "verif_loaded": Signal(name="verif_loaded"),
            "bad": Signal(name="bad_write"),
            "spec_tab": [Signal(SYMBOL_BITS, name=f"spec_sym{i}") for i in range(K_MAX)],
            "verif_tab": [Signal(BF16_EXPONENT_BITS, name=f"verif_sym{i}") for i in range(K_MAX)],
        }
        return r

    def _write_registers(self, m, r, clear):
        cfg = self.cfg
        addr, wdata = cfg.payload.addr, cfg.payload.data
        with m.If(cfg.valid & cfg.ready):
            with m.Switch(addr):
                with m.Case(Reg.CTRL):
                    m.d.comb += clear.eq(wdata[1])
                with m.Case(Reg.MBITS):
                    m.d.sync += [r["m"].eq(wdata), r["bad"].eq(wdata > BF16_MANTISSA_BITS)]
                with m.Case(Reg.KEEP):
                    m.d.sync += r["k"].eq(Mux(wdata > self.max_group, 0, wdata))
                with m.Case(Reg.GROUP):
                    m.d.sync += r["g"].eq(Mux(wdata > self.max_group, 0, wdata))
                codebook_register_cases(m, r, wdata)

    def _control_signals(self, m):
        """Registers, the CLEAR_ERROR strobe and the sticky error register with its raise vector (shared by
        the C1 and C2 encoders); drives error_code and error."""
        r = self._registers(m)
        clear = Signal()
        self._write_registers(m, r, clear)
        err = Signal(ERROR_BITS)
        raise_err = Signal(ERROR_BITS)
        m.d.comb += [self.error_code.eq(err), self.error.eq(err.any())]
        return r, clear, err, raise_err

    def _geometry_ok(self, r):
        """MBITS, KEEP and GROUP form a valid config of the format for this buffer."""
        g_ok = Const(0, 1)
        for g in ALLOWED_GROUP_SIZES:
            if g <= self.max_group:
                g_ok = g_ok | (r["g"] == g)
        return g_ok & ~r["bad"] & (r["k"] != 0) & (r["k"] <= r["g"])

    # ------------------------------------------------------------------------------------------ code CAM
    @staticmethod
    def _code(m, sym, table, K, name):
        """(value, width) of the rank-unary code of ``sym``: rank r -> 1 << r (r+1 bits); not in the book
        -> escape (1 << K) | (sym << (K+1)), K+9 bits."""
        hit = [Signal(name=f"{name}_hit{i}") for i in range(K_MAX)]
        for i in range(K_MAX):
            m.d.comb += hit[i].eq((table[i] == sym) & (i < K))
        rank = Signal(range(K_MAX + 1), name=f"{name}_rank")
        found = Signal(name=f"{name}_found")
        acc = Const(0, bits_for(K_MAX))
        for i in range(K_MAX):
            acc = acc | Mux(hit[i], i, 0)             # books hold distinct symbols: at most one hit
        m.d.comb += [rank.eq(acc), found.eq(Cat(*hit).any())]
        value = Signal(MAX_CODE_BITS, name=f"{name}_val")
        width = Signal(range(MAX_CODE_BITS + 1), name=f"{name}_w")
        esc_value = (Const(1, MAX_CODE_BITS) << K) | (sym[:ESCAPE_PAYLOAD_BITS] << (K + 1))
        m.d.comb += [
            value.eq(Mux(found, Const(1, MAX_CODE_BITS) << rank, esc_value)),
            width.eq(Mux(found, rank + 1, K + 1 + ESCAPE_PAYLOAD_BITS)),
        ]
        return value, width

    def _pack(self, m, fields, name):
        """Concatenate L (value, width) fields, lane 0 first: offsets are an exclusive prefix sum."""
        total_w = sum(max(1, len(v)) for v, _ in fields)
        packed = Const(0, total_w)
        off = Const(0, 1)
        for i, (v, w) in enumerate(fields):
            o = Signal(bits_for(total_w), name=f"{name}_off{i}")
            m.d.comb += o.eq(off)
            packed = packed | (v << o)
            off = o + w
        n = Signal(bits_for(total_w), name=f"{name}_n")
        bits = Signal(total_w, name=f"{name}_bits")
        m.d.comb += [n.eq(off), bits.eq(packed)]
        return bits, n, total_w

    def _writer(self, m, pname, group, slack=0):
        """A BitWriter of ``group``-bit groups driving output plane ``pname``."""
        w = BitWriter(self.word, group, slack)
        m.submodules[f"{pname}_wr"] = w
        wiring.connect(m, w.out, wiring.flipped(getattr(self, pname)))
        return w

    # ------------------------------------------------------------------------------ buffer and selection
    def _pipeline(self, m, r, err, raise_err, clear, first_beat_errors, map_pass=None):
        """Two vector buffers (slots) and the front end shared by the KV encoders.

        Vectors alternate between the slots. A slot holds one vector from its load to the end of its
        emission (``has``); ``seld`` marks it selected. Three pointers walk the slots in vector order:
        ``ls`` (loading), ``ss`` (selecting), ``es`` (emitting). So SELECT of vector n+1 runs in one
        slot while vector n is emitted from the other, and vector n+2 loads into n's slot behind its
        emission (beats already emitted), so input streams at the emission rate.

        * loader: input beats into slot ``ls``; raises the first-beat (``first_beat_errors``) and FRAME
          errors; while ``error`` is set it drains ``inp``.
        * selector FSM: the radix select on slot ``ss`` (one select unit, its G inputs muxed between the
          slots), results t / r per slot; then ``map_pass`` (C2's keep-bitmap pass), if any.
        * the emitter is the subclass's: it starts when ``has[es] & seld[es]``, drives ``emitting`` and
          ``ebeat`` (the loader fills slot ``es`` behind it) and calls ``emit_done()`` after the last beat.
        Returns a namespace with all of it."""
        L, GM = self.lanes, self.max_group
        p = SimpleNamespace()
        p.bufs = [[Signal(BF16_BITS, name=f"b{j}_{i}") for i in range(GM)] for j in range(2)]
        p.beats = GM // L
        p.nbeats = Signal(range(p.beats + 1), name="nbeats")
        m.d.comb += p.nbeats.eq(r["g"] >> exact_log2(L))
        p.prunes = Signal(name="vec_prunes")              # k < G: the config prunes, SELECT is needed
        m.d.comb += p.prunes.eq(r["k"] != r["g"])
        p.has, p.seld = Signal(2, name="slot_has"), Signal(2, name="slot_selected")
        set_has, clr_has = Signal(2, name="set_has"), Signal(2, name="clr_has")
        set_seld = Signal(2, name="set_seld")
        m.d.sync += [p.has.eq((p.has | set_has) & ~clr_has), p.seld.eq((p.seld | set_seld) & ~clr_has)]
        p.ls, p.ss, p.es = Signal(name="load_slot"), Signal(name="sel_slot"), Signal(name="emit_slot")
        p.t = [Signal(KEY_BITS, name=f"t{j}") for j in range(2)]           # k-th largest key per slot
        p.r = [Signal(range(GM + 1), name=f"r{j}") for j in range(2)]      # keys equal to t kept
        p.emitting = Signal(name="emitting")
        p.ebeat = Signal(range(p.beats + 1), name="ebeat")

        # ---- loader
        p.lbeat = Signal(range(p.beats + 1), name="lbeat")
        behind = Signal(name="load_behind_emit")
        m.d.comb += behind.eq(p.emitting & (p.es == p.ls) & (p.lbeat < p.ebeat))
        p.can_load = Signal(name="can_load")
        m.d.comb += p.can_load.eq(~err.any() & (~p.has.bit_select(p.ls, 1) | behind))
        p.load, p.load_last, p.load_done = Signal(name="load"), Signal(name="load_last"), Signal(name="load_done")
        m.d.comb += [p.load.eq(self.inp.valid & p.can_load), p.load_last.eq(p.lbeat + 1 == p.nbeats),
                     p.load_done.eq(p.load & p.load_last & ~raise_err.any()),
                     self.inp.ready.eq(p.can_load | err.any())]      # drain while in error
        # One write enable per (slot, beat): a decoder of 2·G/L terms, each writing L values.
        for k in range(2):
            for b in range(p.beats):
                with m.If(p.load & (p.ls == k) & (p.lbeat == b)):
                    m.d.sync += [p.bufs[k][b * L + i].eq(self.inp.payload.lanes[i]) for i in range(L)]
        with m.If(p.load):
            with m.If(p.lbeat == 0):
                first_beat_errors()
            # nbeats = 0 (GROUP above max_group reads as 0) never matches: the first beat raises CONFIG.
            with m.If(self.inp.payload.last != p.load_last):
                m.d.comb += raise_err[FRAME_ERR].eq(1)
            m.d.sync += p.lbeat.eq(p.lbeat + 1)
        with m.If(p.load_done):
            m.d.sync += [p.lbeat.eq(0), p.ls.eq(~p.ls)]
            m.d.comb += set_has.eq(Mux(p.ls, 0b10, 0b01))
        with m.If(clear):
            m.d.sync += p.lbeat.eq(0)                     # the vector cut by the error is dropped

        # ---- selector: radix select on slot ss
        p.sel_vals = []
        for i in range(GM):
            v = Signal(BF16_BITS, name=f"sel_v{i}")
            m.d.comb += v.eq(Mux(p.ss, p.bufs[1][i], p.bufs[0][i]))
            p.sel_vals.append(v)
        sel = self._select_unit(m, r, p.sel_vals)
        p.sel = sel
        p.sel_done = Signal(name="sel_done")              # the slot's selection (and map pass) is complete
        with m.If(p.sel_done):
            m.d.comb += set_seld.eq(Mux(p.ss, 0b10, 0b01))
            m.d.sync += p.ss.eq(~p.ss)
        p.t_sel = Signal(KEY_BITS, name="sel_slot_t")       # the selected slot's results (map pass)
        p.r_sel = Signal(range(GM + 1), name="sel_slot_r")
        m.d.comb += [p.t_sel.eq(Mux(p.ss, p.t[1], p.t[0])), p.r_sel.eq(Mux(p.ss, p.r[1], p.r[0]))]

        def store(t, rr):
            for j in range(2):
                with m.If(p.ss == j):
                    m.d.sync += [p.t[j].eq(t), p.r[j].eq(rr)]

        def select_finished():
            store(sel.prefix_next, sel.rem_next)
            if map_pass is None:
                m.d.comb += p.sel_done.eq(1)
                m.next = "IDLE"
            else:
                m.next = "MAP"

        with m.FSM(name="select"):
            with m.State("IDLE"):
                # The select registers rest at their start values, so the first digit is resolved in
                # the cycle the slot is found loaded (rem starts from KEEP through `sel.first`).
                with m.If(p.has.bit_select(p.ss, 1) & ~p.seld.bit_select(p.ss, 1)):
                    with m.If(p.prunes):
                        m.d.comb += sel.first.eq(1)
                        self._select_advance(m, sel)
                        with m.If(sel.last):
                            select_finished()
                        with m.Else():
                            m.next = "SELECT"
                    with m.Else():
                        # Nothing pruned: t = 0 and all G values "equal or above" are kept.
                        store(0, r["g"])
                        m.d.comb += p.sel_done.eq(1)
            with m.State("SELECT"):
                self._select_advance(m, sel)
                with m.If(sel.last):
                    select_finished()
            if map_pass is not None:
                with m.State("MAP"):
                    with m.If(map_pass(p)):
                        m.d.comb += p.sel_done.eq(1)
                        m.next = "IDLE"
        p.emit_go = Signal(name="emit_go")               # slot es is loaded and selected
        m.d.comb += p.emit_go.eq(p.has.bit_select(p.es, 1) & p.seld.bit_select(p.es, 1))

        def emit_done():
            m.d.comb += clr_has.eq(Mux(p.es, 0b10, 0b01))
            m.d.sync += p.es.eq(~p.es)
        p.emit_done = emit_done
        # The other slot is ready too (its flags as registered): chain emissions without a bubble.
        p.next_go = Signal(name="emit_next_go")
        m.d.comb += p.next_go.eq(p.has.bit_select(~p.es, 1) & p.seld.bit_select(~p.es, 1))
        # Registers may change only with no vector in flight (or, after an error, once the vectors
        # completed before it are out).
        m.d.comb += self.cfg.ready.eq(~p.has.any() & ((p.lbeat == 0) | err.any()))
        return p

    def _select_unit(self, m, r, vals):
        """Radix-select registers and the combinational select step over ``vals``: the candidates are
        the keys that match the prefix above the current digit (SELECT_BITS key bits); count_d =
        candidates whose digit is >= d, for d = 1..R-1 (one G-input popcount each, all in the same
        cycle). The digit of t is the largest d with count_d >= rem (counts fall with d); the
        candidates above it are all kept, so rem drops by count_{d+1}."""
        GM = self.max_group
        s = SimpleNamespace()
        s.digit = Signal(range(SELECT_DIGITS), name="sel_digit", init=SELECT_DIGITS - 1)  # MSB digit first
        s.prefix = Signal(KEY_BITS, name="sel_prefix")             # threshold bits found so far
        s.rem = Signal(range(GM + 1), name="sel_rem")              # values still to keep among the candidates
        s.first = Signal(name="sel_first")                         # first step: rem is KEEP
        rem = Signal(range(GM + 1), name="sel_rem_cur")
        m.d.comb += rem.eq(Mux(s.first, r["k"], s.rem))
        shift = Signal(range(SELECT_KEY_BITS), name="sel_shift")
        m.d.comb += shift.eq(s.digit * SELECT_BITS)
        hi_mask = Signal(SELECT_KEY_BITS, name="sel_hi_mask")
        m.d.comb += hi_mask.eq(~((Const(1, SELECT_KEY_BITS + 1) << (shift + SELECT_BITS)) - 1))
        ge = [Signal(GM, name=f"sel_ge{d}") for d in range(1, SELECT_RADIX)]
        for i in range(GM):
            key = Signal(SELECT_KEY_BITS, name=f"sel_key{i}")     # zero-extended to whole digits
            cand = Signal(name=f"sel_cand{i}")
            dval = Signal(SELECT_BITS, name=f"sel_dval{i}")
            m.d.comb += [key.eq(vals[i][:KEY_BITS]),
                         cand.eq((((key ^ s.prefix) & hi_mask) == 0) & (i < r["g"])),
                         dval.eq(key.bit_select(shift, SELECT_BITS))]
            for d in range(1, SELECT_RADIX):
                m.d.comb += ge[d - 1][i].eq(cand & (dval >= d))
        counts = []
        for d in range(1, SELECT_RADIX):
            c = Signal(range(GM + 1), name=f"sel_count{d}")
            m.d.comb += c.eq(popcount([ge[d - 1][i] for i in range(GM)]))
            counts.append(c)
        dig = Signal(SELECT_BITS, name="sel_d")
        above = Signal(range(GM + 1), name="sel_above")
        d_acc, a_acc = Const(0, SELECT_BITS), counts[0]
        for d in range(1, SELECT_RADIX):
            hit = counts[d - 1] >= rem
            nxt = counts[d] if d < SELECT_RADIX - 1 else Const(0, 1)
            d_acc, a_acc = Mux(hit, d, d_acc), Mux(hit, nxt, a_acc)
        m.d.comb += [dig.eq(d_acc), above.eq(a_acc)]
        s.prefix_next = Signal.like(s.prefix, name="sel_prefix_next")   # t after the last digit
        s.rem_next = Signal.like(s.rem, name="sel_rem_next")            # r after the last digit
        s.last = Signal(name="sel_last")
        m.d.comb += [s.prefix_next.eq(s.prefix | (dig << shift)), s.rem_next.eq(rem - above),
                     s.last.eq(s.digit == 0)]
        return s

    @staticmethod
    def _select_advance(m, s):
        """Register one select step; after the last digit the registers return to their start values."""
        with m.If(s.last):
            m.d.sync += [s.digit.eq(SELECT_DIGITS - 1), s.prefix.eq(0)]
        with m.Else():
            m.d.sync += [s.digit.eq(s.digit - 1), s.prefix.eq(s.prefix_next), s.rem.eq(s.rem_next)]

    @staticmethod
    def _slot_slice(m, p, slot, index, n, name):
        """``n`` buffered values of ``slot`` from ``index * n`` (one pass beat of ``n`` lanes): per lane a
        ``G/n``-way mux in each slot, then the slot mux."""
        vals = [Signal(BF16_BITS, name=f"{name}{i}") for i in range(n)]
        for i in range(n):
            per_slot = [Array(p.bufs[k][i::n])[index] for k in range(2)]
            m.d.comb += vals[i].eq(Mux(slot, per_slot[1], per_slot[0]))
        return vals

    @staticmethod
    def _keep_flags(m, vals, t, r, eq_seen, name):
        """Keep flags of consecutive values after SELECT: ``key > t``, or ``key == t`` and fewer than
        ``r`` equal keys before it (``eq_seen`` from earlier beats plus a prefix count in this one).
        Returns (kept, eq_before); eq_before[n] is the number of keys equal to t here."""
        n = len(vals)
        keys = [v[:KEY_BITS] for v in vals]
        eq_t = Signal(n, name=f"{name}_eq_t")
        m.d.comb += eq_t.eq(Cat(*[k == t for k in keys]))
        eq_before = prefix_counts(m, eq_t, n, f"{name}_eqb")
        kept = Signal(n, name=f"{name}_kept")
        for i in range(n):
            m.d.comb += kept[i].eq((keys[i] > t) | (eq_t[i] & (eq_seen + eq_before[i] < r)))
        return kept, eq_before

    @staticmethod
    def _errors(m, err, raise_err, clear):
        """Sticky error register: set by ``raise_err``, cleared by CTRL CLEAR_ERROR."""
        with m.If(raise_err.any()):
            m.d.sync += err.eq(err | raise_err)
        with m.Elif(clear):
            m.d.sync += err.eq(0)


class EncoderKvC1(KvEncoderBase):
    """Cassandra-1 KV encoder. Parameters: see ``KvEncoderBase``."""

    PLANES = ("spec_codes", "spec_signman", "verif_codes", "verif_rest")

    def _config_ok(self, r):
        # The pruned mark must be in the speculation book whenever the config prunes (it cannot escape).
        has_p = Const(0, 1)
        for i in range(K_MAX):
            has_p = has_p | ((r["spec_tab"][i] == PRUNED) & (i < r["spec_k"]))
        return self._geometry_ok(r) & ((r["k"] == r["g"]) | has_p)

    def _lane_fields(self, m, r, vals, kept):
        """Per lane: (value, width) of its spec code, signman, verif code and rest fields."""
        m_reg = r["m"]
        fr = Signal(range(BF16_MANTISSA_BITS + 1))
        m.d.comb += fr.eq(BF16_MANTISSA_BITS - m_reg)
        spec_f, sm_f, ver_f, rest_f = [], [], [], []
        for i, v in enumerate(vals):
            s, e, f = bf16_fields(v)
            sym = Signal(SYMBOL_BITS, name=f"sym{i}")
            m.d.comb += sym.eq(Mux(kept[i], e, PRUNED))
            spec_f.append(self._code(m, sym, r["spec_tab"], r["spec_k"], f"sc{i}"))
            vv, vw = self._code(m, e, r["verif_tab"], r["verif_k"], f"vc{i}")
            ver_f.append((Mux(kept[i], 0, vv), Mux(kept[i], 0, vw)))   # bits above a field's width stay 0
            smv = Signal(FIELD_MAX, name=f"smv{i}")
            m.d.comb += smv.eq(Cat(f, s) >> fr)           # (s << m) | (f >> (7 - m))
            sm_f.append((Mux(kept[i], smv, 0), Mux(kept[i], m_reg + 1, 0)))
            low = Signal(BF16_MANTISSA_BITS, name=f"low{i}")
            m.d.comb += low.eq(f & ~(Const(0x7F, BF16_MANTISSA_BITS) << fr))
            rest_f.append((Mux(kept[i], low, Cat(f, s)), Mux(kept[i], fr, FIELD_MAX)))
        return {"spec_codes": spec_f, "spec_signman": sm_f, "verif_codes": ver_f, "verif_rest": rest_f}

    # ------------------------------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        L, GM = self.lanes, self.max_group
        r, clear, err, raise_err = self._control_signals(m)

        def first_beat_errors():
            loaded = r["spec_loaded"] & r["verif_loaded"]
            m.d.comb += [raise_err[Err.NO_BOOK].eq(~loaded), raise_err[Err.CONFIG].eq(loaded & ~self._config_ok(r))]

        p = self._pipeline(m, r, err, raise_err, clear, first_beat_errors)

        # ---- emitter: beat ebeat of slot es
        eq_seen = Signal(range(GM + 1), name="eq_seen")  # values equal to t emitted so far
        t, rr = Signal(KEY_BITS, name="emit_t"), Signal(range(GM + 1), name="emit_r")
        m.d.comb += [t.eq(Mux(p.es, p.t[1], p.t[0])), rr.eq(Mux(p.es, p.r[1], p.r[0]))]
        vals = self._slot_slice(m, p, p.es, p.ebeat, L, "lane")
        kept, eq_before = self._keep_flags(m, vals, t, rr, eq_seen, "lane")
        writers = {}
        for pname, flds in self._lane_fields(m, r, vals, kept).items():
            bits_, n_, width_ = self._pack(m, flds, pname)
            w = self._writer(m, pname, width_)
            m.d.comb += [w.bits.eq(bits_), w.n.eq(n_)]
            writers[pname] = w
        all_ready = Signal()
        writers_idle = Signal()
        m.d.comb += [all_ready.eq(Cat(*[w.ready for w in writers.values()]).all()),
                     writers_idle.eq(Cat(*[w.idle for w in writers.values()]).all())]
        m.d.comb += self.busy.eq(((p.lbeat != 0) & ~err.any()) | p.has.any() | ~writers_idle)
        last_beat = Signal(name="last_beat")
        m.d.comb += last_beat.eq(p.ebeat + 1 == p.nbeats)

        with m.FSM(name="emit"):
            with m.State("IDLE"):
                with m.If(p.emit_go):
                    m.d.sync += [p.ebeat.eq(0), eq_seen.eq(0)]
                    m.next = "EMIT"
            with m.State("EMIT"):
                m.d.comb += p.emitting.eq(1)
                for w in writers.values():
                    m.d.comb += [w.valid.eq(all_ready), w.close.eq(last_beat)]
                with m.If(all_ready):
                    m.d.sync += [eq_seen.eq(eq_seen + eq_before[L]), p.ebeat.eq(p.ebeat + 1)]
                    # After the last beat the bit writers close the chunks on their own.
                    with m.If(last_beat):
                        p.emit_done()
                        with m.If(p.next_go):
                            m.d.sync += [p.ebeat.eq(0), eq_seen.eq(0)]
                        with m.Else():
                            m.next = "IDLE"
        self._errors(m, err, raise_err, clear)
        return m
