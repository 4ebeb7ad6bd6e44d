"""Cassandra-2 (MX shared-exponent) decoder: spec.mx (+ verif.codes, verif.rest) in, L bf16 values per beat.

docs/HARDWARE.md section "C2 decoder" is the interface contract; docs/FORMAT.md section 4 the format.
Ports, word framing, register map, output payload and error bits are those of the C1 decoder
(hw/decoder.py), minus the speculation planes: C2 has one speculation plane (``spec.mx``) and no
speculation book.

Per superblock, the ``spec.mx`` chunk is [keep bitmap, n_s bits, only when k < G] [one 8-bit X per MX
block of 32 values] [one (m+2)-bit field (sign, element) per kept value]. The fields can only be placed
once the bitmap is known, so a superblock starts with its whole header in the spec.mx window:

* **merged header** (default): the first beat of a full superblock reads the G bitmap bits, the G/4 X
  bits and its L fields from one window (``Wm = 9L + 160`` holds them for every G <= 128): kept flags
  from the window, X bytes from a G-dependent window slice, fields behind the header (one of a few
  constant shifts); the bitmap register is loaded from the window and its popcount checked (KEEP).
* **HEAD cycles** (a partial last superblock with k < G, or G too large for the window): the bitmap is
  read into the G_max-bit register ``Wm`` bits per cycle (``ceil(n_s / Wm)`` cycles), its popcount
  accumulated and checked; then the first beat reads the X bytes and its fields.
* **BODY**: one beat per cycle. Lane i (value ``pos + i`` of the superblock):

  - kept flag: bit i of the bitmap (the register is shifted right by each beat's count), 1 when k = G;
  - (m+2)-bit field at ``kp_i * (m+2)`` (``kp_i`` = kept lanes before i, a prefix count);
  - X of its MX block: the X register's byte 0, or byte 1 for lanes past the block boundary (the X
    register is loaded on the first beat, which never crosses a block since L <= 32);
  - draft value from (s, elem, X) (``_draft_lane``), bit-exact golden ``decode_draft``;
  - full mode: a draft-zero lane (pruned or elem = 0) takes the delta code ``pz_i`` (draft-zero lanes
    before i) from verif.codes (rank-unary, zero counter, inline escapes: the C1 code path) and an
    8-bit rest field; other lanes a ``7 - c``-bit rest field; rest offsets are a prefix sum of the
    per-lane widths.

  The beat holds the leading lanes complete on every plane the mode reads; the readers then take
  exactly the bits of those lanes. The final beat of a superblock skips every plane's padding and
  loads the next superblock's sizes (no further bubble than the HEAD cycles).
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from ..errors import ConfigError
from ..golden.config import ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, MX_BLOCK
from .bitreader import BitReader, word_layout
from .decoder import (BF16_BITS, CFG_DATA_BITS, ERROR_BITS, FIELD_MAX, MAX_CODE_BITS, DecoderC1, Err,
                      cfg_layout, check_lanes_word, out_layout)
from .zero_counter import prefix_counts

G_MAX = max(ALLOWED_GROUP_SIZES)
MX_MAX = G_MAX // MX_BLOCK                          # MX blocks per superblock (8)
X_BITS = 8                                          # E8M0 shared exponent
X_REGION = X_BITS * MX_MAX                          # at most 64 bits of X per chunk
MX_FIELD_MAX = BF16_MANTISSA_BITS + 2               # (m+2)-bit sign|element field, m <= 7: 9 bits
ELEM_BITS = BF16_MANTISSA_BITS + 1                  # an element has m+1 <= 8 bits
MERGE_GROUP = 128                                   # the default mx window merges headers up to this G
MERGE_HEADER = MERGE_GROUP + X_BITS * MERGE_GROUP // MX_BLOCK    # 160 bits: bitmap + X of G = 128


def popcount(m: Module, bits, name: str):
    """Number of ones of ``bits``: a balanced adder tree of named signals."""
    level = [bits[j] for j in range(len(bits))]
    depth = 0
    while len(level) > 1:
        nxt = []
        for j in range(0, len(level) - 1, 2):
            s = Signal(bits_for(len(bits)), name=f"{name}_p{depth}_{j // 2}")
            m.d.comb += s.eq(level[j] + level[j + 1])
            nxt.append(s)
        if len(level) % 2:
            nxt.append(level[-1])
        level, depth = nxt, depth + 1
    return level[0]


def prefix_sums(m: Module, values: list, width: int, name: str) -> list:
    """Exclusive prefix sums: ``out[j] = sum(values[:j])`` for j in 0..n (Sklansky, named nodes)."""
    n = len(values)
    node = list(values)
    span, level = 1, 0
    while span < n:
        nxt = list(node)
        for j in range(n):
            if (j // span) % 2 == 1:
                src = (j // span) * span - 1
                s = Signal(width, name=f"{name}_l{level}_{j}")
                m.d.comb += s.eq(node[j] + node[src])
                nxt[j] = s
        node, span, level = nxt, span * 2, level + 1
    return [Const(0, width)] + node


def leading_zeros8(m: Module, v, name: str):
    """Leading zeros of an 8-bit value (8 when it is zero)."""
    lz = Signal(4, name=name)
    acc = Const(8, 4)
    for b in range(8):                     # higher bits override: the last match is the leading one
        acc = Mux(v[b], 7 - b, acc)
    m.d.comb += lz.eq(acc)
    return lz


def c2_decoder_signature(lanes: int, word: int) -> dict:
    """The ports of every C2 decoder (v1 here, v2 in hw/decoder_c2_v2.py): docs/HARDWARE.md 2a."""
    plane = stream.Signature(word_layout(word))
    return {
        "spec_mx": In(plane), "verif_codes": In(plane), "verif_rest": In(plane),
        "cfg": In(stream.Signature(cfg_layout)),
        "out": Out(stream.Signature(out_layout(lanes))),
        "busy": Out(1), "error": Out(1), "error_code": Out(ERROR_BITS),
    }


class DecoderC2(DecoderC1):
    """Cassandra-2 decoder, ``lanes`` bf16 values per beat (draft or full mode, set per tensor).

    Parameters
        lanes       L, values per output beat (1..32)
        word        IW, bits per input word on every plane (multiple of 8; default 16 * L: spec.mx needs
                    up to ~10.3 bits per value, so 8 * L would starve at high m and keep ratios)
        window      W, code window of the verif.codes zero counter (>= 24; default max(24, 8 * L))
        mx_window   Wm, window of the spec.mx reader (>= 9 * L + 64: a first beat's L widest fields behind
                    the largest X region; default 9 * L + 160, which also holds the bitmap of G <= 128 so
                    those superblocks need no HEAD cycle); a bitmap in HEAD is read Wm bits per cycle

    Reuses DecoderC1's register file, register writes, config check, k_s and code-lane logic.
    """

    def __init__(self, lanes: int = 8, word: int | None = None, window: int | None = None,
                 mx_window: int | None = None):
        word = 16 * lanes if word is None else word
        window = max(MAX_CODE_BITS, 8 * lanes) if window is None else window
        check_lanes_word(lanes, word, window)
        min_mx = MX_FIELD_MAX * lanes + X_REGION
        mx_window = MX_FIELD_MAX * lanes + MERGE_HEADER if mx_window is None else mx_window
        if not isinstance(mx_window, int) or not min_mx <= mx_window <= 4 * G_MAX:
            raise ConfigError(f"spec.mx window must be {min_mx}..{4 * G_MAX} bits at {lanes} lanes (the X "
                              f"region plus L fields of {MX_FIELD_MAX} bits), got {mx_window!r}")
        self.lanes, self.word, self.window, self.mx_window = lanes, word, window, mx_window
        self.rest_window = FIELD_MAX * lanes            # L rest fields of at most 8 bits
        # Group sizes whose whole header (G bitmap bits + G/4 X bits) and L fields fit in the window: their
        # full superblocks read the bitmap on the first beat instead of in a HEAD cycle.
        self.merge_groups = tuple(g for g in ALLOWED_GROUP_SIZES
                                  if g + X_BITS * g // MX_BLOCK + MX_FIELD_MAX * lanes <= mx_window)
        wiring.Component.__init__(self, c2_decoder_signature(lanes, word))

    # ------------------------------------------------------------------------------------------ header
    def _head_phase(self, m, MX, st):
        """HEAD: take min(bm_left, Wm) bitmap bits per cycle into slot ``slot`` of the bitmap register.

        Returns (take, commit, overrun, keep_err, done)."""
        Wm = self.mx_window
        t = Signal(range(Wm + 1), name="hd_take")
        m.d.comb += t.eq(Mux(st["bm_left"] > Wm, Wm, st["bm_left"]))
        have = Signal(name="hd_have")
        m.d.comb += have.eq(MX.avail >= t)
        bits = Signal(Wm, name="hd_bits")                  # the bitmap bits of this cycle, the rest zero
        m.d.comb += bits.eq(MX.win & ~(Const((1 << Wm) - 1, Wm) << t))
        pc = popcount(m, bits, "hd_pop")
        done = Signal(name="hd_done")
        total = Signal(range(G_MAX + 1), name="hd_total")
        m.d.comb += [done.eq(have & (st["bm_left"] == t)), total.eq(st["pop"] + pc)]
        overrun = Signal(name="hd_overrun")
        keep_err = Signal(name="hd_keep_err")
        m.d.comb += [overrun.eq(~have & MX.end_seen), keep_err.eq(done & (total != st["sb_k"]))]
        return {"take": t, "commit": have, "bits": bits, "done": done, "total": total,
                "overrun": overrun, "keep_err": keep_err}

    # ------------------------------------------------------------------------------------------ mx lanes
    def _mx_lanes(self, m, MX, r, st, prune):
        """Per lane: kept flag, (m+2)-bit field, its X; ``ok`` = the field (and the X bytes) are in."""
        L = self.lanes
        mm = r["m"]
        fw = Signal(range(MX_FIELD_MAX + 1), name="mx_fw")
        fr = Signal(range(BF16_MANTISSA_BITS + 1), name="mx_fr")        # 7 - m: aligns an element to bit 7
        m.d.comb += [fw.eq(mm + 2), fr.eq(BF16_MANTISSA_BITS - mm)]
        # Header bits still in front of the fields: on a superblock's first beat its X bytes, and when the
        # bitmap is read on that beat too ("merged", full superblocks with G in merge_groups) the G bitmap
        # bits before them. Both are one of a few constants, so the shifts below are small muxes.
        merged = Signal(name="mx_merged")                         # the bitmap is in the window this beat
        m.d.comb += merged.eq(st["xfirst"] & st["merge"])
        bmb = Signal(range(G_MAX + 1), name="mx_bmb")
        m.d.comb += bmb.eq(Mux(merged, r["g"], 0))
        hb = Signal(range(G_MAX + X_REGION + 1), name="mx_hb")
        m.d.comb += hb.eq(bmb + Mux(st["xfirst"], st["xbits"], 0))
        fwin = Signal(self.mx_window, name="mx_fwin")
        with m.Switch(hb):
            for sh in sorted({X_BITS * nmx for nmx in range(MX_MAX + 1)} |
                             {g + X_BITS * g // MX_BLOCK for g in self.merge_groups}):
                with m.Case(sh):
                    m.d.comb += fwin.eq(MX.win >> sh)
        xok = Signal(name="mx_xok")
        m.d.comb += xok.eq(hb <= MX.avail)

        bm_src = Signal(G_MAX, name="bm_src")                     # the bitmap, from the window when merged
        m.d.comb += bm_src.eq(Mux(merged, MX.win[:min(G_MAX, self.mx_window)], st["bitmap"]))
        kept = Signal(L, name="kept")
        m.d.comb += kept.eq(Mux(prune, bm_src[:L], Const((1 << L) - 1, L)))
        kp = prefix_counts(m, kept, L, "kp")
        # X of each lane: on the first beat every lane is in block 0 (L <= 32) and X comes from the window.
        xwin = Signal(X_REGION, name="xwin")
        with m.Switch(bmb):
            for b in sorted({0} | set(self.merge_groups)):
                with m.Case(b):
                    m.d.comb += xwin.eq(MX.win[b:b + X_REGION])
        xsrc = Signal(X_REGION, name="xsrc")
        m.d.comb += xsrc.eq(Mux(st["xfirst"], xwin, st["xreg"]))
        lanes = []
        for i in range(L):
            off = Signal(range(self.mx_window + 1), name=f"mx_off{i}")
            f = Signal(MX_FIELD_MAX, name=f"mx_f{i}")
            ok = Signal(name=f"mx_ok{i}")
            x = Signal(X_BITS, name=f"x{i}")
            m.d.comb += [
                off.eq(kp[i] * fw),
                f.eq((fwin >> off) & ~(Const((1 << MX_FIELD_MAX) - 1, MX_FIELD_MAX) << fw)),
                ok.eq(xok & (~kept[i] | (hb + off + fw <= MX.avail))),
                x.eq(Mux(st["mxpos"] + i >= MX_BLOCK, xsrc[X_BITS:2 * X_BITS], xsrc[:X_BITS])),
            ]
            lanes.append({"field": f, "ok": ok, "x": x, "kept": kept[i], "fr": fr})
        return {"lanes": lanes, "kp": kp, "fw": fw, "hb": hb, "xsrc": xsrc, "xok": xok, "merged": merged,
                "bm_src": bm_src}

    def _draft_lane(self, m, r, lane, i):
        """FORMAT section 4: draft bf16 of a lane from (s, elem, X); also its rest width for full mode.

        With ``elem8 = elem << (7-m)`` (the element's MSB at bit 7) and ``sh = min(lz, max(X,1) - 1)``,
        the mantissa is ``(elem8 << sh)[6:0]`` in both the normal and the subnormal case, and the value is
        normal iff bit 7 of ``elem8 << sh`` is set (exponent ``max(X,1) - sh``, else 0); the cut bits
        number ``7 - c = 7 - m + sh``."""
        mm = r["m"]
        f, x = lane["field"], lane["x"]
        elem8 = Signal(ELEM_BITS, name=f"elem8_{i}")
        sign = Signal(name=f"sign{i}")
        m.d.comb += [elem8.eq((f << lane["fr"])[:ELEM_BITS]),
                     sign.eq((f >> (mm + 1))[0])]
        lz = leading_zeros8(m, elem8, f"lz{i}")
        xm1 = Signal(BF16_EXPONENT_BITS, name=f"xm1_{i}")          # max(X,1) - 1
        m.d.comb += xm1.eq(Mux(x == 0, 0, x - 1))
        sh = Signal(4, name=f"sh{i}")
        m.d.comb += sh.eq(Mux(xm1 < lz, xm1, lz))
        norm = Signal(ELEM_BITS, name=f"norm{i}")
        m.d.comb += norm.eq((elem8 << sh)[:ELEM_BITS])
        exp = Signal(BF16_EXPONENT_BITS, name=f"dexp{i}")
        m.d.comb += exp.eq(Mux(norm[7], xm1 + 1 - sh, 0))
        nz = Signal(name=f"nz{i}")
        m.d.comb += nz.eq(lane["kept"] & (elem8 != 0))
        draft = Signal(BF16_BITS, name=f"draft{i}")
        m.d.comb += draft.eq(Mux(lane["kept"], Cat(norm[:BF16_MANTISSA_BITS], exp, sign), 0))
        width = Signal(4, name=f"rest_w{i}")                       # rest field: 8 bits if draft-zero
        m.d.comb += width.eq(Mux(nz, lane["fr"] + sh, FIELD_MAX))
        lane.update(draft=draft, nz=nz, rest_w=width)

    # ---------------------------------------------------------------------------------------- verif lanes
    def _verif_lanes(self, m, V, R, r, mx):
        """Full mode: delta codes of draft-zero lanes, rest fields of every lane, the exact values."""
        L = self.lanes
        lanes = mx["lanes"]
        dz = Signal(L, name="dz")
        m.d.comb += dz.eq(Cat(*[~ln["nz"] for ln in lanes]))
        pz = prefix_counts(m, dz, L, "pz")                      # draft-zero lanes before lane i
        ver = self._code_lanes(m, V, r["verif_k"], r["verif_tab"], "ver")
        vok_prefix = [Const(1, 1)]
        for j in range(L):
            vok_prefix.append(vok_prefix[-1] & ver["ok"][j])
        vok_arr = Array(Cat(*vok_prefix[1:]))
        vsym_arr = Array(ver["sym"])
        off = prefix_sums(m, [ln["rest_w"] for ln in lanes], bits_for(FIELD_MAX * L), "rest_off")
        for i, ln in enumerate(lanes):
            f = Signal(FIELD_MAX, name=f"rest_f{i}")
            delta = Signal(BF16_EXPONENT_BITS, name=f"delta{i}")
            neg = Signal(name=f"neg{i}")
            e = Signal(BF16_EXPONENT_BITS, name=f"vexp{i}")
            full = Signal(BF16_BITS, name=f"full{i}")
            v_ok = Signal(name=f"v_ok{i}")
            rest_ok = Signal(name=f"rest_ok{i}")
            m.d.comb += [
                f.eq((R.win >> off[i]) & ~(Const(0xFF, FIELD_MAX) << ln["rest_w"])),
                rest_ok.eq(off[i + 1] <= R.avail),
                v_ok.eq(ln["nz"] | vok_arr[pz[i]]),
                delta.eq(vsym_arr[pz[i]][:BF16_EXPONENT_BITS]),
                neg.eq(~ln["nz"] & (delta > ln["x"])),
                e.eq(ln["x"] - delta),
                full.eq(Mux(ln["nz"], ln["draft"] | f, Cat(f[:BF16_MANTISSA_BITS], e, f[BF16_MANTISSA_BITS]))),
            ]
            ln.update(full=full, v_ok=v_ok, rest_ok=rest_ok, neg=neg)
        return {"ver": ver, "pz": pz, "off": off}

    # ------------------------------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        L = self.lanes
        r, start, clear, busy, err, raise_err = self._control_signals(m)
        full = r["full"]

        MX = BitReader(self.word, self.mx_window)
        V = BitReader(self.word, self.window)
        R = BitReader(self.word, self.rest_window)
        m.submodules.spec_mx_rd, m.submodules.verif_codes_rd, m.submodules.verif_rest_rd = MX, V, R
        for name, rd in (("spec_mx", MX), ("verif_codes", V), ("verif_rest", R)):
            wiring.connect(m, wiring.flipped(getattr(self, name)), rd.inp)

        # Tensor / superblock state.
        st = {
            "remaining": Signal(CFG_DATA_BITS, name="remaining"),   # values of the tensor not yet emitted
            "sb_left": Signal(range(G_MAX + 1), name="sb_left"),    # values of the superblock not yet emitted
            "sb_k": Signal(range(G_MAX + 1), name="sb_k"),          # k_s
            "xbits": Signal(range(X_REGION + 1), name="sb_xbits"),  # 8 * ceil(n_s / 32)
            "head": Signal(name="head"),                            # reading the bitmap (HEAD cycles)
            "merge": Signal(name="merge"),                          # the first beat reads the bitmap
            "bm_left": Signal(range(G_MAX + 1), name="bm_left"),
            "slot": Signal(range(ceil_log2(G_MAX) + 2), name="bm_slot"),
            "pop": Signal(range(G_MAX + 1), name="bm_pop"),
            "bitmap": Signal(G_MAX, name="bitmap"),
            "xfirst": Signal(name="xfirst"),                        # next beat is the superblock's first
            "xreg": Signal(X_REGION, name="xreg"),                  # X of the current block, then the next
            "mxpos": Signal(range(MX_BLOCK), name="mxpos"),         # position inside the current MX block
        }
        prune = Signal(name="prune")
        m.d.comb += prune.eq(r["k"] < r["g"])
        need = Signal(range(L + 1), name="need")
        m.d.comb += need.eq(Mux(st["sb_left"] < L, st["sb_left"], L))
        body = Signal(name="body")
        m.d.comb += body.eq(busy & ~st["head"])

        hd = self._head_phase(m, MX, st)
        mx = self._mx_lanes(m, MX, r, st, prune)
        for i, ln in enumerate(mx["lanes"]):
            self._draft_lane(m, r, ln, i)
        vr = self._verif_lanes(m, V, R, r, mx)
        lanes = mx["lanes"]

        # ---- lane fit: the leading lanes complete on every plane the mode reads
        mfit = [Const(1, 1)]                  # lanes the spec.mx plane allows (for the other overrun checks)
        fit = [Const(1, 1)]
        for i, ln in enumerate(lanes):
            mok = ln["ok"] & (i < need)
            mfit.append(mfit[-1] & mok)
            fit.append(fit[-1] & mok & (~full | (ln["rest_ok"] & ln["v_ok"])))
        n_out = Signal(range(L + 1), name="n_out")
        m.d.comb += n_out.eq(sum(fit[1:]))
        n_mfit = Signal(range(L + 1), name="n_mfit")
        m.d.comb += n_mfit.eq(sum(mfit[1:]))

        # ---- per-plane consumption for n_out lanes
        kp, pz, ver = mx["kp"], vr["pz"], vr["ver"]
        mx_take = Signal(range(self.mx_window + 1), name="mx_take")
        m.d.comb += mx_take.eq(mx["hb"] + Array(kp)[n_out] * mx["fw"])
        np_out = Signal(range(L + 1), name="np_out")
        m.d.comb += np_out.eq(Array(pz)[n_out])
        ver_take = Signal(range(self.window + 9), name="ver_take")
        m.d.comb += ver_take.eq(Array([Const(0, 1)] + ver["end_bits"])[np_out])
        rest_take = Signal(range(self.rest_window + 1), name="rest_take")
        m.d.comb += rest_take.eq(Array(vr["off"])[n_out])

        # ---- errors of a beat
        np_need = Signal(range(L + 1), name="np_need")      # delta codes the spec.mx-complete lanes need
        m.d.comb += np_need.eq(Array(pz)[n_mfit])
        ver_ce, ver_ov = self._code_errors(m, V, ver, np_need, r["verif_k"], "ver")
        mx_ov = Signal(name="mx_ov")
        m.d.comb += mx_ov.eq(MX.end_seen & Cat(*[~ln["ok"] & (i < need) for i, ln in enumerate(lanes)]).any())
        rest_ov = Signal(name="rest_ov")
        m.d.comb += rest_ov.eq(R.end_seen & Cat(*[mfit[i + 1] & ~ln["rest_ok"] for i, ln in enumerate(lanes)]).any())
        neg = Signal(name="neg_exp")                 # a draft-zero lane's delta exceeds its block's X
        m.d.comb += neg.eq(Cat(*[fit[i + 1] & ln["neg"] for i, ln in enumerate(lanes)]).any())

        finishing = Signal(name="finishing")
        m.d.comb += finishing.eq((n_out == st["sb_left"]) & (n_out != 0))
        skip_ok = MX.skip_ok & (~full | (V.skip_ok & R.skip_ok))
        skip_err = MX.skip_err | (full & (V.skip_err | R.skip_err))

        adv = Signal(name="adv")
        m.d.comb += adv.eq(~self.out.valid | self.out.ready)
        go = Signal(name="go")
        err_now = Signal(ERROR_BITS)
        with m.If(body):
            m.d.comb += [
                err_now[Err.CODE].eq(full & (ver_ce | neg)),
                err_now[Err.OVERRUN].eq(mx_ov | (full & (ver_ov | rest_ov))),
                err_now[Err.TOO_LONG].eq(adv & finishing & skip_err),
                err_now[Err.KEEP].eq(mx["merged"] & mx["xok"] & (hd["total"] != st["sb_k"])),
            ]
        with m.If(busy & st["head"]):
            m.d.comb += [err_now[Err.OVERRUN].eq(hd["overrun"]), err_now[Err.KEEP].eq(hd["keep_err"])]
        m.d.comb += go.eq(body & adv & (n_out != 0) & ~err_now.any() & (~finishing | skip_ok))
        hd_go = Signal(name="hd_go")
        m.d.comb += hd_go.eq(busy & st["head"] & hd["commit"] & ~err_now.any())

        # ---- readers' controls
        for rd, reads in ((MX, Const(1, 1)), (V, full), (R, full)):
            m.d.comb += [rd.enable.eq(busy & reads), rd.drain.eq(err.any() & ~busy),
                         rd.flush.eq(raise_err.any())]
        m.d.comb += [
            MX.take.eq(Mux(st["head"], hd["take"], mx_take)), MX.skip.eq(~st["head"] & finishing),
            MX.commit.eq(go | hd_go),
            V.take.eq(ver_take), R.take.eq(rest_take), V.skip.eq(finishing), R.skip.eq(finishing),
            V.commit.eq(go & full), R.commit.eq(go & full),
        ]

        # ---- output beat
        with m.If(adv):
            m.d.sync += self.out.valid.eq(go)
        with m.If(go):
            m.d.sync += [
                self.out.payload.count.eq(n_out),
                self.out.payload.sb_end.eq(finishing),
                self.out.payload.last.eq(finishing & (st["remaining"] == n_out)),
            ]
            for i, ln in enumerate(lanes):
                m.d.sync += self.out.payload.lanes[i].eq(Mux(i < n_out, Mux(full, ln["full"], ln["draft"]), 0))

        self._control(m, r, st, hd, mx, start, clear, busy, err, raise_err, err_now, go, hd_go, finishing,
                      n_out, prune)
        return m

    # -------------------------------------------------------------------------------------- control state
    def _control(self, m, r, st, hd, mx, start, clear, busy, err, raise_err, err_now, go, hd_go, finishing,
                 n_out, prune):
        Wm = self.mx_window
        rem_next = Signal(CFG_DATA_BITS, name="rem_next")
        n_next = Signal(range(G_MAX + 1), name="n_next")
        m.d.comb += [rem_next.eq(Mux(busy, st["remaining"] - n_out, r["numel"])),
                     n_next.eq(Mux(rem_next >= r["g"], r["g"], rem_next))]
        ks_next = self._kept_in(m, r, n_next)
        xbits_next = Signal(range(X_REGION + 1), name="xbits_next")
        m.d.comb += xbits_next.eq(((n_next + MX_BLOCK - 1) >> 5) << 3)

        g_merges = Const(0, 1)
        for g in self.merge_groups:
            g_merges = g_merges | (r["g"] == g)
        merge_next = Signal(name="merge_next")
        m.d.comb += merge_next.eq(prune & (n_next == r["g"]) & g_merges)

        def load_superblock():
            """The next superblock's sizes. A chunk with a bitmap is read in HEAD cycles first, unless the
            whole header fits the window next to the first beat's fields (``merge``)."""
            return [st["sb_left"].eq(n_next), st["sb_k"].eq(ks_next), st["xbits"].eq(xbits_next),
                    st["bm_left"].eq(n_next), st["slot"].eq(0), st["pop"].eq(0),
                    st["head"].eq(prune & ~merge_next), st["merge"].eq(merge_next),
                    st["xfirst"].eq(1), st["mxpos"].eq(0)]

        cfg_bad = self._config_error(r)
        no_book = r["full"] & ~r["verif_loaded"]
        with m.If(start & ~busy & ~err.any()):
            m.d.comb += [raise_err[Err.CONFIG].eq(cfg_bad), raise_err[Err.NO_BOOK].eq(~cfg_bad & no_book)]
            with m.If(~cfg_bad & ~no_book):
                m.d.sync += [busy.eq(1), st["remaining"].eq(rem_next)] + load_superblock()
        with m.If(busy):
            m.d.comb += raise_err.eq(err_now)

        # HEAD: bitmap slot writes and popcount.
        with m.If(hd_go):
            with m.Switch(st["slot"]):
                for j in range(-(-G_MAX // Wm)):
                    lo, hi = j * Wm, min(G_MAX, (j + 1) * Wm)
                    with m.Case(j):
                        m.d.sync += st["bitmap"][lo:hi].eq(hd["bits"][:hi - lo])
            m.d.sync += [st["slot"].eq(st["slot"] + 1), st["bm_left"].eq(st["bm_left"] - hd["take"]),
                         st["pop"].eq(hd["total"])]
            with m.If(hd["done"]):
                m.d.sync += st["head"].eq(0)

        # BODY: consume the bitmap and the MX-block position.
        pos_next = Signal(range(MX_BLOCK + self.lanes + 1), name="mxpos_next")
        m.d.comb += pos_next.eq(st["mxpos"] + n_out)
        with m.If(go):
            m.d.sync += [st["remaining"].eq(rem_next), st["xfirst"].eq(0),
                         st["bitmap"].eq(Array(mx["bm_src"] >> j for j in range(self.lanes + 1))[n_out])]
            with m.If(pos_next >= MX_BLOCK):
                m.d.sync += [st["mxpos"].eq(pos_next - MX_BLOCK), st["xreg"].eq(mx["xsrc"] >> X_BITS)]
            with m.Else():
                m.d.sync += [st["mxpos"].eq(pos_next), st["xreg"].eq(mx["xsrc"])]
            with m.If(finishing):
                m.d.sync += load_superblock()
                with m.If(rem_next == 0):
                    m.d.sync += busy.eq(0)
            with m.Else():
                m.d.sync += st["sb_left"].eq(st["sb_left"] - n_out)
        with m.If(raise_err.any()):
            m.d.sync += [err.eq(err | raise_err), busy.eq(0)]
        with m.Elif(clear & ~busy):
            m.d.sync += err.eq(0)
