"""The golden codec against the independent scalar reference (tests/reference_format.py) on small inputs:
encode byte for byte (planes, chunk offsets, index bytes, codebooks), decode value for value, in format 3.0
(golden/escfield.py) and in the 2.0 layout (golden/codec.py)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import reference_format as R
from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden import escfield
from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.codec import (decode_draft, decode_full, encode_tensor, index_to_bytes, keep_mask,
                                        plane_chunks, plane_offsets)
from cassandra_rtl.golden.config import CodecConfig


def _books(enc):
    spec = list(enc.spec_book.symbols) if enc.spec_book is not None else None
    return spec, list(enc.verif_book.symbols)


def _pairs(enc):
    return (enc.spec_book.pairs if enc.spec_book is not None else 0), enc.verif_book.pairs


def check_against_reference(bits, cfg, salience=None, books=None, compare_books=True, pairs=(0, 0)):
    """Golden encode == reference encode (same books); both decoders agree with the input. Chunks of
    ``cfg.chunk_superblocks`` superblocks; pair groups from ``cfg.pair_codes`` (golden books) or ``pairs``
    (the masks of fixed ``books``)."""
    flat = [int(v) for v in np.asarray(bits).reshape(-1)]
    N, G, m, k, A = len(flat), cfg.group_size, cfg.mantissa_bits, cfg.keep_count, cfg.chunk_superblocks
    gbooks = None if books is None else (Codebook(tuple(books[0]), pairs[0]) if books[0] is not None else None,
                                         Codebook(tuple(books[1]), pairs[1]))
    enc = encode_tensor(bits, cfg, salience=salience, books=gbooks, impl="numpy")     # the normative codec
    auto = encode_tensor(bits, cfg, salience=salience, books=gbooks)                   # and the dispatch (C)
    assert auto.planes == enc.planes and _books(auto) == _books(enc) and _pairs(auto) == _pairs(enc)
    if books is None and compare_books:
        try:
            ref_auto = R.encode(flat, cfg.scheme, G, m, k, salience=salience, A=A, pair_codes=cfg.pair_codes,
                                major=2)
        except R.Unspecified:
            pass
        else:
            assert _books(enc) == (ref_auto.spec_book, ref_auto.verif_book), "codebooks differ from §3.1"
            assert _pairs(enc) == (ref_auto.spec_pairs, ref_auto.verif_pairs), "pair masks differ from §3.1"
    sp, vp = _pairs(enc)
    ref = R.encode(flat, cfg.scheme, G, m, k, salience=salience, books=_books(enc), A=A, pairs=(sp, vp), major=2)
    offs = same_planes_as_reference(enc, ref, cfg, "format 2.0")
    spec_book, verif_book = _books(enc)
    kw = dict(A=A, spec_pairs=sp, verif_pairs=vp, major=2)
    full, kept = R.decode(enc.planes, offs, N, cfg.scheme, G, m, k, spec_book, verif_book, full=True, **kw)
    draft, kept2 = R.decode(enc.planes, offs, N, cfg.scheme, G, m, k, spec_book, verif_book, full=False, **kw)
    assert full == flat
    assert kept == kept2 == ref.kept
    for impl in ("numpy", "auto"):
        assert decode_full(enc, impl=impl).reshape(-1).tolist() == flat
        assert decode_draft(enc, impl=impl).reshape(-1).tolist() == draft
    X = R.block_max_exponent(np.asarray(flat, dtype=np.uint16), G) if cfg.scheme == "c2" else None
    for i, v in enumerate(flat):
        want = R.draft_c1(v, m, kept[i]) if cfg.scheme == "c1" else R.draft_c2(v, m, int(X[i]), kept[i])
        assert draft[i] == want, f"value {i}: draft {draft[i]:#06x}, §2.1 says {want:#06x}"
    check_format3(flat, bits, cfg, salience, gbooks if gbooks is not None else (enc.spec_book, enc.verif_book),
                  draft, ref.kept)
    return enc, ref


def same_planes_as_reference(enc, ref, cfg, label: str) -> dict:
    """Planes, chunk offsets, chunks and index bytes equal the reference's; returns the indexed planes' offsets."""
    assert sorted(enc.planes) == sorted(ref.planes)
    for name in ref.planes:
        assert enc.planes[name] == ref.planes[name], f"{label}: plane {name} differs from the reference"
        assert list(plane_offsets(enc, name)) == ref.offsets[name], f"{label}: chunk offsets of {name}"
        assert [bytes(c) for c in plane_chunks(enc, name)] == [ref.planes[name][a:b] for a, b in
                                                               zip(ref.offsets[name][:-1], ref.offsets[name][1:])]
    indexed = R.indexed_planes(cfg.scheme, cfg.group_size, cfg.keep_count, *_pairs(enc))
    assert set(enc.indexed_planes) == set(indexed)
    for name in indexed:
        assert index_to_bytes(np.asarray(enc.offsets[name])) == R.index_bytes(ref.offsets[name])
    return {name: ref.offsets[name] for name in indexed}


def check_format3(flat, bits, cfg, salience, books, draft, kept):
    """Format 3.0: golden (numpy and the dispatch) == reference, byte for byte and value for value."""
    N, G, m, k, A = len(flat), cfg.group_size, cfg.mantissa_bits, cfg.keep_count, cfg.chunk_superblocks
    own = cfg.scheme == "c2" or not cfg.prunes or R.P in books[0].symbols      # a book encoders take as given
    _, v3 = escfield.encode(bits, cfg, salience, books if own else None, impl="numpy")
    assert escfield.encode(bits, cfg, salience, books if own else None)[1].planes == v3.planes
    sp, vp = _pairs(v3)
    ref = R.encode(flat, cfg.scheme, G, m, k, salience=salience, books=_books(v3), A=A, pairs=(sp, vp), major=3)
    offs = same_planes_as_reference(v3, ref, cfg, "format 3.0")
    kw = dict(A=A, spec_pairs=sp, verif_pairs=vp, major=3)
    full, kept3 = R.decode(v3.planes, offs, N, cfg.scheme, G, m, k, *_books(v3), full=True, **kw)
    assert full == flat and kept3 == kept
    assert R.decode(v3.planes, offs, N, cfg.scheme, G, m, k, *_books(v3), full=False, **kw)[0] == draft
    for impl in ("numpy", "auto"):
        assert decode_full(v3, impl=impl).reshape(-1).tolist() == flat
        assert decode_draft(v3, impl=impl).reshape(-1).tolist() == draft


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("G", [32, 64])
@pytest.mark.parametrize("m", [0, 1, 3, 6, 7])
@pytest.mark.parametrize("keep", ["G", "G-1", "G/2", "1"])
def test_encode_byte_exact_and_decode(weight_bits, scheme, G, m, keep):
    k = {"G": G, "G-1": G - 1, "G/2": G // 2, "1": 1}[keep]
    bits = weight_bits(3 * G + 11, seed=G + m, special=0.1)
    check_against_reference(bits, CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_count=k))


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_more_than_16_superblocks_two_index_anchors(weight_bits, scheme):
    """nsb > 16: the index has two u32 anchors and relative u16 offsets (§6)."""
    bits = weight_bits(33 * 32 + 5, seed=5).reshape(-1)
    enc, ref = check_against_reference(bits, CodecConfig(scheme=scheme, group_size=32, mantissa_bits=2,
                                                         keep_count=20, chunk_superblocks=1))
    assert len(ref.offsets["verif.codes"]) - 1 == 34
    assert ref.offsets["verif.codes"][16] > 0


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_2d_tensor_value_order_is_row_major(weight_bits, scheme):
    bits = weight_bits(7 * 45, seed=9).reshape(7, 45)
    enc, _ = check_against_reference(bits, CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3,
                                                       keep_count=11))
    assert enc.shape == (7, 45)
    assert decode_full(enc).shape == (7, 45)


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_caller_salience_with_ties(weight_bits, scheme):
    """Weight path: any salience; equal scores go to the lower index (§2)."""
    bits = weight_bits(2 * 64 + 9, seed=3)
    sal = np.random.default_rng(4).integers(0, 3, len(bits)).astype(np.float64)   # many ties
    cfg = CodecConfig(scheme=scheme, group_size=64, mantissa_bits=3, keep_count=17)
    check_against_reference(bits, cfg, salience=sal)
    expect = R.keep_flags([int(b) for b in bits], 64, 17, salience=sal)
    assert keep_mask(bits, cfg, sal).tolist() == expect


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_magnitude_ties_including_signed_zeros(scheme):
    """+0 and -0 (and x, -x) have the same magnitude key: the lower index wins."""
    rng = np.random.default_rng(2)
    pool = np.array([0x0000, 0x8000, 0x3F80, 0xBF80, 0x0001, 0x8001], dtype=np.uint16)
    bits = rng.choice(pool, 32 * 3 + 7)
    check_against_reference(bits, CodecConfig(scheme=scheme, group_size=32, mantissa_bits=4, keep_count=13))


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_fixed_books_empty_and_full(weight_bits, scheme):
    """Any valid book decodes (§3.1): an empty verification book escapes everything (K = 0), a 15-entry
    book that lacks the common exponents escapes them after 15 zeros (24-bit codes)."""
    bits = weight_bits(3 * 32 + 3, seed=1, special=0.3)
    cfg = CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3, keep_count=20)
    spec = [R.P] if scheme == "c1" else None
    check_against_reference(bits, cfg, books=(spec, []))
    far = list(range(240, 255))                        # exponents the data hardly uses
    spec15 = ([R.P] + far[:14]) if scheme == "c1" else None
    check_against_reference(bits, cfg, books=(spec15, far))


def test_c1_no_pruning_has_no_pruned_mark_and_empty_verif_codes(weight_bits):
    bits = weight_bits(100, seed=8)
    enc, ref = check_against_reference(bits, CodecConfig(scheme="c1", group_size=32, mantissa_bits=3))
    assert R.P not in enc.spec_book.symbols
    assert enc.planes["verif.codes"] == b""
    assert "verif.codes" not in R.indexed_planes("c1", 32, 32)


def test_c1_pruned_mark_rarer_than_15_exponents():
    """§3.1: P must be in the book; when it ranks below 15 other symbols the book is the 14 most frequent
    exponents followed by P."""
    rng = np.random.default_rng(0)
    e = np.concatenate([np.repeat(np.arange(100, 120), 48), np.repeat([99], 60)])   # 21 exponents, 4 * 255 values
    kept_vals = (e << 7) | rng.integers(0, 128, len(e))
    rng.shuffle(kept_vals)
    per = 255                                         # G = 256, k = 255: one +0 pruned per superblock
    nsb = len(kept_vals) // per
    sbs = [np.append(kept_vals[s * per:(s + 1) * per], 0) for s in range(nsb)]
    bits = np.concatenate(sbs).astype(np.uint16)
    cfg = CodecConfig(scheme="c1", group_size=256, keep_count=255, mantissa_bits=3)
    counts = Counter(np.where(R.keep_flags_np(bits, 256, 255), (bits >> 7) & 0xFF, R.P).tolist())
    assert counts[R.P] == nsb == 4
    assert R.golden_codebook(counts, required=R.P) == [99] + list(range(100, 113)) + [R.P]
    enc, _ = check_against_reference(bits, cfg)
    assert list(enc.spec_book.symbols) == [99] + list(range(100, 113)) + [R.P]


# ------------------------------------------------------------------------ FORMAT.md vs golden disagreements

# A kept-exponent histogram (G = 32, k = 29, 6 superblocks) where the unconstrained minimising cut is
# K = 1 ([117]) but P ranks lower: §3.1 minimises over K >= rank(P) + 1 instead.
_HIST = {100: 10, 101: 7, 102: 5, 103: 13, 104: 8, 105: 5, 106: 2, 107: 15, 108: 4, 109: 9, 110: 4, 111: 9,
         112: 8, 113: 5, 115: 17, 116: 4, 117: 23, 118: 5, 119: 6, 120: 3, 121: 1, 122: 8, 123: 3}


def _hist_tensor():
    rng = np.random.default_rng(5)
    e = np.array([s for s, c in _HIST.items() for _ in range(c)])
    vals = (e << 7) | rng.integers(0, 128, len(e))
    rng.shuffle(vals)
    assert len(vals) == 6 * 29
    return np.concatenate([np.append(vals[s * 29:(s + 1) * 29], [0, 0, 0]) for s in range(6)]).astype(np.uint16)


def test_codebook_construction_with_pruned_mark():
    bits = _hist_tensor()
    cfg = CodecConfig(scheme="c1", group_size=32, keep_count=29, mantissa_bits=3)
    kept = R.keep_flags_np(bits, 32, 29)
    counts = Counter(np.where(kept, (bits >> 7) & 0xFF, R.P).tolist())
    assert counts == Counter({**_HIST, R.P: 18})
    expect = R.golden_codebook(counts, required=R.P)
    assert expect.index(R.P) == 1 and len(expect) > 2   # the case where K > K_min beats K = K_min
    enc = encode_tensor(bits, cfg)
    assert (list(enc.spec_book.symbols), enc.spec_book.pairs) == R.golden_book(counts, R.P, cfg.pair_codes)
    if not cfg.pair_codes:
        assert list(enc.spec_book.symbols) == expect


def test_codebook_disagreement_tensor_still_roundtrips():
    bits = _hist_tensor()
    check_against_reference(bits, CodecConfig(scheme="c1", group_size=32, keep_count=29, mantissa_bits=3),
                            compare_books=False)


@pytest.mark.parametrize("ratio,G", [(0.3, 128), (0.25, 64), (1 / 32, 32), (0.999, 256), (0.01, 32),
                                     (1.0, 64), (0.5, 256)])
def test_keep_ratio_to_keep_count(ratio, G):
    assert CodecConfig(group_size=G, keep_ratio=ratio).keep_count == R.keep_count(ratio, G)


def test_keep_ratio_ceil_is_exact():
    R_ = 0.5 + 2.0 ** -40                               # exactly representable; R*G = 64 + 2**-33 exactly
    assert R.keep_count(R_, 128) == 65
    assert CodecConfig(group_size=128, keep_ratio=R_).keep_count == 65


@pytest.mark.parametrize("kw", [dict(keep_ratio=0.0), dict(keep_ratio=1.5), dict(keep_ratio=-0.1),
                                dict(keep_ratio=float("nan")), dict(keep_count=0), dict(keep_count=129),
                                dict(mantissa_bits=8), dict(mantissa_bits=-1), dict(group_size=100),
                                dict(group_size=16), dict(group_size=512), dict(scheme="c3")])
def test_config_outside_section_2_rejected(kw):
    with pytest.raises(ConfigError):
        CodecConfig(**kw)


@pytest.mark.parametrize("G", [32, 64, 128, 256])
@pytest.mark.parametrize("m", range(8))
def test_config_inside_section_2_accepted(G, m):
    for k in (1, G // 3 or 1, G):
        cfg = CodecConfig(group_size=G, mantissa_bits=m, keep_count=k)
        assert cfg.kept_in(G) == k
        assert [cfg.kept_in(n) for n in (1, 5, G - 1)] == [R.kept_in(k, n, G) for n in (1, 5, G - 1)]


# ------------------------------------------------------------------------------------ format 2.0 features

@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("G,A", [(32, 4), (32, 32), (64, 2), (128, 8), (256, 4)])
@pytest.mark.parametrize("m", [0, 3, 7])
@pytest.mark.parametrize("keep", ["G", "G-1", "0.3"])
def test_chunks_and_pairs_byte_exact(weight_bits, scheme, G, A, m, keep):
    """§1 chunks (fields back to back, one padding and one index entry per chunk, partial last chunk) and
    §3.1 pair groups (suffix bits in the companion fields), golden books by the DP."""
    k = {"G": G, "G-1": G - 1, "0.3": -(-3 * G // 10)}[keep]
    n = 2 * A * G + G + 11 if A * G <= 256 else A * G + 3 * G // 2 + 5
    bits = weight_bits(n, seed=G + A + m, special=0.05)
    cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_count=k, chunk_superblocks=A,
                      pair_codes=True)
    enc, ref = check_against_reference(bits, cfg)
    assert enc.nchunks == len(R.chunk_ranges(n, G, A)) == len(ref.offsets["verif.rest"]) - 1


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("A,pair_codes", [(1, True), (4, False)])
def test_chunks_or_pairs_alone(weight_bits, scheme, A, pair_codes):
    bits = weight_bits(9 * 32 + 7, seed=A, special=0.05)
    check_against_reference(bits, CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3, keep_count=12,
                                              chunk_superblocks=A, pair_codes=pair_codes))


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_more_than_16_chunks_two_index_anchors(weight_bits, scheme):
    bits = weight_bits(2 * 33 * 32 + 5, seed=6)
    enc, ref = check_against_reference(bits, CodecConfig(scheme=scheme, group_size=32, mantissa_bits=2,
                                                         keep_count=20, chunk_superblocks=2, pair_codes=True))
    assert len(ref.offsets["verif.codes"]) - 1 == 34 and ref.offsets["verif.codes"][16] > 0


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_fixed_books_with_pairs_and_escapes(weight_bits, scheme):
    """Any valid book decodes: pairs everywhere allowed (P a singleton), escapes after Q zeros."""
    bits = weight_bits(5 * 32 + 3, seed=2, special=0.3)
    cfg = CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3, keep_count=20, chunk_superblocks=2)
    e = sorted(Counter(((np.asarray(bits) >> 7) & 0xFF).tolist()).items(), key=lambda t: -t[1])
    common = [s for s, _ in e[:6]]
    if scheme == "c1":
        spec, sp = [R.P] + common, 0b1010           # {P} {c0 c1} {c2} {c3 c4} {c5}
        verif, vp = common[:5], 0b11                # {c0 c1} {c2 c3} {c4}
    else:
        spec, sp = None, 0
        verif, vp = [0, 1, 2, 3, 4, 5, 6], 0b1101    # {0 1} {2} {3 4} {5 6}
    check_against_reference(bits, cfg, books=(spec, verif), pairs=(sp, vp))
    check_against_reference(bits, cfg, books=(spec, []), pairs=(sp, 0))   # Q = 0: every pruned exponent escapes


def test_forced_pruned_mark_last_with_pairs():
    """rank(P) >= 15: 14 exponents and P; the DP groups the 14 (§3.1)."""
    counts = Counter({100 + i: 1000 - i for i in range(20)})
    counts[R.P] = 3
    syms, mask = R.golden_book(counts, required=R.P, pairs=True)
    assert syms[-1] == R.P and len(syms) == 15 and mask
    from cassandra_rtl.golden.codebook import build_codebook
    arr = np.zeros(257, np.int64)
    for s_, c_ in counts.items():
        arr[s_] = c_
    book = build_codebook(arr, required=R.P, pairs=True)
    assert (list(book.symbols), book.pairs) == (syms, mask)


def test_golden_book_dp_against_random_histograms():
    from cassandra_rtl.golden.codebook import build_codebook
    rng = np.random.default_rng(11)
    for _ in range(40):
        n = int(rng.integers(1, 30))
        syms = rng.choice(257, n, replace=False)
        cnt = rng.integers(1, int(rng.choice([3, 50, 5000])), n)
        counts = Counter({int(a): int(b) for a, b in zip(syms, cnt)})
        arr = np.zeros(257, np.int64)
        arr[syms] = cnt
        req = R.P if R.P in counts else None
        book = build_codebook(arr, required=req, pairs=True)
        assert (list(book.symbols), book.pairs) == R.golden_book(counts, required=req, pairs=True)
