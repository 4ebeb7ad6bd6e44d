"""The draft-allocation tuner's candidates on the executor (cassandra_rtl/executor.py): the same search, the same
sensitivity table, the same draft config bytes and the same log on the local path (one after another in this
process), on the local pool of threads and on a 2-worker Dask LocalCluster; bad --cluster / --jobs values.

The Dask parts need the optional extra (pip install '.[cluster]') and are skipped with that reason otherwise.
"""
from __future__ import annotations

import json

import pytest

from cassandra_rtl import executor as X
from cassandra_rtl.errors import ConfigError
from cassandra_rtl.model.testing import tiny_checkpoint, write_hf_folder
from cassandra_rtl.model.tune import TuneContext, model_fingerprint, run_search

NO_DASK = "the cluster extra (Dask distributed) is not installed: pip install '.[cluster]'"
needs_dask = pytest.mark.skipif(not X.dask_available(), reason=NO_DASK)
CAL = ("alpha beta gamma", "x = 1 + 2", "hello there")
EVAL = ("one more thing", "print(3)")
OPTIONS = (("c1", 1.0, 3), ("c1", 0.5, 2), ("c2", 1.0, 3))

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rows(path):
    """The JSON lines of ``path`` without the per-evaluation wall time (a measurement, different on every run)."""
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if "result" in row:                      # scores.jsonl: {"key", "result"}
            row = {**row, "result": {k: v for k, v in row["result"].items() if k != "seconds"}}
        out.append({k: v for k, v in row.items() if k != "seconds"})
    return out


def _search(ck, cache, ex=None):
    cache.mkdir()
    return run_search(ck, "wanda", CAL, EVAL, n_new=4, options=OPTIONS, bands=2, quick=True, group_size=32,
                      cache_dir=cache, log_path=cache / "log.jsonl", executor=ex)


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def _same_search(a, r, a0, r0):
    assert a.to_json() == a0.to_json()
    assert r["sensitivity"] == r0["sensitivity"]
    for part in ("uniform", "path", "knapsack", "frontier"):
        assert _strip(r[part]) == _strip(r0[part]), part
    assert _strip([r["best"]]) == _strip([r0["best"]])


@pytest.fixture(scope="module")
def ck():
    return tiny_checkpoint(seed=5, std=0.1)


def test_pool_gives_the_sequential_search(ck, tmp_path):
    """--jobs 2: the client's Tuners shared by two threads; every fresh candidate is one task."""
    a0, r0 = _search(ck, tmp_path / "seq")
    fresh = [row for row in _rows(tmp_path / "seq" / "log.jsonl") if not row.get("cached")]
    with X.Executor(None, jobs=2, progress=False) as ex:
        done = []
        ex.on_result = lambda i, r: done.append(i)
        a, r = _search(ck, tmp_path / "pool", ex)
    _same_search(a, r, a0, r0)
    assert len(done) == len(fresh) > 10
    for name in ("log.jsonl", "scores.jsonl"):
        assert _rows(tmp_path / "pool" / name) == _rows(tmp_path / "seq" / name), name


@needs_dask
def test_local_cluster_gives_the_sequential_search(ck, tmp_path):
    """local:2, the weights sent to the workers (this checkpoint has no file): the same sensitivity table, path,
    knapsack points, best draft, log and score cache as the sequential search; every fresh candidate ran as a
    task on a worker process."""
    a0, r0 = _search(ck, tmp_path / "seq")
    fresh = [row for row in _rows(tmp_path / "seq" / "log.jsonl") if not row.get("cached")]
    assert any(row.get("cached") for row in _rows(tmp_path / "seq" / "log.jsonl"))   # duplicates are cache hits
    with X.Executor("local:2", progress=False) as ex:
        done = []
        ex.on_result = lambda i, r: done.append(i)
        a, r = _search(ck, tmp_path / "dask", ex)
        from cassandra_rtl.model import tune

        assert set(ex.client.run(lambda: len(tune._WORKER)).values()) == {0}    # released when the search ends
    _same_search(a, r, a0, r0)
    assert len(done) == len(fresh)
    for name in ("log.jsonl", "scores.jsonl"):
        assert _rows(tmp_path / "dask" / name) == _rows(tmp_path / "seq" / name), name


@needs_dask
def test_cli_tune_on_a_local_cluster(tmp_path, capsys):
    """`cassandra-rtl tune --model FOLDER --cluster local:2` (the workers load the folder themselves): the draft
    config and the container are the same bytes as without --cluster, the log and the printed best the same apart
    from wall times."""
    from cassandra_rtl.cli import main

    folder = write_hf_folder(tmp_path / "m", seed=1, std=0.1)
    cal, ev = tmp_path / "cal.txt", tmp_path / "eval.json"
    cal.write_text("\n".join(CAL))
    ev.write_text(json.dumps(list(EVAL)))
    res = {}
    for name, extra in (("seq", []), ("cluster", ["--cluster", "local:2"])):
        d = tmp_path / name
        d.mkdir()
        rc = main(["tune", "--model", str(folder), "--out", str(d / "draft.json"), "--container", str(d / "d.cass"),
                   "--quick", "--calib-prompts",
                   str(cal), "--eval-prompts", str(ev), "--new-tokens", "3", "--bands", "1", "--options",
                   "c1:1.0:3,c1:0.5:2", "--cache", str(d / "cache"), "--log", str(d / "log.jsonl"), "--quiet",
                   "--json", "--max-seq-len", "128", *extra])
        assert rc == 0
        res[name] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for name in ("draft.json", "d.cass"):
        assert (tmp_path / "seq" / name).read_bytes() == (tmp_path / "cluster" / name).read_bytes(), name
    seq_log = _rows(tmp_path / "seq" / "log.jsonl")
    assert _rows(tmp_path / "cluster" / "log.jsonl") == seq_log
    assert sum(row["label"].startswith("sens ") for row in seq_log) == 8 * 2   # bands 1: emb + 7 linears, 2 options
    assert _strip([res["cluster"]["best"]]) == _strip([res["seq"]["best"]])


def test_worker_refuses_another_model(tmp_path):
    """A worker that loads the model itself (bundled / same path) checks it is the client's."""
    folder = write_hf_folder(tmp_path / "m", seed=1, std=0.1)
    from cassandra_rtl.model.loader import load

    ck = load(folder, max_seq_len=128)
    other = tiny_checkpoint(seed=2, std=0.1)
    ctx = TuneContext("k", ("path", str(folder), 128), model_fingerprint(other), "magnitude", None, None, 1, 128,
                      "bytes", "orin", 1)
    with pytest.raises(ConfigError, match="not the client's"):
        ctx.build()
    assert model_fingerprint(ck) != model_fingerprint(other)


@pytest.mark.parametrize("bad", [["--cluster", "somewhere"], ["--jobs", "0"], ["--cluster", "local:0"]])
def test_bad_executor_options_are_one_line(run, tmp_path, bad):
    r = run("tune", "--out", tmp_path / "d.json", *bad)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert bad[0] in r.stderr


def test_missing_extra_is_one_line(run, tmp_path, monkeypatch):
    """--cluster without Dask: the install line, exit 2, before the model is loaded."""
    from cassandra_rtl.model import loader

    monkeypatch.setattr(X, "dask_available", lambda: False)
    monkeypatch.setattr(loader, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    r = run("tune", "--out", tmp_path / "d.json", "--cluster", "local:2")
    assert r.returncode == 2 and "[cluster]" in r.stderr and len(r.stderr.strip().splitlines()) == 1
