"""Real tensors through the Verilated NPU tile in every pass kind, checked bit for bit against the tile's
reference (golden/npu.py), with the cycles and where they went (``cassandra-rtl npu``, docs/NPU.md).

Per tensor four passes run back to back in one command list: bf16 (R = 1), draft (R = 1), full (R = 1) and
verify (full, R = ``verify_rows``), with seeded random bf16 activations (normal, the scale of a normed hidden
state); the verify pass's row 0 is the R = 1 passes' row, so batch invariance is checked on every tensor
(verify row 0 == full R = 1 == bf16 R = 1, all equal to the reference on the original weights, the draft
equal to the reference on the golden draft decode).
"""
from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import MemParams, Plan, TileParams, run

PASS_KINDS = ("bf16", "draft", "full", "verify")


def linear_tensors(container) -> list:
    """(name, EncodedTensor) of every 2-D tensor (the linear layers; the tied embedding is the LM head)."""
    return [(n, e) for n, e in container.tensors.items() if len(e.shape) == 2]


def activations(n_in: int, rows: int, seed: int) -> np.ndarray:
    """uint16 bf16 bits (rows, n_in): N(0, 1) rounded to bf16 (RNE)."""
    from cassandra_rtl.golden.io import float_to_bf16_bits
    rng = np.random.default_rng(seed)
    return float_to_bf16_bits(rng.standard_normal((rows, n_in)).astype(np.float32)).astype(np.uint16)


@dataclass
class KindTotals:
    values: int = 0
    mismatches: int = 0
    cycles: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    weight_bytes: int = 0
    act_wait: int = 0
    busy: int = 0
    wait_mem: int = 0
    wait_dec: int = 0
    passes: int = 0

    def add(self, st: dict, mismatches: int):
        self.values += st["values"]
        self.mismatches += mismatches
        self.cycles += st["cycles"]
        self.read_bytes += st["read_bytes"]
        self.write_bytes += st["write_bytes"]
        self.weight_bytes += st["weight_bytes"]
        self.act_wait += st["act_wait"]
        self.busy += sum(st["busy"])
        self.wait_mem += sum(st["wait_mem"])
        self.wait_dec += sum(st["wait_dec"])
        self.passes += 1

    def report(self, tile: TileParams, mem: MemParams) -> dict:
        bw = tile.data_bytes if mem.bandwidth is None else mem.bandwidth
        port = self.cycles * bw
        n = tile.instances
        return {"values": self.values, "mismatches": self.mismatches, "cycles": self.cycles, "passes": self.passes,
                "read_bytes": self.read_bytes, "write_bytes": self.write_bytes, "weight_bytes": self.weight_bytes,
                "bandwidth_fraction": (self.read_bytes + self.write_bytes) / port if port else None,
                "read_fraction": self.read_bytes / port if port else None,
                "values_per_cycle": self.values / self.cycles if self.cycles else None,
                "where": {  # per instance-cycle of the passes (fractions of cycles x instances)
                    "array_busy": self.busy / (self.cycles * n) if self.cycles else None,
                    "wait_memory": self.wait_mem / (self.cycles * n) if self.cycles else None,
                    "wait_decoder": self.wait_dec / (self.cycles * n) if self.cycles else None,
                    "activation_load": self.act_wait / self.cycles if self.cycles else None}}


@dataclass
class Measurement:
    tile: TileParams
    mem: MemParams
    totals: dict = field(default_factory=lambda: {k: KindTotals() for k in PASS_KINDS})
    per_tensor: dict = field(default_factory=dict)      # name -> {kind: {cycles, bytes, weight_bytes, mismatches}}
    verify_rows: int = 5
    batch_invariant: bool = True
    wall: float = 0.0

    def report(self) -> dict:
        from dataclasses import asdict
        return {"tile": asdict(self.tile), "memory": asdict(self.mem),
                "passes": {k: t.report(self.tile, self.mem) for k, t in self.totals.items()},
                "batch_invariant": self.batch_invariant, "tensors": len(self.per_tensor),
                "verify_rows": self.verify_rows, "per_tensor": self.per_tensor, "wall_s": round(self.wall, 1)}


def _job(tile, mem, items, verify_rows, seed0, exe=None, tmp_dir=None):
    from cassandra_rtl.golden.codec import decode_draft, decode_full
    from cassandra_rtl.golden.npu import tile_linear_np

    plan = Plan(tile)
    refs = []
    for k, (name, enc) in enumerate(items):
        n_in = enc.shape[1]
        xv = activations(n_in, verify_rows, seed0 + k)
        x1 = xv[:1]
        full = decode_full(enc).reshape(enc.shape)
        draft = decode_draft(enc).reshape(enc.shape)
        plan.add_pass(full, "bf16", x1, name)
        plan.add_pass(enc, "draft", x1, name)
        plan.add_pass(enc, "full", x1, name)
        plan.add_pass(enc, "full", xv, name)
        ref_full = tile_linear_np(full, xv, tile.lanes)
        refs += [ref_full[:1], tile_linear_np(draft, x1, tile.lanes), ref_full[:1], ref_full]
    res = run(plan, mem, exe=exe, tmp_dir=tmp_dir)
    return items, refs, res


def _summarise(items, refs, res) -> list[tuple[str, list, bool]]:
    """Per tensor of a job: its name, (pass kind, harness stats, mismatches) per pass, and whether verify row 0
    equals the one-row passes (batch invariance); the outputs themselves are dropped here."""
    out = []
    for k, (name, enc) in enumerate(items):
        outs = res.outputs[4 * k: 4 * k + 4]
        sts = res.passes[4 * k: 4 * k + 4]
        passes = [(kind, st, int(np.count_nonzero(o != ref)))
                  for kind, o, ref, st in zip(PASS_KINDS, outs, refs[4 * k: 4 * k + 4], sts)]
        invariant = bool(np.array_equal(outs[3][:1], outs[2]) and np.array_equal(outs[2], outs[0]))
        out.append((name, passes, invariant))
    return out


def npu_task(exe, task) -> list:
    """One job on a cluster worker (cassandra_rtl/executor.py): the shipped harness, the job files in the
    worker's temporary folder, only the per-tensor summary sent back."""
    import tempfile

    tile, mem, items, verify_rows, seed0 = task
    return _summarise(*_job(tile, mem, items, verify_rows, seed0, exe=exe.path(), tmp_dir=tempfile.gettempdir()))


def _add(meas: Measurement, summary: list) -> None:
    for name, passes, invariant in summary:
        per = {}
        for kind, st, mm in passes:
            meas.totals[kind].add(st, mm)
            per[kind] = {"cycles": st["cycles"], "bytes": st["read_bytes"] + st["write_bytes"],
                         "weight_bytes": st["weight_bytes"], "mismatches": mm}
        if not invariant:       # batch invariance: verify row 0 == the one-row passes (bf16 and full)
            meas.batch_invariant = False
        meas.per_tensor[name] = per


def measure(items: list, tile: TileParams | None = None, mem: MemParams | None = None, verify_rows: int = 5,
            jobs: int = 2, seed: int = 0, progress=None, cluster: str | None = None) -> Measurement:
    """Run ``items`` [(name, EncodedTensor)] through the tile; ``progress(done, total)`` after each job, in job
    order. ``cluster``: the jobs on Dask (cassandra_rtl/executor.py: local:N or a scheduler address) instead
    of ``jobs`` local threads; the same measurement either way."""
    tile = tile or TileParams()
    mem = mem or MemParams()
    meas = Measurement(tile, mem, verify_rows=verify_rows)
    t0 = time.perf_counter()
    # jobs of about 8 M values each (one harness process and memory image per job)
    batches, cur, size = [], [], 0
    for it in items:
        cur.append(it)
        size += it[1].numel
        if size >= 8_000_000:
            batches.append(cur)
            cur, size = [], 0
    if cur:
        batches.append(cur)
    tasks = [(tile, mem, b, verify_rows, seed + 1000 * j) for j, b in enumerate(batches)]
    if cluster:                 # on Dask: the harness built here once and shipped
        from cassandra_rtl.executor import Executor

        from . import build_harness

        with Executor(cluster) as ex:
            summaries = ex.map(npu_task, tasks, shared=ex.ship(build_harness(tile)),
                               weights=[sum(e.numel for _, e in b) for b in batches], desc="npu", unit="values")
        for done, summary in enumerate(summaries, 1):
            _add(meas, summary)
            if progress:
                progress(done, len(batches))
    else:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futs = [pool.submit(_job, *t) for t in tasks]
            for done, fut in enumerate(futs, 1):
                _add(meas, _summarise(*fut.result()))
                if progress:
                    progress(done, len(batches))
    meas.wall = time.perf_counter() - t0
    return meas


def sizing(tile: TileParams, draft_bits: float, full_bits: float, bandwidth: float | None = None) -> dict:
    """The sizing rule (docs/NPU.md "Sizing"): values/cycle the port delivers per pass kind against what the
    cluster decodes and the array consumes."""
    from cassandra_rtl.hw.configs import CONFIG_INFO
    info = CONFIG_INFO[tile.decoder]
    bw = tile.data_bytes if bandwidth is None else bandwidth
    need = {"bf16": bw * 8 / 16, "draft": bw * 8 / draft_bits, "full": bw * 8 / full_bits}
    have = {"bf16": tile.instances * tile.lanes, "draft": tile.instances * info["values_per_cycle"],
            "full": tile.instances * info.get("values_per_cycle_full", info["values_per_cycle"])}
    return {k: {"port_values_per_cycle": need[k], "cluster_values_per_cycle": have[k],
                "margin": have[k] / need[k]} for k in need} | {
        "instances_needed_draft": math.ceil(need["draft"] / info["values_per_cycle"])}
