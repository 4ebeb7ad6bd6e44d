#!/usr/bin/env python3
"""Golden codec benchmark (not a test): throughput and bits/value vs entropy on SmolLM2's linear weights.

    python bench/golden_bench.py [--scheme c1] [--keep-ratio 1.0] [--mantissa-bits 3] [--max-tensors N]
                                 [--impl native|numpy|both]
    python bench/golden_bench.py --marking        # pruned mark as a symbol vs a bitmap (FORMAT.md §3.3)
    python bench/golden_bench.py --accounting     # where every bit goes at keep 1.0 / 0.5 / 0.3 (FORMAT.md)

Throughput is MB/s of bf16 (2 bytes per value) over wall-clock time on this machine; the CPU time is
printed too, since other jobs on a shared machine inflate wall-clock time. ``--impl`` picks the codec
implementation (golden/native.py: compiled; golden/codec.py: numpy reference; both by default).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from cassandra_rtl.golden.codebook import build_codebook
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor, keep_mask
from cassandra_rtl.golden.config import BF16_MANTISSA_BITS, PRUNED, CodecConfig
from cassandra_rtl.golden.io import bundled_model_path, read_tensors
from cassandra_rtl.golden.stats import aggregate, entropy_bits, huffman_bits, tensor_stats, unary_rank_bits
from cassandra_rtl.progress import progress


def linear_weights(max_tensors: int | None):
    n = 0
    for name, bits in read_tensors(bundled_model_path()):
        if bits.ndim == 2 and not name.startswith("token_embd"):
            yield name, bits
            n += 1
            if max_tensors and n >= max_tensors:
                return


def book_bits(symbols: np.ndarray, required=None) -> float:
    book = build_codebook(np.bincount(symbols, minlength=PRUNED + 1), required=required)
    return float(book.code_lengths()[symbols].sum())


def marking(args) -> None:
    print("keep ratio | P symbol (spec exp bits/value) | bitmap + kept codes | verification codes")
    for keep in (1.0, 0.9, 0.75, 0.5, 0.3):
        cfg = CodecConfig(keep_ratio=keep, group_size=args.group_size)
        sym_bits = map_bits = ver_bits = n = 0
        for _, bits in progress(list(linear_weights(args.max_tensors)), desc=f"keep {keep}", unit="tensor"):
            flat = bits.reshape(-1)
            kept = keep_mask(flat, cfg)
            e = ((flat >> 7) & 0xFF).astype(np.int64)
            sym_bits += book_bits(np.where(kept, e, PRUNED), required=PRUNED)
            map_bits += book_bits(e[kept]) + (len(flat) if cfg.prunes else 0)
            ver_bits += book_bits(e[~kept]) if cfg.prunes else 0
            n += len(flat)
        print(f"{keep:10} | {sym_bits / n:30.3f} | {map_bits / n:19.3f} | {ver_bits / n:.3f}")


def throughput(args, impl: str = "auto", tensors=None) -> dict:
    cfg = CodecConfig(scheme=args.scheme, keep_ratio=args.keep_ratio, mantissa_bits=args.mantissa_bits,
                      group_size=args.group_size)
    tensors = list(linear_weights(args.max_tensors)) if tensors is None else tensors
    values = sum(b.size for _, b in tensors)
    t = {"encode": 0.0, "decode_full": 0.0, "decode_draft": 0.0}
    c = dict(t)
    stats = []
    load = "%.2f %.2f %.2f" % os.getloadavg()
    for name, bits in progress(tensors, desc=f"bench ({impl})", unit="tensor"):
        w0, c0 = time.perf_counter(), time.process_time()
        enc = encode_tensor(bits, cfg, impl=impl)
        w1, c1 = time.perf_counter(), time.process_time()
        full = decode_full(enc, impl=impl)
        w2, c2 = time.perf_counter(), time.process_time()
        decode_draft(enc, impl=impl)
        w3, c3 = time.perf_counter(), time.process_time()
        if not np.array_equal(full, bits):
            sys.exit(f"round trip failed on {name}")
        t["encode"] += w1 - w0; t["decode_full"] += w2 - w1; t["decode_draft"] += w3 - w2
        c["encode"] += c1 - c0; c["decode_full"] += c2 - c1; c["decode_draft"] += c3 - c2
        stats.append(tensor_stats(enc, bits))
    agg = aggregate(stats)
    mb = 2 * values / 1e6
    pooled = sum(s["_exponent_counts"] for s in stats)
    result = {
        "config": cfg.to_json(), "impl": impl, "load_average": load, "values": values, "tensors": len(tensors),
        "MB_per_s_wall": {k: mb / v for k, v in t.items()},
        "MB_per_s_cpu": {k: mb / v for k, v in c.items()},
        "bits_per_value": agg["bits_per_value"],
        "exponent": {"entropy_pooled": entropy_bits(pooled), "entropy_per_tensor": agg["exponent_entropy_per_tensor_bits"],
                     "huffman_pooled": huffman_bits(pooled), "plain_rank_unary_pooled": unary_rank_bits(pooled),
                     "code_bits_per_value": agg["exponent_code_bits"]},
    }
    return result


def accounting(args) -> dict:
    """C1 bit accounting on SmolLM2's linear weights: every bit of every plane and index, by what it carries
    (the sums equal the encoded sizes; checked). Bits per value, value-weighted over the tensors."""
    keeps = (1.0, 0.5, 0.3)
    tensors = list(linear_weights(args.max_tensors))
    values = sum(b.size for _, b in tensors)
    m = args.mantissa_bits
    rows: dict[float, dict] = {}
    for keep in keeps:
        cfg = CodecConfig(scheme="c1", keep_ratio=keep, mantissa_bits=m, group_size=args.group_size)
        acc: dict[str, float] = {}

        def add(key, bits_):
            acc[key] = acc.get(key, 0.0) + float(bits_)

        for name, bits in progress(tensors, desc=f"accounting keep {keep}", unit="tensor"):
            enc = encode_tensor(bits, cfg)
            flat = bits.reshape(-1)
            kept = keep_mask(flat, cfg)
            e = ((flat >> 7) & 0xFF).astype(np.int64)
            sym = np.where(kept, e, PRUNED)
            sb, vb = enc.spec_book, enc.verif_book
            sl = sb.code_lengths()[sym]
            sesc = sb.rank_table()[sym] == sb.K
            add("spec.codes: kept exponents", sl[kept & ~sesc].sum())
            add("spec.codes: pruned mark P", sl[~kept].sum())
            add("spec.codes: escapes (code + 8 raw bits)", sl[sesc].sum())
            add("spec.codes: chunk padding", 8 * len(enc.planes["spec.codes"]) - sl.sum())
            add("spec.codes: index", 8 * enc.index_bytes("spec.codes"))
            nk = int(kept.sum())
            add(f"spec.signman: sign + {m} mantissa bits", nk * (1 + m))
            add("spec.signman: chunk padding", 8 * len(enc.planes["spec.signman"]) - nk * (1 + m))
            pe = e[~kept]
            vl = vb.code_lengths()[pe]
            vesc = vb.rank_table()[pe] == vb.K
            add("verif.codes: pruned exponents", vl[~vesc].sum())
            add("verif.codes: escapes (code + 8 raw bits)", vl[vesc].sum())
            add("verif.codes: chunk padding", 8 * len(enc.planes["verif.codes"]) - vl.sum())
            add("verif.codes: index", 8 * enc.index_bytes("verif.codes"))
            rest = nk * (BF16_MANTISSA_BITS - m) + (flat.size - nk) * 8
            add(f"verif.rest: kept low {BF16_MANTISSA_BITS - m} mantissa bits",  nk * (BF16_MANTISSA_BITS - m))
            add("verif.rest: pruned sign + 7 mantissa bits", (flat.size - nk) * 8)
            add("verif.rest: chunk padding", 8 * len(enc.planes["verif.rest"]) - rest)
            add("ref. entropy of the spec.codes symbols (exponent or P), per tensor",
                entropy_bits(np.bincount(sym, minlength=PRUNED + 1)) * flat.size)
            add("ref. entropy of the pruned exponents, per tensor",
                entropy_bits(np.bincount(pe, minlength=256)) * pe.size if pe.size else 0.0)
            add("ref. exponent entropy (all values), per tensor", entropy_bits(np.bincount(e, minlength=256)) * flat.size)
            add("ref. exponent Huffman (all values), per tensor", huffman_bits(np.bincount(e, minlength=256)) * flat.size)
            add("total (encoded sizes)", 8 * (enc.spec_nbytes + enc.verif_nbytes))
            add("speculation (encoded sizes)", 8 * enc.spec_nbytes)
        per = {k: v / values for k, v in acc.items()}
        parts = sum(v for k, v in per.items() if ":" in k)
        if abs(parts - per["total (encoded sizes)"]) > 1e-9:
            sys.exit(f"accounting does not add up at keep {keep}: {parts} vs {per['total (encoded sizes)']}")
        rows[keep] = per
    return {"command": "python bench/golden_bench.py --accounting" + (f" --max-tensors {args.max_tensors}"
                                                                       if args.max_tensors else ""),
            "scheme": "c1", "group_size": args.group_size, "mantissa_bits": m, "values": values,
            "tensors": len(tensors), "bits_per_value": {str(k): v for k, v in rows.items()}}


def accounting_table(r: dict) -> str:
    keeps = list(r["bits_per_value"])
    names = list(r["bits_per_value"][keeps[0]])
    lines = ["| bits/value | " + " | ".join(f"keep {k}" for k in keeps) + " |",
             "|---|" + "---|" * len(keeps)]
    for n in names:
        row = [r["bits_per_value"][k].get(n, 0.0) for k in keeps]
        label = n if ":" in n else (f"*{n}*" if n.startswith("ref.") else f"**{n}**")
        lines.append(f"| {label} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scheme", default="c1", choices=["c1", "c2"])
    ap.add_argument("--keep-ratio", type=float, default=1.0)
    ap.add_argument("--mantissa-bits", type=int, default=3)
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--max-tensors", type=int, default=None, help="only the first N linear weights")
    ap.add_argument("--marking", action="store_true", help="compare ways of marking pruned values")
    ap.add_argument("--accounting", action="store_true", help="C1 bit accounting at keep 1.0 / 0.5 / 0.3")
    ap.add_argument("--impl", default="both", choices=["native", "numpy", "both"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.marking:
        marking(args)
        return
    if args.accounting:
        r = accounting(args)
        out = Path("build/bench")
        out.mkdir(parents=True, exist_ok=True)
        (out / "accounting.json").write_text(json.dumps(r, indent=2))
        print(json.dumps(r, indent=2) if args.json else accounting_table(r))
        return
    impls = ("native", "numpy") if args.impl == "both" else (args.impl,)
    tensors = list(linear_weights(args.max_tensors))
    results = [throughput(args, impl, tensors) for impl in impls]
    if args.json:
        print(json.dumps(results if len(results) > 1 else results[0], indent=2))
        return
    r = results[0]
    print(f"config {r['config']}  values {r['values']:,} in {r['tensors']} linear weights")
    for r in results:
        print(f"  [{r['impl']}, load average {r['load_average']}]")
        for k in r["MB_per_s_wall"]:
            print(f"  {k:13s} {r['MB_per_s_wall'][k]:8.1f} MB/s wall   {r['MB_per_s_cpu'][k]:8.1f} MB/s CPU")
    b = r["bits_per_value"]
    print(f"  bits/value: total {b['total']:.3f}  speculation {b['speculation']:.3f}  verification {b['verification']:.3f}")
    e = r["exponent"]
    print(f"  exponent: entropy {e['entropy_pooled']:.3f} (per tensor {e['entropy_per_tensor']:.3f}), Huffman "
          f"{e['huffman_pooled']:.3f}, plain rank-unary {e['plain_rank_unary_pooled']:.3f}, "
          f"our code planes {e['code_bits_per_value']:.3f} bits/value")


if __name__ == "__main__":
    main()
