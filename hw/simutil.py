"""Stimulus framing and Amaranth-simulator drivers for the hw blocks (used by tests/test_hw_*.py).

The framing functions are the executable form of docs/HARDWARE.md "Input words" and "Registers": the
cocotb testbenches and any integrator can use them to turn an ``EncodedTensor`` into what the DMA
channels and the host write to the decoder.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from ..golden.codec import PLANES, EncodedTensor, superblock_chunks
from .decoder import CTRL_CLEAR_ERROR, CTRL_START, Reg

DECODER_PORTS = {"spec.codes": "spec_codes", "spec.signman": "spec_signman",
                 "verif.codes": "verif_codes", "verif.rest": "verif_rest"}


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
    out = []
    for chunk in superblock_chunks(enc, plane):
        out.extend(chunk_words(chunk, word_bits))
    return out


def decoder_program(enc: EncodedTensor, full: bool, start: bool = True) -> list[tuple[int, int]]:
    """Register writes for one tensor (docs/HARDWARE.md "Programming sequence"), START last."""
    cfg = enc.config
    w = [(Reg.MODE, int(full)), (Reg.MBITS, cfg.mantissa_bits), (Reg.KEEP, cfg.keep_count),
         (Reg.GROUP, cfg.group_size), (Reg.NUMEL, enc.numel)]
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


def decoder_planes(enc: EncodedTensor, full: bool, word_bits: int) -> dict[str, list[tuple[int, int]]]:
    spec, verif = PLANES[enc.config.scheme]
    names = spec + (verif if full else ())
    return {DECODER_PORTS[p]: plane_words(enc, p, word_bits) for p in names}


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


async def drive_stream(ctx, port, items, stalls: Stalls, fields=("data", "last")):
    """Send ``items`` (tuples matching ``fields``) on a valid/ready stream, idling at random."""
    for item in items:
        while stalls.idle_now():
            await ctx.tick()
        ctx.set(port.valid, 1)
        for name, value in zip(fields, item):
            ctx.set(getattr(port.payload, name), value)
        await ctx.tick().until(port.ready)
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
