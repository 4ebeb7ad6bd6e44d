"""Format 2.0 features of the golden codec (docs/FORMAT.md §1, §3.1, §5, §6): chunks of A superblocks and
pair groups in the codebooks. Round trips, the codebook rules, the config policy and the dispatch guard."""
from __future__ import annotations

import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError, FormatError
from cassandra_rtl.golden import codec, config
from cassandra_rtl.golden.codebook import Codebook, build_codebook, choose_groups
from cassandra_rtl.golden.codec import (decode_draft, decode_full, decode_parallel, encode_tensor, plane_chunks,
                                        plane_offsets, slice_chunks, slice_superblocks)
from cassandra_rtl.golden.config import PRUNED, CodecConfig
from cassandra_rtl.golden.kv import kv_config


def _bits(rng, n, scale=1.0):
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("G,A", [(32, 32), (64, 4), (128, 8), (256, 4), (128, 2)])
@pytest.mark.parametrize("keep", [1.0, 0.5, 0.3])
def test_round_trip_chunks_and_pairs(scheme, G, A, keep):
    rng = np.random.default_rng(G * A + int(keep * 10))
    n = int(rng.integers(1, 6 * A * G))            # partial last chunk and superblock
    bits = _bits(rng, n, float(np.exp(rng.normal(0, 3))))
    bits[rng.integers(0, n, 8)] = rng.integers(0, 1 << 16, 8).astype(np.uint16)   # escapes, NaN, Inf
    m = int(rng.integers(0, 8))
    cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_ratio=keep, chunk_superblocks=A,
                      pair_codes=True)
    enc = encode_tensor(bits, cfg, impl="numpy")
    assert enc.nchunks == -(-enc.nsb // A)
    assert np.array_equal(decode_full(enc, impl="numpy"), bits)
    assert np.array_equal(decode_parallel(enc, workers=2), bits)
    draft = decode_draft(enc, impl="numpy")
    v1 = encode_tensor(bits, CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_ratio=keep),
                       impl="numpy")
    assert np.array_equal(draft, decode_draft(v1, impl="numpy"))     # chunks and pairs do not change values
    for name in enc.planes:
        off = plane_offsets(enc, name)
        assert len(off) == enc.nchunks + 1 and off[-1] == len(enc.planes[name])
        assert b"".join(plane_chunks(enc, name)) == enc.planes[name]


def test_pairs_are_used_and_save_bits():
    rng = np.random.default_rng(5)
    bits = _bits(rng, 1 << 16)
    v1 = encode_tensor(bits, CodecConfig(chunk_superblocks=1, pair_codes=False), impl="numpy")
    v2 = encode_tensor(bits, CodecConfig(chunk_superblocks=8, pair_codes=True), impl="numpy")
    assert v2.spec_book.pairs != 0 and "spec.signman" in v2.indexed_planes
    assert v2.spec_nbytes + v2.verif_nbytes < v1.spec_nbytes + v1.verif_nbytes
    assert "spec.signman" not in v1.indexed_planes


def test_slices_at_chunk_boundaries():
    rng = np.random.default_rng(2)
    bits = _bits(rng, 128 * 37 + 5)
    enc = encode_tensor(bits, CodecConfig(keep_ratio=0.5, chunk_superblocks=4, pair_codes=True), impl="numpy")
    parts = [decode_full(slice_chunks(enc, c, min(c + 3, enc.nchunks)), impl="numpy")
             for c in range(0, enc.nchunks, 3)]
    assert np.array_equal(np.concatenate(parts), bits)
    assert np.array_equal(decode_full(slice_superblocks(enc, 4, enc.nsb), impl="numpy"), bits[4 * 128:])
    with pytest.raises(ConfigError, match="chunk boundaries"):
        slice_superblocks(enc, 2, 8)


def test_v1_config_is_format_1(monkeypatch):
    monkeypatch.setattr(config, "FORMAT2_DEFAULTS", False)
    cfg = CodecConfig()
    assert (cfg.chunk_superblocks, cfg.pair_codes) == (1, False)
    assert (CodecConfig(group_size=32).chunk_superblocks, kv_config(64).pair_codes) == (1, False)


def test_policy_when_format2_defaults(monkeypatch):
    monkeypatch.setattr(config, "FORMAT2_DEFAULTS", True)
    assert (CodecConfig(group_size=128).chunk_superblocks, CodecConfig().pair_codes) == (8, True)
    assert CodecConfig(group_size=32).chunk_superblocks == 32
    assert CodecConfig(group_size=256).chunk_superblocks == 4
    kv = kv_config(64)
    assert (kv.chunk_superblocks, kv.pair_codes) == (1, False)       # KV: one vector per chunk, plain codes
    assert CodecConfig(chunk_superblocks=2, pair_codes=False).chunk_superblocks == 2   # explicit overrides


@pytest.mark.parametrize("kw,msg", [
    ({"chunk_superblocks": 3}, "chunk_superblocks must be"),
    ({"chunk_superblocks": 128}, "chunk_superblocks must be"),
    ({"chunk_superblocks": True}, "chunk_superblocks must be"),
    ({"chunk_superblocks": 16, "group_size": 128}, "at most 1024"),
    ({"pair_codes": 1}, "pair_codes must be"),
])
def test_config_rejects(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        CodecConfig(**kw)


@pytest.mark.parametrize("syms,pairs,msg", [
    ((1, 2, 3), 0b100, "at or above Q"),       # K = 3, one pair -> Q = 2: bit 2 is not a group
    ((1, 2), 0b11, "at or above Q"),
    ((1, PRUNED, 3), 0b1, "pruned mark"),      # group 0 = {1, P}
    ((PRUNED, 1), 0b1, "pruned mark"),
    ((1, 2), -1, "pair mask"),
    ((1, 2), 1 << 15, "pair mask"),
    ((1, 2), True, "pair mask"),
])
def test_codebook_rejects(syms, pairs, msg):
    with pytest.raises(FormatError, match=msg):
        Codebook(syms, pairs)


def test_codebook_groups():
    b = Codebook((7, 8, 9, 10, 11), 0b101)      # groups {7,8} {9} {10,11}
    assert b.Q == 3 and list(b.group_starts()) == [0, 2, 3, 5] and list(b.pair_bits()) == [1, 0, 1, 0]
    assert [int(b.group_table()[s]) for s in (7, 8, 9, 10, 11, 12)] == [0, 0, 1, 2, 2, 3]
    assert [int(b.suffix_table()[s]) for s in (7, 8, 9, 10, 11)] == [0, 1, 0, 0, 1]
    assert list(b.resolve(np.array([0, 0, 1, 2, 2, 3]), np.array([0, 1, 0, 0, 1, 0]),
                          np.array([0, 0, 0, 0, 0, 200]))) == [7, 8, 9, 10, 11, 200]


def _brute_groups(c, escapes, forbid):
    """Every group structure of the list, cost = code bits + suffix bits + escapes (Q + 9)."""
    best = None
    K = len(c)
    for mask_sizes in range(1 << K):
        sizes, i, ok = [], 0, True
        while i < K:
            g = 2 if (mask_sizes >> len(sizes)) & 1 else 1
            if g == 2 and (i + 1 >= K or forbid[i] or forbid[i + 1]):
                ok = False
                break
            sizes.append(g)
            i += g
        if not ok:
            continue
        cost, i = 0, 0
        for q, g in enumerate(sizes):
            cost += sum(c[i: i + g]) * (q + 1 + (g - 1))
            i += g
        cost += escapes * (len(sizes) + 9)
        mask = sum(1 << q for q, g in enumerate(sizes) if g == 2)
        if best is None or cost < best[0]:
            best = (cost, mask)
    return best


def test_dp_matches_exhaustive_cost():
    rng = np.random.default_rng(3)
    for _ in range(60):
        K = int(rng.integers(0, 9))
        c = sorted(rng.integers(1, 1000, K).tolist(), reverse=True)
        forbid = rng.random(K) < 0.15
        esc = int(rng.integers(0, 500))
        cost, mask = choose_groups(np.array(c, dtype=np.int64), esc, forbid)
        assert cost == _brute_groups(c, esc, forbid)[0]
        assert Codebook(tuple(range(K)), mask).Q == K - bin(mask).count("1")


def test_dp_ties_prefer_single():
    # c = (2, 1, 1): singles 2 + 2 + 3 = 7; {a}{b,c}: 2 + 2*3 = 8; {a,b}{c}: 3*2 + 2 = 8 -> no pair
    assert choose_groups(np.array([2, 1, 1]), 0) == (7, 0)
    # c = (1, 1, 1): singles 1 + 2 + 3 = 6 = {a,b}{c} 2*2 + 2: a tie -> the single
    assert choose_groups(np.array([1, 1, 1]), 0) == (6, 0)
    # c = (1, 1, 1, 1): singles 10, {a,b}{c}{d} 4 + 2 + 3 = 9 -> the pair
    assert choose_groups(np.array([1, 1, 1, 1]), 0) == (9, 1)


def test_build_codebook_without_pairs_is_v1():
    rng = np.random.default_rng(4)
    for _ in range(30):
        counts = np.zeros(257, np.int64)
        counts[rng.integers(0, 257, 40)] = rng.integers(1, 10000, 40)
        book = build_codebook(counts, required=PRUNED)
        assert book.pairs == 0
        paired = build_codebook(counts, required=PRUNED, pairs=True)
        cl = lambda b: int((b.code_lengths()[counts > 0] * counts[counts > 0]).sum())
        assert cl(paired) <= cl(book)
        if PRUNED in paired.symbols:
            assert paired.pair_bits()[paired.group_table()[PRUNED]] == 0


def test_forced_pruned_mark_last_with_pairs():
    counts = np.zeros(257, np.int64)
    counts[100:120] = np.arange(1000, 980, -1)
    counts[PRUNED] = 1
    book = build_codebook(counts, required=PRUNED, pairs=True)
    assert book.K == 15 and book.symbols[-1] == PRUNED and book.pairs != 0


def test_native_guard_sends_format2_to_numpy(monkeypatch):
    from cassandra_rtl.golden import native
    calls = []
    monkeypatch.setattr(native, "resolve", lambda impl="auto": "native")
    monkeypatch.setattr(native, "encode_tensor", lambda *a: calls.append("native"))
    monkeypatch.delattr(native, "FORMAT2", raising=False)
    bits = _bits(np.random.default_rng(0), 1000)
    enc = encode_tensor(bits, CodecConfig(chunk_superblocks=2), impl="auto")
    assert calls == [] and enc.nchunks == 4
    encode_tensor(bits, CodecConfig(chunk_superblocks=1, pair_codes=False), impl="auto")
    assert calls == ["native"]


def test_kv_books_without_pairs_stay_plain_with_fixed_pair_book():
    """A fixed book with pairs (as a caller could pass) is honoured by the codec: codes and suffix bits."""
    rng = np.random.default_rng(6)
    bits = _bits(rng, 64 * 10)
    cfg = CodecConfig(group_size=64, keep_ratio=0.5, kind="kv")
    enc = encode_tensor(bits, cfg, impl="numpy")
    spec = Codebook(enc.spec_book.symbols, 0)
    syms = [s for s in enc.verif_book.symbols]
    verif = Codebook(tuple(syms), 0b1 if len(syms) >= 2 else 0)
    enc2 = encode_tensor(bits, cfg, books=(spec, verif), impl="numpy")
    assert np.array_equal(decode_full(enc2, impl="numpy"), bits)
    assert enc.spec_book.pairs == 0 and enc.verif_book.pairs == 0


def test_kv_path_stays_v1_when_format2_defaults(monkeypatch):
    """KV policy: one vector per chunk and books without pairs, even with the 2.0 defaults on."""
    from cassandra_rtl.golden.kv import calibrate_kv_codebooks, decode_kv_full, encode_kv
    monkeypatch.setattr(config, "FORMAT2_DEFAULTS", True)
    rng = np.random.default_rng(8)
    for scheme in ("c1", "c2"):
        cfg = kv_config(64, scheme=scheme, keep_ratio=0.5)
        pre, new = _bits(rng, 8 * 64).reshape(8, 64), _bits(rng, 5 * 64).reshape(5, 64)
        books = calibrate_kv_codebooks(pre, cfg)
        assert all(b is None or b.pairs == 0 for b in books)
        enc = encode_kv(new, cfg, books)
        assert enc.nchunks == enc.nsb == 5
        assert np.array_equal(decode_kv_full(enc), new)
    w = encode_tensor(_bits(rng, 4096), CodecConfig(), impl="numpy")       # weights: the 2.0 policy
    assert w.chunk_superblocks == 8 and w.spec_book.pairs != 0
