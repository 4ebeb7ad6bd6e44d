"""Test bodies shared by the C1 and C2 decoder testbenches (tb/decoder/test_decoder.py,
tb/decoder_c2/test_decoder_c2.py): the scheme-specific parts (configurations, data, expected extras) are
arguments. Plain coroutines, not cocotb tests: each testbench wraps them in its own ``@tb_test``."""
from __future__ import annotations

import os
import pickle

import numpy as np

from cassandra_rtl.tb.common.bench import env_int, full_run, reset
from cassandra_rtl.tb.common.stream import PROFILES
from cassandra_rtl.tb.decoder import data as D
from cassandra_rtl.tb.decoder import framing as F
from cassandra_rtl.tb.decoder.harness import DecoderHarness, Tensor


def scale(quick: int, full: int) -> int:
    return env_int("TB_SCALE", full if full_run() else quick)


def rng_of(ctx):
    return np.random.default_rng(ctx.seed)


def smollm2_or_weights(rng, n: int) -> np.ndarray:
    """``n`` values of one row of SmolLM2 weights, or SmolLM2-like random weights when the model is absent."""
    try:
        return D.smollm2_sample(rng, n, rows=1)[0]
    except FileNotFoundError:
        return D.weights_like(rng, n, sigma=0.02)


async def record_rate(h: DecoderHarness, ctx, enc, suffix: str = ""):
    """Decode ``enc`` in draft then full mode; ctx.extra["values_per_cycle_<mode><suffix>"] = values/cycle."""
    for full in (False, True):
        c0 = h.engine.cycles
        await h.run([(enc, full)])
        ctx.extra[f"values_per_cycle_{'full' if full else 'draft'}{suffix}"] = round(
            enc.numel / (h.engine.cycles - c0), 3)


async def reuse_books(h: DecoderHarness, enc, full: bool, what: str):
    """Decode ``enc`` with the books already loaded: only NUMEL + START are written."""
    h.sb.expect(F.expected(enc, full))
    h.tensors.append(Tensor(enc, full))
    h.cfg.send([(F.NUMEL, enc.numel), (F.CTRL, F.CTRL_START)])
    for port, chunks in h.plane_words(enc, full).items():
        h.planes[port].send(w for c in chunks for w in c)
    await h.drain(what)


async def constrained_random(dut, ctx, random_config, random_tensor):
    """Rounds of 1..3 random tensors (``random_config(rng)``, ``random_tensor(rng, n)``) in random modes,
    back to back or sequential, a new random traffic profile on every port each round."""
    rng = rng_of(ctx)
    h = None
    for _ in range(scale(4, 40)):
        h = DecoderHarness(dut, ctx) if h is None else h
        for k in h.profiles:
            h.profiles[k] = str(rng.choice(PROFILES))
        for port, agent in [("cfg", h.cfg), *h.planes.items(), ("out", h.out)]:
            agent.pacer.profile = h.profiles[port]
        items = []
        for _ in range(int(rng.integers(1, 4))):
            cfg = random_config(rng)
            n = D.random_numel(rng, cfg.group_size, 6)
            items.append((D.encode(random_tensor(rng, n), cfg), bool(rng.integers(0, 2))))
        await h.run(items, sequential=bool(rng.integers(0, 2)))


async def reset_mid_stream(dut, ctx, cfg):
    """Reset in the middle of a tensor (``cfg``: G = 64, pruning): busy/error/out.valid clear, registers back
    to defaults (START alone is an error), and a freshly programmed tensor then decodes exactly."""
    rng = rng_of(ctx)
    h = DecoderHarness(dut, ctx)
    enc = D.encode(D.weights_like(rng, 64 * 8), cfg)
    h.submit(enc, True, check=False)
    await h.engine.run_until(lambda: h.out.transfers >= 2, h.budget(), "first beats")
    for _ in range(int(rng.integers(0, 5))):
        await h.engine.step()
    h.reset_agents()
    await reset(dut, 2, ctx)
    assert int(dut.busy.value) == 0, "busy after reset"
    assert int(dut.error.value) == 0 and int(dut.error_code.value) == 0, "error after reset"
    assert int(dut.out__valid.value) == 0, "out.valid after reset"
    # defaults: START alone must fail (no NUMEL, no book)
    await h.write([(F.CTRL, F.CTRL_START)])
    await h.engine.run_until(lambda: int(dut.error.value), 50, "error after START with reset registers")
    code = int(dut.error_code.value)
    assert code & ((1 << F.ERR_CONFIG) | (1 << F.ERR_NO_BOOK)), f"error_code 0x{code:02x}"
    await h.write([(F.CTRL, F.CTRL_CLEAR_ERROR)])
    h.error_seen = 0
    await h.engine.step()
    assert int(dut.error.value) == 0, "CLEAR_ERROR did not clear"
    enc2 = D.encode(D.weights_like(rng, 64 * 3 + 5), cfg)
    await h.run([(enc2, True), (enc2, False)])


async def expect_error(h: DecoderHarness, dut, ctx, name, bit, enc, full, planes, prog, rng, good):
    """One malformed tensor: its sticky error bit rises, no more than one beat follows, every input is
    drained (no channel hangs), CLEAR_ERROR recovers and ``good`` then decodes exactly."""
    cov = ctx.cov
    ctx.log.info(f"error case {name} (cycle {h.engine.cycles}, out profile {h.out.pacer.profile})")
    h.submit(enc, full, check=False, planes=planes, prog=prog)
    await h.engine.run_until(lambda: h.error_seen > 0, h.budget(), f"{name}: error never raised")
    ctx.log.info(f"  error raised at cycle {h.engine.cycles}, beats out so far {h.out.transfers}")
    await h.engine.run_until(h.inputs_idle, h.budget(), f"{name}: inputs not drained after error")
    for _ in range(8):
        await h.engine.step()
    # a beat already in the output register when the error was found stays valid until the sink takes it
    # (under backpressure that can be many cycles later); it belongs to the failed tensor
    await h.engine.run_until(lambda: not int(dut.out__valid.value), h.budget(), f"{name}: out.valid stuck")
    ctx.log.info(f"  inputs drained, cycle {h.engine.cycles}, out.valid={int(dut.out__valid.value)}, "
                 f"beats after error {h.beats_after_error}")
    code = int(dut.error_code.value)
    assert int(dut.error.value) == 1, f"{name}: error not sticky"
    assert code >> bit & 1, f"{name}: error_code 0x{code:02x} lacks bit {bit} ({F.ERROR_NAMES[bit]})"
    for b, nm in F.ERROR_NAMES.items():
        if code >> b & 1:
            cov.hit("dec.error", nm)
    assert int(dut.busy.value) == 0, f"{name}: busy stays high after the error"
    late = h.beats_after_error
    h.tensors.clear()
    await h.write([(F.CTRL, F.CTRL_CLEAR_ERROR)])
    await h.engine.step()
    ctx.log.info(f"  cleared at cycle {h.engine.cycles}")
    assert int(dut.error.value) == 0 and int(dut.error_code.value) == 0, f"{name}: CLEAR_ERROR did not clear"
    h.error_seen = 0
    h.beats_after_error = 0
    if late > 1:   # one beat may already sit in the output register when the error is found
        raise AssertionError(f"{name}: {late} beats emitted after the error")
    await h.run([(good, bool(rng.integers(0, 2)))])


async def smollm2_sample(dut, ctx, configs):
    """Two slices of SmolLM2-135M's linear weights, golden-encoded under each of ``configs``, through the
    decoder in draft and full mode; skipped (ctx.extra["skipped"]) when the model is absent."""
    rng = rng_of(ctx)
    h = DecoderHarness(dut, ctx, profiles="light")
    try:
        rows = D.smollm2_sample(rng, 128 * scale(4, 64), rows=2)
    except FileNotFoundError as exc:
        ctx.extra["skipped"] = str(exc)
        return
    items = []
    for x in rows:
        for cfg in configs:
            enc = D.encode(x, cfg)
            items += [(enc, False), (enc, True)]
    await h.run(items)


async def job_file(dut, ctx):
    """Tensors from a job file (TB_JOB: a pickle with "tensors" [(name, EncodedTensor)], "mode" and optional
    "profile"), written by `cassandra-rtl cosim`; skipped when no job is given."""
    path = os.environ.get("TB_JOB")
    if not path:
        ctx.extra["skipped"] = "no TB_JOB"
        return
    with open(path, "rb") as fh:
        job = pickle.load(fh)
    h = DecoderHarness(dut, ctx, profiles=job.get("profile", "full"))
    for _name, enc in job["tensors"]:
        await h.run([(enc, job["mode"] == "full")])
