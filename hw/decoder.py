"""The decoder interface every decoder v3 builds on: ports, word framing, registers, errors.

docs/datasheets/decoder_c1.md and docs/datasheets/decoder_c2.md give the contract (ports, word framing, registers,
errors). ``DecoderC1`` holds the ports, the register file, its writes, the config check and the sticky-error
control; the C1 and C2 decoders v3 (hw/decoder_c1_v3.py, hw/decoder_c2_v3.py) subclass it with their datapaths.
``DecoderC1`` itself has no datapath and does not elaborate.
"""
from __future__ import annotations

from amaranth.hdl import Array, Const, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from ..golden.config import (ALLOWED_CHUNK_SUPERBLOCKS, ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS,
                             K_MAX, MAX_CHUNK_VALUES, MAX_CODE_BITS, PRUNED)
from .bitreader import BYTE, word_layout

BF16_BITS = 16
SYMBOL_BITS = bits_for(PRUNED)            # 9: exponents 0..255 and the pruned mark 256
FIELD_MAX = 1 + BF16_MANTISSA_BITS        # widest fixed field: a pruned value's sign + mantissa (8 bits)
CFG_ADDR_BITS = 8
CFG_DATA_BITS = 32
MAX_LANES = 32
MAX_WORD = 1024


class Reg(enum.IntEnum):
    """Register addresses of the ``cfg`` write port (hw/regs/cassandra.rdl, docs/datasheets/decoder_c1.md)."""
    CTRL = 0x00
    MODE = 0x01
    MBITS = 0x02
    KEEP = 0x03
    GROUP = 0x04
    NUMEL = 0x05
    SPEC_K = 0x06
    VERIF_K = 0x07
    CHUNK = 0x08         # log2 superblocks per chunk (0 = one superblock per chunk)
    SPEC_PAIRS = 0x09    # format 2.0: pair mask of the speculation book (bit q: group q holds 2 symbols)
    VERIF_PAIRS = 0x0A   # format 2.0: pair mask of the verification book
    SPEC_SYM = 0x10      # + rank
    VERIF_SYM = 0x20     # + rank


CTRL_START = 1 << 0
CTRL_CLEAR_ERROR = 1 << 1


CHUNK_REG_MAX = 7      # the CHUNK register saturates here; values above log2(1024 / G) raise CONFIG at START


MAX_CHUNK_LOG = exact_log2(max(ALLOWED_CHUNK_SUPERBLOCKS))     # format 2.0: A = 2^CHUNK <= 64, A * G <= 1024


class Format2Registers:
    """Mixin of the format 2.0 registers (docs/datasheets/decoder_c1.md, FORMAT.md §1, §3.1) for a decoder built on
    DecoderC1's register file: CHUNK (log2 superblocks per chunk) and the pair mask of every book in
    ``PAIR_BOOKS`` (C2 has no speculation book). Put it before the base class."""
    PAIR_BOOKS = ("spec", "verif")

    def _registers(self, m):
        r = super()._registers(m)
        r["chunk"] = Signal(range(CHUNK_REG_MAX + 1), name="reg_chunk")        # log2 A (saturated)
        for book in self.PAIR_BOOKS:
            r[f"{book}_pairs"] = Signal(K_MAX, name=f"reg_{book}_pairs")
        return r

    def _config_error(self, r):
        """The base checks, and CHUNK: log2 A <= 6 with A * G <= 1024 (FORMAT.md section 1)."""
        chunk_bad = Const(0, 1)
        for gv in ALLOWED_GROUP_SIZES:
            limit = min(exact_log2(MAX_CHUNK_VALUES // gv), MAX_CHUNK_LOG)
            chunk_bad = chunk_bad | ((r["g"] == gv) & (r["chunk"] > limit))
        return super()._config_error(r) | chunk_bad

    def _write_registers(self, m, r, start, clear):
        super()._write_registers(m, r, start, clear)
        cfg = self.cfg
        addr, wdata = cfg.payload.addr, cfg.payload.data
        with m.If(cfg.valid & cfg.ready):
            with m.Switch(addr):
                with m.Case(Reg.CHUNK):
                    m.d.sync += r["chunk"].eq(Mux(wdata > CHUNK_REG_MAX, CHUNK_REG_MAX, wdata))
                for book in self.PAIR_BOOKS:
                    with m.Case(Reg.SPEC_PAIRS if book == "spec" else Reg.VERIF_PAIRS):
                        m.d.sync += r[f"{book}_pairs"].eq(wdata)


def ctrl_register_case(m, start, clear, wdata):
    """The CTRL case of a ``cfg`` write, START / CLEAR_ERROR strobes (every decoder instance has its own CTRL:
    the decoders with a register file and the cluster cores that read ``TensorRegisters``); call inside
    ``with m.Switch(addr)``."""
    with m.Case(Reg.CTRL):
        m.d.comb += [start.eq(wdata[0]), clear.eq(wdata[1])]


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


class C1RegisterFile:
    """The C1 register file (docs/datasheets/decoder_c1.md "Registers"): the registers, their writes from a
    ``cfg`` stream (``self.cfg``) and the config check at START. A mixin of ``DecoderC1`` and of the cluster's
    shared tensor registers (hw/tensor_regs.py)."""

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
                ctrl_register_case(m, start, clear, wdata)
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



class DecoderC1(C1RegisterFile, wiring.Component):
    """The decoder interface (ports, registers, errors) that DecoderC1v3 and DecoderC2v3 build on; it has no
    datapath and does not elaborate.

    Parameters
        lanes         L, values per output beat (1..32)
        word          IW, bits per input word on ``spec_signman`` (a power of two >= 8)
        window        W, the span of ``spec_codes`` bits a beat's codes are taken from (>= 24; decoder v3: two
                      code words)
        verif_lanes   Lv <= L, values per output beat in full mode (default L)
        verif_word    bits per input word on the verification planes (default IW, or max(32, 8*Lv) when Lv < L)
        code_word     bits per input word on ``spec_codes`` (default IW): the codes average ~2.7 bits against
                      ~4.5 bits of ``spec_signman`` per value, so they may use a narrower port
        verif_window  the span of ``verif_codes`` bits (default W, or max(24, 8*Lv))
    """

    def __init__(self, lanes: int = 8, word: int | None = None, window: int | None = None,
                 verif_lanes: int | None = None, verif_word: int | None = None, verif_window: int | None = None,
                 code_word: int | None = None, extra_ports: dict | None = None):
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
        code_word = word if code_word is None else code_word
        check_lanes_word(lanes, code_word, window)
        self.lanes, self.word, self.window = lanes, word, window
        self.verif_lanes, self.verif_word, self.verif_window = verif_lanes, verif_word, verif_window
        self.code_word = code_word
        self.port_words = {"spec_codes": code_word, "spec_signman": word,
                           "verif_codes": verif_word, "verif_rest": verif_word}
        plane = stream.Signature(word_layout(word))
        vplane = stream.Signature(word_layout(verif_word))
        super().__init__({
            "spec_codes": In(stream.Signature(word_layout(code_word))), "spec_signman": In(plane),
            "verif_codes": In(vplane), "verif_rest": In(vplane),
            "cfg": In(stream.Signature(cfg_layout)),
            "out": Out(stream.Signature(out_layout(lanes))),
            "busy": Out(1), "error": Out(1), "error_code": Out(ERROR_BITS),
            **(extra_ports or {}),
        })

    def _drive_control(self, m, busy, err):
        """busy, error_code, error and cfg.ready from the instance's busy and sticky error register
        (registers are written only while idle)."""
        m.d.comb += [self.busy.eq(busy), self.error_code.eq(err), self.error.eq(err.any()),
                     self.cfg.ready.eq(~busy)]

    # ------------------------------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        raise NotImplementedError("DecoderC1 is the decoders' shared interface and has no datapath: use DecoderC1v3 "
                                  "(decoder_c1v3_*) or DecoderC2v3 (decoder_c2v3_*)")
