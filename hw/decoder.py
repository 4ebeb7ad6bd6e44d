"""Cassandra-1 decoder: speculation (+ verification) planes in, L bf16 values per cycle out.

docs/HARDWARE.md section 2 is the interface contract (ports, word framing, registers, errors).

Data path (one beat per cycle, all lanes in parallel):

* ``spec.codes``  -> BitReader -> ZeroCounter(W, L): the ranks of the next L codes; ranks index the
  speculation rank->symbol table; the first escape lane takes its 8 raw bits from the window and ends
  the beat (the lanes after it are garbage: its payload may contain ones).
* ``spec.signman`` -> BitReader: kept lane i reads the field at ``kp_i * (1+m)`` (``kp_i`` = kept lanes
  before i, a prefix count), so L fields come out per cycle without a variable-length dependency.
* full mode, ``verif.codes`` -> BitReader -> ZeroCounter: pruned lane i takes the code ``pp_i`` (pruned
  lanes before i); ``verif.rest`` -> BitReader: lane i's field at ``kp_i*(7-m) + pp_i*8``.
* The beat carries the leading lanes whose data is complete on every plane the mode reads (a prefix
  AND over per-lane flags); the readers then take exactly the bits those lanes used.

A beat never crosses a superblock; the beat that ends a superblock also skips every plane's padding,
checks the keep count and the chunk lengths, and loads the next superblock's sizes, so consecutive
superblocks follow without a bubble.

The whole decision is one cycle (zero counter -> table -> prefix counts -> lane fit -> reader shift):
that loop is inherent to a variable-length decoder. The output payload is registered.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from ..golden.config import (ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, ESCAPE_PAYLOAD_BITS,
                             K_MAX, MAX_CODE_BITS, PRUNED)
from .bitreader import BYTE, BitReader, word_layout
from .zero_counter import ZeroCounter, prefix_counts

BF16_BITS = 16
SYMBOL_BITS = bits_for(PRUNED)            # 9: exponents 0..255 and the pruned mark 256
FIELD_MAX = 1 + BF16_MANTISSA_BITS        # widest fixed field: a pruned value's sign + mantissa (8 bits)
CFG_ADDR_BITS = 8
CFG_DATA_BITS = 32
MAX_LANES = 32
MAX_WORD = 1024


class Reg(enum.IntEnum):
    """Register addresses of the ``cfg`` write port (docs/HARDWARE.md)."""
    CTRL = 0x00
    MODE = 0x01
    MBITS = 0x02
    KEEP = 0x03
    GROUP = 0x04
    NUMEL = 0x05
    SPEC_K = 0x06
    VERIF_K = 0x07
    CHUNK = 0x08         # format 2.0: log2 superblocks per chunk (0 = one, v1 framing)
    SPEC_PAIRS = 0x09    # format 2.0: pair mask of the speculation book (bit q: group q holds 2 symbols)
    VERIF_PAIRS = 0x0A   # format 2.0: pair mask of the verification book
    SPEC_SYM = 0x10      # + rank
    VERIF_SYM = 0x20     # + rank


CTRL_START = 1 << 0
CTRL_CLEAR_ERROR = 1 << 1


def codebook_register_cases(m, r, wdata):
    """The codebook cases of a ``cfg`` write (K of each book, then its rank -> symbol entries), shared by
    the decoder and the encoder; call inside ``with m.Switch(addr)``. ``r`` holds spec_k / verif_k,
    spec_loaded / verif_loaded and the spec_tab / verif_tab arrays."""
    with m.Case(Reg.SPEC_K):
        m.d.sync += [r["spec_k"].eq(Mux(wdata > K_MAX, K_MAX, wdata)), r["spec_loaded"].eq(1)]
    with m.Case(Reg.VERIF_K):
        m.d.sync += [r["verif_k"].eq(Mux(wdata > K_MAX, K_MAX, wdata)), r["verif_loaded"].eq(1)]
    for i in range(K_MAX):
        with m.Case(Reg.SPEC_SYM + i):
            m.d.sync += r["spec_tab"][i].eq(wdata)
        with m.Case(Reg.VERIF_SYM + i):
            m.d.sync += r["verif_tab"][i].eq(wdata)


class Err(enum.IntEnum):
    """Bit positions in ``error_code``."""
    CODE = 0
    OVERRUN = 1
    TOO_LONG = 2
    KEEP = 3
    NO_BOOK = 4
    CONFIG = 5


ERROR_BITS = 8

cfg_layout = data.StructLayout({"addr": CFG_ADDR_BITS, "data": CFG_DATA_BITS})


def out_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({
        "lanes": data.ArrayLayout(BF16_BITS, lanes),
        "count": bits_for(lanes),
        "sb_end": 1,
        "last": 1,
    })


def check_lanes_word(lanes, word, window):
    if not isinstance(lanes, int) or not 1 <= lanes <= MAX_LANES:
        raise ConfigError(f"lanes must be 1..{MAX_LANES}, got {lanes!r}")
    # a power of two: the bit readers' ring pointers wrap for free (hw/bitreader.py)
    if not isinstance(word, int) or word < BYTE or word & (word - 1) or word > MAX_WORD:
        raise ConfigError(f"input word must be a power-of-two number of bits in 8..{MAX_WORD}, got {word!r}")
    if not isinstance(window, int) or not MAX_CODE_BITS <= window <= MAX_WORD:
        raise ConfigError(f"code window must be {MAX_CODE_BITS}..{MAX_WORD} bits (one escape must fit), "
                          f"got {window!r}")


class DecoderC1(wiring.Component):
    """Cassandra-1 decoder, ``lanes`` bf16 values per cycle (draft or full mode, set per tensor).

    Parameters
        lanes         L, values per output beat (1..32)
        word          IW, bits per input word on the speculation planes (a power of two >= 8)
        window        W, code window of the speculation zero counter (>= 24; default 8*L, min 24): the beat
                      holds at most the codes that fit in W bits, so W / L is the mean code length
                      sustained at full rate
        verif_lanes   Lv <= L, values per beat in full mode (default L). Full mode reads ~11 bits/value
                      against ~3-5 for the draft, so at a given memory bandwidth it needs far fewer values
                      per cycle; Lv < L shrinks the verification zero counter, readers and rest-field
                      logic (docs/HARDWARE.md, "Verification lanes").
        verif_word    bits per input word on the verification planes (default IW, or max(32, 8*Lv) when Lv < L)
        verif_window  code window of the verification zero counter (default W, or max(24, 8*Lv))
    """

    def __init__(self, lanes: int = 8, word: int | None = None, window: int | None = None,
                 verif_lanes: int | None = None, verif_word: int | None = None, verif_window: int | None = None):
        word = 8 * lanes if word is None else word
        window = max(MAX_CODE_BITS, 8 * lanes) if window is None else window
        check_lanes_word(lanes, word, window)
        verif_lanes = lanes if verif_lanes is None else verif_lanes
        if not isinstance(verif_lanes, int) or not 1 <= verif_lanes <= lanes:
            raise ConfigError(f"verif_lanes must be 1..lanes ({lanes}), got {verif_lanes!r}")
        narrow = verif_lanes < lanes
        verif_word = (max(4 * BYTE, 8 * verif_lanes) if narrow else word) if verif_word is None else verif_word
        verif_window = (max(MAX_CODE_BITS, 8 * verif_lanes) if narrow else window) \
            if verif_window is None else verif_window
        check_lanes_word(verif_lanes, verif_word, verif_window)
        self.lanes, self.word, self.window = lanes, word, window
        self.verif_lanes, self.verif_word, self.verif_window = verif_lanes, verif_word, verif_window
        self.field_window = FIELD_MAX * lanes      # L fields of at most 8 bits always fit
        self.verif_field_window = FIELD_MAX * verif_lanes
        self.port_words = {"spec_codes": word, "spec_signman": word,
                           "verif_codes": verif_word, "verif_rest": verif_word}
        plane = stream.Signature(word_layout(word))
        vplane = stream.Signature(word_layout(verif_word))
        super().__init__({
            "spec_codes": In(plane), "spec_signman": In(plane),
            "verif_codes": In(vplane), "verif_rest": In(vplane),
            "cfg": In(stream.Signature(cfg_layout)),
            "out": Out(stream.Signature(out_layout(lanes))),
            "busy": Out(1), "error": Out(1), "error_code": Out(ERROR_BITS),
        })

    # ------------------------------------------------------------------------------------------ registers
    def _registers(self, m):
        r = {
            "full": Signal(name="reg_full"),
            "m": Signal(range(BF16_MANTISSA_BITS + 1), name="reg_m"),
            "k": Signal(range(max(ALLOWED_GROUP_SIZES) + 1), name="reg_k", init=1),
            "g": Signal(range(max(ALLOWED_GROUP_SIZES) + 1), name="reg_g", init=128),
            "numel": Signal(CFG_DATA_BITS, name="reg_numel"),
            "spec_k": Signal(range(K_MAX + 1), name="reg_spec_k"),
            "verif_k": Signal(range(K_MAX + 1), name="reg_verif_k"),
            "spec_loaded": Signal(name="spec_loaded"),
            "verif_loaded": Signal(name="verif_loaded"),
            "bad_m": Signal(name="bad_m"), "bad_k": Signal(name="bad_k"),
        }
        r["spec_tab"] = Array(Signal(SYMBOL_BITS, name=f"spec_sym{i}") for i in range(K_MAX))
        r["verif_tab"] = Array(Signal(BF16_EXPONENT_BITS, name=f"verif_sym{i}") for i in range(K_MAX))
        return r

    def _write_registers(self, m, r, start, clear):
        """Register writes from ``cfg`` (only accepted while idle); START / CLEAR_ERROR are decoded here."""
        cfg = self.cfg
        addr, wdata = cfg.payload.addr, cfg.payload.data
        with m.If(cfg.valid & cfg.ready):
            with m.Switch(addr):
                with m.Case(Reg.CTRL):
                    m.d.comb += [start.eq(wdata[0]), clear.eq(wdata[1])]
                with m.Case(Reg.MODE):
                    m.d.sync += r["full"].eq(wdata[0])
                with m.Case(Reg.MBITS):
                    m.d.sync += [r["m"].eq(wdata), r["bad_m"].eq(wdata > BF16_MANTISSA_BITS)]
                with m.Case(Reg.KEEP):
                    m.d.sync += [r["k"].eq(wdata), r["bad_k"].eq(wdata > max(ALLOWED_GROUP_SIZES))]
                with m.Case(Reg.GROUP):
                    m.d.sync += r["g"].eq(Mux(wdata > max(ALLOWED_GROUP_SIZES), 0, wdata))
                with m.Case(Reg.NUMEL):
                    m.d.sync += r["numel"].eq(wdata)
                codebook_register_cases(m, r, wdata)

    def _config_error(self, r):
        g_ok = Const(0, 1)
        for g in ALLOWED_GROUP_SIZES:
            g_ok = g_ok | (r["g"] == g)
        return r["bad_m"] | r["bad_k"] | ~g_ok | (r["k"] == 0) | (r["k"] > r["g"]) | (r["numel"] == 0)

    @staticmethod
    def _kept_in(m, r, n):
        """k_s = ceil(k * n_s / G); G is a power of two, so the division is a shift."""
        ks = Signal(range(max(ALLOWED_GROUP_SIZES) + 1), name="k_s")
        prod = r["k"] * n + r["g"] - 1
        with m.Switch(r["g"]):
            for g in ALLOWED_GROUP_SIZES:
                with m.Case(g):
                    m.d.comb += ks.eq(prod >> exact_log2(g))
        return ks

    # ---------------------------------------------------------------------------------------- code lanes
    def _code_lanes(self, m, reader, K, table, name, esc_payload_bits=ESCAPE_PAYLOAD_BITS, lanes=None,
                    window=None):
        """Decode up to ``lanes`` (default L) rank-unary codes from a reader's ``window``-bit view.

        Returns per lane ``ok`` (complete, legal, not after an escape), ``sym``, and ``end_bits`` (bits
        through lane i including an escape payload), plus the window state needed for error checks.
        """
        L = self.lanes if lanes is None else lanes
        W = self.window if window is None else window
        zc = ZeroCounter(W, L)
        m.submodules[f"{name}_zc"] = zc
        avail = Signal(range(W + 1), name=f"{name}_avail_w")
        m.d.comb += avail.eq(Mux(reader.avail > W, W, reader.avail))
        # Bits beyond the current chunk (or beyond the buffered data) must not look like codes.
        m.d.comb += zc.data.eq(reader.win & ~(Const((1 << W) - 1, W) << avail))

        esc = [Signal(name=f"{name}_esc{i}") for i in range(L)]
        bad = [Signal(name=f"{name}_bad{i}") for i in range(L)]
        for i in range(L):
            m.d.comb += [esc[i].eq(zc.valid[i] & (zc.rank[i] == K)), bad[i].eq(zc.valid[i] & (zc.rank[i] > K))]
        # The first escape's raw symbol (only the first escape lane of a beat can be taken).
        first_esc_end = Signal(range(W + 1), name=f"{name}_esc_end")
        acc = Const(0, bits_for(W))
        seen = Const(0, 1)
        for i in range(L):
            acc = acc | Mux(esc[i] & ~seen, zc.end[i], 0)
            seen = seen | esc[i]
        m.d.comb += first_esc_end.eq(acc)
        esc_sym = Signal(esc_payload_bits, name=f"{name}_esc_sym")
        m.d.comb += esc_sym.eq(zc.data >> first_esc_end)

        ok = [Signal(name=f"{name}_ok{i}") for i in range(L)]
        after_esc = [Signal(name=f"{name}_after_esc{i}") for i in range(L)]
        sym = [Signal(SYMBOL_BITS, name=f"{name}_sym{i}") for i in range(L)]
        end_bits = [Signal(range(W + esc_payload_bits + 1), name=f"{name}_endb{i}") for i in range(L)]
        before = Const(0, 1)
        for i in range(L):
            payload_in = zc.end[i] + esc_payload_bits <= avail
            m.d.comb += [
                after_esc[i].eq(before),
                ok[i].eq(zc.valid[i] & ~bad[i] & ~before & (~esc[i] | payload_in)),
                sym[i].eq(Mux(esc[i], esc_sym, table[zc.rank[i][:4]])),
                end_bits[i].eq(zc.end[i] + Mux(esc[i], esc_payload_bits, 0)),
            ]
            before = before | esc[i]
        return {"zc": zc, "ok": ok, "sym": sym, "end_bits": end_bits, "bad": bad, "after_esc": after_esc,
                "avail": avail, "window": W}

    def _code_errors(self, m, reader, lanes, need, K, name):
        """CODE / OVERRUN for the first lane a code plane cannot deliver, if that lane is needed."""
        L, W = len(lanes["ok"]), lanes["window"]
        zc = lanes["zc"]
        code_err = Signal(name=f"{name}_code_err")
        overrun = Signal(name=f"{name}_overrun")
        # first failing lane j: all lanes < j ok, lane j not ok; it matters if j < need.
        starving = Signal(name=f"{name}_starving")
        m.d.comb += starving.eq(reader.end_seen & (reader.avail <= W))
        ok_before = Signal(L, name=f"{name}_ok_before")     # lanes < j all ok
        fails = Signal(L, name=f"{name}_fails")
        long_run = Signal(L, name=f"{name}_long_run")
        ce = Const(0, 1)
        ov = Const(0, 1)
        for j in range(L):
            start = zc.end[j - 1] if j else Const(0, 1)
            m.d.comb += [
                ok_before[j].eq((ok_before[j - 1] & lanes["ok"][j - 1]) if j else 1),
                fails[j].eq(ok_before[j] & ~lanes["ok"][j] & (j < need) & ~lanes["after_esc"][j]),
                long_run[j].eq(~zc.valid[j] & ((lanes["avail"] - start) > K)),
            ]
            ce = ce | (fails[j] & (lanes["bad"][j] | long_run[j]))
            ov = ov | (fails[j] & ~lanes["bad"][j] & ~long_run[j] & starving)
        m.d.comb += [code_err.eq(ce), overrun.eq(ov)]
        return code_err, overrun

    def _control_signals(self, m):
        """Registers, the START / CLEAR_ERROR strobes, busy and the sticky error register with its raise
        vector (shared with DecoderC2); drives busy, error_code, error and cfg.ready."""
        r = self._registers(m)
        start, clear = Signal(), Signal()
        busy = Signal()
        err = Signal(ERROR_BITS)
        raise_err = Signal(ERROR_BITS)
        m.d.comb += [self.busy.eq(busy), self.error_code.eq(err), self.error.eq(err.any()),
                     self.cfg.ready.eq(~busy)]
        self._write_registers(m, r, start, clear)
        return r, start, clear, busy, err, raise_err

    # ------------------------------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        L, W = self.lanes, self.window
        r, start, clear, busy, err, raise_err = self._control_signals(m)

        Lv = self.verif_lanes
        readers = {}
        for name, win in (("spec_codes", W), ("spec_signman", self.field_window),
                          ("verif_codes", self.verif_window), ("verif_rest", self.verif_field_window)):
            rd = BitReader(self.port_words[name], win)
            m.submodules[f"{name}_rd"] = rd
            wiring.connect(m, wiring.flipped(getattr(self, name)), rd.inp)
            readers[name] = rd
        S, M, V, R = (readers[n] for n in ("spec_codes", "spec_signman", "verif_codes", "verif_rest"))
        self._readers = readers          # for white-box simulation probes

        # Superblock bookkeeping.
        remaining = Signal(CFG_DATA_BITS)
        sb_left = Signal(range(max(ALLOWED_GROUP_SIZES) + 1))
        sb_k = Signal(range(max(ALLOWED_GROUP_SIZES) + 1))
        kept_cnt = Signal(range(max(ALLOWED_GROUP_SIZES) + 1))
        need = Signal(range(L + 1))
        m.d.comb += need.eq(Mux(sb_left < L, sb_left, L))

        full = r["full"]
        mm = r["m"]

        # ---- speculation codes
        spec = self._code_lanes(m, S, r["spec_k"], r["spec_tab"], "spec")
        kept = Signal(L, name="kept")
        pruned = Signal(L, name="pruned")
        m.d.comb += [kept.eq(Cat(*[s != PRUNED for s in spec["sym"]])), pruned.eq(~kept)]
        kp = prefix_counts(m, kept, L, "kp")           # kept lanes before lane i
        pp = prefix_counts(m, pruned, L, "pp")         # pruned lanes before lane i

        # ---- sign + top mantissa fields (1+m bits per kept lane)
        fm = Signal(range(FIELD_MAX + 1))
        fr = Signal(range(BF16_MANTISSA_BITS + 1))
        m.d.comb += [fm.eq(mm + 1), fr.eq(BF16_MANTISSA_BITS - mm)]
        sm_field = []
        sm_ok = []
        for i in range(L):
            off = Signal(range(self.field_window + 1), name=f"sm_off{i}")
            f = Signal(FIELD_MAX, name=f"sm_f{i}")
            m.d.comb += [off.eq(kp[i] * fm), f.eq((M.win >> off) & ~(Const(0xFF, FIELD_MAX) << fm))]
            sm_field.append(f)
            sm_ok.append(~kept[i] | (off + fm <= M.avail))

        # ---- verification: codes of pruned lanes, rest fields of every lane
        ver = self._code_lanes(m, V, r["verif_k"], r["verif_tab"], "ver", lanes=Lv, window=self.verif_window)
        # vok[j]: verification code lanes 0..j all ok. Named signals, not nested expressions: Amaranth
        # re-emits an expression at every use, and these feed per-lane muxes (RTLIL grew as L^5).
        vok = Signal(Lv, name="vok")
        for j in range(Lv):
            m.d.comb += vok[j].eq(ver["ok"][j] & (vok[j - 1] if j else 1))
        vok_arr = Array(vok[j] for j in range(Lv))
        vsym_arr = Array(ver["sym"])
        # Lanes at and above Lv never complete in full mode (a full-mode beat holds at most Lv values).
        rest_field = [Const(0, FIELD_MAX)] * L
        rest_ok = [Const(0, 1)] * L
        v_ok = [Const(0, 1)] * L
        v_exp = [Const(0, BF16_EXPONENT_BITS)] * L
        for i in range(Lv):
            off = Signal(range(self.verif_field_window + 1), name=f"rest_off{i}")
            width = Mux(kept[i], fr, FIELD_MAX)
            f = Signal(FIELD_MAX, name=f"rest_f{i}")
            m.d.comb += [off.eq(kp[i] * fr + pp[i] * FIELD_MAX),
                         f.eq((R.win >> off) & ~(Const(0xFF, FIELD_MAX) << width))]
            rest_field[i] = f
            rest_ok[i] = off + width <= R.avail
            v_ok[i] = kept[i] | vok_arr[pp[i]]
            ve = Signal(BF16_EXPONENT_BITS, name=f"vexp{i}")
            m.d.comb += ve.eq(vsym_arr[pp[i]])
            v_exp[i] = ve

        # ---- lane fit: the leading lanes complete on every plane the mode reads
        lane_ok = Signal(L)
        for i in range(L):
            m.d.comb += lane_ok[i].eq(spec["ok"][i] & sm_ok[i] & (i < need) & (~full | (rest_ok[i] & v_ok[i])))
        fit_bits = Signal(L, name="fit")              # fit[i]: lanes 0..i all complete
        for i in range(L):
            m.d.comb += fit_bits[i].eq(lane_ok[i] & (fit_bits[i - 1] if i else 1))
        fit = [Const(1, 1)] + [fit_bits[i] for i in range(L)]
        self._probe = {"spec_ok": Cat(*spec["ok"]), "sm_ok": Cat(*sm_ok), "rest_ok": Cat(*rest_ok),
                       "v_ok": Cat(*v_ok), "kept": kept}          # white-box simulation probes
        n_out = Signal(range(L + 1))
        m.d.comb += n_out.eq(sum(fit[1:]))
        # Spec-only prefix for the signman/verif overrun checks (lanes the codes already allow).
        sfit_bits = Signal(L, name="sfit")
        for i in range(L):
            m.d.comb += sfit_bits[i].eq(spec["ok"][i] & (i < need) & (sfit_bits[i - 1] if i else 1))
        sfit = [Const(1, 1)] + [sfit_bits[i] for i in range(L)]

        # ---- per-plane consumption for n_out lanes
        spec_take = Array([Const(0, bits_for(W + ESCAPE_PAYLOAD_BITS))] + spec["end_bits"])[n_out]
        sm_take = Array(kp)[n_out] * fm
        np_out = Array(pp)[n_out]
        # np_out <= Lv whenever the verification planes are read (full mode)
        ver_take = Array([Const(0, bits_for(self.verif_window + ESCAPE_PAYLOAD_BITS))] + ver["end_bits"])[np_out]
        rest_take = Array(kp)[n_out] * fr + np_out * FIELD_MAX
        kept_out = Array(kp)[n_out]

        # ---- errors
        spec_ce, spec_ov = self._code_errors(m, S, spec, need, r["spec_k"], "spec")
        np_need = Array(pp)[sum(sfit[1:])]
        ver_ce, ver_ov = self._code_errors(m, V, ver, np_need, r["verif_k"], "ver")
        sm_ov = Const(0, 1)
        rest_ov = Const(0, 1)
        for i in range(L):
            sm_ov = sm_ov | (sfit[i + 1] & ~sm_ok[i] & M.end_seen)
        for i in range(Lv):              # lanes >= Lv wait for a later beat in full mode
            rest_ov = rest_ov | (sfit[i + 1] & ~rest_ok[i] & R.end_seen)

        finishing = Signal()
        m.d.comb += finishing.eq((n_out == sb_left) & (n_out != 0))
        skip_ok = S.skip_ok & M.skip_ok & (~full | (V.skip_ok & R.skip_ok))
        skip_err = S.skip_err | M.skip_err | (full & (V.skip_err | R.skip_err))
        keep_err = (kept_cnt + kept_out) != sb_k

        adv = ~self.out.valid | self.out.ready
        go = Signal()
        err_now = Signal(ERROR_BITS)
        with m.If(busy):
            m.d.comb += [
                err_now[Err.CODE].eq(spec_ce | (full & ver_ce)),
                err_now[Err.OVERRUN].eq(spec_ov | sm_ov | (full & (ver_ov | rest_ov))),
                err_now[Err.TOO_LONG].eq(adv & finishing & skip_err),
                err_now[Err.KEEP].eq(adv & finishing & ~skip_err & skip_ok & keep_err),
            ]
        m.d.comb += go.eq(busy & adv & (n_out != 0) & ~err_now.any() & (~finishing | skip_ok))

        # ---- readers' controls
        for rd in (S, M):
            m.d.comb += [rd.enable.eq(busy), rd.drain.eq(err.any() & ~busy), rd.flush.eq(raise_err.any())]
        for rd in (V, R):
            m.d.comb += [rd.enable.eq(busy & full), rd.drain.eq(err.any() & ~busy),
                         rd.flush.eq(raise_err.any())]
        m.d.comb += [S.take.eq(spec_take), M.take.eq(sm_take), V.take.eq(ver_take), R.take.eq(rest_take)]
        for rd in (S, M, V, R):
            m.d.comb += rd.skip.eq(finishing)
        m.d.comb += [S.commit.eq(go), M.commit.eq(go), V.commit.eq(go & full), R.commit.eq(go & full)]

        # ---- output beat
        with m.If(adv):
            m.d.sync += self.out.valid.eq(go)
        with m.If(go):
            m.d.sync += [
                self.out.payload.count.eq(n_out),
                self.out.payload.sb_end.eq(finishing),
                self.out.payload.last.eq(finishing & (remaining == n_out)),
            ]
            for i in range(L):
                t = Signal(FIELD_MAX, name=f"draft_lo{i}")
                m.d.comb += t.eq(sm_field[i] << fr)         # sign lands on bit 7, kept mantissa on top
                e = spec["sym"][i][:BF16_EXPONENT_BITS]
                draft = Cat(t[:BF16_MANTISSA_BITS], e, t[BF16_MANTISSA_BITS])
                rf = rest_field[i]
                exact_pruned = Cat(rf[:BF16_MANTISSA_BITS], v_exp[i], rf[BF16_MANTISSA_BITS])
                value = Mux(kept[i], draft | Mux(full, rf, 0), Mux(full, exact_pruned, 0))
                m.d.sync += self.out.payload.lanes[i].eq(Mux(i < n_out, value, 0))

        # ---- control state
        ks_next = Signal(range(max(ALLOWED_GROUP_SIZES) + 1))
        n_next = Signal(range(max(ALLOWED_GROUP_SIZES) + 1))
        rem_next = Signal(CFG_DATA_BITS)
        m.d.comb += rem_next.eq(Mux(busy, remaining - n_out, r["numel"]))
        m.d.comb += n_next.eq(Mux(rem_next >= r["g"], r["g"], rem_next))
        m.d.comb += ks_next.eq(self._kept_in(m, r, n_next))

        cfg_bad = self._config_error(r)
        no_book = ~r["spec_loaded"] | (r["full"] & ~r["verif_loaded"])
        with m.If(start & ~busy & ~err.any()):
            m.d.comb += [raise_err[Err.CONFIG].eq(cfg_bad), raise_err[Err.NO_BOOK].eq(~cfg_bad & no_book)]
            with m.If(~cfg_bad & ~no_book):
                m.d.sync += [busy.eq(1), remaining.eq(rem_next), sb_left.eq(n_next), sb_k.eq(ks_next),
                             kept_cnt.eq(0)]
        with m.If(busy):
            m.d.comb += raise_err.eq(err_now)
        with m.If(go):
            m.d.sync += remaining.eq(rem_next)
            with m.If(finishing):
                m.d.sync += [sb_left.eq(n_next), sb_k.eq(ks_next), kept_cnt.eq(0)]
                with m.If(rem_next == 0):
                    m.d.sync += busy.eq(0)
            with m.Else():
                m.d.sync += [sb_left.eq(sb_left - n_out), kept_cnt.eq(kept_cnt + kept_out)]
        with m.If(raise_err.any()):
            m.d.sync += [err.eq(err | raise_err), busy.eq(0)]
        with m.Elif(clear & ~busy):
            m.d.sync += err.eq(0)
        return m
