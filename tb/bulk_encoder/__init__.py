"""Bulk co-simulation of the online KV encoders: batches of K/V vectors through the exported encoder
Verilog (C1 ``encoder_kv_c1_*`` or C2 ``encoder_kv_c2_*``, chosen by ``config``, hw/configs.py) with a
compiled Verilator C++ harness (tb/bulk_encoder/harness_enc.cpp), no per-cycle Python; every emitted
plane word compared with the golden KV encoder (``golden.kv.encode_kv``) framed as docs/HARDWARE.md
"Input words" (one chunk per vector per plane, ``last`` on its final word).

    encode_many_with_rtl([(bits[n, G], cfg, books), ...], config=...) -> [EncodedTensor, ...]
    rtl_kv_encoder(config)   # drop-in for golden.kv.encode_kv(bits, cfg, books), with .many(batches), .stats

The harness is built once per encoder configuration into build/bulk_encoder/<config>/ (file-locked,
rebuilt when the Verilog or harness_enc.cpp changes), as tb/bulk does for the decoders. The RTL KV
encoders write format 3.0 with one superblock per chunk and books without pair groups: golden's KV policy
(docs/FORMAT.md §3.1); anything else is refused with a ConfigError. Raises ToolMissingError
when Verilator or a C++ compiler is missing, RtlError when the encoder raises its error output, hangs,
breaks the stream protocol, or (``encode_many_with_rtl``) emits a word that differs from golden.
"""
from __future__ import annotations

import os
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codec import PLANES, EncodedTensor, plane_offsets
from cassandra_rtl.golden.kv import encode_kv

from ..bulk import verilate_harness
from ..common.build import ROOT, run_harness
from ..common.tools import ensure_verilator
from ..encoder.regs import program

HARNESS = Path(__file__).with_name("harness_enc.cpp")
BULK_ROOT = Path(os.environ.get("TB_BULK_ENCODER_ROOT", ROOT / "build" / "bulk_encoder"))
DEFAULT_CONFIG = {"c1": "encoder_kv_c1_l2", "c2": "encoder_kv_c2_l2"}
TOP = "cassandra_encoder"
EXIT_WHY = {2: "usage / bad job file", 3: "encoder error output", 4: "hang", 5: "protocol violation"}


class RtlError(RuntimeError):
    """The RTL encoder raised its error output, hung, broke the stream protocol or differs from golden."""


@dataclass
class EncoderStats:
    vectors: int = 0           # K/V vectors encoded by the RTL
    values: int = 0
    mismatches: int = 0        # vectors with at least one plane word different from golden
    cycles: int = 0            # simulated clock cycles (including register programming between batches)
    seconds: float = 0.0       # simulation time inside the harness
    wall: float = 0.0          # including job writing, process start and the golden comparison
    runs: int = 0              # harness processes started
    batches: int = 0           # register programs (config + books)
    power_up_nonzero: int = 0  # runs whose outputs showed uninitialised state before the reset (power_up)

    @property
    def values_per_cycle(self) -> float:
        return self.values / self.cycles if self.cycles else 0.0

    def as_dict(self) -> dict:
        return {"kv_vectors_encoded": self.vectors, "kv_values_encoded": self.values,
                "kv_encode_mismatches": self.mismatches, "kv_encode_cycles": self.cycles,
                "kv_encode_sim_seconds": round(self.seconds, 6), "kv_encode_wall_seconds": round(self.wall, 6),
                "kv_encode_runs": self.runs}


def _params(config: str) -> dict:
    from ..common.blocks import get_block
    return get_block("encoder").params(config)


def scheme_of(config: str) -> str:
    block = str(_params(config).get("block", ""))
    return "c2" if block.endswith("c2") else "c1"


def configs() -> list[str]:
    """Every KV encoder configuration of hw/configs.py."""
    from ..common.blocks import get_block
    return sorted(get_block("encoder").configs())


def plane_names(scheme: str) -> tuple[str, ...]:
    spec, verif = PLANES[scheme]
    return spec + verif


def build_harness(config: str = DEFAULT_CONFIG["c1"], power_up: bool = False) -> Path:
    """Verilate the exported encoder + harness_enc.cpp into an executable (cached per configuration);
    ``power_up``: from random flip-flop and memory state (tb/bulk.verilate_harness), in its own folder."""
    from ..common.blocks import get_block

    _params(config)  # unknown configuration -> KeyError naming the known ones
    return verilate_harness(BULK_ROOT / config, config,
                            lambda: get_block("encoder").make(config), HARNESS, TOP, "Venc", "Vharness_enc",
                            scheme_of(config) == "c2", "bulk encoder harness", power_up=power_up)


# ------------------------------------------------------------------------------------------ checks

def _check_batch(bits, cfg, books, scheme: str, params: dict) -> np.ndarray:
    arr = np.ascontiguousarray(np.asarray(bits, dtype=np.uint16))
    if cfg.kind != "kv":
        raise ConfigError("the RTL KV encoder needs a config with kind='kv'")
    if cfg.scheme != scheme:
        raise ConfigError(f"a {cfg.scheme} KV config cannot go through the {scheme} encoder "
                          f"(use an encoder_kv_{cfg.scheme}_* configuration)")
    if arr.ndim != 2 or arr.shape[1] != cfg.group_size:
        raise ConfigError(f"KV vectors must be [n_vectors, head_dim={cfg.group_size}], got {arr.shape}")
    G, L = cfg.group_size, int(params["lanes"])
    if G > int(params["max_group"]) or G % L:
        raise ConfigError(f"head_dim {G}: the encoder takes G <= {params['max_group']}, a multiple of {L} lanes")
    if cfg.chunk_superblocks != 1:
        raise ConfigError(f"the RTL KV encoder writes one vector per chunk; got chunk_superblocks="
                          f"{cfg.chunk_superblocks}")
    for b in books:
        if b is not None and getattr(b, "pairs", 0):
            raise ConfigError("the RTL KV encoder writes plain rank-unary codes; a book has pair groups "
                              f"(pairs=0x{b.pairs:x})")
    return arr


# -------------------------------------------------------------------------------------------- job

def write_job(path: Path, batches, lanes: int, word_bits: int, nplanes: int) -> None:
    with open(path, "wb") as fh:
        fh.write(b"CASSENC1" + struct.pack("<IIIII", 1, lanes, word_bits, nplanes, len(batches)))
        for arr, cfg, books in batches:
            regs = program(cfg, books)
            fh.write(struct.pack("<I", len(regs)))
            fh.write(np.array(regs, dtype="<u4").tobytes())
            fh.write(struct.pack("<IQ", cfg.group_size, arr.shape[0]))
            fh.write(arr.astype("<u2").tobytes())


def read_output(path: Path, nplanes: int, word_bits: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per plane (data bytes [nwords, word_bits/8], last flags [nwords]) as the encoder emitted them."""
    wb = word_bits // 8
    raw = path.read_bytes()
    pos, out = 0, []
    for _ in range(nplanes):
        (n,) = struct.unpack_from("<Q", raw, pos)
        pos += 8
        data = np.frombuffer(raw, np.uint8, n * wb, pos).reshape(n, wb)
        pos += n * wb
        last = np.frombuffer(raw, np.uint8, n, pos)
        pos += n
        out.append((data, last))
    return out


def golden_words(enc: EncodedTensor, plane: str, word_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data [nwords, wb], last [nwords], first word of each vector's chunk [nvectors + 1]) of the golden
    plane framed as the encoder emits it: chunk c of nb bytes -> max(1, ceil(nb / wb)) words, LSB first,
    zero-padded, last = 1 on its final word."""
    wb = word_bits // 8
    off = plane_offsets(enc, plane).astype(np.int64)
    data = np.frombuffer(enc.planes[plane], dtype=np.uint8)
    nb = np.diff(off)
    nw = np.maximum(1, -(-nb // wb))
    wstart = np.concatenate([[0], np.cumsum(nw)])
    total = int(wstart[-1])
    out = np.zeros(total * wb, dtype=np.uint8)
    if len(data):
        chunk = np.repeat(np.arange(len(nb)), nb)
        p = np.arange(len(data), dtype=np.int64) - off[:-1][chunk]
        out[wstart[:-1][chunk] * wb + p] = data
    last = np.zeros(total, dtype=np.uint8)
    last[wstart[1:] - 1] = 1
    return out.reshape(total, wb), last, wstart


def _chunk_starts(last: np.ndarray) -> np.ndarray:
    ends = np.flatnonzero(last) + 1
    return np.concatenate([[0], ends])


def compare(encs: list[EncodedTensor], planes_out, scheme: str, word_bits: int) -> tuple[int, list[str]]:
    """Number of vectors whose chunk differs from golden in any plane, and the first few differences."""
    nvec = sum(e.nsb for e in encs)
    bad = np.zeros(nvec, dtype=bool)
    notes: list[str] = []
    for p, plane in enumerate(plane_names(scheme)):
        gd, gl, gs = [], [], [np.zeros(1, np.int64)]
        base = 0
        for e in encs:
            d, last, ws = golden_words(e, plane, word_bits)
            gd.append(d)
            gl.append(last)
            gs.append(ws[1:] + base)
            base += len(last)
        gdata, glast, gstart = np.concatenate(gd), np.concatenate(gl), np.concatenate(gs)
        rdata, rlast = planes_out[p]
        if len(rlast) == len(glast) and np.array_equal(rlast, glast) and np.array_equal(rdata, gdata):
            continue
        rstart = _chunk_starts(rlast)
        if len(rstart) - 1 != nvec or rlast[-1:].tolist() != [1]:
            notes.append(f"{plane}: {len(rstart) - 1} chunks for {nvec} vectors")
            bad[:] = True
            continue
        for v in range(nvec):
            r = rdata[rstart[v]: rstart[v + 1]]
            g = gdata[gstart[v]: gstart[v + 1]]
            if r.shape != g.shape or not np.array_equal(r, g):
                bad[v] = True
                if len(notes) < 4:
                    notes.append(f"{plane}: vector {v}: RTL {r.tobytes().hex()} golden {g.tobytes().hex()}")
    return int(bad.sum()), notes


def _run(exe: Path, batches, params: dict, scheme: str, idle: float, backpressure: float, seed: int):
    nplanes = len(plane_names(scheme))
    BULK_ROOT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cass-bulk-enc-", dir=BULK_ROOT) as tmp:
        job, out = Path(tmp) / "job.bin", Path(tmp) / "out.bin"
        write_job(job, batches, int(params["lanes"]), int(params["word"]), nplanes)
        cmd = [str(exe), str(job), str(out), "--idle", str(idle), "--backpressure", str(backpressure),
               "--seed", str(seed)]
        stats, res = run_harness(cmd, RtlError, "bulk encoder harness")
        if res.returncode != 0:
            raise RtlError(f"RTL KV encoder failed ({EXIT_WHY.get(res.returncode, res.returncode)}): "
                           f"{stats.get('why')} ({res.stderr.strip()[-500:]})")
        words = read_output(out, nplanes, int(params["word"]))
    return words, stats


def encode_many_with_rtl(batches, config: str | None = None, idle: float = 0.0, backpressure: float = 0.0,
                         seed: int = 1, stats: EncoderStats | None = None, strict: bool = True,
                         golden: list[EncodedTensor] | None = None, power_up: bool = False) -> list[EncodedTensor]:
    """Encode every batch ``(bits[n, G], cfg, books)`` with the RTL encoder in one harness run (in order; a
    batch = vectors sharing one config and book pair, e.g. one layer's K of one step) and compare every
    plane word with golden ``encode_kv(bits, cfg, books)`` (or ``golden``, already computed). Returns the
    golden EncodedTensors, which the RTL matched word for word; with ``strict`` (default) a mismatch raises
    RtlError after counting it in ``stats``. ``power_up``: the encoder starts from random flip-flop and memory
    state seeded by ``seed`` (``build_harness``)."""
    t0 = time.perf_counter()
    batches = list(batches)
    if not batches:
        return []
    scheme0 = batches[0][1].scheme
    config = config or DEFAULT_CONFIG[scheme0]
    params = _params(config)
    scheme = scheme_of(config)
    checked = [(_check_batch(b, c, k, scheme, params), c, k) for b, c, k in batches]
    encs = golden if golden is not None else [encode_kv(a, c, k) for a, c, k in checked]
    run = [(a, c, k) for a, c, k in checked if a.shape[0]]
    if run:
        exe = build_harness(config, power_up=power_up)
        words, st = _run(exe, run, params, scheme, idle, backpressure, seed)
        bad, notes = compare([e for e, (a, _, _) in zip(encs, checked) if a.shape[0]], words, scheme,
                             int(params["word"]))
    else:
        st, bad, notes = {"vectors": 0, "values": 0, "cycles": 0, "seconds": 0.0}, 0, []
    if stats is not None:
        stats.vectors += int(st["vectors"])
        stats.values += int(st["values"])
        stats.cycles += int(st["cycles"])
        stats.seconds += float(st["seconds"])
        stats.power_up_nonzero += int(st.get("power_up_nonzero", 0))
        stats.mismatches += bad
        stats.runs += 1 if run else 0
        stats.batches += len(run)
        stats.wall += time.perf_counter() - t0
    if bad and strict:
        raise RtlError(f"RTL KV encoder ({config}) differs from golden on {bad} vector(s): " + "; ".join(notes))
    return encs


def encode_with_rtl(bits, cfg, books, config: str | None = None, **kw) -> EncodedTensor:
    """The golden EncodedTensor of ``encode_kv(bits, cfg, books)``, checked word for word against the RTL."""
    return encode_many_with_rtl([(bits, cfg, books)], config, **kw)[0]


def rtl_kv_encoder(config: str | None = None, idle: float = 0.0, backpressure: float = 0.0):
    """A drop-in for ``golden.kv.encode_kv(bits, cfg, books) -> EncodedTensor`` that runs the RTL KV encoder
    and asserts every plane word equal to golden's; ``fn.many([(bits, cfg, books), ...])`` batches one step's
    vectors (every layer, K and V) into one harness run; ``fn.stats`` (EncoderStats) counts vectors, values,
    mismatches, cycles and simulation seconds. ``config`` None: ``encoder_kv_c1_l2`` / ``encoder_kv_c2_l2`` by
    the config's scheme. Raises RtlError on a mismatch (after counting it)."""
    stats = EncoderStats()
    counter = {"seed": 1}

    def many(batches):
        counter["seed"] += 1
        return encode_many_with_rtl(batches, config, idle=idle, backpressure=backpressure, seed=counter["seed"],
                                    stats=stats)

    def fn(bits, cfg, books):
        return many([(bits, cfg, books)])[0]

    fn.many = many
    fn.stats = stats
    fn.config = config
    return fn


def available() -> bool:
    try:
        ensure_verilator()
        return True
    except Exception:  # noqa: BLE001
        return False
