"""Cassandra NPU tile: plane decoders fed from one AXI4 memory port into a batch-invariant GEMV/GEMM array
(docs/NPU.md).

    AXI4 read --> ReadDma --+-- cmd stream ----------------> command processor (OP_DEC / OP_SET / OP_RUN)
                            +-- activations ---------------> activation buffer (R rows x in_features bf16)
                            +-- per instance i, plane p:
                                  chunk lengths -> U16Unpack --.
                                  plane bytes  -------------> ByteFramer --> decoder i --> Gearbox --> DotUnit
                                  (bf16 pass: slot 0 words -----------------------------^)      |
    AXI4 write <-- WriteMaster <-- OutPacker i <-------------------------------------------------'

* The decoder cluster: ``instances`` copies of one decoder configuration (hw/configs.py, default
  ``decoder_c1v3_l8_core``); its registers are written through OP_DEC with an instance mask (books and
  per-tensor registers once for the cluster, NUMEL per instance). With a cluster part (a decoder v3 core) the
  cores share one TensorRegisters (hw/tensor_regs.py, of the decoder's scheme), which takes every OP_DEC write
  while no core is busy; a whole decoder (one with its own registers) takes the writes itself. A tensor is split
  by the driver into one contiguous range of whole chunks per instance, each range a whole number of weight rows, so every
  instance computes its own outputs (docs/NPU.md "Splitting a tensor").
* The array: one DotUnit per instance, V = the decoder's lanes, ``max_rows`` activation rows. A V-group of
  weights meets the activations of every row slot in the same cycle, so R <= max_rows rows cost the cycles of
  one, and each output's reduction order is fixed by V alone: batch-invariant by construction
  (golden/npu.py is the reference).
* Performance counters (``perf_*``) count cycles and beats; a harness samples them when ``running`` rises and
  falls (one pass).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...errors import ConfigError
from ..decoder import CTRL_START, Reg, cfg_layout
from . import DEFAULT_DECODER, MAX_CLUSTER
from . import commands as C
from .dma import ADDR_BITS, WORDS_BITS, ReadDma
from .dot import DotUnit
from .framer import ByteFramer, U16Unpack
from .gearbox import Gearbox
from .writer import OutPacker, WriteMaster

PLANE_SLOTS = 4
STREAMS_PER_INSTANCE = 2 * PLANE_SLOTS            # plane data + chunk-length table per slot
GLOBAL_STREAMS = 2                                 # command list, activations
SCHEME_PORTS = {"c1": ("spec_codes", "spec_signman", "verif_codes", "verif_rest"),
                "c2": ("spec_mx", None, "verif_codes", "verif_rest")}
COUNTER_BITS = 32


def decoder_factory(name: str):
    from ..configs import CONFIG_INFO, NAMED_CONFIGS
    if name not in NAMED_CONFIGS or not str(CONFIG_INFO[name].get("block", "")).startswith("decoder"):
        raise ConfigError(f"unknown decoder configuration {name!r} (a decoder_* name of hw/configs.py)")
    return NAMED_CONFIGS[name], CONFIG_INFO[name]


class NpuTile(wiring.Component):
    """The tile. Parameters (validated here; the sizing rule is docs/NPU.md "Sizing"):

        data_bytes   W, bytes per AXI beat (the memory port: W bytes per cycle)
        instances    N decoder instances (each with its own DotUnit and output packer)
        decoder      decoder configuration name (hw/configs.py); V = its lanes
        max_rows     activation row slots of the array (R <= max_rows per pass)
        max_in       largest in_features (the activation buffer holds max_rows x max_in bf16 values)
        burst, fifo_depth, max_outstanding   the read DMA (hw/npu/dma.py)
    """

    def __init__(self, data_bytes: int = 8, instances: int = 3, decoder: str = DEFAULT_DECODER,
                 max_rows: int = 5, max_in: int = 1536, burst: int = 16, fifo_depth: int = 64,
                 max_outstanding: int = 16):
        if data_bytes not in (8, 16):
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"tile data_bytes must be 8 or 16, got {data_bytes!r}")
        if not isinstance(instances, int) or not 1 <= instances <= MAX_CLUSTER:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"tile instances must be 1..{MAX_CLUSTER} (the OP_DEC mask is {MAX_CLUSTER} bits), "
                              f"got {instances!r}")
        try:
            make, info = decoder_factory(decoder)
        except ConfigError:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise
        lanes = info["lanes"]
        if data_bytes // 2 > lanes:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"a bf16 pass delivers {data_bytes // 2} values per beat, more than the "
                              f"decoder's {lanes} lanes: use a narrower port or a wider decoder")
        if not isinstance(max_rows, int) or not 1 <= max_rows <= 16:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"tile max_rows must be 1..16, got {max_rows!r}")
        if not isinstance(max_in, int) or max_in < lanes or max_in % lanes:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"tile max_in must be a positive multiple of the lanes ({lanes}), got {max_in!r}")
        self.data_bytes, self.instances, self.decoder_name = data_bytes, instances, decoder
        self.decoder_info, self._make_decoder = info, make
        # a cluster part (a core without a register file): the cores share one TensorRegisters
        self.cluster = info.get("cluster_part") == "instance"
        self.scheme = "c2" if info["block"].startswith("decoder_c2") else "c1"
        self.lanes, self.max_rows, self.max_in = lanes, max_rows, max_in
        self.burst, self.fifo_depth, self.max_outstanding = burst, fifo_depth, max_outstanding
        self.streams = GLOBAL_STREAMS + STREAMS_PER_INSTANCE * instances
        probe = ReadDma(self.streams, data_bytes, burst, fifo_depth, max_outstanding)   # validates the DMA parameters
        probe._MustUse__silence = True
        dw = 8 * data_bytes
        super().__init__({
            "ctl": In(stream.Signature(cfg_layout)),
            "busy": Out(1), "running": Out(1), "error": Out(1), "error_code": Out(8),
            "m_axi_araddr": Out(ADDR_BITS), "m_axi_arlen": Out(8), "m_axi_arsize": Out(3), "m_axi_arburst": Out(2),
            "m_axi_arvalid": Out(1), "m_axi_arready": In(1),
            "m_axi_rdata": In(dw), "m_axi_rresp": In(2), "m_axi_rlast": In(1), "m_axi_rvalid": In(1),
            "m_axi_rready": Out(1),
            "m_axi_awaddr": Out(ADDR_BITS), "m_axi_awlen": Out(8), "m_axi_awsize": Out(3), "m_axi_awburst": Out(2),
            "m_axi_awvalid": Out(1), "m_axi_awready": In(1),
            "m_axi_wdata": Out(dw), "m_axi_wstrb": Out(data_bytes), "m_axi_wlast": Out(1), "m_axi_wvalid": Out(1),
            "m_axi_wready": In(1),
            "m_axi_bresp": In(2), "m_axi_bvalid": In(1), "m_axi_bready": Out(1),
            "perf_cycles": Out(COUNTER_BITS), "perf_read_beats": Out(COUNTER_BITS),
            "perf_write_beats": Out(COUNTER_BITS), "perf_act_wait": Out(COUNTER_BITS),
            "perf_busy": Out(COUNTER_BITS).array(instances),       # cycles the instance's array took a group
            "perf_wait_mem": Out(COUNTER_BITS).array(instances),   # idle, a plane the decoder reads had no word
            "perf_wait_dec": Out(COUNTER_BITS).array(instances),   # idle with every plane word there (decoder)
        })

    def elaborate(self, platform):
        m = Module()
        W, N, V, Rm = self.data_bytes, self.instances, self.lanes, self.max_rows
        lw = exact_log2(W)
        ports = SCHEME_PORTS[self.scheme]

        dma = ReadDma(self.streams, W, self.burst, self.fifo_depth, self.max_outstanding, priority=1)
        wr = WriteMaster(N, W, self.burst)
        m.submodules.dma, m.submodules.writer = dma, wr
        m.d.comb += [
            self.m_axi_araddr.eq(dma.ar_addr), self.m_axi_arlen.eq(dma.ar_len), self.m_axi_arvalid.eq(dma.ar_valid),
            self.m_axi_arsize.eq(lw), self.m_axi_arburst.eq(1), dma.ar_ready.eq(self.m_axi_arready),
            dma.r_data.eq(self.m_axi_rdata), dma.r_resp.eq(self.m_axi_rresp), dma.r_last.eq(self.m_axi_rlast),
            dma.r_valid.eq(self.m_axi_rvalid), self.m_axi_rready.eq(dma.r_ready),
            self.m_axi_awaddr.eq(wr.aw_addr), self.m_axi_awlen.eq(wr.aw_len), self.m_axi_awvalid.eq(wr.aw_valid),
            self.m_axi_awsize.eq(lw), self.m_axi_awburst.eq(1), wr.aw_ready.eq(self.m_axi_awready),
            self.m_axi_wdata.eq(wr.w_data), self.m_axi_wstrb.eq(wr.w_strb), self.m_axi_wlast.eq(wr.w_last),
            self.m_axi_wvalid.eq(wr.w_valid), wr.w_ready.eq(self.m_axi_wready),
            wr.b_resp.eq(self.m_axi_bresp), wr.b_valid.eq(self.m_axi_bvalid), self.m_axi_bready.eq(wr.b_ready),
        ]

        # ------------------------------------------------------------------ registers
        cmd_addr = Signal(ADDR_BITS, name="cmd_addr")
        cmd_words = Signal(WORDS_BITS, name="cmd_words")
        mode = Signal(2, name="pass_mode")
        rows = Signal(range(Rm + 1), name="pass_rows", init=1)
        groups = Signal(range(self.max_in // V + 1), name="pass_groups", init=1)
        act_addr = Signal(ADDR_BITS, name="act_addr")
        plane_addr = [[Signal(ADDR_BITS, name=f"i{i}_plane{p}_addr") for p in range(PLANE_SLOTS)] for i in range(N)]
        plane_words = [[Signal(WORDS_BITS, name=f"i{i}_plane{p}_words") for p in range(PLANE_SLOTS)] for i in range(N)]
        len_addr = [[Signal(ADDR_BITS, name=f"i{i}_len{p}_addr") for p in range(PLANE_SLOTS)] for i in range(N)]
        nchunks = [Signal(WORDS_BITS, name=f"i{i}_nchunks") for i in range(N)]
        out_addr = [Signal(ADDR_BITS, name=f"i{i}_out_addr") for i in range(N)]
        out_rows = [Signal(WORDS_BITS, name=f"i{i}_out_rows") for i in range(N)]
        enable = Signal(N, name="inst_enable")

        err = Signal(8, name="error_bits")
        m.d.comb += [self.error_code.eq(err), self.error.eq(err.any())]

        # ------------------------------------------------------------------ perf counters
        cyc = Signal(COUNTER_BITS, name="perf_cycle_count")
        m.d.sync += cyc.eq(cyc + 1)
        m.d.comb += self.perf_cycles.eq(cyc)
        rbeats = Signal(COUNTER_BITS)
        wbeats = Signal(COUNTER_BITS)
        m.d.sync += [rbeats.eq(rbeats + (self.m_axi_rvalid & self.m_axi_rready)),
                     wbeats.eq(wbeats + (self.m_axi_wvalid & self.m_axi_wready))]
        m.d.comb += [self.perf_read_beats.eq(rbeats), self.perf_write_beats.eq(wbeats)]

        # ------------------------------------------------------------------ command stream (DMA stream 0)
        cmd_s = dma.out[0]
        per_word = W // 8
        cmd_idx = Signal(range(max(per_word, 2)), name="cmd_index")
        cmd = Signal(64, name="cmd_word")
        m.d.comb += cmd.eq(cmd_s.payload.word_select(cmd_idx, 64) if per_word > 1 else cmd_s.payload)
        op, target, field, value = cmd[56:64], cmd[48:56], cmd[40:48], cmd[0:40]
        cmd_take = Signal()                    # this command is done: advance
        with m.If(cmd_take):
            if per_word > 1:
                m.d.sync += cmd_idx.eq(cmd_idx + 1)
                m.d.comb += cmd_s.ready.eq(cmd_idx == per_word - 1)
            else:
                m.d.comb += cmd_s.ready.eq(1)

        # ------------------------------------------------------------------ decoder cluster
        decs, framers, lens, gears, dots, packers = [], [], [], [], [], []
        dec_wr_mask = Signal(N, name="dec_write_mask")
        dec_wr_taken = Signal(N, name="dec_write_taken")
        dec_wr_addr = Signal(8, name="dec_write_addr")
        dec_wr_data = Signal(32, name="dec_write_data")
        start_pulse = Signal(name="pass_start")
        regs = None
        if self.cluster:     # one TensorRegisters for the cluster's cores (hw/tensor_regs.py TENSOR_PARAMS)
            from ..tensor_regs import TensorRegisters
            regs = m.submodules.tensor_regs = TensorRegisters(self.scheme)
        for i in range(N):
            dec = self._make_decoder()
            m.submodules[f"dec{i}"] = dec
            decs.append(dec)
            if regs is not None:
                m.d.comb += dec.params.eq(regs.params)
            m.d.comb += [dec.cfg.valid.eq(dec_wr_mask[i] & ~dec_wr_taken[i]),
                         dec.cfg.payload.addr.eq(dec_wr_addr), dec.cfg.payload.data.eq(dec_wr_data)]
            with m.If(dec.error):
                m.d.sync += err[C.ERR_DECODER].eq(1)
            fr_i, ln_i = [], []
            base = GLOBAL_STREAMS + STREAMS_PER_INSTANCE * i
            for p, port in enumerate(ports):
                if port is None:
                    fr_i.append(None)
                    ln_i.append(None)
                    m.d.comb += dma.out[base + p].ready.eq(0)
                    m.d.comb += dma.out[base + PLANE_SLOTS + p].ready.eq(0)
                    continue
                fr = ByteFramer(W, dec.port_words[port])
                un = U16Unpack(W)
                m.submodules[f"i{i}_frame{p}"] = fr
                m.submodules[f"i{i}_lens{p}"] = un
                fr_i.append(fr)
                ln_i.append(un)
                wiring.connect(m, un.out, fr.lens)
                wiring.connect(m, fr.out, getattr(dec, port))
                lstream = dma.out[base + PLANE_SLOTS + p]
                m.d.comb += [un.inp.payload.eq(lstream.payload), un.inp.valid.eq(lstream.valid),
                             lstream.ready.eq(un.inp.ready)]
            framers.append(fr_i)
            lens.append(ln_i)

            gb = Gearbox(V, V)
            dot = DotUnit(V, Rm)
            pk = OutPacker(Rm, W)
            m.submodules[f"i{i}_gear"], m.submodules[f"i{i}_dot"], m.submodules[f"i{i}_pack"] = gb, dot, pk
            gears.append(gb)
            dots.append(dot)
            packers.append(pk)
            # plane slot 0: the framer's input in a decoder pass, the gearbox's in a bf16 pass
            s0 = dma.out[base]
            bf16 = mode == C.MODE_BF16
            fr0 = fr_i[0]
            m.d.comb += [fr0.inp.payload.eq(s0.payload), fr0.inp.valid.eq(s0.valid & ~bf16)]
            for p in range(1, PLANE_SLOTS):
                if fr_i[p] is not None:
                    s = dma.out[base + p]
                    m.d.comb += [fr_i[p].inp.payload.eq(s.payload), fr_i[p].inp.valid.eq(s.valid),
                                 s.ready.eq(fr_i[p].inp.ready)]
            with m.If(bf16):
                m.d.comb += [gb.inp.valid.eq(s0.valid), s0.ready.eq(gb.inp.ready),
                             gb.inp.payload.count.eq(W // 2), dec.out.ready.eq(0)]
                for j in range(W // 2):
                    m.d.comb += gb.inp.payload.lanes[j].eq(s0.payload[16 * j:16 * (j + 1)])
            with m.Else():
                m.d.comb += [gb.inp.valid.eq(dec.out.valid), dec.out.ready.eq(gb.inp.ready),
                             gb.inp.payload.count.eq(dec.out.payload.count), s0.ready.eq(fr0.inp.ready)]
                for j in range(V):
                    m.d.comb += gb.inp.payload.lanes[j].eq(dec.out.payload.lanes[j])
            wiring.connect(m, dot.out, pk.inp)
            m.d.comb += [pk.rows.eq(rows)]
            wiring.connect(m, pk.out, wr.inp[i])

        # ------------------------------------------------------------------ activation buffer
        depth = self.max_in // V
        act_mem = Memory(shape=data.ArrayLayout(16, Rm * V), depth=depth, init=[])
        m.submodules.act_mem = act_mem
        aw = act_mem.write_port(granularity=1)
        act_s = dma.out[1]
        vpw = W // 2                                   # activation values per memory word
        act_r = Signal(range(Rm + 1), name="act_row")
        act_pos = Signal(range(self.max_in + 1), name="act_pos")     # value index within the row
        act_done = Signal(name="act_loaded")
        m.d.comb += act_s.ready.eq(~act_done)
        act_fire = act_s.valid & act_s.ready
        m.d.comb += aw.addr.eq(act_pos[exact_log2(V):])
        lane0 = act_pos[:exact_log2(V)] if V > 1 else Const(0, 1)
        slot_base = Signal(range(Rm * V + 1))
        m.d.comb += slot_base.eq(act_r * V + lane0)
        for j in range(Rm * V):
            for k in range(vpw):
                with m.If(slot_base + k == j):
                    m.d.comb += [aw.data[j].eq(act_s.payload[16 * k:16 * (k + 1)]), aw.en[j].eq(act_fire)]
        row_end = act_pos + vpw >= Cat(Const(0, exact_log2(V)), groups)
        with m.If(act_fire):
            with m.If(row_end):
                m.d.sync += [act_pos.eq(0), act_r.eq(act_r + 1)]
                with m.If(act_r + 1 == rows):
                    m.d.sync += act_done.eq(1)
            with m.Else():
                m.d.sync += act_pos.eq(act_pos + vpw)

        # ------------------------------------------------------------------ per-instance array feed
        grp = [Signal(range(depth + 1), name=f"i{i}_group") for i in range(N)]
        rows_left = [Signal(WORDS_BITS, name=f"i{i}_rows_left") for i in range(N)]
        running = Signal(name="pass_running")
        for i in range(N):
            rp = act_mem.read_port(domain="comb")
            m.d.comb += rp.addr.eq(grp[i])
            gb, dot = gears[i], dots[i]
            m.d.comb += [dot.inp.payload.w.eq(gb.out.payload), dot.inp.payload.first.eq(grp[i] == 0),
                         dot.inp.payload.last.eq(grp[i] == groups - 1)]
            for r in range(Rm):
                for j in range(V):
                    m.d.comb += dot.inp.payload.x[r][j].eq(rp.data[r * V + j])
            go = act_done & (rows_left[i] != 0)
            m.d.comb += [dot.inp.valid.eq(gb.out.valid & go), gb.out.ready.eq(dot.inp.ready & go)]
            fire = dot.inp.valid & dot.inp.ready
            with m.If(fire):
                with m.If(grp[i] == groups - 1):
                    m.d.sync += [grp[i].eq(0), rows_left[i].eq(rows_left[i] - 1)]
                with m.Else():
                    m.d.sync += grp[i].eq(grp[i] + 1)
            # where an idle cycle went: a plane the decoder reads had no word (memory) or all had (decoder)
            busy_c, mem_c, dec_c = Signal(COUNTER_BITS), Signal(COUNTER_BITS), Signal(COUNTER_BITS)
            m.d.comb += [self.perf_busy[i].eq(busy_c), self.perf_wait_mem[i].eq(mem_c), self.perf_wait_dec[i].eq(dec_c)]
            used = []
            for p, port in enumerate(ports):
                if port is not None:
                    need = Const(1, 1) if p < 2 else (mode == C.MODE_FULL)
                    used.append(~need | getattr(decs[i], port).valid)
            planes_there = Mux(mode == C.MODE_BF16, dma.out[GLOBAL_STREAMS + STREAMS_PER_INSTANCE * i].valid,
                               Cat(*used).all())
            idle = running & go & ~fire
            m.d.sync += [busy_c.eq(busy_c + fire), mem_c.eq(mem_c + (idle & ~planes_there)),
                         dec_c.eq(dec_c + (idle & planes_there))]

        act_wait = Signal(COUNTER_BITS)
        m.d.sync += act_wait.eq(act_wait + (running & ~act_done))
        m.d.comb += self.perf_act_wait.eq(act_wait)

        # ------------------------------------------------------------------ control
        setup_i = Signal(range(self.streams + N + 1), name="setup_step")
        m.d.comb += [self.running.eq(running)]
        all_taken = ((dec_wr_taken | Cat(*(decs[i].cfg.valid & decs[i].cfg.ready for i in range(N))))
                     & dec_wr_mask) == dec_wr_mask
        if regs is not None:
            # every OP_DEC write also goes to the shared registers (they ignore NUMEL and CTRL, the cores the
            # rest), taken while no core is busy
            regs_taken = Signal(name="regs_write_taken")
            m.d.comb += [regs.cfg.valid.eq(dec_wr_mask.any() & ~regs_taken),
                         regs.cfg.payload.addr.eq(dec_wr_addr), regs.cfg.payload.data.eq(dec_wr_data),
                         regs.accept.eq(Cat(*(~d.busy for d in decs)).all())]
            with m.If(~dec_wr_mask.any()):
                m.d.sync += regs_taken.eq(0)
            with m.Elif(regs.cfg.valid & regs.cfg.ready):
                m.d.sync += regs_taken.eq(1)
            all_taken = all_taken & (regs_taken | regs.cfg.ready)
        for i in range(N):
            with m.If(decs[i].cfg.valid & decs[i].cfg.ready):
                m.d.sync += dec_wr_taken[i].eq(1)
        ctl = self.ctl
        m.d.comb += ctl.ready.eq(1)
        pass_streams_idle = ~(dma.active[GLOBAL_STREAMS - 1:]).any()
        dec_idle = Cat(*(~d.busy for d in decs)).all()
        frm_idle = Cat(*(~f.busy for fr_i in framers for f in fr_i if f is not None)).all()

        with m.FSM(name="tile_fsm"):
            with m.State("IDLE"):
                with m.If(ctl.valid):
                    a, d = ctl.payload.addr, ctl.payload.data
                    with m.Switch(a):
                        with m.Case(C.CTL_CMD_ADDR_LO):
                            m.d.sync += cmd_addr[:32].eq(d)
                        with m.Case(C.CTL_CMD_ADDR_HI):
                            m.d.sync += cmd_addr[32:].eq(d)
                        with m.Case(C.CTL_CMD_WORDS):
                            m.d.sync += cmd_words.eq(d)
                        with m.Case(C.CTL_CTRL):
                            with m.If(d[0]):
                                m.d.comb += [dma.load.eq(1), dma.load_sel.eq(0), dma.load_addr.eq(cmd_addr),
                                             dma.load_words.eq((cmd_words + per_word - 1) >> exact_log2(per_word)
                                                               if per_word > 1 else cmd_words)]
                                m.d.sync += cmd_idx.eq(0)
                                m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += self.busy.eq(1)
                with m.If(err.any()):
                    m.next = "ERROR"
                with m.Elif(cmd_s.valid):
                    with m.Switch(op):
                        with m.Case(C.OP_END):
                            m.d.comb += cmd_take.eq(1)
                            m.next = "IDLE"
                        with m.Case(C.OP_DEC):
                            m.d.sync += [dec_wr_mask.eq(target[:N]), dec_wr_taken.eq(0), dec_wr_addr.eq(field),
                                         dec_wr_data.eq(value[:32])]
                            m.d.comb += cmd_take.eq(1)
                            m.next = "DEC_WRITE"
                        with m.Case(C.OP_SET):
                            m.d.comb += cmd_take.eq(1)
                            self._set_fields(m, target, field, value, mode, rows, groups, act_addr, plane_addr,
                                             plane_words, len_addr, nchunks, out_addr, out_rows, enable)
                        with m.Case(C.OP_RUN):
                            m.d.comb += cmd_take.eq(1)
                            m.d.sync += setup_i.eq(0)
                            m.d.comb += start_pulse.eq(1)
                            m.next = "SETUP"
                        with m.Default():
                            m.d.sync += err[C.ERR_COMMAND].eq(1)
            with m.State("DEC_WRITE"):
                m.d.comb += self.busy.eq(1)
                with m.If(all_taken):
                    m.d.sync += dec_wr_mask.eq(0)
                    m.next = "FETCH"
            with m.State("SETUP"):
                # one DMA stream and one writer region programmed per cycle
                m.d.comb += self.busy.eq(1)
                m.d.sync += setup_i.eq(setup_i + 1)
                self._setup_step(m, setup_i, dma, wr, mode, rows, groups, act_addr, plane_addr, plane_words,
                                 len_addr, nchunks, out_addr, out_rows, enable, W)
                with m.If(setup_i == self.streams + N):
                    with m.If(mode == C.MODE_BF16):
                        m.d.sync += running.eq(1)
                        m.next = "RUN"
                    with m.Else():
                        m.d.sync += [dec_wr_mask.eq(enable), dec_wr_taken.eq(0), dec_wr_addr.eq(Reg.CTRL),
                                     dec_wr_data.eq(CTRL_START)]
                        m.next = "DEC_START"
            with m.State("DEC_START"):
                m.d.comb += self.busy.eq(1)
                with m.If(all_taken):
                    m.d.sync += [dec_wr_mask.eq(0), running.eq(1)]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                done = (Cat(*(r == 0 for r in rows_left)).all() & wr.idle & pass_streams_idle & dec_idle
                        & frm_idle)
                with m.If(err.any()):
                    m.d.sync += running.eq(0)
                    m.next = "ERROR"
                with m.Elif(done):
                    m.d.sync += running.eq(0)
                    m.next = "FETCH"
            with m.State("ERROR"):
                with m.If(ctl.valid & (ctl.payload.addr == C.CTL_CTRL) & ctl.payload.data[1]):
                    m.d.sync += err.eq(0)
                    m.next = "IDLE"

        # pass start: framers, unpackers, packers, gearboxes, the activation loader, the array's counters
        for i in range(N):
            en_i = enable[i]
            for p, (fr, un) in enumerate(zip(framers[i], lens[i])):
                if fr is None:
                    continue
                used = (mode != C.MODE_BF16) & ((p < 2) | (mode == C.MODE_FULL)) & en_i
                m.d.comb += [fr.start.eq(start_pulse & used), fr.skip.eq(plane_addr[i][p][:exact_log2(W)]),
                             fr.nchunks.eq(nchunks[i]),
                             un.start.eq(start_pulse & used), un.count.eq(nchunks[i])]
            m.d.comb += [packers[i].start.eq(start_pulse), packers[i].values.eq(Mux(en_i, out_rows[i] * rows, 0)),
                         gears[i].clear.eq(start_pulse)]
            with m.If(start_pulse):
                m.d.sync += [grp[i].eq(0), rows_left[i].eq(Mux(en_i, out_rows[i], 0))]
        with m.If(start_pulse):
            m.d.sync += [act_r.eq(0), act_pos.eq(0), act_done.eq(0)]
        with m.If(self.m_axi_rvalid & self.m_axi_rready & (self.m_axi_rresp != 0)):
            m.d.sync += err[C.ERR_RRESP].eq(1)
        with m.If(wr.bresp_err):
            m.d.sync += err[C.ERR_BRESP].eq(1)
        return m

    def _set_fields(self, m, target, field, value, mode, rows, groups, act_addr, plane_addr, plane_words, len_addr,
                    nchunks, out_addr, out_rows, enable):
        with m.If(target == C.TARGET_TILE):
            with m.Switch(field):
                with m.Case(C.F_MODE):
                    m.d.sync += mode.eq(value)
                with m.Case(C.F_ROWS):
                    m.d.sync += rows.eq(value)
                with m.Case(C.F_GROUPS):
                    m.d.sync += groups.eq(value)
                with m.Case(C.F_ACT_ADDR):
                    m.d.sync += act_addr.eq(value)
        for i in range(self.instances):
            with m.If(target == i):
                with m.Switch(field):
                    for p in range(PLANE_SLOTS):
                        with m.Case(C.F_PLANE_ADDR + p):
                            m.d.sync += plane_addr[i][p].eq(value)
                        with m.Case(C.F_PLANE_WORDS + p):
                            m.d.sync += plane_words[i][p].eq(value)
                        with m.Case(C.F_LEN_ADDR + p):
                            m.d.sync += len_addr[i][p].eq(value)
                    with m.Case(C.F_NCHUNKS):
                        m.d.sync += nchunks[i].eq(value)
                    with m.Case(C.F_OUT_ADDR):
                        m.d.sync += out_addr[i].eq(value)
                    with m.Case(C.F_OUT_ROWS):
                        m.d.sync += out_rows[i].eq(value)
                    with m.Case(C.F_ENABLE):
                        m.d.sync += enable[i].eq(value[0])

    def _setup_step(self, m, step, dma, wr, mode, rows, groups, act_addr, plane_addr, plane_words, len_addr,
                    nchunks, out_addr, out_rows, enable, W):
        N, V = self.instances, self.lanes
        lw = exact_log2(W)
        per_word_vals = W // 2
        # stream 1: activations, rows x groups x V values of 2 bytes
        act_words = Signal(WORDS_BITS, name="act_words")
        m.d.comb += act_words.eq((rows * Cat(Const(0, exact_log2(V)), groups)) >> exact_log2(per_word_vals))
        len_words = [Signal(WORDS_BITS, name=f"i{i}_len_words") for i in range(N)]
        for i in range(N):
            m.d.comb += len_words[i].eq((Cat(Const(0, 1), nchunks[i]) + W - 1) >> lw)
        with m.Switch(step):
            with m.Case(1):
                m.d.comb += [dma.load.eq(1), dma.load_sel.eq(1), dma.load_addr.eq(act_addr),
                             dma.load_words.eq(act_words)]
            for i in range(N):
                base = GLOBAL_STREAMS + STREAMS_PER_INSTANCE * i
                for p in range(PLANE_SLOTS):
                    used = enable[i] & Mux(mode == C.MODE_BF16, p == 0, (p < 2) | (mode == C.MODE_FULL))
                    lused = used & (mode != C.MODE_BF16)
                    with m.Case(base + p):
                        m.d.comb += [dma.load.eq(1), dma.load_sel.eq(base + p), dma.load_addr.eq(plane_addr[i][p]),
                                     dma.load_words.eq(Mux(used, plane_words[i][p], 0))]
                    with m.Case(base + PLANE_SLOTS + p):
                        m.d.comb += [dma.load.eq(1), dma.load_sel.eq(base + PLANE_SLOTS + p),
                                     dma.load_addr.eq(len_addr[i][p]), dma.load_words.eq(Mux(lused, len_words[i], 0))]
            for i in range(N):
                with m.Case(self.streams + i):
                    beats = Signal(WORDS_BITS, name=f"i{i}_out_beats")
                    m.d.comb += beats.eq((out_rows[i] * rows + W // 4 - 1) >> exact_log2(W // 4))
                    m.d.comb += [wr.load.eq(1), wr.load_sel.eq(i), wr.load_addr.eq(out_addr[i]),
                                 wr.load_beats.eq(Mux(enable[i], beats, 0))]
