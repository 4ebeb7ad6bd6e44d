"""Real SmolLM2-135M tensors (the bundled GGUF, read through golden.io) round-trip exactly; their drafts
match §2.1; a small slice matches the reference byte for byte. One test, so the GGUF is read once."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import reference_format as R
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.golden.io import bundled_model_path, read_tensors
from test_golden_reference import check_against_reference

CONFIGS = [dict(scheme="c1", group_size=128, mantissa_bits=3, keep_ratio=1.0),
           dict(scheme="c1", group_size=64, mantissa_bits=2, keep_ratio=0.3),
           dict(scheme="c2", group_size=128, mantissa_bits=3, keep_ratio=1.0),
           dict(scheme="c2", group_size=256, mantissa_bits=0, keep_ratio=0.5),
           dict(scheme="c1", group_size=32, mantissa_bits=7, keep_ratio=1 / 32)]


@pytest.mark.model
def test_smollm2_tensors_roundtrip():
    try:
        path = bundled_model_path()
    except Exception as exc:  # noqa: BLE001 - the model is installed by `make setup`
        pytest.skip(f"bundled model unavailable: {exc}")
    tensors = dict(itertools.islice(read_tensors(path), 10))
    assert "token_embd.weight" in tensors and "blk.0.attn_q.weight" in tensors
    q = tensors["blk.0.attn_q.weight"]
    assert q.dtype == np.uint16 and q.shape == (576, 576)
    exps = (q >> 7) & 0xFF
    assert 100 < np.median(exps) < 127                 # weights, not garbage

    # Whole small tensors (norm vectors, attn_k) and the first rows of the others, to stay fast.
    picks = {f"{name}[:48]": bits[:48] for name, bits in tensors.items() if bits.ndim == 2}
    picks.update({name: bits for name, bits in tensors.items() if bits.ndim == 1 or bits.shape[0] <= 192})
    for kw in CONFIGS:
        cfg = CodecConfig(**kw)
        for name, bits in picks.items():
            enc = encode_tensor(bits, cfg)
            full = decode_full(enc)
            assert full.shape == bits.shape
            assert np.array_equal(full, bits), f"{name} {kw}"
            flat = bits.reshape(-1)
            kept = R.keep_flags_np(flat, cfg.group_size, cfg.keep_count)
            want = R.draft_c1_np(flat, cfg.mantissa_bits, kept) if cfg.scheme == "c1" else \
                R.draft_c2_np(flat, cfg.mantissa_bits, R.block_max_exponent(flat, cfg.group_size), kept)
            assert np.array_equal(decode_draft(enc).reshape(-1), want), f"{name} {kw}"
    # A slice through the scalar reference: byte-exact planes, value-exact decode.
    for kw in CONFIGS[:4]:
        check_against_reference(q[:2, :300], CodecConfig(**kw), compare_books=False)
