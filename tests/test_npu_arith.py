"""The NPU tile's arithmetic: golden/npu.py (the reference) against an independent integer model of the PE's
arithmetic and against the PE's RTL, its torch twin against its numpy form, and the RTL DotUnit (hw/npu/dot.py)
against the reference, with idles and backpressure."""
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


FINITE_SPECIALS = [v for v in SPECIALS if (v >> 7) & 0xFF != 0xFF and v not in (0x7F7F, 0xFF7F, 0x6000, 0x5F80)]


def rand_bf16(rng, n, specials=0.2, pool=SPECIALS):
    """bf16 bit patterns: mostly normal values of moderate range, some specials / extremes (the ``pool``; with
    the full pool, also 10 % arbitrary patterns)."""
    out = []
    for _ in range(n):
        u = rng.random()
        if u < specials:
            out.append(rng.choice(pool))
        elif pool is SPECIALS and u < specials + 0.1:
            out.append(rng.randrange(1 << 16))                 # anything: subnormals, huge, NaN
        else:
            e = rng.randrange(100, 150)
            out.append((rng.randrange(2) << 15) | (e << 7) | rng.randrange(128))
    return np.array(out, dtype=np.uint16)


def bf16_tensor(bits):
    return torch.from_numpy(np.ascontiguousarray(bits, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)


# ---------------------------------------------------------------------------------------- scalar integer model
# An independent model of the PE's arithmetic in Python integers (no floating point anywhere): a value is
# sign * m * 2**e with integer m; the product is the exact integer product; the sum is computed exactly on the
# grid of 2**-149 (every DAZ fp32 value is a multiple of it) and rounded to 24 bits, ties to even, by integer
# arithmetic; then the PE's range rules (FTZ below 2**-126 keeping the exact result's sign, infinity from
# 2**128, the exact-zero sign rule sa & sb, the canonical NaN).
S_QNAN = 0x7FC00000


def _s_dec(bits, ew, fw):
    """(kind, sign, m, e) of an IEEE pattern with ew exponent / fw fraction bits, subnormals read as zero."""
    sign = bits >> (ew + fw)
    e = (bits >> fw) & ((1 << ew) - 1)
    f = bits & ((1 << fw) - 1)
    bias = (1 << (ew - 1)) - 1
    if e == (1 << ew) - 1:
        return ("nan" if f else "inf"), sign, 0, 0
    if e == 0:
        return "zero", sign, 0, 0
    return "num", sign, (1 << fw) | f, e - bias - fw


def _s_enc(sign, mag, scale):
    """fp32 bits of sign * mag * 2**scale (mag > 0 an integer): RNE to 24 bits, FTZ below 2**-126, inf from 2**128."""
    shift = scale + 149                      # express on the 2**-149 grid (exact: every operand is on it)
    assert shift >= 0
    a = mag << shift
    n = a.bit_length()
    if n < 24:                               # below 2**-126 (exact): flushed, the result's sign kept
        return sign << 31
    drop = n - 24
    q, rem = a >> drop, a & ((1 << drop) - 1)
    half = (1 << (drop - 1)) if drop else 0
    if drop and (rem > half or (rem == half and q & 1)):
        q += 1
        if q == 1 << 24:
            q >>= 1
            drop += 1
    biased = drop + 1                        # q * 2**(drop - 149) with q in [2**23, 2**24)
    if biased >= 255:
        return (sign << 31) | 0x7F800000
    return (sign << 31) | (biased << 23) | (q & 0x7FFFFF)


def s_mul(a, b):
    ka, sa, ma, ea = _s_dec(a, 8, 7)
    kb, sb, mb, eb = _s_dec(b, 8, 7)
    s = sa ^ sb
    if "nan" in (ka, kb) or {ka, kb} == {"inf", "zero"}:
        return S_QNAN
    if "inf" in (ka, kb):
        return (s << 31) | 0x7F800000
    if "zero" in (ka, kb):
        return s << 31
    m, e = ma * mb, ea + eb                  # exact
    if m.bit_length() + e <= -126:           # m * 2**e < 2**-126: flushed to the zero of sign sa ^ sb
        return s << 31
    return _s_enc(s, m, e)


def s_add(x, y):
    kx, sx, mx, ex = _s_dec(x, 8, 23)
    ky, sy, my, ey = _s_dec(y, 8, 23)
    if "nan" in (kx, ky) or (kx == ky == "inf" and sx != sy):
        return S_QNAN
    if kx == "inf":
        return (sx << 31) | 0x7F800000
    if ky == "inf":
        return (sy << 31) | 0x7F800000
    lo = min(ex, ey)
    total = (-1) ** sx * (mx << (ex - lo)) + (-1) ** sy * (my << (ey - lo))
    if total == 0:                           # exact zero: -0 only when both operands are negative
        return (sx & sy) << 31
    return _s_enc(int(total < 0), abs(total), lo)


def s_tree(vals):
    if len(vals) == 1:
        return vals[0]
    h = len(vals) // 2
    return s_add(s_tree(vals[:h]), s_tree(vals[h:]))


def s_tile(w, x, lanes):
    """(R, out) fp32 bits of the tile's arithmetic, one output at a time, from the definition."""
    R, (O, n) = len(x), np.shape(w)
    out = np.zeros((R, O), np.uint32)
    for r in range(R):
        for o in range(O):
            prods = [s_mul(int(w[o][i]), int(x[r][i])) for i in range(n)]
            acc = 0x80000000
            for g in range(0, n, lanes):
                acc = s_add(acc, s_tree(prods[g:g + lanes]))
            out[r, o] = acc
    return out


BF16_EDGE = sorted(set(SPECIALS) | {0x0081, 0x00FF, 0x3F00, 0x3FFF, 0xBFFF, 0x7F00, 0x4000, 0x5F7F, 0x1FFF, 0x2080})
FP32_EDGE = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x80800000, 0x00800001, 0x01000000,
             0x00FFFFFF, 0x81000001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE, 0x7F000000, 0x7F800000, 0xFF800000,
             0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x3F800000, 0xBF800000, 0x3F800001, 0xBF800001, 0x33800000,
             0xB3800000, 0x33000000, 0x34400000, 0xB4400000, 0x40400000, 0x4B800000, 0xCB800000, 0x73800000,
             0x7E800000, 0x3FFFFFFF, 0xBFFFFFFF, 0x00C00000, 0x80A00000]


def test_integer_model_hand_values():
    """The integer model on values checked by hand (so the model itself is pinned, not just self-consistent)."""
    assert s_mul(0x3FC0, 0x4040) == 0x40900000            # 1.5 * 3 = 4.5
    assert s_mul(0x0080, 0x3F80) == 0x00800000            # 2**-126 * 1 stays normal
    assert s_mul(0x0080, 0x3F00) == 0x00000000            # 2**-127: flushed
    assert s_mul(0x8080, 0x3F00) == 0x80000000            # ... to the product's sign
    assert s_mul(0x7F00, 0x4000) == 0x7F800000            # 2**127 * 2 = 2**128: infinity
    assert s_mul(0x7F7F, 0x3F80) == 0x7F7F0000            # the largest bf16 stays finite
    assert s_mul(0x0001, 0x7F80) == S_QNAN                # a subnormal is zero: 0 * inf
    assert s_mul(0x8000, 0x3F80) == 0x80000000
    assert s_add(0x3F800000, 0x33800000) == 0x3F800000    # 1 + 2**-24: tie, to even (down)
    assert s_add(0x3F800001, 0x33800000) == 0x3F800002    # tie, to even (up)
    assert s_add(0x3F800000, 0x33800001) == 0x3F800001    # just above the tie
    assert s_add(0x3F800000, 0xBF800000) == 0x00000000    # x - x = +0
    assert s_add(0x80000000, 0x80000000) == 0x80000000    # -0 + -0 = -0
    assert s_add(0x80000000, 0x00000000) == 0x00000000
    assert s_add(0x01000000, 0x80C00000) == 0x00000000    # 2**-125 - 1.5 * 2**-126 = 2**-127: flushed, +
    assert s_add(0x81000000, 0x00C00000) == 0x80000000    # ... and -
    assert s_add(0x7F7FFFFF, 0x73000000) == 0x7F800000    # max + half an ulp (2**103): a tie, to even = 2**128
    assert s_add(0x7F7FFFFF, 0x72800000) == 0x7F7FFFFF    # max + a quarter ulp
    assert s_add(0x00000001, 0x3F800000) == 0x3F800000    # DAZ: the subnormal operand is zero
    assert s_add(0x7F800000, 0xFF800000) == S_QNAN


def test_reference_product_equals_integer_model():
    """mul_np == the integer model: every bf16 exponent (x 4 fractions, 2 signs) against edge and boundary
    operands (products straddling 2**-126 and 2**128), the edge set squared, and random patterns."""
    sweep = [(s << 15) | (e << 7) | f for s in (0, 1) for e in range(256) for f in (0, 1, 0x40, 0x7F)]
    partners = BF16_EDGE + [(e << 7) | f for e in (1, 2, 63, 64, 65, 126, 127, 128, 190, 191, 192, 254)
                            for f in (0, 0x7F)]
    rng = random.Random(7)
    pairs = [(a, b) for a in sweep for b in partners] + [(a, b) for a in BF16_EDGE for b in BF16_EDGE]
    pairs += [(rng.randrange(1 << 16), rng.randrange(1 << 16)) for _ in range(20000)]
    a, b = (np.array(v, np.uint16) for v in zip(*pairs))
    want = np.array([s_mul(int(x), int(y)) for x, y in pairs], np.uint32)
    got = mul_np(a, b)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(pairs[i][0]), hex(pairs[i][1]), hex(got[i]), hex(want[i])) for i in bad[:5]]
    # the sweep reached every kind of result
    assert {0, 0x80000000, 0x7F800000, 0xFF800000, S_QNAN} <= set(want.tolist())
    assert ((want & 0x7F800000) == 0x00800000).any()      # results in the smallest normal binade


def _close_pairs(rng, n):
    """fp32 pairs whose exponents are close: rounding, ties, cancellation, results near the bottom and top."""
    out = []
    for _ in range(n):
        kind = rng.random()
        ex = rng.choice([rng.randrange(1, 255), rng.randrange(1, 6), rng.randrange(248, 255)])
        x = (rng.randrange(2) << 31) | (ex << 23) | rng.randrange(1 << 23)
        if kind < 0.2:          # half an ulp of x (1 or 3 half-ulps): a tie when the exponent does not move
            ey = ex - 24 if rng.random() < 0.5 else ex - 23
            fy = 0 if ey == ex - 24 else 0x400000
            y = (rng.randrange(2) << 31) | (max(ey, 0) << 23) | fy
        elif kind < 0.4:        # near cancellation: -(x + k ulps)
            y = ((x ^ 0x80000000) + rng.randrange(-3, 4)) & 0xFFFFFFFF
        else:
            ey = min(254, max(0, ex + rng.randrange(-30, 31)))
            y = (rng.randrange(2) << 31) | (ey << 23) | rng.randrange(1 << 23)
        out.append((x, y))
    return out


def test_reference_adder_equals_integer_model():
    """add_np == the integer model on the fp32 edge set squared, close-exponent pairs (ties, cancellation,
    flushed subnormal sums, overflow) and random patterns."""
    rng = random.Random(8)
    pairs = [(a, b) for a in FP32_EDGE for b in FP32_EDGE] + _close_pairs(rng, 40000)
    pairs += [(rng.randrange(1 << 32), rng.randrange(1 << 32)) for _ in range(20000)]
    a, b = (np.array(v, np.uint32) for v in zip(*pairs))
    want = np.array([s_add(x, y) for x, y in pairs], np.uint32)
    got = add_np(a, b)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(pairs[i][0]), hex(pairs[i][1]), hex(got[i]), hex(want[i])) for i in bad[:5]]
    # the data did exercise the rules: flushed nonzero sums of both signs, overflow, exact zeros of both signs
    nonzero_in = ((a & 0x7F800000) != 0) & ((b & 0x7F800000) != 0) & ((a ^ b) != 0x80000000)
    assert ((want == 0) & nonzero_in).any() and ((want == 0x80000000) & nonzero_in).any()
    assert (want == 0x7F800000).any() and (want == 0xFF800000).any()
    assert ((want == 0) & ((a ^ b) == 0x80000000)).any()


def _tiny_bf16(rng, n):
    """bf16 values around 2**-63 of both signs: their products sit at 2**-126 and their sums cancel into the
    subnormal range, where the flushes act inside the trees and the accumulation."""
    return np.array([(rng.randrange(2) << 15) | (rng.randrange(60, 68) << 7) | rng.randrange(128) for _ in range(n)],
                    np.uint16)


@pytest.mark.parametrize("lanes", [1, 2, 4, 8, 16, 32])
def test_tile_linear_np_equals_integer_model(lanes):
    """tile_linear_np == the definition computed output by output with the integer model (3 rows, 6 outputs,
    64 inputs), on mixed data with edge values and on tiny values where the flushes decide the result."""
    rng = random.Random(100 + lanes)
    for gen in (lambda n: rand_bf16(rng, n, 0.04, FINITE_SPECIALS), lambda n: _tiny_bf16(rng, n)):
        w, x = gen(6 * 64).reshape(6, 64), gen(3 * 64).reshape(3, 64)
        w[0, 5], x[1, 7], w[2, 9], w[3, 11] = 0x7F80, 0x7FC1, 0x7F7F, 0xFF00    # one inf, NaN, huge in places
        want = s_tile(w, x, lanes)
        assert np.array_equal(tile_linear_np(w, x, lanes), want)
        assert ((want & 0x7F800000) != 0x7F800000).any()     # not all NaN / inf


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
    # leading axes of x are kept; small blocks (one output each) give the same bits
    got3 = tile_linear_torch(bf16_tensor(w), bf16_tensor(x).reshape(1, rows, -1), lanes, block_values=1)
    assert got3.shape == (1, rows, shape[0])
    assert np.array_equal(got3[0].view(torch.int32).numpy().view(np.uint32), want)


def test_torch_flush_boundary():
    """Products whose grid is 2**-127 (smallest exponents 64 + 77 = 141) cancel to 2**-127, which the tile
    flushes to +0 (plain float32 keeps it); one exponent step up (142) the grid is 2**-126 and no flush can act.
    numpy, torch and the integer model agree on both sides, and the two torch blocks take the two paths."""
    w = np.array([[0x2001, 0xA000], [0x2081, 0xA080]], np.uint16)      # (1 + 2**-7) 2**-63, -2**-63; x 2 for row 1
    x = np.array([[0x2681, 0x2682]], np.uint16)                        # (1 + 2**-7) 2**-50, (1 + 2**-6) 2**-50
    # row 0: 16641 * 2**-127 - 16640 * 2**-127 = 2**-127 -> +0; row 1 (exponent sum 142): 2**-126, normal
    want = np.array([[0x00000000, 0x00800000]], np.uint32)
    assert np.array_equal(s_tile(w, x, 2), want)
    assert np.array_equal(tile_linear_np(w, x, 2), want)
    for block in (4, 2):                                               # both outputs in one block; one per block
        got = tile_linear_torch(bf16_tensor(w), bf16_tensor(x), 2, block_values=block)
        assert np.array_equal(got.view(torch.int32).numpy().view(np.uint32), want)
    plain = (bf16_tensor(w[:1]).float() * bf16_tensor(x).float()).sum()
    assert plain.item() == 2.0 ** -127                                 # the flush is what makes row 0 zero


@pytest.mark.model
def test_torch_equals_numpy_on_smollm2_weights():
    """A real weight slice (the bundled SmolLM2-135M's blk.0.ffn_up, 96 rows) against embedding rows as
    activations: torch == numpy bit for bit, lanes 8 and 32."""
    try:
        from cassandra_rtl.golden.io import bundled_model_path, read_tensors
        path = bundled_model_path()
    except Exception as exc:  # noqa: BLE001 - the model is installed by `make setup`
        pytest.skip(f"bundled model unavailable: {exc}")
    want = {"blk.0.ffn_up.weight", "token_embd.weight"}
    tensors = {}
    for name, bits in read_tensors(path):
        if name in want:
            tensors[name] = bits
            if len(tensors) == len(want):
                break
    w = tensors["blk.0.ffn_up.weight"][:96]
    x = tensors["token_embd.weight"][[1, 17, 300, 4096, 30000]]
    assert w.dtype == np.uint16 and w.shape[1] == x.shape[1] == 576
    for lanes in (8, 32):
        ref = tile_linear_np(w, x, lanes)
        got = tile_linear_torch(bf16_tensor(w), bf16_tensor(x), lanes).view(torch.int32).numpy().view(np.uint32)
        assert np.array_equal(got, ref)
    assert np.isfinite(ref.view(np.float32)).all() and (ref != 0).all()


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
    # arbitrary non-NaN patterns (subnormals, the top of the range rounding to inf) and hand-checked ties
    u = np.random.default_rng(4).integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32)
    u = u[~np.isnan(u.view(np.float32))]
    want = torch.from_numpy(u.view(np.float32).copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(round_bf16(u), want)
    assert list(round_bf16(np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0xFF7F8000], np.uint32))) == \
        [0x3F80, 0x3F82, 0x3F81, 0x7F80, 0xFF80]                  # ties to even, above a tie, overflow to inf
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
    """Feed the weight rows of ``w`` (O, I) group by group, against activations ``x`` (rows, I), or (O, rows, I)
    for other activations per weight row; random input idles and output backpressure. Returns (O, rows)."""
    dut = DotUnit(lanes, rows)
    O, n_in = w.shape
    xs = np.broadcast_to(x, (O, rows, n_in))
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
                                          "x": [[int(v) for v in xs[o, r, g * lanes:(g + 1) * lanes]]
                                                for r in range(rows)],
                                          "first": g == 0, "last": g == groups - 1})
                await ctx.tick().until(dut.inp.ready)
        ctx.set(dut.inp.valid, 0)

    async def sink(ctx):
        while len(got) < O:
            ctx.set(dut.out.ready, rng.random() >= backpressure)
            await ctx.tick()
        ctx.set(dut.out.ready, 0)

    async def monitor(ctx):
        async for _, _, valid, ready, y in ctx.tick().sample(dut.out.valid, dut.out.ready, dut.out.payload.y):
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
    return np.array(got, dtype=np.uint32).reshape(-1, rows)


def check_dot(lanes, rows, idle, bp):
    rng = random.Random(lanes * 10 + rows)
    O, n_in = 5, 4 * lanes if lanes > 1 else 5
    w = rand_bf16(rng, O * n_in, 0.1).reshape(O, n_in)
    x = rand_bf16(rng, rows * n_in, 0.1).reshape(rows, n_in)
    got = run_dot(lanes, rows, w, x, idle, bp, seed=rows)
    assert got.shape == (O, rows)
    assert np.array_equal(got.T, tile_linear_np(w, x, lanes))


DOT_FAST = [(1, 1, 0.0, 0.0), (1, 5, 0.3, 0.3), (4, 3, 0.3, 0.3), (8, 5, 0.2, 0.4)]
DOT_SLOW = [(v, r, 0.25, 0.25) for v in (1, 4, 8) for r in (1, 3, 5) if (v, r) not in {(1, 1), (1, 5), (4, 3), (8, 5)}]


@pytest.mark.parametrize("lanes,rows,idle,bp", DOT_FAST)
def test_dot_unit_matches_reference(lanes, rows, idle, bp):
    """5 weight rows back to back (4 groups each; 5 single-lane groups at V = 1), values with edges and
    arbitrary patterns, against tile_linear_np bit for bit, under input idles and output backpressure."""
    check_dot(lanes, rows, idle, bp)


@pytest.mark.slow
@pytest.mark.parametrize("lanes,rows,idle,bp", DOT_SLOW)
def test_dot_unit_matches_reference_matrix(lanes, rows, idle, bp):
    """The rest of V in {1, 4, 8} x rows in {1, 3, 5}."""
    check_dot(lanes, rows, idle, bp)


def test_dot_unit_slot_zero_is_batch_invariant():
    """Slot 0's results are the same bits from a 1-row unit and from a 5-row unit, whatever the other four slots
    hold (other activations with NaN / inf / huge values, or copies of slot 0), and equal the reference's R = 1."""
    rng = random.Random(11)
    w = rand_bf16(rng, 3 * 16, 0.05).reshape(3, 16)
    x = rand_bf16(rng, 5 * 16, 0.05).reshape(5, 16)
    x[1:, 3], x[2:, 9], x[3:, 12] = 0x7FC0, 0xFF80, 0x7F7F
    alone = run_dot(8, 1, w, x[:1])
    # one 5-row run: the weight rows once against x, once against five copies of x[0]
    xs = np.concatenate([np.broadcast_to(x, (3, 5, 16)), np.broadcast_to(x[:1], (3, 5, 16))])
    batched = run_dot(8, 5, np.concatenate([w, w]), xs, idle=0.2, backpressure=0.3, seed=4)
    want = tile_linear_np(w, x[:1], 8)[0]
    assert np.array_equal(alone[:, 0], want)
    assert np.array_equal(batched[:3, 0], want) and np.array_equal(batched[3:, 0], want)
    assert not np.array_equal(batched[:3, 1:], batched[3:, 1:])       # the other slots did differ
