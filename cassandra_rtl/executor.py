"""One executor for the toolkit's embarrassingly parallel work: a local pool, or a Dask distributed cluster.

    with Executor(cluster=None, jobs=2) as ex:            # local thread pool of 2 (today's --jobs)
    with Executor(cluster="local:4") as ex:               # a Dask LocalCluster of 4 worker processes
    with Executor(cluster="tcp://host:8786") as ex:       # an existing Dask scheduler
        exe = ex.ship(path)                               # a file every worker needs (a Verilator harness)
        results = ex.map(fn, tasks, shared=exe, weights=[...], desc="cosim", unit="values")
        ctx = ex.share(data)                              # data for several map calls, sent once
        a = ex.map(fn, tasks_a, shared=ctx); b = ex.map(fn, tasks_b, shared=ctx)

``map`` calls ``fn(shared, task)`` for every task (``fn(task)`` without ``shared``) and returns the results in
task order, whatever order they finished in and however many workers ran them, so a merge of the results is
deterministic. The client shows progress for the whole job (tasks' ``weights`` summed, on stderr). ``shared`` is
sent to every worker once per ``map``; ``share(obj)`` sends it once for all the ``map`` calls of the executor
(work in phases, each phase's tasks depending on the previous phase's results).

Cluster selection: the ``cluster`` argument (``--cluster``), else ``$CASSANDRA_RTL_CLUSTER``, else the local
pool; ``pool`` (or ``none``) names the local pool explicitly. ``local:N`` starts a Dask LocalCluster of N
single-threaded worker processes on this machine for the duration of the job; any ``scheme://host:port``
(``tcp://``, ``tls://``, ``ws://``, ...) connects to a running Dask scheduler. Dask is the optional extra
``pip install 'cassandra-rtl[cluster]'``; the local pool never imports it.

Lost workers: the Dask scheduler moves a dead worker's tasks to the others by itself (up to
``distributed.scheduler.allowed-failures`` deaths per task, 3 by default); a task that still ends in
``KilledWorker`` is resubmitted ``retries`` more times from the client. An exception raised by ``fn`` is not
retried: it is the task's answer and is raised here, as in the local pool.

No shared filesystem is assumed: tasks and results travel as pickles, and ``ship`` broadcasts a file's bytes
to every worker once, where ``ShippedFile.path()`` writes them to the worker's own temporary folder under the
bytes' digest (written once per worker and digest, reused by every later task and job).
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .errors import ConfigError, ToolMissingError

ENV = "CASSANDRA_RTL_CLUSTER"
EXTRA_HINT = "pip install 'cassandra-rtl[cluster]' (Dask distributed)"
_LOCAL = re.compile(r"^local:(\d+)$")
_ADDRESS = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")


def cluster_spec(value: str | None) -> str | None:
    """The cluster named by ``value`` or ``$CASSANDRA_RTL_CLUSTER``, checked: None (the local pool),
    ``local:N`` or a scheduler address. Raises ConfigError with one line on anything else."""
    spec = value if value is not None else os.environ.get(ENV, "")
    spec = spec.strip()
    if spec in ("", "pool", "none"):
        return None
    m = _LOCAL.match(spec)
    if m:
        n = int(m.group(1))
        if not 1 <= n <= 256:
            raise ConfigError(f"--cluster {spec}: the worker count must be 1..256")
        return spec
    if _ADDRESS.match(spec):
        return spec
    src = "--cluster" if value is not None else f"${ENV}"
    raise ConfigError(f"{src} {spec!r}: expected local:N (a local Dask cluster of N workers), a Dask scheduler "
                      "address such as tcp://host:8786, or pool (the local pool)")


def cluster_arg(value: str) -> str:
    """argparse type for ``--cluster``: checked at parse time (one line, exit 2)."""
    import argparse

    try:
        cluster_spec(value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[1]) from None
    return value


def add_cluster_argument(parser) -> None:
    parser.add_argument("--cluster", type=cluster_arg, default=None, metavar="SPEC",
                        help="run the work on Dask: local:N (a local cluster of N worker processes) or a scheduler "
                             f"address (tcp://host:8786); default ${ENV}, else the local pool (--jobs). Needs "
                             "the cluster extra")


def check_cluster(value: str | None) -> str | None:
    """``cluster_spec`` and, when it names a cluster, Dask importable (ToolMissingError with the install line):
    the cheap checks a command makes before any slow work."""
    spec = cluster_spec(value)
    if spec is not None and not dask_available():
        raise ToolMissingError(f"--cluster {spec} needs Dask distributed: {EXTRA_HINT}")
    return spec


def dask_available() -> bool:
    try:
        import distributed  # noqa: F401
        return True
    except ImportError:
        return False


@dataclass
class ShippedFile:
    """A file that every worker needs. On the client ``local`` is its path; on a worker the bytes are written
    once to ``$TMPDIR/cassandra-rtl-shipped/<digest>/<name>`` (executable when the original was)."""
    name: str
    digest: str
    data: bytes | None = None
    mode: int = 0o644
    local: str | None = field(default=None, compare=False)

    def __getstate__(self):            # only the bytes travel, never the client's path
        return {"name": self.name, "digest": self.digest, "data": self.data, "mode": self.mode, "local": None}

    def path(self) -> Path:
        if self.local is not None:
            return Path(self.local)
        folder = Path(tempfile.gettempdir()) / "cassandra-rtl-shipped" / self.digest[:24]
        out = folder / self.name
        if out.is_file() and out.stat().st_size == len(self.data):
            return out
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".part-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(self.data)
        os.chmod(tmp, self.mode)
        os.replace(tmp, out)           # atomic: concurrent tasks on one worker never see half a file
        return out


@dataclass
class Shared:
    """``obj`` already on every worker (``Executor.share``): ``map`` passes it without sending it again."""
    future: Any


def _call(fn, shared, task):
    return fn(task) if shared is _NOTHING else fn(shared, task)


_NOTHING = object()


class Executor:
    """A local thread pool (``cluster`` None) or a Dask client; see the module docstring."""

    def __init__(self, cluster: str | None = None, jobs: int = 2, retries: int = 2, progress: bool = True):
        self.spec = cluster_spec(cluster)
        self.jobs = max(1, int(jobs))
        self.retries = retries
        self.show_progress = progress
        self.client = None
        self._cluster = None
        self.resubmitted = 0            # tasks resubmitted after KilledWorker (the scheduler's own moves not counted)
        self.on_result: Callable[[int, Any], None] | None = None   # called on the client as each task finishes
        if self.spec is not None:
            self._connect()

    # ------------------------------------------------------------------ setup
    def _connect(self) -> None:
        if not dask_available():
            raise ToolMissingError(f"--cluster {self.spec} needs Dask distributed: {EXTRA_HINT}")
        import logging

        import dask
        from distributed import Client, LocalCluster

        m = _LOCAL.match(self.spec)
        if m:
            with dask.config.set({"distributed.scheduler.allowed-failures": 3,
                                  "distributed.worker.daemon": False}):   # workers may start subprocesses
                self._cluster = LocalCluster(n_workers=int(m.group(1)), threads_per_worker=1, processes=True,
                                             # the scheduler always serves HTTP: a free port, never 8787
                                             dashboard_address="127.0.0.1:0", scheduler_port=0,
                                             silence_logs=logging.CRITICAL, host="127.0.0.1",
                                             worker_dashboard_address=None)
            self.client = Client(self._cluster)
        else:
            try:
                self.client = Client(self.spec, timeout=30)
            except (OSError, TimeoutError) as exc:
                raise ConfigError(f"--cluster {self.spec}: cannot reach the Dask scheduler ({exc})") from None
            try:
                self.client.wait_for_workers(1, timeout=60)
            except TimeoutError:
                self.close()
                raise ConfigError(f"--cluster {self.spec}: the scheduler has no workers (waited 60 s)") from None

    @property
    def workers(self) -> int:
        if self.client is None:
            return self.jobs
        return len(self.client.scheduler_info(n_workers=-1)["workers"]) if self._cluster is None else \
            len(self._cluster.workers)

    @property
    def kind(self) -> str:
        return "pool" if self.client is None else ("local-cluster" if self._cluster is not None else "cluster")

    def describe(self) -> dict:
        return {"executor": self.kind, "workers": self.workers, **({"cluster": self.spec} if self.spec else {})}

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ------------------------------------------------------------------ work
    def ship(self, path: str | os.PathLike) -> ShippedFile:
        """``path`` as a ShippedFile: its own path in the local pool; its bytes broadcast to the workers."""
        p = Path(path)
        data = p.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        mode = 0o755 if os.access(p, os.X_OK) else 0o644
        if self.client is None:
            return ShippedFile(p.name, digest, None, mode, local=str(p))
        return ShippedFile(p.name, digest, data, mode)

    def share(self, obj: Any) -> Any:
        """``obj`` for the ``shared`` argument of several ``map`` calls: itself in the local pool; on Dask
        scattered to every worker once (a worker that joins later gets it from another worker) and kept there
        while the returned handle is referenced."""
        if self.client is None:
            return obj
        return Shared(self.client.scatter(obj, broadcast=True, hash=False))

    def map(self, fn: Callable, tasks: Sequence, shared: Any = _NOTHING, weights: Sequence[float] | None = None,
            desc: str = "tasks", unit: str = "tasks") -> list:
        """``[fn(shared, t) for t in tasks]`` on the pool or the cluster, in task order."""
        tasks = list(tasks)
        weights = [1] * len(tasks) if weights is None else list(weights)
        if not tasks:
            return []
        from .progress import progress

        bar = progress(total=sum(weights), desc=desc, unit=unit, disable=not self.show_progress)
        results: list = [None] * len(tasks)
        lock = threading.Lock()

        def done(i, r):
            with lock:
                results[i] = r
                bar.update(weights[i])
                if self.on_result is not None:
                    self.on_result(i, r)
        try:
            if self.client is None:
                self._map_pool(fn, tasks, shared, done)
            else:
                self._map_dask(fn, tasks, shared, done)
        finally:
            from .progress import LineProgress

            if isinstance(bar, LineProgress):
                if bar.n and time.monotonic() - bar.t0 >= bar.every:
                    bar._line(force=True)          # a long job ends with its final count
            elif hasattr(bar, "close"):
                bar.close()
        return results

    def _map_pool(self, fn, tasks, shared, done) -> None:
        with ThreadPoolExecutor(max_workers=min(self.jobs, len(tasks))) as pool:
            futs = {pool.submit(_call, fn, shared, t): i for i, t in enumerate(tasks)}
            try:
                from concurrent.futures import as_completed

                for fut in as_completed(futs):
                    done(futs[fut], fut.result())
            except BaseException:
                for f in futs:
                    f.cancel()
                raise

    def _map_dask(self, fn, tasks, shared, done) -> None:
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        client = self.client
        if isinstance(shared, Shared):
            shared = shared.future                                         # already on the workers
        elif shared is not _NOTHING:
            shared = client.scatter(shared, broadcast=True, hash=False)   # sent to every worker once
        key = f"{getattr(fn, '__name__', 'task')}-{time.time_ns():x}"

        def submit(i, attempt):                  # the scattered `shared` is resolved on the worker
            args = (tasks[i],) if shared is _NOTHING else (shared, tasks[i])
            return client.submit(fn, *args, key=f"{key}-{i}-{attempt}", pure=False)
        futs = {submit(i, 0): (i, 0) for i in range(len(tasks))}
        pending = as_completed(list(futs))
        try:
            for fut in pending:
                i, attempt = futs.pop(fut)
                try:
                    r = fut.result()
                except KilledWorker:
                    if attempt >= self.retries:
                        raise
                    self.resubmitted += 1
                    nf = submit(i, attempt + 1)
                    futs[nf] = (i, attempt + 1)
                    pending.add(nf)
                    continue
                done(i, r)
                fut.release()
        except BaseException:
            client.cancel(list(futs))
            raise
