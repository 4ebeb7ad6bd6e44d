"""Format 3.0 (docs/FORMAT.md): the plane layout the containers hold, decoder v3 reads (hw/decoder_c1_v3.py,
hw/decoder_c2_v3.py) and the KV encoders write (golden/kv.py ``encode_kv``). Its numpy reference, beside
golden/codec.py's format 2.0 layout (what 2.x containers hold); ``to_format3`` / ``to_format2`` convert between them.

Everything is the 2.0 layout except where an escaped symbol's 8 raw bits live, and C2's spec.mx order:

* the code plane holds the escape as ``Q`` zeros and a one (``Q + 1`` bits), like any other group code,
  so every code of a chunk ends at a one and a decoder finds all code boundaries from the ones alone;
* the raw symbol moves to the front of the value's companion field (no suffix bit: an escape is never in a
  pair group). C1: a kept value's ``spec.signman`` field is ``[e (8 bits)][(s << m) | (f >> (7 - m))]``, a
  pruned value's ``verif.rest`` field ``[e][(s << 7) | f]``. C2: a draft-zero value's ``verif.rest`` field
  is ``[delta (8 bits)][(s << 7) | f]``.

C2's ``spec.mx`` holds the 2.0 layout's bits in another order: MX block by block, ``[X (8 bits)][the block's keep
bits, if the config prunes][the block's kept values' (m+2)-bit fields]``, so a decoder reads each block's
header with the fields before it instead of holding a superblock's keep bitmap (up to 256 bits) ahead of them.

The pruned mark ``P`` is never escaped, so every escape has a companion field to hold its payload. The
stream has exactly as many bytes as the 2.0 layout's, indexes included (spec.mx chunk by chunk): an escape
moves one byte between the two planes of a pair within a chunk, and a field plane whose book has no pair
needs no index: its chunk sizes follow from the config plus one byte per escape of the chunk's code plane
(``field_offsets``: the escapes are the codes of group ``Q``, counted from the indexed code plane). Where a
book has pairs, its field plane is indexed, as in 2.0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from . import bitpack
from .codec import (EncodedTensor, _fields, _plane_offsets, _read_plane, _use_native, c2_draft_fields,
                    c2_draft_values, check_bits, decode_full, encode_tensor, fixed_superblock_bits, keep_mask,
                    per_chunk, superblock_sizes)
from .config import ESCAPE_PAYLOAD_BITS, MX_BLOCK, PRUNED, CodecConfig
from ..errors import FormatError

PLANES = ("spec.codes", "spec.signman", "verif.codes", "verif.rest")
FIELD_OF = {"spec.signman": "spec.codes", "verif.rest": "verif.codes"}     # field plane -> its code plane


@dataclass
class EscFieldTensor(EncodedTensor):
    """A tensor in format 3.0. Indexed as in format 2.0 (the same planes carry an index); an unpaired field
    plane's chunk offsets follow from its code plane (``codec.plane_offsets`` calls ``field_offsets``). The
    format 2.0 decoders of golden/codec.py send it here (``format_major``)."""

    format_major: ClassVar[int] = 3


def escapes_per_chunk(v3: EncodedTensor, code_plane: str) -> np.ndarray:
    """Escapes (codes of group ``Q``: ``Q`` zeros, then a one) in every chunk of a code plane, found from the
    plane's bytes and chunk offsets alone: every code ends at a one, padding is zeros."""
    book = v3.spec_book if code_plane == "spec.codes" else v3.verif_book
    if book is None:
        return np.zeros(v3.nchunks, dtype=np.int64)
    _, runs, chunk, _ = _code_runs(v3, code_plane)
    return np.bincount(chunk[runs == book.Q], minlength=v3.nchunks).astype(np.int64)


def _code_runs(v3: EncodedTensor, code_plane: str):
    """Every code of a code plane, in order, from its bytes and chunk offsets: (stream position of the one that
    ends it, its zero run = its group, its chunk, the chunks' start bits)."""
    off = reader_offsets(v3, code_plane)
    bits = np.unpackbits(np.frombuffer(bytes(v3.planes[code_plane]), dtype=np.uint8), bitorder="little")
    ones = np.flatnonzero(bits)
    start = 8 * off[:-1]
    chunk = np.searchsorted(start, ones, side="right") - 1
    first = np.ones(len(ones), dtype=bool)
    first[1:] = chunk[1:] != chunk[:-1]
    prev = np.where(first, start[chunk], np.concatenate(([0], ones[:-1] + 1)))
    return ones, ones - prev, chunk, start


def reader_offsets(v3: EncodedTensor, plane: str) -> np.ndarray:
    """A plane's chunk offsets as a reader finds them: from its index, or computed (from the config and, for
    an unpaired C1 field plane, ``field_offsets``), never from offsets an encoder's tensor holds beside."""
    return _plane_offsets(v3, plane, stored=False)


def field_offsets(v3: EncodedTensor, field_plane: str) -> np.ndarray:
    """Chunk byte offsets of a field plane whose book has no pair, without an index: format 2.0's computed
    chunk bits plus 8 per escape of the chunk's code plane, rounded up to bytes."""
    cfg = v3.config
    n, k = superblock_sizes(v3.numel, cfg)
    bits = per_chunk(fixed_superblock_bits(field_plane, n, k, cfg), cfg)
    bits = bits + ESCAPE_PAYLOAD_BITS * escapes_per_chunk(v3, FIELD_OF[field_plane])
    return bitpack.exclusive_cumsum((bits + 7) >> 3)


def encode(bits, cfg: CodecConfig, salience=None, books=None, impl: str = "auto"
           ) -> tuple[EncodedTensor, EscFieldTensor]:
    """The format 2.0 encoding of ``bits`` (books, keep mask, reference values) and the same tensor in the
    format 3.0 layout (what decoder v3 reads). ``books``: fixed (spec_book, verif_book), as for
    ``encode_tensor``. ``impl`` as for ``encode_tensor`` (the compiled codec writes both layouts)."""
    if _use_native(impl, cfg, books or ()):
        from . import native
        return tuple(native.encode_layouts(bits, cfg, salience, books))
    enc = encode_tensor(bits, cfg, salience, books=books, impl="numpy")
    flat = check_bits(bits).reshape(-1)
    N = len(flat)
    nch = enc.nchunks
    ch = np.arange(N, dtype=np.int64) // cfg.chunk_values
    kept = keep_mask(flat, cfg, salience)
    sign, e, mant = _fields(flat)
    m = cfg.mantissa_bits
    planes, offsets = {}, {}

    def codes(name, symbols, seg, book):
        groups = book.group_table()[symbols]
        esc = groups == book.Q
        planes[name], offsets[name] = bitpack.pack_unary(seg, groups, esc, symbols, book.Q, 0, nch)
        t = np.where(esc, 0, book.suffix_table()[symbols])
        tw = np.where(esc, ESCAPE_PAYLOAD_BITS, book.pair_bits()[groups])
        return np.where(esc, symbols & 0xFF, t), tw           # the field's prefix and its width

    if cfg.scheme == "c2":
        # spec.mx block by block: [X][the block's keep bits, if pruning][its kept values' fields] (the same
        # bits per chunk as format 2.0's superblock-wise sections); a draft-zero value's delta code escapes
        # into the front of its verif.rest field
        X = np.maximum.reduceat(e, np.arange(0, N, MX_BLOCK)) if N else np.zeros(0, np.int64)
        blk = np.arange(N, dtype=np.int64) // MX_BLOCK
        Xv = X[blk]
        c, elem = c2_draft_fields(e, mant, Xv, m)
        key = [np.arange(len(X), dtype=np.int64) * 3, blk[kept] * 3 + 2]
        widths = [np.full(len(X), 8), np.full(int(kept.sum()), m + 2)]
        values = [X, (sign[kept] << (m + 1)) | elem[kept]]
        if cfg.prunes:
            key.append(blk * 3 + 1)
            widths.append(np.ones(N, np.int64))
            values.append(kept.astype(np.int64))
        key = np.concatenate(key)
        order = np.argsort(key, kind="stable")
        planes["spec.mx"], offsets["spec.mx"] = bitpack.pack_chunks(
            (key[order] // 3 * MX_BLOCK) // cfg.chunk_values, np.concatenate(widths)[order],
            np.concatenate(values)[order], nch)
        dz = ~kept | (elem == 0)
        pre, pw = codes("verif.codes", (Xv - e)[dz], ch[dz], enc.verif_book)
        rest_w = np.where(dz, 8, 7 - np.clip(c, 0, 7))
        rest_v = np.where(dz, (sign << 7) | mant, mant & ((1 << rest_w) - 1))
        rest_w[dz] += pw
        rest_v[dz] = pre | (rest_v[dz] << pw)
        planes["verif.rest"], offsets["verif.rest"] = bitpack.pack_chunks(ch, rest_w, rest_v, nch)
        return enc, EscFieldTensor(enc.shape, cfg, enc.spec_book, enc.verif_book, planes, offsets)
    sym = np.where(kept, e, PRUNED)
    pre, pw = codes("spec.codes", sym, ch, enc.spec_book)
    pre, pw = pre[kept], pw[kept]
    sm = (sign[kept] << m) | (mant[kept] >> (7 - m))
    planes["spec.signman"], offsets["spec.signman"] = bitpack.pack_chunks(ch[kept], pw + 1 + m, pre | (sm << pw), nch)
    pre, pw = codes("verif.codes", e[~kept], ch[~kept], enc.verif_book)
    rest_w = np.where(kept, 7 - m, 8)
    rest_v = np.where(kept, mant & ((1 << (7 - m)) - 1), (sign << 7) | mant)
    rest_w[~kept] += pw
    rest_v[~kept] = pre | (rest_v[~kept] << pw)
    planes["verif.rest"], offsets["verif.rest"] = bitpack.pack_chunks(ch, rest_w, rest_v, nch)
    return enc, EscFieldTensor(enc.shape, cfg, enc.spec_book, enc.verif_book, planes, offsets)


def encode3(bits, cfg: CodecConfig, salience=None, books=None, impl: str = "auto") -> EscFieldTensor:
    """The format 3.0 tensor of ``bits`` alone (``encode`` without its 2.0 twin; the compiled codec writes
    one layout)."""
    if _use_native(impl, cfg, books or ()):
        from . import native
        return native._encode(bits, cfg, salience, books, layouts=(3,))[0]
    return encode(bits, cfg, salience, books, impl="numpy")[1]


# ------------------------------------------------------------------------------------------ decoding
def _groups(v3: EncodedTensor, plane: str, counts: np.ndarray, book) -> np.ndarray:
    """The group ``q`` of every code of a code plane, in order (``Q``: an escape). Every code ends at a one:
    the codes are the ones, their groups the zero runs before them; a chunk holds exactly its ``counts``
    codes, no run is longer than ``Q`` and the chunk is ``ceil(bits / 8)`` bytes."""
    ones, runs, chunk, start = _code_runs(v3, plane)
    nones = np.bincount(chunk, minlength=v3.nchunks)
    bad = np.flatnonzero(nones != counts)
    if len(bad):
        raise FormatError(f"{plane}: chunk {int(bad[0])} holds {int(nones[bad[0]])} codes, the config says "
                          f"{int(counts[bad[0]])}")
    if len(runs) and runs.max() > book.Q:
        raise FormatError(f"{plane}: a zero run of {int(runs.max())} is longer than Q = {book.Q}")
    used = np.zeros(v3.nchunks, dtype=np.int64)
    used[chunk] = ones + 1 - start[chunk]
    bitpack.check_chunk_lengths(reader_offsets(v3, plane), used, plane)
    return runs


def _fields_of(v3: EncodedTensor, plane: str, seg: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """A field plane's fields, its chunks located as a reader finds them (never from stored offsets the format
    does not index)."""
    return _read_plane(v3, plane, seg, widths, off=reader_offsets(v3, plane))


def _symbols(book, groups: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Symbols from groups and the companion fields' prefixes (an escape's 8 raw bits, a pair's suffix bit)."""
    esc = groups == book.Q
    return book.resolve(groups, np.where(esc, 0, prefix), np.where(esc, prefix, 0))


def _prefix_bits(book, groups: np.ndarray) -> np.ndarray:
    return np.where(groups == book.Q, ESCAPE_PAYLOAD_BITS, book.pair_bits()[np.minimum(groups, book.Q)])


def decode(v3: EncodedTensor, full: bool, impl: str = "auto") -> np.ndarray:
    """The golden decode of a tensor in format 3.0 (C1 or C2): the draft values, or with
    ``full`` the original bf16 bits (uint16, the tensor's shape). Unpaired field planes are located without
    an index. ``impl`` as for ``codec.decode_full`` (a malformed tensor gets numpy's FormatError either way)."""
    if _use_native(impl, v3.config, (v3.spec_book, v3.verif_book)):
        from . import native
        return (native.decode_full if full else native.decode_draft)(v3)
    cfg, N = v3.config, v3.numel
    if cfg.scheme == "c2":
        return _decode_c2(v3, full)
    m = cfg.mantissa_bits
    n, k = superblock_sizes(N, cfg)
    idx = np.arange(N, dtype=np.int64)
    sb, ch = idx // cfg.group_size, idx // cfg.chunk_values
    book = v3.spec_book
    groups = _groups(v3, "spec.codes", per_chunk(n, cfg), book)
    kept = (groups != book.group_table()[PRUNED]) if PRUNED in book.symbols else np.ones(N, dtype=bool)
    nk = np.bincount(sb[kept], minlength=v3.nsb)
    bad = np.flatnonzero(nk != k)
    if len(bad):
        raise FormatError(f"spec.codes: superblock {int(bad[0])} keeps {int(nk[bad[0]])} values, config says "
                          f"{int(k[bad[0]])}")
    gk = groups[kept]
    pw = _prefix_bits(book, gk)
    f = _fields_of(v3, "spec.signman", ch[kept], pw + 1 + m)
    sm = f >> pw
    expo = _symbols(book, gk, f & ((1 << pw) - 1))
    out = np.zeros(N, dtype=np.int64)
    out[kept] = ((sm >> m) << 15) | (expo << 7) | ((sm & ((1 << m) - 1)) << (7 - m))
    if not full:
        return out.astype(np.uint16).reshape(v3.shape)
    return _decode_verif(v3, out, kept, ch, np.where(kept, 7 - m, 8), per_chunk(n - k, cfg), lambda sym, low: sym)


def _decode_c2_blocks(v3: EncodedTensor):
    """spec.mx block by block (``[X][keep bits][fields]`` per MX block, each block's start after the fields of
    the one before it in its chunk): the draft values, the values whose top bits the draft holds, every
    value's X, the draft's mantissa bits and every value's chunk. The blocks of all chunks are walked side by
    side, one block index at a time."""
    cfg, N = v3.config, v3.numel
    m, prunes = cfg.mantissa_bits, cfg.prunes
    n, k = superblock_sizes(N, cfg)
    off = reader_offsets(v3, "spec.mx")
    words = bitpack.words_of(v3.planes["spec.mx"])
    nblk = -(-N // MX_BLOCK)
    per_chunk_blk = cfg.chunk_values // MX_BLOCK
    first = np.arange(0, nblk, per_chunk_blk, dtype=np.int64)      # every chunk's first block
    pos = 8 * off[:-1].copy()
    X = np.zeros(nblk, dtype=np.int64)
    keep_bits = np.zeros(nblk, dtype=np.int64)
    fstart = np.zeros(nblk, dtype=np.int64)                          # the block's first field
    for j in range(per_chunk_blk):
        b = first + j
        live = b < nblk
        b, at = b[live], pos[live]
        nb = np.minimum(N - b * MX_BLOCK, MX_BLOCK)
        X[b] = bitpack.read_fields(words, at, 8).astype(np.int64)
        keep_bits[b] = bitpack.read_fields(words, at + 8, nb).astype(np.int64) if prunes else (1 << nb) - 1
        fstart[b] = at + 8 + (nb if prunes else 0)
        pos[live] = fstart[b] + np.bitwise_count(keep_bits[b].astype(np.uint64)).astype(np.int64) * (m + 2)
    idx = np.arange(N, dtype=np.int64)
    blk = idx // MX_BLOCK
    kept = ((keep_bits[blk] >> (idx - blk * MX_BLOCK)) & 1).astype(bool)
    sb = idx // cfg.group_size
    nk = np.bincount(sb[kept], minlength=v3.nsb)
    bad = np.flatnonzero(nk != k)
    if len(bad):
        raise FormatError(f"spec.mx: superblock {int(bad[0])} keeps {int(nk[bad[0]])} values, config says "
                          f"{int(k[bad[0]])}")
    bitpack.check_chunk_lengths(off, pos - 8 * off[:-1], "spec.mx")
    rank = np.cumsum(kept) - 1 - np.concatenate(([0], np.cumsum(kept)))[blk * MX_BLOCK]
    f = bitpack.read_fields(words, fstart[blk[kept]] + rank[kept] * (m + 2), m + 2).astype(np.int64)
    Xv = X[blk]
    draft, nz, c = c2_draft_values(kept, Xv, f, m)
    return draft, nz, Xv, c, idx // cfg.chunk_values, kept


def _decode_c2(v3: EncodedTensor, full: bool) -> np.ndarray:
    """Cassandra-2: spec.mx block by block; a draft-zero value's exponent is X - delta."""
    draft, top, Xv, c, ch, _ = _decode_c2_blocks(v3)
    if not full:
        return draft.astype(np.uint16).reshape(v3.shape)

    def exponent(delta, low):
        e = Xv[low] - delta
        if np.any(e < 0):
            raise FormatError("verif.codes: an exponent delta exceeds its block's shared exponent")
        return e
    return _decode_verif(v3, draft, top, ch, np.where(top, 7 - np.clip(c, 0, 7), 8),
                         np.bincount(ch[~top], minlength=v3.nchunks), exponent)


def _decode_verif(v3: EncodedTensor, draft: np.ndarray, top: np.ndarray, ch: np.ndarray, widths: np.ndarray,
                  counts: np.ndarray, exponent) -> np.ndarray:
    """The exact values from the draft and the verification planes (both schemes, as codec.decode_full): a
    value whose top bits the draft holds (``top``) gets its low mantissa bits from verif.rest; any other gets
    its exponent ``exponent(symbol, low)`` from its code and its field's prefix (an escape's 8 raw bits, a
    pair's suffix bit), its sign and mantissa from the rest of the field."""
    book, low = v3.verif_book, ~top
    groups = _groups(v3, "verif.codes", counts, book)
    pw = np.zeros(v3.numel, dtype=np.int64)
    pw[low] = _prefix_bits(book, groups)
    rest = _fields_of(v3, "verif.rest", ch, widths + pw)
    body = rest >> pw
    e = exponent(_symbols(book, groups, rest[low] & ((1 << pw[low]) - 1)), low)
    out = np.where(top, draft | body, 0)
    out[low] = ((body[low] >> 7) << 15) | (e << 7) | (body[low] & 0x7F)
    return out.astype(np.uint16).reshape(v3.shape)


# ------------------------------------------------------------------------------------ between the layouts
def keep_mask_of(enc: EncodedTensor) -> np.ndarray:
    """The tensor's own keep mask (magnitude or caller salience), read from its speculation planes, in
    either layout."""
    from .codec import _decode_c1_spec, _decode_c2_spec
    if enc.format_major == 3:
        if enc.config.scheme == "c2":
            return _decode_c2_blocks(enc)[5]
        n, _ = superblock_sizes(enc.numel, enc.config)
        groups = _groups(enc, "spec.codes", per_chunk(n, enc.config), enc.spec_book)
        if PRUNED not in enc.spec_book.symbols:
            return np.ones(enc.numel, dtype=bool)
        return groups != enc.spec_book.group_table()[PRUNED]
    if enc.config.scheme == "c2":
        return _decode_c2_spec(enc)[1]
    return _decode_c1_spec(enc)[2] != PRUNED


def _reencode(enc: EncodedTensor) -> tuple[EncodedTensor, EscFieldTensor]:
    """Both layouts of ``enc``'s values with its own books and keep mask. A pruning config whose tensor
    prunes nothing (a short last superblock keeps all) has a speculation book without P, which an encoder
    refuses as a given book: it is rebuilt, and must come out the same."""
    cfg = enc.config
    full = decode_full(enc)
    salience = None if cfg.kind == "kv" else keep_mask_of(enc).astype(np.float64)   # KV prunes by magnitude
    own = cfg.scheme == "c2" or not cfg.prunes or PRUNED in enc.spec_book.symbols
    books = (enc.spec_book, enc.verif_book) if own else None
    std, v3 = encode(full, cfg, salience=salience, books=books)
    if (std.spec_book, std.verif_book) != (enc.spec_book, enc.verif_book):
        raise FormatError("the tensor does not re-encode with its own books")
    return std, v3


def to_format3(enc: EncodedTensor) -> EscFieldTensor:
    """The format 3.0 tensor of a format 2.0 one (the same values, books and keep mask; the same bytes per
    chunk of every plane pair). A 3.0 tensor is returned as it is."""
    if enc.format_major == 3:
        return enc
    std, v3 = _reencode(enc)
    if std.planes != enc.planes:
        raise FormatError("the tensor does not re-encode to its own planes; it cannot be converted to format 3.0")
    return v3


def to_format2(enc: EncodedTensor) -> EncodedTensor:
    """The format 2.0 tensor of a format 3.0 one (what format 2.0 readers take). A 2.0 tensor
    is returned as it is."""
    if enc.format_major != 3:
        return enc
    std, v3 = _reencode(enc)
    if v3.planes != enc.planes:
        raise FormatError("the tensor does not re-encode to its own planes; it cannot be converted to format 2.0")
    return std
