"""Malformed planes with the CRC bypassed (EncodedTensor built directly): every §5/§7 format error
(impossible code, overrun, trailing bytes, non-zero padding, wrong keep count, bad exponent delta) must
raise FormatError, never decode silently. Each mutation is first confirmed invalid by the reference.
Every test runs on format 1.0 tensors and on 2.0 tensors (chunks of 2 superblocks, books with pairs)."""
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


def _pair_books(enc):
    """The golden books with pair groups wherever allowed (P stays a singleton): 2.0 companion fields."""
    def paired(book):
        if book is None:
            return None
        syms, mask, q, i = book.symbols or (0, 1, 2, 3, 4, 5), 0, 0, 0       # (the golden C2 book is empty here)
        while i < len(syms):
            if i + 1 < len(syms) and R.P not in syms[i: i + 2] and q % 2 == 0:
                mask |= 1 << q
                i += 2
            else:
                i += 1
            q += 1
        return Codebook(syms, mask)
    return paired(enc.spec_book), paired(enc.verif_book)


@pytest.fixture(scope="module", params=["v1", "v2"])
def encoded(request):
    from conftest import _weights
    out = {}
    A = 1 if request.param == "v1" else 2
    for scheme in PLANES:
        bits = _weights(5 * G + 7, seed=21, special=0.15)
        cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=M, keep_count=K, chunk_superblocks=A)
        enc = encode_tensor(bits, cfg)
        if A > 1:
            enc = encode_tensor(bits, cfg, books=_pair_books(enc))
            assert enc.verif_book.pairs and (enc.spec_book is None or enc.spec_book.pairs)
        spec = list(enc.spec_book.symbols) if enc.spec_book is not None else None
        sp = enc.spec_book.pairs if enc.spec_book is not None else 0
        ref = R.encode(bits.tolist(), scheme, G, M, K, books=(spec, list(enc.verif_book.symbols)), A=A,
                       pairs=(sp, enc.verif_book.pairs), major=2)
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
                 spec, list(enc.verif_book.symbols), full=full, A=cfg.chunk_superblocks,
                 spec_pairs=enc.spec_book.pairs if enc.spec_book is not None else 0,
                 verif_pairs=enc.verif_book.pairs, major=2)


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
    ch[1][0] ^= 0x01                                    # bit 0 of chunk 1: its first superblock's first keep flag
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
    for s, chunk in enumerate(R.chunk_ranges(len(flat), G, enc.config.chunk_superblocks)):
        first = True
        for i in (i for start, n in chunk for i in range(start, start + n)):
            _, e, f = R.fields(flat[i])
            c = M - (max(int(X[i]), 1) - max(e, 1))
            elem = ((int(e > 0) << 7 | f) >> (7 - c)) if c >= 0 else 0
            if not ref.kept[i] or elem == 0:
                delta = int(X[i]) - e
                if s == 2 and first:
                    assert X[i] < 255
                    delta, first = 255, False
                w.write_code(book, delta, enc.verif_book.pairs, major=2)
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


def test_suffix_bit_flip_changes_the_value_not_silently_the_format(encoded):
    """A flipped suffix bit in a pair group is a valid stream (another symbol of the same group): golden
    and the reference must decode it to the same (different) value."""
    bits, enc, ref = encoded["c1"]
    if not enc.spec_book.pairs:
        pytest.skip("format 1.0: no suffix bits")
    ch = [bytearray(c) for c in _chunks(enc, "spec.signman")]
    ch[0][0] ^= 0x01                                    # the first kept value's first field bit
    bad = with_chunks(enc, "spec.signman", [bytes(c) for c in ch])
    cfg = enc.config
    offs = {p: list(bad.offsets[p]) for p in bad.offsets}
    want, _ = R.decode(bad.planes, offs, bad.numel, "c1", G, M, K, list(enc.spec_book.symbols),
                       list(enc.verif_book.symbols), full=False, A=cfg.chunk_superblocks,
                       spec_pairs=enc.spec_book.pairs, verif_pairs=enc.verif_book.pairs, major=2)
    got = decode_draft(bad).reshape(-1).tolist()
    assert got == want and got != decode_draft(enc).reshape(-1).tolist()


@pytest.mark.parametrize("scheme,name", [("c1", "spec.codes"), ("c2", "verif.codes"), ("c2", "verif.rest")])
def test_decreasing_stored_offsets_are_a_format_error(encoded, scheme, name):
    """A hand-built tensor whose stored offsets go backwards (one chunk moved over its neighbour): a
    FormatError, not a numpy ValueError (found by native-v2's fuzz)."""
    _, enc, _ = encoded[scheme]
    off = np.array(enc.offsets[name], dtype=np.int64)
    off[1] = off[2] + 1
    bad = EncodedTensor(enc.shape, enc.config, enc.spec_book, enc.verif_book, dict(enc.planes),
                        {**enc.offsets, name: off})
    with pytest.raises(FormatError, match="do not increase"):
        decode_full(bad, impl="numpy")
    with pytest.raises(FormatError):
        decode_full(bad)
