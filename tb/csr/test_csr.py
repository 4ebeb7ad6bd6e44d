"""cocotb tests of the AXI4-Lite register block on a decoder (hw/csr.py ``CsrTop``, docs/HARDWARE.md 5a; every C1
and C2 decoder configuration, the scheme from its block), on the exported Verilog of ``<name>_csr``: random register traffic against a reference model of the map (AW / W
with random skew, random B / R backpressure), tensors programmed over the bus by a driver that polls STATUS
and retries writes refused while the decoder is busy (decoded bit for bit against golden by the decoder
bench's harness, under random idles and backpressure on the data streams), and the error / interrupt path."""
from __future__ import annotations

from collections import deque

from cassandra_rtl.golden.config import FORMAT_VERSION
from cassandra_rtl.hw.csr import (ID_VALUE, IRQ_DONE, IRQ_ERROR, KINDS, MAP_VERSION, RESP_OKAY, RESP_SLVERR,
                                  STATUS_BUSY, STATUS_ERROR, Csr)
from cassandra_rtl.hw.decoder import CTRL_CLEAR_ERROR, CTRL_START, Err, Reg
from cassandra_rtl.tb.common.bench import tb_test
from cassandra_rtl.tb.decoder import data as D
from cassandra_rtl.tb.decoder import framing as F
from cassandra_rtl.tb.decoder.harness import DecoderHarness
from cassandra_rtl.tb.decoder.scenarios import rng_of, scale


class AxiLiteMaster:
    """One AXI4-Lite transaction at a time on ``s_axil_*`` (an Engine agent). A write's AW and W start after
    independent random delays (0-2 cycles), B and R are accepted at the pacer's rate. As the decoder bench's
    ``cfg`` agent, ``send`` takes (register, data) pairs; a block write refused with SLVERR while the block is
    busy is retried once STATUS shows it idle (what a driver does). While idle, the master polls STATUS and
    ERROR_CODE, so ``busy()`` / ``error()`` / ``error_code()`` follow the block a few cycles late."""

    def __init__(self, dut, ctx, pacer, poll: bool = True):
        self.dut, self.rng, self.pacer, self.poll = dut, ctx.rng, pacer, poll
        self.queue: deque = deque()            # ("w", addr, data, strb, done) / ("r", addr, done)
        self.cur = None
        self.status_word, self.code = 0, 0
        self.refused_while_busy = 0
        self._polls = 0

    # the cfg-agent interface of DecoderHarness
    def send(self, items):
        for a, d in items:
            self.queue.append(("w", 4 * int(a), int(d), 0xF, self._block_write_done))

    @property
    def idle(self) -> bool:
        return not self.queue and (self.cur is None or self.cur["op"][0] == "poll")

    def reset(self):
        self.queue.clear()
        self.cur = None

    def busy(self) -> int:
        return int(bool(self.status_word & STATUS_BUSY))

    def error(self) -> int:
        return int(bool(self.status_word & STATUS_ERROR))

    def error_code(self) -> int:
        return self.code

    def _block_write_done(self, op, resp, _data):
        if resp != RESP_OKAY:                   # refused (busy): wait until STATUS says idle, then retry
            assert op[1] < 0x400, f"SLVERR on a block write {op}"
            assert not self.error(), (f"block write {op[1]:#x} refused while the block is in error "
                                      f"(ERROR_CODE {self.code:#x})")
            self.refused_while_busy += 1
            self.status_word |= STATUS_BUSY     # do not retry before a poll has seen it idle
            self.queue.appendleft(("wait_idle",))
            self.queue.insert(1, op)

    def _poll_done(self, op, resp, data):
        assert resp == RESP_OKAY, f"poll read {op[1]:#x}: SLVERR"
        if op[1] == Csr.STATUS:
            self.status_word = data
        else:
            self.code = data

    # Engine agent
    def drive(self):
        d = self.dut
        if self.cur is None:
            self._start()
        c = self.cur
        if c is None:
            d.s_axil_awvalid.value = d.s_axil_wvalid.value = d.s_axil_arvalid.value = 0
            d.s_axil_bready.value = d.s_axil_rready.value = 0
            return
        if c["kind"] == "w":
            for ch in ("aw", "w"):                          # a channel waits its delay (0-2 cycles), then offers
                getattr(d, f"s_axil_{ch}valid").value = int(not c[f"{ch}_done"] and c[f"{ch}_delay"] == 0)
                if c[f"{ch}_delay"] > 0:
                    c[f"{ch}_delay"] -= 1
            d.s_axil_awaddr.value, d.s_axil_wdata.value, d.s_axil_wstrb.value = c["addr"], c["data"], c["strb"]
            c["bready"] = int(self.pacer.active())
            d.s_axil_bready.value = c["bready"]
            d.s_axil_arvalid.value = d.s_axil_rready.value = 0
        else:
            d.s_axil_araddr.value = c["addr"]
            d.s_axil_arvalid.value = int(not c["ar_done"])
            c["rready"] = int(self.pacer.active())
            d.s_axil_rready.value = c["rready"]
            d.s_axil_awvalid.value = d.s_axil_wvalid.value = d.s_axil_bready.value = 0

    def _start(self):
        while self.queue and self.queue[0][0] == "wait_idle":
            if not self.busy():
                self.queue.popleft()
                continue
            break
        if self.queue and self.queue[0][0] != "wait_idle":
            op = self.queue.popleft()
        elif self.poll:
            self._polls += 1
            op = ("poll", Csr.STATUS if self._polls % 2 else Csr.ERROR_CODE, self._poll_done)
        else:
            return
        if op[0] == "w":
            self.cur = {"kind": "w", "op": op, "addr": op[1], "data": op[2], "strb": op[3], "done": op[4],
                        "aw_delay": self.rng.randint(0, 2), "w_delay": self.rng.randint(0, 2),
                        "aw_done": False, "w_done": False}
        else:
            self.cur = {"kind": "r", "op": op, "addr": op[1], "done": op[2], "ar_done": False}

    def sample(self):
        d, c = self.dut, self.cur
        if c is None:
            return
        if c["kind"] == "w":
            for ch in ("aw", "w"):
                if int(getattr(d, f"s_axil_{ch}valid").value) and int(getattr(d, f"s_axil_{ch}ready").value):
                    c[f"{ch}_done"] = True
            if c["bready"] and int(d.s_axil_bvalid.value):
                assert c["aw_done"] and c["w_done"], "B before both halves of the write were taken"
                self.cur = None
                c["done"](c["op"], int(d.s_axil_bresp.value), None)
        else:
            if int(d.s_axil_arvalid.value) and int(d.s_axil_arready.value):
                c["ar_done"] = True
            if c["rready"] and int(d.s_axil_rvalid.value):
                assert c["ar_done"], "R before AR was taken"
                self.cur = None
                c["done"](c["op"], int(d.s_axil_rresp.value), int(d.s_axil_rdata.value))

    def write(self, addr, data, strb=0xF, done=None):
        self.queue.append(("w", addr, data, strb, done or (lambda *a: None)))

    def read(self, addr, done):
        self.queue.append(("r", addr, done))


class CsrModel:
    """The register map (docs/HARDWARE.md 5a) for an idle, error-free block: what each access answers.
    STATUS, ERROR_CODE and IRQ_STATUS stay 0 here (no event, no START); busy / error gating and the interrupt
    bits are checked by the directed tests below."""

    def __init__(self, kind: int, lanes: int, full_lanes: int, fmt: tuple[int, int] = (2, 0)):
        major, minor = fmt              # the plane format the block reads: 3.0 (decoder v3) or the 2.0 layout
        self.const = {Csr.ID: ID_VALUE, Csr.VERSION: minor | (major << 8) | (MAP_VERSION << 16),
                      Csr.BLOCK: kind | (lanes << 8) | (full_lanes << 16), Csr.STATUS: 0, Csr.ERROR_CODE: 0,
                      Csr.IRQ_STATUS: 0}
        self.irq_enable = 0

    def write(self, addr, data, strb):
        whole = addr % 4 == 0 and strb == 0xF
        if whole and addr < 0x400:
            return RESP_OKAY
        if whole and addr == Csr.IRQ_STATUS:
            return RESP_OKAY
        if whole and addr == Csr.IRQ_ENABLE:
            self.irq_enable = data & 3
            return RESP_OKAY
        return RESP_SLVERR

    def read(self, addr):
        if addr % 4 == 0 and addr < 0x400:
            return 0, RESP_OKAY
        if addr == Csr.IRQ_ENABLE:
            return self.irq_enable, RESP_OKAY
        if addr in self.const:
            return self.const[addr], RESP_OKAY
        return 0, RESP_SLVERR


def _random_items(ctx, rng, n):
    """``n`` random small tensors of the configuration's scheme (C1 or C2 decoder), each in a random mode."""
    c2 = F.decoder_scheme(ctx.params) == "c2"
    items = []
    for _ in range(n):
        cfg = D.random_c2_config(rng) if c2 else D.random_config(rng)
        n_vals = D.random_numel(rng, cfg.group_size, 3)
        x = D.random_c2_tensor(rng, n_vals) if c2 else D.random_tensor(rng, n_vals)
        items.append((D.encode(x, cfg), bool(rng.integers(2))))
    return items


def _harness(dut, ctx):
    """tb/decoder's harness with the bus master as its cfg agent and its status (busy / error polled)."""
    h = DecoderHarness(dut, ctx, cfg_agent=lambda pacer, cov: AxiLiteMaster(dut, ctx, pacer))
    h.status = h.cfg
    return h, h.cfg


@tb_test()
async def register_map_random_traffic(dut, ctx):
    """Random reads and writes over the whole map (block registers without START, identity and interrupt
    registers, read-only, unaligned, unmapped, partial strobes) against CsrModel; AW / W skewed at random, B / R
    backpressure; irq stays low (nothing raises an event) and every response matches."""
    p = ctx.params
    rng = ctx.rng
    lanes = int(p["lanes"])
    model = CsrModel(KINDS[p["block"]], lanes, int(p.get("verif_lanes", lanes)),
                     FORMAT_VERSION if p.get("layout") == "format 3.0" else (2, 0))
    m = AxiLiteMaster(dut, ctx, ctx.pacer(rng.choice(["full", "random", "bursty"])), poll=False)
    eng = ctx.engine([m])
    sb = ctx.scoreboard("csr", width=36)
    cov = ctx.cov
    cov.define("csr.access", ["block_w", "block_r", "local_r", "irq_w", "ro_w", "bad_addr", "bad_strb"])
    local = [Csr.ID, Csr.VERSION, Csr.BLOCK, Csr.STATUS, Csr.ERROR_CODE, Csr.IRQ_STATUS, Csr.IRQ_ENABLE]
    n = scale(150, 1500)
    for _ in range(n):
        r = rng.random()
        if r < 0.25:
            a = 4 * rng.choice([int(Reg.MODE), int(Reg.MBITS), int(Reg.KEEP), int(Reg.GROUP), int(Reg.NUMEL),
                                int(Reg.CTRL), int(Reg.SPEC_SYM) + rng.randrange(15), rng.randrange(256)])
            d = CTRL_CLEAR_ERROR if a == 0 else rng.getrandbits(32)      # never START
            kind, strb = "block_w", 0xF
        elif r < 0.4:
            a, d, strb, kind = rng.choice([Csr.IRQ_ENABLE, Csr.IRQ_STATUS]), rng.getrandbits(32), 0xF, "irq_w"
        elif r < 0.5:
            a, d, strb, kind = rng.choice(local[:5]), rng.getrandbits(32), 0xF, "ro_w"
        elif r < 0.55:
            a, d, strb, kind = rng.choice([0x002, 0x41A, 0x800, 0xFFC, 0x41C]), 0, 0xF, "bad_addr"
        elif r < 0.6:
            a, d, strb, kind = 4 * rng.randrange(256), 0, rng.choice([0x0, 0x1, 0x3, 0x7, 0xE]), "bad_strb"
        else:
            a = rng.choice(local + [4 * rng.randrange(256), 0x803, 0x41C])
            kind = "local_r" if a in local else "block_r" if a < 0x400 and a % 4 == 0 else "bad_addr"
            exp = model.read(a)
            sb.expect([exp[0] | (exp[1] << 32)], tags=[f"read {a:#x}"])
            m.read(a, lambda op, resp, data: sb.check([data | (resp << 32)], where=f"read {op[1]:#x}"))
            cov.hit("csr.access", kind)
            continue
        exp = model.write(a, d, strb)
        sb.expect([exp << 32], tags=[f"write {a:#x} strb {strb:#x}"])
        m.write(a, d, strb, lambda op, resp, _d: sb.check([resp << 32], where=f"write {op[1]:#x}"))
        cov.hit("csr.access", kind)
    await eng.run_until(lambda: m.idle and m.cur is None, 40 * n, "register traffic")
    assert int(dut.irq.value) == 0, "irq raised without an event"


@tb_test()
async def tensors_over_the_bus(dut, ctx):
    """Random small tensors (draft and full) programmed over AXI4-Lite back to back: the driver's writes for
    the next tensor are refused while the decoder is busy and retried after STATUS shows it idle; every value
    bit for bit against golden under random stream idles / backpressure; DONE is raised and cleared by W1C."""
    rng = rng_of(ctx)
    h, m = _harness(dut, ctx)
    got = {}
    m.write(Csr.IRQ_ENABLE, IRQ_DONE)
    await h.run(_random_items(ctx, rng, scale(3, 12)))
    ctx.extra["refused_while_busy"] = m.refused_while_busy
    ctx.cov.define("csr.refused_while_busy", ["yes"])
    # back to back: the next tensor's first write comes right after the current START, while busy
    assert m.refused_while_busy > 0, "no write was refused while busy"
    ctx.cov.hit("csr.refused_while_busy", "yes")
    await h.engine.run_until(lambda: int(dut.irq.value), 64, "DONE interrupt")
    m.read(Csr.IRQ_STATUS, lambda op, resp, data: got.__setitem__("irq", data))
    m.write(Csr.IRQ_STATUS, IRQ_DONE)
    await h.engine.run_until(lambda: m.idle and "irq" in got, 200, "IRQ_STATUS")
    for _ in range(4):
        await h.engine.step()
    assert got["irq"] == IRQ_DONE and int(dut.irq.value) == 0


@tb_test()
async def error_interrupt_and_clear(dut, ctx):
    """START in full mode with no book loaded (C1: neither, C2: no verification book): NO_BOOK, the ERROR
    interrupt, ERROR_CODE over the bus; while in error START answers SLVERR (ignored) and other writes OKAY;
    CLEAR_ERROR through CTRL, W1C; then a tensor decodes."""
    rng = rng_of(ctx)
    h, m = _harness(dut, ctx)
    resps = []
    m.write(Csr.IRQ_ENABLE, IRQ_ERROR)
    m.write(4 * Reg.MODE, 1)
    m.write(4 * Reg.NUMEL, 64)
    m.write(4 * Reg.CTRL, CTRL_START)
    await h.engine.run_until(lambda: int(dut.irq.value), 200, "ERROR interrupt")
    await h.engine.run_until(lambda: m.error_code() != 0, 200, "ERROR_CODE poll")
    assert m.error_code() == 1 << Err.NO_BOOK
    for a, d in [(Reg.CTRL, CTRL_START), (Reg.MBITS, 3)]:
        m.write(4 * a, d, done=lambda op, resp, _d: resps.append(resp))
    m.write(4 * Reg.CTRL, CTRL_CLEAR_ERROR, done=lambda op, resp, _d: resps.append(resp))
    m.write(Csr.IRQ_STATUS, IRQ_ERROR, done=lambda op, resp, _d: resps.append(resp))
    await h.engine.run_until(lambda: len(resps) == 4, 200, "writes in error and CLEAR_ERROR")
    assert resps == [RESP_SLVERR, RESP_OKAY, RESP_OKAY, RESP_OKAY]
    await h.engine.run_until(lambda: m.error_code() == 0 and not m.error(), 200, "error cleared")
    assert int(dut.irq.value) == 0
    h.error_seen = 0
    await h.run([(enc, True) for enc, _ in _random_items(ctx, rng, 1)])


@tb_test()
async def tensors_over_the_program_stream(dut, ctx):
    """Register programs on ``cfg_dma`` (a DMA channel's stream, random pacing) queued with the planes, back to
    back: the decoder holds the next tensor's writes while busy, every value bit for bit against golden;
    the bus master meanwhile polls STATUS / ERROR_CODE (the harness's status) and DONE is raised."""
    from cassandra_rtl.tb.common.stream import Source
    rng = rng_of(ctx)

    def agent(pacer, cov):
        return Source(dut, "cfg_dma", pacer, cov, encode=lambda aw: aw[0] | (aw[1] << 8))

    h = DecoderHarness(dut, ctx, cfg_agent=agent)
    m = AxiLiteMaster(dut, ctx, ctx.pacer("random"))
    h.status = m
    h.engine.agents.append(m)
    m.write(Csr.IRQ_ENABLE, IRQ_DONE)
    await h.run(_random_items(ctx, rng, scale(4, 16)))
    await h.engine.run_until(lambda: int(dut.irq.value), 64, "DONE interrupt")
