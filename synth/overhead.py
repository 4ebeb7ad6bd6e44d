"""How much area does Cassandra cost on device X? Decoders + KV encoders as a share of the PE array.

Assumptions (each is a field of OverheadParams or Device, overridable from the command line):

1. **Compute.** The device's dense bf16 throughput (fp32 accumulate) is built from the project's PE
   (``pe_bf16_fp32``: one bf16 x bf16 + fp32 multiply-accumulate = 2 FLOP per cycle), synthesised in
   the same flow and library, at the PE's own Fmax: ``PEs = TFLOPS / (2 * f_PE)``.
2. **Clock.** Decoders and encoders run at the PE clock (one clock domain; a block that cannot meet it
   is flagged — it would have to be pipelined or replicated at a lower clock, which the secondary
   "own clock" column prices: instances at min(f_PE, f_block)).
3. **Decoder rate.** The decoder sits in the memory path and must keep up with the memory: the draft
   pass reads only the speculation stream (``draft_bits_per_value``), the target pass the lossless stream
   (``full_bits_per_value``). Defaults: the bundled SmolLM2 model artifact with the tuned draft in format
   3.0 (the same bits as 2.0), 4.787 and 11.150 bits/value over all 272 tensors (``cassandra-rtl encode MODEL
   -o smol.cass --draft-config bundled`` then ``cassandra-rtl stats smol.cass --json``: ``bits_per_value.speculation`` /
   ``.total``; format 1.0 and the first uniform draft gave 5 / 11). Those streams are **C1** (the tuner picked
   C1 for every tensor and for the KV view), so the headline prices only blocks of the streams' scheme
   (``scheme``, default ``"c1"``): a C2 decoder cannot read a C1 stream. Pricing C2 needs a C2 stream's
   figures (``scheme="c2"`` with ``draft_bits_per_value`` / ``full_bits_per_value``); ``by_decoder`` lists
   every decoder, those of the other scheme priced on these streams' bits/value and marked so.
   Values/s = bandwidth x 8 / bits; instances = ceil(values/s / (values/cycle x f)), the larger of the
   two modes (full mode uses the block's ``values_per_cycle_full`` when it has fewer verification lanes).
   A decoder cluster's core (decoder v3, the headline) comes with the registers its cluster shares, one set per
   ``MAX_CLUSTER`` = 8 cores (the NPU tile's OP_DEC mask): area = n x core + ceil(n / 8) x registers.
4. **Encoder rate.** The online KV encoder compresses the KV cache as it is written. Decode writes
   ``2 * layers * kv_heads * head_dim`` values per token (65,536 for Llama-3-8B: about 1/123,000 of the
   8.03 G weights it reads), so the binding rate is **prefill**: compute-bound at
   ``prefill_utilisation`` x TFLOPS / (2 x params) tokens/s (default: 100 % of peak, an upper bound),
   times the KV values per token, of the model in ``kv_model``.
5. **Bytes per FLOP** is the device's own: bandwidth / dense TFLOPS (sources in DEVICES).

The percentage is area(decoders + encoders) / area(PE array). At one shared clock it does not depend
on the clock (both instance counts scale with 1/f).
"""
from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any

from ..errors import ConfigError
from ..hw.npu import MAX_CLUSTER

PE_BLOCK = "pe_bf16_fp32"


@dataclasses.dataclass(frozen=True)
class Device:
    label: str
    bandwidth_gbps: float
    dense_tflops: float            # dense bf16 (fp32 accumulate) the PE array must deliver
    source: str

    @property
    def bytes_per_kflop(self) -> float:
        return self.bandwidth_gbps * 1e9 / (self.dense_tflops * 1e12) * 1e3


DEVICES: dict[str, Device] = {
    "rtx4090": Device(
        "RTX 4090 (GDDR6X)", 1008.0, 165.2,
        "1008 GB/s: NVIDIA RTX 4090 specifications (384-bit GDDR6X at 21 Gbps). 165.2 TFLOPS: dense BF16 "
        "tensor throughput with FP32 accumulate (Ada whitepaper figure; 330.3 with sparsity; the same value "
        "as model/metrics.py). Issue #17 quoted 82.6, which is the 4090's non-tensor FP32 (CUDA-core) peak: "
        "with it the PE array halves and every share here doubles (--device rtx4090=1008:82.6)"),
    "jetson_agx_orin": Device(
        "Jetson AGX Orin 64 GB (LPDDR5)", 204.8, 42.5,
        "204.8 GB/s: NVIDIA Jetson AGX Orin 64 GB data sheet (256-bit LPDDR5). 42.5 TFLOPS dense "
        "bf16/fp32-accumulate GPU tensor throughput, as given in issue #17"),
    "npu": Device(
        "64 TFLOPS edge NPU (LPDDR5X-8533, 128-bit)", 136.5, 64.0,
        "64 TFLOPS: the paper's NPU (arXiv 2605.26558). Memory: a documented choice, not the paper's "
        "figure: LPDDR5X-8533 on a 128-bit bus = 8533 MT/s x 16 B = 136.5 GB/s (a flagship mobile SoC)"),
}


@dataclasses.dataclass(frozen=True)
class KvModel:
    name: str
    params: float
    layers: int
    kv_heads: int
    head_dim: int

    @property
    def kv_values_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim


KV_MODELS = {
    "llama3-8b": KvModel("Llama-3-8B (32 layers, 8 KV heads x 128)", 8.03e9, 32, 8, 128),
    "qwen3-8b": KvModel("Qwen3-8B (36 layers, 8 KV heads x 128)", 8.19e9, 36, 8, 128),
    "qwen3-4b": KvModel("Qwen3-4B (36 layers, 8 KV heads x 128)", 4.02e9, 36, 8, 128),
    "smollm2-135m": KvModel("SmolLM2-135M (30 layers, 3 KV heads x 64)", 1.35e8, 30, 3, 64),
}


# The decoder shares at which the report prices the area budget per draft value/cycle (render_markdown, by_device).
BUDGET_PERCENTS = (1.0, 2.0, 5.0)
# The budget's design point: full mode at half the draft rate (decoder_*_v4 / Lv = L/2).
BUDGET_FULL_RATE = 0.5

SCHEMES = ("c1", "c2")

# The streams the decoder must keep up with (module docstring, assumption 3; measured, with the command there).
DRAFT_BITS_PER_VALUE = 4.787
FULL_BITS_PER_VALUE = 11.150


@dataclasses.dataclass
class OverheadParams:
    devices: dict[str, Device] = dataclasses.field(default_factory=lambda: dict(DEVICES))
    draft_bits_per_value: float = DRAFT_BITS_PER_VALUE
    full_bits_per_value: float = FULL_BITS_PER_VALUE
    kv_model: str = "llama3-8b"
    scheme: str = "c1"                    # the streams' scheme: the headline's decoder and encoder read it
    prefill_utilisation: float = 1.0
    clock_mhz: float | None = None        # None: the PE's Fmax in this flow
    decoder: str | None = None            # None: the cheapest decoder that meets the PE clock
    encoder: str | None = None

    def __post_init__(self):
        for field in ("draft_bits_per_value", "full_bits_per_value"):
            v = getattr(self, field)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ConfigError(f"{field} must be a positive number, got {v!r}")
        if not 0 < self.prefill_utilisation <= 1:
            raise ConfigError(f"prefill_utilisation must be in (0, 1], got {self.prefill_utilisation}")
        if self.scheme not in SCHEMES:
            raise ConfigError(f"scheme must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        if self.kv_model not in KV_MODELS:
            raise ConfigError(f"unknown kv_model {self.kv_model!r}; known: {', '.join(KV_MODELS)}")
        if self.clock_mhz is not None and not self.clock_mhz > 0:
            raise ConfigError(f"clock_mhz must be positive, got {self.clock_mhz}")
        if not self.devices:
            raise ConfigError("at least one device is needed")
        for k, d in self.devices.items():
            if not (d.bandwidth_gbps > 0 and d.dense_tflops > 0):
                raise ConfigError(f"device {k!r}: bandwidth and TFLOPS must be positive")

    @classmethod
    def from_json(cls, path: pathlib.Path, **overrides) -> "OverheadParams":
        try:
            data = json.loads(pathlib.Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: not a readable JSON file ({exc})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(data) - known)
        if bad:
            raise ConfigError(f"{path}: unknown key(s) {bad}; known: {sorted(known)}")
        if "devices" in data:
            devs = dict(DEVICES)
            for k, d in data["devices"].items():
                try:
                    devs[k] = Device(d.get("label", k), float(d["bandwidth_gbps"]), float(d["dense_tflops"]),
                                     d.get("source", f"{path}"))
                except (KeyError, TypeError, ValueError, AttributeError):
                    raise ConfigError(f"{path}: device {k!r} needs bandwidth_gbps and dense_tflops") from None
            data["devices"] = devs
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**data)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["devices"] = {k: {**dataclasses.asdict(v), "bytes_per_kflop": round(v.bytes_per_kflop, 2)}
                        for k, v in self.devices.items()}
        return d


def parse_device(spec: str) -> tuple[str, Device]:
    """``NAME=GBPS:TFLOPS`` (command line) -> (name, Device)."""
    name, sep, rest = spec.partition("=")
    bw, sep2, tf = rest.partition(":")
    try:
        if not (sep and sep2 and name.strip()):
            raise ValueError
        return name.strip(), Device(name.strip(), float(bw), float(tf), "command line")
    except ValueError:
        raise ConfigError(f"--device expects NAME=GBPS:TFLOPS (e.g. npu=136.5:64), got {spec!r}") from None


def _ok_blocks(report: dict, kind: str) -> dict[str, dict]:
    return {n: b for n, b in report["blocks"].items() if b.get("status") == "ok" and b.get("kind") == kind}


# The headline decoder's plane layout: decoder v3's (the NPU tile's cluster, the whole-model runs), as the KV
# encoders write (docs/FORMAT.md §3.1, §4).
HEADLINE_DECODER_LAYOUT = "format 3.0"


def block_scheme(name: str, block: dict) -> str | None:
    """"c1" / "c2" for a decoder or encoder (its registry family, e.g. decoder_c1v3, encoder_kv_c2), else None."""
    for label in ((block.get("meta") or {}).get("block"), name):     # the registry family, else the name
        for part in (label or "").split("_")[1:]:
            for sch in SCHEMES:
                if part.startswith(sch):
                    return sch
    return None


def _fmax_hz(block: dict) -> float | None:
    f = (block.get("timing") or {}).get("est_fmax_mhz")
    return f * 1e6 if f else None


def _instances(values_per_s: float, vpc: float, f_hz: float) -> int:
    return max(1, math.ceil(values_per_s / (vpc * f_hz))) if values_per_s > 0 else 0


def _block_cost(block: dict, draft_vps: float, full_vps: float, f_pe: float, shared: dict | None = None) -> dict:
    """Instances and area of one block kind at the PE clock and at its own (lower) clock. A decoder cluster's
    core comes with ``shared``, the registers its cluster shares: one per MAX_CLUSTER cores."""
    meta = block.get("meta") or {}
    vpc = meta.get("values_per_cycle") or meta.get("lanes") or 1
    vpc_full = meta.get("values_per_cycle_full") or vpc
    f_blk = min(_fmax_hz(b) or f_pe for b in (block, shared or block))
    def count(f):
        return max(_instances(draft_vps, vpc, f), _instances(full_vps, vpc_full, f))
    def area(n):
        return n * block["area_ge"] + (math.ceil(n / MAX_CLUSTER) * shared["area_ge"] if shared else 0.0)
    n_pe, n_own = count(f_pe), count(min(f_pe, f_blk))
    out = {"instances": n_pe, "area_ge": area(n_pe), "meets_pe_clock": f_blk >= f_pe,
           "block_fmax_mhz": round(f_blk / 1e6, 1), "values_per_cycle": vpc, "values_per_cycle_full": vpc_full,
           "instances_own_clock": n_own, "area_ge_own_clock": area(n_own)}
    if shared:
        out["clusters"] = math.ceil(n_pe / MAX_CLUSTER)
    return out


def _shared_block(report: dict, name: str) -> tuple[bool, dict | None]:
    """(priceable, the registers a cluster core shares) of a decoder block: a core (``cluster_part`` instance)
    is priced with its cluster's registers (``shared_regs``), so only when they were synthesised too."""
    meta = report["blocks"][name].get("meta") or {}
    if meta.get("cluster_part") != "instance":
        return True, None
    regs = report["blocks"].get(meta.get("shared_regs") or "")
    return (True, regs) if regs and regs.get("status") == "ok" else (False, None)


def overhead(report: dict, p: OverheadParams | None = None) -> dict:
    """{"overhead_params", "overhead", "npu_overhead_percent"} for a synthesis report."""
    p = p or OverheadParams()
    result: dict[str, Any] = {"overhead_params": p.as_dict()}
    pe = report["blocks"].get(PE_BLOCK)
    if not pe or pe.get("status") != "ok" or not _fmax_hz(pe):
        result["npu_overhead_percent"] = {k: None for k in p.devices}
        result["overhead"] = {"error": f"{PE_BLOCK} not synthesised (or not timed)"}
        return result
    f_pe = p.clock_mhz * 1e6 if p.clock_mhz else _fmax_hz(pe)
    flops_per_cycle = (pe.get("meta") or {}).get("flops_per_cycle", 2)
    kv = KV_MODELS[p.kv_model]
    lib = (report.get("flow") or {}).get("library_info") or {"library": (report.get("flow") or {}).get("library")}

    def row(key: str, dev: Device, dec: str | None, enc: str | None) -> dict:
        n_pe = math.ceil(dev.dense_tflops * 1e12 / (flops_per_cycle * f_pe))
        array_ge = n_pe * pe["area_ge"]
        bytes_s = dev.bandwidth_gbps * 1e9
        draft_vps, full_vps = bytes_s * 8 / p.draft_bits_per_value, bytes_s * 8 / p.full_bits_per_value
        prefill_tok_s = p.prefill_utilisation * dev.dense_tflops * 1e12 / (2 * kv.params)
        kv_vps = prefill_tok_s * kv.kv_values_per_token
        r: dict[str, Any] = {
            "label": dev.label, "bandwidth_gbps": dev.bandwidth_gbps, "dense_tflops": dev.dense_tflops,
            "bytes_per_kflop": round(dev.bytes_per_kflop, 2), "clock_mhz": round(f_pe / 1e6, 1),
            "library": lib.get("library"), "pe_count": n_pe, "pe_array_area_ge": round(array_ge),
            "decoder": dec, "encoder": enc,
            "decoder_values_per_s_draft": draft_vps,
            "encoder_values_per_s": round(kv_vps), "prefill_tokens_per_s": round(prefill_tok_s, 1),
        }
        # The area budget: a decoder of A GE per draft value/cycle (full mode at BUDGET_FULL_RATE of it) takes
        # A * need / array_ge of the array, need = the draft values/cycle the binding stream asks at this clock.
        need = max(draft_vps, full_vps / BUDGET_FULL_RATE) / f_pe
        r["draft_values_per_cycle_needed"] = round(need, 1)
        r["decoder_budget_ge_per_draft_value_cycle"] = {f"{pct:g}": round(pct / 100 * array_ge / need)
                                                        for pct in BUDGET_PERCENTS}
        total = total_own = 0.0
        if dec:
            c = _block_cost(report["blocks"][dec], draft_vps, full_vps, f_pe, _shared_block(report, dec)[1])
            r.update({f"decoder_{k}": v for k, v in c.items()})
            r["decoder_percent"] = round(100 * c["area_ge"] / array_ge, 3)
            # per instance (a cluster core with its share of the cluster's registers)
            r["decoder_ge_per_draft_value_cycle"] = round(c["area_ge"] / max(1, c["instances"]) / c["values_per_cycle"])
            total += c["area_ge"]
            total_own += c["area_ge_own_clock"]
        if enc:
            c = _block_cost(report["blocks"][enc], kv_vps, 0.0, f_pe)
            r.update({f"encoder_{k}": v for k, v in c.items()})
            r["encoder_percent"] = round(100 * c["area_ge"] / array_ge, 4)
            total += c["area_ge"]
            total_own += c["area_ge_own_clock"]
        r["total_percent"] = round(100 * total / array_ge, 3) if (dec or enc) else None
        r["total_percent_own_clock"] = round(100 * total_own / array_ge, 3) if (dec or enc) else None
        r["complete"] = bool(dec and enc)
        r["meets_pe_clock"] = all(r.get(f"{k}_meets_pe_clock", True) for k in ("decoder", "encoder"))
        return r

    # the decoders that can be priced: a cluster core only with its cluster's registers
    decoders = {n: b for n, b in _ok_blocks(report, "decoder").items() if _shared_block(report, n)[0]}

    def choose(kind: str, wanted: str | None) -> tuple[str | None, str | None]:
        ok = decoders if kind == "decoder" else _ok_blocks(report, kind)
        if wanted:
            core = (report["blocks"].get(wanted) or {})
            return (wanted, None) if wanted in ok else (None, f"{kind} {wanted!r} not synthesised" + (
                " with its cluster's registers" if core.get("status") == "ok"
                and (core.get("meta") or {}).get("cluster_part") == "instance" else ""))
        # the headline decoder reads HEADLINE_DECODER_LAYOUT (a decoder of another layout is priced when named)
        ok = {n: b for n, b in ok.items() if block_scheme(n, b) == p.scheme
              and (kind != "decoder" or (b.get("meta") or {}).get("layout", "format 2.0") == HEADLINE_DECODER_LAYOUT)}
        if not ok:
            return None, f"no {p.scheme.upper()} {kind} block synthesised"
        first_key, first = next(iter(p.devices.items()))
        def cost(n):
            r = row(first_key, first, n if kind == "decoder" else None, n if kind == "encoder" else None)
            return (not r[f"{kind}_meets_pe_clock"], r[f"{kind}_area_ge"], n)
        return min(ok, key=cost), None

    dec, dec_err = choose("decoder", p.decoder)
    enc, enc_err = choose("encoder", p.encoder)
    ov: dict[str, Any] = {
        "clock_mhz": round(f_pe / 1e6, 1),
        "clock_source": "--clock-mhz" if p.clock_mhz else f"{PE_BLOCK} Fmax in this flow",
        "pe_area_ge": pe["area_ge"], "library": lib, "decoder": dec, "encoder": enc,
        "choice": ("--decoder/--encoder" + "".join(
                       f"; {n} is a {sch.upper()} block, priced on {p.scheme.upper()} streams it cannot read"
                       for n in (dec, enc) if n and (sch := block_scheme(n, report["blocks"][n])) not in (None, p.scheme))
                   if (p.decoder or p.encoder) else
                   f"the cheapest {p.scheme.upper()} block (the streams' scheme) meeting the PE clock at "
                   f"{next(iter(p.devices))}"),
        "scheme": p.scheme,
        "kv_model": kv.name, "kv_values_per_token": kv.kv_values_per_token,
        "by_device": {k: row(k, d, dec, enc) for k, d in p.devices.items()},
        "by_decoder": {n: {k: {"instances": (r := row(k, d, n, None))["decoder_instances"],
                               "percent": r["decoder_percent"], "meets_pe_clock": r["decoder_meets_pe_clock"],
                               "scheme": block_scheme(n, b)}
                           for k, d in p.devices.items()} for n, b in sorted(decoders.items())},
        "note": "At one shared clock the percentage does not depend on the clock: both instance counts scale "
                "with 1/f. 'own clock' prices a block that misses the PE clock at its own Fmax (more instances).",
    }
    if dec_err:
        ov["decoder_missing"] = dec_err
    if enc_err:
        ov["encoder_missing"] = enc_err
    result["overhead"] = ov
    result["npu_overhead_percent"] = {k: r["total_percent"] for k, r in ov["by_device"].items()}
    return result


def _fmt(v, spec="{:,.0f}"):
    return "—" if v is None else spec.format(v)


def render_markdown(report: dict) -> list[str]:
    ov = report.get("overhead", {})
    lines = ["", "## Overhead on real devices (decoders + KV encoders as % of the PE array, at the PE clock)", ""]
    if "error" in ov:
        return lines + [f"Not computed: {ov['error']}."]
    p = report["overhead_params"]
    lines += [
        f"PE `{PE_BLOCK}` = {ov['pe_area_ge']:,.0f} GE at {ov['clock_mhz']:.0f} MHz ({ov['clock_source']}); "
        f"library `{ov['library'].get('library')}`. Decoder `{ov['decoder']}`"
        f"{' — ' + ov['decoder_missing'] if ov.get('decoder_missing') else ''}, encoder `{ov['encoder']}`"
        f"{' — ' + ov['encoder_missing'] if ov.get('encoder_missing') else ''} ({ov['choice']}). "
        f"Streams ({p.get('scheme', 'c1').upper()}): draft {p['draft_bits_per_value']:g}, lossless "
        f"{p['full_bits_per_value']:g} bits/value. "
        f"KV encoder sized for prefill of {ov['kv_model']} ({ov['kv_values_per_token']:,} KV values/token) at "
        f"{p['prefill_utilisation']:.0%} of peak FLOPS.",
        "",
        "| device | GB/s | TFLOPS | B/kFLOP | clock MHz | PEs | decoders | meets clock | decoder % | "
        "encoders | encoder % | **total %** | total % own clock |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in ov["by_device"].values():
        meets = "—" if r.get("decoder_meets_pe_clock") is None else (
            "yes" if r["decoder_meets_pe_clock"] else f"**no** ({r['decoder_block_fmax_mhz']:.0f} MHz)")
        lines.append(
            f"| {r['label']} | {r['bandwidth_gbps']:g} | {r['dense_tflops']:g} | {r['bytes_per_kflop']:.2f} | "
            f"{r['clock_mhz']:.0f} | {r['pe_count']:,} | {_fmt(r.get('decoder_instances'))} | {meets} | "
            f"{_fmt(r.get('decoder_percent'), '{:.3f}')} | {_fmt(r.get('encoder_instances'))} | "
            f"{_fmt(r.get('encoder_percent'), '{:.4f}')} | **{_fmt(r.get('total_percent'), '{:.3f}')}** | "
            f"{_fmt(r.get('total_percent_own_clock'), '{:.3f}')} |")
    budgets = [r.get("decoder_budget_ge_per_draft_value_cycle") for r in ov["by_device"].values()]
    pcts = list(budgets[0]) if budgets and all(budgets) else []     # reports written before the budget: none
    lines += [] if not pcts else ["", f"Area budget: the GE per draft value/cycle at which the decoders alone take {' / '.join(pcts)} % of "
                  f"the PE array (full mode at {BUDGET_FULL_RATE:g} of the draft rate; draft values/cycle needed at "
                  "the clock above, the binding stream), against the chosen decoder's:", "",
              "| device | draft values/cycle needed | " + " | ".join(f"budget at {q} %" for q in pcts)
              + " | decoder GE per draft value/cycle |", "|---|---:|" + "---:|" * (len(pcts) + 1)]
    for r in ov["by_device"].values() if pcts else ():
        b = r["decoder_budget_ge_per_draft_value_cycle"]
        lines.append(f"| {r['label']} | {r['draft_values_per_cycle_needed']:,.1f} | "
                     + " | ".join(f"{b[q]:,}" for q in pcts)
                     + f" | {_fmt(r.get('decoder_ge_per_draft_value_cycle'), '{:,.0f}')} |")
    if ov.get("by_decoder"):
        keys = list(p["devices"])
        lines += ["", "Decoder-only overhead at the PE clock for every decoder (instances / % of the PE array; "
                      "* = misses the PE clock; † = the other scheme, priced on these streams' bits/value, which "
                      "it cannot read):", "",
                  "| decoder | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
        for n, rows in ov["by_decoder"].items():
            lines.append(f"| {n} | " + " | ".join(
                f"{rows[k]['instances']} / {rows[k]['percent']:.3f} %{'' if rows[k]['meets_pe_clock'] else ' *'}"
                f"{'' if rows[k].get('scheme') in (None, ov.get('scheme')) else ' †'}"
                for k in keys) + " |")
    lines += ["", "Sources: " + "; ".join(f"{k}: {d['source']}" for k, d in p["devices"].items()) + ".",
              "", ov["note"]]
    return lines
