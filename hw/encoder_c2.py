"""Online KV-cache encoder, Cassandra-2 (MX shared exponent): one KV vector (= one superblock of
G = head_dim values) at a time in, the three C2 planes out (``spec.mx``, ``verif.codes``,
``verif.rest``), bit-exactly what ``golden.codec.encode_tensor(..., CodecConfig(scheme="c2",
kind="kv"), books=(None, verif))`` emits (docs/FORMAT.md sections 2, 4; docs/HARDWARE.md section 3a).

Built from the C1 encoder's pieces (``KvEncoderBase`` in hw/encoder.py: two-slot vector pipeline with
loader and radix-4 top-k select with ties to the lower index, keep flags, code CAM, field packer,
BitWriters).

Per vector (front end on one slot while the other slot's vector is emitted):

1. LOAD   ``G/L`` beats into a slot; meanwhile the shared exponent ``X`` of every MX block (max of the
          32 biased exponents, kept and pruned alike) is accumulated beat by beat (an L-input max per
          beat), so no 32-input max is ever needed on the buffer; at the end of the load the X bytes
          move to the slot's registers.
2. SELECT the 8-cycle radix-4 select of the C1 encoder (skipped when ``k = G``).
3. MAP    (only when ``k < G``) ``G/32`` cycles: the keep flags of one MX block per cycle into the slot's
          keep mask. The bitmap opens the ``spec.mx`` chunk, so the whole mask must exist before the
          vector's first element field.
4. EMIT   ``G/L`` beats: the ``(s << (m+1)) | elem`` field of every kept value into ``spec.mx``, the
          delta code of every draft-zero value into ``verif.codes`` and every value's rest field into
          ``verif.rest``. The first beat also carries the chunk header (the bitmap when pruning, then
          the ``G/32`` X bytes) in front of its fields, as one wide spec.mx group.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.utils import exact_log2

from ..golden.config import ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, MX_BLOCK
from .decoder import FIELD_MAX, Err
from .encoder import KvEncoderBase, bf16_fields

SPEC_FIELD_MAX = FIELD_MAX + 1            # sign + (m+1)-bit element at m = 7: 9 bits
MAX_SHIFT = BF16_MANTISSA_BITS            # 7: the mantissa bits a value can lose to the block exponent


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

    ``spec.mx`` needs up to ``(m+2)·L`` bits per EMIT beat (9L at m = 7), so with ``IW = 8L`` its writer
    limits EMIT to 8 of every 9 cycles at m = 7; the other planes need at most 8 bits per value.
    """

    PLANES = ("spec_mx", "verif_codes", "verif_rest")

    # ------------------------------------------------------------------------------ shared exponents
    def _shared_exponents(self, m, p):
        """X of every MX block: ``xn`` accumulates the vector being loaded (beat by beat); at the end of
        its load it moves to the slot's registers ``xs[slot]``. Returns ``xs``."""
        L, nblk = self.lanes, self.max_group // MX_BLOCK
        beats_per_blk = MX_BLOCK // L
        xn = [Signal(BF16_EXPONENT_BITS, name=f"xn{j}") for j in range(nblk)]
        xs = [[Signal(BF16_EXPONENT_BITS, name=f"xs{k}_{j}") for j in range(nblk)] for k in range(2)]
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
            nx = Signal(BF16_EXPONENT_BITS, name=f"xn_next{j}")
            upd = Mux(first | (bmax > xn[j]), bmax, xn[j])
            m.d.comb += nx.eq(Mux(p.load & (blk == j), upd, xn[j]))
            m.d.sync += xn[j].eq(nx)
            with m.If(p.load_done):
                for k in range(2):
                    with m.If(p.ls == k):
                        m.d.sync += xs[k][j].eq(nx)
        return xs

    # ------------------------------------------------------------------------------ per-lane fields
    def _lane_fields(self, m, r, beat, xc, vals, kept):
        """Per lane: (value, width) of its spec.mx element field, verification code and rest field."""
        L = self.lanes
        m_reg = r["m"]
        x = Signal(BF16_EXPONENT_BITS, name="beat_x")   # a beat lies inside one MX block (L divides 32)
        m.d.comb += x.eq(Array(xc)[(beat * L) >> exact_log2(MX_BLOCK)])
        xe = Signal(BF16_EXPONENT_BITS, name="beat_xe")  # max(X, 1): subnormals share exponent 1's weight
        m.d.comb += xe.eq(Mux(x == 0, 1, x))
        spec_f, ver_f, rest_f = [], [], []
        for i, v in enumerate(vals):
            sgn, e, f = bf16_fields(v)
            # d = Xe - max(e, 1) >= 0 bits of alignment; the draft keeps c = m - d mantissa bits (c >= 0).
            d = Signal(BF16_EXPONENT_BITS, name=f"d{i}")
            m.d.comb += d.eq(xe - Mux(e == 0, 1, e))
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
            delta = Signal(BF16_EXPONENT_BITS, name=f"delta{i}")
            m.d.comb += delta.eq(x - e)
            vv, vw = self._code(m, delta, r["verif_tab"], r["verif_k"], f"vc{i}")
            ver_f.append((Mux(dz, vv, 0), Mux(dz, vw, 0)))         # bits above a field's width stay 0
            low = Signal(BF16_MANTISSA_BITS, name=f"low{i}")
            m.d.comb += low.eq(f & ~(Const(0x7F, BF16_MANTISSA_BITS) << cut))
            rest_f.append((Mux(dz, Cat(f, sgn), low), Mux(dz, FIELD_MAX, cut)))
        return {"spec_mx": spec_f, "verif_codes": ver_f, "verif_rest": rest_f}

    # ------------------------------------------------------------------------------ keep-bitmap pass
    def _map_pass(self, m, r, kmask):
        """C2's front-end pass after SELECT (``map_pass`` of ``_pipeline``): the keep flags of one MX
        block (32 values) per cycle into the slot's keep mask. 32 lanes, not L: the bitmap opens the
        spec.mx chunk, so the whole mask must exist before the vector's first element field; at 32 per
        cycle (32 comparators and a 32-input prefix count, against the select's G-input popcounts) the
        pass stays well inside the emission of the other slot's vector."""
        GM = self.max_group
        mb = Signal(range(GM // MX_BLOCK + 1), name="map_blk")
        eq_seen = Signal(range(GM + 1), name="map_eq_seen")
        nmap = Signal(range(GM // MX_BLOCK + 1), name="nmap")
        m.d.comb += nmap.eq(r["g"] >> exact_log2(MX_BLOCK))

        def step(p):
            vals = self._slot_slice(m, p, p.ss, mb, MX_BLOCK, "mapv")
            kept, eqb = self._keep_flags(m, vals, p.t_sel, p.r_sel, eq_seen, "map")
            done = Signal(name="map_done")
            m.d.comb += done.eq(mb + 1 == nmap)
            for k in range(2):
                for b in range(GM // MX_BLOCK):
                    with m.If((p.ss == k) & (mb == b)):
                        m.d.sync += kmask[k][b * MX_BLOCK:(b + 1) * MX_BLOCK].eq(kept)
            m.d.sync += [mb.eq(Mux(done, 0, mb + 1)), eq_seen.eq(Mux(done, 0, eq_seen + eqb[MX_BLOCK]))]
            return done
        return step

    def _first_group(self, m, r, prunes, kmask, xc, fbits, fn):
        """(bits, width, header width) of the spec.mx group of a vector's first EMIT beat: the chunk
        header - keep bitmap (``G`` bits, when pruning) and the ``G/32`` X bytes - followed by the beat's
        element fields (``fbits``, ``fn`` bits). Folding the header into the first beat saves a cycle per
        vector; G and the pruning flag take few values, so the fields' offset is a small mux, not a
        shifter."""
        GM = self.max_group
        xmax = BF16_EXPONENT_BITS * (GM // MX_BLOCK)
        width = GM + xmax + len(fbits)
        bits = Const(0, width)
        hw = Const(0, 1)
        for g in sorted((g for g in ALLOWED_GROUP_SIZES if g <= GM), reverse=True):
            xb = Cat(*xc[:g // MX_BLOCK])
            plain, mapped = Cat(xb, fbits), Cat(kmask[:g], xb, fbits)
            bits = Mux(r["g"] == g, Mux(prunes, mapped, plain), bits)
            hw = Mux(r["g"] == g, Mux(prunes, g + len(xb), len(xb)), hw)
        hdr_w = Signal(range(GM + xmax + 1), name="hdr_w")
        first = Signal(width, name="first_bits")
        first_n = Signal(range(width + 1), name="first_n")
        m.d.comb += [hdr_w.eq(hw), first.eq(bits), first_n.eq(hdr_w + fn)]
        return first, first_n, GM + xmax

    # ------------------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        L, GM = self.lanes, self.max_group
        r, clear, err, raise_err = self._control_signals(m)

        def first_beat_errors():
            # C2 has no speculation book: only the verification (delta) book must be loaded.
            loaded = r["verif_loaded"]
            m.d.comb += [raise_err[Err.NO_BOOK].eq(~loaded), raise_err[Err.CONFIG].eq(loaded & ~self._geometry_ok(r))]

        kmask = [Signal(GM, name=f"kmask{k}") for k in range(2)]   # keep flag of every value, per slot
        p = self._pipeline(m, r, err, raise_err, clear, first_beat_errors, map_pass=self._map_pass(m, r, kmask))
        xs = self._shared_exponents(m, p)

        # ---- emitter on slot es: G/L beats of L lanes; the first also carries the chunk header
        xc = []
        for j in range(GM // MX_BLOCK):
            x = Signal(BF16_EXPONENT_BITS, name=f"xc{j}")
            m.d.comb += x.eq(Mux(p.es, xs[1][j], xs[0][j]))
            xc.append(x)
        km = Signal(GM, name="emit_kmask")
        m.d.comb += km.eq(Mux(p.es, kmask[1], kmask[0]))
        vals = self._slot_slice(m, p, p.es, p.ebeat, L, "lane")
        kept = Signal(L, name="lane_kept")
        m.d.comb += kept.eq(km.bit_select(p.ebeat * L, L) | Mux(p.prunes, 0, (1 << L) - 1))
        fields = self._lane_fields(m, r, p.ebeat, xc, vals, kept)
        packed = {q: self._pack(m, f, q) for q, f in fields.items()}
        first_bits, first_n, hdr_max = self._first_group(m, r, p.prunes, km, xc, *packed["spec_mx"][:2])
        # Slack for one header: the wide first group must not stall the beats behind it.
        mx = self._writer(m, "spec_mx", len(first_bits), slack=hdr_max)
        vwr = {q: self._writer(m, q, packed[q][2]) for q in ("verif_codes", "verif_rest")}
        for q, w in vwr.items():
            m.d.comb += [w.bits.eq(packed[q][0]), w.n.eq(packed[q][1])]
        writers = [mx, *vwr.values()]
        all_ready, writers_idle = Signal(), Signal()
        m.d.comb += [all_ready.eq(Cat(*[w.ready for w in writers]).all()),
                     writers_idle.eq(Cat(*[w.idle for w in writers]).all())]
        m.d.comb += self.busy.eq(((p.lbeat != 0) & ~err.any()) | p.has.any() | ~writers_idle)
        last_beat = Signal(name="last_beat")
        m.d.comb += last_beat.eq(p.ebeat + 1 == p.nbeats)

        with m.FSM(name="emit"):
            with m.State("IDLE"):
                with m.If(p.emit_go):
                    m.d.sync += p.ebeat.eq(0)
                    m.next = "EMIT"
            with m.State("EMIT"):
                first_beat = Signal(name="first_beat")
                m.d.comb += [p.emitting.eq(1), first_beat.eq(p.ebeat == 0),
                             mx.bits.eq(Mux(first_beat, first_bits, packed["spec_mx"][0])),
                             mx.n.eq(Mux(first_beat, first_n, packed["spec_mx"][1]))]
                for w in writers:
                    m.d.comb += [w.valid.eq(all_ready), w.close.eq(last_beat)]
                with m.If(all_ready):
                    m.d.sync += p.ebeat.eq(p.ebeat + 1)
                    with m.If(last_beat):
                        p.emit_done()
                        with m.If(p.next_go):
                            m.d.sync += p.ebeat.eq(0)
                        with m.Else():
                            m.next = "IDLE"
        self._errors(m, err, raise_err, clear)
        return m
