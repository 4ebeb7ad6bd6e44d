"""Smoke test of the evaluation report (`make report`): `eval/report.py --quick` into a tmp dir.

Checks the files exist, every PNG is referenced by the markdown and every referenced PNG exists, and each
figure section states its command. No timing assertions; the numbers of a --quick run mean nothing.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "eval" / "report.py"


def _bundled_model_available() -> bool:
    try:
        from cassandra_rtl.golden.io import bundled_model_path

        bundled_model_path()
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _bundled_model_available(), reason="bundled SmolLM2 not installed (run `make setup`)")
def test_report_quick(tmp_path):
    out, cache = tmp_path / "report", tmp_path / "cache"
    cmd = [sys.executable, str(REPORT), "--out", str(out), "--quick", "--cache", str(cache), "--no-cosim"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "[report 6/6]" in p.stderr  # the progress display
    md = (out / "report.md").read_text()
    pngs = sorted(f.name for f in out.glob("*.png"))
    assert {"entropy.png", "acceptance.png", "memory.png", "speedup.png"} <= set(pngs)
    refs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert sorted(set(refs)) == pngs, (refs, pngs)  # every PNG referenced, every reference exists
    for png in pngs:
        assert (out / png).stat().st_size > 5000
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert md.count("*Command* `python eval/report.py") >= len(pngs)
    assert "--quick" in md
    res = json.loads((cache / "results.json").read_text())
    assert res["draft_formula_ok"] is True
    assert res["entropy"]["q"]["code"] >= res["entropy"]["q"]["entropy"] > 0
    assert all(v["lossless"] in ("n/a", "2/2") for v in res["acceptance"].values())
