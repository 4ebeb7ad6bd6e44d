"""golden.io: float32 -> bf16 rounding (round to nearest, ties to even) and the input checks of §1."""
from __future__ import annotations

import numpy as np
import pytest

import reference_format as R
from cassandra_rtl.errors import ConfigError, InputError
from cassandra_rtl.golden.codec import decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.golden.io import bf16_bits_to_float, float_to_bf16_bits, read_tensors

UPPER = np.arange(1 << 16, dtype=np.uint32)
FINITE = UPPER[((UPPER >> 7) & 0xFF) != 0xFF]          # upper halves of finite float32 values


def _f32(u):
    return np.asarray(u, dtype=np.uint32).view(np.float32)


def test_exact_values_are_unchanged():
    np.testing.assert_array_equal(float_to_bf16_bits(_f32(UPPER << 16))[((UPPER >> 7) & 0xFF) != 0xFF],
                                  FINITE.astype(np.uint16))
    inf = np.array([0x7F80, 0xFF80], dtype=np.uint32)
    np.testing.assert_array_equal(float_to_bf16_bits(_f32(inf << 16)), inf.astype(np.uint16))


@pytest.mark.parametrize("low,rule", [(0x8000, "tie"), (0x7FFF, "down"), (0x8001, "up"), (0x0001, "down"),
                                      (0xFFFF, "up")])
def test_every_upper_half_rounds_to_nearest_even(low, rule):
    """Round to nearest; an exact tie goes to the even neighbour. Carrying into the exponent (and from the
    largest finite value into Inf) is what the bit increment does, as IEEE specifies."""
    got = float_to_bf16_bits(_f32((FINITE << 16) | low)).astype(np.uint32)
    want = {"tie": FINITE + (FINITE & 1), "down": FINITE, "up": FINITE + 1}[rule]
    np.testing.assert_array_equal(got, want)


def test_random_float32_against_exact_reference():
    rng = np.random.default_rng(0)
    u = rng.integers(0, 1 << 32, 3000, dtype=np.uint64).astype(np.uint32)
    u = u[(u & 0x7FFFFFFF) <= 0x7F800000]
    got = float_to_bf16_bits(_f32(u))
    want = [R.f32_to_bf16_rne(float(x)) for x in _f32(u)]
    assert got.tolist() == want


def test_nan_stays_nan_with_its_sign():
    u = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7F80FFFF], dtype=np.uint32)
    got = float_to_bf16_bits(_f32(u)).astype(np.uint32)
    assert np.all(((got >> 7) & 0xFF) == 0xFF) and np.all((got & 0x7F) != 0)
    np.testing.assert_array_equal(got >> 15, u >> 31)


def test_bf16_bits_to_float_is_exact():
    f = bf16_bits_to_float(FINITE.astype(np.uint16))
    np.testing.assert_array_equal(f.view(np.uint32), FINITE << 16)


@pytest.mark.parametrize("bad", [np.zeros((2, 2, 32), np.uint16), np.array(5, dtype=np.uint16),
                                 np.zeros((2, 32), np.int32), np.zeros(32, np.float32), np.zeros((1, 32), np.int16)])
def test_encode_rejects_other_ranks_and_dtypes(bad):
    """§1: weights are rank 1 or 2 of raw bf16 bits (uint16); other ranks are rejected."""
    with pytest.raises(InputError):
        encode_tensor(bad, CodecConfig(group_size=32))


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize("shape", [(0,), (0, 64), (3, 0)])
def test_empty_tensor_roundtrips(scheme, shape):
    bits = np.zeros(shape, dtype=np.uint16)
    enc = encode_tensor(bits, CodecConfig(scheme=scheme, group_size=32, keep_count=7))
    out = decode_full(enc)
    assert out.shape == shape and out.dtype == np.uint16


def test_kv_path_prunes_by_magnitude_only():
    """§2: the KV path uses the magnitude key only (the RTL encoder's rule)."""
    cfg = CodecConfig(group_size=32, keep_count=8, kind="kv")
    with pytest.raises(ConfigError):
        encode_tensor(np.zeros((2, 32), np.uint16), cfg, salience=np.ones(64))


def test_salience_must_match_the_tensor():
    cfg = CodecConfig(group_size=32, keep_count=8)
    with pytest.raises(InputError):
        encode_tensor(np.zeros((2, 32), np.uint16), cfg, salience=np.ones(63))
    with pytest.raises(InputError):
        encode_tensor(np.zeros((2, 32), np.uint16), cfg, salience=np.full(64, np.nan))


def test_read_tensors_npy_and_errors(tmp_path):
    bits = np.arange(200, dtype=np.uint16).reshape(4, 50)
    np.save(tmp_path / "t.npy", bits)
    [(name, got)] = list(read_tensors(tmp_path / "t.npy"))
    assert name == "t"
    np.testing.assert_array_equal(got, bits)
    with pytest.raises(FileNotFoundError):
        read_tensors(tmp_path / "missing.npy")
    (tmp_path / "x.bin").write_bytes(b"123")
    with pytest.raises(InputError):
        read_tensors(tmp_path / "x.bin")
