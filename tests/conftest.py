"""Shared fixtures (kept small on purpose; add yours below)."""
from __future__ import annotations

import numpy as np
import pytest

# CPython 3.11.7's parser can raise "SystemError: AST constructor recursion depth mismatch" when pytest's
# assertion rewriter parses a module deep in the stack. Hypothesis' pytest plugin imports hypothesis lazily
# from its terminal-summary hook, that deep, so a run of test files that never import hypothesis (e.g.
# a single hardware test file alone) crashed after its tests with exit code 1. Imported here, at
# collection depth, it is already loaded when the hook runs.
try:
    import hypothesis  # noqa: F401
except ImportError:     # not installed: the plugin is not either
    pass


def _weights(n: int, seed: int = 0, special: float = 0.02) -> np.ndarray:
    """Weight-like raw bf16 bits (normal(0, 0.02), truncated to bf16) with a sprinkle of arbitrary patterns
    (±0, subnormals, ±Inf, NaNs, huge values)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 0.02).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    pick = rng.random(n) < special
    bits[pick] = rng.integers(0, 1 << 16, int(pick.sum()), dtype=np.uint16)
    return bits


@pytest.fixture
def weight_bits():
    """weight_bits(n, seed=0, special=0.02) -> uint16 array of n weight-like bf16 patterns."""
    return _weights


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models: one torch thread (on a shared machine extra threads only oversubscribe the cores)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def run(capsys):
    """The CLI in this process (fast): run(*args) -> CompletedProcess(args, rc, stdout, stderr) through
    cassandra_rtl.cli.main; an exception that escapes main (what would print a traceback) comes back as
    return code 1 with 'Traceback' on stderr, so tests can assert that no input ever produces one."""
    import subprocess
    import traceback

    from cassandra_rtl.cli import main

    def go(*args) -> subprocess.CompletedProcess:
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:                      # argparse
            rc = exc.code
        except BaseException:  # noqa: BLE001
            out, err = capsys.readouterr()
            return subprocess.CompletedProcess(args, 1, out, err + traceback.format_exc())
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, rc, out, err)
    return go


@pytest.fixture(autouse=True)
def _collect_unused_elaboratables(request):
    """A test that expects components to be refused at construction (marked to ignore UnusedElaboratable) collects
    them before it ends, so their "created but never used" warning fires under its own filter, not in a later test."""
    yield
    if any("UnusedElaboratable" in str(m.args) for m in request.node.iter_markers("filterwarnings")):
        import gc
        gc.collect()
