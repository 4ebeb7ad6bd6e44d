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
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from ..golden.config import (ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, ESCAPE_PAYLOAD_BITS,
                             K_MAX, MAGNITUDE_MASK, MAX_CODE_BITS, PRUNED)
from .bitreader import word_layout
from .bitwriter import BitWriter
from .decoder import (BF16_BITS, CFG_DATA_BITS, ERROR_BITS, FIELD_MAX, MAX_LANES, MAX_WORD, SYMBOL_BITS, Err,
                      Reg, cfg_layout, codebook_register_cases)
from .zero_counter import prefix_counts

KEY_BITS = bits_for(MAGNITUDE_MASK)       # 15
FRAME_ERR = 6                             # error_code bit: `last` not on the vector's final beat


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


class EncoderKvC1(wiring.Component):
    """Parameters
        lanes      L, values per input beat (divides every allowed G)
        word       IW, bits per output word on every plane
        max_group  largest G the vector buffer holds (32..256)
    """

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
        super().__init__({
            "inp": In(stream.Signature(in_layout(lanes))),
            "cfg": In(stream.Signature(cfg_layout)),
            "spec_codes": Out(plane), "spec_signman": Out(plane),
            "verif_codes": Out(plane), "verif_rest": Out(plane),
            "busy": Out(1), "error": Out(1), "error_code": Out(ERROR_BITS),
        })

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

    def _config_ok(self, r):
        g_ok = Const(0, 1)
        for g in ALLOWED_GROUP_SIZES:
            if g <= self.max_group:
                g_ok = g_ok | (r["g"] == g)
        # The pruned mark must be in the speculation book whenever the config prunes (it cannot escape).
        has_p = Const(0, 1)
        for i in range(K_MAX):
            has_p = has_p | ((r["spec_tab"][i] == PRUNED) & (i < r["spec_k"]))
        return g_ok & ~r["bad"] & (r["k"] != 0) & (r["k"] <= r["g"]) & ((r["k"] == r["g"]) | has_p)

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

    # ------------------------------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        L, GM = self.lanes, self.max_group
        r = self._registers(m)
        clear = Signal()
        self._write_registers(m, r, clear)
        err = Signal(ERROR_BITS)
        raise_err = Signal(ERROR_BITS)
        m.d.comb += [self.error_code.eq(err), self.error.eq(err.any())]

        buf = Array(Signal(BF16_BITS, name=f"v{i}") for i in range(GM))
        beats = GM // L
        beat = Signal(range(beats + 1))              # beat index inside the vector (load / emit)
        nbeats = Signal(range(beats + 1))
        m.d.comb += nbeats.eq(r["g"] >> exact_log2(L))
        bit = Signal(range(KEY_BITS + 1))            # radix-select bit position
        prefix = Signal(KEY_BITS)                    # threshold bits found so far
        rem = Signal(range(GM + 1))                  # values still to keep among the candidates
        eq_seen = Signal(range(GM + 1))              # values equal to t emitted so far
        m_reg = r["m"]

        # ---- radix select step: count keys matching the prefix above `bit` with `bit` set
        hi_mask = Signal(KEY_BITS)
        m.d.comb += hi_mask.eq(~((Const(1, KEY_BITS + 1) << (bit + 1)) - 1))
        match = Signal(GM)
        for i in range(GM):
            key = buf[i][:KEY_BITS]
            m.d.comb += match[i].eq((((key ^ prefix) & hi_mask) == 0) & key.bit_select(bit, 1) & (i < r["g"]))
        count = Signal(range(GM + 1))
        m.d.comb += count.eq(popcount([match[i] for i in range(GM)]))

        # ---- emit: the beat's L values
        vals = [Signal(BF16_BITS, name=f"lane{i}") for i in range(L)]
        for i in range(L):
            m.d.comb += vals[i].eq(buf[beat * L + i])
        keys = [v[:KEY_BITS] for v in vals]
        eq_t = Cat(*[k == prefix for k in keys])
        eq_before = prefix_counts(m, eq_t, L, "eqb")
        kept = Signal(L)
        for i in range(L):
            m.d.comb += kept[i].eq((keys[i] > prefix) | (eq_t[i] & (eq_seen + eq_before[i] < rem)))

        fr = Signal(range(BF16_MANTISSA_BITS + 1))
        m.d.comb += fr.eq(BF16_MANTISSA_BITS - m_reg)
        spec_f, sm_f, ver_f, rest_f = [], [], [], []
        for i in range(L):
            v = vals[i]
            s, e, f = v[BF16_BITS - 1], v[BF16_MANTISSA_BITS:BF16_BITS - 1], v[:BF16_MANTISSA_BITS]
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

        writers = {}
        for pname, flds in (("spec_codes", spec_f), ("spec_signman", sm_f), ("verif_codes", ver_f),
                            ("verif_rest", rest_f)):
            bits_, n_, width_ = self._pack(m, flds, pname)
            w = BitWriter(self.word, width_)
            m.submodules[f"{pname}_wr"] = w
            wiring.connect(m, w.out, wiring.flipped(getattr(self, pname)))
            m.d.comb += [w.bits.eq(bits_), w.n.eq(n_)]
            writers[pname] = w
        all_ready = Const(1, 1)
        for w in writers.values():
            all_ready = all_ready & w.ready
        writers_idle = Const(1, 1)
        for w in writers.values():
            writers_idle = writers_idle & w.idle

        # ---- loading: in LOAD, and also while the current vector is emitted (into the beats already
        # emitted), so the next vector streams in without waiting.
        phase_load, phase_emit = Signal(), Signal()
        lbeat = Signal(range(beats + 1))           # beats of the next vector loaded (== nbeats: complete)
        vec_full = Signal()
        m.d.comb += vec_full.eq(lbeat == nbeats)
        can_load = Signal()
        m.d.comb += can_load.eq(~err.any() & ~vec_full &
                                (phase_load | (phase_emit & (lbeat < beat))))
        load = self.inp.valid & can_load
        load_last = lbeat + 1 == nbeats
        with m.If(load):
            for i in range(L):
                m.d.sync += buf[lbeat * L + i].eq(self.inp.payload.lanes[i])
            with m.If(lbeat == 0):
                ok = self._config_ok(r)
                loaded = r["spec_loaded"] & r["verif_loaded"]
                m.d.comb += [raise_err[Err.NO_BOOK].eq(~loaded), raise_err[Err.CONFIG].eq(loaded & ~ok)]
            with m.If(self.inp.payload.last != load_last):
                m.d.comb += raise_err[FRAME_ERR].eq(1)
            m.d.sync += lbeat.eq(lbeat + 1)

        def start_vector():
            """The loaded vector becomes the current one: select (or emit directly when k = G)."""
            m.d.sync += [lbeat.eq(0), beat.eq(0), bit.eq(KEY_BITS - 1), prefix.eq(0), eq_seen.eq(0)]
            with m.If(r["k"] == r["g"]):
                # Nothing pruned: t = 0 and all G values "equal or above" are kept.
                m.d.sync += rem.eq(r["g"])
                m.next = "EMIT"
            with m.Else():
                m.d.sync += rem.eq(r["k"])
                m.next = "SELECT"

        # ---- control
        with m.FSM(name="phase"):
            with m.State("LOAD"):
                m.d.comb += [phase_load.eq(1), self.inp.ready.eq(can_load), self.cfg.ready.eq(lbeat == 0),
                             self.busy.eq((lbeat != 0) | ~writers_idle)]
                with m.If(raise_err.any()):
                    m.next = "DRAIN"
                with m.Elif(load & load_last):
                    start_vector()
            with m.State("SELECT"):
                m.d.comb += self.busy.eq(1)
                with m.If(count >= rem):
                    m.d.sync += prefix.eq(prefix | (Const(1, KEY_BITS) << bit))
                with m.Else():
                    m.d.sync += rem.eq(rem - count)
                with m.If(bit == 0):
                    m.next = "EMIT"
                with m.Else():
                    m.d.sync += bit.eq(bit - 1)
            with m.State("EMIT"):
                m.d.comb += [phase_emit.eq(1), self.busy.eq(1), self.inp.ready.eq(can_load)]
                last_beat = beat + 1 == nbeats
                for w in writers.values():
                    m.d.comb += [w.valid.eq(all_ready), w.close.eq(last_beat)]
                with m.If(all_ready):
                    m.d.sync += [eq_seen.eq(eq_seen + eq_before[L]), beat.eq(beat + 1)]
                    # After the last beat the bit writers close the chunks on their own; selection of
                    # the next vector (already loaded into the emitted beats) starts right away.
                    with m.If(last_beat):
                        with m.If(err.any() | raise_err.any()):
                            m.next = "DRAIN"       # an error in the next vector: stop after this one
                        with m.Elif(vec_full | (load & load_last)):
                            start_vector()
                        with m.Else():
                            m.next = "LOAD"
            with m.State("DRAIN"):
                # Error: discard input beats so the producer never hangs, until CLEAR_ERROR.
                m.d.comb += [self.inp.ready.eq(1), self.cfg.ready.eq(1)]
                with m.If(clear):
                    m.d.sync += [beat.eq(0), lbeat.eq(0)]
                    m.next = "LOAD"
        with m.If(raise_err.any()):
            m.d.sync += err.eq(err | raise_err)
        with m.Elif(clear):
            m.d.sync += err.eq(0)
        return m
