"""Figures 4 (modeled speedup) and 5 (hardware: area, overhead, co-simulation throughput).

Hardware figures are read from the synthesis flow's build/synth/report.json and from `cassandra-rtl cosim
--json` results when present; this script never synthesises anything itself.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PAPER_SPEEDUP = (1.78, 2.41)  # the paper's reported range of end-to-end speedups
PAPER_OVERHEAD_PERCENT = 2.0
HW_LABELS = {"rtx4090": "RTX 4090", "jetson_agx_orin": "Jetson AGX Orin", "orin": "Jetson AGX Orin", "npu": "NPU"}


# ------------------------------------------------------------------------------------------------ speedup
def speedup_entries(summ: dict, tuned: list[dict], default_name: str) -> list[tuple[str, dict]]:
    ents = []
    if default_name in summ:
        ents.append((f"Cassandra uniform\n({default_name})", summ[default_name]["speedup"]))
    cass = {k: v for k, v in summ.items() if v["draft"] == "cassandra" and v["acceptance"] is not None}
    if cass:
        best = max(cass, key=lambda k: cass[k]["speedup"].get("orin", 0))
        if best != default_name:
            ents.append((f"Cassandra best uniform\n({best})", cass[best]["speedup"]))
    for k, v in summ.items():
        if v["family"] == "tuned" and v["acceptance"] is not None:
            ents.append(("tuned draft config\n(same harness)", v["speedup"]))
    for k, v in summ.items():
        if v["draft"] == "int8":
            ents.append(("INT8 weight-only\n(autoregressive)", v["speedup"]))
    for k, v in summ.items():
        if v["draft"] == "layerskip":
            ents.append((f"layer-skip\n({len(v['skip_layers'] or [])} layers)", v["speedup"]))
    for k, v in summ.items():
        if v["draft"] == "ngram":
            ents.append(("n-gram lookup", v["speedup"]))
    return ents


def plot_speedup(entries, out, fname: str, footer: dict) -> str:
    import matplotlib.pyplot as plt

    from report_lib import figure_footer, save

    hws = [h for h in HW_LABELS if all(h in e[1] for e in entries)]
    fig, ax = plt.subplots(figsize=(11, 5.4))
    x = np.arange(len(entries))
    wdt = 0.8 / max(1, len(hws))
    colors = ["#4c72b0", "#55a868", "#c44e52"]
    for i, h in enumerate(hws):
        vals = [e[1][h] for e in entries]
        bars = ax.bar(x + (i - (len(hws) - 1) / 2) * wdt, vals, wdt, label=HW_LABELS[h], color=colors[i % 3])
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, v + 0.02, f"{v:.2f}", ha="center", fontsize=6.5)
    ax.axhspan(*PAPER_SPEEDUP, color="orange", alpha=0.18,
               label=f"paper: {PAPER_SPEEDUP[0]}-{PAPER_SPEEDUP[1]}x (4-8B models, their hardware)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(x, [e[0] for e in entries], fontsize=8)
    ax.set_ylabel("modeled speedup vs bf16 autoregressive")
    ax.set_title("Modeled decode speedup on memory-bound hardware (same harness, same prompts)")
    ax.set_ylim(0, max(PAPER_SPEEDUP[1], max(e[1][h] for e in entries for h in hws)) * 1.25)
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    ax.grid(axis="y", alpha=0.3)
    figure_footer(fig, **footer)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    return save(fig, out, fname)


# --------------------------------------------------------------------------------------------- synthesis
def read_synth(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, OSError):
        return None


def synth_blocks(rep: dict) -> list[dict]:
    rows = []
    for name, b in (rep.get("blocks") or {}).items():
        if not isinstance(b, dict) or b.get("area_ge") is None:
            continue
        meta = b.get("meta") or {}
        lanes = meta.get("lanes") or meta.get("values_per_cycle")
        per_lane = b.get("area_ge_per_lane")
        if per_lane is None and lanes:
            per_lane = b["area_ge"] / lanes
        rows.append({"block": name, "kind": b.get("kind") or meta.get("kind"), "area_ge": b["area_ge"],
                     "area_um2": b.get("area_um2"), "lanes": lanes, "area_ge_per_lane": per_lane,
                     "flip_flops": b.get("flip_flops"), "fmax_mhz": (b.get("timing") or {}).get("est_fmax_mhz"),
                     "cached": b.get("cached")})
    return rows


def plot_hw(blocks, overhead: dict, cosim: list[dict], out, fname: str, footer: dict) -> str:
    import matplotlib.pyplot as plt

    from report_lib import figure_footer, save

    n = 2 + bool(cosim)
    fig, axes = plt.subplots(1, n, figsize=(5.3 * n, 6.0))
    ax = axes[0]
    names = [b["block"] for b in blocks]
    ax.barh(names, [b["area_ge"] for b in blocks], color="#4c72b0")
    for i, b in enumerate(blocks):
        lab = f"{b['area_ge']:,.0f} GE" + (f" ({b['area_ge_per_lane']:,.0f}/lane)" if b["area_ge_per_lane"] else "")
        ax.text(b["area_ge"], i, " " + lab, va="center", fontsize=6.5)
    ax.set_xscale("log")
    ax.set_xlabel("area (NAND2 gate equivalents, log)")
    ax.set_title("Area per block (pre-layout)", fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    ax = axes[1]
    ks = list(overhead)
    vals = [overhead[k] if overhead[k] is not None else 0.0 for k in ks]
    bars = ax.bar(ks, vals, color=["#55a868" if overhead[k] is not None else "#cccccc" for k in ks])
    for b, k in zip(bars, ks):
        v = overhead[k]
        ax.text(b.get_x() + b.get_width() / 2, (v or 0) + 0.02, "not run" if v is None else f"{v:.2f}%",
                ha="center", fontsize=8)
    ax.axhline(PAPER_OVERHEAD_PERCENT, color="orange", ls="--", label="paper: ~2% of a 64 TFLOPS NPU")
    ax.set_ylabel("decoder+encoder area, % of the PE array")
    ax.set_title("Overhead by device, at the PE clock (synth/overhead.py)", fontsize=10)
    ax.legend(fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    if cosim:
        ax = axes[2]
        labs = [f"{c.get('config', '?')}\n{c.get('simulator', '?')} {c.get('mode', '')}" for c in cosim]
        ax.bar(labs, [c.get("values_per_second") or 0 for c in cosim], color="#8172b2")
        ax.set_ylabel("values / s (co-simulation, wall clock)")
        ax.set_title("RTL co-simulation throughput (bulk path)", fontsize=10)
        ax.tick_params(axis="x", labelsize=6.5)
        for i, c in enumerate(cosim):
            ax.text(i, c.get("values_per_second") or 1, f"{c.get('values_per_cycle', '?')} v/cyc\n"
                    f"{c.get('mismatches', '?')} mism.", ha="center", va="bottom", fontsize=6.5)
    figure_footer(fig, **footer)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return save(fig, out, fname)


# ---------------------------------------------------------------------------------------------- cosim
def cosim_available() -> bool:
    try:
        return importlib.util.find_spec("cassandra_rtl.commands.cosim") is not None
    except ImportError:
        return False


COSIM_CONFIGS = ("decoder_c1v3_l8", "decoder_c1v3_l4")   # the C1 decoders v3: 8 and 4 values/cycle in draft mode


def run_cosim(cass: Path, max_values: int, modes=("draft", "full"), configs=COSIM_CONFIGS, timeout: float = 900,
              log=print) -> list[dict]:
    """`cassandra-rtl cosim CASS --config C --mode M --max-values N --json` (the bulk Verilator path) per
    decoder configuration and mode; results or error records."""
    out = []
    for config in configs:  # warm-up: the first run of a configuration compiles its Verilator harness
        cmd = [sys.executable, "-m", "cassandra_rtl.cli", "cosim", str(cass), "--config", config, "--max-values",
               "1000", "--jobs", "1", "--json"]
        log(f"  cosim warm-up (harness build): {config}")
        try:
            subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            pass
    for config, mode in [(c, m) for c in configs for m in modes]:
        cmd = [sys.executable, "-m", "cassandra_rtl.cli", "cosim", str(cass), "--config", config, "--mode", mode,
               "--max-values", str(max_values), "--jobs", "1", "--json"]
        log(f"  cosim: {' '.join(cmd[2:])}")
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            out.append({"mode": mode, "error": f"timed out after {timeout:.0f}s", "command": " ".join(cmd[2:])})
            continue
        rec = None
        for line in reversed(p.stdout.strip().splitlines()):
            try:
                rec = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
        if rec is None and p.stdout.strip().startswith("{"):
            try:
                rec = json.loads(p.stdout)
            except json.JSONDecodeError:
                rec = None
        if not isinstance(rec, dict):
            err = (p.stderr.strip().splitlines() or ["no JSON output"])[-1]
            out.append({"mode": mode, "error": err[:300], "exit": p.returncode, "command": " ".join(cmd[2:])})
            continue
        rec.setdefault("mode", mode)
        rec["exit"] = p.returncode
        rec["command"] = "cassandra-rtl " + " ".join(cmd[3:])
        out.append(rec)
    return out


def read_cosim_files(paths) -> list[dict]:
    out = []
    for p in paths:
        p = Path(p)
        if not p.is_file():
            continue
        try:
            d = json.loads(p.read_text())
        except (json.JSONDecodeError, OSError):
            continue
        for rec in (d if isinstance(d, list) else [d]):
            if isinstance(rec, dict) and "values" in rec:
                rec.setdefault("source", str(p))
                out.append(rec)
    return out
