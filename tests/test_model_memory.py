"""Memory of the model path: the derived draft (no second copy of the draft's layers) is
bit-identical to the decoded speculation stream and generates exactly what the copied draft generates; the
streamed loaders give the same bits as whole-tensor loading. Tiny random checkpoints only."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cassandra_rtl.errors import ConfigError  # noqa: E402
from cassandra_rtl.golden.codec import decode_draft  # noqa: E402
from cassandra_rtl.golden.container import read_container  # noqa: E402
from cassandra_rtl.model import api, artifact  # noqa: E402
from cassandra_rtl.model.testing import write_hf_folder  # noqa: E402


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    return write_hf_folder(tmp_path_factory.mktemp("hf") / "tiny")


def _encode(hf, out, *opts):
    from cassandra_rtl.cli import main

    assert main(["encode", str(hf), "-o", str(out), "--draft-config", "uniform", *opts, "-q"]) == 0
    return out


@pytest.fixture(scope="module")
def cass(hf, tmp_path_factory):          # prunes (keep 0.5) and cuts mantissas: keep bitmaps are needed
    return _encode(hf, tmp_path_factory.mktemp("c") / "tiny.cass", "--keep-ratio", "0.5", "--mantissa-bits", "2")


def _draft_weights(m) -> dict[str, np.ndarray]:
    """Every draft weight as the forward pass sees it (derived layers rebuilt first)."""
    d = m.drafter.model
    out = {}
    for li in range(d.args.n_layers):
        if isinstance(d, artifact.DerivedDraft):
            d._fill(li)
        for name, p in d.named_weights().items():
            if name.startswith(f"layers.{li}."):
                out[name] = artifact._param_bits(p).copy()
    for name, p in d.named_weights().items():
        if not name.startswith("layers."):
            out[name] = artifact._param_bits(p).copy()
    return out


@pytest.mark.parametrize("opts", [("--keep-ratio", "0.5", "--mantissa-bits", "2"),
                                  ("--keep-ratio", "1.0", "--mantissa-bits", "3"),
                                  ("--scheme", "c2", "--keep-ratio", "0.75", "--mantissa-bits", "3")])
def test_derived_draft_is_the_decoded_speculation_stream(hf, tmp_path, opts):
    path = _encode(hf, tmp_path / "t.cass", *opts)
    c = read_container(path)
    m = api.load(str(path), max_seq_len=64, draft_memory="derived")
    d = m.drafter.model
    assert isinstance(d, artifact.DerivedDraft)
    got = _draft_weights(m)
    for name, enc in c.tensors.items():
        assert np.array_equal(got[name].reshape(-1), decode_draft(enc).reshape(-1)), name
    tw = m.target.named_weights()
    for name, p in d.named_weights().items():            # 1-D tensors are the target's own storage
        if p.dim() == 1:
            assert p.data_ptr() == tw[name].data_ptr(), name
    derived = sum(len(plan) for plan in d._plan)
    if opts[1] == "c2":
        assert derived == 0                               # C2 drafts are not derived: each keeps its decode
    else:
        assert derived == 7 * d.args.n_layers             # every layer matrix, none copied
        keeps = [k for plan in d._plan for *_, k in plan]
        assert all(k is None for k in keeps) == (opts[1] == "1.0")   # a bitmap only where the draft prunes
    assert m.load_info.extra["draft_memory"] == "derived"
    assert m.load_info.extra["draft_resident_bytes"] == d.resident_bytes()


def test_derived_and_copied_drafts_generate_the_same(cass):
    a = api.load(str(cass), max_seq_len=64, draft_memory="derived")
    b = api.load(str(cass), max_seq_len=64, draft_memory="copy")
    assert not isinstance(b.drafter.model, artifact.DerivedDraft)
    ga, gb = a.generate("the cat", max_new_tokens=12), b.generate("the cat", max_new_tokens=12)
    assert ga.tokens == gb.tokens
    assert ga.metrics["acceptance_rate"] == gb.metrics["acceptance_rate"]
    assert ga.metrics["draft_weight_bytes"] == gb.metrics["draft_weight_bytes"]
    assert a.generate("the cat", max_new_tokens=12, speculative=False).tokens == ga.tokens
    # the draft's logits, bit for bit, on a few positions (derived layers rebuilt on the way)
    ids = torch.tensor(a.encode_prompt("the cat sat on the mat"))
    la = a.drafter.model(ids, 0, a.drafter.model.new_cache(64), exact=True)
    lb = b.drafter.model(ids, 0, b.drafter.model.new_cache(64), exact=True)
    assert torch.equal(la, lb)
    assert a.load_info.extra["draft_resident_bytes"] < b.load_info.extra["draft_resident_bytes"]


def test_draft_memory_mode_is_checked(cass, monkeypatch):
    with pytest.raises(ConfigError, match="draft memory"):
        api.load(str(cass), draft_memory="shared")
    monkeypatch.setenv(api.DRAFT_MEMORY_ENV, "copy")
    assert api.default_draft_memory() == "copy"
    monkeypatch.setenv(api.DRAFT_MEMORY_ENV, "bogus")
    with pytest.raises(ConfigError, match=api.DRAFT_MEMORY_ENV):
        api.default_draft_memory()


def test_model_path_in_memory_uses_the_derived_draft(hf):
    m = api.load(str(hf), keep_ratio=0.5, mantissa_bits=2, cache_dir=None, say=None, max_seq_len=64)
    assert isinstance(m.drafter.model, artifact.DerivedDraft) and m.load_info.kind == "memory"
    c = api.load(str(hf), keep_ratio=0.5, mantissa_bits=2, cache_dir=None, say=None, max_seq_len=64,
                 draft_memory="copy")
    assert m.generate("the cat", max_new_tokens=8).tokens == c.generate("the cat", max_new_tokens=8).tokens


def test_streamed_gguf_and_hf_loads_give_the_same_bits(tmp_path, monkeypatch):
    from cassandra_rtl.model import loader
    from cassandra_rtl.model.testing import tiny_checkpoint, write_gguf

    g = write_gguf(tmp_path / "t.gguf")
    whole = loader.load(g).bits
    monkeypatch.setattr(loader, "STREAM_VALUES", 64)           # a few rows per slice
    sliced = loader.load(g).bits
    ref = tiny_checkpoint(0, vocab=len(whole["tok_emb"])).bits   # what write_gguf wrote
    assert set(sliced) == set(whole) == set(ref)
    for n in whole:
        assert np.array_equal(sliced[n], whole[n]) and np.array_equal(sliced[n], ref[n]), n
    h = write_hf_folder(tmp_path / "hf")
    for n, b in loader.load(h).bits.items():
        assert np.array_equal(b, ref[n]), n


def test_quantized_rows_dequantize_alike_in_slices():
    """The premise of the GGUF loader's row slices: a quantized block never straddles a row."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((40, 256)) * 0.05).astype(np.float32)
    Q = gguf.GGMLQuantizationType
    for qt in (Q.Q4_1, Q.Q8_0, Q.Q5_0, Q.Q4_K, Q.Q6_K):
        if qt in (Q.Q4_K, Q.Q6_K):             # no quantizer in the gguf package: random blocks, any scales
            block, size = gguf.GGML_QUANT_SIZES[qt]
            q = rng.integers(0, 256, (40, 256 // block * size), dtype=np.uint8)
        else:
            q = gguf.quantize(x, qt)
        with np.errstate(all="ignore"):
            whole = gguf.dequantize(q, qt).reshape(40, 256)
            parts = np.concatenate([gguf.dequantize(q[a:a + 7], qt).reshape(-1, 256) for a in range(0, 40, 7)])
        assert np.array_equal(whole, parts, equal_nan=True), qt


@pytest.mark.parametrize("scheme,n", [("c1", 128 * 37 + 5), ("c1", 128 * 40), ("c2", 64 * 33 + 17)])
def test_sliced_keep_set_is_the_golden_keep_mask(scheme, n, monkeypatch):
    from cassandra_rtl.golden.codec import keep_mask
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.model import salience

    monkeypatch.setattr(salience, "KEEP_SLICE_VALUES", 300)    # several slices and a short last superblock
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    bits[::7] = bits[3]                                          # ties in the magnitude key
    G = 128 if scheme == "c1" else 64
    for keep in (0.25, 0.5, 0.75, 1.0):
        cfg = CodecConfig(scheme=scheme, group_size=G, keep_ratio=keep, mantissa_bits=3)
        sal = np.abs(rng.standard_normal(n))
        sal[::5] = 0.5                                           # ties in the salience
        for s in (None, sal):
            got = salience.kept_mask(bits, cfg, s)
            assert np.array_equal(got, keep_mask(bits, cfg, s)), (keep, s is None)


def test_generate_json_reports_the_draft_memory(run, cass, monkeypatch):
    import json

    for mode in ("derived", "copy"):
        monkeypatch.setenv(api.DRAFT_MEMORY_ENV, mode)
        r = run("generate", "--cass", cass, "--prompt", "the cat", "--max-new-tokens", "6", "--json")
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout.strip().splitlines()[-1])
        assert j["load"]["draft_memory"] == mode and j["load"]["draft_resident_bytes"] > 0
        assert j["peak_rss_bytes"] >= j["load"]["baseline_rss_bytes"] > 0
    monkeypatch.setenv(api.DRAFT_MEMORY_ENV, "nope")
    r = run("generate", "--cass", cass, "--prompt", "the cat", "--max-new-tokens", "2")
    assert r.returncode == 2 and "Traceback" not in r.stderr and api.DRAFT_MEMORY_ENV in r.stderr


@pytest.mark.slow
def test_smollm2_derived_draft_is_lossless_and_equals_the_copy(tmp_path):
    """The bundled SmolLM2 with its tuned (Wanda, pruning) allocation: derived and copied drafts give the same
    tokens as each other and as plain greedy decoding, and the derived draft holds well under a third of a model
    besides the target (77 MB of 269: embedding, one layer's scratch, bitmaps; peak RSS: bench/memory_scale.py)."""
    from cassandra_rtl.cli import main
    from cassandra_rtl.model.loader import bundled_model_path

    try:
        src = bundled_model_path()
    except Exception as exc:  # noqa: BLE001 - the package is optional in a bare checkout
        pytest.skip(f"bundled model unavailable: {exc}")
    out = tmp_path / "smol.cass"
    assert main(["encode", str(src), "-o", str(out), "--draft-config", "bundled", "-q"]) == 0
    gens = {}
    for mode in ("derived", "copy"):
        m = api.load(str(out), max_seq_len=256, draft_memory=mode)
        ids = m.encode_prompt("Explain in two sentences why the sky is blue.")
        gens[mode] = m.generate(ids, 32)
        if mode == "derived":
            assert m.generate(ids, 32, speculative=False).tokens == gens[mode].tokens
            assert m.load_info.extra["draft_resident_bytes"] < 0.35 * m.target.param_bytes()
        del m
    assert gens["derived"].tokens == gens["copy"].tokens
    assert gens["derived"].metrics["acceptance_rate"] == gens["copy"].metrics["acceptance_rate"]
