"""Every bf16 pattern (all 65,536) round-trips in both schemes and several configs, in format 3.0 and the 2.0
layout, and the draft of every pattern is the one FORMAT.md §2.1 specifies (golden vs the reference formula,
vectorised)."""
from __future__ import annotations

import numpy as np
import pytest

import reference_format as R
from cassandra_rtl.golden import escfield
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig

ALL = np.arange(1 << 16, dtype=np.uint16)
TAIL = 37   # extra values: the last superblock (and the last MX block) is partial


def _natural():
    return np.concatenate([ALL, ALL[12345: 12345 + TAIL]])


def _permuted():
    rng = np.random.default_rng(7)
    return np.concatenate([rng.permutation(ALL), rng.integers(0, 1 << 16, TAIL, dtype=np.uint16)])


def _anchored():
    """Blocks of 32 whose shared exponent X exceeds the exponent of 31 patterns by d = 0..9, so every
    pattern meets every C2 case (c = m .. m-9, X = 0 and X = 1 blocks of subnormals, X = 255)."""
    rng = np.random.default_rng(11)
    blocks = []
    count = 0
    for e in range(256):
        pats = rng.permutation(np.flatnonzero(((ALL >> 7) & 0xFF) == e)).astype(np.uint16)
        for j in range(0, len(pats), 31):
            body = pats[j: j + 31]
            if len(body) < 31:
                body = np.concatenate([body, rng.choice(pats, 31 - len(body))])
            d = count % 10
            count += 1
            X = min(255, e + d)
            anchor = np.uint16((int(rng.integers(2)) << 15) | (X << 7) | int(rng.integers(128)))
            blk = np.insert(body, int(rng.integers(32)), anchor)
            blocks.append(blk)
    out = np.concatenate(blocks)
    return np.concatenate([out, rng.integers(0, 1 << 16, TAIL + 3, dtype=np.uint16)])


LAYOUTS = {"natural": _natural, "permuted": _permuted, "anchored": _anchored}
_cache: dict[str, np.ndarray] = {}


def layout(name):
    if name not in _cache:
        arr = LAYOUTS[name]()
        assert len(np.unique(arr)) == 1 << 16          # every pattern is present
        _cache[name] = arr
    return _cache[name]


def _keep(kind, G):
    return {"all": G, "one": 1, "half": G // 2, "0.3": R.keep_count(0.3, G)}[kind]


def _cases():
    """Every (scheme, G, m, keep) on the permuted layout; the anchored layout (all C2 cases: it exists for
    C2's shared exponent) and the natural order on a diagonal of the rest, to keep the suite fast."""
    out = []
    for scheme in ("c1", "c2"):
        for G in (32, 256):
            for i, keep in enumerate(("all", "one", "0.3")):
                for m in (0, 3, 7):
                    out.append(("permuted", scheme, G, m, keep))
                    if scheme == "c2":
                        out.append(("anchored", scheme, G, m, keep))
                out.append(("natural", scheme, G, (7, 0, 3)[i], keep))
                if scheme == "c1":
                    out.append(("anchored", scheme, G, 3, keep))
    return out


@pytest.mark.parametrize("layout_name,scheme,G,m,keep", _cases())
def test_all_patterns_roundtrip_and_draft(layout_name, scheme, G, m, keep):
    bits = layout(layout_name)
    k = _keep(keep, G)
    cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_count=k)
    std, v3 = escfield.encode(bits, cfg)
    assert std.planes == encode_tensor(bits, cfg).planes
    kept = R.keep_flags_np(bits, G, k)
    if scheme == "c1":
        expect = R.draft_c1_np(bits, m, kept)
    else:
        expect = R.draft_c2_np(bits, m, R.block_max_exponent(bits, G), kept)
    for enc in (v3, std):
        full = decode_full(enc)
        assert full.dtype == np.uint16 and full.shape == bits.shape
        np.testing.assert_array_equal(full, bits)
        draft = decode_draft(enc)
        bad = np.flatnonzero(draft != expect)
        assert len(bad) == 0, (f"format {enc.format_major}.0: {len(bad)} drafts differ from §2.1; first at {bad[0]}: "
                               f"bits {int(bits[bad[0]]):#06x} draft {int(draft[bad[0]]):#06x} "
                               f"expected {int(expect[bad[0]]):#06x}")


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_all_patterns_2d_keep_ratio_half(scheme):
    """A 2-D tensor whose rows are not a multiple of G (superblocks cross rows: value order is row-major)."""
    bits = _permuted()[: 65536 + 24].reshape(149, 440)
    cfg = CodecConfig(scheme=scheme, group_size=64, mantissa_bits=2, keep_ratio=0.5)
    assert cfg.keep_count == 32
    enc = encode_tensor(bits, cfg)
    np.testing.assert_array_equal(decode_full(enc), bits)
    flat = bits.reshape(-1)
    kept = R.keep_flags_np(flat, 64, 32)
    expect = R.draft_c1_np(flat, 2, kept) if scheme == "c1" else \
        R.draft_c2_np(flat, 2, R.block_max_exponent(flat, 64), kept)
    np.testing.assert_array_equal(decode_draft(enc).reshape(-1), expect)


def test_draft_formula_special_values():
    """Spot checks of the §2.1 table itself (hand-derived, so the reference formula is checked too)."""
    # C1, m = 2: keep sign, exponent, top 2 mantissa bits.
    assert R.draft_c1(0x3FFF, 2, True) == 0x3FE0
    assert R.draft_c1(0x7F81, 2, True) == 0x7F80       # NaN with payload only in cut bits -> +Inf
    assert R.draft_c1(0x8001, 2, True) == 0x8000       # a subnormal truncated to -0
    assert R.draft_c1(0xFFFF, 2, False) == 0x0000      # pruned -> +0
    # C2, m = 3: X = e -> c = 3 (like C1); X = e + 2 -> c = 1; X = e + 4 -> c < 0 -> signed zero.
    assert R.draft_c2(0x3F7F, 3, 0x7E, True) == 0x3F70
    assert R.draft_c2(0x3F7F, 3, 0x80, True) == 0x3F40
    assert R.draft_c2(0xBF7F, 3, 0x82, True) == 0x8000
    # subnormal in a block of subnormals (X = 0, Xe = 1): c = m
    assert R.draft_c2(0x007F, 3, 0, True) == 0x0070
    # subnormal next to a normal with e = 2 (Xe = 2): c = m - 1
    assert R.draft_c2(0x007F, 3, 2, True) == 0x0060


# ------------------------------------------------------------------ format 2.0: chunks of A superblocks, pairs
# (the numpy codec, explicitly: the compiled one is compared with it in tests/test_golden_native.py)

def _pair_books(scheme):
    """Fixed books full of pair groups (uniform exponents give the golden DP no reason for pairs)."""
    from cassandra_rtl.golden.codebook import Codebook
    if scheme == "c1":
        return (Codebook((R.P, 127, 126, 125, 124, 123, 122, 121), 0b1110),   # {P} {127 126} {125 124} {123 122} {121}
                Codebook((127, 126, 125, 124, 0, 255), 0b101))                # {127 126} {125} {124 0} {255}
    return None, Codebook(tuple(range(8)), 0b1111)                            # deltas {0 1} {2 3} {4 5} {6 7}


def _check_patterns(layout_name, scheme, G, m, keep, A, fixed_books=False):
    bits = layout(layout_name)
    k = _keep(keep, G)
    cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_count=k, chunk_superblocks=A,
                      pair_codes=True)
    enc = encode_tensor(bits, cfg, books=_pair_books(scheme) if fixed_books else None, impl="numpy")
    assert enc.nchunks == -(-enc.nsb // A)
    np.testing.assert_array_equal(decode_full(enc, impl="numpy"), bits)
    kept = R.keep_flags_np(bits, G, k)
    if scheme == "c1":
        expect = R.draft_c1_np(bits, m, kept)
    else:
        expect = R.draft_c2_np(bits, m, R.block_max_exponent(bits, G), kept)
    np.testing.assert_array_equal(decode_draft(enc, impl="numpy"), expect)
    return enc


FORMAT2_QUICK = [("permuted", "c1", 32, 3, "0.3", 32), ("natural", "c1", 256, 7, "all", 4),
                 ("anchored", "c2", 32, 3, "all", 32), ("permuted", "c2", 256, 0, "one", 4),
                 ("anchored", "c1", 128, 0, "half", 8), ("permuted", "c2", 64, 7, "0.3", 16)]


@pytest.mark.parametrize("fixed_books", [False, True], ids=["golden-books", "pair-books"])
@pytest.mark.parametrize("layout_name,scheme,G,m,keep,A", FORMAT2_QUICK)
def test_all_patterns_chunks_and_pairs(layout_name, scheme, G, m, keep, A, fixed_books):
    _check_patterns(layout_name, scheme, G, m, keep, A, fixed_books)


@pytest.mark.slow
@pytest.mark.parametrize("layout_name,scheme,G,m,keep", _cases())
@pytest.mark.parametrize("A", [2, "max"])
def test_all_patterns_chunks_and_pairs_matrix(layout_name, scheme, G, m, keep, A):
    _check_patterns(layout_name, scheme, G, m, keep, 1024 // G if A == "max" else A, fixed_books=A == 2)
