"""Progress display shared by long-running commands, on stderr.

On a terminal: a tqdm bar. Elsewhere (a log file, CI, a pipe): one plain line every few seconds
(``CASSANDRA_RTL_PROGRESS_SECONDS``, default 5), so a long command is never silent. ``disable=True``
shows nothing.
"""
from __future__ import annotations

import os
import sys
import threading
import time


def interval() -> float:
    try:
        return max(0.0, float(os.environ.get("CASSANDRA_RTL_PROGRESS_SECONDS", "5")))
    except ValueError:
        return 5.0


class LineProgress:
    """Iterate like tqdm, printing '[desc] i/total unit, t s' at most once per ``every`` seconds."""

    def __init__(self, iterable=None, total=None, desc="", unit="it", every=None, stream=None):
        self.iterable, self.desc, self.unit = iterable, desc, unit
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total, self.n = total, 0
        self.every = interval() if every is None else every
        self.stream = stream or sys.stderr
        self.t0 = self.last = time.monotonic()
        self._lock = threading.Lock()

    def _line(self, force=False):
        now = time.monotonic()
        if force or now - self.last >= self.every:
            self.last = now
            of = f"/{self.total}" if self.total is not None else ""
            print(f"[{self.desc}] {self.n}{of} {self.unit}, {now - self.t0:.0f} s", file=self.stream, flush=True)

    def update(self, n=1):
        self.n += n
        self._line()

    def _heartbeat(self, stop: threading.Event):
        """A line also while one item takes long (a GGUF being parsed, a big tensor being encoded)."""
        while not stop.wait(min(max(self.every, 0.05), 3600)):
            with self._lock:
                if time.monotonic() - self.last >= self.every:
                    self._line(force=True)

    def __iter__(self):
        stop = threading.Event()
        beat = None
        if self.every != float("inf"):
            beat = threading.Thread(target=self._heartbeat, args=(stop,), daemon=True)
            beat.start()
        try:
            for item in self.iterable:
                yield item
                with self._lock:
                    self.update()
        finally:
            stop.set()
            if beat is not None:
                beat.join()
        if self.n and time.monotonic() - self.t0 >= self.every:
            self._line(force=True)                  # a long run ends with its final count

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def progress(iterable=None, total=None, desc="", unit="it", **kw):
    disable = kw.pop("disable", None)
    if disable:
        return iterable if iterable is not None else LineProgress(None, total, desc, unit, every=float("inf"))
    if not sys.stderr.isatty():
        return LineProgress(iterable, total, desc, unit)
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                leave=kw.pop("leave", False), **kw)


def step_progress(label: str):
    """A ``progress(i, n, what)`` callback for the model path's builders: a line every few seconds when
    stderr is not a terminal, an in-place line on a terminal."""
    state = {"last": 0.0, "t0": time.monotonic()}
    tty = sys.stderr.isatty()

    def cb(i, n, what):
        now = time.monotonic()
        if tty:
            print(f"\r[{label}] {i}/{n} {what[:60]:<60}", end="" if i < n else "\n", file=sys.stderr, flush=True)
        elif now - state["last"] >= interval() or i >= n:
            state["last"] = now
            print(f"[{label}] {i}/{n} {what[:60]}, {now - state['t0']:.0f} s", file=sys.stderr, flush=True)
    return cb
