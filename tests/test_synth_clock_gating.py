"""`synth.flow --clock-gating` keeps the function: the gated netlist and the reference flow's netlist of the
same design, both simulated at gate level in Icarus (Verilog models of cassandra_generic.lib's cells, the
clock gate a latch + AND), see the same random inputs and resets and must give the same outputs every
cycle. The reference netlist is the flow every figure in docs/SYNTHESIS.md comes from."""
from __future__ import annotations

import json
import random
import re
import shutil
import subprocess

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from cassandra_rtl.synth import flow, liberty

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None or shutil.which("vvp") is None,
                                reason="iverilog not installed")


def cell_models() -> str:
    """Behavioural Verilog for every cell of the generic library, from the generator's own tables."""
    out = []
    for c in liberty.COMB_CELLS:
        expr = c.function.replace("!", "~")
        out.append(f"module {c.name}({', '.join(f'input {p}' for p in c.inputs)}, output Y);\n"
                   f"  assign Y = {expr};\nendmodule\n")
    out.append("module DFF_X1(input CLK, input D, output reg Q);\n  always @(posedge CLK) Q <= D;\nendmodule\n")
    out.append("module DFFR_X1(input CLK, input D, input RN, output reg Q);\n"
               "  always @(posedge CLK or negedge RN) Q <= !RN ? 1'b0 : D;\nendmodule\n")
    out.append("module DFFS_X1(input CLK, input D, input SN, output reg Q);\n"
               "  always @(posedge CLK or negedge SN) Q <= !SN ? 1'b1 : D;\nendmodule\n")
    for name, _, value in liberty.TIE_CELLS:
        out.append(f"module {name}(output Y);\n  assign Y = 1'b{value};\nendmodule\n")
    # the integrated clock gate: E latched while CLK is low, GCLK = CLK & latch (no glitch while CLK is high)
    out.append(f"module {liberty.ICG_CELL}(input CLK, input E, output GCLK);\n  reg en;\n"
               "  always @(CLK or E) if (!CLK) en = E;\n  assign GCLK = CLK & en;\nendmodule\n")
    return "\n".join(out)


def _synthesise(tmp_path, block: flow.Block, gated: bool):
    """The block through the flow (gated or reference); its work directory, holding netlist.v / netlist.json."""
    opts = flow.FlowOptions(out=tmp_path / ("cg" if gated else "plain"), clock_gating=gated)
    entry = flow.run_flow(opts, blocks={block.name: block})["blocks"][block.name]
    assert entry["status"] == "ok", entry
    assert (entry["clock_gates"] > 0) == gated
    return flow.block_workdir(opts, block.name)


def _netlist(tmp_path, block: flow.Block, gated: bool) -> tuple[str, dict]:
    work = _synthesise(tmp_path, block, gated)
    top = flow._top_name(block.name)
    ports = json.loads((work / "netlist.json").read_text())["modules"][top]["ports"]
    suffix = "_cg" if gated else "_plain"
    text = re.sub(rf"\bmodule\s+{top}\b", f"module {top}{suffix}", (work / "netlist.v").read_text())
    return text, ports


def compare_gate_level(tmp_path, block: flow.Block, cycles: int, seed: int = 1) -> int:
    """Simulate both netlists side by side; returns the number of cycles compared (asserts no mismatch)."""
    plain, ports = _netlist(tmp_path, block, gated=False)
    gated, ports_cg = _netlist(tmp_path, block, gated=True)
    assert {n: (p["direction"], len(p["bits"])) for n, p in ports.items()} == \
           {n: (p["direction"], len(p["bits"])) for n, p in ports_cg.items()}
    top = flow._top_name(block.name)
    ins = {n: len(p["bits"]) for n, p in ports.items() if p["direction"] == "input" and n not in ("clk", "rst")}
    outs = {n: len(p["bits"]) for n, p in ports.items() if p["direction"] == "output"}
    rng = random.Random(seed)
    decl = [f"  reg [{w - 1}:0] {n};" for n, w in ins.items()]
    decl += [f"  wire [{w - 1}:0] {n}_p, {n}_g;" for n, w in outs.items()]
    conn = lambda s: ", ".join([".clk(clk)", ".rst(rst)"] + [f".{n}({n})" for n in ins]
                               + [f".{n}({n}{s})" for n in outs])
    steps = []
    for cyc in range(cycles):
        # reset for the first cycles and now and then later, so reset under enables is covered too
        rst = 1 if cyc < 3 or rng.random() < 0.02 else 0
        assigns = " ".join(f"{n} = {w}'h{rng.getrandbits(w):x};" for n, w in ins.items())
        steps.append(f"    rst = {rst}; {assigns} #1 clk = 1; #1;\n    check({cyc}); #1 clk = 0; #1;")
    checks = " ".join(f"if ({n}_p !== {n}_g) begin $display(\"MISMATCH %0d {n} %h %h\", c, {n}_p, {n}_g); "
                      f"bad = bad + 1; end" for n in outs)
    all_outs = "{" + ", ".join(f"{n}_p" for n in outs) + "}"
    width = sum(outs.values())
    # activity: cycles in which some output changed, so a stuck netlist cannot pass by comparing constants
    checks += f" if ({all_outs} !== last) moved = moved + 1; last = {all_outs};"
    tb = "\n".join([
        "`timescale 1ns/1ps", "module tb;", "  reg clk = 0, rst = 1;", "  integer bad = 0, moved = 0;",
        f"  reg [{width - 1}:0] last = 0;", *decl,
        f"  {top}_plain p({conn('_p')});", f"  {top}_cg g({conn('_g')});",
        f"  task check(input integer c); begin if (c >= 3) begin {checks} end end endtask",
        "  initial begin", *steps, f'    $display("DONE %0d %0d %0d", {cycles}, bad, moved); $finish;', "  end",
        "endmodule", ""])
    (tmp_path / "cells.v").write_text(cell_models())
    (tmp_path / "plain.v").write_text(plain)
    (tmp_path / "cg.v").write_text(gated)
    (tmp_path / "tb.v").write_text(tb)
    build = subprocess.run(["iverilog", "-g2012", "-o", "sim", "tb.v", "plain.v", "cg.v", "cells.v"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    run = subprocess.run(["vvp", "-n", "sim"], cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    done = re.search(r"DONE (\d+) (\d+) (\d+)", run.stdout)
    assert done, run.stdout[-2000:] + run.stderr[-2000:]
    assert int(done.group(2)) == 0, "\n".join(run.stdout.splitlines()[:20])
    assert int(done.group(3)) >= cycles // 10, f"outputs changed in only {done.group(3)} of {cycles} cycles"
    return int(done.group(1))


class _StallPipe(wiring.Component):
    """A two-stage valid/ready pipeline with a held payload, a counter with a non-zero reset value, an enable
    per word and a small `lib.memory` buffer: the register kinds of the decoders (stall-held stages, reset
    counters) and of the encoders (buffers in memories, one write enable per word) in miniature."""

    def __init__(self):
        super().__init__({"d": In(12), "valid": In(1), "ready": In(1), "sel": In(2),
                          "q": Out(12), "q_valid": Out(1), "count": Out(8), "mem": Out(16), "stash": Out(6)})

    def elaborate(self, platform):
        m = Module()
        s1, s1_valid = Signal(12), Signal()
        s2, s2_valid = Signal(12), Signal()
        count = Signal(8, init=0x5A)
        words = [Signal(4, init=i) for i in range(4)]
        s2_free = ~s2_valid | self.ready
        with m.If(s2_free):
            m.d.sync += [s2.eq(s1 + 3), s2_valid.eq(s1_valid)]
            with m.If(s1_valid):
                m.d.sync += count.eq(count + 1)
        with m.If(s2_free | ~s1_valid):
            m.d.sync += [s1.eq(self.d), s1_valid.eq(self.valid)]
        for i, w in enumerate(words):
            with m.If(self.valid & (self.sel == i)):
                m.d.sync += w.eq(self.d[:4] ^ w)
        m.submodules.buf = buf = memory.Memory(shape=6, depth=8, init=[])
        wr, rd = buf.write_port(), buf.read_port(domain="comb")
        m.d.comb += [wr.addr.eq(self.d[4:7]), wr.data.eq(self.d[6:12]), wr.en.eq(self.valid & self.ready),
                     rd.addr.eq(count[:3]), self.stash.eq(rd.data)]
        m.d.comb += [self.q.eq(s2), self.q_valid.eq(s2_valid), self.count.eq(count),
                     self.mem.eq(words[0] | (words[1] << 4) | (words[2] << 8) | (words[3] << 12))]
        return m


def test_gated_netlist_equals_reference_at_gate_level(tmp_path):
    block = flow.Block("stall_pipe", _StallPipe, "test", {"kind": "other"})
    assert compare_gate_level(tmp_path, block, cycles=400) == 400


def _gated_netlist(tmp_path, component, top: str, kind: str) -> list:
    """The clock-gated netlist of ``component`` with ``top`` as its module name, and the cell models."""
    work = _synthesise(tmp_path, flow.Block(top, component, "test", {"kind": kind}), gated=True)
    (tmp_path / "cells.v").write_text(cell_models())
    return [work / "netlist.v", tmp_path / "cells.v"]


@pytest.mark.slow
@pytest.mark.parametrize("config", ["decoder_c1v3_l4", "decoder_c2v3_l8"])
def test_gated_decoder_netlist_decodes_bit_exactly(tmp_path, config):
    """The clock-gated gate-level netlist of a decoder, verilated into the bulk harness (tb/bulk), decodes random
    configurations (every m, k, G, escapes, partial superblocks) under 30 % idles and 40 % backpressure, draft and
    full, bit-exactly against golden: the real traffic that random port values never reach (they raise an error
    within a few cycles and the block drains)."""
    import numpy as np

    from cassandra_rtl.golden.codec import decode_draft, decode_full
    from cassandra_rtl.hw.configs import build as build_config
    from cassandra_rtl.tb import bulk
    from cassandra_rtl.tb.decoder import data as D

    if not bulk.available():
        pytest.skip("Verilator not available")
    c2 = bulk.scheme_of(config) == "c2"
    exe = bulk.verilate_harness(tmp_path / "bulk", config, None, bulk.HARNESS, bulk.TOP, "Vdec", "Vharness", c2,
                                "gate-level bulk harness",
                                verilog=_gated_netlist(tmp_path, lambda: build_config(config), bulk.TOP, "decoder"))
    rng = np.random.default_rng(5)
    encs = []
    for _ in range(10):
        cfg = D.random_c2_config(rng) if c2 else D.random_config(rng)
        n = D.random_numel(rng, cfg.group_size, 24)
        encs.append(D.encode(D.random_c2_tensor(rng, n) if c2 else D.random_tensor(rng, n), cfg))
    params = bulk._decoder_params(config)
    for mode in ("draft", "full"):
        outs, stats = bulk._run_job(exe, encs, mode == "full", params, idle=0.3, backpressure=0.4, seed=3)
        for enc, got in zip(encs, outs):
            ref = decode_full(enc) if mode == "full" else decode_draft(enc)
            assert np.array_equal(got.reshape(-1), ref.reshape(-1)), (config, mode)
        assert stats["values"] == sum(e.numel for e in encs)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["encoder_kv_c1_l2", "encoder_kv_c2_l2"])
def test_gated_encoder_netlist_encodes_bit_exactly(tmp_path, config):
    """The clock-gated gate-level netlist of a KV encoder (its vector buffers are memories, so gated per word),
    verilated into its bulk harness (tb/bulk_encoder): random KV batches (calibrated and escape books, every G,
    keep and m of tests/test_tb_bulk_encoder.py) under 30 % idles and 40 % backpressure, every plane word equal
    to golden encode_kv."""
    import numpy as np

    from cassandra_rtl.golden.kv import encode_kv
    from cassandra_rtl.hw.configs import build as build_config
    from cassandra_rtl.tb import bulk, bulk_encoder as BE

    from test_tb_bulk_encoder import random_batches

    if not BE.available():
        pytest.skip("Verilator not available")
    scheme = BE.scheme_of(config)
    exe = bulk.verilate_harness(tmp_path / "bulk", config, None, BE.HARNESS, BE.TOP, "Venc", "Vharness_enc",
                                scheme == "c2", "gate-level bulk encoder harness",
                                verilog=_gated_netlist(tmp_path, lambda: build_config(config), BE.TOP, "encoder"))
    params = BE._params(config)
    batches = [(BE._check_batch(x, c, k, scheme, params), c, k)
               for x, c, k in random_batches(np.random.default_rng(5), scheme, 12)]
    words, stats = BE._run(exe, batches, params, scheme, 0.3, 0.4, 3)
    bad, notes = BE.compare([encode_kv(x, c, k) for x, c, k in batches], words, scheme, int(params["word"]))
    assert bad == 0, notes[:5]
    assert stats["vectors"] == sum(len(x) for x, _, _ in batches) > 0
