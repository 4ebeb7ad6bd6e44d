"""Tiny random checkpoints for tests and demos (no downloads): in memory, as a Hugging Face folder, or as GGUF."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from .loader import Checkpoint, bf16_to_bits
from .transformer import ModelArgs, Transformer

CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")


def tiny_args(vocab: int = 320, **kw) -> ModelArgs:
    base = dict(vocab_size=vocab, dim=64, n_layers=3, n_heads=4, n_kv_heads=2, hidden_dim=128, head_dim=32,
                norm_eps=1e-5, rope_theta=10000.0, max_seq_len=128, tie_embeddings=True, qkv_bias=False)
    base.update(kw)
    return ModelArgs(**base)


def tiny_checkpoint(seed: int = 0, std: float = 0.25, **kw) -> Checkpoint:
    """Random bf16 weights (norm weights near 1). ``std`` sets how peaked the next-token distribution is."""
    a = tiny_args(**kw)
    m = Transformer(a)
    g = torch.Generator().manual_seed(seed)
    bits = {}
    for name, p in m.named_weights().items():
        if name.endswith("norm"):
            t = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
        elif name == "tok_emb" or name == "lm_head":
            t = torch.randn(p.shape, generator=g)
        else:
            t = std * torch.randn(p.shape, generator=g) * (4.0 if name.endswith(("wq", "wk")) else 1.0)
        bits[name] = bf16_to_bits(t)
    return Checkpoint(a, bits, None, "tiny-random")


def byte_tokenizer_json(extra_specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>")):
    """A byte-level BPE tokenizer (256 byte symbols + a few merges + specials) as a tokenizers.Tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import AddedToken

    bl = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    specials = list(extra_specials)
    vocab = {s: i for i, s in enumerate(specials)}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("a", "n")]
    for x, y in merges:
        vocab[x + y] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = bl
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tk


def write_hf_folder(path: str | Path, seed: int = 0, arch: str = "LlamaForCausalLM", max_pos: int = 128,
                    **kw) -> Path:
    """A tiny random model as a Hugging Face folder: config.json, model.safetensors, tokenizer.json."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tk = byte_tokenizer_json()
    vocab = tk.get_vocab_size(with_added_tokens=True)
    ck = tiny_checkpoint(seed, vocab=vocab, max_seq_len=max_pos, **kw)
    a = ck.args
    cfg = {"architectures": [arch], "model_type": "llama", "vocab_size": a.vocab_size, "hidden_size": a.dim,
           "num_hidden_layers": a.n_layers, "num_attention_heads": a.n_heads, "num_key_value_heads": a.n_kv_heads,
           "intermediate_size": a.hidden_dim, "head_dim": a.head_dim, "rms_norm_eps": a.norm_eps,
           "rope_theta": a.rope_theta, "max_position_embeddings": max_pos, "tie_word_embeddings": a.tie_embeddings,
           "eos_token_id": tk.token_to_id("<|im_end|>"), "torch_dtype": "bfloat16"}
    (path / "config.json").write_text(json.dumps(cfg, indent=1))
    hf = {"tok_emb": "model.embed_tokens.weight", "norm": "model.norm.weight", "lm_head": "lm_head.weight"}
    per = {"wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight", "wv": "self_attn.v_proj.weight",
           "wo": "self_attn.o_proj.weight", "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight",
           "w_down": "mlp.down_proj.weight", "attn_norm": "input_layernorm.weight",
           "ffn_norm": "post_attention_layernorm.weight"}
    tensors = {}
    for name, b in ck.bits.items():
        if name in hf:
            key = hf[name]
        else:
            _, i, n = name.split(".")
            key = f"model.layers.{i}.{per[n]}"
        tensors[key] = torch.from_numpy(b.view(np.int16).copy()).view(torch.bfloat16)
    save_file(tensors, str(path / "model.safetensors"))
    tk.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": CHAT_TEMPLATE, "eos_token": "<|im_end|>", "bos_token": None}))
    return path
