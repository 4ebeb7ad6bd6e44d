"""The NPU tile's numerics for the model's linear layers (``generate --numerics npu``).

The tile's GEMV/GEMM array (hw/npu/, bit-exact reference ``cassandra_rtl.golden.npu.tile_linear_torch``)
computes every output y[r, o] with one fixed reduction order that depends only on its lane count, never on
how many activation rows R share the pass: it is batch-invariant by construction. Under ``npu`` numerics
every linear layer of a Transformer (q/k/v/o, gate/up/down and the LM head, of the target and of any draft
model: the Cassandra draft computes on its decoded draft bf16 weights) computes

    y = bf16_rne(tile_linear_torch(W, x, lanes) [+ b])

* ``tile_linear_torch`` is the tile's fp32 result for bf16 W (out, in) and bf16 x (..., in);
* a bias (Qwen2's q/k/v) is added in fp32 to that result, before the one rounding;
* the fp32 -> bf16 rounding is round-to-nearest-even (``Tensor.to(torch.bfloat16)``, golden ``round_bf16``),
  the rounding of the fp32 accumulator of a bf16 ``F.linear`` on the CPU path (``torch`` numerics).

Everything else (RMSNorm, RoPE, attention, SiLU, residual adds, sampling) stays the model's own code, and
``Transformer.forward(exact=True)`` runs those per row while the k+1 rows of a verify pass go through each
linear layer together (transformer.py): the weights are read once per pass and each row's logits are the
bits of a 1-token step.

Speed. The reference works on int64 bit patterns with a flush after every operation and converts the bf16
weights on every call (~12 s per SmolLM2-135M token, 4 s of it the LM head). ``TileLinear`` computes the same
bits faster and falls back to the reference whenever its shortcut's condition does not hold:

* per weight matrix, once: bf16 -> fp32 with the tile's DAZ (a subnormal input is a zero of its sign), laid out
  lane-major (lanes in bit-reversed order, groups, outputs), and the smallest nonzero |w|;
* per call: x the same way; if min|w| * min|x| >= 2**-103 (over nonzero values), every product is exact, every
  value of the reduction is a multiple of 2**-126 and so never a nonzero subnormal: the tile's flushes cannot
  act, and IEEE float32 multiply/add (round to nearest even) is the tile's arithmetic. The lane tree is then
  three contiguous half + half adds (the bit-reversed order pairs lanes as the tile does; IEEE addition is
  commutative), the groups are accumulated in order from -0, and a NaN is made the tile's 0x7FC00000;
* otherwise (tiny operands whose products could be subnormal, a NaN input) the call is the reference itself.

``stats()`` counts calls, rows and fallbacks. The conversions cached per weight cost 4 bytes per weight value
(target and draft each; with the derived draft memory, per layer of the draft).
"""
from __future__ import annotations

import torch

NUMERICS = ("torch", "npu")
NPU_LANES = 8  # the tile's V: reduction lanes per weight group (hw/npu/tile.py)
FLT_MIN = 2.0 ** -126
EXACT_PRODUCT_MIN = 2.0 ** -103    # |p| >= this: p is a multiple of 2**-126, and so is every sum of such values
QNAN_BITS = 0x7FC00000
BLOCK_VALUES = 1 << 21             # products per block of outputs (8 MB of float32)


def check_numerics(numerics: str) -> str:
    from cassandra_rtl.errors import ConfigError

    if numerics not in NUMERICS:
        raise ConfigError(f"unknown numerics {numerics!r} (choose from {', '.join(NUMERICS)})")
    return numerics


def _daz(t: torch.Tensor) -> torch.Tensor:
    """float32: a subnormal value -> the zero of its sign (the tile reads exponent field 0 as zero)."""
    return torch.where(t.abs() < FLT_MIN, t * 0.0, t)


def _min_nonzero(t: torch.Tensor) -> float:
    a = t.abs()
    a = a[a > 0]
    return float(a.min()) if a.numel() else float("inf")


def _bitrev(n: int) -> list[int]:
    b = max(0, n.bit_length() - 1)
    return [int(format(i, f"0{b}b")[::-1], 2) if b else 0 for i in range(n)]


class PreparedWeight:
    """A bf16 weight (out, in) as the fast path reads it: DAZ float32 (lanes bit-reversed, groups, out)."""

    def __init__(self, w: torch.Tensor, lanes: int):
        O, n_in = w.shape
        self.ptr, self.shape, self.lanes = w.data_ptr(), tuple(w.shape), lanes
        wf = _daz(w.float())
        self.min_abs = _min_nonzero(wf)
        self.nan = bool(torch.isnan(wf).any())
        self.w = wf.view(O, n_in // lanes, lanes)[:, :, _bitrev(lanes)].permute(2, 1, 0).contiguous()

    def matches(self, w: torch.Tensor) -> bool:
        return w.data_ptr() == self.ptr and tuple(w.shape) == self.shape


def tile_linear_fast(pw: PreparedWeight, x: torch.Tensor) -> torch.Tensor | None:
    """The tile's float32 y (R, out) for x (R, in) bf16, or None where the shortcut's condition fails
    (module docstring); bit-identical to ``tile_linear_torch`` whenever it returns a tensor."""
    L, G, O = pw.w.shape
    R = x.shape[0]
    xf = _daz(x.float())
    if pw.nan or bool(torch.isnan(xf).any()) or pw.min_abs * _min_nonzero(xf) < EXACT_PRODUCT_MIN:
        return None
    xl = xf.view(R, G, L)[:, :, _bitrev(L)].permute(2, 1, 0).unsqueeze(-1)    # (L, G, R, 1)
    out = torch.empty(R, O, dtype=torch.float32)
    ob = max(1, BLOCK_VALUES // (L * G * R))
    for o0 in range(0, O, ob):
        p = pw.w[:, :, None, o0:o0 + ob] * xl                  # (L, G, R, ob): exact products
        h = L
        while h > 1:                                           # lane tree: pairs (0,1)(2,3).. then (01,23)..
            h //= 2
            p = p[:h] + p[h:]
        t = p[0]                                               # (G, R, ob): one value per group
        acc = t[0].clone()                                     # add(-0, group 0) == group 0
        for g in range(1, G):
            acc += t[g]
        out[:, o0:o0 + ob] = acc
    nan = torch.isnan(out)
    if bool(nan.any()):
        out[nan] = torch.tensor(QNAN_BITS, dtype=torch.int32).view(torch.float32)
    return out


class TileLinear:
    """``lin(x, w, b=None) -> bf16``: one linear layer as the NPU tile computes it (module docstring).

    Prepared weights are cached per weight tensor object (each layer's parameter is its own object, also where
    the derived draft's layers share one buffer) and prepared again if its storage or shape changed; a weight
    modified in place needs ``clear()``. ``calls`` / ``rows`` count the linear layers run and the activation
    rows they carried (a k+1-row verify pass is one call per layer with k+1 rows: one weight read);
    ``reference_calls`` those the reference computed (the fast path's condition failed)."""

    def __init__(self, lanes: int = NPU_LANES):
        from cassandra_rtl.golden.npu import tile_linear_torch

        self.lanes = int(lanes)
        self._tile = tile_linear_torch
        self._prepared: dict = {}          # id(weight) -> (weight, PreparedWeight): the reference keeps id unique
        self.calls = self.rows = self.reference_calls = 0

    def clear(self) -> None:
        self._prepared.clear()

    def _weight(self, w: torch.Tensor) -> PreparedWeight | None:
        if w.dim() != 2 or w.shape[1] % self.lanes or self.lanes & (self.lanes - 1):
            return None
        hit = self._prepared.get(id(w))
        if hit is None or hit[0] is not w or not hit[1].matches(w):
            hit = self._prepared[id(w)] = (w, PreparedWeight(w, self.lanes))
        return hit[1]

    def tile(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """The tile's float32 result (..., out): the bits of ``tile_linear_torch(w, x, lanes)``."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])
        pw = self._weight(w)
        y = tile_linear_fast(pw, x2) if pw is not None else None
        if y is None:
            self.reference_calls += 1
            y = self._tile(w, x2, lanes=self.lanes)
        return y.reshape(*lead, w.shape[0])

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        self.calls += 1
        self.rows += x.numel() // x.shape[-1]
        y = self.tile(x, w)
        if b is not None:
            y = y + b.float()
        return y.to(torch.bfloat16)

    def stats(self) -> dict:
        return {"lanes": self.lanes, "linear_calls": self.calls, "linear_rows": self.rows,
                "reference_calls": self.reference_calls, "prepared_weights": len(self._prepared)}
