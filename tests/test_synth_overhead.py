"""The overhead model (synth/overhead.py): arithmetic against hand-computed figures on a fake report."""
from __future__ import annotations

import json
import math

import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.synth import overhead
from cassandra_rtl.synth.overhead import Device, OverheadParams


def _fake_report(pe_ge=1000.0, pe_mhz=1000.0, dec_ge=10_000.0, dec_vpc=16, dec_mhz=2000.0,
                 enc_ge=20_000.0, enc_vpc=2, enc_mhz=1500.0, dec_vpc_full=None):
    return {
        "flow": {"library": "fake"},
        "blocks": {
            "pe_bf16_fp32": {"status": "ok", "kind": "pe", "area_ge": pe_ge, "meta": {"flops_per_cycle": 2},
                             "timing": {"est_fmax_mhz": pe_mhz}},
            "decoder_c1x_l16": {"status": "ok", "kind": "decoder", "area_ge": dec_ge,
                              "meta": {"values_per_cycle": dec_vpc, "values_per_cycle_full": dec_vpc_full or dec_vpc,
                                       "layout": overhead.HEADLINE_DECODER_LAYOUT},
                              "timing": {"est_fmax_mhz": dec_mhz}},
            "encoder_kv_c1x_l2": {"status": "ok", "kind": "encoder", "area_ge": enc_ge,
                             "meta": {"values_per_cycle": enc_vpc}, "timing": {"est_fmax_mhz": enc_mhz}},
        },
    }


DEV = {"x": Device("x", 1000.0, 64.0, "test")}


def test_decoder_and_pe_counts_by_hand():
    ov = overhead.overhead(_fake_report(), OverheadParams(devices=DEV, draft_bits_per_value=5.0,
                                                          full_bits_per_value=11.0))
    r = ov["overhead"]["by_device"]["x"]
    n_pe = math.ceil(64e12 / (2 * 1e9))
    n_dec = math.ceil(1000e9 * 8 / 5.0 / (16 * 1e9))            # the draft stream is the denser one
    assert r["pe_count"] == n_pe
    assert r["decoder_instances"] == n_dec
    assert r["decoder_percent"] == pytest.approx(100 * n_dec * 10_000 / (n_pe * 1000), abs=1e-3)
    assert r["bytes_per_kflop"] == pytest.approx(1000 / 64, abs=0.01)
    assert ov["npu_overhead_percent"]["x"] == r["total_percent"]


def test_default_streams_are_the_measured_artifact():
    """The defaults are the bundled model artifact's measured bits/value (synth/overhead.py docstring), and
    a denser draft stream needs more decoder instances."""
    p = OverheadParams()
    assert (p.draft_bits_per_value, p.full_bits_per_value) == (overhead.DRAFT_BITS_PER_VALUE,
                                                               overhead.FULL_BITS_PER_VALUE)
    assert 0 < p.draft_bits_per_value < p.full_bits_per_value < 16
    lean = overhead.overhead(_fake_report(), OverheadParams(devices=DEV, draft_bits_per_value=8.0))
    dense = overhead.overhead(_fake_report(), OverheadParams(devices=DEV, draft_bits_per_value=4.0))
    assert (dense["overhead"]["by_device"]["x"]["decoder_instances"]
            > lean["overhead"]["by_device"]["x"]["decoder_instances"])


def test_encoder_sized_by_prefill_not_bandwidth():
    ov = overhead.overhead(_fake_report(), OverheadParams(devices=DEV, kv_model="llama3-8b"))
    r = ov["overhead"]["by_device"]["x"]
    tokens_s = 64e12 / (2 * 8.03e9)                              # compute-bound prefill at peak
    kv_vps = tokens_s * 2 * 32 * 8 * 128
    assert r["encoder_values_per_s"] == pytest.approx(kv_vps, rel=1e-6)
    assert r["encoder_instances"] == math.ceil(kv_vps / (2 * 1e9))
    # Far below what sizing for the memory bandwidth would give (1000 GB/s / 11 bits/value / 2 per cycle).
    assert r["encoder_instances"] < math.ceil(1000e9 * 8 / 11 / (2 * 1e9)) / 100
    half = overhead.overhead(_fake_report(), OverheadParams(devices=DEV, prefill_utilisation=0.5))
    assert half["overhead"]["by_device"]["x"]["encoder_values_per_s"] == pytest.approx(kv_vps / 2, rel=1e-6)


def test_clock_independence_and_missed_clock():
    bits = dict(draft_bits_per_value=5.0, full_bits_per_value=11.0)      # instance counts that divide evenly
    p = OverheadParams(devices=DEV, **bits)
    base = overhead.overhead(_fake_report(), p)["overhead"]["by_device"]["x"]
    # Everything at half the clock: the same decoder share (both counts scale with 1/f; the decoder count
    # is large enough that rounding up does not matter, unlike the single encoder instance).
    slow_all = overhead.overhead(_fake_report(), OverheadParams(devices=DEV, clock_mhz=500, **bits))["overhead"]["by_device"]["x"]
    assert slow_all["decoder_percent"] == pytest.approx(base["decoder_percent"], rel=2e-3)
    assert slow_all["encoder_instances"] == base["encoder_instances"] == 1
    # A decoder slower than the PE: headline still at the PE clock, flagged; own-clock column larger.
    r = overhead.overhead(_fake_report(dec_mhz=500.0), p)["overhead"]["by_device"]["x"]
    assert r["decoder_meets_pe_clock"] is False and r["meets_pe_clock"] is False
    assert r["decoder_instances_own_clock"] == 2 * r["decoder_instances"]
    assert r["total_percent_own_clock"] > r["total_percent"]


def test_choice_prefers_blocks_that_meet_the_clock():
    rep = _fake_report()
    rep["blocks"]["decoder_c1_cheap_but_slow"] = {"status": "ok", "kind": "decoder", "area_ge": 1_000.0,
                                               "meta": {"values_per_cycle": 16, "layout": "format 3.0"},
                                               "timing": {"est_fmax_mhz": 100.0}}
    ov = overhead.overhead(rep, OverheadParams(devices=DEV))["overhead"]
    assert ov["decoder"] == "decoder_c1x_l16"
    assert ov["by_decoder"]["decoder_c1_cheap_but_slow"]["x"]["meets_pe_clock"] is False


def test_params_validation_and_json(tmp_path):
    with pytest.raises(ConfigError):
        OverheadParams(draft_bits_per_value=0)
    with pytest.raises(ConfigError, match="kv_model"):
        OverheadParams(kv_model="gpt-99")
    bad = tmp_path / "o.json"
    bad.write_text(json.dumps({"npu_tflop": 64}))
    with pytest.raises(ConfigError, match="unknown key"):
        OverheadParams.from_json(bad)
    good = tmp_path / "g.json"
    good.write_text(json.dumps({"devices": {"mine": {"bandwidth_gbps": 512, "dense_tflops": 100}},
                                "draft_bits_per_value": 4.0}))
    p = OverheadParams.from_json(good)
    assert p.devices["mine"].bandwidth_gbps == 512 and "rtx4090" in p.devices
    assert overhead.parse_device("n=136.5:64")[1].dense_tflops == 64
    with pytest.raises(ConfigError, match="NAME=GBPS:TFLOPS"):
        overhead.parse_device("n=136.5")


def test_no_pe_means_no_figure():
    rep = _fake_report()
    del rep["blocks"]["pe_bf16_fp32"]
    ov = overhead.overhead(rep, OverheadParams(devices=DEV))
    assert ov["npu_overhead_percent"] == {"x": None} and "error" in ov["overhead"]


def test_compare_ratios_across_flows(tmp_path):
    from cassandra_rtl.synth import compare
    asic = _fake_report()
    fpga = {"flow": {"tool": "nextpnr"}, "blocks": {
        "pe_bf16_fp32": {"status": "ok", "lut4": 1000, "fmax_mhz": 20.0},
        "decoder_c1x_l16": {"status": "ok", "lut4": 8000, "fmax_mhz": 25.0}}}
    for name, rep in (("asic", asic), ("fpga", fpga)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps(rep))
    res = compare.compare([compare.load_report(tmp_path / "asic"), compare.load_report(tmp_path / "fpga")])
    a, f = res["flows"]["fake"], res["flows"]["ECP5 (nextpnr)"]
    assert a["decoder_c1x_l16"]["area_vs_pe"] == 10.0 and a["decoder_c1x_l16"]["fmax_vs_pe"] == 2.0
    assert f["decoder_c1x_l16"]["area_vs_pe"] == 8.0 and f["decoder_c1x_l16"]["fmax_vs_pe"] == 1.25
    assert "decoder_c1x_l16" in compare.render(res)
    assert compare.main([str(tmp_path / "missing")]) == 2


@pytest.mark.parametrize("full_bits", [11.0, 6.0])   # draft binds / the full stream at half rate binds
def test_area_budget_is_the_share_a_decoder_at_budget_takes(full_bits):
    """The budget per draft value/cycle, by hand: decoders of exactly that area (full mode at half the draft rate)
    take 1 / 2 / 5 % of the PE array, up to the instance count's rounding (< 1 % with 10 values/cycle here)."""
    p = OverheadParams(devices=DEV, draft_bits_per_value=5.0, full_bits_per_value=full_bits)
    r = overhead.overhead(_fake_report(), p)["overhead"]["by_device"]["x"]
    need = max(1000e9 * 8 / 5.0, 2 * 1000e9 * 8 / full_bits) / 1e9      # values/cycle at the PE's 1 GHz
    assert r["draft_values_per_cycle_needed"] == pytest.approx(need, abs=0.05)
    array = math.ceil(64e12 / 2e9) * 1000
    assert r["decoder_budget_ge_per_draft_value_cycle"] == {
        "1": round(0.01 * array / need), "2": round(0.02 * array / need), "5": round(0.05 * array / need)}
    budget = r["decoder_budget_ge_per_draft_value_cycle"]["1"]
    at_budget = overhead.overhead(
        _fake_report(dec_ge=budget * 10, dec_vpc=10, dec_vpc_full=5, dec_mhz=1000.0), p)["overhead"]["by_device"]["x"]
    assert at_budget["decoder_percent"] == pytest.approx(1.0, rel=0.01)
    assert at_budget["decoder_ge_per_draft_value_cycle"] == budget


def test_area_budget_in_the_markdown():
    rep = _fake_report()
    rep.update(overhead.overhead(rep, OverheadParams(devices=DEV)))
    text = "\n".join(overhead.render_markdown(rep))
    r = rep["overhead"]["by_device"]["x"]
    assert f"| x | {r['draft_values_per_cycle_needed']:,.1f} | {r['decoder_budget_ge_per_draft_value_cycle']['1']:,} |" in text
    assert f"| {r['decoder_ge_per_draft_value_cycle']:,} |" in text


def test_headline_prices_only_blocks_of_the_streams_scheme():
    """The default streams are C1 (the bundled artifact's), so a cheaper C2 decoder / encoder, which cannot read
    them, is listed (marked) but not chosen; with scheme="c2" it is, and a scheme without blocks says so."""
    rep = _fake_report()
    rep["blocks"]["decoder_c2x_l16"] = {"status": "ok", "kind": "decoder", "area_ge": 5_000.0,
                                         "meta": {"block": "decoder_c2x", "values_per_cycle": 16,
                                                  "layout": "format 3.0"},
                                         "timing": {"est_fmax_mhz": 2000.0}}
    rep["blocks"]["encoder_kv_c2_l2"] = {"status": "ok", "kind": "encoder", "area_ge": 1_000.0,
                                         "meta": {"block": "encoder_kv_c2", "values_per_cycle": 2},
                                         "timing": {"est_fmax_mhz": 2000.0}}
    c1 = overhead.overhead(rep, OverheadParams(devices=DEV))
    assert (c1["overhead"]["decoder"], c1["overhead"]["encoder"]) == ("decoder_c1x_l16", "encoder_kv_c1x_l2")
    assert c1["overhead"]["by_decoder"]["decoder_c2x_l16"]["x"]["scheme"] == "c2"
    rep1 = {**rep, **c1}
    assert "| decoder_c2x_l16 | " in (text := "\n".join(overhead.render_markdown(rep1))) and " % †" in text
    c2 = overhead.overhead(rep, OverheadParams(devices=DEV, scheme="c2"))
    assert (c2["overhead"]["decoder"], c2["overhead"]["encoder"]) == ("decoder_c2x_l16", "encoder_kv_c2_l2")
    assert c2["npu_overhead_percent"]["x"] < c1["npu_overhead_percent"]["x"]
    c2_block = rep["blocks"].pop("decoder_c2x_l16")
    none = overhead.overhead(rep, OverheadParams(devices=DEV, scheme="c2"))["overhead"]
    assert none["decoder"] is None and "C2 decoder" in none["decoder_missing"]
    forced = overhead.overhead(rep, OverheadParams(devices=DEV, decoder="decoder_c1x_l16"))["overhead"]
    assert forced["decoder"] == "decoder_c1x_l16" and "cannot read" not in forced["choice"]
    rep["blocks"]["decoder_c2x_l16"] = c2_block
    other = overhead.overhead(rep, OverheadParams(devices=DEV, decoder="decoder_c2x_l16"))["overhead"]
    assert other["decoder"] == "decoder_c2x_l16" and "C2 block, priced on C1 streams it cannot read" in other["choice"]
    old = {**rep1, "overhead": {**rep1["overhead"], "by_device": {
        k: {kk: vv for kk, vv in r.items() if kk != "decoder_budget_ge_per_draft_value_cycle"}
        for k, r in rep1["overhead"]["by_device"].items()}}}
    assert "Area budget" not in "\n".join(overhead.render_markdown(old))     # a report from before the budget
    with pytest.raises(ConfigError, match="scheme"):
        OverheadParams(scheme="c3")
    assert overhead.block_scheme("decoder_c1v3_l8", {"meta": {"block": "decoder_c1v3"}}) == "c1"
    assert overhead.block_scheme("encoder_kv_c2_l2", {}) == "c2"
    assert overhead.block_scheme("pe_bf16_fp32", {"meta": {}}) is None
    assert overhead.block_scheme("decoder_c2v3_l8", {"meta": {"block": "decoder"}}) == "c2"   # the name, then


def test_headline_skips_decoders_of_another_layout():
    """A cheaper decoder that reads another plane layout (here the format 2.0 layout) is listed but not the
    headline unless named."""
    rep = _fake_report()
    rep["blocks"]["decoder_c1y_l16"] = {"status": "ok", "kind": "decoder", "area_ge": 2_000.0,
                                        "meta": {"block": "decoder_c1y", "values_per_cycle": 16,
                                                 "layout": "format 2.0"},
                                        "timing": {"est_fmax_mhz": 2000.0}}
    assert overhead.HEADLINE_DECODER_LAYOUT == "format 3.0"
    ov = overhead.overhead(rep, OverheadParams(devices=DEV))["overhead"]
    assert ov["decoder"] == "decoder_c1x_l16" and "decoder_c1y_l16" in ov["by_decoder"]
    named = overhead.overhead(rep, OverheadParams(devices=DEV, decoder="decoder_c1y_l16"))["overhead"]
    assert named["decoder"] == "decoder_c1y_l16"


def test_cluster_core_priced_with_its_shared_registers():
    """A decoder cluster's core is priced with the registers its cluster shares, one set per MAX_CLUSTER cores
    (by hand: 100 cores -> 13 register sets); without those registers in the report it is not priced at all;
    the slower of core and registers sets the clock."""
    bits = dict(draft_bits_per_value=5.0, full_bits_per_value=11.0)
    rep = _fake_report()
    rep["blocks"]["decoder_c1v3_l16_core"] = {
        "status": "ok", "kind": "decoder", "area_ge": 3_000.0, "timing": {"est_fmax_mhz": 2000.0},
        "meta": {"block": "decoder_c1v3_core", "values_per_cycle": 16, "layout": "format 3.0",
                 "cluster_part": "instance", "shared_regs": "regs"}}
    ov = overhead.overhead(rep, OverheadParams(devices=DEV, **bits))["overhead"]
    assert ov["decoder"] == "decoder_c1x_l16" and "decoder_c1v3_l16_core" not in ov["by_decoder"]
    assert "not synthesised with its cluster's registers" in overhead.overhead(
        rep, OverheadParams(devices=DEV, decoder="decoder_c1v3_l16_core", **bits))["overhead"]["decoder_missing"]
    rep["blocks"]["regs"] = {"status": "ok", "kind": "tensor_regs", "area_ge": 8_000.0,
                             "timing": {"est_fmax_mhz": 2000.0}, "meta": {}}
    ov = overhead.overhead(rep, OverheadParams(devices=DEV, **bits))["overhead"]
    r = ov["by_device"]["x"]
    n = math.ceil(1000e9 * 8 / 5.0 / (16 * 1e9))                   # 100 cores
    assert overhead.MAX_CLUSTER == 8 and n == 100
    assert ov["decoder"] == "decoder_c1v3_l16_core" and r["decoder_instances"] == n and r["decoder_clusters"] == 13
    assert r["decoder_area_ge"] == n * 3_000.0 + 13 * 8_000.0
    assert r["decoder_ge_per_draft_value_cycle"] == round((n * 3_000.0 + 13 * 8_000.0) / n / 16)
    rep["blocks"]["regs"]["timing"]["est_fmax_mhz"] = 500.0
    slow = overhead.overhead(rep, OverheadParams(devices=DEV, decoder="decoder_c1v3_l16_core", **bits))
    assert slow["overhead"]["by_device"]["x"]["decoder_meets_pe_clock"] is False


def test_headline_encoder_of_any_layout():
    """The KV encoders write format 3.0: an encoder's layout does not keep it from the headline."""
    rep = _fake_report()
    rep["blocks"]["encoder_kv_c1x_l2"]["meta"]["layout"] = "format 3.0"
    ov = overhead.overhead(rep, OverheadParams(devices=DEV))["overhead"]
    assert ov["encoder"] == "encoder_kv_c1x_l2" and not ov.get("encoder_missing")
