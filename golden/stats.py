"""Statistics of encoded tensors: bits per value per stream and per plane, exponent entropy vs code."""
from __future__ import annotations

import heapq

import numpy as np

from .codec import PLANES, EncodedTensor, _decode_c2_spec, decode_full, slice_chunks
from .config import ESCAPE_PAYLOAD_BITS, PRUNED
from .escfield import _decode_c2_blocks, escapes_per_chunk, keep_mask_of


def entropy_bits(counts: np.ndarray) -> float:
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    if total == 0:
        return 0.0
    p = counts[counts > 0] / total
    return float(-(p * np.log2(p)).sum())


def huffman_bits(counts: np.ndarray) -> float:
    """Average Huffman code length (bits/symbol) for a histogram: the optimum a prefix code can reach."""
    c = [int(x) for x in np.asarray(counts) if x > 0]
    total = sum(c)
    if len(c) <= 1:
        return 1.0 if total else 0.0
    heap = list(c)
    heapq.heapify(heap)
    cost = 0
    while len(heap) > 1:
        a, b = heapq.heappop(heap), heapq.heappop(heap)
        cost += a + b
        heapq.heappush(heap, a + b)
    return cost / total


def unary_rank_bits(counts: np.ndarray) -> float:
    """Plain rank-unary (no escape, no length cap) average length: the paper's code."""
    c = np.sort(np.asarray(counts)[np.asarray(counts) > 0])[::-1].astype(np.float64)
    return float((c * np.arange(1, len(c) + 1)).sum() / c.sum()) if c.sum() else 0.0


def prefix_bits(enc: EncodedTensor, bits: np.ndarray) -> tuple[int, int]:
    """The parts of the exponent code the companion planes carry (FORMAT.md §3.1): the suffix bits of pair
    groups (0 without pairs), and in format 3.0 the escapes' 8 raw bits (the 2.0 layout keeps those in the code
    planes), counted from the code planes."""
    payload = 0
    if enc.format_major == 3:
        payload = ESCAPE_PAYLOAD_BITS * sum(int(escapes_per_chunk(enc, p).sum())
                                            for p in ("spec.codes", "verif.codes") if p in enc.planes)
    if not ((enc.spec_book is not None and enc.spec_book.pairs) or enc.verif_book.pairs):
        return 0, payload
    e = ((np.asarray(bits).reshape(-1) >> 7) & 0xFF).astype(np.int64)
    vb = enc.verif_book
    if enc.config.scheme == "c1":
        kept, sb = keep_mask_of(enc), enc.spec_book
        return int(sb.pair_bits()[sb.group_table()[e[kept]]].sum() + vb.pair_bits()[vb.group_table()[e[~kept]]].sum()), payload
    nz, Xv = (_decode_c2_blocks(enc)[1:3] if enc.format_major == 3 else _decode_c2_spec(enc)[2:4])
    return int(vb.pair_bits()[vb.group_table()[np.minimum(Xv - e, PRUNED)[~nz]]].sum()), payload


PART_VALUES = 1 << 20   # values decoded at a time: the statistics' memory does not grow with the tensor


def _decoded_parts(enc: EncodedTensor, original_bits: np.ndarray | None):
    """(slice, its original bits) over runs of whole chunks of about PART_VALUES values, so a large tensor is
    never decoded in one piece (``stats`` on SmolLM2's 28 M-value embedding); one part when the bits are given."""
    if original_bits is not None:
        yield enc, original_bits
        return
    step = max(1, PART_VALUES // enc.config.chunk_values)
    for c in range(0, max(enc.nchunks, 1), step):
        part = slice_chunks(enc, c, min(c + step, enc.nchunks)) if enc.nchunks else enc
        yield part, decode_full(part)


def tensor_stats(enc: EncodedTensor, original_bits: np.ndarray | None = None) -> dict:
    """Sizes from the real planes and indexes; exponent statistics from the (decoded) original bits."""
    n = max(enc.numel, 1)
    scheme = enc.config.scheme
    spec_planes, verif_planes = PLANES[scheme]
    planes = {p: 8 * (len(enc.planes[p]) + enc.index_bytes(p)) / n for p in spec_planes + verif_planes}
    e_counts, suffix, payload = np.zeros(256, dtype=np.int64), 0, 0
    for part, bits in _decoded_parts(enc, original_bits):
        e_counts += np.bincount(((np.asarray(bits).reshape(-1) >> 7) & 0xFF).astype(np.int64), minlength=256)
        s, p = prefix_bits(part, bits)
        suffix, payload = suffix + s, payload + p
    code_planes = [p for p in ("spec.codes", "verif.codes") if p in enc.planes]
    return {
        "values": enc.numel,
        "config": enc.config.to_json(),
        "bits_per_value": {
            "total": 8 * (enc.spec_nbytes + enc.verif_nbytes) / n,
            "speculation": 8 * enc.spec_nbytes / n,
            "verification": 8 * enc.verif_nbytes / n,
        },
        "planes_bits_per_value": planes,
        "index_bits_per_value": sum(8 * enc.index_bytes(p) for p in enc.indexed_planes) / n,
        "exponent_entropy_bits": entropy_bits(e_counts),
        "exponent_huffman_bits": huffman_bits(e_counts),
        "exponent_unary_rank_bits": unary_rank_bits(e_counts),
        "exponent_code_bits": (sum(8 * len(enc.planes[p]) for p in code_planes) + payload) / n,   # + 3.0's escape bits
        "exponent_suffix_bits": suffix / n,     # pair groups: code bits in the companion planes
        "escapes_possible_K": {"spec": enc.spec_book.K if enc.spec_book else None, "verif": enc.verif_book.K},
        "chunk_superblocks": enc.chunk_superblocks,
        "pairs": {"spec": enc.spec_book.pairs if enc.spec_book else None, "verif": enc.verif_book.pairs},
        "_exponent_counts": e_counts,
    }


def aggregate(stats: list[dict]) -> dict:
    """Value-weighted totals over tensors; the entropy is that of the pooled exponent histogram and,
    as ``exponent_entropy_per_tensor_bits``, the value-weighted mean of per-tensor entropies (the bound
    for per-tensor codebooks)."""
    n = sum(s["values"] for s in stats)
    if n == 0:
        return {"values": 0, "tensors": 0}

    def wmean(get):
        return sum(get(s) * s["values"] for s in stats) / n

    pooled = sum(s["_exponent_counts"] for s in stats)
    plane_names = sorted({p for s in stats for p in s["planes_bits_per_value"]})
    return {
        "values": n,
        "tensors": len(stats),
        "bits_per_value": {k: wmean(lambda s, k=k: s["bits_per_value"][k]) for k in ("total", "speculation", "verification")},
        "planes_bits_per_value": {p: wmean(lambda s, p=p: s["planes_bits_per_value"].get(p, 0.0)) for p in plane_names},
        "index_bits_per_value": wmean(lambda s: s["index_bits_per_value"]),
        "exponent_entropy_bits": entropy_bits(pooled),
        "exponent_entropy_per_tensor_bits": wmean(lambda s: s["exponent_entropy_bits"]),
        "exponent_huffman_bits": huffman_bits(pooled),
        "exponent_unary_rank_bits": unary_rank_bits(pooled),
        "exponent_code_bits": wmean(lambda s: s["exponent_code_bits"]),
        "exponent_suffix_bits": wmean(lambda s: s.get("exponent_suffix_bits", 0.0)),
    }


def public(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if not k.startswith("_")}
