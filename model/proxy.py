"""A float32 twin of ``transformer.Transformer`` for fast draft-selection measurements.

The engine's bf16 row-exact path is what generation uses; it is slow on a CPU (bf16 GEMMs). Draft selection
evaluates hundreds of candidate drafts, so it uses this float32 forward with the same architecture
(RMSNorm, rotate-half RoPE, GQA, SwiGLU, tied/untied head, q/k/v biases) on weights given as raw bf16 bits
(the draft's decoded bits or the target's). Two things it adds:

* ``record``: the squared L2 norm of every linear layer's input per input channel (the ``||x||`` of
  Wanda-style salience), accumulated over all processed tokens;
* ``kv``: attention that reads *given* K/V for every earlier position (the target's K/V as the draft's
  KV view holds them) and its own K/V only at the query's own position -- the situation of the first
  draft token of every speculation step, where the draft's committed context is the target's.

Teacher-forced top-1 agreement measured this way is the cheap acceptance proxy of tune.py; it is
validated against real speculative decoding (docs/DRAFT_SELECTION.md).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .loader import bits_to_bf16
from .transformer import LAYER_LINEARS, ModelArgs, rope_tables

# linear weight name -> the name of its input activation (q/k/v share the attention input, gate/up the MLP input)
INPUT_OF = {"wq": "attn_in", "wk": "attn_in", "wv": "attn_in", "wo": "attn_out",
            "w_gate": "mlp_in", "w_up": "mlp_in", "w_down": "mlp_act"}


def f32(bits: np.ndarray) -> torch.Tensor:
    return bits_to_bf16(bits).float()


class ProxyModel:
    """float32 forward over a dict of raw bf16 bits (Transformer.named_weights names)."""

    def __init__(self, args: ModelArgs, bits: dict[str, np.ndarray]):
        self.a = args
        self.w = {k: f32(v) for k, v in bits.items()}
        cos, sin = rope_tables(args)
        self.cos, self.sin = cos, sin

    def replace(self, bits: dict[str, np.ndarray]) -> "ProxyModel":
        """A model sharing this one's tensors except ``bits`` (cheap: no copy of the others)."""
        m = ProxyModel.__new__(ProxyModel)
        m.a, m.cos, m.sin = self.a, self.cos, self.sin
        m.w = dict(self.w)
        for k, v in bits.items():
            m.w[k] = f32(v)
        return m

    def head(self) -> torch.Tensor:
        return self.w["tok_emb"] if self.a.tie_embeddings else self.w["lm_head"]

    @staticmethod
    def _norm(x, w, eps):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def _rope(self, x, T, start=0):
        c, s = self.cos[start:start + T][:, None, :], self.sin[start:start + T][:, None, :]
        h = x.shape[-1] // 2
        return x * c + torch.cat([-x[..., h:], x[..., :h]], -1) * s

    @torch.no_grad()
    def forward(self, tokens: list[int], head_rows=None, kv=None, record: dict | None = None, return_kv=False,
                past: list | None = None):
        """Causal forward of ``tokens`` after ``past`` (per layer (K, V) of earlier positions, or None = from
        position 0). Returns (logits of ``head_rows`` [R, vocab], per layer (K, V) of past + tokens if
        ``return_kv``).

        ``kv``: per layer (K, V) as [n_kv, T, hd] float32; if given, query t attends to kv's keys < t and
        its own key at t. ``record``: dict name -> float64 sum of squared inputs per input channel.
        """
        a, w = self.a, self.w
        T = len(tokens)
        P = 0 if not past else past[0][0].shape[1]
        hd, nh, nkv = a.head_dim, a.n_heads, a.n_kv_heads
        g = nh // nkv
        x = w["tok_emb"][torch.tensor(tokens)]
        causal = torch.ones(T, P + T, dtype=torch.bool).tril(P)
        strict = torch.ones(T, T, dtype=torch.bool).tril(-1)
        eye = torch.eye(T, dtype=torch.bool)
        kv_out = []

        def lin(h, name, what, li):
            if record is not None:
                key = f"layers.{li}.{what}"
                s = h.double().pow(2).sum(0)
                record[key] = record.get(key, 0) + s
            b = w.get(name.replace(".wq", ".bq").replace(".wk", ".bk").replace(".wv", ".bv")) \
                if name.endswith((".wq", ".wk", ".wv")) else None
            return F.linear(h, w[name], b)

        for li in range(a.n_layers):
            p = f"layers.{li}."
            h = self._norm(x, w[p + "attn_norm"], a.norm_eps)
            q = lin(h, p + "wq", "attn_in", li).view(T, nh, hd)
            k = lin(h, p + "wk", "attn_in", li).view(T, nkv, hd)
            if a.qk_norm:                          # Qwen3: per-head RMSNorm before RoPE
                q = self._norm(q, w[p + "q_norm"], a.norm_eps)
                k = self._norm(k, w[p + "k_norm"], a.norm_eps)
            q, k = self._rope(q, T, P), self._rope(k, T, P)
            v = lin(h, p + "wv", "attn_in", li).view(T, nkv, hd)
            k, v = k.transpose(0, 1), v.transpose(0, 1)  # [nkv, T, hd]
            if past:
                k, v = torch.cat([past[li][0], k], 1), torch.cat([past[li][1], v], 1)
            if return_kv:
                kv_out.append((k, v))
            qq = q.view(T, nkv, g, hd).permute(1, 2, 0, 3)  # [nkv, g, T, hd]
            scale = 1.0 / math.sqrt(hd)
            if kv is None:
                sc = torch.matmul(qq, k[:, None].transpose(2, 3)) * scale
                sc = sc.masked_fill(~causal, float("-inf"))
                o = torch.matmul(torch.softmax(sc, -1), v[:, None])
            else:
                K, V = kv[li]
                sc = torch.matmul(qq, K[:, None].transpose(2, 3)) * scale  # keys < t from the given K/V
                own = (qq * k[:, None]).sum(-1) * scale  # [nkv, g, T]: own key at t
                sc = sc.masked_fill(~strict, float("-inf"))
                sc = torch.where(eye, own[..., None].expand_as(sc), sc)
                pr = torch.softmax(sc, -1)
                pd = pr.diagonal(dim1=-2, dim2=-1)  # [nkv, g, T]
                o = torch.matmul(pr.masked_fill(eye, 0.0), V[:, None]) + pd[..., None] * v[:, None]
            o = o.permute(2, 0, 1, 3).reshape(T, nh * hd)
            x = x + lin(o, p + "wo", "attn_out", li)
            h = self._norm(x, w[p + "ffn_norm"], a.norm_eps)
            act = F.silu(lin(h, p + "w_gate", "mlp_in", li)) * lin(h, p + "w_up", "mlp_in", li)
            x = x + lin(act, p + "w_down", "mlp_act", li)
        xs = x if head_rows is None else x[head_rows]
        hn = self._norm(xs, w["norm"], a.norm_eps)
        if record is not None:
            s = hn.double().pow(2).sum(0)
            record["head_in"] = record.get("head_in", 0) + s
        return F.linear(hn, self.head()), kv_out

    @torch.no_grad()
    def greedy(self, prompt: list[int], n: int, stop_ids=()) -> list[int]:
        """Greedy continuation with an incremental K/V cache."""
        out = []
        logits, past = self.forward(prompt, head_rows=slice(-1, None), return_kv=True)
        for i in range(n):
            t = int(logits[0].argmax())
            out.append(t)
            if t in stop_ids or i == n - 1:
                break
            logits, past = self.forward([t], head_rows=slice(-1, None), return_kv=True, past=past)
        return out


def input_norm_key(name: str, tied: bool = True) -> str | None:
    """The recorded activation whose channel norms weight tensor ``name``'s salience (None: no activation,
    e.g. an untied embedding table, which is looked up, not multiplied)."""
    if name == "lm_head" or (name == "tok_emb" and tied):
        return "head_in"
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "layers" and parts[2] in LAYER_LINEARS:
        return f"layers.{parts[1]}.{INPUT_OF[parts[2]]}"
    return None
