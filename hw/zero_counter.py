"""Parallel zero counter: the boundaries of up to L rank-unary codes in a W-bit window, in one cycle.

docs/FORMAT.md section 7. A rank-unary code of rank ``r`` is ``r`` zeros followed by a one, stored LSB
first, so bit 0 of the window is the next stream bit and every code ends at a one. Finding the first
``L`` codes of the window is therefore finding the positions of its first ``L`` ones.

Structure (log depth, no ripple chain over lanes):

1. a parallel-prefix (Sklansky) count of the ones below every bit position, saturated at ``L``
   (``cnt[j]`` = ones in ``data[0:j]``; saturating keeps every adder ``bits_for(L)+1`` bits wide);
2. lane ``i`` owns bit ``j`` iff ``data[j] & (cnt[j] == i)`` -- a one-hot column per lane;
3. one-hot -> binary OR trees give the position ``pos[i]`` of lane ``i``'s one;
4. ``end[i] = pos[i] + 1`` (bits consumed through lane ``i``) and ``rank[i] = pos[i] - end[i-1]``
   (the zero run in front of the one), all lanes in parallel.

Escapes (``K`` zeros, a one, 8 raw bits) are *not* interpreted here: the raw bits may contain ones, so
a consumer must ignore the lanes after the first lane whose rank equals its codebook size ``K``
(hw/decoder.py does).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from ..golden.config import MAX_CODE_BITS

MAX_WINDOW = 1024          # a sanity bound: wider windows make no sense for a per-cycle decoder


def prefix_counts(m: Module, bits: Value, cap: int, name: str) -> list:
    """Exclusive prefix popcounts of ``bits``, saturated at ``cap`` (``bits`` may also be a list of small
    counts: their prefix sums, every sum of two or more saturated at ``cap``, the first count as it is).

    Returns ``out`` with ``out[j]`` = number of ones in ``bits[0:j]`` (min ``cap``), for ``j`` in
    ``0..len(bits)``. Sklansky prefix: ``ceil(log2(n))`` levels of small saturating adders, every node a
    named signal (keeps the netlist shallow and the simulator fast).
    """
    width = bits_for(cap)
    n = len(bits)
    node = [bits[j] for j in range(n)]
    span, level = 1, 0
    while span < n:
        nxt = list(node)
        for j in range(n):
            if (j // span) % 2 == 1:
                src = (j // span) * span - 1          # last node of the previous block of size span
                total = node[j] + node[src]
                s = Signal(width, name=f"{name}_l{level}_{j}")
                m.d.comb += s.eq(Mux(total > cap, cap, total))
                nxt[j] = s
        node = nxt
        span *= 2
        level += 1
    return [Const(0, width)] + node


def onehot_to_index(onehot: Value, width: int) -> Value:
    """Binary index of the set bit of a one-hot vector (0 when none): one OR reduction per output bit."""
    n = len(onehot)
    masks = [sum(1 << j for j in range(n) if (j >> b) & 1) for b in range(width)]
    return Cat(*[(onehot & mask).any() for mask in masks])


SELECT_GROUP = 8         # window bits per popcount group of a select network


def group_prefix(m, win, cap: int, name: str):
    """Ones per ``SELECT_GROUP``-bit group of ``win`` and their exclusive prefix sums, saturated at ``cap``:
    ``(groups, prefix)`` with ``prefix[g]`` = ones in groups ``0..g-1`` (``len(win) / SELECT_GROUP + 1``
    entries).
    The counts' saturated prefix is zero_counter.prefix_counts: a select network's shared first half."""
    ng = len(win) // SELECT_GROUP
    groups = [win[SELECT_GROUP * g: SELECT_GROUP * (g + 1)] for g in range(ng)]
    counts = []
    for g in range(ng):
        c = Signal(bits_for(SELECT_GROUP), name=f"{name}_c{g}")
        m.d.comb += c.eq(sum(groups[g][i] for i in range(SELECT_GROUP)))
        counts.append(c)
    return groups, prefix_counts(m, counts, cap, name)


def select_one(m, groups, prefix, n, name: str):
    """Position of the ``n``-th one (from 0) of the window split into ``groups`` with ``prefix`` from
    ``group_prefix``: the group that holds it (one compare pair per group), then the one inside it."""
    ng = len(groups)
    hit = Signal(ng, name=f"{name}_grp")
    # (a constant-zero first prefix needs no lower bound: lint flags the always-true compare)
    first_free = isinstance(prefix[0], Const) and prefix[0].value == 0
    m.d.comb += hit.eq(Cat(*[(n < prefix[g + 1]) if g == 0 and first_free else (prefix[g] <= n) & (n < prefix[g + 1])
                             for g in range(ng)]))
    bits = Signal(SELECT_GROUP, name=f"{name}_bits")
    local = Signal(exact_log2(SELECT_GROUP), name=f"{name}_local")
    m.d.comb += [bits.eq(Cat(*[Cat(*[groups[g][i] & hit[g] for g in range(ng)]).any()
                               for i in range(SELECT_GROUP)])),
                 local.eq(Cat(*[Cat(*[(n - prefix[g])[b] & hit[g] for g in range(ng)]).any()
                                for b in range(len(local))]))]
    run = 0
    sel = []
    for i in range(SELECT_GROUP):
        sel.append(bits[i] & (run == local))
        run = run + bits[i]
    return Cat(onehot_to_index(Cat(*sel), exact_log2(SELECT_GROUP)), onehot_to_index(hit, max(1, bits_for(ng - 1))))


def zc_signature(window: int, lanes: int) -> dict:
    pos_w = bits_for(window)          # end positions run 1..window
    return {
        "data": In(window),
        "valid": Out(lanes),
        "rank": Out(data.ArrayLayout(pos_w, lanes)),
        "end": Out(data.ArrayLayout(pos_w, lanes)),
        "consumed": Out(pos_w),
    }


class ZeroCounter(wiring.Component):
    """Positions of the first ``lanes`` ones of a ``window``-bit word (bit 0 = next stream bit).

    Ports (all combinational unless ``registered``; then outputs follow ``data`` by one cycle)
        data      In(W)            the window; bit 0 is the next bit of the stream
        valid     Out(L)           lane i found a one (thermometer: valid[i] implies valid[i-1])
        rank      Out(L x bw)      lane i: zeros between lane i-1's one (or bit 0) and its own one
        end       Out(L x bw)      lane i: bits consumed through its one (position of the one + 1)
        consumed  Out(bw)          bits consumed by all valid lanes (end of the last valid lane, 0 if none)
    with ``bw = bits_for(W)``.
    """

    def __init__(self, window: int = 64, lanes: int = 8, registered: bool = False):
        if not isinstance(window, int) or not MAX_CODE_BITS <= window <= MAX_WINDOW:
            raise ConfigError(f"zero counter window must be {MAX_CODE_BITS}..{MAX_WINDOW} bits (one escape "
                              f"code must fit), got {window!r}")
        if not isinstance(lanes, int) or not 1 <= lanes <= window:
            raise ConfigError(f"zero counter lanes must be 1..window, got {lanes!r}")
        self.window, self.lanes, self.registered = window, lanes, bool(registered)
        super().__init__(zc_signature(window, lanes))

    def elaborate(self, platform):
        m = Module()
        W, L = self.window, self.lanes
        pos_w = bits_for(W)
        cnt = prefix_counts(m, self.data, L, "zc")
        dom = m.d.sync if self.registered else m.d.comb

        # One-hot decode of every prefix count, then lane i's column: the bits whose count equals i.
        dec = []
        for j in range(W):
            d = Signal(L, name=f"zc_dec{j}")
            m.d.comb += d.eq(Const(1, L + 1) << cnt[j])
            dec.append(d)
        ends, valids = [], []
        for i in range(L):
            owner = Signal(W, name=f"owner{i}")
            m.d.comb += owner.eq(self.data & Cat(*[dec[j][i] for j in range(W)]))
            end = Signal(pos_w, name=f"end{i}")
            m.d.comb += end.eq(onehot_to_index(owner, pos_w) + 1)
            ends.append(end)
            valids.append(cnt[W] > i)
        for i in range(L):
            prev = ends[i - 1] if i else Const(0, pos_w)
            dom += [
                self.valid[i].eq(valids[i]),
                self.end[i].eq(Mux(valids[i], ends[i], 0)),
                self.rank[i].eq(Mux(valids[i], ends[i] - 1 - prev, 0)),
            ]
        # consumed = end of the last valid lane: lane i is last iff valid[i] & ~valid[i+1].
        consumed = Const(0, pos_w)
        for i in range(L):
            last = valids[i] & ~valids[i + 1] if i + 1 < L else valids[i]
            consumed = consumed | Mux(last, ends[i], 0)
        dom += self.consumed.eq(consumed)
        return m
