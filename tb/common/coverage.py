"""Functional coverage: named points with declared bins; hits outside the declared bins are counted too
(so nothing is silently dropped), the percentage counts declared bins hit at least once."""
from __future__ import annotations

from collections import Counter


class Coverage:
    def __init__(self):
        self.bins: dict[str, list[str]] = {}
        self.hits: dict[str, Counter] = {}

    def define(self, point: str, bins):
        self.bins.setdefault(point, [str(b) for b in bins])
        self.hits.setdefault(point, Counter())

    def hit(self, point: str, b, n: int = 1):
        self.hits.setdefault(point, Counter())[str(b)] += n

    def report(self) -> dict:
        out = {}
        for p, c in self.hits.items():
            declared = self.bins.get(p, [])
            out[p] = {"bins": declared, "hits": dict(c)}
        return out

    @staticmethod
    def merge(reports) -> "Coverage":
        cov = Coverage()
        for rep in reports:
            for p, d in rep.items():
                cov.define(p, d.get("bins", []))
                for b, n in d.get("hits", {}).items():
                    cov.hit(p, b, n)
        return cov

    def summary(self) -> dict[str, tuple[int, int]]:
        """point -> (declared bins hit, declared bins)."""
        out = {}
        for p, declared in self.bins.items():
            c = self.hits.get(p, Counter())
            out[p] = (sum(1 for b in declared if c.get(b, 0) > 0), len(declared))
        return out

    def percent(self) -> float:
        s = self.summary()
        tot = sum(t for _, t in s.values())
        return 100.0 * sum(h for h, _ in s.values()) / tot if tot else 100.0

    def format(self) -> str:
        lines = []
        for p, (h, t) in sorted(self.summary().items()):
            c = self.hits.get(p, Counter())
            missing = [b for b in self.bins[p] if c.get(b, 0) == 0]
            extra = "" if not missing else f"  missing: {', '.join(missing[:12])}{' ...' if len(missing) > 12 else ''}"
            lines.append(f"  {p:<32} {h:>4}/{t:<4}{extra}")
        return "\n".join(lines)
