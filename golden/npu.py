"""Bit-exact reference of the NPU tile's arithmetic (hw/npu/dot.py; docs/NPU.md "Arithmetic").

For weights W (out, in) and activations x (R, in), both bf16, with V = ``lanes`` (a power of two dividing in):

* product p = mul(w, x): hw/pe_mac.py's bf16 x bf16 -> fp32 product: inputs with exponent field 0 read as a
  zero of their sign (DAZ); the product of two 8-bit significands is exact; below 2**-126 it is a zero of sign
  sa ^ sb (FTZ), at or above 2**128 an infinity; NaN or inf * 0 give 0x7FC00000;
* add(a, b): hw/pe_mac.py's fp32 adder: round to nearest even, DAZ inputs, a result below 2**-126 flushed to a
  zero of the result's sign, an exact zero sum of two operands is -0 only when both are negative, NaN or
  inf - inf give 0x7FC00000;
* for each (r, o): group g holds inputs gV .. gV+V-1; tree(group) = add(tree(first half), tree(second half));
  acc = add(-0, tree(group 0)), then acc = add(acc, tree(group g)) for g = 1 .. in/V - 1; y[r, o] = acc.

Nothing depends on R: each row is computed by the same sequence of operations whatever the other rows are.

Why numpy / torch float32 with explicit flushes is exact: IEEE-754 binary32 multiplication and addition round
to nearest even, as the PE does. The PE differs only at the bottom of the range, and the flushes reproduce it:
with DAZ inputs every exact sum is a multiple of 2**-149 (the ulp of the smallest normal binade), so a sum below
2**-126 is an exact subnormal, never rounded up into the normal range; IEEE returns it unrounded and the flush
turns it into the zero of its sign, as the PE's FTZ does. A product of two 8-bit significands has 16 bits: in
the normal range it is exact; below 2**-126 it is at most 2**-126 - 2**-142, so IEEE's subnormal rounding can
never reach 2**-126 and the flush gives the PE's signed zero; at or above 2**128 both overflow to the signed
infinity. NaNs are canonicalised after every operation.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError

QNAN = 0x7FC00000
SIGN = 0x80000000
EXP = 0x7F800000
MANT = 0x007FFFFF
NEG_ZERO = SIGN


def _check(n_in: int, lanes: int) -> None:
    if not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1):
        raise ConfigError(f"lanes must be a power of two, got {lanes!r}")
    if n_in % lanes:
        raise ConfigError(f"in_features ({n_in}) must be a multiple of the tile's lanes ({lanes})")


# ------------------------------------------------------------------------------------------------ numpy
def _flush_np(u: np.ndarray) -> np.ndarray:
    """uint32 fp32 bits: exponent field 0 -> the zero of its sign; any NaN -> 0x7FC00000."""
    u = np.where((u & EXP) == 0, u & SIGN, u)
    nan = ((u & EXP) == EXP) & ((u & MANT) != 0)
    return np.where(nan, np.uint32(QNAN), u).astype(np.uint32)


def _add_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        s = (a.view(np.float32) + b.view(np.float32)).view(np.uint32)
    return _flush_np(s)


def add_np(a, b) -> np.ndarray:
    """The PE's fp32 adder on uint32 bit patterns (elementwise)."""
    return _add_np(_flush_np(np.asarray(a, np.uint32)), _flush_np(np.asarray(b, np.uint32)))


def mul_np(w_bits, x_bits) -> np.ndarray:
    """The PE's bf16 x bf16 -> fp32 product on uint16 bit patterns (elementwise), as uint32 fp32 bits."""
    w = _flush_np(np.asarray(w_bits, np.uint32) << 16)
    x = _flush_np(np.asarray(x_bits, np.uint32) << 16)
    with np.errstate(all="ignore"):
        return _flush_np((w.view(np.float32) * x.view(np.float32)).view(np.uint32))


def tile_linear_np(w_bits: np.ndarray, x_bits: np.ndarray, lanes: int, block: int = 4096) -> np.ndarray:
    """uint32 fp32 bits (R, out) of the tile's y = x W^T for uint16 bf16 bits W (out, in) and x (R, in)."""
    w_bits = np.asarray(w_bits, np.uint16)
    x_bits = np.atleast_2d(np.asarray(x_bits, np.uint16))
    O, n_in = w_bits.shape
    R = x_bits.shape[0]
    if x_bits.shape[1] != n_in:
        raise ConfigError(f"activations have {x_bits.shape[1]} inputs, the weights {n_in}")
    _check(n_in, lanes)
    G = n_in // lanes
    w = _flush_np(w_bits.astype(np.uint32) << 16).view(np.float32)
    x = _flush_np(x_bits.astype(np.uint32) << 16).view(np.float32)
    out = np.empty((R, O), np.uint32)
    for o0 in range(0, O, block):
        wb = w[o0:o0 + block]
        for r in range(R):
            with np.errstate(all="ignore"):
                p = _flush_np((wb * x[r][None, :]).view(np.uint32)).reshape(len(wb), G, lanes)
            while p.shape[-1] > 1:
                p = _add_np(p[..., 0::2], p[..., 1::2])
            p = p[..., 0]
            acc = np.full(len(wb), NEG_ZERO, np.uint32)
            for g in range(G):
                acc = _add_np(acc, np.ascontiguousarray(p[:, g]))
            out[r, o0:o0 + block] = acc
    return out


def round_bf16(y_bits) -> np.ndarray:
    """fp32 bits -> bf16 bits, round to nearest even (NaN -> 0x7FC0), as torch's ``.to(torch.bfloat16)``."""
    u = np.asarray(y_bits, np.uint32)
    nan = ((u & EXP) == EXP) & ((u & MANT) != 0)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, np.uint16(0x7FC0), r)


# ------------------------------------------------------------------------------------------------ torch
_TINY = 2.0 ** -126          # the smallest fp32 normal: anything smaller in magnitude is a subnormal or a zero
BLOCK_VALUES = 1 << 20       # products held at once (4 MB of float32, a few times that in temporaries)


def _ftz_t(v):
    """float32 tensor: every value below 2**-126 in magnitude (a subnormal) -> the zero of its sign.
    ``v * 0.0`` is that zero (a NaN compares false and is never touched)."""
    import torch
    tiny = v.abs() < _TINY
    if bool(tiny.any()):
        v = torch.where(tiny, v * 0.0, v)
    return v


def _bf16_exponents(b) -> tuple[int, bool]:
    """For bf16 ``b``: (the smallest biased exponent of a normal, inf or NaN value, 255 if none; whether any value
    is a nonzero subnormal). On the 15 magnitude bits m (mod 2**15 wrap-around): (m - 0x80) sends zeros and
    subnormals above every normal value, (m - 1) sends only zero to the top."""
    u = b.contiguous().view(__import__("torch").int16)
    if u.numel() == 0:
        return 255, False
    low_normal = int(((u - 0x80) & 0x7FFF).min()) + 0x80
    low_nonzero = int(((u - 1) & 0x7FFF).min()) + 1
    return min(255, low_normal >> 7), low_nonzero < 0x80


def tile_linear_torch(w, x, lanes: int, block_values: int = BLOCK_VALUES):
    """float32 (..., out): the tile's y = x W^T for bf16 W (out, in) and bf16 x (..., in); bit-identical to
    ``tile_linear_np`` and row-independent (elementwise operations only, so a row's bits never depend on the
    other rows or on how many there are).

    The same float32 operations as ``tile_linear_np`` (IEEE RNE, a flush to the signed zero after each), with two
    shortcuts that leave every bit unchanged:

    * NaNs are canonicalised once at the end instead of after every operation: a NaN operand gives a NaN under
      IEEE and 0x7FC00000 in the PE, the other NaN sources (inf * 0, inf - inf) are the same in both, no non-NaN
      result depends on a NaN's payload, and the flush never touches a NaN;
    * a block of outputs skips the flushes of its products and sums when ew + ex >= 142, ew and ex the smallest
      biased exponents of its nonzero weights and of the activations: a bf16 value with biased exponent e is a
      multiple of 2**(e - 134), so every product is a multiple of 2**(ew + ex - 268) >= 2**-126, and so is every
      sum (the exact sum is, and rounding it either leaves it exact or rounds to a coarser power-of-two grid);
      a nonzero multiple of 2**-126 is never below 2**-126, so no flush could act. Subnormal inputs are still
      read as zero (DAZ).

    ``out`` is processed in blocks of ``block_values // (R * in)`` outputs to bound memory."""
    import torch
    n_in = w.shape[-1]
    if x.shape[-1] != n_in:
        raise ConfigError(f"activations have {x.shape[-1]} inputs, the weights {n_in}")
    _check(n_in, lanes)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, n_in)
    ex, x_sub = _bf16_exponents(x2)
    xf = x2.float()                                                      # bf16 -> fp32 is exact
    if x_sub:
        xf = _ftz_t(xf)                                                  # DAZ
    R, O, G = xf.shape[0], w.shape[0], n_in // lanes
    xg = xf.view(R, 1, G, lanes)
    out = torch.empty((R, O), dtype=torch.float32)
    ob = max(1, block_values // max(1, R * n_in))
    for o0 in range(0, O, ob):
        wb = w[o0:o0 + ob]
        ew, w_sub = _bf16_exponents(wb)
        wf = wb.float()
        if w_sub:
            wf = _ftz_t(wf)
        ftz = _ftz_t if ew + ex < 142 else (lambda v: v)
        p = ftz(wf.view(1, -1, G, lanes) * xg)                           # (R, ob, G, V): exact products, or inf
        while p.shape[-1] > 1:                                           # lane tree: (0,1)(2,3).., (01,23)..
            p = ftz(p[..., 0::2] + p[..., 1::2])
        t = p[..., 0].permute(2, 0, 1).contiguous()                      # (G, R, ob): one value per group
        acc = t[0]                                                       # add(-0, t_0) == t_0
        for g in range(1, G):
            acc = ftz(acc + t[g])
        out[:, o0:o0 + ob] = acc
    out[torch.isnan(out)] = torch.tensor(QNAN, dtype=torch.int64).to(torch.int32).view(torch.float32)
    return out.reshape(*lead, O)
