"""Independent decoding of chunk ranges through the index (FORMAT.md §1, §6); with one superblock per
chunk (format 1.0's layout) any superblock range."""
import numpy as np
import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codec import (decode_draft, decode_full, decode_parallel, encode_tensor, slice_chunks,
                                        slice_superblocks)
from cassandra_rtl.golden.config import CodecConfig

CONFIGS = [CodecConfig(), CodecConfig(keep_ratio=0.3, mantissa_bits=2, group_size=64),
           CodecConfig(scheme="c2", keep_ratio=0.5, group_size=32), CodecConfig(scheme="c2", mantissa_bits=7)]
V1 = [CodecConfig(**{**c.to_json(), "chunk_superblocks": 1, "pair_codes": False}) for c in CONFIGS]
V2 = [CodecConfig(keep_ratio=0.5, chunk_superblocks=8, pair_codes=True),
      CodecConfig(scheme="c2", keep_ratio=0.3, group_size=32, chunk_superblocks=4, pair_codes=True)]


def _bits(n, seed=0):
    rng = np.random.default_rng(seed)
    # Heavy-tailed magnitudes plus a sprinkle of arbitrary patterns, so escapes and specials occur.
    x = (rng.standard_normal(n) * np.exp(rng.standard_normal(n) * 3)).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    bits[rng.integers(0, n, n // 50)] = rng.integers(0, 65536, n // 50, dtype=np.uint16)
    return bits


def _id(c):
    return f"{c.scheme}-k{c.keep_count}-m{c.mantissa_bits}-G{c.group_size}-A{c.chunk_superblocks}"


@pytest.mark.parametrize("cfg", V1, ids=_id)
def test_any_superblock_range_decodes_alone(cfg):
    bits = _bits(50 * cfg.group_size + 7)             # a partial last superblock too
    enc = encode_tensor(bits, cfg)
    full, draft = decode_full(enc), decode_draft(enc)
    G = cfg.group_size
    for start, stop in [(0, 1), (3, 17), (enc.nsb - 1, enc.nsb), (0, enc.nsb), (20, 20)]:
        part = slice_superblocks(enc, start, stop)
        sl = slice(start * G, min(stop * G, bits.size))
        assert np.array_equal(decode_full(part), full[sl])
        assert np.array_equal(decode_draft(part), draft[sl])


@pytest.mark.parametrize("cfg", CONFIGS[:3] + V2, ids=_id)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_parallel_decode_equals_serial(cfg, workers):
    bits = _bits(40 * cfg.group_size).reshape(-1, 8 * cfg.group_size // 8)
    enc = encode_tensor(bits, cfg)
    assert np.array_equal(decode_parallel(enc, draft=False, workers=workers), bits)
    assert np.array_equal(decode_parallel(enc, draft=True, workers=workers), decode_draft(enc))


@pytest.mark.parametrize("cfg", CONFIGS + V2, ids=_id)
def test_any_chunk_range_decodes_alone(cfg):
    bits = _bits(13 * cfg.chunk_values + 7)            # a partial last chunk and superblock too
    enc = encode_tensor(bits, cfg)
    full, draft = decode_full(enc), decode_draft(enc)
    V, A = cfg.chunk_values, cfg.chunk_superblocks
    for start, stop in [(0, 1), (3, 11), (enc.nchunks - 1, enc.nchunks), (0, enc.nchunks), (5, 5)]:
        sl = slice(start * V, min(stop * V, bits.size))
        for part in (slice_chunks(enc, start, stop), slice_superblocks(enc, start * A, min(stop * A, enc.nsb))):
            assert np.array_equal(decode_full(part), full[sl])
            assert np.array_equal(decode_draft(part), draft[sl])


def test_bad_range_is_rejected():
    enc = encode_tensor(_bits(256), CodecConfig(group_size=32, chunk_superblocks=1))
    with pytest.raises(ConfigError):
        slice_superblocks(enc, 5, 3)
    with pytest.raises(ConfigError):
        slice_superblocks(enc, 0, enc.nsb + 1)
    enc = encode_tensor(_bits(2000), CodecConfig(group_size=32, chunk_superblocks=4))
    with pytest.raises(ConfigError, match="chunk boundaries"):
        slice_superblocks(enc, 1, 4)
    with pytest.raises(ConfigError):
        slice_chunks(enc, 0, enc.nchunks + 1)
