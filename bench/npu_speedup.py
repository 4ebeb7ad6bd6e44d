"""The speedup measured in NPU tile cycles on the held-out prompts (docs/NPU.md "Speedup measured in cycles").

    python bench/npu_speedup.py [--prompts N] [--max-new-tokens T] [--out build/npu/speedup] [--json]

For each held-out prompt (model/prompts_heldout.py): greedy speculative decoding with the Cassandra draft under
the tile's numerics (`--numerics npu`), checked token for token against plain greedy decoding under the same
numerics (the lossless claim with the weights read once per pass); the run's passes timed with the Verilated
tile's measured cycles on the run's own artifact (tb/npu/speedup.py; measured first if not cached: `cassandra-rtl
npu --all`), beside model/metrics.py for the same tile. Writes speedup.json, speedup.md and speedup.png.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def generate_runs(n_prompts: int, max_new: int, gamma: int | None, out: Path, progress=print) -> dict:
    """The held-out runs under the tile's numerics (speculative and plain), saved to OUT/runs.json."""
    from cassandra_rtl.model.api import load
    from cassandra_rtl.model.prompts_heldout import HELDOUT

    m = load(None, numerics="npu", say=lambda s: progress(s))
    cass = m.load_info.path
    g = gamma or m.gamma
    rows = []
    for k, (cat, prompt) in enumerate(HELDOUT[:n_prompts]):
        t0 = time.perf_counter()
        ids = m.encode_prompt(prompt, None, False)
        spec = m.generate(ids, max_new, temperature=0.0, gamma=g)
        ri = m.last_inputs
        plain = m.generate(ids, max_new, temperature=0.0, speculative=False)
        lossless = spec.tokens == plain.tokens
        rows.append({"prompt": k, "category": cat, "tokens": len(spec.tokens), "lossless": lossless,
                     "acceptance": spec.metrics.get("acceptance_rate"), "ri": ri.to_json(),
                     "tokens_per_step": spec.metrics.get("tokens_per_step"), "seconds": time.perf_counter() - t0})
        progress(f"[npu-speedup] prompt {k + 1}/{n_prompts} ({cat}): {len(spec.tokens)} tokens, "
                 f"lossless {lossless}, {time.perf_counter() - t0:.0f} s")
    runs = {"artifact": str(cass), "gamma": g, "max_new_tokens": max_new, "prompts": rows,
            "command": f"python bench/npu_speedup.py --prompts {n_prompts} --max-new-tokens {max_new}"
                       + (f" --gamma {gamma}" if gamma else "")}
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps(runs))
    return runs


def compose_runs(runs: dict, out: Path, progress=print) -> dict:
    """Time the saved runs with the tile's measurement of their artifact (measured first if not cached)."""
    from cassandra_rtl.model.metrics import RunInputs
    from cassandra_rtl.tb.npu.speedup import DEFAULT_CLOCK_HZ, DEFAULT_CLOCK_SOURCE, compose, measurement_for

    cass, rows = runs["artifact"], [dict(r) for r in runs["prompts"]]
    inputs = []
    meas = dict(measurement_for(cass, progress=lambda d, t: progress(f"[npu-speedup] measuring the tile: {d}/{t}")))
    meas["clock_hz"], meas["clock_source"] = DEFAULT_CLOCK_HZ, DEFAULT_CLOCK_SOURCE
    for r in rows:
        ri = RunInputs.from_json(r.pop("ri"))
        inputs.append(ri)
        c = compose(ri, meas)
        r.update(speedup_measured=c["speedup_measured"], speedup_modeled=c["speedup_modeled"],
                 measured_bytes_fraction=c["measured_bytes_fraction"], per_token_us=c["per_token_us"])
    pooled = compose(inputs, meas)
    mean = lambda k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    res = {"artifact": str(cass), "gamma": runs["gamma"], "max_new_tokens": runs["max_new_tokens"], "prompts": rows,
           "all_lossless": all(r["lossless"] for r in rows),
           "mean_speedup_measured": mean("speedup_measured"), "mean_speedup_modeled": mean("speedup_modeled"),
           "pooled": {k: pooled[k] for k in ("speedup_measured", "speedup_modeled", "measured_bytes_fraction",
                                             "decode_s_measured", "decode_s_modeled", "bf16_ar_decode_s_measured",
                                             "bf16_ar_decode_s_modeled", "per_token_us", "by_pass_kind", "parts",
                                             "tile", "modeled_decoder_cap")},
           "measurement": {k: meas[k] for k in ("passes", "tensors", "batch_invariant")},
           "command": runs["command"]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "speedup.json").write_text(json.dumps(res, indent=1))
    (out / "speedup.md").write_text(markdown(res))
    plot(res, out / "speedup.png")
    return res


def markdown(res: dict) -> str:
    p = res["pooled"]
    lines = [f"Measured with `{res['command']}` (tile: {p['tile']['instances']} x {p['tile']['decoder']}, "
             f"{p['tile']['data_bytes']} B/cycle, {p['tile']['tiles_for_npu_bandwidth']:.1f} tiles for the NPU "
             f"preset's {p['tile']['npu_bandwidth_gbps']:.1f} GB/s; {p['tile']['overhead_us']:.0f} us per pass).", "",
             "| prompt | category | tokens | acceptance | lossless | speedup measured | modeled | measured bytes |",
             "|---:|---|---:|---:|---|---:|---:|---:|"]
    for r in res["prompts"]:
        lines.append(f"| {r['prompt']} | {r['category']} | {r['tokens']} | {r['acceptance']:.3f} | {r['lossless']} | "
                     f"{r['speedup_measured']:.3f}x | {r['speedup_modeled']:.3f}x | {r['measured_bytes_fraction']:.3f} |")
    lines += ["", f"Mean over prompts: measured {res['mean_speedup_measured']:.3f}x, modeled "
                  f"{res['mean_speedup_modeled']:.3f}x; pooled: measured {p['speedup_measured']:.3f}x, modeled "
                  f"{p['speedup_modeled']:.3f}x ({p['speedup_measured'] / p['speedup_modeled'] - 1:+.1%}); "
                  f"every run token-identical to plain greedy: {res['all_lossless']}."]
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    bk = res["pooled"]["by_pass_kind"]
    ntok = sum(r["tokens"] for r in res["prompts"])
    labels = {"bf16_ar:bf16": "bf16 AR", "run:draft": "Cassandra draft", "run:target": "Cassandra verify"}
    ar = bk.get("bf16_ar:bf16", {}).get("time", 0) / ntok * 1e6
    dr = bk.get("run:draft", {}).get("time", 0) / ntok * 1e6
    vf = bk.get("run:target", {}).get("time", 0) / ntok * 1e6
    a.bar(["bf16 AR"], [ar], color="tab:gray", label=labels["bf16_ar:bf16"])
    a.bar(["Cassandra"], [dr], color="tab:blue", label=labels["run:draft"])
    a.bar(["Cassandra"], [vf], bottom=[dr], color="tab:orange", label=labels["run:target"])
    a.set_ylabel("us per generated token")
    a.set_title("NPU preset: time per token by pass kind")
    a.legend()
    xs = [r["prompt"] for r in res["prompts"]]
    b.plot(xs, [r["speedup_modeled"] for r in res["prompts"]], "o--", label="modeled (model/metrics.py)")
    b.plot(xs, [r["speedup_measured"] for r in res["prompts"]], "s-", label="measured (tile cycles)")
    b.set_xlabel("held-out prompt")
    b.set_ylabel("speedup over bf16 AR")
    b.set_title("modeled vs simulated")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=6, help="held-out prompts (1..12)")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--gamma", type=int, default=None, help="draft length (default: the model's)")
    ap.add_argument("--out", type=Path, default=Path("build/npu/speedup"))
    ap.add_argument("--runs-only", action="store_true", help="generate and save OUT/runs.json, do not time them")
    ap.add_argument("--from-runs", action="store_true", help="time the runs saved in OUT/runs.json (no generation)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not 1 <= a.prompts <= 12 or a.max_new_tokens < 2:
        print("npu_speedup: --prompts must be 1..12 and --max-new-tokens >= 2", file=sys.stderr)
        return 2
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    if a.from_runs:
        if not (a.out / "runs.json").exists():
            print(f"npu_speedup: {a.out / 'runs.json'} does not exist (run without --from-runs first)", file=sys.stderr)
            return 2
        runs = json.loads((a.out / "runs.json").read_text())
    else:
        runs = generate_runs(a.prompts, a.max_new_tokens, a.gamma, a.out, progress=say)
    if a.runs_only:
        print(f"saved {len(runs['prompts'])} runs to {a.out / 'runs.json'}")
        return 0 if all(r["lossless"] for r in runs["prompts"]) else 1
    res = compose_runs(runs, a.out, progress=say)
    print(json.dumps(res) if a.json else markdown(res))
    return 0 if res["all_lossless"] else 1


if __name__ == "__main__":
    sys.exit(main())
