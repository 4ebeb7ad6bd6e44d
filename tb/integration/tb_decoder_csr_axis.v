// Integration example: a plain Verilog-2005 testbench (no cocotb, no project code at simulation time) that
// decodes one tensor through an exported C1 decoder with its AXI4-Lite register block, `<name>_csr_axis`
// (`make verilog`, docs/datasheets/register_block.md), and compares every value with the golden decode.
//
// Its input files come from `cassandra-rtl export-planes FILE.cass --out DIR --config <name>`:
// program_<mode>.hex (register writes {index, data}), spec_codes.hex / spec_signman.hex / verif_codes.hex /
// verif_rest.hex ({last, data} per word), expected_<mode>.hex (bf16 values) and counts.hex.
//
// What it does: reset (4 cycles), read ID over AXI4-Lite, enable the DONE and ERROR interrupts, write the
// tensor's register program (START last) over AXI4-Lite, then stream the planes the mode reads on their
// AXI4-Stream ports with random idles while taking `m_axis_out` with random backpressure; it checks every
// lane of every beat, waits for `irq`, reads IRQ_STATUS and ERROR_CODE and prints one line:
// "PASS values=N cycles=C" or "FAIL ...".
//
//   iverilog -g2005 -o sim -DDUT=decoder_c1v3_l4_csr_axis -Ptb.L=4 -Ptb.WC=32 -Ptb.WS=32 -Ptb.WV=32 \
//            tb_decoder_csr_axis.v decoder_c1v3_l4_csr_axis.v decoder_c1v3_l4_csr.v
//   vvp sim +dir=DIR +full=0|1 [+dma=1] [+seed=S] [+idle=30] [+stall=30]
//
// +dma=1 streams the register program on `s_axis_cfg_dma` instead, as a plain memory-to-stream DMA would:
// 64-bit words {index << 32 | value} in tdata (no tuser), START last, beside the plane channels.
//
// Parameters: L lanes (draft), WC / WS / WV the widths of spec_codes / spec_signman / the verification ports
// (ports.md or the datasheet's port table), MAXW / MAXV / MAXP the largest word, value and write counts.
`timescale 1ns / 1ps
`ifndef DUT
`define DUT decoder_c1v3_l4_csr_axis
`endif

module tb;
  parameter L = 4, WC = 32, WS = 32, WV = 32;
  parameter MAXW = 65536, MAXV = 262144, MAXP = 64, TIMEOUT = 4000000;
  localparam CB = $clog2(L + 1);                   // bits of the beat's count (tuser[CB-1:0]); sb_end above

  reg clk = 1'b0;
  always #5 clk = ~clk;
  reg aresetn = 1'b0;

  // ---------------------------------------------------------------- files
  reg [8*512-1:0] dir, fname;
  integer full, seed, idle_pct, stall_pct, use_dma;
  reg [39:0] prog [0:MAXP-1];
  reg [WC:0] m_sc [0:MAXW-1];
  reg [WS:0] m_sm [0:MAXW-1];
  reg [WV:0] m_vc [0:MAXW-1];
  reg [WV:0] m_vr [0:MAXW-1];
  reg [15:0] expv [0:MAXV-1];
  reg [31:0] counts [0:6];
  integer n_prog, n_sc, n_sm, n_vc, n_vr, numel;

  // ---------------------------------------------------------------- DUT
  reg  [11:0] s_awaddr = 0, s_araddr = 0;
  reg         s_awvalid = 0, s_wvalid = 0, s_bready = 0, s_arvalid = 0, s_rready = 0;
  reg  [31:0] s_wdata = 0;
  reg  [3:0]  s_wstrb = 0;
  wire        awready, wready, bvalid, arready, rvalid, irq;
  wire [1:0]  bresp, rresp;
  wire [31:0] rdata;
  reg         sc_v = 0, sm_v = 0, vc_v = 0, vr_v = 0, out_r = 0;
  reg  [WC-1:0] sc_d = 0;
  reg  [WS-1:0] sm_d = 0;
  reg  [WV-1:0] vc_d = 0, vr_d = 0;
  reg         sc_l = 0, sm_l = 0, vc_l = 0, vr_l = 0;
  wire        sc_r, sm_r, vc_r, vr_r, out_v, out_last, dma_r;
  reg         dma_v = 0;
  reg  [63:0] dma_d = 0;
  wire [16*L-1:0] out_d;
  wire [CB:0] out_user;

  `DUT dut (
    .aclk(clk), .aresetn(aresetn),
    .s_axis_spec_codes_tvalid(sc_v), .s_axis_spec_codes_tready(sc_r), .s_axis_spec_codes_tdata(sc_d),
    .s_axis_spec_codes_tlast(sc_l),
    .s_axis_spec_signman_tvalid(sm_v), .s_axis_spec_signman_tready(sm_r), .s_axis_spec_signman_tdata(sm_d),
    .s_axis_spec_signman_tlast(sm_l),
    .s_axis_verif_codes_tvalid(vc_v), .s_axis_verif_codes_tready(vc_r), .s_axis_verif_codes_tdata(vc_d),
    .s_axis_verif_codes_tlast(vc_l),
    .s_axis_verif_rest_tvalid(vr_v), .s_axis_verif_rest_tready(vr_r), .s_axis_verif_rest_tdata(vr_d),
    .s_axis_verif_rest_tlast(vr_l),
    .m_axis_out_tvalid(out_v), .m_axis_out_tready(out_r), .m_axis_out_tdata(out_d),
    .m_axis_out_tlast(out_last), .m_axis_out_tuser(out_user),
    .s_axis_cfg_dma_tvalid(dma_v), .s_axis_cfg_dma_tready(dma_r), .s_axis_cfg_dma_tdata(dma_d),
    .s_axil_awaddr(s_awaddr), .s_axil_awvalid(s_awvalid), .s_axil_awready(awready),
    .s_axil_wdata(s_wdata), .s_axil_wstrb(s_wstrb), .s_axil_wvalid(s_wvalid), .s_axil_wready(wready),
    .s_axil_bresp(bresp), .s_axil_bvalid(bvalid), .s_axil_bready(s_bready),
    .s_axil_araddr(s_araddr), .s_axil_arvalid(s_arvalid), .s_axil_arready(arready),
    .s_axil_rdata(rdata), .s_axil_rresp(rresp), .s_axil_rvalid(rvalid), .s_axil_rready(s_rready),
    .irq(irq));

  // ---------------------------------------------------------------- AXI4-Lite master (drives at negedge)
  task axil_write;
    input [11:0] a; input [31:0] d; output [1:0] resp;
    reg aw_done, w_done;
    begin
      @(negedge clk);
      s_awaddr = a; s_awvalid = 1'b1; s_wdata = d; s_wstrb = 4'hf; s_wvalid = 1'b1;
      aw_done = 1'b0; w_done = 1'b0;
      while (!(aw_done && w_done)) begin
        if (s_awvalid && awready) aw_done = 1'b1;     // taken at the coming rising edge
        if (s_wvalid && wready) w_done = 1'b1;
        @(negedge clk);
        if (aw_done) s_awvalid = 1'b0;
        if (w_done) s_wvalid = 1'b0;
      end
      s_bready = 1'b1;
      while (!bvalid) @(negedge clk);
      resp = bresp;
      @(negedge clk);
      s_bready = 1'b0;
    end
  endtask

  task axil_read;
    input [11:0] a; output [31:0] d; output [1:0] resp;
    begin
      @(negedge clk);
      s_araddr = a; s_arvalid = 1'b1;
      while (!arready) @(negedge clk);
      @(negedge clk);
      s_arvalid = 1'b0; s_rready = 1'b1;
      while (!rvalid) @(negedge clk);
      d = rdata; resp = rresp;
      @(negedge clk);
      s_rready = 1'b0;
    end
  endtask

  function idle_now; input dummy; begin idle_now = ({$random(seed)} % 100) < idle_pct; end endfunction

  // ---------------------------------------------------------------- the register program as a DMA stream
  // (+dma=1): 64-bit words {index << 32 | value} on s_axis_cfg_dma, as a memory-to-stream DMA reads them
  // from memory (no tuser), with random idles; START is the last word.
  reg dma_go = 1'b0;
  integer i_dma = 0;
  always @(posedge clk) begin
    if (!aresetn) dma_v <= 1'b0;
    else begin
      if (dma_v && dma_r) begin i_dma = i_dma + 1; dma_v <= 1'b0; end
      if ((!dma_v || dma_r) && dma_go && i_dma < n_prog && !idle_now(0)) begin
        dma_v <= 1'b1; dma_d <= {24'd0, prog[i_dma][39:32], prog[i_dma][31:0]};
      end
    end
  end

  // ---------------------------------------------------------------- plane streams (random idles)
  reg go = 1'b0;
  integer i_sc = 0, i_sm = 0, i_vc = 0, i_vr = 0;
  always @(posedge clk) begin
    if (!aresetn) begin
      sc_v <= 1'b0; sm_v <= 1'b0; vc_v <= 1'b0; vr_v <= 1'b0;
    end else begin
      if (sc_v && sc_r) begin i_sc = i_sc + 1; sc_v <= 1'b0; end
      if ((!sc_v || sc_r) && go && i_sc < n_sc && !idle_now(0)) begin sc_v <= 1'b1; {sc_l, sc_d} <= m_sc[i_sc]; end
      if (sm_v && sm_r) begin i_sm = i_sm + 1; sm_v <= 1'b0; end
      if ((!sm_v || sm_r) && go && i_sm < n_sm && !idle_now(0)) begin sm_v <= 1'b1; {sm_l, sm_d} <= m_sm[i_sm]; end
      if (vc_v && vc_r) begin i_vc = i_vc + 1; vc_v <= 1'b0; end
      if ((!vc_v || vc_r) && go && full && i_vc < n_vc && !idle_now(0)) begin vc_v <= 1'b1; {vc_l, vc_d} <= m_vc[i_vc]; end
      if (vr_v && vr_r) begin i_vr = i_vr + 1; vr_v <= 1'b0; end
      if ((!vr_v || vr_r) && go && full && i_vr < n_vr && !idle_now(0)) begin vr_v <= 1'b1; {vr_l, vr_d} <= m_vr[i_vr]; end
    end
  end

  // ---------------------------------------------------------------- output check (random backpressure)
  integer nv = 0, mismatches = 0, lane_errors = 0, last_seen = 0, k, count, cycles = 0;
  reg [15:0] got;
  always @(posedge clk) begin
    cycles = cycles + 1;
    if (aresetn && out_v && out_r) begin
      count = out_user[CB-1:0];
      for (k = 0; k < L; k = k + 1) begin
        got = out_d[16*k +: 16];
        if (k < count) begin
          if (nv >= numel || got !== expv[nv]) begin
            if (mismatches < 5) $display("mismatch at value %0d: got %h, expected %h", nv, got, expv[nv]);
            mismatches = mismatches + 1;
          end
          nv = nv + 1;
        end else if (got !== 16'h0000) lane_errors = lane_errors + 1;
      end
      if (out_last) last_seen = last_seen + 1;
    end
    out_r <= ({$random(seed)} % 100) >= stall_pct;
  end

  // ---------------------------------------------------------------- the sequence
  integer i;
  reg [31:0] d;
  reg [1:0] resp;
  reg [31:0] irq_status, error_code;
  initial begin
    if (!$value$plusargs("dir=%s", dir)) begin $display("FAIL: +dir=DIR (cassandra-rtl export-planes --out DIR)"); $finish; end
    full = 0; seed = 1; idle_pct = 30; stall_pct = 30; use_dma = 0;
    if ($value$plusargs("dma=%d", use_dma)) ;
    if ($value$plusargs("full=%d", full)) ;
    if ($value$plusargs("seed=%d", seed)) ;
    if ($value$plusargs("idle=%d", idle_pct)) ;
    if ($value$plusargs("stall=%d", stall_pct)) ;
    $sformat(fname, "%0s/counts.hex", dir);         $readmemh(fname, counts);
    n_prog = full ? counts[1] : counts[0];
    n_sc = counts[2]; n_sm = counts[3]; n_vc = counts[4]; n_vr = counts[5]; numel = counts[6];
    if (n_prog > MAXP || n_sc > MAXW || n_sm > MAXW || n_vc > MAXW || n_vr > MAXW || numel > MAXV) begin
      $display("FAIL: the tensor exceeds MAXP / MAXW / MAXV (-Ptb.MAXW=... -Ptb.MAXV=...)"); $finish;
    end
    if (full) $sformat(fname, "%0s/program_full.hex", dir); else $sformat(fname, "%0s/program_draft.hex", dir);
    $readmemh(fname, prog, 0, n_prog - 1);
    $sformat(fname, "%0s/spec_codes.hex", dir);     $readmemh(fname, m_sc, 0, n_sc - 1);
    $sformat(fname, "%0s/spec_signman.hex", dir);   $readmemh(fname, m_sm, 0, n_sm - 1);
    if (full) begin
      $sformat(fname, "%0s/verif_codes.hex", dir);  $readmemh(fname, m_vc, 0, n_vc - 1);
      $sformat(fname, "%0s/verif_rest.hex", dir);   $readmemh(fname, m_vr, 0, n_vr - 1);
      $sformat(fname, "%0s/expected_full.hex", dir);
    end else $sformat(fname, "%0s/expected_draft.hex", dir);
    $readmemh(fname, expv, 0, numel - 1);

    repeat (4) @(negedge clk);                      // reset: 4 cycles, every valid low
    aresetn = 1'b1;
    axil_read(12'h400, d, resp);
    if (d !== 32'h43415353 || resp !== 2'b00) begin $display("FAIL: ID reads %h (resp %0d)", d, resp); $finish; end
    axil_write(12'h418, 32'h3, resp);               // IRQ_ENABLE = DONE | ERROR
    if (use_dma) begin                              // the register program on cfg_dma, the planes beside it
      dma_go = 1'b1;
      go = 1'b1;
    end else begin
      for (i = 0; i < n_prog; i = i + 1) begin      // the register program over AXI4-Lite, START last
        axil_write({prog[i][39:32], 2'b00}, prog[i][31:0], resp);
        if (resp !== 2'b00) begin $display("FAIL: write %0d (index %h) answered %0d", i, prog[i][39:32], resp); $finish; end
      end
      go = 1'b1;                                    // start the plane channels after START
    end
    while (!irq && cycles < TIMEOUT) @(negedge clk);
    axil_read(12'h414, irq_status, resp);
    axil_read(12'h410, error_code, resp);
    if (nv == numel && mismatches == 0 && lane_errors == 0 && last_seen == 1 && error_code == 0 && irq_status == 1)
      $display("PASS values=%0d cycles=%0d", nv, cycles);
    else
      $display("FAIL values=%0d of %0d mismatches=%0d lane_errors=%0d last=%0d error_code=%h irq_status=%h cycles=%0d",
               nv, numel, mismatches, lane_errors, last_seen, error_code, irq_status, cycles);
    $finish;
  end
endmodule
