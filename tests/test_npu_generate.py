"""A generation under the tile's numerics timed in tile cycles, and the Verilated tile in the generation loop.

Quick: a tiny model (model/testing.py) generates under `--numerics npu`; its passes are timed with the small
tile's measured cycles on the model's own artifact (tb/npu/speedup.generation_report). Slow: the CLI's
`generate --numerics npu --npu-rtl-layers 0 --compare` on the tiny model with the headline tile — the first
layer's linears computed by the Verilated tile in every pass, tokens identical to plain greedy decoding.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cassandra_rtl.model.testing import write_gguf
from cassandra_rtl.tb import npu

pytestmark = pytest.mark.sim

SMALL = npu.TileParams(data_bytes=8, instances=2, decoder="decoder_c1v3_l4_core", max_rows=5, max_in=128, burst=8,
                       fifo_depth=32, max_outstanding=8)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf", seed=3)


def test_generation_timed_in_tile_cycles(tiny_gguf, tmp_path, monkeypatch):
    if not npu.available():
        pytest.skip("Verilator not available")
    from cassandra_rtl.model.api import load
    from cassandra_rtl.tb.npu.speedup import generation_report

    from cassandra_rtl.tb.npu import speedup
    monkeypatch.setattr(speedup, "measurement_path", lambda *a: tmp_path / "measure.json")   # this test's cache
    m = load(str(tiny_gguf), numerics="npu", cache_dir=str(tmp_path / "cache"), say=lambda s: None)
    spec = m.generate("hello there", 12, temperature=0.0, gamma=3)
    ri = m.last_inputs
    plain = m.generate("hello there", 12, temperature=0.0, speculative=False)
    assert spec.tokens == plain.tokens
    rep = generation_report(ri, m.load_info.path, tile=SMALL)
    assert rep["measurement"]["batch_invariant"]
    assert all(p["mismatches"] == 0 for p in rep["measurement"]["passes"].values())
    assert rep["measurement"]["tensors"] == 3 * 7 + 1                   # 3 layers x 7 linears + the LM head
    assert 0 < rep["speedup_measured"] and 0 < rep["speedup_modeled"]
    assert 0.5 < rep["measured_bytes_fraction"] <= 1.0
    # a tiny model's passes are short: the tile's fixed costs per tensor make the measured time longer
    assert rep["decode_s_measured"] > rep["decode_s_modeled"] * 0.99
    assert rep["tile"]["decoder"] == "decoder_c1v3_l4_core" and rep["tile"]["instances"] == 2


@pytest.mark.slow
def test_cli_rtl_in_the_loop(tiny_gguf, tmp_path):
    if not npu.available():
        pytest.skip("Verilator not available")
    cmd = [sys.executable, "-m", "cassandra_rtl.cli", "generate", "--model", str(tiny_gguf), "--prompt", "hi",
           "--max-new-tokens", "8", "--gamma", "3", "--numerics", "npu", "--npu-rtl-layers", "0", "--compare",
           "--json", "--cache-dir", str(tmp_path / "cache")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["lossless_vs_plain"] is True
    rtl = out["npu_rtl"]
    assert rtl["mismatches"] == 0 and rtl["rtl_calls"] > 0
    assert set(rtl["by_kind"]) == {"draft", "full"}
    assert "speedup_measured" in out["npu"]


def test_rtl_layers_need_npu_numerics(tiny_gguf):
    cmd = [sys.executable, "-m", "cassandra_rtl.cli", "generate", "--model", str(tiny_gguf), "--prompt", "hi",
           "--npu-rtl-layers", "0"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 2
    assert "--numerics npu" in res.stderr and "Traceback" not in res.stderr
