"""Shared helpers of the evaluation report (eval/report.py): cache, progress, model, prompts, figures.

Nothing here is imported by the toolkit itself; eval/ is a folder of scripts run by `make report`.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

REPORT_VERSION = 1  # bump when a cached measurement would change meaning

# The fixed prompt set: several domains, interleaved so that the first N prompts cover most domains.
PROMPTS = (
    ("math", "What is 15% of 240? Explain step by step."),
    ("code", "Write a Python function that checks whether a string is a palindrome."),
    ("prose", "Write a short paragraph about autumn in the mountains."),
    ("chat", "Hi! Can you recommend a good book for a long flight?"),
    ("math", "Solve for x: 3x + 7 = 22. Show your work."),
    ("code", "Explain what this Python code does: squares = [i * i for i in range(10)]"),
    ("prose", "Summarize the story of Little Red Riding Hood in three sentences."),
    ("chat", "What should I cook for dinner tonight if I have rice, eggs and spinach?"),
    ("math", "A train travels 120 km in 1.5 hours. What is its average speed?"),
    ("code", "Write a SQL query that returns the ten most recent rows of a table called orders."),
    ("prose", "Describe a busy city market at dawn."),
    ("chat", "I feel nervous before my job interview tomorrow. Any tips?"),
)


# --------------------------------------------------------------------------------------------- progress
class Progress:
    """Stage headers plus tqdm bars on stderr (plain lines when tqdm is missing or stderr is not a tty)."""

    def __init__(self, n_stages: int, quiet: bool = False):
        self.n = n_stages
        self.i = 0
        self.quiet = quiet
        self.t0 = time.perf_counter()

    def stage(self, name: str) -> None:
        self.i += 1
        self.log(f"[report {self.i}/{self.n}] {name}")

    def log(self, msg: str) -> None:
        if not self.quiet:
            print(f"{msg}  (+{time.perf_counter() - self.t0:.0f}s)", file=sys.stderr, flush=True)

    def bar(self, iterable=None, total=None, desc=""):
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover
            return iterable
        return tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True,
                    disable=self.quiet, mininterval=1.0)


# ------------------------------------------------------------------------------------------------ cache
def key_of(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:20]


class JsonlCache:
    """Append-only JSON lines, one measurement per line, looked up by a key; reruns are incremental."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows: dict[str, dict] = {}
        self._mtime = None
        self._load()

    def _load(self) -> None:
        """(Re)read the file: another report process may share the cache and have added rows."""
        if self.path.is_file():
            self._mtime = self.path.stat().st_mtime_ns
            for line in self.path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by an interrupted run
                if isinstance(row, dict) and "key" in row:
                    self.rows[row["key"]] = row

    def get(self, key: str):
        r = self.rows.get(key)
        if r is None and self.path.is_file() and self.path.stat().st_mtime_ns != self._mtime:
            self._load()
            r = self.rows.get(key)
        return None if r is None else r["value"]

    def put(self, key: str, value, meta=None) -> None:
        row = {"key": key, "meta": meta, "value": value}
        self.rows[key] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(row, default=float) + "\n")


# ------------------------------------------------------------------------------------------------ model
def model_identity(path) -> dict:
    p = Path(path)
    st = p.stat()
    return {"name": p.name, "bytes": st.st_size}


def load_checkpoint(model_path: str | None):
    """(Checkpoint, identity dict, path) for a .gguf / HF folder, default the bundled SmolLM2."""
    from cassandra_rtl.golden.io import bundled_model_path
    from cassandra_rtl.model.loader import load

    path = Path(model_path) if model_path else bundled_model_path()
    ck = load(path)
    ident = model_identity(path) if path.is_file() else {"name": path.name, "bytes": None}
    return ck, ident, path


def tensor_type(name: str) -> str | None:
    """Tensor type of a Checkpoint weight name (see Transformer.named_weights)."""
    if name == "tok_emb":
        return "embeddings"
    if name == "lm_head":
        return "lm_head"
    suffix = name.rsplit(".", 1)[-1]
    return {"wq": "q", "wk": "k", "wv": "v", "wo": "o", "w_gate": "gate", "w_up": "up",
            "w_down": "down"}.get(suffix)


# ---------------------------------------------------------------------------------------------- figures
def figure_footer(fig, command: str, model: str, config: str) -> None:
    """Every figure states the command, model and configuration that produced it."""
    import textwrap

    text = "\n".join(textwrap.wrap(f"command: {command}", 150) + textwrap.wrap(f"model: {model}", 150)
                     + textwrap.wrap(f"config: {config}", 150))
    fig.text(0.01, 0.005, text, fontsize=6.5, family="monospace", va="bottom", ha="left", color="#444")


def save(fig, out: Path, name: str) -> str:
    path = Path(out) / name
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return name


def env_summary() -> dict:
    import platform

    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpus": os.cpu_count()}
