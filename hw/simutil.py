"""Stimulus framing and Amaranth-simulator drivers for the hw blocks (used by tests/test_hw_*.py).

The framing functions are the executable form of docs/datasheets/decoder_c1.md "Words and bits" and "Registers": the
cocotb testbenches and any integrator can use them to turn an ``EncodedTensor`` into what the DMA
channels and the host write to the decoder.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from ..golden.codec import PLANES, EncodedTensor, plane_chunks
from .decoder import CTRL_START, Reg

DECODER_PORTS = {"spec.codes": "spec_codes", "spec.signman": "spec_signman",
                 "verif.codes": "verif_codes", "verif.rest": "verif_rest"}
# Every plane of either scheme -> its decoder port (C2's speculation plane is spec.mx, hw/decoder_c2.py).
PLANE_PORTS = {**DECODER_PORTS, "spec.mx": "spec_mx"}


def chunk_words(chunk: bytes, word_bits: int) -> list[tuple[int, int]]:
    """(data, last) words of one chunk: LSB first, last word zero-padded; an empty chunk is one zero word."""
    nbytes = word_bits // 8
    if not chunk:
        return [(0, 1)]
    words = []
    for off in range(0, len(chunk), nbytes):
        words.append((int.from_bytes(chunk[off: off + nbytes], "little"), 0))
    words[-1] = (words[-1][0], 1)
    return words


def plane_words(enc: EncodedTensor, plane: str, word_bits: int) -> list[tuple[int, int]]:
    """Words of a whole plane, framed per chunk (format 2.0: a chunk holds ``chunk_superblocks``
    superblocks; one in format 1.0)."""
    out = []
    for chunk in plane_chunks(enc, plane):
        out.extend(chunk_words(chunk, word_bits))
    return out


FORMAT2_REGS = (Reg.CHUNK, Reg.SPEC_PAIRS, Reg.VERIF_PAIRS)


def format2_registers(enc: EncodedTensor, full: bool) -> dict[int, int]:
    """The format 2.0 registers a tensor needs: CHUNK = log2 of its superblocks per chunk, the pair masks
    of its books (VERIF_PAIRS only in full mode; C2 has no speculation book). All zero for a v1.0 stream."""
    vals = {int(Reg.CHUNK): int(enc.config.chunk_superblocks).bit_length() - 1}
    if enc.spec_book is not None:
        vals[int(Reg.SPEC_PAIRS)] = int(enc.spec_book.pairs)
    if full:
        vals[int(Reg.VERIF_PAIRS)] = int(enc.verif_book.pairs)
    return vals


def format2_writes(enc: EncodedTensor, full: bool, state: dict | None = None, force: bool = False):
    """Writes of the format 2.0 registers for one tensor. ``state`` holds what the decoder's registers hold
    now (missing = 0, as after reset) and is updated: a register is written only when its value changes,
    so a v1.0 stream after reset gets no extra write (v1 blocks and the KV encoders ignore the addresses
    anyway). ``force``: write every one the tensor needs (when the decoder's state is unknown)."""
    state = {} if state is None else state
    w = []
    for addr, val in format2_registers(enc, full).items():
        if force or state.get(addr, 0) != val:
            w.append((addr, val))
            state[addr] = val
    return w


def track_format2(state: dict, program) -> None:
    """Update ``state`` with the format 2.0 register writes of a hand-made ``program``."""
    for a, d in program:
        if int(a) in (int(r) for r in FORMAT2_REGS):
            state[int(a)] = int(d)


def decoder_program(enc: EncodedTensor, full: bool, start: bool = True, state: dict | None = None,
                    force_format2: bool = False) -> list[tuple[int, int]]:
    """Register writes for one tensor (docs/datasheets/decoder_c1.md "Programming a tensor"), START last. The format
    2.0 registers (CHUNK, SPEC_PAIRS, VERIF_PAIRS) are written when they differ from ``state`` (the
    decoder's current values, default: all zero; see ``format2_writes``)."""
    cfg = enc.config
    w = [(Reg.MODE, int(full)), (Reg.MBITS, cfg.mantissa_bits), (Reg.KEEP, cfg.keep_count),
         (Reg.GROUP, cfg.group_size), (Reg.NUMEL, enc.numel)]
    w += format2_writes(enc, full, state, force_format2)
    if enc.spec_book is not None:              # C2 has no speculation book
        for r, s in enumerate(enc.spec_book.symbols):
            w.append((Reg.SPEC_SYM + r, s))
        w.append((Reg.SPEC_K, enc.spec_book.K))
    if full:
        for r, s in enumerate(enc.verif_book.symbols):
            w.append((Reg.VERIF_SYM + r, s))
        w.append((Reg.VERIF_K, enc.verif_book.K))
    if start:
        w.append((Reg.CTRL, CTRL_START))
    return [(int(a), int(d)) for a, d in w]


def decoder_planes(enc: EncodedTensor, full: bool, word_bits) -> dict[str, list[tuple[int, int]]]:
    """Words per input port; ``word_bits`` is one width for every plane or a {port: width} map (a
    decoder with fewer verification lanes has narrower verification ports: ``dut.port_words``)."""
    spec, verif = PLANES[enc.config.scheme]
    names = spec + (verif if full else ())
    width = (lambda port: word_bits[port]) if isinstance(word_bits, dict) else (lambda port: word_bits)
    return {PLANE_PORTS[p]: plane_words(enc, p, width(PLANE_PORTS[p])) for p in names}


# ------------------------------------------------------------------------------------ simulator drivers

@dataclass
class Stalls:
    """Random handshake timing: probability that a source idles / the sink is not ready in a cycle."""
    idle: float = 0.0
    backpressure: float = 0.0
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    def idle_now(self) -> bool:
        return self.idle > 0 and self.rng.random() < self.idle

    def stall_now(self) -> bool:
        return self.backpressure > 0 and self.rng.random() < self.backpressure


async def until_ready(ctx, port):
    """Tick until ``port.ready`` is 1 at a clock edge (what ``ctx.tick().until(port.ready)`` does), as a plain loop
    of ticks: a driver still waiting when the simulation ends (a block that stopped taking words after an error)
    is then closed quietly; a coroutine suspended inside ``until`` raises from its generator when collected."""
    while True:
        *_, ready = await ctx.tick().sample(port.ready)
        if ready:
            return


async def drive_stream(ctx, port, items, stalls: Stalls, fields=("data", "last")):
    """Send ``items`` (tuples matching ``fields``) on a valid/ready stream, idling at random."""
    for item in items:
        while stalls.idle_now():
            await ctx.tick()
        ctx.set(port.valid, 1)
        for name, value in zip(fields, item):
            ctx.set(getattr(port.payload, name), value)
        await until_ready(ctx, port)
        ctx.set(port.valid, 0)


async def drive_lanes(ctx, port, beats, stalls: Stalls, on_offer=None):
    """Send ``(lanes, last)`` beats on a KV encoder's ``inp`` stream (``lanes``: L bf16 values), idling at
    random; ``on_offer()`` is called as each beat is offered."""
    for lanes, last in beats:
        while stalls.idle_now():
            await ctx.tick()
        ctx.set(port.valid, 1)
        for i, t in enumerate(lanes):
            ctx.set(port.payload.lanes[i], t)
        ctx.set(port.payload.last, last)
        if on_offer is not None:
            on_offer()
        await until_ready(ctx, port)
        ctx.set(port.valid, 0)


async def collect_beats(ctx, port, done, stalls: Stalls, max_cycles: int):
    """Accept output beats with random backpressure until ``done(beats)``; returns (beats, cycles)."""
    beats = []
    cycles = 0
    while not done(beats) and cycles < max_cycles:
        ready = 0 if stalls.stall_now() else 1
        ctx.set(port.ready, ready)
        _, _, valid, payload = await ctx.tick().sample(port.valid, port.payload)
        cycles += 1
        if valid and ready:
            beats.append(payload)
    ctx.set(port.ready, 0)
    return beats, cycles


def beat_values(beats, lanes: int) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Flatten decoder beats to values; also (count, sb_end, last) per beat."""
    vals, meta = [], []
    for b in beats:
        n = int(b.count)
        vals.extend(int(b.lanes[i]) for i in range(n))
        meta.append((n, int(b.sb_end), int(b.last)))
    return np.array(vals, dtype=np.uint16), meta


@dataclass
class DecodeJob:
    """One tensor for ``run_decoder``: its encoding, the mode, and optional stream overrides (for malformed
    stimuli): ``planes`` replaces the framed plane words, ``program`` the register writes."""
    enc: EncodedTensor
    full: bool
    planes: dict | None = None
    program: list | None = None
    pre_wait: int = 0          # cycles the host waits before programming this job (e.g. to let a drain finish)
    gate: bool = False         # the DMA of this job starts only after its program was written


@dataclass
class DecodeResult:
    values: list            # per job: np.ndarray of the values of its beats
    meta: list              # per job: (count, sb_end, last) of every beat
    cycles: int             # clock cycles from the first START to the last beat (or to the timeout)
    error_code: int
    busy: int
    trace: str = ""         # with ``trace``: out.valid per cycle from the first START on ("B" / ".")


def run_decoder(dut, jobs: list[DecodeJob], stalls: Stalls | None = None, max_cycles: int = 200_000,
                expect_error: bool = False, trace: bool = False) -> DecodeResult:
    """Simulate ``dut`` (a DecoderC1 or DecoderC2) on ``jobs`` in sequence with random idles on every input and random
    backpressure on the output. The host waits for ``busy = 0`` before programming the next tensor."""
    from amaranth.sim import Simulator

    stalls = stalls or Stalls()
    lanes, word = dut.lanes, dut.word
    feeds: dict[str, list] = {p: [] for p in PLANE_PORTS.values()}     # (job index, words) segments
    for j, job in enumerate(jobs):
        planes = (job.planes if job.planes is not None
                  else decoder_planes(job.enc, job.full, getattr(dut, "port_words", None) or word))
        for port, items in planes.items():
            feeds[port].append((j, items))
    state = {"beats": [], "cycles": 0, "err": 0, "busy": 0, "started": False, "programmed": 0, "trace": []}
    n_last_expected = len(jobs)
    regs2: dict = {}                 # the decoder's format 2.0 registers (reset: 0)
    programs = []
    for job in jobs:
        if job.program is not None:
            track_format2(regs2, job.program)
            programs.append(job.program)
        else:
            programs.append(decoder_program(job.enc, job.full, state=regs2))

    async def host(ctx):
        for job, prog in zip(jobs, programs):
            while ctx.get(dut.busy) or (ctx.get(dut.cfg.valid) and not ctx.get(dut.cfg.ready)):
                await ctx.tick()
            await ctx.tick()
            for _ in range(job.pre_wait):
                await ctx.tick()
            await drive_stream(ctx, dut.cfg, prog, Stalls(idle=stalls.idle, seed=stalls.seed + 101),
                               fields=("addr", "data"))
            state["started"] = True
            state["programmed"] += 1
            await ctx.tick()
            if expect_error and ctx.get(dut.error):
                break

    def feeder(port, segments, seed):
        async def proc(ctx):
            st = Stalls(idle=stalls.idle, seed=seed)
            for j, items in segments:
                while jobs[j].gate and state["programmed"] <= j:
                    await ctx.tick()
                await drive_stream(ctx, getattr(dut, port), items, st)
        return proc

    async def sink(ctx):
        out = dut.out
        rng = Stalls(backpressure=stalls.backpressure, seed=stalls.seed + 7)
        lasts = 0
        idle_after_error = 0
        while state["cycles"] < max_cycles:
            ready = 0 if rng.stall_now() else 1
            ctx.set(out.ready, ready)
            _, _, valid, payload, err = await ctx.tick().sample(out.valid, out.payload, dut.error)
            if state["started"]:
                state["cycles"] += 1
                if trace:
                    state["trace"].append("B" if valid else ".")
            if valid and ready:
                state["beats"].append(payload)
                lasts += int(payload.last)
                if lasts == n_last_expected:
                    break
            if err and expect_error:
                idle_after_error += 1
                if idle_after_error > 64:          # let the drain run a while, then stop
                    break
        state["err"] = ctx.get(dut.error_code)
        state["busy"] = ctx.get(dut.busy)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(host, background=True)
    for i, (port, items) in enumerate(feeds.items()):
        if items:
            sim.add_testbench(feeder(port, items, stalls.seed * 13 + i), background=True)
    sim.add_testbench(sink)
    sim.run()
    # Split the beats per job at the `last` flags.
    values, meta, cur = [], [], []
    for b in state["beats"]:
        cur.append(b)
        if int(b.last):
            v, mt = beat_values(cur, lanes)
            values.append(v)
            meta.append(mt)
            cur = []
    if cur:
        v, mt = beat_values(cur, lanes)
        values.append(v)
        meta.append(mt)
    return DecodeResult(values, meta, state["cycles"], state["err"], state["busy"], "".join(state["trace"]))


# ------------------------------------------------------------------------------------------- encoder

ENCODER_PORTS = ("spec_codes", "spec_signman", "verif_codes", "verif_rest")


def encoder_program(cfg, books) -> list[tuple[int, int]]:
    """Register writes of the KV encoder: MBITS, KEEP, GROUP and both books (sizes written last; C2 has no
    speculation book: ``books = (None, verif)``)."""
    spec, verif = books
    w = [(Reg.MBITS, cfg.mantissa_bits), (Reg.KEEP, cfg.keep_count), (Reg.GROUP, cfg.group_size)]
    if spec is not None:
        w += [(Reg.SPEC_SYM + r, s) for r, s in enumerate(spec.symbols)] + [(Reg.SPEC_K, spec.K)]
    w += [(Reg.VERIF_SYM + r, s) for r, s in enumerate(verif.symbols)] + [(Reg.VERIF_K, verif.K)]
    return [(int(a), int(d)) for a, d in w]


def expected_plane_words(enc: EncodedTensor, word_bits: int) -> dict[str, list[tuple[int, int]]]:
    """Every plane of the tensor's scheme, framed as the encoder emits it (port name -> words)."""
    spec, verif = PLANES[enc.config.scheme]
    return {PLANE_PORTS[p]: plane_words(enc, p, word_bits) for p in spec + verif}


@dataclass
class EncodeResult:
    planes: dict            # port name -> list of (data, last) words
    cycles: int             # cycles from the first input beat to the last output word
    error_code: int


def run_encoder(dut, vectors: np.ndarray, program: list, stalls: Stalls | None = None,
                max_cycles: int = 100_000, frame_last=None, after: tuple | None = None,
                wait_for_host: bool = False) -> EncodeResult:
    """Simulate the KV encoder on ``vectors`` ([n, G] uint16), program first; collect every plane's words.
    ``frame_last(v, b)`` overrides the `last` flag of beat b of vector v (malformed framing tests).
    ``after`` = (program, vectors): a second batch (register writes, then vectors) driven once the first is
    in. An error ends the run once the encoder is no longer busy; with ``wait_for_host`` only once every
    batch has been driven as well."""
    from amaranth.sim import Simulator

    stalls = stalls or Stalls()
    L = dut.lanes

    def beats_of(vecs):
        n, G = vecs.shape
        beats = []
        for v in range(n):
            for b in range(G // L):
                last = int(b == G // L - 1) if frame_last is None else frame_last(v, b)
                beats.append((tuple(int(t) for t in vecs[v, b * L:(b + 1) * L]), last))
        return beats

    batches = [(program, vectors)] + ([after] if after else [])
    n_chunks = sum(len(vecs) for _, vecs in batches)
    ports = getattr(dut, "PLANES", ENCODER_PORTS)     # C1: four planes, C2 (hw/encoder_c2.py): three
    got = {p: [] for p in ports}
    state = {"first": None, "lastword": 0, "cycle": 0, "err": 0, "host_done": False}

    async def host(ctx):
        st = Stalls(idle=stalls.idle, seed=stalls.seed + 1)
        for prg, vecs in batches:
            await drive_stream(ctx, dut.cfg, prg, Stalls(), fields=("addr", "data"))
            await drive_lanes(ctx, dut.inp, beats_of(vecs), st, on_offer=first_offer)
        state["host_done"] = True

    def first_offer():
        if state["first"] is None:
            state["first"] = state["cycle"]

    def sink(p, seed):
        async def proc(ctx):
            port = getattr(dut, p)
            st = Stalls(backpressure=stalls.backpressure, seed=seed)
            while True:
                rdy = 0 if st.stall_now() else 1
                ctx.set(port.ready, rdy)
                _, _, v, d, last = await ctx.tick().sample(port.valid, port.payload.data, port.payload.last)
                if v and rdy:
                    got[p].append((d, last))
                    state["lastword"] = state["cycle"]
        return proc

    async def clock(ctx):
        idle = 0
        while state["cycle"] < max_cycles:
            await ctx.tick()
            state["cycle"] += 1
            done = all(sum(l for _, l in got[p]) >= n_chunks for p in ports)
            host_ok = state["host_done"] or not wait_for_host
            if done or (ctx.get(dut.error) and host_ok and not ctx.get(dut.busy)):   # completed vectors out
                idle += 1
                if idle > 32:
                    break
        state["err"] = ctx.get(dut.error_code)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(host, background=True)
    for i, p in enumerate(ports):
        sim.add_testbench(sink(p, stalls.seed * 7 + i), background=True)
    sim.add_testbench(clock)
    sim.run()
    cycles = state["lastword"] - (state["first"] or 0) + 1
    return EncodeResult(got, cycles, state["err"])


# ------------------------------------------------------------------------- AXI4-Lite master (hw/csr.py)

async def axil_write(ctx, dut, addr: int, data: int, strb: int = 0xF, order: str = "together", gap: int = 0) -> int:
    """One AXI4-Lite write on ``dut``'s ``s_axil_*`` ports; returns BRESP once the response is taken.
    ``order``: "together" (AW and W in the same cycle, as a CPU store), "aw" (AW first, W ``gap`` cycles after
    AW was taken) or "w" (W first)."""
    chans = {"aw": (("awaddr", addr),), "w": (("wdata", data), ("wstrb", strb))}

    def offer(ch):
        for port, value in chans[ch]:
            ctx.set(getattr(dut, f"s_axil_{port}"), value)
        ctx.set(getattr(dut, f"s_axil_{ch}valid"), 1)

    async def send(ch):
        offer(ch)
        await ctx.tick().until(getattr(dut, f"s_axil_{ch}ready"))
        ctx.set(getattr(dut, f"s_axil_{ch}valid"), 0)

    if order == "together":
        for ch in chans:
            offer(ch)
        taken = {"aw": False, "w": False}
        while not all(taken.values()):
            *_, awr, wr = await ctx.tick().sample(dut.s_axil_awready, dut.s_axil_wready)
            for ch, rdy in (("aw", awr), ("w", wr)):
                if rdy and not taken[ch]:
                    taken[ch] = True
                    ctx.set(getattr(dut, f"s_axil_{ch}valid"), 0)
    else:
        first, second = ("aw", "w") if order == "aw" else ("w", "aw")
        await send(first)
        for _ in range(gap):
            await ctx.tick()
        await send(second)
    ctx.set(dut.s_axil_bready, 1)
    *_, resp = await ctx.tick().sample(dut.s_axil_bresp).until(dut.s_axil_bvalid)
    ctx.set(dut.s_axil_bready, 0)
    return resp


async def axil_read(ctx, dut, addr: int) -> tuple[int, int]:
    """One AXI4-Lite read; returns (RDATA, RRESP)."""
    ctx.set(dut.s_axil_araddr, addr)
    ctx.set(dut.s_axil_arvalid, 1)
    await ctx.tick().until(dut.s_axil_arready)
    ctx.set(dut.s_axil_arvalid, 0)
    ctx.set(dut.s_axil_rready, 1)
    *_, data, resp = await ctx.tick().sample(dut.s_axil_rdata, dut.s_axil_rresp).until(dut.s_axil_rvalid)
    ctx.set(dut.s_axil_rready, 0)
    return data, resp
