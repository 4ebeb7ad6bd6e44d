"""Online KV-cache encoder, Cassandra-2 (MX shared exponent): one KV vector (= one superblock of
G = head_dim values) at a time in, the three C2 planes out (``spec.mx``, ``verif.codes``,
``verif.rest``), bit-exactly what ``golden.kv.encode_kv(bits, kv_config(G, "c2", ...), (None, verif))``
emits in format 3.0 (docs/FORMAT.md sections 2, 4; docs/datasheets/kv_encoders.md).

Built from the C1 encoder's pieces (``KvEncoderBase`` in hw/encoder.py: one vector buffer in a
``lib.memory.Memory``, loader, sequential radix-16 top-k select with ties to the lower index, emitter
sequencer, code CAM, field packer, BitWriters). Per vector:

1. LOAD   ``G/L`` beats into the buffer (behind the previous vector's emission); meanwhile the shared
          exponent ``X`` of every MX block (max of the 32 biased exponents, kept and pruned alike) is
          accumulated beat by beat (an L-input max per beat); the X bytes move to the emitter's
          registers at the hand-over.
2. SELECT the C1 encoder's sequential select (skipped when ``k = G``).
3. MAP    (only when ``k < G``) ``G/R`` cycles: the keep flags of one buffer row (R values) per cycle
          into the keep mask (an MX block's keep bits precede its fields in ``spec.mx``).
4. EMIT   ``G/L`` beats: the ``(s << (m+1)) | elem`` field of every kept value into ``spec.mx``, behind
          the block header ``[X][the block's keep bits, when pruning]`` on the first beat of each MX block;
          the delta code of every draft-zero value into ``verif.codes`` and every value's rest field into
          ``verif.rest`` (an escaped delta's 8 raw bits in front of its value's rest field).
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.utils import exact_log2

from ..golden.config import BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, MX_BLOCK
from .decoder import FIELD_MAX, Err
from .encoder import BF16_BITS, KvEncoderBase, bf16_fields

SPEC_FIELD_MAX = FIELD_MAX + 1            # sign + (m+1)-bit element at m = 7: 9 bits
MAX_SHIFT = BF16_MANTISSA_BITS            # 7: the mantissa bits a value can lose to the block exponent
HEADER_MAX = BF16_EXPONENT_BITS + MX_BLOCK   # an MX block's header in spec.mx: X, then its keep bits when pruning


def max_tree(m, values: list, name: str):
    """Balanced tree of unsigned maxima (named nodes: no re-emitted shared expressions)."""
    level = list(values)
    depth = 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            node = Signal(len(values[0]), name=f"{name}_{depth}_{i // 2}")
            m.d.comb += node.eq(Mux(level[i] > level[i + 1], level[i], level[i + 1]))
            nxt.append(node)
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
        depth += 1
    return level[0]


class EncoderKvC2(KvEncoderBase):
    """Cassandra-2 KV encoder. Parameters as ``KvEncoderBase``: lanes L (divides 32), word IW, max_group.

    ``spec.mx`` takes ``(m+2)·L`` bits per EMIT beat plus an MX block's header (up to 40 bits) every ``32/L``
    beats: at most ``10.25·L`` bits per beat on average (m = 7, pruning); with ``IW >= 10.25·L`` (the default
    64-bit words at L = 2) its writer never limits the beat rate.
    """

    PLANES = ("spec_mx", "verif_codes", "verif_rest")

    # ------------------------------------------------------------------------------ shared exponents
    def _shared_exponents(self, m, p):
        """X of every MX block: ``xn`` accumulates the vector being loaded (beat by beat); at the hand-over
        to the emitter it moves to ``xs`` (the loader is held while a loaded vector waits, so ``xn`` is
        stable until then). Returns ``xs``."""
        L, nblk = self.lanes, self.max_group // MX_BLOCK
        beats_per_blk = MX_BLOCK // L
        xn = [Signal(BF16_EXPONENT_BITS, name=f"xn{j}") for j in range(nblk)]
        xs = [Signal(BF16_EXPONENT_BITS, name=f"xs{j}") for j in range(nblk)]
        exps = []
        for i in range(L):
            e = Signal(BF16_EXPONENT_BITS, name=f"in_e{i}")
            m.d.comb += e.eq(bf16_fields(self.inp.payload.lanes[i])[1])
            exps.append(e)
        bmax = max_tree(m, exps, "bmax")
        blk = Signal(range(nblk), name="load_blk")
        first = Signal(name="load_blk_first")        # first beat of its block: restart the maximum
        m.d.comb += [blk.eq(p.lbeat >> exact_log2(beats_per_blk)),
                     first.eq((p.lbeat & (beats_per_blk - 1)) == 0)]
        for j in range(nblk):
            with m.If(p.load & (blk == j)):
                m.d.sync += xn[j].eq(Mux(first | (bmax > xn[j]), bmax, xn[j]))
            with m.If(p.handover):
                m.d.sync += xs[j].eq(xn[j])
        return xs

    # ------------------------------------------------------------------------------ per-lane fields
    @staticmethod
    def _alignments(m, x, vals, name):
        """Per lane (d, delta) against the beat's shared exponent ``x``: ``d = max(X, 1) - max(e, 1) >= 0``
        bits of alignment (subnormals share exponent 1's weight; the draft keeps ``c = m - d`` mantissa bits)
        and the verification symbol ``delta = X - e``."""
        xe = Signal(BF16_EXPONENT_BITS, name=f"{name}_xe")
        m.d.comb += xe.eq(Mux(x == 0, 1, x))
        out = []
        for i, v in enumerate(vals):
            e = bf16_fields(v)[1]
            d, delta = Signal(BF16_EXPONENT_BITS, name=f"{name}_d{i}"), Signal(BF16_EXPONENT_BITS, name=f"{name}_delta{i}")
            m.d.comb += [d.eq(xe - Mux(e == 0, 1, e)), delta.eq(x - e)]
            out.append((d, delta))
        return out

    def _lane_fields(self, m, r, aligns, vals, kept):
        """Per lane: (value, width) of its spec.mx element field, verification code and rest field;
        ``aligns``: the lanes' (d, delta) from ``_alignments`` (a beat lies inside one MX block: L divides
        32, so one X)."""
        m_reg = r["m"]
        spec_f, ver_f, rest_f = [], [], []
        for i, v in enumerate(vals):
            sgn, e, f = bf16_fields(v)
            d, delta = aligns[i]
            c_ok = Signal(name=f"c_ok{i}")
            c = Signal(range(BF16_MANTISSA_BITS + 1), name=f"c{i}")
            cut = Signal(range(MAX_SHIFT + 1), name=f"cut{i}")   # 7 - c: mantissa bits below the element
            m.d.comb += [c_ok.eq(d <= m_reg), c.eq(m_reg - d), cut.eq(MAX_SHIFT - c)]
            sig = Signal(FIELD_MAX, name=f"sig{i}")               # significand with its hidden bit
            m.d.comb += sig.eq(Cat(f, e != 0))
            elem = Signal(FIELD_MAX, name=f"elem{i}")
            m.d.comb += elem.eq(Mux(c_ok, sig >> cut, 0))
            dz = Signal(name=f"dz{i}")                            # draft-zero: exponent goes to verif
            m.d.comb += dz.eq(~kept[i] | (elem == 0))
            sf = Signal(SPEC_FIELD_MAX, name=f"sf{i}")
            m.d.comb += sf.eq(elem | (sgn << (m_reg + 1)))
            spec_f.append((Mux(kept[i], sf, 0), Mux(kept[i], m_reg + 2, 0)))
            vv, vw, esc = self._code(m, delta, r["verif_tab"], r["verif_k"], f"vc{i}")
            ver_f.append((Mux(dz, vv, 0), Mux(dz, vw, 0)))         # bits above a field's width stay 0
            low = Signal(BF16_MANTISSA_BITS, name=f"low{i}")
            m.d.comb += low.eq(f & ~(Const(0x7F, BF16_MANTISSA_BITS) << cut))
            dzv, dzw = self._with_prefix(m, esc, delta, Cat(f, sgn), Const(FIELD_MAX, 4), f"dz{i}")  # [delta][s f]
            rest_f.append((Mux(dz, dzv, low), Mux(dz, dzw, cut)))
        return {"spec_mx": spec_f, "verif_codes": ver_f, "verif_rest": rest_f}

    # ------------------------------------------------------------------------------ keep-bitmap pass
    def _map_pass(self, kmask):
        """C2's front-end pass after SELECT (``map_pass`` of ``_pipeline``): the keep flags of one buffer row
        (R values: R comparators and an R-input prefix count of the ties) per cycle into the keep mask."""
        GM, R = self.max_group, self.row_values

        def build(m, p):
            eq_seen = Signal(range(GM + 1), name="map_eq_seen")   # loop: 8-bit add per row
            kept, eqb = self._keep_flags(m, p.row_vals, p.t_reg, p.r_reg, eq_seen, "map")
            with m.If(p.map_rd):
                m.d.sync += eq_seen.eq(eq_seen + eqb[R])
                for j in range(GM // R):
                    with m.If(p.map_row == j):
                        m.d.sync += kmask[j * R:(j + 1) * R].eq(kept)
            with m.If(p.handover):
                m.d.sync += eq_seen.eq(0)
        return build

    # ------------------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        L, GM = self.lanes, self.max_group
        nblk = GM // MX_BLOCK
        r, clear, err, raise_err = self._control_signals(m)

        def first_beat_errors():
            # C2 has no speculation book: only the verification (delta) book must be loaded.
            loaded = r["verif_loaded"]
            m.d.comb += [raise_err[Err.NO_BOOK].eq(~loaded), raise_err[Err.CONFIG].eq(loaded & ~self._geometry_ok(r))]

        kmask = Signal(GM, name="kmask")                 # keep flag of every value of the vector
        p = self._pipeline(m, r, err, raise_err, clear, first_beat_errors,
                           map_pass=lambda pp: self._map_pass(kmask)(m, pp))
        xs = self._shared_exponents(m, p)

        # ---- stage 1 (registered): the beat's L values, keep flags and X; on the first beat of an MX
        # block, its header [X][the block's keep bits] (kmask and xs do not change during a vector's
        # emission: the next vector's MAP pass and X hand-over come after it)
        beats_per_blk = MX_BLOCK // L
        blk = Signal(range(nblk), name="fire_blk")
        m.d.comb += blk.eq(p.beat >> exact_log2(beats_per_blk))
        s1_valid, s1_last = Signal(name="s1_valid"), Signal(name="s1_last")
        s1_opens = Signal(name="s1_opens_block")         # the beat opens an MX block: its header leads it
        s1_hdr = Signal(HEADER_MAX, name="s1_header")    # [X (8 bits)][keep bits (32, when pruning)]
        s1_vals = [Signal(BF16_BITS, name=f"s1_val{i}") for i in range(L)]
        s1_kept = Signal(L, name="s1_kept")
        fire_x = Signal(BF16_EXPONENT_BITS, name="fire_x")
        m.d.comb += fire_x.eq(Array(xs)[blk])
        with m.If(p.move):
            m.d.sync += s1_valid.eq(p.fire)
        with m.If(p.fire):
            m.d.sync += [s1_last.eq(p.last_beat), s1_opens.eq((p.beat & (beats_per_blk - 1)) == 0),
                         s1_hdr.eq(Cat(fire_x, Array(kmask[MX_BLOCK * j: MX_BLOCK * (j + 1)]
                                                     for j in range(nblk))[blk])),
                         *[s1_vals[i].eq(p.lane_vals[i]) for i in range(L)],
                         s1_kept.eq(kmask.bit_select(p.beat * L, L) | Mux(p.prunes, 0, (1 << L) - 1))]

        # ---- stage 2: per plane the packed fields of the beat (spec.mx: behind its MX block's header on the
        # block's first beat), into the writers (or stage 3)
        feeds = []
        if self.pipelined_emit:                          # the alignments into stage 1 (off stage 2's path)
            aligns = [(Signal(BF16_EXPONENT_BITS, name=f"s1_d{i}"), Signal(BF16_EXPONENT_BITS, name=f"s1_delta{i}"))
                      for i in range(L)]
            with m.If(p.fire):
                m.d.sync += [a.eq(b) for pair, fpair in zip(aligns, self._alignments(m, fire_x, p.lane_vals, "fire"))
                             for a, b in zip(pair, fpair)]
        else:                                            # the beat's X into stage 1, the alignments in stage 2
            s1_x = Signal(BF16_EXPONENT_BITS, name="s1_x")
            with m.If(p.fire):
                m.d.sync += s1_x.eq(fire_x)
            aligns = self._alignments(m, s1_x, s1_vals, "beat")
        for q, f in self._lane_fields(m, r, aligns, s1_vals, s1_kept).items():
            bits_, n_, width_ = self._pack(m, f, q)
            if q == "spec_mx":                           # the block header in front of its first beat's fields
                hn = Signal(range(HEADER_MAX + 1), name="hdr_n")
                m.d.comb += hn.eq(Mux(p.prunes, HEADER_MAX, BF16_EXPONENT_BITS))
                hdr = Mux(p.prunes, s1_hdr, s1_hdr[:BF16_EXPONENT_BITS])
                after = Mux(p.prunes, bits_ << HEADER_MAX, bits_ << BF16_EXPONENT_BITS)
                bits_, n_ = Mux(s1_opens, hdr | after, bits_), Mux(s1_opens, hn + n_, n_)
                width_ += HEADER_MAX
            feeds.append((q, bits_, n_, width_))
        self._emit(m, p, feeds, s1_valid, s1_last)
        self._errors(m, err, raise_err, clear)
        return m
