"""docs/ stays a set of pages a user can read: its hand-written lines (hw/datasheets.py ``count_lines``: the
generated reports, the PeakRDL register map and every generated part left out) stay within
``HAND_WRITTEN_LIMIT``; `python -m cassandra_rtl.hw.datasheets --count-lines` prints the figure."""
from __future__ import annotations

from cassandra_rtl.hw import datasheets


def test_hand_written_docs_within_the_limit():
    counts = datasheets.count_lines()
    total = sum(counts.values())
    assert total <= datasheets.HAND_WRITTEN_LIMIT, \
        f"docs/ has {total} hand-written lines (limit {datasheets.HAND_WRITTEN_LIMIT}): {counts}"


def test_generated_parts_and_reports_are_not_counted(tmp_path):
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "r.md").write_text("a\n" * 50)
    (tmp_path / "datasheets").mkdir()
    (tmp_path / "datasheets" / "map.md").write_text("<!---\nx\n\nDon't override. Generated from: top\n-->\n" + "r\n" * 40)
    (tmp_path / "page.md").write_text("one\ntwo\n<!-- generated: ports x -->\ng1\ng2\ng3\n<!-- end generated -->\nthree\n")
    assert datasheets.count_lines(tmp_path) == {"page.md": 3}
