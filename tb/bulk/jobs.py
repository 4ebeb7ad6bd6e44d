"""Bulk co-simulation as independent tasks on cassandra_rtl.executor (a local pool or a Dask cluster).

    report = cosim_many(named_encs, mode, config, executor)       # merged: values, mismatches, cycles, ...

The work is split at chunk boundaries into tasks of about ``task_values`` values (``plan_pieces``: consecutive
small tensors share a task, a large tensor is cut into whole chunks with golden.codec.slice_chunks, which any
decoder can start at). Each task runs one harness process from reset on its pieces and compares every value
with the golden decode on the worker, so only counts and the first mismatches travel back. The split depends
only on the input and ``task_values``, never on the worker count, and the results are merged in task order:
the merged report (``merged_report``) is the same bytes on the local pool and on any cluster.

On a cluster the Verilator harness is built once on the client (tb/bulk.build_harness, cached by its digest)
and shipped to the workers as bytes (executor.ShippedFile); a worker needs no build tools and no shared
filesystem, only this package (the golden codec) and a C++ runtime for the executable. In the local pool each
task calls tb/bulk.decode_many_with_rtl (one harness process; the same build, cached in build/bulk/).

A piece is anything with ``load() -> (name, EncodedTensor, first value index)``: ``Piece`` holds an encoded
slice; tb/bulk/synthetic.py's pieces generate and encode their weights on the worker instead, so a model that
never fits in the client's memory can be streamed.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass

import numpy as np

TASK_VALUES = 1 << 22          # about 9 s of harness time at ~0.46 M values/s
FIRST_MISMATCHES = 5           # per tensor, as cosim has always reported
# report keys that depend on the run (wall time, executor), left out of the merged report
RUN_KEYS = ("seconds", "values_per_second", "workers", "executor", "cluster", "resubmitted", "sim_seconds",
            "task_seconds", "peak_rss_bytes")


@dataclass
class Piece:
    """Chunks of one tensor, already encoded: ``offset`` is the index of its first value in the tensor."""
    name: str
    enc: object
    offset: int = 0

    @property
    def numel(self) -> int:
        return self.enc.numel

    def load(self):
        return self.name, self.enc, self.offset


@dataclass
class CosimTask:
    index: int
    pieces: list
    mode: str
    config: str
    params: dict
    seed: int = 1
    golden: bool = True         # compare with the golden decode (False: the RTL only, for timing)

    @property
    def numel(self) -> int:
        return sum(p.numel for p in self.pieces)


def plan_pieces(named_encs, task_values: int = TASK_VALUES) -> list[list[Piece]]:
    """Pieces grouped into tasks of about ``task_values`` values, in input order; cut only at chunk
    boundaries (a tensor larger than a task is sliced with slice_chunks)."""
    from cassandra_rtl.golden.codec import slice_chunks

    groups: list[list[Piece]] = []
    cur: list[Piece] = []
    size = 0
    for name, enc in named_encs:
        if enc.numel > task_values and enc.nchunks > 1:
            if cur:
                groups.append(cur)
                cur, size = [], 0
            V = enc.config.chunk_values
            step = max(1, task_values // V)
            for c in range(0, enc.nchunks, step):
                groups.append([Piece(name, slice_chunks(enc, c, min(c + step, enc.nchunks)), c * V)])
            continue
        if cur and size + enc.numel > task_values:
            groups.append(cur)
            cur, size = [], 0
        cur.append(Piece(name, enc, 0))
        size += enc.numel
    if cur:
        groups.append(cur)
    return groups


def run_task(exe, task: CosimTask) -> dict:
    """One task on a worker (or a pool thread): the harness from reset over the task's pieces, compared
    with golden. ``exe``: the shipped harness (executor.ShippedFile) on a cluster, None in the local pool."""
    from cassandra_rtl.errors import FormatError
    from cassandra_rtl.golden.codec import decode_draft, decode_full

    from cassandra_rtl.tb import bulk
    from cassandra_rtl.tb.bulk import BulkStats

    t0 = time.perf_counter()
    loaded = [p.load() for p in task.pieces]
    t_load = time.perf_counter() - t0
    encs = [e for _, e, _ in loaded]
    if exe is None:             # the local pool: today's entry point, which builds (cached) and runs the harness
        st = BulkStats()
        outs = bulk.decode_many_with_rtl(encs, task.mode, config=task.config, jobs=1, stats=st)
        st = {"cycles": st.cycles, "beats": st.beats, "seconds": st.seconds}
    else:                       # a cluster worker: the shipped harness, in the worker's own temporary folder
        outs, st = bulk._run_job(exe.path(), encs, task.mode == "full", task.params, seed=task.seed,
                                 tmp_dir=tempfile.gettempdir())
    values = mismatches = 0
    stream = sum(e.spec_nbytes + (e.verif_nbytes if task.mode == "full" else 0) for e in encs)
    first: list[tuple[str, int, int, int]] = []
    for (name, enc, off), got in zip(loaded, outs):
        got = got.reshape(-1)
        values += got.size
        if not task.golden:
            continue
        try:
            ref = (decode_full(enc) if task.mode == "full" else decode_draft(enc)).reshape(-1)
        except FormatError as exc:
            raise FormatError(f"tensor {name!r}: {exc}") from None
        bad = np.flatnonzero(got != ref)
        mismatches += len(bad)
        first += [(name, off + int(i), int(got[i]), int(ref[i])) for i in bad[:FIRST_MISMATCHES]]
    return {"task": task.index, "values": values, "mismatches": mismatches if task.golden else None,
            "first": first, "cycles": int(st["cycles"]), "beats": int(st["beats"]), "stream_bytes": stream,
            "sim_seconds": float(st["seconds"]), "load_seconds": t_load, "wall": time.perf_counter() - t0,
            "peak_rss_bytes": _peak_rss()}


def _peak_rss() -> int:
    """This process's peak resident set (a worker's, on a cluster), in bytes."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def make_tasks(groups, mode: str, config: str, seed: int = 1, golden: bool = True) -> list[CosimTask]:
    from . import _decoder_params

    params = _decoder_params(config)
    return [CosimTask(i, g, mode, config, params, seed, golden) for i, g in enumerate(groups)]


def run_tasks(tasks: list[CosimTask], config: str, executor, desc: str = "cosim") -> dict:
    """Build the harness once, ship it, run the tasks; the merged report (``merge``)."""
    from . import BULK_ROOT, build_harness

    BULK_ROOT.mkdir(parents=True, exist_ok=True)
    exe = executor.ship(build_harness(config)) if executor.client is not None else None
    t0 = time.perf_counter()
    results = executor.map(run_task, tasks, shared=exe, weights=[t.numel for t in tasks], desc=desc,
                           unit="values")
    out = merge(results)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    out["values_per_second"] = round(out["values"] / out["seconds"], 1) if out["seconds"] else 0.0
    out.update(executor.describe())
    out["resubmitted"] = executor.resubmitted
    return out


def merge(results: list[dict]) -> dict:
    """Task results (in task order) -> totals and the first mismatches of each tensor, deterministically."""
    per_tensor: dict[str, list] = {}
    for r in results:
        for name, i, g, ref in r["first"]:
            lst = per_tensor.setdefault(name, [])
            if len(lst) < FIRST_MISMATCHES:
                lst.append({"tensor": name, "index": i, "rtl": f"0x{g:04x}", "golden": f"0x{ref:04x}"})
    mism = [r["mismatches"] for r in results]
    return {"values": sum(r["values"] for r in results),
            "mismatches": None if any(m is None for m in mism) else sum(mism),
            "cycles": sum(r["cycles"] for r in results), "beats": sum(r["beats"] for r in results),
            "tasks": len(results), "sim_seconds": round(sum(r["sim_seconds"] for r in results), 3),
            "task_seconds": round(sum(r.get("wall", 0.0) for r in results), 3),
            "stream_bytes": sum(r.get("stream_bytes", 0) for r in results),
            "peak_rss_bytes": max((r.get("peak_rss_bytes", 0) for r in results), default=0),
            "first_mismatches": [m for lst in per_tensor.values() for m in lst]}


def cosim_many(named_encs, mode: str, config: str, executor, seed: int = 1, task_values: int = TASK_VALUES,
               desc: str = "cosim") -> dict:
    """Co-simulate ``[(name, EncodedTensor), ...]`` on ``executor``: the merged report plus the run's
    timing and executor (``RUN_KEYS``)."""
    if mode not in ("draft", "full"):
        raise ValueError(f"mode must be draft or full, got {mode!r}")
    tasks = make_tasks(plan_pieces(named_encs, task_values), mode, config, seed)
    return run_tasks(tasks, config, executor, desc)


def merged_report(report: dict) -> bytes:
    """The report without ``RUN_KEYS`` (times, executor), as canonical JSON bytes: the same for the same
    inputs whatever ran them."""
    import json

    keep = {k: v for k, v in report.items() if k not in RUN_KEYS}
    return (json.dumps(keep, indent=1, sort_keys=True) + "\n").encode()
