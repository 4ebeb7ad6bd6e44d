"""Value gearbox of the NPU tile: beats of 0..L_in bf16 values -> vectors of exactly V consecutive values.

The decoders emit beats of ``count`` <= L values (a beat is cut at a superblock's end or before an escape), and
a bf16 pass delivers W/2 values per memory word. The dot-product unit needs the tensor's values in fixed
groups of V consecutive inputs (docs/NPU.md "Arithmetic": the reduction order is fixed by the group, not by
how values arrived), so the gearbox re-cuts the value stream at every multiple of V.

A 2V-value buffer with a fill count ``n``: a vector leaves when ``n >= V`` (values 0..V-1, the rest shift
down by V), a beat enters at position ``n`` (after this cycle's departure) when it fits. One beat in and one
vector out per cycle; ``out.valid`` comes from the registered count only.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from ...errors import ConfigError

VALUE_BITS = 16


def beat_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({"lanes": data.ArrayLayout(VALUE_BITS, lanes), "count": bits_for(lanes)})


class Gearbox(wiring.Component):
    """``in_lanes`` (L_in <= V) values per beat in, ``lanes`` (V) per vector out.

    Ports
        inp    In(stream {lanes[L_in], count})   values 0..count-1 are valid, in order
        out    Out(stream Array(16, V))           V consecutive values
        clear  In(1)                              drop the buffer (between passes)
        empty  Out(1)                             no value buffered
    """

    def __init__(self, in_lanes: int, lanes: int):
        if not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1) or lanes > 64:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"gearbox lanes must be a power of two 1..64, got {lanes!r}")
        if not isinstance(in_lanes, int) or not 1 <= in_lanes <= lanes:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"gearbox in_lanes must be 1..{lanes}, got {in_lanes!r}")
        self.in_lanes, self.lanes = in_lanes, lanes
        super().__init__({
            "inp": In(stream.Signature(beat_layout(in_lanes))),
            "out": Out(stream.Signature(data.ArrayLayout(VALUE_BITS, lanes))),
            "clear": In(1), "empty": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        V, Li = self.lanes, self.in_lanes
        cap = 2 * V
        buf = Signal(cap * VALUE_BITS, name="value_buf")
        n = Signal(range(cap + 1), name="value_count")
        m.d.comb += [self.out.valid.eq(n >= V), self.out.payload.eq(buf[:V * VALUE_BITS]), self.empty.eq(n == 0)]
        fire_out = self.out.valid & self.out.ready
        kept = Signal(range(cap + 1), name="kept_count")          # values left after this cycle's departure
        m.d.comb += kept.eq(n - Mux(fire_out, V, 0))
        m.d.comb += self.inp.ready.eq(kept <= cap - Li)
        fire_in = self.inp.valid & self.inp.ready
        shifted = Mux(fire_out, buf >> (V * VALUE_BITS), buf)
        count = self.inp.payload.count
        mask = Signal(Li * VALUE_BITS)
        for j in range(Li):
            m.d.comb += mask[j * VALUE_BITS:(j + 1) * VALUE_BITS].eq(Mux(j < count, 0xFFFF, 0))
        incoming = Signal(cap * VALUE_BITS)
        m.d.comb += incoming.eq((self.inp.payload.lanes.as_value() & mask) << (kept * VALUE_BITS))
        with m.If(self.clear):
            m.d.sync += [n.eq(0), buf.eq(0)]
        with m.Else():
            m.d.sync += [buf.eq(shifted | Mux(fire_in, incoming, 0)), n.eq(kept + Mux(fire_in, count, 0))]
        return m
