"""Draft sources: the Cassandra draft, layer-skip self-speculation, n-gram prompt lookup; INT8 baseline.

The Cassandra draft's weights come from the golden codec's ``decode_draft``; the target's from
``decode_full``, asserted equal to the checkpoint's bits. Per-tensor codec configs and salience scores
are pluggable (``cfg_for(name, shape)``, ``salience_for(name, bits)``) so that draft selection
(activation-aware salience, per-tensor allocation) plugs in without touching this machinery.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig

from .engine import Cost, Drafter, Engine, bf16_cost
from .kvformat import KVSpecView
from .loader import Checkpoint, bits_to_bf16
from .sampling import SamplingParams, probs_from_logits, sample
from .transformer import Transformer


# ------------------------------------------------------------------------------- model-based drafting
class ModelDrafter(Drafter):
    """A draft that is a Transformer (possibly skipping layers) with its own KV cache, synced from the
    target's cache for accepted positions by ``sync(target_cache, draft_cache, start, stop)``."""

    def __init__(self, name: str, model: Transformer, cost: Cost, skip_layers=frozenset(), sync=None,
                 kv_commit_bytes_per_token: Callable[[], float] | None = None):
        self.name = name
        self.model = model
        self.dcost = cost
        self.skip = frozenset(skip_layers)
        self._sync = sync
        self._kv_commit_bpt = kv_commit_bytes_per_token  # bytes/token the draft reads for committed positions
        self.info: dict = {}

    def sync(self, src, dst, start, stop):
        if self._sync is None:
            layers = [i for i in range(self.model.args.n_layers) if i not in self.skip]
            dst.copy_(src, start, stop, layers)
        else:
            self._sync(src, dst, start, stop)

    def start(self, eng: Engine, prompt: list[int]) -> None:
        self.eng = eng
        self.cache = self.model.new_cache(eng.cache.capacity)
        self.sync(eng.cache, self.cache, 0, len(prompt))

    supports_stop = True          # the confidence schedule (engine.parse_schedule)

    def propose(self, ids, pos, gamma, sp: SamplingParams, gen, stop=None):
        """Up to ``gamma`` draft tokens; with ``stop`` (engine.Drafter), after each one ``stop(i, p)`` on its
        draft probability p (greedy: the softmax maximum of the draft's logits; sampling: the maximum of the
        processed distribution it was sampled from) may end the draft early."""
        a = self.model.args
        tok = ids[-1]
        draft, qs = [], []
        bf16_bpt = self.dcost.kv_bytes_per_token
        commit_bpt = self._kv_commit_bpt() if self._kv_commit_bpt else bf16_bpt
        for i in range(gamma):
            logits = self.model(torch.tensor([tok]), pos + i, self.cache, exact=True, skip_layers=self.skip)[0]
            self.eng.ledger.add("draft", 1, self.dcost.weight_bytes, commit_bpt * pos + bf16_bpt * (i + 1),
                                2.0 * self.dcost.matrix_params + 4.0 * self.dcost.attn_layers * a.n_heads
                                * a.head_dim * (pos + i + 1))
            if sp.greedy:
                tok = int(logits.argmax())
                p = float(torch.softmax(logits.float(), -1)[tok]) if stop is not None else 1.0
            else:
                q = probs_from_logits(logits, sp)
                tok = sample(q, gen)
                qs.append(q)
                p = float(q.max())
            draft.append(tok)
            if stop is not None and stop(i, p):
                break
        return draft, (torch.stack(qs) if qs else None)

    def commit(self, start, n):
        self.sync(self.eng.cache, self.cache, start, start + n)
        self.cache.rollback(start + n, start + n + 64)  # hygiene: drop the draft's unverified K/V

    def describe(self):
        return {"draft": self.name, **self.info}


# --------------------------------------------------------------------------------------- Cassandra
@dataclass
class EncodedModel:
    """Every weight tensor of a checkpoint in the format (2-D matrices; 1-D norms/biases stay bf16)."""

    enc: dict = field(default_factory=dict)  # name -> EncodedTensor
    draft_bits: dict = field(default_factory=dict)  # name -> uint16 (speculation view)
    spec_bytes: dict = field(default_factory=dict)
    full_bytes: dict = field(default_factory=dict)  # spec + verif
    seconds: float = 0.0


def _cache_path(ck: Checkpoint, cfgs: dict, cache_dir) -> "Path | None":
    import hashlib
    import json
    import os
    from pathlib import Path

    if cache_dir is None:
        return None
    src = Path(ck.source)
    if not src.exists():
        return None
    st = src.stat() if src.is_file() else max((f.stat() for f in src.glob("*.safetensors")),
                                               key=lambda x: x.st_mtime)
    key = json.dumps([str(src.resolve()), st.st_size, st.st_mtime_ns,
                      sorted((n, c.to_json()) for n, c in cfgs.items())], sort_keys=True)
    return Path(os.path.expanduser(str(cache_dir))) / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".cass")


def default_cache_dir() -> str:
    import os

    return os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cassandra-rtl")


def encode_model(ck: Checkpoint, cfg_for: Callable[[str, tuple], CodecConfig],
                 salience_for: Callable[[str, np.ndarray], np.ndarray | None] | None = None,
                 progress=None, decode=None, cache_dir=None) -> EncodedModel:
    """Encode every 2-D weight; check decode_full == original bits; keep decode_draft's view.

    ``decode`` optionally replaces the draft decoder (the RTL-in-the-loop path); its output must
    equal the golden decode_draft's bit for bit. With ``cache_dir`` (and no salience function) the
    encoded tensors are kept in a .cass container there and re-read on the next run; the checks
    against the checkpoint's bits run either way.
    """
    from cassandra_rtl.golden.container import read_container, write_container

    em = EncodedModel()
    t0 = time.perf_counter()
    names = [n for n, b in ck.bits.items() if b.ndim == 2]
    cfgs = {n: cfg_for(n, ck.bits[n].shape) for n in names}
    cpath = _cache_path(ck, cfgs, cache_dir) if salience_for is None else None
    cached = {}
    if cpath is not None and cpath.is_file():
        try:
            cached = read_container(cpath).tensors
        except Exception:  # noqa: BLE001 - a stale or corrupt cache entry is just re-encoded
            cached = {}
    for i, name in enumerate(names):
        bits = ck.bits[name]
        cfg = cfgs[name]
        enc = cached.get(name)
        if enc is None or enc.config != cfg or tuple(enc.shape) != bits.shape:
            sal = salience_for(name, bits) if salience_for else None
            enc = encode_tensor(bits, cfg, salience=sal)
        full = decode_full(enc)
        if not np.array_equal(full, bits):
            raise AssertionError(f"decode_full({name}) differs from the original bits")
        d = decode_draft(enc)
        if decode is not None:
            d2 = decode(name, enc)
            if not np.array_equal(d2, d):
                raise AssertionError(f"RTL draft decode of {name} differs from the golden decode_draft")
        em.enc[name] = enc
        em.draft_bits[name] = d
        em.spec_bytes[name] = enc.spec_nbytes
        em.full_bytes[name] = enc.spec_nbytes + enc.verif_nbytes
        if progress:
            progress(i + 1, len(names), name)
    if cpath is not None and len(cached) != len(names):
        try:
            cpath.parent.mkdir(parents=True, exist_ok=True)
            tmp = cpath.with_suffix(".tmp")
            write_container(tmp, em.enc, {"source": ck.source, "what": "cassandra-rtl model cache"})
            tmp.replace(cpath)
        except OSError:
            pass
    em.seconds = time.perf_counter() - t0
    return em


def uniform_cfg(keep_ratio: float = 1.0, mantissa_bits: int = 3, group_size: int = 128, scheme: str = "c1"):
    cfg = CodecConfig(scheme=scheme, keep_ratio=keep_ratio, mantissa_bits=mantissa_bits, group_size=group_size)
    return lambda name, shape: cfg


def build_cassandra(ck: Checkpoint, target: Transformer, weight_cfg_for=None, kv_cfg: CodecConfig | None = None,
                    salience_for=None, progress=None, decode=None, encoded: EncodedModel | None = None,
                    cache_dir=None, kv_decode=None, kv_encode=None) -> tuple[ModelDrafter, Cost]:
    """The Cassandra draft + the target's cost when it reads the format (spec + verif streams)."""
    em = encoded or encode_model(ck, weight_cfg_for or uniform_cfg(), salience_for, progress, decode, cache_dir)
    # the target must be exactly the checkpoint (decode_full was checked per tensor in encode_model)
    draft_bits = dict(ck.bits)
    draft_bits.update(em.draft_bits)
    draft = ck.build(draft_bits)
    cfg0 = (weight_cfg_for or uniform_cfg())("layers.0.wq", None)
    return cassandra_drafter(target, draft, kv_cfg, em.spec_bytes, em.full_bytes, kv_decode, em, cfg0, kv_encode)


def cassandra_drafter(target: Transformer, draft: Transformer, kv_cfg: CodecConfig | None, spec_bytes: dict,
                      full_bytes: dict, kv_decode=None, encoded: "EncodedModel | None" = None,
                      cfg0: CodecConfig | None = None, kv_encode=None) -> tuple[ModelDrafter, Cost]:
    """The Cassandra drafter around a draft model whose 2-D weights are the speculation view; the
    target's cost reads ``full_bytes`` (spec + verif) and the draft's ``spec_bytes`` per 2-D tensor."""
    a = target.args
    kv_cfg = kv_cfg or CodecConfig(keep_ratio=1.0, mantissa_bits=3, group_size=a.head_dim, kind="kv")
    if kv_cfg.group_size != a.head_dim:
        raise ConfigError(f"KV group size must equal head_dim={a.head_dim} (one superblock per KV vector)")
    view = KVSpecView(kv_cfg, a.n_layers, kv_decode, kv_encode)
    tcost = bf16_cost(target, bytes_per_tensor=full_bytes)
    dcost = bf16_cost(draft, bytes_per_tensor=spec_bytes)
    vecs_per_token = 2 * a.n_layers * a.n_kv_heads  # K and V vectors per token

    def sync(src, dst, start, stop):
        if view.books is None:  # first call = the prompt: codebooks fixed from the prefill
            view.calibrate(src, stop)
        view.sync(src, dst, start, stop)
        # the target reads committed K/V in the format (spec + verif), measured from the real streams
        tcost.kv_bytes_per_token = view.full_bytes_per_token()

    d = ModelDrafter("cassandra", draft, dcost, sync=sync, kv_commit_bytes_per_token=view.spec_bytes_per_token)
    d.kv_view = view
    d.encoded = encoded if encoded is not None else EncodedModel(spec_bytes=dict(spec_bytes),
                                                                  full_bytes=dict(full_bytes))
    cfg0 = cfg0 or uniform_cfg()("layers.0.wq", None)
    d.info = {"keep_ratio": cfg0.keep_ratio, "mantissa_bits": cfg0.mantissa_bits, "scheme": cfg0.scheme,
              "kv_keep_ratio": kv_cfg.keep_ratio, "kv_mantissa_bits": kv_cfg.mantissa_bits,
              "draft_weight_bytes": dcost.weight_bytes, "target_weight_bytes": tcost.weight_bytes,
              "bf16_weight_bytes": bf16_cost(target).weight_bytes,
              "encode_s": encoded.seconds if encoded is not None else 0.0,
              "kv_vectors_per_token": vecs_per_token}
    return d, tcost


# --------------------------------------------------------------------------------------- layer skip
def layerskip_drafter(target: Transformer, skip: list[int]) -> ModelDrafter:
    d = ModelDrafter("layerskip", target, bf16_cost(target, frozenset(skip)), skip_layers=frozenset(skip))
    d.info = {"skip_layers": sorted(skip), "draft_weight_bytes": d.dcost.weight_bytes,
              "bf16_weight_bytes": bf16_cost(target).weight_bytes}
    return d


def expected_speedup(alpha: float, cost_ratio: float, gamma: int) -> float:
    """Leviathan et al.'s expected speedup for per-token acceptance alpha and draft/target cost ratio c."""
    alpha = min(alpha, 0.999999)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha) / (gamma * cost_ratio + 1)


@torch.no_grad()
def search_skip_layers_auto(target: Transformer, calib: list[list[int]], gamma: int = 4, max_skip: int | None = None,
                            progress=None) -> tuple[list[int], dict]:
    """Small search that also picks how many layers to skip: rank layers by the teacher-forced top-1
    agreement kept when each is skipped alone, then evaluate every prefix of that ranking and keep the one
    with the best expected speedup (agreement as the acceptance proxy, bytes as the cost)."""
    refs = []
    for seq in calib:
        refs.append(target(torch.tensor(seq), 0, target.new_cache(), exact=False).argmax(-1))

    def agreement(skip):
        ok = tot = 0
        for seq, ref in zip(calib, refs):
            am = target(torch.tensor(seq), 0, target.new_cache(), exact=False, skip_layers=frozenset(skip)).argmax(-1)
            ok += int((am == ref).sum())
            tot += len(seq)
        return ok / tot

    n = target.args.n_layers
    full = bf16_cost(target).weight_bytes
    single = sorted(((agreement([li]), -li) for li in range(1, n - 1)), reverse=True)
    order = [-x[1] for x in single]
    max_skip = min(max_skip or n - 2, len(order))
    best, trace = (0.0, []), []
    for k in range(1, max_skip + 1):
        skip = order[:k]
        a = agreement(skip)
        c = bf16_cost(target, frozenset(skip)).weight_bytes / full
        e = expected_speedup(a, c, gamma)
        trace.append({"n_skip": k, "agreement": a, "cost_ratio": c, "expected_speedup": e})
        if progress:
            progress(k, max_skip, f"skip {k}: agreement {a:.3f} cost {c:.2f} expected {e:.2f}x")
        if e > best[0]:
            best = (e, sorted(skip))
    return best[1], {"search": trace}


@torch.no_grad()
def search_skip_layers(target: Transformer, calib: list[list[int]], n_skip: int, progress=None) -> list[int]:
    """Greedy search: add, one at a time, the layer whose removal keeps the most teacher-forced top-1
    agreement with the full model on the calibration sequences (Draft&Verify-style, small)."""
    refs = []
    for seq in calib:
        c = target.new_cache()
        refs.append(target(torch.tensor(seq), 0, c, exact=False).argmax(-1))

    def agreement(skip):
        ok = tot = 0
        for seq, ref in zip(calib, refs):
            c = target.new_cache()
            am = target(torch.tensor(seq), 0, c, exact=False, skip_layers=frozenset(skip)).argmax(-1)
            ok += int((am == ref).sum())
            tot += len(seq)
        return ok / tot

    skip: list[int] = []
    n = target.args.n_layers
    for step in range(min(n_skip, n - 2)):
        best = max((agreement(skip + [li]), -li) for li in range(1, n - 1) if li not in skip)
        skip.append(-best[1])
        if progress:
            progress(step + 1, n_skip, f"skip {sorted(skip)} agreement {best[0]:.3f}")
    return sorted(skip)


# --------------------------------------------------------------------------------------- n-gram lookup
class NgramDrafter(Drafter):
    """Prompt lookup decoding: match the last n tokens (n = max_n..1) earlier in the context and propose
    what followed. Reads no weights."""

    name = "ngram"

    def __init__(self, max_n: int = 3):
        self.max_n = max_n

    def propose(self, ids, pos, gamma, sp, gen):
        L = len(ids)
        for n in range(min(self.max_n, L - 1), 0, -1):
            tail = ids[L - n:]
            for s in range(L - n - 1, -1, -1):
                if ids[s : s + n] == tail:
                    cont = ids[s + n : s + n + gamma]
                    if cont:
                        return list(cont), None
        return [], None

    def describe(self):
        return {"draft": "ngram", "max_n": self.max_n}


# --------------------------------------------------------------------------------------- INT8 baseline
def int8_model(ck: Checkpoint) -> tuple[Transformer, Cost]:
    """Weight-only INT8 (symmetric, per output channel, bf16 scale) of every 2-D weight, dequantized to
    bf16 for compute; cost = int8 bytes + scales."""
    bits = dict(ck.bits)
    nbytes = {}
    for name, b in ck.bits.items():
        if b.ndim != 2:
            continue
        w = bits_to_bf16(b).float()
        scale = (w.abs().amax(1, keepdim=True) / 127.0).clamp(min=1e-12).to(torch.bfloat16).float()
        qw = torch.clamp(torch.round(w / scale), -127, 127)
        from .loader import bf16_to_bits

        bits[name] = bf16_to_bits(qw * scale)
        nbytes[name] = b.size + 2 * b.shape[0]
    m = ck.build(bits)
    return m, bf16_cost(m, bytes_per_tensor=nbytes)
