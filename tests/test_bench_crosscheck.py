"""bench/crosscheck.py: the roofline side always; GenZ and SCALE-Sim parts only where they are installed
(`pip install -e '.[crosscheck]'`; make test does not install them)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "crosscheck.py"


def _load():
    spec = importlib.util.spec_from_file_location("crosscheck_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod     # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


cc = _load()
GENZ_MISSING = cc.genz_available()
SCALESIM_MISSING = cc.scalesim_available()


def test_expected_tokens_limits_and_series():
    assert cc.expected_tokens(0.0, 4) == 1.0
    assert cc.expected_tokens(1.0, 4) == 5.0
    a, g = 0.8, 3
    assert cc.expected_tokens(a, g) == pytest.approx(sum(a ** k for k in range(g + 1)))


def test_shapes_match_known_parameter_counts():
    # SmolLM2-135M: 134,479,872 values in its 2-D weights (docs/report section 1); Llama-3-8B: 8.03 G params,
    # of which the untied input embedding (128256 x 4096) is not multiplied per token
    assert cc.MODELS["smollm2-135m"].matrix_params == 134_479_872
    llama = cc.MODELS["llama3-8b"]
    assert llama.matrix_params + llama.vocab * llama.hidden == pytest.approx(8.03e9, rel=0.002)
    assert cc.MODELS["qwen3-8b"].kv_values_per_token == 2 * 36 * 8 * 128


def test_roofline_rows_reproduce_the_heldout_figures():
    """The closed form at the held-out runs' measured alpha and gamma lands within 2 % of the pooled
    metrics.evaluate() figures of those runs (docs/MODEL.md), and the AR step is bytes / bandwidth + overhead."""
    res = cc.crosscheck(models=["smollm2-135m"], use_genz=False, use_scalesim=False)
    held = [r for r in res["rows"] if r["source"].startswith("held-out")]
    assert {r["device"] for r in held} == {"rtx4090", "orin", "npu"}
    for r in held:
        assert r["speedup_genz"] is None
        assert r["speedup_roofline"] == pytest.approx(r["speedup_metrics_heldout"], rel=0.02), r
    step = next(s for s in res["steps"] if s["device"] == "orin" and s["gamma"] == 4)
    shape = cc.MODELS["smollm2-135m"]
    hw = res["inputs"]["devices"]["orin"]
    by = 2 * shape.matrix_params + 2 * shape.kv_values_per_token * (512 + 1)   # read 512 positions, write 1
    assert step["roofline_s"]["ar"] == pytest.approx(by / hw["bandwidth"] + hw["overhead_s"], rel=1e-9)
    sweep = sorted((r for r in res["rows"] if r["device"] == "npu" and r["source"] == "sweep"),
                   key=lambda r: r["acceptance"])
    assert [r["acceptance"] for r in sweep] == list(cc.ACCEPTANCE_SWEEP)
    assert all(b["speedup_roofline"] > a["speedup_roofline"] for a, b in zip(sweep, sweep[1:]))
    assert res["tools"]["genz"].startswith("not requested")


def test_json_interface_and_bad_input():
    out = subprocess.run([sys.executable, str(SCRIPT), "--json", "--no-genz", "--no-scalesim", "--models",
                          "qwen3-4b", "--acceptance", "0.74,0.91", "--out", ""], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    res = json.loads(out.stdout)
    rows = res["rows"]
    assert len(rows) == 3 * 2
    for r in rows:
        assert {"device", "model", "acceptance", "speedup_roofline", "speedup_genz"} <= r.keys()
        assert ("speedup_scalesim" in r) == (r["device"] == "npu")
    bad = subprocess.run([sys.executable, str(SCRIPT), "--models", "gpt5", "--out", ""], capture_output=True,
                         text=True, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "unknown model" in bad.stderr
    bad = subprocess.run([sys.executable, str(SCRIPT), "--acceptance", "1.2", "--no-genz", "--no-scalesim",
                          "--out", ""], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "acceptance" in bad.stderr


@pytest.mark.skipif(GENZ_MISSING is not None, reason=str(GENZ_MISSING))
def test_genz_prices_the_passes_like_the_roofline():
    """GenZ's per-operator roofline agrees with metrics.pass_time within 1.5 % on every pass once its two
    artefacts are handled (binary GB/s, the embedding GEMM of its chunked verify model); its own
    speculative formula caps the tokens per step at gamma and so falls short at high acceptance."""
    res = cc.crosscheck(models=["smollm2-135m", "llama3-8b"], acceptances=(0.91,), use_scalesim=False)
    for s in res["steps"]:
        for p in cc.PASSES:
            assert abs(s["genz_vs_roofline_pct"][p]) < 1.5, (s["device"], s["model"], p)
        assert s["genz_notes"]["verify_embedding_gemm_s"] > 0
    r = next(r for r in res["rows"] if r["device"] == "orin" and r["model"] == "llama3-8b")
    assert abs(r["genz_vs_roofline_pct"]) < 1.0
    assert r["speedup_genz_builtin_formula"] < 0.95 * r["speedup_genz"]


@pytest.mark.skipif(SCALESIM_MISSING is not None, reason=str(SCALESIM_MISSING))
def test_scalesim_tile_is_bandwidth_or_array_bound(tmp_path):
    """One SCALE-Sim tile: the streamed operand's DRAM reads take values / bandwidth cycles, and a tile with
    few output features is array-bound (fill and drain per fold), which the split search then avoids."""
    npu = cc.ScaleSimNPU("npu", (16, 64, 64), cache=tmp_path / "c.json")
    reads, comp = npu._run_tile(256, 256, 1, 9.0)
    assert reads == pytest.approx(256 * 256 / 9.0, rel=0.01)
    assert comp < reads
    reads, comp = npu._run_tile(36, 256, 1, 29.0)
    assert comp > 2 * reads
    split = npu.gemm_cycles(576, 1536, 1, 4.787)   # SmolLM2's down projection, draft stream
    ideal = 576 * 1536 / 16 / (npu.bytes_per_cycle_core * 8 / 4.787)
    assert 0.99 * ideal <= split < 1.6 * ideal
    assert json.loads((tmp_path / "c.json").read_text())


def test_report_subsection_matches_the_model():
    """docs/report/report.md's cross-check speedups (the roofline's, first in each cell) are what
    metrics.pass_time gives today: a change to the performance model must regenerate them
    (python bench/crosscheck.py, then python eval/report.py --out docs/report --sections crosscheck)."""
    text = (ROOT / "docs" / "report" / "report.md").read_text()
    start = text.find("### Cross-check: the roofline against GenZ and SCALE-Sim v3")
    if start < 0:
        pytest.skip("docs/report/report.md has no cross-check subsection")
    body = text[start:text.find("## 5. Hardware", start)]
    assert "SCALE-Sim" in body and "GenZ" in body
    labels = {s.label: k for k, s in cc.MODELS.items()}
    res = cc.crosscheck(use_genz=False, use_scalesim=False)
    want = {(r["model"], round(r["acceptance"], 3), r["gamma"], r["device"]): r["speedup_roofline"]
            for r in res["rows"]}
    checked = 0
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] not in labels:
            continue
        for dev, cell in zip(cc.DEVICE_ORDER, cells[3:]):
            shown = float(cell.split("x")[0])
            key = (labels[cells[0]], float(cells[1]), int(cells[2]), dev)
            assert shown == pytest.approx(want[key], abs=0.0051), (key, shown, want[key])
            checked += 1
    assert checked >= 3 * 17
