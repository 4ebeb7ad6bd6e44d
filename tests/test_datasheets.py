"""docs/datasheets: the generated parts (port tables from the export's port table, AXI4-Stream names, the
register summaries from hw/regs/cassandra.rdl, the worked example from golden) are current, every named
configuration has a datasheet, and a port the tables do not know fails the generator."""
from __future__ import annotations

import pytest

from cassandra_rtl.hw import datasheets
from cassandra_rtl.hw.configs import NAMED_CONFIGS


def test_generated_parts_are_current():
    assert datasheets.stale() == [], "run `python -m cassandra_rtl.hw.datasheets` and commit docs/datasheets"


def test_every_named_configuration_has_a_port_table():
    text = "".join(p.read_text() for p in datasheets.DATASHEETS.glob("*.md"))
    named = set()
    for m in datasheets.BEGIN.finditer(text):
        if m.group("kind") == "ports":
            named.update(m.group("args").split())
    assert named == set(NAMED_CONFIGS)


def test_a_port_without_a_meaning_fails(monkeypatch):
    monkeypatch.delitem(datasheets.MEANINGS, "spec_signman")
    with pytest.raises(KeyError, match="spec_signman"):
        datasheets.ports_table(["decoder_c1v3_l4"])


def test_a_changed_port_width_makes_the_datasheet_stale(monkeypatch):
    from cassandra_rtl.hw import export
    real = export.port_table

    def wider(component):
        return [dict(p, width=p["width"] + 1) if p["name"] == "spec_codes__payload" else p for p in real(component)]
    monkeypatch.setattr(export, "port_table", wider)
    page = datasheets.DATASHEETS / "decoder_c1.md"
    assert datasheets.render(page.read_text()) != page.read_text()


def test_worked_example_decodes_to_the_input():
    """The example's full-mode values are its input (the example is golden's own round trip)."""
    text = datasheets.example_c1()
    full = text.split("- full:")[1].split()
    assert [int(v, 16) for v in full] == list(datasheets.EXAMPLE_VALUES)


@pytest.mark.parametrize("full", [False, True], ids=["draft", "full"])
def test_worked_example_as_printed_decodes_on_the_rtl(full):
    """The example exactly as the C1 datasheet prints it (register program, plane words) decodes to the values
    it prints on decoder_c1v3_l4 in the Amaranth simulator, with random idles and backpressure."""
    import re

    import numpy as np

    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.escfield import encode3
    from cassandra_rtl.hw.simutil import DecodeJob, Stalls, run_decoder
    text = (datasheets.DATASHEETS / "decoder_c1.md").read_text()
    part = text.split("<!-- generated: example-c1 32 -->")[1].split("<!-- end generated -->")[0]
    program = [(int(i, 16), int(v)) for name, i, v in
               re.findall(r"^\| (\w+(?:\[\d+\])?) \| (0x[0-9a-f]+) \| 0x[0-9a-f]+ \| (\d+) \|$", part, re.M)
               if full or not name.startswith(("VERIF", "MODE"))]
    planes = {port: [(int(w.rstrip("*"), 16), int(w.endswith("*"))) for w in words.split()]
              for port, words in re.findall(r"^- `(\w+)`: (.*)$", part, re.M)
              if full or port.startswith("spec")}
    expected = [int(v, 16) for v in part.split("- full:" if full else "- draft:")[1].split("\n")[0].split()]
    dut = NAMED_CONFIGS["decoder_c1v3_l4"]()
    enc = encode3(np.array(datasheets.EXAMPLE_VALUES, dtype=np.uint16),
                  CodecConfig(group_size=32, mantissa_bits=3, keep_count=24, chunk_superblocks=1, pair_codes=False))
    res = run_decoder(dut, [DecodeJob(enc, full, planes=planes, program=program)],
                      Stalls(idle=0.3, backpressure=0.3, seed=5))
    assert res.error_code == 0
    assert [int(v) for v in res.values[0]] == expected


def _part(page: str, marker: str) -> str:
    text = (datasheets.DATASHEETS / page).read_text()
    return text.split(f"<!-- generated: {marker} -->")[1].split("<!-- end generated -->")[0]


def _words(line: str) -> list[tuple[int, int]]:
    return [(int(w.rstrip("*"), 16), int(w.endswith("*"))) for w in line.split()]


def test_c2_worked_example_as_printed_decodes_on_the_rtl():
    """The C2 datasheet's example (its printed program and words) decodes on decoder_c2v3_l8 to the printed
    full-mode values."""
    import re

    import numpy as np

    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.escfield import encode3
    from cassandra_rtl.hw.decoder import Reg
    from cassandra_rtl.hw.simutil import DecodeJob, Stalls, run_decoder
    part = _part("decoder_c2.md", "example-c2")
    names = {r.name: int(r) for r in Reg}

    def index(name):
        m = re.fullmatch(r"(\w+)\[(\d+)\]", name)
        return names[m.group(1)] + int(m.group(2)) if m else names[name]
    prog_line = part.split("Register program, full mode (index, value): ")[1].split("\n")[0]
    program = [(index(n), int(v)) for n, v in (kv.split(" = ") for kv in prog_line.split(", "))]
    planes = {port: _words(words) for port, words in re.findall(r"^- `(\w+)` \(\d+ bits\): (.*)$", part, re.M)}
    expected = [int(v, 16) for v in part.split("- full:")[1].split("\n")[0].split()]
    enc = encode3(np.array(datasheets.EXAMPLE_VALUES, dtype=np.uint16),
                  CodecConfig(scheme="c2", group_size=32, mantissa_bits=3, keep_count=24, chunk_superblocks=1,
                              pair_codes=False))
    res = run_decoder(NAMED_CONFIGS["decoder_c2v3_l8"](), [DecodeJob(enc, True, planes=planes, program=program)],
                      Stalls(idle=0.3, backpressure=0.3, seed=3))
    assert res.error_code == 0 and [int(v) for v in res.values[0]] == expected


def test_kv_worked_example_as_printed_is_what_the_encoder_emits():
    """The KV datasheet's example: its printed program and input vector through encoder_kv_c1_l2 give the
    printed plane words."""
    import re

    import numpy as np

    from cassandra_rtl.hw.decoder import Reg
    from cassandra_rtl.hw.simutil import Stalls, run_encoder
    part = _part("kv_encoders.md", "example-kv")
    names = {r.name: int(r) for r in Reg}

    def index(name):
        m = re.fullmatch(r"(\w+)\[(\d+)\]", name)
        return names[m.group(1)] + int(m.group(2)) if m else names[name]
    prog_line = part.split("before the first beat: ")[1].split("\n")[0]
    program = [(index(n), int(v)) for n, v in (kv.split(" = ") for kv in prog_line.split(", "))]
    beats = part.split("lane 0 first): ")[1].split("\n")[0].split()
    vec = np.array([int(x, 16) for b in beats for x in b.split("|")], dtype=np.uint16).reshape(1, -1)
    printed = {port: _words(words) for port, words in re.findall(r"^- `(\w+)`: (.*)$", part, re.M)}
    res = run_encoder(NAMED_CONFIGS["encoder_kv_c1_l2"](), vec, program, Stalls(idle=0.3, backpressure=0.3, seed=4))
    assert res.error_code == 0
    assert {p: [(int(d), int(last)) for d, last in w] for p, w in res.planes.items()} == printed


def test_area_figures_follow_the_generated_hardware_report(tmp_path, monkeypatch):
    """The datasheets' area / clock tables are docs/report/hardware.md's rows: a changed figure there makes
    the C1 datasheet stale."""
    report = datasheets.HW_REPORT.read_text()
    row = next(line for line in report.splitlines() if line.startswith("| decoder_c1v3_l8 | "))
    area = row.split(" | ")[1].split(" GE")[0]                      # e.g. "41,720"
    bumped = f"{int(area.replace(',', '')) + 1:,}"
    page = (datasheets.DATASHEETS / "decoder_c1.md").read_text()
    assert f"| decoder_c1v3_l8 | {area} |" in datasheets.render(page)
    changed = tmp_path / "hardware.md"
    changed.write_text(report.replace(row, row.replace(f"| {area} GE", f"| {bumped} GE", 1)))
    monkeypatch.setattr(datasheets, "HW_REPORT", changed)
    assert f"| decoder_c1v3_l8 | {bumped} |" in datasheets.render(page)
