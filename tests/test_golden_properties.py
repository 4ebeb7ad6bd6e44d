"""Hypothesis property tests of the golden codec against FORMAT.md (through the independent reference)."""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference_format as R
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.golden.kv import calibrate_kv_codebooks, decode_kv_draft, decode_kv_full, encode_kv, kv_config
from test_golden_reference import check_against_reference

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# Longer campaigns: CASSANDRA_HYPOTHESIS_SCALE=50 pytest tests/test_golden_properties.py
SCALE = max(1, int(os.environ.get("CASSANDRA_HYPOTHESIS_SCALE", "1")))

SPECIALS = [0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0xFFFF, 0x7F81,
            0x3F80, 0xBF80]
weightish = st.builds(lambda s, e, f: (s << 15) | (e << 7) | f, st.integers(0, 1), st.integers(110, 126),
                      st.integers(0, 127))
pattern = st.one_of(st.integers(0, 0xFFFF), st.sampled_from(SPECIALS), weightish)


@st.composite
def tensors(draw, max_values=300, pattern=pattern):
    vals = draw(st.lists(pattern, min_size=1, max_size=max_values))
    arr = np.array(vals, dtype=np.uint16)
    n = len(arr)
    rows = draw(st.sampled_from([r for r in (1, 2, 3, 5, 7) if n % r == 0]))
    if draw(st.booleans()):
        arr = arr.reshape(rows, n // rows)
    return arr


@st.composite
def configs(draw, schemes=("c1", "c2"), sizes=(32, 64)):
    G = draw(st.sampled_from(sizes))
    k = draw(st.one_of(st.just(G), st.just(1), st.integers(1, G)))
    return CodecConfig(scheme=draw(st.sampled_from(schemes)), group_size=G,
                       mantissa_bits=draw(st.integers(0, 7)), keep_count=k)


@settings(max_examples=40 * SCALE, **SETTINGS)
@given(bits=tensors(), cfg=configs())
def test_roundtrip_and_byte_exact_vs_reference(bits, cfg):
    check_against_reference(bits, cfg, compare_books=False)


@settings(max_examples=60 * SCALE, **SETTINGS)
@given(bits=tensors(max_values=500), cfg=configs(sizes=(32, 64, 128, 256)))
def test_roundtrip(bits, cfg):
    enc = encode_tensor(bits, cfg)
    np.testing.assert_array_equal(decode_full(enc), bits)


def _kept_from_stream(enc, n):
    """Which values the stream marks as kept, read by the reference decoder (speculation only)."""
    cfg = enc.config
    sp = enc.spec_book.pairs if enc.spec_book is not None else 0
    vp = enc.verif_book.pairs
    offs = {p: list(enc.offsets[p]) for p in R.indexed_planes(cfg.scheme, cfg.group_size, cfg.keep_count, sp, vp)
            if p in enc.offsets}
    spec = list(enc.spec_book.symbols) if enc.spec_book is not None else None
    draft, kept = R.decode(enc.planes, offs, n, cfg.scheme, cfg.group_size, cfg.mantissa_bits, cfg.keep_count,
                           spec, list(enc.verif_book.symbols), full=False, A=cfg.chunk_superblocks,
                           spec_pairs=sp, verif_pairs=vp, major=2)
    return np.array(draft, dtype=np.uint16), np.array(kept, dtype=bool)


@settings(max_examples=60 * SCALE, **SETTINGS)
@given(bits=tensors(), cfg=configs())
def test_draft_is_a_bit_prefix_of_kept_values(bits, cfg):
    """§2: truncation, never rounding: a kept value's draft is bits & (0xFFFF << t) with t = 7-m in C1 and
    t in 7-m..7 (or 15, the signed zero of a value below the block's bit weight) in C2; pruned -> +0."""
    enc = encode_tensor(bits, cfg)
    flat = bits.reshape(-1).astype(np.int64)
    draft = decode_draft(enc).reshape(-1).astype(np.int64)
    _, kept = _kept_from_stream(enc, len(flat))
    m = cfg.mantissa_bits
    assert np.all(draft[~kept] == 0)
    ts = [7 - m] if cfg.scheme == "c1" else list(range(7 - m, 8)) + [15]
    prefix = np.zeros(len(flat), dtype=bool)
    for t in ts:
        prefix |= draft == (flat & ((0xFFFF << t) & 0xFFFF))
    assert np.all(prefix[kept]), np.flatnonzero(kept & ~prefix)[:5]


few = st.sampled_from([0x0000, 0x8000, 0x3F80, 0xBF80, 0x3F81, 0x0001, 0x8001, 0x7F80])


@settings(max_examples=60 * SCALE, **SETTINGS)
@given(bits=tensors(pattern=st.one_of(few, few, pattern)), cfg=configs(sizes=(32, 64, 128)))
def test_kept_count_is_k_s_and_ties_go_to_lower_index(bits, cfg):
    enc = encode_tensor(bits, cfg)
    flat = [int(v) for v in bits.reshape(-1)]
    _, kept = _kept_from_stream(enc, len(flat))
    G, k = cfg.group_size, cfg.keep_count
    for s, (start, n) in enumerate(R.superblocks(len(flat), G)):
        assert kept[start: start + n].sum() == R.kept_in(k, n, G), f"superblock {s}"
    assert kept.tolist() == R.keep_flags(flat, G, k)


@st.composite
def kv_case(draw):
    head_dim = draw(st.sampled_from([32, 64]))
    scheme = draw(st.sampled_from(["c1", "c2"]))
    m = draw(st.integers(0, 7))
    keep = draw(st.sampled_from([1.0, 0.5, 0.25]))
    lo = draw(st.integers(100, 120))
    narrow = st.builds(lambda s, e, f: (s << 15) | (e << 7) | f, st.integers(0, 1), st.integers(lo, lo + 3),
                       st.integers(0, 127))
    n_pre = draw(st.integers(1, 4))
    n_new = draw(st.integers(1, 4))
    pre = np.array(draw(st.lists(narrow, min_size=n_pre * head_dim, max_size=n_pre * head_dim)), np.uint16)
    new = np.array(draw(st.lists(st.one_of(narrow, pattern), min_size=n_new * head_dim,
                                 max_size=n_new * head_dim)), np.uint16)
    new[0] = (250 << 7) | 5                           # an exponent the prefill never saw
    new[1] = lo << 7                                  # C2: its block-mate's delta X - lo > 3 is unseen too
    return (kv_config(head_dim, scheme=scheme, mantissa_bits=m, keep_ratio=keep),
            pre.reshape(n_pre, head_dim), new.reshape(n_new, head_dim))


@settings(max_examples=30 * SCALE, **SETTINGS)
@given(case=kv_case())
def test_kv_fixed_books_escape_unseen_exponents(case):
    cfg, pre, new = case
    books = calibrate_kv_codebooks(pre, cfg)
    spec = list(books[0].symbols) if books[0] is not None else None
    verif = list(books[1].symbols)
    # The books come from the prefill alone (§3.1) ...
    assert calibrate_kv_codebooks(pre, cfg) == books
    if cfg.scheme == "c1":
        assert 250 not in spec and 250 not in verif   # ... so the new token's exponent 250 is escaped
        # §3.1: the golden construction over the prefill's symbols; P counts at least once if it prunes.
        e = ((pre >> 7) & 0xFF).reshape(-1)
        kept = R.keep_flags_np(pre, cfg.group_size, cfg.keep_count)
        counts = Counter(np.where(kept, e, R.P).tolist())
        if cfg.prunes:
            counts[R.P] = max(counts[R.P], 1)
        assert spec == R.golden_codebook(counts, required=R.P)
        assert verif == R.golden_codebook(Counter(e[~kept].tolist()))
    else:
        X = R.block_max_exponent(pre.reshape(-1), cfg.group_size)
        e = ((pre >> 7) & 0xFF).reshape(-1).astype(np.int64)
        kept = R.keep_flags_np(pre, cfg.group_size, cfg.keep_count)
        dz = [not kept[i] or R.draft_c2(int(v), cfg.mantissa_bits, int(X[i]), True) & 0x7FFF == 0
              for i, v in enumerate(pre.reshape(-1))]
        assert verif == R.golden_codebook(Counter((X - e)[np.array(dz)].tolist()))
        assert max(verif, default=0) <= 3             # prefill deltas only
        X = R.block_max_exponent(new.reshape(-1), cfg.group_size)
        assert X[1] - ((int(new[0, 1]) >> 7) & 0xFF) not in verif   # ... so this delta is escaped
    enc = encode_kv(new, cfg, books)
    np.testing.assert_array_equal(decode_kv_full(enc), new)
    flat = [int(v) for v in new.reshape(-1)]
    ref = R.encode(flat, cfg.scheme, cfg.group_size, cfg.mantissa_bits, cfg.keep_count, books=(spec, verif),
                   major=3)
    for name in ref.planes:
        assert enc.planes[name] == ref.planes[name], name
    kept = R.keep_flags(flat, cfg.group_size, cfg.keep_count)
    X = R.block_max_exponent(new.reshape(-1), cfg.group_size)
    want = [R.draft_c1(v, cfg.mantissa_bits, kept[i]) if cfg.scheme == "c1"
            else R.draft_c2(v, cfg.mantissa_bits, int(X[i]), kept[i]) for i, v in enumerate(flat)]
    assert decode_kv_draft(enc).reshape(-1).tolist() == want


@st.composite
def book_case(draw):
    cfg = draw(configs())
    bits = draw(tensors(max_values=200))
    syms = st.integers(0, 255)
    verif = draw(st.lists(syms, max_size=15, unique=True))
    spec = None
    if cfg.scheme == "c1":
        spec = draw(st.lists(syms, max_size=14, unique=True))
        if cfg.prunes or draw(st.booleans()):
            spec.insert(draw(st.integers(0, len(spec))), R.P)
    return bits, cfg, spec, verif


@settings(max_examples=60 * SCALE, **SETTINGS)
@given(case=book_case())
def test_arbitrary_fixed_books_escape_heavy(case):
    """§3.1 'decoders accept any valid book': random books (K = 0..15, P anywhere) make most codes escapes,
    mixed with ranked codes in the same chunk."""
    bits, cfg, spec, verif = case
    check_against_reference(bits, cfg, books=(spec, verif))


# ------------------------------------------------------------------------- format 2.0: chunks and pairs

@st.composite
def configs2(draw, schemes=("c1", "c2"), sizes=(32, 64)):
    """Configs with chunks of A superblocks and golden books with pair groups (format 2.0)."""
    base = draw(configs(schemes, sizes))
    A = draw(st.sampled_from([a for a in (1, 2, 4, 8, 16, 32) if a * base.group_size <= 1024]))
    return CodecConfig(scheme=base.scheme, group_size=base.group_size, mantissa_bits=base.mantissa_bits,
                       keep_count=base.keep_count, chunk_superblocks=A, pair_codes=draw(st.booleans()))


@settings(max_examples=40 * SCALE, **SETTINGS)
@given(bits=tensors(max_values=500), cfg=configs2())
def test_format2_byte_exact_vs_reference(bits, cfg):
    check_against_reference(bits, cfg)


def _random_mask(draw, syms):
    """A valid pair mask for the list ``syms``: pairs anywhere except around P."""
    mask, q, i = 0, 0, 0
    while i < len(syms):
        if i + 1 < len(syms) and R.P not in syms[i: i + 2] and draw(st.booleans()):
            mask |= 1 << q
            i += 2
        else:
            i += 1
        q += 1
    return mask


@settings(max_examples=40 * SCALE, **SETTINGS)
@given(case=book_case(), data=st.data())
def test_format2_arbitrary_books_with_pairs(case, data):
    """Any valid book with any valid pair mask decodes (escapes after Q zeros, suffix bits in the
    companion fields), in chunks of A superblocks."""
    bits, cfg, spec, verif = case
    A = data.draw(st.sampled_from([a for a in (1, 2, 4) if a * cfg.group_size <= 1024]))
    cfg = CodecConfig(scheme=cfg.scheme, group_size=cfg.group_size, mantissa_bits=cfg.mantissa_bits,
                      keep_count=cfg.keep_count, chunk_superblocks=A)
    pairs = (_random_mask(data.draw, spec) if spec is not None else 0, _random_mask(data.draw, verif))
    check_against_reference(bits, cfg, books=(spec, verif), pairs=pairs)
