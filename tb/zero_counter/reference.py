"""Specification of the parallel zero counter (docs/FORMAT.md section 7, docs/HARDWARE.md section 1),
written independently of hw/zero_counter.py: the first L ones of a W-bit window, bit 0 first."""
from __future__ import annotations

import math

import numpy as np


def bits_for(n: int) -> int:
    return max(1, int(n).bit_length())


def zero_counter(window: int, W: int, L: int) -> dict:
    """Expected outputs for one window: valid (L-bit thermometer), rank[L], end[L], consumed."""
    ones = [j for j in range(W) if (window >> j) & 1][:L]
    valid = (1 << len(ones)) - 1
    rank, end = [0] * L, [0] * L
    prev = 0
    for i, p in enumerate(ones):
        end[i] = p + 1
        rank[i] = p - prev
        prev = p + 1
    consumed = end[len(ones) - 1] if ones else 0
    return {"valid": valid, "rank": rank, "end": end, "consumed": consumed}


def pack_lanes(values, bw: int) -> int:
    out = 0
    for i, v in enumerate(values):
        out |= int(v) << (bw * i)
    return out


def unpack_lanes(word: int, bw: int, L: int) -> list[int]:
    mask = (1 << bw) - 1
    return [(word >> (bw * i)) & mask for i in range(L)]


def code_stream_windows(rng: np.random.Generator, W: int, n: int, K: int | None = None) -> list[int]:
    """``n`` windows cut at random bit offsets from a random rank-unary stream coded with a K-entry
    book (the golden codebook's encode_fields), escapes included: the data the decoder feeds its counter."""
    from cassandra_rtl.golden import bitpack
    from cassandra_rtl.golden.codebook import Codebook

    K = int(rng.integers(0, 16)) if K is None else K
    book = Codebook(tuple(int(s) for s in rng.permutation(256)[:K]))
    nsym = max(64, 4 * n)
    # mostly in-book symbols with geometric-ish ranks, ~5% escapes
    ranks = np.minimum(rng.geometric(0.45, nsym) - 1, max(K - 1, 0))
    syms = np.array(book.symbols, dtype=np.int64)[ranks] if K else rng.integers(0, 256, nsym)
    esc = rng.random(nsym) < 0.05
    outside = np.setdiff1d(np.arange(256), np.array(book.symbols, dtype=np.int64))
    syms = np.where(esc, rng.choice(outside, nsym), syms)
    w, v = book.encode_fields(syms)
    plane, _ = bitpack.pack_chunks(np.zeros(nsym, np.int64), w, v, 1)
    words = bitpack.words_of(plane)
    total = len(plane) * 8
    pos = rng.integers(0, max(1, total - W), n)
    out = []
    for p in pos:
        val = 0
        for k in range(0, W, 32):
            val |= int(bitpack.read_fields(words, np.array([p + k]), min(32, W - k))[0]) << k
        out.append(val)
    return out


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = ["zero_counter", "pack_lanes", "unpack_lanes", "code_stream_windows", "bits_for", "ceil_div", "math"]
