#!/usr/bin/env python
"""The performance model checked against established simulators: GenZ (``genz-llm``) for every device
and SCALE-Sim v3 (``scalesim``) for the NPU, on SmolLM2-135M and the paper's model sizes.

For each device preset (synth/overhead.py DEVICES via model/metrics.py) and model shape, three passes are
priced by each tool: a bf16 autoregressive step (1 row), a Cassandra draft step (1 row, the speculation
stream) and a Cassandra verify pass (gamma + 1 rows, the lossless stream), at context ``--context``.
Speculative decoding with per-token acceptance alpha and fixed draft length gamma emits
E = (1 - alpha^(gamma+1)) / (1 - alpha) tokens per step at a cost of gamma draft steps + 1 verify pass, so

    speedup = E * t(bf16 AR step) / (gamma * t(draft step) + t(verify pass))

for every tool; the tools differ only in how they price a pass:

* **roofline** -- ``model/metrics.pass_time``: max(bytes / bandwidth, FLOPs / peak) + the preset's per-pass
  overhead, KV writes included, decoder unlimited (the project's default).
* **GenZ** -- its per-operator roofline (``get_model_df``) of its own decode model (AR and draft steps) and
  chunked model (the verify pass; GenZ's own speculative-decoding model prices verification this way). The
  split format is given as bytes per value by tensor kind (weights, K/V) through a ``System`` whose
  ``get_bit_multiplier`` returns them; GenZ has no per-pass fixed cost, so the preset's overhead is added to
  each pass (``*_no_overhead`` fields leave it out on both sides).
* **SCALE-Sim v3** (NPU only) -- cycle-level runs of the passes' GEMMs on the NPU's systolic array
  (``--npu-array``, default 16 arrays of 64x64 PEs), weights / K / V streamed from a bandwidth-limited DRAM
  (``ScaleSimNPU``: the mapping and what is on chip).

Neither tool can express the decoder's throughput cap; it is left unlimited on every side (the roofline's
default: ``decoder: unlimited``). Inputs for SmolLM2 are measured (bits/value of the bundled artifact's
streams, acceptance of the held-out runs); the paper's shapes (Llama-3-8B, Qwen3-8B, Qwen3-4B) are their
public configs, priced with SmolLM2's bits/value and swept over the paper's acceptance 0.74-0.91.

    python bench/crosscheck.py                 # markdown table (build/crosscheck/crosscheck.json too)
    python bench/crosscheck.py --json          # one JSON object: {"rows": [...], ...}
    python bench/crosscheck.py --no-scalesim   # roofline + GenZ only (seconds)

The optional tools: ``pip install -e '.[crosscheck]'`` (neither depends on torch). A tool that is not
installed is skipped and its columns are null, with the reason in ``tools``.
"""
from __future__ import annotations

import argparse
import builtins
import contextlib
import csv
import dataclasses
import io
import json
import math
import re
import sys
import tempfile
import time
from pathlib import Path

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.model.metrics import (CostSpec, Hardware, RunInputs, hardware_presets, pass_flops,
                                         pass_time)
from cassandra_rtl.synth.overhead import (DEVICES, DRAFT_BITS_PER_VALUE, FULL_BITS_PER_VALUE)


# ----------------------------------------------------------------------------------------------- inputs
@dataclasses.dataclass(frozen=True)
class Shape:
    """A decoder-only transformer's shape (the fields of its public config.json)."""

    label: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    source: str

    @property
    def layer_params(self) -> int:
        """2-D weights of one layer: q, k, v, o and the gated MLP's gate, up, down."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.hidden * (q + 2 * kv) + q * self.hidden + 3 * self.hidden * self.intermediate

    @property
    def matrix_params(self) -> int:
        """Weights multiplied per token: every layer's matrices and the LM head (an embedding lookup of an
        untied model reads one row, ignored as in model/engine.Cost)."""
        return self.layers * self.layer_params + self.vocab * self.hidden

    @property
    def kv_values_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim


# The paper's models, written down from their public Hugging Face config.json files (no checkpoint needed).
MODELS: dict[str, Shape] = {
    "smollm2-135m": Shape("SmolLM2-135M", 30, 576, 1536, 9, 3, 64, 49152, True,
                          "HuggingFaceTB/SmolLM2-135M-Instruct config.json (the bundled GGUF's shape)"),
    "llama3-8b": Shape("Llama-3-8B", 32, 4096, 14336, 32, 8, 128, 128256, False,
                       "meta-llama/Meta-Llama-3-8B config.json; DeepSeek-R1-Distill-Llama-8B has this shape"),
    "qwen3-8b": Shape("Qwen3-8B", 36, 4096, 12288, 32, 8, 128, 151936, False, "Qwen/Qwen3-8B config.json"),
    "qwen3-4b": Shape("Qwen3-4B", 36, 2560, 9728, 32, 8, 128, 151936, True,
                      "Qwen/Qwen3-4B config.json (head_dim 128 x 32 heads = 4096 > hidden 2560)"),
}
PAPER_MODELS = ("llama3-8b", "qwen3-8b", "qwen3-4b")


@dataclasses.dataclass(frozen=True)
class Bits:
    """Bits per value of each stream: weights and K/V, lossless (draft + verification planes) and draft."""

    weights_full: float = FULL_BITS_PER_VALUE
    weights_draft: float = DRAFT_BITS_PER_VALUE
    kv_full: float = 11.370
    kv_draft: float = 7.370
    source: str = ("weights: the bundled SmolLM2 artifact with its tuned draft (synth/overhead.py "
                   "DRAFT_BITS_PER_VALUE / FULL_BITS_PER_VALUE: `cassandra-rtl stats smol.cass --json`); K/V: "
                   "docs/report section 1 (C1 G=64 books calibrated on the prompt; the draft view keep 1.0, m 3 "
                   "of the bundled allocation's KV config)")


# SmolLM2's measured acceptance: per-token alpha of the held-out runs (docs/MODEL.md, "Held-out prompts",
# `python -m cassandra_rtl.model.bench --table build/heldout3/heldout.jsonl`), at the run's gamma.
SMOL_HELDOUT = (
    {"config": "tuned_g2", "alpha": 0.816, "gamma": 2,
     "metrics_evaluate": {"rtx4090": 1.57, "orin": 1.73, "npu": 1.88}},
    {"config": "tuned_g1", "alpha": 0.834, "gamma": 1,
     "metrics_evaluate": {"rtx4090": 1.58, "orin": 1.71, "npu": 1.82}},
)
PAPER_SPEEDUPS = (1.78, 2.41)   # the paper's reported range on its 4-8B models (arXiv 2605.26558)
ACCEPTANCE_SWEEP = (0.74, 0.78, 0.82, 0.86, 0.91)
DEVICE_ORDER = ("rtx4090", "orin", "npu")
PASSES = ("ar", "draft", "verify")
GIB = float(2 ** 30)


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens per verify step: accepted drafts + the target's own token, alpha i.i.d. per position."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def alpha_from_rate(rate: float, gamma: int) -> float:
    """The per-token alpha whose accepted / drafted ratio, (alpha + ... + alpha^gamma) / gamma, is ``rate``
    (this project's ``acceptance``; papers use either definition)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** k for k in range(1, gamma + 1)) / gamma < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def speedup(t: dict, alpha: float, gamma: int) -> float:
    return expected_tokens(alpha, gamma) * t["ar"] / (gamma * t["draft"] + t["verify"])


# --------------------------------------------------------------------------------------------- roofline
def roofline_passes(shape: Shape, bits: Bits, hw: Hardware, ctx: int, gamma: int) -> dict:
    """The three passes priced by model/metrics.pass_time (seconds), with the bytes each one moves."""
    mp, L = shape.matrix_params, shape.layers
    kvv = shape.kv_values_per_token
    costs = {
        "bf16": CostSpec(2 * mp, 2.0 * kvv, mp, L, None),
        "target": CostSpec(round(mp * bits.weights_full / 8), kvv * bits.kv_full / 8, mp, L, "full"),
        # the draft reads the committed K/V through its view and writes its own unverified K/V at bf16
        "draft": CostSpec(round(mp * bits.weights_draft / 8), kvv * bits.kv_draft / 8, mp, L, "draft",
                          kv_write_bytes_per_token=2.0 * kvv),
    }
    ri = RunInputs(shape.heads, shape.head_dim, shape.kv_heads, L, costs, [], ctx, 0)

    def one(kind, rows):
        c = costs[kind]
        last = ctx + rows - 1
        return pass_time(hw, ri, kind, rows, c.weight_bytes, c.kv_bytes_per_token * last,
                         pass_flops(mp, rows, L, shape.heads, shape.head_dim, last))

    out = {"ar": one("bf16", 1), "draft": one("draft", 1), "verify": one("target", gamma + 1),
           "target_ar": one("target", 1)}
    return {k: v["time"] for k, v in out.items()} | {"bound": {k: v["bound"] for k, v in out.items()}}


# ------------------------------------------------------------------------------------------------- GenZ
def genz_available() -> str | None:
    """None if GenZ imports, else the reason."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import GenZ  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means "skip GenZ"
        return f"genz-llm not installed ({type(e).__name__}: {e}); pip install -e '.[crosscheck]'"
    return None


def _genz_system(hw: Hardware, w_bytes: float, kv_bytes: float):
    from GenZ.system import System
    from GenZ.unit import Unit

    class CassandraSystem(System):
        """bf16 compute; memory bytes per value by tensor kind: weights, K/V, activations (bf16)."""

        def get_bit_multiplier(self, type="C", data="w", operators=None):  # noqa: A002 - GenZ's name
            if type == "C":
                return 1.0
            return {"w": w_bytes, "k": kv_bytes, "v": kv_bytes}.get(data, 2.0)

    # GenZ reads bandwidth in GB/s of 2^30 bytes (Unit.binary_dicts) and FLOP/s in decimal TFLOPS; the
    # presets are decimal (1008 GB/s = 1008e9 B/s), so the bandwidth is converted, else GenZ sees 7.4 % more.
    return CassandraSystem(Unit(), flops=hw.flops / 1e12, offchip_mem_bw=hw.bandwidth / GIB,
                           off_chip_mem_size=float("inf"), bits="bf16")


def _genz_config(shape: Shape):
    from GenZ.Models.default_models import ModelConfig
    return ModelConfig(model=f"crosscheck-{shape.label}", vocab_size=shape.vocab, hidden_size=shape.hidden,
                       intermediate_size=shape.intermediate, num_ffi=2, num_decoder_layers=shape.layers,
                       num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                       head_dim=shape.head_dim)


def _genz_latency(model_file: str, system, data_path: str, drop: tuple = ()) -> tuple[float, dict]:
    """Seconds of one pass (GenZ's summed per-operator latency) and the latency of rows named in ``drop``."""
    from GenZ.analyse_model import get_model_df, get_summary_table
    from GenZ.unit import Unit
    unit = Unit()
    with contextlib.redirect_stdout(io.StringIO()):
        df = get_model_df(model_file, system, unit, 1, data_path=data_path, intermediate_on_chip=True)
        total = float(get_summary_table(df, unit)[f"Latency ({unit.unit_time})"].values[0]) * 1e-3
    dropped = {}
    for name in drop:   # rows outside any Repeat block (multiplier 1)
        sel = df[df["Layer Name"] == name]
        dropped[name] = float(sel[f"Latency ({unit.unit_time})"].sum()) * 1e-3
    return total - sum(dropped.values()), dropped


def genz_passes(shape: Shape, bits: Bits, hw: Hardware, ctx: int, gamma: int) -> dict:
    """The three passes priced by GenZ (seconds, per-pass overhead not included) and GenZ's artefacts."""
    from GenZ.Models import create_full_chunked_model, create_full_decode_model
    cfg = _genz_config(shape)
    systems = {"ar": _genz_system(hw, 2.0, 2.0),
               "draft": _genz_system(hw, bits.weights_draft / 8, bits.kv_draft / 8),
               "verify": _genz_system(hw, bits.weights_full / 8, bits.kv_full / 8)}
    systems["target_ar"] = systems["verify"]
    out, notes = {}, {}
    with tempfile.TemporaryDirectory(prefix="genz-") as tmp:
        with contextlib.redirect_stdout(io.StringIO()):
            decode = create_full_decode_model(name=cfg, input_sequence_length=ctx, output_gen_tokens=0,
                                              data_path=tmp)
            # GenZ's spec_decode_modeling verifies with this chunked model: (ctx cached, rows new)
            verify = create_full_chunked_model(name=cfg, prefill_kv_sizes=[(ctx, gamma + 1)],
                                               decode_kv_sizes=[], data_path=tmp)
        for k in ("ar", "draft", "target_ar"):
            out[k], _ = _genz_latency(decode, systems[k], tmp)
        # The chunked model starts with the input embedding as a (rows x vocab) x (vocab x hidden) GEMM, i.e.
        # it reads the whole embedding table where a decoder looks up its gamma + 1 rows. Left out (reported).
        out["verify"], dropped = _genz_latency(verify, systems["verify"], tmp, drop=("embeddings",))
        notes["verify_embedding_gemm_s"] = dropped["embeddings"]
    return out | {"notes": notes}


def genz_builtin_speedup(t: dict, alpha: float, gamma: int, overhead: float) -> float | None:
    """What GenZ's own speculative-decoding formula (llm_spec_decode.spec_decode_modeling) would give from
    the same per-pass times: tokens = its ``expected_tokens`` (capped at gamma, not gamma + 1) and the
    embedding GEMM left in the verify pass."""
    from GenZ.LLM_inference.llm_spec_decode import expected_tokens as genz_expected
    if gamma < 2:
        return None     # spec_decode_modeling asserts num_parallel_tokens > 1
    e = genz_expected(gamma, alpha)
    ver = t["verify"] + t["notes"]["verify_embedding_gemm_s"] + overhead
    return e * (t["ar"] + overhead) / (gamma * (t["draft"] + overhead) + ver)


# -------------------------------------------------------------------------------------------- SCALE-Sim
def scalesim_available() -> str | None:
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import scalesim.scale_sim  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"scalesim not installed ({type(e).__name__}: {e}); pip install -e '.[crosscheck]'"
    return None


def parse_array(spec: str) -> tuple[int, int, int]:
    """``CORESxROWSxCOLS`` (e.g. 16x64x64) -> (cores, rows, cols)."""
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", spec.strip())
    if not m or min(int(g) for g in m.groups()) < 1:
        raise ConfigError(f"--npu-array expects CORESxROWSxCOLS (e.g. 16x64x64), got {spec!r}")
    return tuple(int(g) for g in m.groups())


_SCALESIM_CFG = """[general]
run_name = tile

[architecture_presets]
ArrayHeight = {rows}
ArrayWidth = {cols}
IfmapSramSzkB = {ifmap_kb}
FilterSramSzkB = {filter_kb}
OfmapSramSzkB = {ofmap_kb}
IfmapOffset = 0
FilterOffset = 100000000
OfmapOffset = 200000000
Bandwidth = {onchip_bw}
Dataflow = ws
ReadRequestBuffer = 32
WriteRequestBuffer = 32

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = {bw}
IfmapSRAMBankNum = 1
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = {onchip_bw}
FilterSRAMBankNum = 1
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false
SparseRep = ellpack_block
OptimizedMapping = false
BlockSize = 8
RandomNumberGeneratorSeed = 40

[run_presets]
InterfaceBandwidth = USER
UseRamulatorTrace = False
"""


# Activations (the stationary operand) and outputs stay on chip: SCALE-Sim gives every operand its own backing
# port, so theirs gets this many values per cycle and only the streamed matrix sees the DRAM bandwidth.
ONCHIP_VALUES_PER_CYCLE = 4096


def _patch_scalesim_numpy2():
    """scalesim 3.0.0 calls int(max(2-D array)), which numpy >= 2 rejects ('only 0-dimensional arrays can
    be converted'); its two memory modules get a max() that reduces arrays to a scalar. Nothing else changes."""
    import numpy as np
    import scalesim.memory.double_buffered_scratchpad_mem as db
    import scalesim.memory.read_buffer as rb

    def _max(*args, **kw):
        if len(args) == 1 and not kw:
            return np.max(np.asarray(args[0], dtype=float))
        return builtins.max(*args, **kw)
    rb.max = _max
    db.max = _max


class ScaleSimNPU:
    """The NPU as ``cores`` systolic arrays of rows x cols PEs (weight-stationary dataflow), at the clock that
    makes them the preset's dense TFLOPS; the DRAM bandwidth is split evenly over the cores.

    Mapping of a pass's GEMM Y[R x N] = X[R x K] . W^T: the matrix read from DRAM (weights, or the K / V
    cache for attention) is SCALE-Sim's streamed ``ifmap`` operand (M = its output features, K = its
    reduction dim), the R activation rows are the stationary ``filter`` (K x R): the GEMV mapping, in which
    a core ingests up to ``rows`` weights per cycle at any R. Output features are split evenly over the
    cores (for attention, all K/V heads' cached keys). SCALE-Sim runs one tile of at most ``tile`` output
    features x ``tile_k`` reduction values per GEMM (K-tiles are identical folds) with an SRAM that holds
    two tiles; it reports the tile's DRAM read cycles (bandwidth-limited) and its compute cycles (the
    array's folds with fill and drain). Tiles of a GEMM are double-buffered, so a GEMM costs (tiles) x
    max(DRAM read, compute) of its tile (tiles counted fractionally when the GEMM is not a whole number of
    tiles). Activations and outputs are on chip (their ports get ONCHIP_VALUES_PER_CYCLE), as in GenZ's
    decode model; SCALE-Sim would otherwise fetch the stationary operand padded to the array's width.

    The split format is expressed as a faster DRAM in values: a core's bandwidth in values/cycle is
    bytes/cycle x 8 / bits-per-value of the stream (SCALE-Sim takes an integer; the prefetch cycles are
    rescaled from the integer to the exact rate, a < 1 % step). Decoders are not modelled (unlimited)."""

    def __init__(self, device_key: str, array: tuple[int, int, int], cache: Path | None, tile: int = 1024,
                 tile_k: int = 256):
        d = DEVICES[device_key]
        self.cores, self.rows, self.cols = array
        self.tile, self.tile_k = tile, tile_k
        self.clock_hz = d.dense_tflops * 1e12 / (2.0 * self.cores * self.rows * self.cols)
        self.bytes_per_cycle_core = d.bandwidth_gbps * 1e9 / self.clock_hz / self.cores
        self.cache_path = cache
        self.cache = {}
        if cache and cache.exists():
            try:
                self.cache = json.loads(cache.read_text())
            except json.JSONDecodeError:
                self.cache = {}
        self.runs = 0
        self.log = []      # every tile split tried: the split, its DRAM read and compute cycles
        _patch_scalesim_numpy2()

    def describe(self) -> dict:
        return {"cores": self.cores, "rows": self.rows, "cols": self.cols, "clock_mhz": self.clock_hz / 1e6,
                "dram_bytes_per_cycle_per_core": self.bytes_per_cycle_core, "tile": [self.tile, self.tile_k],
                "dataflow": "ws (activations stationary, weights / K / V streamed)"}

    def _run_tile(self, m: int, k: int, n: int, bw_values: float) -> tuple[float, float]:
        """(DRAM read cycles of the streamed operand, rescaled to the exact bandwidth; compute cycles incl.
        stalls) of one tile, from SCALE-Sim's detailed access and compute reports."""
        bw_int = max(1, round(bw_values))
        key = f"v2:{self.rows}x{self.cols}:{m}x{k}x{n}:bw{bw_int}"
        if key not in self.cache:
            from scalesim.scale_sim import scalesim
            ifmap_kb = max(64, math.ceil(2 * m * k / 1024))
            # the stationary operand is padded to the array (k x cols per fold) by SCALE-Sim
            filt_kb = max(64, math.ceil(2 * k * max(n, self.cols) / 1024))
            ofmap_kb = max(64, math.ceil(2 * m * max(n, self.cols) / 1024))
            with tempfile.TemporaryDirectory(prefix="scalesim-") as tmp:
                t = Path(tmp)
                (t / "cfg.cfg").write_text(_SCALESIM_CFG.format(rows=self.rows, cols=self.cols, bw=bw_int,
                                                                onchip_bw=ONCHIP_VALUES_PER_CYCLE,
                                                                ifmap_kb=ifmap_kb, filter_kb=filt_kb,
                                                                ofmap_kb=ofmap_kb))
                (t / "topo.csv").write_text(f"Layer,M,N,K,\ntile,{m},{n},{k},\n")
                (t / "layout.csv").write_text("Layer name,\n")
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    s = scalesim(save_disk_space=True, verbose=False, config=str(t / "cfg.cfg"),
                                 topology=str(t / "topo.csv"), layout=str(t / "layout.csv"),
                                 input_type_gemm=True)
                    s.run_scale(top_path=str(t / "out"))
                comp = list(csv.reader((t / "out" / "tile" / "COMPUTE_REPORT.csv").open()))[1]
                acc = list(csv.reader((t / "out" / "tile" / "DETAILED_ACCESS_REPORT.csv").open()))[1]
            # DETAILED_ACCESS_REPORT: ..., DRAM IFMAP Start Cycle (10), Stop Cycle (11), Reads (12), ...
            reads = float(acc[11]) - float(acc[10])
            self.cache[key] = {"dram_read": reads, "dram_values": float(acc[12]), "compute": float(comp[2])}
            self.runs += 1
            if self.cache_path:
                self.cache_path.parent.mkdir(parents=True, exist_ok=True)
                self.cache_path.write_text(json.dumps(self.cache, indent=0, sort_keys=True))
        c = self.cache[key]
        return c["dram_read"] * bw_int / bw_values, c["compute"]

    def gemm_cycles(self, m: int, k: int, n: int, bits: float) -> float:
        """Cycles of one GEMM streaming an m x k matrix at ``bits`` per value against n stationary rows.
        The cores split the m output features; when a core's tile is then array-bound (few output features
        per fold pay the array's fill and drain), the splits that also divide k over the cores (partial
        sums added on chip, not priced) are simulated too and the fastest is taken."""
        bw = self.bytes_per_cycle_core * 8.0 / bits
        best = None
        split_m = self.cores
        while split_m >= 1:
            split_k = self.cores // split_m
            m_core, k_core = m / split_m, k / split_k
            if k_core >= 1:
                tm, tk = min(self.tile, max(1, math.ceil(m_core))), min(self.tile_k, max(1, math.ceil(k_core)))
                pre, comp = self._run_tile(tm, tk, n, bw)
                cyc = (m_core / tm) * (k_core / tk) * max(pre, comp)
                self.log.append({"m": m, "k": k, "n": n, "bits": bits, "split_m": split_m, "split_k": split_k,
                                 "tile": [tm, tk], "dram_read": pre, "compute": comp, "cycles": cyc})
                best = cyc if best is None else min(best, cyc)
                if comp <= pre:     # memory-bound: no split can do better than the DRAM stream
                    break
            split_m //= 2
        return best
    def pass_seconds(self, shape: Shape, rows: int, ctx: int, w_bits: float, kv_bits: float,
                     overhead_s: float) -> dict:
        """One pass over ``rows`` rows with ``ctx`` cached positions: the layers' GEMMs, attention over
        the cache (K and V streamed), the LM head. Returns seconds with the parts in cycles."""
        q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        group = shape.heads // shape.kv_heads
        keys = ctx + rows - 1
        parts = {
            "qkv": self.gemm_cycles(q + 2 * kv, shape.hidden, rows, w_bits),
            "o": self.gemm_cycles(shape.hidden, q, rows, w_bits),
            "gate_up": self.gemm_cycles(2 * shape.intermediate, shape.hidden, rows, w_bits),
            "down": self.gemm_cycles(shape.hidden, shape.intermediate, rows, w_bits),
            # attention: each K/V head's cache (keys x head_dim) streamed against its group's query rows,
            # all heads' keys split over the cores (scores: Q.K^T; the P.V product streams the same number
            # of V values for the same MACs and is priced in the same orientation)
            "logit": self.gemm_cycles(shape.kv_heads * keys, shape.head_dim, rows * group, kv_bits),
            "attend": self.gemm_cycles(shape.kv_heads * keys, shape.head_dim, rows * group, kv_bits),
        }
        parts = {k: v * shape.layers for k, v in parts.items()}
        parts["lm_head"] = self.gemm_cycles(shape.vocab, shape.hidden, rows, w_bits)
        cycles = sum(parts.values())
        return {"time": cycles / self.clock_hz + overhead_s, "cycles": cycles, "parts": parts}

    def passes(self, shape: Shape, bits: Bits, ctx: int, gamma: int, overhead_s: float) -> dict:
        out = {
            "ar": self.pass_seconds(shape, 1, ctx, 16.0, 16.0, overhead_s),
            "draft": self.pass_seconds(shape, 1, ctx, bits.weights_draft, bits.kv_draft, overhead_s),
            "verify": self.pass_seconds(shape, gamma + 1, ctx, bits.weights_full, bits.kv_full, overhead_s),
            "target_ar": self.pass_seconds(shape, 1, ctx, bits.weights_full, bits.kv_full, overhead_s),
        }
        return {k: v["time"] for k, v in out.items()} | {"cycles": {k: v["cycles"] for k, v in out.items()},
                                                         "parts": {k: v["parts"] for k, v in out.items()}}


# ---------------------------------------------------------------------------------------------- the run
def _pct(a, b):
    return None if a is None or b is None else 100.0 * (a - b) / b


def crosscheck(models=None, acceptances=ACCEPTANCE_SWEEP, gamma: int = 4, context: int = 512,
               bits: Bits = Bits(), use_genz: bool = True, use_scalesim: bool = True,
               npu_array: str = "16x64x64", scalesim_cache: Path | None = None,
               overhead_us=None) -> dict:
    """Every (device, model, acceptance) row, the per-pass times of each tool, and what each tool assumed."""
    models = list(models or MODELS)
    for m in models:
        if m not in MODELS:
            raise ConfigError(f"unknown model {m!r}; known: {', '.join(MODELS)}")
    if not 1 <= gamma <= 32:
        raise ConfigError(f"gamma must be 1..32, got {gamma}")
    if context < 1:
        raise ConfigError(f"context must be >= 1 position, got {context}")
    for a in acceptances:
        if not 0.0 <= a < 1.0:
            raise ConfigError(f"acceptance must be in [0, 1), got {a}")
    array = parse_array(npu_array)
    presets = hardware_presets(overhead_us=overhead_us)
    tools = {"roofline": "model/metrics.pass_time"}
    genz_reason = genz_available() if use_genz else "not requested (--no-genz)"
    ss_reason = scalesim_available() if use_scalesim else "not requested (--no-scalesim)"
    tools["genz"] = genz_reason or "genz-llm " + _version("genz_llm")
    tools["scalesim"] = ss_reason or "scalesim " + _version("scalesim")
    npu = None
    if ss_reason is None:
        npu = ScaleSimNPU(device_key="npu", array=array, cache=scalesim_cache)

    steps, rows = [], []
    for dev in DEVICE_ORDER:
        hw = presets[dev]
        for mkey in models:
            shape = MODELS[mkey]
            points = [(a, gamma, None) for a in acceptances]
            if mkey == "smollm2-135m":
                points = [(h["alpha"], h["gamma"], h) for h in SMOL_HELDOUT] + points
            for g in sorted({p[1] for p in points}):
                rf = roofline_passes(shape, bits, hw, context, g)
                rf0 = roofline_passes(shape, bits, dataclasses.replace(hw, overhead_s=0.0), context, g)
                gz = genz_passes(shape, bits, hw, context, g) if genz_reason is None else None
                ss = (npu.passes(shape, bits, context, g, hw.overhead_s)
                      if (npu is not None and dev == "npu") else None)
                ov = hw.overhead_s
                step = {"device": dev, "model": mkey, "gamma": g, "context": context,
                        "roofline_s": {k: rf[k] for k in (*PASSES, "target_ar")}, "roofline_bound": rf["bound"]}
                if gz is not None:
                    step["genz_s"] = {k: gz[k] + ov for k in (*PASSES, "target_ar")}
                    step["genz_notes"] = gz["notes"]
                    step["genz_vs_roofline_pct"] = {k: _pct(step["genz_s"][k], rf[k]) for k in PASSES}
                if ss is not None:
                    step["scalesim_s"] = {k: ss[k] for k in (*PASSES, "target_ar")}
                    step["scalesim_cycles"] = ss["cycles"]
                    step["scalesim_parts"] = ss["parts"]
                    step["scalesim_vs_roofline_pct"] = {k: _pct(ss[k], rf[k]) for k in PASSES}
                steps.append(step)
                for a, gg, held in points:
                    if gg != g:
                        continue
                    row = {"device": dev, "model": mkey, "acceptance": a, "gamma": g,
                           "source": (f"held-out {held['config']} (measured alpha)" if held
                                      else ("paper sweep" if mkey in PAPER_MODELS else "sweep")),
                           "tokens_per_step": expected_tokens(a, g),
                           "speedup_roofline": speedup(rf, a, g),
                           "speedup_roofline_no_overhead": speedup(rf0, a, g),
                           "format_speedup_roofline": rf["ar"] / rf["target_ar"],
                           "speedup_genz": None, "speedup_genz_no_overhead": None}
                    if held:
                        row["speedup_metrics_heldout"] = held["metrics_evaluate"][dev]
                    else:   # the same number read as accepted / drafted instead of per-token alpha
                        row["alpha_if_rate"] = alpha_from_rate(a, g)
                        row["speedup_roofline_if_rate"] = speedup(rf, row["alpha_if_rate"], g)
                    if gz is not None:
                        row["speedup_genz"] = speedup(step["genz_s"], a, g)
                        row["speedup_genz_no_overhead"] = speedup(gz, a, g)
                        row["speedup_genz_builtin_formula"] = genz_builtin_speedup(gz, a, g, ov)
                        row["genz_vs_roofline_pct"] = _pct(row["speedup_genz"], row["speedup_roofline"])
                    if dev == "npu":
                        row["speedup_scalesim"] = speedup(ss, a, g) if ss is not None else None
                        row["scalesim_vs_roofline_pct"] = _pct(row["speedup_scalesim"], row["speedup_roofline"])
                    rows.append(row)
    return {
        "rows": rows, "steps": steps, "tools": tools,
        "inputs": {
            "gamma": gamma, "context": context, "acceptance_sweep": list(acceptances),
            "bits": dataclasses.asdict(bits),
            "models": {k: dataclasses.asdict(MODELS[k]) | {"matrix_params": MODELS[k].matrix_params}
                       for k in models},
            "devices": {k: presets[k].as_dict() for k in DEVICE_ORDER},
            "smollm2_heldout": list(SMOL_HELDOUT), "paper_speedups": list(PAPER_SPEEDUPS),
            "npu_array": npu.describe() if npu else npu_array,
            "scalesim_tiles": npu.log if npu else [],
            "speedup": "E * t(bf16 AR) / (gamma * t(draft) + t(verify)), E = (1 - a^(gamma+1)) / (1 - a)",
        },
    }


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def _f(x, nd=2, suffix=""):
    return "—" if x is None else f"{x:.{nd}f}{suffix}"


def markdown(res: dict) -> str:
    """The step-time table (per device and model) and the speedup table (per row)."""
    lbl = {k: DEVICES[v].label.split(" (")[0] for k, v in (("rtx4090", "rtx4090"), ("orin", "jetson_agx_orin"),
                                                             ("npu", "npu"))}
    out = ["| device | model | gamma | pass | roofline (ms) | GenZ (ms) | GenZ vs roofline | SCALE-Sim (ms) | "
           "SCALE-Sim vs roofline | roofline bound |", "|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for s in res["steps"]:
        for p in PASSES:
            gz = s.get("genz_s", {}).get(p)
            ss = s.get("scalesim_s", {}).get(p)
            out.append(f"| {lbl[s['device']]} | {MODELS[s['model']].label} | {s['gamma']} | {p} | "
                       f"{s['roofline_s'][p] * 1e3:.3f} | {_f(gz and gz * 1e3, 3)} | "
                       f"{_f(s.get('genz_vs_roofline_pct', {}).get(p), 1, ' %')} | {_f(ss and ss * 1e3, 3)} | "
                       f"{_f(s.get('scalesim_vs_roofline_pct', {}).get(p), 1, ' %')} | {s['roofline_bound'][p]} |")
    out += ["", "| device | model | acceptance (alpha) | gamma | source | roofline | GenZ | GenZ vs roofline | "
            "SCALE-Sim | no overhead: roofline / GenZ | GenZ's own formula |",
            "|---|---|---:|---:|---|---:|---:|---:|---:|---|---:|"]
    for r in res["rows"]:
        out.append(f"| {lbl[r['device']]} | {MODELS[r['model']].label} | {r['acceptance']:.3f} | {r['gamma']} | "
                   f"{r['source']} | {_f(r['speedup_roofline'], 2, 'x')} | {_f(r['speedup_genz'], 2, 'x')} | "
                   f"{_f(r.get('genz_vs_roofline_pct'), 1, ' %')} | {_f(r.get('speedup_scalesim'), 2, 'x')} | "
                   f"{_f(r['speedup_roofline_no_overhead'], 2, 'x')} / {_f(r['speedup_genz_no_overhead'], 2, 'x')} | "
                   f"{_f(r.get('speedup_genz_builtin_formula'), 2, 'x')} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object (rows, steps, tools, inputs)")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--acceptance", default=",".join(str(a) for a in ACCEPTANCE_SWEEP),
                    help="per-token acceptances swept for every model (default: the paper's 0.74-0.91)")
    ap.add_argument("--gamma", type=int, default=4, help="draft length of the sweep (default 4)")
    ap.add_argument("--context", type=int, default=512, help="cached positions at the priced step (default 512)")
    ap.add_argument("--no-genz", action="store_true")
    ap.add_argument("--no-scalesim", action="store_true")
    ap.add_argument("--npu-array", default="16x64x64",
                    help="SCALE-Sim NPU: CORESxROWSxCOLS systolic arrays (default 16x64x64 = 65,536 PEs)")
    ap.add_argument("--cache", default="build/crosscheck/scalesim_cache.json",
                    help="SCALE-Sim tile results cache ('' for none)")
    ap.add_argument("--out", default="build/crosscheck/crosscheck.json", help="also write the JSON here ('' for no file)")
    a = ap.parse_args(argv)
    try:
        try:
            acc = tuple(float(x) for x in a.acceptance.split(",") if x.strip())
        except ValueError:
            raise ConfigError(f"--acceptance expects comma-separated numbers, got {a.acceptance!r}") from None
        t0 = time.time()
        res = crosscheck(models=[m.strip() for m in a.models.split(",") if m.strip()], acceptances=acc,
                         gamma=a.gamma, context=a.context, use_genz=not a.no_genz,
                         use_scalesim=not a.no_scalesim, npu_array=a.npu_array,
                         scalesim_cache=Path(a.cache) if a.cache else None)
        res["command"] = " ".join(["python bench/crosscheck.py", *(argv if argv is not None else sys.argv[1:])])
        res["seconds"] = round(time.time() - t0, 1)
    except ConfigError as e:
        print(f"crosscheck: {e}", file=sys.stderr)
        return 2
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1))
    if a.json:
        print(json.dumps(res))
    else:
        print(markdown(res))
        for k, v in res["tools"].items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
