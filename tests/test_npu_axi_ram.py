"""The NPU tile's AXI4 memory model (tb/npu/axi_ram.h), through its self-checking C++ program
tb/npu/test_axi_ram.cpp: a scripted AXI master checks data integrity (bursts of 1, 2, 16 and 256 beats, partial
strobes, back-pressure), that every protocol violation is caught, the exact latencies and outstanding limits,
and the timing model (pipelined reads at full and half bandwidth, one outstanding read, a bandwidth shared by
reads and writes). The figures are simulated cycles of the model, deterministic, so they are asserted exactly
or within a few cycles here as well."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

NPU_TB = Path(__file__).resolve().parent.parent / "tb" / "npu"
CAP_BEATS = 4  # AxiRam::BUDGET_CAP_BEATS


@pytest.fixture(scope="module")
def figures(tmp_path_factory) -> dict:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found on PATH: the AXI memory model's C++ test cannot be compiled")
    exe = tmp_path_factory.mktemp("axi_ram") / "test_axi_ram"
    subprocess.run(["nice", "-n", "10", gxx, "-O2", "-std=c++17", "-Wall", "-Wextra", "-I", str(NPU_TB),
                    str(NPU_TB / "test_axi_ram.cpp"), "-o", str(exe)], check=True, timeout=120)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"test_axi_ram failed (exit {out.returncode}):\n{out.stderr}\n{out.stdout}"
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, out.stdout
    return json.loads(lines[0])


def test_all_checks_pass_and_every_violation_is_caught(figures):
    assert figures["failures"] == 0
    assert figures["checks"] >= 100
    # burst FIXED / WRAP, size, 4 KiB crossing (AR and AW), too long, outside memory (x2), unaligned,
    # wlast early / missing, AR / AW / W valid dropped or payload changed while waiting
    assert figures["protocol_cases_detected"] == 17


def test_latencies_and_outstanding_limits(figures):
    assert figures["read_latency_seen"] == figures["latency"] == 20
    assert figures["write_latency_seen"] == 9
    assert figures["max_outstanding_reads"] == 4
    assert figures["max_outstanding_writes"] == 2


def test_read_bandwidth_and_latency_overlap(figures):
    n, lat = figures["n_bursts"], figures["latency"]
    # bw = data_bytes, 16 outstanding: the latency is paid once, then one beat per cycle
    assert figures["full_bw_model"] == 16 * n + lat
    assert figures["full_bw_model"] <= figures["full_bw_cycles"] <= figures["full_bw_model"] + 4
    assert figures["w8_lat40_model"] <= figures["w8_lat40_cycles"] <= figures["w8_lat40_model"] + 4
    # bw = data_bytes / 2: 32 cycles per burst; the bucket's few beats of credit gathered during the latency
    # come early, so a few cycles under the formula
    assert figures["half_bw_model"] == 32 * n + lat
    assert figures["half_bw_model"] - 2 * CAP_BEATS - 2 <= figures["half_bw_cycles"] <= figures["half_bw_model"] + 4
    assert figures["half_bw_budget_limited"] >= 16 * n - 8
    # one outstanding read: every burst pays 16 beats + the full latency
    assert figures["one_outstanding_cycles"] == figures["one_outstanding_model"] == 16 * (16 + lat)


def test_reads_and_writes_share_the_budget(figures):
    n = figures["n_bursts"]
    # 16n read + 16n write beats: one beat per cycle in total at bw = data_bytes, half at bw / 2, two at 2 bw
    assert 0.95 <= figures["mixed_full_beats_per_cycle"] <= 1.0 + 0.01
    assert 32 * n <= figures["mixed_full_cycles"] <= 32 * n + 40
    assert 0.95 * 0.5 <= figures["mixed_half_beats_per_cycle"] <= 0.5 + 0.01
    assert 64 * n <= figures["mixed_half_cycles"] <= 64 * n + 60
    assert 0.95 * 2 <= figures["mixed_2x_beats_per_cycle"] <= 2.0 + 0.01
    # a slow write (its AW accepted, its beats trickling) costs the reads one cycle per W beat, no more
    assert figures["slow_write_beats_during_reads"] >= 20
    assert (figures["slow_write_reads_done"]
            <= figures["full_bw_model"] + figures["slow_write_beats_during_reads"] + 4)
