"""The composition of a run's time from the tile's measured cycles (tb/npu/speedup.py) against the roofline of
model/metrics.py: an ideal tile (cycles = bytes / W, nothing else) must give the model's figure; measured
overheads must slow the measured side by exactly what they add."""
from __future__ import annotations

import pytest

from cassandra_rtl.model.metrics import CostSpec, RunInputs, pass_flops
from cassandra_rtl.tb.npu.speedup import compose

W = 8
PARAMS = 1_000_000          # one linear tensor of 1 M weights
BYTES = {"bf16": 2.0, "draft": 0.6, "full": 1.4}      # bytes per weight of each pass kind


def run_inputs(generated=9, verify_rows=4):
    kvb = 2000.0
    costs = {"target": CostSpec(int(PARAMS * BYTES["full"]), kvb, PARAMS, 2, "full"),
             "bf16": CostSpec(int(PARAMS * BYTES["bf16"]), kvb, PARAMS, 2, None),
             "draft": CostSpec(int(PARAMS * BYTES["draft"]), kvb, PARAMS, 2, "draft", kvb)}
    passes, ctx = [], 20
    for _ in range(3):                  # 3 draft steps then a verify pass of 4 rows: 3 rounds -> 9 tokens
        for _ in range(verify_rows - 1):
            passes.append(["draft", 1, costs["draft"].weight_bytes, kvb * ctx, pass_flops(PARAMS, 1, 2, 4, 16, ctx)])
            ctx += 1
        passes.append(["target", verify_rows, costs["target"].weight_bytes, kvb * ctx,
                       pass_flops(PARAMS, verify_rows, 2, 4, 16, ctx)])
    return RunInputs(4, 16, 2, 2, costs, passes, prompt_tokens=20, generated=generated)


def measurement(extra_cycles=0.0, verify_extra=0.0):
    per = {}
    for k, b in BYTES.items():
        nbytes = PARAMS * b
        per[k] = {"cycles": nbytes / W + extra_cycles, "bytes": nbytes, "weight_bytes": nbytes}
    per["verify"] = dict(per["full"], cycles=per["full"]["cycles"] + verify_extra)
    return {"tile": {"data_bytes": W, "instances": 3, "decoder": "decoder_c1v3_l8_core"}, "clock_hz": 500e6,
            "verify_rows": 5, "per_tensor": {"t": per}}


def test_ideal_tile_equals_the_roofline():
    rep = compose(run_inputs(), measurement())
    assert rep["speedup_measured"] == pytest.approx(rep["speedup_modeled"], rel=1e-9)
    assert rep["decode_s_measured"] == pytest.approx(rep["decode_s_modeled"], rel=1e-9)
    assert 0.9 < rep["measured_bytes_fraction"] < 1.0


def test_overheads_slow_the_measured_side():
    base = compose(run_inputs(), measurement())
    slow = compose(run_inputs(), measurement(extra_cycles=10_000))
    assert slow["speedup_measured"] < base["speedup_measured"]
    # every pass of the run and of bf16 AR pays 10,000 cycles more: W / BW seconds each
    from cassandra_rtl.model.metrics import hardware_presets
    bw = hardware_presets()["npu"].bandwidth
    n_run, n_ar = slow["parts"]["run"]["passes"], slow["parts"]["bf16_ar"]["passes"]
    assert slow["decode_s_measured"] - base["decode_s_measured"] == pytest.approx(n_run * 10_000 * W / bw, rel=1e-9)
    assert (slow["bf16_ar_decode_s_measured"] - base["bf16_ar_decode_s_measured"]
            == pytest.approx(n_ar * 10_000 * W / bw, rel=1e-9))


def test_verify_rows_interpolate():
    """A verify pass of r rows costs full + (r - 1) / (R_v - 1) of the measured R_v-row extra."""
    a = compose(run_inputs(verify_rows=4), measurement(verify_extra=0.0))
    b = compose(run_inputs(verify_rows=4), measurement(verify_extra=400.0))
    from cassandra_rtl.model.metrics import hardware_presets
    bw = hardware_presets()["npu"].bandwidth
    assert b["decode_s_measured"] - a["decode_s_measured"] == pytest.approx(3 * 300.0 * W / bw, rel=1e-9)


def test_report_reads_only_the_headline_measurement(tmp_path, monkeypatch):
    """The report's tile section reads the measurement stored for the generation artifact and the headline tile,
    encodes nothing, and says so without a model or an artifact."""
    import importlib.util
    from pathlib import Path

    from cassandra_rtl.commands import npu as npu_cmd
    from cassandra_rtl.errors import InputError
    from cassandra_rtl.tb.npu import speedup

    spec = importlib.util.spec_from_file_location("report_npu", Path(__file__).parents[1] / "eval" / "report_npu.py")
    rn = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rn)
    seen = {}

    def no_model(encode=True):
        seen["encode"] = encode
        raise InputError("bundled model not installed")
    monkeypatch.setattr(npu_cmd, "generation_artifact", no_model)
    assert rn.headline_measurement() == (None, None) and seen["encode"] is False
    assert "no bundled model artifact" in rn.render(tmp_path, "cmd")
    art = tmp_path / "m.cass"
    monkeypatch.setattr(npu_cmd, "generation_artifact", lambda encode=True: art)
    assert rn.headline_measurement() == (None, None)                      # not encoded yet
    art.write_bytes(b"x")
    monkeypatch.setattr(speedup, "measurement_path", lambda c, t, m: tmp_path / f"{t.key()}.json")
    path, meas = rn.headline_measurement()
    assert "decoder_c1v3_l8_core" in path.name and meas is None           # the headline tile's key, not there
    path.write_text('{"tile": {}}')
    assert rn.headline_measurement()[1] == {"tile": {}}


def test_measurement_key_is_the_simulated_rtl(tmp_path, monkeypatch):
    """A stored tile measurement is keyed by what it simulated: the tile's exported Verilog (its decoders in it),
    the harness and its memory model. Any change to one of them makes a new key, so a stale measurement is never
    reused; the same Verilog gives the same key (an edit to a source the tile does not elaborate keeps it)."""
    from cassandra_rtl.tb import npu
    from cassandra_rtl.tb.npu import TileParams, speedup

    files = {n: tmp_path / n for n in ("tile.v", "harness.cpp", "axi_ram.h")}
    for f in files.values():
        f.write_text("1\n")
    monkeypatch.setattr(npu, "export_tile", lambda tile: files["tile.v"])
    monkeypatch.setattr(npu, "HARNESS", files["harness.cpp"])
    monkeypatch.setattr(npu, "AXI_RAM", files["axi_ram.h"])
    tile = TileParams()
    keys = [speedup._rtl_digest(tile)]
    assert speedup._rtl_digest(tile) == keys[0]
    for f in files.values():
        f.write_text("2\n")
        keys.append(speedup._rtl_digest(tile))
    assert len(set(keys)) == 4
