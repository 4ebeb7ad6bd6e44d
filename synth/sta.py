"""Static timing of a mapped netlist with OpenSTA (Debian package ``opensta``, binary ``sta``).

    result = analyse(workdir, "cells.lib", "netlist.v", top, clock="clk")

Constraints (stated in every report): one ideal clock on the design's clock port (or a virtual clock
for a purely combinational block), inputs arrive at the clock edge (``set_input_delay 0``) from an ideal
driver, outputs are captured at the next edge (``set_output_delay 0``) with a 5 fF load, no wires
beyond the library's default wire-load model. The clock is given a long period and the minimum period
is read back as ``period - worst slack`` (= worst arrival + setup), so the result does not depend on
the period chosen. Register-to-register, input-to-register, register-to-output and input-to-output
paths are all timed — the same path classes as synth/timing.py's walk for the generic library.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import pathlib

from ..errors import ToolMissingError

STA_VERSION = 2                   # bump when the constraints or the parsing change meaning
PROBE_PERIOD_NS = 100.0           # any value works (min period = probe - slack); negative slack is fine
OUTPUT_LOAD_PF = 0.005
INSTALL_HINT = "OpenSTA (`sta`) is not installed: run `apt-get install -y opensta` (Debian/Ubuntu)"


def sta_binary() -> str:
    exe = shutil.which("sta")
    if not exe:
        raise ToolMissingError(INSTALL_HINT)
    return exe


def sta_script(lib_file: str, netlist_file: str, top: str, clock: str | None) -> str:
    clk = (f"create_clock -name clk -period {PROBE_PERIOD_NS} [get_ports {clock}]\n"
           f"set_input_delay 0 -clock clk [delete_from_list [all_inputs] [get_ports {clock}]]\n"
           if clock else
           f"create_clock -name clk -period {PROBE_PERIOD_NS}\nset_input_delay 0 -clock clk [all_inputs]\n")
    return (f"read_liberty {lib_file}\nread_verilog {netlist_file}\nlink_design {top}\n{clk}"
            f"set_output_delay 0 -clock clk [all_outputs]\nset_load {OUTPUT_LOAD_PF} [all_outputs]\n"
            "report_checks -path_delay max -digits 4\n"
            "report_tns -digits 4\nexit\n")


_PATH_CELL = re.compile(r"^\s*[-0-9.]+\s+[-0-9.]+\s+[v^]\s+(\S+)/(\S+)\s+\((\S+)\)\s*$")


def parse_report(text: str, time_unit_ns: float = 1.0, sequential: frozenset[str] = frozenset()) -> dict:
    """Worst path from ``report_checks``: min period, startpoint/endpoint, cells on the data path."""
    slack = re.search(r"^\s*(-?[0-9.]+)\s+slack\s+\((MET|VIOLATED)\)", text, re.M)
    if not slack:
        unconstrained = "No paths found" in text or "no paths" in text.lower()
        raise ValueError("OpenSTA reported no constrained path" if unconstrained
                         else "could not find the slack in OpenSTA's report")
    start = re.search(r"^Startpoint:\s*(\S+)", text, re.M)
    end = re.search(r"^Endpoint:\s*(\S+)", text, re.M)
    arrival = re.search(r"^\s*(-?[0-9.]+)\s+data arrival time", text, re.M)
    setup = re.search(r"(-?[0-9.]+)\s+[0-9.]+\s+library setup time", text)
    period_ns = (PROBE_PERIOD_NS - float(slack.group(1))) * time_unit_ns
    # Cells on the data path: each "incr arrival edge inst/pin (cell)" line of the data-arrival section;
    # an instance appears once per pin (input then output), count it once.
    arrival_part = text[:arrival.end()] if arrival else text
    insts, path = [], []
    for line in arrival_part.splitlines():
        m = _PATH_CELL.match(line)
        if m and m.group(1) not in insts:
            insts.append(m.group(1))
            path.append({"cell": m.group(1), "type": m.group(3)})
    return {
        "critical_path_ps": round(period_ns * 1000, 1),
        "est_fmax_mhz": round(1000.0 / period_ns, 1) if period_ns > 0 else None,
        "startpoint": start.group(1) if start else None,
        "endpoint": end.group(1) if end else None,
        "data_arrival_ps": round(float(arrival.group(1)) * time_unit_ns * 1000, 1) if arrival else None,
        "setup_ps": round(-float(setup.group(1)) * time_unit_ns * 1000, 1) if setup else 0.0,
        "logic_depth": sum(1 for p in path if p["type"] not in sequential),
        "path": path,
        "path_kind": "register or port to register" if setup else "to output port",
        "engine": "OpenSTA",
        "sta_version": STA_VERSION,
    }


def analyse(workdir: pathlib.Path, lib_file: str, netlist_file: str, top: str, clock: str | None,
            time_unit_ns: float = 1.0, sequential: frozenset[str] = frozenset(), timeout_s: float = 600) -> dict:
    """Run OpenSTA in ``workdir`` (paths relative to it); the parsed worst path (see parse_report)."""
    exe = sta_binary()
    script = sta_script(lib_file, netlist_file, top, clock)
    (workdir / "sta.tcl").write_text(script)
    proc = subprocess.run([exe, "-no_splash", "-exit", "sta.tcl"], cwd=workdir, capture_output=True,
                          text=True, timeout=timeout_s)
    out = proc.stdout + proc.stderr
    (workdir / "sta.log").write_text(out)
    errors = [ln for ln in out.splitlines() if ln.startswith("Error")]
    if errors:
        raise ValueError(f"OpenSTA: {errors[0]}")
    result = parse_report(out, time_unit_ns, sequential)
    tns = re.search(r"^tns\s+(-?[0-9.]+)", out, re.M)
    result["tns_at_probe_period_ns"] = float(tns.group(1)) if tns else None
    result["constraints"] = (f"ideal clock on {clock or 'a virtual clock'}, input/output delay 0, "
                             f"{OUTPUT_LOAD_PF * 1000:g} fF output load, library default wire load")
    return result
