"""AXI4-Lite register block for the decoders and KV encoders (docs/datasheets/register_block.md).

The blocks take their registers as a write stream ``cfg`` ({addr: 8, data: 32}) and report ``busy`` and a
sticky ``error_code``. An integrator's CPU expects a memory-mapped slave instead: ``AxiLiteCsr`` is that
bridge, and ``CsrTop(name)`` is a named configuration with it attached (the block's data streams unchanged,
its control ports replaced by an AXI4-Lite slave and one interrupt line). The byte map of its 32-bit
registers is described in hw/regs/cassandra.rdl (SystemRDL; hw/regmap.py checks this file against it);
``REGISTER_MAP`` below is the summary the export prints in ports.md (tests/test_hw_csr.py checks it against the
description).

Bus behaviour. AW, W and AR each land in a register (ready = that register is empty and no write, resp.
read, is in flight), so no ready depends combinationally on a valid and AW / W may come in either order;
one write and one read are handled at a time, in order. A write is executed once its AW and W are both in:
a block-register write is forwarded to ``cfg`` if the block can take it now (``cfg.ready``; B after the
block took it) and answered **SLVERR and dropped if not** — a decoder with a tensor in flight, an encoder
with vectors in flight — so the bus is not held for the length of a decode (the CPU programs after DONE, or
polls STATUS.busy; programs ahead go through ``cfg_dma``). While ``cfg_dma`` is offering a write to a ready
block the CPU's write waits (that DMA write is taken this cycle), so it is then offered to a block that saw
no other write and, for a decoder, taken the next cycle; an encoder's ``cfg.ready`` also falls when an input
vector starts, which may hold a forwarded write's B for up to that vector. The block applies register writes
while its error is set and ignores START: a START taken while the error is set answers SLVERR. SLVERR too,
nothing forwarded: read-only or unmapped offsets, unaligned addresses, strobes other than 0xF (a zero strobe
included). Reads: SLVERR with data 0 outside the map.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..errors import ConfigError
from ..golden.config import FORMAT_VERSION
from .decoder import CFG_ADDR_BITS, CFG_DATA_BITS, ERROR_BITS, cfg_layout

ADDR_BITS = 12                     # a 4 KiB page
BLOCK_REGS = 1 << CFG_ADDR_BITS    # the block's register indexes: byte offsets 0x000 .. 0x3FC
MAP_VERSION = 1


class Csr:
    """Byte offsets of the local registers."""
    ID = 0x400
    VERSION = 0x404
    BLOCK = 0x408
    STATUS = 0x40C
    ERROR_CODE = 0x410
    IRQ_STATUS = 0x414
    IRQ_ENABLE = 0x418


ID_VALUE = 0x43415353              # "CASS"
# VERSION[15:0]: the format of the planes a block reads or writes (hw/configs.py CONFIG_INFO "layout"):
# format 3.0 for decoder v3 and the KV encoders
LAYOUT_FORMAT = {"format 3.0": FORMAT_VERSION}
# BLOCK[7:0]; kinds 1 and 2 named the retired decoder v2 blocks and stay reserved
KINDS = {"encoder_kv_c1": 3, "encoder_kv_c2": 4, "decoder_c1v3": 5, "decoder_c2v3": 6}
KIND_NAMES = {"encoder_kv_c1": "C1 KV encoder", "encoder_kv_c2": "C2 KV encoder", "decoder_c1v3": "C1 decoder v3",
              "decoder_c2v3": "C2 decoder v3"}

REGISTER_MAP = [   # (offset, name, access, meaning): ports.md's summary of hw/regs/cassandra.rdl
    ("0x000 + 4a", "block register a (0 <= a < 256)", "W",
     "forwarded to the block's `cfg` as (a, data) when it can take it, else SLVERR (busy); a START taken while "
     "the block's error is set answers SLVERR (ignored); reads return 0"),
    (f"{Csr.ID:#05x}", "ID", "R", f"{ID_VALUE:#010x} (\"CASS\")"),
    (f"{Csr.VERSION:#05x}", "VERSION", "R",
     "[15:8] format major, [7:0] format minor of the planes the block reads or writes (3.0: decoder v3 and the KV "
     "encoders), [23:16] register map version"),
    (f"{Csr.BLOCK:#05x}", "BLOCK", "R",
     "[7:0] kind (" + ", ".join(f"{v} {KIND_NAMES[k]}" for k, v in KINDS.items()) + "; 1, 2 reserved), [15:8] lanes, "
     "[23:16] full-mode lanes"),
    (f"{Csr.STATUS:#05x}", "STATUS", "R",
     "[0] busy, [1] error, [2] a register write (bus or `cfg_dma`) is being offered to the block"),
    (f"{Csr.ERROR_CODE:#05x}", "ERROR_CODE", "R",
     "the block's sticky error bits (cleared by writing CTRL = CLEAR_ERROR at offset 0x000)"),
    (f"{Csr.IRQ_STATUS:#05x}", "IRQ_STATUS", "R / W1C", "[0] DONE (busy fell with no error), [1] ERROR (error rose)"),
    (f"{Csr.IRQ_ENABLE:#05x}", "IRQ_ENABLE", "RW", "`irq` = OR of (IRQ_STATUS & IRQ_ENABLE)"),
]


def register_table() -> list[dict]:
    return [{"offset": o, "name": n, "access": a, "meaning": t} for o, n, a, t in REGISTER_MAP]


IRQ_DONE, IRQ_ERROR = 1 << 0, 1 << 1
STATUS_BUSY, STATUS_ERROR, STATUS_WRITE_PENDING = 1 << 0, 1 << 1, 1 << 2
RESP_OKAY, RESP_SLVERR = 0, 2


def axil_signature() -> dict:
    """The AXI4-Lite slave's ports (AWPROT / ARPROT omitted: the block has no protection levels)."""
    return {
        "s_axil_awaddr": In(ADDR_BITS), "s_axil_awvalid": In(1), "s_axil_awready": Out(1),
        "s_axil_wdata": In(CFG_DATA_BITS), "s_axil_wstrb": In(CFG_DATA_BITS // 8), "s_axil_wvalid": In(1),
        "s_axil_wready": Out(1),
        "s_axil_bresp": Out(2), "s_axil_bvalid": Out(1), "s_axil_bready": In(1),
        "s_axil_araddr": In(ADDR_BITS), "s_axil_arvalid": In(1), "s_axil_arready": Out(1),
        "s_axil_rdata": Out(CFG_DATA_BITS), "s_axil_rresp": Out(2), "s_axil_rvalid": Out(1),
        "s_axil_rready": In(1),
        "irq": Out(1),
    }


class AxiLiteCsr(wiring.Component):
    """The bridge: AXI4-Lite slave in, the block's ``cfg`` stream out, its ``busy`` / ``error_code`` in.

    Parameters
        kind          BLOCK[7:0] (see ``KINDS``)
        lanes         BLOCK[15:8], values per beat
        full_lanes    BLOCK[23:16], values per beat in full mode (decoders; the encoders: lanes)
        format_version  VERSION[15:0], (major, minor) of the planes the block reads or writes
        program_port  add ``cfg_dma``, a second register-write stream ({addr, data}, the block's own ``cfg``
                      format) for a DMA channel that streams each tensor's register program from memory: its
                      writes are merged into ``cfg`` and, like the block's, held while the block is busy, so
                      the next tensor is programmed ahead at one write per cycle (the bus refuses writes while
                      busy). A CPU write goes first; an offered write is never switched (stream rule).
    """

    def __init__(self, kind: int, lanes: int, full_lanes: int, program_port: bool = False,
                 format_version: tuple[int, int] = (2, 0)):
        for label, v in (("kind", kind), ("lanes", lanes), ("full_lanes", full_lanes), *zip(
                ("format major", "format minor"), format_version)):
            if not isinstance(v, int) or not 0 <= v < 256:
                raise ConfigError(f"{label} must be an integer 0..255 (one byte of BLOCK), got {v!r}")
        if not isinstance(program_port, bool):
            raise ConfigError(f"program_port must be True or False, got {program_port!r}")
        self.kind, self.lanes, self.full_lanes, self.program_port = kind, lanes, full_lanes, program_port
        self.format_version = tuple(format_version)
        ports = {**axil_signature(), "cfg": Out(stream.Signature(cfg_layout)),
                 "busy": In(1), "error_code": In(ERROR_BITS)}
        if program_port:
            ports["cfg_dma"] = In(stream.Signature(cfg_layout))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        irq_status = Signal(2, name="irq_status")
        irq_enable = Signal(2, name="irq_enable")
        self._write_channel(m, irq_status, irq_enable)
        self._read_channel(m, irq_status, irq_enable)
        m.d.comb += self.irq.eq((irq_status & irq_enable).any())
        return m

    def _events(self, m):
        """DONE: busy fell and no error is set; ERROR: the error code became non-zero."""
        busy_q, err_q = Signal(name="busy_q"), Signal(name="error_q")
        err_now = Signal(name="error_now")
        m.d.comb += err_now.eq(self.error_code.any())
        m.d.sync += [busy_q.eq(self.busy), err_q.eq(err_now)]
        return Cat(busy_q & ~self.busy & ~err_now, err_now & ~err_q)

    def _write_channel(self, m, irq_status, irq_enable):
        # AW and W registers (each channel's ready = its register empty and no write in flight)
        aw_full, aw = Signal(name="aw_full"), Signal(ADDR_BITS, name="aw_addr")
        w_full, w, strb = Signal(name="w_full"), Signal(CFG_DATA_BITS, name="w_data"), Signal(4, name="w_strb")
        pend = Signal(name="wr_pend")                      # a block write offered on cfg
        bvalid, bresp = Signal(name="bvalid"), Signal(2, name="bresp")
        busy_wr = Signal(name="wr_in_flight")             # a write is executing or its B waits
        m.d.comb += [busy_wr.eq(pend | bvalid),
                     self.s_axil_awready.eq(~aw_full & ~busy_wr), self.s_axil_wready.eq(~w_full & ~busy_wr),
                     self.s_axil_bvalid.eq(bvalid), self.s_axil_bresp.eq(bresp)]
        reg = aw[2:2 + CFG_ADDR_BITS]                      # the block register a write at 4 a addresses
        cpu_take = self._merge(m, pend, reg, w)
        with m.If(self.s_axil_awvalid & self.s_axil_awready):
            m.d.sync += [aw_full.eq(1), aw.eq(self.s_axil_awaddr)]
        with m.If(self.s_axil_wvalid & self.s_axil_wready):
            m.d.sync += [w_full.eq(1), w.eq(self.s_axil_wdata), strb.eq(self.s_axil_wstrb)]
        # execute: both halves in, nothing in flight (aw / w stay in their registers while cfg is offered). A
        # block write the block cannot take now is refused at once; one it can take waits while cfg_dma is
        # offering (a DMA write is taken this cycle and may be a START), so in the cycle it is forwarded no
        # other cfg transfer happens and it is offered to a block that was ready and saw no write since:
        # a decoder takes it the next cycle (its cfg.ready changes only by cfg writes and at a tensor's end).
        execute, whole, to_block, refuse, wait = (Signal(name=n) for n in (
            "wr_execute", "wr_whole", "wr_to_block", "wr_refuse", "wr_wait_dma"))
        dma_offers = self.cfg_dma.valid if self.program_port else Const(0, 1)
        m.d.comb += [execute.eq(aw_full & w_full & ~busy_wr),
                     whole.eq((aw[:2] == 0) & (strb == 0xF)),
                     to_block.eq(whole & (aw < 4 * BLOCK_REGS)),
                     refuse.eq(~self.cfg.ready),
                     wait.eq(self.cfg.ready & dma_offers)]
        clear_irq = Signal(2, name="irq_w1c")
        with m.If(execute & ~(to_block & wait)):
            with m.If(to_block & ~refuse):
                m.d.sync += pend.eq(1)
            with m.Else():
                m.d.sync += [aw_full.eq(0), w_full.eq(0), bvalid.eq(1), bresp.eq(RESP_SLVERR)]
                with m.If(whole & (aw == Csr.IRQ_STATUS)):
                    m.d.comb += clear_irq.eq(w[:2])
                    m.d.sync += bresp.eq(RESP_OKAY)
                with m.If(whole & (aw == Csr.IRQ_ENABLE)):
                    m.d.sync += [irq_enable.eq(w[:2]), bresp.eq(RESP_OKAY)]
        # taken: OKAY, except a START taken while the block's error is set (the block ignores it: SLVERR says so)
        ignored_start = Signal(name="wr_ignored_start")
        m.d.comb += ignored_start.eq(self.error_code.any() & (reg == 0) & w[0])
        with m.If(cpu_take):
            m.d.sync += [pend.eq(0), aw_full.eq(0), w_full.eq(0), bvalid.eq(1),
                         bresp.eq(Mux(ignored_start, RESP_SLVERR, RESP_OKAY))]
        with m.If(bvalid & self.s_axil_bready):
            m.d.sync += bvalid.eq(0)
        m.d.sync += irq_status.eq((irq_status & ~clear_irq) | self._events(m))   # a new event beats its clear

    def _merge(self, m, pend, addr, data):
        """Drive ``cfg`` from the CPU's held write (``pend``) and, with ``program_port``, the ``cfg_dma``
        stream; returns "the block takes the CPU's write this cycle". The CPU's write goes first. No write is
        ever switched while offered (the stream rule) without a lock register: ``pend`` rises only after a
        cycle in which no DMA write was offered, and a held CPU write keeps ``pend`` until taken (formal:
        csr_axil_protocol asserts cfg's stream rule)."""
        cfg = self.cfg
        m.d.comb += [cfg.valid.eq(pend), cfg.payload.addr.eq(addr), cfg.payload.data.eq(data)]
        if self.program_port:                         # pend low: the DMA's write (if any) is offered
            dma = self.cfg_dma
            with m.If(~pend):
                m.d.comb += [cfg.valid.eq(dma.valid), cfg.payload.eq(dma.payload)]
            m.d.comb += dma.ready.eq(~pend & cfg.ready)
        return pend & cfg.ready

    def _read_channel(self, m, irq_status, irq_enable):
        # AR register; the response the cycle after (RDATA / RRESP registered), one read at a time
        ar_full, ar = Signal(name="ar_full"), Signal(ADDR_BITS, name="ar_addr")
        rvalid = Signal(name="rvalid")
        rdata, rresp = Signal(CFG_DATA_BITS, name="rdata"), Signal(2, name="rresp")
        m.d.comb += [self.s_axil_arready.eq(~ar_full & ~rvalid), self.s_axil_rvalid.eq(rvalid),
                     self.s_axil_rdata.eq(rdata), self.s_axil_rresp.eq(rresp)]
        with m.If(self.s_axil_arvalid & self.s_axil_arready):
            m.d.sync += [ar_full.eq(1), ar.eq(self.s_axil_araddr)]
        major, minor = self.format_version
        local = {
            Csr.ID: Const(ID_VALUE, 32),
            Csr.VERSION: Const(minor | (major << 8) | (MAP_VERSION << 16), 32),
            Csr.BLOCK: Const(self.kind | (self.lanes << 8) | (self.full_lanes << 16), 32),
            Csr.STATUS: Cat(self.busy, self.error_code.any(), self.cfg.valid),     # STATUS_* bits
            Csr.ERROR_CODE: self.error_code,
            Csr.IRQ_STATUS: irq_status,
            Csr.IRQ_ENABLE: irq_enable,
        }
        with m.If(ar_full):
            m.d.sync += [ar_full.eq(0), rvalid.eq(1), rdata.eq(0), rresp.eq(RESP_SLVERR)]
            with m.If((ar[:2] == 0) & (ar < 4 * BLOCK_REGS)):
                m.d.sync += rresp.eq(RESP_OKAY)            # write-only block registers read as zero
            for off, value in local.items():
                with m.If(ar == off):
                    m.d.sync += [rdata.eq(value), rresp.eq(RESP_OKAY)]
        with m.If(rvalid & self.s_axil_rready):
            m.d.sync += rvalid.eq(0)


CONTROL_PORTS = ("cfg", "busy", "error", "error_code")


class CsrTop(wiring.Component):
    """Named configuration ``name`` (a decoder or KV encoder of hw/configs.py) with ``AxiLiteCsr`` on its
    control ports: the block's data streams keep their names and timing, ``cfg`` / ``busy`` / ``error`` /
    ``error_code`` become the AXI4-Lite slave and ``irq``, and (``program_port``, default) ``cfg_dma`` takes
    register programs from a DMA channel (tie its valid low if unused)."""

    def __init__(self, name: str, program_port: bool = True):
        from .configs import CONFIG_INFO, NAMED_CONFIGS
        if name not in NAMED_CONFIGS:
            raise ConfigError(f"unknown configuration {name!r}")
        info = CONFIG_INFO[name]
        if info["block"] not in KINDS:
            raise ConfigError(f"{name} has no register port (block {info['block']!r}): only decoders and KV "
                              f"encoders take an AXI4-Lite register block")
        self.name, self.info = name, info
        self.block = NAMED_CONFIGS[name]()
        lanes = info["lanes"]
        self.csr = AxiLiteCsr(KINDS[info["block"]], lanes, info.get("verif_lanes", lanes), program_port,
                              LAYOUT_FORMAT[info["layout"]])
        members = {k: v for k, v in self.block.signature.members.items() if k not in CONTROL_PORTS}
        if program_port:
            members["cfg_dma"] = self.csr.signature.members["cfg_dma"]
        super().__init__({**members, **axil_signature()})
        for attr in ("lanes", "word", "port_words", "verif_lanes"):
            if hasattr(self.block, attr):
                setattr(self, attr, getattr(self.block, attr))

    def elaborate(self, platform):
        m = Module()
        m.submodules.block, m.submodules.csr = blk, csr = self.block, self.csr
        for name in self.signature.members:
            if name in axil_signature():
                continue
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(csr if name == "cfg_dma" else blk, name))
        wiring.connect(m, csr.cfg, blk.cfg)
        m.d.comb += [csr.busy.eq(blk.busy), csr.error_code.eq(blk.error_code)]
        for name in axil_signature():
            ours, theirs = getattr(self, name), getattr(csr, name)
            if self.signature.members[name].flow == In:
                m.d.comb += theirs.eq(ours)
            else:
                m.d.comb += ours.eq(theirs)
        return m



def c_header() -> str:
    """``cassandra_csr.h`` for the integrator's firmware: the map above, the block registers (hw/decoder.py
    ``Reg``), CTRL bits and error bits, all from the constants the RTL is built from."""
    from .decoder import CTRL_CLEAR_ERROR, CTRL_START, Err, Reg
    from .encoder import FRAME_ERR
    major, minor = FORMAT_VERSION

    def define(name, value, comment=""):
        return f"#define {name:<34} {value}" + (f"  /* {comment} */" if comment else "")

    lines = ["/* cassandra_csr.h: short CASS_* names for the register map of the Cassandra decoders and KV encoders",
             " * (docs/datasheets/register_block.md). The register description's own header is cassandra_regs.h",
             " * (PeakRDL, from hw/regs/cassandra.rdl); this one carries the same values under shorter names.",
             " * Generated by `python -m cassandra_rtl.hw.export --axil`; do not edit. Offsets are byte offsets",
             " * from the block's base address; CASS_REG_* are register indices (byte offset CASS_BLOCK_REG(index)). */",
             "#ifndef CASSANDRA_CSR_H", "#define CASSANDRA_CSR_H", "",
             define("CASS_BLOCK_REG(a)", "(4u * (unsigned)(a))", "block register a: write-only, reads 0")]
    lines += [define(f"CASS_CSR_{n}", f"0x{getattr(Csr, n):03X}u") for n in
              ("ID", "VERSION", "BLOCK", "STATUS", "ERROR_CODE", "IRQ_STATUS", "IRQ_ENABLE")]
    lines += ["", define("CASS_ID_VALUE", f"0x{ID_VALUE:08X}u", '"CASS"'),
              define("CASS_FORMAT_MAJOR", f"{major}u", "VERSION[15:8] of decoder v3, the KV encoders, containers"),
              define("CASS_FORMAT_MINOR", f"{minor}u", "VERSION[7:0]"),
              define("CASS_MAP_VERSION", f"{MAP_VERSION}u", "VERSION[23:16]"), ""]
    lines += [define(f"CASS_KIND_{k.upper()}", f"{v}u", "BLOCK[7:0]") for k, v in KINDS.items()]
    lines += ["", define("CASS_STATUS_BUSY", f"{STATUS_BUSY}u"), define("CASS_STATUS_ERROR", f"{STATUS_ERROR}u"),
              define("CASS_STATUS_WRITE_PENDING", f"{STATUS_WRITE_PENDING}u"),
              define("CASS_IRQ_DONE", f"{IRQ_DONE}u"), define("CASS_IRQ_ERROR", f"{IRQ_ERROR}u"), ""]
    lines += [define(f"CASS_REG_{r.name}", f"0x{int(r):02X}u", f"+ i: books.{r.name[:-4].lower()}[i], list position i"
                     if r.name.endswith("_SYM") else "") for r in Reg]
    lines += [define("CASS_CTRL_START", f"{CTRL_START}u"), define("CASS_CTRL_CLEAR_ERROR", f"{CTRL_CLEAR_ERROR}u"), ""]
    lines += [define(f"CASS_ERR_{e.name}", f"(1u << {int(e)})") for e in Err]
    lines += [define("CASS_ERR_FRAME", f"(1u << {FRAME_ERR})", "KV encoders only"), "", "#endif", ""]
    return "\n".join(lines)
