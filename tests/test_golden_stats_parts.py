"""golden.stats.tensor_stats decodes a tensor a run of chunks at a time (``PART_VALUES``): the statistics do not
depend on the part size, with pair groups (suffix bits) and partial last chunks, in both schemes."""
from __future__ import annotations

import numpy as np
import pytest

from cassandra_rtl.golden import stats
from cassandra_rtl.golden.codec import decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig


@pytest.mark.parametrize("scheme,keep", [("c1", 1.0), ("c1", 0.5), ("c2", 0.75)])
def test_parts_give_the_whole_tensors_statistics(monkeypatch, scheme, keep):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((37, 300)) * 0.02).astype(np.float32)
    bits = (w.view(np.uint32) >> 16).astype(np.uint16)
    enc = encode_tensor(bits, CodecConfig(scheme=scheme, group_size=64, mantissa_bits=3, keep_ratio=keep,
                                          chunk_superblocks=4))
    assert enc.nchunks > 3
    whole = stats.tensor_stats(enc, decode_full(enc))          # one part: the given bits
    monkeypatch.setattr(stats, "PART_VALUES", 256 * 3)          # three chunks of 4 x 64 values per part
    parts = stats.tensor_stats(enc)
    if scheme == "c1" and keep == 1.0:
        assert whole["exponent_suffix_bits"] > 0                 # pair groups present: suffix bits counted
    assert np.array_equal(parts.pop("_exponent_counts"), whole.pop("_exponent_counts"))
    assert parts == whole
