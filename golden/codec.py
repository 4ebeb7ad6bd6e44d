"""The golden Cassandra codec (docs/FORMAT.md): vectorised numpy, no per-value Python loop.

``encode_tensor`` splits raw bf16 bits into speculation planes (what the draft reads) and verification
planes (what completes them to the original bits); ``decode_draft`` and ``decode_full`` invert it. The
KV-cache path (kv.py) and the container (container.py) reuse these functions unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, FormatError, InputError
from . import bitpack
from .codebook import Codebook, build_codebook
from .config import (BF16_MANTISSA_BITS, ESCAPE_PAYLOAD_BITS, INDEX_ANCHOR_STRIDE, MAGNITUDE_MASK, MX_BLOCK,
                     PRUNED, CodecConfig)

# Plane names per scheme: (speculation planes, verification planes); indexed = variable-size chunks.
PLANES = {
    "c1": (("spec.codes", "spec.signman"), ("verif.codes", "verif.rest")),
    "c2": (("spec.mx",), ("verif.codes", "verif.rest")),
}
INDEXED = {"c1": ("spec.codes", "verif.codes"), "c2": ("verif.codes", "verif.rest")}
# Format 3.0: the field planes whose chunk sizes, when their book has no pair (no index), follow from the config
# plus the escapes of their code planes (golden/escfield.py field_offsets)
SIZED_BY_CODES = {"c1": ("spec.signman", "verif.rest"), "c2": ()}


@dataclass
class EncodedTensor:
    """One tensor in the Cassandra format: planes of byte-aligned chunks (``chunk_superblocks`` superblocks
    each, fields back to back inside a chunk) plus the indexes of the variable-size planes.

    What an RTL harness needs: ``config.chunk_superblocks`` (A), ``nchunks``, the books with their pair
    masks (``spec_book.pairs``, ``verif_book.pairs``, ``.Q``), ``plane_offsets(enc, plane)`` (chunk byte
    offsets of any plane, length ``nchunks + 1``) and ``plane_chunks(enc, plane)`` (the chunks' bytes)."""

    format_major: ClassVar[int] = 2       # the plane layout: format 2.0 (3: golden/escfield.EscFieldTensor)
    shape: tuple[int, ...]
    config: CodecConfig
    spec_book: Codebook | None            # C1 only: exponents of kept values + the pruned mark
    verif_book: Codebook                  # C1: exponents of pruned values; C2: shared-exponent deltas
    planes: dict[str, bytes]
    offsets: dict[str, np.ndarray] = field(default_factory=dict)   # chunk byte offsets of indexed planes

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nsb(self) -> int:
        return superblock_count(self.numel, self.config.group_size)

    @property
    def chunk_superblocks(self) -> int:
        return self.config.chunk_superblocks

    @property
    def nchunks(self) -> int:
        return chunk_count(self.numel, self.config)

    def has_index(self, plane: str) -> bool:
        return has_index(plane, self.config, self.spec_book, self.verif_book)

    @property
    def indexed_planes(self) -> tuple[str, ...]:
        """The planes of this tensor that carry an index (FORMAT.md §6): depends on the books' pairs."""
        spec, verif = PLANES[self.config.scheme]
        return tuple(p for p in spec + verif if self.has_index(p))

    def index_bytes(self, plane: str) -> int:
        return index_nbytes(self.nchunks) if self.has_index(plane) else 0

    def _nbytes(self, names) -> int:
        return sum(len(self.planes[p]) + self.index_bytes(p) for p in names)

    @property
    def spec_nbytes(self) -> int:
        """Bytes the draft reads: speculation planes and their indexes."""
        return self._nbytes(PLANES[self.config.scheme][0])

    @property
    def verif_nbytes(self) -> int:
        return self._nbytes(PLANES[self.config.scheme][1])


# ----------------------------------------------------------------------------------------------- geometry

def superblock_count(numel: int, group_size: int) -> int:
    return (numel + group_size - 1) // group_size


def chunk_count(numel: int, cfg: CodecConfig) -> int:
    """Chunks of ``A = cfg.chunk_superblocks`` superblocks (the last may hold fewer)."""
    return (superblock_count(numel, cfg.group_size) + cfg.chunk_superblocks - 1) // cfg.chunk_superblocks


def superblock_sizes(numel: int, cfg: CodecConfig) -> tuple[np.ndarray, np.ndarray]:
    """(n_s, k_s): values and kept values of every superblock."""
    nsb = superblock_count(numel, cfg.group_size)
    n = np.full(nsb, cfg.group_size, dtype=np.int64)
    if nsb:
        n[-1] = numel - (nsb - 1) * cfg.group_size
    k = (cfg.keep_count * n + cfg.group_size - 1) // cfg.group_size
    return n, k


def per_chunk(per_superblock: np.ndarray, cfg: CodecConfig) -> np.ndarray:
    """Sum a per-superblock quantity over the superblocks of each chunk."""
    x = np.asarray(per_superblock, dtype=np.int64)
    A = cfg.chunk_superblocks
    if A == 1:
        return x
    return np.add.reduceat(x, np.arange(0, len(x), A)) if len(x) else x


def fixed_superblock_bits(name: str, n: np.ndarray, k: np.ndarray, cfg: CodecConfig) -> np.ndarray:
    """Bits of each superblock's fields in a fixed-size plane (FORMAT.md §3.2, §4), without suffix bits."""
    m = cfg.mantissa_bits
    if name == "spec.signman":
        return k * (1 + m)
    if name == "verif.rest" and cfg.scheme == "c1":
        return k * (BF16_MANTISSA_BITS - m) + (n - k) * (1 + BF16_MANTISSA_BITS)
    if name == "spec.mx":
        bitmap = n if cfg.prunes else 0
        return bitmap + 8 * ((n + MX_BLOCK - 1) // MX_BLOCK) + k * (m + 2)
    raise KeyError(name)


fixed_chunk_bits = fixed_superblock_bits   # format 1.0 name (one superblock per chunk)


def fixed_plane_nbytes(name: str, numel: int, cfg: CodecConfig) -> int:
    """Length of a computed-offset plane, without per-superblock arrays (cheap for any shape)."""
    nsb = superblock_count(numel, cfg.group_size)
    if nsb == 0:
        return 0
    A = cfg.chunk_superblocks
    nch = (nsb + A - 1) // A
    n_last = numel - (nsb - 1) * cfg.group_size
    full, last = (int(fixed_superblock_bits(name, np.array([n]), np.array([cfg.kept_in(n)]), cfg)[0])
                  for n in (cfg.group_size, n_last))
    last_chunk = (nsb - (nch - 1) * A - 1) * full + last
    return (nch - 1) * ((A * full + 7) >> 3) + ((last_chunk + 7) >> 3)


def fixed_offsets(name: str, numel: int, cfg: CodecConfig) -> np.ndarray:
    """Chunk byte offsets of a computed-offset plane (length nchunks + 1)."""
    n, k = superblock_sizes(numel, cfg)
    return bitpack.exclusive_cumsum((per_chunk(fixed_superblock_bits(name, n, k, cfg), cfg) + 7) >> 3)


# ------------------------------------------------------------------------------------------------ index

def has_index(plane: str, cfg: CodecConfig, spec_book: Codebook | None = None,
              verif_book: Codebook | None = None) -> bool:
    """FORMAT.md §6: variable-size planes carry an index. C1: spec.codes; verif.codes unless nothing is
    pruned (it is empty); spec.signman / verif.rest when the spec / verification book has a pair group
    (their field widths then depend on the codes). C2: verif.codes and verif.rest."""
    if cfg.scheme == "c1":
        if plane == "spec.signman":
            return spec_book is not None and spec_book.pairs != 0
        if plane == "verif.rest":
            return verif_book is not None and verif_book.pairs != 0
        if plane == "verif.codes":
            return cfg.prunes
        return plane == "spec.codes"
    return plane in INDEXED["c2"]


def index_nbytes(nchunks: int) -> int:
    return 4 * ((nchunks + INDEX_ANCHOR_STRIDE - 1) // INDEX_ANCHOR_STRIDE) + 2 * nchunks


def index_to_bytes(offsets: np.ndarray) -> bytes:
    """Two-level index: u32 anchor every 16 chunks, u16 offset of each chunk from its anchor."""
    starts = np.asarray(offsets[:-1], dtype=np.int64)
    anchors = starts[::INDEX_ANCHOR_STRIDE]
    rel = starts - np.repeat(anchors, INDEX_ANCHOR_STRIDE)[: len(starts)]
    if len(anchors) and (anchors.max() >= 2**32 or rel.max() >= 2**16):
        raise ConfigError("plane too large for the index (u32 anchors / u16 offsets)")
    return anchors.astype("<u4").tobytes() + rel.astype("<u2").tobytes()


def index_from_bytes(data: bytes, nchunks: int, plane_len: int, name: str = "index") -> np.ndarray:
    if len(data) != index_nbytes(nchunks):
        raise FormatError(f"{name}: {len(data)} bytes, expected {index_nbytes(nchunks)} for {nchunks} chunks")
    na = (nchunks + INDEX_ANCHOR_STRIDE - 1) // INDEX_ANCHOR_STRIDE
    anchors = np.frombuffer(data, dtype="<u4", count=na).astype(np.int64)
    rel = np.frombuffer(data, dtype="<u2", count=nchunks, offset=4 * na).astype(np.int64)
    if np.any(rel[::INDEX_ANCHOR_STRIDE] != 0):
        raise FormatError(f"{name}: an anchor differs from its chunk's offset (A_j != o_16j)")
    starts = np.repeat(anchors, INDEX_ANCHOR_STRIDE)[:nchunks] + rel
    offsets = np.append(starts, plane_len)
    if nchunks and (starts[0] != 0 or np.any(np.diff(offsets) < 0)):
        raise FormatError(f"{name}: offsets are not increasing from 0 to the plane length")
    return offsets


# --------------------------------------------------------------------------------------------- selection

def check_bits(bits) -> np.ndarray:
    """Raw bf16 bit patterns as a uint16 array of rank 1 or 2."""
    arr = np.asarray(bits)
    if arr.dtype != np.uint16:
        raise InputError(f"expected raw bf16 bits as uint16, got dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise InputError(f"expected a 1-D or 2-D tensor, got rank {arr.ndim} (shape {arr.shape})")
    return arr


def keep_mask(flat_bits: np.ndarray, cfg: CodecConfig, salience: np.ndarray | None = None) -> np.ndarray:
    """Which values are kept: the top k_s of each superblock by salience, ties to the lower index.

    Default salience is the magnitude key ``bits & 0x7FFF`` (monotone in |x|; NaN ranks above Inf).
    """
    N, G = len(flat_bits), cfg.group_size
    if not cfg.prunes:
        return np.ones(N, dtype=bool)
    if salience is None:
        key = (flat_bits & MAGNITUDE_MASK).astype(np.int64)
    else:
        if cfg.kind == "kv":
            raise ConfigError("the KV path prunes by magnitude only (the RTL encoder's rule)")
        key = np.asarray(salience, dtype=np.float64).reshape(-1)
        if key.shape[0] != N:
            raise InputError(f"salience has {key.shape[0]} values, tensor has {N}")
        if not np.all(np.isfinite(key)):
            raise InputError("salience must be finite")
    kept = np.zeros(N, dtype=bool)
    nfull = N // G
    for start, rows, n in ((0, nfull, G), (nfull * G, 1 if N % G else 0, N % G)):
        if rows == 0:
            continue
        k = cfg.kept_in(n)
        block = key[start: start + rows * n].reshape(rows, n)
        if salience is None:
            # Integer keys: make them unique with the tie rule folded in, then one partition per row.
            composite = block * n + (n - 1 - np.arange(n))
            kth = np.partition(composite, n - k, axis=1)[:, n - k: n - k + 1]
            sel = composite >= kth
        else:
            order = np.argsort(-block, axis=1, kind="stable")[:, :k]
            sel = np.zeros_like(block, dtype=bool)
            np.put_along_axis(sel, order, True, axis=1)
        kept[start: start + rows * n] = sel.reshape(-1)
    return kept


# ------------------------------------------------------------------------------------------------ encode

def _format2(cfg: CodecConfig, books=()) -> bool:
    """True if a tensor uses a format 2.0 feature: chunks of several superblocks or pair groups."""
    return cfg.chunk_superblocks > 1 or cfg.pair_codes or any(b is not None and b.pairs for b in books)


def _use_native(impl: str, cfg: CodecConfig | None = None, books=()) -> bool:
    """The single dispatch point: "auto" | "numpy" | "native" (env CASSANDRA_RTL_CODEC overrides "auto").
    Tensors with format 2.0 features go to numpy unless the compiled path declares it reads and writes
    them (``native.FORMAT2 = True``)."""
    if impl == "numpy":
        return False
    from . import native
    if native.resolve(impl) != "native":
        return False
    return not (cfg is not None and _format2(cfg, books) and not getattr(native, "FORMAT2", False))


def _fields(bits):
    return (bits >> 15).astype(np.int64), ((bits >> 7) & 0xFF).astype(np.int64), (bits & 0x7F).astype(np.int64)


def c2_draft_fields(e, mant, X, m):
    """Cassandra-2: per value, the mantissa bits the draft keeps (c, may be < 0) and the element field."""
    xeff = np.maximum(X, 1)
    c = m - (xeff - np.maximum(e, 1))
    sig = ((e > 0).astype(np.int64) << 7) | mant
    elem = np.where(c >= 0, sig >> np.clip(7 - c, 0, 7), 0)
    return c, elem


def encode_tensor(bits, cfg: CodecConfig, salience=None, books: tuple[Codebook | None, Codebook] | None = None,
                  impl: str = "auto") -> EncodedTensor:
    """Split a tensor of raw bf16 bits. ``books`` = fixed (spec_book, verif_book), as for the KV cache.
    ``impl``: "auto" (the compiled twin in native.py if it builds), "numpy" (this code) or "native"."""
    if _use_native(impl, cfg, books or ()):
        from . import native
        return native.encode_tensor(bits, cfg, salience, books)
    arr = check_bits(bits)
    flat = arr.reshape(-1)
    N, G = len(flat), cfg.group_size
    nch = chunk_count(N, cfg)
    sb = np.arange(N, dtype=np.int64) // G
    ch = np.arange(N, dtype=np.int64) // cfg.chunk_values
    kept = keep_mask(flat, cfg, salience)
    sign, e, mant = _fields(flat)
    m = cfg.mantissa_bits
    planes, offsets = {}, {}

    n_s, k_s = superblock_sizes(N, cfg)

    def code_plane(name, symbols, seg, book):
        """The codes of ``symbols`` (chunk ``seg``); returns each code's suffix bit and its width (0/1)."""
        groups = book.group_table()[symbols]
        escape = groups == book.Q
        if escape.any() and (symbols[escape] > 0xFF).any():
            raise ConfigError("the pruned mark must be in the speculation codebook; it cannot be escaped")
        planes[name], offsets[name] = bitpack.pack_unary(seg, groups, escape, symbols, book.Q, ESCAPE_PAYLOAD_BITS,
                                                         nch)
        return book.suffix_table()[symbols], book.pair_bits()[groups]

    def field_plane(name, seg, widths, values, indexed):
        """A plane of fields in stream order; ``indexed``: variable widths, offsets stored (else computed)."""
        if indexed:
            planes[name], offsets[name] = bitpack.pack_chunks(seg, widths, values, nch)
        else:
            per_sb = fixed_superblock_bits(name, n_s, k_s, cfg)
            planes[name] = bitpack.pack_fixed([(widths, values, per_chunk(per_sb, cfg))])

    if cfg.scheme == "c1":
        sym = np.where(kept, e, PRUNED)
        if books is None:
            spec_book = build_codebook(np.bincount(sym, minlength=PRUNED + 1), required=PRUNED, pairs=cfg.pair_codes)
            verif_book = build_codebook(np.bincount(e[~kept], minlength=PRUNED + 1), pairs=cfg.pair_codes)
        else:
            spec_book, verif_book = books
            if spec_book is None:
                raise ConfigError("a C1 tensor needs a speculation codebook")
            if cfg.prunes and PRUNED not in spec_book.symbols:
                raise ConfigError("the speculation codebook lacks the pruned mark but the config prunes")
        t, tw = code_plane("spec.codes", sym, ch, spec_book)
        # spec.signman field of a kept value: [suffix bit, if its group is a pair][(s << m) | top m mantissa bits]
        tw, t = tw[kept], t[kept]
        field_plane("spec.signman", ch[kept], 1 + m + tw, t | (((sign[kept] << m) | (mant[kept] >> (7 - m))) << tw),
                    spec_book.pairs != 0)
        t, tw = code_plane("verif.codes", e[~kept], ch[~kept], verif_book)
        rest_w = np.where(kept, 7 - m, 8)
        rest_v = np.where(kept, mant & ((1 << (7 - m)) - 1), (sign << 7) | mant)
        rest_w[~kept] += tw
        rest_v[~kept] = t | (rest_v[~kept] << tw)
        field_plane("verif.rest", ch, rest_w, rest_v, verif_book.pairs != 0)
    else:
        spec_book = None
        mx = np.arange(N, dtype=np.int64) // MX_BLOCK
        X = np.maximum.reduceat(e, np.arange(0, N, MX_BLOCK)) if N else np.zeros(0, np.int64)
        Xv = X[mx]
        c, elem = c2_draft_fields(e, mant, Xv, m)
        draft_zero = ~kept | (elem == 0)
        delta = Xv - e
        if books is None:
            verif_book = build_codebook(np.bincount(delta[draft_zero], minlength=PRUNED + 1), pairs=cfg.pair_codes)
        else:
            verif_book = books[1]
        # spec.mx, per superblock: [keep bitmap (if pruning)] [X of each MX block] [sign|element of each kept
        # value]; the superblocks of a chunk back to back. Fields in stream order by a stable sort on
        # (superblock, section).
        mxsb = np.arange(0, N, MX_BLOCK, dtype=np.int64) // G
        key = [mxsb * 3 + 1, sb[kept] * 3 + 2]
        widths = [np.full(len(X), 8), np.full(int(kept.sum()), m + 2)]
        values = [X, (sign[kept] << (m + 1)) | elem[kept]]
        if cfg.prunes:
            key.insert(0, sb * 3)
            widths.insert(0, np.ones(N, np.int64))
            values.insert(0, kept.astype(np.int64))
        if cfg.chunk_superblocks == 1:
            sections = [(w, v, bits_) for w, v, bits_ in zip(widths, values, (
                [n_s] if cfg.prunes else []) + [8 * ((n_s + MX_BLOCK - 1) // MX_BLOCK), k_s * (m + 2)])]
            planes["spec.mx"] = bitpack.pack_fixed(sections)
        else:
            key = np.concatenate(key)
            order = np.argsort(key, kind="stable")
            planes["spec.mx"], _ = bitpack.pack_chunks((key[order] // 3) // cfg.chunk_superblocks,
                                                       np.concatenate(widths)[order], np.concatenate(values)[order], nch)
        t, tw = code_plane("verif.codes", delta[draft_zero], ch[draft_zero], verif_book)
        rest_w = np.where(draft_zero, 8, 7 - np.clip(c, 0, 7))
        rest_v = np.where(draft_zero, (sign << 7) | mant, mant & ((1 << rest_w) - 1))
        rest_w[draft_zero] += tw
        rest_v[draft_zero] = t | (rest_v[draft_zero] << tw)
        planes["verif.rest"], offsets["verif.rest"] = bitpack.pack_chunks(ch, rest_w, rest_v, nch)
    return EncodedTensor(tuple(arr.shape), cfg, spec_book, verif_book, planes, offsets)


# ------------------------------------------------------------------------------------------------ decode

def decode_codes(plane: bytes, offsets: np.ndarray, counts: np.ndarray, book: Codebook, name: str
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Decode ``counts[c]`` unary group codes from every chunk ``c``; returns, in order, each code's group
    ``q`` (``Q`` for an escape) and the escapes' raw 8-bit symbols (0 elsewhere). ``book.resolve`` turns
    them into symbols once the suffix bits are read from the companion plane.

    Fast path: in a chunk without escapes every '1' bit ends a code, so all boundaries come from one
    ``flatnonzero`` (the vector twin of the hardware's parallel zero counter). Chunks that may hold an
    escape (a zero run of length Q) or that look malformed take an exact step-by-step path, vectorised
    across chunks, which also produces the precise error.
    """
    K = book.Q                               # the escape's zero count
    counts = np.asarray(counts, dtype=np.int64)
    nsb = len(counts)
    total = int(counts.sum())
    out = np.empty(total, dtype=np.int64)
    raw = np.zeros(total, dtype=np.int64)
    out_start = bitpack.exclusive_cumsum(counts)
    offsets = np.asarray(offsets, dtype=np.int64)
    if len(offsets) != nsb + 1 or offsets[-1] != len(plane) or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
        raise FormatError(f"{name}: chunk offsets do not increase from 0 to the plane length")
    chunk_bits = np.diff(offsets) * 8
    ones = np.flatnonzero(np.unpackbits(np.frombuffer(plane, dtype=np.uint8), bitorder="little"))
    # Chunk of every one: a per-byte owner table is cheaper than a binary search per one.
    owner = np.repeat(np.arange(nsb, dtype=np.int32), np.diff(offsets))[ones >> 3] if len(ones) else ones
    nones = np.bincount(owner, minlength=nsb)[:nsb]
    first = bitpack.exclusive_cumsum(nones)[:-1]
    prev = np.empty_like(ones)
    if len(ones):
        prev[1:] = ones[:-1] + 1
        prev[first[nones > 0]] = offsets[:-1][nones > 0] * 8
    runs = ones - prev
    max_run = np.zeros(nsb, dtype=np.int64)
    if len(ones):
        np.maximum.at(max_run, owner, runs)
    last_one = np.full(nsb, -1, dtype=np.int64)
    if len(ones):
        last_one[owner] = ones               # later (larger) positions overwrite earlier ones
    used = np.where(nones > 0, last_one + 1 - offsets[:-1] * 8, 0)
    clean = (nones == counts) & (max_run < K) & (((used + 7) >> 3) * 8 == chunk_bits)
    if clean.any():
        sel = clean[owner]
        # Codes of clean chunks are consecutive in `ones`, in chunk order, exactly like `out`.
        dest = np.repeat(out_start[:-1][clean], counts[clean]) + (
            np.arange(int(counts[clean].sum())) - np.repeat(bitpack.exclusive_cumsum(counts[clean])[:-1], counts[clean]))
        out[dest] = runs[sel]
    dirty = np.flatnonzero(~clean & (counts >= 0))
    dirty = dirty[(counts[dirty] > 0) | (chunk_bits[dirty] > 0)]
    if len(dirty):
        _decode_codes_with_escapes(plane, ones, offsets, counts, K, name, dirty, out, raw, out_start)
    return out, raw


ESCAPE_LOOKAHEAD = 16   # codes examined per chunk and round: bounds the work when escapes are dense


def _decode_codes_with_escapes(plane, ones, offsets, counts, K, name, chunks, out, raw_out, out_start):
    """Exact decode of the given chunks in rounds, vectorised over chunks: each round reads up to
    ESCAPE_LOOKAHEAD codes of every chunk from the ones (like the fast path) and stops at the chunk's next
    escape, whose 8 raw bits it then skips. Rounds ~ escapes per chunk + G / ESCAPE_LOOKAHEAD."""
    bitarr = np.unpackbits(np.frombuffer(plane, dtype=np.uint8), bitorder="little")
    start = offsets[:-1][chunks] * 8
    end = offsets[1:][chunks] * 8
    pos = start.copy()                                    # where each chunk's next code starts
    done = np.zeros(len(chunks), dtype=np.int64)          # codes decoded so far
    payload_weights = 1 << np.arange(ESCAPE_PAYLOAD_BITS)
    never = np.iinfo(np.int64).max
    act = np.flatnonzero(counts[chunks] > 0)
    if len(act) and not len(ones):      # every code holds a '1': codes are due but the plane has none
        s = int(chunks[act[0]])
        raise FormatError(f"{name}: chunk {s} needs {int(counts[s])} codes but the plane holds none "
                          "(the planes disagree)")
    while len(act):
        rem = counts[chunks[act]] - done[act]
        take = np.minimum(rem, ESCAPE_LOOKAHEAD)
        i0 = np.searchsorted(ones, pos[act])
        seg = np.repeat(np.arange(len(act)), take)
        t = np.arange(int(take.sum())) - np.repeat(bitpack.exclusive_cumsum(take)[:-1], take)
        idx = i0[seg] + t
        p = np.where(idx < len(ones), ones[np.minimum(idx, len(ones) - 1)], never)
        prevp = np.where(t == 0, pos[act][seg], np.r_[0, p[:-1]] + 1)
        run = p - prevp
        stop = (run >= K) | (p >= end[act][seg])
        first_hit = np.full(len(act), never)
        hit = np.flatnonzero(stop)
        np.minimum.at(first_hit, seg[hit], t[hit])
        first = np.where(first_hit == never, take, first_hit)      # codes decoded before a stop
        ok = t < first[seg]
        out[out_start[chunks[act][seg[ok]]] + done[act][seg[ok]] + t[ok]] = run[ok]
        last_ok = np.flatnonzero(ok & (t == first[seg] - 1))
        pos[act[seg[last_ok]]] = p[last_ok] + 1
        done[act] += first
        at = np.flatnonzero(~ok & (t == first[seg]))                # the stopping code, where there is one
        if len(at):
            a = act[seg[at]]
            bad = (p[at] >= end[a]) | (run[at] != K) | (p[at] + ESCAPE_PAYLOAD_BITS >= end[a])
            if bad.any():
                s_bad = int(chunks[a[np.flatnonzero(bad)[0]]])
                raise FormatError(f"{name}: impossible code or overrun in chunk {s_bad}")
            raw = bitarr[p[at][:, None] + 1 + np.arange(ESCAPE_PAYLOAD_BITS)] @ payload_weights
            out[out_start[chunks[a]] + done[a]] = K
            raw_out[out_start[chunks[a]] + done[a]] = raw
            done[a] += 1
            pos[a] = p[at] + 1 + ESCAPE_PAYLOAD_BITS
        act = act[done[act] < counts[chunks[act]]]
    used = pos - start
    lengths = np.diff(offsets)[chunks]
    need = (used + 7) >> 3
    bad = np.flatnonzero(need != lengths)
    if len(bad):
        s = int(chunks[bad[0]])
        what = "overruns" if need[bad[0]] > lengths[bad[0]] else "is shorter than"
        raise FormatError(f"{name}: the codes of chunk {s} {what} its declared length "
                          f"({int(lengths[bad[0]])} bytes, codes need {int(need[bad[0]])})")
    bitpack.check_zero_padding(bitpack.words_of(plane), offsets[:-1][chunks], used, name, chunks)


def _plane(enc, name):
    try:
        return enc.planes[name]
    except KeyError:
        raise FormatError(f"plane {name} missing") from None


def _plane_offsets(enc: EncodedTensor, name: str, stored: bool = True) -> np.ndarray:
    """Chunk byte offsets (length nchunks + 1) of plane ``name``: stored (indexed planes) or computed from
    the config (fixed planes, whose length and zero padding are checked here; format 3.0's unpaired C1 field
    planes from their code planes' escapes). A format 3.0 tensor from an encoder holds every plane's offsets,
    the stream's chunks as written: with ``stored`` they are used (what a harness frames, even under a
    deliberately wrong config); the golden decoders pass ``stored=False`` and find the chunks as a reader does."""
    cfg, nch = enc.config, enc.nchunks
    data = _plane(enc, name)
    kept_offsets = stored and enc.format_major == 3 and name in enc.offsets
    if enc.has_index(name) or kept_offsets:
        off = enc.offsets.get(name)
        if off is None:
            raise FormatError(f"{name}: index missing")
        off = np.asarray(off, dtype=np.int64)
        if off.ndim != 1 or len(off) != nch + 1 or off[-1] != len(data):
            raise FormatError(f"{name}: index does not cover the plane")
        if off[0] != 0 or np.any(np.diff(off) < 0):
            raise FormatError(f"{name}: chunk offsets do not increase from 0 to the plane length")
        return off
    if enc.format_major == 3 and name in SIZED_BY_CODES[cfg.scheme]:
        from .escfield import field_offsets     # 3.0: the code plane's escapes size an unpaired field plane
        off = field_offsets(enc, name)
        if off[-1] != len(data):
            raise FormatError(f"{name}: {len(data)} bytes, its code plane and the config imply {int(off[-1])}")
        return off
    if name in INDEXED[cfg.scheme]:               # C1 verif.codes when nothing is pruned: empty, no index
        if len(data):
            raise FormatError(f"{name}: must be empty when nothing is pruned")
        return np.zeros(nch + 1, dtype=np.int64)
    n, k = superblock_sizes(enc.numel, cfg)
    used = per_chunk(fixed_superblock_bits(name, n, k, cfg), cfg)
    off = bitpack.exclusive_cumsum((used + 7) >> 3)
    if off[-1] != len(data):
        raise FormatError(f"{name}: {len(data)} bytes, the config implies {int(off[-1])}")
    bitpack.check_zero_padding(bitpack.words_of(data), off[:-1], used, name, np.arange(nch))
    return off


def _read_plane(enc: EncodedTensor, name: str, seg: np.ndarray, widths: np.ndarray,
                off: np.ndarray | None = None) -> np.ndarray:
    """The fields of plane ``name`` in stream order (chunk ``seg`` of each, non-decreasing), after checking
    that every chunk is exactly ``ceil(bits / 8)`` bytes with zero padding (FORMAT.md §5). ``off``: the
    chunk offsets when the reader finds them otherwise than ``plane_offsets`` (golden/escfield.py)."""
    off = _plane_offsets(enc, name) if off is None else off
    nch = enc.nchunks
    widths = np.asarray(widths, dtype=np.int64)
    within, seg_bits = bitpack.segment_offsets(seg, widths, nch)
    bitpack.check_chunk_lengths(off, seg_bits, name)
    words = bitpack.words_of(_plane(enc, name))
    bitpack.check_zero_padding(words, off[:-1], seg_bits, name, np.arange(nch))
    return bitpack.read_fields(words, off[:-1][seg] * 8 + within, widths).astype(np.int64)


def _split_suffix(fields: np.ndarray, tw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(suffix bit, rest of the field) of companion fields whose first ``tw`` (0/1) bits are the suffix."""
    return fields & tw, fields >> tw


def _geometry(enc: EncodedTensor):
    cfg, N = enc.config, enc.numel
    n, k = superblock_sizes(N, cfg)
    idx = np.arange(N, dtype=np.int64)
    return n, k, idx // cfg.group_size, idx // cfg.chunk_values


def _decode_c1_spec(enc: EncodedTensor):
    cfg, N, nsb = enc.config, enc.numel, enc.nsb
    m = cfg.mantissa_bits
    n, k, sb, ch = _geometry(enc)
    book = enc.spec_book
    if book is None:
        raise FormatError("C1 tensor without a speculation codebook")
    groups, raw = decode_codes(_plane(enc, "spec.codes"), _plane_offsets(enc, "spec.codes"), per_chunk(n, cfg),
                               book, "spec.codes")
    if PRUNED in book.symbols:                        # P is a singleton group: its code alone marks "pruned"
        kept = groups != book.group_table()[PRUNED]
    else:
        kept = np.ones(N, dtype=bool)
    nk = np.bincount(sb[kept], minlength=nsb)
    bad = np.flatnonzero(nk != k)
    if len(bad):
        raise FormatError(f"spec.codes: superblock {int(bad[0])} keeps {int(nk[bad[0]])} values, config says {int(k[bad[0]])}")
    gk = groups[kept]
    tw = book.pair_bits()[gk]
    t, f = _split_suffix(_read_plane(enc, "spec.signman", ch[kept], 1 + m + tw), tw)
    expo = book.resolve(gk, t, raw[kept])
    draft = np.zeros(N, dtype=np.int64)
    draft[kept] = ((f >> m) << 15) | (expo << 7) | ((f & ((1 << m) - 1)) << (7 - m))
    sym = np.full(N, PRUNED, dtype=np.int64)
    sym[kept] = expo
    return draft, kept, sym, sb, n, k, ch          # index 2 (the spec.codes symbols) is read by tb/decoder


def _decode_c2_spec(enc: EncodedTensor):
    cfg, N, nsb = enc.config, enc.numel, enc.nsb
    m, G, A = cfg.mantissa_bits, cfg.group_size, cfg.chunk_superblocks
    n, k, sb, ch = _geometry(enc)
    off = _plane_offsets(enc, "spec.mx")
    words = bitpack.words_of(_plane(enc, "spec.mx"))
    # Bit position of each superblock's first field: its chunk's start, then the earlier superblocks of the chunk.
    sb_bits = fixed_superblock_bits("spec.mx", n, k, cfg)
    cs = bitpack.exclusive_cumsum(sb_bits)
    sbi = np.arange(nsb, dtype=np.int64)
    sb_base = off[:-1][sbi // A] * 8 + cs[:-1] - cs[(sbi // A) * A]
    base = sb_base[sb]
    pos_in = np.arange(N, dtype=np.int64) - sb * G
    if cfg.prunes:
        kept = bitpack.read_fields(words, base + pos_in, 1).astype(bool)
        nk = np.bincount(sb[kept], minlength=nsb)
        bad = np.flatnonzero(nk != k)
        if len(bad):
            raise FormatError(f"spec.mx: superblock {int(bad[0])} bitmap keeps {int(nk[bad[0]])}, config says {int(k[bad[0]])}")
        bitmap_bits = n
    else:
        kept = np.ones(N, dtype=bool)
        bitmap_bits = np.zeros(nsb, dtype=np.int64)
    mxstart = np.arange(0, N, MX_BLOCK)
    msb = mxstart // G
    X = bitpack.read_fields(words, sb_base[msb] + bitmap_bits[msb] + 8 * ((mxstart - msb * G) // MX_BLOCK), 8
                            ).astype(np.int64)
    Xv = X[np.arange(N) // MX_BLOCK]
    nmx_sb = (n + MX_BLOCK - 1) // MX_BLOCK
    sk = sb[kept]
    fpos = sb_base[sk] + bitmap_bits[sk] + 8 * nmx_sb[sk] + _rank_in_segment(kept, sb, nsb) * (m + 2)
    f = bitpack.read_fields(words, fpos, m + 2).astype(np.int64)
    draft, nz, c = c2_draft_values(kept, Xv, f, m)
    return draft, kept, nz, Xv, c, sb, ch


def c2_draft_values(kept: np.ndarray, Xv: np.ndarray, f: np.ndarray, m: int):
    """Cassandra-2 draft bf16 values (FORMAT.md section 4) from the keep flags, every value's block exponent
    ``Xv`` and the kept values' ``(s << (m+1)) | elem`` fields in order: (draft, nz = kept with a non-zero
    element, c = the mantissa bits the draft holds)."""
    N = len(kept)
    sign = np.zeros(N, dtype=np.int64)
    elem = np.zeros(N, dtype=np.int64)
    sign[kept], elem[kept] = f >> (m + 1), f & ((1 << (m + 1)) - 1)
    xeff = np.maximum(Xv, 1)
    bitlen = np.zeros(N, dtype=np.int64)
    nz = elem > 0
    bitlen[nz] = np.floor(np.log2(elem[nz])).astype(np.int64) + 1
    lz = (m + 1) - bitlen
    E = xeff - lz
    normal = nz & (E >= 1)
    sub = nz & ~normal
    draft = np.where(kept, sign << 15, 0)
    mant_n = ((elem << np.clip(lz, 0, 8)) & ((1 << m) - 1)) << (7 - m)
    draft = np.where(normal, draft | (E << 7) | mant_n, draft)
    draft = np.where(sub, draft | (elem << np.clip(6 - m + xeff, 0, 63)), draft)
    c = m - np.minimum(lz, xeff - 1)
    return draft, nz, c


def _rank_in_segment(mask: np.ndarray, seg: np.ndarray, nseg: int) -> np.ndarray:
    """For each True entry of ``mask``: its position among the True entries of its segment."""
    idx = np.flatnonzero(mask)
    cnt = np.bincount(seg[idx], minlength=nseg)
    return np.arange(len(idx)) - bitpack.exclusive_cumsum(cnt)[:-1][seg[idx]]


def _native_ok(enc: EncodedTensor, impl: str) -> bool:
    return _use_native(impl, enc.config, (enc.spec_book, enc.verif_book))


def decode_draft(enc: EncodedTensor, impl: str = "auto") -> np.ndarray:
    """The draft's view: uint16 bf16 bits, pruned values 0, cut mantissa bits 0 (reads speculation only).
    Either layout: a format 3.0 tensor goes to golden/escfield.py."""
    if enc.format_major == 3:
        from .escfield import decode
        return decode(enc, False, impl)
    if _native_ok(enc, impl):
        from . import native
        return native.decode_draft(enc)
    if enc.config.scheme == "c1":
        draft = _decode_c1_spec(enc)[0]
    else:
        draft = _decode_c2_spec(enc)[0]
    return draft.astype(np.uint16).reshape(enc.shape)


def decode_full(enc: EncodedTensor, impl: str = "auto") -> np.ndarray:
    """Speculation + verification -> the original bf16 bits, exactly (either layout, as ``decode_draft``)."""
    if enc.format_major == 3:
        from .escfield import decode
        return decode(enc, True, impl)
    if _native_ok(enc, impl):
        from . import native
        return native.decode_full(enc)
    cfg, nch, N = enc.config, enc.nchunks, enc.numel
    m = cfg.mantissa_bits
    book = enc.verif_book
    if cfg.scheme == "c1":
        draft, kept, _, sb, n, k, ch = _decode_c1_spec(enc)
        counts = per_chunk(n - k, cfg)
        widths = np.where(kept, 7 - m, 8)
        top = kept                                     # the draft holds the value's top bits
    else:
        draft, kept, nz, Xv, c, sb, ch = _decode_c2_spec(enc)
        top = nz
        counts = np.bincount(ch[~top], minlength=nch)
        widths = np.where(top, 7 - np.clip(c, 0, 7), 8)
    groups, raw = decode_codes(_plane(enc, "verif.codes"), _plane_offsets(enc, "verif.codes"), counts, book,
                               "verif.codes")
    low = ~top                                         # values whose exponent is in verif.codes
    tw = np.zeros(N, dtype=np.int64)
    tw[low] = book.pair_bits()[groups]
    rest = _read_plane(enc, "verif.rest", ch, widths + tw)
    t, r = _split_suffix(rest[low], tw[low])
    sym = book.resolve(groups, t, raw)
    if cfg.scheme == "c1":
        pe = sym
    else:
        pe = Xv[low] - sym
        if np.any(pe < 0):
            raise FormatError("verif.codes: an exponent delta exceeds its block's shared exponent")
    if np.any(pe > 0xFF):
        raise FormatError("verif.codes: the verification book decodes to the pruned mark, not an exponent")
    out = np.where(top, draft | rest, 0)
    out[low] = ((r >> 7) << 15) | (pe << 7) | (r & 0x7F)
    return out.astype(np.uint16).reshape(enc.shape)


# -------------------------------------------------------------------------------------------- per-chunk view

def plane_offsets(enc: EncodedTensor, name: str) -> np.ndarray:
    """Byte offsets (length nchunks + 1) of every chunk of plane ``name``, indexed or computed. A chunk is
    ``chunk_superblocks`` superblocks (one superblock in format 1.0)."""
    return _plane_offsets(enc, name)


def plane_chunks(enc: EncodedTensor, name: str) -> list[bytes]:
    """The bytes of every chunk of plane ``name``: what a DMA channel hands the RTL per chunk."""
    off = _plane_offsets(enc, name)
    data = _plane(enc, name)
    return [data[off[c]: off[c + 1]] for c in range(enc.nchunks)]


superblock_chunks = plane_chunks   # format 1.0 name: with chunk_superblocks = 1 a chunk is one superblock


def chunk_superblock_range(enc: EncodedTensor, c: int) -> tuple[int, int]:
    """Superblocks ``start..stop-1`` that chunk ``c`` holds."""
    A = enc.config.chunk_superblocks
    return c * A, min((c + 1) * A, enc.nsb)


def slice_chunks(enc: EncodedTensor, start: int, stop: int) -> EncodedTensor:
    """Chunks ``start..stop-1`` of a tensor as a 1-D tensor of their values, found through the index
    (what each of several parallel decoders would be handed). Decoding the slices and concatenating them
    gives the tensor's flattened decode."""
    nch, V = enc.nchunks, enc.config.chunk_values
    if not 0 <= start <= stop <= nch:
        raise ConfigError(f"chunk range {start}..{stop} outside 0..{nch}")
    numel = min(stop * V, enc.numel) - start * V
    planes, offsets = {}, {}
    for name, data in enc.planes.items():
        off = _plane_offsets(enc, name)
        planes[name] = data[off[start]: off[stop]]
        if name in enc.offsets:
            offsets[name] = np.asarray(off[start: stop + 1]) - off[start]
    return type(enc)((max(numel, 0),), enc.config, enc.spec_book, enc.verif_book, planes, offsets)


def slice_superblocks(enc: EncodedTensor, start: int, stop: int) -> EncodedTensor:
    """Superblocks ``start..stop-1`` (both on chunk boundaries: multiples of ``chunk_superblocks``, or
    ``stop`` = nsb) as a 1-D tensor; see ``slice_chunks``."""
    nsb, A = enc.nsb, enc.config.chunk_superblocks
    if not 0 <= start <= stop <= nsb:
        raise ConfigError(f"superblock range {start}..{stop} outside 0..{nsb}")
    if start % A or (stop % A and stop != nsb):
        raise ConfigError(f"superblock range {start}..{stop} does not start and end on chunk boundaries "
                          f"({A} superblocks per chunk)")
    return slice_chunks(enc, start // A, -(-stop // A))


def decode_parallel(enc: EncodedTensor, draft: bool = False, workers: int = 2) -> np.ndarray:
    """Decode with ``workers`` threads, each on its own range of chunks (numpy releases the GIL in
    its kernels). Same result as ``decode_draft`` / ``decode_full``."""
    fn = decode_draft if draft else decode_full
    if workers <= 1 or enc.nchunks < 2 * workers:
        return fn(enc)
    from concurrent.futures import ThreadPoolExecutor

    bounds = np.linspace(0, enc.nchunks, workers + 1).astype(int)
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(lambda r: fn(slice_chunks(enc, r[0], r[1])), zip(bounds[:-1], bounds[1:])))
    return np.concatenate(parts).reshape(enc.shape)
