"""Online KV-cache encoder, Cassandra-1: one KV vector (= one superblock of G = head_dim values) at a
time in, the four C1 planes out, bit-exactly what ``golden.codec.encode_tensor(..., kind="kv",
books=(spec, verif))`` emits (docs/FORMAT.md sections 2, 3; docs/HARDWARE.md section 3).

Phases per vector (one vector in flight; see docs/HARDWARE.md for the throughput this gives):

1. LOAD   ``G/L`` input beats of L values are written into the vector buffer (G x 16 flip-flops: the
          selection below reads every key in parallel).
2. SELECT exact top-``k`` by the magnitude key ``bits & 0x7FFF`` with ties to the lower index, as a
          radix select: for each of the 15 key bits, MSB first, count the values that match the
          threshold prefix found so far and have this bit set (one G-input popcount per cycle);
          the result is the k-th largest key ``t`` and ``r``, how many values equal to ``t`` are kept
          (the first ``r`` of them by index). Skipped when ``k = G`` (nothing is pruned).
3. EMIT   ``G/L`` beats: lane i is kept iff ``key > t`` or (``key == t`` and fewer than ``r`` equal
          keys came before it - a running count plus an L-lane prefix count). Per lane the code of its
          symbol (a CAM lookup in the programmed book: rank or escape), its sign/mantissa field and its
          verification code / rest field; per plane an L-field packer (prefix sum of the field widths)
          feeds a BitWriter, which closes the superblock's chunk after the last beat.

``KvEncoderBase`` holds what every KV encoder scheme shares (ports, registers, vector buffer and its
loader, radix select, keep decision, code CAM, field packer, plane writers); the Cassandra-2 encoder
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

    def _writer(self, m, pname, group):
        """A BitWriter of ``group``-bit groups driving output plane ``pname``."""
        w = BitWriter(self.word, group)
        m.submodules[f"{pname}_wr"] = w
        wiring.connect(m, w.out, wiring.flipped(getattr(self, pname)))
        return w

    # ------------------------------------------------------------------------------ buffer and selection
    def _select_state(self, m, r):
        """Vector buffer, radix-select registers and the per-cycle popcount of the select step."""
        L, GM = self.lanes, self.max_group
        s = SimpleNamespace()
        s.buf = Array(Signal(BF16_BITS, name=f"v{i}") for i in range(GM))
        s.beats = GM // L
        s.beat = Signal(range(s.beats + 1))            # beat index inside the vector (emit)
        s.nbeats = Signal(range(s.beats + 1))
        m.d.comb += s.nbeats.eq(r["g"] >> exact_log2(L))
        s.digit = Signal(range(SELECT_DIGITS), name="sel_digit")   # radix-select digit, MSB digit first
        s.prefix = Signal(KEY_BITS)                    # threshold bits found so far (t once selected)
        s.rem = Signal(range(GM + 1))                  # values still to keep among the candidates
        s.eq_seen = Signal(range(GM + 1))              # values equal to t passed so far
        s.prunes = Signal(name="vec_prunes")           # k < G: the config prunes, SELECT is needed
        m.d.comb += s.prunes.eq(r["k"] != r["g"])
        # Radix select step on digit `digit` (SELECT_BITS key bits): the candidates are the keys that
        # match the prefix above the digit; count_d = candidates whose digit is >= d, for d = 1..R-1
        # (one G-input popcount each, all in the same cycle).
        shift = Signal(range(SELECT_KEY_BITS), name="sel_shift")
        m.d.comb += shift.eq(s.digit * SELECT_BITS)
        hi_mask = Signal(SELECT_KEY_BITS, name="sel_hi_mask")
        m.d.comb += hi_mask.eq(~((Const(1, SELECT_KEY_BITS + 1) << (shift + SELECT_BITS)) - 1))
        ge = [Signal(GM, name=f"sel_ge{d}") for d in range(1, SELECT_RADIX)]
        for i in range(GM):
            key = Signal(SELECT_KEY_BITS, name=f"sel_key{i}")     # zero-extended to whole digits
            cand = Signal(name=f"sel_cand{i}")
            dval = Signal(SELECT_BITS, name=f"sel_dval{i}")
            m.d.comb += [key.eq(s.buf[i][:KEY_BITS]),
                         cand.eq((((key ^ s.prefix) & hi_mask) == 0) & (i < r["g"])),
                         dval.eq(key.bit_select(shift, SELECT_BITS))]
            for d in range(1, SELECT_RADIX):
                m.d.comb += ge[d - 1][i].eq(cand & (dval >= d))
        s.counts = []
        for d in range(1, SELECT_RADIX):
            c = Signal(range(GM + 1), name=f"sel_count{d}")
            m.d.comb += c.eq(popcount([ge[d - 1][i] for i in range(GM)]))
            s.counts.append(c)
        return s

    def _select_start(self, m, r, s):
        """Reset the select registers for a new vector (SELECT is needed iff ``s.prunes``)."""
        m.d.sync += [s.beat.eq(0), s.digit.eq(SELECT_DIGITS - 1), s.prefix.eq(0), s.eq_seen.eq(0)]
        # Nothing pruned: t = 0 and all G values "equal or above" are kept.
        m.d.sync += s.rem.eq(Mux(s.prunes, r["k"], r["g"]))

    def _select_step(self, m, s, next_state):
        """One radix-select cycle (inside the SELECT state); goes to ``next_state`` after digit 0.
        The digit of t is the largest d with count_d >= rem (counts fall with d); the candidates above
        it are all kept, so rem drops by count_{d+1}."""
        dig = Signal(SELECT_BITS, name="sel_d")
        above = Signal.like(s.rem, name="sel_above")
        d_acc, a_acc = Const(0, SELECT_BITS), s.counts[0]
        for d in range(1, SELECT_RADIX):
            hit = s.counts[d - 1] >= s.rem
            nxt = s.counts[d] if d < SELECT_RADIX - 1 else Const(0, 1)
            d_acc, a_acc = Mux(hit, d, d_acc), Mux(hit, nxt, a_acc)
        m.d.comb += [dig.eq(d_acc), above.eq(a_acc)]
        m.d.sync += [s.prefix.eq(s.prefix | (dig << (s.digit * SELECT_BITS))), s.rem.eq(s.rem - above)]
        with m.If(s.digit == 0):
            m.next = next_state
        with m.Else():
            m.d.sync += s.digit.eq(s.digit - 1)

    @staticmethod
    def _buffer_slice(m, s, n, name):
        """The ``n`` buffered values from index ``s.beat * n`` (one pass beat of ``n`` lanes)."""
        vals = [Signal(BF16_BITS, name=f"{name}{i}") for i in range(n)]
        for i in range(n):
            m.d.comb += vals[i].eq(s.buf[s.beat * n + i])
        return vals

    @staticmethod
    def _keep_flags(m, s, vals, name):
        """Keep flags of consecutive values after SELECT: ``key > t``, or ``key == t`` and fewer than
        ``r`` equal keys before it (``s.eq_seen`` from earlier beats plus a prefix count in this one).
        Returns (kept, eq_before); eq_before[n] is the number of keys equal to t here."""
        n = len(vals)
        keys = [v[:KEY_BITS] for v in vals]
        eq_t = Signal(n, name=f"{name}_eq_t")
        m.d.comb += eq_t.eq(Cat(*[k == s.prefix for k in keys]))
        eq_before = prefix_counts(m, eq_t, n, f"{name}_eqb")
        kept = Signal(n, name=f"{name}_kept")
        for i in range(n):
            m.d.comb += kept[i].eq((keys[i] > s.prefix) | (eq_t[i] & (s.eq_seen + eq_before[i] < s.rem)))
        return kept, eq_before

    def _beat_lanes(self, m, s):
        """The L values of beat ``s.beat`` and their keep flags (after SELECT). Returns (vals, kept,
        eq_before); eq_before[L] is the beat's count of values equal to t (advances ``s.eq_seen``)."""
        vals = self._buffer_slice(m, s, self.lanes, "lane")
        kept, eq_before = self._keep_flags(m, s, vals, "lane")
        return vals, kept, eq_before

    # ------------------------------------------------------------------------------------------ loader
    def _loader(self, m, r, s, err, raise_err, first_beat_errors):
        """Input beats into the vector buffer: in LOAD (``phase_load``), and also while the current vector
        is emitted (``phase_emit``), into the beats already emitted, so the next vector streams in without
        waiting. ``first_beat_errors()`` raises the scheme's book/config errors on a vector's first beat."""
        L = self.lanes
        ld = SimpleNamespace()
        ld.phase_load, ld.phase_emit = Signal(name="phase_load"), Signal(name="phase_emit")
        ld.lbeat = Signal(range(s.beats + 1))      # beats of the next vector loaded (== nbeats: complete)
        ld.vec_full = Signal(name="vec_full")
        # nbeats = 0 (GROUP above max_group reads as 0, or G < L) must not block the input: the first
        # beat is accepted and raises CONFIG.
        m.d.comb += ld.vec_full.eq((ld.lbeat == s.nbeats) & (s.nbeats != 0))
        ld.can_load = Signal(name="can_load")
        m.d.comb += ld.can_load.eq(~err.any() & ~ld.vec_full &
                                   (ld.phase_load | (ld.phase_emit & (ld.lbeat < s.beat))))
        ld.load = Signal(name="load")
        ld.load_last = Signal(name="load_last")
        m.d.comb += [ld.load.eq(self.inp.valid & ld.can_load), ld.load_last.eq(ld.lbeat + 1 == s.nbeats)]
        with m.If(ld.load):
            for i in range(L):
                m.d.sync += s.buf[ld.lbeat * L + i].eq(self.inp.payload.lanes[i])
            with m.If(ld.lbeat == 0):
                first_beat_errors()
            with m.If(self.inp.payload.last != ld.load_last):
                m.d.comb += raise_err[FRAME_ERR].eq(1)
            m.d.sync += ld.lbeat.eq(ld.lbeat + 1)
        return ld

    @staticmethod
    def _errors(m, err, raise_err, clear):
        """Sticky error register: set by ``raise_err``, cleared by CTRL CLEAR_ERROR."""
        with m.If(raise_err.any()):
            m.d.sync += err.eq(err | raise_err)
        with m.Elif(clear):
            m.d.sync += err.eq(0)

    def _drain_state(self, m, s, ld, clear, ready_state):
        """Error: discard input beats so the producer never hangs, until CLEAR_ERROR."""
        m.d.comb += [self.inp.ready.eq(1), self.cfg.ready.eq(1)]
        with m.If(clear):
            m.d.sync += [s.beat.eq(0), ld.lbeat.eq(0)]
            m.next = ready_state


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
        L = self.lanes
        r = self._registers(m)
        clear = Signal()
        self._write_registers(m, r, clear)
        err = Signal(ERROR_BITS)
        raise_err = Signal(ERROR_BITS)
        m.d.comb += [self.error_code.eq(err), self.error.eq(err.any())]
        s = self._select_state(m, r)
        vals, kept, eq_before = self._beat_lanes(m, s)

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

        def first_beat_errors():
            loaded = r["spec_loaded"] & r["verif_loaded"]
            m.d.comb += [raise_err[Err.NO_BOOK].eq(~loaded), raise_err[Err.CONFIG].eq(loaded & ~self._config_ok(r))]

        ld = self._loader(m, r, s, err, raise_err, first_beat_errors)

        def start_vector():
            """The loaded vector becomes the current one: select (or emit directly when k = G)."""
            m.d.sync += ld.lbeat.eq(0)
            self._select_start(m, r, s)
            with m.If(s.prunes):
                m.next = "SELECT"
            with m.Else():
                m.next = "EMIT"

        # ---- control
        with m.FSM(name="phase"):
            with m.State("LOAD"):
                m.d.comb += [ld.phase_load.eq(1), self.inp.ready.eq(ld.can_load),
                             self.cfg.ready.eq(ld.lbeat == 0), self.busy.eq((ld.lbeat != 0) | ~writers_idle)]
                with m.If(raise_err.any()):
                    m.next = "DRAIN"
                with m.Elif(ld.load & ld.load_last):
                    start_vector()
            with m.State("SELECT"):
                m.d.comb += self.busy.eq(1)
                self._select_step(m, s, "EMIT")
            with m.State("EMIT"):
                m.d.comb += [ld.phase_emit.eq(1), self.busy.eq(1), self.inp.ready.eq(ld.can_load)]
                last_beat = Signal(name="last_beat")
                m.d.comb += last_beat.eq(s.beat + 1 == s.nbeats)
                for w in writers.values():
                    m.d.comb += [w.valid.eq(all_ready), w.close.eq(last_beat)]
                with m.If(all_ready):
                    m.d.sync += [s.eq_seen.eq(s.eq_seen + eq_before[L]), s.beat.eq(s.beat + 1)]
                    # After the last beat the bit writers close the chunks on their own; selection of
                    # the next vector (already loaded into the emitted beats) starts right away.
                    with m.If(last_beat):
                        with m.If(err.any() | raise_err.any()):
                            m.next = "DRAIN"       # an error in the next vector: stop after this one
                        with m.Elif(ld.vec_full | (ld.load & ld.load_last)):
                            start_vector()
                        with m.Else():
                            m.next = "LOAD"
            with m.State("DRAIN"):
                self._drain_state(m, s, ld, clear, "LOAD")
        self._errors(m, err, raise_err, clear)
        return m
