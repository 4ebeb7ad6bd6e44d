"""The report's NPU tile section: the tile measured in cycles (docs/NPU.md).

Reads what the tile's runs wrote (nothing is simulated here):
  * the whole-artifact measurement of `cassandra-rtl npu --all` (build/npu/measure/, the one of the generation
    artifact, the headline tile, the default memory model and the current tile RTL): per pass kind values,
    mismatches, cycles, the port's use and where the cycles went;
  * `python bench/npu_speedup.py` (build/npu/speedup/speedup.json): the held-out runs' speedup measured in
    tile cycles beside model/metrics.py, and losslessness; its plot is copied to OUT/npu_speedup.png.

    python eval/report.py --out docs/report --sections npu     # splice it into an existing report.md
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HEADING = "## 6. The NPU tile: the speedup measured in cycles"
SPEEDUP_JSON = "build/npu/speedup/speedup.json"
MEASURE_DIR = "build/npu/measure"


def _f(x, spec="{:.3f}"):
    return "—" if x is None else spec.format(x)


def headline_measurement() -> tuple[Path | None, dict | None]:
    """The path `cassandra-rtl npu --all` stores its measurement at with every default (the artifact `generate`
    uses, the headline tile, the default memory model, this RTL) and the measurement if it is there; other
    measurements in the directory (another artifact, tile or memory) are not the report's. Nothing is encoded:
    without the bundled model or its artifact there is no measurement (None, None)."""
    from cassandra_rtl.commands.npu import generation_artifact
    from cassandra_rtl.errors import UserError
    from cassandra_rtl.tb.npu import MemParams, TileParams
    from cassandra_rtl.tb.npu.speedup import measurement_path
    try:
        artifact = generation_artifact(encode=False)
    except (UserError, OSError):
        return None, None
    if not artifact.is_file():
        return None, None
    path = measurement_path(artifact, TileParams(), MemParams())
    return path, (json.loads(path.read_text()) if path.exists() else None)


def measurement_table(meas: dict) -> list[str]:
    t = meas["tile"]
    lines = [f"Tile: {t['instances']} x `{t['decoder']}`, a {t['data_bytes']}-byte AXI4 port, {t['max_rows']} row "
             f"slots, in_features <= {t['max_in']}; memory model: {meas['memory']['bandwidth'] or t['data_bytes']} "
             f"B/cycle, read latency {meas['memory']['read_latency']} cycles. {meas['tensors']} linear tensors of "
             f"`{Path(meas.get('source', '?')).name}` (SmolLM2-135M, the draft allocation `generate` uses), random "
             "N(0, 1) bf16 activations.", "",
             "| pass | rows | values | mismatches | cycles | values / cycle | port use | array busy | waiting for memory | waiting with input present | activation load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = {"bf16": 1, "draft": 1, "full": 1, "verify": meas.get("verify_rows", 5)}
    for k, p in meas["passes"].items():
        w = p["where"]
        lines.append(f"| {k} | {rows.get(k, '')} | {p['values']:,} | {p['mismatches']} | {p['cycles']:,} | "
                     f"{_f(p['values_per_cycle'], '{:.2f}')} | {_f(p['bandwidth_fraction'])} | "
                     f"{_f(w['array_busy'])} | {_f(w['wait_memory'])} | {_f(w['wait_decoder'])} | "
                     f"{_f(w['activation_load'])} |")
    f, v = meas["passes"]["full"], meas["passes"]["verify"]
    lines += ["", f"Batch invariance: every verify pass's row 0 equals the one-row full and bf16 passes: "
                  f"{meas['batch_invariant']}. A verify pass of {rows['verify']} rows takes "
                  f"{v['cycles'] / f['cycles']:.3f}x the cycles of one row (the activation load and the result "
                  "writes grow with R; the weights are read once). Array busy / waiting: fractions of instance-"
                  "cycles (waiting with input present: every plane word the pass reads is there, but the decoder — "
                  "in a bf16 pass the gearbox assembling a V-group from W/2-value words — has not delivered a "
                  "group); activation load: of the pass's cycles (the array waits for its activations)."]
    return lines


def speedup_table(res: dict) -> list[str]:
    p = res["pooled"]
    t = p["tile"]
    lines = [f"`{res['command']}`: {len(res['prompts'])} held-out prompts, {res['max_new_tokens']} new tokens, "
             f"gamma {res['gamma']}, greedy, under the tile's numerics. The NPU preset ({t['npu_bandwidth_gbps']:.1f} "
             f"GB/s, {t['overhead_us']:.0f} us per pass) as {t['tiles_for_npu_bandwidth']:.1f} tiles at "
             f"{t['clock_mhz']:.0f} MHz ({t['clock_source']}).", "",
             "| prompt | category | tokens | acceptance | lossless | measured | modeled | difference | bytes through the RTL |",
             "|---:|---|---:|---:|---|---:|---:|---:|---:|"]
    for r in res["prompts"]:
        lines.append(f"| {r['prompt']} | {r['category']} | {r['tokens']} | {_f(r['acceptance'])} | {r['lossless']} | "
                     f"{r['speedup_measured']:.3f}x | {r['speedup_modeled']:.3f}x | "
                     f"{r['speedup_measured'] / r['speedup_modeled'] - 1:+.1%} | {r['measured_bytes_fraction']:.3f} |")
    lines += ["", f"Mean over the prompts: **{res['mean_speedup_measured']:.3f}x measured** against "
                  f"{res['mean_speedup_modeled']:.3f}x modeled; pooled {p['speedup_measured']:.3f}x against "
                  f"{p['speedup_modeled']:.3f}x. Every speculative run token-identical to plain greedy decoding: "
                  f"{res['all_lossless']}.",
              "", "What is measured and what is charged: the linear layers (every 2-D weight, the LM head included) "
                  "are the tile's measured cycles for the pass kind and row count; K/V reads and writes, the "
                  "norms' weights, attention's FLOPs and the per-pass overhead are charged by the model "
                  "(tb/npu/speedup.py)."]
    return lines


def render(out: Path, command: str) -> str:
    lines = [HEADING, "", f"*Rendered by* `{command}` *from the tile's runs (docs/NPU.md).*", ""]
    path, meas = headline_measurement()
    if meas is None:
        lines.append("No measurement of the headline tile on the generation artifact"
                     + (f" ({path.name} in {MEASURE_DIR}/" if path else " (no bundled model artifact")
                     + ": `cassandra-rtl npu --all`).")
    else:
        lines += ["### Every linear tensor through the Verilated tile", "", *measurement_table(meas), "",
                  f"Command: `cassandra-rtl npu --all` ({path.name}).", ""]
    sp = ROOT / SPEEDUP_JSON
    if not sp.exists():
        lines.append(f"No held-out speedup run ({SPEEDUP_JSON}: `python bench/npu_speedup.py`).")
    else:
        res = json.loads(sp.read_text())
        lines += ["### The speedup measured in cycles on held-out prompts", "", *speedup_table(res), ""]
        png = sp.with_name("speedup.png")
        if png.exists():
            out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, out / "npu_speedup.png")
            lines += ["![time per token by pass kind; modeled vs simulated](npu_speedup.png)", "",
                      f"*Command* `{command}` · *data* `{SPEEDUP_JSON}` (`python bench/npu_speedup.py`).", ""]
    return "\n".join(lines) + "\n"
