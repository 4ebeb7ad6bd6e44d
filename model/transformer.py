"""A compact gpt-fast-style decoder-only transformer (Llama / SmolLM2 / Qwen2 / Qwen3 family), bf16 on CPU.

RMSNorm, rotary embeddings (HF "rotate-half" layout; Llama-3.x ``rope_scaling`` type llama3 and GGUF
``rope_freqs`` per-frequency factors), grouped-query attention, SwiGLU MLP, tied or untied LM head,
optional q/k/v biases (Qwen2), optional per-head q/k RMSNorm before RoPE (Qwen3), and a static KV cache
indexed by absolute position.

Batch invariance. Speculative decoding is only lossless if the target's logits for a position are the
same bits whether the position is decoded alone (plain autoregressive decoding) or verified together
with k other positions in one pass. Dense bf16 GEMM kernels may change their blocking / accumulation
order with the number of rows (and vectorised element-wise kernels may treat a tail differently), so
``forward(..., exact=True)`` (the decode/verify path) pushes every row separately through each layer:
row t runs exactly the ops, kernels and shapes of a 1-token decode step at position start_pos + t,
after rows < t of the same layer have written their K/V. Layers stay the outer loop, so a weight
matrix is streamed from DRAM once per verify step and re-read from cache for the other rows.
``exact=False`` (the prompt prefill) uses ordinary batched kernels; the reference and
the speculative engine share the same prefill, so that is consistent too.

Numerics (``set_numerics``). ``torch`` (the default) is the above. ``npu``: every linear layer computes what
the NPU tile computes (model/npu_numerics.py), whose reduction order does not depend on the number of rows,
so ``forward(exact=True)`` sends the T rows through each linear layer together (one weight read per layer
per pass) and runs everything else (norms, RoPE, attention with the cache write, SiLU, residual adds, the
final norm) row by row with the code and shapes of a 1-token step: each row's logits are the bits of that
step. The prefill (``exact=False``) runs batched throughout, with the tile's linears.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field, asdict

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    vocab_size: int = 49152
    dim: int = 576
    n_layers: int = 30
    n_heads: int = 9
    n_kv_heads: int = 3
    hidden_dim: int = 1536
    head_dim: int = 64
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 2048
    tie_embeddings: bool = True
    qkv_bias: bool = False
    qk_norm: bool = False                    # Qwen3: RMSNorm over head_dim of q and k, before RoPE
    # Llama-3.x rope_scaling (HF config): {"factor", "low_freq_factor", "high_freq_factor",
    # "original_max_position_embeddings"}; None = plain RoPE.
    rope_scaling: dict | None = None
    # GGUF rope_freqs: one divisor per frequency (llama.cpp's freq_factors; a Llama-3.1 GGUF carries its
    # llama3 scaling this way). None = all 1.
    rope_freq_factors: list[float] | None = None
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)
    arch: str = "llama"

    def to_dict(self) -> dict:
        return asdict(self)


_ALLOC = [torch.zeros]


def _weight(*shape) -> torch.Tensor:
    return _ALLOC[0](*shape, dtype=torch.bfloat16)


def placeholder(*shape, dtype):
    """A weight that takes no memory at all (a stride-0 view of one zero), for a model whose every weight
    matrix is replaced before use."""
    return torch.zeros((), dtype=dtype).expand(*shape)


@contextmanager
def uninitialized_weights(alloc=torch.empty):
    """Build models whose weight matrices come from ``alloc`` instead of being zero-filled: ``torch.empty``
    (allocated, not written: no page is resident until a loader writes it), for loaders that fill every weight
    one tensor at a time, or ``placeholder`` (no storage), for a model that replaces every weight matrix."""
    old = _ALLOC[0]
    _ALLOC[0] = alloc
    try:
        yield
    finally:
        _ALLOC[0] = old


# Names of the parameters of one layer, in the order a weight stream would carry them.
LAYER_LINEARS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=torch.bfloat16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # HF LlamaRMSNorm semantics: normalise in fp32, cast back, then scale.
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.a = a
        self.q_norm = RMSNorm(a.head_dim, a.norm_eps) if a.qk_norm else None
        self.k_norm = RMSNorm(a.head_dim, a.norm_eps) if a.qk_norm else None
        self.wq = nn.Parameter(_weight(a.n_heads * a.head_dim, a.dim), requires_grad=False)
        self.wk = nn.Parameter(_weight(a.n_kv_heads * a.head_dim, a.dim), requires_grad=False)
        self.wv = nn.Parameter(_weight(a.n_kv_heads * a.head_dim, a.dim), requires_grad=False)
        self.wo = nn.Parameter(_weight(a.dim, a.n_heads * a.head_dim), requires_grad=False)
        if a.qkv_bias:
            self.bq = nn.Parameter(_weight(a.n_heads * a.head_dim), requires_grad=False)
            self.bk = nn.Parameter(_weight(a.n_kv_heads * a.head_dim), requires_grad=False)
            self.bv = nn.Parameter(_weight(a.n_kv_heads * a.head_dim), requires_grad=False)
        else:
            self.bq = self.bk = self.bv = None


class FeedForward(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.w_gate = nn.Parameter(_weight(a.hidden_dim, a.dim), requires_grad=False)
        self.w_up = nn.Parameter(_weight(a.hidden_dim, a.dim), requires_grad=False)
        self.w_down = nn.Parameter(_weight(a.dim, a.hidden_dim), requires_grad=False)


class Block(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.attn = Attention(a)
        self.mlp = FeedForward(a)
        self.attn_norm = RMSNorm(a.dim, a.norm_eps)
        self.ffn_norm = RMSNorm(a.dim, a.norm_eps)


class KVCache:
    """Static KV cache [n_layers, n_kv_heads, max_seq_len, head_dim] for K and V (batch size 1).

    Entries are addressed by absolute position; a query at position p reads keys 0..p only, so stale
    entries beyond the committed length (rejected draft tokens) are never read before being rewritten.
    ``rollback(n)`` additionally zeroes everything from position n on, so a test can prove that.
    """

    def __init__(self, a: ModelArgs, dtype=torch.bfloat16, capacity: int | None = None):
        # positions held: the context by default; a run that knows its length asks for just that many
        self.capacity = a.max_seq_len if capacity is None else max(1, min(int(capacity), a.max_seq_len))
        shape = (a.n_layers, a.n_kv_heads, self.capacity, a.head_dim)
        self.k = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)

    def rollback(self, n: int, upto: int | None = None) -> None:
        self.k[:, :, n:upto] = 0
        self.v[:, :, n:upto] = 0

    def copy_(self, other: "KVCache", start: int, stop: int, layers=None) -> None:
        sl = slice(None) if layers is None else list(layers)
        self.k[sl, :, start:stop] = other.k[sl, :, start:stop]
        self.v[sl, :, start:stop] = other.v[sl, :, start:stop]


def rope_inv_freq(a: ModelArgs) -> torch.Tensor:
    """Inverse frequencies (float64), with Llama-3 scaling and GGUF frequency factors applied."""
    inv = 1.0 / (a.rope_theta ** (torch.arange(0, a.head_dim, 2, dtype=torch.float64) / a.head_dim))
    if a.rope_scaling:
        # HF transformers' _compute_llama3_parameters: long wavelengths divided by `factor`, short ones
        # kept, a smooth blend between the two wavelength limits of the original context.
        rs = a.rope_scaling
        factor, lo, hi = float(rs["factor"]), float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        old = float(rs["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        inv = torch.where(medium, blended, scaled)
    if a.rope_freq_factors is not None:
        inv = inv / torch.tensor(a.rope_freq_factors, dtype=torch.float64)
    return inv


def rope_tables(a: ModelArgs) -> tuple[torch.Tensor, torch.Tensor]:
    inv = rope_inv_freq(a)
    t = torch.arange(a.max_seq_len, dtype=torch.float64)
    freqs = torch.outer(t, inv)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().float(), emb.sin().float()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def _swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def _each_row(f, *ts: torch.Tensor) -> torch.Tensor:
    """``f`` applied to row t of every tensor in ``ts`` separately (shapes [1, ...], as a 1-token step has),
    the rows concatenated; one row: ``f`` itself."""
    if ts[0].shape[0] == 1:
        return f(*ts)
    return torch.cat([f(*(x[t : t + 1] for x in ts)) for t in range(ts[0].shape[0])], 0)


class Transformer(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.args = a
        self.tok_emb = nn.Parameter(_weight(a.vocab_size, a.dim), requires_grad=False)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.n_layers))
        self.norm = RMSNorm(a.dim, a.norm_eps)
        if a.tie_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nn.Parameter(_weight(a.vocab_size, a.dim), requires_grad=False)
        cos, sin = rope_tables(a)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.numerics = "torch"
        self.tile = None                      # npu numerics: the TileLinear every linear layer goes through

    def set_numerics(self, numerics: str = "torch", lanes: int | None = None) -> "Transformer":
        """``torch``: bf16 ``F.linear`` (row-exact verify); ``npu``: every linear layer is the NPU tile's
        (``lanes`` reduction lanes, default the tile's 8; batched verify). Returns self."""
        from .npu_numerics import NPU_LANES, TileLinear, check_numerics

        self.numerics = check_numerics(numerics)
        self.tile = TileLinear(lanes or NPU_LANES) if numerics == "npu" else None
        return self

    # -- weights as named tensors (the unit the codec encodes) --------------------------------------
    def named_weights(self) -> dict[str, torch.Tensor]:
        """Every parameter by a stable name: tok_emb, lm_head, layers.{i}.{wq,...,attn_norm,ffn_norm}, norm."""
        out = {"tok_emb": self.tok_emb}
        for i, blk in enumerate(self.layers):
            for n in ("wq", "wk", "wv", "wo", "bq", "bk", "bv"):
                p = getattr(blk.attn, n)
                if p is not None:
                    out[f"layers.{i}.{n}"] = p
            if blk.attn.q_norm is not None:
                out[f"layers.{i}.q_norm"] = blk.attn.q_norm.weight
                out[f"layers.{i}.k_norm"] = blk.attn.k_norm.weight
            for n in ("w_gate", "w_up", "w_down"):
                out[f"layers.{i}.{n}"] = getattr(blk.mlp, n)
            out[f"layers.{i}.attn_norm"] = blk.attn_norm.weight
            out[f"layers.{i}.ffn_norm"] = blk.ffn_norm.weight
        out["norm"] = self.norm.weight
        if self.lm_head is not None:
            out["lm_head"] = self.lm_head
        return out

    def load_named(self, tensors: dict[str, torch.Tensor]) -> None:
        mine = self.named_weights()
        missing = set(mine) - set(tensors)
        if missing:
            from cassandra_rtl.errors import InputError

            raise InputError(f"checkpoint is missing tensors: {sorted(missing)[:5]}")
        for k, p in mine.items():
            t = tensors[k]
            if tuple(t.shape) != tuple(p.shape):
                from cassandra_rtl.errors import InputError

                raise InputError(f"tensor {k} has shape {tuple(t.shape)}, expected {tuple(p.shape)}")
            p.data = t.to(torch.bfloat16).contiguous()

    def head_weight(self) -> torch.Tensor:
        return self.tok_emb if self.lm_head is None else self.lm_head

    def new_cache(self, capacity: int | None = None) -> KVCache:
        """A KV cache for ``capacity`` positions (default: the whole context, ``max_seq_len``)."""
        return KVCache(self.args, capacity=capacity)

    # -- forward ----------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(
        self,
        tokens: torch.Tensor,
        start_pos: int,
        cache: KVCache,
        exact: bool = True,
        skip_layers: frozenset[int] | set[int] = frozenset(),
        logits_rows: slice | None = None,
    ) -> torch.Tensor:
        """Run tokens (1-D LongTensor) at positions start_pos.. ; returns float32 logits [T, vocab].

        Writes K/V of every processed position into ``cache``. ``skip_layers`` drops whole layers
        (the layer-skip draft). ``logits_rows`` limits the LM head to some rows (prefill: the last).
        """
        a = self.args
        T = tokens.shape[0]
        if start_pos + T > a.max_seq_len:
            from cassandra_rtl.errors import InputError

            raise InputError(f"sequence of {start_pos + T} tokens exceeds the context of {a.max_seq_len}")
        x = self.tok_emb[tokens]  # [T, dim] bf16
        if self.tile is not None:
            # npu numerics: linears batched over the rows, the rest row by row when exact (module docstring)
            for li, blk in enumerate(self.layers):
                if li not in skip_layers:
                    x = self._block(blk, li, x, start_pos, cache, rowwise=exact)
            if logits_rows is not None:
                x = x[logits_rows]
            h = _each_row(self.norm, x) if exact else self.norm(x)
            return self.tile(h, self.head_weight()).float()
        for li, blk in enumerate(self.layers):
            if li in skip_layers:
                continue
            if exact and T > 1:
                # one row at a time through the very code a 1-token decode step runs
                x = torch.cat([self._block(blk, li, x[t : t + 1], start_pos + t, cache) for t in range(T)], 0)
            else:
                x = self._block(blk, li, x, start_pos, cache)
        if logits_rows is not None:
            x = x[logits_rows]
        if exact and x.shape[0] > 1:
            return torch.cat([self._head(x[t : t + 1]) for t in range(x.shape[0])], 0)
        return self._head(x)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(x), self.head_weight()).float()

    def _block(self, blk: Block, li: int, x: torch.Tensor, start_pos: int, cache: KVCache,
               rowwise: bool = False) -> torch.Tensor:
        if self.tile is not None:
            return self._block_tile(blk, li, x, start_pos, cache, rowwise)
        at = blk.attn
        h = blk.attn_norm(x)
        o = self._attend(at, li, F.linear(h, at.wq, at.bq), F.linear(h, at.wk, at.bk), F.linear(h, at.wv, at.bv),
                         start_pos, cache)
        x = x + F.linear(o, at.wo)
        h = blk.ffn_norm(x)
        m = blk.mlp
        return x + F.linear(F.silu(F.linear(h, m.w_gate)) * F.linear(h, m.w_up), m.w_down)

    def _block_tile(self, blk: Block, li: int, x: torch.Tensor, start_pos: int, cache: KVCache,
                    rowwise: bool) -> torch.Tensor:
        """One layer under npu numerics: each linear once over all T rows (the tile); with ``rowwise`` every
        other op runs per row, row t as the 1-token step at start_pos + t after rows < t wrote their K/V."""
        lin, at, m = self.tile, blk.attn, blk.mlp
        each = _each_row if rowwise else (lambda f, *ts: f(*ts))
        h = each(blk.attn_norm, x)
        q, k, v = lin(h, at.wq, at.bq), lin(h, at.wk, at.bk), lin(h, at.wv, at.bv)
        if rowwise and x.shape[0] > 1:
            o = torch.cat([self._attend(at, li, q[t : t + 1], k[t : t + 1], v[t : t + 1], start_pos + t, cache)
                           for t in range(x.shape[0])], 0)
        else:
            o = self._attend(at, li, q, k, v, start_pos, cache)
        x = each(torch.add, x, lin(o, at.wo))
        h = each(blk.ffn_norm, x)
        act = each(_swiglu, lin(h, m.w_gate), lin(h, m.w_up))
        return each(torch.add, x, lin(act, m.w_down))

    def _attend(self, at: Attention, li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos: int,
                cache: KVCache) -> torch.Tensor:
        """Attention of T rows at positions start_pos.. from their q/k/v projections [T, *] (bf16): q/k norm,
        RoPE, K/V written to ``cache``, causal softmax attention; returns [T, n_heads * head_dim] bf16."""
        a = self.args
        T = q.shape[0]
        hd, nh, nkv = a.head_dim, a.n_heads, a.n_kv_heads
        g = nh // nkv
        q = q.view(T, nh, hd)
        k = k.view(T, nkv, hd)
        v = v.view(T, nkv, hd)
        if at.q_norm is not None:
            q, k = at.q_norm(q), at.k_norm(k)
        c = self.rope_cos[start_pos : start_pos + T][:, None, :]
        s = self.rope_sin[start_pos : start_pos + T][:, None, :]
        q = (q.float() * c + _rotate_half(q.float()) * s).to(torch.bfloat16)
        k = (k.float() * c + _rotate_half(k.float()) * s).to(torch.bfloat16)
        cache.k[li, :, start_pos : start_pos + T] = k.transpose(0, 1)
        cache.v[li, :, start_pos : start_pos + T] = v.transpose(0, 1)
        L = start_pos + T
        kk = cache.k[li, :, :L].float()  # [nkv, L, hd]
        vv = cache.v[li, :, :L].float()
        qq = q.float().view(T, nkv, g, hd).permute(1, 2, 0, 3)  # [nkv, g, T, hd]
        sc = torch.matmul(qq, kk[:, None].transpose(2, 3)) * (1.0 / math.sqrt(hd))  # [nkv, g, T, L]
        if T > 1:
            mask = torch.arange(L)[None, :] > (start_pos + torch.arange(T))[:, None]
            sc = sc.masked_fill(mask, float("-inf"))
        o = torch.matmul(torch.softmax(sc, -1), vv[:, None])  # [nkv, g, T, hd]
        return o.permute(2, 0, 1, 3).reshape(T, nh * hd).to(torch.bfloat16)

    def param_bytes(self) -> int:
        """bf16 bytes of all parameters (the tied head counted once)."""
        return sum(p.numel() * 2 for p in self.named_weights().values())
