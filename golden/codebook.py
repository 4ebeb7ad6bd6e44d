"""Unary group codebooks (docs/FORMAT.md §3.1, format 2.0).

A codebook is an ordered tuple of ``K <= K_MAX`` distinct symbols ``S[0..K-1]`` plus a group structure:
``Q`` groups of one or two symbols, stored as the pair mask ``pairs`` (bit ``q`` set: group ``q`` holds two
symbols). Group ``q`` holds ``S[b_q .. b_q + g_q - 1]``, ``b_q = sum_{j<q} g_j``. Symbol ``S[b_q + t]`` is coded
as ``q`` zeros then a one (``q + 1`` bits) in the code plane and, if its group is a pair, the suffix bit ``t``
in the value's companion field. Any other symbol is the escape: ``Q`` zeros, a one, then its 8 raw bits.
With ``pairs = 0`` (format 1.0), ``Q = K`` and group ``q`` is rank ``q``: the rank-unary code of v1.
A hardware decoder finds every code boundary by counting zeros and looks the group up in a table.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FormatError
from .config import ESCAPE_PAYLOAD_BITS, K_MAX, PRUNED

ALPHABET = PRUNED + 1   # exponents / deltas 0..255 and the C1 "pruned" mark 256
PAIRS_MASK_BITS = K_MAX  # the pair mask has 15 bits (at most 15 groups)


@dataclass(frozen=True)
class Codebook:
    symbols: tuple[int, ...] = ()
    pairs: int = 0

    def __post_init__(self):
        syms = tuple(int(s) for s in self.symbols)
        if len(syms) > K_MAX:
            raise FormatError(f"codebook has {len(syms)} entries, at most {K_MAX} allowed")
        if len(set(syms)) != len(syms) or any(not 0 <= s <= PRUNED for s in syms):
            raise FormatError(f"codebook entries must be distinct symbols in 0..{PRUNED}: {syms}")
        p = self.pairs
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= int(p) < (1 << PAIRS_MASK_BITS):
            raise FormatError(f"codebook pair mask must be an integer in 0..{(1 << PAIRS_MASK_BITS) - 1}, got {p!r}")
        p = int(p)
        Q = len(syms) - bin(p).count("1")
        if p >> max(Q, 0):
            raise FormatError(f"codebook pair mask {p:#x} has bits at or above Q = {Q} groups (K = {len(syms)})")
        object.__setattr__(self, "symbols", syms)
        object.__setattr__(self, "pairs", p)
        if PRUNED in syms and self.group_sizes()[self.group_of_rank()[syms.index(PRUNED)]] == 2:
            raise FormatError("the pruned mark P cannot be in a pair group (its value has no field for a suffix bit)")

    @property
    def K(self) -> int:
        return len(self.symbols)

    @property
    def Q(self) -> int:
        """Number of groups = the zero count of the escape code."""
        return self.K - bin(self.pairs).count("1")

    def group_sizes(self) -> np.ndarray:
        """g_q (1 or 2) of every group q < Q."""
        return np.array([1 + ((self.pairs >> q) & 1) for q in range(self.Q)], dtype=np.int64)

    def group_starts(self) -> np.ndarray:
        """b_q of every group, and b_Q = K at the end (length Q + 1)."""
        out = np.zeros(self.Q + 1, dtype=np.int64)
        np.cumsum(self.group_sizes(), out=out[1:])
        return out

    def pair_bits(self) -> np.ndarray:
        """Suffix bits (0 or 1) of every group q, and 0 for the escape (index Q); length Q + 1."""
        return np.append(self.group_sizes() - 1, 0)

    def group_of_rank(self) -> np.ndarray:
        """Group q of the symbol at list position r, for r < K."""
        return np.repeat(np.arange(self.Q, dtype=np.int64), self.group_sizes())

    def rank_table(self) -> np.ndarray:
        """List position of every symbol 0..256; ``K`` where the symbol is not in the book (escaped)."""
        table = np.full(ALPHABET, self.K, dtype=np.int64)
        for r, s in enumerate(self.symbols):
            table[s] = r
        return table

    def group_table(self) -> np.ndarray:
        """Group of every symbol 0..256; ``Q`` (the escape) where it is not in the book."""
        table = np.full(ALPHABET, self.Q, dtype=np.int64)
        for r, q in enumerate(self.group_of_rank()):
            table[self.symbols[r]] = q
        return table

    def suffix_table(self) -> np.ndarray:
        """Suffix bit t of every symbol 0..256 (0 for singletons and escaped symbols)."""
        table = np.zeros(ALPHABET, dtype=np.int64)
        starts = self.group_starts()
        for r, q in enumerate(self.group_of_rank()):
            table[self.symbols[r]] = r - starts[q]
        return table

    def symbol_table(self) -> np.ndarray:
        return np.array(self.symbols, dtype=np.int64)

    def suffix_widths(self, symbols: np.ndarray) -> np.ndarray:
        """Suffix bits (0/1) the companion field of each symbol's value carries."""
        return self.pair_bits()[self.group_table()[symbols]]

    def resolve(self, groups: np.ndarray, suffix: np.ndarray, raw: np.ndarray) -> np.ndarray:
        """Symbols from decoded groups (``Q`` = escape, then ``raw`` is the symbol) and suffix bits."""
        groups = np.asarray(groups, dtype=np.int64)
        esc = groups >= self.Q
        if self.K == 0:
            return np.asarray(raw, dtype=np.int64).copy()
        pos = self.group_starts()[np.minimum(groups, self.Q)] + np.asarray(suffix, dtype=np.int64)
        return np.where(esc, raw, self.symbol_table()[np.minimum(pos, self.K - 1)])

    def code_lengths(self) -> np.ndarray:
        """Bits of every symbol 0..256 in the code plane plus its suffix bit (escapes: ``Q + 9``)."""
        groups = self.group_table()
        return np.where(groups < self.Q, groups + 1 + self.pair_bits()[groups], self.Q + 1 + ESCAPE_PAYLOAD_BITS)

    def encode_fields(self, symbols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(widths, values) of the code-plane fields for ``symbols`` (LSB-first fields, see bitpack);
        the suffix bits are not part of these (they go to the companion field)."""
        groups = self.group_table()[symbols]
        esc = groups == self.Q
        if esc.any() and (symbols[esc] > 0xFF).any():
            raise ValueError("the pruned mark must be in the codebook; it cannot be escaped")
        widths = np.where(esc, self.Q + 1 + ESCAPE_PAYLOAD_BITS, groups + 1)
        values = np.left_shift(np.uint64(1), groups.astype(np.uint64))
        values = values | np.where(esc, symbols.astype(np.uint64) << np.uint64(self.Q + 1), np.uint64(0))
        return widths, values

    def to_json(self) -> list[int]:
        """The symbol list (the pair mask is stored beside it: container ``pairs``)."""
        return list(self.symbols)

    @classmethod
    def from_json(cls, value, pairs=0) -> "Codebook":
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise FormatError("codebook must be a list of integers")
        return cls(tuple(value), pairs)


def choose_groups(counts: np.ndarray, escapes: int, forbid_pair: np.ndarray | None = None,
                  escape_payload: int = ESCAPE_PAYLOAD_BITS) -> tuple[int, int]:
    """FORMAT.md §3.1 golden group sizes of an ordered symbol list with ``counts``: the dynamic programme
    ``F(i, q)`` = cost of symbols ``i..K-1`` when symbol ``i`` opens group ``q``; ``F(K, q) = escapes (q + 9)``;
    single ``c_i (q+1) + F(i+1, q+1)``, pair (``i+1 < K``, neither symbol forbidden) ``(c_i + c_{i+1})(q+2) +
    F(i+2, q+1)``; ties prefer the single. Returns (cost, pair mask). ``escape_payload`` (the format's 8 bits)
    is a parameter only for bench/split_options.py, which prices codes of other alphabets."""
    c = [int(x) for x in counts]
    K = len(c)
    forbid = [False] * K if forbid_pair is None else [bool(x) for x in forbid_pair]
    INF = None
    F = [[INF] * (K + 2) for _ in range(K + 2)]
    pick = [[0] * (K + 2) for _ in range(K + 2)]    # 1 = single, 2 = pair
    for q in range(K + 1):
        F[K][q] = escapes * (q + 1 + escape_payload)
    for i in range(K - 1, -1, -1):
        for q in range(i + 1):
            best, how = c[i] * (q + 1) + F[i + 1][q + 1], 1
            if i + 1 < K and not forbid[i] and not forbid[i + 1]:
                pair = (c[i] + c[i + 1]) * (q + 2) + F[i + 2][q + 1]
                if pair < best:
                    best, how = pair, 2
            F[i][q], pick[i][q] = best, how
    mask, i, q = 0, 0, 0
    while i < K:
        if pick[i][q] == 2:
            mask |= 1 << q
        i += pick[i][q]
        q += 1
    return F[0][0], mask


def build_codebook(counts: np.ndarray, required: int | None = None, pairs: bool = False) -> Codebook:
    """The golden encoder's codebook (FORMAT.md §3.1): symbols by descending count (ties: smaller symbol
    first), cut at the K in K_min..min(K_MAX, distinct) that minimises the coded size (ties: smaller K).
    ``required`` (the pruned mark) is always included, since it cannot be escaped. With ``pairs`` each
    cut's group sizes come from ``choose_groups`` (else every group is a single: format 1.0's rank-unary
    code). Decoders accept any valid codebook."""
    counts = np.asarray(counts, dtype=np.int64)
    if len(counts) < ALPHABET:
        counts = np.pad(counts, (0, ALPHABET - len(counts)))
    present = np.flatnonzero(counts)
    order = present[np.lexsort((present, -counts[present]))]
    c = counts[order]
    total = int(c.sum())
    min_k = 0
    if required is not None and counts[required] > 0:
        min_k = int(np.flatnonzero(order == required)[0]) + 1
    if min_k > K_MAX:
        # The pruned mark is rarer than K_MAX exponents: move it to the last slot rather than escape it.
        syms = [int(s) for s in order[: K_MAX - 1]] + [required]
        mask = 0
        if pairs:
            sc = counts[syms]
            _, mask = choose_groups(sc, total - int(sc.sum()), np.array(syms) == PRUNED)
        return Codebook(tuple(syms), mask)
    best_k, best_cost, best_mask = 0, None, 0
    prefix = np.concatenate([[0], np.cumsum(c)])
    weighted = np.concatenate([[0], np.cumsum(c * np.arange(1, len(c) + 1))])
    for k in range(min_k, min(K_MAX, len(c)) + 1):
        escapes = total - int(prefix[k])
        if pairs:
            cost, mask = choose_groups(c[:k], escapes, order[:k] == PRUNED)
        else:   # cost(K) = sum_{r<K} c_r (r+1) + escapes (K + 9): the DP without pairs, in closed form
            cost, mask = int(weighted[k]) + escapes * (k + 1 + ESCAPE_PAYLOAD_BITS), 0
        if best_cost is None or cost < best_cost:
            best_k, best_cost, best_mask = k, cost, mask
    return Codebook(tuple(int(s) for s in order[:best_k]), best_mask)
