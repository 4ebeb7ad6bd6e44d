"""Parallel zero counter (hw/zero_counter.py) against a software reference (the golden ctz32 twin)."""
from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.bitpack import ctz32
from cassandra_rtl.hw.zero_counter import ZeroCounter


def reference(x: int, window: int, lanes: int) -> list[int]:
    """End positions (one past each one) of the first ``lanes`` ones, found by repeated ctz (golden twin)."""
    ends, base = [], 0
    while len(ends) < lanes and base < window:
        rest = x >> base
        low = rest & 0xFFFFFFFF
        run = int(ctz32(np.array([low], dtype=np.uint64))[0])
        if run == 32:                       # no one in the next 32 bits: skip them
            base += 32
            continue
        if base + run >= window:
            break
        ends.append(base + run + 1)
        base += run + 1
    return ends


def patterns(window: int, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    fixed = [0, 1, 1 << (window - 1), (1 << window) - 1, 1 | (1 << (window - 1)), 0x5555_5555_5555_5555 & ((1 << window) - 1)]
    out = list(fixed)
    for _ in range(n):
        density = rng.choice([1, 2, 3, 5])       # sparse to dense windows: ANDing random words thins the ones
        x = (1 << window) - 1
        for _ in range(density):
            x &= rng.getrandbits(window)
        out.append(x)
    return out


@pytest.mark.parametrize("window,lanes,registered", [(24, 1, False), (32, 6, False), (64, 8, True), (128, 16, False)])
def test_zero_counter_matches_reference(window, lanes, registered):
    dut = ZeroCounter(window, lanes, registered=registered)
    checked = []

    async def bench(ctx):
        for x in patterns(window, 150, seed=window * 31 + lanes):
            ctx.set(dut.data, x)
            if registered:
                await ctx.tick()
            ends = reference(x, window, lanes)
            assert ctx.get(dut.valid) == (1 << len(ends)) - 1, hex(x)
            prev = 0
            for i, end in enumerate(ends):
                assert ctx.get(dut.end[i]) == end
                assert ctx.get(dut.rank[i]) == end - 1 - prev
                prev = end
            for i in range(len(ends), lanes):
                assert ctx.get(dut.end[i]) == 0 and ctx.get(dut.rank[i]) == 0
            assert ctx.get(dut.consumed) == (ends[-1] if ends else 0)
            checked.append(x)

    sim = Simulator(dut)
    if registered:
        sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert len(checked) > 150


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("window,lanes", [(8, 2), (64, 0), (64, 65), ("64", 4)])
def test_zero_counter_rejects_bad_parameters(window, lanes):
    with pytest.raises(ConfigError):
        ZeroCounter(window, lanes)
