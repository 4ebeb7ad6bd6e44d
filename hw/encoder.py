"""Online KV-cache encoder, Cassandra-1: one KV vector (= one superblock of G = head_dim values) at a
time in, the four C1 planes out, bit-exactly what ``golden.kv.encode_kv(bits, cfg, (spec, verif))`` emits in
format 3.0 (docs/FORMAT.md sections 2, 3; docs/datasheets/kv_encoders.md).

Sized for the KV rate (docs/datasheets/kv_encoders.md, "Rate"): the KV cache is written at the prefill rate,
well under one value per PE cycle for a Llama-3-8B-class model, so the encoder has ONE vector buffer in a
``lib.memory.Memory`` (rows of R = max(8, L) values; a flow maps it to an SRAM / latch array or, as this
project's generic flow does, to flip-flops), a sequential top-k select over the buffered vector and an
L-lane emitter (L = 2 in the default configuration). Per vector:

1. LOAD   ``G/L`` input beats into the buffer, behind the emission of the previous vector (a row is
          written once the emitter has read it). The beats also feed the first select digit's histogram.
2. SELECT (only when ``k < G``) exact top-``k`` by the magnitude key ``bits & 0x7FFF`` with ties to the
          lower index, as a radix-16 select over the 16-bit zero-extended key, MSB digit first: per digit
          a histogram pass counts, for v = 1..15, the candidates (values matching the threshold prefix
          found so far) whose digit is >= v; the digit of t is the largest v whose count still reaches
          the number of values left to keep. The first digit's counts come from the load; the three
          others re-read the buffer, one row (R values) per cycle, ``G/R + 2`` cycles per digit with its
          resolve step. Result: the k-th largest key ``t`` and ``r``, how many keys equal to ``t`` are
          kept (the first ``r``).
3. EMIT   ``G/L`` beats: buffer row (the read port's register) -> stage 1 (registered: the beat's L values
          and keep flags) -> per-plane packed fields -> BitWriters. Lane i is kept iff ``key > t`` or
          (``key == t`` and fewer than ``r`` equal keys came before it). Per lane ONE CAM lookup of its
          exponent (speculation book when kept, verification book when pruned), its sign/mantissa field
          and its rest field (an escaped exponent's 8 raw bits in front of the one its code pairs with);
          per plane an L-field packer feeds a BitWriter, which closes the chunk after the last beat.

The one buffer serialises SELECT with EMIT (a second buffer would double the largest part of the area
for a rate the KV path does not need): a vector costs ``G/L + 3 * (G/R + 2) + 3`` cycles when pruning,
``G/L + 1`` when not (measured: docs/datasheets/kv_encoders.md). ``KvEncoderBase`` holds what both schemes
share (ports, registers, buffer, loader, select, emitter sequencer, code CAM, field packer, plane
writers); the Cassandra-2 encoder
(hw/encoder_c2.py) is built from the same pieces.
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from ..golden.config import (ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, ESCAPE_PAYLOAD_BITS,
                             K_MAX, MAGNITUDE_MASK, PRUNED)
from .bitreader import word_layout
from .bitwriter import BitWriter
from .decoder import (BF16_BITS, ERROR_BITS, FIELD_MAX, MAX_LANES, MAX_WORD, SYMBOL_BITS, Err, Reg, cfg_layout,
                      codebook_register_cases)
from .zero_counter import prefix_counts

KEY_BITS = bits_for(MAGNITUDE_MASK)       # 15
CODE_BITS = K_MAX + 1                     # longest code (format 3.0): an escape at Q = K_MAX, its raw bits elsewhere
FRAME_ERR = 6                             # error_code bit: `last` not on the vector's final beat
# Radix of the sequential top-k select: DIGIT_BITS key bits per histogram pass (radix 16: 15 counters).
DIGIT_BITS = 4
RADIX = 1 << DIGIT_BITS
SELECT_DIGITS = -(-KEY_BITS // DIGIT_BITS)     # 4
SELECT_KEY_BITS = SELECT_DIGITS * DIGIT_BITS   # 16: the key zero-extended to whole digits
MIN_ROW = 8                                   # values per buffer row (at least; R = max(8, L)): 8 values per select
                                              # pass cycle; 16 cost ~2.7 k GE more (read register, popcounts) for ~15 % rate


def popcount(bits: list):
    """Balanced adder tree (a linear sum would be a long carry chain)."""
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
        lanes      L, values per input beat and per emitted beat (divides every allowed G)
        word       IW, bits per output word on every plane (default 8 L, at least 64)
        max_group  largest G the vector buffer holds (32..256)
        pipelined_emit  the emit pipeline of wide encoders (default: on at L >= 4): a register between each
                   plane's packer and its BitWriter (stage 3), and in C2 each lane's exponent alignment
                   computed into stage 1. The packer's offsets are a prefix sum over the L lanes' field
                   widths; with the writer's shift behind it in one cycle encoder_kv_c1_l8 ran at 1.14x and
                   encoder_kv_c2_l8 at 1.01x the PE (docs/datasheets/kv_encoders.md, "Area and clock"). One cycle more
                   latency, the same words and rate (the stages move together).
    """

    PLANES: tuple[str, ...] = ()

    def __init__(self, lanes: int = 2, word: int | None = None, max_group: int = 128,
                 pipelined_emit: bool | None = None):
        if not isinstance(lanes, int) or not 1 <= lanes <= MAX_LANES or min(ALLOWED_GROUP_SIZES) % lanes:
            raise ConfigError(f"lanes must divide {min(ALLOWED_GROUP_SIZES)} (1..{MAX_LANES}), got {lanes!r}")
        word = max(64, 8 * lanes) if word is None else word
        if not isinstance(word, int) or word < 8 or word % 8 or word > MAX_WORD:
            raise ConfigError(f"word must be a multiple of 8 bits in 8..{MAX_WORD}, got {word!r}")
        if max_group not in ALLOWED_GROUP_SIZES:
            raise ConfigError(f"max_group must be one of {ALLOWED_GROUP_SIZES}, got {max_group!r}")
        if pipelined_emit is not None and not isinstance(pipelined_emit, bool):
            raise ConfigError(f"pipelined_emit must be True, False or None (default), got {pipelined_emit!r}")
        self.lanes, self.word, self.max_group = lanes, word, max_group
        self.pipelined_emit = lanes >= 4 if pipelined_emit is None else pipelined_emit
        self.row_values = max(MIN_ROW, lanes)          # R: values per buffer row (divides every G)
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
        """(value, width, escaped) of the group code of ``sym`` in a book without pairs (FORMAT.md §3.1, §5):
        rank r -> ``1 << r`` (r+1 bits); not in the book -> the escape ``1 << K`` (K+1 bits), whose 8 raw
        bits the caller puts in front of the value's companion field (format 3.0)."""
        hit = [Signal(name=f"{name}_hit{i}") for i in range(K_MAX)]
        for i in range(K_MAX):
            m.d.comb += hit[i].eq((table[i] == sym) & (i < K))
        rank = Signal(range(K_MAX + 1), name=f"{name}_rank")
        found = Signal(name=f"{name}_found")
        acc = Const(0, bits_for(K_MAX))
        for i in range(K_MAX):
            acc = acc | Mux(hit[i], i, 0)             # books hold distinct symbols: at most one hit
        m.d.comb += [rank.eq(acc), found.eq(Cat(*hit).any())]
        value = Signal(CODE_BITS, name=f"{name}_val")
        width = Signal(range(CODE_BITS + 1), name=f"{name}_w")
        escaped = Signal(name=f"{name}_esc")
        m.d.comb += [
            value.eq(Const(1, CODE_BITS) << Mux(found, rank, K)),
            width.eq(Mux(found, rank, K) + 1),
            escaped.eq(~found),
        ]
        return value, width, escaped

    @staticmethod
    def _with_prefix(m, escaped, sym, value, width, name):
        """A companion field ``(value, width)`` with an escape's 8 raw bits in front (stream-LSB side) when
        ``escaped``: ``sym | (value << 8)``, width + 8 (FORMAT.md §3.1 "Companion field")."""
        v = Signal(ESCAPE_PAYLOAD_BITS + len(value), name=f"{name}_fv")
        w = Signal(range(len(v) + 1), name=f"{name}_fw")
        m.d.comb += [v.eq(Mux(escaped, Cat(sym[:ESCAPE_PAYLOAD_BITS], value), value)),
                     w.eq(Mux(escaped, width + ESCAPE_PAYLOAD_BITS, width))]
        return v, w

    def _pack(self, m, fields, name):
        """Concatenate L (value, width) fields, lane 0 first: offsets are an exclusive prefix sum of the
        widths, formed by a Sklansky tree (log2 L adder levels; a chain of L - 1 adds was the critical path
        of encoder_kv_c1_l8 / _c2_l8)."""
        total_w = sum(max(1, len(v)) for v, _ in fields)
        ow = bits_for(total_w)
        incl = []                                          # incl[i] = widths of lanes 0..i
        for i, (_, w) in enumerate(fields):
            s = Signal(ow, name=f"{name}_w{i}")
            m.d.comb += s.eq(w)
            incl.append(s)
        span, level = 1, 0
        while span < len(incl):
            nxt = []
            for i, v in enumerate(incl):
                if i % (2 * span) < span:
                    nxt.append(v)
                    continue
                s = Signal(ow, name=f"{name}_pre{level}_{i}")
                m.d.comb += s.eq(v + incl[i // (2 * span) * (2 * span) + span - 1])
                nxt.append(s)
            incl, span, level = nxt, 2 * span, level + 1
        packed = Const(0, total_w)
        for i, (v, _) in enumerate(fields):
            packed = packed | (v << (incl[i - 1] if i else 0))
        n = Signal(ow, name=f"{name}_n")
        bits = Signal(total_w, name=f"{name}_bits")
        m.d.comb += [n.eq(incl[-1]), bits.eq(packed)]
        return bits, n, total_w

    def _writer(self, m, pname, group, slack=0):
        """A BitWriter of ``group``-bit groups driving output plane ``pname``."""
        w = BitWriter(self.word, group, slack)
        m.submodules[f"{pname}_wr"] = w
        wiring.connect(m, w.out, wiring.flipped(getattr(self, pname)))
        return w

    @staticmethod
    def _keep_flags(m, vals, t, r, eq_seen, name):
        """Keep flags of consecutive values after SELECT: ``key > t``, or ``key == t`` and fewer than
        ``r`` equal keys before it (``eq_seen`` from earlier values plus a prefix count here).
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

    # ------------------------------------------------------------------------------ buffer, select, emit
    def _pipeline(self, m, r, err, raise_err, clear, first_beat_errors, map_pass=None):
        """The vector buffer and the shared front end / emitter sequencer of the KV encoders.

        * buffer: ``Memory`` of ``max_group / R`` rows x ``R`` values, one write port (lane granularity)
          and one synchronous read port shared by the select passes, the map pass and the emitter;
        * loader: input beats into the buffer, behind the emitter (a row is written once the emitter
          has issued its read); raises the first-beat (``first_beat_errors``) and FRAME errors and
          drains ``inp`` while ``error`` is set; feeds the first select digit's histogram;
        * front end (FSM ``front``): once a vector is loaded and the emitter no longer reads the
          buffer, the radix-16 select (``t_reg`` / ``r_reg``), then ``map_pass`` (C2's keep bitmap),
          then the hand-over to the emitter;
        * emitter sequencer: ``G/L`` beats go into the subclass's stage 1 (``fire``) one per cycle while
          ``move`` (its pipeline is not stalled); it issues the buffer row reads so that a row is in the
          read register (``row_vals``) for its beats.
        Returns a namespace with all of it."""
        L, GM, R = self.lanes, self.max_group, self.row_values
        p = SimpleNamespace()
        p.nrows_max = GM // R
        p.bpr = R // L                                   # beats per buffer row
        p.beats = GM // L
        p.mem = Memory(shape=unsigned(BF16_BITS * R), depth=p.nrows_max, init=[])
        m.submodules.vec_buf = p.mem
        wp = p.mem.write_port(granularity=BF16_BITS)
        rp = p.mem.read_port(domain="sync")             # read data registered: old data on a same-row write
        p.row_vals = [rp.data[BF16_BITS * i: BF16_BITS * (i + 1)] for i in range(R)]
        rd_addr, rd_en = Signal(range(p.nrows_max), name="rd_row"), Signal(name="rd_en")
        m.d.comb += [rp.addr.eq(rd_addr), rp.en.eq(rd_en)]

        p.nbeats = Signal(range(p.beats + 1), name="nbeats")
        p.nrows = Signal(range(p.nrows_max + 1), name="nrows")
        m.d.comb += [p.nbeats.eq(r["g"] >> exact_log2(L)), p.nrows.eq(r["g"] >> exact_log2(R))]
        p.prunes = Signal(name="vec_prunes")              # k < G: the config prunes, SELECT is needed
        m.d.comb += p.prunes.eq(r["k"] != r["g"])

        p.loaded = Signal(name="buf_loaded")              # a complete vector waits for / is in the front end
        p.emit_active = Signal(name="emit_active")        # the emitter still feeds beats of its vector
        p.erow = Signal(range(p.nrows_max + 1), name="emit_rows_read")   # rows of that vector read so far
        p.t_reg = Signal(KEY_BITS, name="t_reg")          # k-th largest key of the vector in emission
        p.r_reg = Signal(range(GM + 1), name="r_reg")     # keys equal to t kept
        handover = Signal(name="handover")                # front end -> emitter (next vector starts)
        p.handover = handover

        # ---- loader
        p.lbeat = Signal(range(p.beats + 1), name="lbeat")
        lrow = Signal(range(p.nrows_max + 1), name="load_row")
        m.d.comb += lrow.eq(p.lbeat >> exact_log2(p.bpr))
        rows_free = Signal(range(p.nrows_max + 1), name="rows_free")
        m.d.comb += rows_free.eq(Mux(p.emit_active, p.erow, p.nrows_max))
        p.can_load = Signal(name="can_load")
        m.d.comb += p.can_load.eq(~err.any() & ~p.loaded & (lrow < rows_free))
        p.load, p.load_last, p.load_done = Signal(name="load"), Signal(name="load_last"), Signal(name="load_done")
        m.d.comb += [p.load.eq(self.inp.valid & p.can_load), p.load_last.eq(p.lbeat + 1 == p.nbeats),
                     p.load_done.eq(p.load & p.load_last & ~raise_err.any()),
                     self.inp.ready.eq(p.can_load | err.any())]      # drain while in error
        lane_pos = Signal(range(p.bpr), name="load_lane_pos")
        m.d.comb += [lane_pos.eq(p.lbeat & (p.bpr - 1)), wp.addr.eq(lrow),
                     wp.data.eq(Cat(*([Cat(*self.inp.payload.lanes)] * p.bpr)))]
        for j in range(p.bpr):
            with m.If(p.load & (lane_pos == j)):
                m.d.comb += wp.en.eq(((1 << L) - 1) << (j * L))
        with m.If(p.load):
            with m.If(p.lbeat == 0):
                first_beat_errors()
            # nbeats = 0 (GROUP above max_group reads as 0) never matches: the first beat raises CONFIG.
            with m.If(self.inp.payload.last != p.load_last):
                m.d.comb += raise_err[FRAME_ERR].eq(1)
            m.d.sync += p.lbeat.eq(p.lbeat + 1)
        with m.If(p.load_done):
            m.d.sync += [p.lbeat.eq(0), p.loaded.eq(1)]
        with m.If(handover):
            m.d.sync += p.loaded.eq(0)

        # ---- select: histogram unit (shared by the load's first digit and the passes)
        sel = SimpleNamespace()
        sel.digit = Signal(range(SELECT_DIGITS), name="sel_digit", init=SELECT_DIGITS - 1)  # MSB digit first
        sel.prefix = Signal(SELECT_KEY_BITS, name="sel_prefix")      # threshold digits found so far
        sel.rem = Signal(range(GM + 1), name="sel_rem")              # values still to keep among candidates
        hi_mask = Signal(SELECT_KEY_BITS, name="sel_hi_mask")        # key bits above the current digit
        shift = Signal(range(SELECT_KEY_BITS), name="sel_shift")
        m.d.comb += shift.eq(sel.digit * DIGIT_BITS)
        m.d.comb += hi_mask.eq(Array(Const(((1 << SELECT_KEY_BITS) - 1) & ~((1 << (DIGIT_BITS * (d + 1))) - 1),
                                           SELECT_KEY_BITS) for d in range(SELECT_DIGITS))[sel.digit])
        pass_rd = Signal(name="pass_rd_valid")       # the read register holds a pass row this cycle
        h_vals = [Signal(BF16_BITS, name=f"h_in{i}") for i in range(R)]
        h_in = Signal(R, name="h_in_valid")
        for i in range(R):
            if i < L:
                m.d.comb += h_vals[i].eq(Mux(pass_rd, p.row_vals[i], self.inp.payload.lanes[i]))
            else:
                m.d.comb += h_vals[i].eq(p.row_vals[i])
        m.d.comb += h_in.eq(Mux(pass_rd, (1 << R) - 1, Mux(p.load, (1 << L) - 1, 0)))
        therm = [[Signal(name=f"h_ge{v}_{i}") for i in range(R)] for v in range(RADIX)]
        for i in range(R):
            key = Signal(SELECT_KEY_BITS, name=f"h_key{i}")
            cand = Signal(name=f"h_cand{i}")
            dval = Signal(DIGIT_BITS, name=f"h_dig{i}")
            m.d.comb += [key.eq(h_vals[i][:KEY_BITS]),
                         cand.eq(h_in[i] & (((key ^ sel.prefix) & hi_mask) == 0)),
                         dval.eq(Array(key[DIGIT_BITS * d: DIGIT_BITS * (d + 1)]
                                       for d in range(SELECT_DIGITS))[sel.digit])]
            for v in range(1, RADIX):
                m.d.comb += therm[v][i].eq(cand & (dval >= v))
        # cum[v] = candidates of the vector (so far) with digit >= v: per v an R-input popcount added each
        # cycle (the loop: cum += popcount, 8 bits, ~20 levels after the candidate compare).
        h_pc = [None] + [Signal(range(R + 1), name=f"h_pc{v}") for v in range(1, RADIX)]
        for v in range(1, RADIX):
            m.d.comb += h_pc[v].eq(popcount(therm[v]))
        cum = [None] + [Signal(range(GM + 1), name=f"cum{v}") for v in range(1, RADIX)]
        cum_clear = Signal(name="cum_clear")
        h_valid = Signal(name="h_valid")
        m.d.comb += h_valid.eq(h_in.any())
        for v in range(1, RADIX):
            with m.If(cum_clear):
                m.d.sync += cum[v].eq(0)
            with m.Elif(h_valid):
                m.d.sync += cum[v].eq(cum[v] + h_pc[v])
        # Resolve (one cycle): digit of t = number of v with cum[v] >= rem (cum falls with v: a
        # thermometer); the candidates above it are kept, so rem drops by cum[digit + 1].
        ge = Signal(RADIX - 1, name="sel_ge")
        m.d.comb += ge.eq(Cat(*[cum[v] >= sel.rem for v in range(1, RADIX)]))
        dig = Signal(DIGIT_BITS, name="sel_d")
        m.d.comb += dig.eq(popcount([ge[i] for i in range(RADIX - 1)]))
        above = Signal(range(GM + 1), name="sel_above")
        m.d.comb += above.eq(Array([*cum[1:], Const(0, 1)])[dig])   # cum[dig + 1] (cum[1:] starts at v = 1), 0 above the top
        prefix_next = Signal(SELECT_KEY_BITS, name="sel_prefix_next")
        rem_next = Signal(range(GM + 1), name="sel_rem_next")
        m.d.comb += [prefix_next.eq(sel.prefix | (dig << shift)), rem_next.eq(sel.rem - above)]

        # ---- front end FSM: select (and map pass) of the loaded vector, then the hand-over
        p.emit_can_start = Signal(name="emit_can_start")  # the emitter has fed its last beat (driven below)
        prow = Signal(range(p.nrows_max + 1), name="pass_row")
        last_prow = Signal(name="pass_last_row")
        m.d.comb += last_prow.eq(prow + 1 == p.nrows)
        p.map_rd = Signal(name="map_rd_valid")         # the read register holds a map-pass row (C2)
        p.map_row = Signal(range(p.nrows_max), name="map_row")
        m.d.sync += [pass_rd.eq(0), p.map_rd.eq(0)]
        p.front_idle = Signal(name="front_idle")

        def finish_select():
            if map_pass is None:
                return "READY"
            m.d.sync += prow.eq(0)
            return "MAP"

        with m.FSM(name="front"):
            with m.State("IDLE"):
                m.d.comb += p.front_idle.eq(1)
                with m.If(p.loaded & p.emit_can_start):
                    with m.If(p.prunes):
                        m.d.sync += sel.rem.eq(r["k"])
                        m.next = "RESOLVE"          # the last load beat landed in cum at its own cycle
                    with m.Else():
                        # Nothing pruned: t = 0 and all G values "equal or above" are kept.
                        m.d.sync += [p.t_reg.eq(0), p.r_reg.eq(r["g"])]
                        m.d.comb += handover.eq(1)
            with m.State("RESOLVE"):
                m.d.comb += cum_clear.eq(1)
                m.d.sync += [sel.prefix.eq(prefix_next), sel.rem.eq(rem_next), prow.eq(0)]
                with m.If(sel.digit == 0):
                    m.d.sync += [p.t_reg.eq(prefix_next), p.r_reg.eq(rem_next),
                                 sel.digit.eq(SELECT_DIGITS - 1), sel.prefix.eq(0)]
                    m.next = finish_select()
                with m.Else():
                    m.d.sync += sel.digit.eq(sel.digit - 1)
                    m.next = "PASS"
            with m.State("PASS"):
                m.d.comb += [rd_addr.eq(prow), rd_en.eq(1)]
                m.d.sync += [pass_rd.eq(1), prow.eq(prow + 1)]
                with m.If(last_prow):
                    m.next = "FLUSH"
            with m.State("FLUSH"):
                # the last row is in the read register: it lands in cum at the end of this cycle
                m.next = "RESOLVE"
            if map_pass is not None:
                with m.State("MAP"):
                    m.d.comb += [rd_addr.eq(prow), rd_en.eq(prow < p.nrows)]
                    m.d.sync += [p.map_rd.eq(prow < p.nrows), p.map_row.eq(prow), prow.eq(prow + 1)]
                    with m.If(prow == p.nrows):           # the last row is in the read register
                        m.next = "READY"
            with m.State("READY"):
                m.d.comb += handover.eq(1)
                m.next = "IDLE"
        with m.If(handover | clear):
            m.d.comb += cum_clear.eq(1)
        if map_pass is not None:
            map_pass(p)

        # ---- emitter sequencer: the vector's beats into the subclass's stage 1
        p.beat = Signal(range(p.beats + 1), name="emit_beat")
        p.move = Signal(name="emit_move")                 # stage 1 may take a beat (driven by the subclass)
        p.fire = Signal(name="emit_fire")
        p.last_beat = Signal(name="emit_last_beat")
        m.d.comb += [p.fire.eq(p.emit_active & p.move), p.last_beat.eq(p.beat + 1 == p.nbeats),
                     p.emit_can_start.eq(~p.emit_active | (p.fire & p.last_beat))]
        p.row_beat = Signal(range(p.bpr), name="emit_row_beat")   # beat within its buffer row
        m.d.comb += p.row_beat.eq(p.beat & (p.bpr - 1))
        with m.If(p.fire):
            m.d.sync += p.beat.eq(p.beat + 1)
            with m.If(p.last_beat):
                m.d.sync += p.emit_active.eq(0)
            # last beat of a row: the next row goes into the read register with this beat
            with m.If((p.row_beat == p.bpr - 1) & (p.erow < p.nrows)):
                m.d.comb += [rd_addr.eq(p.erow), rd_en.eq(1)]
                m.d.sync += p.erow.eq(p.erow + 1)
        # The hand-over may coincide with the previous vector's last beat (so it comes after it here).
        with m.If(handover):
            m.d.comb += [rd_addr.eq(0), rd_en.eq(1)]
            m.d.sync += [p.emit_active.eq(1), p.beat.eq(0), p.erow.eq(1)]
        with m.If(clear):
            m.d.sync += p.lbeat.eq(0)                     # the vector cut by the error is dropped
        p.lane_vals = [Signal(BF16_BITS, name=f"row_lane{i}") for i in range(L)]
        for i in range(L):
            m.d.comb += p.lane_vals[i].eq(Array(p.row_vals[j * L + i] for j in range(p.bpr))[p.row_beat])
        # Registers may change only with no vector in flight (or, after an error, once the vectors
        # completed before it are out); p.pipe_empty is driven by the subclass.
        p.pipe_empty = Signal(name="emit_pipe_empty")
        p.in_flight = Signal(name="in_flight")
        m.d.comb += p.in_flight.eq(p.loaded | ~p.front_idle | p.emit_active | ~p.pipe_empty)
        m.d.comb += self.cfg.ready.eq(~p.in_flight & ((p.lbeat == 0) | err.any()))
        return p

    def _emit(self, m, p, feeds, s1_valid, s1_last):
        """Stage 2 -> the plane writers, and the emit pipeline's handshake. ``feeds``: per plane
        (name, packed bits, bit count, width), computed from stage 1's registers. With ``pipelined_emit``
        they are registered first (stage 3). Every writer takes a beat at once; the stages move together
        unless the last one holds a beat some writer cannot take. Drives p.move, p.pipe_empty and busy."""
        last, valid = s1_last, s1_valid
        if self.pipelined_emit:
            last, valid = Signal(name="s3_last"), Signal(name="s3_valid")
        writers = []
        for pname, bits, n, width in feeds:
            w = self._writer(m, pname, width)
            if self.pipelined_emit:
                rb, rn = Signal(width, name=f"s3_{pname}_bits"), Signal.like(n, name=f"s3_{pname}_n")
                with m.If(p.move):
                    m.d.sync += [rb.eq(bits), rn.eq(n)]
                bits, n = rb, rn
            m.d.comb += [w.bits.eq(bits), w.n.eq(n), w.close.eq(last)]
            writers.append(w)
        all_ready, writers_idle = Signal(name="writers_ready"), Signal(name="writers_idle")
        m.d.comb += [all_ready.eq(Cat(*[w.ready for w in writers]).all()),
                     writers_idle.eq(Cat(*[w.idle for w in writers]).all())]
        for w in writers:
            m.d.comb += w.valid.eq(valid & all_ready)
        m.d.comb += [p.move.eq(~valid | all_ready), p.pipe_empty.eq(~s1_valid & ~valid),
                     self.busy.eq(((p.lbeat != 0) & ~self.error) | p.in_flight | ~writers_idle)]
        if self.pipelined_emit:
            with m.If(p.move):
                m.d.sync += [valid.eq(s1_valid), last.eq(s1_last)]
        return writers


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
        """Per lane: (value, width) of its spec code, signman, verif code and rest fields.

        A lane needs one book lookup of its exponent: in the speculation book when kept, in the
        verification book when pruned (its speculation symbol is then PRUNED, whose code is the same for
        every lane: one lookup against a constant, shared). So each lane has ONE CAM, over the book its
        keep flag selects."""
        m_reg = r["m"]
        fr = Signal(range(BF16_MANTISSA_BITS + 1))
        m.d.comb += fr.eq(BF16_MANTISSA_BITS - m_reg)
        pv, pw, _ = self._code(m, Const(PRUNED, SYMBOL_BITS), r["spec_tab"], r["spec_k"], "pruned")  # never escapes
        spec_f, sm_f, ver_f, rest_f = [], [], [], []
        for i, v in enumerate(vals):
            s, e, f = bf16_fields(v)
            tab = [Signal(SYMBOL_BITS, name=f"book{i}_{j}") for j in range(K_MAX)]
            for j in range(K_MAX):
                m.d.comb += tab[j].eq(Mux(kept[i], r["spec_tab"][j], r["verif_tab"][j]))
            kk = Signal(range(K_MAX + 1), name=f"book{i}_k")
            m.d.comb += kk.eq(Mux(kept[i], r["spec_k"], r["verif_k"]))
            cv, cw, esc = self._code(m, e, tab, kk, f"c{i}")
            spec_f.append((Mux(kept[i], cv, pv), Mux(kept[i], cw, pw)))
            ver_f.append((Mux(kept[i], 0, cv), Mux(kept[i], 0, cw)))   # bits above a field's width stay 0
            smv = Signal(FIELD_MAX, name=f"smv{i}")
            m.d.comb += smv.eq(Cat(f, s) >> fr)           # (s << m) | (f >> (7 - m))
            smv, smw = self._with_prefix(m, esc, e, smv, m_reg + 1, f"sm{i}")   # an escape's e leads it
            sm_f.append((Mux(kept[i], smv, 0), Mux(kept[i], smw, 0)))
            low = Signal(BF16_MANTISSA_BITS, name=f"low{i}")
            m.d.comb += low.eq(f & ~(Const(0x7F, BF16_MANTISSA_BITS) << fr))
            pr, prw = self._with_prefix(m, esc, e, Cat(f, s), Const(FIELD_MAX, 4), f"pr{i}")   # pruned: [e][s f]
            rest_f.append((Mux(kept[i], low, pr), Mux(kept[i], fr, prw)))
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

        # ---- stage 1 (registered): the beat's L values and their keep flags
        eq_seen = Signal(range(GM + 1), name="eq_seen")  # values equal to t emitted so far (loop: 8-bit add)
        kept, eq_before = self._keep_flags(m, p.lane_vals, p.t_reg, p.r_reg, eq_seen, "lane")
        s1_vals = [Signal(BF16_BITS, name=f"s1_val{i}") for i in range(L)]
        s1_kept, s1_valid, s1_last = Signal(L, name="s1_kept"), Signal(name="s1_valid"), Signal(name="s1_last")
        with m.If(p.move):
            m.d.sync += s1_valid.eq(p.fire)
        with m.If(p.fire):
            m.d.sync += [*[s1_vals[i].eq(p.lane_vals[i]) for i in range(L)], s1_kept.eq(kept),
                         s1_last.eq(p.last_beat), eq_seen.eq(eq_seen + eq_before[L])]
        with m.If(p.handover):                           # after the fire: it may be the last one
            m.d.sync += eq_seen.eq(0)

        # ---- stage 2: per plane the packed fields of the beat, into the BitWriters (or stage 3)
        feeds = [(pname, *self._pack(m, flds, pname))
                 for pname, flds in self._lane_fields(m, r, s1_vals, s1_kept).items()]
        self._emit(m, p, feeds, s1_valid, s1_last)
        self._errors(m, err, raise_err, clear)
        return m
