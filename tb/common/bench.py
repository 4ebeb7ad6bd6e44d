"""In-simulator helpers shared by every block's cocotb test module: parameters from the runner, clock and
reset, a per-test context (seeded RNG, coverage, scoreboards, cycle count) and the ``tb_test`` decorator
that writes one JSON stats record per test (read back by build.run -> `make sim` summary / pytest)."""
from __future__ import annotations

import functools
import json
import os
import random
import time
import zlib

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from .coverage import Coverage
from .scoreboard import Scoreboard
from .stream import Engine, Pacer

CLOCK_NS = 10


def params() -> dict:
    return json.loads(os.environ.get("TB_PARAMS", "{}"))


def full_run() -> bool:
    """Long random runs (`make sim-full`)."""
    return os.environ.get("TB_FULL", "0") not in ("", "0")


def env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else default


class Ctx:
    def __init__(self, dut, name: str):
        self.dut, self.name = dut, name
        seed = (cocotb.RANDOM_SEED ^ zlib.crc32(name.encode())) & 0xFFFFFFFF
        self.seed = seed
        self.rng = random.Random(seed)
        self.cov = Coverage()
        self.scoreboards: list[Scoreboard] = []
        self.engines: list[Engine] = []
        self.extra_cycles = 0
        self.extra: dict = {}
        self.params = params()
        self.log = dut._log

    def scoreboard(self, name: str, width: int = 16) -> Scoreboard:
        sb = Scoreboard(name, self.log, width)
        self.scoreboards.append(sb)
        return sb

    def engine(self, agents, watchers=()) -> Engine:
        e = Engine(self.dut.clk, agents, watchers)
        self.engines.append(e)
        return e

    def pacer(self, profile: str) -> Pacer:
        return Pacer(self.rng, profile)

    @property
    def cycles(self) -> int:
        return sum(e.cycles for e in self.engines) + self.extra_cycles

    def finish(self):
        for sb in self.scoreboards:
            sb.finish()


def init_inputs(dut):
    """Drive every input port (listed by the runner in TB_INPUTS) to 0 before reset: no X ever enters."""
    for name in filter(None, os.environ.get("TB_INPUTS", "").split(",")):
        if name not in ("clk", "rst"):
            getattr(dut, name).value = 0


def has_clock(dut) -> bool:
    try:
        dut.clk
        return True
    except AttributeError:
        return False


def start_clock(dut):
    Clock(dut.clk, CLOCK_NS, unit="ns").start()


async def reset(dut, cycles: int = 2, ctx: Ctx | None = None):
    """Synchronous reset for ``cycles`` edges; may be called mid-test (it first waits for a clock edge, so
    it is legal right after a ReadOnly phase). Ends in the ReadOnly phase after the first free edge."""
    await RisingEdge(dut.clk)
    dut.rst.value = 1
    # Every handshake input goes low with the reset (a stream agent whose engine stopped stepping would
    # otherwise keep its last valid/ready asserted into the first cycle after reset); the agents drop
    # their queues (a reset discards everything in flight) and re-drive from scratch.
    for name in filter(None, os.environ.get("TB_INPUTS", "").split(",")):
        if name.endswith("__valid") or name.endswith("__ready"):
            getattr(dut, name).value = 0
    if ctx is not None:
        for eng in ctx.engines:
            for agent in eng.agents:
                agent.reset()
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    await ReadOnly()
    if ctx is not None:
        ctx.extra_cycles += cycles + 2


def _write_record(rec: dict):
    path = os.environ.get("TB_STATS")
    if not path:
        return
    with open(path, "a") as fh:
        fh.write(json.dumps(rec) + "\n")


def tb_test(**kwargs):
    """Like ``cocotb.test`` but the test gets ``(dut, ctx)``; clock and reset are started, the scoreboards are
    checked at the end, and a stats record (values, mismatches, cycles, coverage) is written pass or fail."""

    def deco(fn):
        @functools.wraps(fn)
        async def wrapper(dut):
            ctx = Ctx(dut, fn.__name__)
            init_inputs(dut)
            if has_clock(dut):
                start_clock(dut)
                await reset(dut, ctx=ctx)
            t0 = time.perf_counter()
            passed, err = False, None
            try:
                await fn(dut, ctx)
                ctx.finish()
                passed = True
            except BaseException as exc:
                err = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                wall = time.perf_counter() - t0
                _write_record({
                    "test": fn.__name__, "passed": passed, "error": err, "seed": ctx.seed,
                    "values": sum(sb.values for sb in ctx.scoreboards),
                    "words": sum(sb.words for sb in ctx.scoreboards),
                    "mismatches": sum(sb.mismatches for sb in ctx.scoreboards),
                    "cycles": ctx.cycles, "wall_s": wall, "coverage": ctx.cov.report(), "extra": ctx.extra,
                })

        return cocotb.test(**kwargs)(wrapper)

    return deco
