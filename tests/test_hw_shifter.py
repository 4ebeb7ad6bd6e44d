"""hw/shifter.py: the MSB-first narrow right shifter equals ``(vec >> amount)[:width]`` (Amaranth simulator,
random vectors and every amount, including amounts past the input width)."""
from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from cassandra_rtl.hw.shifter import shift_right


@pytest.mark.parametrize("n,abits,width", [(256, 7, 136), (256, 7, 8), (36, 6, 9), (17, 5, 20), (64, 3, 60)])
def test_shift_right_matches_python(n, abits, width):
    m = Module()
    vec, amt = Signal(n), Signal(abits)
    out = shift_right(m, vec, amt, width, "t")
    rng = random.Random(n * 31 + width)
    cases = [(rng.getrandbits(n), a) for a in range(1 << abits) for _ in range(3)]

    async def bench(ctx):
        for v, a in cases:
            ctx.set(vec, v)
            ctx.set(amt, a)
            assert ctx.get(out) == (v >> a) & ((1 << width) - 1), (v, a)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
