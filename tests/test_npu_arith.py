"""The NPU tile's arithmetic: golden/npu.py (the reference) against the PE's RTL, its torch twin against its
numpy form, and the RTL DotUnit (hw/npu/dot.py) against the reference, with idles and backpressure."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from amaranth.sim import Simulator

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.npu import add_np, mul_np, round_bf16, tile_linear_np, tile_linear_torch
from cassandra_rtl.hw.npu.dot import DotUnit
from cassandra_rtl.hw.pe_mac import PeMacBf16

SPECIALS = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x8080, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1,
            0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x4000, 0x3F81, 0x0100, 0x2000, 0x1F80, 0x6000, 0x5F80]


def rand_bf16(rng, n, specials=0.2):
    """bf16 bit patterns: mostly normal values of moderate range, some specials / extremes."""
    out = []
    for _ in range(n):
        u = rng.random()
        if u < specials:
            out.append(rng.choice(SPECIALS))
        elif u < specials + 0.1:
            out.append(rng.randrange(1 << 16))                 # anything: subnormals, huge, NaN
        else:
            e = rng.randrange(100, 150)
            out.append((rng.randrange(2) << 15) | (e << 7) | rng.randrange(128))
    return np.array(out, dtype=np.uint16)


def bf16_tensor(bits):
    return torch.from_numpy(np.ascontiguousarray(bits, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)


# ---------------------------------------------------------------------------------------- reference vs PE RTL
def pe_rtl(ops):
    dut = PeMacBf16()
    got = []

    async def bench(ctx):
        for a, b, clear in list(ops) + [(0, 0, None)] * 3:
            ctx.set(dut.a, int(a))
            ctx.set(dut.b, int(b))
            ctx.set(dut.en, clear is not None)
            ctx.set(dut.clear, bool(clear))
            await ctx.tick()
            if ctx.get(dut.acc_valid):
                got.append(ctx.get(dut.acc))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("seed", [1, 2])
def test_reference_product_and_adder_are_the_pe(seed):
    """acc <- add(acc or -0, mul(a, b)) from golden/npu.py equals PeMacBf16's accumulator bit for bit."""
    rng = random.Random(seed)
    a, b = rand_bf16(rng, 400, 0.3), rand_bf16(rng, 400, 0.3)
    clears = [i == 0 or rng.random() < 0.1 for i in range(400)]
    got = pe_rtl(zip(a, b, clears))
    acc, want = np.uint32(0), []
    for ai, bi, c in zip(a, b, clears):
        acc = add_np(np.uint32(0x80000000) if c else acc, mul_np(ai, bi))
        want.append(int(acc))
    assert got == want


def test_reference_cancellation_ties_and_flushes():
    """Hand-checked cases: x + (-x) = +0, -0 + -0 = -0, a tie rounds to even, a subnormal product and sum flush."""
    f = lambda x: int(np.float32(x).view(np.uint32))        # noqa: E731
    assert add_np(f(1.5), f(-1.5)) == 0
    assert add_np(0x80000000, 0x80000000) == 0x80000000
    assert add_np(f(1.0), f(2.0 ** -24)) == f(1.0)               # tie: 1 + half an ulp -> 1 (even)
    assert add_np(f(1.0 + 2.0 ** -23), f(2.0 ** -24)) == f(1.0 + 2.0 ** -22)   # tie -> even upward
    assert mul_np(0x0080, 0x0080) == 0                          # 2**-126 squared: flushed to +0
    assert mul_np(0x8080, 0x0080) == 0x80000000                 # ... with the product's sign
    assert add_np(f(2.0 ** -125), f(-1.5 * 2.0 ** -126)) == 0   # 2**-127: a subnormal sum, flushed
    assert mul_np(0x7F80, 0x0000) == 0x7FC00000                 # inf * 0
    assert mul_np(0x7F00, 0x7F00) == 0x7F800000                 # overflow
    assert add_np(0x7F800000, 0xFF800000) == 0x7FC00000


# ---------------------------------------------------------------------------------------- numpy vs torch
@pytest.mark.parametrize("shape,rows,lanes", [((33, 64), 5, 8), ((7, 32), 3, 4), ((20, 16), 2, 1), ((9, 576), 1, 8)])
def test_torch_equals_numpy(shape, rows, lanes):
    rng = random.Random(shape[0] * 7 + lanes)
    w = rand_bf16(rng, shape[0] * shape[1]).reshape(shape)
    x = rand_bf16(rng, rows * shape[1]).reshape(rows, shape[1])
    want = tile_linear_np(w, x, lanes)
    got = tile_linear_torch(bf16_tensor(w), bf16_tensor(x), lanes).view(torch.int32).numpy().view(np.uint32)
    assert np.array_equal(got, want)


def test_rows_are_independent():
    """R = 1 and row 0 of R = 5 are identical bits (numpy and torch), and the rows do not see each other."""
    rng = random.Random(5)
    w = rand_bf16(rng, 48 * 64, 0.05).reshape(48, 64)
    x = rand_bf16(rng, 5 * 64, 0.05).reshape(5, 64)
    full = tile_linear_np(w, x, 8)
    for r in range(5):
        assert np.array_equal(tile_linear_np(w, x[r:r + 1], 8)[0], full[r])
    t5 = tile_linear_torch(bf16_tensor(w), bf16_tensor(x), 8)
    t1 = tile_linear_torch(bf16_tensor(w), bf16_tensor(x[2:3]), 8)
    assert torch.equal(t5[2:3].view(torch.int32), t1.view(torch.int32))


def test_order_is_not_fp32_sum():
    """The fixed tree order is observable: on cancelling data it differs from a plain left-to-right sum."""
    x = np.array([[0x3F80] * 8], dtype=np.uint16)                        # ones
    w = np.array([[0x4B80, 0x3F80, 0x3F80, 0xCB80, 0, 0, 0, 0]], np.uint16)  # 2**24, 1, 1, -2**24
    tree = int(tile_linear_np(w, x, 8)[0, 0])        # (2**24 + 1 -> 2**24) + (1 - 2**24) = 1
    seq = int(tile_linear_np(w, x, 1)[0, 0])         # ((2**24 + 1 -> 2**24) + 1 -> 2**24) - 2**24 = +0
    assert tree == int(np.float32(1.0).view(np.uint32)) and seq == 0


def test_round_bf16_matches_torch():
    rng = np.random.default_rng(3)
    v = np.concatenate([rng.standard_normal(5000).astype(np.float32),
                        np.array([0.0, -0.0, 1e38, -1e-38, np.inf, -np.inf], np.float32)])
    bits = v.view(np.uint32)
    want = torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(round_bf16(bits), want)
    assert round_bf16(np.array([0x7FC12345], np.uint32))[0] == 0x7FC0


def test_config_errors():
    with pytest.raises(ConfigError, match="multiple"):
        tile_linear_np(np.zeros((2, 12), np.uint16), np.zeros((1, 12), np.uint16), 8)
    with pytest.raises(ConfigError):
        DotUnit(3, 1)
    with pytest.raises(ConfigError):
        DotUnit(8, 0)


# ---------------------------------------------------------------------------------------- DotUnit RTL
def run_dot(lanes, rows, w, x, idle=0.0, backpressure=0.0, seed=0):
    """Feed weight rows of ``w`` (O, I) against ``x`` (rows, I) group by group; returns (O, rows) results."""
    dut = DotUnit(lanes, rows)
    O, n_in = w.shape
    groups = n_in // lanes
    rng = random.Random(seed)
    got = []

    async def source(ctx):
        for o in range(O):
            for g in range(groups):
                while rng.random() < idle:
                    ctx.set(dut.inp.valid, 0)
                    await ctx.tick()
                ctx.set(dut.inp.valid, 1)
                ctx.set(dut.inp.payload, {"w": [int(v) for v in w[o, g * lanes:(g + 1) * lanes]],
                                          "x": [[int(v) for v in x[r, g * lanes:(g + 1) * lanes]] for r in range(rows)],
                                          "first": g == 0, "last": g == groups - 1})
                await ctx.tick().until(dut.inp.ready)
        ctx.set(dut.inp.valid, 0)

    async def sink(ctx):
        while len(got) < O:
            ready = rng.random() >= backpressure
            ctx.set(dut.out.ready, ready)
            await ctx.tick()
            if ready and ctx.get(dut.out.valid):
                pass
        ctx.set(dut.out.ready, 0)

    async def monitor(ctx):
        async for clk_edge, rst, valid, ready, y in ctx.tick().sample(dut.out.valid, dut.out.ready, dut.out.payload.y):
            if valid and ready:
                got.append([int(v) for v in y])
            if len(got) >= O:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.add_process(monitor)
    sim.run_until(1e-6 * (O * groups * 20 + 200))
    return np.array(got, dtype=np.uint32)


@pytest.mark.parametrize("lanes,rows,idle,bp", [(1, 1, 0.0, 0.0), (4, 3, 0.3, 0.3), (8, 5, 0.2, 0.4), (8, 2, 0.0, 0.0)])
def test_dot_unit_matches_reference(lanes, rows, idle, bp):
    rng = random.Random(lanes * 10 + rows)
    O, n_in = 5, 4 * lanes if lanes > 1 else 5
    w = rand_bf16(rng, O * n_in, 0.1).reshape(O, n_in)
    x = rand_bf16(rng, rows * n_in, 0.1).reshape(rows, n_in)
    got = run_dot(lanes, rows, w, x, idle, bp, seed=rows)
    assert got.shape == (O, rows)
    assert np.array_equal(got.T, tile_linear_np(w, x, lanes))


def test_dot_unit_slot_zero_is_batch_invariant():
    """Slot 0's results are the same when the other four slots hold other activations or copies of it."""
    rng = random.Random(11)
    w = rand_bf16(rng, 3 * 16, 0.05).reshape(3, 16)
    x = rand_bf16(rng, 5 * 16, 0.05).reshape(5, 16)
    a = run_dot(8, 5, w, x)
    b = run_dot(8, 5, w, np.repeat(x[:1], 5, axis=0))
    assert np.array_equal(a[:, 0], b[:, 0])
    assert np.array_equal(a[:, 0], tile_linear_np(w, x[:1], 8)[0])
