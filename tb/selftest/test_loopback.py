"""Self-test of the shared stream agents and scoreboard on a testbench-owned 4-deep FIFO (``loopback``):
every traffic profile on both sides must deliver every word, in order, bit for bit."""
from __future__ import annotations

from cassandra_rtl.tb.common.bench import tb_test
from cassandra_rtl.tb.common.stream import PROFILES, Sink, Source


async def _run(dut, ctx, src_profile, sink_profile, n=300):
    sb = ctx.scoreboard("loopback")
    words = [ctx.rng.getrandbits(16) for _ in range(n)]
    sb.expect(words)
    src = Source(dut, "i_data", ctx.pacer(src_profile), ctx.cov)
    snk = Sink(dut, "o_data", ctx.pacer(sink_profile), lambda v: sb.check([v]), ctx.cov)
    src.send(words)
    eng = ctx.engine([src, snk])
    await eng.run_until(lambda: sb.pending == 0, 50 * n)


@tb_test()
async def all_profiles(dut, ctx):
    for sp in PROFILES:
        for kp in PROFILES:
            await _run(dut, ctx, sp, kp, 100)


@tb_test()
async def scoreboard_catches_corruption(dut, ctx):
    """The scoreboard must flag a wrong word (guards against a testbench that cannot fail)."""
    sb = ctx.scoreboard("loopback-neg")
    sb.expect([1, 2, 3])
    src = Source(dut, "i_data", ctx.pacer("random"), ctx.cov)
    snk = Sink(dut, "o_data", ctx.pacer("random"), lambda v: sb.check([v]), ctx.cov)
    src.send([1, 2, 4])
    await ctx.engine([src, snk]).run_until(lambda: sb.pending == 0, 200)
    assert sb.mismatches == 1, sb.reports
    ctx.scoreboards.remove(sb)


@tb_test()
async def fail_on_request(dut, ctx):
    """A short loopback run that fails on purpose when TB_SELFTEST_FAIL=1 (used to check that a failing
    test is re-run with waveforms into its own folder)."""
    import os

    await _run(dut, ctx, "random", "random", 20)
    assert os.environ.get("TB_SELFTEST_FAIL", "0") == "0", "failure requested by TB_SELFTEST_FAIL=1"
