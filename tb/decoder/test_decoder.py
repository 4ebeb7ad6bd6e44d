"""cocotb tests of the Cassandra-1 decoder (hw/decoder.py, docs/HARDWARE.md section 2) against the golden
codec: every output value bit for bit, every beat's count / sb_end / last / unused lanes, under random idle
cycles on every input and random backpressure on the output."""
from __future__ import annotations

import numpy as np

from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.config import PRUNED, CodecConfig
from cassandra_rtl.tb.common.bench import reset, tb_test
from cassandra_rtl.tb.decoder import data as D
from cassandra_rtl.tb.decoder import framing as F
from cassandra_rtl.tb.decoder import scenarios as S
from cassandra_rtl.tb.decoder.harness import DecoderHarness
from cassandra_rtl.tb.decoder.scenarios import rng_of as _rng
from cassandra_rtl.tb.decoder.scenarios import scale


@tb_test()
async def bf16_specials(dut, ctx):
    """Every bf16 special value (+-0, subnormals, min/max normal, +-Inf, NaN payloads incl. ones only in
    the cut bits) in draft and full mode, at m = 0, 3, 7, with and without pruning."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx)
    items = []
    for m in (0, 3, 7):
        for k in (128, 40):
            cfg = CodecConfig(group_size=128, mantissa_bits=m, keep_count=k)
            x = D.specials_tensor(rng, 300)
            enc = D.encode(x, cfg)
            items += [(enc, False), (enc, True)]
    # a tensor made of nothing but specials
    sp = np.array(D.SPECIALS * 3, dtype=np.uint16)
    for k in (32, 5):
        enc = D.encode(sp, CodecConfig(group_size=32, mantissa_bits=2, keep_count=k))
        items += [(enc, False), (enc, True)]
    await h.run(items)


@tb_test()
async def all_pruned_but_k_and_nothing_pruned(dut, ctx):
    """keep = 1 (every superblock all pruned but one value), keep = 2, keep = G (nothing pruned), for every
    superblock size, partial last superblocks included."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx)
    items = []
    for G in (32, 64, 128, 256):
        for k in (1, 2, G):
            cfg = CodecConfig(group_size=G, mantissa_bits=int(rng.integers(0, 8)), keep_count=k)
            n = 2 * G + int(rng.integers(1, G))
            enc = D.encode(D.weights_like(rng, n), cfg)
            items += [(enc, True), (enc, False)]
    await h.run(items)


@tb_test()
async def max_length_codes_and_escapes(dut, ctx):
    """Books of the rarest symbols: escapes at K = 15 (24-bit codes), rank-14 codes (15 bits), K = 0
    (every code an escape, no pruning), K = 1 with only the pruned mark; on both code planes."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx)
    items = []
    for K in (15, 14, 8, 1):
        for k in (64, 20):
            cfg = CodecConfig(group_size=64, mantissa_bits=int(rng.integers(0, 8)), keep_count=k)
            x = D.uniform_bits(rng, 64 * 3 + 17) if K > 8 else D.weights_like(rng, 64 * 3 + 17)
            enc = D.encode(x, cfg, books=D.escape_books(x, cfg, rng, K))
            items += [(enc, True), (enc, False)]
    # every book size with escapes present, and deepest ranks (most frequent symbol at rank K-1)
    for K in range(16):
        k = 32 if K == 0 else int(rng.integers(1, 33))
        cfg = CodecConfig(group_size=32, mantissa_bits=int(rng.integers(0, 8)), keep_count=k)
        x = D.uniform_bits(rng, 64)
        books = D.escape_books(x, cfg, rng, K) if K else (Codebook(()), Codebook(()))
        if cfg.prunes and PRUNED not in books[0].symbols:
            continue
        items.append((D.encode(x, cfg, books=books), bool(K % 2)))
        if K:
            y = D.weights_like(rng, 96)
            items.append((D.encode(y, cfg, books=D.deep_rank_books(y, cfg, K)), True))
    cfg0 = CodecConfig(group_size=32, mantissa_bits=3, keep_count=32)
    x = D.weights_like(rng, 100)
    items.append((D.encode(x, cfg0, books=(Codebook(()), Codebook(()))), True))
    cfgp = CodecConfig(group_size=32, mantissa_bits=3, keep_count=7)
    items.append((D.encode(x, cfgp, books=(Codebook((PRUNED,)), Codebook(()))), True))
    await h.run(items)


@tb_test()
async def codebook_reprogramming(dut, ctx):
    """Tensors back to back with different books, group sizes, keep counts and modes; then a second
    tensor that reuses the loaded books and only rewrites NUMEL + START."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx)
    items = []
    for _ in range(scale(6, 40)):
        cfg = D.random_config(rng)
        n = D.random_numel(rng, cfg.group_size, 4)
        items.append((D.encode(D.random_tensor(rng, n), cfg), bool(rng.integers(0, 2))))
    await h.run(items)
    # same books, new NUMEL only: encode a shorter tensor with the previous tensor's books
    enc0, full0 = items[-1]
    cfg = enc0.config
    n = D.random_numel(rng, cfg.group_size, 3)
    x = D.random_tensor(rng, n)
    # a pruning config whose tensor pruned nothing (one short superblock) has a book without P, which no encoding
    # of a pruning config may be given: that tensor itself is decoded again
    own = not cfg.prunes or PRUNED in enc0.spec_book.symbols
    enc1 = D.encode(x, cfg, books=(enc0.spec_book, enc0.verif_book)) if own else enc0
    await S.reuse_books(h, enc1, full0, "reuse books")


@tb_test()
async def constrained_random(dut, ctx):
    """Random configurations (G, m, k, partial superblocks), random data (weights, uniform bit patterns,
    specials, sparse), random modes, every traffic profile on every port."""
    await S.constrained_random(dut, ctx, D.random_config, D.random_tensor)


@tb_test()
async def full_rate_no_stalls(dut, ctx):
    """No idle cycles, no backpressure, SmolLM2-like data: records values/cycle (throughput)."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx, profiles="full")
    cfg = CodecConfig(group_size=128, mantissa_bits=3, keep_count=128)
    enc = D.encode(S.smollm2_or_weights(rng, 128 * scale(8, 64)), cfg)
    await S.record_rate(h, ctx, enc)


@tb_test()
async def reset_mid_stream(dut, ctx):
    """Reset in the middle of a tensor: busy/error clear, registers back to defaults (START without NUMEL
    is a CONFIG error), and a freshly programmed tensor then decodes exactly."""
    await S.reset_mid_stream(dut, ctx, CodecConfig(group_size=64, mantissa_bits=3, keep_count=40))


# ------------------------------------------------------------------------------------ malformed streams

def _mutations(enc, full, IW, rng, port_words=None, layout=F.FORMAT_3):
    """(name, expected error bit, planes) for one tensor: each a minimal corruption of one plane (the
    speculation planes, as framed in ``layout``; spec_codes in its own port's words, which may be narrower
    than IW)."""
    pw = F.plane_words(F.framed(enc, layout), full, port_words or IW)
    CW = (port_words or {}).get("spec_codes", IW)          # spec_codes word bits
    out = []

    def copy():
        return {p: [list(ch) for ch in chunks] for p, chunks in pw.items()}

    # CODE: a zero run longer than K at the start of a spec.codes chunk (first word all zero, K < IW)
    p = copy()
    s = int(rng.integers(0, len(p["spec_codes"])))
    w = p["spec_codes"][s]
    w[0] = (0, w[0][1])
    if enc.spec_book.K + 1 < CW:
        out.append(("code", F.ERR_CODE, p))
    # OVERRUN: a spec.codes chunk cut short (its last word dropped, the previous word gets last)
    p = copy()
    cands = [i for i, ch in enumerate(p["spec_codes"]) if len(ch) >= 2]
    if cands:
        s = int(rng.choice(cands))
        ch = p["spec_codes"][s]
        ch.pop()
        ch[-1] = (ch[-1][0], 1)
        out.append(("overrun", F.ERR_OVERRUN, p))
    # TOO_LONG: an extra all-zero word appended to a chunk
    p = copy()
    s = int(rng.integers(0, len(p["spec_signman"])))
    ch = p["spec_signman"][s]
    ch[-1] = (ch[-1][0], 0)
    ch.append((0, 1))
    out.append(("extra_word", F.ERR_TOO_LONG, p))
    # TOO_LONG: a non-zero bit right after the last code of a spec.codes chunk (inside the chunk's
    # padding or the zero-filled rest of its last word), located exactly from the code lengths
    ranks = F.code_ranks(enc, False)["spec"]
    K = enc.spec_book.K
    lengths = np.where(ranks < K, ranks + 1, F.escape_code_bits(K, layout))
    G = enc.config.group_size
    used = np.add.reduceat(lengths, np.arange(0, enc.numel, G))
    p = copy()
    for s_ in rng.permutation(len(used)):
        ch = p["spec_codes"][int(s_)]
        u = int(used[s_])
        if u < len(ch) * CW:
            wi, bi = divmod(u, CW)
            d, last = ch[wi]
            ch[wi] = (d | (1 << bi), last)
            out.append(("padding_bit", F.ERR_TOO_LONG, p))
            break
    return out


@tb_test()
async def malformed_streams(dut, ctx):
    """Each corruption raises its sticky error bit, no further beats come out, every input is drained
    (no channel hangs), CLEAR_ERROR recovers, and the next good tensor decodes exactly."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx)
    cov = ctx.cov
    cov.define("dec.error", list(F.ERROR_NAMES.values()))
    IW = h.IW
    # The mutations locate superblock chunks and rank-unary code lengths: format 1.0 layout (A = 1, no
    # pairs).
    V1 = dict(chunk_superblocks=1, pair_codes=False)
    cfg = CodecConfig(group_size=64, mantissa_bits=3, keep_count=48, **V1)
    good = D.encode(D.weights_like(rng, 64 * 2 + 9), cfg)
    cases = []
    for full in (False, True):
        enc = D.encode(D.weights_like(rng, 64 * 4), cfg)
        for name, bit, planes in _mutations(enc, full, IW, rng, h.port_words, h.layout):
            cases.append((f"{name}/{'full' if full else 'draft'}", bit, enc, full, planes, None))
    # KEEP: codes that keep 40 values per superblock, programmed as keep 48
    enc40 = D.encode(D.weights_like(rng, 64 * 2), CodecConfig(group_size=64, mantissa_bits=3, keep_count=40, **V1))
    prog = [(a, 48 if a == F.KEEP else d) for a, d in F.program(enc40, False)]
    cases.append(("keep_count", F.ERR_KEEP, enc40, False, None, prog))
    # CONFIG: invalid registers at START
    for name, reg, val in (("mbits8", F.MBITS, 8), ("group48", F.GROUP, 48), ("keep0", F.KEEP, 0),
                           ("keep_gt_group", F.KEEP, 65), ("numel0", F.NUMEL, 0)):
        prog = [(a, val if a == reg else d) for a, d in F.program(good, False)]
        cases.append((f"config_{name}", F.ERR_CONFIG, good, False, {}, prog))
    for name, bit, enc, full, planes, prog in cases:
        await S.expect_error(h, dut, ctx, name, bit, enc, full, planes, prog, rng, good)
    # NO_BOOK needs the book-loaded flags cleared: reset, then program without books
    await reset(dut, 2, ctx)
    h.reset_agents()
    h.submit(good, False, check=False, planes={}, prog=F.program(good, False, books=False))
    await h.engine.run_until(lambda: h.error_seen > 0, h.budget(), "no_book: error never raised")
    code = int(dut.error_code.value)
    assert code >> F.ERR_NO_BOOK & 1, f"no_book: error_code 0x{code:02x}"
    cov.hit("dec.error", "NO_BOOK")


# ----------------------------------------------------------------------------------------- real data

@tb_test()
async def smollm2_sample(dut, ctx):
    """Slices of SmolLM2-135M's real linear weights, encoded by the golden codec (G=128, m=3, keep 1.0 and
    0.75), through the decoder in draft and full mode."""
    await S.smollm2_sample(dut, ctx, [CodecConfig(group_size=128, mantissa_bits=3, keep_count=k) for k in (128, 96)])


@tb_test()
async def job_file(dut, ctx):
    """Tensors from a job file (TB_JOB: a pickle of [(name, EncodedTensor)] and the mode), written by
    `cassandra-rtl cosim`; skipped when no job is given."""
    await S.job_file(dut, ctx)
