"""A synthetic Llama-3-8B-shaped model, streamed: every block of its weights is generated, encoded and
co-simulated on the worker that runs it, so neither the client nor a worker ever holds more than a task's
few million values (the model's 16 GB of bf16 never exist anywhere at once).

Shapes (``SHAPES``): Llama-3-8B, dim 4096, 32 layers, 32 query / 8 key-value heads of 128, FFN 14336,
vocabulary 128,256, untied embedding and LM head: 8.03 B parameters, of which the 2-D weights (7 linears per
layer, the embedding, the LM head; 8.03 B values) are the decoder's streams. The norms (0.27 M values) are
not encoded and not counted.

Weights: the project's realistic recipe (bench/peers.py ``synthetic_tensors``, the held-out-style
tensors): FFN down projections Student-t(5) with log-normal row scales, attention projections Gaussian with
1 % outlier input channels (x8), FFN gate / up Gaussian N(0, 0.02), the embedding and LM head Gaussian with
log-normal row scales; float32 rounded to bf16 (RNE). A tensor is cut into blocks of whole rows of about
``BLOCK_VALUES`` values; block b of tensor t is drawn from its own generator (seed, t, b), so any worker makes
the same bits for it, whatever the split into tasks. Each block is encoded as one tensor (C1, G = 128,
m = 3, keep 0.75: the whole-model runs' codec, tb/run.py) and decoded by golden on the worker.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..decoder.framing import FORMAT_3, encode_in

BLOCK_VALUES = 1 << 20
SHAPES = {
    "llama-3-8b": dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128, hidden_dim=14336,
                       vocab=128256),
}


@dataclass(frozen=True)
class TensorSpec:
    index: int
    name: str
    rows: int
    cols: int
    kind: str          # attn | ffn_gate_up | ffn_down | embedding

    @property
    def numel(self) -> int:
        return self.rows * self.cols

    @property
    def rows_per_block(self) -> int:
        return max(1, BLOCK_VALUES // self.cols)

    @property
    def nblocks(self) -> int:
        return -(-self.rows // self.rows_per_block)

    def block_rows(self, b: int) -> tuple[int, int]:
        r0 = b * self.rows_per_block
        return r0, min(self.rows, r0 + self.rows_per_block)


def tensors(model: str = "llama-3-8b") -> list[TensorSpec]:
    """The model's 2-D weights in checkpoint order (embedding, layers, LM head)."""
    s = SHAPES[model]
    d, q, kv, h = s["dim"], s["n_heads"] * s["head_dim"], s["n_kv_heads"] * s["head_dim"], s["hidden_dim"]
    out = [("model.embed_tokens.weight", s["vocab"], d, "embedding")]
    for i in range(s["n_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", q, d, "attn"), (p + "self_attn.k_proj.weight", kv, d, "attn"),
                (p + "self_attn.v_proj.weight", kv, d, "attn"), (p + "self_attn.o_proj.weight", d, q, "attn"),
                (p + "mlp.gate_proj.weight", h, d, "ffn_gate_up"), (p + "mlp.up_proj.weight", h, d, "ffn_gate_up"),
                (p + "mlp.down_proj.weight", d, h, "ffn_down")]
    out.append(("lm_head.weight", s["vocab"], d, "embedding"))
    return [TensorSpec(i, *t) for i, t in enumerate(out)]


def block_bits(spec: TensorSpec, b: int, seed: int = 2026) -> np.ndarray:
    """Rows of block ``b`` of ``spec`` as bf16 bits (uint16, rows x cols), deterministic in (seed, tensor, b)."""
    from cassandra_rtl.golden.io import float_to_bf16_bits

    r0, r1 = spec.block_rows(b)
    n = r1 - r0
    rng = np.random.default_rng([seed, spec.index, b])
    if spec.kind == "ffn_down":
        x = rng.standard_t(5, size=(n, spec.cols)).astype(np.float32) / np.float32(np.sqrt(5 / 3))
        x *= np.exp(rng.normal(0.0, 0.25, size=(n, 1))).astype(np.float32) * np.float32(0.02)
    elif spec.kind == "attn":
        x = rng.standard_normal((n, spec.cols), dtype=np.float32) * np.float32(0.03)
        cols = np.random.default_rng([seed, spec.index]).random(spec.cols) < 0.01     # per tensor, not per block
        x[:, cols] *= np.float32(8.0)
    elif spec.kind == "ffn_gate_up":
        x = rng.standard_normal((n, spec.cols), dtype=np.float32) * np.float32(0.02)
    else:
        x = rng.standard_normal((n, spec.cols), dtype=np.float32) * np.float32(0.05)
        x *= np.exp(rng.normal(0.0, 0.2, size=(n, 1))).astype(np.float32)
    return float_to_bf16_bits(x)


def codec_config():
    from cassandra_rtl.golden.config import CodecConfig

    return CodecConfig(scheme="c1", group_size=128, mantissa_bits=3, keep_ratio=0.75)


@dataclass
class SyntheticPiece:
    """Block ``block`` of tensor ``spec``: generated and encoded when a worker loads it (tb/bulk/jobs.py), in
    ``layout``: the plane layout the decoder reads ("format 3.0": decoder v3; "format 2.0": the older layout golden still converts to)."""
    spec: TensorSpec
    block: int
    seed: int = 2026
    layout: str = FORMAT_3

    @property
    def numel(self) -> int:
        r0, r1 = self.spec.block_rows(self.block)
        return (r1 - r0) * self.spec.cols

    def load(self):
        enc = encode_in(block_bits(self.spec, self.block, self.seed).reshape(-1), codec_config(), self.layout)
        r0, _ = self.spec.block_rows(self.block)
        return self.spec.name, enc, r0 * self.spec.cols


def plan_groups(model: str = "llama-3-8b", task_values: int = 1 << 22, seed: int = 2026,
                layout: str = FORMAT_3) -> list[list[SyntheticPiece]]:
    """The whole model as tasks of about ``task_values`` values: consecutive blocks of one tensor (a task
    never spans two tensors, so a task is one tensor's rows), encoded in ``layout``."""
    groups = []
    for spec in tensors(model):
        per = max(1, task_values // (spec.rows_per_block * spec.cols))
        for b in range(0, spec.nblocks, per):
            groups.append([SyntheticPiece(spec, k, seed, layout) for k in range(b, min(b + per, spec.nblocks))])
    return groups


def spread(groups: list, values: int) -> list:
    """At least ``values`` values of tasks spread evenly over the whole plan (every kind of tensor, early and
    late layers), in plan order."""
    total = sum(p.numel for g in groups for p in g)
    if values >= total:
        return list(groups)
    per = total / len(groups)
    k = min(len(groups), max(1, int(np.ceil(values / per))))
    while True:
        idx = sorted({int(round(i * (len(groups) - 1) / max(1, k - 1))) for i in range(k)})
        picked = [groups[i] for i in idx]
        if sum(p.numel for g in picked for p in g) >= values or k >= len(groups):
            return picked
        k += 1
