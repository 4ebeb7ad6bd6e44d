"""The SystemRDL register description (hw/regs/cassandra.rdl) checked against the Amaranth design.

hw/regs/cassandra.rdl is the one register description: PeakRDL generates the C header, the HTML and Markdown
register docs and the Python register access layer from it (``make regs``). The RTL keeps its constants in
Python (hw/decoder.py ``Reg`` / ``CTRL_*`` / ``Err``, hw/csr.py ``Csr`` and the bridge), so ``mismatches``
compares the two, and a changed offset, width, access or reset value on either side is reported:

* every register's byte address against ``Reg`` (block registers: 4 x index; the arrays SPEC_SYM /
  VERIF_SYM have ``K_MAX`` entries) and ``Csr``, in both directions (nothing missing on either side);
* each block-register field against the register-file signal its ``rtl_signal`` names, in a decoder's
  tensor registers (tensor_regs) and a KV encoder (encoder_kv_c1_l2) where it exists: the reset value equals the
  signal's ``init``; the width equals the signal's, or is the whole 32-bit word for a register the block
  checks or saturates as a whole (MBITS, KEEP, GROUP, ...); CTRL's bits are ``CTRL_START`` / ``CTRL_CLEAR_ERROR``;
  every block-register field is write-only (``sw = w``);
* the register block's own registers by simulating ``AxiLiteCsr`` over AXI4-Lite: each one's value after
  reset is the description's reset (BLOCK's and VERSION's format fields decoded at the description's positions), read-only ones
  answer SLVERR to a write and keep their value, the writable bits of IRQ_ENABLE read back as exactly its
  fields, IRQ_STATUS's DONE / ERROR are raised by the block's busy / error at the described bits and cleared
  by writing one, STATUS / ERROR_CODE show busy and every error bit where the description puts them, block
  registers read as 0 with OKAY, and offsets outside the description in 0x400-0x4FC answer SLVERR.
"""
from __future__ import annotations

from pathlib import Path

RDL_PATH = Path(__file__).parent / "regs" / "cassandra.rdl"
BLOCK_SPAN = 0x400                     # block registers 0x000 .. 0x3FC, forwarded to `cfg`


def load(path: Path | str = RDL_PATH):
    """The elaborated top address map of a SystemRDL file (systemrdl-compiler)."""
    from systemrdl import RDLCompiler
    comp = RDLCompiler()
    comp.compile_file(str(path))
    return comp.elaborate().top


def registers(root) -> list:
    """(name, byte address, RegNode) of every register, arrays unrolled (name ``SPEC_SYM[3]``)."""
    from systemrdl.node import RegNode
    out = []
    for node in root.descendants(unroll=True):
        if isinstance(node, RegNode):
            idx = "".join(f"[{i}]" for i in node.current_idx or ())
            out.append((node.inst_name + idx, node.absolute_address, node))
    return out


def _fields(reg):
    return {f.inst_name: f for f in reg.fields()}


def _reset(reg) -> int:
    return sum((f.get_property("reset") or 0) << f.low for f in reg.fields())


def address_mismatches(root) -> list[str]:
    from ..golden.config import K_MAX
    from .csr import Csr
    from .decoder import Reg
    problems = []
    want = {}
    for r in Reg:
        if r.name.endswith("_SYM"):
            want.update({f"{r.name}[{i}]": 4 * (int(r) + i) for i in range(K_MAX)})
        else:
            want[r.name] = 4 * int(r)
    want.update({n: getattr(Csr, n) for n in vars(Csr) if n.isupper()})
    have = {name: addr for name, addr, _ in registers(root)}
    for name in sorted(set(want) | set(have)):
        if name not in have:
            problems.append(f"{name}: in the RTL at {want[name]:#05x}, missing from the register description")
        elif name not in want:
            problems.append(f"{name}: in the register description at {have[name]:#05x}, not in the RTL")
        elif want[name] != have[name]:
            problems.append(f"{name}: the RTL has it at {want[name]:#05x}, the description at {have[name]:#05x}")
    return problems


def _register_file_signals(name: str) -> dict:
    """name -> Signal of the register file of configuration ``name`` (decoder or encoder)."""
    from amaranth.hdl import Module, Signal
    from .configs import NAMED_CONFIGS
    block, m = NAMED_CONFIGS[name](), Module()
    regs = block._registers(m)
    block._MustUse__silence = m._MustUse__silence = True       # built only to read its register signals
    out = {}
    for v in regs.values():
        for s in ([v] if isinstance(v, Signal) else v):       # a Signal, or an Array / list of them
            out[s.name] = s
    return out


def field_mismatches(root) -> list[str]:
    from .decoder import CFG_DATA_BITS, CTRL_CLEAR_ERROR, CTRL_START
    problems = []
    files = {n: _register_file_signals(n) for n in ("tensor_regs", "encoder_kv_c1_l2")}
    strobes = {"start": CTRL_START, "clear": CTRL_CLEAR_ERROR}
    for name, addr, reg in registers(root):
        if addr >= BLOCK_SPAN:
            continue
        index = (reg.current_idx or (0,))[0]
        for f in reg.fields():
            label = f"{name}.{f.inst_name}"
            if f.get_property("sw").name != "w":
                problems.append(f"{label}: block registers are write-only, the description says sw = "
                                f"{f.get_property('sw').name}")
            sig_name = f.get_property("rtl_signal")
            if sig_name is None:
                problems.append(f"{label}: no rtl_signal")
                continue
            if sig_name in strobes:
                if (1 << f.low) != strobes[sig_name] or f.width != 1:
                    problems.append(f"{label}: the RTL's bit is {strobes[sig_name]:#x}, the description's "
                                    f"[{f.high}:{f.low}]")
                continue
            if reg.is_array:
                sig_name = f"{sig_name}{index}"
            found = False
            for block, signals in files.items():
                sig = signals.get(sig_name)
                if sig is None:
                    continue
                found = True
                width = len(sig)
                if f.low != 0 or not (f.width == width or (f.width == CFG_DATA_BITS and width < f.width)):
                    problems.append(f"{label}: {block}'s {sig_name} is {width} bits, the description's field "
                                    f"[{f.high}:{f.low}] (the whole word only for a checked / saturated value)")
                if (f.get_property("reset") or 0) != sig.init:
                    problems.append(f"{label}: {block}'s {sig_name} resets to {sig.init}, the description to "
                                    f"{f.get_property('reset')}")
            if not found:
                problems.append(f"{label}: no register-file signal {sig_name!r} in the decoder or encoder")
    return problems


def bus_mismatches(root) -> list[str]:
    """The register block's own registers, simulated over AXI4-Lite (see the module docstring)."""
    from amaranth.sim import Simulator
    from .csr import (IRQ_DONE, IRQ_ERROR, RESP_OKAY, RESP_SLVERR, STATUS_BUSY, STATUS_ERROR,
                      STATUS_WRITE_PENDING, AxiLiteCsr)
    from .decoder import Err
    from .encoder import FRAME_ERR
    from .simutil import axil_read, axil_write
    STATUS_BITS = {"BUSY": STATUS_BUSY.bit_length() - 1, "ERROR": STATUS_ERROR.bit_length() - 1,
                   "WRITE_PENDING": STATUS_WRITE_PENDING.bit_length() - 1}
    IRQ_BITS = {"DONE": IRQ_DONE.bit_length() - 1, "ERROR": IRQ_ERROR.bit_length() - 1}
    kind, lanes, full_lanes, fmt = 3, 5, 7, (9, 4)          # distinct values: positions are checked
    dut = AxiLiteCsr(kind, lanes, full_lanes, program_port=True, format_version=fmt)
    constants = {"BLOCK": {"KIND": kind, "LANES": lanes, "FULL_LANES": full_lanes},
                 "VERSION": {"FORMAT_MAJOR": fmt[0], "FORMAT_MINOR": fmt[1]}}
    local = [(n, a, r) for n, a, r in registers(root) if a >= BLOCK_SPAN]
    by_name = {n: (a, r) for n, a, r in local}
    problems = []

    def bits(reg, *names):
        f = _fields(reg)
        return sum(1 << f[n].low for n in names)

    async def cpu(ctx):
        for name, addr, reg in local:
            data, resp = await axil_read(ctx, dut, addr)
            if resp != RESP_OKAY:
                problems.append(f"{name}: read answers {resp}")
            if name in constants:                # the block's constants, and any field with a reset value
                f = _fields(reg)
                got = {k: (data >> f[k].low) & ((1 << f[k].width) - 1) for k in f}
                want = {k: constants[name].get(k, f[k].get_property("reset")) for k in f}
                if got != want:
                    problems.append(f"{name}: {data:#x} decodes to {got} at the description's positions, "
                                    f"expected {want}")
            elif data != _reset(reg):
                problems.append(f"{name}: reads {data:#x} after reset, the description's reset is {_reset(reg):#x}")
            sw = {f.get_property("sw").name for f in reg.fields()}
            resp = await axil_write(ctx, dut, addr, 0xFFFFFFFF)
            if sw == {"r"}:
                again, _ = await axil_read(ctx, dut, addr)
                if resp != RESP_SLVERR or again != data:
                    problems.append(f"{name}: read-only in the description, a write answered {resp} and "
                                    f"left {again:#x}")
            elif resp != RESP_OKAY:
                problems.append(f"{name}: writable in the description, a write answered {resp}")
        # IRQ_ENABLE: exactly its fields are writable (left all ones above)
        addr, reg = by_name["IRQ_ENABLE"]
        data, _ = await axil_read(ctx, dut, addr)
        if data != sum(((1 << f.width) - 1) << f.low for f in reg.fields()):
            problems.append(f"IRQ_ENABLE: all-ones reads back {data:#x}")
        # STATUS.BUSY, then DONE when busy falls; ERROR_CODE / STATUS.ERROR / IRQ_STATUS.ERROR per error bit
        st_addr, st = by_name["STATUS"]
        irq_addr, irq = by_name["IRQ_STATUS"]
        ctx.set(dut.busy, 1)
        await ctx.tick()
        data, _ = await axil_read(ctx, dut, st_addr)
        if data != bits(st, "BUSY"):
            problems.append(f"STATUS: {data:#x} while busy, the description's BUSY is {bits(st, 'BUSY'):#x}")
        ctx.set(dut.busy, 0)
        await ctx.tick()
        data, _ = await axil_read(ctx, dut, irq_addr)
        if data != bits(irq, "DONE"):
            problems.append(f"IRQ_STATUS: {data:#x} after busy fell, the description's DONE is {bits(irq, 'DONE'):#x}")
        await axil_write(ctx, dut, irq_addr, bits(irq, "DONE"))
        data, _ = await axil_read(ctx, dut, irq_addr)
        if data != 0:
            problems.append(f"IRQ_STATUS: writing DONE's bit left {data:#x}")
        ec_addr, ec = by_name["ERROR_CODE"]
        rtl_bits = {e.name: int(e) for e in Err} | {"FRAME": FRAME_ERR}
        for reg_name, rtl in (("ERROR_CODE", rtl_bits), ("STATUS", STATUS_BITS), ("IRQ_STATUS", IRQ_BITS),
                              ("IRQ_ENABLE", IRQ_BITS)):
            desc = {n: f.low for n, f in _fields(by_name[reg_name][1]).items()}
            if rtl != desc:
                problems.append(f"{reg_name}: the RTL's bits {rtl}, the description's {desc}")
        for bit in sorted(set(rtl_bits.values())):
            ctx.set(dut.error_code, 1 << bit)
            await ctx.tick()
            got = [(await axil_read(ctx, dut, a))[0] for a in (ec_addr, st_addr, irq_addr)]
            if got != [1 << bit, bits(st, "ERROR"), bits(irq, "ERROR")]:
                problems.append(f"error bit {bit}: ERROR_CODE / STATUS / IRQ_STATUS read {[hex(g) for g in got]}")
            ctx.set(dut.error_code, 0)
            await axil_write(ctx, dut, irq_addr, bits(irq, "ERROR"))
        # block registers read 0 / OKAY; offsets outside the description answer SLVERR
        for name, addr, _ in registers(root):
            if addr < BLOCK_SPAN and await axil_read(ctx, dut, addr) != (0, RESP_OKAY):
                problems.append(f"{name}: a block register does not read as 0 with OKAY")
        described = {a for _, a, _ in local}
        for addr in range(BLOCK_SPAN, BLOCK_SPAN + 0x100, 4):
            if addr not in described and (await axil_read(ctx, dut, addr))[1] != RESP_SLVERR:
                problems.append(f"{addr:#05x}: not in the description, yet a read answers OKAY")

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(cpu)
    sim.run()
    return problems


def mismatches(path: Path | str = RDL_PATH) -> list[str]:
    """Every disagreement between the register description at ``path`` and the Amaranth design."""
    root = load(path)
    return address_mismatches(root) + field_mismatches(root) + bus_mismatches(root)


MARKDOWN_DOC = Path(__file__).resolve().parent.parent / "docs" / "datasheets" / "register_map.md"
RDL_NAME = "hw/regs/cassandra.rdl"     # as named in the generated files (not this machine's path)


def write_markdown(path: Path | str, rdl: Path | str = RDL_PATH) -> Path:
    """The Markdown register reference (peakrdl-markdown)."""
    from peakrdl_markdown import MarkdownExporter
    MarkdownExporter().export(load(rdl), str(path), input_files=[RDL_NAME])
    return Path(path)


def write_c_header(path: Path | str, rdl: Path | str = RDL_PATH) -> Path:
    """The C header (peakrdl-cheader): offsets, field bit positions / masks / widths / resets, a struct."""
    from peakrdl_cheader.exporter import CHeaderExporter
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    CHeaderExporter().export(load(rdl), str(path))
    return Path(path)


def generate(out: Path | str, markdown: Path | str | None = MARKDOWN_DOC, rdl: Path | str = RDL_PATH) -> list[Path]:
    """Everything PeakRDL generates from the description: ``out``/cassandra_regs.h, ``out``/html/ (peakrdl-html),
    ``out``/python/cassandra_csr/ (peakrdl-python register access layer), ``out``/register_map.md, and the
    committed copy ``markdown`` (docs/datasheets/register_map.md)."""
    from peakrdl_html import HTMLExporter
    from peakrdl_python.exporter import PythonExporter
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [write_c_header(out / "cassandra_regs.h", rdl), write_markdown(out / "register_map.md", rdl)]
    HTMLExporter().export(load(rdl), str(out / "html"))
    PythonExporter().export(load(rdl), str(out / "python"), skip_test_case_generation=True)
    written += [out / "html" / "index.html", out / "python" / "cassandra_csr"]
    if markdown is not None:
        written.append(write_markdown(markdown, rdl))
    return written


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.hw.regmap", description=__doc__.splitlines()[0])
    ap.add_argument("--rdl", default=str(RDL_PATH), help="the SystemRDL file (default: hw/regs/cassandra.rdl)")
    ap.add_argument("--out", help="generate the header, HTML, Python and Markdown here (needs the [regs] extra) "
                                  "and refresh docs/datasheets/register_map.md")
    ap.add_argument("--check", action="store_true", help="compare the description with the RTL (default "
                                                         "without --out)")
    args = ap.parse_args(argv)
    if args.out:
        for p in generate(args.out, rdl=args.rdl):
            print(p)
    if args.check or not args.out:
        found = mismatches(args.rdl)
        print("\n".join(found) or "the register description matches the RTL")
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
