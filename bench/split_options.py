#!/usr/bin/env python3
"""What would close the C1 split overhead (not a test): each candidate format change, measured.

    python bench/split_options.py [--tensors layers:0,10,20,29 | all | synthetic] [--keep 0.3] [--json F]

The split overhead is total bits/value at keep ``k`` minus total at keep 1.0 (C1, G = 128, m = 3, golden
policy of format 2.0). This script encodes both with the golden codec (the measured baseline), then prices
the candidate changes of docs/FORMAT.md §9 "What a format 3.0 would need" on the same values, each as the
change in coded bits it causes, so the rows add up:

* **two values per speculation code**: the golden group-code DP (FORMAT.md §3.1, pair groups allowed) over
  the alphabet of value *pairs* (kept exponent or ``P`` for each of two neighbours), per-tensor book of at
  most 15 (format 2.0's K_MAX) or 31 ranked symbols, an escape carrying two 9-bit symbols. Against the same
  DP over single values (the 2.0 code).
* **threshold-conditioned mantissas**: the superblock's keep threshold ``T = (T_e, T_m)`` (the smallest
  kept magnitude) in a per-superblock header. A pruned value with exponent ``T_e`` has a mantissa in
  ``[0, T_m]`` and a kept one in ``[T_m, 127]``: priced as a fixed width per superblock
  (``bitlen(T_m)``: the width depends only on the value's decoded exponent, like 2.0's suffix bits),
  as a truncated binary code (the width also depends on the field's own leading bits: a data-dependent
  read, the kind of loop the pipelined decoders keep out of their stages), and at ``log2(range)`` (the bound for uniform mantissas; skewed ones can beat it).
* **header**: ``T_m`` (7 bits) plus ``T_e`` as 2 bits against the tensor's most common ``T_e`` (an escape
  to 8 raw bits otherwise) per superblock.

Every figure is bits per value over all values of the tensor set; the script prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from golden_bench import linear_weights, tensor_set  # noqa: E402

from cassandra_rtl.golden.codebook import choose_groups  # noqa: E402
from cassandra_rtl.golden.codec import encode_tensor, keep_mask  # noqa: E402
from cassandra_rtl.golden.config import CodecConfig, ESCAPE_PAYLOAD_BITS  # noqa: E402
from cassandra_rtl.progress import progress  # noqa: E402

G, M = 128, 3
# A truncated binary code without a data-dependent read: the k-bit part stays in verif.rest (its width then
# depends only on the decoded exponent) and the one extension bit of each long code goes to a plane of its
# own, read in a later stage by a popcount of the beat's long codes. Its framing at A = 8 (1,024 values a
# chunk): a 16-bit index entry and on average 4 bits of byte padding per chunk.
SIDE_PLANE_FRAMING = (16 + 4) / 1024
SYMBOL_BITS = 1 + ESCAPE_PAYLOAD_BITS     # an escaped value symbol: kept flag + 8-bit exponent


def group_code_bits(counts, forbid, k_max: int, escape_payload: int) -> int:
    """FORMAT.md §3.1's group code (golden ``choose_groups``) over symbols sorted by count, best cut K <= k_max
    (the cut search of golden ``build_codebook``, here over any alphabet and escape payload)."""
    c = np.asarray(counts, dtype=np.int64)
    forbid = np.asarray(forbid, dtype=bool)
    total = int(c.sum())
    return min(choose_groups(c[:K], total - int(c[:K].sum()), forbid[:K], escape_payload)[0]
               for K in range(0, min(k_max, len(c)) + 1))


def sorted_counts(symbols: np.ndarray):
    u, c = np.unique(symbols, return_counts=True)
    o = np.lexsort((u, -c))
    return u[o], c[o]


def truncated_binary_bits(r: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Length of the truncated binary code of v in [0, r)."""
    k = np.floor(np.log2(np.maximum(r, 1))).astype(np.int64)
    u = (1 << (k + 1)) - r
    return np.where(r <= 1, 0, np.where(v < u, k, k + 1))


def bitlen(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, np.floor(np.log2(np.maximum(x, 1))).astype(np.int64) + 1, 0)


def total_bits(bits: np.ndarray, keep: float) -> int:
    enc = encode_tensor(bits, CodecConfig(scheme="c1", group_size=G, mantissa_bits=M, keep_ratio=keep))
    return 8 * (enc.spec_nbytes + enc.verif_nbytes)


def price(bits: np.ndarray, keep: float, acc: dict) -> None:
    d: dict = {}                             # this tensor's bits; added to acc at the end

    def add(k, v):
        d[k] = d.get(k, 0.0) + float(v)

    flat = bits.reshape(-1)
    add("values", flat.size)
    add("total_keep1", total_bits(flat, 1.0))
    add("total_keep", total_bits(flat, keep))
    n = flat.size - flat.size % G            # the options are priced on whole superblocks
    b = flat[:n]
    kept = keep_mask(b, CodecConfig(scheme="c1", group_size=G, mantissa_bits=M, keep_ratio=keep))
    key = (b & 0x7FFF).astype(np.int64)
    E, Mt = key >> 7, key & 0x7F
    spec = np.where(kept, E, 256)
    # speculation codes: one value per code (the 2.0 code) against two values per code
    u, c = sorted_counts(spec)
    add("spec_1", group_code_bits(c, u == 256, 15, ESCAPE_PAYLOAD_BITS))
    pairs = spec.reshape(-1, 2) @ np.array([257, 1])
    u, c = sorted_counts(pairs)
    for k_max in (15, 31):
        add(f"spec_2_k{k_max}", group_code_bits(c, u == 256 * 257 + 256, k_max, 2 * SYMBOL_BITS))
    # the keep threshold of each superblock
    kept2, key2 = kept.reshape(-1, G), key.reshape(-1, G)
    Tk = np.where(kept2, key2, 1 << 20).min(axis=1)
    Te, Tm = Tk >> 7, Tk & 0x7F
    mode = np.bincount(Te).argmax()
    near = np.abs(Te - mode) <= 1
    add("header", np.where(near, 7 + 2, 7 + 2 + 8).sum())
    TeV, TmV = np.repeat(Te, G), np.repeat(Tm, G)
    pr = (~kept) & (E == TeV)                # pruned at the threshold exponent: mantissa in [0, T_m]
    add("pruned_fixed7", 7 * pr.sum())
    add("pruned_bitlen", bitlen(TmV[pr]).sum())
    add("pruned_tb", truncated_binary_bits(TmV[pr] + 1, Mt[pr]).sum())
    add("pruned_ideal", np.log2(TmV[pr] + 1.0).sum())
    lo = 7 - M
    kt = kept & (E == TeV) & ((Mt >> lo) == (TmV >> lo))   # kept, same top bits as T_m: low bits >= T_m's
    low = (1 << lo) - 1
    r = (1 << lo) - (TmV[kt] & low)
    add("kept_fixed", lo * kt.sum())
    add("kept_bitlen", bitlen(r - 1).sum())
    add("kept_tb", truncated_binary_bits(r, (Mt[kt] & low) - (TmV[kt] & low)).sum())
    add("kept_ideal", np.log2(r.astype(float)).sum())
    # a format would choose per tensor: two-value codes only where they pay, the threshold only where it pays
    spec15 = min(0.0, d["spec_2_k15"] - d["spec_1"])
    spec31 = min(0.0, d["spec_2_k31"] - d["spec_1"])
    fixed = d["header"] + d["pruned_bitlen"] - d["pruned_fixed7"] + d["kept_bitlen"] - d["kept_fixed"]
    tb = d["header"] + d["pruned_tb"] - d["pruned_fixed7"] + d["kept_tb"] - d["kept_fixed"]
    ideal = d["header"] + d["pruned_ideal"] - d["pruned_fixed7"] + d["kept_ideal"] - d["kept_fixed"]
    add("best_fixed", spec15 + min(0.0, fixed))
    add("best_tb", spec31 + min(0.0, tb))
    side = SIDE_PLANE_FRAMING * flat.size
    add("best_tb15_side", spec15 + min(0.0, tb + side))
    add("best_ideal", spec31 + min(0.0, ideal))
    for k, v in d.items():
        acc[k] = acc.get(k, 0.0) + v


def table(acc: dict, keep: float) -> tuple[str, dict]:
    N = acc["values"]
    f = {k: v / N for k, v in acc.items() if k != "values"}
    base = f["total_keep"] - f["total_keep1"]
    rows = [("format 2.0 (measured: golden encode)", 0.0)]
    d_spec15, d_spec31 = f["spec_2_k15"] - f["spec_1"], f["spec_2_k31"] - f["spec_1"]
    rows += [("two values per speculation code, K <= 15", d_spec15),
             ("two values per speculation code, K <= 31", d_spec31),
             ("threshold header (T_m 7 bits + T_e 2 bits, escape 8)", f["header"]),
             ("pruned mantissas at T_e: fixed width bitlen(T_m)", f["pruned_bitlen"] - f["pruned_fixed7"]),
             ("pruned mantissas at T_e: truncated binary", f["pruned_tb"] - f["pruned_fixed7"]),
             ("pruned mantissas at T_e: log2(T_m + 1) (uniform)", f["pruned_ideal"] - f["pruned_fixed7"]),
             ("kept low mantissa bits at T_m's top bits: fixed width", f["kept_bitlen"] - f["kept_fixed"]),
             ("kept low mantissa bits at T_m's top bits: truncated binary", f["kept_tb"] - f["kept_fixed"]),
             ("kept low mantissa bits at T_m's top bits: log2(range) (uniform)", f["kept_ideal"] - f["kept_fixed"])]
    hw, best, bound = base + f["best_fixed"], base + f["best_tb"], base + f["best_ideal"]
    side = base + f["best_tb15_side"]
    lines = [f"| change (C1, G = {G}, m = {M}, keep {keep}) | bits/value | split overhead after it |", "|---|---:|---:|"]
    lines.append(f"| format 2.0 split overhead (keep {keep}: {f['total_keep']:.3f} − keep 1.0: {f['total_keep1']:.3f}) "
                 f"| | **{base:.3f}** |")
    for name, d in rows[1:]:
        lines.append(f"| {name} | {d:+.3f} | |")
    lines.append(f"| all, each where it pays (per tensor), fixed widths only (no data-dependent read), K <= 15 | | **{hw:.3f}** |")
    lines.append(f"| all, each where it pays, truncated binary with its extension bits in a side plane "
                 f"(+{SIDE_PLANE_FRAMING:.3f} framing), K <= 15 | | **{side:.3f}** |")
    lines.append(f"| all, each where it pays, truncated binary, K <= 31 | | **{best:.3f}** |")
    lines.append(f"| all, each where it pays, mantissas at log2(range) | | {bound:.3f} |")
    summary = {"split_overhead": base, "fixed_widths": hw, "side_plane": side, "truncated_binary": best, "bound": bound, **f}
    return "\n".join(lines), summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tensors", type=tensor_set, default="layers:0,10,20,29")
    ap.add_argument("--keep", type=float, default=0.3)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    if not 0.0 < a.keep < 1.0:
        sys.exit("split_options: --keep must be in (0, 1)")
    acc: dict = {}
    tensors = list(linear_weights(None, a.tensors))
    for name, bits in progress(tensors, desc="split options", unit="tensor"):
        price(bits, a.keep, acc)
    text, summary = table(acc, a.keep)
    print(f"tensors: {a.tensors} ({len(tensors)}, {int(acc['values']):,} values)")
    print(text)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"tensors": a.tensors, "keep": a.keep, **summary}, indent=1))


if __name__ == "__main__":
    main()
