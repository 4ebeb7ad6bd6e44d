"""bench/split_options.py prices format options with its own copies of the code-length rules: check them
against the golden codebook (FORMAT.md §3.1) and against what a truncated binary code must satisfy."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import split_options  # noqa: E402

from cassandra_rtl.golden.codebook import build_codebook  # noqa: E402
from cassandra_rtl.golden.config import ESCAPE_PAYLOAD_BITS, PRUNED  # noqa: E402


@pytest.mark.parametrize("seed", range(8))
def test_group_code_bits_is_the_golden_codebook_cost(seed):
    rng = np.random.default_rng(seed)
    counts = np.zeros(PRUNED + 1, dtype=np.int64)
    exps = rng.choice(np.arange(100, 130), size=rng.integers(3, 25), replace=False)
    counts[exps] = rng.geometric(0.05, size=len(exps)) * rng.integers(1, 50)
    counts[PRUNED] = counts.sum() + 1          # the most common symbol, as at keep 0.3
    book = build_codebook(counts, required=PRUNED, pairs=True)
    golden = int((counts * book.code_lengths()).sum())
    syms, c = split_options.sorted_counts(np.repeat(np.arange(PRUNED + 1), counts))
    assert split_options.group_code_bits(c, syms == PRUNED, 15, ESCAPE_PAYLOAD_BITS) == golden


@pytest.mark.parametrize("r", [1, 2, 3, 5, 7, 8, 9, 100, 127, 128])
def test_truncated_binary_lengths_form_a_complete_prefix_code(r):
    v = np.arange(r)
    lengths = split_options.truncated_binary_bits(np.full(r, r), v)
    if r == 1:
        assert lengths.tolist() == [0]
        return
    assert np.isclose(np.sum(2.0 ** -lengths.astype(float)), 1.0)     # Kraft equality: complete
    assert lengths.max() - lengths.min() <= 1 and lengths.max() == int(np.ceil(np.log2(r)))
    assert np.all(np.diff(lengths) >= 0)                              # short codes for the small values


def test_bitlen():
    assert split_options.bitlen(np.array([0, 1, 2, 3, 4, 127, 128])).tolist() == [0, 1, 2, 2, 3, 7, 8]
