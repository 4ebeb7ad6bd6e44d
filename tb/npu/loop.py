"""The Verilated NPU tile in the generation loop (``generate --numerics npu --npu-rtl-layers L``).

``RtlTileLinear`` stands in for a model's ``TileLinear`` (model/npu_numerics.py). A linear layer whose weight is
one of the chosen transformer layers' tensors goes through the Verilated tile: the target's weights (the full
decode of the artifact's tensor) as a **full** pass over that tensor's planes, the Cassandra draft's weights
(its draft decode) as a **draft** pass — the tile reads the planes, decodes them in its cluster and computes the
rows of the call (a verify pass's k+1 rows in one pass; a prefill's rows in passes of at most ``max_rows``).
Every other linear layer goes through the reference. Each RTL result is also compared with the reference
(``mismatches``): the tokens of the generation are the RTL's.

Weights are recognised by the content of their bf16 bits (a hash), so the draft's weights are found however the
draft holds them.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from . import MemParams, Plan, TileParams, run


def _digest(bits: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(bits).tobytes(), digest_size=16).hexdigest()


class RtlTileLinear:
    def __init__(self, base, container, layers, tile: TileParams | None = None, mem: MemParams | None = None,
                 layer_of=None):
        """``base``: the model's TileLinear; ``container``: the run's artifact (golden Container); ``layers``:
        transformer layer indexes; ``layer_of(name)``: a tensor name's layer index (default: the number after
        the first dot, as in ``layers.3.wq`` / ``blk.3.attn_q.weight``)."""
        from cassandra_rtl.golden.codec import decode_draft, decode_full

        self.base = base
        self.lanes = base.lanes
        self.tile = tile or TileParams()
        self.mem = mem or MemParams()
        if self.tile.lanes != self.lanes:
            raise ValueError(f"the tile's V ({self.tile.lanes}) differs from the numerics' lanes ({self.lanes})")
        layer_of = layer_of or (lambda n: int(n.split(".")[1]) if n.split(".")[1:2] and n.split(".")[1].isdigit()
                                else None)
        self.index = {}
        for name, enc in container.tensors.items():
            if len(enc.shape) != 2 or layer_of(name) not in set(layers) or enc.config.scheme != self.tile.scheme:
                continue
            self.index[_digest(decode_full(enc))] = (name, enc, "full")
            self.index.setdefault(_digest(decode_draft(enc)), (name, enc, "draft"))
        self.stats = {"rtl_calls": 0, "rtl_passes": 0, "rtl_rows": 0, "rtl_values": 0, "mismatches": 0,
                      "cycles": 0, "by_kind": {}}

    @property
    def calls(self):
        return self.base.calls

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        bits = w.contiguous().view(torch.int16).numpy().view(np.uint16)
        hit = self.index.get(_digest(bits))
        if hit is None:
            return self.base(x, w, b)
        name, enc, kind = hit
        self.base.calls += 1
        n_in = x.shape[-1]
        xb = x.reshape(-1, n_in).contiguous().view(torch.int16).numpy().view(np.uint16)
        plan = Plan(self.tile)
        step = self.tile.max_rows
        for r0 in range(0, xb.shape[0], step):
            plan.add_pass(enc, kind, xb[r0:r0 + step], name)
        res = run(plan, self.mem)
        y_bits = np.concatenate(res.outputs, axis=0)                     # (rows, out) fp32 bits
        y = torch.from_numpy(y_bits.view(np.float32).copy())
        ref = self.base._tile(w, x.reshape(-1, n_in), lanes=self.lanes)
        mism = int((y.view(torch.int32) != ref.view(torch.int32)).sum())
        st = self.stats
        st["rtl_calls"] += 1
        st["rtl_passes"] += len(res.passes)
        st["rtl_rows"] += xb.shape[0]
        st["rtl_values"] += enc.numel * len(res.passes)
        st["mismatches"] += mism
        st["cycles"] += sum(p["cycles"] for p in res.passes)
        st["by_kind"][kind] = st["by_kind"].get(kind, 0) + len(res.passes)
        y = y.reshape(*x.shape[:-1], y.shape[-1])
        if b is not None:
            y = y + b.float()
        return y.to(torch.bfloat16)


def attach(model, layers, tile: TileParams | None = None, mem: MemParams | None = None) -> list:
    """Put an RtlTileLinear on the target and the draft model of a CassandraModel under npu numerics (the
    artifact is the one the model was loaded from). Returns the installed wrappers."""
    from cassandra_rtl.golden.container import read_container

    cass = model.load_info.path if model.load_info is not None else None
    if not cass or not str(cass).endswith(".cass"):
        raise ValueError("the Verilated tile in the loop needs a model loaded from a .cass artifact")
    container = read_container(cass)
    out = []
    seen = {}
    for m in (model.target, model.engine.target, getattr(model.drafter, "model", None)):
        if m is None or id(m) in seen or getattr(m, "tile", None) is None:
            continue
        seen[id(m)] = m
        base = m.tile.base if isinstance(m.tile, RtlTileLinear) else m.tile
        wrap = RtlTileLinear(base, container, layers, tile, mem)
        m.tile = wrap
        out.append(wrap)
    return out
