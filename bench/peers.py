#!/usr/bin/env python3
"""Cassandra beside the lossless compressors a user would pick instead: bits/value, encode and
decode MB/s per thread, on the same tensors, in one run.

    python bench/peers.py [--layers 0,10,20,29 | --layers all] [--out build/bench] [--no-numpy] [--no-synthetic]
    make bench-peers

Tensor sets (both go through every method):
  smollm2    the linear weights of the chosen layers of the bundled SmolLM2-135M GGUF (dequantised, rounded to bf16)
  synthetic  held-out-style realistic weights made here (no checkpoint of another model installs offline):
             Student-t(5) FFN weights with log-normal row scales, attention weights with 1% outlier input
             channels, Gaussian FFN weights, an embedding-like matrix; fp32 rounded to bf16 (RNE)

Methods:
  Cassandra  C1 and C2, keep 1.0 / 0.5 / 0.3, m = 3, G = 128; the compiled codec and the numpy reference
             (same bytes, checked here on the totals and by tests/test_golden_native.py value for value)
  ZipNN      optional: pip install --no-deps zipnn==0.5.4   (plain `pip install zipnn` pulls a CUDA torch; its
             other deps, numpy and safetensors, are core deps here). threads=1.
  DFloat11   optional: pip install --no-deps dfloat11==0.5.0 dahuffman==0.4.2. Its compressor is pure Python and
             runs on CPU (dfloat11_utils, loaded by file: the package __init__ imports cupy); its decompressor
             is a CUDA kernel only, so no CPU decode figure exists. Its own size accounting is used
             (encoded exponents + sign/mantissa bytes + output positions + gaps + LUTs), one codec per tensor.
A peer that is not installed is skipped with the line that installs it.

MB/s = MB of bf16 (2 bytes per value) per second of *CPU time of the one thread doing the work*
(time.process_time; every method runs single-threaded), so a loaded shared machine inflates wall-clock but
not these figures much; wall-clock MB/s and the load average (os.getloadavg) are recorded beside them.
Outputs: build/bench/peers.json, build/bench/peers.md (the tables) and build/bench/peers.png.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from cassandra_rtl.golden import native
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.golden.io import bundled_model_path, float_to_bf16_bits

KEEPS = (1.0, 0.5, 0.3)
SCHEMES = ("c1", "c2")
M, G = 3, 128


def load() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


# ------------------------------------------------------------------------------------------------ tensors

def smollm2_tensors(layers: str) -> list[tuple[str, np.ndarray]]:
    import gguf

    reader = gguf.GGUFReader(str(bundled_model_path()))
    want = None if layers == "all" else {int(x) for x in layers.split(",")}
    out = []
    for t in reader.tensors:
        parts = t.name.split(".")
        if parts[0] != "blk" or not t.name.endswith(".weight") or len(t.shape) != 2:
            continue
        if want is not None and int(parts[1]) not in want:
            continue
        out.append((t.name, float_to_bf16_bits(gguf.dequantize(t.data, t.tensor_type))))
    return out


def synthetic_tensors(seed: int = 2026) -> list[tuple[str, np.ndarray]]:
    """Realistic trained-weight shapes and distributions (fp32 -> bf16 RNE)."""
    rng = np.random.default_rng(seed)
    out = []
    t = rng.standard_t(5, size=(1536, 576)) / np.sqrt(5 / 3)             # unit variance
    rows = np.exp(rng.normal(0.0, 0.25, size=(1536, 1)))
    out.append(("ffn_down_t5_rowscale", t * rows * 0.02))
    a = rng.normal(0.0, 0.03, size=(576, 576))
    cols = rng.random(576) < 0.01
    a[:, cols] *= 8.0
    out.append(("attn_o_outlier_channels", a))
    out.append(("ffn_up_gaussian", rng.normal(0.0, 0.02, size=(576, 1536))))
    emb = rng.normal(0.0, 0.05, size=(2048, 576)) * np.exp(rng.normal(0.0, 0.2, size=(2048, 1)))
    out.append(("embedding_like", emb))
    return [(n, float_to_bf16_bits(x.astype(np.float32))) for n, x in out]


# ------------------------------------------------------------------------------------------------ timing

def timed(fn, *a, **kw):
    w0, c0 = time.perf_counter(), time.process_time()
    r = fn(*a, **kw)
    return r, time.process_time() - c0, time.perf_counter() - w0


def rates(mb: float, cpu: float, wall: float) -> dict:
    return {"cpu": mb / cpu if cpu > 0 else None, "wall": mb / wall if wall > 0 else None}


# ------------------------------------------------------------------------------------------------ methods

def run_cassandra(tensors, scheme: str, keep: float, impl: str) -> dict:
    cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=M, keep_ratio=keep)
    tot = {"encode": [0.0, 0.0], "decode_full": [0.0, 0.0], "decode_draft": [0.0, 0.0]}
    nbytes = spec = values = 0
    for name, bits in tensors:
        enc, c, w = timed(encode_tensor, bits, cfg, impl=impl)
        tot["encode"][0] += c; tot["encode"][1] += w
        full, c, w = timed(decode_full, enc, impl=impl)
        tot["decode_full"][0] += c; tot["decode_full"][1] += w
        _, c, w = timed(decode_draft, enc, impl=impl)
        tot["decode_draft"][0] += c; tot["decode_draft"][1] += w
        if not np.array_equal(full, bits):
            sys.exit(f"Cassandra {scheme} keep {keep} ({impl}): round trip failed on {name}")
        nbytes += enc.spec_nbytes + enc.verif_nbytes
        spec += enc.spec_nbytes
        values += bits.size
    mb = 2 * values / 1e6
    return {"method": "cassandra", "scheme": scheme, "keep": keep, "impl": impl, "values": values,
            "bits_per_value": 8 * nbytes / values, "spec_bits_per_value": 8 * spec / values,
            "MB_per_s": {k: rates(mb, *v) for k, v in tot.items()}}


def run_zipnn(tensors) -> dict | None:
    try:
        from zipnn import ZipNN
    except ImportError:
        print("[peers] ZipNN not installed, skipped: pip install --no-deps zipnn==0.5.4", file=sys.stderr)
        return None
    import zipnn

    comp = [0.0, 0.0]
    dec = [0.0, 0.0]
    nbytes = values = 0
    for name, bits in tensors:
        raw = bytearray(bits.tobytes())       # ZipNN reorders its input buffer in place: hand it a copy
        z = ZipNN(input_format="byte", bytearray_dtype="bfloat16", threads=1)
        packed, c, w = timed(z.compress, raw)
        comp[0] += c; comp[1] += w
        z = ZipNN(input_format="byte", bytearray_dtype="bfloat16", threads=1)
        out, c, w = timed(z.decompress, packed)
        dec[0] += c; dec[1] += w
        if not np.array_equal(np.frombuffer(bytes(out), dtype=np.uint16), bits.reshape(-1)):
            sys.exit(f"ZipNN: round trip failed on {name}")
        nbytes += len(packed)
        values += bits.size
    mb = 2 * values / 1e6
    return {"method": "zipnn", "version": getattr(zipnn, "__version__", "0.5.4"), "values": values,
            "bits_per_value": 8 * nbytes / values,
            "MB_per_s": {"encode": rates(mb, *comp), "decode_full": rates(mb, *dec)}}


def _dfloat11_utils():
    spec = importlib.util.find_spec("dfloat11")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "dfloat11_utils.py"
    if not path.is_file() or importlib.util.find_spec("dahuffman") is None:
        return None
    s = importlib.util.spec_from_file_location("_dfloat11_utils", path)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    return mod


def run_dfloat11(tensors) -> dict | None:
    df = _dfloat11_utils()
    if df is None:
        print("[peers] DFloat11 not installed, skipped: pip install --no-deps dfloat11==0.5.0 dahuffman==0.4.2",
              file=sys.stderr)
        return None
    import torch

    cpu = wall = 0.0
    nbytes = values = exp_bytes = 0
    for name, bits in tensors:
        w = torch.from_numpy(np.ascontiguousarray(bits.reshape(-1)).view(np.int16)).view(torch.bfloat16)
        w0, c0 = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            _, counter = df.get_codec(w)
            codec, _, table = df.get_32bit_codec(counter)
            luts = df.get_luts(table)
            encoded, other, positions, gaps, _ = df.encode_weights([w], codec, 8, 256)   # compress_model's defaults
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        nbytes += encoded.numel() + other.numel() + 4 * positions.numel() + gaps.numel() + luts.numel()
        exp_bytes += encoded.numel()
        values += bits.size
    mb = 2 * values / 1e6
    return {"method": "dfloat11", "version": "0.5.0", "values": values, "bits_per_value": 8 * nbytes / values,
            "exponent_bits_per_value": 8 * exp_bytes / values,
            "MB_per_s": {"encode": rates(mb, cpu, wall), "decode_full": None},
            "note": "decoder is a CUDA kernel (cupy) only: no CPU decode; compressor is a pure-Python loop"}


# ------------------------------------------------------------------------------------------------ report

def _f(x, nd=0):
    return "—" if x is None else f"{x:,.{nd}f}"


def markdown(results: dict) -> str:
    lines = []
    for set_name, r in results["sets"].items():
        zip_dec = next((row["MB_per_s"]["decode_full"]["cpu"] for row in r["rows"] if row["method"] == "zipnn"), None)
        lines += [f"### {set_name}: {r['values']:,} values in {r['tensors']} tensors (load average {r['load_start']} "
                  f"-> {r['load_end']})", "",
                  "| method | bits/value | spec bits/value | encode MB/s | decode full MB/s | decode draft MB/s | "
                  "full decode / ZipNN |", "|---|---|---|---|---|---|---|"]
        for row in r["rows"]:
            mbs = row["MB_per_s"]
            if row["method"] == "cassandra":
                label = f"Cassandra {row['scheme'].upper()} keep {row['keep']} ({row['impl']})"
                draft = _f(mbs["decode_draft"]["cpu"])
                spec = f"{row['spec_bits_per_value']:.3f}"
            else:
                label = {"zipnn": f"ZipNN {row.get('version', '')}", "dfloat11": "DFloat11 0.5.0 (compressor only)"}[
                    row["method"]]
                draft, spec = "—", "—"
            full = mbs["decode_full"]["cpu"] if mbs.get("decode_full") else None
            ratio = f"{full / zip_dec:.2f}x" if (full and zip_dec) else "—"
            lines.append(f"| {label} | {row['bits_per_value']:.3f} | {spec} | {_f(mbs['encode']['cpu'])} | "
                         f"{_f(full)} | {draft} | {ratio} |")
        lines.append("")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(results["sets"].items())
    fig, axes = plt.subplots(1, len(sets), figsize=(6.5 * len(sets), 4.8), squeeze=False)
    for ax, (set_name, r) in zip(axes[0], sets):
        for row in r["rows"]:
            dec = row["MB_per_s"].get("decode_full")
            y = dec["cpu"] if dec else None
            if row["method"] == "cassandra":
                marker = "o" if row["scheme"] == "c1" else "s"
                color = {"native": "tab:blue", "numpy": "tab:gray"}[row["impl"]]
                label = f"C{row['scheme'][1]} {row['impl']}"
                ax.scatter(row["bits_per_value"], y, marker=marker, color=color, label=label)
                ax.annotate(f"{row['keep']}", (row["bits_per_value"], y), textcoords="offset points", xytext=(4, 3),
                            fontsize=7)
            elif row["method"] == "zipnn":
                ax.scatter(row["bits_per_value"], y, marker="*", s=140, color="tab:red", label="ZipNN")
            elif row["method"] == "dfloat11":
                ax.axvline(row["bits_per_value"], color="tab:green", ls="--", label="DFloat11 size (no CPU decoder)")
        ax.axhline(300, color="k", ls=":", lw=1, label="decode target 300 MB/s")
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles))
        ax.legend(uniq.values(), uniq.keys(), fontsize=8)
        ax.set_yscale("log")
        ax.set_xlabel("bits/value (lossless total; labels = keep ratio)")
        ax.set_ylabel("full decode MB/s per thread (CPU time)")
        ax.set_title(f"{set_name} (load {r['load_start']})", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="0,10,20,29", help="SmolLM2 layers (comma list) or 'all'")
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--no-numpy", action="store_true", help="skip the numpy reference timings (slow)")
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--no-dfloat11", action="store_true", help="skip DFloat11 (its compressor runs ~2 MB/s)")
    args = ap.parse_args()
    if native.load() is None:
        print(f"[peers] compiled codec unavailable: {native.unavailable_reason()}", file=sys.stderr)
    sets = {"smollm2": lambda: smollm2_tensors(args.layers)}
    if not args.no_synthetic:
        sets["synthetic"] = synthetic_tensors
    impls = ("native",) if args.no_numpy else ("native", "numpy")
    results = {"command": "python bench/peers.py " + " ".join(sys.argv[1:]), "G": G, "m": M,
               "time_basis": "CPU seconds of the single working thread (process_time); wall in 'wall'",
               "cpu": os.cpu_count(), "sets": {}}
    for set_name, make in sets.items():
        tensors = make()
        values = sum(b.size for _, b in tensors)
        r = {"tensors": len(tensors), "values": values, "load_start": load(), "rows": []}
        print(f"[peers] {set_name}: {values:,} values in {len(tensors)} tensors, load {r['load_start']}", file=sys.stderr)
        for impl in impls:
            for scheme in SCHEMES:
                for keep in KEEPS:
                    row = run_cassandra(tensors, scheme, keep, impl)
                    r["rows"].append(row)
                    print(f"  cassandra {scheme} keep {keep} {impl}: {row['bits_per_value']:.3f} b/v, enc "
                          f"{_f(row['MB_per_s']['encode']['cpu'])} full {_f(row['MB_per_s']['decode_full']['cpu'])} "
                          f"draft {_f(row['MB_per_s']['decode_draft']['cpu'])} MB/s", file=sys.stderr)
        if len(impls) == 2:                            # the two implementations must agree on every size
            for a, b in zip(r["rows"][:6], r["rows"][6:]):
                if a["bits_per_value"] != b["bits_per_value"]:
                    sys.exit(f"native and numpy sizes differ for {a['scheme']} keep {a['keep']}")
        for fn in (run_zipnn,) + (() if args.no_dfloat11 else (run_dfloat11,)):
            row = fn(tensors)
            if row:
                r["rows"].append(row)
                print(f"  {row['method']}: {row['bits_per_value']:.3f} b/v, enc {_f(row['MB_per_s']['encode']['cpu'])} "
                      f"MB/s", file=sys.stderr)
        r["load_end"] = load()
        results["sets"][set_name] = r
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers.json").write_text(json.dumps(results, indent=2))
    md = markdown(results)
    (out / "peers.md").write_text(f"Command: `{results['command']}`; MB/s of bf16 per thread (CPU time).\n\n" + md)
    plot(results, out / "peers.png")
    print(md)
    print(f"[peers] wrote {out / 'peers.json'}, {out / 'peers.md'}, {out / 'peers.png'}", file=sys.stderr)


if __name__ == "__main__":
    main()
