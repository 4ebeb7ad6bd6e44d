"""eval/report_hardware.py on small fake flow reports: tables, v2 -> v3 rows, the overhead section, errors."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("report_hardware", ROOT / "eval" / "report_hardware.py")
rh = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rh)


def _block(kind, ge, mhz, vpc=None):
    return {"status": "ok", "kind": kind, "area_ge": ge, "timing": {"est_fmax_mhz": mhz},
            "meta": {"values_per_cycle": vpc, "lanes": vpc} if vpc else {"flops_per_cycle": 2}}


def test_hardware_report_from_fake_flows(tmp_path):
    generic = {"flow": {"library": "cassandra_generic"}, "blocks": {
        "pe_bf16_fp32": _block("pe", 3000.0, 400.0),
        "decoder_c1v3_l8": _block("decoder", 30000.0, 560.0, 8),
        "encoder_kv_c1_l2": _block("encoder", 40000.0, 600.0, 2)}}
    from cassandra_rtl.synth import overhead
    generic.update(overhead.overhead(generic))
    (tmp_path / "g.json").write_text(json.dumps(generic))
    out = tmp_path / "rep"
    assert rh.main(["--out", str(out), "--synth", str(tmp_path / "g.json"), "--fpga", str(tmp_path / "none.json"),
                    "--formal", str(tmp_path / "none.json"), "--real", str(tmp_path / "none.json"),
                    "--retired", str(tmp_path / "none.json")]) == 0
    md = (out / "hardware.md").read_text()
    # no v2 rows anywhere: the v2 -> v3 row shows the v3 side only (30,000 / 8 GE at 560 / 400 = 1.40x)
    assert "| decoder_c1v2_l8_v4 -> decoder_c1v3_l8 | — -> 3.75 k |" in md and "— -> 1.40 |" in md
    assert "Overhead on real devices" in md and "decoder_c1v3_l8" in md and "Formal: **not run**" in md
    assert (out / "hardware_area_clock.png").stat().st_size > 1000


def test_v2_rows_come_from_the_frozen_file(tmp_path):
    """The flows no longer build v2: its rows come from synth/retired.json (written by --freeze-v2 from reports
    that held them; ECP5 rows no report holds from the page's table, marked carried), each against the PE of
    its own flow."""
    old = {"flow": {"library": "cassandra_generic", "command": "python -m cassandra_rtl.synth.flow ..."}, "blocks": {
        "pe_bf16_fp32": _block("pe", 3000.0, 350.0),
        "decoder_c1v2_l8_v4": _block("decoder", 64000.0, 560.0, 8),
        "decoder_c1v3_l8": _block("decoder", 1.0, 1.0, 8)}}        # not a v2 block: not frozen
    fpga = {"blocks": {"pe_bf16_fp32": {"status": "ok", "lut4": 900, "fmax_mhz": 20.0}}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "fpga.json").write_text(json.dumps(fpga))
    (tmp_path / "hardware.md").write_text(
        "| block | g: area | g: MHz | s: area | s: MHz | ECP5: area | ECP5: MHz |\n|---|---|---|---|---|---|---|\n"
        "| pe_bf16_fp32 | 1 GE | 1.0 (1.00x) | 1 GE | 1.0 (1.00x) | 900 LUT4 (1.00x) | 20.0 (1.00x) |\n"
        "| decoder_c1v2_l8_v4 | 2 GE | 2.0 (2.00x) | 2 GE | 2.0 (2.00x) | 14,205 LUT4 (15.78x) ‡ | 27.0 (1.35x) ‡ |\n")
    frozen = tmp_path / "retired.json"
    assert rh.main(["--freeze-v2", str(frozen), "--out", str(tmp_path), "--synth", str(tmp_path / "old.json"),
                    "--gated", str(tmp_path / "none.json"), "--fpga", str(tmp_path / "fpga.json"),
                    "--commit", "abc1234"]) == 0
    d = json.loads(frozen.read_text())
    assert set(d["flows"]["generic"]["blocks"]) == {"pe_bf16_fp32", "decoder_c1v2_l8_v4"} and "abc1234" in d["note"]
    assert "gated" not in d["flows"] and d["flows"]["fpga"]["flow"]["carried_from"]
    assert d["flows"]["fpga"]["blocks"]["decoder_c1v2_l8_v4"] == {"status": "ok", "lut4": 14205, "fmax_mhz": 27.0,
                                                                  "carried": True}
    generic = {"flow": {"library": "cassandra_generic"}, "blocks": {
        "pe_bf16_fp32": _block("pe", 3000.0, 400.0),
        "decoder_c1v3_l8": _block("decoder", 30000.0, 520.0, 8)}}
    md = "\n".join(rh.v2_vs_v3(generic, None, None, None, retired=d["flows"]))
    # 64,000 / 8 = 8.00 k GE per draft value/cycle at 560 / 350 = 1.60x its own flow's PE; ECP5 27 / 20 = 1.35
    assert "| decoder_c1v2_l8_v4 -> decoder_c1v3_l8 | 8.00 k -> 3.75 k | — -> — | — | 3.50 k | 1.60 -> 1.30 | " \
           "— -> — | 14,205 -> — | 1.35 -> — |" in md


def test_missing_synth_report_is_an_error(tmp_path, capsys):
    assert rh.main(["--out", str(tmp_path), "--synth", str(tmp_path / "absent.json")]) == 2
    assert "make synth" in capsys.readouterr().err


def test_v2_to_v3_rows_price_the_cluster_instance(tmp_path):
    """v2 -> v3: GE per draft value/cycle in the generic and gated flows, the cluster instance as core + shared
    registers / CLUSTER, clocks against each flow's own PE, ECP5 LUT4; a gated report written without clock gating
    is not read as one."""
    generic = {"flow": {"library": "cassandra_generic"}, "blocks": {
        "pe_bf16_fp32": _block("pe", 3000.0, 400.0),
        "decoder_c1v2_l8_v4": _block("decoder", 48000.0, 600.0, 8),
        "decoder_c1v3_l8": _block("decoder", 40000.0, 520.0, 8)}}
    gated = {"flow": {"library": "cassandra_generic", "clock_gating": True}, "blocks": {
        "pe_bf16_fp32": _block("pe", 3000.0, 400.0),
        "decoder_c1v2_l8_v4": _block("decoder", 44000.0, 600.0, 8),
        "decoder_c1v3_l8": _block("decoder", 36000.0, 520.0, 8),
        "decoder_c1v3_l8_core": _block("decoder", 32000.0, 520.0, 8),
        "tensor_regs": {"status": "ok", "kind": "tensor_regs", "area_ge": 4800.0, "timing": {"est_fmax_mhz": 900.0}}}}
    fpga = {"blocks": {"pe_bf16_fp32": {"status": "ok", "lut4": 900, "fmax_mhz": 25.0},
                       "decoder_c1v2_l8_v4": {"status": "ok", "lut4": 14000, "fmax_mhz": 30.0},
                       "decoder_c1v3_l8": {"status": "ok", "lut4": 12000, "fmax_mhz": 35.0}}}
    from cassandra_rtl.synth import overhead
    generic.update(overhead.overhead(generic))
    rows = rh.v2_vs_v3(generic, gated, None, fpga)
    assert len(rows) == 3           # header, rule, C1 (no C2 block in these reports)
    # 48,000 / 8 = 6.00 k -> 5.00 k; gated 5.50 k -> 4.50 k; instance (32,000 + 4,800 / 4) / 8 = 4.15 k;
    # clock 600 / 400 = 1.50 -> 1.30; ECP5 30 / 25 = 1.20 -> 1.40
    assert rows[2] == ("| decoder_c1v2_l8_v4 -> decoder_c1v3_l8 | 6.00 k -> 5.00 k | 5.50 k -> 4.50 k | 4.15 k | "
                       "3.50 k | 1.50 -> 1.30 | — -> — | 14,000 -> 12,000 | 1.20 -> 1.40 |")
    for name, rep in (("g.json", generic), ("cg.json", gated), ("ungated.json", {**gated, "flow": {}})):
        (tmp_path / name).write_text(json.dumps(rep))
    none = str(tmp_path / "none.json")
    body = rh.render(tmp_path / "rep", str(tmp_path / "g.json"), none, none, none, gated=str(tmp_path / "cg.json"),
                     retired=none)
    assert "## v2 -> v3" in body and "| 4.15 k |" in body
    body = rh.render(tmp_path / "rep", str(tmp_path / "g.json"), none, none, none, gated=str(tmp_path / "ungated.json"),
                     retired=none)
    assert "**not run**: `make synth CLOCK_GATING=1`" in body and "6.00 k -> 5.00 k | — -> — | —" in body


def test_several_formal_reports_each_get_a_table(tmp_path):
    generic = {"flow": {"library": "cassandra_generic"}, "blocks": {"pe_bf16_fp32": _block("pe", 3000.0, 400.0)}}
    from cassandra_rtl.synth import overhead
    generic.update(overhead.overhead(generic))
    (tmp_path / "g.json").write_text(json.dumps(generic))
    (tmp_path / "f1.json").write_text(json.dumps({"meta": {"date": "d1", "command": "cmd one"}, "properties": [
        {"property": "p_one", "mode": "bmc", "depth": 9, "solver": "z3", "result": "PASS", "expect": "PASS",
         "seconds": 12.0}]}))
    out = tmp_path / "rep"
    assert rh.main(["--out", str(out), "--synth", str(tmp_path / "g.json"), "--fpga", str(tmp_path / "none.json"),
                    "--real", str(tmp_path / "none.json"), "--retired", str(tmp_path / "none.json"),
                    "--formal", str(tmp_path / "missing.json"), "--formal", str(tmp_path / "f1.json")]) == 0
    md = (out / "hardware.md").read_text()
    assert f"Formal: **not run** here ({tmp_path / 'missing.json'} not found" in md
    assert f"From {tmp_path / 'f1.json'} (d1; `cmd one`)" in md and "| p_one | bmc | 9 | z3 | PASS | PASS | 12 |" in md


def test_formal_block_carried_from_the_previous_rendering():
    """Without a formal report, its block ("From PATH (...)" and its table) comes from the text the rendering
    replaces, marked as carried; another report's block is not taken, and without a previous block the report
    says the proofs were not run."""
    prev = ("### Formal proofs\n\nFormal: **not run** here (build/formal/report.json not found).\n\n"
            "From build/formal-a/report.json (2026-12-01; `cmd a`):\n\n| property | mode |\n|---|---|\n| p1 | bmc |\n\n"
            "From build/formal-b/report.json (2026-12-02; `cmd b`):\n\n| property | mode |\n|---|---|\n| p2 | cover |\n\n"
            "## Next section\n")
    a = rh.formal_lines(None, "build/formal-a/report.json", prev)
    assert a[:5] == ["From build/formal-a/report.json (2026-12-01; `cmd a`):", "", "| property | mode |", "|---|---|",
                     "| p1 | bmc |"]
    assert "carried from the previous rendering" in a[-1] and not any("p2" in x for x in a)
    b = rh.formal_lines(None, "build/formal-b/report.json", prev)
    assert b[4] == "| p2 | cover |" and not any("Next section" in x for x in b)
    assert rh.formal_lines(None, "build/formal-c/report.json", prev)[0].startswith("Formal: **not run**")
    # the last block of a section followed by prose (report.md: the co-simulation table): the table only
    tail = prev.replace("\n## Next section\n", "\n\nCo-simulation (RTL decoder vs golden decode):\n\n| a | b |\n")
    assert rh.previous_formal(tail, "build/formal-b/report.json") == [
        "From build/formal-b/report.json (2026-12-02; `cmd b`):", "", "| property | mode |", "|---|---|", "| p2 | cover |"]
    fresh = rh.formal_lines({"meta": {"date": "d", "command": "c"}, "properties": [{"property": "p9"}]},
                            "build/formal-a/report.json", prev)
    assert any("p9" in x for x in fresh) and not any("carried" in x for x in fresh)


def test_overhead_section_rerendered_alone(tmp_path):
    """--sections overhead rewrites only the overhead section from the flows' current reports (marked with its
    command); the block table above it and the formal section below keep their rendering."""
    from cassandra_rtl.synth import overhead

    def generic(dec_ge):
        rep = {"flow": {"library": "cassandra_generic"}, "blocks": {
            "pe_bf16_fp32": _block("pe", 3000.0, 400.0),
            "decoder_c1v3_l8": _block("decoder", dec_ge, 560.0, 8),
            "encoder_kv_c1_l2": _block("encoder", 40000.0, 600.0, 2)}}
        rep["blocks"]["decoder_c1v3_l8"]["meta"]["layout"] = "format 3.0"
        rep.update(overhead.overhead(rep))
        (tmp_path / "g.json").write_text(json.dumps(rep))
        return rep
    none = str(tmp_path / "none.json")
    args = ["--out", str(tmp_path / "rep"), "--synth", str(tmp_path / "g.json"), "--fpga", none, "--formal", none,
            "--real", none, "--gated", none, "--retired", none]
    first = generic(30000.0)
    assert rh.main(args) == 0
    md = (tmp_path / "rep" / "hardware.md").read_text()
    second = generic(60000.0)
    assert rh.main(args + ["--sections", "overhead"]) == 0
    new = (tmp_path / "rep" / "hardware.md").read_text()
    cut, formal = md.index("## Overhead on real devices"), md.index("## Formal proofs")
    assert new[:cut] == md[:cut] and new.endswith(md[formal:])
    pct = lambda rep: f"**{rep['npu_overhead_percent']['npu']:.3f}**"        # noqa: E731  (the total % column)
    assert pct(first) in md[cut:formal] and pct(second) in new[cut:] and pct(first) != pct(second)
    assert "--sections overhead" in new[cut:new.index("## Formal proofs")]
    (tmp_path / "rep" / "hardware.md").write_text("# nothing to splice\n")
    assert rh.main(args + ["--sections", "overhead"]) == 2


def test_ecp5_cells_carried_from_the_previous_rendering():
    """An ECP5 cell this rendering lacks ("—", or "—" on one side of "a -> b") comes from the same table, row and
    column of the previous rendering, marked (each side of "a -> b" on its own: the fresh side stays); a cell with
    a figure now, another column's "—", another table's row and a row the previous rendering did not have are
    left alone."""
    head = "| block | generic | ECP5 LUT4 | ECP5 MHz |\n|---|---:|---:|---:|\n"
    prev = (head + "| a | 1 GE | 100 LUT4 | 30.0 |\n| b | 2 GE | 200 LUT4 | 31.0 |\n| c | — | 300 LUT4 | 32.0 |\n\n"
            "| v2 -> v3 | ECP5 LUT4 |\n|---|---:|\n| a -> a2 | 80 -> 100 |\n")
    new = (head + "| a | 1 GE | — | — |\n| b | 2 GE | 250 LUT4 | — |\n| c | — | — | — |\n| d | 4 GE | — | — |\n\n"
           "| v2 -> v3 | ECP5 LUT4 |\n|---|---:|\n| a -> a2 | 80 -> — |\n\n| other | ECP5 LUT4 |\n|---|---:|\n"
           "| a | — |\n")
    body, n = rh.carry_ecp5(new, prev)
    rows = body.split("\n")
    assert rows[2] == "| a | 1 GE | 100 LUT4 ‡ | 30.0 ‡ |"
    assert rows[3] == "| b | 2 GE | 250 LUT4 | 31.0 ‡ |"              # the new figure stays
    assert rows[4] == "| c | — | 300 LUT4 ‡ | 32.0 ‡ |"                # not the generic column's "—"
    assert rows[5] == "| d | 4 GE | — | — |"
    assert "| a -> a2 | 80 -> 100 ‡ |" in body and body.endswith("| a | — |\n") and n == 6
    again, m = rh.carry_ecp5(new, body)                               # carried twice: one mark
    assert m == 6 and "100 LUT4 ‡ |" in again and "‡ ‡" not in again
    # a block the FPGA report holds (here: it failed there) keeps its "—"; in a pair, only that side does
    held, k = rh.carry_ecp5(new, prev, ["a", "c", "a2"])
    assert "| a | 1 GE | — | — |" in held and "| c | — | — | — |" in held and "| a -> a2 | 80 -> — |" in held
    assert "| b | 2 GE | 250 LUT4 | 31.0 ‡ |" in held and k == 1
    fresh_new, j = rh.carry_ecp5(new.replace("| a -> a2 | 80 -> — |", "| a -> a2 | — -> 90 |"), prev, ["a2"])
    assert "| a -> a2 | 80 ‡ -> 90 |" in fresh_new and "| a | 1 GE | 100 LUT4 ‡ | 30.0 ‡ |" in fresh_new


def test_area_by_function_from_the_ablation_reports_or_carried(tmp_path):
    """The "Area by function" tables come from synth/ablate.py's reports, largest cost first; a block whose report
    is absent keeps the previous rendering's table (marked carried), else says how to run it."""
    from cassandra_rtl.synth import ablate

    c1, c2 = sorted(ablate.SUBJECTS)
    rows = [{"ablation": None, "what": "the unchanged block", "area_ge": 1000.0, "flip_flops": 50, "fmax_mhz": 500.0,
             "breakdown": {"(top-level logic)": 600.0, "rd": 400.0}},
            {"ablation": "small", "what": "a small function", "area_ge": 990.0, "flip_flops": 50, "fmax_mhz": 501.0,
             "saved_ge": 10.0, "saved_percent": 1.0},
            {"ablation": "big", "what": "a big function", "area_ge": 700.0, "flip_flops": 40, "fmax_mhz": None,
             "saved_ge": 300.0, "saved_percent": 30.0}]
    (tmp_path / c2).mkdir()
    (tmp_path / c2 / "report.json").write_text(json.dumps({"block": c2, "rows": rows, "command": f"cmd {c2}"}))
    lines = rh.ablation_lines(str(tmp_path))
    i = lines.index(f"Area of {c2} by function (generic flow, `cmd {c2}`): the block is 1,000 GE, 50 flip-flops; "
                    "per submodule (top-level logic) 600, rd 400. A one-gate change moves this flow's mapping by up to ~2 % "
                    "(20 GE): smaller rows are within that.")
    assert lines[i + 4] == "| a big function (`big`) | 700 | 300 | 30.0 % | 40 | — |"
    assert lines[i + 5] == "| a small function (`small`) | 990 | 10 | 1.0 % | 50 | 501.0 |"
    assert any(x.startswith(f"{c1}: **not run**") for x in lines)
    carried = rh.ablation_lines(str(tmp_path / "none"), "\n".join(lines))
    j = carried.index(lines[i])
    assert carried[j:j + 6] == lines[i:i + 6] and "carried from the previous rendering" in carried[j + 7]
    # the gated run of the same block (OUT/BLOCK-cg) adds its cost column; an ablation it lacks shows "—"
    (tmp_path / f"{c2}-cg").mkdir()
    grows = [dict(rows[0], area_ge=900.0), dict(rows[2], area_ge=650.0, saved_ge=250.0)]
    (tmp_path / f"{c2}-cg" / "report.json").write_text(json.dumps({"block": c2, "rows": grows, "flow": "gated",
                                                                   "command": f"cmd {c2} --clock-gating"}))
    both = rh.ablation_lines(str(tmp_path))
    k = next(n for n, x in enumerate(both) if x.startswith(f"Area of {c2} "))
    assert f"; gated: `cmd {c2} --clock-gating`): the block is 1,000 GE (900 gated)" in both[k]
    assert both[k + 4] == "| a big function (`big`) | 700 | 300 | 30.0 % | 250 | 40 | — |"
    assert both[k + 5] == "| a small function (`small`) | 990 | 10 | 1.0 % | — | 50 | 501.0 |"
