"""The synthesis flow on a real library: SKY130 hd (../shared/pdk) mapped by Yosys, timed by OpenSTA.

Skipped with a reason when the library or OpenSTA is absent (users bring their own library)."""
from __future__ import annotations

import pathlib
import shutil

import pytest

from cassandra_rtl.errors import ConfigError, ToolMissingError
from cassandra_rtl.synth import flow, sta
from cassandra_rtl.synth.library import load_library

PDK = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "pdk" / "sky130_fd_sc_hd__tt_025C_1v80.lib.gz"
need_pdk = pytest.mark.skipif(not PDK.is_file(), reason=f"SKY130 library not present at {PDK}")
need_sta = pytest.mark.skipif(shutil.which("sta") is None, reason="OpenSTA not installed (apt-get install -y opensta)")


@need_pdk
def test_library_facts():
    lib = load_library(PDK)
    assert lib.name.startswith("sky130_fd_sc_hd") and not lib.generic
    assert lib.nand2_cell == "sky130_fd_sc_hd__nand2_1" and lib.nand2_area == pytest.approx(3.7536)
    assert "sky130_fd_sc_hd__dfxtp_1" in lib.sequential
    assert not lib.usable("sky130_fd_sc_hd__lpflow_inputiso0n_1") and lib.usable("sky130_fd_sc_hd__nand2_1")
    assert lib.tie_hi[0] == lib.tie_lo[0] == "sky130_fd_sc_hd__conb_1"
    assert "typical" in lib.corner and "25 °C" in lib.corner


@need_pdk
@need_sta
def test_pe_through_sky130_and_opensta(tmp_path):
    out = tmp_path / "synth"
    opts = flow.FlowOptions(out=out, lib=PDK, jobs=1)
    r = flow.run_flow(opts, blocks=flow.builtin_blocks())
    pe = r["blocks"]["pe_bf16_fp32"]
    assert pe["status"] == "ok" and pe["unmapped_cells"] == []
    lib = opts.library
    assert all(c in lib.cell_area and lib.usable(c) or c == lib.tie_hi[0] for c in pe["cells_by_type"])
    assert pe["area_um2"] == pytest.approx(pe["area_ge"] * lib.nand2_area, rel=1e-3)
    t = pe["timing"]
    assert t["engine"] == "OpenSTA" and "error" not in t
    # A bf16 x bf16 + fp32 MAC in one cycle: many gates deep, nanoseconds in a 130 nm library.
    assert t["logic_depth"] >= 10 and 1_000 < t["critical_path_ps"] < 100_000
    assert t["critical_path_ps"] == pytest.approx(t["data_arrival_ps"] + t["setup_ps"], abs=1.0)
    assert r["flow"]["library_info"]["kind"] == "real"
    md = (out / "report.md").read_text()
    assert "OpenSTA" in md and "tt_025C_1v80" in md
    again = flow.run_flow(opts, blocks=flow.builtin_blocks())
    assert again["blocks"]["pe_bf16_fp32"]["cached"] is True
    assert again["blocks"]["pe_bf16_fp32"]["timing"]["critical_path_ps"] == t["critical_path_ps"]


@need_pdk
def test_missing_sta_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ToolMissingError, match="apt-get install -y opensta"):
        flow.FlowOptions(out=tmp_path, lib=PDK)


def test_bad_liberty_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.lib"
    bad.write_text("this is not liberty")
    with pytest.raises(ConfigError, match="not a Liberty file"):
        flow.FlowOptions(out=tmp_path, lib=bad)
    with pytest.raises(ConfigError, match="not found"):
        flow.FlowOptions(out=tmp_path, lib=tmp_path / "absent.lib")


def test_sta_report_parsing():
    text = """Startpoint: a (rising edge-triggered flip-flop clocked by clk)
Endpoint: b (rising edge-triggered flip-flop clocked by clk)
    Delay      Time   Description
   0.0000    0.0000 ^ a/CLK (dfxtp_1)
   0.3000    0.3000 v a/Q (dfxtp_1)
   0.1000    0.4000 ^ g1/Y (nand2_1)
   0.1000    0.5000 v g2/Y (inv_1)
   0.0000    0.5000 v b/D (dfxtp_1)
             0.5000   data arrival time
 100.0000  100.0000   clock clk (rise edge)
  -0.1000   99.9000   library setup time
            99.9000   data required time
            99.4000   slack (MET)
"""
    r = sta.parse_report(text, 1.0, frozenset({"dfxtp_1"}))
    assert r["critical_path_ps"] == pytest.approx(600.0)
    assert r["est_fmax_mhz"] == pytest.approx(1000 / 0.6, rel=1e-3)
    assert r["logic_depth"] == 2 and r["setup_ps"] == pytest.approx(100.0)
    with pytest.raises(ValueError):
        sta.parse_report("No paths found.")


@need_pdk
@pytest.mark.slow      # ~1 min
def test_fanout_repair_keeps_connectivity():
    """One flop output driving 40 gates: buffered into a tree of <= 16 loads per net, every sink still
    reached from the original driver through buffers only."""
    from cassandra_rtl.synth import fanout
    lib = load_library(PDK)
    cells = {"ff": {"type": "sky130_fd_sc_hd__dfxtp_1", "connections": {"CLK": [2], "D": [3], "Q": [4]}}}
    for i in range(40):
        cells[f"g{i}"] = {"type": "sky130_fd_sc_hd__inv_1", "connections": {"A": [4], "Y": [100 + i]}}
    ports = {"clk": {"direction": "input", "bits": [2]}, "d": {"direction": "input", "bits": [3]},
             "y": {"direction": "output", "bits": [100 + i for i in range(40)]}}
    net = {"modules": {"t": {"ports": ports, "cells": cells}}}
    rep = fanout.repair(net, "t", lib, max_fanout=16)
    assert rep.nets_repaired == 1 and rep.worst_fanout_before == 40 and rep.buffers == 3
    cells = rep.cells
    fan = {}
    for c in cells.values():
        for pin, bits in c["connections"].items():
            if pin in ("A", "D", "CLK"):
                fan[bits[0]] = fan.get(bits[0], 0) + 1
    assert max(fan.values()) <= 16
    drivers = {c["connections"][o][0]: c for c in cells.values() for o in ("X", "Q", "Y") if o in c["connections"]}
    for i in range(40):
        bit = cells[f"g{i}"]["connections"]["A"][0]
        hops = 0
        while bit != 4:
            d = drivers[bit]
            assert d["type"] == fanout.pick_buffer(lib)[0]
            bit, hops = d["connections"]["A"][0], hops + 1
        assert hops == 1
    assert "module t" in rep.verilog and rep.verilog.count("sky130_fd_sc_hd__buf_4") == 3
