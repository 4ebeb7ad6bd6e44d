"""Output path of the NPU tile: per-instance packers and one AXI4 write master (docs/NPU.md "Output").

``OutPacker``: the dot-product unit's result of one weight row (fp32 for each of the R active rows) is written
to memory as R consecutive fp32 words, rows back to back: out[o * R + r] for the instance's rows o. The packer
serialises the R results (one per cycle) into ``data_bytes``-byte beats; the last beat of a pass carries only
the bytes it fills (``strb``).

``WriteMaster``: the beats of every instance go through one AXI4 write master (single ID, INCR bursts that
never cross 4 KiB). An instance is granted a burst when its beat FIFO holds the whole burst (so W beats never
wait on the datapath and the channel is held only as long as the burst's data takes); AW is sent, then the
burst's W beats; B responses are counted, and ``idle`` rises when every programmed beat was answered.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...errors import ConfigError
from .dma import ADDR_BITS, WORDS_BITS, burst_beats, check_port, rotating_pick

FP32_BITS = 32


def beat_layout(data_bytes: int) -> data.StructLayout:
    return data.StructLayout({"data": 8 * data_bytes, "strb": data_bytes})


class OutPacker(wiring.Component):
    """R fp32 results per weight row -> ``data_bytes``-byte beats.

    Ports
        start, values   one-cycle start of a pass; ``values`` = rows x R results it will write
        rows            R (1..max_rows), stable during a pass
        inp             In(stream {y: Array(32, max_rows)}) one weight row's results (slots >= R ignored)
        out             Out(stream {data, strb}) beats in address order
    """

    def __init__(self, max_rows: int, data_bytes: int = 8):
        if not isinstance(max_rows, int) or not 1 <= max_rows <= 16:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"OutPacker max_rows must be 1..16, got {max_rows!r}")
        check_port(self, "OutPacker", data_bytes)
        self.max_rows, self.data_bytes = max_rows, data_bytes
        super().__init__({
            "start": In(1), "values": In(WORDS_BITS), "rows": In(range(1, max_rows + 1)),
            "inp": In(stream.Signature(data.StructLayout({"y": data.ArrayLayout(FP32_BITS, max_rows)}))),
            "out": Out(stream.Signature(beat_layout(data_bytes))),
        })

    def elaborate(self, platform):
        m = Module()
        Rm, W = self.max_rows, self.data_bytes
        per_beat = W // 4
        row_r = Signal(data.ArrayLayout(FP32_BITS, Rm), name="row_results")
        row_full = Signal(name="row_full")
        k = Signal(range(Rm), name="row_index")          # next result of the held row
        left = Signal(WORDS_BITS, name="values_left")
        slot = Signal(range(per_beat), name="beat_slot")
        beat = Signal(8 * W, name="beat_data")
        strb = Signal(W, name="beat_strb")
        beat_full = Signal(name="beat_full")
        m.d.comb += [self.out.valid.eq(beat_full), self.out.payload.data.eq(beat), self.out.payload.strb.eq(strb)]
        m.d.comb += self.inp.ready.eq(~row_full)
        with m.If(self.inp.valid & self.inp.ready):
            m.d.sync += [row_r.eq(self.inp.payload.y), row_full.eq(1), k.eq(0)]
        beat_free = ~beat_full | self.out.ready
        with m.If(self.out.valid & self.out.ready):
            m.d.sync += beat_full.eq(0)
        move = row_full & beat_free & (left != 0)
        with m.If(move):
            value = row_r[k]
            final = (slot == per_beat - 1) | (left == 1)
            m.d.sync += left.eq(left - 1)
            for j in range(per_beat):
                with m.If(slot == j):
                    m.d.sync += beat.word_select(j, FP32_BITS).eq(value)
            m.d.sync += strb.eq(Mux(slot == 0, 0, strb) | (Const(0xF, 4) << (slot * 4)))
            with m.If(final):
                m.d.sync += [beat_full.eq(1), slot.eq(0)]
            with m.Else():
                m.d.sync += slot.eq(slot + 1)
            with m.If(k == self.rows - 1):
                m.d.sync += row_full.eq(0)
            with m.Else():
                m.d.sync += k.eq(k + 1)
        with m.If(self.start):
            m.d.sync += [left.eq(self.values), slot.eq(0), row_full.eq(0), beat_full.eq(0)]
        return m


class WriteMaster(wiring.Component):
    """``sources`` beat streams over one AXI4 write master.

    Ports
        load, load_sel, load_addr, load_beats   program source ``load_sel``'s region (address aligned to
                                                data_bytes, beats to write)
        inp[i]          In(stream {data, strb}) beats of source i in address order
        idle            every programmed beat was written and answered
        aw_*, w_*, b_*  the AXI4 write channels
        bresp_err       sticky: a B response was not OKAY
    """

    def __init__(self, sources: int, data_bytes: int = 8, burst: int = 16):
        if not isinstance(sources, int) or not 1 <= sources <= 32:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"WriteMaster sources must be 1..32, got {sources!r}")
        check_port(self, "WriteMaster", data_bytes, burst)
        self.sources, self.data_bytes, self.burst = sources, data_bytes, burst
        super().__init__({
            "load": In(1), "load_sel": In(range(sources)), "load_addr": In(ADDR_BITS), "load_beats": In(WORDS_BITS),
            "inp": In(stream.Signature(beat_layout(data_bytes))).array(sources),
            "idle": Out(1),
            "aw_addr": Out(ADDR_BITS), "aw_len": Out(8), "aw_valid": Out(1), "aw_ready": In(1),
            "w_data": Out(8 * data_bytes), "w_strb": Out(data_bytes), "w_last": Out(1), "w_valid": Out(1),
            "w_ready": In(1),
            "b_resp": In(2), "b_valid": In(1), "b_ready": Out(1),
            "bresp_err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        N, W, B = self.sources, self.data_bytes, self.burst
        lw = exact_log2(W)
        depth = 2 * B
        addr = [Signal(ADDR_BITS - lw, name=f"src{i}_beat_addr") for i in range(N)]
        left = [Signal(WORDS_BITS, name=f"src{i}_beats_left") for i in range(N)]
        fifos, blen, ready = [], [], Signal(N)
        for i in range(N):
            f = SyncFIFOBuffered(width=9 * W, depth=depth)
            m.submodules[f"fifo{i}"] = f
            fifos.append(f)
            m.d.comb += [f.w_data.eq(self.inp[i].payload.as_value()), f.w_en.eq(self.inp[i].valid),
                         self.inp[i].ready.eq(f.w_rdy)]
            bl = burst_beats(m, f"src{i}", addr[i], left[i], B, W)
            blen.append(bl)
            m.d.comb += ready[i].eq((left[i] != 0) & (f.level >= bl))

        sel = Signal(range(N), name="burst_source")
        beats = Signal(range(B + 1), name="burst_beats_left")
        rr = Signal(range(N), name="burst_rr")
        outstanding = Signal(range(2 * N * 256 + 1), name="bursts_unanswered")
        b_fire = self.b_valid & self.b_ready
        m.d.comb += self.b_ready.eq(1)
        with m.If(b_fire & (self.b_resp != 0)):
            m.d.sync += self.bresp_err.eq(1)
        aw_fire = self.aw_valid & self.aw_ready
        m.d.sync += outstanding.eq(outstanding + aw_fire - b_fire)

        cur = Signal(9 * W)
        for i in range(N):
            with m.If(sel == i):
                m.d.comb += cur.eq(fifos[i].r_data)
        m.d.comb += [self.w_data.eq(cur[:8 * W]), self.w_strb.eq(cur[8 * W:]), self.w_last.eq(beats == 1)]

        with m.FSM(name="write_fsm"):
            with m.State("PICK"):
                pick = rotating_pick(m, "burst_pick", ready, rr)
                with m.If(ready.any()):
                    for i in range(N):
                        with m.If(pick == i):
                            m.d.sync += [self.aw_addr.eq(Cat(Const(0, lw), addr[i])), self.aw_len.eq(blen[i] - 1),
                                         beats.eq(blen[i]), addr[i].eq(addr[i] + blen[i]),
                                         left[i].eq(left[i] - blen[i])]
                    m.d.sync += [sel.eq(pick), rr.eq(Mux(pick == N - 1, 0, pick + 1))]
                    m.next = "AW"
            with m.State("AW"):
                m.d.comb += self.aw_valid.eq(1)
                with m.If(self.aw_ready):
                    m.next = "W"
            with m.State("W"):
                m.d.comb += self.w_valid.eq(1)          # the FIFO holds the whole burst (granted on its level)
                with m.If(self.w_ready):
                    for i in range(N):
                        with m.If(sel == i):
                            m.d.comb += fifos[i].r_en.eq(1)
                    m.d.sync += beats.eq(beats - 1)
                    with m.If(beats == 1):
                        m.next = "PICK"
        # programming a region (the tile does it while the master is idle)
        for i in range(N):
            with m.If(self.load & (self.load_sel == i)):
                m.d.sync += [addr[i].eq(self.load_addr[lw:]), left[i].eq(self.load_beats)]
        busy_any = Signal()
        m.d.comb += busy_any.eq(Cat(*(left[i] != 0 for i in range(N))).any())
        m.d.comb += self.idle.eq(~busy_any & (outstanding == 0) & ~self.aw_valid & ~self.w_valid & (beats == 0))
        return m
