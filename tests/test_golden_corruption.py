"""Malformed planes with the CRC bypassed (EncodedTensor built directly): every §5/§7 format error
(impossible code, overrun, trailing bytes, non-zero padding, wrong keep count, bad exponent delta) must
raise FormatError, never decode silently. Each mutation is first confirmed invalid by the reference."""
from __future__ import annotations

import numpy as np
import pytest

import reference_format as R
from cassandra_rtl.errors import FormatError
from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.codec import EncodedTensor, decode_draft, decode_full, encode_tensor, plane_offsets
from cassandra_rtl.golden.config import CodecConfig

G, M, K = 32, 3, 20
PLANES = {"c1": ["spec.codes", "spec.signman", "verif.codes", "verif.rest"],
          "c2": ["spec.mx", "verif.codes", "verif.rest"]}
CASES = [(s, p) for s in PLANES for p in PLANES[s]]


@pytest.fixture(scope="module")
def encoded():
    from conftest import _weights
    out = {}
    for scheme in PLANES:
        bits = _weights(5 * G + 7, seed=21, special=0.15)
        enc = encode_tensor(bits, CodecConfig(scheme=scheme, group_size=G, mantissa_bits=M, keep_count=K))
        spec = list(enc.spec_book.symbols) if enc.spec_book is not None else None
        ref = R.encode(bits.tolist(), scheme, G, M, K, books=(spec, list(enc.verif_book.symbols)))
        out[scheme] = (bits, enc, ref)
    return out


def _chunks(enc, name):
    off = list(plane_offsets(enc, name))
    return [enc.planes[name][a:b] for a, b in zip(off[:-1], off[1:])]


def with_chunks(enc, name, chunks):
    """A copy of ``enc`` whose plane ``name`` is made of ``chunks`` (stored offsets follow; fixed ones can't)."""
    off = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int64)
    planes = dict(enc.planes)
    planes[name] = b"".join(chunks)
    offsets = dict(enc.offsets)
    if name in offsets:
        offsets[name] = off
    return EncodedTensor(enc.shape, enc.config, enc.spec_book, enc.verif_book, planes, offsets)


def ref_rejects(enc, full=True):
    cfg = enc.config
    offs = {p: list(enc.offsets[p]) for p in enc.offsets}
    spec = list(enc.spec_book.symbols) if enc.spec_book is not None else None
    with pytest.raises(R.RefFormatError):
        R.decode(enc.planes, offs, enc.numel, cfg.scheme, cfg.group_size, cfg.mantissa_bits, cfg.keep_count,
                 spec, list(enc.verif_book.symbols), full=full)


def golden_rejects(bad, name, original):
    """Full decode raises FormatError; the draft raises too if the plane is speculation data, and is
    unaffected (still the correct draft) if it is verification data."""
    ref_rejects(bad)
    with pytest.raises(FormatError):
        decode_full(bad)
    if name.startswith("spec."):
        with pytest.raises(FormatError):
            decode_draft(bad)
    else:
        np.testing.assert_array_equal(decode_draft(bad), decode_draft(original))


def _padded_chunk(ref, name):
    for s, used in enumerate(ref.used[name]):
        if used % 8:
            return s, used
    raise AssertionError(f"test data has no padded chunk in {name}")


def test_intact_planes_decode(encoded):
    for scheme in PLANES:
        bits, enc, _ = encoded[scheme]
        rebuilt = with_chunks(enc, "verif.codes", _chunks(enc, "verif.codes"))
        np.testing.assert_array_equal(decode_full(rebuilt), bits)


@pytest.mark.parametrize("scheme,name", CASES)
def test_chunk_overrun(encoded, scheme, name):
    _, enc, _ = encoded[scheme]
    ch = _chunks(enc, name)
    s = max(range(len(ch)), key=lambda i: len(ch[i]))
    ch[s] = ch[s][:-1]
    golden_rejects(with_chunks(enc, name, ch), name, enc)


@pytest.mark.parametrize("scheme,name", CASES)
@pytest.mark.parametrize("where", ["first", "last"])
def test_chunk_trailing_bytes(encoded, scheme, name, where):
    _, enc, _ = encoded[scheme]
    ch = _chunks(enc, name)
    s = 0 if where == "first" else len(ch) - 1
    ch[s] = ch[s] + b"\x00"
    golden_rejects(with_chunks(enc, name, ch), name, enc)


@pytest.mark.parametrize("scheme,name", CASES)
def test_nonzero_padding(encoded, scheme, name):
    _, enc, ref = encoded[scheme]
    s, used = _padded_chunk(ref, name)
    ch = [bytearray(c) for c in _chunks(enc, name)]
    ch[s][-1] |= 0x80                                   # the chunk's last bit lies in its padding
    golden_rejects(with_chunks(enc, name, [bytes(c) for c in ch]), name, enc)


@pytest.mark.parametrize("scheme,name", [("c1", "spec.codes"), ("c1", "verif.codes"), ("c2", "verif.codes")])
def test_impossible_code(encoded, scheme, name):
    _, enc, _ = encoded[scheme]
    book = enc.spec_book if name == "spec.codes" else enc.verif_book
    ch = [bytearray(c) for c in _chunks(enc, name)]
    s = max(range(len(ch)), key=lambda i: len(ch[i]))
    assert 8 * len(ch[s]) > book.K + 1
    for b in range(book.K + 1):                          # a run of K+1 zeros at the chunk start
        ch[s][b // 8] &= ~(1 << (b % 8)) & 0xFF
    golden_rejects(with_chunks(enc, name, [bytes(c) for c in ch]), name, enc)


def test_c1_keep_count_other_than_k_s(encoded):
    bits, enc, _ = encoded["c1"]
    other = encode_tensor(bits, CodecConfig(scheme="c1", group_size=G, mantissa_bits=M, keep_count=K + 1),
                          books=(enc.spec_book, enc.verif_book))
    bad = with_chunks(enc, "spec.codes", _chunks(other, "spec.codes"))
    golden_rejects(bad, "spec.codes", enc)


def test_c2_bitmap_keep_count_other_than_k_s(encoded):
    _, enc, _ = encoded["c2"]
    ch = [bytearray(c) for c in _chunks(enc, "spec.mx")]
    ch[1][0] ^= 0x01                                    # bit 0 of superblock 1's chunk: its first keep flag
    golden_rejects(with_chunks(enc, "spec.mx", [bytes(c) for c in ch]), "spec.mx", enc)


def test_c2_delta_larger_than_shared_exponent(encoded):
    """§4: a draft-zero value's exponent is X - delta, an error if negative."""
    bits, enc, ref = encoded["c2"]
    book = list(enc.verif_book.symbols)
    assert 255 not in book
    flat = bits.tolist()
    X = R.block_max_exponent(bits, G)
    w = R.BitWriter()
    chunks = _chunks(enc, "verif.codes")
    for s, (start, n) in enumerate(R.superblocks(len(flat), G)):
        first = True
        for i in range(start, start + n):
            _, e, f = R.fields(flat[i])
            c = M - (max(int(X[i]), 1) - max(e, 1))
            elem = ((int(e > 0) << 7 | f) >> (7 - c)) if c >= 0 else 0
            if not ref.kept[i] or elem == 0:
                delta = int(X[i]) - e
                if s == 2 and first:
                    assert X[i] < 255
                    delta, first = 255, False
                w.write_code(book, delta)
        ch = w.chunk()
        if s != 2:
            assert ch == chunks[s]                       # the writer reproduces the untouched chunks
        chunks[s] = ch
    golden_rejects(with_chunks(enc, "verif.codes", chunks), "verif.codes", enc)


@pytest.mark.parametrize("scheme,name", CASES)
def test_missing_plane(encoded, scheme, name):
    _, enc, _ = encoded[scheme]
    planes = {p: v for p, v in enc.planes.items() if p != name}
    bad = EncodedTensor(enc.shape, enc.config, enc.spec_book, enc.verif_book, planes, dict(enc.offsets))
    with pytest.raises(FormatError):
        decode_full(bad)


@pytest.mark.parametrize("scheme,name", [("c1", "spec.codes"), ("c1", "verif.codes"), ("c2", "verif.codes"),
                                         ("c2", "verif.rest")])
def test_missing_index(encoded, scheme, name):
    _, enc, _ = encoded[scheme]
    offsets = {p: v for p, v in enc.offsets.items() if p != name}
    bad = EncodedTensor(enc.shape, enc.config, enc.spec_book, enc.verif_book, dict(enc.planes), offsets)
    with pytest.raises(FormatError):
        decode_full(bad)


def test_c1_book_without_pruned_mark(encoded):
    """§3.1: P must be in the speculation book when the tensor prunes; a book without it cannot mark
    pruned values, so the keep count cannot match."""
    _, enc, _ = encoded["c1"]
    book = Codebook(tuple(s for s in enc.spec_book.symbols if s != R.P))
    bad = EncodedTensor(enc.shape, enc.config, book, enc.verif_book, dict(enc.planes), dict(enc.offsets))
    with pytest.raises(FormatError):
        decode_full(bad)
