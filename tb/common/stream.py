"""valid/ready stream agents for cocotb 2 (Amaranth ``lib.stream`` port naming: ``<name>__valid``,
``<name>__ready``, ``<name>__payload``).

All agents of a testbench are stepped by one ``Engine`` loop (one RisingEdge + one ReadOnly trigger per
cycle, not one coroutine per interface), which keeps per-cycle Python overhead low:

* after the rising edge every agent *drives* (sources: valid/payload, sinks: ready);
* in the ReadOnly phase every agent *samples* (``valid & ready`` = a transfer at the next edge).

Sources insert random idle cycles between items (valid is never dropped and the payload never changes while
an item waits, as the stream rules require); sinks apply random backpressure. Both follow a ``Pacer``
profile, and both record their stall patterns into the shared coverage.
"""
from __future__ import annotations

import random
from collections import deque
from typing import Callable

from cocotb.triggers import ReadOnly, RisingEdge

# Traffic profiles: probability that an agent is *active* (source offers / sink accepts) in a cycle, or a
# bursty on/off process. "full" = no idle cycles / no backpressure.
PROFILES = ("full", "light", "random", "heavy", "bursty")


MAX_OFF_RUN = 96     # cycles: the longest idle run a bursty pacer makes


class Pacer:
    def __init__(self, rng: random.Random, profile: str = "random"):
        if profile not in PROFILES:
            raise ValueError(f"unknown traffic profile {profile!r}")
        self.rng, self.profile = rng, profile
        self._run, self._on = 0, True

    def active(self) -> bool:
        p = self.profile
        if p == "full":
            return True
        if p == "light":
            return self.rng.random() >= 0.1
        if p == "random":
            return self.rng.random() >= 0.5
        if p == "heavy":
            return self.rng.random() >= 0.8
        # bursty: alternating on/off runs of geometric length (mean 8 on, 6 off, sometimes 40 off); an off
        # run is capped at MAX_OFF_RUN cycles, inside every hang budget (a register write gets 140 cycles)
        if self._run <= 0:
            self._on = not self._on
            mean = 8 if self._on else (40 if self.rng.random() < 0.1 else 6)
            self._run = 1 + int(self.rng.expovariate(1.0 / mean))
            if not self._on:
                self._run = min(self._run, MAX_OFF_RUN)
        self._run -= 1
        return self._on


def _stall_bin(n: int) -> str:
    return "1" if n == 1 else "2-3" if n <= 3 else "4-15" if n <= 15 else "16+"


STALL_BINS = ["1", "2-3", "4-15", "16+"]


def lane_packer(lanes: int):
    """Encoder of ``(lanes, last)`` beats for a Source: 16 bits per lane, ``last`` right above the lanes
    (the ``inp`` port of the KV encoders)."""
    def pack(beat):
        vals, last = beat
        v = 0
        for i, x in enumerate(vals):
            v |= int(x) << (16 * i)
        return v | (last << (16 * lanes))
    return pack


class _Agent:
    def __init__(self, dut, prefix: str, cov=None):
        self.prefix = prefix
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload", None)
        self.cov = cov
        self.transfers = 0
        self._stall = 0          # current run of cycles with valid & !ready
        self._idle = 0           # current run of cycles with !valid
        if cov is not None:
            cov.define(f"{prefix}.stall_run", STALL_BINS)
            cov.define(f"{prefix}.idle_run", STALL_BINS)

    def _track(self, v: bool, r: bool):
        if self.cov is None:
            return
        if v and not r:
            self._stall += 1
        elif self._stall:
            self.cov.hit(f"{self.prefix}.stall_run", _stall_bin(self._stall))
            self._stall = 0
        if not v:
            self._idle += 1
        elif self._idle:
            self.cov.hit(f"{self.prefix}.idle_run", _stall_bin(self._idle))
            self._idle = 0

    def drive(self):
        pass

    def sample(self):
        pass

    def reset(self):
        pass


class Source(_Agent):
    """Offers items (ints, or whatever ``encode`` turns into an int) in order."""

    def __init__(self, dut, prefix: str, pacer: Pacer, cov=None, encode: Callable | None = None,
                 on_transfer: Callable | None = None):
        super().__init__(dut, prefix, cov)
        self.pacer, self.encode, self.on_transfer = pacer, encode, on_transfer
        self.queue: deque = deque()
        self.cur = None
        self._v = None           # last value written to valid (None: not driven yet)

    def send(self, items):
        self.queue.extend(items)

    @property
    def idle(self) -> bool:
        return self.cur is None and not self.queue

    def reset(self):
        self.queue.clear()
        self.cur = None
        self._v = None

    def drive(self):
        if self._v is None and self.payload is not None and self.cur is None:
            # idle payload = 0 rather than X (Icarus would propagate X through the DUT's muxes)
            self.payload.value = 0
        if self.cur is None and self.queue and self.pacer.active():
            self.cur = self.queue.popleft()
            if self.payload is not None:
                self.payload.value = self.encode(self.cur) if self.encode else self.cur
        v = 1 if self.cur is not None else 0
        if v != self._v:
            self.valid.value = v
            self._v = v

    def sample(self):
        rv = self.ready.value
        if not rv.is_resolvable:
            raise AssertionError(f"{self.prefix}__ready is {rv} (not 0/1)")
        r = bool(rv)
        v = self.cur is not None
        self._track(v, r)
        if v and r:
            self.transfers += 1
            if self.on_transfer:
                self.on_transfer(self.cur)
            self.cur = None


class Sink(_Agent):
    """Accepts transfers under random backpressure; calls ``on_item(payload_int)`` for every transfer."""

    def __init__(self, dut, prefix: str, pacer: Pacer, on_item: Callable[[int], None], cov=None):
        super().__init__(dut, prefix, cov)
        self.pacer, self.on_item = pacer, on_item
        self._r = None

    def reset(self):
        self._r = None

    def drive(self):
        r = 1 if self.pacer.active() else 0
        if r != self._r:
            self.ready.value = r
            self._r = r

    def sample(self):
        vv = self.valid.value
        if not vv.is_resolvable:
            raise AssertionError(f"{self.prefix}__valid is {vv} (not 0/1)")
        v = bool(vv)
        r = bool(self._r)  # our own ready, as driven this cycle
        self._track(v, r)
        if v and r:
            self.transfers += 1
            self.on_item(self.payload.value.to_unsigned() if self.payload is not None else 0)


class HangError(AssertionError):
    pass


class Engine:
    """Steps every agent once per clock cycle; ``watchers`` are called in the ReadOnly phase too."""

    def __init__(self, clk, agents, watchers=()):
        self.clk = clk
        self.agents = list(agents)
        self.watchers = list(watchers)
        self.cycles = 0

    async def step(self):
        await RisingEdge(self.clk)
        for a in self.agents:
            a.drive()
        await ReadOnly()
        for a in self.agents:
            a.sample()
        for w in self.watchers:
            w()
        self.cycles += 1

    async def run_until(self, done: Callable[[], bool], max_cycles: int, what: str = "stream"):
        start = self.cycles
        while not done():
            if self.cycles - start >= max_cycles:
                raise HangError(f"{what}: no completion after {max_cycles} cycles (hang or lost data)")
            await self.step()
        return self.cycles - start
