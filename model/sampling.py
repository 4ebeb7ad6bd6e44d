"""Token sampling and the Leviathan/Chen speculative acceptance rule.

``probs_from_logits`` turns logits into the distribution actually sampled (temperature, then top-p);
speculative sampling must reproduce exactly that distribution, so target and draft both go through it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from cassandra_rtl.errors import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 -> greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 -> no top-k filter

    def __post_init__(self):
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise ConfigError(f"top-k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not (self.temperature >= 0.0) or self.temperature != self.temperature:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def probs_from_logits(logits: torch.Tensor, sp: SamplingParams) -> torch.Tensor:
    """[..., V] logits -> float64 probabilities after temperature, top-k and nucleus (top-p) filtering."""
    p = torch.softmax(logits.double() / sp.temperature, -1)
    if 0 < sp.top_k < p.shape[-1]:
        # keep the k most likely tokens (ties at the k-th value broken by torch.topk's order)
        idx = torch.topk(p, sp.top_k, -1).indices
        p = torch.zeros_like(p).scatter(-1, idx, p.gather(-1, idx))
        p = p / p.sum(-1, keepdim=True)
    if sp.top_p < 1.0:
        sp_, idx = torch.sort(p, -1, descending=True)
        cum = torch.cumsum(sp_, -1)
        # keep the smallest prefix whose mass reaches top_p (the token that crosses it is kept)
        drop = (cum - sp_) >= sp.top_p
        sp_ = sp_.masked_fill(drop, 0.0)
        p = torch.zeros_like(p).scatter(-1, idx, sp_)
        p = p / p.sum(-1, keepdim=True)
    return p


def sample(p: torch.Tensor, gen: torch.Generator) -> int:
    return int(torch.multinomial(p.float() if p.dtype == torch.float16 else p, 1, generator=gen))


def speculative_accept(p: torch.Tensor, q: torch.Tensor | None, draft: list[int], gen: torch.Generator
                       ) -> tuple[int, int]:
    """Leviathan et al. / Chen et al. rejection sampling.

    p: [k+1, V] target distributions at the k draft positions plus the bonus position;
    q: [k, V] draft distributions the draft tokens were sampled from (None = deterministic proposals,
    i.e. q is one-hot on the proposed token, as for n-gram lookup or a greedy draft).
    Returns (number of accepted draft tokens n, the next token): draft[:n] + [next] is distributed
    exactly as k+1... tokens sampled from the target one at a time.
    """
    k = len(draft)
    for i, x in enumerate(draft):
        px = float(p[i, x])
        qx = 1.0 if q is None else float(q[i, x])
        if qx > 0 and float(torch.rand((), generator=gen, dtype=torch.float64)) < min(1.0, px / qx):
            continue
        if q is None:
            resid = p[i].clone()
            resid[x] = 0.0
        else:
            resid = torch.clamp(p[i] - q[i], min=0.0)
        s = float(resid.sum())
        if s <= 0.0:  # p == q (numerically): any sample from p is right
            resid = p[i]
            s = float(resid.sum())
        return i, sample(resid / s, gen)
    return k, sample(p[k], gen)


def greedy_accept(target_logits: torch.Tensor, draft: list[int]) -> tuple[int, int]:
    """Greedy verification: accept while the draft token equals the target's argmax."""
    am = target_logits.argmax(-1).tolist()
    for i, x in enumerate(draft):
        if am[i] != x:
            return i, am[i]
    return len(draft), am[len(draft)]
