"""cocotb tests of the parallel zero counter (hw/zero_counter.py) against its specification
(tb/zero_counter/reference.py): every output port of every window compared bit for bit.

Combinational configurations: apply a window, wait 1 ns, compare. Registered ones: a new window every
cycle, outputs compared one cycle later (back-to-back, so the pipeline register is exercised)."""
from __future__ import annotations

import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge, Timer

from cassandra_rtl.tb.common.bench import env_int, full_run, reset, tb_test
from cassandra_rtl.tb.zero_counter.reference import bits_for, code_stream_windows, pack_lanes, zero_counter


class ZC:
    def __init__(self, dut, ctx):
        p = ctx.params
        self.dut, self.ctx = dut, ctx
        self.W, self.L, self.reg = p["window"], p["lanes"], p["registered"]
        self.bw = bits_for(self.W)
        self.sb = ctx.scoreboard("zero_counter", width=4 * ((self.L * (1 + 2 * self.bw) + self.bw + 3) // 4))
        cov = ctx.cov
        cov.define("zc.lane_fill", range(self.L + 1))
        cov.define("zc.rank", list(range(min(self.W, 25))))
        cov.define("zc.consumed_W", ["no", "yes"])           # a one in the window's last bit was counted
        cov.define("zc.more_ones_than_lanes", ["no", "yes"])
        self._pending = []

    def _expected(self, window):
        e = zero_counter(window, self.W, self.L)
        return self._pack(e["valid"], pack_lanes(e["rank"], self.bw), pack_lanes(e["end"], self.bw),
                          e["consumed"]), e

    def _pack(self, valid, rank, end, consumed):
        L, bw = self.L, self.bw
        return valid | (rank << L) | (end << (L + L * bw)) | (consumed << (L + 2 * L * bw))

    def _observe(self):
        d = self.dut
        return self._pack(d.valid.value.to_unsigned(), d.rank.value.to_unsigned(), d.end.value.to_unsigned(),
                          d.consumed.value.to_unsigned())

    def _cover(self, window, e):
        n = bin(e["valid"]).count("1")
        cov = self.ctx.cov
        cov.hit("zc.lane_fill", n)
        for r in e["rank"][:n]:
            cov.hit("zc.rank", r if r < 25 else ">=25")
        cov.hit("zc.consumed_W", "yes" if e["consumed"] == self.W else "no")
        cov.hit("zc.more_ones_than_lanes", "yes" if bin(window).count("1") > self.L else "no")

    async def check(self, windows, where=""):
        windows = [int(w) for w in windows]
        for w in windows:
            exp, e = self._expected(w)
            self._cover(w, e)
            self.sb.expect([exp], tags=[f"window 0x{w:x}"])
        if not self.reg:
            for w in windows:
                self.dut.data.value = w
                await Timer(1, "ns")
                self.sb.check([self._observe()], where)
                self.ctx.extra_cycles += 1
            return
        # registered: window i applied after edge t, visible after edge t+1
        for i in range(len(windows) + 1):
            await RisingEdge(self.dut.clk)
            if i < len(windows):
                self.dut.data.value = windows[i]
            await ReadOnly()
            if i > 0:
                self.sb.check([self._observe()], where)
            self.ctx.extra_cycles += 1


def _n(default_quick, default_full):
    return env_int("TB_N", default_full if full_run() else default_quick)


@tb_test()
async def directed_edges(dut, ctx):
    """All-zero, all-one, a single one at every position, the last bit, exactly L-1 / L / L+1 ones,
    longest zero runs (23 zeros then a one: an escape's length at K = 15)."""
    zc = ZC(dut, ctx)
    W, L = zc.W, zc.L
    full = (1 << W) - 1
    wins = [0, full, 1, 1 << (W - 1), full ^ 1, full >> 1]
    wins += [1 << j for j in range(W)]
    wins += [(1 << j) | (1 << (W - 1)) for j in range(W - 1)]
    for n in (L - 1, L, L + 1, 2 * L):
        if 0 <= n <= W:
            step = max(1, W // max(n, 1))
            wins.append(sum(1 << min(W - 1, i * step) for i in range(n)))
            wins.append(((1 << n) - 1) << (W - n))          # ones packed at the top
    for run in (14, 15, 16, 23):
        if run < W:
            wins.append(1 << run)
            wins.append((1 << run) | (full << (run + 1)) & full)
    await zc.check(wins, "directed")


@tb_test()
async def code_stream_windows_(dut, ctx):
    """Windows cut from rank-unary code streams built with golden codebooks of every size K = 0..15,
    escapes (K zeros, a one, 8 raw bits) included."""
    zc = ZC(dut, ctx)
    rng = np.random.default_rng(ctx.seed)
    per_k = _n(40, 2000)
    for K in range(16):
        await zc.check(code_stream_windows(rng, zc.W, per_k, K), f"K={K}")


@tb_test()
async def random_density(dut, ctx):
    """Constrained random windows: the density of ones swept from 1% to 95%."""
    zc = ZC(dut, ctx)
    rng = np.random.default_rng(ctx.seed)
    n = _n(600, 50000)
    W = zc.W
    dens = rng.choice([0.01, 0.03, 0.08, 0.2, 0.5, 0.8, 0.95], n)
    bits = rng.random((n, W)) < dens[:, None]
    wins = [int(sum(1 << j for j in np.flatnonzero(row))) for row in bits]
    await zc.check(wins, "random")


@tb_test(skip=False)
async def reset_mid_stream(dut, ctx):
    """Registered configurations: a reset between windows must not leave stale results behind."""
    zc = ZC(dut, ctx)
    if not zc.reg:
        ctx.extra["skipped"] = "combinational configuration: no clock, no reset"
        await zc.check([0b1011, 0], "no-reset")
        return
    rng = np.random.default_rng(ctx.seed)
    wins = [int(x) for x in rng.integers(0, 2**62, 20)]
    await zc.check(wins[:10], "before reset")
    await reset(dut, 3, ctx)
    await zc.check(wins[10:], "after reset")
