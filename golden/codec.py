"""The golden Cassandra codec (docs/FORMAT.md): vectorised numpy, no per-value Python loop.

``encode_tensor`` splits raw bf16 bits into speculation planes (what the draft reads) and verification
planes (what completes them to the original bits); ``decode_draft`` and ``decode_full`` invert it. The
KV-cache path (kv.py) and the container (container.py) reuse these functions unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class EncodedTensor:
    """One tensor in the Cassandra format: planes of byte-aligned superblock chunks plus their indexes."""

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

    def index_bytes(self, plane: str) -> int:
        return index_nbytes(self.nsb) if has_index(plane, self.config) else 0

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


def superblock_sizes(numel: int, cfg: CodecConfig) -> tuple[np.ndarray, np.ndarray]:
    """(n_s, k_s): values and kept values of every superblock."""
    nsb = superblock_count(numel, cfg.group_size)
    n = np.full(nsb, cfg.group_size, dtype=np.int64)
    if nsb:
        n[-1] = numel - (nsb - 1) * cfg.group_size
    k = (cfg.keep_count * n + cfg.group_size - 1) // cfg.group_size
    return n, k


def fixed_chunk_bits(name: str, n: np.ndarray, k: np.ndarray, cfg: CodecConfig) -> np.ndarray:
    """Bits of each superblock chunk of a fixed-size plane (its offsets need no index)."""
    m = cfg.mantissa_bits
    if name == "spec.signman":
        return k * (1 + m)
    if name == "verif.rest" and cfg.scheme == "c1":
        return k * (BF16_MANTISSA_BITS - m) + (n - k) * (1 + BF16_MANTISSA_BITS)
    if name == "spec.mx":
        bitmap = n if cfg.prunes else 0
        return bitmap + 8 * ((n + MX_BLOCK - 1) // MX_BLOCK) + k * (m + 2)
    raise KeyError(name)


def fixed_plane_nbytes(name: str, numel: int, cfg: CodecConfig) -> int:
    """Length of a fixed-size plane, computed without per-superblock arrays (cheap for any shape)."""
    nsb = superblock_count(numel, cfg.group_size)
    if nsb == 0:
        return 0
    n_last = numel - (nsb - 1) * cfg.group_size
    full, last = (int(fixed_chunk_bits(name, np.array([n]), np.array([cfg.kept_in(n)]), cfg)[0])
                  for n in (cfg.group_size, n_last))
    return (nsb - 1) * ((full + 7) >> 3) + ((last + 7) >> 3)


def fixed_offsets(name: str, numel: int, cfg: CodecConfig) -> np.ndarray:
    n, k = superblock_sizes(numel, cfg)
    return bitpack.exclusive_cumsum((fixed_chunk_bits(name, n, k, cfg) + 7) >> 3)


# ------------------------------------------------------------------------------------------------ index

def has_index(plane: str, cfg: CodecConfig) -> bool:
    """Variable-size planes carry an index, except C1's verif.codes when nothing is pruned (it is empty)."""
    if plane not in INDEXED[cfg.scheme]:
        return False
    return not (cfg.scheme == "c1" and plane == "verif.codes" and not cfg.prunes)


def index_nbytes(nsb: int) -> int:
    return 4 * ((nsb + INDEX_ANCHOR_STRIDE - 1) // INDEX_ANCHOR_STRIDE) + 2 * nsb


def index_to_bytes(offsets: np.ndarray) -> bytes:
    """Two-level index: u32 anchor every 16 superblocks, u16 offset of each superblock from its anchor."""
    starts = np.asarray(offsets[:-1], dtype=np.int64)
    anchors = starts[::INDEX_ANCHOR_STRIDE]
    rel = starts - np.repeat(anchors, INDEX_ANCHOR_STRIDE)[: len(starts)]
    if len(anchors) and (anchors.max() >= 2**32 or rel.max() >= 2**16):
        raise ConfigError("plane too large for the index (u32 anchors / u16 offsets)")
    return anchors.astype("<u4").tobytes() + rel.astype("<u2").tobytes()


def index_from_bytes(data: bytes, nsb: int, plane_len: int, name: str = "index") -> np.ndarray:
    if len(data) != index_nbytes(nsb):
        raise FormatError(f"{name}: {len(data)} bytes, expected {index_nbytes(nsb)} for {nsb} superblocks")
    na = (nsb + INDEX_ANCHOR_STRIDE - 1) // INDEX_ANCHOR_STRIDE
    anchors = np.frombuffer(data, dtype="<u4", count=na).astype(np.int64)
    rel = np.frombuffer(data, dtype="<u2", count=nsb, offset=4 * na).astype(np.int64)
    if np.any(rel[::INDEX_ANCHOR_STRIDE] != 0):
        raise FormatError(f"{name}: an anchor differs from its superblock's offset (A_j != o_16j)")
    starts = np.repeat(anchors, INDEX_ANCHOR_STRIDE)[:nsb] + rel
    offsets = np.append(starts, plane_len)
    if nsb and (starts[0] != 0 or np.any(np.diff(offsets) < 0)):
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

def _use_native(impl: str) -> bool:
    """The single dispatch point: "auto" | "numpy" | "native" (env CASSANDRA_RTL_CODEC overrides "auto")."""
    if impl == "numpy":
        return False
    from . import native
    return native.resolve(impl) == "native"


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
    if _use_native(impl):
        from . import native
        return native.encode_tensor(bits, cfg, salience, books)
    arr = check_bits(bits)
    flat = arr.reshape(-1)
    N, G = len(flat), cfg.group_size
    nsb = superblock_count(N, G)
    sb = np.arange(N, dtype=np.int64) // G
    kept = keep_mask(flat, cfg, salience)
    sign, e, mant = _fields(flat)
    m = cfg.mantissa_bits
    planes, offsets = {}, {}

    n_s, k_s = superblock_sizes(N, cfg)

    def code_plane(name, symbols, seg, book):
        ranks = book.rank_table()[symbols]
        escape = ranks == book.K
        if escape.any() and (symbols[escape] > 0xFF).any():
            raise ConfigError("the pruned mark must be in the speculation codebook; it cannot be escaped")
        planes[name], offsets[name] = bitpack.pack_unary(seg, ranks, escape, symbols, book.K, ESCAPE_PAYLOAD_BITS, nsb)

    def fixed_plane(name, widths, values):
        planes[name] = bitpack.pack_fixed([(widths, values, fixed_chunk_bits(name, n_s, k_s, cfg))])

    if cfg.scheme == "c1":
        sym = np.where(kept, e, PRUNED)
        if books is None:
            spec_book = build_codebook(np.bincount(sym, minlength=PRUNED + 1), required=PRUNED)
            verif_book = build_codebook(np.bincount(e[~kept], minlength=PRUNED + 1))
        else:
            spec_book, verif_book = books
            if cfg.prunes and PRUNED not in spec_book.symbols:
                raise ConfigError("the speculation codebook lacks the pruned mark but the config prunes")
        code_plane("spec.codes", sym, sb, spec_book)
        fixed_plane("spec.signman", np.full(int(kept.sum()), 1 + m),
                    (sign[kept] << m) | (mant[kept] >> (7 - m)))
        code_plane("verif.codes", e[~kept], sb[~kept], verif_book)
        fixed_plane("verif.rest", np.where(kept, 7 - m, 8),
                    np.where(kept, mant & ((1 << (7 - m)) - 1), (sign << 7) | mant))
    else:
        spec_book = None
        mx = np.arange(N, dtype=np.int64) // MX_BLOCK
        X = np.maximum.reduceat(e, np.arange(0, N, MX_BLOCK)) if N else np.zeros(0, np.int64)
        Xv = X[mx]
        c, elem = c2_draft_fields(e, mant, Xv, m)
        draft_zero = ~kept | (elem == 0)
        delta = Xv - e
        if books is None:
            verif_book = build_codebook(np.bincount(delta[draft_zero], minlength=PRUNED + 1))
        else:
            verif_book = books[1]
        # spec.mx chunk = [keep bitmap (if pruning)] [X of each MX block] [sign|element of each kept value]
        nmx = (n_s + MX_BLOCK - 1) // MX_BLOCK
        sections = [(np.full(len(X), 8), X, 8 * nmx), (np.full(int(kept.sum()), m + 2),
                                                       (sign[kept] << (m + 1)) | elem[kept], k_s * (m + 2))]
        if cfg.prunes:
            sections.insert(0, (np.ones(N, np.int64), kept.astype(np.int64), n_s))
        planes["spec.mx"] = bitpack.pack_fixed(sections)
        code_plane("verif.codes", delta[draft_zero], sb[draft_zero], verif_book)
        rest_w = np.where(draft_zero, 8, 7 - np.clip(c, 0, 7))
        rest_v = np.where(draft_zero, (sign << 7) | mant, mant & ((1 << rest_w) - 1))
        planes["verif.rest"], offsets["verif.rest"] = bitpack.pack_variable(sb, rest_w, rest_v, nsb)
    return EncodedTensor(tuple(arr.shape), cfg, spec_book, verif_book, planes, offsets)


# ------------------------------------------------------------------------------------------------ decode

def decode_codes(plane: bytes, offsets: np.ndarray, counts: np.ndarray, book: Codebook, name: str) -> np.ndarray:
    """Decode ``counts[s]`` rank-unary codes from every chunk ``s``; returns the symbols in order.

    Fast path: in a chunk without escapes every '1' bit ends a code, so all boundaries come from one
    ``flatnonzero`` (the vector twin of the hardware's parallel zero counter). Chunks that may hold an
    escape (a zero run of length K) or that look malformed take an exact step-by-step path, vectorised
    across chunks, which also produces the precise error.
    """
    K = book.K
    counts = np.asarray(counts, dtype=np.int64)
    nsb = len(counts)
    total = int(counts.sum())
    out = np.empty(total, dtype=np.int64)
    out_start = bitpack.exclusive_cumsum(counts)
    if len(offsets) != nsb + 1 or offsets[-1] != len(plane):
        raise FormatError(f"{name}: index does not cover the plane")
    table = book.symbol_table()
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
        out[dest] = table[runs[sel]]
    dirty = np.flatnonzero(~clean & (counts >= 0))
    dirty = dirty[(counts[dirty] > 0) | (chunk_bits[dirty] > 0)]
    if len(dirty):
        _decode_codes_with_escapes(plane, ones, offsets, counts, book, name, dirty, out, out_start)
    return out


ESCAPE_LOOKAHEAD = 16   # codes examined per chunk and round: bounds the work when escapes are dense


def _decode_codes_with_escapes(plane, ones, offsets, counts, book, name, chunks, out, out_start):
    """Exact decode of the given chunks in rounds, vectorised over chunks: each round reads up to
    ESCAPE_LOOKAHEAD codes of every chunk from the ones (like the fast path) and stops at the chunk's next
    escape, whose 8 raw bits it then skips. Rounds ~ escapes per chunk + G / ESCAPE_LOOKAHEAD."""
    K = book.K
    table = book.symbol_table()
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
        raise FormatError(f"{name}: superblock {s} needs {int(counts[s])} codes but the plane holds none "
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
        out[out_start[chunks[act][seg[ok]]] + done[act][seg[ok]] + t[ok]] = table[run[ok]] if K else 0
        last_ok = np.flatnonzero(ok & (t == first[seg] - 1))
        pos[act[seg[last_ok]]] = p[last_ok] + 1
        done[act] += first
        at = np.flatnonzero(~ok & (t == first[seg]))                # the stopping code, where there is one
        if len(at):
            a = act[seg[at]]
            bad = (p[at] >= end[a]) | (run[at] != K) | (p[at] + ESCAPE_PAYLOAD_BITS >= end[a])
            if bad.any():
                s_bad = int(chunks[a[np.flatnonzero(bad)[0]]])
                raise FormatError(f"{name}: impossible code or overrun in superblock {s_bad}")
            raw = bitarr[p[at][:, None] + 1 + np.arange(ESCAPE_PAYLOAD_BITS)] @ payload_weights
            out[out_start[chunks[a]] + done[a]] = raw
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
        raise FormatError(f"{name}: the codes of superblock {s} {what} its declared length "
                          f"({int(lengths[bad[0]])} bytes, codes need {int(need[bad[0]])})")
    bitpack.check_zero_padding(bitpack.words_of(plane), offsets[:-1][chunks], used, name, chunks)


def _plane_offsets(enc: EncodedTensor, name: str) -> np.ndarray:
    if name in INDEXED[enc.config.scheme]:
        if not has_index(name, enc.config):
            if len(enc.planes[name]):
                raise FormatError(f"{name}: must be empty when nothing is pruned")
            return np.zeros(enc.nsb + 1, dtype=np.int64)
        off = enc.offsets.get(name)
        if off is None:
            raise FormatError(f"{name}: index missing")
        return np.asarray(off, dtype=np.int64)
    n, k = superblock_sizes(enc.numel, enc.config)
    used = fixed_chunk_bits(name, n, k, enc.config)
    off = bitpack.exclusive_cumsum((used + 7) >> 3)
    data = _plane(enc, name)
    if off[-1] != len(data):
        raise FormatError(f"{name}: {len(data)} bytes, the config implies {int(off[-1])}")
    bitpack.check_zero_padding(bitpack.words_of(data), off[:-1], used, name, np.arange(enc.nsb))
    return off


def _plane(enc, name):
    try:
        return enc.planes[name]
    except KeyError:
        raise FormatError(f"plane {name} missing") from None


def _rank_in_segment(mask: np.ndarray, seg: np.ndarray, nsb: int) -> np.ndarray:
    """For each True entry of ``mask``: its position among the True entries of its segment."""
    idx = np.flatnonzero(mask)
    cnt = np.bincount(seg[idx], minlength=nsb)
    return np.arange(len(idx)) - bitpack.exclusive_cumsum(cnt)[:-1][seg[idx]]


def _decode_c1_spec(enc: EncodedTensor):
    cfg, N, nsb = enc.config, enc.numel, enc.nsb
    m = cfg.mantissa_bits
    n, k = superblock_sizes(N, cfg)
    sb = np.arange(N, dtype=np.int64) // cfg.group_size
    if enc.spec_book is None:
        raise FormatError("C1 tensor without a speculation codebook")
    sym = decode_codes(_plane(enc, "spec.codes"), _plane_offsets(enc, "spec.codes"), n, enc.spec_book, "spec.codes")
    kept = sym != PRUNED
    nk = np.bincount(sb[kept], minlength=nsb)
    bad = np.flatnonzero(nk != k)
    if len(bad):
        raise FormatError(f"spec.codes: superblock {int(bad[0])} keeps {int(nk[bad[0]])} values, config says {int(k[bad[0]])}")
    _plane_offsets(enc, "spec.signman")              # checks length and padding
    (f,) = bitpack.unpack_fixed(_plane(enc, "spec.signman"),
                                [(np.full(int(k.sum()), 1 + m), fixed_chunk_bits("spec.signman", n, k, cfg))])
    draft = np.zeros(N, dtype=np.int64)
    draft[kept] = ((f >> m) << 15) | (sym[kept] << 7) | ((f & ((1 << m) - 1)) << (7 - m))
    return draft, kept, sym, sb, n, k


def _decode_c2_spec(enc: EncodedTensor):
    cfg, N, nsb = enc.config, enc.numel, enc.nsb
    m, G = cfg.mantissa_bits, cfg.group_size
    n, k = superblock_sizes(N, cfg)
    sb = np.arange(N, dtype=np.int64) // G
    off = _plane_offsets(enc, "spec.mx")
    words = bitpack.words_of(_plane(enc, "spec.mx"))
    base = off[:-1][sb] * 8
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
    X = bitpack.read_fields(words, off[:-1][msb] * 8 + bitmap_bits[msb] + 8 * ((mxstart - msb * G) // MX_BLOCK), 8
                            ).astype(np.int64)
    Xv = X[np.arange(N) // MX_BLOCK]
    nmx_sb = (n + MX_BLOCK - 1) // MX_BLOCK
    fpos = off[:-1][sb[kept]] * 8 + bitmap_bits[sb[kept]] + 8 * nmx_sb[sb[kept]] + _rank_in_segment(kept, sb, nsb) * (m + 2)
    f = bitpack.read_fields(words, fpos, m + 2).astype(np.int64)
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
    return draft, kept, nz, Xv, c, sb, n


def decode_draft(enc: EncodedTensor, impl: str = "auto") -> np.ndarray:
    """The draft's view: uint16 bf16 bits, pruned values 0, cut mantissa bits 0 (reads speculation only)."""
    if _use_native(impl):
        from . import native
        return native.decode_draft(enc)
    if enc.config.scheme == "c1":
        draft = _decode_c1_spec(enc)[0]
    else:
        draft = _decode_c2_spec(enc)[0]
    return draft.astype(np.uint16).reshape(enc.shape)


def decode_full(enc: EncodedTensor, impl: str = "auto") -> np.ndarray:
    """Speculation + verification -> the original bf16 bits, exactly."""
    if _use_native(impl):
        from . import native
        return native.decode_full(enc)
    cfg, nsb = enc.config, enc.nsb
    m = cfg.mantissa_bits
    if cfg.scheme == "c1":
        draft, kept, sym, sb, n, k = _decode_c1_spec(enc)
        pe = decode_codes(_plane(enc, "verif.codes"), _plane_offsets(enc, "verif.codes"), n - k,
                          enc.verif_book, "verif.codes")
        widths = np.where(kept, 7 - m, 8)
    else:
        draft, kept, nz, Xv, c, sb, n = _decode_c2_spec(enc)
        draft_zero = ~nz
        counts = np.bincount(sb[draft_zero], minlength=nsb)
        delta = decode_codes(_plane(enc, "verif.codes"), _plane_offsets(enc, "verif.codes"), counts,
                             enc.verif_book, "verif.codes")
        pe = Xv[draft_zero] - delta
        if np.any(pe < 0):
            raise FormatError("verif.codes: an exponent delta exceeds its block's shared exponent")
        widths = np.where(draft_zero, 8, 7 - np.clip(c, 0, 7))
        kept = nz                                      # below: "kept" = the draft holds the value's top bits
    roff = _plane_offsets(enc, "verif.rest")
    if cfg.scheme == "c1":                            # fixed chunks: length and padding checked above
        (rest,) = bitpack.unpack_fixed(_plane(enc, "verif.rest"), [(widths, fixed_chunk_bits("verif.rest", n, k, cfg))])
    else:
        within, seg_bits = bitpack.segment_offsets(sb, widths, nsb)
        bitpack.check_chunk_lengths(roff, seg_bits, "verif.rest")
        words = bitpack.words_of(_plane(enc, "verif.rest"))
        bitpack.check_zero_padding(words, roff[:-1], seg_bits, "verif.rest", np.arange(nsb))
        rest = bitpack.read_fields(words, roff[:-1][sb] * 8 + within, widths).astype(np.int64)
    out = np.where(kept, draft | rest, 0)
    pr = ~kept
    out[pr] = ((rest[pr] >> 7) << 15) | (pe << 7) | (rest[pr] & 0x7F)
    return out.astype(np.uint16).reshape(enc.shape)


# ----------------------------------------------------------------------------------- per-superblock view

def plane_offsets(enc: EncodedTensor, name: str) -> np.ndarray:
    """Byte offsets (length nsb + 1) of every superblock chunk of plane ``name``, indexed or fixed."""
    return _plane_offsets(enc, name)


def superblock_chunks(enc: EncodedTensor, name: str) -> list[bytes]:
    """The chunk of every superblock of plane ``name``: what a DMA channel hands the RTL per superblock."""
    off = _plane_offsets(enc, name)
    data = _plane(enc, name)
    return [data[off[s]: off[s + 1]] for s in range(enc.nsb)]


def slice_superblocks(enc: EncodedTensor, start: int, stop: int) -> EncodedTensor:
    """Superblocks ``start..stop-1`` of a tensor as a 1-D tensor of their values, found through the index
    (what each of several parallel decoders would be handed). Decoding the slices and concatenating them
    gives the tensor's flattened decode."""
    nsb, G = enc.nsb, enc.config.group_size
    if not 0 <= start <= stop <= nsb:
        raise ConfigError(f"superblock range {start}..{stop} outside 0..{nsb}")
    numel = min(stop * G, enc.numel) - start * G
    planes, offsets = {}, {}
    for name, data in enc.planes.items():
        off = _plane_offsets(enc, name)
        planes[name] = data[off[start]: off[stop]]
        if name in enc.offsets:
            offsets[name] = np.asarray(off[start: stop + 1]) - off[start]
    return EncodedTensor((max(numel, 0),), enc.config, enc.spec_book, enc.verif_book, planes, offsets)


def decode_parallel(enc: EncodedTensor, draft: bool = False, workers: int = 2) -> np.ndarray:
    """Decode with ``workers`` threads, each on its own range of superblocks (numpy releases the GIL in
    its kernels). Same result as ``decode_draft`` / ``decode_full``."""
    fn = decode_draft if draft else decode_full
    if workers <= 1 or enc.nsb < 2 * workers:
        return fn(enc)
    from concurrent.futures import ThreadPoolExecutor

    bounds = np.linspace(0, enc.nsb, workers + 1).astype(int)
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(lambda r: fn(slice_superblocks(enc, r[0], r[1])), zip(bounds[:-1], bounds[1:])))
    return np.concatenate(parts).reshape(enc.shape)
