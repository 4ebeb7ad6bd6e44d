"""The memory figures of README.md and docs/MODEL.md cannot drift: the scaling table's ratios
are its own columns divided out, README quotes the table's SmolLM2 row, and when bench/memory_scale.py's
results are at hand (build/memory/results.jsonl; not in a fresh clone) every row of the table is one of them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL = (ROOT / "docs" / "MODEL.md").read_text()
README = (ROOT / "README.md").read_text()


def _mb(x: str) -> float:
    return float(x.replace(",", ""))


def _scaling_rows() -> list[list[str]]:
    rows = []
    for line in MODEL.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[3] in ("derived", "copy"):
            rows.append(cells)
    return rows


def test_scaling_table_ratios_are_its_columns():
    rows = _scaling_rows()
    assert len(rows) >= 8, "docs/MODEL.md lost the memory scaling table"
    for model, _, bf16, mode, base, peak, ratio, above, *_ in rows:
        b, p, z = _mb(bf16), _mb(peak), _mb(base)
        assert abs(float(ratio.rstrip("x")) - p / b) <= 0.006, (model, mode)
        assert abs(float(above.rstrip("x")) - (p - z) / b) <= 0.006, (model, mode)
    derived = [r for r in rows if r[3] == "derived"]
    assert all(float(r[6].rstrip("x")) <= 2.5 for r in derived), "a derived row is above the issue's 2.5x"


def test_readme_quotes_the_smollm2_row():
    row = next(r for r in _scaling_rows() if r[0].startswith("SmolLM2") and r[3] == "derived")
    peak, ratio = row[5], row[6]
    assert f"peak RSS {peak} MB = {ratio} its bf16 weights" in README
    assert f"**{peak} MB** | **{ratio}**" in MODEL        # the SmolLM2 table's default row
    copy = next(r for r in _scaling_rows() if r[0].startswith("SmolLM2") and r[3] == "copy")
    assert f"{copy[5]} MB = {copy[6]}" in README


def test_table_rows_come_from_the_benchmark_results():
    log = ROOT / "build" / "memory" / "results.jsonl"
    if not log.is_file():
        pytest.skip("no bench/memory_scale.py results here (make bench-memory writes build/memory/results.jsonl)")
    got, speeds = set(), set()
    for line in log.read_text().splitlines():
        r = json.loads(line)
        if "model" in r:
            got.add((r["model"], r["mode"], round(r["peak_rss_bytes"] / 1e6)))
        elif "speed" in r:
            sp = r["speed"]
            speeds.add((f"{sp['derived']['tok_per_cpu_s']:.2f}", f"{sp['copy']['tok_per_cpu_s']:.2f}"))
    for model, _, _, mode, _, peak, *_ in _scaling_rows():
        assert (model, mode, round(_mb(peak))) in got, (model, mode, peak)
    m = re.search(r"\*\*([\d.]+) tok per CPU-s derived vs ([\d.]+) copied", MODEL)
    assert m and (m.group(1), m.group(2)) in speeds
