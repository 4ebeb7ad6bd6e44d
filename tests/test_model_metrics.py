"""Performance model v2 (model/metrics.py): device table shared with synth/overhead.py, per-pass overhead,
decoder throughput cap, verify-cost modes, KV writes, prefill, the format x speculation split, and that a
result's stored inputs recompute the same figures. Expected values are computed here by hand."""
import json
import math

import pytest
import torch

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.model import metrics as M
from cassandra_rtl.synth.overhead import DEVICES

torch.set_num_threads(1)


def test_presets_use_the_synthesis_device_table():
    hw = M.hardware_presets()
    assert set(hw) == set(M.PRESET_DEVICE)
    for key, dkey in M.PRESET_DEVICE.items():
        assert hw[key].bandwidth == DEVICES[dkey].bandwidth_gbps * 1e9
        assert hw[key].flops == DEVICES[dkey].dense_tflops * 1e12
        assert hw[key].overhead_s == pytest.approx(M.DEFAULT_OVERHEAD_US[key] * 1e-6)
        assert hw[key].decoder_values_per_s is None and hw[key].decoder_source.startswith("unlimited")
    assert M.hardware_presets(overhead_us=0)["orin"].overhead_s == 0
    assert M.hardware_presets(overhead_us={"npu": 7})["npu"].overhead_s == pytest.approx(7e-6)
    with pytest.raises(ConfigError):
        M.hardware_presets(overhead_us=-1)


def _inputs(passes, prompt=10, generated=3, fmt_t=None, fmt_d="draft"):
    # 1 layer, 1 head, head_dim 1, 1 kv head: 4 FLOPs per key per row; KV 8 bytes/token (bf16: 2 x 2 B x ... )
    costs = {"target": M.CostSpec(1_000_000, 8.0, 500_000, 1, fmt_t),
             "bf16": M.CostSpec(2_000_000, 16.0, 500_000, 1),
             "draft": M.CostSpec(400_000, 16.0, 500_000, 1, fmt_d, 16.0)}
    return M.RunInputs(1, 1, 1, 1, costs, passes, prompt, generated)


def _p(kind, rows, ctx, ri_costs, kvb=None):
    c = ri_costs[kind]
    kv = c.kv_bytes_per_token * ctx if kvb is None else kvb
    return [kind, rows, c.weight_bytes, kv, M.pass_flops(c.matrix_params, rows, 1, 1, 1, ctx)]


def test_pass_time_by_hand():
    hw = M.Hardware("toy", 1e9, 1e15, overhead_s=1e-4)
    ri = _inputs([])
    # a 3-row verify pass at context 12: batch-invariant = one weight read + KV read 8*12 + KV write 3*8
    p = _p("target", 3, 12, ri.costs)
    r = M.pass_time(hw, ri, *p, mode="batch-invariant")
    assert r["time"] == pytest.approx((1_000_000 + 96 + 24) / 1e9 + 1e-4)
    assert r["bound"] == "memory" and r["decoded"] == 0
    # row-exact: 3 weight reads, rows read keys up to 10, 11, 12 -> 8*(10+11+12), 3 overheads
    r = M.pass_time(hw, ri, *p, mode="row-exact")
    assert r["weight_read"] == 3_000_000 and r["kv_read"] == pytest.approx(8 * 33)
    assert r["time"] == pytest.approx((3_000_000 + 8 * 33 + 24) / 1e9 + 3e-4)
    # compute-bound device: FLOPs decide
    slow = M.Hardware("slowcompute", 1e12, 1e9)
    fl = M.pass_flops(500_000, 3, 1, 1, 1, 12)
    assert M.pass_time(slow, ri, *p)["time"] == pytest.approx(fl / 1e9)


def test_decoder_cap_binds_only_below_memory_speed():
    ri = _inputs([], fmt_t="full")
    p = _p("draft", 1, 11, ri.costs)
    free = M.Hardware("free", 1e9, 1e15)
    assert M.pass_time(free, ri, *p)["bound"] == "memory"
    # draft pass decodes 500,000 weights + 11 positions x 2 KV values; 1e8 values/s -> 5.0002 ms > 0.4 ms memory
    capped = M.Hardware("capped", 1e9, 1e15, decoder_values_per_s=1e8, decoder_values_per_s_full=5e7)
    r = M.pass_time(capped, ri, *p)
    assert r["bound"] == "decoder" and r["time"] == pytest.approx((500_000 + 22) / 1e8)
    # the target reads the format in full mode (its own, lower rate); bf16 passes never touch the decoder
    t = M.pass_time(capped, ri, *_p("target", 1, 11, ri.costs))
    assert t["time"] == pytest.approx((500_000 + 22) / 5e7)
    assert M.pass_time(capped, ri, *_p("bf16", 1, 11, ri.costs))["decoded"] == 0


def test_split_is_a_product_and_ar_runs_are_unaffected_by_mode():
    ri = _inputs([], generated=5)
    ri.passes = ([_p("draft", 1, 11 + i, ri.costs) for i in range(2)] + [_p("target", 3, 13, ri.costs)]
                 + [_p("draft", 1, 14 + i, ri.costs) for i in range(2)] + [_p("target", 3, 16, ri.costs)])
    ev = M.evaluate(ri, {"toy": M.Hardware("toy", 1e9, 1e15, overhead_s=2e-5)})
    for mode in M.VERIFY_MODES:
        d = ev["by_device"]["toy"][mode]
        assert d["speedup"] == pytest.approx(d["format_speedup"] * d["speculation_speedup"], rel=1e-12)
    bi, rx = ev["by_device"]["toy"]["batch-invariant"], ev["by_device"]["toy"]["row-exact"]
    assert bi["format_speedup"] == rx["format_speedup"] and bi["bf16_ar_decode_s"] == rx["bf16_ar_decode_s"]
    assert rx["speedup"] < bi["speedup"]
    # bf16 AR by hand: 4 passes at contexts 11..14, 2 MB + 16 B x ctx + 16 B written, + overhead each
    t = sum((2_000_000 + 16 * c + 16) / 1e9 + 2e-5 for c in range(11, 15))
    assert bi["bf16_ar_decode_s"] == pytest.approx(t)
    # prefill: one pass over 10 prompt tokens, reported separately and the same in both modes
    fl = 2 * 500_000 * 10 + 4 * 10 * 11 / 2
    assert bi["bf16_prefill_s"] == pytest.approx(max((2_000_000 + 10 * 32) / 1e9, fl / 1e15) + 2e-5)


def test_decoder_from_synthesis_report(tmp_path):
    rep = {"overhead": {"by_device": {"jetson_agx_orin": {
        "decoder": "decoder_c1v3_l8", "decoder_instances": 128, "decoder_values_per_cycle": 8,
        "decoder_values_per_cycle_full": 4, "clock_mhz": 141.0, "decoder_percent": 1.2}}}}
    f = tmp_path / "report.json"
    f.write_text(json.dumps(rep))
    hw = M.hardware_presets(synth_report=f)
    assert hw["orin"].decoder_values_per_s == pytest.approx(128 * 8 * 141e6)
    assert hw["orin"].decoder_values_per_s_full == pytest.approx(128 * 4 * 141e6)
    assert "decoder_c1v3_l8" in hw["orin"].decoder_source
    assert hw["rtx4090"].decoder_values_per_s is None and "no decoder sized" in hw["rtx4090"].decoder_source
    assert M.hardware_presets(decoder="256:8:141")["npu"].decoder_values_per_s == pytest.approx(256 * 8 * 141e6)
    # a decoder that misses the PE clock is priced at its own Fmax with its own-clock instance count
    rep["overhead"]["by_device"]["npu"] = {"decoder": "d", "decoder_instances": 10, "decoder_values_per_cycle": 8,
                                           "clock_mhz": 200.0, "decoder_meets_pe_clock": False,
                                           "decoder_block_fmax_mhz": 100.0, "decoder_instances_own_clock": 20}
    f.write_text(json.dumps(rep))
    assert M.hardware_presets(synth_report=f)["npu"].decoder_values_per_s == pytest.approx(20 * 8 * 100e6)
    with pytest.raises(ConfigError):
        M.hardware_presets(synth_report=tmp_path / "missing.json")
    with pytest.raises(ConfigError):
        M.parse_decoder("8:141")


@pytest.fixture(scope="module")
def tiny_run():
    from cassandra_rtl.golden.kv import kv_config
    from cassandra_rtl.model.drafters import build_cassandra, uniform_cfg
    from cassandra_rtl.model.engine import Engine
    from cassandra_rtl.model.testing import tiny_checkpoint

    ck = tiny_checkpoint(seed=0)
    m = ck.build()
    d, tcost = build_cassandra(ck, m, uniform_cfg(1.0, 3), kv_config(32, mantissa_bits=3))
    eng = Engine(m, tcost)
    return eng, d, eng.generate(list(range(10)), 20, drafter=d, gamma=3)


def test_real_run_inputs_round_trip_and_contexts(tiny_run):
    eng, d, r = tiny_run
    s = M.model_summary(r, eng, d, with_passes=True)
    ri = M.RunInputs.from_json(json.loads(json.dumps(s["model_inputs"])))
    assert M.evaluate(ri) == s["performance_model"]
    assert ri.costs["target"].fmt == "full" and ri.costs["draft"].fmt == "draft" and ri.costs["bf16"].fmt is None
    # contexts recovered from the FLOP count: the target's verify passes end at prompt + generated tokens so far
    ctx = [M._ctx_from_flops(p[4], p[1], ri.costs[p[0]], ri) for p in ri.passes if p[0] == "target"]
    first_rows = next(p[1] for p in ri.passes if p[0] == "target")
    assert all(c == int(c) for c in ctx) and ctx == sorted(ctx) and ctx[0] == 10 + first_rows  # pos 10 + k + 1
    assert max(ctx) <= 10 + r.stats.generated
    # batch-invariant with no overhead reproduces the engine's quick figure up to the KV writes
    ev = M.evaluate(ri, M.hardware_presets(overhead_us=0))
    quick = r.baseline.time(M.hardware_presets(overhead_us=0)["orin"]) / r.ledger.time(
        M.hardware_presets(overhead_us=0)["orin"])
    assert ev["by_device"]["orin"]["batch-invariant"]["speedup"] == pytest.approx(quick, rel=0.02)
    assert ev["by_device"]["orin"]["row-exact"]["speedup"] < ev["by_device"]["orin"]["batch-invariant"]["speedup"]


def test_overhead_lowers_speculation_gain(tiny_run):
    eng, d, r = tiny_run
    ri = M.run_inputs(r, eng, d)
    sp = [M.evaluate(ri, M.hardware_presets(overhead_us=o))["by_device"]["orin"]["batch-invariant"]
          ["speculation_speedup"] for o in (0, 50, 300)]
    assert sp[0] > sp[1] > sp[2]


def test_spread_and_heldout_prompts():
    from cassandra_rtl.model.prompts_heldout import CATEGORIES, HELDOUT, check_disjoint

    s = M.spread([3.0, 1.0, 2.0, None, 4.0])
    assert (s["min"], s["median"], s["max"], s["n"]) == (1.0, 2.5, 4.0, 4) and math.isclose(s["mean"], 2.5)
    assert check_disjoint() == []
    assert {c for c, _ in HELDOUT} == set(CATEGORIES)


def test_bench_writes_inputs_and_table_recomputes(tmp_path, capsys):
    """model/bench.py end to end on a tiny HF folder: per-prompt lines carry the passes; --table recomputes
    the same figures, and other assumptions (--overhead-us, --decoder) change them as the model says."""
    from cassandra_rtl.model import bench
    from cassandra_rtl.model.testing import write_hf_folder

    d = write_hf_folder(tmp_path / "m", max_pos=160)
    out = tmp_path / "b.jsonl"
    assert bench.main(["--model", str(d), "--configs", "none,c_k1.0_m3_g2", "--prompt-set", "bench", "--prompts", "2",
                       "--max-new-tokens", "8", "--out", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["config"] for r in rows] == ["none", "c_k1.0_m3_g2"] and rows[1]["lossless"] == "2/2"
    lines = [json.loads(x) for x in out.read_text().splitlines() if '"model_inputs"' in x]
    assert len(lines) == 4 and all(isinstance(x["model_inputs"]["passes"], list) for x in lines)
    assert bench.main(["--table", str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    for a, b in zip(rows, again):
        assert a["performance_model"] == b["performance_model"] and a["per_prompt"] == b["per_prompt"]
    r = again[1]["performance_model"]["by_device"]["orin"]["batch-invariant"]
    assert r["speedup"] == pytest.approx(r["format_speedup"] * r["speculation_speedup"])
    assert again[0]["performance_model"]["by_device"]["orin"]["batch-invariant"]["speedup"] == pytest.approx(1.0)
    assert bench.main(["--table", str(out), "--json", "--decoder", "1:1:1"]) == 0
    capped = json.loads(capsys.readouterr().out)[1]["performance_model"]["by_device"]["orin"]
    assert capped["batch-invariant"]["parts"]["bound"] == {"decoder": capped["batch-invariant"]["parts"]["bound"]
                                                           ["decoder"]}
    assert capped["batch-invariant"]["speedup"] < 0.01 < r["speedup"]


def test_cli_generate_json_carries_the_model_and_compare_checks_sampling(tmp_path):
    """generate --json carries the performance model v2 (both verify modes, the split) and its inputs;
    --compare with sampling runs the distribution check instead of being silently ignored."""
    import json
    import subprocess
    import sys
    from cassandra_rtl.model.testing import write_hf_folder
    d = write_hf_folder(tmp_path / "hf")
    base = [sys.executable, "-m", "cassandra_rtl.cli", "generate", "--model", str(d), "--prompt", "hi",
            "--max-new-tokens", "4", "--draft", "layerskip"]
    out = subprocess.run(base + ["--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-400:]
    s = json.loads(out.stdout)
    dev = s["performance_model"]["by_device"]["orin"]
    for mode in ("batch-invariant", "row-exact"):
        m = dev[mode]
        assert abs(m["format_speedup"] * m["speculation_speedup"] - m["speedup"]) < 1e-9
    assert "model_inputs" in s
    out = subprocess.run(base + ["--temperature", "0.8", "--compare", "--json"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-400:]
    chk = json.loads(out.stdout)["sampling_check"]
    assert chk["runs"] == 50 and chk["ok"] is True and "lossless_vs_plain" not in json.loads(out.stdout)
