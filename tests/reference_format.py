"""An independent, deliberately simple scalar reference of docs/FORMAT.md (version 2.0: chunks of A
superblocks and pair groups; A = 1 without pairs is version 1.0).

Written from the document, not from golden/: one value, one bit at a time, plain Python lists. It is
slow on purpose and only meant for small inputs, where the tests compare the golden codec against it
byte for byte (encode) and value for value (decode). Section numbers below refer to FORMAT.md.
"""
from __future__ import annotations

import json
import math
import struct
import zlib
from collections import Counter

import numpy as np

ALLOWED_G = (32, 64, 128, 256)      # §1
K_MAX = 15                          # §3.1
P = 256                             # §3.1: the pruned mark of the C1 speculation alphabet
MX_BLOCK = 32                       # §4
ANCHOR = 16                         # §6
CHUNK_A = (1, 2, 4, 8, 16, 32, 64)  # §1: superblocks per chunk, A * G <= 1024


class RefFormatError(Exception):
    """The reference decoder found a malformed chunk (impossible code, overrun, trailing bytes, ...)."""


class Unspecified(Exception):
    """FORMAT.md does not say what to do here (the reference refuses to guess)."""


# ------------------------------------------------------------------------------------------ bf16 fields

def fields(bits: int) -> tuple[int, int, int]:
    """(s, e, f) of a bf16 pattern (Notation)."""
    return (bits >> 15) & 1, (bits >> 7) & 0xFF, bits & 0x7F


def keep_count(ratio: float, G: int) -> int:
    """§2: a keep ratio R in (0, 1] means k = ceil(R * G), computed exactly on the binary value of R."""
    from fractions import Fraction
    return math.ceil(Fraction(ratio) * G)


def kept_in(k: int, n_s: int, G: int) -> int:
    """§2: k_s = (k * n_s + G - 1) div G."""
    return (k * n_s + G - 1) // G


def superblocks(N: int, G: int) -> list[tuple[int, int]]:
    """(start, n_s) of every superblock (§1)."""
    return [(s, min(G, N - s)) for s in range(0, N, G)]


# ------------------------------------------------------------------------------------------- bit I/O

class BitWriter:
    """§5: stream bit i is bit (i mod 8) of byte i div 8; a field's LSB comes first."""

    def __init__(self):
        self.bits: list[int] = []
        self.used: list[int] = []        # bits used by every chunk ended so far

    def write(self, value: int, width: int) -> None:
        assert width >= 0 and 0 <= value < (1 << width) or (width == 0 and value == 0), (value, width)
        for i in range(width):
            self.bits.append((value >> i) & 1)

    def write_code(self, book: list[int], symbol: int, pairs: int = 0, major: int = 3) -> tuple[int, int]:
        """§3.1: symbol in group q -> q zeros then a one; not in the book -> Q zeros, a one and (format 2.0)
        8 raw bits LSB first. Returns the prefix of the value's companion field: (suffix bit t, width 0/1), or
        in format 3.0 for an escape (the raw symbol, 8)."""
        groups = book_groups(book, pairs)
        for q, grp in enumerate(groups):
            if symbol in grp:
                for _ in range(q):
                    self.bits.append(0)
                self.bits.append(1)
                return grp.index(symbol), len(grp) - 1
        if not 0 <= symbol <= 255:
            raise ValueError(f"symbol {symbol} cannot be escaped")
        for _ in range(len(groups)):
            self.bits.append(0)
        self.bits.append(1)
        if major >= 3:
            return symbol, 8
        self.write(symbol, 8)
        return 0, 0

    def chunk(self) -> bytes:
        """End a chunk: zero bits up to the byte boundary, then the bytes."""
        self.used.append(len(self.bits))
        bits = self.bits + [0] * (-len(self.bits) % 8)
        out = bytes(sum(bits[j + i] << i for i in range(8)) for j in range(0, len(bits), 8))
        self.bits = []
        return out


class BitReader:
    """Reads one chunk; ``finish`` enforces §5 (exact length, zero padding). ``open_end``: the chunk is the
    start of ``chunk`` and ends where its fields do (a plane read chunk after chunk, without offsets)."""

    def __init__(self, chunk: bytes, what: str = "chunk", open_end: bool = False):
        self.data = bytes(chunk)
        self.pos = 0
        self.what = what
        self.open_end = open_end

    def bit(self) -> int:
        if self.pos >= 8 * len(self.data):
            raise RefFormatError(f"{self.what}: overrun")
        b = (self.data[self.pos >> 3] >> (self.pos & 7)) & 1
        self.pos += 1
        return b

    def read(self, width: int) -> int:
        v = 0
        for i in range(width):
            v |= self.bit() << i
        return v

    def read_code(self, book: list[int], pairs: int = 0, major: int = 3):
        """§3.1: count zeros up to the one. Returns the group's symbol list (a pair needs its suffix bit from
        the companion field) or, for an escape, [raw symbol] (format 2.0) or None (3.0: the raw symbol leads
        the companion field)."""
        groups = book_groups(book, pairs)
        Q = len(groups)
        zeros = 0
        while self.bit() == 0:
            zeros += 1
            if zeros > Q:
                raise RefFormatError(f"{self.what}: impossible code (more than Q={Q} zeros)")
        if zeros == Q:
            return None if major >= 3 else [self.read(8)]
        return list(groups[zeros])

    def finish(self) -> None:
        if self.open_end:                               # the chunk is the bytes its fields touch
            self.data = self.data[: (self.pos + 7) // 8]
        if (self.pos + 7) // 8 != len(self.data):
            raise RefFormatError(f"{self.what}: chunk is {len(self.data)} bytes, its fields use {self.pos} bits")
        while self.pos < 8 * len(self.data):
            if self.bit():
                raise RefFormatError(f"{self.what}: non-zero padding")


# ------------------------------------------------------------------------------------------- pruning

def keep_flags(values: list[int], G: int, k: int, salience=None) -> list[bool]:
    """§2: per superblock keep the k_s most salient values, ties towards the lower index.
    Default salience is the magnitude key bits & 0x7FFF."""
    N = len(values)
    sal = [v & 0x7FFF for v in values] if salience is None else [float(x) for x in salience]
    kept = [False] * N
    for start, n in superblocks(N, G):
        ks = kept_in(k, n, G)
        idx = list(range(start, start + n))
        idx.sort(key=lambda i: (-sal[i], i))
        for i in idx[:ks]:
            kept[i] = True
    return kept


# ------------------------------------------------------------------------------------------- §2.1 draft

def draft_c1(bits: int, m: int, kept: bool) -> int:
    return bits & ((0xFFFF << (7 - m)) & 0xFFFF) if kept else 0


def draft_c2(bits: int, m: int, X: int, kept: bool) -> int:
    if not kept:
        return 0
    s, e, _ = fields(bits)
    c = m - (max(X, 1) - max(e, 1))
    if c < 0:
        return s * 0x8000
    return bits & ((0xFFFF << (7 - c)) & 0xFFFF)


def draft_c1_np(bits: np.ndarray, m: int, kept: np.ndarray) -> np.ndarray:
    """§2.1 table, C1 rows, over arrays."""
    b = bits.astype(np.int64)
    return np.where(kept, b & ((0xFFFF << (7 - m)) & 0xFFFF), 0).astype(np.uint16)


def draft_c2_np(bits: np.ndarray, m: int, X: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """§2.1 table, C2 rows, over arrays (X = the shared exponent of each value's block)."""
    b = bits.astype(np.int64)
    e = (b >> 7) & 0xFF
    c = m - (np.maximum(X, 1) - np.maximum(e, 1))
    shift = np.clip(7 - c, 0, 16)
    out = np.where(c < 0, b & 0x8000, b & ((0xFFFF << shift) & 0xFFFF))
    return np.where(kept, out, 0).astype(np.uint16)


def block_max_exponent(bits: np.ndarray, G: int) -> np.ndarray:
    """X of every value: the max exponent of its MX block (32 values; blocks never straddle superblocks
    because G is a multiple of 32; the last block may be shorter)."""
    e = ((bits.astype(np.int64) >> 7) & 0xFF).reshape(-1)
    n = len(e)
    padded = np.concatenate([e, np.zeros(-n % MX_BLOCK, dtype=np.int64)])   # 0 never raises a max
    return np.repeat(padded.reshape(-1, MX_BLOCK).max(axis=1), MX_BLOCK)[:n]


# ------------------------------------------------------------------------------------------- codebooks

def book_groups(book: list[int], pairs: int = 0) -> list[list[int]]:
    """§3.1: groups g_q of one symbol, or two where bit q of the pair mask is set, in list order."""
    groups, i, q = [], 0, 0
    while i < len(book):
        g = 2 if (pairs >> q) & 1 else 1
        if i + g > len(book):
            raise RefFormatError("pair mask runs past the symbol list")
        groups.append(list(book[i: i + g]))
        i += g
        q += 1
    if pairs >> q:
        raise RefFormatError("pair mask has bits at or above Q")
    if any(len(grp) == 2 and P in grp for grp in groups):
        raise RefFormatError("the pruned mark is in a pair group")
    return groups


def pick_groups(syms: list[int], counts: dict, escapes: int, allow_pairs: bool) -> tuple[int, int]:
    """§3.1 golden group sizes: F(i, q) over the ordered list, F(K, q) = escapes (q + 9); a single costs
    c_i (q+1), a pair (neither symbol P) (c_i + c_i+1)(q+2); ties prefer the single. (cost, pair mask)."""
    from functools import lru_cache
    K = len(syms)
    c = [counts.get(x, 0) for x in syms]

    @lru_cache(maxsize=None)
    def F(i, q):
        if i == K:
            return escapes * (q + 9), 0
        single_cost, single_mask = F(i + 1, q + 1)
        best = (c[i] * (q + 1) + single_cost, single_mask)
        if allow_pairs and i + 1 < K and P not in (syms[i], syms[i + 1]):
            pc, pm = F(i + 2, q + 1)
            if (c[i] + c[i + 1]) * (q + 2) + pc < best[0]:
                best = ((c[i] + c[i + 1]) * (q + 2) + pc, pm | (1 << q))
        return best

    return F(0, 0)


def golden_book(counts: dict, required: int | None = None, pairs: bool = False) -> tuple[list[int], int]:
    """§3.1 "Golden construction": descending count, ties to the smaller symbol; K_min = rank(P)+1 if P
    occurs, else 0; for each K in K_min..min(15, distinct) the group sizes by pick_groups (all singles
    without pairs), then the K of the smallest coded size (ties: smaller K); if rank(P) >= 15 the list is
    the 14 most frequent exponents followed by P (group sizes again by pick_groups). (symbols, pair mask)."""
    order = sorted((s for s, c in counts.items() if c > 0), key=lambda s: (-counts[s], s))
    total = sum(counts[s] for s in order)

    def cost(syms):
        return pick_groups(syms, counts, total - sum(counts[s] for s in syms), pairs)

    k_min = order.index(required) + 1 if required is not None and counts.get(required, 0) > 0 else 0
    if k_min > K_MAX:
        syms = [s for s in order if s != required][:K_MAX - 1] + [required]
        return syms, cost(syms)[1]
    best = min(range(k_min, min(K_MAX, len(order)) + 1), key=lambda K: (cost(order[:K])[0], K))
    return order[:best], cost(order[:best])[1]


def golden_codebook(counts: dict, required: int | None = None) -> list[int]:
    """Format 1.0's book (no pair groups): the symbol list of ``golden_book``."""
    return golden_book(counts, required)[0]


# ---------------------------------------------------------------------------------------------- encode

class RefEncoded:
    def __init__(self, planes, offsets, spec_book, verif_book, kept, used=None, spec_pairs=0, verif_pairs=0):
        self.planes = planes          # name -> bytes
        self.offsets = offsets        # name -> list of chunk byte offsets, length nchunks + 1
        self.used = used              # name -> list of the bits each chunk's fields use
        self.spec_book = spec_book
        self.verif_book = verif_book
        self.spec_pairs = spec_pairs  # pair masks (§3.1)
        self.verif_pairs = verif_pairs
        self.kept = kept


def _join(chunks: list[bytes]) -> tuple[bytes, list[int]]:
    off = [0]
    for c in chunks:
        off.append(off[-1] + len(c))
    return b"".join(chunks), off


def chunk_ranges(N: int, G: int, A: int) -> list[list[tuple[int, int]]]:
    """§1: chunk j holds superblocks jA .. min((j+1)A, nsb) - 1; each as (start, n_s)."""
    sbs = superblocks(N, G)
    return [sbs[j: j + A] for j in range(0, len(sbs), A)]


def encode(values, scheme: str, G: int, m: int, k: int, salience=None, books=None, A: int = 1,
           pair_codes: bool = False, pairs=(0, 0), major: int = 3) -> RefEncoded:
    """Encode a flat list of bf16 patterns per §1-§5 in format ``major`` (3.0, or the 2.0 layout).
    ``books=(spec, verif)`` fixes the codebooks, with ``pairs=(spec mask, verif mask)``; else the golden
    books, with pair groups if ``pair_codes``."""
    vals = [int(v) for v in values]
    N = len(vals)
    assert G in ALLOWED_G and 0 <= m <= 7 and 1 <= k <= G and A in CHUNK_A and A * G <= 1024
    kept = keep_flags(vals, G, k, salience)
    chunks = chunk_ranges(N, G, A)
    w = BitWriter()
    planes: dict[str, list[bytes]] = {}
    if scheme == "c1":
        sym = [fields(v)[1] if kept[i] else P for i, v in enumerate(vals)]
        if books is None:
            spec_book, sp = golden_book(Counter(sym), required=P, pairs=pair_codes)
            verif_book, vp = golden_book(Counter(fields(v)[1] for i, v in enumerate(vals) if not kept[i]),
                                         pairs=pair_codes)
        else:
            spec_book, verif_book = list(books[0]), list(books[1])
            sp, vp = pairs
        for name in ("spec.codes", "spec.signman", "verif.codes", "verif.rest"):
            planes[name] = []
        for chunk in chunks:
            idx = [i for start, n in chunk for i in range(start, start + n)]
            suffix = {}
            for i in idx:
                suffix[i] = w.write_code(spec_book, sym[i], sp, major)
            planes["spec.codes"].append(w.chunk())
            for i in idx:
                if kept[i]:
                    t, tw = suffix[i]
                    w.write(t, tw)                # the suffix bit (3.0: or an escape's raw bits) comes first
                    s, _, f = fields(vals[i])
                    w.write((s << m) | (f >> (7 - m)), 1 + m)
            planes["spec.signman"].append(w.chunk())
            for i in idx:
                if not kept[i]:
                    suffix[i] = w.write_code(verif_book, fields(vals[i])[1], vp, major)
            planes["verif.codes"].append(w.chunk())
            for i in idx:
                s, _, f = fields(vals[i])
                if kept[i]:
                    w.write(f & ((1 << (7 - m)) - 1), 7 - m)
                else:
                    w.write(*suffix[i])
                    w.write((s << 7) | f, 8)
            planes["verif.rest"].append(w.chunk())
    elif scheme == "c2":
        spec_book, sp = None, 0
        X = [0] * N
        for b in range(0, N, MX_BLOCK):
            xb = max(fields(v)[1] for v in vals[b: b + MX_BLOCK])
            for i in range(b, min(N, b + MX_BLOCK)):
                X[i] = xb
        c = [0] * N
        elem = [0] * N
        for i, v in enumerate(vals):
            s, e, f = fields(v)
            c[i] = m - (max(X[i], 1) - max(e, 1))
            sig = ((1 if e > 0 else 0) << 7) | f
            elem[i] = sig >> (7 - c[i]) if c[i] >= 0 else 0
        dz = [(not kept[i]) or elem[i] == 0 for i in range(N)]
        if books is None:
            verif_book, vp = golden_book(Counter(X[i] - fields(vals[i])[1] for i in range(N) if dz[i]),
                                         pairs=pair_codes)
        else:
            verif_book, vp = list(books[1]), pairs[1]
        for name in ("spec.mx", "verif.codes", "verif.rest"):
            planes[name] = []
        for chunk in chunks:
            for start, n in chunk if major >= 3 else ():  # 3.0: [X][keep bits][fields] of each MX block
                for b in range(start, start + n, MX_BLOCK):
                    blk = range(b, min(b + MX_BLOCK, start + n))
                    w.write(X[b], 8)
                    if k < G:
                        for i in blk:
                            w.write(1 if kept[i] else 0, 1)
                    for i in blk:
                        if kept[i]:
                            w.write((fields(vals[i])[0] << (m + 1)) | elem[i], m + 2)
            for start, n in chunk if major < 3 else ():   # 2.0: [bitmap][X][fields] of each superblock
                idx = range(start, start + n)
                if k < G:
                    for i in idx:
                        w.write(1 if kept[i] else 0, 1)
                for b in range(start, start + n, MX_BLOCK):
                    w.write(X[b], 8)
                for i in idx:
                    if kept[i]:
                        w.write((fields(vals[i])[0] << (m + 1)) | elem[i], m + 2)
            planes["spec.mx"].append(w.chunk())
            idx = [i for start, n in chunk for i in range(start, start + n)]
            suffix = {}
            for i in idx:
                if dz[i]:
                    suffix[i] = w.write_code(verif_book, X[i] - fields(vals[i])[1], vp, major)
            planes["verif.codes"].append(w.chunk())
            for i in idx:
                s, _, f = fields(vals[i])
                if dz[i]:
                    w.write(*suffix[i])
                    w.write((s << 7) | f, 8)
                else:
                    w.write(f & ((1 << (7 - c[i])) - 1), 7 - c[i])
            planes["verif.rest"].append(w.chunk())
    else:
        raise ValueError(scheme)
    joined = {name: _join(ch) for name, ch in planes.items()}
    order = list(planes)                              # chunks were ended plane by plane, chunk by chunk
    used = {name: w.used[i::len(order)] for i, name in enumerate(order)}
    return RefEncoded({n: j[0] for n, j in joined.items()}, {n: j[1] for n, j in joined.items()},
                      spec_book, verif_book, kept, used, sp, vp)


# ------------------------------------------------------------------------------------------------ §6

def indexed_planes(scheme: str, G: int, k: int, spec_pairs: int = 0, verif_pairs: int = 0) -> tuple[str, ...]:
    """Planes with a stored index (§6), including the C1 k = G exception; C1 spec.signman / verif.rest
    when their book has a pair group."""
    if scheme == "c1":
        out = ["spec.codes"]
        if spec_pairs:
            out.append("spec.signman")
        if k < G:
            out.append("verif.codes")
        if verif_pairs:
            out.append("verif.rest")
        return tuple(out)
    return ("verif.codes", "verif.rest")


def index_bytes(offsets: list[int]) -> bytes:
    nch = len(offsets) - 1
    anchors = [offsets[16 * j] for j in range((nch + ANCHOR - 1) // ANCHOR)]
    out = b"".join(struct.pack("<I", a) for a in anchors)
    out += b"".join(struct.pack("<H", offsets[c] - anchors[c // ANCHOR]) for c in range(nch))
    return out


def parse_index(data: bytes, nchunks: int, plane_len: int) -> list[int]:
    na = (nchunks + ANCHOR - 1) // ANCHOR
    if len(data) != 4 * na + 2 * nchunks:
        raise RefFormatError("index length")
    anchors = [struct.unpack_from("<I", data, 4 * j)[0] for j in range(na)]
    off = [anchors[c // ANCHOR] + struct.unpack_from("<H", data, 4 * na + 2 * c)[0] for c in range(nchunks)]
    return off + [plane_len]


def fixed_chunk_bits(plane: str, scheme: str, G: int, m: int, k: int, n_s: int) -> int:
    """§3.2 / §4 field bits of one superblock in a plane without suffix bits (a chunk: the sum)."""
    ks = kept_in(k, n_s, G)
    if plane == "spec.signman":
        return ks * (1 + m)
    if plane == "verif.rest" and scheme == "c1":
        return ks * (7 - m) + (n_s - ks) * 8
    if plane == "spec.mx":
        return (n_s if k < G else 0) + 8 * ((n_s + MX_BLOCK - 1) // MX_BLOCK) + ks * (m + 2)
    raise KeyError(plane)


def chunk_offsets(plane: str, scheme: str, N: int, G: int, m: int, k: int, stored=None, A: int = 1,
                  spec_pairs: int = 0, verif_pairs: int = 0) -> list[int]:
    chunks = chunk_ranges(N, G, A)
    if scheme == "c1" and plane == "verif.codes" and k == G:
        return [0] * (len(chunks) + 1)
    if plane in indexed_planes(scheme, G, k, spec_pairs, verif_pairs):
        return list(stored)
    off = [0]
    for chunk in chunks:
        off.append(off[-1] + (sum(fixed_chunk_bits(plane, scheme, G, m, k, n) for _, n in chunk) + 7) // 8)
    return off


# ---------------------------------------------------------------------------------------------- decode

def _pick(group: list[int] | None, reader: "BitReader") -> int:
    """A pair group's symbol from the suffix bit, the first bit of the companion field (§3.1); a format 3.0
    escape's (None) from the 8 raw bits that lead the field."""
    if group is None:
        return reader.read(8)
    return group[reader.read(1)] if len(group) == 2 else group[0]


class SequentialChunks:
    """A format 3.0 C1 field plane without an index (§6): chunk c starts at the byte after chunk c - 1's
    fields; ``done`` checks that the chunks cover the plane."""

    def __init__(self, data: bytes, name: str):
        self.data, self.name, self.start, self.c, self.cur = data, name, 0, -1, None

    def __getitem__(self, c: int) -> BitReader:
        if c != self.c:
            assert c == self.c + 1, "chunks in order"
            if self.cur is not None:
                self.start += len(self.cur.data)
            self.c, self.cur = c, BitReader(self.data[self.start:], f"{self.name}[{c}]", open_end=True)
        return self.cur

    def done(self) -> None:
        end = self.start + (len(self.cur.data) if self.cur is not None else 0)
        if end != len(self.data):
            raise RefFormatError(f"{self.name}: plane is {len(self.data)} bytes, its chunks use {end}")


def decode(planes: dict, offsets: dict, N: int, scheme: str, G: int, m: int, k: int, spec_book, verif_book,
           full: bool = True, A: int = 1, spec_pairs: int = 0, verif_pairs: int = 0,
           major: int = 3) -> tuple[list[int], list[bool]]:
    """Per-chunk decoder of §3.2 / §4 (format ``major``: 3.0, or the 2.0 layout). Returns (values, kept
    flags): the draft if ``full`` is False (speculation planes only), else the original bits. ``offsets``
    holds the indexed planes' offsets."""
    out = [0] * N
    kept_all = [False] * N
    sequential = []

    def chunks(name):
        if major >= 3 and scheme == "c1" and name in ("spec.signman", "verif.rest") and \
                name not in indexed_planes(scheme, G, k, spec_pairs, verif_pairs):
            sequential.append(SequentialChunks(planes[name], name))
            return sequential[-1]
        off = chunk_offsets(name, scheme, N, G, m, k, offsets.get(name), A, spec_pairs, verif_pairs)
        data = planes[name]
        if off[-1] != len(data):
            raise RefFormatError(f"{name}: plane is {len(data)} bytes, chunks need {off[-1]}")
        return [BitReader(data[off[c]: off[c + 1]], f"{name}[{c}]") for c in range(len(off) - 1)]

    cks = chunk_ranges(N, G, A)
    if scheme == "c1":
        cr, sr = chunks("spec.codes"), chunks("spec.signman")
        if full:
            vr, rr = chunks("verif.codes"), chunks("verif.rest")
        for c, chunk in enumerate(cks):
            start = chunk[0][0]
            n = sum(ns for _, ns in chunk)
            grp = [cr[c].read_code(spec_book, spec_pairs, major) for _ in range(n)]
            cr[c].finish()
            kept = [g != [P] for g in grp]               # P is a singleton group
            for s0, ns in chunk:
                nk = sum(kept[s0 - start: s0 - start + ns])
                if nk != kept_in(k, ns, G):
                    raise RefFormatError(f"superblock {s0 // G}: keeps {nk}, k_s = {kept_in(k, ns, G)}")
            draft = []
            for j in range(n):
                if kept[j]:
                    e = _pick(grp[j], sr[c])
                    fld = sr[c].read(1 + m)
                    draft.append(((fld >> m) << 15) | (e << 7) | ((fld & ((1 << m) - 1)) << (7 - m)))
                else:
                    draft.append(0)
            sr[c].finish()
            if full:
                pg = [vr[c].read_code(verif_book, verif_pairs, major) for j in range(n) if not kept[j]]
                vr[c].finish()
                pg.reverse()
                vals = []
                for j in range(n):
                    if kept[j]:
                        vals.append(draft[j] | rr[c].read(7 - m))
                    else:
                        e = _pick(pg.pop(), rr[c])
                        if e > 255:
                            raise RefFormatError("the verification book decodes to P")
                        r = rr[c].read(8)
                        vals.append(((r >> 7) << 15) | (e << 7) | (r & 0x7F))
                rr[c].finish()
            else:
                vals = draft
            out[start: start + n] = vals
            kept_all[start: start + n] = kept
    elif scheme == "c2":
        mr = chunks("spec.mx")
        if full:
            vr, rr = chunks("verif.codes"), chunks("verif.rest")
        for c, chunk in enumerate(cks):
            start = chunk[0][0]
            n = sum(ns for _, ns in chunk)
            kept, X, draft, cbits, dz = [], [], [], [], []
            for s0, ns in chunk:
                flds = {}
                if major >= 3:                      # per MX block: [X][keep bits][the kept values' fields]
                    kp, Xsb = [], []
                    for b in range(0, ns, MX_BLOCK):
                        nb = min(MX_BLOCK, ns - b)
                        xb = mr[c].read(8)
                        kb = [bool(mr[c].read(1)) for _ in range(nb)] if k < G else [True] * nb
                        flds.update({b + j: mr[c].read(m + 2) for j in range(nb) if kb[j]})
                        kp += kb
                        Xsb += [xb] * nb
                else:
                    kp = [bool(mr[c].read(1)) for _ in range(ns)] if k < G else [True] * ns
                if sum(kp) != kept_in(k, ns, G):
                    raise RefFormatError(f"superblock {s0 // G}: bitmap keeps {sum(kp)}")
                if major < 3:
                    Xs = [mr[c].read(8) for _ in range(0, ns, MX_BLOCK)]
                    Xsb = [Xs[j // MX_BLOCK] for j in range(ns)]
                for j in range(ns):
                    if not kp[j]:
                        draft.append(0)
                        cbits.append(None)
                        dz.append(True)
                        continue
                    fld = flds[j] if major >= 3 else mr[c].read(m + 2)
                    sgn, elem = fld >> (m + 1), fld & ((1 << (m + 1)) - 1)
                    xe = max(Xsb[j], 1)
                    if elem == 0:
                        draft.append(sgn << 15)
                        cbits.append(None)
                        dz.append(True)
                        continue
                    lz = (m + 1) - elem.bit_length()
                    E = xe - lz
                    if E >= 1:
                        draft.append((sgn << 15) | (E << 7) | (((elem << lz) & ((1 << m) - 1)) << (7 - m)))
                    else:
                        draft.append((sgn << 15) | (elem << (6 - m + xe)))
                    cbits.append(m - min(lz, xe - 1))
                    dz.append(False)
                kept += kp
                X += Xsb
            mr[c].finish()
            if full:
                dg = [vr[c].read_code(verif_book, verif_pairs, major) for j in range(n) if dz[j]]
                vr[c].finish()
                dg.reverse()
                vals = []
                for j in range(n):
                    if dz[j]:
                        e = X[j] - _pick(dg.pop(), rr[c])
                        if e < 0:
                            raise RefFormatError("negative exponent")
                        r = rr[c].read(8)
                        vals.append(((r >> 7) << 15) | (e << 7) | (r & 0x7F))
                    else:
                        vals.append(draft[j] | rr[c].read(7 - cbits[j]))
                rr[c].finish()
            else:
                vals = draft
            out[start: start + n] = vals
            kept_all[start: start + n] = kept
    else:
        raise ValueError(scheme)
    for plane in sequential:
        plane.done()
    return out, kept_all


# -------------------------------------------------------------------------------------------- §8 container

def read_container(path) -> dict:
    """Parse a .cass file per §8; returns {'major','minor','header','header_len','sections': {name: bytes},
    'raw': bytes}. Checks the header and section CRCs. No validation beyond that."""
    raw = open(path, "rb").read()
    magic, major, minor, hlen, hcrc = struct.unpack_from("<4sHHII", raw, 0)
    blob = raw[16: 16 + hlen]
    assert magic == b"CASS"
    assert zlib.crc32(blob) == hcrc
    header = json.loads(blob.decode("utf-8"))
    sections = {}
    for name in ("speculation", "verification"):
        sec = header["sections"][name]
        data = raw[sec["offset"]: sec["offset"] + sec["length"]]
        assert len(data) == sec["length"] and zlib.crc32(data) == sec["crc32"], name
        sections[name] = data
    return {"major": major, "minor": minor, "header": header, "header_len": hlen, "sections": sections,
            "raw": raw}


def rewrite_header(raw: bytes, header: dict) -> bytes:
    """A container with ``header`` replacing the original JSON (valid prefix CRC, sections moved along)."""
    _, major, minor, hlen, _ = struct.unpack_from("<4sHHII", raw, 0)
    old = json.loads(raw[16: 16 + hlen])
    old_start = old["sections"]["speculation"]["offset"]
    body = raw[old_start:]
    for _ in range(4):
        blob = json.dumps(header).encode()
        start = -(-(16 + len(blob)) // 64) * 64
        shift = start - old_start
        new = json.loads(json.dumps(header))
        for name in ("speculation", "verification"):
            sec = new.get("sections", {}).get(name) if isinstance(new.get("sections"), dict) else None
            if isinstance(sec, dict) and isinstance(sec.get("offset"), int) and not isinstance(sec["offset"], bool):
                sec["offset"] += shift
        blob = json.dumps(new).encode()
        if -(-(16 + len(blob)) // 64) * 64 == start:
            break
    return (struct.pack("<4sHHII", b"CASS", major, minor, len(blob), zlib.crc32(blob)) + blob
            + bytes(start - 16 - len(blob)) + body)


# ------------------------------------------------------------------------------------ f32 -> bf16 (RNE)

def f32_to_bf16_rne(x: float) -> int:
    """Round one float32 to the nearest bf16 (ties to even) by comparing the two candidates' exact
    values (fractions); overflow follows IEEE (the value 2^128 stands for Inf when rounding)."""
    from fractions import Fraction
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    if (u & 0x7FFFFFFF) > 0x7F800000:
        raise ValueError("NaN")
    if (u & 0x7FFFFFFF) == 0x7F800000:
        return u >> 16
    sign = u >> 31
    mag = Fraction(abs(struct.unpack("<f", struct.pack("<I", u))[0]))

    def value(b):                                   # |value| of a non-negative bf16 pattern
        e, f = (b >> 7) & 0xFF, b & 0x7F
        if e == 0xFF:
            return Fraction(2) ** 128
        if e == 0:
            return Fraction(f, 128) * Fraction(2) ** -126
        return (1 + Fraction(f, 128)) * Fraction(2) ** (e - 127)

    lo = (u >> 16) & 0x7FFF
    hi = lo + 1
    dlo, dhi = mag - value(lo), value(hi) - mag
    assert dlo >= 0 and dhi >= 0
    pick = lo if dlo < dhi else hi if dhi < dlo else (lo if lo % 2 == 0 else hi)
    return (sign << 15) | pick


def keep_flags_np(bits: np.ndarray, G: int, k: int) -> np.ndarray:
    """§2 magnitude pruning over arrays (for the 65,536-pattern tests): in every superblock, a stable sort
    by descending key (bits & 0x7FFF) keeps the first k_s, so equal keys go to the lower index."""
    key = (bits.astype(np.int64) & 0x7FFF).reshape(-1)
    kept = np.zeros(len(key), dtype=bool)
    nfull = len(key) // G
    for start, rows, n in ((0, nfull, G), (nfull * G, 1 if len(key) % G else 0, len(key) % G)):
        if rows == 0:
            continue
        blk = key[start: start + rows * n].reshape(rows, n)
        order = np.argsort(-blk, axis=1, kind="stable")[:, : kept_in(k, n, G)]
        sel = np.zeros((rows, n), dtype=bool)
        np.put_along_axis(sel, order, True, axis=1)
        kept[start: start + rows * n] = sel.reshape(-1)
    return kept
