"""`cassandra-rtl cosim IN.cass|IN.npy [--sim verilator|icarus] [--mode draft|full] [--max-values N] [--json]`:
run a container's streams through the RTL decoder (the exported Verilog) and compare every value with the
golden decode. Exit 0 when everything matches, 1 on any mismatch, 2 on bad input / missing simulator.

Engines: with Verilator the compiled bulk harness (tb/bulk, millions of values/s) is used; with Icarus
(or ``--engine cocotb``) the tensors go through the cocotb testbench (per-cycle Python, slow: use
--max-values). A ``.npy`` of raw uint16 bf16 bits is encoded on the fly with the golden codec
(--group/--mbits/--keep) so the flow also works without a container.
"""
from __future__ import annotations

import json
import os
import pickle
import sys
import time

import numpy as np

from ..cli import CliError


def head(enc, n: int):
    """The first ceil(n/G) superblocks of ``enc`` as a tensor of its own (whole superblocks only)."""
    from ..golden.codec import INDEXED, PLANES, EncodedTensor, plane_offsets

    G = enc.config.group_size
    nsb = min(enc.nsb, max(1, -(-n // G)))
    if nsb == enc.nsb:
        return enc
    numel = nsb * G
    planes, offsets = {}, {}
    for p in PLANES[enc.config.scheme][0] + PLANES[enc.config.scheme][1]:
        if p not in enc.planes:
            continue
        off = plane_offsets(enc, p)
        planes[p] = enc.planes[p][: int(off[nsb])]
        if p in INDEXED[enc.config.scheme]:
            offsets[p] = np.asarray(off[: nsb + 1])
    return EncodedTensor((numel,), enc.config, enc.spec_book, enc.verif_book, planes, offsets)


def load_tensors(path: str, mode: str, args) -> list[tuple[str, object]]:
    from ..golden.codec import encode_tensor
    from ..golden.config import CodecConfig

    if path.endswith(".npy"):
        bits = np.load(path, mmap_mode="r")
        if bits.dtype != np.uint16:
            raise CliError(f"{path}: expected raw bf16 bits as uint16, got {bits.dtype}")
        flat = np.ascontiguousarray(bits.reshape(-1)[: args.max_values] if args.max_values else bits.reshape(-1))
        cfg = CodecConfig(scheme="c1", group_size=args.group, mantissa_bits=args.mbits, keep_ratio=args.keep)
        step = 1 << 20
        return [(f"{os.path.basename(path)}[{i}:{i + step}]", encode_tensor(flat[i:i + step], cfg))
                for i in range(0, len(flat), step)]
    from ..golden.container import read_container

    c = read_container(path, verification=mode == "full")
    return list(c.tensors.items())


def run(args) -> int:
    from ..golden.codec import decode_draft, decode_full
    from ..tb.common.tools import ensure_simulator

    ensure_simulator(args.sim)                  # ToolMissingError -> one-line message, exit 2
    tensors = load_tensors(args.input, args.mode, args)
    skipped = [n for n, e in tensors if e.config.scheme != "c1"]
    tensors = [(n, e) for n, e in tensors if e.config.scheme == "c1"]
    if not tensors:
        raise CliError("no Cassandra-1 tensor to co-simulate (the RTL decoder implements C1; "
                       f"{len(skipped)} C2 tensors skipped)")
    if args.max_values:
        picked, total = [], 0
        for n, e in tensors:
            if total >= args.max_values:
                break
            e = head(e, args.max_values - total)
            picked.append((n, e))
            total += e.numel
        tensors = picked
    engine = args.engine
    if engine == "auto":
        engine = "bulk" if args.sim == "verilator" else "cocotb"
    if engine == "bulk" and args.sim != "verilator":
        raise CliError("the bulk engine is a compiled Verilator harness: use --sim verilator")
    t0 = time.perf_counter()
    encs = [e for _, e in tensors]
    report = {"input": args.input, "mode": args.mode, "simulator": args.sim, "engine": engine, "config": args.config,
              "tensors": len(encs), "skipped_c2_tensors": len(skipped)}
    mism_list = []
    if engine == "bulk":
        from ..tb import bulk

        st = bulk.BulkStats()
        got = bulk.decode_many_with_rtl(encs, args.mode, config=args.config, jobs=args.jobs, stats=st)
        values = mismatches = 0
        for (name, enc), g in zip(tensors, got):
            ref = (decode_full(enc) if args.mode == "full" else decode_draft(enc)).reshape(-1)
            g = g.reshape(-1)
            bad = np.flatnonzero(g != ref)
            values += len(ref)
            mismatches += len(bad)
            for i in bad[:5]:
                mism_list.append({"tensor": name, "index": int(i), "rtl": f"0x{int(g[i]):04x}",
                                  "golden": f"0x{int(ref[i]):04x}"})
        report.update(values=values, mismatches=mismatches, cycles=st.cycles,
                      values_per_cycle=round(st.values_per_cycle, 3))
    else:
        from ..tb.common import build

        job_dir = build.config_dir("decoder", args.config) / args.sim / "jobs"
        job_dir.mkdir(parents=True, exist_ok=True)
        job = job_dir / f"cosim-{os.getpid()}.pkl"
        with open(job, "wb") as fh:
            pickle.dump({"tensors": tensors, "mode": args.mode, "profile": "full"}, fh)
        res = build.run("decoder", args.config, args.sim, testcase="job_file", env={"TB_JOB": str(job)},
                        tag=f"cosim-{os.getpid()}", waves_on_failure=False)
        job.unlink(missing_ok=True)
        if not res.records or res.failed and not res.total("mismatches"):
            err = res.records[0].get("error") if res.records else "no result"
            raise CliError(f"co-simulation failed: {err} (log: {res.test_dir / 'sim.log'})")
        report.update(values=res.total("values"), mismatches=res.total("mismatches"), cycles=res.total("cycles"))
    wall = time.perf_counter() - t0
    report["seconds"] = round(wall, 3)
    report["values_per_second"] = round(report["values"] / wall, 1) if wall else 0.0
    report["first_mismatches"] = mism_list
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"cosim {args.input}: {report['values']:,} values through the RTL decoder ({args.config}, "
              f"{args.mode} mode, {args.sim}/{engine}): {report['mismatches']} mismatches, "
              f"{report['values_per_second']:,.0f} values/s")
        for m in mism_list[:5]:
            print(f"  mismatch: {m}")
        if skipped:
            print(f"  ({len(skipped)} Cassandra-2 tensors skipped: the RTL decoder is C1 only)")
    return 1 if report["mismatches"] else 0


def register(sub):
    p = sub.add_parser("cosim", help="run a container's streams through the RTL decoder and compare with golden")
    p.add_argument("input", help=".cass container (or .npy of raw uint16 bf16 bits, encoded on the fly)")
    p.add_argument("--sim", default="verilator", choices=["verilator", "icarus"])
    p.add_argument("--mode", default="full", choices=["draft", "full"])
    p.add_argument("--max-values", type=int, default=None, help="stop after about N values (whole superblocks)")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.add_argument("--config", default="decoder_c1_l8", help="decoder configuration (hw/configs.py)")
    p.add_argument("--engine", default="auto", choices=["auto", "bulk", "cocotb"],
                   help="auto: bulk harness on Verilator, cocotb on Icarus")
    p.add_argument("--jobs", type=int, default=2, help="bulk harness processes")
    p.add_argument("--group", type=int, default=128, help=".npy input: superblock size")
    p.add_argument("--mbits", type=int, default=3, help=".npy input: draft mantissa bits")
    p.add_argument("--keep", type=float, default=0.75, help=".npy input: keep ratio")
    p.set_defaults(func=run)
