"""Formal property harnesses (Amaranth ``Assert`` / ``Assume`` / ``Cover``) for `make formal` (hw/formal.py).

Each harness is a Component wrapping one DUT; hw/formal.py converts it to RTLIL and hands it to
SymbiYosys. Nothing here depends on a decoder's internals: the decoder harnesses see only the port
interface of docs/datasheets/decoder_c1.md (streams, ``busy``, ``error``, ``error_code``, the ``cfg``
register map), so they run unchanged on any decoder with that interface (C1: ``spec_codes`` +
``spec_signman``; C2: ``spec_mx``; both: ``verif_codes``, ``verif_rest``, ``cfg``, ``out``).

Harnesses
* ``ZeroCounterCheck(W, L, registered)`` -- the zero counter equals its specification (two independent
  specifications, see ``spec_zero_counter`` and ``ZeroCounterCheck``).
* ``DecoderProtocol(config)`` -- every input free (the environment only obeys the stream rules):
  handshake rules, value accounting and the error protocol, as assertions checked by BMC from reset;
  with ``program=stream_program(scheme)`` the same assertions from a programmed tensor (the stream
  check: the first cycles write NUMEL 1..8 and START, no reset), deep enough to reach the output side.
* ``DecoderLiveness(config)`` -- a legal tensor is streamed at full rate with the output always ready:
  no error, every word consumed, values accounted for, and a beat within N cycles.
* ``CsrProtocol()`` -- the AXI4-Lite register block (hw/csr.py) with every input free: AXI response rules
  and what reaches the block's ``cfg``.

``mutant=`` builds a deliberately broken DUT or specification; the runner requires it to FAIL, which
shows that the property can fail and that the failing states are reachable within the depth.
"""
from __future__ import annotations

from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Mux, ResetSignal, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In
from amaranth.utils import bits_for

from ..errors import ConfigError

# Register map and error bits of docs/datasheets/decoder_c1.md (the interface contract, restated here so the
# harness does not import the design it checks).
CTRL, MODE, MBITS, KEEP, GROUP, NUMEL, SPEC_K, VERIF_K = range(8)
CHUNK = 0x08             # format 2.0 (hw/decoder.py Reg.CHUNK): log2 A, A <= 64 and A * G <= 1024
MAX_CHUNK_LOG, MAX_CHUNK_VALUES = 6, 1024
SPEC_SYM = 0x10
ERR_NO_BOOK, ERR_CONFIG = 4, 5
GROUPS = (32, 64, 128, 256)


# ------------------------------------------------------------------------------------------ zero counter

def spec_zero_counter(m: Module, data, W: int, L: int):
    """valid, rank[], end[], consumed of the first L ones of ``data`` by find-first-set-and-clear."""
    bw = bits_for(W)
    rem = data
    valid, rank, end = [], [], []
    prev_end = Const(0, bw)
    consumed = Const(0, bw)
    for i in range(L):
        r = Signal(W, name=f"spec_rem{i}")
        m.d.comb += r.eq(rem)
        found = r != 0
        idx = Const(0, bw)
        for j in reversed(range(W)):
            idx = Mux(r[j], j, idx)
        e = Signal(bw, name=f"spec_end{i}")
        k = Signal(bw, name=f"spec_rank{i}")
        m.d.comb += [e.eq(Mux(found, idx + 1, 0)), k.eq(Mux(found, idx - prev_end, 0))]
        valid.append(found)
        end.append(e)
        rank.append(k)
        consumed = Mux(found, e, consumed)
        prev_end = e
        rem = r & (r - 1)
    return Cat(*valid), Cat(*rank), Cat(*end), consumed


class ZeroCounterCheck(wiring.Component):
    """The zero counter equals its specification for every window (and, registered, every cycle).

    ``spec="chain"``: equality with ``spec_zero_counter`` (L chained find-first-set-and-clear steps,
    a different algorithm from the RTL's parallel prefix count).
    ``spec="char"``: the outputs satisfy the defining relations of FORMAT.md section 7, lane by lane:
    lane i valid => bit end[i]-1 is a one, the rank[i] bits below it (from end[i-1] on) are zero and
    end[i] = end[i-1] + rank[i] + 1; lane i invalid => rank = end = 0 and, for the first invalid lane,
    no one at or above end[i-1]; valid is a thermometer; consumed = end of the last valid lane. These
    relations have exactly one solution (induction over the lanes), so they specify the block without
    an algorithm: only shifts and bit tests, no counting. The solver handles them much better at W >= 64.
    Registered: the specification is evaluated on the previous cycle's window (a register in the
    harness), so the property says "outputs = spec(data one cycle earlier)" in every cycle after reset.

    ``mutant=True``: a wrong specification (consumed one short when the window's top bit is the last
    counted one); the check must fail.
    """

    def __init__(self, window: int, lanes: int, registered: bool, spec: str = "char", mutant: bool = False):
        if spec not in ("chain", "char"):
            raise ConfigError(f"zero counter spec must be chain or char, got {spec!r}")
        self.W, self.L, self.registered, self.spec, self.mutant = window, lanes, registered, spec, mutant
        super().__init__({"data": In(window)})

    def elaborate(self, platform):
        from .zero_counter import ZeroCounter

        m = Module()
        W, L = self.W, self.L
        m.submodules.dut = dut = ZeroCounter(W, L, registered=self.registered)
        m.d.comb += dut.data.eq(self.data)
        data = self.data
        if self.registered:
            q = Signal(W, name="data_q")            # the window the registered outputs belong to
            m.d.sync += q.eq(self.data)
            data = q
        bw = bits_for(W)
        if self.spec == "chain":
            v, r, e, c = spec_zero_counter(m, data, W, L)
            if self.mutant:
                c = Mux(c == W, c - 1, c)
            ok = ((dut.valid == v) & (dut.rank.as_value() == r) & (dut.end.as_value() == e)
                  & (dut.consumed == c))
            m.d.comb += Assert(ok, "zero counter == chained find-first-set specification")
            return m
        ep = Const(0, bw)
        for i in range(L):
            v, r, e = dut.valid[i], dut.rank[i], dut.end[i]
            prev_v = dut.valid[i - 1] if i else Const(1, 1)
            s = Signal(W, name=f"char_s{i}")
            m.d.comb += s.eq(data >> ep)                       # the window from lane i-1's end on
            zeros_below = (s & ~(Const((1 << W) - 1, W) << r)) == 0
            end_ok = (e == ep + r + 1) & (ep + r + 1 <= W)
            m.d.comb += Assert(~v | (prev_v & zeros_below & s.bit_select(r, 1) & end_ok),
                               f"lane {i} valid: its one follows lane {i - 1}'s after rank zeros")
            m.d.comb += Assert(v | ((r == 0) & (e == 0) & (~prev_v | (s == 0))),
                               f"lane {i} invalid: zero outputs, no one left")
            last = v & (~dut.valid[i + 1] if i + 1 < L else Const(1, 1))
            c = dut.consumed
            if self.mutant:
                c = Mux((c == W) & last, c - 1, c)
            m.d.comb += Assert(~last | (c == e), f"consumed = end of lane {i} when it is the last valid")
            ep = e
        m.d.comb += Assert(dut.valid[0] | (dut.consumed == 0), "consumed = 0 without a one")
        return m


# --------------------------------------------------------------------------------------------- decoders

def decoder_scheme(dut) -> str:
    names = set(dut.signature.members)
    if "spec_codes" in names and "spec_signman" in names:
        return "c1"
    if "spec_mx" in names:
        return "c2"
    raise ConfigError("not a decoder interface: needs spec_codes + spec_signman (C1) or spec_mx (C2)")


def _lanes(dut) -> int:
    return dut.signature.members["out"].signature.members["payload"].shape["lanes"].shape.length


def _in_streams(dut) -> list[str]:
    out = []
    for name, mem in dut.signature.members.items():
        if mem.is_signature and mem.flow == In and isinstance(mem.signature, stream.Signature):
            out.append(name)
    return out


class _Past:
    """One-cycle-delayed copies of harness values (Amaranth 0.5 has no Past()); ``rst`` = the previous
    cycle was a reset (or the initial state), so every past-based check is guarded by ``~p.rst``."""

    def __init__(self, m):
        self.m = m
        self.rst = Signal(name="past_rst", init=1)
        m.d.sync += self.rst.eq(ResetSignal())

    def __call__(self, value, name):
        s = Signal(Value.cast(value).shape(), name=f"past_{name}")
        self.m.d.sync += s.eq(value)
        return s


def _held_until_ready(m, p: _Past, valid, ready, values, name, kind):
    """``valid`` is held until ``ready`` and ``values`` are stable while valid & ~ready (a stream's or an AXI
    channel's rule), as ``kind`` (Assert / Assume)."""
    held = p(valid & ~ready, f"{name}_stall")
    same = Const(1, 1)
    for i, v in enumerate(values):
        same = same & (v == p(v, f"{name}_v{i}"))
    m.d.comb += kind(~held | p.rst | (valid & same), f"{name}: valid held until ready, payload stable")


def _stream_rule(m, p: _Past, s, name, kind):
    """The Amaranth lib.stream rule on stream interface ``s``."""
    _held_until_ready(m, p, s.valid, s.ready, [s.payload.as_value()], name, kind)


class _Shadow:
    """The register file as hw/regs/cassandra.rdl defines it, from the observed ``cfg`` writes: reset values
    MODE = draft, MBITS = 0, KEEP = 1, GROUP = 128, NUMEL = 0, CHUNK = 0, no book loaded. ``good`` = START
    would start a tensor (no CONFIG / NO_BOOK error). CHUNK (read by every decoder): START
    with A = 2^CHUNK > 64 or A * G > 1024 is a CONFIG error. (A bad pair mask is CONFIG too, but raised
    after START, while busy: the protocol allows any error while busy.)"""

    def __init__(self, m, cfg, scheme):
        self.full = Signal(name="sh_full")
        self.mbits = Signal(32, name="sh_mbits")
        self.keep = Signal(32, name="sh_keep", init=1)
        self.group = Signal(32, name="sh_group", init=128)
        self.numel = Signal(32, name="sh_numel")
        self.chunk = Signal(32, name="sh_chunk")
        self.spec_loaded = Signal(name="sh_spec_loaded")
        self.verif_loaded = Signal(name="sh_verif_loaded")
        xfer = cfg.valid & cfg.ready
        addr, data = cfg.payload.addr, cfg.payload.data
        for a, reg, val in ((MODE, self.full, data[0]), (MBITS, self.mbits, data), (KEEP, self.keep, data),
                            (GROUP, self.group, data), (NUMEL, self.numel, data), (CHUNK, self.chunk, data),
                            (SPEC_K, self.spec_loaded, 1), (VERIF_K, self.verif_loaded, 1)):
            with m.If(xfer & (addr == a)):
                m.d.sync += reg.eq(val)
        g_ok = Const(0, 1)
        chunk_ok = Const(0, 1)
        for g in GROUPS:
            g_ok = g_ok | (self.group == g)
            limit = min(MAX_CHUNK_LOG, (MAX_CHUNK_VALUES // g).bit_length() - 1)
            chunk_ok = chunk_ok | ((self.group == g) & (self.chunk <= limit))
        self.cfg_ok = Signal(name="sh_cfg_ok")
        self.book_ok = Signal(name="sh_book_ok")
        self.good = Signal(name="sh_good")
        books = (self.spec_loaded if scheme == "c1" else Const(1, 1)) & (~self.full | self.verif_loaded)
        m.d.comb += [
            self.cfg_ok.eq((self.mbits <= 7) & g_ok & (self.keep >= 1) & (self.keep <= self.group)
                           & (self.numel != 0) & chunk_ok),
            self.book_ok.eq(books),
            self.good.eq(self.cfg_ok & self.book_ok),
        ]
        self.start = Signal(name="start_xfer")
        self.clear = Signal(name="clear_xfer")
        m.d.comb += [self.start.eq(xfer & (addr == CTRL) & data[0]), self.clear.eq(xfer & (addr == CTRL) & data[1])]


class _Accounting:
    """Values in == values out: every accepted START queues (NUMEL, GROUP); every output transfer must fit
    the head tensor: count <= values left in its superblock, ``sb_end`` exactly when the superblock is
    full, ``last`` exactly when NUMEL values have been delivered (which pops the tensor). An error
    abandons the tensors (the queue is flushed); the one beat that may still be pending then is not
    accounted. At most two tensors are in flight (one finishing its last beat, one started)."""

    def __init__(self, m, out, L, start_acc, err, numel, group, assert_=Assert):
        q = [{"v": Signal(name=f"acc_q{i}_v"), "n": Signal(32, name=f"acc_q{i}_numel"),
              "g": Signal(9, name=f"acc_q{i}_group")} for i in range(2)]
        done = Signal(32, name="acc_delivered")          # values of the head tensor delivered so far
        sb_left = Signal(9, name="acc_sb_left")          # values left in the head tensor's superblock
        orphan = Signal(name="acc_orphan")               # the pending beat belongs to an abandoned tensor
        xfer = out.valid & out.ready
        cnt = out.payload.count
        head = q[0]
        left = Signal(32, name="acc_left")
        m.d.comb += left.eq(head["n"] - done)
        checked = Signal(name="acc_checked")
        m.d.comb += checked.eq(xfer & head["v"] & ~orphan)
        m.d.comb += [
            assert_(~out.valid | head["v"] | orphan, "out: no beat without a started tensor"),
            assert_(~start_acc | ~(q[0]["v"] & q[1]["v"]), "at most two tensors in flight"),
            assert_(~checked | ((cnt <= sb_left) & (cnt <= left)), "out: count <= values left (no duplicate)"),
            assert_(~checked | (out.payload.sb_end == (cnt == sb_left)), "out: sb_end exactly at superblock end"),
            assert_(~checked | (out.payload.last == (cnt == left)), "out: last exactly at NUMEL values (none lost)"),
        ]
        nxt_left = left - cnt
        nxt_sb = Mux(nxt_left >= head["g"], head["g"], nxt_left)

        def first_sb(n, g):
            return Mux(n >= g, g, n)

        m.d.sync += orphan.eq(out.valid & ~out.ready & (orphan | err))
        with m.If(err):
            m.d.sync += [q[0]["v"].eq(0), q[1]["v"].eq(0)]
        with m.Else():
            pop = checked & out.payload.last
            # after a pop the head is q1 (or the tensor pushed now)
            with m.If(pop):
                m.d.sync += [q[0]["v"].eq(q[1]["v"] | start_acc), q[1]["v"].eq(0), done.eq(0)]
                with m.If(q[1]["v"]):
                    m.d.sync += [q[0]["n"].eq(q[1]["n"]), q[0]["g"].eq(q[1]["g"]),
                                 sb_left.eq(first_sb(q[1]["n"], q[1]["g"]))]
                    with m.If(start_acc):
                        m.d.sync += [q[1]["v"].eq(1), q[1]["n"].eq(numel), q[1]["g"].eq(group)]
                with m.Else():
                    m.d.sync += [q[0]["n"].eq(numel), q[0]["g"].eq(group), sb_left.eq(first_sb(numel, group))]
            with m.Else():
                with m.If(checked):
                    m.d.sync += [done.eq(done + cnt), sb_left.eq(Mux(cnt == sb_left, nxt_sb, sb_left - cnt))]
                with m.If(start_acc):
                    with m.If(~q[0]["v"]):
                        m.d.sync += [q[0]["v"].eq(1), q[0]["n"].eq(numel), q[0]["g"].eq(group), done.eq(0),
                                     sb_left.eq(first_sb(numel, group))]
                    with m.Else():
                        m.d.sync += [q[1]["v"].eq(1), q[1]["n"].eq(numel), q[1]["g"].eq(group)]
        self.head_valid = head["v"]


MUTANTS_PROTOCOL = ("sticky", "drain", "hold")
STREAM_NUMEL_MAX = 8     # the programmed tensor of the stream check: 1..8 values (two beats at L = 4)


def stream_program(scheme: str) -> tuple:
    """The cfg writes of ``DecoderProtocol(program=...)`` for the stream check: the fewest writes that
    start a tensor from the reset registers (MODE = draft, MBITS = 0, KEEP = 1, GROUP = 128, so a pruned
    superblock with a keep bitmap), NUMEL free in 1..STREAM_NUMEL_MAX, C1 also SPEC_K (the speculation
    book, K free in 1..16, its symbols the reset zeros), then START. A free 32-bit NUMEL made every BMC
    step after the decoder's tensor setup (a serial multiply over NUMEL) several minutes (yices, depth 16)."""
    prog = [(NUMEL, (1, STREAM_NUMEL_MAX)), (CTRL, 1)]
    if scheme == "c1":
        prog.insert(0, (SPEC_K, (1, 16)))
    return tuple(prog)
def error_clears_beats(dut) -> bool:
    """The decoder clears every stage in the cycle an error is set (``ERROR_CLEARS_BEATS``, decoder v3): no beat is
    pending while error."""
    return bool(getattr(dut, "ERROR_CLEARS_BEATS", False))


COVERS = ("beat", "stall", "last", "err_beat", "recovered")
COVERS_RESET = ("last", "err_beat", "recovered")
COVERS_BEAT = ("beat", "stall", "last")


class DecoderProtocol(wiring.Component):
    """Every input of the decoder free (BMC from reset), the environment only obeying the stream rules
    on its streams (assumed); reset free as well. Asserted, every cycle:

    * handshake: ``out`` valid held until ready and payload stable while valid & ~ready;
      on a valid beat 1 <= count <= L and lanes >= count are 0;
    * accounting (``_Accounting``): no value lost or duplicated, ``sb_end`` / ``last`` exact;
    * error protocol: ``error == (error_code != 0)``; error sticky (drops only after a CLEAR_ERROR
      write or reset); ``busy`` low while error; no new output beat while error (only a beat already
      pending may complete); every input stream drained (``ready = 1``, ``cfg`` too) while error;
      CLEAR_ERROR with error set clears it; START while error is ignored;
    * START: with a good register set (shadow model ``_Shadow``) busy rises and no error; with a bad one
      the CONFIG bit (bad MBITS/KEEP/GROUP/NUMEL/CHUNK) or else the NO_BOOK bit is set, busy stays low.
      Together with CLEAR this is "recovery": after CLEAR_ERROR a START is accepted again.

    * a decoder with ``ERROR_CLEARS_BEATS`` (v3: an error clears every stage in the cycle it is set): no beat
      pending while error (its from-reset cover set then has no "a beat pending while error").

    ``mutant``: "sticky" (error shown only every other cycle), "drain" (inputs not ready while error),
    "hold" (out.valid dropped while stalled every other cycle) -- each must fail.

    ``program`` (the stream check, ``stream_program``): the environment's first cycles are these cfg
    writes, one per cycle (address fixed, data fixed, free or in a range), without reset; every other
    input is free from cycle 0 on and cfg is free after the program. It starts the decoder from a
    programmed tensor in the fewest cycles, so a BMC reaches the output side even where the first beat
    after reset lies beyond the depth of the from-reset run. ``reset=False``: reset never asserted.
    ``covers``: the Cover statements (cover mode): COVERS_RESET for the from-reset run, COVERS_BEAT
    ("an output beat", "a beat held under backpressure", "a last beat") so a run shows that the output
    side is reached at its depth (otherwise the output assertions would hold vacuously).
    """

    def __init__(self, dut: wiring.Component, mutant: str | None = None, program=None, reset: bool = True,
                 covers=COVERS_RESET):
        if mutant is not None and mutant not in MUTANTS_PROTOCOL:
            raise ConfigError(f"protocol mutant must be one of {', '.join(MUTANTS_PROTOCOL)}, got {mutant!r}")
        for c in covers:
            if c not in COVERS:
                raise ConfigError(f"protocol cover must be one of {', '.join(COVERS)}, got {c!r}")
        self.dut, self.mutant = dut, mutant
        self.program = tuple(program) if program else ()
        # a decoder whose error clears every stage in the cycle it is set (``ERROR_CLEARS_BEATS``, decoder v3)
        # has no beat pending while error: asserted instead of covered
        self.clears = error_clears_beats(dut)
        self.reset, self.covers = reset, tuple(c for c in covers if not (self.clears and c == "err_beat"))
        self.scheme = decoder_scheme(dut)
        self.L = _lanes(dut)
        self.inputs = _in_streams(dut)
        super().__init__(dict(dut.signature.members))

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        m.submodules.dut = dut
        toggle = Signal(name="mut_toggle")
        m.d.sync += toggle.eq(~toggle)
        err_dut = dut.error
        for name in self.inputs:
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(dut, name))
        if self.mutant == "drain":
            for name in self.inputs:              # override the ready the environment sees
                m.d.comb += getattr(self, name).ready.eq(getattr(dut, name).ready & ~err_dut)
        out, dout = self.out, dut.out
        m.d.comb += [out.payload.eq(dout.payload), dout.ready.eq(out.ready), out.valid.eq(dout.valid)]
        if self.mutant == "hold":
            m.d.comb += out.valid.eq(dout.valid & ~(toggle & ~out.ready))
        m.d.comb += [self.busy.eq(dut.busy), self.error_code.eq(dut.error_code), self.error.eq(dut.error)]
        if self.mutant == "sticky":       # error (and its code) dropped every other cycle
            m.d.comb += [self.error.eq(dut.error & toggle), self.error_code.eq(dut.error_code & toggle.replicate(8))]

        p = _Past(m)
        err, busy = self.error, self.busy
        for name in self.inputs:
            _stream_rule(m, p, getattr(self, name), name, Assume)
        if not self.reset:
            m.d.comb += Assume(~ResetSignal())
        if self.program:
            # the environment's first len(program) cycles: one cfg write per cycle at the given address,
            # data = the given value (None: free, (lo, hi): in that range), no reset; every other input
            # free from cycle 0 on
            pc = Signal(range(len(self.program) + 1), name="prog_pc")
            with m.If(pc < len(self.program)):
                m.d.sync += pc.eq(pc + 1)
            cfg = self.cfg
            with m.Switch(pc):
                for i, (a, d) in enumerate(self.program):
                    with m.Case(i):
                        cond = ~ResetSignal() & cfg.valid & (cfg.payload.addr == a)
                        if isinstance(d, tuple):
                            cond = cond & (cfg.payload.data >= d[0]) & (cfg.payload.data <= d[1])
                        elif d is not None:
                            cond = cond & (cfg.payload.data == d)
                        m.d.comb += Assume(cond)
        _stream_rule(m, p, out, "out", Assert)
        L = self.L
        cnt = out.payload.count
        m.d.comb += Assert(~out.valid | ((cnt >= 1) & (cnt <= L)), "out: 1 <= count <= L")
        for i in range(L):
            m.d.comb += Assert(~out.valid | (cnt > i) | (out.payload.lanes[i] == 0), f"out: lane {i} zero if unused")

        sh = _Shadow(m, self.cfg, self.scheme)
        past_err = p(err, "err")
        past_clear = p(sh.clear, "clear")
        past_start = p(sh.start, "start")
        past_busy = p(busy, "busy")
        past_good = p(sh.good, "good")
        past_cfg_ok = p(sh.cfg_ok, "cfg_ok")
        past_out_stall = p(out.valid & ~out.ready, "out_stall")
        new_beat = out.valid & (p.rst | ~past_out_stall)
        live = ~p.rst
        m.d.comb += [
            Assert(err == (self.error_code != 0), "error == (error_code != 0)"),
            Assert(~live | ~past_err | err | past_clear, "error sticky until CLEAR_ERROR or reset"),
            Assert(~err | ~busy, "busy low while error"),
            Assert(~err | ~new_beat, "no new output beat while error"),
            Assert(~self.clears | ~err | ~out.valid, "no beat pending while error (the error cleared every stage)"),
            Assert(~live | ~(past_err & past_clear) | ~err, "CLEAR_ERROR clears the error"),
            Assert(~live | ~(past_err & past_start) | (~busy & err) | past_clear, "START ignored while error"),
            Assert(~live | ~(past_start & ~past_err & ~past_busy & past_good) | (busy & ~err),
                   "START with good registers starts a tensor"),
            Assert(~live | ~(past_start & ~past_err & ~past_busy & ~past_good)
                   | (~busy & Mux(past_cfg_ok, self.error_code[ERR_NO_BOOK], self.error_code[ERR_CONFIG])),
                   "START with bad registers: CONFIG, else NO_BOOK"),
        ]
        for name in self.inputs:
            m.d.comb += Assert(~err | getattr(self, name).ready, f"{name} drained while error")
        start_acc = sh.start & ~err & ~busy & sh.good
        _Accounting(m, out, L, start_acc, err, sh.numel, sh.group[:9])
        # reachability (cover mode): a beat, an error, an error cleared and a tensor started after it
        seen_err = Signal(name="cov_seen_err")
        recovered = Signal(name="cov_recovered")
        with m.If(err):
            m.d.sync += seen_err.eq(1)
        with m.If(seen_err & ~err & busy):
            m.d.sync += recovered.eq(1)
        # one statement per line: the runner names a reached cover by its source line's message
        c = self.covers
        if "beat" in c:
            m.d.comb += Cover(out.valid, "cover: an output beat")
        if "stall" in c:
            m.d.comb += Cover(live & past_out_stall, "cover: a beat held under backpressure (the cycle after)")
        if "last" in c:
            m.d.comb += Cover(out.valid & out.ready & out.payload.last, "cover: a tensor's last beat")
        if "err_beat" in c:
            m.d.comb += Cover(err & out.valid, "cover: a beat pending while error")
        if "recovered" in c:
            m.d.comb += Cover(recovered, "cover: error, CLEAR_ERROR, a new tensor started")
        return m


# ---------------------------------------------------------------------------------------------- liveness

LIVENESS_GROUP = 32
LIVENESS_MAX_NUMEL = 40        # one full superblock and a partial one


class DecoderLiveness(wiring.Component):
    """A legal draft-mode tensor at full rate: the harness programs the registers (MODE = draft and
    MBITS = 0 from reset, KEEP = GROUP = 32, NUMEL = n free in 1..40, the C1 speculation book {sym} with
    sym free, START) one write per cycle, streams every plane's chunks back to back (words valid from cycle 0,
    data bits free where the format leaves them free: signs, elements, X bytes; C1 codes are all rank 0
    = ``sym``), and keeps ``out.ready = 1``, no reset. Asserted:

    * no error (the stimulus is legal); accounting as in ``DecoderProtocol`` (n values, exact
      ``sb_end`` / ``last``); when ``last`` is delivered every word of every plane has been accepted;
    * the values: mantissa 0 (m = 0); C1 also exponent = sym;
    * liveness bound: the first beat at most ``first`` cycles after the cycle that wrote START, then a
      beat in every cycle until ``last``, except at most ``chunk_gap`` idle cycles after each beat that ends a
      chunk (CHUNK keeps its reset value: a chunk is one superblock, its end the beat with ``sb_end``; a decoder
      that reads a chunk's first header in a step of its own, decoder_c2_v3's draft mode, needs 1).
    ``mutant="bound"`` asserts ``first - 1``, ``mutant="gap"`` ``chunk_gap - 1``: each must fail, so the bounds
    are exact.
    """

    def __init__(self, dut: wiring.Component, first: int = 3, mutant: str | None = None, chunk_gap: int = 0):
        if mutant not in (None, "bound", "gap"):
            raise ConfigError(f"liveness mutant must be 'bound' or 'gap', got {mutant!r}")
        if not isinstance(chunk_gap, int) or chunk_gap < 0 or (mutant == "gap" and chunk_gap == 0):
            raise ConfigError(f"liveness chunk_gap must be an int >= 0 (>= 1 for the gap mutant), got {chunk_gap!r}")
        self.dut, self.first, self.mutant, self.chunk_gap = dut, first, mutant, chunk_gap
        self.scheme = decoder_scheme(dut)
        self.L = _lanes(dut)
        planes = ("spec_codes", "spec_signman") if self.scheme == "c1" else ("spec_mx",)
        self.planes = planes
        self.words = {p: dut.signature.members[p].signature.members["payload"].shape["data"].width
                      for p in planes}
        sig = {"n": In(bits_for(LIVENESS_MAX_NUMEL)), "sym": In(8)}
        sig.update({f"{p}_free": In(self.words[p]) for p in planes})
        super().__init__(sig)

    def _chunk_bits(self, plane, ns):
        if plane == "spec_codes":          # n_s rank-0 codes, one bit each
            return ns
        if plane == "spec_signman":        # n_s sign fields (m = 0, all kept)
            return ns
        return 8 * ((ns + 31) >> 5) + 2 * ns   # spec_mx, k = G: X bytes, then (sign, elem) fields

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        m.submodules.dut = dut
        p = _Past(m)
        m.d.comb += Assume(~ResetSignal())
        m.d.comb += Assume((self.n >= 1) & (self.n <= LIVENESS_MAX_NUMEL))
        m.d.comb += Assume(p.rst | ((self.n == p(self.n, "n")) & (self.sym == p(self.sym, "sym"))))

        # register program, one write per cycle
        # MODE (draft) and MBITS (0) keep their reset values
        prog = [(KEEP, LIVENESS_GROUP), (GROUP, LIVENESS_GROUP), (NUMEL, self.n), (SPEC_SYM, self.sym),
                (SPEC_K, 1), (CTRL, 1)]
        pc = Signal(range(len(prog) + 1), name="prog_pc")
        cfg = dut.cfg
        m.d.comb += cfg.valid.eq(pc < len(prog))
        with m.Switch(pc):
            for i, (a, d) in enumerate(prog):
                with m.Case(i):
                    m.d.comb += [cfg.payload.addr.eq(a), cfg.payload.data.eq(d)]
        with m.If(cfg.valid & cfg.ready):
            m.d.sync += pc.eq(pc + 1)
        start_x = cfg.valid & cfg.ready & (pc == len(prog) - 1)

        G = LIVENESS_GROUP
        nsb = Signal(range(LIVENESS_MAX_NUMEL // G + 2), name="nsb")
        m.d.comb += nsb.eq((self.n + G - 1) // G)
        all_in = Const(1, 1)
        for plane in self.planes:
            s = getattr(dut, plane)
            IW = self.words[plane]
            sb = Signal(range(LIVENESS_MAX_NUMEL // G + 2), name=f"{plane}_sb")
            j = Signal(8, name=f"{plane}_word")
            ns = Signal(range(G + 1), name=f"{plane}_ns")
            m.d.comb += ns.eq(Mux(self.n - sb * G >= G, G, self.n - sb * G))
            used = Signal(16, name=f"{plane}_used")
            m.d.comb += used.eq(self._chunk_bits(plane, ns))
            nwords = Signal(8, name=f"{plane}_nwords")
            m.d.comb += nwords.eq(Mux(used == 0, 1, (used + IW - 1) // IW))
            lo = Signal(16, name=f"{plane}_lo")
            m.d.comb += lo.eq(j * IW)
            mask = Signal(IW, name=f"{plane}_mask")    # bits of this word inside the chunk's content
            for b in range(IW):
                m.d.comb += mask[b].eq(lo + b < used)
            content = Const((1 << IW) - 1, IW) if plane == "spec_codes" else getattr(self, f"{plane}_free")
            m.d.comb += [s.valid.eq(sb < nsb), s.payload.data.eq(content & mask),
                         s.payload.last.eq(j == nwords - 1)]
            with m.If(s.valid & s.ready):
                with m.If(j == nwords - 1):
                    m.d.sync += [j.eq(0), sb.eq(sb + 1)]
                with m.Else():
                    m.d.sync += j.eq(j + 1)
            _stream_rule(m, p, s, plane, Assume)         # free data bits stable while stalled
            all_in = all_in & (sb == nsb)
        m.d.comb += dut.out.ready.eq(1)
        out = dut.out
        m.d.comb += Assert(~dut.error, "legal stimulus: no error")
        _Accounting(m, out, self.L, start_x, dut.error, self.n, Const(G, 9))
        m.d.comb += Assert(~(out.valid & out.payload.last) | all_in, "last beat: every word accepted")
        for i in range(self.L):
            lane = out.payload.lanes[i]
            ok = lane[:7] == 0
            if self.scheme == "c1":
                ok = ok & (lane[7:15] == self.sym)
            m.d.comb += Assert(~out.valid | (out.payload.count <= i) | ok, f"lane {i} value")

        # liveness bound
        started = Signal(name="started")          # START written, last beat not yet delivered
        got_beat = Signal(name="got_beat")
        wait = Signal(8, name="wait")             # cycles since the START write without a beat
        with m.If(start_x):
            m.d.sync += [started.eq(1), wait.eq(0), got_beat.eq(0)]
        with m.Elif(started):
            m.d.sync += wait.eq(Mux(out.valid, 0, wait + 1))
            with m.If(out.valid):
                m.d.sync += got_beat.eq(1)
            with m.If(out.valid & out.payload.last):
                m.d.sync += started.eq(0)
        bound = self.first - 1 if self.mutant == "bound" else self.first
        gap = self.chunk_gap - 1 if self.mutant == "gap" else self.chunk_gap
        chunk_open = Signal(name="chunk_open")    # the last beat ended a chunk
        idle = Signal(8, name="chunk_idle")       # idle cycles since it
        with m.If(out.valid):
            m.d.sync += [chunk_open.eq(out.payload.sb_end), idle.eq(0)]
        with m.Else():
            m.d.sync += idle.eq(idle + 1)
        # wait = cycles since the START write cycle - 1: the beat must be valid by wait = bound - 1
        m.d.comb += [
            Assert(~started | got_beat | out.valid | (wait < bound - 1), f"first beat within {bound} cycles of START"),
            Assert(~started | ~got_beat | out.valid | (chunk_open & (idle < gap)),
                   "then a beat every cycle until last" + (f" (at most {gap} idle after a chunk)" if gap else "")),
        ]
        m.d.comb += Cover(out.valid & out.payload.last & (self.n == LIVENESS_MAX_NUMEL), "cover: a 40-value tensor")
        return m


# ------------------------------------------------------------------------------------ AXI4-Lite register block

CSR_BLOCK_BYTES = 0x400             # hw/csr.py: block register a at byte offset 4 a, a < 256
CSR_ID, CSR_ID_VALUE = 0x400, 0x43415353
CSR_IRQ_ENABLE = 0x418
CSR_READABLE = (0x400, 0x404, 0x408, 0x40C, 0x410, 0x414, 0x418)
CSR_WRITABLE = (0x414, 0x418)       # IRQ_STATUS (W1C), IRQ_ENABLE
MUTANTS_CSR = ("bhold", "forward", "early", "stuck", "dma_lost")
COVERS_CSR = ("a block write taken by the block", "a block write refused", "an ID read", "an IRQ_ENABLE write",
              "a DMA write taken while a CPU write waits")


class CsrProtocol(wiring.Component):
    """AXI4-Lite register block (hw/csr.py ``AxiLiteCsr``) with every input free (the block's ``cfg.ready``,
    ``busy`` and ``error_code`` too); the master obeys the AXI rules (AW / W / AR valid held until ready with
    stable address and data, assumed). Asserted, every cycle:

    * handshakes: B and R valid held until ready with BRESP / RDATA / RRESP stable; one write and one read in
      flight (no second AW / W / AR before the response is taken); no B without both halves of a write, no R
      without an AR; an idle slave is ready (AW, W, AR); a write whose halves are in and which is not offered
      to the block is answered within 2 cycles, a read within 2;
    * forwarding: ``cfg`` obeys the stream rule and carries exactly the write's (address / 4, data), once,
      only for an aligned, fully strobed write below 0x400; such a write's B is OKAY exactly when the block
      took it (SLVERR for a START taken while the block's error is set: the block ignores it), and a refusal
      (SLVERR) only after the block was seen not ready; every other write answers OKAY for IRQ_STATUS / IRQ_ENABLE, SLVERR otherwise;
    * reads: OKAY exactly on the map, ID reads 0x43415353, block registers read 0, IRQ_ENABLE reads back the
      last value written to it; ``irq`` only while some interrupt is enabled.

    With the program port (``cfg_dma``, a DMA channel's register-write stream, free but obeying the stream
    rule, assumed): every ``cfg`` transfer is exactly one of the CPU's block write (as above) or the DMA's
    offered write (same payload), a DMA transfer only together with a ``cfg`` transfer of its payload, and
    ``cfg`` still obeys the stream rule while the two sources meet.

    ``mutant``: "bhold" (BVALID dropped every other cycle while stalled), "forward" (cfg data bit 0
    inverted), "early" (B shown while the block write is still offered), "stuck" (AWREADY held low),
    "dma_lost" (the DMA told its write was taken whenever it offers one) -- each must fail. ``covers=True``:
    Cover statements instead (COVERS_CSR), so the passing run is not vacuous.
    """

    def __init__(self, mutant: str | None = None, covers: bool = False):
        from .csr import AxiLiteCsr
        if mutant is not None and mutant not in MUTANTS_CSR:
            raise ConfigError(f"CSR mutant must be one of {', '.join(MUTANTS_CSR)}, got {mutant!r}")
        self.mutant, self.covers = mutant, covers
        self.dut = AxiLiteCsr(kind=1, lanes=4, full_lanes=4, program_port=True)
        super().__init__(dict(self.dut.signature.members))

    def elaborate(self, platform):
        m = Module()
        dut = m.submodules.dut = self.dut
        p = _Past(m)
        toggle = Signal(name="mut_toggle")
        m.d.sync += toggle.eq(~toggle)
        for name, member in self.signature.members.items():
            if name in ("cfg", "cfg_dma"):
                continue
            if member.flow == In:
                m.d.comb += getattr(dut, name).eq(getattr(self, name))
            else:
                m.d.comb += getattr(self, name).eq(getattr(dut, name))
        m.d.comb += [self.cfg.valid.eq(dut.cfg.valid), self.cfg.payload.eq(dut.cfg.payload),
                     dut.cfg.ready.eq(self.cfg.ready)]
        wiring.connect(m, wiring.flipped(self.cfg_dma), dut.cfg_dma)
        if self.mutant == "dma_lost":
            m.d.comb += self.cfg_dma.ready.eq(dut.cfg_dma.ready | self.cfg_dma.valid)
        _stream_rule(m, p, self.cfg_dma, "cfg_dma", Assume)
        if self.mutant == "bhold":
            stalled = p(self.s_axil_bvalid & ~self.s_axil_bready, "bstall")
            m.d.comb += self.s_axil_bvalid.eq(dut.s_axil_bvalid & ~(toggle & stalled))
        if self.mutant == "forward":
            m.d.comb += self.cfg.payload.data.eq(dut.cfg.payload.data ^ 1)
        if self.mutant == "early":
            m.d.comb += self.s_axil_bvalid.eq(dut.s_axil_bvalid | dut.cfg.valid)
        if self.mutant == "stuck":
            m.d.comb += self.s_axil_awready.eq(0)
            m.d.comb += dut.s_axil_awvalid.eq(0)
        _held_until_ready(m, p, self.s_axil_awvalid, self.s_axil_awready, [self.s_axil_awaddr], "aw", Assume)
        _held_until_ready(m, p, self.s_axil_wvalid, self.s_axil_wready, [self.s_axil_wdata, self.s_axil_wstrb], "w", Assume)
        _held_until_ready(m, p, self.s_axil_arvalid, self.s_axil_arready, [self.s_axil_araddr], "ar", Assume)
        kind = Cover if self.covers else Assert
        if not self.covers:
            _held_until_ready(m, p, self.s_axil_bvalid, self.s_axil_bready, [self.s_axil_bresp], "b", Assert)
            _held_until_ready(m, p, self.s_axil_rvalid, self.s_axil_rready, [self.s_axil_rdata, self.s_axil_rresp], "r", Assert)
            _stream_rule(m, p, self.cfg, "cfg", Assert)
        self._writes(m, kind)
        self._reads(m, kind)
        return m

    def _writes(self, m, kind):
        s, rst = self, ResetSignal()
        aw_take, w_take = s.s_axil_awvalid & s.s_axil_awready, s.s_axil_wvalid & s.s_axil_wready
        b_take, cfg_take = s.s_axil_bvalid & s.s_axil_bready, s.cfg.valid & s.cfg.ready
        dma_take = s.cfg_dma.valid & s.cfg_dma.ready
        cpu_take = cfg_take & ~dma_take
        aw_in, w_in = Signal(name="aw_in"), Signal(name="w_in")      # taken since the last B
        addr, wdata, strb = Signal(12, name="wr_addr"), Signal(32, name="wr_data"), Signal(4, name="wr_strb")
        forwarded, could_refuse = Signal(name="wr_forwarded"), Signal(name="wr_could_refuse")
        ignored = Signal(name="wr_start_ignored")                  # taken while error, with START: SLVERR
        irq_en = Signal(2, name="irq_enable_shadow")
        waited = Signal(2, name="wr_waited")                         # cycles answered by neither B nor cfg
        whole = (addr[:2] == 0) & (strb == 0xF)
        to_block = whole & (addr < CSR_BLOCK_BYTES)
        local_ok = Const(0, 1)
        for off in CSR_WRITABLE:
            local_ok = local_ok | (whole & (addr == off))
        both = aw_in & w_in
        is_start = (addr[2:10] == 0) & wdata[0]
        with m.If(aw_take):
            m.d.sync += [aw_in.eq(1), addr.eq(s.s_axil_awaddr)]
        with m.If(w_take):
            m.d.sync += [w_in.eq(1), wdata.eq(s.s_axil_wdata), strb.eq(s.s_axil_wstrb)]
        with m.If(cpu_take):
            m.d.sync += [forwarded.eq(1), ignored.eq(s.error_code.any() & is_start)]
        with m.If(both & ~s.s_axil_bvalid & ~s.cfg.ready):
            m.d.sync += could_refuse.eq(1)
        with m.If(both & ~s.s_axil_bvalid & ~s.cfg.valid):
            m.d.sync += waited.eq(Mux(waited == 3, 3, waited + 1))
        with m.Else():
            m.d.sync += waited.eq(0)
        with m.If(b_take):
            m.d.sync += [aw_in.eq(0), w_in.eq(0), forwarded.eq(0), could_refuse.eq(0), ignored.eq(0)]
        # IRQ_ENABLE as written: the register changes when the write executes, its B appears the cycle after
        en_now = Signal(2, name="irq_enable_now")
        m.d.comb += en_now.eq(Mux(s.s_axil_bvalid & whole & (addr == CSR_IRQ_ENABLE) & (s.s_axil_bresp == 0),
                                  wdata[:2], irq_en))
        m.d.sync += irq_en.eq(en_now)
        self.irq_en = en_now
        if self.covers:
            m.d.comb += [
                Cover(b_take & to_block & forwarded, COVERS_CSR[0]),
                Cover(b_take & to_block & ~forwarded, COVERS_CSR[1]),
                Cover(b_take & whole & (addr == CSR_IRQ_ENABLE) & (s.s_axil_bresp == 0), COVERS_CSR[3]),
                Cover(dma_take & both & to_block & ~s.s_axil_bvalid, COVERS_CSR[4]),
            ]
            return
        m.d.comb += [
            Assert(rst | ~(aw_take & aw_in) & ~(w_take & w_in), "one write in flight: no second AW / W before B"),
            Assert(rst | ~s.s_axil_bvalid | both, "no B without both halves of a write"),
            Assert(rst | aw_in | w_in | s.s_axil_bvalid | (s.s_axil_awready & s.s_axil_wready),
                   "an idle slave is ready for AW and W"),
            Assert(rst | (waited < 3), "a write not offered to the block is answered within 2 cycles"),
            Assert(rst | ~cpu_take | (both & to_block & ~forwarded & (s.cfg.payload.addr == addr[2:10])
                                      & (s.cfg.payload.data == wdata)),
                   "a cfg transfer not the DMA's is the CPU's block write (its register and data), once"),
            Assert(rst | ~s.cfg.valid | (both & to_block & ~forwarded & (s.cfg.payload.addr == addr[2:10])
                                         & (s.cfg.payload.data == wdata))
                   | (s.cfg_dma.valid & (s.cfg.payload.as_value() == s.cfg_dma.payload.as_value())),
                   "cfg offers the CPU's block write or the DMA's offered write"),
            Assert(rst | ~dma_take | (cfg_take & (s.cfg.payload.as_value() == s.cfg_dma.payload.as_value())),
                   "a DMA write is taken only with a cfg transfer of its payload"),
            Assert(rst | ~s.s_axil_bvalid | ~to_block | ((s.s_axil_bresp == 0) == (forwarded & ~ignored)),
                   "a block write's B is OKAY exactly when the block took it (a START taken in error: SLVERR)"),
            Assert(rst | ~s.s_axil_bvalid | ~to_block | forwarded | could_refuse,
                   "a block write is refused only when the block was seen not ready"),
            Assert(rst | ~s.s_axil_bvalid | to_block | (s.s_axil_bresp == Mux(local_ok, 0, 2)),
                   "BRESP of other writes: OKAY for IRQ_STATUS / IRQ_ENABLE, SLVERR otherwise"),
            Assert(rst | ~s.irq | (en_now != 0), "irq only while an interrupt is enabled"),
        ]

    def _reads(self, m, kind):
        s, rst = self, ResetSignal()
        ar_take, r_take = s.s_axil_arvalid & s.s_axil_arready, s.s_axil_rvalid & s.s_axil_rready
        ar_in, ar = Signal(name="ar_in"), Signal(12, name="rd_addr")
        waited = Signal(2, name="rd_waited")
        with m.If(ar_take):
            m.d.sync += [ar_in.eq(1), ar.eq(s.s_axil_araddr)]
        # a read samples its register the cycle after AR is taken (the response the cycle after that)
        rd_en, ar_fresh = Signal(2, name="rd_irq_enable"), Signal(name="ar_fresh")
        m.d.sync += ar_fresh.eq(ar_take)
        with m.If(ar_fresh):
            m.d.sync += rd_en.eq(self.irq_en)
        with m.If(r_take):
            m.d.sync += ar_in.eq(0)
        with m.If(ar_in & ~s.s_axil_rvalid):
            m.d.sync += waited.eq(Mux(waited == 3, 3, waited + 1))
        with m.Else():
            m.d.sync += waited.eq(0)
        block = (ar[:2] == 0) & (ar < CSR_BLOCK_BYTES)
        mapped = block
        for off in CSR_READABLE:
            mapped = mapped | (ar == off)
        if self.covers:
            m.d.comb += Cover(r_take & (ar == CSR_ID), COVERS_CSR[2])
            return
        m.d.comb += [
            Assert(rst | ~(ar_take & ar_in), "one read in flight"),
            Assert(rst | ~s.s_axil_rvalid | ar_in, "no R without an AR"),
            Assert(rst | ar_in | s.s_axil_arready, "an idle slave is ready for AR"),
            Assert(rst | (waited < 3), "a read is answered within 2 cycles"),
            Assert(rst | ~s.s_axil_rvalid | (s.s_axil_rresp == Mux(mapped, 0, 2)), "RRESP: OKAY exactly on the map"),
            Assert(rst | ~s.s_axil_rvalid | (ar != CSR_ID) | (s.s_axil_rdata == CSR_ID_VALUE), "ID reads CASS"),
            Assert(rst | ~s.s_axil_rvalid | ~block | (s.s_axil_rdata == 0), "block registers read 0"),
            Assert(rst | ~s.s_axil_rvalid | (ar != CSR_IRQ_ENABLE) | (s.s_axil_rdata == rd_en),
                   "IRQ_ENABLE reads back the last value written"),
        ]
