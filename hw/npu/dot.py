"""Dot-product unit of the NPU tile: one V-group of a weight row against the activations of every row slot per
cycle, batch-invariant by construction (docs/NPU.md "Arithmetic"; reference: golden/npu.py).

For each row slot r the unit computes, for weight row o over groups g = 0 .. in/V - 1 (``first`` on g = 0,
``last`` on the final group):

    t_g = tree(mul(w[gV + j], x[r][gV + j]) for j < V)      a fixed balanced binary tree of fp32 adds
    acc = add(-0, t_0);  acc = add(acc, t_g) for g >= 1      y[r, o] = acc after the last group

with hw/pe_mac.py's product (``bf16_mul``) and adder (``PeMacBf16._fp32_add``). The order of every operation is
fixed by V alone, so a row's result does not depend on how many rows share the pass.

Pipeline (every arrow is a register; the whole pipeline advances when ``~(out.valid & ~out.ready)``):

    inp -> prod_r (V x rows products) -> tree_l1_r .. tree_l{log2 V}_r -> acc_r (+ out.y on ``last``)

The one recurrence closing in a cycle is the accumulator: acc_r <- add(first ? -0 : acc_r, tree result),
one fp32 adder deep (as PeMacBf16's accumulate stage, the PE's critical path).
"""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...errors import ConfigError
from ..pe_mac import BF16_WIDTH, FP32_WIDTH, PeMacBf16, bf16_mul

NEG_ZERO = 0x80000000          # the additive identity of the fp32 adder: -0 + x == x for every x


def in_layout(lanes: int, rows: int) -> data.StructLayout:
    return data.StructLayout({"w": data.ArrayLayout(BF16_WIDTH, lanes),
                              "x": data.ArrayLayout(data.ArrayLayout(BF16_WIDTH, lanes), rows),
                              "first": 1, "last": 1})


def out_layout(rows: int) -> data.StructLayout:
    return data.StructLayout({"y": data.ArrayLayout(FP32_WIDTH, rows)})


class DotUnit(wiring.Component):
    """``lanes`` (V) weights x ``rows`` activation rows per cycle.

    Ports
        inp   In(stream {w[V], x[rows][V], first, last})   one group of weight row o and the matching activations
        out   Out(stream {y[rows]})                        output o's fp32 result of every row slot
    """

    def __init__(self, lanes: int, rows: int):
        if not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1) or lanes > 32:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"DotUnit lanes must be a power of two 1..32, got {lanes!r}")
        if not isinstance(rows, int) or not 1 <= rows <= 16:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"DotUnit rows must be 1..16, got {rows!r}")
        self.lanes, self.rows = lanes, rows
        super().__init__({"inp": In(stream.Signature(in_layout(lanes, rows))),
                          "out": Out(stream.Signature(out_layout(rows)))})

    @property
    def latency(self) -> int:
        """Cycles from a group's input to its accumulator update (products, tree levels, accumulate)."""
        return 2 + (self.lanes.bit_length() - 1)

    def elaborate(self, platform):
        m = Module()
        V, R = self.lanes, self.rows
        advance = Signal(name="advance")
        m.d.comb += [advance.eq(~(self.out.valid & ~self.out.ready)), self.inp.ready.eq(advance)]
        p = self.inp.payload

        # ---- stage: products
        valid, first, last = Signal(name="prod_valid"), Signal(name="prod_first"), Signal(name="prod_last")
        vals = []
        for r in range(R):
            row = []
            for j in range(V):
                prod_r = Signal(FP32_WIDTH, name=f"prod_r{r}_{j}")
                prod = bf16_mul(m, p.w[j], p.x[r][j], f"prod{r}_{j}")
                with m.If(advance):
                    m.d.sync += prod_r.eq(prod)
                row.append(prod_r)
            vals.append(row)
        with m.If(advance):
            m.d.sync += [valid.eq(self.inp.valid), first.eq(p.first), last.eq(p.last)]

        # ---- stages: one tree level each
        level = 0
        while len(vals[0]) > 1:
            level += 1
            nvalid, nfirst, nlast = (Signal(name=f"tree_l{level}_valid"), Signal(name=f"tree_l{level}_first"),
                                     Signal(name=f"tree_l{level}_last"))
            with m.If(advance):
                m.d.sync += [nvalid.eq(valid), nfirst.eq(first), nlast.eq(last)]
            nxt = []
            for r in range(R):
                row = []
                for j in range(len(vals[r]) // 2):
                    s = Signal(FP32_WIDTH, name=f"tree_l{level}_r{r}_{j}")
                    total = PeMacBf16._fp32_add(m, vals[r][2 * j], vals[r][2 * j + 1])
                    with m.If(advance):
                        m.d.sync += s.eq(total)
                    row.append(s)
                nxt.append(row)
            vals, valid, first, last = nxt, nvalid, nfirst, nlast

        # ---- stage: accumulate (the one-cycle recurrence: one fp32 adder)
        with m.If(self.out.valid & self.out.ready):
            m.d.sync += self.out.valid.eq(0)
        for r in range(R):
            acc_r = Signal(FP32_WIDTH, name=f"acc_r{r}")
            total = PeMacBf16._fp32_add(m, Mux(first, Const(NEG_ZERO, 32), acc_r), vals[r][0])
            with m.If(advance & valid):
                m.d.sync += acc_r.eq(total)
                with m.If(last):
                    m.d.sync += self.out.payload.y[r].eq(total)
        with m.If(advance & valid & last):
            m.d.sync += self.out.valid.eq(1)
        return m
