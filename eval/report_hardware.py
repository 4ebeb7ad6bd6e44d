"""The hardware report: `python eval/report_hardware.py --out docs/report` (`make report-hw`).

Writes OUT/hardware.md and OUT/hardware_area_clock.png from the flows' own reports (nothing is re-run here):
  * build/synth/report.json                 generic library (make synth)
  * build/synth-<library>/report.json       real libraries, e.g. SKY130 + OpenSTA (make synth LIBERTY=...)
  * build/synth-cg/report.json              generic library with clock gating (make synth CLOCK_GATING=1): the
                                             gated column of the v2 -> v3 table
  * build/fpga/report.json                  ECP5 place and route (make fpga)
  * build/formal/report.json                SymbiYosys proofs (make formal)
  * synth/retired.json                      the retired decoder v2 blocks' rows of those flows (the "old" side of
                                             the v2 -> v3 table; the flows no longer build v2)
Every table names the report it came from, so each figure can be regenerated with that flow's command.

``--freeze-v2 PATH`` writes that file from reports that still hold the v2 blocks (``--synth``, ``--gated``,
``--real``, ``--fpga``; v2 rows missing from ``--fpga`` are read from OUT/hardware.md's table, marked carried).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import glob
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RETIRED = ROOT / "synth" / "retired.json"
# the last commit whose hw/configs.py registered the decoder v2 blocks (their flows' commands ran there)
V2_LAST_COMMIT = "014fe02"

# v2 block -> the decoder v3 of the same scheme and rate, with its cluster parts (per-instance core, shared
# registers) and the gated area target per draft value/cycle (docs/datasheets/decoder_c1.md, decoder_c2.md)
V3_SUCCESSORS = {
    "decoder_c1v2_l8_v4": {"v3": "decoder_c1v3_l8", "core": "decoder_c1v3_l8_core", "regs": "tensor_regs",
                           "target_ge": 3500},
    "decoder_c2v2_l8": {"v3": "decoder_c2v3_l8", "core": "decoder_c2v3_l8_core", "regs": "tensor_regs_c2",
                        "target_ge": 2500},
}
CLUSTER = 4          # decoders sharing one TensorRegisters in the v2 -> v3 table (the tile has 3; the overhead model 8)


def _load(path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


FLOW_LABELS = ("generic", "gated", "real", "fpga")


def _slim(b: dict) -> dict:
    """A block's row as the report reads it: area, flip-flops, LUT4, clock, values/cycle."""
    row = {k: b[k] for k in ("status", "kind", "area_ge", "flip_flops", "lut4", "ff", "fmax_mhz", "best_seed",
                             "carried") if k in b}
    if b.get("timing"):
        row["timing"] = {k: b["timing"][k] for k in ("critical_path_ps", "est_fmax_mhz", "logic_depth")
                         if k in b["timing"]}
    if b.get("meta"):
        row["meta"] = {k: b["meta"][k] for k in ("block", "lanes", "word", "verif_lanes", "values_per_cycle",
                                                "values_per_cycle_full") if k in b["meta"]}
    return row


def ecp5_rows_from_page(text: str, names) -> dict:
    """ECP5 rows (LUT4, MHz) of ``names`` and the PE from a rendered page's "Every block" table (carried cells
    included), for blocks no ECP5 report holds any more."""
    rows = {}
    for header, table in _tables(text).items():
        ecp5 = [j for j, col in enumerate(header) if col.startswith("ECP5")]     # its area and MHz columns
        if len(ecp5) != 2:
            continue
        for name in ("pe_bf16_fp32", *names):
            cells = table.get(name)
            if not cells or " LUT4" not in cells[ecp5[0]]:
                continue
            area, mhz = cells[ecp5[0]], cells[ecp5[1]]
            rows[name] = {"status": "ok", "lut4": int(area.split(" LUT4")[0].replace(",", "")),
                          "fmax_mhz": float(mhz.split(" (")[0]), **({"carried": True} if CARRY_MARK in area else {})}
    return rows


def freeze_v2(path: Path, reports: dict, commit: str | None, page: str = "") -> dict:
    """The v2 blocks' rows (V3_SUCCESSORS keys) and each flow's PE row, slimmed, with each flow's command;
    ``reports``: flow label -> report; ECP5 rows the fpga report lacks come from ``page``."""
    names = ["pe_bf16_fp32", *V3_SUCCESSORS]
    flows = {}
    for label in FLOW_LABELS:
        rep = reports.get(label) or {}
        blocks = {n: _slim(b) for n in names if (b := (rep.get("blocks") or {}).get(n) or {}).get("status") == "ok"}
        info = {k: (rep.get("flow") or {}).get(k) for k in ("library", "device", "command")}
        if label == "fpga" and len(blocks) < len(names) and page:
            from_page = {n: r for n, r in ecp5_rows_from_page(page, V3_SUCCESSORS).items() if n not in blocks}
            if from_page:
                blocks.update(from_page)
                info["carried_from"] = "docs/report/hardware.md"
        if blocks:
            flows[label] = {"flow": info, "blocks": blocks}
    carried = "carried_from" in (flows.get("fpga") or {}).get("flow", {})
    data = {"note": "decoder v2 (DecoderC1v2 / DecoderC2v2, hw/configs decoder_c1v2_* / decoder_c2v2_*): retired; "
                    f"figures as synthesised at commit {commit or '?'} (format 2.0 layout)"
                    + ("; its ECP5 rows from an earlier place and route, as docs/report/hardware.md carried them"
                       if carried else ""),
            "commit": commit, "flows": flows}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _retired_flows(path=RETIRED) -> dict:
    d = _load(path) if path else None
    return (d or {}).get("flows", {})


def _vpc(b: dict, full: bool = False) -> float | None:
    m = b.get("meta") or {}
    v = m.get("values_per_cycle") or m.get("lanes")
    return (m.get("values_per_cycle_full") or v) if full else v


def _flow_row(rep: dict | None, name: str) -> dict | None:
    """A block's row of one flow's report: area (GE, or LUT4 on the FPGA), Fmax, Fmax over the PE's, values/cycle."""
    if not rep:
        return None
    b = rep["blocks"].get(name) or {}
    if b.get("status") != "ok":
        return None
    pe = rep["blocks"].get("pe_bf16_fp32") or {}
    if "lut4" in b:
        f, fpe = b.get("fmax_mhz"), pe.get("fmax_mhz")
        return {"area": b["lut4"], "f": f, "fx": f / fpe if f and fpe else None, "vpc": None}
    f = (b.get("timing") or {}).get("est_fmax_mhz")
    fpe = (pe.get("timing") or {}).get("est_fmax_mhz")
    return {"area": b["area_ge"], "f": f, "fx": f / fpe if f and fpe else None, "vpc": _vpc(b)}


def v2_vs_v3(generic: dict, gated: dict | None, real: dict | None, fpga: dict | None,
             retired: dict | None = None) -> list[str]:
    """Per v3 decoder against the v2 block it replaces: area per draft value/cycle in the generic and gated flows
    (alone, and per instance of a ``CLUSTER``-decoder cluster: core + shared registers / ``CLUSTER``), clock
    relative to the PE in each flow, ECP5 LUT4. The v2 side comes from ``retired`` (synth/retired.json's flows:
    label -> a report of the retired blocks with that flow's PE), else from the flow's own report."""
    retired = retired or {}
    live = {"generic": generic, "gated": gated, "real": real, "fpga": fpga}

    def ok(rep, name):
        b = ((rep or {}).get("blocks") or {}).get(name) or {}
        return b if b.get("status") == "ok" else None

    def old_rep(label, name):
        return retired[label] if ok(retired.get(label), name) else live[label]

    def fx(rep, name):
        return (_flow_row(rep, name) or {}).get("fx")

    def per_value(rep, name):
        b = ok(rep, name)
        return b["area_ge"] / _vpc(b) if b and _vpc(b) else None

    def cluster(rep, core, regs):
        c, r = ok(rep, core), ok(rep, regs)
        if not (c and r and _vpc(c)):
            return None
        return (c["area_ge"] + r["area_ge"] / CLUSTER) / _vpc(c)

    def pair(a, b, fmt):
        return f"{fmt(a) if a is not None else '—'} -> {fmt(b) if b is not None else '—'}"

    k = lambda v: f"{v / 1000:.2f} k"              # noqa: E731
    x = lambda v: f"{v:.2f}"                       # noqa: E731
    lines = ["| v2 block -> v3 | generic GE / draft value/cycle | gated | gated, per instance of a "
             f"{CLUSTER}-decoder cluster | gated target | generic clock x PE | sky130 clock x PE | ECP5 LUT4 | "
             "ECP5 clock x PE |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for old, v in V3_SUCCESSORS.items():
        new = v["v3"]
        o = {label: old_rep(label, old) for label in live}
        if not (ok(o["generic"], old) or ok(generic, new)):
            continue
        inst = cluster(gated, v["core"], v["regs"])
        lut = pair((ok(o["fpga"], old) or {}).get("lut4"), (ok(fpga, new) or {}).get("lut4"), lambda a: f"{a:,.0f}")
        lines.append(f"| {old} -> {new} | {pair(per_value(o['generic'], old), per_value(generic, new), k)} | "
                     f"{pair(per_value(o['gated'], old), per_value(gated, new), k)} | {k(inst) if inst else '—'} | "
                     f"{k(v['target_ge'])} | {pair(fx(o['generic'], old), fx(generic, new), x)} | "
                     f"{pair(fx(o['real'], old), fx(real, new), x)} | {lut} | "
                     f"{pair(fx(o['fpga'], old), fx(fpga, new), x)} |")
    return lines


OVERHEAD_HEADING = "Overhead on real devices"


def overhead_part(generic: dict, gated_rep: dict | None, gated: str, real_rep: dict | None, level: int) -> list[str]:
    """The overhead section (its heading at ``level``): synth/overhead.py on the generic report, then on the
    clock-gated and the real-library reports, each with its own PE and blocks."""
    from cassandra_rtl.synth import overhead
    ov = overhead.render_markdown(generic)
    w = [ov[1].replace("## ", "#" * level + " ", 1)] + ov[2:]
    if gated_rep and "overhead" in gated_rep:
        w += ["", f"Same model with clock gating (`{gated}`, its own PE and blocks):"] + \
             overhead.render_markdown(gated_rep)[3:]
    if real_rep and "overhead" in real_rep:
        w += ["", f"Same model on `{real_rep['flow'].get('library')}` (its own PE and blocks):"] + \
             overhead.render_markdown(real_rep)[3:]
    return w


def splice_overhead(text: str, level: int, synth: str, real: str | None, gated: str, command: str) -> str | None:
    """``text`` (a rendering of this report) with only its overhead section re-rendered from the flows' current
    reports and marked so; the other sections keep what they were rendered from (the ECP5 and formal runs take
    hours). None if the text has no overhead section or the reports are missing."""
    h = "#" * level
    start = text.find(f"{h} {OVERHEAD_HEADING}")
    end = text.find(f"\n{h} ", start + 1)
    generic = _load(synth)
    real_path, real_rep, gated_rep = _other_flows(real, gated)
    if start < 0 or not generic or "overhead" not in generic:
        return None
    stamp = f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
    src = ", ".join(f"`{p}`" for p in (synth, gated if gated_rep else None, real_path if real_rep else None) if p)
    body = overhead_part(generic, gated_rep, gated, real_rep, level)
    body.insert(1, f"\n*Re-rendered {stamp} by* `{command}` *from {src}; the sections before and after are from the "
                   "rendering named at the top.*")
    return text[:start] + "\n".join(body) + "\n" + (text[end:] if end >= 0 else "")


def _other_flows(real: str | None, gated: str) -> tuple[str | None, dict | None, dict | None]:
    """(real-library report path, its report, the clock-gated report): ``real`` or the reference real-library
    report found under build/; ``gated`` only if it was written with clock gating."""
    real_path = real or _real_report()
    gated_rep = _load(gated)
    return (real_path, _load(real_path) if real_path else None,
            gated_rep if gated_rep and (gated_rep.get("flow") or {}).get("clock_gating") else None)


def _real_report() -> str | None:
    """The most recent real-library report of the reference flow (make synth LIBERTY=... writes
    build/synth-<library>/; a CLOCK_GATING=1 run, build/synth-<library>-cg/, is not the reference, nor are the NPU
    tile's part runs of synth/npu_area.py, build/synth-npu-<library>/)."""
    flows = {f: (_load(f) or {}).get("flow") or {} for f in glob.glob("build/synth-*/report.json")
             if not Path(f).parent.name.startswith("synth-npu")}
    reals = [f for f, fl in flows.items()
             if (fl.get("library_info") or {}).get("kind") == "real" and not fl.get("clock_gating")]
    return max(reals, key=lambda f: Path(f).stat().st_mtime, default=None)


CARRY_MARK = "‡"


def _tables(text: str) -> dict[tuple, dict[str, list[str]]]:
    """Markdown tables of ``text``: header cells -> {first cell of a row: the row's cells}."""
    lines, out = text.split("\n"), {}
    for i, line in enumerate(lines[:-1]):
        if line.startswith("| ") and lines[i + 1].startswith("|---"):
            rows = out.setdefault(tuple(_cells(line)), {})
            for row in lines[i + 2:]:
                if not row.startswith("| "):
                    break
                cells = _cells(row)
                rows[cells[0]] = cells
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def carry_ecp5(body: str, previous: str, fpga_blocks=()) -> tuple[str, int]:
    """``body`` with the ECP5 cells it lacks ("—" where the previous rendering had a figure) taken from the same
    table, row and column of ``previous`` and marked CARRY_MARK, for blocks absent from the FPGA report
    (``fpga_blocks``: every block it holds, whatever its status: a block that failed there is not carried); in an
    "a -> b" row each side on its own. Returns (body, figures carried)."""
    prev = _tables(previous)
    held = set(fpga_blocks)
    lines, n, header = body.split("\n"), 0, None
    for i, line in enumerate(lines):
        if not line.startswith("| ") or line.startswith("|---"):
            header = None if not line.startswith("|---") else header
            continue
        if i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = tuple(_cells(line))
            continue
        old = (prev.get(header) or {}).get(_cells(line)[0]) if header else None
        if not old:
            continue
        cells = _cells(line)
        names = [b.strip() for b in cells[0].split(" -> ")]
        mark = " " + CARRY_MARK
        for j, (col, new) in enumerate(zip(header, cells)):
            parts = new.split(" -> ")
            olds = [o.strip().removesuffix(mark) for o in (old[j] if j < len(old) else "—").split(" -> ")]
            if "ECP5" not in col or len(parts) != len(olds) or len(parts) != len(names):
                continue
            for k, (part, was, name) in enumerate(zip(parts, olds, names)):
                if part == "—" and was != "—" and name not in held:       # each block of "a -> b" on its own
                    parts[k] = was + mark
                    n += 1
            cells[j] = " -> ".join(parts)
        lines[i] = "| " + " | ".join(cells) + " |"
    return "\n".join(lines), n


def previous_formal(text: str, path: str) -> list[str] | None:
    """The block an earlier rendering wrote for the formal report ``path`` ("From PATH (date; `command`):" and its
    table), from that rendering's text; None if it has none."""
    return previous_block(text, f"From {path} (")


def previous_block(text: str, head: str) -> list[str] | None:
    """The paragraph line starting with ``head`` and the table after it, from an earlier rendering's ``text``;
    None if it has none."""
    start = text.find(head)
    if start < 0:
        return None
    lines = text[start:].split("\n")
    block, i = [lines[0]], 1
    while i < len(lines) and not lines[i].strip():            # the blank line(s) before the table
        i += 1
    while i < len(lines) and lines[i].startswith("|"):         # the table, and nothing after it
        block.append(lines[i])
        i += 1
    return block[:1] + [""] + block[1:] if len(block) > 1 else block


def formal_lines(rep: dict | None, path: str = "build/formal/report.json", previous: str = "") -> list[str]:
    """The proofs of one formal report; without the report, the block the previous rendering (``previous``, the
    text this rendering replaces) wrote for it, marked as carried: a formal run takes hours and its results
    depend on the RTL alone, not on the synthesis flows this report is regenerated for."""
    if not rep:
        carried = previous_formal(previous, path)
        if carried:
            return carried + ["", f"*(carried from the previous rendering of this page: {path} was absent when it "
                                  "was rendered; the command above regenerates it)*"]
        return [f"Formal: **not run** here ({path} not found; `make formal` writes it, docs/VERIFICATION.md "
                "\"Measured\" has the last full run)."]
    lines = [f"From {path} ({rep.get('meta', {}).get('date', '?')}; "
             f"`{rep.get('meta', {}).get('command', 'make formal')}`):", "",
             "| property | mode | depth | solver | result | expected | s |", "|---|---|---:|---|---|---|---:|"]
    for p in rep.get("properties", []):
        lines.append(f"| {p.get('property')} | {p.get('mode')} | {p.get('depth', '—')} | {p.get('solver', '—')} | "
                     f"{p.get('result')} | {p.get('expect', '—')} | {p.get('seconds', 0):.0f} |")
    return lines


def ablation_lines(ablate_dir: str, previous: str = "") -> list[str]:
    """Where the v3 decoder cores' area goes (synth/ablate.py reports in ``ablate_dir``); a block whose report is
    absent keeps the table the previous rendering wrote for it, marked as carried."""
    from cassandra_rtl.synth import ablate

    lines = []
    for block in ablate.SUBJECTS:
        rep = _load(ablate.report_dir(Path(ablate_dir), block) / "report.json")
        if rep:
            gated = _load(ablate.report_dir(Path(ablate_dir), block, gated=True) / "report.json")
            lines += ablate.render(rep, gated).rstrip("\n").split("\n") + [""]
            continue
        carried = previous_block(previous, f"Area of {block} by function ")
        if carried:
            lines += carried + ["", f"*(carried from the previous rendering of this page: {ablate_dir}/{block}/report.json "
                                    "was absent when it was rendered; the command above regenerates it)*", ""]
        else:
            lines += [f"{block}: **not run** here (`python -m cassandra_rtl.synth.ablate {block}` writes "
                      f"{ablate_dir}/{block}/report.json).", ""]
    return lines


def plot(generic: dict, out: Path, retired_generic: dict | None = None) -> str | None:
    """GE per value/cycle vs clock / PE clock of every decoder and KV encoder in the generic flow, the retired
    decoder v2 blocks beside them in grey (each against its own flow's PE)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    drawn = 0
    for rep, retired in ((retired_generic, True), (generic, False)):
        pe = ((((rep or {}).get("blocks") or {}).get("pe_bf16_fp32") or {}).get("timing") or {}).get("est_fmax_mhz")
        if not pe:
            continue
        for n, b in rep["blocks"].items():
            if b.get("status") != "ok" or b.get("kind") not in ("decoder", "encoder"):
                continue
            f = (b.get("timing") or {}).get("est_fmax_mhz")
            vpc = _vpc(b)
            if not (f and vpc):
                continue
            x, y = f / pe, b["area_ge"] / vpc
            colour = "#999999" if retired else ("#4c72b0" if b["kind"] == "decoder" else "#55a868")
            ax.scatter([x], [y], color=colour, marker="o" if b["kind"] == "decoder" else "s", s=30)
            ax.annotate(n, (x, y), fontsize=6.5, xytext=(3, 3), textcoords="offset points")
            drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.axvline(1.3, color="orange", ls="--", lw=1, label="target: 1.3x the PE clock")
    ax.set_yscale("log")
    ax.set_xlabel("clock / PE clock (generic flow)")
    ax.set_ylabel("GE per value/cycle (log)")
    ax.set_title("Decoders (o, blue) and KV encoders (s, green); retired decoder v2 grey", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fname = "hardware_area_clock.png"
    fig.savefig(out / fname, dpi=130)
    plt.close(fig)
    return fname


def render(out: Path, synth: str = "build/synth/report.json", real: str | None = None, fpga: str = "build/fpga/report.json",
           formal: str | list[str] = "build/formal/report.json", level: int = 2,
           gated: str = "build/synth-cg/report.json",
           command: str = "python eval/report_hardware.py --out docs/report", retired=RETIRED,
           previous: str = "", ablate_dir: str = "build/ablate") -> str | None:
    """The hardware markdown (headings at ``level``) and its plot in ``out``; None without a synthesis report.
    ``previous``: the text this rendering replaces (formal blocks whose reports are absent are carried from it)."""
    from cassandra_rtl.synth import compare

    generic = _load(synth)
    if not generic:
        return None
    real_path, real_rep, gated_rep = _other_flows(real, gated)
    formals = [formal] if isinstance(formal, str) else list(formal)
    fpga_rep, formal_reps = _load(fpga), [(f, _load(f)) for f in formals]
    retired_flows = _retired_flows(retired)
    out.mkdir(parents=True, exist_ok=True)
    labelled = [(compare.load_report(pth)[0], r) for pth, r in
                [(synth, generic)] + ([(real_path, real_rep)] if real_rep else []) + ([(fpga, fpga_rep)] if fpga_rep else [])]
    table = compare.render(compare.compare(labelled))
    fig = plot(generic, out, retired_flows.get("generic"))
    h = "#" * level
    w = [f"Generated by `{command}`" + (" (`make report-hw`)" if command.endswith("--out docs/report") else "")
         + " from the flows' reports: "
         + ", ".join(f"`{pth}`" for pth in [synth, real_path, gated if gated_rep else None, fpga, *formals]
                     if pth and Path(pth).exists()) + ". "
         "Pre-layout figures; compare ratios to the PE, not absolute numbers across flows (docs/SYNTHESIS.md).", "",
         f"{h} Every block, every flow (area and clock relative to the PE of the same flow)", "", table]
    v3 = v2_vs_v3(generic, gated_rep, real_rep, fpga_rep, retired_flows)
    if len(v3) > 2:
        rel = Path(retired).relative_to(ROOT) if Path(retired).is_relative_to(ROOT) else retired
        w += [f"{h} v2 -> v3", "",
              "Decoder v3 (docs/datasheets/decoder_c1.md, decoder_c2.md) reads format 3.0; a cluster shares one "
              "set of tensor registers among its decoders. Gated: the generic flow with clock gating "
              + (f"(`{gated}`)" if gated_rep else "(**not run**: `make synth CLOCK_GATING=1`)") + "."
              + (f" v2 rows (retired blocks): `{rel}` ({(_load(retired) or {}).get('note', '')})." if retired_flows
                 else ""), ""] + v3
    if fig:
        w += ["", f"![area per value/cycle vs clock]({fig})", "", f"*Command* `{command}` · *data* the flows' reports above."]
    w += [""] + overhead_part(generic, gated_rep, gated, real_rep, level)
    w += ["", f"{h} Area by function (decoder v3 cores)", "",
          "Each function replaced by a stand-in in turn and the core synthesised again (synth/ablate.py; the generic "
          "flow, and the gated flow where it was run; differences of single runs: read them as where the area goes, "
          "they do not add up).", ""]
    w += ablation_lines(ablate_dir, previous)
    w += ["", f"{h} Formal proofs", ""]
    for i, (pth, rep) in enumerate(formal_reps):
        w += ([""] if i else []) + formal_lines(rep, pth, previous)
    w += [""]
    body, carried = carry_ecp5("\n".join(w) + "\n", previous, ((fpga_rep or {}).get("blocks") or {}).keys())
    if carried:
        note = (f"ECP5 cells marked {CARRY_MARK} ({carried}) are carried from the previous rendering of this page: "
                f"`{fpga}` {'held none of those blocks' if fpga_rep else 'was absent'} when this page was rendered "
                "(`make fpga` places and routes every block).")
        body = body.replace(f"\n\n{h} Every block", f" {note}\n\n{h} Every block", 1)
    return body


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/report")
    ap.add_argument("--synth", default="build/synth/report.json")
    ap.add_argument("--real", default=None, help="real-library report (default: the first build/synth-*/report.json)")
    ap.add_argument("--gated", default="build/synth-cg/report.json", help="the clock-gated generic report (v2 -> v3)")
    ap.add_argument("--fpga", default="build/fpga/report.json")
    ap.add_argument("--formal", action="append", default=None, metavar="REPORT",
                    help="a formal report (repeatable: e.g. make formal's and a --config run's; default "
                         "build/formal/report.json)")
    ap.add_argument("--ablate", default="build/ablate", help="synth/ablate.py's output (area by function)")
    ap.add_argument("--retired", default=str(RETIRED), help="the retired v2 blocks' rows per flow (v2 -> v3 table)")
    ap.add_argument("--sections", choices=["all", "overhead"], default="all",
                    help="overhead: re-render only the overhead section of OUT/hardware.md from the flows' reports "
                         "(the rest keeps what it was rendered from: ECP5 and formal runs take hours)")
    ap.add_argument("--freeze-v2", default=None, metavar="PATH",
                    help="write the v2 blocks' rows of --synth / --gated / --real / --fpga to PATH and exit")
    ap.add_argument("--commit", default=V2_LAST_COMMIT, help="with --freeze-v2: the commit the flows ran at")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if a.freeze_v2:
        page = out / "hardware.md"
        d = freeze_v2(Path(a.freeze_v2), {"generic": _load(a.synth), "gated": _load(a.gated),
                                          "real": _load(a.real) if a.real else None, "fpga": _load(a.fpga)},
                      a.commit, page.read_text() if page.exists() else "")
        print(f"wrote {a.freeze_v2}: " + ", ".join(f"{k} {len(v['blocks'])} rows" for k, v in d["flows"].items()))
        return 0
    if ((_load(a.synth) or {}).get("flow") or {}).get("clock_gating"):
        print(f"report_hardware: error: {a.synth} is a clock-gated run; the report compares the reference flows "
              "(make synth without CLOCK_GATING)", file=sys.stderr)
        return 2
    command = "python eval/report_hardware.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if a.sections == "overhead":
        old = out / "hardware.md"
        new = splice_overhead(old.read_text(), 2, a.synth, a.real, a.gated, command) if old.exists() else None
        if new is None:
            print(f"report_hardware: error: --sections overhead needs {old} with an overhead section and {a.synth} "
                  "(run `make synth`)", file=sys.stderr)
            return 2
        old.write_text(new)
        print(f"rewrote the overhead section of {old}")
        return 0
    old = out / "hardware.md"
    body = render(out, a.synth, a.real, a.fpga, a.formal or ["build/formal/report.json"],
                  retired=a.retired, gated=a.gated, command=command,
                  previous=old.read_text() if old.exists() else "", ablate_dir=a.ablate)
    if body is None:
        print(f"report_hardware: error: {a.synth} not found (run `make synth`)", file=sys.stderr)
        return 2
    head = f"# Hardware report (generated {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC)\n\n"
    (out / "hardware.md").write_text(head + body)
    print(f"wrote {out / 'hardware.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
