"""Cassandra-2 decoder v2: the decoupled, pipelined C2 decoder (issue 12). Decodes format v1 bit for bit.

docs/HARDWARE.md section 2c is the contract; the port-level interface (stream ports and payloads, register
map, busy / error / error_code, error bits, sticky error with drain and CLEAR_ERROR, chunk framing) is
v1's (section 2a), so every harness runs it by config name.

Why v1 is slow: its one-cycle loop runs spec.mx fields -> elements -> draft-zero flags -> verif code lanes
and rest prefix sums -> lane fit -> every reader's take. But C2's draft reads no variable-length field:
every superblock's spec.mx chunk has a length that follows from (G, m, k, n_s), and once the keep bitmap
is known the bits of every beat are known too. So the v2 draft path has no cross-plane loop at all:

  spec_mx --> INGEST (per-chunk word counter; framing checked here: OVERRUN / TOO_LONG / padding)
                |-- words holding bitmap bits --> BITMAP FIFO (whole words, no shifter)
                '-- words holding X bytes and fields --> TakeRing F (hw/take_ring.py)
  ISSUE  (stage I, registered): a beat's kept flags = L bits of the bitmap head word, prefix counts,
         field offsets kp_i*(m+2) (+ the X bytes on the superblock's first beat), its take; KEEP check.
  FETCH  (stage S2, registered): fires when F's avail covers I.take (a registered compare); registers the
         F window (X region + L fields) and advances F by I.take.
  DRAFT  (stage S3, registered): fields at their offsets, the block's X (one MX block per beat, since
         L divides 32), draft value per lane (FORMAT section 4); in full mode also the draft-zero flags,
         their prefix counts and the rest-field offsets (prefix sum of widths).
  VERIFY -> OUT (registered): full mode takes the beat's rest bits from verif.rest (registered take) and
         its delta codes from the code ring of hw/code_plane.py, which parses verif.codes on its own,
         ahead of the beats; the exact values are assembled into the output register.

Loops that must close in one cycle (logic depth, unit gates, estimated):
  * TakeRing F pointer: avail (from nwords, off) >= I.take -> fire -> off/head/nwords update (~20);
  * ISSUE: bitmap position / superblock counters -> next beat's registers, enabled by fire (~30, the
    data path through popcount and the offset multiplies ends in a register, it is not a loop);
  * verif.rest reader (v1 BitReader): avail >= S3.rest_take -> commit -> pointer (~30);
  * verif.codes: hw/code_plane.py (shared with the C1 decoder v2) parses a fixed 16 bits per cycle into
    a ring of codes; its loops are the segment position (~8) and the zero-run carry / replay (~15);
    the beat pops its codes (pointer add).
Measured (generic flow, decoder_c2v2_l8): critical path 37 levels, 1.96 ns (~511 MHz, 1.41x the PE), a
feed-forward path from the bitmap FIFO head through the kept flags and prefix count into stage I.
Errors are raised from registered state or at the stage that would otherwise act on bad data; a beat
that errs is not issued, so no wrong value is ever emitted.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.utils import bits_for, ceil_log2, exact_log2

from ..errors import ConfigError
from ..golden.config import ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, MX_BLOCK
from .bitreader import BitReader, thermometer
from .decoder import BF16_BITS, CFG_DATA_BITS, ERROR_BITS, FIELD_MAX, DecoderC1, Err
from .decoder_c2 import DecoderC2, c2_decoder_signature, prefix_sums
from .code_plane import END_LONG_RUN, END_PAD_ERR, CodePlane
from .code_plane import Kind as CpKind
from .take_ring import TakeRing
from .zero_counter import prefix_counts

G_MAX = max(ALLOWED_GROUP_SIZES)
X_BITS = 8
X_REGION = X_BITS * G_MAX // MX_BLOCK            # 64: the X bytes of a superblock
MXF = BF16_MANTISSA_BITS + 2                     # widest (m+2)-bit spec.mx field: 9
MAX_LANES = 32                                   # a beat lies inside one MX block: L divides 32



def _pow2(v) -> bool:
    return isinstance(v, int) and v >= 1 and not v & (v - 1)


class DecoderC2v2(DecoderC1):
    """Cassandra-2 decoder v2, ``lanes`` bf16 values per beat in draft mode, ``verif_lanes`` in full mode.

    Parameters
        lanes        L, draft values per beat: a power of two 1..32 (a beat then lies in one MX block)
        word         IW, bits per input word on every plane: a power of two >= 64 with 9L <= IW + 1 (a
                     beat's fields fit the two-word view from any offset); default max(64, 16 * L)
        verif_lanes  Lv, full-mode values per beat: a power of two <= L (default L / 2, at least 1: full
                     mode reads ~3x the bits per value of the draft, so at one memory bandwidth it needs
                     fewer values per cycle)
        code_seg     S, bits of verif.codes the code plane parses per cycle (hw/code_plane.py; default 16)
        code_lanes   Lc, codes one code-plane pass delivers (default min(S, max(7, Lv + 3)); a segment with
                     more codes is re-parsed from the next code, one bubble in the code plane only)
        code_depth   entries of the code ring (default: the power of two >= 2 (Lc + 1) + 2 (Lv + 1), so the
                     plane's room check never holds it back while a beat waits; 32 at L = 8)
        bitmap_words depth of the bitmap word FIFO (default G_MAX / IW + 1: the next superblock's bitmap
                     is taken in while the current one is decoded, so superblocks follow without a bubble)
    """

    def __init__(self, lanes: int = 8, word: int | None = None, verif_lanes: int | None = None,
                 code_seg: int = 16, code_lanes: int | None = None, code_depth: int | None = None,
                 bitmap_words: int | None = None):
        if not _pow2(lanes) or lanes > MAX_LANES:
            raise ConfigError(f"lanes must be a power of two 1..{MAX_LANES} (a beat lies in one MX block), "
                              f"got {lanes!r}")
        word = max(64, 16 * lanes) if word is None else word
        if not _pow2(word) or word < 64 or word > 1024 or MXF * lanes > word + 1:
            raise ConfigError(f"input word must be a power of two in 64..1024 bits with 9 * lanes <= word + 1 "
                              f"(a beat's fields fit two words from any offset), got {word!r} at {lanes} lanes")
        verif_lanes = max(1, lanes // 2) if verif_lanes is None else verif_lanes
        if not _pow2(verif_lanes) or verif_lanes > lanes:
            raise ConfigError(f"verif_lanes must be a power of two 1..lanes ({lanes}), got {verif_lanes!r}")
        code_lanes = min(code_seg, max(7, verif_lanes + 3)) if code_lanes is None else code_lanes
        if code_depth is None:          # room for two passes and two beats' pops: the plane never waits
            code_depth = 1 << ceil_log2(2 * (code_lanes + 1) + 2 * (verif_lanes + 1))
        code_depth = CodePlane.resolve(word, code_seg, code_lanes, code_depth, verif_lanes + 1)[3]  # or ConfigError
        bitmap_words = G_MAX // word + 1 if bitmap_words is None else bitmap_words
        if not isinstance(bitmap_words, int) or not 1 <= bitmap_words <= 16:
            raise ConfigError(f"bitmap_words must be 1..16, got {bitmap_words!r}")
        self.lanes, self.word, self.verif_lanes = lanes, word, verif_lanes
        self.code_seg, self.code_lanes, self.code_depth = code_seg, code_lanes, code_depth
        self.bitmap_words = bitmap_words
        # F window: the X region + L widest fields (at most the two-word view)
        self.fwin = min(2 * word, X_REGION + MXF * lanes)
        wiring.Component.__init__(self, c2_decoder_signature(lanes, word))

    # ------------------------------------------------------------------------------------------ layout
    def _layout(self, m, r, n, ks, prune, name):
        """Registered spec.mx chunk layout of a superblock of ``n`` values with ``ks`` kept (one cycle late)."""
        IW = self.word
        wb = exact_log2(IW)
        bm = Signal(range(G_MAX + 1), name=f"{name}_bm_c")
        xb = Signal(range(X_REGION + 1), name=f"{name}_xb_c")
        bits = Signal(range(G_MAX + X_REGION + MXF * G_MAX + 1), name=f"{name}_bits_c")
        m.d.comb += [bm.eq(Mux(prune, n, 0)), xb.eq(((n + MX_BLOCK - 1) >> 5) << 3),
                     bits.eq(bm + xb + ks * (r["m"] + 2))]
        max_words = -(-(G_MAX + X_REGION + MXF * G_MAX) // IW)
        lay = {"n": Signal(range(G_MAX + 1), name=f"{name}_n"),
               "ks": Signal(range(G_MAX + 1), name=f"{name}_ks"),
               "xb": Signal(range(X_REGION + 1), name=f"{name}_xb"),
               "words": Signal(range(max_words + 1), name=f"{name}_words"),      # words of the chunk
               "bm_words": Signal(range(G_MAX // IW + 2), name=f"{name}_bm_words"),  # words with bitmap bits
               "f_first": Signal(range(G_MAX // IW + 1), name=f"{name}_f_first"),    # first word with X bits
               "f_off": Signal(wb, name=f"{name}_f_off"),                           # where X starts in it
               "pad": Signal(wb, name=f"{name}_pad"),                               # content bits of the last word
               "split": Signal(name=f"{name}_split")}
        m.d.sync += [
            lay["n"].eq(n), lay["ks"].eq(ks), lay["xb"].eq(xb),
            lay["words"].eq((bits + IW - 1) >> wb),
            lay["bm_words"].eq((bm + IW - 1) >> wb), lay["f_first"].eq(bm >> wb),
            lay["f_off"].eq(bm[:wb]), lay["pad"].eq(bits[:wb]),
            # the first beat's X bytes and fields would not fit the two-word view: an X-only step first
            lay["split"].eq((bm[:wb] + xb + (r["m"] + 2) * self.lanes > 2 * IW)
                            | (xb + (r["m"] + 2) * self.lanes > self.fwin)),
        ]
        return lay

    # ------------------------------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        L, Lv, IW = self.lanes, self.verif_lanes, self.word
        wb = exact_log2(IW)
        r, start, clear, busy, err, raise_err = self._control_signals(m)
        full = r["full"]
        prune = Signal(name="prune")
        m.d.comb += prune.eq(r["k"] < r["g"])
        fw = Signal(4, name="fw")                                      # m + 2
        fr = Signal(3, name="fr")                                      # 7 - m
        m.d.comb += [fw.eq(r["m"] + 2), fr.eq(BF16_MANTISSA_BITS - r["m"])]
        bn = Signal(range(L + 1), name="beat_n")                       # values per beat of the mode
        m.d.comb += bn.eq(Mux(full, Lv, L))
        flush = Signal(name="flush")                   # an error abandons the tensor: empty every buffer
        m.d.comb += flush.eq(raise_err.any())

        # ---- tensor setup: the chunk layouts of a full superblock and of the last one. k_s of the last
        # superblock by a radix-4 serial multiply (no wide multiplier in any one-cycle path); 10 cycles.
        setup = Signal(range(16), name="setup")                        # 0 = idle / done
        lay_ok = Signal(name="lay_ok")
        n_last = Signal(range(G_MAX + 1), name="n_last")
        mul_a = Signal(2 * bits_for(G_MAX) + 2, name="mul_a")        # k << 2i
        mul_b = Signal(bits_for(G_MAX), name="mul_b")                 # n_last >> 2i
        mul_acc = Signal(2 * bits_for(G_MAX) + 2, name="mul_acc")    # k * n_last
        ks_last = Signal(range(G_MAX + 1), name="ks_last")
        nsb = Signal(CFG_DATA_BITS, name="nsb")                        # superblocks of the tensor
        lay_full = self._layout(m, r, r["g"], r["k"], prune, "lf")
        lay_last = self._layout(m, r, n_last, ks_last, prune, "ll")
        g_mask = Signal(bits_for(G_MAX), name="g_mask")
        m.d.comb += g_mask.eq(r["g"] - 1)
        with m.If(setup != 0):
            m.d.sync += setup.eq(setup + 1)
            with m.Switch(setup):
                with m.Case(1):
                    m.d.sync += [n_last.eq(((r["numel"] - 1) & g_mask) + 1), mul_acc.eq(0), mul_a.eq(r["k"])]
                    with m.Switch(r["g"]):
                        for g in ALLOWED_GROUP_SIZES:
                            with m.Case(g):
                                m.d.sync += nsb.eq((r["numel"] + g - 1) >> exact_log2(g))
                with m.Case(2):
                    m.d.sync += mul_b.eq(n_last)
                with m.Case(3, 4, 5, 6, 7):
                    m.d.sync += [mul_acc.eq(mul_acc + mul_a * mul_b[:2]), mul_a.eq(mul_a << 2),
                                 mul_b.eq(mul_b >> 2)]
                with m.Case(8):
                    with m.Switch(r["g"]):
                        for g in ALLOWED_GROUP_SIZES:
                            with m.Case(g):
                                m.d.sync += ks_last.eq((mul_acc + g - 1) >> exact_log2(g))
                with m.Case(9):                 # the layouts are registered from ks_last in this cycle
                    m.d.sync += [setup.eq(0), lay_ok.eq(1)]
        f_init = Signal(name="f_init")                 # the F offset of the tensor's first chunk is not set yet
        started = Signal(name="started")                              # decoding (layouts valid)
        m.d.comb += started.eq(busy & lay_ok)

        # ---- spec.mx ingest: per-chunk word counter, bitmap words to the FIFO, X/field words to F
        F = TakeRing(IW, self.fwin, slots=3, take_max=self.fwin)
        m.submodules.spec_mx_ring = F
        nbw = self.bitmap_words
        bm_slots = Array(Signal(IW, name=f"bm_slot{i}") for i in range(nbw))
        bm_head = Signal(range(nbw), name="bm_head")
        bm_count = Signal(range(nbw + 1), name="bm_count")
        in_j = Signal(range(G_MAX * (MXF + 2) // 8 + 2), name="in_j")          # word index in the chunk
        in_rem = Signal(CFG_DATA_BITS, name="in_rem")                            # values not yet ingested
        in_on = Signal(name="in_on")
        in_last = Signal(name="in_last")
        m.d.comb += in_last.eq(in_rem <= r["g"])
        li = {k: Mux(in_last, lay_last[k], lay_full[k]) for k in lay_full}
        to_bm = Signal(name="to_bm")
        to_f = Signal(name="to_f")
        m.d.comb += [to_bm.eq(prune & (in_j < li["bm_words"])), to_f.eq(in_j >= li["f_first"])]
        mx = self.spec_mx
        drain = Signal(name="drain")
        m.d.comb += drain.eq(err.any() & ~busy)
        m.d.comb += mx.ready.eq(drain | (in_on & started & (~to_bm | (bm_count < nbw)) & (~to_f | F.inp.ready)))
        acc = Signal(name="mx_accept")
        m.d.comb += acc.eq(mx.valid & mx.ready & ~drain)
        final_w = Signal(name="in_final_word")
        m.d.comb += final_w.eq(in_j == li["words"] - 1)
        pad_bad = Signal(name="in_pad_bad")
        m.d.comb += pad_bad.eq((li["pad"] != 0) & (mx.payload.data & ~thermometer(li["pad"], IW)).any())
        in_err_ov = Signal(name="in_err_overrun")
        in_err_tl = Signal(name="in_err_too_long")
        m.d.comb += [in_err_ov.eq(acc & mx.payload.last & ~final_w),
                     in_err_tl.eq(acc & final_w & (~mx.payload.last | pad_bad))]
        m.d.comb += [F.inp.valid.eq(acc & to_f), F.inp.payload.eq(mx.payload.data), F.flush.eq(flush | drain)]
        bm_push = Signal(name="bm_push")
        bm_pop = Signal(name="bm_pop")
        m.d.comb += bm_push.eq(acc & to_bm)
        bm_wslot = Signal(range(nbw), name="bm_wslot")
        m.d.comb += bm_wslot.eq(Mux(bm_head + bm_count >= nbw, bm_head + bm_count - nbw, bm_head + bm_count))
        with m.If(bm_push):
            m.d.sync += bm_slots[bm_wslot].eq(mx.payload.data)
        with m.If(flush | drain):
            m.d.sync += [bm_head.eq(0), bm_count.eq(0)]
        with m.Else():
            m.d.sync += bm_count.eq(bm_count + bm_push - bm_pop)
            with m.If(bm_pop):
                m.d.sync += bm_head.eq(Mux(bm_head == nbw - 1, 0, bm_head + 1))
        with m.If(acc):
            with m.If(final_w):
                m.d.sync += [in_j.eq(0), in_rem.eq(in_rem - li["n"])]
                with m.If(in_rem == li["n"]):
                    m.d.sync += in_on.eq(0)
            with m.Else():
                m.d.sync += in_j.eq(in_j + 1)

        # ---- ISSUE (stage I)
        sb_left = Signal(range(G_MAX + 1), name="is_sb_left")  # values of the superblock not yet issued
        sb_last = Signal(name="is_sb_last")                    # the current superblock is the tensor's last
        nxt_last = Signal(name="is_nxt_last")                  # the next one is
        after = Signal(CFG_DATA_BITS, name="is_after")         # values after the current superblock
        xpend = Signal(name="is_xpend")                        # the next beat reads the X region
        vpos = Signal(range(G_MAX + 1), name="is_vpos")        # values issued in this superblock
        kacc = Signal(range(G_MAX + 1), name="is_kacc")        # kept values issued in this superblock
        is_on = Signal(name="is_on")
        sb_init = Signal(name="is_sb_init")                    # START: load the first superblock

        def load_superblock(t):
            """Counters of a superblock that starts with ``t`` values left in the tensor (t a register)."""
            n_sb = Mux(t <= r["g"], t, r["g"])
            return [sb_left.eq(n_sb), sb_last.eq(t <= r["g"]), nxt_last.eq(t <= 2 * r["g"]),
                    after.eq(t - n_sb), xpend.eq(1), vpos.eq(0), kacc.eq(0)]

        ls = {k: Mux(sb_last, lay_last[k], lay_full[k]) for k in lay_full}
        n = Signal(range(L + 1), name="is_n")
        m.d.comb += n.eq(Mux(sb_left < bn, sb_left, bn))
        pseudo = Signal(name="is_pseudo")                      # X-only step (split superblocks)
        m.d.comb += pseudo.eq(xpend & ls["split"])
        bm_word = Signal(IW, name="bm_word")
        m.d.comb += bm_word.eq(bm_slots[bm_head])
        lane_mask = Signal(L, name="is_lane_mask")
        m.d.comb += lane_mask.eq(Mux(pseudo, 0, thermometer(n, L)))
        kept = Signal(L, name="is_kept")
        m.d.comb += kept.eq(Mux(prune, bm_word.bit_select(vpos[:wb], L), Const((1 << L) - 1, L)) & lane_mask)
        kp = prefix_counts(m, kept, L, "is_kp")
        xbase = Signal(range(X_REGION + 1), name="is_xbase")
        m.d.comb += xbase.eq(Mux(xpend, ls["xb"], 0))
        take = Signal(range(self.fwin + 1), name="is_take")
        m.d.comb += take.eq(xbase + kp[L] * fw)
        final = Signal(name="is_final")
        m.d.comb += final.eq(~pseudo & (n == sb_left))
        kept_now = Signal(range(G_MAX + L + 1), name="is_kept_now")
        m.d.comb += kept_now.eq(kacc + kp[L])
        keep_bad = Signal(name="is_keep_bad")
        m.d.comb += keep_bad.eq((kept_now > ls["ks"]) | (final & (kept_now != ls["ks"])))
        bm_ok = Signal(name="is_bm_ok")
        m.d.comb += bm_ok.eq(~prune | pseudo | (bm_count != 0))

        I = {"v": Signal(name="I_valid"), "take": Signal(len(take), name="I_take"),
             "kept": Signal(L, name="I_kept"), "n": Signal(range(L + 1), name="I_n"),
             "kp": [Signal(range(L + 1), name=f"I_kp{i}") for i in range(L)], "xb": Signal(4, name="I_xb"),
             "xload": Signal(name="I_xload"), "blk": Signal(3, name="I_blk"), "final": Signal(name="I_final"),
             "last": Signal(name="I_last"), "pseudo": Signal(name="I_pseudo"),
             "next_off": Signal(wb, name="I_next_off")}
        fire1 = Signal(name="fire1")
        i_free = Signal(name="i_free")
        m.d.comb += i_free.eq(~I["v"] | fire1)
        can_issue = Signal(name="can_issue")
        m.d.comb += can_issue.eq(is_on & started & ~f_init & ~sb_init & bm_ok & i_free)
        issue = Signal(name="issue")
        m.d.comb += issue.eq(can_issue & ~keep_bad)
        keep_err = Signal(name="keep_err")
        m.d.comb += keep_err.eq(can_issue & keep_bad)
        with m.If(i_free):
            m.d.sync += I["v"].eq(issue)
        with m.If(issue):
            m.d.sync += [I["take"].eq(take), I["kept"].eq(kept), I["n"].eq(Mux(pseudo, 0, n)),
                         I["xload"].eq(xpend), I["blk"].eq(vpos[5:8]), I["final"].eq(final),
                         I["last"].eq(final & sb_last), I["pseudo"].eq(pseudo),
                         I["next_off"].eq(Mux(nxt_last, lay_last["f_off"], lay_full["f_off"]))]
            m.d.sync += [I["kp"][i].eq(kp[i]) for i in range(L)] + [I["xb"].eq(xbase >> 3)]
            m.d.sync += xpend.eq(0)
            with m.If(final):
                m.d.sync += load_superblock(after)
                with m.If(sb_last):
                    m.d.sync += is_on.eq(0)
            with m.Elif(~pseudo):
                m.d.sync += [vpos.eq(vpos + n), kacc.eq(kept_now), sb_left.eq(sb_left - n)]
        m.d.comb += bm_pop.eq(issue & ~pseudo & prune & (final | ((vpos[:wb] + n) >> wb != 0)))
        with m.If(sb_init):
            m.d.sync += [sb_init.eq(0)] + load_superblock(r["numel"])

        # ---- FETCH (stage S2): fires when F holds the beat's bits
        S2 = {"v": Signal(name="S2_valid"), "win": Signal(self.fwin, name="S2_win"),
              "kept": Signal(L, name="S2_kept"), "n": Signal(range(L + 1), name="S2_n"),
              "kp": [Signal(range(L + 1), name=f"S2_kp{i}") for i in range(L)], "xb": Signal(4, name="S2_xb"),
              "xload": Signal(name="S2_xload"), "blk": Signal(3, name="S2_blk"), "final": Signal(name="S2_final"),
              "last": Signal(name="S2_last"), "pseudo": Signal(name="S2_pseudo")}
        s2_free = Signal(name="s2_free")
        m.d.comb += fire1.eq(I["v"] & s2_free & (F.avail >= I["take"]))
        m.d.comb += [F.fire.eq(fire1), F.take.eq(I["take"]), F.end.eq(I["final"]),
                     F.next_off.eq(Mux(f_init, Mux(r["numel"] <= r["g"], lay_last["f_off"], lay_full["f_off"]),
                                       I["next_off"])),
                     F.set_off.eq(f_init & started)]
        with m.If(f_init & started):
            m.d.sync += f_init.eq(0)
        with m.If(s2_free):
            m.d.sync += S2["v"].eq(fire1)
        with m.If(fire1):
            m.d.sync += [S2["win"].eq(F.win)] + [S2[k].eq(I[k]) for k in
                                                 ("kept", "n", "xload", "blk", "final", "last", "pseudo")]
            m.d.sync += [S2["kp"][i].eq(I["kp"][i]) for i in range(L)] + [S2["xb"].eq(I["xb"])]

        # ---- DRAFT (S2 -> S3): fields, X of the beat's block, draft values; full-mode verif bookkeeping
        xreg = Signal(X_REGION, name="xreg")
        xsrc = Signal(X_REGION, name="xsrc")
        m.d.comb += xsrc.eq(Mux(S2["xload"], S2["win"][:X_REGION], xreg))
        xb_beat = Signal(X_BITS, name="x_beat")
        m.d.comb += xb_beat.eq(xsrc.word_select(S2["blk"], X_BITS))
        # Fields: the window behind the beat's X bytes (xb = 0 except on a superblock's first beat: one of 9
        # byte shifts), cut into L packed (m+2)-bit fields by per-m constant slices; lane i takes packed
        # field kp_i (kp_i <= i), a small mux instead of a shifter per lane.
        fwin = Signal(MXF * L, name="fwin")
        with m.Switch(S2["xb"]):
            for b in range(X_REGION // X_BITS + 1):
                with m.Case(b):
                    m.d.comb += fwin.eq(S2["win"][X_BITS * b:])
        packed = []
        for j in range(L):
            pf = Signal(MXF, name=f"packed{j}")
            with m.Switch(r["m"]):
                for mm in range(BF16_MANTISSA_BITS + 1):
                    with m.Case(mm):
                        w = mm + 2
                        m.d.comb += pf.eq(fwin[j * w:(j + 1) * w])
            packed.append(pf)
        lanes = []
        for i in range(L):
            f = Signal(MXF, name=f"fld{i}")
            m.d.comb += f.eq(Array(packed[:i + 1])[S2["kp"][i]] if i else packed[0])
            ln = {"field": f, "x": xb_beat, "kept": S2["kept"][i], "fr": fr}
            DecoderC2._draft_lane(self, m, r, ln, i)
            lanes.append(ln)
        in_beat = thermometer(S2["n"], L)
        dz = Signal(Lv, name="dz")                                    # draft-zero lanes (full mode: < Lv)
        m.d.comb += dz.eq(Cat(*[~ln["nz"] for ln in lanes[:Lv]]) & in_beat[:Lv])
        pz = prefix_counts(m, dz, Lv, "pz")
        widths = [Mux(in_beat[i], lanes[i]["rest_w"], 0) for i in range(Lv)]
        ro = prefix_sums(m, widths, bits_for(FIELD_MAX * Lv), "ro")

        S3 = {"v": Signal(name="S3_valid"),
              "draft": [Signal(BF16_BITS, name=f"S3_draft{i}") for i in range(L)],
              # full-mode bookkeeping of the first Lv lanes only (a full-mode beat holds at most Lv values)
              "dz": Signal(Lv, name="S3_dz"), "pz": [Signal(range(Lv + 1), name=f"S3_pz{i}") for i in range(Lv + 1)],
              "ro": [Signal(bits_for(FIELD_MAX * Lv), name=f"S3_ro{i}") for i in range(Lv + 1)],
              "rw": [Signal(4, name=f"S3_rw{i}") for i in range(Lv)],
              "x": Signal(X_BITS, name="S3_x"), "n": Signal(range(L + 1), name="S3_n"),
              "final": Signal(name="S3_final"), "last": Signal(name="S3_last")}
        s3_free = Signal(name="s3_free")
        m.d.comb += s2_free.eq(~S2["v"] | s3_free)
        with m.If(s3_free):
            m.d.sync += S3["v"].eq(S2["v"] & ~S2["pseudo"])
            with m.If(S2["v"]):
                with m.If(S2["xload"]):
                    m.d.sync += xreg.eq(S2["win"][:X_REGION])
                m.d.sync += [S3["dz"].eq(dz), S3["x"].eq(xb_beat), S3["n"].eq(S2["n"]),
                             S3["final"].eq(S2["final"]), S3["last"].eq(S2["last"])]
                m.d.sync += [S3["draft"][i].eq(ln["draft"]) for i, ln in enumerate(lanes)]
                m.d.sync += [S3["rw"][i].eq(lanes[i]["rest_w"]) for i in range(Lv)]
                m.d.sync += [S3["pz"][i].eq(pz[i]) for i in range(Lv + 1)]
                m.d.sync += [S3["ro"][i].eq(ro[i]) for i in range(Lv + 1)]

        # ---- VERIFY -> OUT: full mode takes the rest bits and the delta codes of the beat
        R = BitReader(IW, FIELD_MAX * Lv)
        m.submodules.verif_rest_rd = R
        wiring.connect(m, wiring.flipped(self.verif_rest), R.inp)
        m.d.comb += [R.enable.eq(started & full), R.drain.eq(drain), R.flush.eq(flush)]
        # verif.codes: the shared fixed-rate code plane (hw/code_plane.py) parses the tensor's chunks ahead
        # of the beats into a ring of codes / escapes / END markers; a beat pops its nd codes (+ END).
        CP = CodePlane(word=IW, seg=self.code_seg, lanes=self.code_lanes, depth=self.code_depth, pops=Lv + 1)
        m.submodules.verif_codes_plane = CP
        wiring.connect(m, wiring.flipped(self.verif_codes), CP.inp)
        cp_init = Signal(name="cp_init")                # the code plane has not been started for the tensor
        m.d.comb += [CP.k.eq(r["verif_k"]), CP.chunks.eq(nsb), CP.start.eq(cp_init & started & full),
                     CP.enable.eq(started & full), CP.drain.eq(drain), CP.flush.eq(flush)]
        with m.If(started):
            m.d.sync += cp_init.eq(0)

        # the beat's needs: nd deltas (+ the END marker on a superblock's final beat), rest bits
        nd = Signal(range(L + 1), name="v_nd")
        m.d.comb += nd.eq(S3["pz"][Lv])
        need = Signal(range(Lv + 2), name="v_need")
        m.d.comb += need.eq(nd + S3["final"])
        q_at = []
        for j in range(Lv + 1):
            ent = CP.win[j]
            dl = Signal(X_BITS, name=f"cp_delta{j}")
            m.d.comb += dl.eq(Mux(ent.kind == CpKind.ESC, ent.val, r["verif_tab"][ent.val[:4]]))
            q_at.append((ent.kind, dl, ent.val))
        # A marker among the first nd entries: END -> OVERRUN (CODE if the zero run before the chunk end is
        # longer than K), BAD -> CODE; on a final beat, anything but a clean END in place nd -> TOO_LONG.
        # The beat is judged as soon as a marker shows up among the entries present.
        q_have = Signal(name="v_q_have")
        q_err_ov = Signal(name="v_q_overrun")
        q_err_code = Signal(name="v_q_code")
        q_err_tl = Signal(name="v_q_too_long")
        clean = Const(1, 1)                      # entries before j are present codes / escapes
        ov_terms, code_terms, tl_terms, seen_terms = [], [], [], []
        for j in range(Lv + 1):
            kind, _, val = q_at[j]
            present = CP.count > j
            is_code = (kind == CpKind.CODE) | (kind == CpKind.ESC)
            marker = clean & present & ~is_code
            is_end = kind == CpKind.END
            ov_terms.append((j < nd) & marker & is_end & ~(val & END_LONG_RUN).any())
            code_terms.append((j < nd) & marker & (~is_end | (val & END_LONG_RUN).any()))
            tl_terms.append((j == nd) & S3["final"] & clean & present & (~is_end | (val & END_PAD_ERR).any()))
            seen_terms.append((j < need) & marker)
            clean = clean & present & is_code
        m.d.comb += [q_err_ov.eq(Cat(*ov_terms).any()), q_err_code.eq(Cat(*code_terms).any()),
                     q_err_tl.eq(Cat(*tl_terms).any()),
                     q_have.eq((CP.count >= need) | Cat(*seen_terms).any())]
        rest_take = Signal(range(FIELD_MAX * L + 1), name="v_rest_take")
        m.d.comb += rest_take.eq(S3["ro"][Lv])
        rest_have = Signal(name="v_rest_have")
        m.d.comb += rest_have.eq(R.avail >= rest_take)
        rest_ov = Signal(name="v_rest_overrun")
        m.d.comb += rest_ov.eq(R.end_seen & ~rest_have)
        m.d.comb += [R.take.eq(rest_take), R.skip.eq(S3["final"])]

        # assembly of the exact values (full mode)
        values = []
        neg_terms = []
        for i in range(L):
            if i < Lv:
                rf = Signal(FIELD_MAX, name=f"rest_f{i}")
                m.d.comb += rf.eq((R.win >> S3["ro"][i]) & ~(Const(0xFF, FIELD_MAX) << S3["rw"][i]))
                dlt = Signal(X_BITS, name=f"delta{i}")
                m.d.comb += dlt.eq(Array(d for _, d, _ in q_at[:Lv])[S3["pz"][i]])
                e = Signal(BF16_EXPONENT_BITS, name=f"vexp{i}")
                m.d.comb += e.eq(S3["x"] - dlt)
                isdz = S3["dz"][i]
                neg_terms.append(isdz & (dlt > S3["x"]))
                fullv = Signal(BF16_BITS, name=f"full{i}")
                m.d.comb += fullv.eq(Mux(isdz, Cat(rf[:BF16_MANTISSA_BITS], e, rf[BF16_MANTISSA_BITS]),
                                         S3["draft"][i] | rf))
                values.append(Mux(full, fullv, S3["draft"][i]))
            else:
                values.append(S3["draft"][i])
        neg = Signal(name="v_neg")
        m.d.comb += neg.eq(Cat(*neg_terms).any())

        adv = Signal(name="adv")
        m.d.comb += adv.eq(~self.out.valid | self.out.ready)
        v_ready = Signal(name="v_ready")                       # the beat's verification data is in
        m.d.comb += v_ready.eq(~full | (q_have & (rest_have | rest_ov)
                                         & ~(S3["final"] & rest_have & ~R.skip_ok & ~R.skip_err)))
        v_err = Signal(ERROR_BITS, name="v_err")
        with m.If(S3["v"] & full & v_ready):
            m.d.comb += [
                v_err[Err.OVERRUN].eq(q_err_ov | rest_ov),
                v_err[Err.CODE].eq(~q_err_ov & ~rest_ov & (q_err_code | neg)),
                v_err[Err.TOO_LONG].eq(~q_err_ov & ~rest_ov & ~q_err_code & ~neg &
                                       (q_err_tl | (S3["final"] & R.skip_err))),
            ]
        fire_v = Signal(name="fire_v")
        m.d.comb += fire_v.eq(S3["v"] & adv & v_ready & ~v_err.any())
        m.d.comb += s3_free.eq(~S3["v"] | fire_v)
        m.d.comb += R.commit.eq(fire_v & full)
        m.d.comb += CP.pop.eq(Mux(fire_v & full, need, 0))

        with m.If(adv):
            m.d.sync += self.out.valid.eq(fire_v)
        with m.If(fire_v):
            m.d.sync += [self.out.payload.count.eq(S3["n"]), self.out.payload.sb_end.eq(S3["final"]),
                         self.out.payload.last.eq(S3["last"])]
            for i in range(L):
                m.d.sync += self.out.payload.lanes[i].eq(Mux(i < S3["n"], values[i], 0))

        # ---- START, errors, busy
        cfg_bad = self._config_error(r)
        no_book = full & ~r["verif_loaded"]
        with m.If(start & ~busy & ~err.any()):
            m.d.comb += [raise_err[Err.CONFIG].eq(cfg_bad), raise_err[Err.NO_BOOK].eq(~cfg_bad & no_book)]
            with m.If(~cfg_bad & ~no_book):
                m.d.sync += [busy.eq(1), setup.eq(1), lay_ok.eq(0), in_on.eq(1), in_j.eq(0),
                             in_rem.eq(r["numel"]), is_on.eq(1), sb_init.eq(1), f_init.eq(1),
                             cp_init.eq(1)]
        with m.If(busy):
            m.d.comb += [
                raise_err[Err.OVERRUN].eq(in_err_ov | v_err[Err.OVERRUN]),
                raise_err[Err.TOO_LONG].eq(in_err_tl | v_err[Err.TOO_LONG]),
                raise_err[Err.KEEP].eq(keep_err),
                raise_err[Err.CODE].eq(v_err[Err.CODE]),
            ]
        with m.If(fire_v & S3["last"]):
            m.d.sync += busy.eq(0)
        with m.If(flush):
            m.d.sync += [I["v"].eq(0), S2["v"].eq(0), S3["v"].eq(0), sb_init.eq(0)]
        with m.If(raise_err.any()):
            m.d.sync += [err.eq(err | raise_err), busy.eq(0), in_on.eq(0), is_on.eq(0), setup.eq(0),
                         lay_ok.eq(0)]
        with m.Elif(clear & ~busy):
            m.d.sync += err.eq(0)
        return m
