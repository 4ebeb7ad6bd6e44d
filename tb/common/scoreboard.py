"""Bit-exact scoreboard: every observed value is compared with the golden model's next expected value."""
from __future__ import annotations

from collections import deque


class Mismatch(AssertionError):
    pass


class Scoreboard:
    def __init__(self, name: str, log=None, width: int = 16, max_reports: int = 10):
        self.name, self.log, self.width, self.max_reports = name, log, width, max_reports
        self.expected: deque = deque()
        self.values = 0           # values compared
        self.words = 0            # output words seen
        self.mismatches = 0
        self.reports: list[str] = []

    def expect(self, values, tags=None):
        """Queue expected values (ints); ``tags`` (same length) describe each for mismatch reports."""
        if tags is None:
            self.expected.extend((int(v), None) for v in values)
        else:
            self.expected.extend((int(v), t) for v, t in zip(values, tags))

    def check(self, got, where: str = ""):
        """Compare a sequence of observed values (one output word's lanes) with the next expected ones."""
        self.words += 1
        for lane, g in enumerate(got):
            g = int(g)
            if not self.expected:
                self._report(f"{self.name}: unexpected extra value 0x{g:0{self.width // 4}x} {where} lane {lane}")
                continue
            e, tag = self.expected.popleft()
            self.values += 1
            if g != e:
                self._report(f"{self.name}: value #{self.values - 1} {where} lane {lane}: got 0x{g:0{self.width // 4}x}, "
                             f"expected 0x{e:0{self.width // 4}x}" + (f" ({tag})" if tag is not None else ""))

    def _report(self, msg):
        self.mismatches += 1
        if len(self.reports) < self.max_reports:
            self.reports.append(msg)
            if self.log:
                self.log.error(msg)

    @property
    def pending(self) -> int:
        return len(self.expected)

    def finish(self):
        """Raise if anything mismatched or an expected value never came out."""
        if self.expected:
            self._report(f"{self.name}: {len(self.expected)} expected values never came out")
            self.expected.clear()
        if self.mismatches:
            raise Mismatch(f"{self.name}: {self.mismatches} mismatches out of {self.values} values; first: "
                           + "; ".join(self.reports[:3]))
