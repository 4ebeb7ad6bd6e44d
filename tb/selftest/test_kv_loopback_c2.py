"""Encoder -> decoder loopback for Cassandra-2: EncoderKvC2's three planes wired straight into DecoderC2 at
the same word width (tb/common/hwapi.py ``kv_loopback_c2``, no glue logic, docs/HARDWARE.md 3a). KV vectors go
in, the decoder's output must be the input bit for bit in full mode (lossless) and golden ``decode_draft`` in
draft mode (the verification planes are then accepted and discarded by ``drop_verif``); random idles on the
input, random backpressure on the output, per-beat count / last checks."""
from __future__ import annotations

import numpy as np

from cassandra_rtl.golden.codec import decode_draft, decode_full
from cassandra_rtl.golden.kv import calibrate_kv_codebooks, encode_kv, kv_config
from cassandra_rtl.tb.common.bench import env_int, full_run, tb_test
from cassandra_rtl.tb.common.stream import PROFILES, Sink, Source, lane_packer
from cassandra_rtl.tb.decoder import data as D
from cassandra_rtl.tb.decoder import framing as F
from cassandra_rtl.tb.encoder.regs import program


class Level:
    """A level input driven in the engine's drive phase (never written during ReadOnly)."""

    def __init__(self, sig, value=0):
        self.sig, self.value = sig, value

    def drive(self):
        self.sig.value = self.value

    def sample(self):
        pass


class Loop:
    def __init__(self, dut, ctx):
        p = ctx.params
        self.dut, self.ctx = dut, ctx
        self.L, self.IW = int(p["lanes"]), int(p["word"])
        self.cb = max(1, self.L.bit_length())
        L, rng, cov = self.L, ctx.rng, ctx.cov

        cfg_enc = lambda aw: aw[0] | (aw[1] << 8)  # noqa: E731
        self.enc_cfg = Source(dut, "enc_cfg", ctx.pacer("full"), cov, encode=cfg_enc)
        self.dec_cfg = Source(dut, "dec_cfg", ctx.pacer("full"), cov, encode=cfg_enc)
        self.inp = Source(dut, "inp", ctx.pacer(rng.choice(PROFILES)), cov, encode=lane_packer(L))
        self.out = Sink(dut, "out", ctx.pacer(rng.choice(PROFILES)), self._beat, cov)
        self.sb = ctx.scoreboard("kv_loopback_c2")
        self.left = 0           # values of the current tensor not yet out
        self.drop = Level(dut.drop_verif)
        self.engine = ctx.engine([self.drop, self.enc_cfg, self.dec_cfg, self.inp, self.out])
        cov.define("loop.mode", ["draft", "full"])
        cov.define("loop.group", [32, 64, 128])
        cov.define("loop.keep", ["all", "one", "partial"])

    def _beat(self, payload: int):
        L, cb = self.L, self.cb
        count = (payload >> (16 * L)) & ((1 << cb) - 1)
        last = (payload >> (16 * L + cb + 1)) & 1
        lanes = [(payload >> (16 * i)) & 0xFFFF for i in range(L)]
        if not 1 <= count <= L or any(lanes[count:]) or count > self.left:
            self.sb._report(f"loopback beat: count={count}, {self.left} values left, lanes={[hex(x) for x in lanes]}")
            return
        self.sb.check(lanes[:count], where="loopback")
        self.left -= count
        if bool(last) != (self.left == 0):
            self.sb._report(f"loopback beat: last={last} with {self.left} values left")

    async def run(self, vectors: np.ndarray, cfg, full: bool):
        books = calibrate_kv_codebooks(vectors[: max(1, len(vectors) // 2)], cfg)
        enc = encode_kv(vectors, cfg, books)
        ref = (decode_full(enc) if full else decode_draft(enc)).reshape(-1)
        if full:
            assert np.array_equal(ref, vectors.reshape(-1)), "golden full decode is not lossless"
        cov, G, k = self.ctx.cov, cfg.group_size, cfg.keep_count
        cov.hit("loop.mode", "full" if full else "draft")
        cov.hit("loop.group", G)
        cov.hit("loop.keep", "all" if k == G else "one" if k == 1 else "partial")
        self.drop.value = int(not full)
        self.enc_cfg.send(program(cfg, books))      # C2: books = (None, verif)
        self.dec_cfg.send(F.program(enc, full))
        await self.engine.run_until(lambda: self.enc_cfg.idle and self.dec_cfg.idle, 400, "register writes")
        await self.engine.step()
        self.sb.expect(ref.astype(np.uint16))
        self.left = enc.numel
        L = self.L
        self.inp.send([(v[b * L:(b + 1) * L], int(b == G // L - 1)) for v in vectors for b in range(G // L)])
        budget = 500 + 40 * enc.numel // L
        try:
            try:
                await self.engine.run_until(lambda: self.sb.pending == 0 and self.inp.idle and not self.left, budget,
                                            f"loopback G={G} k={k} m={cfg.mantissa_bits} {'full' if full else 'draft'}")
            except AssertionError as exc:
                import os
                from pathlib import Path
                dump = Path(os.environ.get("TB_STATS", "/tmp/x")).parent / "loopback_fail.npz"
                np.savez(dump, vectors=vectors, G=G, k=k, m=cfg.mantissa_bits, full=full)
                d = self.dut
                raise AssertionError(f"{exc}; beats in {self.inp.transfers} (queued {len(self.inp.queue)}), "
                                     f"values left {self.left} of {enc.numel}, enc busy {int(d.enc_busy.value)} "
                                     f"dec busy {int(d.busy.value)}, inp.ready {int(d.inp__ready.value)}, "
                                     f"out.valid {int(d.out__valid.value)}; stimulus saved to {dump}") from None
            await self.engine.run_until(lambda: not int(self.dut.busy.value) and not int(self.dut.enc_busy.value),
                                        200, "busy after the last beat")
        finally:
            d = self.dut
            if int(d.error.value) or int(d.enc_error.value):
                raise AssertionError(f"error: decoder 0x{int(d.error_code.value):02x}, "
                                     f"encoder 0x{int(d.enc_error_code.value):02x}")


def scale(quick, full):
    return env_int("TB_SCALE", full if full_run() else quick)


@tb_test()
async def kv_loopback(dut, ctx):
    """Random head_dim (32/64/128), m, keep (1, G, random), data (weights, specials, subnormal blocks, exponent
    spread, SmolLM2 rows), both modes, random traffic per round."""
    rng = np.random.default_rng(ctx.seed)
    h = Loop(dut, ctx)
    try:
        real = D.smollm2_sample(rng, 128 * 64, rows=1)[0]
    except FileNotFoundError:
        real = D.weights_like(rng, 128 * 64, sigma=0.02)
    for rnd in range(scale(8, 60)):
        h.inp.pacer.profile = str(rng.choice(PROFILES))
        h.out.pacer.profile = str(rng.choice(PROFILES))
        G = int(rng.choice([32, 64, 128]))
        r = rng.random()
        ratio = 1.0 if r < 0.3 else 1.0 / G if r < 0.4 else float(rng.uniform(0.05, 1.0))
        cfg = kv_config(G, "c2", int(rng.integers(0, 8)), ratio)
        n = int(rng.integers(1, 6))
        kind = rng.choice(["weights", "specials", "small", "spread", "real"])
        if kind == "real":
            s = int(rng.integers(0, len(real) - n * G))
            x = real[s:s + n * G]
        elif kind == "specials":
            x = D.specials_tensor(rng, n * G)
        elif kind == "small":
            x = D.small_exponents(rng, n * G)
        elif kind == "spread":
            x = D.pattern_spread(rng, n * G)
        else:
            x = D.weights_like(rng, n * G)
        ctx.log.info(f"round {rnd}: G={G} k={cfg.keep_count} m={cfg.mantissa_bits} n={n} {kind} "
                     f"{'full' if rnd % 2 else 'draft'} in={h.inp.pacer.profile} out={h.out.pacer.profile}")
        await h.run(np.asarray(x, np.uint16).reshape(n, G), cfg, bool(rnd % 2))


@tb_test()
async def replay(dut, ctx):
    """Re-run one saved loopback case (TB_LOOP_JOB = a loopback_fail.npz written on a failure; TB_LOOP_PROFILE
    = traffic profile of the input and output, default full); skipped without TB_LOOP_JOB."""
    import os

    path = os.environ.get("TB_LOOP_JOB")
    if not path:
        ctx.extra["skipped"] = "no TB_LOOP_JOB"
        return
    d = np.load(path)
    h = Loop(dut, ctx)
    h.inp.pacer.profile = h.out.pacer.profile = os.environ.get("TB_LOOP_PROFILE", "full")
    G, k = int(d["G"]), int(d["k"])
    await h.run(d["vectors"].astype(np.uint16), kv_config(G, "c2", int(d["m"]), k / G), bool(d["full"]))


@tb_test()
async def sparse_codes_full_mode(dut, ctx):
    """Directed: two head_dim-64 vectors of subnormals / tiny normals (one MX block of subnormals only, one of
    +0; D.small_exponents, seed 2026), m = 1, keep 48, full mode, no stalls. The calibrated book is (0,), so
    every verif.codes code is 1 bit and the encoder's verif.codes writer does not fill a 64-bit word for a
    whole vector, while verif.rest gets 8 bits per draft-zero value. Directly coupled, the decoder's
    verif.rest buffer fills while it waits for the first verif.codes word, and the encoder, backpressured on
    verif.rest, never completes that word: deadlock (found 29 Nov 2026, reproduced in the Amaranth simulator
    too; tests/test_cosim_rtl.py marks it xfail strict)."""
    h = Loop(dut, ctx)
    h.inp.pacer.profile = h.out.pacer.profile = "full"
    x = D.small_exponents(np.random.default_rng(2026), 128).reshape(2, 64)
    await h.run(x, kv_config(64, "c2", 1, 48 / 64), True)
