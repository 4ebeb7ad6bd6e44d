"""The compiled codec in format 3.0 (escape payloads in the companion fields, C2's spec.mx by MX block;
golden/escfield.py is the numpy reference): the same bytes and chunk offsets as the numpy encoder, the same
draft and full decodes as the numpy decoder (the C decoder called directly, so no silent fallback), on
random tensors with escapes and pair groups, all 65,536 bf16 patterns, and corrupted streams (the C decoder
rejects what numpy rejects; the dispatching decoder ends exactly as numpy does)."""
from __future__ import annotations

import numpy as np
import pytest

from cassandra_rtl.golden import escfield, native
from cassandra_rtl.golden.config import CodecConfig
from test_golden_native import _corruptions, _outcome, _pair_books, random_case, same_encoding

pytestmark = pytest.mark.skipif(native.load() is None, reason=f"compiled codec unavailable: "
                                f"{native.unavailable_reason()}")


def check3(bits, cfg, salience=None, books=None):
    """numpy == C for both layouts' bytes and offsets; the C 3.0 decoder == numpy 3.0 decoder == input."""
    ref_std, ref = escfield.encode(bits, cfg, salience, books, impl="numpy")
    fast_std, fast = escfield.encode(bits, cfg, salience, books, impl="native")
    same_encoding(ref_std, fast_std)
    same_encoding(ref, fast)
    assert type(fast) is escfield.EscFieldTensor
    same_encoding(ref, escfield.encode3(bits, cfg, salience, books))          # the one-layout entry point
    full = native._decode(ref, True)
    np.testing.assert_array_equal(full, bits)
    np.testing.assert_array_equal(full, escfield.decode(ref, True, impl="numpy"))
    np.testing.assert_array_equal(native._decode(ref, False), escfield.decode(ref, False, impl="numpy"))
    return ref


def heavy_tailed(n, seed):
    """Exponents spread wide enough that every book escapes (more than 15 distinct exponents per tensor)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * np.exp(rng.standard_normal(n) * 8)).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("G,A", [(32, 1), (32, 8), (128, 8), (256, 4)])
@pytest.mark.parametrize("m", [0, 3, 7])
@pytest.mark.parametrize("keep", [1.0, 0.5, 0.3])
@pytest.mark.parametrize("pairs", [False, True])
def test_random_tensors_with_escapes(scheme, G, A, m, keep, pairs):
    escapes = 0
    for n, seed in ((3 * A * G + 7, 1), (G - 1, 2), (1, 3)):
        bits = heavy_tailed(n, seed + G + m)
        cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_ratio=keep, chunk_superblocks=A,
                          pair_codes=pairs)
        enc = check3(bits, cfg)
        escapes += sum(int(escfield.escapes_per_chunk(enc, p).sum()) for p in ("spec.codes", "verif.codes")
                       if p in enc.planes)
    assert escapes > 0                       # the case reaches escapes (Q-zero runs, payloads in the fields)


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("A", [1, 4])
def test_fixed_pair_books_escape_in_every_field_plane(weight_bits, scheme, A):
    bits = weight_bits(6 * 32 * A + 5, seed=8, special=0.2)
    cfg = CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3, keep_count=20, chunk_superblocks=A,
                      pair_codes=True)
    enc = check3(bits, cfg, books=_pair_books(bits, scheme))
    assert escfield.escapes_per_chunk(enc, "verif.codes").sum() > 0


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("keep", [1.0, 0.3])
def test_every_bf16_pattern(scheme, keep):
    bits = np.random.default_rng(5).permutation(np.arange(65536, dtype=np.uint16))
    check3(bits, CodecConfig(scheme=scheme, group_size=128, mantissa_bits=3, keep_ratio=keep, chunk_superblocks=8,
                             pair_codes=True))


@pytest.mark.parametrize("scheme,A,pairs", [("c1", 1, False), ("c2", 1, False), ("c1", 4, True), ("c2", 4, True)])
def test_malformed_streams_end_as_numpy_does(scheme, A, pairs):
    """Flips, truncations, extensions and moved index entries: the C decoder returns no output for a stream
    numpy rejects, and the dispatching decoder raises numpy's exact FormatError or returns its array."""
    bits = heavy_tailed(6 * 32 * A + 5, 9)
    cfg = CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3, keep_count=20, chunk_superblocks=A,
                      pair_codes=pairs)
    enc = escfield.encode(bits, cfg, None, _pair_books(bits, scheme) if pairs else None)[1]
    rejected = 0
    for planes, offsets in _corruptions(enc, np.random.default_rng(10), 160):
        bad = escfield.EscFieldTensor(enc.shape, enc.config, enc.spec_book, enc.verif_book, planes, offsets)
        for full in (True, False):
            want = _outcome(lambda e: escfield.decode(e, full, impl="numpy"), bad)
            got = _outcome(lambda e: escfield.decode(e, full, impl="native"), bad)
            assert got[0] == want[0]
            if want[0] == "ok":
                np.testing.assert_array_equal(got[1], want[1])
            else:
                assert got[1] == want[1]
                rejected += 1
                with pytest.raises(native._Fallback):
                    native._decode(bad, full)
    assert rejected > 100


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_random_configs_and_corruptions(seed):
    rng = np.random.default_rng(seed)
    for it in range(24):
        bits, cfg, books = random_case(rng, lambda n: heavy_tailed(n, 100 * seed + it), it)
        enc = check3(bits, cfg, books=books)
        for planes, offsets in _corruptions(enc, rng, 30):
            bad = escfield.EscFieldTensor(enc.shape, enc.config, enc.spec_book, enc.verif_book, planes, offsets)
            for full in (True, False):
                want = _outcome(lambda e: escfield.decode(e, full, impl="numpy"), bad)
                got = _outcome(lambda e: escfield.decode(e, full, impl="native"), bad)
                assert got[:1] == want[:1]
                if want[0] == "ok":
                    np.testing.assert_array_equal(got[1], want[1])
                else:
                    assert got[1] == want[1]
