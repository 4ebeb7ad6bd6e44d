"""Loaders (HF folder, GGUF incl. llama.cpp's q/k permutation), tokenizer + chat template, bad inputs, CLI."""
import json

import numpy as np
import pytest
import torch

from cassandra_rtl.cli import main as cli_main
from cassandra_rtl.errors import InputError
from cassandra_rtl.model.engine import Engine
from cassandra_rtl.model.loader import load
from cassandra_rtl.model.testing import tiny_checkpoint, write_gguf, write_hf_folder

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    return write_hf_folder(tmp_path_factory.mktemp("tiny_hf"))


def test_hf_folder_roundtrip(hf):
    ck = load(hf)
    ref = tiny_checkpoint(0, vocab=ck.args.vocab_size, max_seq_len=128)
    assert ck.bits.keys() == ref.bits.keys()
    for k in ck.bits:
        assert np.array_equal(ck.bits[k], ref.bits[k]), k
    tok = ck.tokenizer
    text = "the cat in the hat 123"
    assert tok.decode(tok.encode(text)) == text
    chat = tok.apply_chat("hi")
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(chat)
    assert tok.encode("<|im_start|>")[0] in ids  # special tokens are single ids
    assert ck.args.eos_token_ids == sorted(set(ck.args.eos_token_ids)) and tok.encode("<|im_end|>")[0] in tok.stop_ids


def test_gguf_loader_undoes_qk_permutation(tmp_path, hf):
    """A GGUF written the llama.cpp way (q/k rows permuted) loads to the same weights and logits."""
    g = load(write_gguf(tmp_path / "tiny.gguf"))
    h = load(hf)
    for k in h.bits:
        assert np.array_equal(g.bits[k], h.bits[k]), k
    p = g.tokenizer.encode(g.tokenizer.apply_chat("hello"))
    assert p == h.tokenizer.encode(h.tokenizer.apply_chat("hello"))
    assert Engine(g.build()).generate(p, 8).tokens == Engine(h.build()).generate(p, 8).tokens


def test_bad_inputs(tmp_path, hf):
    with pytest.raises(InputError, match="not found"):
        load(tmp_path / "nope.gguf")
    bad = tmp_path / "gpt2"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(InputError, match="unsupported architecture"):
        load(bad)
    (tmp_path / "x.bin").write_bytes(b"\0" * 10)
    with pytest.raises(InputError):
        load(tmp_path / "x.bin")
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + b"\0" * 10)
    with pytest.raises(InputError):
        load(tmp_path / "bad.gguf")


def _cli(capsys, *argv):
    rc = cli_main(["generate", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_generate_json_and_errors(capsys, hf, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rc, out, err = _cli(capsys, "--model", str(hf), "--prompt", "the cat", "--max-new-tokens", "10", "--json",
                        "--mantissa-bits", "2", "--compare")
    assert rc == 0, err
    s = json.loads(out)
    for key in ("tokens", "text", "acceptance_rate", "tokens_per_step", "modeled_speedup"):
        assert key in s
    assert len(s["tokens"]) == 10 and s["lossless_vs_plain"] is True
    assert len(list((tmp_path / "cache" / "cassandra-rtl").glob("*.cass"))) == 1  # encoded draft cached
    rc, out2, err = _cli(capsys, "--model", str(hf), "--prompt", "the cat", "--max-new-tokens", "10", "--json",
                         "--mantissa-bits", "2")
    assert rc == 0 and json.loads(out2)["tokens"] == s["tokens"]  # same draft from the cache
    rc, out, err = _cli(capsys, "--model", str(hf), "--prompt", "the cat", "--max-new-tokens", "6", "--draft", "ngram")
    assert rc == 0 and "tokens per verify step" in out
    # errors: one line, no traceback
    for argv, msg in [
        (["--model", str(tmp_path / "missing.gguf"), "--prompt", "x"], "not found"),
        (["--model", str(hf), "--prompt", "word " * 200], "does not fit the context"),
        (["--model", str(hf), "--prompt", "x", "--mantissa-bits", "9"], "mantissa"),
        (["--model", str(hf), "--prompt", "x", "--top-p", "0"], "top-p"),
        (["--model", str(hf), "--prompt", "x", "--draft", "ngram", "--rtl"], "--rtl"),
    ]:
        rc, out, err = _cli(capsys, *argv)
        assert rc == 2, (argv, err)
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
