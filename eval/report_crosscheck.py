"""The report's cross-check subsection: the project's roofline beside GenZ and SCALE-Sim v3.

Reads the JSON that ``python bench/crosscheck.py`` writes (build/crosscheck/crosscheck.json; nothing is run
here) and renders a table plus OUT/crosscheck.png: speedup vs acceptance per device for the paper's model
sizes, with the paper's reported range (1.78-2.41x) overlaid.

    python eval/report.py --out docs/report --sections crosscheck   # splice it into an existing report.md
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_JSON = "build/crosscheck/crosscheck.json"
# the same NPU as one square array (python bench/crosscheck.py --no-genz --npu-array 1x256x256
# --out build/crosscheck/square256.json): where the roofline's compute term fails
SQUARE_JSON = "build/crosscheck/square256.json"
HEADING = "### Cross-check: the roofline against GenZ and SCALE-Sim v3"
DEVICES = (("rtx4090", "RTX 4090"), ("orin", "Jetson AGX Orin"), ("npu", "64 TFLOPS NPU"))
PAPER_MODELS = (("llama3-8b", "Llama-3-8B"), ("qwen3-8b", "Qwen3-8B"), ("qwen3-4b", "Qwen3-4B"))


def _f(x, nd=2, suffix="x"):
    return "—" if x is None else f"{x:.{nd}f}{suffix}"


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lo, hi = res["inputs"]["paper_speedups"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    colors = {"llama3-8b": "C0", "qwen3-8b": "C1", "qwen3-4b": "C2", "smollm2-135m": "C7"}
    for ax, (dev, name) in zip(axes, DEVICES):
        ax.axhspan(lo, hi, color="0.85", zorder=0, label=f"paper {lo}–{hi}x (its 4–8B models)")
        for mkey, mname in PAPER_MODELS + (("smollm2-135m", "SmolLM2-135M"),):
            rows = sorted((r for r in res["rows"] if r["device"] == dev and r["model"] == mkey
                           and r["source"] in ("paper sweep", "sweep")), key=lambda r: r["acceptance"])
            if not rows:
                continue
            a = [r["acceptance"] for r in rows]
            c = colors[mkey]
            ls = ":" if mkey == "smollm2-135m" else "-"
            ax.plot(a, [r["speedup_roofline"] for r in rows], ls, color=c, label=f"{mname} roofline")
            if rows[0].get("speedup_genz") is not None:
                ax.plot(a, [r["speedup_genz"] for r in rows], "o", color=c, mfc="none",
                        label=f"{mname} GenZ")
            if mkey == "llama3-8b" and rows[0].get("speedup_roofline_if_rate") is not None:
                ax.plot(a, [r["speedup_roofline_if_rate"] for r in rows], "-.", color=c, lw=1,
                        label=f"{mname} roofline, acceptance read as accepted/drafted")
            if dev == "npu" and rows[0].get("speedup_scalesim") is not None:
                ax.plot(a, [r["speedup_scalesim"] for r in rows], "s--", color=c, ms=4,
                        label=f"{mname} SCALE-Sim")
        ax.set_title(name)
        ax.set_xlabel("acceptance: per-token alpha (dash-dot: read as accepted / drafted)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"modeled speedup vs bf16 AR (gamma {res['inputs']['gamma']})")
    handles, labels = axes[2].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(out: Path, command: str, json_path: str = DEFAULT_JSON) -> str:
    """The subsection's markdown (and OUT/crosscheck.png), or a 'not run' line. ``command``: the report
    command that renders it (the cross-check's own command is named beside it)."""
    p = ROOT / json_path
    if not p.exists():
        return (f"{HEADING}\n\nNot run here (`python bench/crosscheck.py`, `make bench-crosscheck`; needs "
                "`pip install -e '.[crosscheck]'` for GenZ and SCALE-Sim).\n")
    res = json.loads(p.read_text())
    plot(res, Path(out) / "crosscheck.png")
    inp = res["inputs"]
    b = inp["bits"]
    L = [HEADING, "", "![crosscheck](crosscheck.png)", "",
         f"*Command* `{command}` from `{res.get('command', 'python bench/crosscheck.py')}` "
         f"({res.get('seconds', '?')} s; "
         f"tools: GenZ {res['tools']['genz']}, SCALE-Sim {res['tools']['scalesim']}) · *models* SmolLM2-135M "
         "and the paper's Llama-3-8B / Qwen3-8B / Qwen3-4B from their public configs · *config* "
         f"gamma {inp['gamma']}, context {inp['context']}, weights {b['weights_draft']} draft / "
         f"{b['weights_full']} lossless bits/value, K/V {b['kv_draft']} / {b['kv_full']} (SmolLM2's, "
         "measured, applied to every model), decoder unlimited, the presets' per-pass overheads.", "",
         "Each tool prices the same three passes (bf16 AR step, Cassandra draft step, verify pass of gamma + 1 "
         "rows) and the same formula turns them into a speedup: E x t(AR) / (gamma x t(draft) + t(verify)), "
         "E = (1 - alpha^(gamma+1)) / (1 - alpha). Step times (ms):", "",
         "| device | model | AR roofline / GenZ / SCALE-Sim | draft | verify |", "|---|---|---|---|---|"]
    names = dict(PAPER_MODELS + (("smollm2-135m", "SmolLM2-135M"),))
    for s in res["steps"]:
        if s["gamma"] != inp["gamma"]:
            continue
        cells = []
        for p_ in ("ar", "draft", "verify"):
            ss = s.get("scalesim_s", {}).get(p_)
            gz = s.get("genz_s", {}).get(p_)
            cells.append(f"{s['roofline_s'][p_] * 1e3:.3f} / {_f(gz and gz * 1e3, 3, '')} / "
                         f"{_f(ss and ss * 1e3, 3, '') if s['device'] == 'npu' else 'n/a'}")
        L.append(f"| {dict(DEVICES)[s['device']]} | {names[s['model']]} | " + " | ".join(cells) + " |")
    L += ["", "Speedups (roofline / GenZ / SCALE-Sim on the NPU); SmolLM2 at its held-out runs' measured alpha "
          "and gamma, the paper sizes over the paper's acceptance range:", "",
          "| model | alpha | gamma | " + " | ".join(n for _, n in DEVICES) + " |",
          "|---|---:|---:|" + "---|" * len(DEVICES)]
    keyed = {}
    for r in res["rows"]:
        keyed.setdefault((r["model"], r["acceptance"], r["gamma"]), {})[r["device"]] = r
    for (m, a, g), by in keyed.items():
        if m == "smollm2-135m" and "held-out" not in by[next(iter(by))]["source"]:
            continue
        cells = []
        for dev, _ in DEVICES:
            r = by.get(dev)
            if r is None:
                cells.append("—")
                continue
            c = f"{_f(r['speedup_roofline'])} / {_f(r['speedup_genz'])}"
            if dev == "npu":
                c += f" / {_f(r.get('speedup_scalesim'))}"
            cells.append(c)
        L.append(f"| {names[m]} | {a:.3f} | {g} | " + " | ".join(cells) + " |")
    L.append("")
    L.append(findings(res, _load(SQUARE_JSON)))
    return "\n".join(L) + "\n"


def _load(rel: str) -> dict | None:
    p = ROOT / rel
    return json.loads(p.read_text()) if p.exists() else None


def _worst(values):
    v = [x for x in values if x is not None]
    return max(v, key=abs) if v else None


def findings(res: dict, square: dict | None = None) -> str:
    """What agreed, what disagreed and why, computed from the run (and the square-array run if present)."""
    steps, rows = res["steps"], res["rows"]
    out = []
    held = [r for r in rows if r.get("speedup_metrics_heldout")]
    if held:
        dev = max(abs(r["speedup_roofline"] / r["speedup_metrics_heldout"] - 1) for r in held)
        out.append("**The closed form vs the held-out runs**: at the held-out runs' measured alpha and gamma, "
                   f"the three-pass formula is within {100 * dev:.1f} % of metrics.evaluate() over those runs' "
                   "real passes (docs/MODEL.md), so pricing single passes loses nothing that matters here.")
    gz = _worst(s["genz_vs_roofline_pct"][p] for s in steps if "genz_vs_roofline_pct" in s for p in
                ("ar", "draft", "verify"))
    gzs = _worst(r.get("genz_vs_roofline_pct") for r in rows)
    if gz is not None:
        emb = max((s["genz_notes"]["verify_embedding_gemm_s"] / s["genz_s"]["verify"], s["model"])
                  for s in steps if "genz_notes" in s)
        out.append(f"**GenZ vs the roofline**: step times within {abs(gz):.1f} %, speedups within {abs(gzs):.1f} % "
                   "on every row. Two GenZ-side artefacts had to be handled first: GenZ reads GB/s as 2^30 B/s "
                   f"(the presets are decimal: passed unconverted, every pass is {100 * (2 ** 30 / 1e9 - 1):.1f} % "
                   "faster, which cancels in a "
                   "speedup but not beside a fixed per-pass overhead), and its chunked model — the one its own "
                   "speculative-decoding model verifies with — begins with the input embedding as a full "
                   "(rows x vocab) x (vocab x hidden) GEMM, reading the whole embedding table where a decoder looks "
                   f"up gamma + 1 rows (up to {100 * emb[0]:.0f} % of the verify pass, {emb[1]}); it is left out.")
        bi = [(r["speedup_genz_builtin_formula"] / r["speedup_genz"] - 1, r) for r in rows
              if r.get("speedup_genz_builtin_formula")]
        worst = min(bi, key=lambda x: x[0])
        out.append(f"**GenZ's own speculative formula** (`spec_decode_modeling`) falls short by up to "
                   f"{-100 * worst[0]:.0f} % ({worst[1]['model']}, alpha {worst[1]['acceptance']:.3f}, gamma "
                   f"{worst[1]['gamma']}): its `expected_tokens` caps the tokens per step at gamma, but a step "
                   "that accepts every draft also emits the target's own next token (gamma + 1; Leviathan et al.), "
                   "and the embedding GEMM above stays in its verify pass. The GenZ columns use GenZ's pass "
                   "latencies with the standard token count; its formula is in the JSON "
                   "(`speedup_genz_builtin_formula`). It also cannot give the draft other bytes per value than "
                   "the target (one `bits` per system), so the three passes run on three GenZ systems.")
    ss = _worst(s["scalesim_vs_roofline_pct"][p] for s in steps if "scalesim_vs_roofline_pct" in s
                for p in ("ar", "draft", "verify"))
    arr = res["inputs"]["npu_array"]
    if ss is not None:
        sss = _worst(r.get("scalesim_vs_roofline_pct") for r in rows if r["device"] == "npu")
        out.append(f"**SCALE-Sim v3 vs the roofline (NPU)**: {arr['cores']} arrays of {arr['rows']}x{arr['cols']} "
                   f"PEs at {arr['clock_mhz']:.1f} MHz (= 64 TFLOPS), weight-stationary with the activations "
                   "stationary and weights / K / V streamed: step times within "
                   f"{abs(ss):.1f} %, speedups within {abs(sss):.1f} %. Two settings of the simulation decide "
                   "this, not either model: SCALE-Sim fetches the stationary operand padded to the array's width "
                   f"(k x {arr['cols']} values per fold for 1-5 activation rows) through the same bandwidth-limited "
                   "port and drains every fold's partial sums to DRAM; both are on chip in a GEMV engine, so "
                   "their ports are given 4096 values/cycle and only the streamed matrix sees the DRAM.")
        tiles = res["inputs"].get("scalesim_tiles") or []
        small = [t for t in tiles if t["split_m"] == arr["cores"] and t["compute"] > t["dram_read"]]
        if small:
            t = max(small, key=lambda t: t["compute"] / t["dram_read"])
            fixed = min((u for u in tiles if (u["m"], u["k"], u["n"], u["bits"]) == (t["m"], t["k"], t["n"], t["bits"])),
                        key=lambda u: u["cycles"])
            out.append(f"**Small matrices on many cores**: splitting a {t['m']} x {t['k']} matrix's output features "
                       f"over {arr['cores']} cores leaves {t['tile'][0]} per core, and each fold then pays the "
                       f"array's fill and drain: compute {t['compute']:.0f} cycles against a DRAM read of "
                       f"{t['dram_read']:.0f} ({t['compute'] / t['dram_read']:.1f}x, {t['bits']} bits/value). "
                       f"Splitting the reduction dimension too ({fixed['split_m']} x {fixed['split_k']} cores, "
                       "partial sums added on chip and not priced) brings that GEMM to "
                       f"{fixed['cycles'] / (t['cycles']):.2f} of its output-split time; the mapping takes the "
                       "fastest split. What stays array-bound is the remainder of SmolLM2's draft step.")
    if square:
        sq = [s for s in square["steps"] if s["device"] == "npu" and "scalesim_s" in s and s["model"] != "smollm2-135m"]
        if sq:
            d = max(s["scalesim_vs_roofline_pct"]["draft"] for s in sq)
            sp = [r for r in square["rows"] if r["device"] == "npu" and r["model"] != "smollm2-135m"
                  and r.get("speedup_scalesim")]
            arr = square["inputs"]["npu_array"]
            bpc = arr["dram_bytes_per_cycle_per_core"]
            draft_bits = square["inputs"]["bits"]["weights_draft"]
            out.append(f"**Where the roofline is wrong: the array's edge.** The same NPU as one {arr['rows']}x"
                       f"{arr['cols']} array (`{square.get('command', '')}`): a 1-row pass streams at most "
                       f"{arr['rows']} weights per cycle into it, while the draft stream delivers "
                       f"{bpc * 8 / draft_bits:.0f} values per cycle ({bpc:.0f} B/cycle at {draft_bits} bits/value). "
                       f"SCALE-Sim's draft step of the paper sizes is up to {d:.0f} % slower than the roofline and "
                       f"the speedup falls to {min(r['speedup_scalesim'] for r in sp):.2f}–"
                       f"{max(r['speedup_scalesim'] for r in sp):.2f}x. The roofline's FLOPs / peak term assumes the "
                       "whole array is usable at M = 1; it is only if the arrays' edges add up to the stream's "
                       "values per cycle (sizing rule: cores x edge x clock >= bandwidth x 8 / draft bits). The "
                       "presets carry no array geometry, so the roofline is left as it is and the rule is stated "
                       "for the NPU tile.")
    lo, hi = res["inputs"]["paper_speedups"]
    paper = [r for r in rows if r["model"] != "smollm2-135m"]
    ps = [v for s in steps if s["model"] != "smollm2-135m" for v in s["roofline_s"].values()]
    if paper:
        g = res["inputs"]["gamma"]
        bits = res["inputs"]["bits"]
        d, v = bits["weights_draft"] / 16, bits["weights_full"] / 16
        out.append(f"**The paper's {lo}–{hi}x**: read as per-token alpha, "
                   f"{min(r['acceptance'] for r in paper):.2f}–{max(r['acceptance'] for r in paper):.2f} gives the "
                   f"paper sizes {min(r['speedup_roofline'] for r in paper):.2f}–"
                   f"{max(r['speedup_roofline'] for r in paper):.2f}x at gamma {g} on every device (all three tools "
                   f"agree; the per-pass overhead hardly matters at 4–8B, a pass taking {1e3 * min(ps):.0f}–"
                   f"{1e3 * max(ps):.0f} ms). Read as accepted / drafted tokens (this project's `acceptance`), the "
                   f"same range means alpha {min(r['alpha_if_rate'] for r in paper):.3f}–"
                   f"{max(r['alpha_if_rate'] for r in paper):.3f} and {min(r['speedup_roofline_if_rate'] for r in paper):.2f}–"
                   f"{max(r['speedup_roofline_if_rate'] for r in paper):.2f}x (dash-dot in the plot): the paper's "
                   "range lies between the two readings. What bounds both is the draft's size: with SmolLM2's "
                   f"streams the draft reads {d:.0%} of bf16's bytes and the verify pass {v:.0%}, so even alpha = 1 "
                   f"gives at most {(g + 1) / (g * d + v):.2f}x at gamma {g} (weights only). The paper's own "
                   "bits/value, gamma and acceptance definition for its 4–8B models are not in this project's "
                   "data; its points are shown as a band, not per acceptance.")
    out.append("Neither tool can express the decoder's throughput cap (left unlimited everywhere, the roofline's "
               "default) nor the decoder's split format as such: GenZ gets bytes per value by tensor kind, "
               "SCALE-Sim a DRAM port that moves more values per cycle.")
    return "\n".join(f"- {x}" for x in out) + "\n"
