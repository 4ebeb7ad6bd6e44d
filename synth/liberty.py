"""Generator of synth/cassandra_generic.lib, the project's small generic CMOS cell library.

The library is *written for this project*: it is not a foundry library and carries no foundry data.
It exists so that every block (decoder, encoder, zero counter, the bf16 MAC processing element) is
mapped onto the same, documented cell set, which makes area ratios between them meaningful even
though absolute numbers are only estimates.

Areas
    In NAND2 gate equivalents (GE): NAND2_X1 = 1.0. The other ratios are rounded values of the kind
    seen across commercial and open standard-cell libraries at single drive strength (an inverter is
    smaller than a NAND2, an XOR2 about two NAND2s, a flip-flop 5-6 NAND2s). Converting to µm² is done
    in the flow with an assumed NAND2 area (docs/SYNTHESIS.md), never in this file.

Delays (simple, linear)
    A logical-effort model: delay = tau * p + R * C_load, with tau = 4 ps, R = tau / C_unit and
    C_unit = 1 fF the input capacitance of the unit inverter. Every cell drives like the unit
    inverter (X1), so R = 4 ps/fF for all cells, and a cell's input capacitance is g * C_unit (g its
    logical effort). With p_inv = 1 this gives an FO4 inverter delay of 4 * (1 + 4) = 20 ps, which is
    the order of magnitude published for 28 nm bulk CMOS (an estimate, not a characterisation).
    A small input-slew term (0.1 x input transition) is added so ABC sees a slew dependence.
    The tables are 2 x 2 NLDM tables; because the model is linear, interpolation between (and
    extrapolation beyond) the index points is exact.

Regenerate with ``python -m cassandra_rtl.synth.liberty`` (a test checks the checked-in file
matches this generator).
"""
from __future__ import annotations

import argparse
import pathlib
from dataclasses import dataclass

LIB_NAME = "cassandra_generic"
LIB_PATH = pathlib.Path(__file__).with_name("cassandra_generic.lib")

TAU_NS = 0.004          # logical-effort time unit: 4 ps
C_UNIT_FF = 1.0         # input capacitance of the unit inverter (fF)
R_NS_PER_FF = TAU_NS / C_UNIT_FF
SLEW_FACTOR = 0.10      # delay sensitivity to the input transition
TRANS_BASE_NS = 0.006   # output transition = base + 2 * R * C_load (a ramp about twice the RC delay)
# The two index points of every table. Linear model -> any two points describe it exactly.
SLEW_INDEX_NS = (0.005, 0.100)
LOAD_INDEX_FF = (0.5, 20.0)

# Sequential timing: clock-to-Q ~ 2.5 FO4, setup ~ 1.5 FO4 (typical ratios for a master-slave DFF).
DFF_CLK_Q_NS = 0.050
DFF_SETUP_NS = 0.030
DFF_HOLD_NS = 0.005


@dataclass(frozen=True)
class Comb:
    name: str
    area: float          # GE
    inputs: tuple[str, ...]
    function: str        # Liberty boolean syntax, output pin Y
    g: float             # logical effort per input (input capacitance = g * C_UNIT)
    p: float             # parasitic delay in units of tau
    unate: str           # "negative_unate" | "positive_unate" | "non_unate"
    doc: str


# Logical efforts / parasitics: textbook values (Sutherland, Sproull & Harris, "Logical Effort",
# with a 2:1 P/N ratio); two-stage cells (AND2, OR2, BUF) are modelled as one stage whose
# parasitic includes the internal stage.
COMB_CELLS: tuple[Comb, ...] = (
    Comb("INV_X1", 0.75, ("A",), "!A", 1.0, 1.0, "negative_unate", "inverter"),
    Comb("BUF_X1", 1.25, ("A",), "A", 1.0, 3.0, "positive_unate", "buffer (two inverters)"),
    Comb("NAND2_X1", 1.00, ("A", "B"), "!(A&B)", 4 / 3, 2.0, "negative_unate", "2-input NAND (the GE reference)"),
    Comb("NAND3_X1", 1.25, ("A", "B", "C"), "!(A&B&C)", 5 / 3, 3.0, "negative_unate", "3-input NAND"),
    Comb("NOR2_X1", 1.00, ("A", "B"), "!(A|B)", 5 / 3, 2.0, "negative_unate", "2-input NOR"),
    Comb("NOR3_X1", 1.25, ("A", "B", "C"), "!(A|B|C)", 7 / 3, 3.0, "negative_unate", "3-input NOR"),
    Comb("AND2_X1", 1.25, ("A", "B"), "(A&B)", 4 / 3, 4.5, "positive_unate", "2-input AND (NAND2 + INV)"),
    Comb("OR2_X1", 1.25, ("A", "B"), "(A|B)", 5 / 3, 5.0, "positive_unate", "2-input OR (NOR2 + INV)"),
    Comb("XOR2_X1", 2.00, ("A", "B"), "(A^B)", 4.0, 4.0, "non_unate", "2-input XOR"),
    Comb("XNOR2_X1", 2.00, ("A", "B"), "!(A^B)", 4.0, 4.0, "non_unate", "2-input XNOR"),
    Comb("AOI21_X1", 1.25, ("A", "B", "C"), "!((A&B)|C)", 2.0, 3.5, "negative_unate",
         "AND-OR-invert: Y = !((A & B) | C)"),
    Comb("OAI21_X1", 1.25, ("A", "B", "C"), "!((A|B)&C)", 2.0, 3.5, "negative_unate",
         "OR-AND-invert: Y = !((A | B) & C)"),
    Comb("MUX2_X1", 2.25, ("A", "B", "S"), "((A&!S)|(B&S))", 2.0, 4.0, "non_unate",
         "2:1 multiplexer: Y = S ? B : A"),
)


@dataclass(frozen=True)
class Seq:
    name: str
    area: float
    reset: str | None    # None | "clear" | "preset"  (asynchronous, active low)
    doc: str


SEQ_CELLS: tuple[Seq, ...] = (
    Seq("DFF_X1", 5.00, None, "positive-edge D flip-flop"),
    Seq("DFFR_X1", 6.00, "clear", "positive-edge D flip-flop, asynchronous active-low clear (RN)"),
    Seq("DFFS_X1", 6.00, "preset", "positive-edge D flip-flop, asynchronous active-low preset (SN)"),
)

TIE_CELLS = (("TIEHI_X1", 0.75, "1"), ("TIELO_X1", 0.75, "0"))

# The integrated clock gate of `synth.flow --clock-gating` (Yosys `clockgate`): a latch that is transparent while
# CLK is low holds E, GCLK = CLK & latch. One gate replaces the hold multiplexers of every flip-flop sharing an
# enable. Area: a latch (~3.75 GE) and an AND2, rounded up; sky130's sky130_fd_sc_hd__dlclkp_1 is 4.7 GE.
ICG_CELL = "ICG_X1"
ICG_AREA_GE = 5.00
ICG_SETUP_NS = DFF_SETUP_NS          # E is latched at the rising edge like a flip-flop's D
ICG_CLK_GCLK_NS = 0.0                # the gated clock's delay is a clock-tree matter (ideal clock, as for CLK)

# Convenience for consumers (the flow's own netlist timing and the docs).
AREA_GE = {c.name: c.area for c in COMB_CELLS} | {s.name: s.area for s in SEQ_CELLS} | {
    n: a for n, a, _ in TIE_CELLS} | {ICG_CELL: ICG_AREA_GE}
SEQ_CELL_NAMES = frozenset(s.name for s in SEQ_CELLS)


def _table(values: list[list[float]]) -> str:
    rows = ", \\\n            ".join('"' + ", ".join(f"{v:.5f}" for v in row) + '"' for row in values)
    return f"values ( \\\n            {rows} );"


def _delay_tables(p: float, intrinsic_ns: float | None = None) -> list[list[float]]:
    base = intrinsic_ns if intrinsic_ns is not None else TAU_NS * p
    return [[base + SLEW_FACTOR * s + R_NS_PER_FF * c for c in LOAD_INDEX_FF] for s in SLEW_INDEX_NS]


def _trans_tables() -> list[list[float]]:
    return [[TRANS_BASE_NS + 2 * R_NS_PER_FF * c for c in LOAD_INDEX_FF] for _ in SLEW_INDEX_NS]


def _setup_hold_arcs(setup_ns: float) -> str:
    """The setup / hold checks of a pin sampled at CLK's rising edge (a flip-flop's D, a clock gate's E)."""
    setup = [[setup_ns + 0.1 * s for s in SLEW_INDEX_NS] for _ in SLEW_INDEX_NS]
    hold = [[DFF_HOLD_NS for _ in SLEW_INDEX_NS] for _ in SLEW_INDEX_NS]
    return f"""      timing () {{
        related_pin : "CLK";
        timing_type : setup_rising;
        rise_constraint (constraint_2x2) {{ {_table(setup)} }}
        fall_constraint (constraint_2x2) {{ {_table(setup)} }}
      }}
      timing () {{
        related_pin : "CLK";
        timing_type : hold_rising;
        rise_constraint (constraint_2x2) {{ {_table(hold)} }}
        fall_constraint (constraint_2x2) {{ {_table(hold)} }}
      }}
"""


def _timing(related: str, sense: str, delay: list[list[float]], extra: str = "") -> str:
    trans = _trans_tables()
    return f"""      timing () {{
        related_pin : "{related}";
        timing_sense : {sense};{extra}
        cell_rise (delay_2x2) {{ {_table(delay)} }}
        cell_fall (delay_2x2) {{ {_table(delay)} }}
        rise_transition (delay_2x2) {{ {_table(trans)} }}
        fall_transition (delay_2x2) {{ {_table(trans)} }}
      }}"""


def render() -> str:
    out: list[str] = []
    out.append(f"""/*
 * {LIB_NAME}.lib -- a small generic CMOS standard-cell library written for cassandra-rtl.
 *
 * NOT a foundry library. Areas are in NAND2 gate equivalents (NAND2_X1 = 1.0 GE); delays follow a
 * linear logical-effort model (tau = {TAU_NS*1000:.0f} ps, FO4 inverter = 20 ps, the order of 28 nm bulk CMOS).
 * Generated by synth/liberty.py -- edit the generator, not this file. See docs/SYNTHESIS.md.
 * Pre-layout estimates only: no wires, no placement, single drive strength, one corner.
 */
library ({LIB_NAME}) {{
  delay_model : table_lookup;
  time_unit : "1ns";
  voltage_unit : "1V";
  current_unit : "1mA";
  pulling_resistance_unit : "1kohm";
  leakage_power_unit : "1nW";
  capacitive_load_unit (1, ff);
  nom_process : 1.0;
  nom_temperature : 25.0;
  nom_voltage : 0.9;
  slew_lower_threshold_pct_rise : 20;
  slew_upper_threshold_pct_rise : 80;
  slew_lower_threshold_pct_fall : 20;
  slew_upper_threshold_pct_fall : 80;
  input_threshold_pct_rise : 50;
  input_threshold_pct_fall : 50;
  output_threshold_pct_rise : 50;
  output_threshold_pct_fall : 50;
  default_max_transition : 0.5;
  default_fanout_load : 1.0;
  default_cell_leakage_power : 0.0;
  default_input_pin_cap : {C_UNIT_FF:.3f};
  default_output_pin_cap : 0.0;
  default_inout_pin_cap : {C_UNIT_FF:.3f};

  lu_table_template (delay_2x2) {{
    variable_1 : input_net_transition;
    variable_2 : total_output_net_capacitance;
    index_1 ("{SLEW_INDEX_NS[0]}, {SLEW_INDEX_NS[1]}");
    index_2 ("{LOAD_INDEX_FF[0]}, {LOAD_INDEX_FF[1]}");
  }}
  lu_table_template (constraint_2x2) {{
    variable_1 : related_pin_transition;
    variable_2 : constrained_pin_transition;
    index_1 ("{SLEW_INDEX_NS[0]}, {SLEW_INDEX_NS[1]}");
    index_2 ("{SLEW_INDEX_NS[0]}, {SLEW_INDEX_NS[1]}");
  }}
""")
    for c in COMB_CELLS:
        cin = c.g * C_UNIT_FF
        pins = []
        for pin in c.inputs:
            pins.append(f"""    pin ({pin}) {{
      direction : input;
      capacitance : {cin:.4f};
    }}""")
        timings = "\n".join(_timing(pin, c.unate, _delay_tables(c.p)) for pin in c.inputs)
        out.append(f"""  /* {c.doc}; logical effort g = {c.g:.3f}, parasitic p = {c.p:.2f} */
  cell ({c.name}) {{
    area : {c.area:.4f};
    cell_leakage_power : 0.0;
{chr(10).join(pins)}
    pin (Y) {{
      direction : output;
      function : "{c.function}";
      max_capacitance : {LOAD_INDEX_FF[1] * 4:.1f};
{timings}
    }}
  }}
""")
    for name, area, val in TIE_CELLS:
        out.append(f"""  /* constant {val} driver */
  cell ({name}) {{
    area : {area:.4f};
    cell_leakage_power : 0.0;
    pin (Y) {{
      direction : output;
      function : "{val}";
    }}
  }}
""")
    clkq = _delay_tables(0.0, intrinsic_ns=DFF_CLK_Q_NS)
    for s in SEQ_CELLS:
        rpin = {"clear": "RN", "preset": "SN"}.get(s.reset or "")
        ff_attrs = '      next_state : "D";\n      clocked_on : "CLK";'
        if s.reset == "clear":
            ff_attrs += '\n      clear : "!RN";'
        elif s.reset == "preset":
            ff_attrs += '\n      preset : "!SN";'
        reset_pin = ""
        reset_arc = ""
        if rpin:
            reset_pin = f"""    pin ({rpin}) {{
      direction : input;
      capacitance : {C_UNIT_FF:.4f};
    }}
"""
            sense = "positive_unate" if s.reset == "preset" else "negative_unate"
            reset_arc = "\n" + _timing(rpin, sense, clkq, extra="\n        timing_type : " +
                                        ("preset;" if s.reset == "preset" else "clear;"))
        out.append(f"""  /* {s.doc}; clk->Q {DFF_CLK_Q_NS*1000:.0f} ps, setup {DFF_SETUP_NS*1000:.0f} ps */
  cell ({s.name}) {{
    area : {s.area:.4f};
    cell_leakage_power : 0.0;
    ff (IQ, IQN) {{
{ff_attrs}
    }}
    pin (D) {{
      direction : input;
      capacitance : {C_UNIT_FF:.4f};
{_setup_hold_arcs(DFF_SETUP_NS)}    }}
    pin (CLK) {{
      direction : input;
      clock : true;
      capacitance : {C_UNIT_FF:.4f};
    }}
{reset_pin}    pin (Q) {{
      direction : output;
      function : "IQ";
{_timing("CLK", "non_unate", clkq, extra=chr(10) + "        timing_type : rising_edge;")}{reset_arc}
    }}
  }}
""")
    out.append(f"""  /* integrated clock gate (positive-edge flip-flops): latch transparent while CLK is low, GCLK = CLK & latch;
     E setup {ICG_SETUP_NS*1000:.0f} ps to the rising edge; used only by `synth.flow --clock-gating` */
  cell ({ICG_CELL}) {{
    area : {ICG_AREA_GE:.4f};
    cell_leakage_power : 0.0;
    clock_gating_integrated_cell : "latch_posedge";
    statetable ("CLK E", "IQ") {{
      table : "L L : - : L, L H : - : H, H - : - : N";
    }}
    pin (IQ) {{
      direction : internal;
      internal_node : "IQ";
    }}
    pin (CLK) {{
      direction : input;
      clock : true;
      clock_gate_clock_pin : true;
      capacitance : {C_UNIT_FF:.4f};
    }}
    pin (E) {{
      direction : input;
      clock_gate_enable_pin : true;
      capacitance : {C_UNIT_FF:.4f};
{_setup_hold_arcs(ICG_SETUP_NS)}    }}
    pin (GCLK) {{
      direction : output;
      clock_gate_out_pin : true;
      state_function : "CLK * IQ";
{_timing("CLK", "positive_unate", _delay_tables(0.0, intrinsic_ns=ICG_CLK_GCLK_NS))}
    }}
  }}
""")
    out.append("}\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="(Re)generate the cassandra_generic Liberty file.")
    ap.add_argument("--out", type=pathlib.Path, default=LIB_PATH)
    args = ap.parse_args(argv)
    args.out.write_text(render())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
