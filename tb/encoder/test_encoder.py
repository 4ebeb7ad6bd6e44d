"""cocotb tests of the online KV-cache encoders (hw/encoder.py, Cassandra-1: four planes; hw/encoder_c2.py,
Cassandra-2: spec.mx, verif.codes, verif.rest): every output word of every plane compared bit for bit with
the golden KV encoder (golden.kv.encode_kv: format 3.0, escfield.encode3(kind="kv", ...) with fixed books) framed
as docs/HARDWARE.md "Input words" (one chunk per vector, `last` on its final word), under random idle cycles
on the input and random backpressure on every plane. The scheme comes from the configuration's block
(``encoder_kv_c1`` / ``encoder_kv_c2``, hw/configs.py CONFIG_INFO)."""
from __future__ import annotations

import numpy as np

from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.config import PRUNED
from cassandra_rtl.golden.kv import calibrate_kv_codebooks, encode_kv, kv_config
from cassandra_rtl.tb.common.bench import env_int, full_run, reset, tb_test
from cassandra_rtl.tb.common.stream import PROFILES, Sink, Source, lane_packer
from cassandra_rtl.tb.decoder import data as D
from cassandra_rtl.tb.decoder import framing as F
from cassandra_rtl.tb.decoder.data import kv_vectors
from cassandra_rtl.tb.encoder.regs import program

ERR_FRAME = 6        # hw/encoder.py FRAME_ERR: `last` not on a vector's final beat (not yet in HARDWARE.md)


def scale(quick, full):
    return env_int("TB_SCALE", full if full_run() else quick)


def scheme_of(ctx) -> str:
    return "c2" if str(ctx.params.get("block", "")).endswith("c2") else "c1"


class EncoderHarness:
    def __init__(self, dut, ctx, profile=None):
        p = ctx.params
        self.dut, self.ctx = dut, ctx
        self.L, self.IW = int(p["lanes"]), int(p["word"])
        self.scheme = scheme_of(ctx)
        ports = list(F.ports(self.scheme).values())
        L, IW = self.L, self.IW
        rng = ctx.rng
        prof = lambda: profile or rng.choice(PROFILES)  # noqa: E731
        cov = ctx.cov
        self.cfg = Source(dut, "cfg", ctx.pacer("full"), cov, encode=lambda aw: aw[0] | (aw[1] << 8))
        self.inp = Source(dut, "inp", ctx.pacer(prof()), cov, encode=lane_packer(L))
        self.sbs = {port: ctx.scoreboard(f"encoder.{port}", width=IW + 4) for port in ports}
        self.sinks = {port: Sink(dut, port, ctx.pacer(prof()), self._sink(port), cov) for port in ports}
        self.engine = ctx.engine([self.cfg, self.inp, *self.sinks.values()])
        cov.define("enc.group", [32, 64, 128])
        cov.define("enc.keep", ["all", "one", "partial"])
        cov.define("enc.mbits", range(8))
        cov.define("enc.escapes", ["spec", "verif"] if self.scheme == "c1" else ["verif"])
        cov.define("enc.ties_at_threshold", ["yes"])
        if self.scheme == "c2":
            cov.define("c2.lane", ["kept_nonzero", "pruned", "elem_zero", "x_zero", "c_negative"])

    def _sink(self, port):
        sb = self.sbs[port]
        return lambda payload: sb.check([payload], where=port)

    async def program(self, cfg, books):
        """Register writes first: the encoder has no START, a vector beat that arrives before the book
        sizes are written raises NO_BOOK."""
        self.cfg.send(program(cfg, books))
        await self.engine.run_until(lambda: self.cfg.idle, 200, "register writes")
        await self.engine.step()

    async def submit(self, vectors: np.ndarray, cfg, books, prog=True):
        if prog:
            await self.program(cfg, books)
        enc = encode_kv(vectors, cfg, books)
        for port, chunks in F.plane_words(enc, True, self.IW).items():
            self.sbs[port].expect([d | (last << self.IW) for ch in chunks for d, last in ch])
        L, G = self.L, cfg.group_size
        beats = []
        for v in vectors:
            for b in range(G // L):
                beats.append((v[b * L:(b + 1) * L], int(b == G // L - 1)))
        self.inp.send(beats)
        self._cover(vectors, cfg, books, enc)

    def _cover(self, vectors, cfg, books, enc):
        cov = self.ctx.cov
        cov.hit("enc.group", cfg.group_size)
        cov.hit("enc.mbits", cfg.mantissa_bits)
        k, G = cfg.keep_count, cfg.group_size
        cov.hit("enc.keep", "all" if k == G else "one" if k == 1 else "partial")
        e = (vectors.astype(np.int64) >> 7) & 0xFF
        if self.scheme == "c2":
            ln = F.c2_lanes(enc)
            kept, dz = ln["kept"], ln["draft_zero"]
            for name, mask in (("kept_nonzero", kept & ~dz), ("pruned", ~kept), ("elem_zero", kept & (ln["elem"] == 0)),
                               ("x_zero", ln["X"] == 0), ("c_negative", kept & (ln["c"] < 0))):
                if mask.any():
                    cov.hit("c2.lane", name, int(mask.sum()))
            if (ln["verif_rank"] == enc.verif_book.K).any():
                cov.hit("enc.escapes", "verif")
        elif np.isin(e, books[0].symbols, invert=True).any():
            cov.hit("enc.escapes", "spec")
        if k < G:
            key = np.sort(vectors.astype(np.int64) & 0x7FFF, axis=1)[:, ::-1]
            if (key[:, k - 1] == key[:, min(k, G - 1)]).any():
                cov.hit("enc.ties_at_threshold", "yes")

    def done(self):
        return self.inp.idle and self.cfg.idle and all(sb.pending == 0 for sb in self.sbs.values())

    async def drain(self, what="encode"):
        budget = 400 + 60 * (len(self.inp.queue) + sum(sb.pending for sb in self.sbs.values()))
        try:
            await self.engine.run_until(self.done, budget, what)
        except AssertionError as exc:
            d = self.dut
            raise AssertionError(f"{exc}; error_code=0x{int(d.error_code.value):02x} busy={int(d.busy.value)} "
                                 f"words out={[s.transfers for s in self.sinks.values()]} "
                                 f"beats in={self.inp.transfers} cfg writes={self.cfg.transfers}") from None
        assert not int(self.dut.error.value), f"{what}: error_code 0x{int(self.dut.error_code.value):02x}"


def _books(rng, vectors, cfg, style="calibrated"):
    if style == "calibrated":
        return calibrate_kv_codebooks(vectors[: max(1, len(vectors) // 2)], cfg)
    K = int(rng.integers(1, 16))
    if cfg.scheme == "c2":       # a delta book of rare / absent deltas with the common ones at high ranks
        enc = encode_kv(vectors, cfg, calibrate_kv_codebooks(vectors, cfg))
        return None, (Codebook(()) if rng.random() < 0.2 else D.rare_delta_book(enc, K))
    return D.escape_books(vectors.reshape(-1), cfg, rng, K)


@tb_test()
async def directed_kv(dut, ctx):
    """Specials, ties at the keep threshold, subnormal / zero MX blocks (C2: X = 0), keep = 1 / keep = G, every
    supported G, m = 0 and 7."""
    rng = np.random.default_rng(ctx.seed)
    h = EncoderHarness(dut, ctx)
    for G in (32, 64, 128):
        for ratio, m in ((1.0, 3), (1 / G, 0), (0.5, 7)):
            cfg = kv_config(G, scheme_of(ctx), m, ratio)
            for kind in ("specials", "ties", "small"):
                x = kv_vectors(rng, 3, G, kind)
                await h.submit(x, cfg, _books(rng, x, cfg))
                await h.drain(f"G={G} keep={cfg.keep_count} m={m} {kind}")


@tb_test()
async def escapes_and_reprogramming(dut, ctx):
    """Books of rare symbols (escapes everywhere, max-length codes), a new book pair per 'layer'."""
    rng = np.random.default_rng(ctx.seed)
    h = EncoderHarness(dut, ctx)
    for _ in range(scale(4, 30)):
        G = int(rng.choice([32, 64, 128]))
        cfg = kv_config(G, scheme_of(ctx), int(rng.integers(0, 8)), float(rng.choice([1.0, 0.75, 0.5, 0.25])))
        x = kv_vectors(rng, int(rng.integers(1, 4)), G)
        books = _books(rng, x, cfg, "escape")
        if cfg.scheme == "c1" and cfg.prunes and PRUNED not in books[0].symbols:
            continue
        await h.submit(x, cfg, books)
        h.ctx.cov.hit("enc.escapes", "verif")
        await h.drain("escape books")


@tb_test()
async def constrained_random(dut, ctx):
    rng = np.random.default_rng(ctx.seed)
    h = EncoderHarness(dut, ctx)
    for _ in range(scale(5, 60)):
        for agent in (h.inp, *h.sinks.values()):
            agent.pacer.profile = str(rng.choice(PROFILES))
        G = int(rng.choice([32, 64, 128]))
        cfg = kv_config(G, scheme_of(ctx), int(rng.integers(0, 8)), float(rng.uniform(0.05, 1.0)))
        x = kv_vectors(rng, int(rng.integers(1, 5)), G)
        await h.submit(x, cfg, _books(rng, x, cfg, str(rng.choice(["calibrated", "escape"]))))
        await h.drain("random")


@tb_test()
async def malformed_and_reset(dut, ctx):
    """`last` on the wrong beat raises an error (and nothing hangs); START-less NO_BOOK after reset;
    reset mid-vector returns to idle and the next vector encodes exactly."""
    rng = np.random.default_rng(ctx.seed)
    h = EncoderHarness(dut, ctx)
    G, L = 64, h.L
    cfg = kv_config(G, scheme_of(ctx), 3, 0.5)
    x = kv_vectors(rng, 2, G, "weights")
    books = _books(rng, x, cfg)
    # an error, then reset: reset must clear it
    h.inp.send([(x[0][b * L:(b + 1) * L], int(b == G // L - 1)) for b in range(G // L)])
    await h.engine.run_until(lambda: int(dut.error.value), 2000, "no NO_BOOK error for a vector before any book")
    code = int(dut.error_code.value)
    assert code >> F.ERR_NO_BOOK & 1, f"error_code 0x{code:02x} lacks NO_BOOK"
    await h.engine.run_until(lambda: h.inp.idle, 2000, "input not drained after NO_BOOK")
    await reset(dut, 2, ctx)
    assert int(dut.error.value) == 0 and int(dut.error_code.value) == 0, "reset did not clear the error"
    # reset in the middle of a vector
    await h.program(cfg, books)
    h.inp.send([(x[0][b * L:(b + 1) * L], int(b == G // L - 1)) for b in range(G // L // 2)])
    await h.engine.run_until(lambda: h.inp.idle, 500, "half vector")
    await reset(dut, 2, ctx)
    for a in (h.cfg, h.inp, *h.sinks.values()):
        a.reset()
    for sb in h.sbs.values():
        sb.expected.clear()
    assert int(dut.busy.value) == 0 and int(dut.error.value) == 0, "not idle after reset"
    await h.submit(x, cfg, books)
    await h.drain("after reset")
    # wrong framing: last on the first beat of a vector
    h.inp.send([(x[1][b * L:(b + 1) * L], int(b == 0)) for b in range(G // L)])
    await h.engine.run_until(lambda: int(dut.error.value), 2000, "no error for bad `last`")
    await h.engine.run_until(lambda: h.inp.idle, 2000, "input not drained after the framing error")
    code = int(dut.error_code.value)
    assert code, "error_code empty"
    ctx.extra["frame_error_code"] = code
    for s in h.sbs.values():
        s.expected.clear()


@tb_test()
async def real_kv_like(dut, ctx):
    """SmolLM2 weight rows as stand-in K/V vectors (head_dim 64), books calibrated on the first half."""
    rng = np.random.default_rng(ctx.seed)
    h = EncoderHarness(dut, ctx, profile="light")
    try:
        rows = D.smollm2_sample(rng, 64 * scale(8, 64), rows=1)[0].reshape(-1, 64)
    except FileNotFoundError:
        rows = kv_vectors(rng, scale(8, 64), 64, "weights")
    for ratio in (1.0, 0.5):
        cfg = kv_config(64, scheme_of(ctx), 3, ratio)
        await h.submit(rows, cfg, calibrate_kv_codebooks(rows[: len(rows) // 2], cfg))
        await h.drain(f"smollm2 keep={ratio}")
