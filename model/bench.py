"""Benchmark drafts on a model: `python -m cassandra_rtl.model.bench [--configs ...] [--out FILE]`.

For every prompt, plain greedy decoding is the reference; every speculative config must reproduce it
token for token (reported as `lossless`). Prompts: the held-out set (model/prompts_heldout.py: chat, code,
math, translation, summarisation, reasoning — never used by calibration or the draft search) by default,
or the old built-in set (`--prompt-set bench`). Every (config, prompt) JSON line carries the performance
model v2 (metrics.evaluate) and its inputs, including the passes, so `--table` recomputes every figure for
other devices, overheads or decoder caps without decoding again.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time

from .metrics import (CPU_NOTE, VERIFY_MODES, RunInputs, evaluate, hardware_presets, model_summary,
                      spread)
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
       for m in (1, 2, 3) for g in (1, 2, 3, 6)},
    # the tuned allocation of the bundled model (model/allocations/, docs/DRAFT_SELECTION.md) at several gammas
    **{f"tuned_g{g}": ("tuned", {"gamma": g}) for g in (1, 2, 3, 4)},
    "tuned_adaptive": ("tuned", {"gamma": 2, "adaptive": True}),
    # any <base>[_conf<T>|_hf]_g<G> name is also accepted (resolve_config)
}


_NAME = re.compile(r"^(?P<base>.+?)(?:_(?:conf(?P<t>0\.\d+)|(?P<hf>hf)))?_g(?P<g>\d+)$")
_UNIFORM = re.compile(r"^c_k(?P<k>[0-9.]+)_m(?P<m>[0-7])(?:_kv(?P<kv>[0-7]))?$")


def resolve_config(name: str, allocs: dict | None = None) -> tuple[str, dict]:
    """(draft, DraftOptions kwargs) of a config name: one of CONFIGS, or ``<base>[_conf<T>|_hf]_g<G>`` with
    ``<base>`` = ``tuned`` (the bundled allocation), a name given by ``--alloc NAME=FILE``, or a uniform
    Cassandra draft ``c_k<keep>_m<M>[_kv<M>]``; ``_conf<T>``: the confidence schedule with threshold T and cap G,
    ``_hf``: HF's +2/-1 from G, none: fixed gamma G."""
    if name in CONFIGS:
        return CONFIGS[name]
    from cassandra_rtl.errors import ConfigError

    m = _NAME.match(name)
    if m:
        kw = {"gamma": int(m["g"])}
        if m["t"]:
            kw["adaptive"] = f"confidence:{m['t']}"
        elif m["hf"]:
            kw["adaptive"] = True
        base = m["base"]
        if base == "tuned":
            return "tuned", kw
        if allocs and base in allocs:
            return f"alloc:{base}", kw
        u = _UNIFORM.match(base)
        if u:
            return "cassandra", {"keep_ratio": float(u["k"]), "mantissa_bits": int(u["m"]),
                                 "kv_mantissa_bits": int(u["kv"] or 3), **kw}
    raise ConfigError(f"unknown config {name!r}; known: {', '.join(CONFIGS)}, or <base>[_conf<T>|_hf]_g<G> with "
                      f"base tuned, c_k<K>_m<M>[_kv<M>] or an --alloc name")


def prompt_set(name: str) -> list[str]:
    if name == "bench":
        return list(PROMPTS)
    if name == "heldout":
        from .prompts_heldout import prompts

        return prompts()
    if name == "tune":  # the draft search's own evaluation prompts (for screening, never for reported figures)
        from .tune import EVAL_PROMPTS

        return list(EVAL_PROMPTS)
    from cassandra_rtl.errors import ConfigError

    raise ConfigError(f"unknown prompt set {name!r} (heldout, bench or tune)")


def _engine(ck, draft, o, cache, allocs=None):
    """(engine, drafter); an allocation (the bundled ``tuned`` one or an ``--alloc`` file) is encoded once and
    shared by its gamma / schedule variants, a uniform Cassandra draft likewise."""
    if draft == "tuned" or draft.startswith("alloc:"):
        if draft not in cache:
            from .allocation import Allocation, build_engine

            path = "bundled" if draft == "tuned" else allocs[draft.split(":", 1)[1]]
            eng, d, _ = build_engine(ck, Allocation.load(path))
            cache[draft] = (eng, d)
        return cache[draft]
    if draft == "cassandra":
        key = ("cassandra", o.keep_ratio, o.mantissa_bits, o.kv_mantissa_bits, o.kv_keep_ratio, o.scheme)
        if key not in cache:
            eng, d, _ = build(ck, draft, o)
            cache[key] = (eng, d)
        return cache[key]
    eng, d, _ = build(ck, draft, o)
    return eng, d


def presets_from(a):
    ov = None
    if a.overhead_us:
        parts = [x for x in a.overhead_us.split(",") if x]
        if len(parts) == 1 and "=" not in parts[0]:
            ov = float(parts[0])
        else:
            ov = {k: float(v) for k, v in (x.split("=") for x in parts)}
    return hardware_presets(ov, a.synth_report, a.decoder)


def aggregate(name: str, runs: list[dict], presets) -> dict:
    """A summary row over per-prompt JSON lines (as written to --out) of one config, recomputing the model."""
    inputs = [RunInputs.from_json(r["model_inputs"]) for r in runs if isinstance(r["model_inputs"]["passes"], list)]
    ev = evaluate(inputs, presets) if inputs else None
    per_prompt = [evaluate(i, presets) for i in inputs]
    dr = sum(r["drafted"] for r in runs)
    ac = sum(r["accepted"] for r in runs)
    pd = [sum(r["drafted_at"][j] for r in runs if j < len(r["drafted_at"])) for j in
          range(max([len(r["drafted_at"]) for r in runs] + [0]))]
    pa = [sum(r["accepted_at"][j] for r in runs if j < len(r["accepted_at"])) for j in range(len(pd))]
    steps = sum(r["verify_steps"] for r in runs)
    gen = sum(r["generated"] for r in runs)
    ref_s = sum(r["reference_decode_s"] for r in runs)
    run_s = sum(r["decode_s"] for r in runs)
    row = {
        "config": name, "prompts": len(runs), "lossless": f"{sum(bool(r['lossless']) for r in runs)}/{len(runs)}",
        "token_match": sum(r["token_match"] for r in runs) / max(1, len(runs)),
        "acceptance": ac / dr if dr else None, "alpha": sum(pa) / sum(pd) if sum(pd) else None,
        "per_position": [x / y if y else 0.0 for x, y in zip(pa, pd)],
        "tokens_per_step": sum(r["tokens_per_step"] * r["verify_steps"] for r in runs if r["tokens_per_step"])
        / steps if steps else None,
        "gamma": runs[0].get("gamma"), "adaptive": runs[0].get("adaptive"),
        "draft_per_step": dr / steps if steps and dr else None,  # draft passes per verify step (< gamma when adaptive)
        "MB_per_token": sum(r["bytes_per_token"] * r["generated"] for r in runs) / max(1, gen) / 1e6,
        "draft_weight_bytes": runs[0].get("draft_weight_bytes"),
        "bf16_weight_bytes": runs[0].get("bf16_weight_bytes"),
        "cpu_tok_s": (gen - len(runs)) / run_s if run_s else None,
        "cpu_speedup": ref_s / run_s if run_s else None,
        "cpu_speedup_per_prompt": spread([r["reference_decode_s"] / r["decode_s"] for r in runs if r["decode_s"]]),
        "cpu_note": CPU_NOTE,
    }
    if ev:
        row["performance_model"] = ev
        row["per_prompt"] = {k: {m: {w: spread([p["by_device"][k][m][w] for p in per_prompt])
                                     for w in ("speedup", "format_speedup", "speculation_speedup")}
                                 for m in VERIFY_MODES} for k in presets}
    return row


def oracle(runs: dict[str, list[dict]], names: list[str], presets, mode: str = "batch-invariant") -> dict:
    """The best of ``names`` chosen per prompt *afterwards* (an oracle no schedule can beat by switching between
    those configs per prompt): per device the pooled speedup of the per-prompt fastest config, and how often each
    config won. Prompts are matched by text; every config must have run the same prompts."""
    by_prompt: dict[str, dict[str, dict]] = {}
    for n in names:
        for r in runs[n]:
            by_prompt.setdefault(r["prompt"], {})[n] = r
    out = {}
    for k in presets:
        t_bf = t_best = 0.0
        wins: dict[str, int] = {}
        for prompt, rs in by_prompt.items():
            if len(rs) != len(names):
                continue
            ev = {n: evaluate(RunInputs.from_json(r["model_inputs"]), {k: presets[k]})["by_device"][k][mode]
                  for n, r in rs.items()}
            best = min(ev, key=lambda n: ev[n]["decode_s"])
            wins[best] = wins.get(best, 0) + 1
            t_bf += ev[best]["bf16_ar_decode_s"]
            t_best += ev[best]["decode_s"]
        out[k] = {"speedup": t_bf / t_best if t_best else None, "wins": wins}
    return out


def _x(v):
    return "-" if v is None else f"{v:.2f}x"


def markdown(rows: list[dict], mode: str = "batch-invariant") -> str:
    """Markdown tables of summary rows: pooled figures, and per device the per-prompt spread of the corrected
    modeled speedup with its format x speculation split (verify ``mode``), both modes' pooled totals."""
    f = lambda v, fmt="{:.3f}": "-" if v is None else fmt.format(v)  # noqa: E731
    out = ["| config | lossless | acceptance | alpha | tokens/step | gamma | drafts/step | draft % of bf16 | "
           "MB read/token | CPU tok/s | CPU speedup (measured) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        frac = (r["draft_weight_bytes"] / r["bf16_weight_bytes"] * 100) if r.get("draft_weight_bytes") else None
        ad = r.get("adaptive")
        g = (f"{r['gamma']}{'' if not ad else ' hf' if ad is True else ' ' + str(ad)}"
             if r.get("acceptance") is not None else "-")
        out.append(f"| {r['config']} | {r['lossless']} | {f(r['acceptance'])} | {f(r['alpha'])} | "
                   f"{f(r['tokens_per_step'], '{:.2f}')} | {g} | {f(r.get('draft_per_step'), '{:.2f}')} | "
                   f"{f(frac, '{:.1f}')} | {r['MB_per_token']:.1f} | "
                   f"{f(r['cpu_tok_s'], '{:.2f}')} | {_x(r.get('cpu_speedup'))} |")
    devs = list((rows[0].get("performance_model") or {}).get("by_device", {})) if rows else []
    for k in devs:
        d0 = rows[0]["performance_model"]["devices"][k]
        dv = rows[0]["performance_model"]["by_device"][k]
        out += ["", f"**{d0['name']}** ({d0['bandwidth'] / 1e9:g} GB/s, {d0['flops'] / 1e12:g} TFLOPS, "
                    f"{dv['overhead_us']:g} us/pass, decoder: {dv['decoder']}); verify {mode}; per prompt min / "
                    f"median / max", "",
                "| config | speedup pooled | per prompt | = format | x speculation (pooled) | speculation per prompt | "
                "row-exact pooled | batch-invariant pooled |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            pm = r.get("performance_model")
            if not pm:
                continue
            b = pm["by_device"][k]
            pp = r["per_prompt"][k][mode]
            sp, ss = pp["speedup"], pp["speculation_speedup"]
            out.append(f"| {r['config']} | **{_x(b[mode]['speedup'])}** | {_x(sp['min'])} / {_x(sp['median'])} / "
                       f"{_x(sp['max'])} | {_x(b[mode]['format_speedup'])} | {_x(b[mode]['speculation_speedup'])} | "
                       f"{_x(ss['min'])} / {_x(ss['median'])} / {_x(ss['max'])} | {_x(b['row-exact']['speedup'])} | "
                       f"{_x(b['batch-invariant']['speedup'])} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--configs", default="none,c_k1.0_m3_g2,tuned_g2",
                    help="comma-separated names (or 'all') from: " + ", ".join(CONFIGS))
    ap.add_argument("--alloc", action="append", default=[], metavar="NAME=FILE",
                    help="a draft allocation (tune JSON or .cass) usable as config <NAME>[_conf<T>|_hf]_g<G>")
    ap.add_argument("--prompt-set", default="heldout", choices=["heldout", "bench", "tune"])
    ap.add_argument("--prompts", type=int, default=None, help="use the first N prompts of the set")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--gamma", type=int, default=4, help="gamma of configs that do not set their own")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="append JSON lines here (per prompt, with the model's inputs)")
    ap.add_argument("--cache", default=None, help="keep encoded drafts (.cass) in this folder between configs/runs")
    ap.add_argument("--table", nargs="+", default=None,
                    help="only render tables from these JSONL files (the model is recomputed with the flags below)")
    ap.add_argument("--overhead-us", default=None,
                    help="per-pass fixed overhead in us: one value, or rtx4090=50,orin=100,npu=10 (default: presets)")
    ap.add_argument("--synth-report", default=None, help="synthesis report JSON: decoder cap from overhead.by_device")
    ap.add_argument("--decoder", default=None, help="decoder cap INSTANCES:VALUES_PER_CYCLE:MHZ (instead of a report)")
    ap.add_argument("--mode", default="batch-invariant", choices=list(VERIFY_MODES),
                    help="verify-cost mode of the per-device tables (both are always in the JSON)")
    ap.add_argument("--json", action="store_true", help="print the summary rows as JSON instead of tables")
    ap.add_argument("--oracle", default=None, help="with --table: also the per-prompt best of these configs "
                    "(comma-separated), chosen afterwards")
    a = ap.parse_args(argv)
    presets = presets_from(a)
    if a.table:
        runs: dict[str, list[dict]] = {}
        for fn in a.table:
            with open(fn) as fh:
                for line in fh:
                    if '"model_inputs"' in line:
                        r = json.loads(line)
                        runs.setdefault(r["config"], []).append(r)
        rows = [aggregate(n, rs, presets) for n, rs in runs.items()]
        print(json.dumps(rows) if a.json else markdown(rows, a.mode))
        if a.oracle:
            names = a.oracle.split(",")
            from cassandra_rtl.errors import ConfigError

            missing = [n for n in names if n not in runs]
            if missing:
                raise ConfigError(f"--oracle: no runs of {', '.join(missing)} in the given files")
            o = oracle(runs, names, presets, a.mode)
            print(f"\nper-prompt oracle over {', '.join(names)} ({a.mode}): " + "; ".join(
                f"{k} {v['speedup']:.2f}x (wins: {', '.join(f'{n} {c}' for n, c in sorted(v['wins'].items()))})"
                for k, v in o.items()))
        return 0
    from .loader import load

    set_threads(a.threads)
    from cassandra_rtl.errors import ConfigError

    allocs = {}
    for x in a.alloc:
        if "=" not in x:
            raise ConfigError(f"--alloc expects NAME=FILE, got {x!r}")
        k, v = x.split("=", 1)
        allocs[k] = v
    names = list(CONFIGS) if a.configs == "all" else a.configs.split(",")
    resolved = {n: resolve_config(n, allocs) for n in names}  # raises on an unknown name
    ck = load(a.model)
    tok = ck.tokenizer
    texts = prompt_set(a.prompt_set)[: a.prompts]
    prompts = [tok.encode(tok.apply_chat(p)) for p in texts]
    ref_eng, _, _ = build(ck, "none", DraftOptions())
    refs = []
    for i, p in enumerate(prompts):
        r = ref_eng.generate(p, a.max_new_tokens)
        refs.append((r.tokens, r.stats.decode_s))
        print(f"[bench] reference {i + 1}/{len(prompts)}: {len(r.tokens)} tokens, {r.stats.decode_s:.1f} s",
              file=sys.stderr, flush=True)
    out = open(a.out, "a") if a.out else None
    rows, cache = [], {}
    for name in names:
        draft, kw = resolved[name]
        t0 = time.perf_counter()
        o = DraftOptions(**{"gamma": a.gamma, "cache_dir": a.cache, **kw})
        eng, d = _engine(ck, draft, o, cache, allocs)
        build_s = time.perf_counter() - t0
        per = []
        for i, (p, (ref, ref_s)) in enumerate(zip(prompts, refs)):
            r = eng.generate(p, a.max_new_tokens, drafter=d, gamma=o.gamma, adaptive=o.adaptive)
            s = r.summary()
            s.update(model_summary(r, eng, d, presets, with_passes=True))
            s.update(config=name, prompt=texts[i], prompt_set=a.prompt_set, lossless=r.tokens == ref,
                     token_match=sum(x == y for x, y in zip(r.tokens, ref)) / max(1, len(ref)),
                     reference_decode_s=ref_s, build_s=build_s, gamma=o.gamma, adaptive=o.adaptive)
            per.append(s)
            if out:
                out.write(json.dumps(s) + "\n")
                out.flush()
            sp = s["performance_model"]["by_device"]["orin"]["batch-invariant"]["speedup"]
            print(f"[bench] {name} {i + 1}/{len(prompts)}: acceptance {s['acceptance_rate'] or 0:.3f}, "
                  f"orin {sp:.2f}x, lossless {s['lossless']}", file=sys.stderr, flush=True)
        row = aggregate(name, per, presets)
        rows.append(row)
        if out:
            out.write(json.dumps({"summary": {k: v for k, v in row.items() if k != "performance_model"}}) + "\n")
            out.flush()
    print(json.dumps(rows) if a.json else markdown(rows, a.mode))
    print("\n" + CPU_NOTE, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
