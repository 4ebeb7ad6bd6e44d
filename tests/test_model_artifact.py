"""The model artifact: `encode MODEL -o F.cass --draft-config ...` -> `generate --cass F.cass`, the
model cache, the draft choice, streamed loading and the Python API. Tiny random checkpoints only."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cassandra_rtl.golden.codec import decode_draft, decode_full  # noqa: E402
from cassandra_rtl.golden.container import read_container  # noqa: E402
from cassandra_rtl.model import api, artifact  # noqa: E402
from cassandra_rtl.model.allocation import META_KEY, Allocation  # noqa: E402
from cassandra_rtl.model.loader import load  # noqa: E402
from cassandra_rtl.model.testing import write_gguf, write_hf_folder  # noqa: E402


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    return write_hf_folder(tmp_path_factory.mktemp("hf") / "tiny")


@pytest.fixture(scope="module")
def cass(hf, tmp_path_factory):
    from cassandra_rtl.cli import main

    out = tmp_path_factory.mktemp("cass") / "tiny.cass"
    assert main(["encode", str(hf), "-o", str(out), "--draft-config", "uniform", "--keep-ratio", "0.5",
                 "--mantissa-bits", "2", "-q"]) == 0
    return out


def _gen(run, *argv):
    r = run("generate", "--prompt", "the cat", "--max-new-tokens", "10", "--json", *argv)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_artifact_holds_model_allocation_and_every_tensor(hf, cass):
    ck = load(hf)
    c = read_container(cass)
    assert set(c.tensors) == set(ck.bits)
    assert Allocation.from_json(c.meta[META_KEY]).cfg_for("layers.0.wq").keep_count == 64
    info = c.meta[artifact.ARTIFACT_KEY]
    assert info["args"]["n_layers"] == ck.args.n_layers and info["source_sha256"] == artifact.source_digest(hf)
    for name, bits in ck.bits.items():                 # lossless, and the 1-D tensors exact in the draft too
        enc = c.tensors[name]
        assert np.array_equal(decode_full(enc).reshape(bits.shape), bits), name
        assert info["tensor_sha256"][name] == artifact.tensor_digest(bits)
        if bits.ndim == 1:
            assert np.array_equal(decode_draft(enc).reshape(bits.shape), bits), name
    tok = artifact.tokenizer_from_json(info["tokenizer"])
    assert tok.encode("the cat sat") == ck.tokenizer.encode("the cat sat")
    assert tok.stop_ids == ck.tokenizer.stop_ids and tok.chat_template == ck.tokenizer.chat_template


def test_generate_from_cass_equals_the_model_path_and_plain_greedy(run, hf, cass, tmp_path):
    a, _ = _gen(run, "--cass", str(cass), "--compare", "--verify")
    assert a["lossless_vs_plain"] is True and a["load"]["from"] == "cass" and a["load"]["verified"] is True
    assert a["peak_rss_bytes"] > 0 and a["peak_rss_over_bf16"] > 0
    b, err = _gen(run, "--model", str(hf), "--keep-ratio", "0.5", "--mantissa-bits", "2", "--cache-dir",
                  str(tmp_path / "c"))
    assert b["tokens"] == a["tokens"] and b["acceptance_rate"] == a["acceptance_rate"]
    assert b["draft_weight_bytes"] == a["draft_weight_bytes"]
    assert "model cache: encoded" in err and str(tmp_path / "c") in err and " MB" in err
    c, err = _gen(run, "--model", str(hf), "--keep-ratio", "0.5", "--mantissa-bits", "2", "--no-cache")
    assert c["tokens"] == a["tokens"] and c["load"]["from"] == "memory" and "model cache" not in err
    d, _ = _gen(run, "--cass", str(cass), "--draft", "none")
    assert d["tokens"] == a["tokens"]


def test_the_cache_is_keyed_by_content_not_by_how_the_model_is_named(run, hf, tmp_path):
    cache = tmp_path / "cache"
    a, err = _gen(run, "--model", str(hf), "--cache-dir", str(cache))
    assert "encoded" in err and len(list(cache.glob("*.cass"))) == 1
    other = tmp_path / "copy"
    shutil.copytree(hf, other)
    b, err = _gen(run, "--model", str(other / ".." / "copy"), "--cache-dir", str(cache))
    assert "loading" in err and b["load"]["from"] == "cache-hit" and len(list(cache.glob("*.cass"))) == 1
    assert b["tokens"] == a["tokens"]
    c, err = _gen(run, "--model", str(hf), "--cache-dir", str(cache), "--mantissa-bits", "1")
    assert "encoded" in err and len(list(cache.glob("*.cass"))) == 2      # another allocation, another entry


def test_the_bundled_allocation_is_chosen_by_content(tmp_path, monkeypatch):
    from cassandra_rtl.model import loader

    g = write_gguf(tmp_path / "b.gguf")
    monkeypatch.setattr(loader, "bundled_model_path", lambda: g)
    copy = tmp_path / "sub" / "renamed.gguf"
    copy.parent.mkdir()
    shutil.copy(g, copy)
    for p in (g, copy, tmp_path / "sub" / ".." / "b.gguf"):
        what, al = api.choose_allocation(p, 3)
        assert "bundled" in what and al.to_json() == Allocation.load("bundled").to_json()
    what, al = api.choose_allocation(copy, 3, mantissa_bits=2)           # a uniform option asks for uniform
    assert "uniform" in what and al.cfg_for("layers.0.wq").mantissa_bits == 2
    h = write_hf_folder(tmp_path / "hf", seed=1)
    assert "uniform" in api.choose_allocation(h, 3)[0]


def test_corrupt_or_plain_containers_are_one_line_errors(run, hf, cass, tmp_path):
    from cassandra_rtl.golden.container import read_header

    bad = tmp_path / "bad.cass"
    data = bytearray(cass.read_bytes())
    with open(cass, "rb") as f:
        h = read_header(f, len(data))
    off = h["sections"]["verification"]["offset"] + 5
    data[off] ^= 0x40
    bad.write_bytes(bytes(data))
    for path, word in ((bad, "checksum"), (tmp_path / "none.cass", "no such")):
        r = run("generate", "--cass", path, "--prompt", "x")
        assert r.returncode == 2 and word in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    plain = tmp_path / "plain.cass"
    assert run("encode", hf / "model.safetensors", "-o", plain, "-q").returncode == 0
    r = run("generate", "--cass", plain, "--prompt", "x")
    assert r.returncode == 2 and "no model" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("generate", "--cass", cass, "--prompt", "x", "--keep-ratio", "0.5")
    assert r.returncode == 2 and "fixes the draft" in r.stderr
    r = run("generate", "--cass", cass, "--prompt", "word " * 200)
    assert r.returncode == 2 and "does not fit" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_streamed_slices_decode_like_whole_tensors(cass):
    a = artifact.open_artifact(cass)
    for name, enc in a.tensors():
        n = int(np.prod(enc.shape))
        for fn in (decode_full, decode_draft):
            dst = np.zeros(n, np.uint16)
            artifact.decode_into(dst, enc, fn, step_values=256)      # forces several slices per matrix
            assert np.array_equal(dst, fn(enc).reshape(-1)), name


def test_python_api_generate_stream_stop_and_top_k(cass):
    m = api.load(str(cass), max_seq_len=128)
    g = m.generate("the cat", max_new_tokens=12)
    assert len(g.tokens) == 12 and g.metrics["acceptance_rate"] is not None and g.stop is None
    pieces = list(m.stream("the cat", max_new_tokens=12))
    assert "".join(pieces) == g.text == m.last.text and m.last.tokens == g.tokens
    plain = m.generate("the cat", max_new_tokens=12, speculative=False)
    assert plain.tokens == g.tokens
    if len(g.text) > 4:
        stop = g.text[2:4]
        s = m.generate("the cat", max_new_tokens=12, stop=[stop])
        assert s.stop == stop and s.text == g.text[:g.text.find(stop)] and stop not in s.text
        assert "".join(m.stream("the cat", max_new_tokens=12, stop=[stop])) == s.text
    k1 = m.generate("the cat", max_new_tokens=12, temperature=0.7, top_k=1, seed=3)
    assert k1.tokens == g.tokens                       # top-k 1 sampling is greedy decoding


def test_chat_turns_carry_the_conversation(cass):
    m = api.load(str(cass), max_seq_len=128)
    c = m.chat(system="be brief")
    first = c.send("the cat", max_new_tokens=5)
    assert [x["role"] for x in c.messages] == ["system", "user", "assistant"] and c.messages[2]["content"] == first.text
    second = c.send("and", max_new_tokens=5)
    assert len(c.messages) == 5
    # the second turn is decoded from the whole conversation: the same as one prompt of those messages
    ids = m.encode_messages(c.messages[:4])
    assert m.generate(ids, 5).tokens == second.tokens and len(ids) > len(m.encode_messages(c.messages[:2]))


def test_encode_calibrate_writes_wanda_keep_sets(run, hf, tmp_path):
    from cassandra_rtl.model.salience import norms_digest, norms_from_json

    out = tmp_path / "cal.cass"
    r = run("encode", hf, "-o", out, "--calibrate", "--keep-ratio", "0.5", "-q")
    assert r.returncode == 0, r.stderr
    al = artifact.open_artifact(out).alloc
    assert al.salience["kind"] == "wanda"
    assert norms_digest(norms_from_json(al.salience["norms"])) == al.salience["digest"]
    mag = tmp_path / "mag.cass"
    assert run("encode", hf, "-o", mag, "--draft-config", "uniform", "--keep-ratio", "0.5", "-q").returncode == 0
    a, b = read_container(out, verification=False), read_container(mag, verification=False)
    assert any(decode_draft(a.tensors[n]).tobytes() != decode_draft(b.tensors[n]).tobytes()
               for n in a.tensors if a.tensors[n].shape.__len__() == 2)       # activation-aware keep sets differ
    g, _ = _gen(run, "--cass", str(out), "--compare")
    assert g["lossless_vs_plain"] is True and g["draft_config"]["salience"] == "wanda"


@pytest.mark.parametrize("cfg", [dict(keep_ratio=0.75, mantissa_bits=3, chunk_superblocks=8, pair_codes=True),
                                 dict(scheme="c2", keep_ratio=0.5, mantissa_bits=3, chunk_superblocks=4,
                                      pair_codes=True)])
def test_sliced_decode_of_format_2_tensors(cfg):
    """Chunks of several superblocks: the slices start and end on chunk boundaries."""
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.golden.config import CodecConfig

    rng = np.random.default_rng(0)
    bits = (rng.normal(0, 0.02, (300, 577)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    enc = encode_tensor(bits, CodecConfig(**cfg))
    for fn in (decode_full, decode_draft):
        dst = np.zeros(bits.size, np.uint16)
        artifact.decode_into(dst, enc, fn, step_values=3000)
        assert np.array_equal(dst, fn(enc).reshape(-1))
