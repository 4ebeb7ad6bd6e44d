"""cassandra_rtl.executor and the work on it: cluster selection, results in task order, the co-simulation's
merged report the same bytes on the local pool and on a 2-worker Dask LocalCluster, a worker killed mid-run.

The Dask parts need the optional extra (pip install '.[cluster]') and are skipped with that reason otherwise.
"""
from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest

from cassandra_rtl import executor as X
from cassandra_rtl.errors import ConfigError, ToolMissingError

NO_DASK = "the cluster extra (Dask distributed) is not installed: pip install '.[cluster]'"
needs_dask = pytest.mark.skipif(not X.dask_available(), reason=NO_DASK)
CONFIG = "decoder_c1v3_l4"          # the harness make test builds anyway (test_cosim_bulk)


# ------------------------------------------------------------------ selection (no Dask needed)

@pytest.mark.parametrize("value,want", [(None, None), ("", None), ("pool", None), ("none", None),
                                        ("local:2", "local:2"), ("tcp://10.0.0.5:8786", "tcp://10.0.0.5:8786"),
                                        ("tls://sched.example:8786", "tls://sched.example:8786")])
def test_cluster_spec(value, want, monkeypatch):
    monkeypatch.delenv(X.ENV, raising=False)
    assert X.cluster_spec(value) == want


def test_cluster_spec_from_environment(monkeypatch):
    monkeypatch.setenv(X.ENV, "local:3")
    assert X.cluster_spec(None) == "local:3"
    assert X.cluster_spec("pool") is None          # the option wins over the variable


@pytest.mark.parametrize("bad", ["local:0", "local:x", "local", "host:8786", "8786"])
def test_cluster_spec_refuses(bad, monkeypatch):
    monkeypatch.delenv(X.ENV, raising=False)
    with pytest.raises(ConfigError, match="--cluster"):
        X.cluster_spec(bad)


def test_bad_cluster_option_is_one_line(run, tmp_path):
    r = run("cosim", tmp_path / "x.cass", "--cluster", "somewhere")
    assert r.returncode == 2 and "--cluster" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_missing_extra_is_one_line(run, tmp_path, monkeypatch, weight_bits):
    """--cluster without Dask: the install line, exit 2, before any simulation."""
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.container import write_container
    from cassandra_rtl.tb.common import tools

    write_container(tmp_path / "m.cass", {"t": encode_tensor(weight_bits(300), CodecConfig())})
    monkeypatch.setattr(tools, "ensure_simulator", lambda sim: sim)
    monkeypatch.setattr(X, "dask_available", lambda: False)
    r = run("cosim", tmp_path / "m.cass", "--cluster", "local:2")
    assert r.returncode == 2 and "[cluster]" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _square(shared, t):
    time.sleep(0.01 * (t % 3))              # finish out of order
    return t * t + shared


def test_pool_map_keeps_task_order():
    seen = []
    with X.Executor(None, jobs=3, progress=False) as ex:
        ex.on_result = lambda i, r: seen.append(i)
        assert ex.map(_square, range(12), shared=1) == [t * t + 1 for t in range(12)]
        assert ex.describe() == {"executor": "pool", "workers": 3}
    assert sorted(seen) == list(range(12))


def test_merge_is_deterministic_and_offsets_indices():
    from cassandra_rtl.tb.bulk.jobs import merge

    r = [{"values": 10, "mismatches": 2, "first": [("a", 3, 1, 2), ("a", 4, 1, 2)], "cycles": 5, "beats": 1,
          "sim_seconds": 0.1},
         {"values": 10, "mismatches": 6, "first": [("a", 1030 + i, 0, 1) for i in range(6)], "cycles": 6,
          "beats": 1, "sim_seconds": 0.1}]
    m = merge(r)
    assert (m["values"], m["mismatches"], m["cycles"], m["tasks"]) == (20, 8, 11, 2)
    assert [x["index"] for x in m["first_mismatches"]] == [3, 4, 1030, 1031, 1032]   # 5 per tensor, in order


def test_plan_cuts_at_chunk_boundaries(weight_bits):
    from cassandra_rtl.golden.codec import decode_full, encode_tensor
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.tb.bulk.jobs import plan_pieces

    big = encode_tensor(weight_bits(10_000), CodecConfig())
    small = [encode_tensor(weight_bits(300, seed=s), CodecConfig()) for s in range(3)]
    groups = plan_pieces([("s0", small[0]), ("big", big), ("s1", small[1]), ("s2", small[2])], task_values=4096)
    V = big.config.chunk_values
    assert [[(p.name, p.offset) for p in g] for g in groups] == \
        [[("s0", 0)], [("big", 0)], [("big", 4 * V)], [("big", 8 * V)], [("s1", 0), ("s2", 0)]]
    parts = np.concatenate([decode_full(p.enc).reshape(-1) for g in groups for p in g if p.name == "big"])
    assert np.array_equal(parts, decode_full(big).reshape(-1))


# ------------------------------------------------------------------ Dask LocalCluster

@needs_dask
def test_local_cluster_survives_a_killed_worker():
    """A worker killed (SIGKILL) after the first result: its tasks run elsewhere, every result arrives,
    in task order."""
    with X.Executor("local:2", progress=False) as ex:
        pids = ex.client.run(os.getpid)
        killed = []

        def kill_once(i, r):
            if not killed:
                killed.append(next(iter(pids.values())))
                os.kill(killed[0], signal.SIGKILL)
        ex.on_result = kill_once
        got = ex.map(_slow_square, range(16), shared=1)
        assert got == [t * t + 1 for t in range(16)]
        assert killed and not _alive(killed[0])
        assert ex.describe()["workers"] == 2                  # the nanny started a new one


def _boom(t):
    if t == 3:
        raise ValueError(f"task {t} refuses")
    return t


@needs_dask
def test_a_task_error_reaches_the_client_as_itself():
    """An exception raised by a task is the job's answer (not retried, not wrapped), as in the local pool."""
    for cluster in (None, "local:2"):
        with X.Executor(cluster, jobs=2, progress=False) as ex:
            with pytest.raises(ValueError, match="task 3 refuses"):
                ex.map(_boom, range(6))
            assert ex.resubmitted == 0


def _slow_square(shared, t):
    time.sleep(0.2)
    return t * t + shared


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.container import write_container
    from cassandra_rtl.tb.decoder import data as D

    rng = np.random.default_rng(31)
    tensors = {
        "a": encode_tensor(D.weights_like(rng, 64 * 1500).reshape(64, 1500), CodecConfig(group_size=64, keep_ratio=0.5)),
        "b": encode_tensor(D.specials_tensor(rng, 5000), CodecConfig(group_size=128, mantissa_bits=7, keep_ratio=1.0)),
        "c": encode_tensor(D.weights_like(rng, 150_000), CodecConfig()),
    }
    p = tmp_path_factory.mktemp("cluster") / "m.cass"
    write_container(p, tensors)
    return p


def _bulk_or_skip():
    from cassandra_rtl.tb import bulk

    if not bulk.available():
        pytest.skip("Verilator not available")


@needs_dask
@pytest.mark.sim
@pytest.mark.parametrize("mode", ["draft", "full"])
def test_cosim_local_cluster_equals_pool(container, run, tmp_path, mode):
    """`cosim --cluster local:2 --json`: the same values, mismatches, cycles and first mismatches as the
    local pool, plus workers; the merged report (--report) is byte-identical. Small tasks (--task-values)
    so the tensors are cut at chunk boundaries and spread over both workers."""
    _bulk_or_skip()
    reps = {}
    for name, extra in (("pool", []), ("cluster", ["--cluster", "local:2"])):
        r = run("cosim", container, "--config", CONFIG, "--mode", mode, "--json", "--task-values", "20000",
                "--report", tmp_path / f"{name}.json", *extra)
        assert r.returncode == 0, r.stderr
        reps[name] = json.loads(r.stdout)
    pool, cl = reps["pool"], reps["cluster"]
    assert pool["values"] == 64 * 1500 + 5000 + 150_000 and pool["mismatches"] == 0
    for key in ("values", "mismatches", "cycles", "tasks", "first_mismatches"):
        assert pool[key] == cl[key], key
    assert pool["tasks"] > 2
    assert (cl["workers"], cl["executor"], pool["executor"]) == (2, "local-cluster", "pool")
    assert (tmp_path / "pool.json").read_bytes() == (tmp_path / "cluster.json").read_bytes()


@needs_dask
@pytest.mark.sim
def test_cosim_killed_worker_same_report(container):
    """A worker killed mid-co-simulation (after the first task's result): the job completes and its merged
    report is the same bytes as the local pool's."""
    _bulk_or_skip()
    from cassandra_rtl.golden.container import read_container
    from cassandra_rtl.tb.bulk import jobs

    named = list(read_container(container).tensors.items())
    with X.Executor(None, jobs=2, progress=False) as ex:
        want = jobs.cosim_many(named, "full", CONFIG, ex, task_values=20000)
    with X.Executor("local:2", progress=False) as ex:
        pids = ex.client.run(os.getpid)
        killed = []

        def kill_once(i, r):
            if not killed:
                killed.append(next(iter(pids.values())))
                os.kill(killed[0], signal.SIGKILL)
        ex.on_result = kill_once
        got = jobs.cosim_many(named, "full", CONFIG, ex, task_values=20000)
    assert killed and want["mismatches"] == 0 and want["tasks"] > 4
    assert jobs.merged_report(got) == jobs.merged_report(want)


# ------------------------------------------------------------------ the synthesis sweep

def test_synth_recorded_command_leaves_out_where_it_ran():
    from cassandra_rtl.synth.flow import recorded_command

    want = "python -m cassandra_rtl.synth.flow --out o --only a,b --quick"
    for argv in (["--out", "o", "--only", "a,b", "--quick"],
                 ["--out", "o", "--jobs", "4", "--only", "a,b", "--cluster", "local:2", "--quick"],
                 ["--cluster=tcp://h:8786", "--out", "o", "-j", "3", "--only", "a,b", "-j2", "--quick", "--jobs=1"]):
        assert recorded_command(argv) == want


@needs_dask
def test_synth_local_cluster_report_is_byte_identical(tmp_path):
    """The same flow into the same --out on the local pool and on a 2-worker local cluster (no cache): the
    same report.json and report.md bytes; the netlists and cache entries written back on the client; the run
    file says how it ran. A block that fails to elaborate is reported missing either way."""
    from test_synth_flow import _blocks

    from cassandra_rtl.synth import flow

    pick = ("toy_adder_l2", "toy_adder_l4", "broken_block")
    out = tmp_path / "synth"
    files = {}
    for name, cluster in (("pool", None), ("cluster", "local:2")):
        blocks = {n: b for n, b in _blocks().items() if n in pick}
        rep = flow.run_flow(flow.FlowOptions(out=out, jobs=2, use_cache=False, cluster=cluster), blocks=blocks)
        assert rep["blocks"]["toy_adder_l4"]["area_ge"] > rep["blocks"]["toy_adder_l2"]["area_ge"] > 0
        assert rep["blocks"]["broken_block"]["status"] == "missing"
        files[name] = {f: (out / f).read_bytes() for f in ("report.json", "report.md")}
        run = json.loads((out / "report.run.json").read_text())
        assert run["executor"] == ("pool" if cluster is None else "local-cluster")
        assert run["blocks"]["toy_adder_l2"]["cached"] is False
        for block in ("toy_adder_l2", "toy_adder_l4"):
            assert (out / "blocks" / block / "netlist.json").is_file()
        out.rename(tmp_path / name)
    assert files["pool"] == files["cluster"]
    assert sorted(p.name for p in (tmp_path / "pool" / "cache").iterdir()) == \
        sorted(p.name for p in (tmp_path / "cluster" / "cache").iterdir())
    # the cluster's cache entries serve a later run: nothing synthesised, no cluster started
    (tmp_path / "cluster").rename(out)
    blocks = {n: b for n, b in _blocks().items() if n in pick}
    again = flow.run_flow(flow.FlowOptions(out=out, cluster="local:2"), blocks=blocks)
    assert again["blocks"]["toy_adder_l2"]["cached"] is True
    assert (out / "report.json").read_bytes() == files["pool"]["report.json"]


# ------------------------------------------------------------------ the synthetic 8 B-shaped model

def test_synthetic_llama3_8b_shape_and_blocks():
    """The 2-D weights of Llama-3-8B (its 8,030,261,248 parameters less the 65 norms of 4096); every block
    in exactly one task whatever the task size; a block's bits depend only on (seed, tensor, block)."""
    from cassandra_rtl.tb.bulk import synthetic as S

    specs = S.tensors()
    assert sum(t.numel for t in specs) == 8_030_261_248 - 65 * 4096 and len(specs) == 2 + 32 * 7
    for tv in (1 << 22, 1 << 24):
        groups = S.plan_groups(task_values=tv)
        assert all(len({p.spec.name for p in g}) == 1 for g in groups)     # a task is one tensor's rows
        assert sum(p.numel for g in groups for p in g) == sum(t.numel for t in specs)
    down = next(t for t in specs if t.kind == "ffn_down")
    a, b = S.block_bits(down, 3), S.block_bits(down, 3)
    assert a.dtype == np.uint16 and a.shape == (down.rows_per_block, down.cols) and np.array_equal(a, b)
    assert not np.array_equal(a, S.block_bits(down, 4))
    picked = S.spread(S.plan_groups(), 10**8)
    assert sum(p.numel for g in picked for p in g) >= 10**8
    assert {g[0].spec.kind for g in picked} == {"attn", "ffn_gate_up", "ffn_down", "embedding"}


@pytest.mark.sim
def test_synthetic_task_cosimulates_without_mismatch():
    """One synthetic block (1 M values, generated and encoded by the task itself) through the RTL on the
    local pool, draft mode: every value equal to golden."""
    _bulk_or_skip()
    from cassandra_rtl.tb.bulk import jobs, synthetic as S
    from cassandra_rtl.tb.decoder.framing import FORMAT_3

    spec = next(t for t in S.tensors() if t.kind == "attn")
    tasks = jobs.make_tasks([[S.SyntheticPiece(spec, 5, layout=FORMAT_3)]], "draft", CONFIG)
    with X.Executor(None, jobs=1, progress=False) as ex:
        r = jobs.run_tasks(tasks, CONFIG, ex)
    assert (r["values"], r["mismatches"]) == (spec.rows_per_block * spec.cols, 0) and r["stream_bytes"] > 0


# ------------------------------------------------------------------ the formal suite

@pytest.mark.slow            # ~2 min of SymbiYosys on a loaded 2-core machine: make test's budget
@needs_dask
def test_formal_properties_on_a_local_cluster(tmp_path):
    """hw/formal.py --cluster local:2: one task per property, the verdicts (a proof and a mutant's failure)
    and the recorded command as a local run would have them."""
    from cassandra_rtl.hw import formal

    if "yices" not in formal.check_tools(("yices",)):
        pytest.skip("yices-smt2 not installed")
    only = "zc_w24_l4_comb_chain$,zc_w24_l4_comb_char_mutant"
    assert formal.main(["--quick", "--only", only, "--cluster", "local:2", "--out", str(tmp_path)]) == 0
    rep = json.loads((tmp_path / "report.json").read_text())
    got = {r["property"]: (r["result"], r["ok"]) for r in rep["properties"]}
    assert got == {"zc_w24_l4_comb_chain": ("PASS", True), "zc_w24_l4_comb_char_mutant": ("FAIL", True)}
    assert rep["meta"]["command"] == f"python -m cassandra_rtl.hw.formal --quick --only {only} --out {tmp_path}"


@needs_dask
@pytest.mark.sim
def test_cosim_on_a_scheduler_address(container, run, tmp_path, monkeypatch):
    """A running Dask scheduler named by its address in $CASSANDRA_RTL_CLUSTER (what a team's cluster looks
    like to the client): the same merged report as the local pool."""
    _bulk_or_skip()
    from distributed import LocalCluster

    r = run("cosim", container, "--config", CONFIG, "--mode", "draft", "--task-values", "40000",
            "--report", tmp_path / "pool.json")
    assert r.returncode == 0, r.stderr
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
                      host="127.0.0.1", worker_dashboard_address=None) as cluster:
        monkeypatch.setenv(X.ENV, cluster.scheduler_address)
        r = run("cosim", container, "--config", CONFIG, "--mode", "draft", "--task-values", "40000", "--json",
                "--report", tmp_path / "cluster.json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert (rep["executor"], rep["workers"], rep["cluster"]) == ("cluster", 2, cluster.scheduler_address)
    assert (tmp_path / "pool.json").read_bytes() == (tmp_path / "cluster.json").read_bytes()


# ------------------------------------------------------------------ the FPGA sweep

@needs_dask
@pytest.mark.slow                         # three nextpnr runs: ~30 s here
def test_fpga_on_a_local_cluster_uses_and_fills_the_client_cache(tmp_path):
    """synth/fpga.py on local:2: the toy block placed and routed on a worker with the pool's figures; its
    netlist and cache entries come back into --out, and a rerun with one more seed runs only that seed there
    (the cached seed travels to the worker with the task)."""
    from test_synth_fpga import _toy

    from cassandra_rtl.synth import fpga

    try:
        fpga.check_tools()
    except ToolMissingError as exc:
        pytest.skip(str(exc))
    pool = fpga.run_fpga(fpga.FpgaOptions(tmp_path / "pool", seeds=(1,), timeout_s=300), blocks=_toy())
    out = tmp_path / "cluster"
    first = fpga.run_fpga(fpga.FpgaOptions(out, seeds=(1,), timeout_s=300, cluster="local:2"), blocks=_toy())
    a, b = pool["blocks"]["toy_adder"], first["blocks"]["toy_adder"]
    assert b["status"] == "ok" and b["cached"] is False
    for k in ("lut4", "ff", "ccu2c", "fmax_mhz", "best_seed", "utilization"):
        assert a[k] == b[k], k
    assert (out / "blocks" / "toy_adder" / "netlist.json").is_file()
    assert len(list((out / "cache").glob("toy_adder.seed1.*.json"))) == 1
    again = fpga.run_fpga(fpga.FpgaOptions(out, seeds=(1, 2), timeout_s=300, cluster="local:2"), blocks=_toy())
    c = again["blocks"]["toy_adder"]
    assert c["status"] == "ok" and set(c["fmax_by_seed"]) == {"1", "2"}
    assert c["pnr_seconds_by_seed"]["1"] == b["pnr_seconds_by_seed"]["1"]          # seed 1 not rerun
    assert len(list((out / "cache").glob("toy_adder.seed2.*.json"))) == 1


# ------------------------------------------------------------------ the NPU tile's bulk runs

@needs_dask
@pytest.mark.sim
@pytest.mark.slow                         # the default tile's harness, two tensors: about a minute here
def test_npu_measurement_on_a_local_cluster_equals_the_pool(run):
    """cassandra-rtl npu --cluster local:2: the same passes, per-tensor cycles, mismatches and batch invariance
    as the local pool (only the wall time differs)."""
    from cassandra_rtl.tb import npu

    if not npu.available():
        pytest.skip("Verilator not available")
    reps = []
    for extra in ([], ["--cluster", "local:2"]):
        r = run("npu", "--tensors", "2", "--json", "--per-tensor", *extra)
        assert r.returncode == 0, r.stderr
        rep = json.loads(r.stdout)
        rep.pop("wall_s")
        reps.append(rep)
    assert reps[0] == reps[1] and reps[0]["tensors"] == 2 and reps[0]["batch_invariant"] is True
