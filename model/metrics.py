"""Bytes-moved accounting and the performance model v2 (see docs/MODEL.md, "The performance model").

Every forward pass (a target verify pass over k+1 rows, or one draft step) is recorded in a Ledger as
(kind, rows, weight bytes, KV bytes read, FLOPs). ``Ledger.time(hw)`` is the quick figure the engine's
``summary()`` uses:

    time(pass) = max(bytes / bandwidth, flops / peak_flops) + overhead

``evaluate(...)`` is the full model v2, which also charges
  * the decoder's throughput cap (values/s of the synthesised decoder instances; "unlimited" if no
    synthesis report is given, and said so in the output),
  * the verify-cost mode: ``batch-invariant`` (a k+1-row verify pass streams the weights once; needs a GEMM
    whose reduction order does not depend on the row count) or ``row-exact`` (each row runs the kernels of a
    1-token step: k+1 weight reads, k+1 overheads — what this project's CPU path does, and what greedy
    losslessness needs without a batch-invariant kernel),
  * KV writes (each pass writes the K/V of its rows) next to KV reads,
  * the prefill, separately (it is the same for every method; reported, not mixed into the decode figure).
Every result carries the model's inputs (devices, costs, passes summary), so a figure can be recomputed.

Device bandwidth / dense bf16 FLOP/s come from ``cassandra_rtl.synth.overhead.DEVICES`` — one device table
for the hardware cost model and this performance model.

The compute term (FLOPs / peak) assumes a pass can use the device's peak at any row count. GenZ's per-operator
roofline agrees with this model within 1 % per pass, and SCALE-Sim v3 does within 3 % for an NPU of 16 64x64
arrays; as one 256x256 array, which takes at most 256 weights per cycle at one row against the draft stream's
467 values per cycle, the draft step is array-bound (``python bench/crosscheck.py``, docs/report section 4).
A systolic device is modeled correctly only if its arrays' edges add up to the stream's values per cycle.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.synth.overhead import DEVICES

# performance-model preset key -> synth/overhead.py DEVICES key
PRESET_DEVICE = {"rtx4090": "rtx4090", "orin": "jetson_agx_orin", "npu": "npu"}

# Default fixed cost per forward pass (microseconds). Assumptions, not measurements (docs/MODEL.md):
#  rtx4090: one CUDA-graph replay of a decode step (launch gaps between ~300 small kernels + host sync);
#  orin:    the same on Jetson (slower host CPU and GPU clock: twice the 4090's);
#  npu:     a fixed-function accelerator fed by a descriptor chain (one doorbell + completion per pass).
DEFAULT_OVERHEAD_US = {"rtx4090": 50.0, "orin": 100.0, "npu": 10.0}
VERIFY_MODES = ("batch-invariant", "row-exact")
DEFAULT_SYNTH_REPORT = "build/synth/report.json"


@dataclass(frozen=True)
class Hardware:
    name: str
    bandwidth: float  # bytes / s (peak DRAM)
    flops: float  # dense bf16 FLOP/s (tensor cores / PE array)
    overhead_s: float = 0.0  # fixed cost per forward pass (kernel launches, synchronisation)
    decoder_values_per_s: float | None = None  # draft-mode decoder cap; None = unlimited (memory speed)
    decoder_values_per_s_full: float | None = None  # full-mode (spec + verif) cap; None = unlimited
    decoder_source: str = "unlimited (no synthesis report given)"
    source: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _decoder_from_report(path: str | Path, device_key: str) -> tuple[float, float, str] | None:
    """(draft values/s, full values/s, description) of the decoder instances a synthesis report sized for
    ``device_key`` (``overhead.by_device[device_key]``), or None if the report has no such row."""
    try:
        rep = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not a readable synthesis report ({e})") from None
    row = ((rep.get("overhead") or {}).get("by_device") or {}).get(device_key)
    if not row or not row.get("decoder_instances"):
        return None
    n, mhz = row["decoder_instances"], row["clock_mhz"]
    budget = f"{row.get('decoder_percent')} % of the PE array"
    if row.get("decoder_meets_pe_clock") is False and row.get("decoder_block_fmax_mhz"):
        # a decoder that misses the PE clock runs at its own Fmax, with the instances sized for that clock
        n, mhz = row.get("decoder_instances_own_clock") or n, min(mhz, row["decoder_block_fmax_mhz"])
        budget = f"own clock, {row.get('decoder_area_ge_own_clock') or 0:,.0f} GE"
    vpc = row.get("decoder_values_per_cycle") or 1
    vpc_full = row.get("decoder_values_per_cycle_full") or vpc
    desc = f"{path}: {n} x {row.get('decoder')} x {vpc} values/cycle x {mhz:g} MHz ({budget})"
    f = mhz * 1e6
    return n * vpc * f, n * vpc_full * f, desc


def parse_decoder(spec: str) -> tuple[float, float, str]:
    """``INSTANCES:VALUES_PER_CYCLE:MHZ[:VALUES_PER_CYCLE_FULL]`` -> (draft values/s, full values/s, text)."""
    try:
        parts = [float(x) for x in spec.split(":")]
        if len(parts) not in (3, 4) or min(parts) <= 0:
            raise ValueError
    except ValueError:
        raise ConfigError(f"decoder cap expects INSTANCES:VALUES_PER_CYCLE:MHZ[:VALUES_PER_CYCLE_FULL] "
                          f"(e.g. 128:8:141), got {spec!r}") from None
    n, vpc, mhz = parts[:3]
    vpc_full = parts[3] if len(parts) == 4 else vpc
    return n * vpc * mhz * 1e6, n * vpc_full * mhz * 1e6, f"given: {n:g} x {vpc:g} values/cycle x {mhz:g} MHz"


def hardware_presets(overhead_us: float | dict | None = None, synth_report: str | Path | None = None,
                     decoder: str | dict | None = None) -> dict[str, Hardware]:
    """RTX 4090, Jetson AGX Orin 64GB and the paper's 64 TFLOPS NPU (bandwidth / FLOPS from
    synth/overhead.py DEVICES). ``overhead_us``: one value for every preset or {preset: us} (default
    DEFAULT_OVERHEAD_US). ``synth_report``: a synthesis report JSON whose ``overhead.by_device`` sizes the
    decoder (cap = instances x values/cycle x clock); ``decoder``: "N:VPC:MHZ" (or {preset: spec}) instead.
    Without either, the decoder is unlimited (runs at memory speed) and ``decoder_source`` says so."""
    out = {}
    for key, dkey in PRESET_DEVICE.items():
        d = DEVICES[dkey]
        if isinstance(overhead_us, dict):
            ov = overhead_us.get(key, DEFAULT_OVERHEAD_US[key])
        else:
            ov = DEFAULT_OVERHEAD_US[key] if overhead_us is None else overhead_us
        if not (isinstance(ov, (int, float)) and ov >= 0 and math.isfinite(ov)):
            raise ConfigError(f"per-pass overhead must be a number of microseconds >= 0, got {ov!r}")
        hw = Hardware(d.label, d.bandwidth_gbps * 1e9, d.dense_tflops * 1e12, ov * 1e-6, source=d.source)
        dec = decoder.get(key) if isinstance(decoder, dict) else decoder
        cap = None
        if dec:
            cap = parse_decoder(dec)
        elif synth_report:
            cap = _decoder_from_report(synth_report, dkey)
            if cap is None:
                hw = replace(hw, decoder_source=f"unlimited ({synth_report} has no decoder sized for {dkey})")
        if cap:
            hw = replace(hw, decoder_values_per_s=cap[0], decoder_values_per_s_full=cap[1], decoder_source=cap[2])
        out[key] = hw
    return out


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
        """Batch-invariant verify, per-pass overhead, no decoder cap, KV reads only (the quick figure)."""
        return sum(max((p.weight_bytes + p.kv_bytes) / hw.bandwidth, p.flops / hw.flops) + hw.overhead_s
                   for p in self.passes)


def pass_flops(matrix_params: int, tokens: int, attn_layers: int, n_heads: int, head_dim: int, ctx: int) -> float:
    """2 FLOPs per weight per token + QK^T and PV (4 * heads * head_dim per key per token per layer)."""
    return 2.0 * matrix_params * tokens + 4.0 * attn_layers * n_heads * head_dim * ctx * tokens


# ------------------------------------------------------------------------------------- model v2 inputs
@dataclass
class CostSpec:
    """What a pass of one kind reads (a serialisable copy of engine.Cost + whether it goes through the
    decoder: ``fmt`` None = bf16 / INT8 read directly, "draft" = speculation stream, "full" = spec + verif)."""

    weight_bytes: int
    kv_bytes_per_token: float  # KV bytes read per cached position (and written per row)
    matrix_params: int
    attn_layers: int
    fmt: str | None = None
    kv_write_bytes_per_token: float | None = None  # None: same as kv_bytes_per_token


def cost_spec(cost, fmt=None, kv_write=None) -> CostSpec:
    return CostSpec(int(cost.weight_bytes), float(cost.kv_bytes_per_token), int(cost.matrix_params),
                    int(cost.attn_layers), fmt, kv_write)


@dataclass
class RunInputs:
    """Everything evaluate() needs: the model shape, per-kind costs, the run's passes and token counts."""

    n_heads: int
    head_dim: int
    n_kv_heads: int
    n_layers: int
    costs: dict  # "target" / "draft" / "bf16" -> CostSpec
    passes: list  # [kind, rows, weight_bytes, kv_bytes, flops]
    prompt_tokens: int
    generated: int

    def to_json(self) -> dict:
        d = asdict(self)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "RunInputs":
        d = dict(d)
        d["costs"] = {k: CostSpec(**v) for k, v in d["costs"].items()}
        return cls(**d)


def run_inputs(result, engine, drafter=None) -> RunInputs:
    """Collect a finished run's model inputs from the engine Result, its Engine and Drafter."""
    a = engine.args
    fmt_t = "full" if drafter is not None and getattr(drafter, "name", "") == "cassandra" else None
    costs = {"target": cost_spec(engine.cost, fmt_t), "bf16": cost_spec(engine.baseline_cost)}
    dc = getattr(drafter, "dcost", None)
    if dc is not None:
        # the draft writes its own unverified K/V at bf16 (the format's KV view is written for committed tokens)
        costs["draft"] = cost_spec(dc, "draft" if drafter.name == "cassandra" else None,
                                   kv_write=2.0 * 2 * dc.attn_layers * a.n_kv_heads * a.head_dim)
    passes = [[p.kind, p.tokens, p.weight_bytes, p.kv_bytes, p.flops] for p in result.ledger.passes]
    return RunInputs(a.n_heads, a.head_dim, a.n_kv_heads, a.n_layers, costs, passes,
                     result.stats.prompt_tokens, result.stats.generated)


# --------------------------------------------------------------------------------------- model v2 timing
def _ctx_from_flops(flops: float, rows: int, c: CostSpec, ri: RunInputs) -> float:
    """The last row's context length, recovered exactly from pass_flops (rows, weights and heads known)."""
    per_key = 4.0 * c.attn_layers * ri.n_heads * ri.head_dim
    return max(0.0, (flops / rows - 2.0 * c.matrix_params) / per_key) if per_key else 0.0


def pass_time(hw: Hardware, ri: RunInputs, kind: str, rows: int, wb: float, kvb: float, flops: float,
              mode: str = "batch-invariant") -> dict:
    """Modeled time of one pass and its parts (seconds, bytes, decoded values)."""
    c = ri.costs[kind]
    ctx = _ctx_from_flops(flops, rows, c, ri)
    reps = rows if (mode == "row-exact" and rows > 1) else 1
    kv_vals = 2 * c.attn_layers * ri.n_kv_heads * ri.head_dim  # K and V values per position
    if reps == 1:
        kv_read = kvb
    else:  # row t of k+1 reads keys up to its own position: ctx - rows + 1 + t
        bpt = kvb / ctx if ctx else 0.0
        kv_read = bpt * (rows * ctx - rows * (rows - 1) / 2)
    w_bpt = c.kv_bytes_per_token if c.kv_write_bytes_per_token is None else c.kv_write_bytes_per_token
    kv_write = rows * w_bpt
    read = wb * reps + kv_read
    decoded = (c.matrix_params * reps + kv_vals * ctx * (reps if reps > 1 else 1)) if c.fmt else 0
    cap = (hw.decoder_values_per_s if c.fmt == "draft" else hw.decoder_values_per_s_full) if c.fmt else None
    t_mem = (read + kv_write) / hw.bandwidth
    t_cmp = flops / hw.flops
    t_dec = decoded / cap if cap else 0.0
    # row-exact: each row is a 1-token step of its own, so max() and overhead apply per row
    t = reps * max(t_mem / reps, t_cmp / reps, t_dec / reps) + reps * hw.overhead_s
    bound = max((("memory", t_mem), ("compute", t_cmp), ("decoder", t_dec)), key=lambda x: x[1])[0]
    return {"time": t, "weight_read": wb * reps, "kv_read": kv_read, "kv_write": kv_write, "decoded": decoded,
            "overhead": reps * hw.overhead_s, "bound": bound}


def _ar_passes(ri: RunInputs, kind: str) -> list:
    """Plain autoregressive decoding of the same tokens with ``kind``'s cost: one 1-row pass per token after
    the first (the first comes from the prefill), at contexts prompt+1 .. prompt+generated-1."""
    c = ri.costs[kind]
    out = []
    for i in range(1, ri.generated):
        ctx = ri.prompt_tokens + i
        out.append([kind, 1, c.weight_bytes, c.kv_bytes_per_token * ctx,
                    pass_flops(c.matrix_params, 1, c.attn_layers, ri.n_heads, ri.head_dim, ctx)])
    return out


def _sum(hw, ri, passes, mode):
    tot = {"time": 0.0, "weight_read": 0.0, "kv_read": 0.0, "kv_write": 0.0, "decoded": 0.0, "overhead": 0.0,
           "passes": 0, "bound": {}}
    for kind, rows, wb, kvb, fl in passes:
        r = pass_time(hw, ri, kind, rows, wb, kvb, fl, mode)
        for k in ("time", "weight_read", "kv_read", "kv_write", "decoded", "overhead"):
            tot[k] += r[k]
        tot["passes"] += 1
        tot["bound"][r["bound"]] = tot["bound"].get(r["bound"], 0) + 1
    return tot


def prefill_time(hw: Hardware, ri: RunInputs, kind: str) -> float:
    """One batched pass over the prompt: weights once, causal attention, the prompt's K/V written and read."""
    c = ri.costs[kind]
    P = ri.prompt_tokens
    fl = 2.0 * c.matrix_params * P + 4.0 * c.attn_layers * ri.n_heads * ri.head_dim * P * (P + 1) / 2
    w_bpt = c.kv_bytes_per_token if c.kv_write_bytes_per_token is None else c.kv_write_bytes_per_token
    by = c.weight_bytes + P * (c.kv_bytes_per_token + w_bpt)
    return max(by / hw.bandwidth, fl / hw.flops) + hw.overhead_s


def evaluate(ri: RunInputs, presets: dict[str, Hardware] | None = None, modes=VERIFY_MODES) -> dict:
    """The model v2 for one run (or several runs merged by ``merge_inputs``): per device and verify mode,
    modeled decode time of the run, of bf16 AR and of AR on the target's own representation, the split
    ``format_speedup`` x ``speculation_speedup`` = ``speedup``, plus prefill, and the inputs."""
    presets = presets or hardware_presets()
    runs = ri if isinstance(ri, list) else [ri]
    out = {"version": 2, "devices": {k: h.as_dict() for k, h in presets.items()}, "modes": list(modes),
           "by_device": {}}
    for key, hw in presets.items():
        dev = {}
        for mode in modes:
            t_run = t_bf = t_tar = pre_bf = pre_t = 0.0
            parts = None
            for r in runs:
                s = _sum(hw, r, r.passes, mode)
                t_run += s["time"]
                t_bf += _sum(hw, r, _ar_passes(r, "bf16"), mode)["time"]
                t_tar += _sum(hw, r, _ar_passes(r, "target"), mode)["time"]
                pre_bf += prefill_time(hw, r, "bf16")
                pre_t += prefill_time(hw, r, "target")
                if parts is None:
                    parts = {k: 0.0 for k in ("weight_read", "kv_read", "kv_write", "decoded", "overhead")}
                    parts["bound"] = {}
                for k in ("weight_read", "kv_read", "kv_write", "decoded", "overhead"):
                    parts[k] += s[k]
                for b, n in s["bound"].items():
                    parts["bound"][b] = parts["bound"].get(b, 0) + n
            sp = t_bf / t_run if t_run else None
            dev[mode] = {
                "speedup": sp,
                "format_speedup": t_bf / t_tar if t_tar else None,
                "speculation_speedup": t_tar / t_run if t_run else None,
                "decode_s": t_run, "bf16_ar_decode_s": t_bf, "target_ar_decode_s": t_tar,
                "prefill_s": pre_t, "bf16_prefill_s": pre_bf,
                "speedup_with_prefill": (t_bf + pre_bf) / (t_run + pre_t) if t_run else None,
                "parts": parts,
            }
        dev["decoder"] = hw.decoder_source
        dev["overhead_us"] = hw.overhead_s * 1e6
        out["by_device"][key] = dev
    return out


def speedups(ev: dict, mode: str = "batch-invariant", what: str = "speedup") -> dict:
    """{device: figure} from an evaluate() result."""
    return {k: v[mode][what] for k, v in ev["by_device"].items()}


def model_summary(result, engine, drafter=None, presets=None, with_passes: bool = False) -> dict:
    """The model v2 for a finished run as a JSON-ready dict (``--json`` output): both verify modes, the
    format / speculation split, prefill, and the model's inputs (``model_inputs``; with ``with_passes`` the
    passes themselves, so the figure can be recomputed for other devices)."""
    ri = run_inputs(result, engine, drafter)
    ev = evaluate(ri, presets)
    inp = ri.to_json()
    if not with_passes:
        inp["passes"] = f"{len(ri.passes)} passes (not stored)"
    return {"performance_model": ev, "model_inputs": inp}


# ------------------------------------------------------------------------------------------ aggregation
def accumulate_run(agg: dict, result, reference_tokens: list[int], engine=None, drafter=None,
                   presets=None) -> None:
    """Add one generation run (an engine Result) to per-config totals: drafted / accepted tokens, verify
    steps and the tokens they emitted, generated tokens, bytes moved (run and bf16 baseline), lossless runs.
    Shared by the benchmark and the tuner's validation so both aggregate the same way. With ``engine``
    (and ``drafter``) the run's model-v2 inputs are kept in ``agg["inputs"]`` for ``evaluate``."""
    st = result.stats
    for key, value in (("drafted", st.drafted), ("accepted", st.accepted), ("steps", st.steps),
                       ("step_tokens", st.step_tokens), ("gen", st.generated), ("bytes", result.ledger.bytes()),
                       ("base", result.baseline.bytes()), ("lossless", int(result.tokens == reference_tokens))):
        agg[key] = agg.get(key, 0) + value
    # Modeled time per hardware preset: the run, plain bf16 AR, and AR over the target's own representation.
    for k, hw in (presets or hardware_presets()).items():
        for key, ledger in (("time", result.ledger), ("btime", result.baseline), ("ttime", result.target_ar)):
            if ledger is not None:
                agg.setdefault(key, {})[k] = agg.get(key, {}).get(k, 0.0) + ledger.time(hw)
    if engine is not None:
        agg.setdefault("inputs", []).append(run_inputs(result, engine, drafter))
    # Drafted / accepted tokens per draft position.
    pos_d, pos_a = agg.setdefault("pos_drafted", []), agg.setdefault("pos_accepted", [])
    for j, (d, a) in enumerate(zip(st.drafted_at, st.accepted_at)):
        if j == len(pos_d):
            pos_d.append(0)
            pos_a.append(0)
        pos_d[j] += d
        pos_a[j] += a


def spread(values: list[float]) -> dict:
    """min / median / max / mean of per-prompt figures."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return {"min": None, "median": None, "max": None, "mean": None, "n": 0}
    n = len(v)
    med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    return {"min": v[0], "median": med, "max": v[-1], "mean": sum(v) / n, "n": n}


CPU_NOTE = ("Measured CPU wall-clock: one thread of this CPU decodes ~4-7 bf16 tokens/s of a 135M model, i.e. "
            "it streams ~1-2 GB/s of weights, far below its DRAM bandwidth (it is compute-bound), and the draft "
            "costs as many FLOPs as the target, so reading fewer bytes saves no time here; the memory-bound gain "
            "exists only where bandwidth, not arithmetic, limits a pass.")
