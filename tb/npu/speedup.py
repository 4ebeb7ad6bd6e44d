"""The speedup measured in cycles (docs/NPU.md "Speedup measured in cycles").

The NPU preset (synth/overhead.py DEVICES["npu"]: bandwidth BW, 64 TFLOPS, per-pass host overhead from
model/metrics.py) is modelled as M copies of the RTL tile, each with a W-byte port at the tile clock f and 1/M
of every tensor's rows: M = BW / (W f). A tile's measured cycles for a whole tensor, divided by M and by f, are
the device's time for that tensor's linear layer; so the measured linear time of a pass is

    t_linear = sum over the model's linear tensors of cycles(tensor, pass kind, rows) * W / BW

(the clock cancels: it sets M, not the time). ``cycles`` come from the Verilated tile (``cassandra-rtl npu
--all --per-tensor``: bf16, draft, full at R = 1 and verify at R = R_v; a verify pass of r rows is interpolated
between full R = 1 and verify R = R_v, linear in r — the only r-dependent costs are the activation load and the
result writes). The rest of a pass is charged by the model (model/metrics.py): K/V reads and writes and the
1-D weights (norms) at BW, attention's FLOPs at the device's peak, and the per-pass overhead.
"""
from __future__ import annotations

from cassandra_rtl.model.metrics import (DEFAULT_OVERHEAD_US, Hardware, RunInputs, _ar_passes, evaluate,
                                         hardware_presets)


def _cycles(meas: dict, kind: str, rows: int) -> tuple[float, float]:
    """(cycles, tile read+write bytes) of one pass over every measured tensor."""
    per = meas["per_tensor"]
    rv = meas["verify_rows"]
    cyc = byt = 0.0
    for t in per.values():
        if kind == "full" and rows > 1:
            a, b = t["full"], t["verify"]
            frac = (rows - 1) / (rv - 1) if rv > 1 else 0.0
            cyc += a["cycles"] + frac * (b["cycles"] - a["cycles"])
            byt += a["bytes"] + frac * (b["bytes"] - a["bytes"])
        else:
            cyc += t[kind]["cycles"]
            byt += t[kind]["bytes"]
    return cyc, byt


def compose(ri: RunInputs | list, meas: dict, overhead_us: float | None = None) -> dict:
    """Measured (RTL cycles + charged rest) and modeled (model/metrics.py, same tile) time of the run and
    of bf16 AR on the NPU preset; ``meas``: {"tile": {...}, "clock_hz": f, "verify_rows": R_v,
    "per_tensor": {name: {kind: {"cycles", "bytes", "weight_bytes"}}}}."""
    runs = ri if isinstance(ri, list) else [ri]
    ov = (DEFAULT_OVERHEAD_US["npu"] if overhead_us is None else overhead_us) * 1e-6
    hw = hardware_presets(overhead_us={"npu": ov * 1e6})["npu"]
    W = meas["tile"]["data_bytes"]
    f = meas["clock_hz"]
    M = hw.bandwidth / (W * f)
    lin_w = {k: sum(t[k]["weight_bytes"] for t in meas["per_tensor"].values()) for k in ("bf16", "draft", "full")}
    kind_of = {"target": "full", "draft": "draft", "bf16": "bf16"}

    def pass_time(r: RunInputs, kind: str, rows: int, wb: float, kvb: float, flops: float) -> dict:
        c = r.costs[kind]
        tk = kind_of[kind] if c.fmt or kind == "bf16" else "bf16"
        cyc, tile_bytes = _cycles(meas, tk, rows)
        t_lin = cyc * W / hw.bandwidth
        w_bpt = c.kv_bytes_per_token if c.kv_write_bytes_per_token is None else c.kv_write_bytes_per_token
        rest_bytes = max(0.0, wb - lin_w[tk]) + kvb + rows * w_bpt
        attn_flops = max(0.0, flops - 2.0 * c.matrix_params * rows)
        t_rest = max(rest_bytes / hw.bandwidth, attn_flops / hw.flops)
        return {"time": t_lin + t_rest + hw.overhead_s, "linear": t_lin, "rest": t_rest, "overhead": hw.overhead_s,
                "measured_bytes": tile_bytes, "charged_bytes": rest_bytes, "cycles": cyc}

    tot = {"run": {}, "bf16_ar": {}}
    by_kind: dict = {}
    for r in runs:
        for label, passes in (("run", r.passes), ("bf16_ar", _ar_passes(r, "bf16"))):
            for kind, rows, wb, kvb, fl in passes:
                p = pass_time(r, kind, rows, wb, kvb, fl)
                acc = tot[label]
                for k in ("time", "linear", "rest", "overhead", "measured_bytes", "charged_bytes", "cycles"):
                    acc[k] = acc.get(k, 0.0) + p[k]
                acc["passes"] = acc.get("passes", 0) + 1
                key = f"{label}:{kind}"
                bk = by_kind.setdefault(key, {"passes": 0, "time": 0.0, "cycles": 0.0, "rows": 0})
                bk["passes"] += 1
                bk["time"] += p["time"]
                bk["cycles"] += p["cycles"]
                bk["rows"] += rows
    # modeled: model/metrics.py batch-invariant, the decoder cap of M tiles' clusters
    from cassandra_rtl.hw.configs import CONFIG_INFO
    info = CONFIG_INFO[meas["tile"]["decoder"]]
    n = meas["tile"]["instances"] * M
    cap = Hardware(hw.name, hw.bandwidth, hw.flops, hw.overhead_s,
                   n * info["values_per_cycle"] * f, n * info.get("values_per_cycle_full", info["values_per_cycle"]) * f,
                   f"{meas['tile']['instances']} x {meas['tile']['decoder']} per tile x {M:.1f} tiles at {f / 1e6:.0f} MHz")
    ev = evaluate(runs, {"npu": cap}, modes=("batch-invariant",))["by_device"]["npu"]["batch-invariant"]
    measured = sum(tot[x]["measured_bytes"] for x in tot)
    charged = sum(tot[x]["charged_bytes"] for x in tot)
    gen = sum(r.generated for r in runs)
    return {
        "speedup_measured": tot["bf16_ar"]["time"] / tot["run"]["time"] if tot["run"].get("time") else None,
        "speedup_modeled": ev["speedup"],
        "measured_bytes_fraction": measured / (measured + charged) if measured + charged else None,
        "decode_s_measured": tot["run"].get("time"), "bf16_ar_decode_s_measured": tot["bf16_ar"].get("time"),
        "decode_s_modeled": ev["decode_s"], "bf16_ar_decode_s_modeled": ev["bf16_ar_decode_s"],
        "tokens": gen,
        "per_token_us": {k: v["time"] / max(1, gen) * 1e6 for k, v in by_kind.items()},
        "by_pass_kind": by_kind,
        "parts": {k: {kk: vv for kk, vv in v.items()} for k, v in tot.items()},
        "tile": {**meas["tile"], "clock_mhz": f / 1e6, "clock_source": meas.get("clock_source", ""),
                 "tiles_for_npu_bandwidth": M, "npu_bandwidth_gbps": hw.bandwidth / 1e9,
                 "overhead_us": hw.overhead_s * 1e6, "verify_rows_measured": meas["verify_rows"]},
        "modeled_decoder_cap": cap.decoder_source,
    }


# ------------------------------------------------------------------------------ a generation's artifact
# The tile's clock: its slowest part in the generic flow, the DotUnit (8 lanes x 5 rows: its accumulate loop,
# one fp32 adder, as the PE's), 350.5 MHz (docs/NPU.md section 6, `python -m cassandra_rtl.synth.npu_area
# table`). It only sets the number of tiles M (the time does not depend on it, see the module docstring).
DEFAULT_CLOCK_HZ = 350.5e6
DEFAULT_CLOCK_SOURCE = "the tile's slowest part, the DotUnit, generic flow (docs/NPU.md section 6)"


def _file_digest(path) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()[:20]


def measurement_for(cass_path, tile=None, mem=None, jobs: int = 2, progress=None) -> dict:
    """The tile's per-tensor measurement (tb/npu/bulk.py) of every linear tensor of a .cass, cached in
    build/npu/measure/ by the file's content and the tile and memory parameters; measured (minutes) if missing."""
    import json

    from cassandra_rtl.golden.container import read_container

    from . import MemParams, TileParams
    from .bulk import linear_tensors, measure
    tile = tile or TileParams()
    mem = mem or MemParams()
    out = measurement_path(cass_path, tile, mem)
    if out.exists():
        return json.loads(out.read_text())
    c = read_container(cass_path)
    items = [it for it in linear_tensors(c) if it[1].config.scheme == tile.scheme]
    meas = measure(items, tile, mem, jobs=jobs, progress=progress)
    rep = meas.report()
    store_measurement(cass_path, tile, mem, rep)
    return rep


def _rtl_digest(tile) -> str:
    """What the measurement simulated: the tile's exported Verilog (its decoders included) and the harness with
    its memory model. A measurement is reused only for that RTL: an edit to a source the tile does not
    elaborate (another decoder) keeps it, any change to the tile's Verilog does not."""
    import hashlib

    from . import AXI_RAM, HARNESS, export_tile
    h = hashlib.sha256()
    for p in (export_tile(tile), HARNESS, AXI_RAM):
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def measurement_path(cass_path, tile, mem):
    from . import NPU_ROOT
    key = f"{_file_digest(cass_path)}-{tile.key()}-bw{mem.bandwidth}-l{mem.read_latency}-rtl{_rtl_digest(tile)}"
    return NPU_ROOT / "measure" / f"{key}.json"


def store_measurement(cass_path, tile, mem, rep: dict) -> None:
    """Cache a whole-artifact measurement (bit-exact and batch-invariant only) for ``measurement_for``."""
    import json
    rep = dict(rep, source=str(cass_path))
    if not rep["batch_invariant"] or any(p["mismatches"] for p in rep["passes"].values()):
        raise RuntimeError(f"the tile's outputs differ from its reference on {cass_path}: not caching the timing")
    out = measurement_path(cass_path, tile, mem)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(rep))
    tmp.replace(out)


def generation_report(ri, cass_path, clock_hz: float | None = None, clock_source: str | None = None,
                      progress=None, **kw) -> dict:
    """The ``npu`` object of ``generate --numerics npu --json``: a finished run's passes timed with the tile's
    measured cycles on the run's own artifact, beside model/metrics.py for the same tile."""
    meas = dict(measurement_for(cass_path, progress=progress, **kw))
    meas["clock_hz"] = clock_hz or DEFAULT_CLOCK_HZ
    meas["clock_source"] = clock_source or DEFAULT_CLOCK_SOURCE
    rep = compose(ri, meas)
    rep["measurement"] = {k: meas[k] for k in ("passes", "batch_invariant", "tensors", "source") if k in meas}
    return rep
