"""Verilog export (hw/export.py): files, port tables, FuseSoC core, and `verilator --lint-only -Wall` clean;
the AXI4-Stream wrappers of --axis (names and widths against the signature, lint, an Icarus run)."""
from __future__ import annotations

import gc
import json
import re
import shutil
import subprocess

import pytest
from amaranth.hdl import Module, Shape
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from cassandra_rtl.errors import ToolMissingError
from cassandra_rtl.hw.configs import CONFIG_INFO, NAMED_CONFIGS, build
from cassandra_rtl.hw.export import _tool, axis_wrapper, export, lint, to_verilog

SMALL = ["zero_counter_w64_l8", "decoder_c1v3_l4", "encoder_kv_c1_l8"]


def test_registry_has_required_configs():
    for name in ("decoder_c1v3_l8", "decoder_c1v3_l4", "decoder_c2v3_l8", "zero_counter_w64_l8", "encoder_kv_c1_l8"):
        assert name in NAMED_CONFIGS and name in CONFIG_INFO
        assert CONFIG_INFO[name]["lanes"] > 0


def test_export_small_configs_lint_clean(tmp_path):
    res = export(tmp_path, only=SMALL, run_lint=True, quiet=True)
    assert res["lint_clean"], "verilator -Wall reported warnings"
    for name in SMALL:
        text = (tmp_path / f"{name}.v").read_text()
        assert f"module {name}(" in text
    table = json.loads((tmp_path / "ports.json").read_text())
    dec = {p["name"]: p for p in table["decoder_c1v3_l4"]["ports"]}
    # The stable interface of docs/HARDWARE.md.
    for port, direction in [("spec_codes__payload", "input"), ("spec_codes__valid", "input"),
                            ("spec_codes__ready", "output"), ("cfg__payload", "input"), ("out__payload", "output"),
                            ("error_code", "output"), ("busy", "output"), ("clk", "input"), ("rst", "input")]:
        assert dec[port]["dir"] == direction
    assert dec["spec_codes__payload"]["width"] == 33
    assert "CAPI=2" in (tmp_path / "cassandra_rtl.core").read_text()
    assert (tmp_path / "files.f").read_text().splitlines()[1:] == [f"{n}.v" for n in SMALL]


@pytest.mark.slow
def test_export_all_configs_lint_clean(tmp_path):
    res = export(tmp_path, run_lint=True, quiet=True)
    assert res["lint_clean"]


def test_unknown_config_is_a_config_error():
    from cassandra_rtl.errors import ConfigError
    with pytest.raises(ConfigError):
        build("decoder_c9_l3")


# ---- AXI4-Stream wrappers (--axis) ----
AXIS_CONFIGS = ["decoder_c1v3_l4", "encoder_kv_c1_l2"]


def _need_verilator():
    try:
        _tool("verilator")
    except ToolMissingError:
        pytest.skip("verilator not installed")


def _expected_axis(comp: wiring.Component) -> tuple[dict, set]:
    """From the signature alone (not the generator): {AXIS port: (dir, width)} and the core's port names.
    The rule of docs/HARDWARE.md section 5: tdata = `data`, else `lanes`, else the whole payload, padded to
    a byte multiple; tlast = `last`; tuser = the other fields; a register-write stream ({addr, data}: cfg,
    cfg_dma) one 64-bit tdata word and no tuser."""
    ports, core = {"aclk": ("input", 1), "aresetn": ("input", 1)}, {"clk", "rst"}
    for name, member in comp.signature.members.items():
        if member.is_port:
            ports[name] = ("input" if member.flow == In else "output", Shape.cast(member.shape).width)
            core.add(name)
            continue
        sub = member.signature.members
        assert set(sub.keys()) == {"valid", "ready", "payload"}, name
        core |= {f"{name}__valid", f"{name}__ready", f"{name}__payload"}
        d = "input" if sub["payload"].flow == In else "output"
        back = "output" if d == "input" else "input"
        pre = f"{'s' if d == 'input' else 'm'}_axis_{name}"
        ports[f"{pre}_tvalid"], ports[f"{pre}_tready"] = (d, 1), (back, 1)
        shape = sub["payload"].shape
        fields = {k: Shape.cast(f.shape).width for k, f in data.Layout.cast(shape)} \
            if isinstance(shape, data.Layout) else {}
        if name in ("cfg", "cfg_dma") and set(fields) == {"addr", "data"}:
            ports[f"{pre}_tdata"] = (d, 64)
            continue
        main = "data" if "data" in fields else "lanes" if "lanes" in fields else None
        if main is None:
            ports[f"{pre}_tdata"] = (d, -(-Shape.cast(shape).width // 8) * 8)
            continue
        ports[f"{pre}_tdata"] = (d, -(-fields.pop(main) // 8) * 8)
        if "last" in fields:
            ports[f"{pre}_tlast"] = (d, fields.pop("last"))
        if fields:
            ports[f"{pre}_tuser"] = (d, sum(fields.values()))
    return ports, core


def _wrapper_ports(text: str, name: str) -> tuple[dict, list]:
    """(declared ports {name: (dir, width)}, the core instance's connected port names in order)."""
    start = text.index(f"module {name}_axis (")
    header = text[start:text.index(");", start)]
    decl = {m.group(3): (m.group(1), int(m.group(2) or 0) + 1)
            for m in re.finditer(r"^\s*(input|output) wire (?:\[(\d+):0\] )?(\w+)", header, re.M)}
    inst = text[text.index(f"  {name} core ("):text.index("endmodule")]
    return decl, re.findall(r"^\s*\.(\w+)\(", inst, re.M)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")   # signatures read, never elaborated
def test_axis_wrappers_match_signature_and_lint_clean(tmp_path):
    _need_verilator()
    res = export(tmp_path, only=AXIS_CONFIGS, run_lint=True, quiet=True, axis=True)
    assert res["lint_clean"], "verilator -Wall reported warnings on a core or a wrapper"
    for name in AXIS_CONFIGS:
        expected, core = _expected_axis(NAMED_CONFIGS[name]())
        gc.collect()                # the component, read and never elaborated, warns here (filtered), not later
        decl, conns = _wrapper_ports((tmp_path / f"{name}_axis.v").read_text(), name)
        assert decl == expected, name
        assert sorted(conns) == sorted(core) and len(conns) == len(set(conns)), name  # each core port once
    dec, _ = _wrapper_ports((tmp_path / "decoder_c1v3_l4_axis.v").read_text(), "decoder_c1v3_l4")
    # The decoder's out stream: all lanes as tdata, count + sb_end as tuser.
    assert dec["m_axis_out_tdata"] == ("output", 64) and dec["m_axis_out_tuser"] == ("output", 3 + 1)
    assert "m_axis_out_tlast" in dec and dec["s_axis_cfg_tdata"] == ("input", 64) and "s_axis_cfg_tuser" not in dec
    files = (tmp_path / "files.f").read_text().splitlines()
    assert files[1:] == [f"{n}.v" for n in AXIS_CONFIGS] + [f"{n}_axis.v" for n in AXIS_CONFIGS]
    md = (tmp_path / "ports.md").read_text()
    assert all(f"wrapper `{n}_axis`" in md for n in AXIS_CONFIGS) and "| `m_axis_out_tuser` | output | 4 |" in md


def test_axis_off_by_default(tmp_path):
    export(tmp_path, only=["decoder_c1v3_l4"], quiet=True)
    assert not list(tmp_path.glob("*_axis.v"))
    assert "axis" not in json.loads((tmp_path / "ports.json").read_text())["decoder_c1v3_l4"]
    assert "_axis" not in (tmp_path / "ports.md").read_text() + (tmp_path / "files.f").read_text()


class _AxisProbe(wiring.Component):
    """A one-entry stream buffer whose payload exercises every wrapper rule: 5-bit data (padded to 8), a
    3-bit field below it and a 1-bit field above (tuser = {flag, tag}), last; plus plain ports: a beat counter
    and the held beat's fields, so the test sees the core side too (a passthrough alone would hide a bit order
    that is wrong the same way on both sides)."""
    LAYOUT = data.StructLayout({"tag": 3, "data": 5, "last": 1, "flag": 1})

    def __init__(self):
        super().__init__({"inp": In(stream.Signature(self.LAYOUT)), "out": Out(stream.Signature(self.LAYOUT)),
                          "beats": Out(8), "tag": Out(3), "flag": Out(1), "data": Out(5)})

    def elaborate(self, platform):
        m = Module()
        take = self.out.ready | ~self.out.valid
        m.d.comb += [self.inp.ready.eq(take), self.tag.eq(self.out.payload.tag), self.flag.eq(self.out.payload.flag),
                     self.data.eq(self.out.payload.data)]
        with m.If(take):
            m.d.sync += [self.out.valid.eq(self.inp.valid), self.out.payload.eq(self.inp.payload)]
        with m.If(self.inp.valid & take):
            m.d.sync += self.beats.eq(self.beats + 1)
        return m


def test_axis_wrapper_simulates(tmp_path):
    """Icarus: the wrapper's reset polarity, tdata padding (pad bits ignored in, zero out), tuser order and
    tlast, on _AxisProbe; the expected bits come from the layout, not from the wrapper."""
    if shutil.which("iverilog") is None or shutil.which("vvp") is None:
        pytest.skip("iverilog not installed")
    comp = _AxisProbe()
    to_verilog(comp, "axis_probe", tmp_path)
    (tmp_path / "axis_probe_axis.v").write_text(axis_wrapper("axis_probe", comp))
    try:
        _tool("verilator")
        ok, text = lint([tmp_path / "axis_probe_axis.v"], {tmp_path / "axis_probe_axis.v": [tmp_path / "axis_probe.v"]})
        assert ok, text                                    # the padded input's local waiver included
    except ToolMissingError:
        pass
    beats = [(0x15, 0b101, 0, 1), (0x0A, 0b010, 1, 0), (0x1F, 0b111, 1, 1)]   # (data, tag, last, flag)
    checks = "\n".join(
        f"    send(8'h{0xE0 | d:02x}, 4'h{(f << 3) | t:x}, 1'b{l});\n"       # pad bits set: must be ignored
        f"    if (m_tdata !== 8'h{d:02x} || m_tuser !== 4'h{(f << 3) | t:x} || m_tlast !== 1'b{l}"
        f" || tag !== 3'd{t} || flag !== 1'b{f} || data !== 5'd{d})"
        f" begin $display(\"FAIL beat {i}: %h %h %b\", m_tdata, m_tuser, m_tlast); $finish; end"
        for i, (d, t, l, f) in enumerate(beats))
    (tmp_path / "tb.v").write_text(f"""`timescale 1ns/1ps
module tb;
  reg aclk = 0, aresetn = 0, s_tvalid = 0, s_tlast = 0, m_tready = 1;
  reg [7:0] s_tdata = 0; reg [3:0] s_tuser = 0;
  wire s_tready, m_tvalid, m_tlast, flag; wire [7:0] m_tdata, beats; wire [3:0] m_tuser; wire [2:0] tag;
  wire [4:0] data;
  axis_probe_axis dut(.aclk(aclk), .aresetn(aresetn),
    .s_axis_inp_tvalid(s_tvalid), .s_axis_inp_tready(s_tready), .s_axis_inp_tdata(s_tdata),
    .s_axis_inp_tlast(s_tlast), .s_axis_inp_tuser(s_tuser),
    .m_axis_out_tvalid(m_tvalid), .m_axis_out_tready(m_tready), .m_axis_out_tdata(m_tdata),
    .m_axis_out_tlast(m_tlast), .m_axis_out_tuser(m_tuser), .beats(beats), .tag(tag), .flag(flag), .data(data));
  always #5 aclk = ~aclk;
  task send(input [7:0] d, input [3:0] u, input l);
    begin
      s_tvalid = 1; s_tdata = d; s_tuser = u; s_tlast = l;
      @(posedge aclk); #1 s_tvalid = 0;
      if (m_tvalid !== 1'b1) begin $display("FAIL: no output beat"); $finish; end
    end
  endtask
  initial begin
    s_tvalid = 1; s_tdata = 8'h01;               // offered during reset: must not be taken
    repeat (3) @(posedge aclk);
    #1 if (m_tvalid !== 1'b0 || beats !== 8'd0) begin $display("FAIL: reset (aresetn low) not applied"); $finish; end
    s_tvalid = 0; aresetn = 1;
{checks}
    @(posedge aclk); #1
    if (m_tvalid !== 1'b0 || beats !== 8'd{len(beats)}) begin $display("FAIL: beats %d", beats); $finish; end
    $display("PASS"); $finish;
  end
endmodule
""")
    build_ = subprocess.run(["iverilog", "-g2012", "-o", "sim", "tb.v", "axis_probe_axis.v", "axis_probe.v"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert build_.returncode == 0, build_.stderr
    run = subprocess.run(["vvp", "-n", "sim"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "PASS" in run.stdout, run.stdout + run.stderr


@pytest.mark.slow      # 19 s (every CSR top exported and linted); test_axil_top_simulates stays in make test
@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_axil_writes_csr_tops_for_register_blocks_only(tmp_path):
    """--axil: <name>_csr.v and <name>_csr_axis.v for decoders / encoders (none for the zero counter), the
    register map in ports.json from hw/csr.py, cfg / busy / error gone from the top, lint clean."""
    from cassandra_rtl.hw.csr import register_table
    lint_ = True
    try:
        _tool("verilator")
    except ToolMissingError:
        lint_ = False
    res = export(tmp_path, only=["zero_counter_w64_l8", "decoder_c1v3_l4"], run_lint=lint_, quiet=True, axis=True,
                 axil=True)
    assert res.get("lint_clean", True), "verilator -Wall reported warnings on a CSR top"
    assert sorted(p.name for p in tmp_path.glob("*_csr*.v")) == ["decoder_c1v3_l4_csr.v", "decoder_c1v3_l4_csr_axis.v"]
    tables = json.loads((tmp_path / "ports.json").read_text())
    assert "csr" not in tables["zero_counter_w64_l8"]
    csr = tables["decoder_c1v3_l4"]["csr"]
    assert csr["registers"] == register_table() and csr["module"] == "decoder_c1v3_l4_csr"
    names = {p["name"] for p in csr["ports"]}
    assert {"s_axil_awaddr", "s_axil_rdata", "irq", "out__valid", "spec_codes__payload", "cfg_dma__valid"} <= names
    assert not names & {"cfg__valid", "busy", "error", "error_code"}
    top = (tmp_path / "decoder_c1v3_l4_csr_axis.v").read_text()
    assert "module decoder_c1v3_l4_csr_axis (" in top and "s_axil_awaddr" in top and "m_axis_out_tdata" in top
    assert "s_axis_cfg_tdata" not in top and "input wire [63:0] s_axis_cfg_dma_tdata" in top
    assert "s_axis_cfg_dma_tuser" not in top          # a plain MM2S DMA (no tuser) can stream register programs
    assert "decoder_c1v3_l4_csr_axis.v" in (tmp_path / "files.f").read_text()
    assert "AXI4-Lite register block" in (tmp_path / "ports.md").read_text()
    assert "#define CASS_CSR_IRQ_STATUS" in (tmp_path / "cassandra_csr.h").read_text()
    assert "CASSANDRA_CSR__IRQ_STATUS__DONE_bm" in (tmp_path / "cassandra_regs.h").read_text()   # from the RDL


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_axil_top_simulates(tmp_path):
    """Icarus on the exported decoder_c1v3_l4_csr_axis: after aresetn, ID / BLOCK read over AXI4-Lite, IRQ_ENABLE
    written and read back, START without books raises NO_BOOK -> irq and ERROR_CODE, CLEAR_ERROR through the
    forwarded CTRL register clears it, a write to ID answers SLVERR. Expected values from hw/csr.py's constants."""
    from cassandra_rtl.hw.csr import ID_VALUE, IRQ_ERROR, KINDS, Csr
    from cassandra_rtl.hw.decoder import CTRL_CLEAR_ERROR, CTRL_START, Err, Reg
    if shutil.which("iverilog") is None or shutil.which("vvp") is None:
        pytest.skip("iverilog not installed")
    export(tmp_path, only=["decoder_c1v3_l4"], quiet=True, axil=True)
    text = (tmp_path / "decoder_c1v3_l4_csr_axis.v").read_text()
    start = text.index("module decoder_c1v3_l4_csr_axis (")
    header = text[start:text.index(");", start)]
    ins = re.findall(r"^\s*input wire (?:\[(\d+):0\] )?(\w+)", header, re.M)
    outs = re.findall(r"^\s*output wire (?:\[(\d+):0\] )?(\w+)", header, re.M)
    decl = [f"  reg [{int(w or 0)}:0] {n} = 0;" for w, n in ins] + [f"  wire [{int(w or 0)}:0] {n};" for w, n in outs]
    conn = ", ".join(f".{n}({n})" for _, n in ins + outs)
    block = KINDS["decoder_c1v3"] | (4 << 8) | (4 << 16)
    (tmp_path / "tb.v").write_text(f"""`timescale 1ns/1ps
module tb;
{chr(10).join(decl)}
  decoder_c1v3_l4_csr_axis dut({conn});
  always #5 aclk = ~aclk;
  reg [31:0] rd; reg [1:0] resp;
  task wr(input [11:0] a, input [31:0] d);
    begin
      s_axil_awaddr = a; s_axil_wdata = d; s_axil_wstrb = 4'hf; s_axil_awvalid = 1; s_axil_wvalid = 1;
      @(posedge aclk); while (!s_axil_awready) @(posedge aclk);
      #1 s_axil_awvalid = 0; s_axil_wvalid = 0; s_axil_bready = 1;
      @(posedge aclk); while (!s_axil_bvalid) @(posedge aclk);
      resp = s_axil_bresp; #1 s_axil_bready = 0;
    end
  endtask
  task rdreg(input [11:0] a);
    begin
      s_axil_araddr = a; s_axil_arvalid = 1;
      @(posedge aclk); while (!s_axil_arready) @(posedge aclk);
      #1 s_axil_arvalid = 0; s_axil_rready = 1;
      @(posedge aclk); while (!s_axil_rvalid) @(posedge aclk);
      rd = s_axil_rdata; resp = s_axil_rresp; #1 s_axil_rready = 0;
    end
  endtask
  initial begin
    repeat (3) @(posedge aclk); #1 aresetn = 1;
    rdreg(12'h{Csr.ID:03x}); if (rd !== 32'h{ID_VALUE:08x} || resp !== 0) begin $display("FAIL id %h", rd); $finish; end
    rdreg(12'h{Csr.BLOCK:03x}); if (rd !== 32'h{block:08x}) begin $display("FAIL block %h", rd); $finish; end
    wr(12'h{Csr.IRQ_ENABLE:03x}, {IRQ_ERROR}); rdreg(12'h{Csr.IRQ_ENABLE:03x});
    if (rd !== {IRQ_ERROR}) begin $display("FAIL irq_enable %h", rd); $finish; end
    wr(12'h{4 * Reg.NUMEL:03x}, 64); wr(12'h{4 * Reg.CTRL:03x}, {CTRL_START});
    repeat (4) @(posedge aclk);
    if (irq !== 1'b1) begin $display("FAIL no irq"); $finish; end
    rdreg(12'h{Csr.ERROR_CODE:03x}); if (rd !== {1 << Err.NO_BOOK}) begin $display("FAIL code %h", rd); $finish; end
    wr(12'h{4 * Reg.CTRL:03x}, {CTRL_CLEAR_ERROR}); rdreg(12'h{Csr.ERROR_CODE:03x});
    if (rd !== 0) begin $display("FAIL clear %h", rd); $finish; end
    wr(12'h{Csr.ID:03x}, 1); if (resp !== 2'b10) begin $display("FAIL slverr %b", resp); $finish; end
    $display("PASS"); $finish;
  end
endmodule
""")
    build_ = subprocess.run(["iverilog", "-g2012", "-o", "sim", "tb.v", "decoder_c1v3_l4_csr_axis.v",
                             "decoder_c1v3_l4_csr.v"], cwd=tmp_path, capture_output=True, text=True)
    assert build_.returncode == 0, build_.stderr
    run = subprocess.run(["vvp", "-n", "sim"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "PASS" in run.stdout, run.stdout + run.stderr


class _ArrayPorts(wiring.Component):
    """An array output port (``Out(...).array(2)``): the NPU tile's per-instance performance counters."""

    def __init__(self):
        super().__init__({"x": In(4), "y": Out(4).array(2)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.y[0].eq(self.x), self.y[1].eq(~self.x)]
        return m


def test_array_ports_are_one_port_per_element(tmp_path):
    """The port table and the AXI4-Stream wrapper name an array port's elements as yosys writes them
    (``y__0``, ``y__1``), so the wrapper of a component with one is built (it used to stop: 'signature ports
    missing from the Verilog')."""
    from cassandra_rtl.hw.export import _module_ports, port_table
    comp = _ArrayPorts()
    assert [(p["name"], p["dir"], p["width"]) for p in port_table(comp)[2:]] == \
        [("x", "input", 4), ("y__0", "output", 4), ("y__1", "output", 4)]
    verilog = to_verilog(comp, "array_probe", tmp_path)
    text = axis_wrapper("array_probe", comp, _module_ports(verilog, "array_probe"))
    assert ".y__0(y__0)" in text.replace(" ", "") and ".y__1(y__1)" in text.replace(" ", "")
