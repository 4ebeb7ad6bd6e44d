"""cocotb tests of the Cassandra-2 decoder (hw/decoder_c2.py, docs/HARDWARE.md section 2a) against the golden
codec: every output value bit for bit against ``decode_draft`` / ``decode_full``, every beat's count / sb_end /
last / unused lanes (tb/decoder/harness.py, shared with the C1 decoder), under random idle cycles on every
input and random backpressure on the output."""
from __future__ import annotations

import numpy as np

from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.config import ALLOWED_GROUP_SIZES
from cassandra_rtl.tb.common.bench import reset, tb_test
from cassandra_rtl.tb.decoder import data as D
from cassandra_rtl.tb.decoder import framing as F
from cassandra_rtl.tb.decoder import scenarios as S
from cassandra_rtl.tb.decoder.harness import DecoderHarness
from cassandra_rtl.tb.decoder.scenarios import rng_of as _rng
from cassandra_rtl.tb.decoder.scenarios import scale


@tb_test()
async def bf16_specials(dut, ctx):
    """Every bf16 special value (+-0, subnormals, min/max normal, +-Inf, NaN payloads) in both modes at
    m = 0, 3, 7 with and without pruning; blocks of subnormals only (X = 0) and the whole exponent range."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx)
    items = []
    for m in (0, 3, 7):
        for k in (128, 40):
            enc = D.encode(D.specials_tensor(rng, 300), D.c2cfg(128, m, k))
            items += [(enc, False), (enc, True)]
    sp = np.array(D.SPECIALS * 3, dtype=np.uint16)
    for k in (32, 5):
        enc = D.encode(sp, D.c2cfg(32, 2, k))
        items += [(enc, False), (enc, True)]
    for m, k in ((0, 40), (7, 64), (3, 1), (5, 64)):
        enc = D.encode(D.small_exponents(rng, 256), D.c2cfg(64, m, k))
        items += [(enc, bool(m % 2)), (enc, not m % 2)]
    enc = D.encode(D.pattern_spread(rng, 640), D.c2cfg(128, 2, 96))
    items += [(enc, False), (enc, True)]
    await h.run(items)


@tb_test()
async def boundary_configs(dut, ctx):
    """k = G (no keep bits), k = 1, k = 2, k = G - 1 for every G, m = 0 and 7, partial last superblocks and MX
    blocks, a tensor of a single value and one of exactly one MX block."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx)
    items = []
    for G in ALLOWED_GROUP_SIZES:
        for k in (G, 1, 2, G - 1):
            m = int(rng.choice([0, 7, int(rng.integers(0, 8))]))
            n = 2 * G + int(rng.integers(1, G))
            enc = D.encode(D.weights_like(rng, n), D.c2cfg(G, m, k))
            items += [(enc, True), (enc, False)]
    for n, G, k in ((1, 32, 1), (1, 32, 32), (32, 32, 7), (33, 64, 10), (255, 256, 200)):
        enc = D.encode(D.weights_like(rng, n), D.c2cfg(G, int(rng.integers(0, 8)), k))
        items += [(enc, True), (enc, False)]
    await h.run(items)


@tb_test()
async def escapes_and_books(dut, ctx):
    """Verification books of every size K = 0..15 with escapes present (K = 0: every delta escapes, one
    draft-zero value per beat at most), books whose common deltas sit at rank K - 1 (15-bit codes at K = 15)
    and 24-bit escapes at K = 15."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx)
    items = []
    for K in range(16):
        G = int(rng.choice([32, 64, 128]))
        cfg = D.c2cfg(G, int(rng.integers(0, 8)), int(rng.integers(1, G)))
        x = D.pattern_spread(rng, 3 * G + 11) if K % 3 == 0 else D.weights_like(rng, 3 * G + 11)
        enc0 = D.encode(x, cfg)
        book = Codebook(()) if K == 0 else D.rare_delta_book(enc0, K)
        enc = D.encode(x, cfg, books=(None, book))
        items.append((enc, True))
        if K in (0, 15):
            items.append((enc, False))
    # the encoder-calibrated book, then the same data under a K = 0 book
    x = D.weights_like(rng, 192)
    items.append((D.encode(x, D.c2cfg(64, 2, 32), books=(None, Codebook(()))), True))
    await h.run(items)


@tb_test()
async def codebook_reprogramming(dut, ctx):
    """Tensors back to back with different books, G, m, k and modes, then a tensor that reuses the loaded
    book and rewrites only NUMEL + START."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx)
    items = []
    for _ in range(scale(6, 40)):
        cfg = D.random_c2_config(rng)
        n = D.random_numel(rng, cfg.group_size, 4)
        items.append((D.encode(D.random_c2_tensor(rng, n), cfg), bool(rng.integers(0, 2))))
    await h.run(items)
    enc0, full0 = items[-1]
    x = D.random_c2_tensor(rng, D.random_numel(rng, enc0.config.group_size, 3))
    enc1 = D.encode(x, enc0.config, books=(None, enc0.verif_book))
    await S.reuse_books(h, enc1, full0, "reuse book")


@tb_test()
async def constrained_random(dut, ctx):
    """Random configurations (G, m, k incl. 1 and G, partial superblocks), random data (weights, uniform bit
    patterns, specials, sparse, subnormal blocks, the whole exponent range), random modes, every traffic
    profile on every port."""
    await S.constrained_random(dut, ctx, D.random_c2_config, D.random_c2_tensor)


@tb_test()
async def full_rate_no_stalls(dut, ctx):
    """No idle cycles, no backpressure, SmolLM2 weights (G = 128, m = 3, keep 1.0 and 0.5): records
    values/cycle."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx, profiles="full")
    x = S.smollm2_or_weights(rng, 128 * scale(8, 64))
    for k in (128, 64):
        await S.record_rate(h, ctx, D.encode(x, D.c2cfg(128, 3, k)), f"_k{k}")


@tb_test()
async def reset_mid_stream(dut, ctx):
    """Reset in the middle of a tensor: busy/error/out.valid clear, registers back to defaults (START alone
    is an error), and a freshly programmed tensor then decodes exactly."""
    await S.reset_mid_stream(dut, ctx, D.c2cfg(64, 3, 40))


# ------------------------------------------------------------------------------------ malformed streams

def _spec_mx_used_bits(enc, s: int) -> int:
    """Bits of spec.mx chunk ``s``: [bitmap n_s if pruning] [8 per MX block] [k_s fields of m + 2]."""
    c = enc.config
    n = min(c.group_size, enc.numel - s * c.group_size)
    k = c.kept_in(n)
    return (n if c.prunes else 0) + 8 * (-(-n // 32)) + k * (c.mantissa_bits + 2)


def _mutations(enc, full, port_words, rng, layout=F.FORMAT_3):
    """(name, expected error bit, planes, program) for one pruning tensor in the decoder's plane ``layout``:
    minimal corruptions (``port_words``: {port: word bits}; decoder v3's verification ports are narrower than
    spec_mx)."""
    pw = F.plane_words(F.framed(enc, layout), full, port_words)
    IW, VW = port_words["spec_mx"], port_words["verif_codes"]
    prog = F.program(enc, full)
    out = []

    def copy():
        return {p: [list(ch) for ch in chunks] for p, chunks in pw.items()}

    def cut_chunk(port, name):
        p = copy()
        cands = [i for i, ch in enumerate(p[port]) if len(ch) >= 2]
        if cands:
            ch = p[port][int(rng.choice(cands))]
            ch.pop()
            ch[-1] = (ch[-1][0], 1)
            out.append((name, F.ERR_OVERRUN, p, None))

    cut_chunk("spec_mx", "overrun_mx")
    # TOO_LONG: an extra all-zero word at the end of a spec.mx chunk
    p = copy()
    ch = p["spec_mx"][int(rng.integers(0, len(p["spec_mx"])))]
    ch[-1] = (ch[-1][0], 0)
    ch.append((0, 1))
    out.append(("extra_word_mx", F.ERR_TOO_LONG, p, None))
    # TOO_LONG: a non-zero bit right after the last field of a spec.mx chunk
    p = copy()
    for s in rng.permutation(len(p["spec_mx"])):
        ch = p["spec_mx"][int(s)]
        u = _spec_mx_used_bits(enc, int(s))
        if u < len(ch) * IW:
            wi, bi = divmod(u, IW)
            ch[wi] = (ch[wi][0] | (1 << bi), ch[wi][1])
            out.append(("padding_bit_mx", F.ERR_TOO_LONG, p, None))
            break
    # KEEP: one more bit set in a superblock's keep bitmap (its chunk's first word holds bitmap bits
    # 0..min(n_s, IW); in format 3.0 the keep bits of the superblock's last MX block, after its
    # X byte, so that no later header of the superblock is misread first)
    p = copy()
    s = int(rng.integers(0, len(p["spec_mx"])))
    n = min(enc.config.group_size, enc.numel - s * enc.config.group_size, IW)
    at = 0
    if layout != F.FORMAT_2:
        n_s = min(enc.config.group_size, enc.numel - s * enc.config.group_size)
        kept = F.c2_lanes(enc)["kept"][s * enc.config.group_size:][:n_s]
        blocks = [kept[b:b + 32] for b in range(0, len(kept), 32)]
        at = sum(8 + len(k) + int(k.sum()) * (enc.config.mantissa_bits + 2) for k in blocks[:-1]) + 8
        n = len(blocks[-1])
    words = p["spec_mx"][s]
    free = [at + b for b in range(n) if not words[(at + b) // IW][0] >> ((at + b) % IW) & 1]
    if free:
        bit = int(rng.choice(free))
        d, last = words[bit // IW]
        words[bit // IW] = (d | 1 << (bit % IW), last)
        out.append(("keep_bitmap", F.ERR_KEEP, p, None))
    if full:
        # CODE: a zero run longer than K at the start of a verif.codes chunk (in format 3.0 a
        # chunk of two words or more: a one-word chunk of zeros holds no code at all, which reads as OVERRUN)
        p = copy()
        cands = [i for i, ch in enumerate(p["verif_codes"]) if ch[0][0] and (layout == F.FORMAT_2 or len(ch) > 1)]
        if cands and enc.verif_book.K + 1 < VW:
            ch = p["verif_codes"][int(rng.choice(cands))]
            ch[0] = (0, ch[0][1])
            out.append(("code_zero_run", F.ERR_CODE, p, None))
        # CODE: the book maps every rank to delta 255, so a draft-zero value gets X - delta < 0
        ln = F.c2_lanes(enc)
        if enc.verif_book.K and (ln["verif_rank"] < enc.verif_book.K).any() and (ln["X"] < 255).all():
            bad = [(a, 255 if F.VERIF_SYM <= a < F.VERIF_SYM + 16 else d) for a, d in prog]
            out.append(("negative_exponent", F.ERR_CODE, copy(), bad))
        cut_chunk("verif_rest", "overrun_rest")
        cut_chunk("verif_codes", "overrun_codes")
        p = copy()
        ch = p["verif_rest"][int(rng.integers(0, len(p["verif_rest"])))]
        ch.insert(len(ch) - 1, (0, 0))
        out.append(("extra_word_rest", F.ERR_TOO_LONG, p, None))
    return out


@tb_test()
async def malformed_streams(dut, ctx):
    """Each corruption raises its sticky error bit (CODE, OVERRUN, TOO_LONG, KEEP, CONFIG, NO_BOOK), no more
    than one beat follows, every input is drained, CLEAR_ERROR recovers and the next good tensor decodes
    exactly."""
    rng = _rng(ctx)
    h = DecoderHarness(dut, ctx)
    ctx.cov.define("dec.error", list(F.ERROR_NAMES.values()))
    IW = h.IW
    # The mutations locate per-superblock chunks: format 1.0 layout (A = 1, no pairs).
    V1 = dict(chunk_superblocks=1, pair_codes=False)
    good = D.encode(D.weights_like(rng, 64 * 2 + 9), D.c2cfg(64, 3, 40, **V1))
    cases = []
    for full in (False, True):
        for G, k in ((64, 40), (256, 100)):          # G = 256: 8 MX blocks, 8 headers per superblock
            enc = D.encode(D.weights_like(rng, G * 3), D.c2cfg(G, 3, k, **V1))
            for name, bit, planes, prog in _mutations(enc, full, h.port_words, rng, h.layout):
                cases.append((f"{name}/G{G}/{'full' if full else 'draft'}", bit, enc, full, planes, prog))
    # OVERRUN in the middle of a superblock: a G = 256 spec.mx chunk cut after its first word
    enc = D.encode(D.weights_like(rng, 512), D.c2cfg(256, 3, 100, **V1))
    pw = F.plane_words(F.framed(enc, h.layout), False, IW)
    if IW < 256:
        pw["spec_mx"][0] = [(pw["spec_mx"][0][0][0], 1)]
        cases.append(("overrun_in_bitmap", F.ERR_OVERRUN, enc, False, pw, None))
    for name, reg, val in (("mbits8", F.MBITS, 8), ("group100", F.GROUP, 100), ("keep0", F.KEEP, 0),
                           ("keep_gt_group", F.KEEP, 65), ("numel0", F.NUMEL, 0)):
        prog = [(a, val if a == reg else d) for a, d in F.program(good, False)]
        cases.append((f"config_{name}", F.ERR_CONFIG, good, False, {}, prog))
    for name, bit, enc, full, planes, prog in cases:
        await S.expect_error(h, dut, ctx, name, bit, enc, full, planes, prog, rng, good)
        ctx.extra.setdefault("error_cases", []).append(name)
    # NO_BOOK: full mode without VERIF_K written since reset
    await reset(dut, 2, ctx)
    h.reset_agents()
    h.submit(good, True, check=False, planes={}, prog=[(a, d) for a, d in F.program(good, True) if a != F.VERIF_K])
    await h.engine.run_until(lambda: h.error_seen > 0, h.budget(), "no_book: error never raised")
    code = int(dut.error_code.value)
    assert code >> F.ERR_NO_BOOK & 1, f"no_book: error_code 0x{code:02x}"
    ctx.cov.hit("dec.error", "NO_BOOK")


# ----------------------------------------------------------------------------------------- real data

@tb_test()
async def smollm2_sample(dut, ctx):
    """Slices of SmolLM2-135M's linear weights, golden-encoded as C2 (G = 128, m = 3, keep 1.0 and 0.5),
    through the decoder in draft and full mode."""
    await S.smollm2_sample(dut, ctx, [D.c2cfg(128, 3, k) for k in (128, 64)])


@tb_test()
async def job_file(dut, ctx):
    """C2 tensors from a job file (TB_JOB: a pickle with "tensors" [(name, EncodedTensor)], "mode" and optional
    "profile"), the C1 testbench's interface for `cassandra-rtl cosim`; skipped when no job is given."""
    await S.job_file(dut, ctx)
