"""float64 inputs are rounded to bf16 once (round-to-nearest-even), not via float32 (double rounding)."""
from fractions import Fraction

import numpy as np

from cassandra_rtl.golden.io import bf16_bits_to_float, float_to_bf16_bits


def _nearest_even(x: float) -> int:
    """Exact reference: the bf16 pattern nearest to x (ties to an even mantissa), finite positive x."""
    f = (np.array([x], np.float64).astype(np.float32).view(np.uint32)[0] >> 16)
    cands = [int(f) - 1, int(f), int(f) + 1, int(f) + 2]
    vals = [Fraction(float(bf16_bits_to_float(np.array([c], np.uint16))[0])) for c in cands]
    d = [abs(v - Fraction(x)) for v in vals]
    best = min(d)
    winners = [c for c, di in zip(cands, d) if di == best]
    return min(winners, key=lambda c: c & 1)


def test_just_above_and_below_a_bf16_midpoint():
    rng = np.random.default_rng(7)
    mids = ((rng.integers(0x3000, 0x5000, 300).astype(np.uint32) << 16) | 0x8000).view(np.float32)
    for m in mids.astype(np.float64):
        for x in (m * (1 + 2.0 ** -40), m * (1 - 2.0 ** -40), m):
            assert int(float_to_bf16_bits(np.array([x]))[0]) == _nearest_even(x), x


def test_specials_and_overflow():
    got = float_to_bf16_bits(np.array([np.inf, -np.inf, 0.0, -0.0, 1e300, -1e300]))
    assert got.tolist() == [0x7F80, 0xFF80, 0x0000, 0x8000, 0x7F80, 0xFF80]
    nan = float_to_bf16_bits(np.array([np.nan]))[0]
    assert (nan & 0x7F80) == 0x7F80 and (nan & 0x7F) != 0
