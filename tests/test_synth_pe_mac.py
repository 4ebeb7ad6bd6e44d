"""The bf16 x bf16 + fp32 MAC processing element against a numpy float32 reference.

Reference semantics (hw/pe_mac.py): acc' = FTZ(fl32_RNE(acc + FTZ(a * b))), subnormal bf16 inputs
read as zero, any NaN result compared as "is NaN" (the RTL emits the canonical 0x7FC00000).
"""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.hw.pe_mac import FP32_QNAN, PeMacBf16

TINY = np.float32(2.0 ** -126)


def _bf16_to_f32(bits: int) -> np.float32:
    if (bits >> 7) & 0xFF == 0:          # DAZ: subnormal bf16 -> signed zero
        bits &= 0x8000
    return np.array([bits << 16], dtype=np.uint32).view(np.float32)[0]


def _ftz(x: np.float32) -> np.float32:
    if x != 0 and np.isfinite(x) and abs(x) < TINY:
        return np.float32(np.copysign(np.float32(0), x))
    return x


def _bits(x: np.float32) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def reference(ops: list[tuple[int, int, int, int]]) -> list[np.float32]:
    """ops: (a, b, en, clear); returns the accumulator after every enabled step."""
    acc = np.float32(0)
    out = []
    with np.errstate(all="ignore"):
        for a, b, en, clear in ops:
            if not en:
                continue
            p = _ftz(np.float32(_bf16_to_f32(a) * _bf16_to_f32(b)))
            base = np.float32(-0.0) if clear else acc
            acc = _ftz(np.float32(base + p))
            out.append(acc)
    return out


def simulate(ops: list[tuple[int, int, int, int]]) -> list[int]:
    dut = PeMacBf16()
    got: list[int] = []

    async def bench(ctx):
        for a, b, en, clear in ops + [(0, 0, 0, 0)] * 3:
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            ctx.set(dut.en, en)
            ctx.set(dut.clear, clear)
            await ctx.tick()
            if ctx.get(dut.acc_valid):
                got.append(ctx.get(dut.acc))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got


def _random_bf16(rng: np.random.Generator, specials: bool) -> int:
    r = rng.random()
    sign = int(rng.integers(0, 2)) << 15
    frac = int(rng.integers(0, 128))
    exp = int(np.clip(rng.normal(127, 6), 1, 254))     # moderate: long sums, cancellation, rounding
    if specials:
        if r < 0.10:
            exp = int(rng.integers(1, 255))               # full range: product over/underflow, FTZ
        elif r < 0.13:
            exp = 0                                       # zero / subnormal (DAZ)
        elif r < 0.14:
            exp, frac = 255, 0                            # inf
        elif r < 0.145:
            exp, frac = 255, int(rng.integers(1, 128))    # NaN
    return sign | (exp << 7) | frac


def _check(ops):
    want = reference(ops)
    got = simulate(ops)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if np.isnan(w):
            assert g == FP32_QNAN, f"step {i}: got {g:#010x}, want NaN"
        else:
            assert g == _bits(w), f"step {i}: got {g:#010x}, want {_bits(w):#010x} ({w!r})"


@pytest.mark.parametrize("specials, steps, clear_rate", [(False, 4000, 0.02), (True, 2000, 0.10)])
def test_pe_mac_random_against_numpy(specials, steps, clear_rate):
    rng = np.random.default_rng(2605 + specials)
    ops = []
    for i in range(steps):
        clear = int(i == 0 or rng.random() < clear_rate)
        en = int(clear or rng.random() < 0.9)            # bubbles: en low keeps acc
        ops.append((_random_bf16(rng, specials), _random_bf16(rng, specials), en, clear))
    want = np.array(reference(ops), dtype=np.float32)
    # The stimulus must mostly exercise finite arithmetic, not NaN/inf propagation.
    assert np.isfinite(want).mean() > 0.6
    _check(ops)


def test_pe_mac_cancellation_and_ties():
    """x + (-x) = +0, -0 + -0 = -0, ties to even, overflow to inf, underflow flushed."""
    one, minus_one = 0x3F80, 0xBF80
    ops = [
        (one, one, 1, 1), (minus_one, one, 1, 0),              # 1 - 1 = +0
        (0x8000, one, 1, 1), (0x8000, one, 1, 0),              # -0 + -0 = -0
        (one, one, 1, 1), (0x3380, one, 1, 0),                 # 1 + 2**-24: tie -> even (1.0)
        (0x3F81, 0x3F80, 1, 1), (0x3380, one, 1, 0),           # odd lsb tie rounds up
        (0x7F7F, 0x7F7F, 1, 1),                                # product overflow -> inf
        (0x0080, 0x0080, 1, 1),                                # 2**-252 -> flushed to +0
        (0x7F7F, 0x4000, 1, 1), (0x7F7F, 0x4000, 1, 0),        # sum overflow -> inf
        (0x7F80, 0x3F80, 1, 1), (0xFF80, 0x3F80, 1, 0),        # inf + -inf -> NaN
        (0x7F80, 0x0000, 1, 1),                                # inf * 0 -> NaN
        (0x0080, 0x3F80, 1, 1), (0x8080, 0x3F00, 1, 0),        # 2**-126 - 2**-127 -> FTZ +0
    ]
    _check(ops)


def test_pe_mac_rejects_gradual_underflow():
    with pytest.raises(ConfigError):
        PeMacBf16(flush_subnormals=False)
