"""`cassandra-rtl cosim IN.cass|IN.npy [--config NAME] [--sim verilator|icarus] [--mode draft|full] [--max-values N]
[--json]`: run a container's streams through the RTL decoder (the exported Verilog) and compare every value
with the golden decode. Exit 0 when everything matches, 1 on any mismatch or RTL failure, 2 on bad input /
missing simulator (checked before any encoding or simulation).

Decoders: a decoder_c1v3_* configuration takes the container's Cassandra-1 tensors, a decoder_c2v3_* its
Cassandra-2 tensors (the default follows the container; tensors of the other scheme are skipped and
counted). A run that would compare 0 values is refused.

Engines: with Verilator the compiled bulk harness (tb/bulk, millions of values/s) is used; with Icarus
(or ``--engine cocotb``) the tensors go through the cocotb testbench (per-cycle Python, slow: use
--max-values). A ``.npy`` of raw uint16 bf16 bits is encoded on the fly with the golden codec
(--group/--mbits/--keep, in the scheme of --config) so the flow also works without a container.

Parallel runs (bulk engine): the streams are cut at chunk boundaries into tasks of about --task-values
values (tb/bulk/jobs.py), run by a local pool of --jobs harness processes or, with ``--cluster local:N`` /
``--cluster tcp://host:8786`` / $CASSANDRA_RTL_CLUSTER, on Dask (cassandra_rtl/executor.py, the ``cluster``
extra); the harness is built once here and shipped to the workers. values, mismatches, cycles and the first
mismatches are the same whatever ran them (``--report FILE`` writes those as canonical JSON); the JSON also
says ``executor``, ``workers`` and ``tasks``.
"""
from __future__ import annotations

import json
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np

from ..argtypes import float_range, int_range, positive_int
from ..cli import CliError
from ..executor import add_cluster_argument
from ..errors import FormatError


def head(enc, n: int):
    """The first chunks of ``enc`` holding at least ``n`` values, as a tensor of its own (whole chunks of
    ``chunk_superblocks`` superblocks: FORMAT.md §1, a decoder starts only at a chunk)."""
    from ..golden.codec import slice_chunks

    nch = min(enc.nchunks, max(1, -(-n // enc.config.chunk_values)))
    return enc if nch == enc.nchunks else slice_chunks(enc, 0, nch)


def decoder_configs() -> dict[str, str]:
    """Decoder configuration name -> the scheme it decodes (the bulk harness / testbench registry)."""
    from ..tb.bulk import scheme_of
    from ..tb.common.blocks import get_block
    from ..tb.common.hwapi import reads_containers

    names = [n for b in ("decoder", "decoder_c2") for n, p in get_block(b).configs().items() if reads_containers(p)]
    return {n: scheme_of(n) for n in sorted(names)}


DEFAULT_CONFIGS = {"c1": "decoder_c1v3_l8", "c2": "decoder_c2v3_l8"}   # decoder v3: format 3.0 as stored
SCHEME_NAMES = {"c1": "Cassandra-1", "c2": "Cassandra-2"}


def check_config(config: str | None) -> None:
    if config is None:
        return
    known = decoder_configs()
    if config not in known:
        from ..errors import ConfigError

        kind = "is not a decoder configuration" if config.startswith(("encoder", "zero_counter")) else "is unknown"
        raise ConfigError(f"--config {config} {kind}; decoder configurations: {', '.join(known)}")


def load_tensors(path: str, verification: bool) -> list[tuple[str, object]]:
    """The tensors to co-simulate (``verification``: read a container's verification section too). A .npy is
    only validated here (header against the file size, dtype); it is encoded later by ``encode_npy``, after the
    cheap checks."""
    from ..golden.io import read_npy_header

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no such input file: {path}" if not p.exists() else f"{path}: not a regular file")
    if p.suffix == ".npy":
        dtype, shape, _, _ = read_npy_header(p)
        if dtype.kind != "u" or dtype.itemsize != 2:
            raise CliError(f"{path}: expected raw bf16 bits as uint16, got {dtype}")
        return [("npy", None)]
    if p.suffix != ".cass":
        raise CliError(f"{path}: expected a .cass container or a .npy of raw uint16 bf16 bits")
    from ..golden.container import read_container

    c = read_container(p, verification=verification)
    return list(c.tensors.items())


def encode_npy(path: str, args, scheme: str) -> list[tuple[str, object]]:
    from ..golden.codec import encode_tensor
    from ..golden.config import CodecConfig
    from ..golden.io import load_npy

    bits = load_npy(path, mmap=True)
    flat = bits.reshape(-1)
    if args.max_values:
        flat = flat[: args.max_values]
    flat = np.ascontiguousarray(flat, dtype=np.uint16)
    cfg = CodecConfig(scheme=scheme, group_size=args.group, mantissa_bits=args.mbits, keep_ratio=args.keep)
    step = 1 << 20
    return [(f"{os.path.basename(path)}[{i}:{i + step}]", encode_tensor(flat[i:i + step], cfg))
            for i in range(0, len(flat), step)]


def run(args) -> int:
    from ..golden.config import CodecConfig
    from ..golden.io import read_npy_header
    from ..tb.common.tools import ensure_simulator

    # cheap checks first: configuration, input file, codec options; then the simulator; then the slow work
    check_config(args.config)

    # decoder v3 (the default configurations) reads a container's format 3.0 tensors as stored (a draft run needs
    # no verification section); a decoder reading another layout would have each tensor converted
    # (tb/decoder/framing.py ``framed``), which re-encodes its values from both sections
    from ..tb.decoder.framing import config_layout
    as_stored = config_layout(args.config or DEFAULT_CONFIGS["c1"]) == "format 3.0"
    tensors = load_tensors(args.input, verification=args.mode == "full" or not as_stored)
    npy = tensors == [("npy", None)]
    if npy:
        scheme = decoder_configs()[args.config] if args.config else "c1"
        CodecConfig(scheme=scheme, group_size=args.group, mantissa_bits=args.mbits, keep_ratio=args.keep)
        config = args.config or DEFAULT_CONFIGS[scheme]
    else:
        schemes = {e.config.scheme for _, e in tensors}
        if args.config:
            config = args.config
        else:                    # the decoder of the container's scheme (C1 when it holds both)
            config = DEFAULT_CONFIGS["c1" if "c1" in schemes or not schemes else "c2"]
        scheme = decoder_configs()[config]
        if tensors and scheme not in schemes:
            have = " and ".join(SCHEME_NAMES[s] for s in sorted(schemes))
            raise CliError(f"{args.input}: holds only {have} tensors, but {config} decodes {SCHEME_NAMES[scheme]}; "
                           f"use --config {DEFAULT_CONFIGS[sorted(schemes)[0]]}")
    args.config = config
    skipped = [] if npy else [n for n, e in tensors if e.config.scheme != scheme]
    if not npy:
        tensors = [(n, e) for n, e in tensors if e.config.scheme == scheme]
    values = int(np.prod(read_npy_header(args.input)[1])) if npy else sum(e.numel for _, e in tensors)
    if not values:
        raise CliError(f"{args.input}: nothing to co-simulate (0 values): a run that checks nothing cannot pass")
    engine = args.engine
    if engine == "auto":
        engine = "bulk" if args.sim == "verilator" else "cocotb"
    if engine == "bulk" and args.sim != "verilator":
        raise CliError("the bulk engine is a compiled Verilator harness: use --sim verilator")
    ensure_simulator(args.sim)                  # ToolMissingError -> one-line message, exit 2
    from ..executor import check_cluster

    if check_cluster(args.cluster) and engine != "bulk":
        raise CliError("--cluster runs the bulk engine (Verilator) only")
    if npy:
        tensors = encode_npy(args.input, args, scheme)
    if args.max_values:
        picked, total = [], 0
        for n, e in tensors:
            if total >= args.max_values:
                break
            e = head(e, args.max_values - total)
            picked.append((n, e))
            total += e.numel
        tensors = picked
    tensors = [(n, e) for n, e in tensors if e.numel]
    t0 = time.perf_counter()
    encs = [e for _, e in tensors]
    report = {"input": args.input, "mode": args.mode, "simulator": args.sim, "engine": engine, "config": args.config,
              "scheme": scheme, "tensors": len(encs),
              f"skipped_{'c2' if scheme == 'c1' else 'c1'}_tensors": len(skipped)}
    mism_list = []
    if engine == "bulk":
        from ..executor import Executor
        from ..tb import bulk
        from ..tb.bulk import jobs

        with Executor(args.cluster, jobs=args.jobs) as ex:
            try:
                res = jobs.cosim_many(tensors, args.mode, args.config, ex,
                                      task_values=args.task_values or jobs.TASK_VALUES)
            except bulk.RtlError as exc:
                print(f"cassandra-rtl cosim: RTL failure: {' '.join(str(exc).split())}", file=sys.stderr)
                return 1
            except FormatError as exc:
                raise FormatError(f"{Path(args.input).name}: {exc}") from None
        mism_list = res.pop("first_mismatches")
        report.update(values=res["values"], mismatches=res["mismatches"], cycles=res["cycles"],
                      values_per_cycle=round(res["values"] / res["cycles"], 3) if res["cycles"] else 0.0,
                      tasks=res["tasks"], executor=res["executor"], workers=res["workers"])
        if "cluster" in res:
            report["cluster"] = res["cluster"]
    else:
        from ..tb.common import build

        from ..tb.bulk import _block

        block = _block(args.config)
        job_dir = build.config_dir(block, args.config) / args.sim / "jobs"
        job_dir.mkdir(parents=True, exist_ok=True)
        job = job_dir / f"cosim-{os.getpid()}.pkl"
        with open(job, "wb") as fh:
            pickle.dump({"tensors": tensors, "mode": args.mode, "profile": "full"}, fh)
        res = build.run(block, args.config, args.sim, testcase="job_file", env={"TB_JOB": str(job)},
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
    if args.report:
        from ..tb.bulk.jobs import merged_report

        Path(args.report).write_bytes(merged_report(report))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"cosim {args.input}: {report['values']:,} values through the RTL decoder ({args.config}, "
              f"{args.mode} mode, {args.sim}/{engine}): {report['mismatches']} mismatches, "
              f"{report['values_per_second']:,.0f} values/s")
        for m in mism_list[:5]:
            print(f"  mismatch: {m}")
        if skipped:
            other = "c2" if scheme == "c1" else "c1"
            print(f"  ({len(skipped)} {SCHEME_NAMES[other]} tensors skipped: {args.config} decodes "
                  f"{SCHEME_NAMES[scheme]}; run again with --config {DEFAULT_CONFIGS[other]})")
    return 1 if report["mismatches"] else 0


def register(sub):
    p = sub.add_parser("cosim", help="run a container's streams through the RTL decoder and compare with golden")
    p.add_argument("input", help=".cass container (or .npy of raw uint16 bf16 bits, encoded on the fly)")
    p.add_argument("--sim", default="verilator", choices=["verilator", "icarus"])
    p.add_argument("--mode", default="full", choices=["draft", "full"])
    p.add_argument("--max-values", type=positive_int, default=None, help="stop after about N values (whole "
                   "chunks of superblocks; N >= 1; default: every value)")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.add_argument("--config", default=None, help="decoder configuration (hw/configs.py): a decoder_c1* for "
                   "Cassandra-1 tensors, a decoder_c2* for Cassandra-2 (default: decoder_c1v3_l8, or decoder_c2v3_l8 "
                   "for a container of C2 tensors only)")
    p.add_argument("--engine", default="auto", choices=["auto", "bulk", "cocotb"],
                   help="auto: bulk harness on Verilator, cocotb on Icarus")
    p.add_argument("--jobs", type=int_range(1, 64), default=2, help="bulk harness processes of the local pool (1..64)")
    add_cluster_argument(p)
    p.add_argument("--task-values", type=int_range(1, 1 << 40), default=None, metavar="N",
                   help="values per task: the work is cut at chunk boundaries into tasks of about N values, "
                        "whatever the worker count (default 4194304)")
    p.add_argument("--report", default=None, metavar="FILE",
                   help="also write the merged report (no timing, no executor): the same bytes for the same "
                        "input on the local pool and on any cluster")
    p.add_argument("--group", type=int, default=128, choices=[32, 64, 128, 256], help=".npy input: superblock size")
    p.add_argument("--mbits", type=int_range(0, 7), default=3, help=".npy input: draft mantissa bits")
    p.add_argument("--keep", type=float_range(0, 1, lo_open=True), default=0.75, help=".npy input: keep ratio")
    p.set_defaults(func=run)
