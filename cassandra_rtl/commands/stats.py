"""`cassandra-rtl stats IN.cass [--json]`: bits per value per stream/plane and exponent code vs entropy."""
from __future__ import annotations

import json

from ..golden.container import read_container
from ..golden.stats import aggregate, public, tensor_stats
from ..progress import progress


def container_stats(path, quiet=False) -> dict:
    c = read_container(path)
    per = {}
    for name, enc in progress(c.tensors.items(), total=len(c.tensors), desc="stats", unit="tensor",
                              disable=quiet or None):
        per[name] = tensor_stats(enc)
    summary = aggregate(list(per.values()))
    summary["per_tensor"] = {n: public(s) for n, s in per.items()}
    return summary


def format_table(s: dict) -> str:
    bpv = s["bits_per_value"]
    rows = [
        ("values", f"{s['values']:,} in {s['tensors']} tensors"),
        ("bits/value total (lossless)", f"{bpv['total']:.3f}  ({100 * bpv['total'] / 16:.1f}% of bf16)"),
        ("bits/value speculation (draft)", f"{bpv['speculation']:.3f}  ({100 * bpv['speculation'] / 16:.1f}% of bf16)"),
        ("bits/value verification", f"{bpv['verification']:.3f}"),
        ("index bits/value", f"{s['index_bits_per_value']:.3f}"),
        ("exponent entropy (pooled / per tensor)",
         f"{s['exponent_entropy_bits']:.3f} / {s['exponent_entropy_per_tensor_bits']:.3f}"),
        ("exponent Huffman / plain rank-unary", f"{s['exponent_huffman_bits']:.3f} / {s['exponent_unary_rank_bits']:.3f}"),
        ("exponent code bits (coded planes)", f"{s['exponent_code_bits']:.3f}"),
    ]
    rows += [(f"  plane {p}", f"{v:.3f} bits/value") for p, v in s["planes_bits_per_value"].items()]
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def run(args) -> int:
    s = container_stats(args.input, quiet=args.json)
    if args.json:
        if not args.per_tensor:
            s.pop("per_tensor")
        print(json.dumps(s, indent=2))
    else:
        s.pop("per_tensor")
        print(format_table(s))
    return 0


def register(sub):
    p = sub.add_parser("stats", help="bits per value and exponent statistics of a .cass container")
    p.add_argument("input")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--per-tensor", action="store_true", help="with --json: include every tensor")
    p.set_defaults(func=run)
