"""docs/datasheets/waves: the timing diagrams are the simulation's (decoder_c1v3_l4 and decoder_c2v3_l8
on the worked example), and the cycle counts the decoder datasheet states are read off them."""
from __future__ import annotations

import json

import pytest

from cassandra_rtl.hw import waves


@pytest.mark.parametrize("block", list(waves.BLOCKS))
@pytest.mark.parametrize("scenario", waves.SCENARIOS)
def test_committed_diagram_is_the_simulation(scenario, block):
    committed = json.loads((waves.WAVES / f"{block}_{scenario}.json").read_text())
    assert committed == json.loads(json.dumps(waves.wavedrom(scenario, block=block))), \
        "run `make waves` (python -m cassandra_rtl.hw.waves) and commit docs/datasheets/waves"
    assert (waves.WAVES / f"{block}_{scenario}.svg").exists()


def test_committed_kv_and_register_block_diagrams_are_the_simulation():
    for stem, desc in (("kv_vector", waves.wavedrom_kv()), ("csr_bus", waves.wavedrom_csr())):
        assert json.loads((waves.WAVES / f"{stem}.json").read_text()) == json.loads(json.dumps(desc)), stem
        assert (waves.WAVES / f"{stem}.svg").exists()


def test_kv_and_register_block_counts():
    kv = waves.record_kv()["marks"]
    assert kv["spec_codes_last"] - kv["first_beat_in"] == 54     # first beat in -> last word out, G = 32, k = 24
    assert len({kv[f"{p}_last"] for p in ("spec_codes", "spec_signman", "verif_codes", "verif_rest")}) == 1
    rows, m = waves.record_csr()["rows"], waves.record_csr()["marks"]
    assert rows[m["slverr"]]["bresp"] == 2 and not any(r["cfg.valid"] for r in rows)   # refused, never forwarded
    assert m["irq"] == m["busy_fell"] + 1                         # DONE one cycle after busy fell


def _beats_before(rec, mark):
    return sum(1 for r in rec["rows"][:rec["marks"][mark]] if r["out.valid"] and r["out.ready"])


def test_the_datasheet_cycle_counts():
    start = waves.record("start")["marks"]
    assert start["first_beat"] - start["start"] == 6          # START write, two set-up cycles, then P, R, D, F (liveness bound 6)
    assert start["busy_fell"] == start["last_beat"] + 1         # busy falls the cycle after the last beat
    stall = waves.record("stall")["marks"]
    assert stall["last_beat"] - start["last_beat"] == 2         # two cycles of backpressure cost two cycles
    c2 = waves.record("start", "c2")["marks"]
    assert c2["first_beat"] - c2["start"] == 5                  # C2: the liveness bound (hw/formal.py FORMAL_LIVENESS_N: 5)
    # a chunk with a word too many: the beats before the one that finds it are emitted, that one is not
    # (16 values: C1 L = 4 four beats, C2 L = 8 two)
    assert _beats_before(waves.record("error"), "error") == 3
    assert _beats_before(waves.record("error", "c2"), "error") == 1


def test_words_offered_during_an_error_are_lost():
    """The datasheet's recovery rule: words of the next tensor offered while the error is set are taken and
    discarded (drained) before CLEAR_ERROR."""
    rec = waves.record("error")
    m, rows = rec["marks"], rec["rows"]
    drained = sum(1 for r in rows[m["error"]:m["cleared"]] for p in ("spec_codes", "spec_signman")
                  if r[f"{p}.valid"] and r[f"{p}.ready"])
    assert drained >= 2 and rows[m["error"]]["error_code"] == 1 << 2     # TOO_LONG
