"""Plain and speculative decoding in one harness, with per-pass byte accounting.

The target always verifies through ``Transformer.forward(exact=True)`` (row-exact, see transformer.py),
and plain decoding runs the same 1-row code path, so greedy speculative decoding is token-identical to
plain greedy decoding of the target. Under the NPU tile's numerics (``Transformer.set_numerics("npu")``,
model/npu_numerics.py) the verify pass sends its k+1 rows through each linear layer together -- one weight
read per layer, the one k+1-row target pass the ledger records -- and each row's logits are still the bits
of a 1-token step, so the same identity holds. Sampling uses the Leviathan/Chen rule (sampling.py).

Draft length per step (``adaptive``, see ``parse_schedule``): fixed ``gamma``; ``"hf"`` (or True): HF's
+2 after a fully accepted draft, -1 otherwise; ``"confidence[:T]"``: the draft proposes up to ``gamma``
tokens and stops after a token whose draft probability (the top of the draft's processed distribution)
is below T (default 0.6) -- a drafted token the draft itself doubts is likely rejected, and drafting past
it costs a draft pass for nothing. Any draft length chosen from the draft's own outputs keeps greedy
decoding token-identical and sampling exact (verification does not depend on how k was chosen).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from cassandra_rtl.errors import ConfigError, InputError

from .metrics import Ledger, hardware_presets, pass_flops
from .sampling import SamplingParams, greedy_accept, probs_from_logits, sample, speculative_accept
from .transformer import Transformer


@dataclass
class Cost:
    """What one forward pass of a model variant reads."""

    weight_bytes: int  # weights streamed per pass (the head counted once; embedding lookups ignored)
    kv_bytes_per_token: float  # KV bytes read per cached position
    matrix_params: int  # weights multiplied per token (for FLOPs)
    attn_layers: int

    def charge(self, ledger: Ledger, kind: str, tokens: int, ctx: int, a) -> None:
        ledger.add(kind, tokens, self.weight_bytes, self.kv_bytes_per_token * ctx,
                   pass_flops(self.matrix_params, tokens, self.attn_layers, a.n_heads, a.head_dim, ctx))


def bf16_cost(model: Transformer, skip_layers=frozenset(), bytes_per_tensor: dict[str, int] | None = None) -> Cost:
    """Cost of running ``model`` with bf16 weights (or ``bytes_per_tensor`` overrides) and a bf16 KV cache."""
    a = model.args
    wb = 0
    mp = 0
    for name, p in model.named_weights().items():
        if name.startswith("layers.") and int(name.split(".")[1]) in skip_layers:
            continue
        if name == "tok_emb" and not a.tie_embeddings:
            wb += a.dim * 2  # one embedding row per token; the untied head is counted as lm_head
            continue
        wb += bytes_per_tensor[name] if bytes_per_tensor and name in bytes_per_tensor else p.numel() * 2
        if p.dim() == 2:
            mp += p.numel()
    n_attn = a.n_layers - len(skip_layers)
    return Cost(wb, 2 * n_attn * a.n_kv_heads * a.head_dim * 2, mp, n_attn)


DEFAULT_CONFIDENCE = 0.6


@dataclass(frozen=True)
class Schedule:
    """How many tokens the draft proposes per step: ``kind`` "fixed", "hf" (+2 / -1) or "confidence"."""

    kind: str = "fixed"
    threshold: float = DEFAULT_CONFIDENCE

    def stop_fn(self):
        """``stop(i, p) -> bool`` for ``Drafter.propose``: stop after draft token i of probability p."""
        if self.kind != "confidence":
            return None
        thr = self.threshold
        return lambda i, p: p < thr

    def label(self) -> str:
        return {"fixed": "fixed", "hf": "hf +2/-1"}.get(self.kind, f"confidence < {self.threshold:g}")


def parse_schedule(adaptive) -> Schedule:
    """``adaptive``: False/None/"fixed" -> fixed gamma; True/"hf" -> HF's +2/-1; "confidence[:T]" (T in (0, 1))
    -> stop drafting after a token whose draft probability is below T; a Schedule is returned as is."""
    if isinstance(adaptive, Schedule):
        return adaptive
    if adaptive in (False, None, "fixed", ""):
        return Schedule("fixed")
    if adaptive is True or adaptive == "hf":
        return Schedule("hf")
    if isinstance(adaptive, str) and adaptive.split(":")[0] == "confidence":
        parts = adaptive.split(":")
        try:
            thr = float(parts[1]) if len(parts) == 2 else DEFAULT_CONFIDENCE
            if len(parts) > 2 or not 0.0 < thr < 1.0:
                raise ValueError
        except ValueError:
            raise ConfigError(f"adaptive schedule 'confidence:T' needs T in (0, 1), got {adaptive!r}") from None
        return Schedule("confidence", thr)
    raise ConfigError(f"unknown adaptive schedule {adaptive!r} (fixed, hf, confidence[:T])")


class Drafter:
    """Interface of a draft source. ``propose`` returns draft tokens and the draft distributions they were
    sampled from (None if the proposals are deterministic / greedy).

    A drafter with ``supports_stop = True`` also accepts ``propose(..., stop=fn)``: after each draft token
    i it calls ``fn(i, p)`` with the token's draft probability p and stops proposing if it returns True
    (the "confidence" schedule)."""

    name = "none"
    supports_stop = False

    def start(self, eng: "Engine", prompt: list[int]) -> None:
        self.eng = eng

    def propose(self, ids: list[int], pos: int, gamma: int, sp: SamplingParams, gen: torch.Generator
                ) -> tuple[list[int], torch.Tensor | None]:
        raise NotImplementedError

    def commit(self, start: int, n: int) -> None:
        """Target positions [start, start+n) now hold accepted tokens' K/V."""

    def describe(self) -> dict:
        return {"draft": self.name}


@dataclass
class RunStats:
    prompt_tokens: int = 0
    generated: int = 0
    steps: int = 0  # target decode passes (plain steps + verify steps)
    step_tokens: int = 0  # tokens emitted by those passes
    tokens_at_step: list[int] = field(default_factory=list)  # tokens each of those passes emitted, in order
    drafted: int = 0
    accepted: int = 0
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    gammas: list[int] = field(default_factory=list)
    prefill_s: float = 0.0
    decode_s: float = 0.0

    def per_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]


@dataclass
class Result:
    tokens: list[int]
    stats: RunStats
    ledger: Ledger
    baseline: Ledger  # plain bf16 autoregressive decoding of the same tokens (modeled)
    info: dict = field(default_factory=dict)
    target_ar: Ledger | None = None  # plain autoregressive decoding reading the target's own representation

    def summary(self) -> dict:
        s = self.stats
        hw = hardware_presets()
        n = max(1, s.generated)
        out = {
            "tokens": self.tokens,
            "generated": s.generated,
            "prompt_tokens": s.prompt_tokens,
            "acceptance_rate": (s.accepted / s.drafted) if s.drafted else None,
            "acceptance_per_position": s.per_position(),
            # conditional per-token acceptance: accepted / draft tokens the verifier reached (a token after
            # the first rejection of a step is not reached); E[tokens/step] = (1 - a^(g+1)) / (1 - a)
            "alpha": (sum(s.accepted_at) / sum(s.drafted_at)) if sum(s.drafted_at) else None,
            "drafted_at": s.drafted_at,
            "accepted_at": s.accepted_at,
            "drafted": s.drafted,
            "accepted": s.accepted,
            "verify_steps": s.steps,
            "tokens_per_step": (s.step_tokens / s.steps) if s.steps else None,
            "tokens_at_step": s.tokens_at_step,
            "mean_gamma": (sum(s.gammas) / len(s.gammas)) if s.gammas else 0.0,
            "bytes_per_token": self.ledger.bytes() / n,
            "draft_bytes_per_token": self.ledger.bytes("draft") / n,
            "target_bytes_per_token": self.ledger.bytes("target") / n,
            "bf16_ar_bytes_per_token": self.baseline.bytes() / n,
            "cpu_tokens_per_s": (s.generated - 1) / s.decode_s if s.decode_s > 0 and s.generated > 1 else None,
            "prefill_s": s.prefill_s,
            "decode_s": s.decode_s,
            "modeled_speedup": {k: (self.baseline.time(h) / self.ledger.time(h)) if self.ledger.passes else None
                                for k, h in hw.items()},
        }
        if self.target_ar is not None:
            # the gain of speculation alone (e.g. over autoregressive decoding that reads the Cassandra format)
            out["modeled_speedup_vs_target_ar"] = {k: self.target_ar.time(h) / self.ledger.time(h)
                                                   for k, h in hw.items()} if self.ledger.passes else None
        out.update(self.info)
        return out


class Engine:
    def __init__(self, target: Transformer, target_cost: Cost | None = None, stop_ids=(), baseline_cost=None):
        self.target = target
        self.args = target.args
        self.cost = target_cost or bf16_cost(target)
        self.baseline_cost = baseline_cost or bf16_cost(target)
        self.stop_ids = set(stop_ids)
        self.cache = None
        self.ledger = None

    def generate(self, prompt: list[int], max_new_tokens: int = 64, drafter: Drafter | None = None,
                 gamma: int = 4, adaptive: "bool | str | Schedule" = False, sp: SamplingParams = SamplingParams(),
                 seed: int = 0, on_tokens=None, gamma_max: int = 16, stop_fn=None) -> Result:
        """Decode; ``on_tokens(list)`` receives every step's new tokens; ``stop_fn(tokens) -> bool`` ends the
        run after a step (stop strings). Returns the Result."""
        it = self.steps(prompt, max_new_tokens, drafter, gamma, adaptive, sp, seed, gamma_max, stop_fn)
        while True:
            try:
                new = next(it)
            except StopIteration as done:
                return done.value
            if on_tokens:
                on_tokens(new)

    def steps(self, prompt: list[int], max_new_tokens: int = 64, drafter: Drafter | None = None,
              gamma: int = 4, adaptive: "bool | str | Schedule" = False, sp: SamplingParams = SamplingParams(),
              seed: int = 0, gamma_max: int = 16, stop_fn=None):
        """The decoding loop as a generator: yields each step's new tokens (a non-empty list), returns the
        Result (``StopIteration.value``)."""
        a = self.args
        if not prompt:
            raise InputError("empty prompt")
        if len(prompt) >= a.max_seq_len:
            raise InputError(f"prompt of {len(prompt)} tokens does not fit the context of {a.max_seq_len} "
                             f"(at most {a.max_seq_len - 1})")
        if max_new_tokens < 1:
            raise ConfigError(f"max new tokens must be >= 1, got {max_new_tokens}")
        if drafter is not None and not 1 <= gamma <= 64:
            raise ConfigError(f"gamma must be in 1..64, got {gamma}")
        sched = parse_schedule(adaptive)
        stop = sched.stop_fn()
        if stop is not None and drafter is not None and not getattr(drafter, "supports_stop", False):
            raise ConfigError(f"adaptive schedule {sched.label()!r} needs a draft that reports its token "
                              f"probabilities; draft {getattr(drafter, 'name', '?')!r} does not")
        gen = torch.Generator().manual_seed(int(seed))
        stats = RunStats(prompt_tokens=len(prompt))
        self.ledger, base = Ledger(), Ledger()
        # the cache holds what this run can reach (prompt + new tokens + one draft's look-ahead), not the
        # whole context: positions are absolute, so the size never changes a result
        self.cache = self.target.new_cache(len(prompt) + max_new_tokens
                                           + max(gamma, gamma_max if sched.kind == "hf" else 0) + 2)
        t0 = time.perf_counter()
        logits = self.target(torch.tensor(prompt), 0, self.cache, exact=False, logits_rows=slice(-1, None))
        first = int(logits[0].argmax()) if sp.greedy else sample(probs_from_logits(logits[0], sp), gen)
        stats.prefill_s = time.perf_counter() - t0
        out = [first]
        yield [first]
        t0 = time.perf_counter()
        if drafter is not None:
            drafter.start(self, prompt)
        pos = len(prompt)  # position of out[-1], whose K/V is not in the cache yet
        g = gamma
        stopped = bool(stop_fn and stop_fn(out))
        while (not stopped and len(out) < max_new_tokens and out[-1] not in self.stop_ids
               and pos + 1 < a.max_seq_len):
            remaining = max_new_tokens - len(out)
            k = 0 if drafter is None else max(0, min(g, remaining - 1, a.max_seq_len - pos - 2))
            ids = prompt + out
            if k == 0:
                draft, q = [], None
            elif stop is not None:
                draft, q = drafter.propose(ids, pos, k, sp, gen, stop=stop)
            else:
                draft, q = drafter.propose(ids, pos, k, sp, gen)
            k = len(draft)
            logits = self.target(torch.tensor([out[-1]] + draft), pos, self.cache, exact=True)
            self.cost.charge(self.ledger, "target", k + 1, pos + k + 1, a)
            if sp.greedy:
                n_acc, nxt = greedy_accept(logits, draft)
            else:
                n_acc, nxt = speculative_accept(probs_from_logits(logits, sp), q, draft, gen)
            if k:
                stats.drafted += k
                stats.accepted += n_acc
                stats.gammas.append(k)
                while len(stats.drafted_at) < k:
                    stats.drafted_at.append(0)
                    stats.accepted_at.append(0)
                for i in range(min(k, n_acc + 1)):
                    stats.drafted_at[i] += 1
                    stats.accepted_at[i] += int(i < n_acc)
                if sched.kind == "hf":
                    g = min(gamma_max, g + 2) if n_acc == k else max(1, g - 1)
            # roll back: K/V written for rejected drafts are dropped (zeroed) from the target cache
            self.cache.rollback(pos + n_acc + 1, pos + k + 1)
            if drafter is not None:
                drafter.commit(pos, n_acc + 1)
            new = draft[:n_acc] + [nxt]
            stats.steps += 1
            emitted = []
            for t in new:
                if len(out) >= max_new_tokens or out[-1] in self.stop_ids:
                    break
                out.append(t)
                emitted.append(t)
            stats.step_tokens += len(emitted)
            stats.tokens_at_step.append(len(emitted))
            pos += n_acc + 1
            if emitted:
                dt = time.perf_counter() - t0
                yield emitted
                t0 = time.perf_counter() - dt        # time spent by the consumer is not decode time
                stopped = bool(stop_fn and stop_fn(out))
        stats.decode_s = time.perf_counter() - t0
        stats.generated = len(out)
        # modeled plain bf16 autoregressive decoding of the same tokens: one 1-token pass per token after the first
        tar = Ledger()
        for i in range(1, len(out)):
            self.baseline_cost.charge(base, "target", 1, len(prompt) + i, a)
            self.cost.charge(tar, "target", 1, len(prompt) + i, a)
        info = drafter.describe() if drafter is not None else {"draft": "none"}
        info["numerics"] = getattr(self.target, "numerics", "torch")
        return Result(out, stats, self.ledger, base, info, tar)
