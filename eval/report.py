"""Regenerate the evaluation report: `python eval/report.py --out docs/report [--quick]` (`make report`).

Writes OUT/report.md and PNG plots (matplotlib, Agg):
  1. entropy.png    exponent entropy vs our code vs rank-unary vs Huffman per tensor type (+ KV cache)
  2. acceptance.png acceptance vs draft compression ratio: pruning / truncation / both, baselines marked
  3. memory.png     footprint vs context; longest context within a budget (SmolLM2, an 8B-class config)
  4. speedup.png    modeled speedup (RTX 4090 / Jetson AGX Orin / NPU) next to the paper's 1.78-2.41x
  5. hardware.png   area per block / lane, NPU overhead, co-simulation throughput (when present)
Measurements are cached as JSON lines under --cache (default build/report/), keyed by what produced
them (model, config, prompt, tokens), so reruns only compute what is missing.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import glob
import json
import os
import shlex
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import report_acceptance as acc  # noqa: E402
import report_crosscheck  # noqa: E402
import report_entropy as ent  # noqa: E402
import report_hw as rhw  # noqa: E402
import report_memory as mem  # noqa: E402
import report_npu  # noqa: E402
from report_lib import PROMPTS, JsonlCache, Progress, env_summary, load_checkpoint  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/report", help="output folder (report.md + PNGs)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny smoke run: 2 prompts x 12 tokens, 3 configs, a handful of tensors")
    ap.add_argument("--model", default=None, help=".gguf or HF folder (default: the bundled SmolLM2)")
    ap.add_argument("--cache", default=None, help="cache folder (default build/report, or build/report/quick)")
    ap.add_argument("--prompts", type=int, default=None, help=f"first N of the {len(PROMPTS)} built-in prompts")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--configs", default=None, help="comma-separated subset of the sweep's config names")
    ap.add_argument("--kv-prompts", type=int, default=None, help="prompts whose K/V are captured (entropy)")
    ap.add_argument("--kv-tokens", type=int, default=None, help="greedy tokens generated before the K/V capture")
    ap.add_argument("--draft-fraction", type=float, default=0.05, help="trained-draft size / target size")
    ap.add_argument("--budget-small-gib", type=float, default=0.5, help="memory budget for the bundled model")
    ap.add_argument("--budget-8b-gib", type=float, default=24.0, help="memory budget for the 8B-class config")
    ap.add_argument("--synth-report", default="build/synth/report.json")
    ap.add_argument("--fpga", default="build/fpga/report.json",
                    help="the ECP5 report for section 5 (cells it lacks are carried from the previous rendering)")
    ap.add_argument("--formal", action="append", default=None, metavar="REPORT",
                    help="formal report(s) for section 5 (repeatable; default build/formal/report.json)")
    ap.add_argument("--cosim-json", action="append", default=[], help="saved `cassandra-rtl cosim --json` output")
    ap.add_argument("--cosim-values", type=int, default=None, help="run cosim on this many values (if available)")
    ap.add_argument("--no-cosim", action="store_true", help="never run `cassandra-rtl cosim`, only read results")
    ap.add_argument("--tuned-config", default=None,
                    help="a saved draft config (cassandra-rtl tune --out) to run in the sweep; default: found under "
                         "build/ or model/ when present (not in --quick)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--sections", choices=["all", "hardware", "overhead", "crosscheck", "npu", "cosim"], default="all",
                    help="hardware: re-render only section 5's synthesis part from the flows' reports (seconds); "
                         "overhead: only section 5's overhead subsection (the ECP5 and formal parts kept); "
                         "crosscheck: only section 4's cross-check against GenZ / SCALE-Sim from "
                         "build/crosscheck/crosscheck.json (python bench/crosscheck.py); npu: only section 6, "
                         "the NPU tile measured in cycles (cassandra-rtl npu --all, python bench/npu_speedup.py); "
                         "cosim: only section 5's co-simulation table (cassandra-rtl cosim on build/demo/smollm2.cass)")
    a = ap.parse_args(argv)
    q = a.quick
    a.prompts = a.prompts or (2 if q else len(PROMPTS))
    a.max_new_tokens = a.max_new_tokens or (12 if q else 32)
    a.kv_prompts = a.kv_prompts or (1 if q else 4)
    a.kv_tokens = a.kv_tokens or (1 if q else 32)
    a.cosim_values = a.cosim_values if a.cosim_values is not None else (0 if q else 2_000_000)
    a.cache = Path(a.cache or ("build/report/quick" if q else "build/report"))
    return a


def command_line(argv) -> str:
    return "python eval/report.py " + " ".join(shlex.quote(x) for x in argv)


def find_tuned(root: Path) -> tuple[list[dict], list[str]]:
    """Saved draft-selection results (model/tune.py), if any: points with an acceptance and a draft ratio."""
    pats = ["build/tune/**/*.json", "build/tune/**/*.jsonl", "build/tune*.json", "build/tune*.jsonl",
            "build/draft_selection/**/*.json", "build/draft_selection/**/*.jsonl", "build/frontier*.json*"]
    files = sorted({f for p in pats for f in glob.glob(str(root / p), recursive=True)})
    pts, used = [], []

    def take(rec, src):
        if not isinstance(rec, dict):
            return
        a = next((rec[k] for k in ("acceptance_rate", "acceptance", "agreement") if isinstance(rec.get(k), (int, float))),
                 None)
        r = next((rec[k] for k in ("draft_ratio", "draft_bytes_ratio", "weight_ratio", "compression_ratio", "draft_frac")
                  if isinstance(rec.get(k), (int, float))), None)
        if r is None and isinstance(rec.get("draft_weight_bytes"), (int, float)) \
                and isinstance(rec.get("bf16_weight_bytes"), (int, float)) and rec["bf16_weight_bytes"]:
            r = rec["draft_weight_bytes"] / rec["bf16_weight_bytes"]
        if a is not None and r is not None:
            sp = rec.get("modeled_speedup") or rec.get("speedup")
            pts.append({"acceptance": float(a), "ratio": float(r), "name": rec.get("name") or rec.get("label") or rec.get("config"),
                        "proxy": "agreement" in rec and "acceptance_rate" not in rec and "acceptance" not in rec,
                        "speedup": sp.get("orin") if isinstance(sp, dict) else (sp if isinstance(sp, (int, float)) else None),
                        "speedup_by_hw": sp if isinstance(sp, dict) else None, "source": src})

    for f in files:
        rel = os.path.relpath(f, root)
        n0 = len(pts)
        try:
            text = Path(f).read_text()
            if f.endswith(".jsonl"):
                for line in text.splitlines():
                    try:
                        take(json.loads(line), rel)
                    except json.JSONDecodeError:
                        pass
            else:
                d = json.loads(text)
                for rec in (d if isinstance(d, list) else d.get("frontier") or d.get("points") or d.get("results") or [d]
                            if isinstance(d, dict) else []):
                    take(rec, rel)
        except (OSError, json.JSONDecodeError, AttributeError):
            continue
        if len(pts) > n0:
            used.append(rel)
    return pareto_points(pts), used


def pareto_points(pts: list[dict]) -> list[dict]:
    """The points no other point beats on both draft ratio (lower) and acceptance (higher); n_rows = all rows."""
    out, best = [], -1.0
    for p in sorted(pts, key=lambda p: (p["ratio"], -p["acceptance"])):
        if p["acceptance"] > best:
            out.append(dict(p, n_rows=len(pts)))
            best = p["acceptance"]
    return out


def find_tuned_config(root: Path, model_name: str = "") -> Path | None:
    """The project's saved draft config for this model (\"format\": \"cassandra-draft-config\"): the committed
    model/allocations/*.json first (the one named after the model if several), else none. Experiment files
    under build/ are only used when passed explicitly with --tuned-config."""
    cands = []
    for f in sorted(glob.glob(str(root / "model/allocations/*.json"))):
        try:
            d = json.loads(Path(f).read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(d, dict) and d.get("format") == "cassandra-draft-config":
            cands.append(Path(f))
    stem = model_name.lower().split(".")[0]
    named = [c for c in cands if c.stem.lower() and c.stem.lower() in stem]
    return (named or cands or [None])[0]


def fmt(x, spec=".3f", none="—"):
    return none if x is None else format(x, spec)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if a.sections == "hardware":
        return splice_hardware(a)
    if a.sections == "overhead":
        return splice_overhead(a)
    if a.sections == "crosscheck":
        return splice_crosscheck(a)
    if a.sections == "npu":
        return splice_npu(a)
    if a.sections == "cosim":
        return splice_cosim(a)
    import torch

    torch.set_num_threads(a.threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = JsonlCache(a.cache / "measurements.jsonl")
    cmd = command_line(argv)
    prog = Progress(6, quiet=a.quiet)
    t_start = time.perf_counter()
    timings = {}
    started = _dt.datetime.now(_dt.timezone.utc)

    # ---------------------------------------------------------------------------------------- model
    prog.stage("loading the model")
    t0 = time.perf_counter()
    ck, ident, model_path = load_checkpoint(a.model)
    tok = ck.tokenizer
    model_name = f"{ident['name']} ({ck.args.arch}, {ck.args.n_layers} layers, dim {ck.args.dim})"
    prompts_all = [(f"[{d}] {t}", tok.encode(tok.apply_chat(t))) for d, t in PROMPTS]
    prompts = prompts_all[: a.prompts]
    timings["load"] = time.perf_counter() - t0
    figs = {}

    # ---------------------------------------------------------------------------------------- entropy
    prog.stage("entropy: real encodes of the weights and of captured K/V")
    t0 = time.perf_counter()
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.kv import kv_config

    wcfg = CodecConfig(scheme="c1", group_size=128, keep_ratio=1.0, mantissa_bits=3)
    kvcfg = kv_config(ck.args.head_dim, scheme="c1", mantissa_bits=3, keep_ratio=1.0)
    wrows = ent.encode_weights(ck, ident, wcfg, a.quick, cache, prog)
    kvrows = ent.capture_kv(ck, ident, prompts_all[: a.kv_prompts], a.kv_tokens, kvcfg, cache, prog)
    agg = ent.aggregate_by_type(list(wrows.values()) + kvrows)
    all_w = list(wrows.values())
    n_w = sum(r["values"] for r in all_w)
    w_bits = sum(r["bits_per_value"]["total"] * r["values"] for r in all_w) / n_w
    w_spec_bits = sum(r["bits_per_value"]["speculation"] * r["values"] for r in all_w) / n_w
    n_kv = sum(r["values"] for r in kvrows)
    kv_bits = sum(r["bits_per_value"]["total"] * r["values"] for r in kvrows) / n_kv
    kv_spec_bits = sum(r["bits_per_value"]["speculation"] * r["values"] for r in kvrows) / n_kv
    formula_ok = all(r.get("draft_formula_ok", True) for r in all_w)
    ent_cfg = (f"C1, G=128, keep 1.0, m=3 (weights: {len(all_w)} tensors, {n_w:,} values"
               + (", quick subset" if a.quick else "") + f"); KV: G=head_dim={ck.args.head_dim}, books calibrated on "
               f"the prompt's K/V per layer and K/V, {a.kv_prompts} prompt(s) + {a.kv_tokens} greedy token(s)")
    figs["entropy"] = ent.plot(agg, out, "entropy.png", {"command": cmd, "model": model_name, "config": ent_cfg})
    timings["entropy"] = time.perf_counter() - t0

    # ---------------------------------------------------------------------------------------- acceptance
    prog.stage(f"acceptance sweep: {a.prompts} prompts x {a.max_new_tokens} tokens, gamma {a.gamma}")
    t0 = time.perf_counter()
    configs = dict(acc.QUICK_CONFIGS if a.quick else acc.FULL_CONFIGS)
    if a.configs:
        keep = set(a.configs.split(",")) | {"none"}
        unknown = keep - set(acc.FULL_CONFIGS) - set(acc.QUICK_CONFIGS) - {"tuned"}
        if unknown:
            print(f"report: unknown configs {sorted(unknown)}", file=sys.stderr)
            return 2
        configs = {k: v for k, v in {**acc.FULL_CONFIGS, **acc.QUICK_CONFIGS}.items() if k in keep}
    tuned_cfg = Path(a.tuned_config) if a.tuned_config else (None if a.quick else find_tuned_config(ROOT, ident["name"]))
    if tuned_cfg is not None:
        import hashlib

        digest = hashlib.sha256(tuned_cfg.read_bytes()).hexdigest()[:16] if tuned_cfg.is_file() else "missing"
        rel = os.path.relpath(tuned_cfg, ROOT)
        configs["tuned"] = ("tuned", "tuned", {"path": str(tuned_cfg), "file": rel, "sha256": digest})
        prog.log(f"  tuned draft config: {rel} (sha256 {digest})")
    sweep = acc.Sweep(ck, ident, prompts, a.max_new_tokens, a.gamma, cache, prog, a.quick,
                      entropy_rows=wrows if not a.quick else None)
    runs = sweep.run(configs)
    summ = acc.summarize(runs)
    tuned, tuned_files = find_tuned(ROOT)
    acc_cfg = (f"greedy, gamma={a.gamma} fixed, {a.prompts} prompts x {a.max_new_tokens} new tokens "
               f"(domains: {', '.join(sorted({d for d, _ in PROMPTS[: a.prompts]}))}); C1, G=128, magnitude salience; "
               f"draft KV view keep 1.0, m=3; layer-skip by greedy search on built-in calibration texts")
    figs["acceptance"] = acc.plot(summ, tuned, out, "acceptance.png",
                                  {"command": cmd, "model": model_name, "config": acc_cfg})
    timings["acceptance"] = time.perf_counter() - t0

    # ---------------------------------------------------------------------------------------- memory
    prog.stage("memory footprint vs context")
    small = mem.model_shape(ck, ident["name"], model_path)
    memres = mem.analyse([(small, a.budget_small_gib), (mem.LLAMA8B, a.budget_8b_gib)], w_bits, kv_bits,
                         a.draft_fraction)
    mem_cfg = (f"measured lossless bits/value: weights {w_bits:.3f} (2-D, C1 G=128), KV {kv_bits:.3f}; 1-D weights "
               f"bf16; trained draft = +{100 * a.draft_fraction:g}% weights and KV; budgets {a.budget_small_gib:g} GiB "
               f"/ {a.budget_8b_gib:g} GiB; 8B-class = Llama-3.1-8B shape with SmolLM2's bits/value")
    figs["memory"] = mem.plot(memres, w_bits, kv_bits, a.draft_fraction, out, "memory.png",
                              {"command": cmd, "model": model_name + " and " + mem.LLAMA8B["name"], "config": mem_cfg})

    # ---------------------------------------------------------------------------------------- speedup
    prog.stage("modeled speedup")
    from cassandra_rtl.model.metrics import hardware_presets

    presets = hardware_presets()
    entries = rhw.speedup_entries(summ, tuned, acc.DEFAULT_CASSANDRA)
    hw_desc = "; ".join(f"{h.name}: {h.bandwidth / 1e9:g} GB/s, {h.flops / 1e12:g} TFLOP/s" for h in presets.values())
    sp_cfg = acc_cfg + "; performance model of docs/MODEL.md: " + hw_desc
    figs["speedup"] = rhw.plot_speedup(entries, out, "speedup.png", {"command": cmd, "model": model_name,
                                                                     "config": sp_cfg}) if entries else None

    # ---------------------------------------------------------------------------------------- hardware
    prog.stage("hardware: synthesis and co-simulation results")
    synth_path = ROOT / a.synth_report if not Path(a.synth_report).is_absolute() else Path(a.synth_report)
    srep = rhw.read_synth(synth_path)
    blocks = rhw.synth_blocks(srep) if srep else []
    overhead = (srep or {}).get("npu_overhead_percent") or {}
    cosim = rhw.read_cosim_files([*a.cosim_json, a.cache / "cosim.json"])
    cosim_note = None
    if not cosim and not a.no_cosim and a.cosim_values > 0:
        if rhw.cosim_available():
            cass = Path("build/demo/smollm2.cass")
            if (ROOT / cass).is_file():
                cosim = rhw.run_cosim(cass, a.cosim_values, log=prog.log)
                if any("error" not in c for c in cosim):
                    (a.cache / "cosim.json").write_text(json.dumps(cosim, indent=1))
            else:
                cosim_note = "not run: no container at build/demo/smollm2.cass (run `make demo` first)"
        else:
            cosim_note = "not run: `cassandra-rtl cosim` is not available in this checkout"
    elif not cosim:
        cosim_note = "not run (" + ("--no-cosim" if a.no_cosim else "--quick") + ")"
    good_cosim = [c for c in cosim if "error" not in c]
    hw_cfg = f"synthesis: {os.path.relpath(synth_path, ROOT)}" + (
        f" ({(srep.get('flow') or {}).get('command', '')}, library {(srep.get('flow') or {}).get('library', '?')})"
        if srep else " (missing)") + "; cosim: " + (
        ("cassandra-rtl cosim build/demo/smollm2.cass --config {" + ",".join(sorted({str(c.get("config")) for c in good_cosim}))
         + "} --mode {" + ",".join(sorted({str(c.get("mode")) for c in good_cosim})) + "} --max-values "
         + ",".join(sorted({str(c.get("values")) for c in good_cosim})) + " --jobs 1 --json") if good_cosim
        else (cosim_note or "errors"))
    figs["hardware"] = rhw.plot_hw(blocks, overhead, good_cosim, out, "hardware.png",
                                   {"command": cmd, "model": "RTL blocks (hw/)", "config": hw_cfg}) \
        if (blocks or good_cosim) else None

    timings["total"] = time.perf_counter() - t_start
    results = {
        "command": cmd, "started_utc": started.isoformat(timespec="seconds"), "model": model_name,
        "ident": ident, "env": env_summary(), "timings_s": timings, "entropy": agg,
        "bits": {"weights_total": w_bits, "weights_spec": w_spec_bits, "kv_total": kv_bits, "kv_spec": kv_spec_bits},
        "acceptance": summ, "memory": memres, "speedup_entries": entries, "synth_blocks": blocks,
        "npu_overhead_percent": overhead, "cosim": cosim, "tuned": tuned, "tuned_files": tuned_files,
        "draft_formula_ok": formula_ok, "sweep_errors": sweep.errors,
    }
    a.cache.mkdir(parents=True, exist_ok=True)
    (a.cache / "results.json").write_text(json.dumps(results, indent=1, default=str))
    md = render_markdown(a, results, figs, ck, srep, synth_path, cosim_note, ent_cfg, acc_cfg, mem_cfg, sp_cfg,
                         hw_cfg, presets)
    (out / "report.md").write_text(md)
    prog.log(f"wrote {out / 'report.md'} and {len([f for f in figs.values() if f])} PNGs "
             f"in {timings['total']:.0f}s")
    return 0


# ------------------------------------------------------------------------------------------------ markdown
def render_markdown(a, R, figs, ck, srep, synth_path, cosim_note, ent_cfg, acc_cfg, mem_cfg, sp_cfg, hw_cfg,
                    presets) -> str:
    L = []
    w = L.append
    quick = " (**--quick smoke run: tiny sample, not the measurement**)" if a.quick else ""
    w(f"# Cassandra evaluation report{quick}\n")
    w(f"Generated by `{R['command']}` (`make report`) on {R['started_utc']} in {R['timings_s']['total']:.0f} s; "
      f"never edited by hand. Model: **{R['model']}** ({R['ident']['name']}, dequantized from its GGUF and rounded "
      f"to bf16 with round-to-nearest-even: the exponent statistics are those of that bf16 model). Environment: "
      f"Python {R['env']['python']}, torch {R['env']['torch']}, {R['env']['threads']} thread(s), CPU only. "
      f"Measurements are cached in `{a.cache}/measurements.jsonl` (keyed by model, config, prompt and tokens); "
      f"raw numbers of this run: `{a.cache}/results.json`.\n")
    w(f"Scale of this run: {a.prompts} prompt(s) x {a.max_new_tokens} new tokens per config, gamma = {a.gamma}, "
      f"{len(R['acceptance'])} configs; K/V captured from {a.kv_prompts} prompt(s) + {a.kv_tokens} token(s). "
      "The scale was chosen to finish within about 40 minutes on a shared 2-core CPU (the row-exact verify path "
      "costs CPU compute); a longer run: `python eval/report.py --out docs/report --max-new-tokens 64` "
      "(only the missing points are computed).\n")
    w("Contents: [1 entropy](#1-exponent-entropy-vs-code-length) · [2 acceptance](#2-acceptance-vs-draft-compression) · "
      "[3 memory](#3-memory-footprint-vs-context) · [4 speedup](#4-modeled-speedup) · [5 hardware](#5-hardware) · "
      "[what is not covered](#what-this-report-does-not-cover)\n")

    # 1 ------------------------------------------------------------------------------------------
    ag = R["entropy"]
    w("## 1. Exponent entropy vs code length\n")
    w(f"![entropy]({figs['entropy']})\n")
    w(f"*Command* `{R['command']}` · *model* {R['model']} · *config* {ent_cfg}.\n")
    w("Per tensor type: the Shannon entropy of the bf16 exponent field (per tensor, value-weighted mean: the "
      "bound for per-tensor codebooks), the average Huffman code length with a per-tensor Huffman code, the bits "
      "per value of our C1 exponent code planes measured from the real encoded streams (rank-unary with a 15-symbol "
      "cap and an 8-bit escape, byte-aligned superblock chunks; indexes excluded), and plain rank-unary without "
      "cap or escape (the paper's code). KV rows code K and V vectors with codebooks fixed at the prompt's "
      "prefill, so generated tokens' rare exponents are escaped.\n")
    w("| type | tensors | values | entropy | Huffman | **our code** | rank-unary | code − entropy | lossless total b/v | draft (spec) b/v |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t, r in ag.items():
        w(f"| {t} | {r['tensors']} | {r['values']:,} | {r['entropy']:.3f} | {r['huffman']:.3f} | **{r['code']:.3f}** | "
          f"{r['unary_rank']:.3f} | {r['code'] - r['entropy']:+.3f} | {r['total_bits']:.3f} | {r['spec_bits']:.3f} |")
    wt = [r for t, r in ag.items() if not t.startswith("kv.")]
    if wt:
        nv = sum(r["values"] for r in wt)
        d_un = sum((r["code"] - r["unary_rank"]) * r["values"] for r in wt) / nv
        d_en = sum((r["code"] - r["entropy"]) * r["values"] for r in wt) / nv
        d_hu = sum((r["code"] - r["huffman"]) * r["values"] for r in wt) / nv
        w(f"\nOn the weights our code is {d_en:+.3f} b/v from the entropy, {d_hu:+.3f} from Huffman and {d_un:+.3f} "
          "from plain rank-unary: rank-unary's own gap (the unary code length is a poor fit for a geometric-ish "
          "histogram's second and third ranks) plus the byte alignment of every superblock's chunk (on average "
          "about half a byte per 128 values, ~0.03 b/v) and escapes of rare exponents — the price of decoding by "
          "counting zeros with random access per superblock.")
    b = R["bits"]
    w(f"\nAll 2-D weights: lossless total **{b['weights_total']:.3f} bits/value** "
      f"({100 * b['weights_total'] / 16:.1f}% of bf16; draft stream at m=3: {b['weights_spec']:.3f} b/v); KV cache: "
      f"**{b['kv_total']:.3f} bits/value** lossless, {b['kv_spec']:.3f} b/v draft view. "
      f"The draft-view formula used by the sweep (FORMAT.md §2.1) was checked bit-equal to `decode_draft` on every "
      f"tensor encoded here: {'yes' if R['draft_formula_ok'] else '**NO**'}.\n")

    # 2 ------------------------------------------------------------------------------------------
    S = R["acceptance"]
    w("## 2. Acceptance vs draft compression\n")
    w(f"![acceptance]({figs['acceptance']})\n")
    w(f"*Command* `{R['command']}` · *model* {R['model']} · *config* {acc_cfg}.\n")
    w("Draft compression ratio = the draft's weight bytes per pass / bf16 weight bytes per pass, from the real "
      "speculation-stream sizes (codes + sign/mantissa planes + indexes) of every 2-D weight; layer-skip = bf16 "
      "bytes of the kept layers; n-gram reads no weights (ratio 0). Acceptance = accepted / drafted tokens; "
      "alpha = accepted / draft tokens the verifier reached; lossless = token-identical to plain greedy decoding. "
      "Speedups are modeled from bytes moved (docs/MODEL.md), not measured on this CPU; \"speculation alone\" = "
      "the same run vs autoregressive decoding that reads the target's own representation (for Cassandra: the "
      "lossless format), i.e. the gain of drafting without the compression gain. Token match = fraction of "
      "generated tokens equal to plain bf16 greedy decoding position by position (INT8 is lossy).\n")
    hws = list(presets)
    w("| config | family | ratio | acceptance | alpha | tokens/step | bytes/token vs bf16 | " +
      " | ".join(f"speedup {presets[h].name}" for h in hws) + " | = format (Orin) | x speculation (Orin) | lossless | "
      "token match |")
    w("|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(hws) + "---:|---:|---|---:|")
    order = sorted(S, key=lambda k: ({"reference": 0, "baseline": 1, "mantissa": 2, "prune": 3, "both": 4,
                                      "tuned": 5}[S[k]["family"]],
                                     -S[k]["weight_ratio"]))
    for k in order:
        s = S[k]
        extra = f" (skip {s['skip_layers']})" if s.get("skip_layers") else ""
        w(f"| {k}{extra} | {s['family']} | {s['weight_ratio']:.3f} | {fmt(s['acceptance'])} | {fmt(s['alpha'])} | "
          f"{fmt(s['tokens_per_step'], '.2f')} | {s['bytes_ratio']:.3f} | " +
          " | ".join(f"{s['speedup'][h]:.2f}x" for h in hws) +
          f" | {fmt(format_split(s)[0], '.2f')} | {fmt(format_split(s)[1], '.2f')}"
          f" | {s['lossless']} | {fmt(s['token_match'], '.3f')} |")
    tuned_rows = [k for k, v in S.items() if v["family"] == "tuned"]
    if tuned_rows:
        o = S[tuned_rows[0]]["options"]
        w(f"\n`tuned` = the saved draft-selection config `{o.get('file')}` (sha256 {o.get('sha256')}: per-tensor keep "
          f"ratio / mantissa bits / scheme, its salience and KV view, from `cassandra-rtl tune`), encoded for real and "
          f"run in this harness on these prompts at gamma = {a.gamma} like every other point (the config itself "
          f"recommends gamma = {S[tuned_rows[0]].get('tuned_gamma', '?')}); black X in the plot.\n")
    elif R["sweep_errors"].get("tuned"):
        w(f"\nThe saved tuned draft config could not be run: {R['sweep_errors']['tuned']}.\n")
    else:
        w("\nNo saved draft-selection config (`cassandra-rtl tune --out`) was found: tuned draft not run.\n")
    if R["tuned"]:
        proxy = any(t.get("proxy") for t in R["tuned"])
        w(f"Grey crosses: the Pareto frontier ({len(R['tuned'])} of {R['tuned'][0]['n_rows']} rows) of the rows saved "
          f"by the draft-selection work ({', '.join(R['tuned_files'])}: "
          "activation-aware salience and per-tensor allocation candidates); their y value is "
          + ("that tool's teacher-forced top-1 agreement with the target (its acceptance proxy)" if proxy else
             "that tool's own acceptance figure") + " on its own held-apart prompts, and their speedup its own "
          "estimate — not measurements of this sweep.\n")
    w(findings_acceptance(S))

    # 3 ------------------------------------------------------------------------------------------
    w("## 3. Memory footprint vs context\n")
    w(f"![memory]({figs['memory']})\n")
    w(f"*Command* `{R['command']}` · *model* {R['model']} and {mem.LLAMA8B['name']} · *config* {mem_cfg}.\n")
    w("Cassandra needs no memory beyond its lossless encoding: the draft reads a subset (the speculation "
      "streams) of the same bytes. A trained draft (EAGLE/Medusa-style) adds its own network and KV cache on top "
      f"of bf16 (here {100 * a.draft_fraction:g}% of the target, `--draft-fraction`). GiB = 2^30 bytes.\n")
    for res in R["memory"]:
        m = res["model"]
        w(f"**{m['name']}** ({m['params_2d'] + m['params_1d']:,} parameters, {m['n_layers']} layers, "
          f"{m['n_kv_heads']} KV heads x {m['head_dim']}; budget {res['budget_gib']:g} GiB; trained context "
          f"{m['max_context']:,}):\n")
        w("| scheme | weights (GiB) | KV bytes / token | longest context in budget | vs bf16 |")
        w("|---|---:|---:|---:|---:|")
        for r in res["rows"]:
            w(f"| {r['scheme']} | {r['fixed_gib']:.3f} | {r['kv_bytes_per_token']:,.0f} | {r['max_context']:,} | "
              f"{fmt(r['vs_bf16'], '.2f')}x |")
        w("")
    w("The 8B-class figures apply SmolLM2's measured bits/value to a Llama-3.1-8B shape (no 8B checkpoint is "
      "available offline); larger models' exponent histograms are usually as concentrated, but that is an "
      "assumption, not a measurement.\n")

    # 4 ------------------------------------------------------------------------------------------
    w("## 4. Modeled speedup\n")
    if figs["speedup"]:
        w(f"![speedup]({figs['speedup']})\n")
        w(f"*Command* `{R['command']}` · *model* {R['model']} · *config* {sp_cfg}.\n")
        w("| method | " + " | ".join(presets[h].name for h in hws) + " |")
        w("|---|" + "---:|" * len(hws))
        for name, sp in R["speedup_entries"]:
            w(f"| {name.replace(chr(10), ' ')} | " + " | ".join(f"{sp[h]:.2f}x" for h in hws if h in sp) + " |")
        w("\nThe paper reports 1.78–2.41x on 4–8B models on its own hardware; these are modeled figures for a "
          "135M model (time per pass = max(bytes / bandwidth, FLOPs / peak) + a fixed per-pass overhead "
          "(" + ", ".join(f"{presets[h].name} {presets[h].overhead_s * 1e6:g} µs" for h in hws) + "), summed over "
          "the run's passes, vs plain bf16 autoregressive decoding of the same tokens; batch-invariant verify, "
          "decoder unlimited). Every pass of this model is memory-bound on the three devices; the overhead is what "
          "makes them differ (it weighs most where a pass is shortest: the 4090). Each speedup = format x "
          "speculation (§2's table): the target reading the lossless format instead of bf16, times what drafting "
          "adds on top. The full performance model v2 (decoder throughput cap, row-exact verify, KV writes, "
          "prefill) and the held-out prompt set: `python -m cassandra_rtl.model.bench` (docs/MODEL.md). INT8 is "
          "lossy (token match vs bf16 in §2's table); the speculative methods are lossless.\n")
        w(heldout_section())
        w(long_context_section(Path(a.out), R['command']))
        w(report_crosscheck.render(Path(a.out), R['command']))
    else:
        w("Not run (no sweep results).\n")

    # 5 ------------------------------------------------------------------------------------------
    w("## 5. Hardware\n")
    if figs["hardware"]:
        w(f"![hardware]({figs['hardware']})\n")
        w(f"*Command* `{R['command']}` · *model* RTL blocks · *config* {hw_cfg}.\n")
    old_md = Path(a.out) / "report.md"
    hw_md = hardware_section(synth_path, Path(a.out), R['command'], a.formal,
                             previous=old_md.read_text() if old_md.exists() else "", fpga=a.fpga)
    w(hw_md if hw_md else f"Synthesis: **not run** (`{os.path.relpath(synth_path, ROOT)}` not found; run `make synth`).\n")
    w(cosim_part(R["cosim"], a.cache, cosim_note))

    # limits -------------------------------------------------------------------------------------
    w(report_npu.render(Path(a.out), R['command']))
    w("## What this report does not cover\n")
    lim = [
        f"Scale: {a.prompts} prompts x {a.max_new_tokens} tokens per config on a shared 2-core CPU; acceptance "
        "rates carry a sampling error of a few points at this size.",
        "Speedups are modeled from bytes moved and FLOPs, not measured on the devices; CPU tokens/s is "
        "meaningless here (the CPU is compute-bound and the row-exact verify path costs compute).",
        "The sweep itself uses magnitude salience and uniform per-model configs with the draft's KV view fixed at "
        "keep 1.0 / m = 3 and gamma fixed at " + str(a.gamma) + " (no adaptive gamma); activation-aware salience and "
        "per-tensor allocation enter only through the draft-selection work's saved config" +
        (" (run here as `tuned`)" if any(v["family"] == "tuned" for v in R["acceptance"].values()) else
         " (none found)") + (" and its saved search rows (overlaid, not re-measured)." if R["tuned"] else "."),
        "The 8B-class memory figure reuses SmolLM2's bits/value (no 8B checkpoint offline).",
    ]
    good = [c for c in R["cosim"] if "error" not in c]
    if not good:
        lim.append("Co-simulation throughput was not available for this run.")
    if not srep or not {"decoder", "encoder"} <= {bl["kind"] for bl in R["synth_blocks"]}:
        lim.append("Decoder/encoder synthesis results were incomplete or missing in build/synth/report.json.")
    elif srep:
        names = {bl["block"] for bl in R["synth_blocks"]}
        miss = [n for n in ("decoder_c1v3_l8", "decoder_c2v3_l8", "encoder_kv_c1_l2") if n not in names]
        if miss:
            lim.append(f"Synthesis of {', '.join(miss)} was not in build/synth/report.json when this ran; the NPU "
                       "overhead uses whatever decoder/encoder the synthesis flow had.")
    lim.append("Co-simulation covers the first 2 M values of the demo container per run (the bulk Verilator "
               "path); the whole model runs with `make sim-full`.") if good else None
    for x in lim:
        w(f"- {x}")
    w("")
    return "\n".join(L)


def hardware_section(synth_path: Path, out: Path, command: str, formal=None, previous: str = "",
                     fpga: str = "build/fpga/report.json") -> str | None:
    """Section 5's synthesis part: every flow's blocks relative to its PE, v2 -> v3, the overhead per
    device, the proofs (eval/report_hardware.py, also `make report-hw`)."""
    import report_hardware

    return report_hardware.render(out, str(synth_path), level=3, command=command,
                                  formal=formal or ["build/formal/report.json"], previous=previous, fpga=fpga)


COSIM_HEADING = "Co-simulation (RTL decoder vs golden decode):"
COSIM_NOT_RUN = "Co-simulation throughput: **not run**"


def cosim_part(cosim: list[dict], cache, note: str | None = None) -> str:
    """Section 5's co-simulation table (`cassandra-rtl cosim` results), or one line saying why it is absent."""
    good = [c for c in cosim if "error" not in c]
    if not good:
        errs = [c for c in cosim if "error" in c]
        return (COSIM_NOT_RUN + (f" — {note}" if note else "") +
                "".join(f"\n- `{c.get('command')}`: {c['error']}" for c in errs) + "\n")
    lines = [COSIM_HEADING + "\n",
             "| command | decoder config | simulator / engine | mode | values | mismatches | values / cycle | values / s |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    for c in good:
        lines.append(f"| `{c.get('command', c.get('source', '?'))}` | {c.get('config', '?')} | {c.get('simulator', '?')} / "
                     f"{c.get('engine', '?')} | {c.get('mode', '?')} | {c.get('values', 0):,} | "
                     f"{c.get('mismatches', '?')} | {c.get('values_per_cycle', '—')} | "
                     f"{fmt(c.get('values_per_second'), ',.0f')} |")
    lines.append(f"\nThe container is `build/demo/smollm2.cass` (`make demo`: the bundled SmolLM2 at the default "
                 f"config); values/s is wall-clock throughput of the compiled Verilator harness on this shared CPU, "
                 f"measured after a warm-up run that builds it (it includes framing and comparison); values/cycle is "
                 f"the decoder's own rate. Results are cached in `{cache}/cosim.json`; delete it to re-run.\n")
    return "\n".join(lines) + "\n"


def splice_cosim(a) -> int:
    """`--sections cosim`: section 5's co-simulation table, `cassandra-rtl cosim` run again on the demo container
    (eval/report_hw.py COSIM_CONFIGS, draft and full), the rest of the report as it was."""
    import report_hw as rhw

    md_path = Path(a.out) / "report.md"
    text = md_path.read_text() if md_path.exists() else ""
    start = text.find(COSIM_HEADING)
    start = start if start >= 0 else text.find(COSIM_NOT_RUN)
    end = text.find("\n## 6.", start)
    cass = ROOT / "build" / "demo" / "smollm2.cass"
    if start < 0 or end < 0 or not cass.exists():
        print(f"report: error: --sections cosim needs {md_path} with section 5's co-simulation part and {cass} "
              "(run `make demo`)", file=sys.stderr)
        return 2
    cosim = rhw.run_cosim(cass.relative_to(ROOT), a.cosim_values or 2_000_000,      # run in ROOT, named as in the table
                          log=lambda *x: print(*x, file=sys.stderr))
    if not any("error" not in c for c in cosim):
        print("report: error: every cosim run failed (" + "; ".join(f"{c.get('command')}: {c.get('error')}"
              for c in cosim)[:300] + "); report.md kept as it was", file=sys.stderr)
        return 1
    a.cache.mkdir(parents=True, exist_ok=True)
    (a.cache / "cosim.json").write_text(json.dumps(cosim, indent=1))
    md_path.write_text(text[:start] + cosim_part(cosim, a.cache) + text[end:])
    print(f"rewrote section 5's co-simulation table of {md_path}")
    return 0


def splice_hardware(a) -> int:
    """`--sections hardware`: re-render only section 5's synthesis part into the existing report.md (the
    other sections keep the measurements and commands they were generated with; so does the co-simulation
    table of section 5)."""
    md_path = Path(a.out) / "report.md"
    text = md_path.read_text() if md_path.exists() else ""
    start, cos = text.find("## 5. Hardware\n"), text.find("Co-simulation", text.find("## 5. Hardware\n") + 1)
    inputs = "".join(f" --formal {f}" for f in a.formal or []) + (
        f" --fpga {a.fpga}" if a.fpga != "build/fpga/report.json" else "")
    body = hardware_section(Path(a.synth_report), Path(a.out), f"python eval/report.py --out {a.out} --sections hardware"
                            + inputs, a.formal, previous=text[start:cos] if start >= 0 else "", fpga=a.fpga)
    if start < 0 or cos < 0 or body is None:
        print(f"report: error: --sections hardware needs {md_path} with a section 5 and "
              f"{a.synth_report} (run `make synth`)", file=sys.stderr)
        return 2
    stamp = f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
    new = (f"## 5. Hardware\n\n*Re-rendered {stamp} by* `python eval/report.py --out {a.out} --sections hardware{inputs}` "
           "*from the flows' current reports; the co-simulation table below is from its own run (the last full run or "
           "`--sections cosim`).*\n\n" + body + "\n")
    md_path.write_text(text[:start] + new + text[cos:])
    print(f"rewrote section 5 of {md_path}")
    return 0


def splice_overhead(a) -> int:
    """`--sections overhead`: re-render only section 5's overhead subsection from the flows' reports (synth,
    gated, real library), the rest of the report as it was."""
    import report_hardware

    md_path = Path(a.out) / "report.md"
    text = md_path.read_text() if md_path.exists() else ""
    new = report_hardware.splice_overhead(text, 3, str(a.synth_report), None, "build/synth-cg/report.json",
                                          f"python eval/report.py --out {a.out} --sections overhead")
    if new is None:
        print(f"report: error: --sections overhead needs {md_path} with section 5's overhead subsection and "
              f"{a.synth_report} (run `make synth`)", file=sys.stderr)
        return 2
    md_path.write_text(new)
    print(f"rewrote section 5's overhead subsection of {md_path}")
    return 0


def _splice(a, section: str, module, before: str, where: str, what: str) -> int:
    """Render ``module``'s part (its HEADING) into the existing report.md, replacing an earlier copy, else just
    before the line ``before``; nothing else changes."""
    md_path = Path(a.out) / "report.md"
    text = md_path.read_text() if md_path.exists() else ""
    end = text.find(before)
    if end < 0:
        print(f"report: error: --sections {section} needs {md_path} with {where}", file=sys.stderr)
        return 2
    start = text.find(module.HEADING)
    start = end if start < 0 or start > end else start
    body = module.render(Path(a.out), f"python eval/report.py --out {a.out} --sections {section}")
    md_path.write_text(text[:start] + body + "\n" + text[end:])
    print(f"wrote {what} of {md_path}")
    return 0


def splice_crosscheck(a) -> int:
    """`--sections crosscheck`: section 4's cross-check subsection from build/crosscheck/crosscheck.json, just
    before section 5."""
    return _splice(a, "crosscheck", report_crosscheck, "## 5. Hardware\n", "a section 5", "the cross-check subsection")


def splice_npu(a) -> int:
    """`--sections npu`: section 6, the NPU tile measured in cycles (eval/report_npu.py), just before "What this
    report does not cover"."""
    return _splice(a, "npu", report_npu, "## What this report does not cover", "its closing section",
                   "the NPU tile section")


def format_split(s) -> tuple[float | None, float | None]:
    """(format speedup, speculation speedup) on Orin of a summary row: total = format x speculation."""
    spec = (s.get("speedup_vs_target_ar") or {}).get("orin")
    tot = (s.get("speedup") or {}).get("orin")
    if s.get("draft") == "none" or spec is None or not tot:
        return (1.0, 1.0) if s.get("draft") == "none" else (None, None)
    return tot / spec, spec


def heldout_section(path: str = "build/heldout/heldout.jsonl") -> str:
    """The held-out prompt benchmark (model/bench.py), recomputed from its JSON lines, if it was run."""
    p = ROOT / path
    if not p.exists():
        return (f"Held-out prompts: not run here (`python -m cassandra_rtl.model.bench --out {path}`; "
                "docs/MODEL.md).\n")
    from cassandra_rtl.model import bench
    from cassandra_rtl.model.metrics import hardware_presets

    runs: dict = {}
    for line in p.read_text().splitlines():
        if '"model_inputs"' in line:
            r = json.loads(line)
            runs.setdefault(r["config"], []).append(r)
    n = max(len(v) for v in runs.values())
    rows = [bench.aggregate(k, v, hardware_presets()) for k, v in runs.items() if len(v) == n]
    return (f"\n### Held-out prompts ({n} prompts: chat, code, math, translation, summarisation, reasoning)\n\n"
            f"*Command* `python -m cassandra_rtl.model.bench --table {path}` (per-prompt JSON lines with the "
            "model's inputs; the tables are recomputed from them).\n\n" + bench.markdown(rows) + "\n")


def long_context_section(out: Path, command: str, path: str = "build/long_context/lc.jsonl",
                         png: str = "docs/figures/long_context.png") -> str:
    """Acceptance and modeled speedup vs context length (bench/long_context.py), if it was run."""
    p = ROOT / path
    if not p.exists():
        return (f"Long context: not run here (`python bench/long_context.py --kv-exact --out {path}`; "
                "docs/MODEL.md).\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("long_context", ROOT / "bench" / "long_context.py")
    lc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lc)
    files = [p] + ([ROOT / "build/long_context/proxy.jsonl"] if (ROOT / "build/long_context/proxy.jsonl").exists() else [])
    rows, proxy = lc.load_rows(files), lc.load_rows(files, "proxy")
    fig = ""
    if (ROOT / png).exists():
        # beside the report's other figures, so the link holds for any --out (and a copied report folder)
        import shutil
        out.mkdir(parents=True, exist_ok=True)
        if (ROOT / png).resolve() != (out / "long_context.png").resolve():
            shutil.copyfile(ROOT / png, out / "long_context.png")
        fig = (f"![long context](long_context.png)\n\n*Command* `{command}` (the figure copied from `python "
               f"bench/long_context.py --table {path} --plot {png}`).\n\n")
    return ("\n### Long context (reasoning-style decode after long prompts)\n\n" + fig +
            f"*Command* `python bench/long_context.py --table {path} --plot {png}` (greedy, tuned draft, "
            "batch-invariant speedup with the format x speculation split, and row-exact).\n\n" + lc.table(rows) + "\n"
            + ("\nTeacher-forced draft/target top-1 agreement on the document itself (`--proxy`):\n\n"
               + lc.proxy_table(proxy) + "\n" if proxy else ""))


def findings_acceptance(S) -> str:
    lines = []
    cass = {k: v for k, v in S.items() if v["draft"] in ("cassandra", "tuned") and v["acceptance"] is not None}
    if cass:
        best = max(cass, key=lambda k: cass[k]["speedup"].get("orin", 0))
        b = cass[best]
        lines.append(f"Best Cassandra point (uniform configs and the tuned config) by modeled speedup: **{best}** — ratio {b['weight_ratio']:.3f}, "
                     f"acceptance {b['acceptance']:.3f}, {b['tokens_per_step']:.2f} tokens/step, "
                     f"{b['speedup'].get('orin', 0):.2f}x modeled on Jetson AGX Orin.")
    for k, v in S.items():
        if v["draft"] in ("layerskip", "ngram") and v["acceptance"] is not None:
            lines.append(f"{k}: acceptance {v['acceptance']:.3f} at ratio {v['weight_ratio']:.3f}, "
                         f"{v['speedup'].get('orin', 0):.2f}x modeled.")
    i8 = [v for v in S.values() if v["draft"] == "int8"]
    if i8 and cass:
        v = i8[0]
        b = cass[max(cass, key=lambda k: cass[k]["speedup"].get("orin", 0))]
        cmp_ = "above" if v["speedup"].get("orin", 0) > b["speedup"].get("orin", 0) else "below"
        lines.append(f"INT8 weight-only (lossy, autoregressive) models {v['speedup'].get('orin', 0):.2f}x — {cmp_} the "
                     f"best lossless Cassandra point here — with a token match of {fmt(v['token_match'], '.3f')} "
                     "against bf16 greedy decoding.")
    bad = [k for k, v in S.items() if v["lossless"] not in ("n/a",) and v["lossless"].split("/")[0] != v["lossless"].split("/")[1]]
    lines.append("Every speculative run was token-identical to plain greedy decoding." if not bad else
                 f"**Not lossless**: {', '.join(bad)}.")
    return "\n".join(f"- {x}" for x in lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
