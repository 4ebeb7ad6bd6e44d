#!/usr/bin/env python3
"""Paper-scale co-simulation: a synthetic Llama-3-8B-shaped model (tb/bulk/synthetic.py: the project's
realistic weight recipe, generated block by block on the workers, never 16 GB anywhere) through decoder v3
(decoder_c1v3_l8, format 3.0) on the executor layer (cassandra_rtl/executor.py).

    python bench/paper_scale.py plan  [--workers 1,2,8,32,128]                   # tasks, bytes, hours per worker
    python bench/paper_scale.py slice --values 1e8 --modes draft,full --cluster local:2
    python bench/paper_scale.py scaling --values 1e8 --mode draft               # local:1 vs local:2
    python bench/paper_scale.py report                                          # the figures as markdown

plan: the whole model as tasks (--task-values values each, cut at whole rows of a tensor), the bf16 bytes,
the encoded stream bytes per mode (bits/value measured on one block of every tensor kind, weighted by the
values of each kind), and the hours of co-simulation per worker at N workers, from the per-worker rate of a
calibration (one task per mode here, or --rate-from a slice's JSON). slice: at least --values values of tasks
spread evenly over the plan (every tensor kind, early and late layers), each mode, compared with golden
value for value: values, mismatches, wall time, the per-worker rate and the projection of the whole model to
N workers. scaling: the same slice on a local cluster of 1 and of 2 workers; the ratio of the wall times, with
the load average before each run (a loaded machine makes the ratio meaningless: run it on a quiet one).

report: the markdown of docs/CLUSTER.md's figures from the JSON files of the other three in --out.

Outputs (JSON, and the plan as markdown too) go to --out (default build/paper_scale/). Never part of the tests.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "decoder_c1v3_l8"           # the whole-model decoder (tb/run.py WHOLE_MODEL_CONFIGS["c1"])
MODEL = "llama-3-8b"


def _tasks(mode: str, values: float | None, task_values: int, seed: int):
    from cassandra_rtl.tb.bulk import jobs, synthetic as S
    from cassandra_rtl.tb.decoder.framing import config_layout

    groups = S.plan_groups(MODEL, task_values, seed, config_layout(CONFIG))
    if values is not None:
        groups = S.spread(groups, int(values))
    return jobs.make_tasks(groups, mode, CONFIG)


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_slice(mode: str, values: float, cluster: str | None, jobs_n: int, task_values: int, seed: int) -> dict:
    from cassandra_rtl.executor import Executor
    from cassandra_rtl.tb.bulk import jobs, synthetic as S

    tasks = _tasks(mode, values, task_values, seed)
    load = os.getloadavg()
    t0 = time.perf_counter()
    with Executor(cluster, jobs=jobs_n) as ex:
        t_up = time.perf_counter() - t0
        res = jobs.run_tasks(tasks, CONFIG, ex, desc=f"paper-scale {mode}")
    if not res["first_mismatches"]:
        res.pop("first_mismatches")
    total = sum(t.numel for t in S.tensors(MODEL))
    per_worker = res["values"] / res["task_seconds"] if res["task_seconds"] else 0.0   # values/s of one worker
    res.update(mode=mode, model=MODEL, config=CONFIG, load_before=[round(x, 2) for x in load],
               load_after=[round(x, 2) for x in os.getloadavg()], cluster_start_seconds=round(t_up, 1),
               tensor_kinds=sorted({p.spec.kind for t in tasks for p in t.pieces}),
               per_worker_values_per_second=round(per_worker, 1),
               model_values=total, client_peak_rss_bytes=_peak_rss())
    res["projection_hours"] = {str(n): round(total / (per_worker * n) / 3600, 2) for n in (1, 2, 8, 32, 128)} \
        if per_worker else {}
    return res


def plan(workers: list[int], task_values: int, seed: int, rate_from: list[Path], calibrate: bool,
         cluster: str | None, jobs_n: int) -> dict:
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.tb.bulk import synthetic as S
    from cassandra_rtl.tb.decoder.framing import config_layout

    specs = S.tensors(MODEL)
    groups = S.plan_groups(MODEL, task_values, seed, config_layout(CONFIG))
    values = sum(t.numel for t in specs)
    by_kind: dict[str, int] = {}
    for t in specs:
        by_kind[t.kind] = by_kind.get(t.kind, 0) + t.numel
    bits = {}
    for kind in by_kind:                                 # one block of the first tensor of each kind
        spec = next(t for t in specs if t.kind == kind)
        b = S.block_bits(spec, 0, seed).reshape(-1)
        enc = encode_tensor(b, S.codec_config())
        bits[kind] = {"draft": 8 * enc.spec_nbytes / b.size, "full": 8 * (enc.spec_nbytes + enc.verif_nbytes) / b.size}
    out = {"model": MODEL, "config": CONFIG, "codec": "C1, G=128, m=3, keep 0.75", "tensors": len(specs),
           "values": values, "bf16_bytes": 2 * values, "tasks": len(groups), "task_values": task_values,
           "largest_task_values": max(sum(p.numel for p in g) for g in groups),
           "values_by_kind": by_kind, "modes": {}}
    rates = {}
    for f in rate_from:
        r = json.loads(Path(f).read_text())
        rates[r["mode"]] = (r["per_worker_values_per_second"], f"measured: {f}")
    for mode in ("draft", "full"):
        stream = sum(by_kind[k] * bits[k][mode] / 8 for k in by_kind)
        if mode not in rates and calibrate:
            r = run_slice(mode, 1, cluster, jobs_n, task_values, seed)           # one task of the spread
            rates[mode] = (r["per_worker_values_per_second"], f"calibration task ({r['values']:,} values, "
                                                               f"load {r['load_before'][0]})")
        m = {"stream_bytes": int(stream), "bits_per_value": round(8 * stream / values, 3),
             "shipped_per_task_bytes": "weights generated on the worker: only the task's description "
                                       "(< 1 KB); a real model's container ships its streams: "
                                       f"{int(stream / len(groups)):,} B per task on average"}
        if mode in rates:
            rate, src = rates[mode]
            worker_hours = values / rate / 3600
            mean_task = worker_hours * 3600 / len(groups)
            m.update(per_worker_values_per_second=round(rate, 1), rate_source=src,
                     worker_hours=round(worker_hours, 2),
                     hours_per_worker={str(n): round(math.ceil(len(groups) / n) * mean_task / 3600, 2)
                                       for n in workers})
        out["modes"][mode] = m
    return out


def plan_markdown(p: dict) -> str:
    lines = [f"# {p['model']} through {p['config']}: co-simulation plan", "",
             f"{p['tensors']} weight tensors, {p['values']:,} values ({p['bf16_bytes'] / 1e9:.2f} GB of bf16), "
             f"{p['tasks']} tasks of up to {p['largest_task_values']:,} values; codec {p['codec']}.", ""]
    ws = None
    for mode, m in p["modes"].items():
        if ws is None and "hours_per_worker" in m:
            ws = list(m["hours_per_worker"])
            lines += ["| mode | stream GB | bits/value | values/s per worker | worker-hours | "
                      + " | ".join(f"h at {w}" for w in ws) + " |",
                      "|---|---:|---:|---:|---:|" + "---:|" * len(ws)]
        if "hours_per_worker" in m:
            lines.append(f"| {mode} | {m['stream_bytes'] / 1e9:.2f} | {m['bits_per_value']} | "
                         f"{m['per_worker_values_per_second']:,.0f} | {m['worker_hours']} | "
                         + " | ".join(str(m['hours_per_worker'][w]) for w in ws) + " |")
        else:
            lines.append(f"- {mode}: {m['stream_bytes'] / 1e9:.2f} GB of streams, {m['bits_per_value']} bits/value "
                         "(no rate: --calibrate or --rate-from)")
    lines += ["", "Rates: " + "; ".join(f"{k}: {m.get('rate_source', 'none')}" for k, m in p["modes"].items()), ""]
    return "\n".join(lines)


def figures(out: Path) -> str:
    """docs/CLUSTER.md's measured figures, from the JSON files in ``out``."""
    def load(name):
        f = out / name
        return json.loads(f.read_text()) if f.is_file() else None
    lines = []
    for mode in ("draft", "full"):
        r = load(f"slice-{mode}.json")
        if r:
            lines.append(f"- slice, {mode}: {r['values']:,} values ({r['tasks']} tasks spread over "
                         f"{', '.join(r['tensor_kinds'])} tensors) through {r['config']} on {r['workers']} worker(s) "
                         f"({r['executor']}): **{r['mismatches']} mismatches**; {r['seconds']:.0f} s wall "
                         f"(+{r['cluster_start_seconds']:.0f} s cluster start), {r['values_per_second']:,.0f} values/s, "
                         f"{r['per_worker_values_per_second']:,.0f} values/s per worker; load average "
                         f"{r['load_before'][0]} before, {r['load_after'][0]} after; peak RSS of a worker process "
                         f"{r['peak_rss_bytes'] / 2**20:,.0f} MiB (its harness subprocess apart), of the client "
                         f"{r['client_peak_rss_bytes'] / 2**20:,.0f} MiB")
    for mode in ("draft", "full"):
        r = load(f"scaling-{mode}.json")
        if r:
            lines.append(f"- scaling, {mode}: the same {r['values']:,} values ({r['tasks']} tasks) on local:1 in "
                         f"{r['seconds']['1']:.1f} s and on local:2 in {r['seconds']['2']:.1f} s: "
                         f"**{r['speedup_2_vs_1']:.2f}x** (load average before: {r['load_before']['1'][0]} / "
                         f"{r['load_before']['2'][0]}; mismatches {r['mismatches']['1']} / {r['mismatches']['2']})")
    p = load("plan.json")
    if p:
        lines += ["", plan_markdown(p).split("\n", 2)[2].strip()]
    return "\n".join(lines) if lines else f"no results in {out}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/paper_scale.py", description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["plan", "slice", "scaling", "report"])
    ap.add_argument("--values", type=float, default=1e8, help="slice / scaling: at least this many values per mode")
    ap.add_argument("--modes", default="draft,full", help="slice: comma-separated modes")
    ap.add_argument("--mode", default="draft", choices=["draft", "full"], help="scaling: the mode")
    ap.add_argument("--cluster", default=None, help="slice / calibration: local:N, a scheduler address or pool")
    ap.add_argument("--jobs", type=int, default=2, help="local pool size (when no cluster)")
    ap.add_argument("--task-values", type=int, default=1 << 22)
    ap.add_argument("--workers", default="1,2,8,32,128", help="plan: worker counts of the projection")
    ap.add_argument("--rate-from", action="append", type=Path, default=[],
                    help="plan: a slice JSON whose per-worker rate to use for its mode (repeatable)")
    ap.add_argument("--calibrate", action="store_true", help="plan: time one task per mode without --rate-from")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "paper_scale")
    a = ap.parse_args(argv)
    from cassandra_rtl.errors import UserError
    from cassandra_rtl.executor import check_cluster

    try:
        check_cluster(a.cluster)
        workers = [int(w) for w in a.workers.split(",")]
        modes = [m.strip() for m in a.modes.split(",") if m.strip()]
        if not set(modes) <= {"draft", "full"} or not modes or min(workers) < 1 or a.values < 1:
            raise UserError("--modes takes draft,full; --workers positive integers; --values >= 1")
    except (UserError, ValueError) as exc:
        print(f"paper_scale: error: {exc}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    if a.what == "report":
        print(figures(a.out))
        return 0
    if a.what == "plan":
        p = plan(workers, a.task_values, a.seed, a.rate_from, a.calibrate, a.cluster, a.jobs)
        (a.out / "plan.json").write_text(json.dumps(p, indent=1) + "\n")
        (a.out / "plan.md").write_text(plan_markdown(p))
        print(plan_markdown(p))
        return 0
    if a.what == "slice":
        bad = 0
        for mode in modes:
            r = run_slice(mode, a.values, a.cluster, a.jobs, a.task_values, a.seed)
            (a.out / f"slice-{mode}.json").write_text(json.dumps(r, indent=1) + "\n")
            print(f"{mode}: {r['values']:,} values in {r['tasks']} tasks on {r['workers']} worker(s) "
                  f"({r['executor']}): {r['mismatches']} mismatches, {r['seconds']:.0f} s wall, "
                  f"{r['values_per_second']:,.0f} values/s, {r['per_worker_values_per_second']:,.0f} per worker; "
                  f"load {r['load_before'][0]} -> {r['load_after'][0]}; whole model at N workers (h): "
                  f"{r['projection_hours']}")
            bad += bool(r["mismatches"])
        return 1 if bad else 0
    runs = {}
    for n in (1, 2):
        runs[n] = run_slice(a.mode, a.values, f"local:{n}", a.jobs, a.task_values, a.seed)
        print(f"local:{n}: {runs[n]['values']:,} values, {runs[n]['seconds']:.1f} s, load before "
              f"{runs[n]['load_before'][0]}", flush=True)
    ratio = runs[1]["seconds"] / runs[2]["seconds"]
    out = {"mode": a.mode, "values": runs[1]["values"], "tasks": runs[1]["tasks"],
           "seconds": {n: r["seconds"] for n, r in runs.items()}, "speedup_2_vs_1": round(ratio, 3),
           "load_before": {n: r["load_before"] for n, r in runs.items()},
           "mismatches": {n: r["mismatches"] for n, r in runs.items()}}
    (a.out / f"scaling-{a.mode}.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"2 workers vs 1: {ratio:.2f}x ({out['seconds']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
