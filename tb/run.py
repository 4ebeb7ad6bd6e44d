"""`make sim` / `make sim-full`: run the cocotb suite on one simulator and print a summary table.

    python -m cassandra_rtl.tb.run --sim verilator|icarus [--full] [--blocks zero_counter,decoder]
                                   [--configs NAME,...] [--jobs 2] [--seed N] [--waves] [--json PATH]

Default: every block's quick configurations (the same as `make test`, plus the self-test). ``--full``:
every named configuration, long random runs (TB_FULL=1) and SmolLM2's whole set of linear weights
through the RTL decoders (C1 decoder_c1v3_l8 and C2 decoder_c2v3_l8) with the bulk Verilator harness (draft and
full mode), compared with the golden decode. Exit status 1 on any failure or mismatch, 2 when the simulator is missing.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from ..errors import ToolMissingError
from .common import hwapi
from .common.blocks import BLOCKS, get_block
from .common.build import BUILD_ROOT, RunResult, run
from .common.coverage import Coverage
from .common.tools import ensure_simulator


def plan(blocks: list[str], configs: list[str] | None, full: bool) -> list[tuple[str, str]]:
    out = []
    for b in blocks:
        spec = get_block(b)
        if not spec.available():
            print(f"[sim] {b}: not available yet (hw module missing), skipped")
            continue
        if not spec.has_testbench():
            print(f"[sim] {b}: no testbench module yet, skipped")
            continue
        names = list(spec.configs()) if full else spec.quick()
        if configs:
            names = [c for c in spec.configs() if c in configs]
        for c in [c for c in names if not hwapi.bench_frames(spec.configs()[c])]:
            print(f"[sim] {b} {c}: reads a plane layout the bench cannot frame "
                  f"({spec.configs()[c].get('layout')}), skipped")
        out += [(b, c) for c in names if hwapi.bench_frames(spec.configs()[c])]
    return out


def _cov(res: RunResult) -> Coverage:
    return Coverage.merge(r.get("coverage", {}) for r in res.records)


def table(results: list[RunResult], sim: str) -> str:
    hdr = f"{'block':<13} {'configuration':<22} {'tests':>7} {'values':>10} {'mism.':>6} {'cover':>6} {'cycles':>10} {'values/s':>10} {'wall s':>7}"
    lines = [f"cocotb on {sim}", hdr, "-" * len(hdr)]
    for r in results:
        cov = _cov(r)
        sim_s = sum(float(x.get("wall_s", 0)) for x in r.records)
        vps = r.total("values") / sim_s if sim_s else 0
        lines.append(f"{r.block:<13} {r.config:<22} {r.tests - r.failed:>3}/{r.tests:<3} {r.total('values'):>10,} "
                     f"{r.total('mismatches'):>6} {cov.percent():>5.0f}% {r.total('cycles'):>10,} {vps:>10,.0f} "
                     f"{r.wall_s:>7.1f}")
    lines.append("-" * len(hdr))
    tot_v = sum(r.total("values") for r in results)
    tot_s = sum(float(x.get("wall_s", 0)) for r in results for x in r.records)
    lines.append(f"{'total':<36} {sum(r.tests - r.failed for r in results):>3}/{sum(r.tests for r in results):<3} "
                 f"{tot_v:>10,} {sum(r.total('mismatches') for r in results):>6} {'':>6} "
                 f"{sum(r.total('cycles') for r in results):>10,} {tot_v / tot_s if tot_s else 0:>10,.0f}")
    return "\n".join(lines)


def coverage_report(results: list[RunResult]) -> str:
    out = []
    by_block: dict[str, list] = {}
    for r in results:
        by_block.setdefault(r.block, []).extend(x.get("coverage", {}) for x in r.records)
    for b, reps in by_block.items():
        cov = Coverage.merge(reps)
        out.append(f"coverage, {b} (all configurations): {cov.percent():.0f}% of declared bins")
        out.append(cov.format())
    return "\n".join(out)


# the decoders the whole model runs through (`make sim-full`): decoder v3 at 8 values/cycle (draft), reading
# format 3.0 as a container holds it (`config=` names another decoder)
WHOLE_MODEL_CONFIGS = {"c1": "decoder_c1v3_l8", "c2": "decoder_c2v3_l8"}


def whole_model(sim_jobs: int, modes=("draft", "full"), scheme: str = "c1", cluster: str | None = None,
                config: str | None = None) -> dict:
    """SmolLM2's linear weights (106 M values) encoded by the golden codec, decoded by the RTL (bulk):
    scheme c1 through decoder_c1v3_l8, c2 through decoder_c2v3_l8 (WHOLE_MODEL_CONFIGS), or ``config``, each
    tensor encoded in the layout the decoder reads (format 3.0, golden/escfield.py) and compared with its golden
    decode."""
    import numpy as np

    from cassandra_rtl.golden.codec import decode_draft, decode_full
    from cassandra_rtl.golden.config import CodecConfig

    from . import bulk
    from .decoder import data as D
    from .decoder import framing as F

    flat = D.smollm2_linear_bits()
    cfg = CodecConfig(scheme=scheme, group_size=128, mantissa_bits=3, keep_ratio=0.75)
    config = config or WHOLE_MODEL_CONFIGS[scheme]
    # tensors of the real model when the GGUF is at hand; otherwise 1 M-value slices of /tmp/lin.npy
    step = 1 << 20
    out = {"scheme": scheme, "config": config, "values": 0, "mismatches": 0, "modes": {}}
    t_enc = time.perf_counter()
    layout = F.config_layout(config)
    encs = [F.encode_in(np.ascontiguousarray(flat[i:i + step]), cfg, layout) for i in range(0, len(flat), step)]
    out["encode_s"] = time.perf_counter() - t_enc
    for mode in modes:
        if cluster:            # on Dask (cassandra_rtl/executor.py): chunk-boundary tasks, the harness shipped
            from cassandra_rtl.executor import Executor

            from .bulk import jobs

            with Executor(cluster) as ex:
                r = jobs.cosim_many([(f"lin[{i * step}:]", e) for i, e in enumerate(encs)], mode, config, ex,
                                    desc=f"whole model {mode}")
            out["modes"][mode] = {"values": r["values"], "mismatches": r["mismatches"], "wall_s": r["seconds"],
                                  "values_per_second": r["values_per_second"],
                                  "values_per_cycle": r["values"] / r["cycles"] if r["cycles"] else 0.0,
                                  "harness_seconds": r["sim_seconds"], "workers": r["workers"],
                                  "harness_values_per_second_per_process":
                                      r["values"] / r["sim_seconds"] if r["sim_seconds"] else 0}
            out["values"] += r["values"]
            out["mismatches"] += r["mismatches"]
            continue
        st = bulk.BulkStats()
        got = bulk.decode_many_with_rtl(encs, mode, config=config, jobs=sim_jobs, stats=st)
        mism = 0
        for enc, g in zip(encs, got):
            ref = decode_full(enc) if mode == "full" else decode_draft(enc)
            mism += int(np.count_nonzero(g.reshape(-1) != ref.reshape(-1)))
        out["modes"][mode] = {"values": st.values, "mismatches": mism, "wall_s": st.wall,
                              "values_per_second": st.values_per_second, "values_per_cycle": st.values_per_cycle,
                              "harness_seconds": st.seconds,   # summed over the harness processes
                              "harness_values_per_second_per_process": st.values / st.seconds if st.seconds else 0}
        out["values"] += st.values
        out["mismatches"] += mism
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.tb.run", description=__doc__.splitlines()[0])
    ap.add_argument("--sim", default="verilator", choices=["verilator", "icarus"])
    ap.add_argument("--full", action="store_true", help="all configurations, long random runs, whole model")
    ap.add_argument("--blocks", default=None, help="comma-separated blocks (default: all available)")
    ap.add_argument("--configs", default=None, help="comma-separated configuration names")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--waves", action="store_true", help="record waveforms for every test (also WAVES=1)")
    ap.add_argument("--no-model", action="store_true", help="with --full: skip the whole-model bulk run")
    ap.add_argument("--json", default=None, help="write the summary as JSON here")
    from cassandra_rtl.executor import add_cluster_argument, check_cluster

    add_cluster_argument(ap)           # the whole-model bulk runs (--full) on Dask
    args = ap.parse_args(argv)
    try:
        ensure_simulator(args.sim, install=True)
        args.cluster = check_cluster(args.cluster)
    except ToolMissingError as exc:
        print(f"[sim] {exc}", file=sys.stderr)
        return 2
    # kv_loopback_c2 (encoder -> decoder, direct coupling) only on request: it has a known RTL deadlock
    # (docs/VERIFICATION.md Findings; tests/test_cosim_rtl.py pins it with a strict xfail)
    blocks = args.blocks.split(",") if args.blocks else ["loopback"] + [b for b in BLOCKS
                                                                       if b not in ("loopback", "kv_loopback_c2")]
    todo = plan(blocks, args.configs.split(",") if args.configs else None, args.full)
    env = {"TB_FULL": "1"} if args.full else {}
    t0 = time.perf_counter()
    print(f"[sim] {len(todo)} block configurations on {args.sim}, {args.jobs} in parallel; build/run folders "
          f"under {BUILD_ROOT}", flush=True)

    def one(bc):
        b, c = bc
        r = run(b, c, args.sim, seed=args.seed, waves=args.waves or None, env=env)
        status = "ok" if r.ok and r.total("mismatches") == 0 else "FAIL"
        print(f"[sim] {b}/{c}: {status} ({r.tests - r.failed}/{r.tests} tests, {r.total('values'):,} values, "
              f"{r.wall_s:.0f} s){'' if r.ok else f' logs: {r.test_dir}'}"
              + (f" waves: {', '.join(map(str, r.waves))}" if r.waves else ""), flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, todo))
    print()
    print(table(results, args.sim))
    print()
    print(coverage_report(results))
    summary = {"sim": args.sim, "full": args.full, "wall_s": time.perf_counter() - t0,
               "runs": [{"block": r.block, "config": r.config, "tests": r.tests, "failed": r.failed,
                         "values": r.total("values"), "mismatches": r.total("mismatches"),
                         "cycles": r.total("cycles"), "coverage_percent": _cov(r).percent(),
                         "sim_seconds": sum(float(x.get("wall_s", 0)) for x in r.records), "seed": r.seed,
                         "records": r.records} for r in results]}
    bad = any(not r.ok or r.total("mismatches") for r in results)
    for scheme, block in (("c1", "decoder"), ("c2", "decoder_c2")):
        if not (args.full and not args.no_model and (not args.blocks or block in args.blocks.split(","))):
            continue
        print(f"\n[sim] whole model ({scheme.upper()}): SmolLM2-135M linear weights through the RTL decoder "
              f"(bulk Verilator harness)")
        try:
            wm = whole_model(args.jobs, scheme=scheme, cluster=args.cluster)
        except (FileNotFoundError, ToolMissingError) as exc:
            print(f"[sim] whole model skipped: {exc}")
            wm = None
        if wm:
            for mode, d in wm["modes"].items():
                print(f"  {mode:<5} {d['values']:>12,} values  {d['mismatches']} mismatches  "
                      f"{d['values_per_second']:>12,.0f} values/s  {d['values_per_cycle']:.2f} values/cycle  "
                      f"{d['wall_s']:.0f} s")
            summary["whole_model" if scheme == "c1" else "whole_model_c2"] = wm
            bad = bad or wm["mismatches"] > 0
    summary["wall_s"] = time.perf_counter() - t0
    print(f"\n[sim] {'FAILED' if bad else 'passed'} in {summary['wall_s']:.0f} s")
    path = args.json or (BUILD_ROOT / f"summary-{args.sim}{'-full' if args.full else ''}.json")
    with open(path, "w") as fh:
        json.dump(summary, fh, indent=1, default=str)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
