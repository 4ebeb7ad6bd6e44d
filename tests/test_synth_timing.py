"""synth/timing.py on hand-built netlists: the arrival-time walk evaluates the library's linear model."""
from __future__ import annotations

import pytest

from cassandra_rtl.synth import liberty as lib
from cassandra_rtl.synth import timing


def _netlist(cells: dict, ports: dict) -> dict:
    return {"modules": {"top": {"ports": ports, "cells": cells}}}


def _dff(d: int, q: int, clk: int = 1) -> dict:
    return {"type": "DFF_X1", "connections": {"CLK": [clk], "D": [d], "Q": [q]}}


def test_reg_nand_reg_by_hand():
    # ff0.Q (net 10) and ff1.Q (net 11) -> NAND2 -> net 12 -> ff2.D
    cells = {
        "ff0": _dff(2, 10), "ff1": _dff(3, 11), "ff2": _dff(12, 13),
        "g": {"type": "NAND2_X1", "connections": {"A": [10], "B": [11], "Y": [12]}},
    }
    ports = {"clk": {"direction": "input", "bits": [1]}, "a": {"direction": "input", "bits": [2, 3]},
             "y": {"direction": "output", "bits": [13]}}
    r = timing.analyse(_netlist(cells, ports), "top")
    r_ps, tau = lib.R_NS_PER_FF * 1000, lib.TAU_NS * 1000
    c_q = 4 / 3 * lib.C_UNIT_FF + timing.WIRE_CAP_FF           # Q drives one NAND2 input
    t_q = lib.DFF_CLK_Q_NS * 1000 + r_ps * c_q
    slew_q = lib.TRANS_BASE_NS * 1000 + 2 * r_ps * c_q
    c_y = lib.C_UNIT_FF + timing.WIRE_CAP_FF                   # NAND2 drives one D pin
    t_y = t_q + lib.SLEW_FACTOR * slew_q + tau * 2.0 + r_ps * c_y
    assert r.critical_path_ps == pytest.approx(t_y + lib.DFF_SETUP_NS * 1000)
    assert r.logic_depth == 1
    assert r.path_kind == "reg->reg"
    assert [t for _, t, _ in r.path] == ["DFF_X1", "NAND2_X1"]


def test_deeper_chain_is_slower_and_deeper():
    def chain(n):
        cells = {"ff0": _dff(2, 10), "ffN": _dff(10 + n, 99)}
        for i in range(n):
            cells[f"i{i}"] = {"type": "INV_X1", "connections": {"A": [10 + i], "Y": [11 + i]}}
        ports = {"clk": {"direction": "input", "bits": [1]}, "d": {"direction": "input", "bits": [2]},
                 "q": {"direction": "output", "bits": [99]}}
        return timing.analyse(_netlist(cells, ports), "top")

    short, long = chain(2), chain(6)
    assert long.logic_depth == 6 and short.logic_depth == 2
    assert long.critical_path_ps > short.critical_path_ps


def test_unknown_cells_and_loops_are_errors():
    ports = {"a": {"direction": "input", "bits": [2]}}
    with pytest.raises(timing.TimingError, match="outside"):
        timing.analyse(_netlist({"x": {"type": "$_AND_", "connections": {"A": [2], "B": [2], "Y": [3]}}}, ports),
                       "top")
    loop = {"i0": {"type": "INV_X1", "connections": {"A": [5], "Y": [4]}},
            "i1": {"type": "INV_X1", "connections": {"A": [4], "Y": [5]}}}
    with pytest.raises(timing.TimingError, match="loop"):
        timing.analyse(_netlist(loop, ports), "top")


def test_high_fanout_register_net_is_timed_as_a_buffer_tree():
    # One flip-flop drives 300 NAND2 inputs: unbuffered that would be R * ~480 fF ~ 1.9 ns.
    n = 300
    cells = {"ff0": _dff(2, 10)}
    for i in range(n):
        cells[f"g{i}"] = {"type": "NAND2_X1", "connections": {"A": [10], "B": [10], "Y": [100 + i]}}
        cells[f"f{i}"] = _dff(100 + i, 1000 + i)
    ports = {"clk": {"direction": "input", "bits": [1]}, "d": {"direction": "input", "bits": [2]}}
    r = timing.analyse(_netlist(cells, ports), "top")
    unbuffered = lib.R_NS_PER_FF * 1000 * n * 2 * (4 / 3 + timing.WIRE_CAP_FF)
    assert r.tree_nets == 1 and r.tree_buffer_area_ge > 0
    assert r.critical_path_ps < unbuffered / 4


def test_clock_gate_enable_is_captured_and_its_clock_is_ideal():
    # ff0.Q -> INV -> ICG.E; ICG.GCLK clocks ff1, whose D is a primary input: the only reg->X path ends at E
    cells = {
        "ff0": _dff(2, 10), "ff1": _dff(3, 12, clk=20),
        "i": {"type": "INV_X1", "connections": {"A": [10], "Y": [11]}},
        "cg": {"type": lib.ICG_CELL, "connections": {"CLK": [1], "E": [11], "GCLK": [20]}},
    }
    ports = {"clk": {"direction": "input", "bits": [1]}, "a": {"direction": "input", "bits": [2, 3]},
             "y": {"direction": "output", "bits": [12]}}
    r = timing.analyse(_netlist(cells, ports), "top")
    r_ps, tau = lib.R_NS_PER_FF * 1000, lib.TAU_NS * 1000
    c_q = lib.C_UNIT_FF + timing.WIRE_CAP_FF                   # Q drives one INV input
    t_q = lib.DFF_CLK_Q_NS * 1000 + r_ps * c_q
    slew_q = lib.TRANS_BASE_NS * 1000 + 2 * r_ps * c_q
    c_e = lib.C_UNIT_FF + timing.WIRE_CAP_FF                   # INV drives the gate's E pin
    t_e = t_q + lib.SLEW_FACTOR * slew_q + tau * 1.0 + r_ps * c_e
    assert r.critical_path_ps == pytest.approx(t_e + lib.ICG_SETUP_NS * 1000)
    assert r.path_kind == "reg->clock gate"
    assert [t for _, t, _ in r.path] == ["DFF_X1", "INV_X1"]
    # GCLK launches nothing and loads nothing: with E fed straight from an input, no path has a cell on it
    cells["i"]["connections"]["Y"] = [30]
    cells["cg"]["connections"]["E"] = [2]
    r2 = timing.analyse(_netlist(cells, ports), "top")
    assert r2.logic_depth == 0 and all(t != lib.ICG_CELL for _, t, _ in r2.path)
    assert r2.critical_path_ps < r.critical_path_ps
