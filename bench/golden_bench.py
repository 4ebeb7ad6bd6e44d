#!/usr/bin/env python3
"""Golden codec benchmark (not a test): throughput and bits/value vs entropy on SmolLM2's linear weights.

    python bench/golden_bench.py [--scheme c1] [--keep-ratio 1.0] [--mantissa-bits 3] [--max-tensors N]
                                 [--impl native|numpy|both] [--chunk-superblocks A] [--pairs] [--tensors ...]
    python bench/golden_bench.py --marking        # pruned mark as a symbol vs a bitmap (FORMAT.md §3.3)
    python bench/golden_bench.py --accounting     # where every bit goes at keep 1.0 / 0.5 / 0.3 (FORMAT.md)
    python bench/golden_bench.py --accounting --chunk-superblocks 8 --pairs    # the same for format 2.0 features
    python bench/golden_bench.py --totals [--tensors layers:0,10,20,29 | all | synthetic]
                                  # total bits/value, C1 and C2 x keep 1.0/0.5/0.3, v1 policy vs 2.0 policy
    python bench/golden_bench.py --layouts [--scheme c2] [--tensors ...]   # format 2.0 vs format 3.0

``--tensors`` (accounting and totals): ``all`` (the 210 linear weights, default), ``layers:0,10,20,29`` (the
layers bench/peers.py uses) or ``synthetic`` (bench/peers.py's held-out-style tensors). Accounting and totals
use the default dispatch (the compiled codec when it builds and reads the tensor's features, else numpy).

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

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codebook import build_codebook
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor, keep_mask
from cassandra_rtl.golden.config import BF16_MANTISSA_BITS, ESCAPE_PAYLOAD_BITS, PRUNED, CodecConfig
from cassandra_rtl.golden.io import bundled_model_path, read_tensors
from cassandra_rtl.golden.stats import aggregate, entropy_bits, huffman_bits, tensor_stats, unary_rank_bits
from cassandra_rtl.progress import progress


def linear_weights(max_tensors: int | None, which: str = "all"):
    if which == "synthetic":
        sys.path.insert(0, str(Path(__file__).parent))
        from peers import synthetic_tensors
        yield from synthetic_tensors()[: max_tensors or None]
        return
    layers = None if which == "all" else {int(x) for x in which.split(":", 1)[1].split(",")}
    n = 0
    for name, bits in read_tensors(bundled_model_path()):
        if bits.ndim == 2 and not name.startswith("token_embd"):
            if layers is not None and not (name.startswith("blk.") and int(name.split(".")[1]) in layers):
                continue
            yield name, bits
            n += 1
            if max_tensors and n >= max_tensors:
                return


def tensor_set(value: str) -> str:
    if value in ("all", "synthetic"):
        return value
    if value.startswith("layers:"):
        try:
            [int(x) for x in value.split(":", 1)[1].split(",")]
            return value
        except ValueError:
            pass
    raise argparse.ArgumentTypeError(f"--tensors must be all, synthetic or layers:N,N,...; got {value!r}")


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
                      group_size=args.group_size, chunk_superblocks=args.chunk_superblocks, pair_codes=args.pairs)
    tensors = list(linear_weights(args.max_tensors, args.tensors)) if tensors is None else tensors
    values = sum(b.size for _, b in tensors)
    t = {"encode": 0.0, "decode_full": 0.0, "decode_draft": 0.0}
    c = dict(t)
    stats = []
    load = "%.2f %.2f %.2f" % os.getloadavg()
    from cassandra_rtl.golden.escfield import encode3
    for name, bits in progress(tensors, desc=f"bench ({impl})", unit="tensor"):
        w0, c0 = time.perf_counter(), time.process_time()
        enc = encode3(bits, cfg, impl=impl) if args.format3 else encode_tensor(bits, cfg, impl=impl)
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
        "config": cfg.to_json(), "impl": impl, "format": "3.0" if args.format3 else "2.0 layout",
        "load_average": load, "values": values, "tensors": len(tensors),
        "MB_per_s_wall": {k: mb / v for k, v in t.items()},
        "MB_per_s_cpu": {k: mb / v for k, v in c.items()},
        "bits_per_value": agg["bits_per_value"],
        "exponent": {"entropy_pooled": entropy_bits(pooled), "entropy_per_tensor": agg["exponent_entropy_per_tensor_bits"],
                     "huffman_pooled": huffman_bits(pooled), "plain_rank_unary_pooled": unary_rank_bits(pooled),
                     "code_bits_per_value": agg["exponent_code_bits"],
                     "suffix_bits_per_value": agg.get("exponent_suffix_bits", 0.0)},
    }
    return result


def accounting(args) -> dict:
    """C1 bit accounting: every bit of every plane and index, by what it carries (the sums equal the encoded
    sizes; checked). Bits per value, value-weighted over the tensors. Chunks of ``--chunk-superblocks``
    superblocks, pair groups with ``--pairs`` (their suffix bits are rows of the companion planes)."""
    keeps = (1.0, 0.5, 0.3)
    tensors = list(linear_weights(args.max_tensors, args.tensors))
    values = sum(b.size for _, b in tensors)
    m = args.mantissa_bits
    rows: dict[float, dict] = {}
    for keep in keeps:
        cfg = CodecConfig(scheme=args.scheme, keep_ratio=keep, mantissa_bits=m, group_size=args.group_size,
                          chunk_superblocks=args.chunk_superblocks, pair_codes=args.pairs)
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
            g = sb.group_table()[sym]
            sesc = g == sb.Q
            sl = np.where(sesc, sb.Q + 1 + ESCAPE_PAYLOAD_BITS, g + 1)        # code-plane bits
            ssuf = sb.pair_bits()[g]                                          # suffix bits (in spec.signman)
            add("spec.codes: kept exponents", sl[kept & ~sesc].sum())
            add("spec.codes: pruned mark P", sl[~kept].sum())
            add("spec.codes: escapes (code + 8 raw bits)", sl[sesc].sum())
            add("spec.codes: chunk padding", 8 * len(enc.planes["spec.codes"]) - sl.sum())
            add("spec.codes: index", 8 * enc.index_bytes("spec.codes"))
            nk = int(kept.sum())
            add("spec.signman: suffix bits of pair groups", ssuf[kept].sum())
            add(f"spec.signman: sign + {m} mantissa bits", nk * (1 + m))
            add("spec.signman: chunk padding", 8 * len(enc.planes["spec.signman"]) - nk * (1 + m) - ssuf[kept].sum())
            add("spec.signman: index", 8 * enc.index_bytes("spec.signman"))
            pe = e[~kept]
            gv = vb.group_table()[pe]
            vesc = gv == vb.Q
            vl = np.where(vesc, vb.Q + 1 + ESCAPE_PAYLOAD_BITS, gv + 1)
            vsuf = vb.pair_bits()[gv]
            add("verif.codes: pruned exponents", vl[~vesc].sum())
            add("verif.codes: escapes (code + 8 raw bits)", vl[vesc].sum())
            add("verif.codes: chunk padding", 8 * len(enc.planes["verif.codes"]) - vl.sum())
            add("verif.codes: index", 8 * enc.index_bytes("verif.codes"))
            rest = nk * (BF16_MANTISSA_BITS - m) + (flat.size - nk) * 8 + vsuf.sum()
            add("verif.rest: suffix bits of pair groups", vsuf.sum())
            add(f"verif.rest: kept low {BF16_MANTISSA_BITS - m} mantissa bits",  nk * (BF16_MANTISSA_BITS - m))
            add("verif.rest: pruned sign + 7 mantissa bits", (flat.size - nk) * 8)
            add("verif.rest: chunk padding", 8 * len(enc.planes["verif.rest"]) - rest)
            add("verif.rest: index", 8 * enc.index_bytes("verif.rest"))
            add("ref. exponent code, all values (code-plane bits without P, escapes, suffix bits)",
                sl.sum() + ssuf.sum() + vl.sum() + vsuf.sum() - sl[~kept].sum())
            add("ref. entropy of the spec.codes symbols (exponent or P), per tensor",
                entropy_bits(np.bincount(sym, minlength=PRUNED + 1)) * flat.size)
            add("ref. Huffman of the spec.codes symbols (exponent or P), per tensor",
                huffman_bits(np.bincount(sym, minlength=PRUNED + 1)) * flat.size)
            add("ref. entropy of the pruned exponents, per tensor",
                entropy_bits(np.bincount(pe, minlength=256)) * pe.size if pe.size else 0.0)
            add("ref. Huffman of the pruned exponents, per tensor",
                huffman_bits(np.bincount(pe, minlength=256)) * pe.size if pe.size else 0.0)
            add("ref. exponent entropy (all values), per tensor", entropy_bits(np.bincount(e, minlength=256)) * flat.size)
            add("ref. exponent Huffman (all values), per tensor", huffman_bits(np.bincount(e, minlength=256)) * flat.size)
            add("total (encoded sizes)", 8 * (enc.spec_nbytes + enc.verif_nbytes))
            add("speculation (encoded sizes)", 8 * enc.spec_nbytes)
        per = {k: v / values for k, v in acc.items()}
        parts = sum(v for k, v in per.items() if ":" in k and not k.startswith("ref."))
        if abs(parts - per["total (encoded sizes)"]) > 1e-9:
            sys.exit(f"accounting does not add up at keep {keep}: {parts} vs {per['total (encoded sizes)']}")
        rows[keep] = per
    cmd = "python bench/golden_bench.py --accounting"
    cmd += f" --chunk-superblocks {args.chunk_superblocks} --{'' if args.pairs else 'no-'}pairs"
    cmd += f" --tensors {args.tensors}" if args.tensors != "all" else ""
    cmd += f" --max-tensors {args.max_tensors}" if args.max_tensors else ""
    return {"command": cmd, "scheme": "c1", "group_size": args.group_size, "mantissa_bits": m,
            "chunk_superblocks": args.chunk_superblocks, "pair_codes": args.pairs, "values": values,
            "tensors": len(tensors), "bits_per_value": {str(k): v for k, v in rows.items()}}


def totals(args) -> dict:
    """Total bits/value (speculation + verification incl. indexes and padding), C1 and C2 at keep 1.0 / 0.5 /
    0.3: format 1.0 (A = 1, no pairs) vs the 2.0 golden policy (A = 1024 / G, pairs). Every round trip is
    checked."""
    tensors = list(linear_weights(args.max_tensors, args.tensors))
    values = sum(b.size for _, b in tensors)
    out = {}
    policies = {"v1": dict(chunk_superblocks=1, pair_codes=False),
                "v2": dict(chunk_superblocks=1024 // args.group_size, pair_codes=True)}
    for scheme in ("c1", "c2"):
        for keep in (1.0, 0.5, 0.3):
            for pol, kw in policies.items():
                cfg = CodecConfig(scheme=scheme, keep_ratio=keep, mantissa_bits=args.mantissa_bits,
                                  group_size=args.group_size, **kw)
                nbytes = spec = 0
                for name, bits in progress(tensors, desc=f"{scheme} keep {keep} {pol}", unit="tensor"):
                    enc = encode_tensor(bits, cfg)
                    if not np.array_equal(decode_full(enc), bits):
                        sys.exit(f"round trip failed on {name} ({scheme} keep {keep} {pol})")
                    nbytes += enc.spec_nbytes + enc.verif_nbytes
                    spec += enc.spec_nbytes
                out[f"{scheme} keep {keep} {pol}"] = {"total": 8 * nbytes / values, "speculation": 8 * spec / values}
    cmd = "python bench/golden_bench.py --totals" + (f" --tensors {args.tensors}" if args.tensors != "all" else "")
    return {"command": cmd, "group_size": args.group_size, "mantissa_bits": args.mantissa_bits,
            "values": values, "tensors": len(tensors), "bits_per_value": out}


def layouts(args) -> dict:
    """Total and speculation bits/value (``--scheme``, default C1) at keep 1.0 / 0.5 / 0.3, format 2.0 (the
    golden policy) against format 3.0 (golden/escfield.py; decoder v3 reads C1's): an escape's
    8 raw bits moved from its code to its companion field (C2: and spec.mx block by block). Checked per tensor: the format 2.0 round trip, every chunk of each (code, field)
    plane pair keeps its bytes, and a field plane without an index is sized from its code plane
    (``escfield.field_offsets`` == the encoder's offsets); C2: spec.mx keeps every chunk's bytes and the layout's
    golden decode gives format 2.0's draft and the original bits."""
    from cassandra_rtl.golden import escfield
    from cassandra_rtl.golden.codec import plane_chunks, plane_offsets

    tensors = list(linear_weights(args.max_tensors, args.tensors))
    values = sum(b.size for _, b in tensors)
    out = {}
    for keep in (1.0, 0.5, 0.3):
        cfg = CodecConfig(scheme=args.scheme, keep_ratio=keep, mantissa_bits=args.mantissa_bits, group_size=args.group_size,
                          chunk_superblocks=args.chunk_superblocks, pair_codes=args.pairs)
        acc = {k: 0 for k in ("v2", "v2 spec", "esc", "esc spec", "sized field planes", "field planes")}
        for name, bits in progress(tensors, desc=f"{args.scheme} keep {keep}", unit="tensor"):
            std, v3 = escfield.encode(bits, cfg)
            if not np.array_equal(decode_full(std), bits):
                sys.exit(f"round trip failed on {name} (keep {keep})")
            for field, code in escfield.FIELD_OF.items():
                if code not in std.planes:
                    continue
                a = [len(x) + len(y) for x, y in zip(plane_chunks(std, code), plane_chunks(std, field))]
                b = [len(x) + len(y) for x, y in zip(plane_chunks(v3, code), plane_chunks(v3, field))]
                if a != b:
                    sys.exit(f"{name} (keep {keep}): the {code} / {field} chunks do not keep their bytes")
            if args.scheme == "c2":                       # spec.mx block by block: format 2.0's chunk sizes, its values
                if [len(x) for x in plane_chunks(v3, "spec.mx")] != [len(x) for x in plane_chunks(std, "spec.mx")]:
                    sys.exit(f"{name} (keep {keep}): the spec.mx chunks do not keep their bytes")
                if not (np.array_equal(escfield.decode(v3, False), decode_draft(std))
                        and np.array_equal(escfield.decode(v3, True), bits)):
                    sys.exit(f"{name} (keep {keep}): the block-wise spec.mx does not decode to format 2.0's values")
            acc["v2"] += std.spec_nbytes + std.verif_nbytes
            acc["v2 spec"] += std.spec_nbytes
            acc["esc"] += v3.spec_nbytes + v3.verif_nbytes
            acc["esc spec"] += v3.spec_nbytes
            acc["field planes"] += sum(f in std.planes for f in escfield.FIELD_OF)
            for f in escfield.FIELD_OF:
                if f in std.planes and not std.has_index(f):
                    if not np.array_equal(escfield.field_offsets(v3, f), plane_offsets(v3, f)):
                        sys.exit(f"{name} (keep {keep}): {f}'s chunk sizes do not follow from its code plane")
                    acc["sized field planes"] += 1
        out[f"keep {keep}"] = {"format 2.0 total": 8 * acc["v2"] / values, "format 2.0 speculation": 8 * acc["v2 spec"] / values,
                               "format 3.0 total": 8 * acc["esc"] / values,
                               "format 3.0 speculation": 8 * acc["esc spec"] / values,
                               "field planes sized from their code planes": acc["sized field planes"],
                               "field planes": acc["field planes"]}
    cmd = "python bench/golden_bench.py --layouts" + (f" --scheme {args.scheme}" if args.scheme != "c1" else "") + (
        f" --tensors {args.tensors}" if args.tensors != "all" else "")
    return {"command": cmd, "scheme": args.scheme, "group_size": args.group_size, "mantissa_bits": args.mantissa_bits,
            "chunk_superblocks": args.chunk_superblocks, "pair_codes": args.pairs, "values": values,
            "tensors": len(tensors), "bits_per_value": out}


def layouts_table(r: dict) -> str:
    lines = ["| keep | format 2.0 total | format 3.0 total | difference | format 2.0 spec | format 3.0 spec | "
             "field planes sized from their code planes |", "|---|---:|---:|---:|---:|---:|---:|"]
    for k, v in r["bits_per_value"].items():
        d = v["format 3.0 total"] - v["format 2.0 total"]
        lines.append(f"| {k.split()[1]} | {v['format 2.0 total']:.3f} | {v['format 3.0 total']:.3f} | {d:+.4f} | "
                     f"{v['format 2.0 speculation']:.3f} | {v['format 3.0 speculation']:.3f} | "
                     f"{v['field planes sized from their code planes']} of {v['field planes']} |")
    return "\n".join(lines)


def totals_table(r: dict) -> str:
    b = r["bits_per_value"]
    lines = ["| scheme | keep | v1.0 total | 2.0 total | 2.0 − v1.0 | v1.0 spec | 2.0 spec |", "|---|---|---|---|---|---|---|"]
    for scheme in ("c1", "c2"):
        for keep in (1.0, 0.5, 0.3):
            v1, v2 = b[f"{scheme} keep {keep} v1"], b[f"{scheme} keep {keep} v2"]
            lines.append(f"| {scheme.upper()} | {keep} | {v1['total']:.3f} | **{v2['total']:.3f}** | "
                         f"{v2['total'] - v1['total']:+.3f} | {v1['speculation']:.3f} | {v2['speculation']:.3f} |")
    return "\n".join(lines)


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
    ap.add_argument("--chunk-superblocks", type=int, default=None,
                    help="A: superblocks per chunk (format 2.0; default: the format's policy, 1024/G; 1 = format 1.0)")
    ap.add_argument("--pairs", action=argparse.BooleanOptionalAction, default=None,
                    help="pair groups in the golden books (format 2.0; default: the format's policy, on)")
    ap.add_argument("--totals", action="store_true", help="total bits/value, v1.0 vs the 2.0 policy")
    ap.add_argument("--layouts", action="store_true",
                    help="bits/value, format 2.0 vs format 3.0 (decoder v3's)")
    ap.add_argument("--tensors", type=tensor_set, default="all", help="all | layers:0,10,20,29 | synthetic")
    ap.add_argument("--impl", default="both", choices=["native", "numpy", "both"])
    ap.add_argument("--format3", action="store_true",
                    help="time format 3.0 (escfield.encode3 and its decoders) instead of the 2.0 layout")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.marking:
        marking(args)
        return
    try:      # resolve the format 2.0 options to what the golden policy gives, so every figure names them
        base = CodecConfig(group_size=args.group_size, chunk_superblocks=args.chunk_superblocks, pair_codes=args.pairs)
    except ConfigError as exc:
        sys.exit(f"golden_bench: {exc}")
    args.chunk_superblocks, args.pairs = base.chunk_superblocks, base.pair_codes
    out = Path("build/bench")
    if args.accounting:
        r = accounting(args)
        out.mkdir(parents=True, exist_ok=True)
        tag = "" if (args.chunk_superblocks, args.pairs) == (1, False) else f"-A{args.chunk_superblocks}" + (
            "-pairs" if args.pairs else "")
        tag += "" if args.tensors == "all" else "-" + args.tensors.replace(":", "").replace(",", "_")
        (out / f"accounting{tag}.json").write_text(json.dumps(r, indent=2))
        print(json.dumps(r, indent=2) if args.json else accounting_table(r))
        return
    for name, run, table in (("layouts", layouts, layouts_table), ("totals", totals, totals_table)):
        if getattr(args, name):
            r = run(args)
            out.mkdir(parents=True, exist_ok=True)
            tag = "" if args.tensors == "all" else "-" + args.tensors.replace(":", "").replace(",", "_")
            (out / f"{name}{tag}.json").write_text(json.dumps(r, indent=2))
            print(json.dumps(r, indent=2) if args.json else table(r))
            return
    impls = ("native", "numpy") if args.impl == "both" else (args.impl,)
    tensors = list(linear_weights(args.max_tensors, args.tensors))
    results = [throughput(args, impl, tensors) for impl in impls]
    if args.json:
        print(json.dumps(results if len(results) > 1 else results[0], indent=2))
        return
    r = results[0]
    print(f"config {r['config']}  values {r['values']:,} in {r['tensors']} linear weights, {r['format']}")
    for r in results:
        print(f"  [{r['impl']}, load average {r['load_average']}]")
        for k in r["MB_per_s_wall"]:
            print(f"  {k:13s} {r['MB_per_s_wall'][k]:8.1f} MB/s wall   {r['MB_per_s_cpu'][k]:8.1f} MB/s CPU")
    b = r["bits_per_value"]
    print(f"  bits/value: total {b['total']:.3f}  speculation {b['speculation']:.3f}  verification {b['verification']:.3f}")
    e = r["exponent"]
    print(f"  exponent: entropy {e['entropy_pooled']:.3f} (per tensor {e['entropy_per_tensor']:.3f}), Huffman "
          f"{e['huffman_pooled']:.3f}, plain rank-unary {e['plain_rank_unary_pooled']:.3f}, "
          f"our code {e['code_bits_per_value'] + e['suffix_bits_per_value']:.3f} bits/value (code planes "
          f"{e['code_bits_per_value']:.3f} + pair suffix bits {e['suffix_bits_per_value']:.3f})")


if __name__ == "__main__":
    main()
