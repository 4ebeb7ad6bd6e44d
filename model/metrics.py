"""Bytes-moved accounting and the memory-bound performance model (see docs/MODEL.md).

Every forward pass (a target verify pass over T tokens, or one draft step) is charged
    time = max(bytes_read / bandwidth, flops / peak_flops) + overhead
where bytes_read = weight bytes of that model (real stream sizes for the Cassandra format) + the KV
bytes it reads at its context length. The modeled speedup of a run is the modeled time of plain bf16
autoregressive decoding of the same tokens (one T=1 pass per token, bf16 weights and KV) divided by the
modeled time of the run's passes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Hardware:
    name: str
    bandwidth: float  # bytes / s (peak DRAM)
    flops: float  # dense bf16 FLOP/s (tensor cores)
    overhead_s: float = 0.0  # fixed cost per forward pass (kernel launches etc.); 0 by default


def hardware_presets() -> dict[str, Hardware]:
    """RTX 4090, Jetson AGX Orin 64GB, and an NPU configurable by CASSANDRA_NPU_GBS / CASSANDRA_NPU_TFLOPS."""
    npu_bw = float(os.environ.get("CASSANDRA_NPU_GBS", "68.3")) * 1e9
    npu_fl = float(os.environ.get("CASSANDRA_NPU_TFLOPS", "10")) * 1e12
    return {
        "rtx4090": Hardware("RTX 4090", 1008e9, 165.2e12),
        "orin": Hardware("Jetson AGX Orin", 204.8e9, 42.5e12),
        "npu": Hardware("NPU", npu_bw, npu_fl),
    }


@dataclass
class Pass:
    kind: str  # "target" | "draft"
    tokens: int  # rows processed
    weight_bytes: int
    kv_bytes: int
    flops: float


@dataclass
class Ledger:
    """Records every forward pass of a run."""

    passes: list[Pass] = field(default_factory=list)

    def add(self, kind, tokens, weight_bytes, kv_bytes, flops):
        self.passes.append(Pass(kind, int(tokens), int(weight_bytes), int(kv_bytes), float(flops)))

    def bytes(self, kind: str | None = None) -> int:
        return sum(p.weight_bytes + p.kv_bytes for p in self.passes if kind is None or p.kind == kind)

    def time(self, hw: Hardware) -> float:
        return sum(max((p.weight_bytes + p.kv_bytes) / hw.bandwidth, p.flops / hw.flops) + hw.overhead_s
                   for p in self.passes)


def pass_flops(matrix_params: int, tokens: int, attn_layers: int, n_heads: int, head_dim: int, ctx: int) -> float:
    """2 FLOPs per weight per token + QK^T and PV (4 * heads * head_dim per key per token per layer)."""
    return 2.0 * matrix_params * tokens + 4.0 * attn_layers * n_heads * head_dim * ctx * tokens


def accumulate_run(agg: dict, result, reference_tokens: list[int]) -> None:
    """Add one generation run (an engine Result) to per-config totals: drafted / accepted tokens, verify
    steps and the tokens they emitted, generated tokens, bytes moved (run and bf16 baseline), lossless runs.
    Shared by the benchmark and the tuner's validation so both aggregate the same way."""
    st = result.stats
    for key, value in (("drafted", st.drafted), ("accepted", st.accepted), ("steps", st.steps),
                       ("step_tokens", st.step_tokens), ("gen", st.generated), ("bytes", result.ledger.bytes()),
                       ("base", result.baseline.bytes()), ("lossless", int(result.tokens == reference_tokens))):
        agg[key] = agg.get(key, 0) + value
    # Modeled time per hardware preset: the run, plain bf16 AR, and AR over the target's own representation.
    for k, hw in hardware_presets().items():
        for key, ledger in (("time", result.ledger), ("btime", result.baseline), ("ttime", result.target_ar)):
            if ledger is not None:
                agg.setdefault(key, {})[k] = agg.get(key, {}).get(k, 0.0) + ledger.time(hw)
    # Drafted / accepted tokens per draft position.
    pos_d, pos_a = agg.setdefault("pos_drafted", []), agg.setdefault("pos_accepted", [])
    for j, (d, a) in enumerate(zip(st.drafted_at, st.accepted_at)):
        if j == len(pos_d):
            pos_d.append(0)
            pos_a.append(0)
        pos_d[j] += d
        pos_a[j] += a
