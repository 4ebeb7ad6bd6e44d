"""Vectorised LSB-first bit packing (docs/FORMAT.md section "Bit order").

A plane is a byte string; stream bit ``i`` is ``(plane[i // 8] >> (i % 8)) & 1``. A field of width ``w``
holding integer ``v`` occupies stream bits ``p .. p+w-1`` with bit ``p`` = ``v & 1``. A unary code of rank
``r`` is the field ``1 << r`` of width ``r + 1`` (``r`` zeros, then a one).

Planes are made of per-superblock *chunks*, each starting on a byte boundary (zero padding in between).
"""
from __future__ import annotations

import numpy as np

from ..errors import FormatError

WORD_BITS = 32
MAX_FIELD_BITS = 24   # fields up to 24 bits straddle at most two 32-bit words


def exclusive_cumsum(x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x) + 1, dtype=np.int64)
    np.cumsum(x, out=out[1:])
    return out


def segment_offsets(segment_ids: np.ndarray, widths: np.ndarray, nseg: int) -> tuple[np.ndarray, np.ndarray]:
    """Bit offset of each field inside its segment, and each segment's total bits.

    ``segment_ids`` must be non-decreasing (fields are stored in value order).
    """
    cs = exclusive_cumsum(np.asarray(widths, dtype=np.int64))
    first = exclusive_cumsum(np.bincount(segment_ids, minlength=nseg)[:nseg])
    seg_start = cs[first]
    return cs[:-1] - seg_start[:-1][segment_ids], np.diff(seg_start)


def pack_variable(segment_ids: np.ndarray, widths: np.ndarray, values: np.ndarray, nseg: int
                  ) -> tuple[bytes, np.ndarray]:
    """Fields of <= 16 bits in value order, byte-aligned chunks per segment: bit sequence, then each
    segment's bits shifted to its chunk start."""
    _, seg_bits = segment_offsets(segment_ids, widths, nseg)
    offsets = exclusive_cumsum((seg_bits + 7) >> 3)
    seq = _field_bits(widths, values)
    shift = offsets[:-1] * 8 - exclusive_cumsum(seg_bits)[:-1]
    bitarr = np.zeros(int(offsets[-1]) * 8, dtype=np.uint8)
    bitarr[np.arange(len(seq)) + np.repeat(shift, seg_bits)] = seq
    return _bits_to_plane(bitarr), offsets


def pack_chunks(segment_ids: np.ndarray, widths: np.ndarray, values: np.ndarray, nseg: int
                ) -> tuple[bytes, np.ndarray]:
    """Pack fields into a plane of byte-aligned chunks (one chunk per segment = superblock).

    Returns the plane and the byte offset of every chunk (length ``nseg + 1``; the last entry is the
    plane length).
    """
    segment_ids = np.asarray(segment_ids, dtype=np.int64)
    widths = np.asarray(widths, dtype=np.int64)
    values = np.asarray(values, dtype=np.uint64)
    if len(widths) and widths.max() > MAX_FIELD_BITS:
        raise ValueError("field wider than 24 bits")
    within, seg_bits = segment_offsets(segment_ids, widths, nseg)
    chunk_bytes = (seg_bits + 7) >> 3
    offsets = exclusive_cumsum(chunk_bytes)
    total = int(offsets[-1])
    if len(widths) == 0 or total == 0:
        return bytes(total), offsets
    start = offsets[:-1][segment_ids] * 8 + within
    nwords = (total + 3) // 4 + 1
    word = start >> 5
    shift = (start & 31).astype(np.uint64)
    shifted = values << shift                      # < 2**56: exact in uint64
    lo = (shifted & np.uint64(0xFFFFFFFF)).astype(np.float64)
    hi = (shifted >> np.uint64(32)).astype(np.float64)
    # Fields never overlap, so summing the disjoint bit patterns of a word equals OR-ing them; each sum
    # stays below 2**32 and is exact in float64, which lets bincount do the scatter at full speed.
    acc = np.bincount(word, weights=lo, minlength=nwords)
    acc += np.bincount(word + 1, weights=hi, minlength=nwords)[:nwords]
    words = acc.astype(np.uint64).astype("<u4")
    return words.tobytes()[:total], offsets


def words_of(plane: bytes | np.ndarray) -> np.ndarray:
    """The plane as little-endian u32 words with two zero words of slack for unaligned 32-bit reads."""
    buf = np.frombuffer(plane, dtype=np.uint8) if not isinstance(plane, np.ndarray) else plane
    padded = np.zeros(((len(buf) + 3) // 4 + 2) * 4, dtype=np.uint8)
    padded[: len(buf)] = buf
    return padded.view("<u4").astype(np.uint64)


def read_fields(words: np.ndarray, bitpos: np.ndarray, widths: np.ndarray | int) -> np.ndarray:
    """Read fields (<= 32 bits) at arbitrary bit positions from ``words_of(plane)``."""
    bitpos = np.asarray(bitpos, dtype=np.int64)
    q = bitpos >> 5
    window = (words[q] | (words[q + 1] << np.uint64(32))) >> (bitpos & 31).astype(np.uint64)
    mask = (np.uint64(1) << np.asarray(widths, dtype=np.uint64)) - np.uint64(1)
    return window & mask


def read_window32(words: np.ndarray, bitpos: np.ndarray) -> np.ndarray:
    return read_fields(words, bitpos, 32)


def ctz32(x: np.ndarray) -> np.ndarray:
    """Count trailing zeros of u32 values (32 for zero) - the software twin of the parallel zero counter."""
    x = x.astype(np.uint64)
    low = x & (~x + np.uint64(1)) & np.uint64(0xFFFFFFFF)
    out = np.full(x.shape, 32, dtype=np.int64)
    nz = low != 0
    out[nz] = np.log2(low[nz].astype(np.float64)).astype(np.int64)
    return out


def check_chunk_lengths(offsets: np.ndarray, used_bits: np.ndarray, plane_name: str) -> None:
    """A chunk must be exactly ceil(used_bits / 8) bytes long (no overrun, no trailing garbage)."""
    lengths = np.diff(offsets)
    need = (used_bits + 7) >> 3
    bad = np.flatnonzero(lengths != need)
    if len(bad):
        s = int(bad[0])
        raise FormatError(f"{plane_name}: chunk {s} has {int(lengths[s])} bytes, its contents need {int(need[s])}")


def check_zero_padding(words: np.ndarray, chunk_starts: np.ndarray, used_bits: np.ndarray, plane_name: str,
                       chunk_ids: np.ndarray) -> None:
    """Bits between a chunk's last field and its byte boundary must be zero."""
    pad = (8 - (used_bits & 7)) & 7
    has = np.flatnonzero(pad > 0)
    if not len(has):
        return
    vals = read_fields(words, chunk_starts[has] * 8 + used_bits[has], pad[has])
    bad = np.flatnonzero(vals != 0)
    if len(bad):
        raise FormatError(f"{plane_name}: non-zero padding bits in chunk {int(chunk_ids[has[bad[0]]])}")


def _bits_to_plane(bitarr: np.ndarray) -> bytes:
    return np.packbits(bitarr, bitorder="little").tobytes()


def pack_unary(segment_ids: np.ndarray, ranks: np.ndarray, escape: np.ndarray, escape_payload: np.ndarray,
               K: int, payload_bits: int, nseg: int) -> tuple[bytes, np.ndarray]:
    """Fast path of ``pack_chunks`` for rank-unary code planes: a code of rank r is r zeros and a one,
    so only the ones (and the rare escapes' raw bits) need placing in a zero bit array."""
    widths = np.where(escape, K + 1 + payload_bits, ranks + 1)
    within, seg_bits = segment_offsets(segment_ids, widths, nseg)
    offsets = exclusive_cumsum((seg_bits + 7) >> 3)
    bitarr = np.zeros(int(offsets[-1]) * 8, dtype=np.uint8)
    start = offsets[:-1][segment_ids] * 8 + within
    bitarr[start + np.where(escape, K, ranks)] = 1
    esc = np.flatnonzero(escape)
    if len(esc):
        for j in range(payload_bits):
            on = esc[((escape_payload[esc] >> j) & 1).astype(bool)]
            bitarr[start[on] + K + 1 + j] = 1
    return _bits_to_plane(bitarr), offsets


def _field_bits(widths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The stream bits of consecutive fields (<= 16 bits, LSB first), one uint8 per bit."""
    widths = np.asarray(widths)
    maxw = int(widths.max()) if len(widths) else 0
    if maxw == 0:
        return np.zeros(0, dtype=np.uint8)
    if maxw <= 8:
        bm = np.unpackbits(np.asarray(values, dtype=np.uint8)[:, None], axis=1, bitorder="little")
    else:
        v16 = np.ascontiguousarray(np.asarray(values, dtype="<u2"))
        bm = np.unpackbits(v16.view(np.uint8).reshape(-1, 2), axis=1, bitorder="little")
    if np.all(widths == maxw):
        return bm[:, :maxw].reshape(-1)
    return bm[np.arange(bm.shape[1])[None, :] < widths[:, None]]


def pack_fixed(sections: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> bytes:
    """Fast path of ``pack_chunks`` for fixed-size planes. Each section is (widths, values, chunk_bits):
    fields stored contiguously in value order, ``chunk_bits[s]`` of them in superblock ``s``. A chunk is
    section 0's bits of that superblock, then section 1's, ...; chunks are byte-padded and packed.
    All superblocks but the last have the same size, so the full ones are packed as one bit matrix."""
    seqs = [_field_bits(w, v) for w, v, _ in sections]
    bits = [np.asarray(b, dtype=np.int64) for _, _, b in sections]
    nsb = len(bits[0])
    for seq, b in zip(seqs, bits):
        if len(b) != nsb or int(b.sum()) != len(seq):
            raise ValueError("fields do not fill the declared chunks")
    if nsb == 0:
        return b""
    total_last = sum(int(b[-1]) for b in bits)
    total_full = sum(int(b[0]) for b in bits)
    nfull = nsb if all(b[-1] == b[0] for b in bits) else nsb - 1
    out = []
    if nfull and total_full:
        mat = np.zeros((nfull, ((total_full + 7) >> 3) * 8), dtype=np.uint8)
        col = 0
        for seq, b in zip(seqs, bits):
            w = int(b[0])
            mat[:, col: col + w] = seq[: nfull * w].reshape(nfull, w)
            col += w
        out.append(np.packbits(mat, axis=1, bitorder="little").reshape(-1).tobytes())
    if nfull < nsb and total_last:
        out.append(_bits_to_plane(np.concatenate([seq[nfull * int(b[0]):] for seq, b in zip(seqs, bits)])))
    return b"".join(out)


def _bits_to_fields(seq: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Inverse of ``_field_bits``: consecutive LSB-first fields (<= 16 bits) from one uint8 per bit."""
    widths = np.asarray(widths)
    n = len(widths)
    maxw = int(widths.max()) if n else 0
    if maxw == 0:
        return np.zeros(n, dtype=np.int64)
    if np.all(widths == maxw):
        bm = seq.reshape(n, maxw)
    else:
        bm = np.zeros((n, maxw), dtype=np.uint8)
        bm[np.arange(maxw)[None, :] < widths[:, None]] = seq
    if maxw > 8:
        bm = np.pad(bm, ((0, 0), (0, 16 - maxw)))
        return np.packbits(bm, axis=1, bitorder="little").view("<u2").reshape(-1).astype(np.int64)
    return np.packbits(bm, axis=1, bitorder="little").reshape(-1).astype(np.int64)


def _unpack_byte_fields(plane: bytes, w: int, n: int) -> np.ndarray:
    """``n`` fields of width ``w`` in {1, 2, 4, 8} packed back to back from byte 0 (no padding)."""
    b = np.frombuffer(plane, dtype=np.uint8)
    per = 8 // w
    shifts = np.arange(per, dtype=np.uint8) * w
    return ((b[:, None] >> shifts) & ((1 << w) - 1)).reshape(-1)[:n].astype(np.int64)


def unpack_fixed(plane: bytes, sections: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """Inverse of ``pack_fixed``: sections are (widths, chunk_bits); returns each section's field values.
    The caller has checked the plane length and padding."""
    if len(sections) == 1:
        widths, chunk_bits = sections[0]
        w = int(widths[0]) if len(widths) else 0
        cb = np.asarray(chunk_bits)
        # Fast path: one uniform width dividing a byte, every chunk but the last a whole number of bytes, so
        # the fields lie back to back through the plane (the last chunk's padding comes after its fields).
        if w in (1, 2, 4, 8) and np.all(widths == w) and np.all(cb[:-1] % 8 == 0):
            return [_unpack_byte_fields(plane, w, len(widths))]
    bits = [np.asarray(b, dtype=np.int64) for _, b in sections]
    nsb = len(bits[0])
    allbits = np.unpackbits(np.frombuffer(plane, dtype=np.uint8), bitorder="little")
    total_full = sum(int(b[0]) for b in bits) if nsb else 0
    nfull = nsb if nsb and all(b[-1] == b[0] for b in bits) else max(nsb - 1, 0)
    B8 = ((total_full + 7) >> 3) * 8
    mat = allbits[: nfull * B8].reshape(nfull, B8) if B8 else np.zeros((nfull, 0), np.uint8)
    tail = allbits[nfull * B8:]
    out, col, tcol = [], 0, 0
    for (widths, _), b in zip(sections, bits):
        w_full = int(b[0]) if nsb else 0
        parts = [mat[:, col: col + w_full].reshape(-1)]
        col += w_full
        if nfull < nsb:
            w_last = int(b[-1])
            parts.append(tail[tcol: tcol + w_last])
            tcol += w_last
        out.append(_bits_to_fields(np.concatenate(parts), widths))
    return out
