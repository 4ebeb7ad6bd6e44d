"""The compiled codec (golden/native.py + golden/_native/codec.c) against the numpy reference (golden/codec.py):
the same encoded bytes (planes, chunk offsets, codebooks with their pair masks) and the same decoded arrays
(draft and full), on random tensors, all 65,536 bf16 patterns, boundary G / m / keep counts, escapes, C2
subnormal blocks, caller salience and the KV path, in format 1.0 (A = 1, no pairs) and 2.0 (chunks of A
superblocks, pair groups); malformed streams raise the reference's FormatError; the dispatch and fallback."""
from __future__ import annotations

import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError, FormatError
from cassandra_rtl.golden import codec, escfield, native
from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.codec import EncodedTensor, decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import MAX_CHUNK_VALUES, PRUNED, CodecConfig
from cassandra_rtl.golden.kv import calibrate_kv_codebooks, encode_kv, kv_config
from test_golden_patterns import _cases, layout

pytestmark = pytest.mark.skipif(native.load() is None, reason=f"compiled codec unavailable: "
                                f"{native.unavailable_reason()}")


def same_encoding(a: EncodedTensor, b: EncodedTensor):
    assert a.shape == b.shape and a.config == b.config
    assert a.spec_book == b.spec_book and a.verif_book == b.verif_book
    assert sorted(a.planes) == sorted(b.planes)
    for p in a.planes:
        assert a.planes[p] == b.planes[p], f"plane {p} differs"
    assert sorted(a.offsets) == sorted(b.offsets)
    for p in a.offsets:
        np.testing.assert_array_equal(np.asarray(a.offsets[p]), np.asarray(b.offsets[p]), err_msg=f"offsets of {p}")


def check(bits, cfg, salience=None, books=None):
    """numpy encode == C encode; C decode (called directly, so no silent fallback) == numpy decode == input."""
    ref = encode_tensor(bits, cfg, salience=salience, books=books, impl="numpy")
    fast = native.encode_tensor(bits, cfg, salience, books)
    same_encoding(ref, fast)
    for p in ref.planes:                       # every plane's chunk offsets, indexed or computed
        np.testing.assert_array_equal(codec.plane_offsets(ref, p), codec.plane_offsets(fast, p), err_msg=p)
    full = native._decode(ref, True)
    np.testing.assert_array_equal(full, bits)
    np.testing.assert_array_equal(full, decode_full(ref, impl="numpy"))
    np.testing.assert_array_equal(native._decode(ref, False), decode_draft(ref, impl="numpy"))
    return ref


def _keep(kind, G):
    return {"G": G, "G-1": G - 1, "G/2": G // 2, "1": 1, "0.3": CodecConfig(group_size=G, keep_ratio=0.3).keep_count}[kind]


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("G", [32, 64, 128, 256])
@pytest.mark.parametrize("m", [0, 1, 3, 6, 7])
@pytest.mark.parametrize("keep", ["G", "G-1", "G/2", "1", "0.3"])
def test_random_tensors(weight_bits, scheme, G, m, keep):
    for n, seed in ((5 * G + 7, 1), (3 * G, 2), (1, 3), (G - 1, 4)):
        check(weight_bits(n, seed=seed + G + m, special=0.1), CodecConfig(scheme=scheme, group_size=G,
                                                                          mantissa_bits=m, keep_count=_keep(keep, G)))


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_2d_and_large_tensor(weight_bits, scheme):
    bits = weight_bits(96 * 1000, seed=7, special=0.01)
    for keep in (1.0, 0.5, 0.3):
        check(bits.reshape(96, 1000), CodecConfig(scheme=scheme, keep_ratio=keep, mantissa_bits=2))


@pytest.mark.parametrize("layout_name,scheme,G,m,keep", _cases())
def test_all_patterns(layout_name, scheme, G, m, keep):
    """Every bf16 pattern, the same layouts and configs as test_golden_patterns (anchored: every C2 case,
    blocks of subnormals with X = 0 and X = 1, X = 255)."""
    k = {"all": G, "one": 1, "half": G // 2, "0.3": CodecConfig(group_size=G, keep_ratio=0.3).keep_count}[keep]
    check(layout(layout_name), CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_count=k))


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("m", [0, 3, 7])
def test_c2_subnormal_blocks(scheme, m):
    """Whole superblocks of subnormals and zeros (X = 0), mixed with exponent-1 normals (X = 1)."""
    rng = np.random.default_rng(3)
    sub = rng.integers(0, 128, 64 * 8).astype(np.uint16) | (rng.integers(0, 2, 64 * 8).astype(np.uint16) << 15)
    mixed = sub.copy()
    mixed[::7] |= 1 << 7
    for bits in (sub, mixed, np.zeros(100, np.uint16), np.full(100, 0x8000, np.uint16)):
        for k in (64, 33, 1):
            check(bits, CodecConfig(scheme=scheme, group_size=64, mantissa_bits=m, keep_count=k))


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_escapes_with_fixed_books(weight_bits, scheme):
    """K = 0 (every code an escape), a 15-entry book of unused exponents (24-bit escapes), a 1-entry book."""
    bits = weight_bits(3 * 32 + 3, seed=1, special=0.3)
    cfg = CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3, keep_count=20)
    far = tuple(range(240, 255))
    for spec, verif in (((PRUNED,), ()), ((PRUNED,) + far[:14], far), ((PRUNED,), (3,))):
        check(bits, cfg, books=(Codebook(spec) if scheme == "c1" else None, Codebook(verif)))


def test_c1_book_without_pruned_mark_raises_like_numpy(weight_bits):
    bits = weight_bits(100, seed=2)
    cfg = CodecConfig(scheme="c1", group_size=32, keep_count=16)
    with pytest.raises(ConfigError, match="pruned mark"):
        encode_tensor(bits, cfg, books=(Codebook((120,)), Codebook(())), impl="native")


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_caller_salience(weight_bits, scheme):
    bits = weight_bits(4 * 64 + 9, seed=3)
    sal = np.random.default_rng(4).integers(0, 3, len(bits)).astype(np.float64)
    check(bits, CodecConfig(scheme=scheme, group_size=64, mantissa_bits=3, keep_count=17), salience=sal)


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_magnitude_ties(scheme):
    rng = np.random.default_rng(2)
    pool = np.array([0x0000, 0x8000, 0x3F80, 0xBF80, 0x0001, 0x8001, 0x7F80, 0xFFC1], dtype=np.uint16)
    for k in (1, 5, 13, 31):
        check(rng.choice(pool, 32 * 5 + 7), CodecConfig(scheme=scheme, group_size=32, mantissa_bits=4, keep_count=k))


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_kv_path_unseen_exponents_escape(weight_bits, scheme):
    cfg = kv_config(64, scheme=scheme, mantissa_bits=3, keep_ratio=0.5)
    prefill = weight_bits(64 * 20, seed=5, special=0.0).reshape(20, 64)
    books = calibrate_kv_codebooks(prefill, cfg)
    later = weight_bits(64 * 9, seed=6, special=0.2).reshape(9, 64)   # exponents the books never saw
    ref = encode_kv(later, cfg, books)                                  # format 3.0, what the RTL KV encoders write
    same_encoding(escfield.encode3(later, cfg, books=books, impl="native"),
                  escfield.encode3(later, cfg, books=books, impl="numpy"))
    same_encoding(ref, escfield.encode3(later, cfg, books=books, impl="numpy"))
    std = encode_tensor(later, cfg, books=books, impl="numpy")
    same_encoding(std, native.encode_tensor(later, cfg, None, books))
    np.testing.assert_array_equal(native._decode(std, True), later)
    np.testing.assert_array_equal(escfield.decode(ref, True), later)


def test_empty_tensor_goes_to_numpy():
    enc = encode_tensor(np.zeros(0, np.uint16), CodecConfig(), impl="native")
    assert decode_full(enc, impl="native").shape == (0,)


def test_decode_parallel_uses_the_compiled_path(weight_bits):
    bits = weight_bits(64 * 40, seed=10)
    enc = encode_tensor(bits, CodecConfig(keep_ratio=0.5, group_size=64))
    np.testing.assert_array_equal(codec.decode_parallel(enc, workers=2), bits)


# ------------------------------------------------------------------------------------- format 2.0

def _a_values(G):
    """A in {1, 2, 8, max} that the config allows (A * G <= 1024)."""
    return sorted({a for a in (1, 2, 8, MAX_CHUNK_VALUES // G) if a * G <= MAX_CHUNK_VALUES})


V2_CASES = [(scheme, G, A, pairs, keep) for scheme in ("c1", "c2") for G in (32, 128, 256) for A in _a_values(G)
            for pairs in (False, True) for keep in (1.0, 0.5, 0.3)]


@pytest.mark.parametrize("scheme,G,A,pairs,keep", V2_CASES)
def test_format2_random_tensors(weight_bits, scheme, G, A, pairs, keep):
    """Chunks of A superblocks x pair groups on/off: a partial last chunk with a partial last superblock, an
    exact number of chunks, one value; books built by the golden DP (pairs where they pay) and, with pairs
    on, books of pairs over the frequent symbols (every plane then carries suffix bits)."""
    m = (0, 3, 7)[(G + A) % 3]
    cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_ratio=keep, chunk_superblocks=A,
                      pair_codes=pairs)
    for n, seed in ((2 * A * G + (A // 2) * G + 7, 1), (3 * A * G, 2), (1, 3)):
        bits = weight_bits(n, seed=seed + G + A, special=0.05)
        ref = check(bits, cfg)
        assert ref.nchunks == -(-ref.nsb // A)
        if pairs and seed == 1:                 # pairs in every book, whatever the golden DP chose
            check(bits, cfg, books=_pair_books(bits, scheme))


def test_fixed_plane_offsets_match_numpy():
    """native._fixed_offsets (no per-superblock arrays) == codec.fixed_offsets, partial last chunks included."""
    for scheme, names in (("c1", ("spec.signman", "verif.rest")), ("c2", ("spec.mx",))):
        for G in (32, 256):
            for A in _a_values(G):
                for k in (G, G // 2, 1):
                    cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=3, keep_count=k, chunk_superblocks=A)
                    for n in (1, G - 1, A * G, 3 * A * G + G + 5):
                        for name in names:
                            np.testing.assert_array_equal(native._fixed_offsets(name, n, cfg),
                                                          codec.fixed_offsets(name, n, cfg))


def test_format2_cases_hold_pairs(weight_bits):
    """The random cases above do exercise pair groups and indexed companion planes (else they test v1 only)."""
    bits = weight_bits(8 * 128 * 3, seed=5, special=0.05)
    for keep, book in ((1.0, "spec"), (0.5, "verif")):
        cfg = CodecConfig(scheme="c1", group_size=128, keep_ratio=keep, chunk_superblocks=8, pair_codes=True)
        enc = native.encode_tensor(bits, cfg, None, None)
        assert getattr(enc, f"{book}_book").pairs
        assert {"spec": "spec.signman", "verif": "verif.rest"}[book] in enc.offsets
    c2 = native.encode_tensor(weight_bits(8 * 128 * 3, seed=5, special=0.05),
                              CodecConfig(scheme="c2", keep_ratio=0.5, chunk_superblocks=8, pair_codes=True), None, None)
    assert c2.verif_book.pairs


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("A", [1, 4])
def test_format2_fixed_books_escapes_and_pairs(weight_bits, scheme, A):
    """Hand-made books: every group a pair, pairs of unused symbols (escapes of everything else at Q + 9 bits),
    K = 15 with pairs (Q = 8), an empty book (Q = 0) and a single pair."""
    bits = weight_bits(5 * 32 * A + 3, seed=11, special=0.3)
    cfg = CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3, keep_count=20, chunk_superblocks=A)
    e = ((bits >> 7) & 0xFF).astype(np.int64)
    common = [int(x) for x in np.argsort(-np.bincount(e, minlength=256), kind="stable")[:14]]
    far = tuple(range(240, 254))
    books = [((PRUNED,) + tuple(common[:14]), 0b1111111 << 1, tuple(common[:14]), 0b1111111),
             ((PRUNED,) + far, 0b1010101 << 1, far, 0b11),
             ((PRUNED,), 0, (), 0),
             ((common[0], PRUNED, common[1]), 0, (common[2], common[3]), 1)]
    for spec, sp, verif, vp in books:
        check(bits, cfg, books=(Codebook(spec, sp) if scheme == "c1" else None, Codebook(verif, vp)))


V2_PATTERN_CASES = [("permuted", "c1", 32, 3, "0.3", 32), ("natural", "c1", 128, 7, "all", 8),
                    ("anchored", "c2", 256, 0, "one", 4), ("anchored", "c2", 32, 3, "0.3", 8)]


def paired(symbols):
    """A book over ``symbols`` with as many pair groups as the order allows (P stays a singleton)."""
    mask, i, q = 0, 0, 0
    while i < len(symbols):
        if symbols[i] != PRUNED and i + 1 < len(symbols) and symbols[i + 1] != PRUNED:
            mask |= 1 << q
            i += 1
        i += 1
        q += 1
    return Codebook(tuple(symbols), mask)


@pytest.mark.parametrize("layout_name,scheme,G,m,keep,A", V2_PATTERN_CASES)
def test_format2_all_patterns(layout_name, scheme, G, m, keep, A):
    """Every bf16 pattern in 2.0 layouts: golden pair books, and books of 7 pairs (+ P) of the most frequent
    symbols (pairs on every plane; every other symbol escapes)."""
    k = {"all": G, "one": 1, "0.3": CodecConfig(group_size=G, keep_ratio=0.3).keep_count}[keep]
    cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_count=k, chunk_superblocks=A,
                      pair_codes=True)
    bits = layout(layout_name)
    check(bits, cfg)
    e = ((bits >> 7) & 0xFF).astype(np.int64)
    top = [int(x) for x in np.argsort(-np.bincount(e, minlength=256), kind="stable")[:14]]
    verif = paired(top if scheme == "c1" else list(range(14)))
    spec = paired(([PRUNED] if cfg.prunes else []) + top[: 14 - cfg.prunes]) if scheme == "c1" else None
    enc = check(bits, cfg, books=(spec, verif))
    assert enc.verif_book.pairs == 0b1111111
    if scheme == "c1":
        assert enc.spec_book.pairs and "spec.signman" in enc.offsets and "verif.rest" in enc.offsets


def _pair_books(bits, scheme):
    """Books of pairs over the most frequent symbols (+ P), so that every plane holds suffix bits."""
    e = ((bits >> 7) & 0xFF).astype(np.int64)
    top = [int(x) for x in np.argsort(-np.bincount(e, minlength=256), kind="stable")[:13]]
    if scheme == "c1":
        return paired([PRUNED] + top), paired(top)
    return None, paired(list(range(12)))


def _corruptions(enc, rng, trials):
    """(planes, offsets) of corrupted copies: bit flips, truncations, extensions of a plane, and moved index
    entries of an indexed plane."""
    names = sorted(enc.planes)
    for trial in range(trials):
        name = names[trial % len(names)]
        data = bytearray(enc.planes[name])
        offsets = {p: np.array(o) for p, o in enc.offsets.items()}
        op = trial % 4
        if op == 0 and data:
            data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
        elif op == 1 and data:
            data = data[:-1]
        elif op == 2:
            data += b"\x00"
        elif name in offsets and len(offsets[name]) > 2:
            i = int(rng.integers(1, len(offsets[name]) - 1))
            offsets[name][i] += int(rng.choice([-1, 1]))
        if name in offsets and op in (1, 2):
            offsets[name][-1] = len(data)
        yield dict(enc.planes, **{name: bytes(data)}), offsets


@pytest.mark.parametrize("scheme,A,pairs", [("c1", 1, False), ("c2", 1, False), ("c1", 4, True), ("c2", 4, True)])
def test_malformed_streams_raise_the_reference_error(weight_bits, scheme, A, pairs):
    """Random byte flips, truncations and extensions of each plane and moved index entries: the default
    (compiled) decoder raises exactly what the numpy decoder raises, or returns exactly what it returns."""
    bits = weight_bits(6 * 32 * A + 5, seed=8, special=0.1)
    cfg = CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3, keep_count=20, chunk_superblocks=A,
                      pair_codes=pairs)
    enc = native.encode_tensor(bits, cfg, None, _pair_books(bits, scheme) if pairs else None)
    rng = np.random.default_rng(9)
    raised = 0
    for planes, offsets in _corruptions(enc, rng, 160):
        bad = EncodedTensor(enc.shape, enc.config, enc.spec_book, enc.verif_book, planes, offsets)
        for fn in (native.decode_full, native.decode_draft):
            ref = codec.decode_full if fn is native.decode_full else codec.decode_draft
            try:
                want = ref(bad, impl="numpy")
            except FormatError as exc:
                raised += 1
                with pytest.raises(FormatError) as got:
                    fn(bad)
                assert str(got.value) == str(exc)
            else:
                np.testing.assert_array_equal(fn(bad), want)
    assert raised > 100


def test_c_decoder_rejects_what_numpy_rejects(weight_bits):
    """The C decoder itself (not its numpy fallback) returns an error on every corruption numpy rejects
    (native._decode raises _Fallback instead of returning C output)."""
    bits = weight_bits(6 * 32 * 4 + 5, seed=3, special=0.1)
    rejected = 0
    for scheme in ("c1", "c2"):
        cfg = CodecConfig(scheme=scheme, group_size=32, mantissa_bits=2, keep_count=13, chunk_superblocks=4,
                          pair_codes=True)
        enc = native.encode_tensor(bits, cfg, None, _pair_books(bits, scheme))
        for planes, offsets in _corruptions(enc, np.random.default_rng(4), 80):
            bad = EncodedTensor(enc.shape, enc.config, enc.spec_book, enc.verif_book, planes, offsets)
            for full in (True, False):
                try:
                    (codec.decode_full if full else codec.decode_draft)(bad, impl="numpy")
                except FormatError:
                    rejected += 1
                    with pytest.raises(native._Fallback):
                        native._decode(bad, full)
    assert rejected > 100


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_extreme_planes_match_numpy(weight_bits, scheme):
    """Planes replaced by all-zero / all-one bytes, cut to 0 or 1 byte, or grown (codes that run far past a
    chunk's end, the largest chunks: G = 32, A = 32): same FormatError or result as numpy, no crash."""
    bits = weight_bits(32 * 32 * 2 + 9, seed=12, special=0.1)
    cfg = CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3, keep_count=11, chunk_superblocks=32)
    enc = native.encode_tensor(bits, cfg, None, _pair_books(bits, scheme))
    for name in sorted(enc.planes):
        n = len(enc.planes[name])
        for data in (bytes(n), b"\xff" * n, b"", b"\xff", b"\x00" * (2 * n + 5), b"\xff" * (2 * n + 5)):
            offsets = {p: np.array(o) for p, o in enc.offsets.items()}
            if name in offsets:
                offsets[name] = np.minimum(offsets[name], len(data))
                offsets[name][-1] = len(data)
            bad = EncodedTensor(enc.shape, enc.config, enc.spec_book, enc.verif_book,
                                dict(enc.planes, **{name: data}), offsets)
            for fn, ref in ((native.decode_full, codec.decode_full), (native.decode_draft, codec.decode_draft)):
                try:
                    want = ref(bad, impl="numpy")
                except FormatError as exc:
                    with pytest.raises(FormatError) as got:
                        fn(bad)
                    assert str(got.value) == str(exc)
                else:
                    np.testing.assert_array_equal(fn(bad), want)


def test_c_decoders_refuse_planes_without_their_slack(weight_bits, monkeypatch):
    """The unchecked plane reads are only run when the caller guarantees MIN_SLACK zero bytes after each plane."""
    bits = weight_bits(64 * 4 * 3 + 1, seed=2)
    for scheme in ("c1", "c2"):
        enc = native.encode_tensor(bits, CodecConfig(scheme=scheme, group_size=64, keep_ratio=0.5,
                                                     chunk_superblocks=4, pair_codes=True), None, None)
        np.testing.assert_array_equal(native._decode(enc, True), bits)
        monkeypatch.setattr(native, "_slack", lambda cfg: 3 * cfg.chunk_superblocks * cfg.group_size + 15)
        for full in (True, False):
            with pytest.raises(native._Fallback):
                native._decode(enc, full)
        monkeypatch.undo()


def random_case(rng, make_bits, it: int):
    """(bits, config, books or None) of a random 2.0-era configuration: scheme by ``it``, G, A, k, m, pairs, and
    golden or hand-made pair books; ``make_bits(n)`` draws the values."""
    scheme = ("c1", "c2")[it % 2]
    G = int(rng.choice([32, 64, 128, 256]))
    A = int(rng.choice([a for a in (1, 2, 4, 8, 16, 32) if a * G <= MAX_CHUNK_VALUES]))
    k = int(rng.integers(1, G + 1)) if rng.random() < 0.7 else G
    bits = make_bits(int(rng.integers(1, 3 * A * G + 10)))
    cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=int(rng.integers(8)), keep_count=k,
                      chunk_superblocks=A, pair_codes=bool(rng.integers(2)))
    return bits, cfg, (_pair_books(bits, scheme) if rng.random() < 0.5 else None)


def _outcome(fn, enc):
    try:
        return "ok", fn(enc)
    except Exception as exc:  # noqa: BLE001 - the reference's exception (type and message) is the contract
        return type(exc).__name__, str(exc)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_random_configs_and_corruptions(weight_bits, seed):
    """Random 2.0 configs (G, A, m, k, size, golden or hand-made pair books) x 40 corruptions each: the
    dispatching decoder ends exactly as numpy does (same exception type and message, or the same array), and
    the C decoder itself never returns output for a stream numpy rejects."""
    rng = np.random.default_rng(seed)
    for it in range(30):
        bits, cfg, books = random_case(rng, lambda n: weight_bits(n, seed=100 * seed + it,
                                                                    special=float(rng.random() * 0.3)), it)
        enc = check(bits, cfg, books=books)
        for planes, offsets in _corruptions(enc, rng, 40):
            bad = EncodedTensor(enc.shape, enc.config, enc.spec_book, enc.verif_book, planes, offsets)
            for full in (True, False):
                want = _outcome(lambda e: (codec.decode_full if full else codec.decode_draft)(e, impl="numpy"), bad)
                got = _outcome(native.decode_full if full else native.decode_draft, bad)
                assert got[0] == want[0]
                if want[0] == "ok":
                    np.testing.assert_array_equal(got[1], want[1])
                else:
                    assert got[1] == want[1]
                    with pytest.raises(native._Fallback):
                        native._decode(bad, full)


def test_format2_decode_parallel(weight_bits):
    bits = weight_bits(64 * 8 * 9 + 3, seed=10)
    enc = encode_tensor(bits, CodecConfig(keep_ratio=0.5, group_size=64, chunk_superblocks=8, pair_codes=True))
    np.testing.assert_array_equal(codec.decode_parallel(enc, workers=2), bits)


# ------------------------------------------------------------------------------------------ dispatch

def test_env_forces_numpy(monkeypatch, weight_bits):
    def boom(*a, **k):
        raise AssertionError("the compiled path was used")
    monkeypatch.setattr(native, "encode_tensor", boom)
    monkeypatch.setattr(native, "decode_full", boom)
    monkeypatch.setenv(native.ENV_IMPL, "numpy")
    bits = weight_bits(200)
    assert np.array_equal(decode_full(encode_tensor(bits, CodecConfig())), bits)
    monkeypatch.setenv(native.ENV_IMPL, "auto")
    with pytest.raises(AssertionError, match="compiled path was used"):
        encode_tensor(bits, CodecConfig())


def test_format2_tensors_take_the_compiled_path(monkeypatch, weight_bits):
    """codec.encode_tensor sends chunked / paired tensors to the compiled path (native.FORMAT2)."""
    calls = []
    real = native.encode_tensor
    monkeypatch.setattr(native, "encode_tensor", lambda *a: calls.append(a) or real(*a))
    monkeypatch.delenv(native.ENV_IMPL, raising=False)
    bits = weight_bits(128 * 8 * 2 + 1)
    for cfg in (CodecConfig(chunk_superblocks=8), CodecConfig(pair_codes=True), CodecConfig(scheme="c2", chunk_superblocks=2)):
        enc = encode_tensor(bits, cfg)
        np.testing.assert_array_equal(decode_full(enc), bits)
    assert len(calls) == 3


def test_bad_impl_names(monkeypatch, weight_bits):
    with pytest.raises(ValueError, match="impl must be one of"):
        encode_tensor(weight_bits(10), CodecConfig(), impl="fast")
    monkeypatch.setenv(native.ENV_IMPL, "gpu")
    with pytest.raises(ValueError, match=native.ENV_IMPL):
        encode_tensor(weight_bits(10), CodecConfig())


def test_unavailable_falls_back_with_one_warning_line(monkeypatch, capsys, weight_bits):
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "_error", "no C compiler (cc) on PATH")
    monkeypatch.setattr(native, "_warned", False)
    monkeypatch.delenv(native.ENV_IMPL, raising=False)
    bits = weight_bits(300)
    for _ in range(3):
        assert np.array_equal(decode_full(encode_tensor(bits, CodecConfig(keep_ratio=0.5))), bits)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "compiled codec unavailable" in err[0] and "numpy" in err[0]
    with pytest.raises(RuntimeError, match="no C compiler"):
        encode_tensor(bits, CodecConfig(), impl="native")


def test_build_on_first_use_and_compiler_failure(monkeypatch, tmp_path):
    monkeypatch.setenv(native.ENV_DIR, str(tmp_path / "cache"))
    lib = native._build()
    assert lib.c1_decode is not None and len(list((tmp_path / "cache").glob("codec-*.so"))) == 1
    monkeypatch.setenv(native.ENV_DIR, str(tmp_path / "other"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(OSError, match="no C compiler"):
        native._build()
