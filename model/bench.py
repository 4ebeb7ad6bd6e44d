"""Benchmark drafts on a model: `python -m cassandra_rtl.model.bench [--configs ...] [--out FILE]`.

For every prompt, plain greedy decoding is the reference; every speculative config must reproduce it
token for token (reported as `lossless`). Prints one JSON line per (config, prompt) to --out and a table.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .loader import load
from .metrics import accumulate_run
from .runner import DraftOptions, build, set_threads

PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List three fruits that are red.",
    "How do I reverse a list in Python?",
    "What is 12 times 7?",
)

CONFIGS = {
    "none": ("none", {}),
    "int8": ("int8", {}),
    "ngram": ("ngram", {}),
    "layerskip6": ("layerskip", {"n_skip": 6}),
    "layerskip4": ("layerskip", {"n_skip": 4}),
    "layerskip_auto": ("layerskip", {"n_skip": 0}),
    **{f"c_k1.0_m{m}": ("cassandra", {"keep_ratio": 1.0, "mantissa_bits": m, "kv_mantissa_bits": 3})
       for m in (1, 2, 3, 4)},
    **{f"c_k{k}_m{m}": ("cassandra", {"keep_ratio": k, "mantissa_bits": m, "kv_mantissa_bits": 3})
       for k, m in ((0.75, 3), (0.5, 3), (0.5, 4))},
    "c_k1.0_m3_kv2": ("cassandra", {"keep_ratio": 1.0, "mantissa_bits": 3, "kv_mantissa_bits": 2}),
    "c_k1.0_m3_adaptive": ("cassandra", {"keep_ratio": 1.0, "mantissa_bits": 3, "kv_mantissa_bits": 3,
                                         "adaptive": True}),
    **{f"c_k1.0_m{m}_g{g}": ("cassandra", {"keep_ratio": 1.0, "mantissa_bits": m, "kv_mantissa_bits": 3, "gamma": g})
       for m in (1, 2, 3) for g in (2, 3, 6)},
}


def markdown(rows: list[dict]) -> str:
    """A markdown table of summary rows (as printed / written by main)."""
    lines = ["| config | lossless (greedy) | token match | acceptance | alpha | per position | tokens/step | "
             "draft MB | MB read/token | modeled speedup 4090 / Orin / NPU | of which speculation (Orin) | CPU tok/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = lambda v, fmt="{:.3f}": "-" if v is None else fmt.format(v)  # noqa: E731
        sp = r["speedup"]
        dmb = r.get("draft_weight_bytes")
        spec_only = (r.get("speedup_vs_target_ar") or {}).get("orin")
        if spec_only is None and r.get("target_weight_bytes"):  # rows from before that field: weights-only estimate
            spec_only = sp["orin"] * r["target_weight_bytes"] / r["bf16_weight_bytes"]
        elif spec_only is None:
            spec_only = sp["orin"] if r["config"] not in ("int8",) else 1.0
        lines.append(
            f"| {r['config']} | {r['lossless']} | {r['token_match']:.2f} | {f(r['acceptance'])} | {f(r.get('alpha'))} | "
            f"{' '.join(f'{x:.2f}' for x in r['per_position']) or '-'} | {f(r['tokens_per_step'], '{:.2f}')} | "
            f"{f(dmb / 1e6 if dmb else None, '{:.1f}')} | {r['MB_per_token']:.1f} | "
            f"{sp['rtx4090']:.2f}x / {sp['orin']:.2f}x / {sp['npu']:.2f}x | {spec_only:.2f}x | {f(r['cpu_tok_s'], '{:.2f}')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--configs", default="all", help="comma-separated names from: " + ", ".join(CONFIGS))
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help="use the first N built-in prompts")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="append JSON lines here")
    ap.add_argument("--cache", default=None, help="keep encoded drafts (.cass) in this folder between configs/runs")
    ap.add_argument("--table", nargs="+", default=None, help="only render a markdown table from these JSONL files")
    a = ap.parse_args(argv)
    if a.table:
        rows = []
        for fn in a.table:
            with open(fn) as fh:
                rows += [json.loads(x)["summary"] for x in fh if '"summary"' in x]
        print(markdown(rows))
        return 0
    set_threads(a.threads)
    names = list(CONFIGS) if a.configs == "all" else a.configs.split(",")
    ck = load(a.model)
    tok = ck.tokenizer
    prompts = [tok.encode(tok.apply_chat(p)) for p in PROMPTS[: a.prompts]]
    ref_eng, _, _ = build(ck, "none", DraftOptions())
    refs = [ref_eng.generate(p, a.max_new_tokens).tokens for p in prompts]
    out = open(a.out, "a") if a.out else None
    rows = []
    for name in names:
        draft, kw = CONFIGS[name]
        t0 = time.perf_counter()
        o = DraftOptions(**{"gamma": a.gamma, "cache_dir": a.cache, **kw})
        eng, d, _ = build(ck, draft, o)
        build_s = time.perf_counter() - t0
        agg = {"drafted": 0, "accepted": 0, "steps": 0, "step_tokens": 0, "gen": 0, "bytes": 0, "base": 0,
               "time": {}, "btime": {}, "ttime": {}, "lossless": 0, "match": 0, "decode_s": 0.0,
               "pos_drafted": [], "pos_accepted": []}
        for i, (p, ref) in enumerate(zip(prompts, refs)):
            r = eng.generate(p, a.max_new_tokens, drafter=d, gamma=o.gamma, adaptive=o.adaptive)
            s = r.summary()
            s.update(config=name, prompt=PROMPTS[i], lossless=r.tokens == ref, build_s=build_s)
            if out:
                out.write(json.dumps(s) + "\n")
                out.flush()
            st = r.stats
            accumulate_run(agg, r, ref)
            agg["decode_s"] += st.decode_s
            agg["match"] += sum(x == y for x, y in zip(r.tokens, ref))
        row = {
            "config": name,
            "lossless": f"{agg['lossless']}/{len(prompts)}",
            "token_match": agg["match"] / max(1, sum(len(r) for r in refs)),
            "acceptance": agg["accepted"] / agg["drafted"] if agg["drafted"] else None,
            "alpha": sum(agg["pos_accepted"]) / sum(agg["pos_drafted"]) if sum(agg["pos_drafted"]) else None,
            "per_position": [x / y if y else 0 for x, y in zip(agg["pos_accepted"], agg["pos_drafted"])],
            "tokens_per_step": agg["step_tokens"] / agg["steps"] if agg["steps"] else None,
            "MB_per_token": agg["bytes"] / agg["gen"] / 1e6,
            "bf16_MB_per_token": agg["base"] / agg["gen"] / 1e6,
            "speedup": {k: agg["btime"][k] / agg["time"][k] for k in agg["time"]},
            # speculation alone: over autoregressive decoding that reads the target's own representation
            # (for Cassandra: the format's spec + verif streams, a lossless compression of bf16)
            "speedup_vs_target_ar": {k: agg["ttime"][k] / agg["time"][k] for k in agg["time"]},
            "cpu_tok_s": (agg["gen"] - len(prompts)) / agg["decode_s"] if agg["decode_s"] else None,
            "build_s": build_s,
            "gamma": o.gamma,
            "adaptive": o.adaptive,
            **(d.describe() if d is not None else {}),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out:
            out.write(json.dumps({"summary": row}) + "\n")
            out.flush()
    print()
    print(f"{'config':<22}{'lossless':>9}{'match':>7}{'accept':>8}{'alpha':>7}{'tok/step':>9}{'MB/tok':>8}"
          f"{'4090':>7}{'Orin':>7}{'NPU':>7}{'cpu t/s':>8}")
    for r in rows:
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.3f}"
        tps = "-" if r["tokens_per_step"] is None else f"{r['tokens_per_step']:.2f}"
        sp = r["speedup"]
        al = "-" if r["alpha"] is None else f"{r['alpha']:.3f}"
        print(f"{r['config']:<22}{r['lossless']:>9}{r['token_match']:>7.2f}{acc:>8}{al:>7}{tps:>9}{r['MB_per_token']:>8.1f}"
              f"{sp['rtx4090']:>7.2f}{sp['orin']:>7.2f}{sp['npu']:>7.2f}{r['cpu_tok_s'] or 0:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
