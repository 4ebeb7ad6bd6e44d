"""`cassandra-rtl npu [--cass FILE] [--tensors N | --all] [--json]`: real linear tensors through the Verilated
NPU tile (hw/npu/tile.py) in every pass kind — bf16 (plain weights), Cassandra draft, Cassandra full, and a
verify pass (full, R rows) — each output checked bit for bit against the tile's reference (golden/npu.py),
with cycles, the fraction of the memory port used and where the cycles went (docs/NPU.md).

Exit 0 when every output matches and the batch is invariant, 1 on a mismatch or tile failure, 2 on bad input.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..argtypes import float_range, int_range, positive_int
from ..cli import CliError
from ..hw.npu import DEFAULT_DECODER

# the tile's C1 clusters: the headline, decoder v3 cores sharing one TensorRegisters (its measurement feeds
# `generate --numerics npu`), decoder v3 with its own registers per instance
TILE_DECODERS = (DEFAULT_DECODER, "decoder_c1v3_l8")


def _ordered(container):
    """The linear tensors in layer order (``blk.N.`` / ``layers.N.``), the others (embedding / LM head) last."""
    from ..tb.npu.bulk import linear_tensors
    items = linear_tensors(container)

    def key(it):
        parts = it[0].split(".")
        layer = int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 10**6
        return (layer, it[0])
    return sorted(items, key=key)


def generation_artifact(encode: bool = True) -> Path:
    """The model artifact `cassandra-rtl generate` uses for the bundled model with its default (tuned) draft
    allocation, encoded into the model cache if it is not there yet (``encode``; else only its path)."""
    from ..model import artifact as art_mod
    from ..model.api import choose_allocation, default_cache_dir
    from ..model.loader import bundled_model_path
    path = bundled_model_path()
    memo = default_cache_dir()
    _, alloc = choose_allocation(path, None, memo_dir=memo)
    cpath = art_mod.cache_path(memo, art_mod.source_digest(path, memo), alloc, path.name)
    if not cpath.is_file() and encode:
        from ..model.api import load
        print(f"[npu] encoding the bundled model into the model cache ({cpath})", file=sys.stderr)
        load(None)
    return cpath


def _container(path: Path):
    from ..golden.container import read_container
    if not path.exists():
        raise CliError(f"{path}: no such file")
    return read_container(path)


def _sizing(items, tile, mem, as_json: bool) -> int:
    """The sizing rule (docs/NPU.md "Sizing") on the container's streams: mean and most compressed tensor."""
    from ..tb.npu.bulk import sizing
    spec = ("spec.codes", "spec.signman") if tile.scheme == "c1" else ("spec.mx",)
    bits = []
    for name, e in items:
        d = sum(len(e.planes.get(p, b"")) for p in spec) * 8 / e.numel
        f = sum(len(v) for v in e.planes.values()) * 8 / e.numel
        bits.append((d, f, name))
    n = sum(e.numel for _, e in items)
    mean_d = sum(b[0] * e.numel for b, (_, e) in zip(bits, items)) / n
    mean_f = sum(b[1] * e.numel for b, (_, e) in zip(bits, items)) / n
    lo = min(bits)
    out = {"mean": sizing(tile, mean_d, mean_f, mem.bandwidth), "most_compressed": sizing(tile, lo[0], lo[1], mem.bandwidth),
           "bits": {"draft_mean": mean_d, "full_mean": mean_f, "draft_min": lo[0], "draft_min_tensor": lo[2]},
           "fifo_rule": {"read_latency": mem.read_latency, "words_per_cycle_per_stream_max":
                         tile.fifo_depth / (mem.read_latency + tile.burst)}}
    if as_json:
        print(json.dumps(out))
        return 0
    print(f"tile: {tile.instances} x {tile.decoder}, {tile.data_bytes} B/cycle; streams: draft {mean_d:.3f} bits/value "
          f"(most compressed {lo[0]:.3f}, {lo[2]}), full {mean_f:.3f}")
    for label, sz in (("mean stream", out["mean"]), ("most compressed tensor", out["most_compressed"])):
        for k in ("bf16", "draft", "full"):
            r = sz[k]
            print(f"  {label:22} {k:5}: port delivers {r['port_values_per_cycle']:6.2f} values/cycle, cluster "
                  f"{r['cluster_values_per_cycle']:5.2f} (margin {r['margin']:.2f}x)")
    print(f"  instances for the most compressed draft: {out['most_compressed']['instances_needed_draft']}; one DMA "
          f"stream sustains {out['fifo_rule']['words_per_cycle_per_stream_max']:.2f} words/cycle at latency "
          f"{mem.read_latency} (fifo_depth / (latency + burst))")
    return 0


def run(args) -> int:
    from ..tb.npu import MemParams, TileError, TileParams, available
    from ..tb.npu.bulk import measure

    tile = TileParams(instances=args.instances, decoder=args.decoder)
    mem = MemParams(bandwidth=args.bandwidth, read_latency=args.latency)
    cass = Path(args.cass) if args.cass else generation_artifact()
    c = _container(cass)
    items = [it for it in _ordered(c) if it[1].config.scheme == tile.scheme]
    if not items:
        raise CliError(f"the container has no 2-D {tile.scheme} tensors")
    if args.sizing:
        return _sizing(items, tile, mem, args.json)
    if not available():
        raise CliError("Verilator is not available (make setup installs it)")
    from ..executor import check_cluster

    cluster = check_cluster(args.cluster)
    if not args.all:
        items = items[:args.tensors]

    def progress(done, total):
        print(f"[npu] job {done}/{total}", file=sys.stderr, flush=True)
    try:
        meas = measure(items, tile, mem, verify_rows=args.verify_rows, jobs=args.jobs, seed=args.seed,
                       progress=progress, cluster=cluster)
    except TileError as exc:
        print(f"cassandra-rtl npu: tile failed: {exc}", file=sys.stderr)
        return 1
    rep = meas.report()
    ok = meas.batch_invariant and all(p["mismatches"] == 0 for p in rep["passes"].values())
    if ok and args.all and args.verify_rows == 5 and args.seed == 0 and args.decoder == TILE_DECODERS[0]:
        # the whole artifact at the defaults: the timing `generate --numerics npu` composes (tb/npu/speedup.py)
        from ..tb.npu.speedup import store_measurement
        store_measurement(cass, tile, mem, rep)
    if not args.per_tensor:
        rep.pop("per_tensor")
    if args.json:
        print(json.dumps(rep))
    else:
        print(f"{rep['tensors']} tensors through the tile ({tile.instances} x {tile.decoder}, {tile.data_bytes} B/cycle "
              f"port, memory {mem.bandwidth or tile.data_bytes} B/cycle, read latency {mem.read_latency})")
        print(f"{'pass':8} {'values':>12} {'mismatch':>9} {'cycles':>11} {'values/cyc':>10} {'port':>6} "
              f"{'busy':>6} {'mem':>6} {'dec':>6} {'act':>6}")
        for k, p in rep["passes"].items():
            w = p["where"]
            print(f"{k:8} {p['values']:>12,} {p['mismatches']:>9} {p['cycles']:>11,} {p['values_per_cycle']:>10.2f} "
                  f"{p['bandwidth_fraction']:>6.3f} {w['array_busy']:>6.3f} {w['wait_memory']:>6.3f} "
                  f"{w['wait_decoder']:>6.3f} {w['activation_load']:>6.3f}")
        print(f"batch invariant (verify row 0 == one-row passes): {meas.batch_invariant}; wall {meas.wall:.0f} s")
    return 0 if ok else 1


def register(sub):
    p = sub.add_parser("npu", help="real tensors through the Verilated NPU tile, checked against its reference")
    p.add_argument("--cass", default=None, help="a .cass container (default: the artifact `generate` uses for the "
                   "bundled model, its tuned draft allocation; encoded into the model cache if missing)")
    p.add_argument("--tensors", type=positive_int, default=7, help="the first N linear tensors (layer order)")
    p.add_argument("--all", action="store_true", help="every linear tensor")
    p.add_argument("--instances", type=int_range(1, 4), default=3, help="decoder instances of the tile")
    p.add_argument("--decoder", choices=TILE_DECODERS, default=TILE_DECODERS[0],
                   help="the cluster's decoder (the default, decoder_c1v3_l8_core: v3 cores sharing one TensorRegisters)")
    p.add_argument("--bandwidth", type=float_range(0, 64, lo_open=True), default=None,
                   help="memory bandwidth in bytes per cycle (default: the port width)")
    p.add_argument("--latency", type=int_range(1, 4096), default=64, help="memory read latency in cycles")
    p.add_argument("--verify-rows", type=int_range(1, 5), default=5, help="rows of the verify pass")
    p.add_argument("--jobs", type=int_range(1, 64), default=2, help="harness processes")
    from ..executor import add_cluster_argument

    add_cluster_argument(p)
    p.add_argument("--seed", type=int_range(0, 2**31), default=0, help="activation seed")
    p.add_argument("--per-tensor", action="store_true", help="include each tensor's cycles in the JSON")
    p.add_argument("--sizing", action="store_true", help="print the sizing rule on the container's streams "
                   "(no simulation)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
