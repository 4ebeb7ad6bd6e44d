"""Fast unit tests of the evaluation report's helpers (eval/): cache, memory model, markdown inputs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval"))

import report_memory as mem  # noqa: E402
from report_lib import JsonlCache, key_of, tensor_type  # noqa: E402


def test_cache_roundtrip_and_incremental(tmp_path):
    c = JsonlCache(tmp_path / "m.jsonl")
    k = key_of({"config": "c_k1.0_m3", "prompt": "p", "tokens": 12})
    assert c.get(k) is None
    c.put(k, {"acceptance": 0.5})
    with open(tmp_path / "m.jsonl", "a") as f:
        f.write('{"key": "cut-off li')  # an interrupted run leaves a partial line: ignored
    c2 = JsonlCache(tmp_path / "m.jsonl")
    assert c2.get(k) == {"acceptance": 0.5}
    assert key_of({"tokens": 12, "a": 1}) == key_of({"a": 1, "tokens": 12})
    assert key_of({"tokens": 12}) != key_of({"tokens": 13})


def test_tensor_types():
    assert [tensor_type(n) for n in ("tok_emb", "layers.3.wq", "layers.0.w_down", "layers.1.attn_norm")] == \
        ["embeddings", "q", "down", None]


def test_memory_model():
    shape = {"name": "t", "params_2d": 1000, "params_1d": 10, "n_layers": 2, "n_kv_heads": 1, "head_dim": 4,
             "max_context": 100}
    s = mem.schemes(shape, w_bits=8.0, kv_bits=8.0, draft_fraction=0.1)
    (bf_fixed, bf_tok), (c_fixed, c_tok), (t_fixed, t_tok) = s.values()
    assert bf_fixed == 2020 and bf_tok == 2 * 2 * 1 * 4 * 2
    assert c_fixed == 1000 + 20 and c_tok == bf_tok / 2
    assert t_fixed == pytest.approx(2020 * 1.1) and t_tok == pytest.approx(bf_tok * 1.1)
    res = mem.analyse([(shape, 4096 / mem.GIB)], 8.0, 8.0, 0.1)[0]["rows"]
    assert res[0]["max_context"] == (4096 - 2020) // 32
    assert res[1]["max_context"] > res[0]["max_context"] > res[2]["max_context"]
    assert mem.max_context(10.0, 1.0, 5.0) == 0


def test_draft_formula_matches_golden(weight_bits):
    from cassandra_rtl.golden.codec import decode_draft, encode_tensor
    from cassandra_rtl.golden.config import CodecConfig
    from report_entropy import draft_bits_c1

    bits = weight_bits(64 * 128, seed=3).reshape(64, 128)
    for k, m in ((1.0, 3), (0.75, 7), (0.5, 0)):
        cfg = CodecConfig(keep_ratio=k, mantissa_bits=m)
        assert np.array_equal(draft_bits_c1(bits, cfg), decode_draft(encode_tensor(bits, cfg)))


def test_find_tuned_reads_points(tmp_path):
    import report

    (tmp_path / "build" / "tune").mkdir(parents=True)
    (tmp_path / "build" / "tune" / "frontier.jsonl").write_text(
        json.dumps({"name": "a", "acceptance_rate": 0.8, "draft_weight_bytes": 25, "bf16_weight_bytes": 100,
                    "modeled_speedup": {"orin": 2.1}}) + "\nnot json\n")
    pts, files = report.find_tuned(tmp_path)
    assert files == ["build/tune/frontier.jsonl"]
    assert pts[0]["ratio"] == 0.25 and pts[0]["acceptance"] == 0.8 and pts[0]["speedup"] == 2.1


def test_cosim_splice_replaces_only_the_cosim_table(tmp_path, monkeypatch, capsys):
    """`report.py --sections cosim` reruns `cassandra-rtl cosim` (here a stand-in returning one record and one
    error) and rewrites section 5's co-simulation table alone; without the demo container it is one line, exit 2;
    when every run fails the table is kept, exit 1."""
    import report
    import report_hw

    head = "## 5. Hardware\n\nsynthesis part\n\n"
    tail = "\n## 6. The NPU tile\n\nkept\n"
    (tmp_path / "report.md").write_text(head + report.cosim_part([{"config": "old_cfg", "values": 5}], "c") + tail)
    monkeypatch.setattr(report, "ROOT", tmp_path)
    assert report.main(["--out", str(tmp_path), "--sections", "cosim", "--cache", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "make demo" in err[0]
    (tmp_path / "build" / "demo").mkdir(parents=True)
    (tmp_path / "build" / "demo" / "smollm2.cass").write_bytes(b"")
    recs = [{"config": "decoder_c1v3_l8", "mode": "draft", "values": 2_000_000, "mismatches": 0, "command": "cosim x"},
            {"mode": "full", "error": "timed out after 900s", "command": "cosim y"}]
    monkeypatch.setattr(report_hw, "run_cosim", lambda cass, n, log=print: recs)
    assert report.main(["--out", str(tmp_path), "--sections", "cosim", "--cache", str(tmp_path / "c")]) == 0
    text = (tmp_path / "report.md").read_text()
    assert text.startswith(head) and text.endswith(tail) and "old_cfg" not in text
    assert "| `cosim x` | decoder_c1v3_l8 |" in text and "2,000,000" in text and "timed out" not in text
    assert json.loads((tmp_path / "c" / "cosim.json").read_text()) == recs
    monkeypatch.setattr(report_hw, "run_cosim", lambda cass, n, log=print: recs[1:])      # every run fails
    assert report.main(["--out", str(tmp_path), "--sections", "cosim", "--cache", str(tmp_path / "c")]) == 1
    assert (tmp_path / "report.md").read_text() == text and "kept as it was" in capsys.readouterr().err
