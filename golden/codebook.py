"""Rank-unary codebooks (docs/FORMAT.md section "Exponent codes").

A codebook is an ordered tuple of ``K <= K_MAX`` distinct symbols. Symbol ``symbols[r]`` is coded as the
unary code of rank ``r`` (``r`` zeros then a one, ``r + 1`` bits). Any other symbol is coded as the escape:
``K`` zeros, a one, then the symbol's 8 raw bits. A hardware decoder therefore finds every code boundary
by counting zeros, and looks the rank up in a K-entry table.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FormatError
from .config import ESCAPE_PAYLOAD_BITS, K_MAX, PRUNED

ALPHABET = PRUNED + 1   # exponents / deltas 0..255 and the C1 "pruned" mark 256


@dataclass(frozen=True)
class Codebook:
    symbols: tuple[int, ...] = ()

    def __post_init__(self):
        syms = tuple(int(s) for s in self.symbols)
        if len(syms) > K_MAX:
            raise FormatError(f"codebook has {len(syms)} entries, at most {K_MAX} allowed")
        if len(set(syms)) != len(syms) or any(not 0 <= s <= PRUNED for s in syms):
            raise FormatError(f"codebook entries must be distinct symbols in 0..{PRUNED}: {syms}")
        object.__setattr__(self, "symbols", syms)

    @property
    def K(self) -> int:
        return len(self.symbols)

    def rank_table(self) -> np.ndarray:
        """rank of every symbol 0..256; ``K`` (the escape rank) where the symbol is not in the book."""
        table = np.full(ALPHABET, self.K, dtype=np.int64)
        for r, s in enumerate(self.symbols):
            table[s] = r
        return table

    def symbol_table(self) -> np.ndarray:
        return np.array(self.symbols, dtype=np.int64)

    def code_lengths(self) -> np.ndarray:
        """Code length in bits of every symbol 0..256 (escapes include their 8 raw bits)."""
        ranks = self.rank_table()
        return np.where(ranks < self.K, ranks + 1, self.K + 1 + ESCAPE_PAYLOAD_BITS)

    def encode_fields(self, symbols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(widths, values) of the code fields for ``symbols`` (LSB-first fields, see bitpack)."""
        ranks = self.rank_table()[symbols]
        esc = ranks == self.K
        if esc.any() and (symbols[esc] > 0xFF).any():
            raise ValueError("the pruned mark must be in the codebook; it cannot be escaped")
        widths = np.where(esc, self.K + 1 + ESCAPE_PAYLOAD_BITS, ranks + 1)
        values = np.left_shift(np.uint64(1), ranks.astype(np.uint64))
        values = values | np.where(esc, symbols.astype(np.uint64) << np.uint64(self.K + 1), np.uint64(0))
        return widths, values

    def to_json(self) -> list[int]:
        return list(self.symbols)

    @classmethod
    def from_json(cls, value) -> "Codebook":
        if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
            raise FormatError("codebook must be a list of integers")
        return cls(tuple(value))


def build_codebook(counts: np.ndarray, required: int | None = None) -> Codebook:
    """The golden encoder's codebook: symbols by descending count (ties: smaller symbol first), cut at the
    K in 0..K_MAX that minimises the coded size (ties: smaller K). ``required`` (the pruned mark) is
    always included, since it cannot be escaped. Decoders accept any valid codebook."""
    counts = np.asarray(counts, dtype=np.int64)
    if len(counts) < ALPHABET:
        counts = np.pad(counts, (0, ALPHABET - len(counts)))
    present = np.flatnonzero(counts)
    order = present[np.lexsort((present, -counts[present]))]
    c = counts[order]
    total = int(c.sum())
    best_k, best_cost = 0, None
    # cost(K) = sum_{r<K} c_r (r+1) + (total - sum_{r<K} c_r) (K + 9)
    prefix = np.concatenate([[0], np.cumsum(c)])
    weighted = np.concatenate([[0], np.cumsum(c * np.arange(1, len(c) + 1))])
    min_k = 0
    if required is not None and counts[required] > 0:
        min_k = int(np.flatnonzero(order == required)[0]) + 1
    for k in range(min_k, min(K_MAX, len(c)) + 1):
        cost = int(weighted[k]) + (total - int(prefix[k])) * (k + 1 + ESCAPE_PAYLOAD_BITS)
        if best_cost is None or cost < best_cost:
            best_k, best_cost = k, cost
    if min_k > K_MAX:
        # The pruned mark is rarer than K_MAX exponents: move it to the last slot rather than escape it.
        syms = [int(s) for s in order[: K_MAX - 1]] + [required]
        return Codebook(tuple(syms))
    return Codebook(tuple(int(s) for s in order[:best_k]))
