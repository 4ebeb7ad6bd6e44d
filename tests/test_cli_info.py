"""`cassandra-rtl info` / `where-model` (where the bundled GGUF is, for a first run)."""
from __future__ import annotations

import json
from pathlib import Path

from cassandra_rtl.cli import main


def test_info_json_lists_model_versions_and_tools(capsys):
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["packages"]["numpy"] and set(info["tools"]) >= {"verilator", "icarus", "yosys", "opensta"}
    for t in info["tools"].values():
        assert t["path"] is None or Path(t["path"]).exists()
        assert t["install"]
    assert (info["bundled_model"] is None) != (info["bundled_model_problem"] is None)


def test_where_model(capsys):
    from cassandra_rtl.errors import InputError
    from cassandra_rtl.golden.io import bundled_model_path

    try:
        want = bundled_model_path()
    except InputError:
        rc = main(["where-model"])
        assert rc == 2 and "make setup" in capsys.readouterr().err
        return
    assert main(["where-model"]) == 0
    out = capsys.readouterr().out.strip()
    assert Path(out) == want and Path(out).is_file() and out.endswith(".gguf")


def test_info_text(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "bundled model:" in out and "tools:" in out
    assert main(["info", "--bogus"]) == 2
