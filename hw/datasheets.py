"""The generated parts of the block datasheets (docs/datasheets/*.md): port tables and register summaries.

A datasheet marks each generated part with a begin comment and ``<!-- end generated -->``:

    <!-- generated: ports NAME [NAME ...] -->     ports of the named configurations (hw/configs.py), exactly
                                                  the export's port table (hw/export.py ``port_table``, what
                                                  ``make verilog`` writes to ports.md): Verilog name, direction,
                                                  width per configuration, payload fields, meaning
    <!-- generated: csr-ports NAME -->            the AXI4-Lite top ``NAME_csr`` (hw/csr.py ``CsrTop``)
    <!-- generated: axis NAME -->                 the AXI4-Stream names of ``NAME_axis`` (hw/export.py ``axis_map``)
    <!-- generated: registers block|local -->     a summary of the register description hw/regs/cassandra.rdl
    <!-- generated: figures NAME [NAME ...] -->   area and clock per flow, from docs/report/hardware.md
    <!-- generated: area-split NAME -->           where the block's area goes (synth/ablate.py), from the same
    <!-- generated: example-c1|example-c2|example-kv -->   worked examples computed by golden

``python -m cassandra_rtl.hw.datasheets`` rewrites those parts in place; ``--check`` exits 1 if any is stale
(tests/test_datasheets.py runs the check). ``--count-lines`` prints the hand-written lines of docs/ (generated
reports, the PeakRDL register map and generated parts left out; tests/test_docs_size.py holds them to
``HAND_WRITTEN_LIMIT``). A port without a meaning below, or a meaning for a port no
configuration has, is an error, so a port added to or renamed in the RTL fails the check until its row is
written.
"""
from __future__ import annotations

import re
from pathlib import Path

DATASHEETS = Path(__file__).resolve().parent.parent / "docs" / "datasheets"

# Meaning of each port, by Verilog name with the stream suffix (__valid / __ready / __payload) removed.
MEANINGS = {
    "clk": "clock; every register is on its rising edge",
    "rst": "synchronous reset, active high (hold for at least one rising edge of `clk`)",
    # zero counter
    "data": "window; bit 0 is the next stream bit",
    "valid": "lane i found a one (thermometer code)",
    "rank": "lane i: the zero run in front of its one (its code rank), bw bits per lane; 0 when not valid",
    "end": "lane i: bits consumed through its one, bw bits per lane; 0 when not valid",
    "consumed": "bits consumed by all valid lanes",
    # decoders
    "spec_codes": "plane `spec.codes` (C1): the speculation book's codes",
    "spec_signman": "plane `spec.signman` (C1): sign and top m mantissa bits of the kept values",
    "spec_mx": "plane `spec.mx` (C2): per MX block X, its keep bits (k < G), its kept values' element fields",
    "verif_codes": "plane `verif.codes`: the verification book's codes (full mode only; `ready` low in draft mode)",
    "verif_rest": "plane `verif.rest`: the remaining bits (full mode only)",
    "cfg": "register writes {addr: register index, data} (decoders / encoders without the AXI4-Lite top)",
    "out": "decoded bf16 values: `lanes` (lane i at bits 16i+15:16i), `count` valid lanes, `sb_end`, `last`",
    "busy": "decoder: a tensor is in flight (from START to its last beat); encoder: a vector is in flight; NPU "
            "tile: a command list is running (CTRL START to OP_END)",
    "error": "sticky: `error_code` is not zero",
    "error_code": "sticky error bits (register ERROR_CODE; NPU tile: hw/npu/commands.py ERR_*)",
    # decoder cluster (hw/tensor_regs.py)
    "params": "the tensor's registers and derived constants, from the cluster's TensorRegisters (`TENSOR_PARAMS`)",
    "accept": "register writes are taken (no instance of the cluster is busy)",
    # encoders
    "inp": "L bf16 values per beat, G / L beats per vector, `last` on the vector's final beat",
    # AXI4-Lite top
    "cfg_dma": "register program stream {addr, data} from a DMA channel, merged into the block's writes and held "
               "while the block is busy (tie `valid` low if unused)",
    "s_axil_awaddr": "AXI4-Lite write address (byte address; 12 bits)", "s_axil_awvalid": "AXI4-Lite AWVALID",
    "s_axil_awready": "AXI4-Lite AWREADY", "s_axil_wdata": "AXI4-Lite write data", "s_axil_wstrb": "AXI4-Lite "
    "write strobes (must be 0xF)", "s_axil_wvalid": "AXI4-Lite WVALID", "s_axil_wready": "AXI4-Lite WREADY",
    "s_axil_bresp": "AXI4-Lite write response (OKAY 0, SLVERR 2)", "s_axil_bvalid": "AXI4-Lite BVALID",
    "s_axil_bready": "AXI4-Lite BREADY", "s_axil_araddr": "AXI4-Lite read address", "s_axil_arvalid":
    "AXI4-Lite ARVALID", "s_axil_arready": "AXI4-Lite ARREADY", "s_axil_rdata": "AXI4-Lite read data",
    "s_axil_rresp": "AXI4-Lite read response", "s_axil_rvalid": "AXI4-Lite RVALID", "s_axil_rready":
    "AXI4-Lite RREADY", "irq": "interrupt, active high: OR of IRQ_STATUS & IRQ_ENABLE",
    # NPU tile (hw/npu/tile.py, docs/NPU.md)
    "ctl": "control register writes {addr, data}: CMD_ADDR_LO / CMD_ADDR_HI / CMD_WORDS / CTRL (docs/NPU.md section 3)",
    "running": "a pass (OP_RUN) is in flight",
    **{f"m_axi_{n}": f"AXI4 {n.upper()} (read master)" for n in
       ("araddr", "arlen", "arsize", "arburst", "arvalid", "arready", "rdata", "rresp", "rlast", "rvalid", "rready")},
    **{f"m_axi_{n}": f"AXI4 {n.upper()} (write master)" for n in
       ("awaddr", "awlen", "awsize", "awburst", "awvalid", "awready", "wdata", "wstrb", "wlast", "wvalid", "wready",
        "bresp", "bvalid", "bready")},
    "perf_cycles": "free-running cycle counter", "perf_read_beats": "R beats taken", "perf_write_beats": "W beats sent",
    "perf_act_wait": "cycles a pass ran with its activations not yet loaded",
    "perf_busy": "per instance: cycles its DotUnit took a group",
    "perf_wait_mem": "per instance: idle cycles with a plane the decoder reads empty (memory)",
    "perf_wait_dec": "per instance: idle cycles with every plane word there (decoder)",
}
SUFFIX_MEANING = {"valid": "stream valid", "ready": "stream ready"}

BEGIN = re.compile(r"<!-- generated: (?P<kind>[\w-]+)(?P<args>[^>]*?) -->\n.*?<!-- end generated -->", re.S)


def _stream_of(name: str) -> tuple[str, str | None]:
    base, sep, leaf = name.rpartition("__")
    return (base, leaf) if sep and leaf in ("valid", "ready", "payload") else (name, None)


def _meaning(name: str) -> str:
    array, _, index = name.rpartition("__")
    if array and index.isdigit():                 # element ``index`` of an array port
        return f"{_meaning(array)} (element {index})"
    base, leaf = _stream_of(name)
    if base not in MEANINGS:
        raise KeyError(f"port {name!r}: no meaning in hw/datasheets.py MEANINGS")
    if leaf in SUFFIX_MEANING:
        return f"{SUFFIX_MEANING[leaf]} of `{base}`"
    return MEANINGS[base]


def _fields_text(fields: list[dict]) -> str:
    parts = []
    for f in fields:
        if "array" in f:
            a = f["array"]
            parts.append(f"{f['name']}[{a['length']}×{a['elem_width']}]@{f['lsb']}")
        else:
            parts.append(f"{f['name']}@{f['lsb']}:{f['width']}")
    return ", ".join(parts)


def _components(names: list[str]):
    from .configs import NAMED_CONFIGS
    comps = {}
    for n in names:
        if n not in NAMED_CONFIGS:
            raise KeyError(f"unknown configuration {n!r}")
        comps[n] = NAMED_CONFIGS[n]()
        comps[n]._MustUse__silence = True                  # built only to read its signature
    return comps


def ports_table(names: list[str], csr: bool = False) -> str:
    """One table over several configurations: a width column per configuration ('—' where it has no such
    port); payload fields of the first configuration that has the port."""
    from .export import port_table
    if csr:
        from .csr import CsrTop
        comps = {f"{n}_csr": CsrTop(n) for n in names}
        for c in comps.values():
            c._MustUse__silence = True
            c.block._MustUse__silence = True
            c.csr._MustUse__silence = True
    else:
        comps = _components(names)
    tables = {n: {p["name"]: p for p in port_table(c)} for n, c in comps.items()}
    order = []
    for t in tables.values():
        order += [p for p in t if p not in order]
    head = "| port | dir | " + " | ".join(f"`{n}`" for n in tables) + " | payload fields (name@lsb:width) | meaning |"
    lines = [head, "|---|---|" + "---:|" * len(tables) + "---|---|"]
    for p in order:
        rows = [t[p] for t in tables.values() if p in t]
        widths = " | ".join(str(t[p]["width"]) if p in t else "—" for t in tables.values())
        fields = []                                # distinct payload layouts, in configuration order
        for r in rows:
            if _fields_text(r["fields"]) not in fields:
                fields.append(_fields_text(r["fields"]))
        lines.append(f"| `{p}` | {rows[0]['dir']} | {widths} | {' / '.join(fields)} | {_meaning(p)} |")
    return "\n".join(lines)


def axis_table(name: str) -> str:
    from .export import axis_map, _seg_cells
    comp = _components([name])[name]
    lines = ["| AXI4-Stream signal | dir | width | core port / field |", "|---|---|---:|---|"]
    for r in axis_map(comp):
        core = _seg_cells(r) if "segs" in r else f"`{r['core']}`" + (" (inverted)" if r["axis"] == "aresetn" else "")
        lines.append(f"| `{r['axis']}` | {r['dir']} | {r['width']} | {core} |")
    return "\n".join(lines)


def registers_table(which: str) -> str:
    """Summary of the register description: one row per register (arrays as one row)."""
    from .regmap import BLOCK_SPAN, load
    from systemrdl.node import RegNode
    root = load()
    lines = ["| offset | register | field [bits] | access | reset | meaning |", "|---|---|---|---|---|---|"]
    for reg in root.children():
        if not isinstance(reg, RegNode):
            continue
        addr = reg.raw_absolute_address
        if (which == "block") != (addr < BLOCK_SPAN):
            continue
        name = reg.inst_name
        off = f"{addr:#05x}"
        if reg.is_array:
            (n,) = reg.array_dimensions
            name += f"[0..{n - 1}]"
            off += " + 4i"
        for i, f in enumerate(reg.fields()):
            acc = f.get_property("sw").name.upper()
            if f.get_property("onwrite") is not None:
                acc += "/W1C"
            reset = f.get_property("reset")
            desc = " ".join((f.get_property("desc") or "").split())
            if i == 0 and reg.get_property("desc"):
                desc = " ".join(reg.get_property("desc").split()) + " " + desc
            lines.append(f"| {off if i == 0 else ''} | {name if i == 0 else ''} | {f.inst_name} [{f.high}:{f.low}] | "
                         f"{acc} | {'—' if reset is None else hex(reset) if reset > 9 else reset} | {desc} |")
    return "\n".join(lines)


EXAMPLE_VALUES = (0x3F80, 0xBF00, 0x3E80, 0x0000, 0x4040, 0xBE00, 0x3FC0, 0x3C00,
                  0xBF80, 0x3F00, 0x4000, 0xBD80, 0x3E00, 0x3F40, 0xC000, 0x3DC0)


def example_c1(word_bits: int = 32) -> str:
    """A worked example generated by golden: 16 bf16 values, one superblock (G = 32, a partial superblock of
    16 values), m = 3, k = 24 of 32 (so 12 of these 16 are kept), the register program, every plane's words
    at ``word_bits`` bits and the values a decoder returns in draft and full mode."""
    import numpy as np
    from ..golden.codec import decode_draft, decode_full
    from ..golden.config import CodecConfig
    from ..golden.escfield import encode3
    from .simutil import decoder_planes, decoder_program
    from .decoder import Reg
    bits = np.array(EXAMPLE_VALUES, dtype=np.uint16)
    cfg = CodecConfig(group_size=32, mantissa_bits=3, keep_count=24, chunk_superblocks=1, pair_codes=False)
    enc = encode3(bits, cfg)
    names = {int(r): r.name for r in Reg}

    def reg_name(a):
        for base in (Reg.SPEC_SYM, Reg.VERIF_SYM):
            if int(base) <= a < int(base) + 15:
                return f"{base.name}[{a - int(base)}]"
        return names[a]

    out = ["Input (bf16 hex, tensor order): " + " ".join(f"{v:04X}" for v in EXAMPLE_VALUES), "",
           f"Golden's books: `books.spec` = {list(enc.spec_book.symbols)} (256 = the pruned mark P), "
           f"`books.verif` = {list(enc.verif_book.symbols)}; no pair groups; one chunk.", "",
           "Register program, full mode (`cfg` index / AXI4-Lite byte offset, value); draft mode is the same "
           "without MODE = 1 and the VERIF_* writes:", "", "| register | index | byte offset | value |",
           "|---|---:|---:|---:|"]
    for a, d in decoder_program(enc, True, force_format2=True):
        out.append(f"| {reg_name(a)} | {a:#04x} | {4 * a:#05x} | {d} |")
    out += ["", f"Plane words at {word_bits} bits (hex, word 0 first; `last` on the final word of each chunk):", ""]
    for port, words in decoder_planes(enc, True, word_bits).items():
        ws = " ".join(f"{w:0{word_bits // 4}X}{'*' if last else ''}" for w, last in words)
        out.append(f"- `{port}`: {ws}")
    out += ["", "(`*` = `last`.)", "", "Output values (`out.lanes`, bf16 hex, tensor order):", "",
            "- draft: " + " ".join(f"{int(v):04X}" for v in decode_draft(enc)),
            "- full:  " + " ".join(f"{int(v):04X}" for v in decode_full(enc))]
    return "\n".join(out)


def example_c2() -> str:
    """The worked example of the C2 decoder: the same 16 values as C2 (G = 32, m = 3, k = 24, one chunk), the
    register program, the plane words (format 3.0) at decoder_c2v3_l8's widths and the decoded values."""
    import numpy as np
    from ..golden.codec import decode_draft, decode_full
    from ..golden.config import CodecConfig
    from ..golden.escfield import encode3
    from .simutil import decoder_planes, decoder_program
    enc = encode3(np.array(EXAMPLE_VALUES, dtype=np.uint16),
                  CodecConfig(scheme="c2", group_size=32, mantissa_bits=3, keep_count=24, chunk_superblocks=1,
                              pair_codes=False))
    from .configs import CONFIG_INFO
    info = CONFIG_INFO["decoder_c2v3_l8"]
    widths = {"spec_mx": info["word"], "verif_codes": info["verif_word"], "verif_rest": info["verif_word"]}
    out = ["Input (bf16 hex): " + " ".join(f"{v:04X}" for v in EXAMPLE_VALUES), "",
           f"Golden's verification book over δ = X − e: `books.verif` = {list(enc.verif_book.symbols)}; one chunk.",
           "", "Register program, full mode (index, value): " + ", ".join(
               f"{_reg_name(a)} = {d}" for a, d in decoder_program(enc, True, force_format2=True)), "",
           "Plane words (hex, word 0 first, `*` = `last`): ", ""]
    for port, words in decoder_planes(enc, True, widths).items():
        out.append(f"- `{port}` ({widths[port]} bits): " + " ".join(
            f"{w:0{widths[port] // 4}X}{'*' if last else ''}" for w, last in words))
    out += ["", "Output values (bf16 hex):", "",
            "- draft: " + " ".join(f"{int(v):04X}" for v in decode_draft(enc)),
            "- full:  " + " ".join(f"{int(v):04X}" for v in decode_full(enc))]
    return "\n".join(out)


def example_kv() -> str:
    """The worked example of the C1 KV encoder: one vector of G = 32 values (the 16 example values twice), m = 3,
    k = 24, golden's books for it, the register program, the input beats at L = 2 and the plane words the
    encoder emits at 64 bits."""
    import numpy as np
    from ..golden.codec import encode_tensor
    from ..golden.config import CodecConfig
    from .simutil import encoder_program, expected_plane_words
    vec = np.array(EXAMPLE_VALUES * 2, dtype=np.uint16).reshape(1, 32)
    cfg = CodecConfig(group_size=32, mantissa_bits=3, keep_count=24, kind="kv")
    enc = encode_tensor(vec, cfg)
    out = ["One vector, G = 32 (`inp` beats of L = 2 values, lane 0 first): " + " ".join(
               f"{vec[0, i]:04X}|{vec[0, i + 1]:04X}" for i in range(0, 32, 2)), "",
           f"Books (golden's, for this vector): `spec` = {list(enc.spec_book.symbols)}, "
           f"`verif` = {list(enc.verif_book.symbols)}.", "",
           "Register program (index, value), before the first beat: " + ", ".join(
               f"{_reg_name(a)} = {d}" for a, d in encoder_program(cfg, (enc.spec_book, enc.verif_book))), "",
           "Plane words out (64 bits, hex, `*` = `last`; one chunk per vector per plane):", ""]
    for port, words in expected_plane_words(enc, 64).items():
        out.append(f"- `{port}`: " + " ".join(f"{w:016X}{'*' if last else ''}" for w, last in words))
    return "\n".join(out)


def _reg_name(a: int) -> str:
    from .decoder import Reg
    for base in (Reg.SPEC_SYM, Reg.VERIF_SYM):
        if int(base) <= a < int(base) + 15:
            return f"{base.name}[{a - int(base)}]"
    return Reg(a).name


HW_REPORT = Path(__file__).resolve().parent.parent / "docs" / "report" / "hardware.md"


def figures_table(names: list[str]) -> str:
    """Area and clock per flow for the named blocks, taken from the generated hardware report
    (docs/report/hardware.md, ``make report-hw``): the datasheets quote it and cannot drift from it."""
    import re
    rows = {}
    for line in HW_REPORT.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and re.fullmatch(r"[a-z0-9_]+", cells[0]):
            rows[cells[0]] = cells[1:]

    def area(cell):                                # "35,058 GE (10.65x)" -> "35,058" ("... ‡" -> "35,058 ‡")
        return cell.split(" ")[0] + (" ‡" if cell.endswith(" ‡") else "")

    def clock(cell):                               # "520.0 (1.43x)" -> "520.0 (1.43)"
        return cell.replace("x)", ")")
    out = ["| config | generic GE | generic MHz (× PE) | sky130 GE | sky130 MHz (× PE) | ECP5 LUT4 | ECP5 MHz (× PE) |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for n in names:
        if n not in rows:
            raise KeyError(f"{n}: not in docs/report/hardware.md (make report-hw)")
        c = rows[n]
        out.append(f"| {n} | {area(c[0])} | {clock(c[1])} | {area(c[2])} | {clock(c[3])} | {area(c[4])} | "
                   f"{clock(c[5])} |")
    if any("‡" in line for line in out[2:]):
        out += ["", "‡ an ECP5 figure docs/report/hardware.md carries from its previous rendering."]
    return "\n".join(out)


def area_split(name: str) -> str:
    """Where the block's area goes (synth/ablate.py), as the generated hardware report holds it: its paragraph and
    table under "Area by function"."""
    lines = HW_REPORT.read_text().splitlines()
    head = f"Area of {name} by function "
    for i, line in enumerate(lines):
        if line.startswith(head):
            out, j = [line, ""], i + 2
            while j < len(lines) and lines[j].startswith("|"):
                out.append(lines[j])
                j += 1
            if j + 1 < len(lines) and lines[j + 1].startswith("*(carried"):
                out += ["", lines[j + 1]]
            return "\n".join(out)
    raise KeyError(f"{name}: no 'Area by function' table in docs/report/hardware.md (python -m "
                   f"cassandra_rtl.synth.ablate {name}, then make report-hw)")


def render_part(kind: str, args: list[str]) -> str:
    if kind == "figures":
        return figures_table(args)
    if kind == "area-split":
        return area_split(args[0])
    if kind == "example-c2":
        return example_c2()
    if kind == "example-kv":
        return example_kv()
    if kind == "example-c1":
        return example_c1(int(args[0]) if args else 32)
    if kind == "ports":
        return ports_table(args)
    if kind == "csr-ports":
        return ports_table(args, csr=True)
    if kind == "axis":
        return axis_table(args[0])
    if kind == "registers":
        return registers_table(args[0])
    raise ValueError(f"unknown generated part {kind!r}")


def render(text: str) -> str:
    def sub(m):
        args = m.group("args").split()
        return f"<!-- generated: {m.group('kind')}{m.group('args')} -->\n{render_part(m.group('kind'), args)}\n" \
               f"<!-- end generated -->"
    return BEGIN.sub(sub, text)


def stale(folder: Path = DATASHEETS) -> list[Path]:
    return [p for p in sorted(folder.glob("*.md")) if render(p.read_text()) != p.read_text()]


DOCS = DATASHEETS.parent
HAND_WRITTEN_LIMIT = 3600     # docs/*.md, hand-written lines (count_lines)
GENERATED_PART = re.compile(r"<!-- generated: [\w-]+[^>]*? -->\n.*?<!-- end generated -->", re.S)


def count_lines(docs: Path = DOCS) -> dict[str, int]:
    """Hand-written lines of every docs/**/*.md: the generated reports (docs/report/) and the PeakRDL output
    (docs/datasheets/register_map.md, recognised by its "Generated from" header) are left out, and so is every
    generated part of a page (from its ``<!-- generated: ... -->`` line through ``<!-- end generated -->``,
    the span a generator rewrites: this module, synth/npu_area.py). CHANGELOG.md is not in docs/."""
    out = {}
    for p in sorted(docs.rglob("*.md")):
        rel = p.relative_to(docs)
        if rel.parts[0] == "report":
            continue
        text = p.read_text()
        if "Don't override. Generated from:" in text[:400]:
            continue
        out[str(rel)] = len(text.splitlines()) - sum(len(m.group(0).splitlines()) for m in GENERATED_PART.finditer(text))
    return out


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.hw.datasheets", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated part is stale (write nothing)")
    ap.add_argument("--count-lines", action="store_true",
                    help=f"print the hand-written lines of docs/ per file and in all (limit {HAND_WRITTEN_LIMIT})")
    args = ap.parse_args(argv)
    if args.count_lines:
        counts = count_lines()
        for name, n in counts.items():
            print(f"{n:6d}  docs/{name}")
        total = sum(counts.values())
        print(f"{total:6d}  hand-written lines in docs/ (limit {HAND_WRITTEN_LIMIT})")
        return 0 if total <= HAND_WRITTEN_LIMIT else 1
    paths = stale()
    if args.check:
        print("\n".join(f"stale: {p}" for p in paths) or "datasheets current")
        return 1 if paths else 0
    for p in paths:
        p.write_text(render(p.read_text()))
        print(f"updated {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
