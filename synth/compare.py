"""Cross-check of the synthesis flows: each block's area and clock *relative to the PE*, flow by flow.

    python -m cassandra_rtl.synth.compare build/synth build/synth-sky130_fd_sc_hd__tt_025C_1v80 build/fpga \\
        [--only NAME ...] [--out build/synth/compare.md]

Each argument is a report directory (or report.json) of ``synth.flow`` (any library) or ``synth.fpga``
(ECP5). Absolute numbers do not compare across a 28 nm-class generic library, SKY130 (130 nm) and an
FPGA; ratios to the PE synthesised in the same flow do, and they are what the overhead model uses
(area per value/cycle against PE area, block clock against PE clock). The table shows, per block and
flow: area (GE, or LUT4 on the FPGA), area / PE area, Fmax and Fmax / PE Fmax.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

from ..errors import ConfigError

PE = "pe_bf16_fp32"


def load_report(path: str | pathlib.Path) -> tuple[str, dict]:
    p = pathlib.Path(path)
    if p.is_dir():
        p = p / "report.json"
    try:
        rep = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{p}: not a readable synthesis report ({exc})") from None
    if not isinstance(rep, dict) or "blocks" not in rep:
        raise ConfigError(f"{p}: not a synthesis report (no 'blocks')")
    fl = rep.get("flow") or {}
    if "lut4" in json.dumps(rep.get("blocks", {}))[:20000] and "library" not in fl:
        label = "ECP5 (nextpnr)"
    else:
        label = (fl.get("library") or p.parent.name) + (" + clock gating" if fl.get("clock_gating") else "")
    return label, rep


def _metrics(rep: dict, name: str) -> tuple[float | None, float | None, str]:
    b = rep["blocks"].get(name) or {}
    if b.get("status") != "ok":
        return None, None, ""
    if "lut4" in b:                                   # FPGA report
        return float(b["lut4"]), b.get("fmax_mhz"), "LUT4"
    return float(b["area_ge"]), (b.get("timing") or {}).get("est_fmax_mhz"), "GE"


def compare(reports: list[tuple[str, dict]], only: list[str] | None = None) -> dict:
    names = sorted({n for _, r in reports for n in r["blocks"]} if not only else set(only))
    names = [PE] + [n for n in names if n != PE]
    table = {}
    for label, rep in reports:
        pe_area, pe_f, _ = _metrics(rep, PE)
        rows = {}
        for n in names:
            area, f, unit = _metrics(rep, n)
            if area is None:
                continue
            rows[n] = {"area": area, "unit": unit, "fmax_mhz": f,
                       "area_vs_pe": round(area / pe_area, 2) if pe_area else None,
                       "fmax_vs_pe": round(f / pe_f, 2) if (f and pe_f) else None}
        table[label] = rows
    return {"blocks": names, "flows": table}


def render(result: dict) -> str:
    flows = list(result["flows"])
    head = "| block | " + " | ".join(f"{f}: area (x PE) | {f}: MHz (x PE)" for f in flows) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(flows)]
    for n in result["blocks"]:
        cells = []
        for f in flows:
            r = result["flows"][f].get(n)
            if not r:
                cells += ["—", "—"]
                continue
            a = f"{r['area']:,.0f} {r['unit']}" + (f" ({r['area_vs_pe']:.2f}x)" if r["area_vs_pe"] is not None else "")
            m = "—" if not r["fmax_mhz"] else f"{r['fmax_mhz']:.1f}" + (
                f" ({r['fmax_vs_pe']:.2f}x)" if r["fmax_vs_pe"] is not None else "")
            cells += [a, m]
        if any(c != "—" for c in cells):
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.synth.compare", description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", help="report directories or report.json files")
    ap.add_argument("--only", action="append", help="blocks to show (repeatable, comma-separated)")
    ap.add_argument("--out", type=pathlib.Path, help="also write the table (markdown) and JSON here")
    args = ap.parse_args(argv)
    try:
        only = [n.strip() for item in args.only or [] for n in item.split(",") if n.strip()] or None
        result = compare([load_report(p) for p in args.reports], only)
    except ConfigError as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return 2
    text = render(result)
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
