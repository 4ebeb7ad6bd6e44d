"""hw/formal.py: the zero counter proof passes, and a proof against a deliberately wrong specification
fails (the check is not vacuous)."""
from __future__ import annotations

import pytest

from cassandra_rtl.hw import formal


@pytest.fixture(scope="module")
def yosys():
    try:
        return formal._yosys()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(str(exc))


def test_zero_counter_matches_spec_w24_l4(yosys, tmp_path):
    r = formal._prove(formal.ZeroCounterCheck(24, 4, False), "zc", tmp_path, "", 600)
    assert r["status"] == "PROVED", r


def test_wrong_spec_is_refuted(yosys, tmp_path):
    r = formal._prove(formal.ZeroCounterCheck(24, 4, False, mutant=True), "zc_mutant", tmp_path, "", 600)
    assert r["status"] == "FAILED", r
