"""Online KV-cache encoder, Cassandra-2 (MX shared exponent): one KV vector (= one superblock of
G = head_dim values) at a time in, the three C2 planes out (``spec.mx``, ``verif.codes``,
``verif.rest``), bit-exactly what ``golden.codec.encode_tensor(..., CodecConfig(scheme="c2",
kind="kv"), books=(None, verif))`` emits (docs/FORMAT.md sections 2, 4; docs/HARDWARE.md section 3a).

Built from the C1 encoder's pieces (``KvEncoderBase`` in hw/encoder.py: vector buffer and loader, radix
top-k select with ties to the lower index, keep flags, code CAM, field packer, BitWriters).

Phases per vector:

1. LOAD   ``G/L`` beats into the vector buffer; meanwhile the shared exponent ``X`` of every MX block
          (max of the 32 biased exponents, kept and pruned alike) is accumulated beat by beat (an L-input
          max per beat), so no 32-input max is ever needed on the buffer.
2. SELECT the 15-cycle radix select of the C1 encoder (skipped when ``k = G``).
3. MAP    (only when ``k < G``) ``G/L`` beats: the keep bitmap, which opens the ``spec.mx`` chunk and so
          must be written before any element field, goes out L bits per beat; the verification planes,
          which do not depend on the bitmap, are written in the same beats.
4. HDR    1 cycle: the ``G/32`` shared exponents (8 bits each) into ``spec.mx``.
5. EMIT   ``G/L`` beats: the ``(s << (m+1)) | elem`` field of every kept value into ``spec.mx``
          (with ``k = G`` also the verification planes, as there was no MAP pass).

The next vector is loaded during EMIT into the beats already emitted, like the C1 encoder.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.utils import bits_for, exact_log2

from ..golden.config import BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, MX_BLOCK
from .decoder import ERROR_BITS, FIELD_MAX, Err
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
    def _shared_exponents(self, m, ld):
        """X of every MX block: ``xn`` accumulates the vector being loaded, ``xc`` holds the vector being
        encoded (the next vector loads while this one is emitted). Returns (xn_next, xc)."""
        L, nblk = self.lanes, self.max_group // MX_BLOCK
        beats_per_blk = MX_BLOCK // L
        xn = [Signal(BF16_EXPONENT_BITS, name=f"xn{j}") for j in range(nblk)]
        xc = [Signal(BF16_EXPONENT_BITS, name=f"xc{j}") for j in range(nblk)]
        exps = []
        for i in range(L):
            e = Signal(BF16_EXPONENT_BITS, name=f"in_e{i}")
            m.d.comb += e.eq(bf16_fields(self.inp.payload.lanes[i])[1])
            exps.append(e)
        bmax = max_tree(m, exps, "bmax")
        blk = Signal(range(nblk), name="load_blk")
        first = Signal(name="load_blk_first")        # first beat of its block: restart the maximum
        m.d.comb += [blk.eq(ld.lbeat >> exact_log2(beats_per_blk)),
                     first.eq((ld.lbeat & (beats_per_blk - 1)) == 0)]
        xn_next = []
        for j in range(nblk):
            nx = Signal(BF16_EXPONENT_BITS, name=f"xn_next{j}")
            upd = Mux(first | (bmax > xn[j]), bmax, xn[j])
            m.d.comb += nx.eq(Mux(ld.load & (blk == j), upd, xn[j]))
            m.d.sync += xn[j].eq(nx)
            xn_next.append(nx)
        return xn_next, xc

    def _header(self, m, r, xc):
        """(bits, width) of the X bytes of the vector's ``G/32`` blocks (bits beyond them zero)."""
        nblk = len(xc)
        width = Signal(range(BF16_EXPONENT_BITS * nblk + 1), name="hdr_w")
        m.d.comb += width.eq((r["g"] >> exact_log2(MX_BLOCK)) * BF16_EXPONENT_BITS)
        bits = Signal(BF16_EXPONENT_BITS * nblk, name="hdr_bits")
        m.d.comb += bits.eq(Cat(*[Mux(j * MX_BLOCK < r["g"], xc[j], 0) for j in range(nblk)]))
        return bits, width

    # ------------------------------------------------------------------------------ per-lane fields
    def _lane_fields(self, m, r, s, xc, vals, kept):
        """Per lane: (value, width) of its spec.mx element field, verification code and rest field."""
        L = self.lanes
        m_reg = r["m"]
        x = Signal(BF16_EXPONENT_BITS, name="beat_x")   # a beat lies inside one MX block (L divides 32)
        m.d.comb += x.eq(Array(xc)[(s.beat * L) >> exact_log2(MX_BLOCK)])
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

    # ------------------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        L, GM = self.lanes, self.max_group
        r = self._registers(m)
        clear = Signal()
        self._write_registers(m, r, clear)
        err = Signal(ERROR_BITS)
        raise_err = Signal(ERROR_BITS)
        m.d.comb += [self.error_code.eq(err), self.error.eq(err.any())]
        s = self._select_state(m, r)

        def first_beat_errors():
            # C2 has no speculation book: only the verification (delta) book must be loaded.
            loaded = r["verif_loaded"]
            m.d.comb += [raise_err[Err.NO_BOOK].eq(~loaded), raise_err[Err.CONFIG].eq(loaded & ~self._geometry_ok(r))]

        ld = self._loader(m, r, s, err, raise_err, first_beat_errors)
        xn_next, xc = self._shared_exponents(m, ld)

        # ---- MAP: the keep flags of one MX block (32 values) per cycle into the keep mask and, as the
        # chunk's bitmap, into spec.mx. 32 lanes, not L: the bitmap pass is pure overhead (nothing else
        # can be written to spec.mx before it), so it runs at the widest granularity that is still cheap
        # (32 comparators and a 32-input prefix count, against the select's G-input popcounts).
        map_vals = self._buffer_slice(m, s, MX_BLOCK, "mapv")
        map_kept, map_eqb = self._keep_flags(m, s, map_vals, "map")
        kmask = Signal(GM, name="kmask")          # keep flag of every value of the current vector
        nmap = Signal(range(GM // MX_BLOCK + 1), name="nmap")
        m.d.comb += nmap.eq(r["g"] >> exact_log2(MX_BLOCK))
        map_last = Signal(name="map_last")
        m.d.comb += map_last.eq(s.beat + 1 == nmap)

        # ---- EMIT: L lanes with their keep flags from the mask (all kept when k = G).
        vals = self._buffer_slice(m, s, L, "lane")
        kept = Signal(L, name="lane_kept")
        m.d.comb += kept.eq(kmask.bit_select(s.beat * L, L) | Mux(s.prunes, 0, (1 << L) - 1))
        fields = self._lane_fields(m, r, s, xc, vals, kept)

        # ---- writers. spec.mx takes the bitmap (MAP; the X bytes ride on its last beat), the X bytes
        # alone (HDR, k = G) or the element fields (EMIT).
        packed = {p: self._pack(m, f, p) for p, f in fields.items()}
        hdr_bits, hdr_w = self._header(m, r, xc)
        mx_group = max(MX_BLOCK + len(hdr_bits), packed["spec_mx"][2])
        mx = self._writer(m, "spec_mx", mx_group)
        vwr = {p: self._writer(m, p, packed[p][2]) for p in ("verif_codes", "verif_rest")}
        for p, w in vwr.items():
            m.d.comb += [w.bits.eq(packed[p][0]), w.n.eq(packed[p][1])]
        writers = [mx, *vwr.values()]
        all_ready, writers_idle = Signal(), Signal()
        m.d.comb += [all_ready.eq(Cat(*[w.ready for w in writers]).all()),
                     writers_idle.eq(Cat(*[w.idle for w in writers]).all())]
        last_beat = Signal(name="last_beat")
        m.d.comb += last_beat.eq(s.beat + 1 == s.nbeats)

        def start_vector():
            """The loaded vector becomes the current one: its X registers move over; select unless k = G."""
            m.d.sync += ld.lbeat.eq(0)
            m.d.sync += [xc[j].eq(xn_next[j]) for j in range(len(xc))]
            self._select_start(m, r, s)
            with m.If(s.prunes):
                m.next = "SELECT"
            with m.Else():
                m.next = "HDR"

        # ---- control
        with m.FSM(name="phase"):
            with m.State("LOAD"):
                m.d.comb += [ld.phase_load.eq(1), self.inp.ready.eq(ld.can_load),
                             self.cfg.ready.eq(ld.lbeat == 0), self.busy.eq((ld.lbeat != 0) | ~writers_idle)]
                with m.If(raise_err.any()):
                    m.next = "DRAIN"
                with m.Elif(ld.load & ld.load_last):
                    start_vector()
            with m.State("SELECT"):
                m.d.comb += self.busy.eq(1)
                self._select_step(m, s, "MAP")
            with m.State("MAP"):
                m.d.comb += [self.busy.eq(1), mx.valid.eq(mx.ready),
                             mx.bits.eq(Mux(map_last, Cat(map_kept, hdr_bits), map_kept)),
                             mx.n.eq(MX_BLOCK + Mux(map_last, hdr_w, 0))]
                with m.If(mx.ready):
                    for b in range(GM // MX_BLOCK):
                        with m.If(s.beat == b):
                            m.d.sync += kmask[b * MX_BLOCK:(b + 1) * MX_BLOCK].eq(map_kept)
                    m.d.sync += [s.eq_seen.eq(s.eq_seen + map_eqb[MX_BLOCK]), s.beat.eq(s.beat + 1)]
                    with m.If(map_last):
                        m.d.sync += s.beat.eq(0)
                        m.next = "EMIT"
            with m.State("HDR"):
                m.d.comb += [self.busy.eq(1), mx.bits.eq(hdr_bits), mx.n.eq(hdr_w), mx.valid.eq(mx.ready)]
                with m.If(mx.ready):
                    m.next = "EMIT"
            with m.State("EMIT"):
                m.d.comb += [ld.phase_emit.eq(1), self.busy.eq(1), self.inp.ready.eq(ld.can_load),
                             mx.bits.eq(packed["spec_mx"][0]), mx.n.eq(packed["spec_mx"][1])]
                for w in writers:
                    m.d.comb += [w.valid.eq(all_ready), w.close.eq(last_beat)]
                with m.If(all_ready):
                    m.d.sync += s.beat.eq(s.beat + 1)
                    with m.If(last_beat):
                        with m.If(err.any() | raise_err.any()):
                            m.next = "DRAIN"       # an error in the next vector: stop after this one
                        with m.Elif(ld.vec_full | (ld.load & ld.load_last)):
                            start_vector()
                        with m.Else():
                            m.next = "LOAD"
            with m.State("DRAIN"):
                self._drain_state(m, s, ld, clear, "LOAD")
        self._errors(m, err, raise_err, clear)
        return m
