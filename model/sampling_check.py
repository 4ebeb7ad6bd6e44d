"""A distribution check for speculative *sampling* on any model (what `generate --compare` runs when sampling).

Token-identity cannot be checked when sampling (plain and speculative decoding consume the random stream
differently), so the check is statistical. Every token speculative decoding emits must be an exact sample of
the target's processed distribution p(. | its own prefix). For each emitted token t with prefix s the target
gives p = p(. | s) exactly (one batched forward over the generated sequence), and the randomized probability
integral transform

    u = sum_{y < t} p(y) + v * p(t),   v ~ U[0, 1)

is uniform on [0, 1) if and only if t ~ p — token after token, so the u's of a run are i.i.d. uniform under
a correct rule whatever the prefixes are. The u's of ``runs`` seeded runs are tested against U[0, 1) with the
Kolmogorov-Smirnov statistic. The test works with any vocabulary size; its power grows with runs x tokens.
The first token (sampled from the prefill) is included; a tie-free ordering (token id) is fixed.
"""
from __future__ import annotations

import math

import torch

from .sampling import SamplingParams, probs_from_logits


def ks_uniform(us: list[float]) -> tuple[float, float]:
    """(D, asymptotic p-value) of the one-sample Kolmogorov-Smirnov test against U[0, 1)."""
    n = len(us)
    if n == 0:
        return 0.0, 1.0
    xs = sorted(us)
    d = max(max((i + 1) / n - x, x - i / n) for i, x in enumerate(xs))
    lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d  # Stephens' small-sample correction
    p = 2.0 * sum((-1) ** (j - 1) * math.exp(-2.0 * j * j * lam * lam) for j in range(1, 101))
    return d, min(1.0, max(0.0, p))


def pit_values(target, prompt: list[int], tokens: list[int], sp: SamplingParams, gen: torch.Generator
               ) -> list[float]:
    """Randomized PIT values of ``tokens`` (generated after ``prompt``) under the target's distributions."""
    seq = torch.tensor(prompt + tokens)
    logits = target(seq, 0, target.new_cache(), exact=False)
    n0 = len(prompt) - 1
    out = []
    for i, t in enumerate(tokens):
        p = probs_from_logits(logits[n0 + i], sp)
        below = float(p[:t].sum())
        v = float(torch.rand((), generator=gen, dtype=torch.float64))
        out.append(min(1.0 - 1e-12, below + v * float(p[t])))
    return out


def sampling_check(engine, drafter, prompt: list[int], sp: SamplingParams, max_new_tokens: int = 16,
                   gamma: int = 4, runs: int = 50, seed: int = 0, alpha: float = 1e-3, adaptive: bool = False,
                   progress=None) -> dict:
    """Run speculative sampling ``runs`` times (seeds seed..seed+runs-1) and KS-test the PIT values.
    Returns {"ok", "p_value", "ks_d", "values", "runs", "alpha", "acceptance"}; ``ok`` is p_value >= alpha."""
    if sp.greedy:
        raise ValueError("sampling_check is for sampling (temperature > 0); greedy is checked token for token")
    gen = torch.Generator().manual_seed(10_007 + seed)
    us, acc, dr = [], 0, 0
    for r_ in range(runs):
        r = engine.generate(prompt, max_new_tokens, drafter=drafter, gamma=gamma, adaptive=adaptive, sp=sp,
                            seed=seed + r_)
        # generated tokens are out[0..]; stop tokens are kept (they were sampled too)
        us += pit_values(engine.target, prompt, r.tokens, sp, gen)
        acc += r.stats.accepted
        dr += r.stats.drafted
        if progress:
            progress(r_ + 1, runs, f"sampling check: {len(us)} tokens")
    d, p = ks_uniform(us)
    return {"ok": p >= alpha, "p_value": p, "ks_d": d, "values": len(us), "runs": runs, "alpha": alpha,
            "acceptance": acc / dr if dr else None,
            "method": "randomized PIT of every emitted token under the target's own distribution, KS vs U[0,1)"}
