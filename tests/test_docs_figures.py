"""Docs that cannot drift: headline figures in README.md and docs/ are recomputed here
where that is cheap, or compared with the generated file they were copied from.

* bits/value of the bundled SmolLM2's layers 0/10/20/29 (the peers' set), C1 G=128 m=3 keep 1.0, format
  2.0 and format 1.0: recomputed with the golden codec and compared with docs/FORMAT.md §9 and README.md;
* every number of docs/report/hardware.md's block table that README.md quotes (area in k GE, clock ratios);
* docs/report/hardware.md against build/synth/report.json when a synthesis report is at hand (skipped in a
  fresh clone: build/ is not tracked).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FORMAT = (ROOT / "docs" / "FORMAT.md").read_text()
HW_REPORT = (ROOT / "docs" / "report" / "hardware.md").read_text()


def _smollm2_layers(layers=(0, 10, 20, 29)):
    from cassandra_rtl.golden.io import read_tensors
    from cassandra_rtl.model.loader import bundled_model_path

    try:
        path = bundled_model_path()
    except Exception as exc:                    # noqa: BLE001 - the package is optional in a bare checkout
        pytest.skip(f"bundled model unavailable: {exc}")
    out = []
    for name, bits in read_tensors(path):
        if bits.ndim == 2 and name.startswith("blk.") and int(name.split(".")[1]) in layers:
            out.append(bits)
    return out


def _total_bits(tensors, **layout) -> float:
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.golden.config import CodecConfig

    cfg = CodecConfig(scheme="c1", group_size=128, mantissa_bits=3, keep_ratio=1.0, **layout)
    nbytes = sum(e.spec_nbytes + e.verif_nbytes for e in (encode_tensor(b, cfg) for b in tensors))
    return 8 * nbytes / sum(b.size for b in tensors)


def test_format_totals_regenerate():
    """FORMAT.md §9's row for the peers' set and README's peers row are what the codec gives today."""
    tensors = _smollm2_layers()
    assert sum(b.size for b in tensors) == 14_155_776
    v2 = _total_bits(tensors)                                          # the default policy: format 2.0
    v1 = _total_bits(tensors, chunk_superblocks=1, pair_codes=False)   # format 1.0
    row = re.search(r"\| SmolLM2 layers 0, 10, 20, 29 \(14,155,776 values[^|]*\| C1 \| ([\d.]+) → \*\*([\d.]+)\*\*",
                    FORMAT)
    assert row, "FORMAT.md §9 no longer has the C1 row of the peers' set"
    assert (float(row.group(1)), float(row.group(2))) == (round(v1, 3), round(v2, 3))
    assert f"Cassandra C1 **{v2:.3f}** bits/value at keep 1.0" in README
    assert f"format 1.0: {v1:.3f})" in README


def _report_rows() -> dict[str, list[str]]:
    rows = {}
    for line in HW_REPORT.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and re.fullmatch(r"[a-z0-9_]+", cells[0]):
            rows[cells[0]] = cells[1:]
    return rows


def test_readme_hardware_figures_match_the_generated_report():
    rows = _report_rows()
    assert "pe_bf16_fp32" in rows
    line = next(x for x in README.splitlines() if x.startswith("| decoder v3 "))
    checked = 0
    for block, kge in re.findall(r"(decoder_c[12]v3_l\d+) ([\d.]+) k GE", line):
        ge = int(rows[block][0].split(" GE")[0].replace(",", ""))
        assert float(kge) == round(ge / 1000, 1), (block, kge, ge)
        checked += 1
    for block, ratio in re.findall(r"(decoder_c[12]v3_l\d+) [\d.]+ k GE[^,;]*?at \*\*([\d.]+)x\*\*", line):
        assert rows[block][1].endswith(f"({ratio}x)"), (block, ratio, rows[block][1])
        checked += 1
    assert checked >= 3


def test_generated_report_matches_the_synthesis_report():
    rep = ROOT / "build" / "synth" / "report.json"
    if not rep.exists():
        pytest.skip("no build/synth/report.json (run make synth)")
    blocks = json.loads(rep.read_text()).get("blocks", {})
    rows = _report_rows()
    compared = 0
    for name, cells in rows.items():
        b = blocks.get(name)
        if b is None or cells[0] == "—" or "area_ge" not in b:
            continue
        assert cells[0].startswith(f"{round(b['area_ge']):,} GE"), (name, cells[0], b["area_ge"])
        compared += 1
    if not compared:
        pytest.skip("the synthesis report and docs/report/hardware.md share no block")


def _escape_row(mode: str, keep: float, p: float) -> tuple[str, str]:
    from cassandra_rtl.hw.measure import measure_escapes
    rows = measure_escapes("decoder_c1v3_l8", mode, [0.0, p], 131072, keep)
    return f"{rows[0]['of_nominal']:.3f}", f"{rows[1]['of_nominal']:.3f} ({rows[1]['cycles_per_escape']:.2f})"


@pytest.mark.slow
def test_decoder_escape_cost_regenerates():
    """decoder_c1.md's escape table is what `python -m cassandra_rtl.hw.measure --escapes` measures today
    (two of its cells: draft keep 0.5 at P = 0.01, full keep 0.3 at P = 0.05; same seed, same tensors).
    In -m slow: four simulations of 131,072 values (about a minute)."""
    from cassandra_rtl.tb import bulk
    if not bulk.available():
        pytest.skip("Verilator unavailable")
    page = (ROOT / "docs" / "datasheets" / "decoder_c1.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")[1:]]
            for line in page.splitlines() if re.match(r"\| (0|0\.01|0\.05|0\.2) \| 0\.\d{3}", line)}
    assert set(rows) == {"0", "0.01", "0.05", "0.2"}, "decoder_c1.md lost its escape table"
    base, draft = _escape_row("draft", 0.5, 0.01)
    assert (rows["0"][0], rows["0.01"][0]) == (base, draft)
    base, full = _escape_row("full", 0.3, 0.05)
    assert (rows["0"][2], rows["0.05"][2]) == (base, full)
