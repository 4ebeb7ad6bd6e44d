"""`cassandra-rtl stats IN.cass [--json] [--per-tensor]`: bits per value per stream/plane and exponent code vs
entropy. Progress goes to stderr (a bar on a terminal, a line every few seconds otherwise)."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import FormatError
from ..golden.container import read_container
from ..golden.stats import aggregate, public, tensor_stats
from ..progress import progress


def container_stats(path, quiet=False) -> dict:
    c = read_container(path)
    per = {}
    for name, enc in progress(c.tensors.items(), total=len(c.tensors), desc="stats", unit="tensor",
                              disable=quiet):
        try:
            per[name] = tensor_stats(enc)
        except FormatError as exc:
            raise FormatError(f"{Path(path).name}: tensor {name!r}: {exc}") from None
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
    if s.get("exponent_suffix_bits"):   # format 2.0 pair groups: the rest of the code sits in the companion fields
        rows.append(("  + pair suffix bits (companion planes)", f"{s['exponent_suffix_bits']:.3f}  "
                     f"(code total {s['exponent_code_bits'] + s['exponent_suffix_bits']:.3f})"))
    rows += [(f"  plane {p}", f"{v:.3f} bits/value") for p, v in s["planes_bits_per_value"].items()]
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def format_per_tensor(per: dict) -> str:
    rows = [("tensor", "values", "scheme", "G", "m", "k", "total", "draft", "verif")]
    for name, t in per.items():
        c, b = t["config"], t["bits_per_value"]
        rows.append((name, f"{t['values']:,}", c["scheme"], str(c["group_size"]), str(c["mantissa_bits"]),
                     str(c["keep_count"]), f"{b['total']:.3f}", f"{b['speculation']:.3f}", f"{b['verification']:.3f}"))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w[i]) if i == 0 else v.rjust(w[i]) for i, v in enumerate(r)) for r in rows)


def run(args) -> int:
    s = container_stats(args.input, quiet=args.quiet)
    per = s.pop("per_tensor")
    if args.json:
        if args.per_tensor:
            s["per_tensor"] = per
        print(json.dumps(s, indent=2))
    else:
        print(format_table(s))
        if args.per_tensor:
            print("\nbits/value per tensor:")
            print(format_per_tensor(per))
    return 0


def register(sub):
    p = sub.add_parser("stats", help="bits per value and exponent statistics of a .cass container")
    p.add_argument("input")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--per-tensor", action="store_true", help="also every tensor (a table, or per_tensor in --json)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run)
