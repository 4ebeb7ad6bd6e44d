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
    model_type = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
                  "MistralForCausalLM": "mistral"}.get(arch, "llama")
    cfg = {"architectures": [arch], "model_type": model_type, "vocab_size": a.vocab_size, "hidden_size": a.dim,
           "num_hidden_layers": a.n_layers, "num_attention_heads": a.n_heads, "num_key_value_heads": a.n_kv_heads,
           "intermediate_size": a.hidden_dim, "head_dim": a.head_dim, "rms_norm_eps": a.norm_eps,
           "rope_theta": a.rope_theta, "max_position_embeddings": max_pos, "tie_word_embeddings": a.tie_embeddings,
           "eos_token_id": tk.token_to_id("<|im_end|>"), "torch_dtype": "bfloat16",
           "attention_bias": bool(a.qkv_bias)}
    if a.rope_scaling:
        cfg["rope_scaling"] = {"rope_type": "llama3", **a.rope_scaling}
    (path / "config.json").write_text(json.dumps(cfg, indent=1))
    hf = {"tok_emb": "model.embed_tokens.weight", "norm": "model.norm.weight", "lm_head": "lm_head.weight"}
    per = {"wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight", "wv": "self_attn.v_proj.weight",
           "wo": "self_attn.o_proj.weight", "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight",
           "w_down": "mlp.down_proj.weight", "attn_norm": "input_layernorm.weight",
           "ffn_norm": "post_attention_layernorm.weight", "bq": "self_attn.q_proj.bias",
           "bk": "self_attn.k_proj.bias", "bv": "self_attn.v_proj.bias", "q_norm": "self_attn.q_norm.weight",
           "k_norm": "self_attn.k_norm.weight"}
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


def _permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (rotate-half -> interleaved RoPE layout)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(a: ModelArgs) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf ``rope_freqs`` for a Llama-3 ``rope_scaling`` (one divisor per frequency)."""
    import math
    rs = a.rope_scaling
    factor, lo, hi, old = (float(rs[k]) for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                  "original_max_position_embeddings"))
    freqs = 1.0 / (a.rope_theta ** (np.arange(0, a.head_dim, 2, dtype=np.float64) / a.head_dim))
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(path: str | Path, seed: int = 0, arch: str = "llama", **kw) -> Path:
    """A tiny random model as a GGUF the way llama.cpp writes one (F32 tensors; for ``llama`` q/k rows
    permuted to the interleaved RoPE layout; ``qwen2``/``qwen3`` unpermuted; a Llama-3 ``rope_scaling``
    becomes a ``rope_freqs`` tensor), gpt2-style BPE tokenizer metadata and a chat template. Returns the
    path; the same weights as ``tiny_checkpoint(seed, vocab=<tokenizer size>, **kw)``."""
    import gguf

    from .loader import bits_to_bf16

    path = Path(path)
    tk = byte_tokenizer_json()
    vocab = tk.get_vocab_size(with_added_tokens=True)
    ck = tiny_checkpoint(seed, vocab=vocab, **kw)
    a = ck.args
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(a.n_layers)
    w.add_context_length(a.max_seq_len)
    w.add_embedding_length(a.dim)
    w.add_feed_forward_length(a.hidden_dim)
    w.add_head_count(a.n_heads)
    w.add_head_count_kv(a.n_kv_heads)
    w.add_rope_dimension_count(a.head_dim)
    w.add_rope_freq_base(a.rope_theta)
    w.add_layer_norm_rms_eps(a.norm_eps)
    inv = {i: t for t, i in tk.get_vocab(with_added_tokens=True).items()}
    tokens = [inv[i] for i in range(vocab)]
    merges = json.loads(tk.to_str())["model"]["merges"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in merges]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    w.add_bos_token_id(tk.token_to_id("<|im_start|>"))
    w.add_eos_token_id(tk.token_to_id("<|im_end|>"))
    w.add_chat_template(CHAT_TEMPLATE)
    names = {"tok_emb": "token_embd.weight", "norm": "output_norm.weight", "lm_head": "output.weight"}
    per = {"wq": "attn_q.weight", "wk": "attn_k.weight", "wv": "attn_v.weight", "wo": "attn_output.weight",
           "w_gate": "ffn_gate.weight", "w_up": "ffn_up.weight", "w_down": "ffn_down.weight",
           "attn_norm": "attn_norm.weight", "ffn_norm": "ffn_norm.weight", "bq": "attn_q.bias",
           "bk": "attn_k.bias", "bv": "attn_v.bias", "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight"}
    if a.rope_scaling:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(a))
    for name, b in ck.bits.items():
        x = bits_to_bf16(b).float().numpy()
        if name in names:
            g = names[name]
        else:
            _, i, n = name.split(".")
            g = f"blk.{i}.{per[n]}"
            if arch == "llama" and n in ("wq", "bq"):
                x = _permute_qk(x, a.n_heads)
            elif arch == "llama" and n in ("wk", "bk"):
                x = _permute_qk(x, a.n_kv_heads)
        w.add_tensor(g, np.ascontiguousarray(x, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
