"""Model families on tiny random checkpoints written the HF way and the GGUF way, against an independent
reference forward (Hugging Face transformers, float32): Llama, Llama-3.x rope_scaling "llama3" (HF config)
and its GGUF form (a rope_freqs tensor), Qwen2 (q/k/v biases), Qwen3 (per-head q/k RMSNorm).

The check is two-sided, so it cannot pass vacuously: our bf16 forward must be as close to the float32
reference as transformers' own bf16 forward is (bf16 rounding is the only difference allowed), and the
same checkpoint with the family feature switched off must be far from it (the feature is really used).
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from cassandra_rtl.errors import InputError
from cassandra_rtl.model.loader import Checkpoint, load
from cassandra_rtl.model.testing import write_gguf, write_hf_folder
from cassandra_rtl.model.tokenizer import gguf_pre_tokenizer

transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()

RS = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
FAMILIES = {
    "llama": (dict(arch="LlamaForCausalLM"), "llama", {}),
    "llama3_rope": (dict(arch="LlamaForCausalLM", rope_scaling=RS), "llama", {"rope_scaling": None}),
    "qwen2": (dict(arch="Qwen2ForCausalLM", qkv_bias=True), "qwen2", {"qkv_bias": False}),
    "qwen3": (dict(arch="Qwen3ForCausalLM", qk_norm=True), "qwen3", {"qk_norm": False}),
}
STD = 0.05           # well-conditioned random weights: bf16 vs fp32 differences stay small
TOKENS = torch.arange(3, 103)   # 100 positions: well beyond the scaled RoPE's original context of 16


def _logits(ck: Checkpoint) -> torch.Tensor:
    m = ck.build()
    return m.forward(TOKENS % ck.args.vocab_size, 0, m.new_cache(), exact=False).float()


def _reference(folder, dtype) -> torch.Tensor:
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
    with torch.no_grad():
        return hf((TOKENS % hf.config.vocab_size)[None]).logits[0].float()


def _without(ck: Checkpoint, off: dict) -> Checkpoint:
    drop = (("q_norm", "k_norm") if "qk_norm" in off else ()) + (("bq", "bk", "bv") if "qkv_bias" in off else ())
    bits = {k: v for k, v in ck.bits.items() if not k.endswith(drop)} if drop else ck.bits
    return Checkpoint(dataclasses.replace(ck.args, **off, rope_freq_factors=None), bits, None, "feature off")


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    name = request.param
    kw, gguf_arch, off = FAMILIES[name]
    folder = write_hf_folder(tmp_path_factory.mktemp(name), seed=1, std=STD, **kw)
    ref32, ref16 = _reference(folder, torch.float32), _reference(folder, torch.bfloat16)
    return name, kw, gguf_arch, off, folder, ref32, ref16


def test_hf_folder_matches_transformers(family):
    name, kw, _, off, folder, ref32, ref16 = family
    ck = load(folder)
    ours = _logits(ck)
    err = (ours - ref32).abs().max().item()
    floor = (ref16 - ref32).abs().max().item()      # what bf16 alone costs, in transformers itself
    assert err <= 2 * floor + 0.05, (name, err, floor)
    if off:
        err_off = (_logits(_without(ck, off)) - ref32).abs().max().item()
        assert err_off > 5 * err, (name, err_off, err)
    assert ck.args.qk_norm == bool(kw.get("qk_norm")) and bool(ck.args.rope_scaling) == bool(kw.get("rope_scaling"))


def test_gguf_matches_hf_folder(family, tmp_path):
    name, kw, gguf_arch, off, folder, ref32, ref16 = family
    hf_kw = {k: v for k, v in kw.items() if k != "arch"}
    g = load(write_gguf(tmp_path / f"{name}.gguf", seed=1, arch=gguf_arch, std=STD, max_seq_len=128, **hf_kw))
    h = load(folder)
    assert g.bits.keys() == h.bits.keys()
    for k in h.bits:
        assert np.array_equal(g.bits[k], h.bits[k]), k
    ours = _logits(g)
    if kw.get("rope_scaling"):
        # The GGUF carries the scaling as rope_freqs factors (float32), the HF config as parameters:
        # the same RoPE up to float rounding, so compare both against the reference.
        assert g.args.rope_freq_factors is not None and g.args.rope_scaling is None
        floor = (ref16 - ref32).abs().max().item()
        assert (ours - ref32).abs().max().item() <= 2 * floor + 0.05
    else:
        assert torch.equal(ours, _logits(h))          # same bits in, same kernels: identical logits


def test_unsupported_variants_are_refused(tmp_path):
    d = write_hf_folder(tmp_path / "yarn", seed=0)
    cfg = json.loads((d / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="rope_scaling type 'yarn' is not supported"):
        load(d)
    cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="low_freq_factor"):
        load(d)
    with pytest.raises(InputError, match="unsupported GGUF pre-tokenizer 'tekken'"):
        gguf_pre_tokenizer("tekken")


def test_pre_tokenizers_split_as_their_families_do():
    text = "Hello world 12345!! I'm\n\nok"
    split = lambda pre: [s for s, _ in gguf_pre_tokenizer(pre).pre_tokenize_str(text)]  # noqa: E731
    assert split("llama3") == ["Hello", "Ġworld", "Ġ", "123", "45", "!!", "ĠI", "'m", "ĊĊ", "ok"]   # <= 3 digits
    assert split("qwen2")[3:8] == ["1", "2", "3", "4", "5"]                                       # single digits
    assert split("llama-bpe") == split("llama3")
