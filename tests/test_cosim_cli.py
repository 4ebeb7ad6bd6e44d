"""`cassandra-rtl cosim`: JSON keys, exit status on mismatch (fault injected into the RTL result), a
clear message when a simulator is missing, .cass containers and .npy input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from cassandra_rtl import cli
from cassandra_rtl.golden.codec import encode_tensor
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.tb import bulk
from cassandra_rtl.tb.decoder import data as D

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def npy(tmp_path_factory):
    rng = np.random.default_rng(9)
    try:
        x = D.smollm2_sample(rng, 100_000, rows=1)[0]
    except FileNotFoundError:
        x = D.weights_like(rng, 100_000, sigma=0.03)
    p = tmp_path_factory.mktemp("cosim") / "w.npy"
    np.save(p, x)
    return p


@pytest.fixture(scope="module")
def cass(tmp_path_factory):
    container = pytest.importorskip("cassandra_rtl.golden.container")
    rng = np.random.default_rng(10)
    tensors = {
        "a": encode_tensor(D.weights_like(rng, 64 * 300).reshape(64, 300), CodecConfig(group_size=64, keep_ratio=0.5)),
        "b": encode_tensor(D.specials_tensor(rng, 5000), CodecConfig(group_size=128, mantissa_bits=7, keep_ratio=1.0)),
        "c2": encode_tensor(D.weights_like(rng, 4096), CodecConfig(scheme="c2", group_size=128)),
    }
    p = tmp_path_factory.mktemp("cosim") / "m.cass"
    container.write_container(p, tensors)
    return p


def _run(capsys, *argv):
    rc = cli.main(["cosim", *map(str, argv)])
    return rc, capsys.readouterr()


@pytest.mark.parametrize("mode", ["draft", "full"])
def test_cosim_container_json(cass, capsys, mode):
    if not bulk.available():
        pytest.skip("Verilator not available")
    # decoder_c1v3_l4: the harness make test builds anyway (test_cosim_bulk); the default configuration
    # (decoder_c1v3_l8, minutes to verilate here) is chosen by the tests of test_robustness_cli.py
    rc, out = _run(capsys, cass, "--mode", mode, "--config", "decoder_c1v3_l4", "--json")
    rep = json.loads(out.out)
    assert rc == 0, out
    for key in ("values", "mismatches", "values_per_second", "simulator"):
        assert key in rep
    assert rep["values"] == 64 * 300 + 5000 and rep["mismatches"] == 0
    assert rep["simulator"] == "verilator" and rep["skipped_c2_tensors"] == 1


def test_cosim_npy_max_values(npy, capsys):
    if not bulk.available():
        pytest.skip("Verilator not available")
    rc, out = _run(capsys, npy, "--max-values", "20000", "--config", "decoder_c1v3_l4", "--json")
    rep = json.loads(out.out)
    assert rc == 0 and rep["mismatches"] == 0 and 20000 <= rep["values"] < 20000 + 128


def test_cosim_icarus_small(npy, capsys):
    from cassandra_rtl.tb.common.tools import simulator_available

    if not simulator_available("icarus"):
        pytest.skip("icarus not installed")
    rc, out = _run(capsys, npy, "--sim", "icarus", "--max-values", "600", "--config", "decoder_c1v3_l4", "--json")
    rep = json.loads(out.out)
    assert rc == 0 and rep["values"] == 600 and rep["mismatches"] == 0 and rep["simulator"] == "icarus"


@pytest.mark.parametrize("config", ["decoder_c1v3_l8", "decoder_c2v3_l8"])
def test_cosim_container_through_decoder_v3(cass, capsys, config):
    """Decoder v3 reads the container's format 3.0 tensors as stored: the first values of one tensor in full
    mode at L = 8, on Icarus."""
    from cassandra_rtl.tb.common.tools import simulator_available

    if not simulator_available("icarus"):
        pytest.skip("icarus not installed")
    rc, out = _run(capsys, cass, "--sim", "icarus", "--mode", "full", "--max-values", "1500", "--config", config,
                   "--json")
    rep = json.loads(out.out)
    assert rc == 0 and rep["config"] == config and rep["mismatches"] == 0 and rep["values"] >= 1500
    assert rep["engine"] == "cocotb" and rep["tensors"] == 1             # the first tensor of the scheme


def test_cosim_mismatch_exits_nonzero(npy, capsys, monkeypatch):
    """Fault injection: flip one bit of the RTL's output; cosim must report it and exit 1."""
    if not bulk.available():
        pytest.skip("Verilator not available")
    real = bulk.decode_many_with_rtl

    def faulty(*a, **k):
        outs = real(*a, **k)
        outs[0] = outs[0].copy()
        outs[0].reshape(-1)[17] ^= 0x0100
        return outs

    monkeypatch.setattr(bulk, "decode_many_with_rtl", faulty)
    rc, out = _run(capsys, npy, "--max-values", "5000", "--json")
    rep = json.loads(out.out)
    assert rc == 1 and rep["mismatches"] == 1 and rep["first_mismatches"][0]["index"] == 17


def test_cosim_missing_simulator_message(npy, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    rc, out = _run(capsys, npy, "--sim", "icarus")
    assert rc == 2
    assert "iverilog" in out.err and "apt-get install" in out.err


def test_cosim_rejects_float_npy(tmp_path, capsys):
    p = tmp_path / "f.npy"
    np.save(p, np.ones(10, np.float32))
    rc, out = _run(capsys, p)
    assert rc == 2 and "uint16" in out.err


def test_cosim_format2_container_whole_chunks(tmp_path, capsys):
    """A format 2.0 tensor (chunks of 4 superblocks, pair books) through the RTL; --max-values stops at a
    chunk boundary, where a decoder can start (FORMAT.md §1)."""
    if not bulk.available():
        pytest.skip("Verilator not available")
    from cassandra_rtl.golden.container import write_container

    rng = np.random.default_rng(12)
    cfg = CodecConfig(group_size=64, keep_ratio=0.5, chunk_superblocks=4, pair_codes=True)
    enc = encode_tensor(D.weights_like(rng, 64 * 300).reshape(64, 300), cfg)
    assert enc.nchunks > 4 and (enc.spec_book.pairs or enc.verif_book.pairs)
    write_container(tmp_path / "m2.cass", {"w": enc})
    for mode in ("draft", "full"):
        rc, out = _run(capsys, tmp_path / "m2.cass", "--mode", mode, "--max-values", "1000", "--json")
        rep = json.loads(out.out)
        assert rc == 0 and rep["mismatches"] == 0 and rep["values"] == 4 * 256, out
