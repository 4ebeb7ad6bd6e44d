"""Cassandra-1 with escape payloads in the companion field: the plane layout read by decoder v3
(hw/decoder_c1_v3.py), proposed as a format revision (docs/datasheets/decoder_c1_v3.md).

Everything is format 2.0 (FORMAT.md) except where an escaped symbol's 8 raw bits live:

* the code plane holds the escape as ``Q`` zeros and a one (``Q + 1`` bits), like any other group code,
  so every code of a chunk ends at a one and a decoder finds all code boundaries from the ones alone;
* the raw symbol moves to the front of the value's companion field: a kept value's ``spec.signman``
  field is ``[e (8 bits)][(s << m) | (f >> (7 - m))]`` (``8 + 1 + m`` bits, no suffix bit: an escape is
  never in a pair group), a pruned value's ``verif.rest`` field is ``[e][(s << 7) | f]`` (16 bits).

The pruned mark ``P`` is never escaped (format 2.0), so every escape has a companion field to hold its
payload. The stream has exactly as many bytes as format 2.0's, indexes included: an escape moves one byte
between the two planes of a pair within a chunk, and a field plane whose book has no pair needs no index,
as in format 2.0: its chunk sizes follow from the config plus one byte per escape of the chunk's code plane
(``field_offsets``: the escapes are the codes of group ``Q``, counted from the indexed code plane). Where a
book has pairs, its field plane is indexed, as in format 2.0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import bitpack
from .codec import (EncodedTensor, _fields, check_bits, encode_tensor, fixed_superblock_bits, has_index, keep_mask,
                    per_chunk, plane_offsets, superblock_sizes)
from .config import ESCAPE_PAYLOAD_BITS, PRUNED, CodecConfig
from ..errors import ConfigError

PLANES = ("spec.codes", "spec.signman", "verif.codes", "verif.rest")
FIELD_OF = {"spec.signman": "spec.codes", "verif.rest": "verif.codes"}     # field plane -> its code plane


@dataclass
class EscFieldTensor(EncodedTensor):
    """A tensor in the escape-in-field layout. ``offsets`` holds every plane's chunk offsets, so
    ``plane_offsets`` / ``plane_chunks`` and the RTL framing read it like a format 2.0 tensor; its stored
    size counts an index only where format 2.0 has one (``index_bytes``). The golden format 2.0 decoders do
    not read it: decode the format 2.0 tensor ``encode`` returns beside it."""

    def has_index(self, plane: str) -> bool:
        return True

    def index_bytes(self, plane: str) -> int:
        stored = has_index(plane, self.config, self.spec_book, self.verif_book)
        return super().index_bytes(plane) if stored else 0


def escapes_per_chunk(v3: EncodedTensor, code_plane: str) -> np.ndarray:
    """Escapes (codes of group ``Q``: ``Q`` zeros, then a one) in every chunk of a code plane, found from the
    plane's bytes and chunk offsets alone: every code ends at a one, padding is zeros."""
    book = v3.spec_book if code_plane == "spec.codes" else v3.verif_book
    off = plane_offsets(v3, code_plane)
    nch = v3.nchunks
    if book is None or off[-1] == 0:
        return np.zeros(nch, dtype=np.int64)
    bits = np.unpackbits(np.frombuffer(bytes(v3.planes[code_plane]), dtype=np.uint8), bitorder="little")
    ones = np.flatnonzero(bits)
    start = 8 * off[:-1]
    chunk = np.searchsorted(start, ones, side="right") - 1
    first = np.ones(len(ones), dtype=bool)
    first[1:] = chunk[1:] != chunk[:-1]
    prev = np.where(first, start[chunk], np.concatenate(([0], ones[:-1] + 1)))
    return np.bincount(chunk[ones - prev == book.Q], minlength=nch).astype(np.int64)


def field_offsets(v3: EncodedTensor, field_plane: str) -> np.ndarray:
    """Chunk byte offsets of a field plane whose book has no pair, without an index: format 2.0's computed
    chunk bits plus 8 per escape of the chunk's code plane, rounded up to bytes."""
    cfg = v3.config
    n, k = superblock_sizes(v3.numel, cfg)
    bits = per_chunk(fixed_superblock_bits(field_plane, n, k, cfg), cfg)
    bits = bits + ESCAPE_PAYLOAD_BITS * escapes_per_chunk(v3, FIELD_OF[field_plane])
    return bitpack.exclusive_cumsum((bits + 7) >> 3)


def encode(bits, cfg: CodecConfig, salience=None, books=None) -> tuple[EncodedTensor, EscFieldTensor]:
    """The format 2.0 encoding of ``bits`` (books, keep mask, reference values) and the same tensor in the
    escape-in-field layout (what decoder v3 reads). ``books``: fixed (spec_book, verif_book), as for
    ``encode_tensor``."""
    if cfg.scheme != "c1":
        raise ConfigError("the escape-in-field layout is defined for Cassandra-1 only")
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
