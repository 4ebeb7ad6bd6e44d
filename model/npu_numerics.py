"""The NPU tile's numerics for the model's linear layers (``generate --numerics npu``).

The tile's GEMV/GEMM array (hw/npu/, bit-exact reference ``cassandra_rtl.golden.npu.tile_linear_torch``)
computes every output y[r, o] with one fixed reduction order that depends only on its lane count, never on
how many activation rows R share the pass: it is batch-invariant by construction. Under ``npu`` numerics
every linear layer of a Transformer (q/k/v/o, gate/up/down and the LM head, of the target and of any draft
model: the Cassandra draft computes on its decoded draft bf16 weights) computes

    y = bf16_rne(tile_linear_torch(W, x, lanes) [+ b])

* ``tile_linear_torch`` returns the tile's fp32 result for bf16 W (out, in) and bf16 x (..., in);
* a bias (Qwen2's q/k/v) is added in fp32 to that result, before the one rounding;
* the fp32 -> bf16 rounding is round-to-nearest-even (``Tensor.to(torch.bfloat16)``), the rounding of the
  fp32 accumulator of a bf16 ``F.linear`` on the CPU path (``torch`` numerics).

Everything else (RMSNorm, RoPE, attention, SiLU, residual adds, sampling) stays the model's own code, and
``Transformer.forward(exact=True)`` runs those per row while the k+1 rows of a verify pass go through each
linear layer together (transformer.py): the weights are read once per pass and each row's logits are the
bits of a 1-token step.

The tile arithmetic itself (tile_linear_torch) is the cost of this mode on a CPU; ``TileLinear`` only adds
the rounding, the bias and a per-layer count of calls and rows (``stats``).
"""
from __future__ import annotations

import torch

NUMERICS = ("torch", "npu")
NPU_LANES = 8  # the tile's V: reduction lanes per weight group (hw/npu/tile.py)


def check_numerics(numerics: str) -> str:
    from cassandra_rtl.errors import ConfigError

    if numerics not in NUMERICS:
        raise ConfigError(f"unknown numerics {numerics!r} (choose from {', '.join(NUMERICS)})")
    return numerics


class TileLinear:
    """``lin(x, w, b=None) -> bf16``: one linear layer as the NPU tile computes it (module docstring).

    ``calls`` / ``rows`` count the linear layers run and the activation rows they carried (a k+1-row verify
    pass is one call per layer with k+1 rows: one weight read)."""

    def __init__(self, lanes: int = NPU_LANES):
        from cassandra_rtl.golden.npu import tile_linear_torch

        self.lanes = int(lanes)
        self._tile = tile_linear_torch
        self.calls = 0
        self.rows = 0

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        self.calls += 1
        self.rows += x.numel() // x.shape[-1]
        y = self._tile(w, x, lanes=self.lanes)
        if b is not None:
            y = y + b.float()
        return y.to(torch.bfloat16)

    def stats(self) -> dict:
        return {"lanes": self.lanes, "linear_calls": self.calls, "linear_rows": self.rows}
