"""Driver and bulk harness of the NPU tile (hw/npu/tile.py, docs/NPU.md).

    plan = Plan(TileParams())                       # one memory image + command list
    y = plan.add_pass(tensor, kind, x_bits)         # kind: "bf16" | "draft" | "full"; x_bits uint16 (R, in)
    result = run(plan)                              # Verilated tile + AXI memory model (tb/npu/axi_ram.h)
    result.outputs[i]  -> uint32 (R, out) fp32 bits of pass i;  result.passes[i] -> cycles and counters

The driver does what a host or a DMA descriptor builder would: it lays out each tensor's planes (the .cass
bytes as stored) and, per decoder instance, a chunk-length table (u16 per chunk, from the format's chunk
index); splits a tensor into one range of whole chunks per instance, each a whole number of weight rows,
balanced by bytes; and writes the command list (hw/npu/commands.py). The harness (tb/npu/harness.cpp) is
built once per tile configuration into build/npu/<key>/.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from cassandra_rtl.golden.codec import EncodedTensor, plane_offsets
from cassandra_rtl.hw.npu import DEFAULT_DECODER
from cassandra_rtl.hw.npu import commands as C

from ..common.build import ROOT, file_lock, run_harness
from ..common.tools import ensure_verilator

HARNESS = Path(__file__).with_name("harness.cpp")
AXI_RAM = Path(__file__).with_name("axi_ram.h")
NPU_ROOT = Path(os.environ.get("TB_NPU_ROOT", ROOT / "build" / "npu"))
TOP = "tile"
PLANE_SLOT_NAMES = {"c1": ("spec.codes", "spec.signman", "verif.codes", "verif.rest"),
                    "c2": ("spec.mx", None, "verif.codes", "verif.rest")}
KINDS = ("bf16", "draft", "full")


class TileError(RuntimeError):
    """The tile raised its error output, hung, broke the AXI protocol, or a command list was refused."""


@dataclass(frozen=True)
class TileParams:
    data_bytes: int = 8
    instances: int = 3
    decoder: str = DEFAULT_DECODER
    max_rows: int = 5
    max_in: int = 1536
    burst: int = 16
    fifo_depth: int = 64
    max_outstanding: int = 16

    @property
    def lanes(self) -> int:
        from cassandra_rtl.hw.configs import CONFIG_INFO
        return CONFIG_INFO[self.decoder]["lanes"]

    @property
    def scheme(self) -> str:
        return "c2" if self.decoder.startswith("decoder_c2") else "c1"

    @property
    def layout(self) -> str:
        """The plane layout the cluster's decoders read (tb/decoder/framing.py LAYOUTS)."""
        from ..decoder.framing import config_layout
        return config_layout(self.decoder)

    def make(self):
        from cassandra_rtl.hw.npu.tile import NpuTile
        return NpuTile(**asdict(self))

    def key(self) -> str:
        return (f"w{self.data_bytes}_n{self.instances}_{self.decoder}_r{self.max_rows}_in{self.max_in}"
                f"_b{self.burst}_f{self.fifo_depth}_o{self.max_outstanding}")


@dataclass(frozen=True)
class MemParams:
    """The AXI memory model behind the port (tb/npu/axi_ram.h): bandwidth in bytes per tile cycle (default:
    the port's width), fixed read / write latency in cycles, the longest burst it accepts."""
    bandwidth: float | None = None
    read_latency: int = 64
    write_latency: int = 32
    max_burst: int = 256
    outstanding: int = 16

    def args(self, tile: TileParams) -> list[str]:
        bw = tile.data_bytes if self.bandwidth is None else self.bandwidth
        return ["--bw", repr(float(bw)), "--rlat", str(self.read_latency), "--wlat", str(self.write_latency),
                "--max-burst", str(self.max_burst), "--outstanding", str(self.outstanding)]


# ---------------------------------------------------------------------------------------------- layout
class Image:
    """A byte image of the tile's memory, allocated front to back."""

    def __init__(self):
        self.buf = bytearray()

    def put(self, data: bytes, align: int = 64) -> int:
        pad = -len(self.buf) % align
        self.buf += bytes(pad)
        addr = len(self.buf)
        self.buf += data
        return addr

    def reserve(self, nbytes: int, align: int = 64) -> int:
        return self.put(bytes(nbytes), align)


def split_ranges(n_units: int, unit_bytes: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Cut ``n_units`` consecutive units into at most ``parts`` contiguous non-empty ranges of about equal bytes."""
    cum = np.concatenate([[0], np.cumsum(unit_bytes, dtype=np.int64)])
    total = int(cum[-1])
    cuts = [0]
    for k in range(1, parts):
        target = total * k / parts
        c = int(np.searchsorted(cum, target))
        if c > 0 and abs(cum[c - 1] - target) <= abs(cum[min(c, n_units)] - target):
            c -= 1
        c = min(max(c, cuts[-1] + 1), n_units)
        if c < n_units:
            cuts.append(c)
    cuts.append(n_units)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


@dataclass
class PassPlan:
    kind: str
    name: str
    rows: int
    out_features: int
    in_features: int
    instances: list = field(default_factory=list)       # [(row_start, row_stop, out_addr)]
    weight_bytes: int = 0                               # plane / weight bytes the pass reads (no padding)
    values: int = 0


class Plan:
    """One memory image and command list: any number of passes, run in order by one harness call."""

    def __init__(self, tile: TileParams | None = None):
        self.tile = tile or TileParams()
        self.image = Image()
        self.cmds: list[int] = []
        self.passes: list[PassPlan] = []
        self._placed: dict = {}
        self._dec_state: dict = {}

    # ---- tensors in memory (each placed once, however many passes read it, in the decoders' layout)
    def _planes(self, enc: EncodedTensor) -> tuple[EncodedTensor, dict]:
        """(the tensor as the decoders read it, plane -> address)."""
        from ..decoder import framing as F
        key = ("enc", id(enc))
        if key not in self._placed:
            framed = F.framed(enc, self.tile.layout)
            self._placed[key] = (enc, framed, {p: self.image.put(bytes(framed.planes[p]), 64) for p in framed.planes})
        return self._placed[key][1:]

    def _bf16(self, w_bits: np.ndarray) -> int:
        key = ("bf16", id(w_bits))
        if key not in self._placed:
            self._placed[key] = (w_bits, self.image.put(np.ascontiguousarray(w_bits, dtype="<u2").tobytes(), 64))
        return self._placed[key][1]

    def _set(self, target, fld, value):
        self.cmds.append(C.command(C.OP_SET, target, fld, int(value)))

    def _dec(self, mask, reg, data):
        self.cmds.append(C.command(C.OP_DEC, mask, int(reg), int(data) & 0xFFFFFFFF))

    def add_pass(self, tensor, kind: str, x_bits: np.ndarray, name: str = "") -> int:
        """One pass of ``kind`` over ``tensor`` (an EncodedTensor for draft / full, uint16 bf16 bits (out, in)
        or an EncodedTensor whose full decode is used as the plain weights for bf16) with activations
        ``x_bits`` (R, in). Returns the pass index."""
        t = self.tile
        W, V, N = t.data_bytes, t.lanes, t.instances
        if kind not in KINDS:
            raise ValueError(f"pass kind must be one of {KINDS}, got {kind!r}")
        x_bits = np.ascontiguousarray(x_bits, dtype=np.uint16)
        if x_bits.ndim != 2:
            raise ValueError("activations must be (R, in_features)")
        R, n_in = x_bits.shape
        if not 1 <= R <= t.max_rows:
            raise ValueError(f"{R} activation rows: the tile has {t.max_rows} row slots")
        if n_in % V or n_in > t.max_in:
            raise ValueError(f"in_features {n_in} must be a multiple of {V} and <= {t.max_in}")
        if kind == "bf16":
            if isinstance(tensor, EncodedTensor):
                from cassandra_rtl.golden.codec import decode_full
                tensor = decode_full(tensor)
            w = np.ascontiguousarray(tensor, dtype=np.uint16).reshape(-1, n_in)
            out_f = w.shape[0]
        else:
            enc = tensor
            if enc.config.scheme != t.scheme:
                raise ValueError(f"a {enc.config.scheme} tensor cannot go through the {t.decoder} cluster")
            if enc.numel % n_in:
                raise ValueError(f"{enc.numel} values are not rows of {n_in}")
            out_f = enc.numel // n_in
        pp = PassPlan(kind, name, R, out_f, n_in)
        act = self.image.put(x_bits.tobytes(), 64)
        self._set(C.TARGET_TILE, C.F_MODE, C.MODE_NAMES[kind])
        self._set(C.TARGET_TILE, C.F_ROWS, R)
        self._set(C.TARGET_TILE, C.F_GROUPS, n_in // V)
        self._set(C.TARGET_TILE, C.F_ACT_ADDR, act)
        if kind == "bf16":
            base = self._bf16(w)
            ranges = split_ranges(out_f, np.full(out_f, 1), N)
            for i in range(N):
                if i >= len(ranges):
                    self._set(i, C.F_ENABLE, 0)
                    pp.instances.append(None)
                    continue
                r0, r1 = ranges[i]
                addr = base + r0 * n_in * 2
                nbytes = (r1 - r0) * n_in * 2
                out = self.image.reserve((r1 - r0) * R * 4 + W, 64)
                self._set(i, C.F_ENABLE, 1)
                self._set(i, C.F_PLANE_ADDR, addr)
                self._set(i, C.F_PLANE_WORDS, -(-(addr % W + nbytes) // W))
                self._set(i, C.F_OUT_ADDR, out)
                self._set(i, C.F_OUT_ROWS, r1 - r0)
                pp.instances.append((r0, r1, out))
            pp.weight_bytes = w.size * 2
            pp.values = w.size
        else:
            self._decoder_pass(pp, enc, kind == "full")
        self.cmds.append(C.command(C.OP_RUN))
        self.passes.append(pp)
        return len(self.passes) - 1

    def _decoder_pass(self, pp: PassPlan, enc: EncodedTensor, full: bool):
        from cassandra_rtl.hw.decoder import Reg

        from ..decoder import framing as F
        t = self.tile
        W, N = t.data_bytes, t.instances
        n_in = pp.in_features
        cv = enc.config.chunk_values
        nch = enc.nchunks
        placed, addrs = self._planes(enc)
        slots = [p for p in PLANE_SLOT_NAMES[t.scheme]]
        used = [(k, p) for k, p in enumerate(slots) if p is not None and (k < 2 or full)]
        offs = {p: plane_offsets(placed, p).astype(np.int64) for _, p in used}
        # candidate cuts: chunk boundaries that are also row boundaries
        unit = math.lcm(cv, n_in) // cv
        cand = list(range(0, nch, unit)) + [nch]
        n_units = len(cand) - 1
        unit_bytes = np.array([sum(int(offs[p][cand[j + 1]] - offs[p][cand[j]]) for _, p in used)
                               for j in range(n_units)])
        ranges = [(cand[a], cand[b]) for a, b in split_ranges(n_units, unit_bytes, N)]
        enabled = (1 << len(ranges)) - 1
        # the cluster's registers once (every enabled instance), NUMEL per instance
        prog = [(a, d) for a, d in F.program(enc, full, start=False) if int(a) != int(Reg.NUMEL)]
        for a, d in prog:
            self._dec(enabled, a, d)
        for i in range(N):
            if i >= len(ranges):
                self._set(i, C.F_ENABLE, 0)
                pp.instances.append(None)
                continue
            c0, c1 = ranges[i]
            v0, v1 = c0 * cv, min(c1 * cv, enc.numel)
            r0, r1 = v0 // n_in, v1 // n_in
            self._dec(1 << i, Reg.NUMEL, v1 - v0)
            self._set(i, C.F_ENABLE, 1)
            self._set(i, C.F_NCHUNKS, c1 - c0)
            for k, p in used:
                a = addrs[p] + int(offs[p][c0])
                nbytes = int(offs[p][c1] - offs[p][c0])
                lens = np.diff(offs[p][c0:c1 + 1]).astype("<u2")
                self._set(i, C.F_PLANE_ADDR + k, a)
                self._set(i, C.F_PLANE_WORDS + k, -(-(a % W + nbytes) // W))
                self._set(i, C.F_LEN_ADDR + k, self.image.put(lens.tobytes(), 64))
                pp.weight_bytes += nbytes
            out = self.image.reserve((r1 - r0) * pp.rows * 4 + W, 64)
            self._set(i, C.F_OUT_ADDR, out)
            self._set(i, C.F_OUT_ROWS, r1 - r0)
            pp.instances.append((r0, r1, out))
        pp.values = enc.numel

    def finish(self) -> tuple[bytes, int, int]:
        """(image, command address, command count) with OP_END appended."""
        cmds = self.cmds + [C.command(C.OP_END)]
        addr = self.image.put(np.array(cmds, dtype="<u8").tobytes(), 64)
        return bytes(self.image.buf), addr, len(cmds)


# ---------------------------------------------------------------------------------------------- running
@dataclass
class RunResult:
    outputs: list            # per pass: uint32 (R, out) fp32 bits
    passes: list             # per pass: the harness's counters + bytes / values
    stats: dict              # the harness's JSON (cycles, memory statistics)
    wall: float = 0.0


def _sources_digest(tile: TileParams) -> str:
    h = hashlib.sha256(json.dumps(asdict(tile), sort_keys=True).encode())
    import amaranth
    h.update(amaranth.__version__.encode())
    for d in (ROOT / "hw", ROOT / "hw" / "npu", ROOT / "golden"):
        for p in sorted(d.glob("*.py")):
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def _export(tile: TileParams) -> Path:
    """build/npu/<key>/tile.v, exported again only when an RTL source (hw/, golden/) or the tile's parameters
    changed since the last export; the caller holds the export lock."""
    from cassandra_rtl.hw.export import to_verilog

    d = NPU_ROOT / tile.key()
    vfile, vstamp = d / "tile.v", d / "tile.digest"
    src = _sources_digest(tile)
    if not (vfile.exists() and vstamp.exists() and vstamp.read_text() == src):
        work = d / "export"
        work.mkdir(parents=True, exist_ok=True)
        tmp = d / "tile.v.tmp"
        tmp.write_text(to_verilog(tile.make(), TOP, work))
        tmp.replace(vfile)
        vstamp.write_text(src)
    return vfile


def export_tile(tile: TileParams) -> Path:
    """The tile's Verilog (build/npu/<key>/tile.v), exported if stale."""
    with file_lock(NPU_ROOT / tile.key() / ".export.lock"):
        return _export(tile)


def build_harness(tile: TileParams) -> Path:
    """Export the tile's Verilog and verilate it with harness.cpp into build/npu/<key>/obj/Vtile (cached by a
    digest of the RTL sources, the harness and the memory model; the decoders' tb/bulk.verilate_harness)."""
    from ..bulk import verilate_harness

    d = NPU_ROOT / tile.key()
    # under the export lock: no other process rewrites tile.v while this one verilates it
    with file_lock(d / ".export.lock"):
        vfile = _export(tile)
        return verilate_harness(d, tile.key(), None, HARNESS, TOP, "Vtile", "Vtile", False, "NPU tile harness",
                                verilog=[vfile], defines=f"-DTILE_INSTANCES={tile.instances} "
                                                         f"-DTILE_DATA_BYTES={tile.data_bytes}", deps=(AXI_RAM,))


def run(plan: Plan, mem: MemParams | None = None, timeout_cycles: int = 0, exe: Path | None = None,
        tmp_dir: Path | None = None) -> RunResult:
    """Run every pass of ``plan`` through the Verilated tile; raises TileError on an error, hang or protocol
    violation. ``exe``: a harness built elsewhere (a cluster worker's shipped copy) instead of build_harness;
    ``tmp_dir``: where the job files go (default NPU_ROOT)."""
    mem = mem or MemParams()
    t0 = time.perf_counter()
    exe = exe or build_harness(plan.tile)
    image, cmd_addr, ncmd = plan.finish()
    regions = []
    for pp in plan.passes:
        for inst in pp.instances:
            if inst is not None:
                r0, r1, out = inst
                regions.append((out, (r1 - r0) * pp.rows * 4))
    mem_bytes = len(image) + 4096
    if tmp_dir is None:
        NPU_ROOT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cass-npu-", dir=tmp_dir or NPU_ROOT) as tmp:
        job, outf = Path(tmp) / "job.bin", Path(tmp) / "out.bin"
        with open(job, "wb") as fh:
            fh.write(b"CASSNPU1" + struct.pack("<QQ", mem_bytes, len(image)))
            fh.write(image)
            fh.write(struct.pack("<QII", cmd_addr, ncmd, len(regions)))
            for a, n in regions:
                fh.write(struct.pack("<QQ", a, n))
        cmd = [str(exe), str(job), str(outf), *mem.args(plan.tile)]
        if timeout_cycles:
            cmd += ["--timeout", str(timeout_cycles)]
        stats, res = run_harness(cmd, TileError, "NPU harness")
        if res.returncode != 0:
            raise TileError(f"NPU tile run failed: {stats.get('status')}: {stats.get('why')}")
        raw = np.fromfile(outf, dtype="<u4")
    outputs, pos = [], 0
    for pp in plan.passes:
        y = np.zeros((pp.rows, pp.out_features), dtype=np.uint32)
        for inst in pp.instances:
            if inst is None:
                continue
            r0, r1, _ = inst
            n = (r1 - r0) * pp.rows
            y[:, r0:r1] = raw[pos:pos + n].reshape(r1 - r0, pp.rows).T
            pos += n
        outputs.append(y)
    if len(stats.get("passes", [])) != len(plan.passes):
        raise TileError(f"the harness saw {len(stats.get('passes', []))} passes, the plan has {len(plan.passes)}")
    passes = []
    for pp, st in zip(plan.passes, stats["passes"]):
        st = dict(st)
        st.update(kind=pp.kind, name=pp.name, rows=pp.rows, values=pp.values, weight_bytes=pp.weight_bytes,
                  read_bytes=st["read_beats"] * plan.tile.data_bytes,
                  write_bytes=st["write_beats"] * plan.tile.data_bytes)
        passes.append(st)
    return RunResult(outputs, passes, stats, time.perf_counter() - t0)


def available() -> bool:
    try:
        ensure_verilator()
        return True
    except Exception:  # noqa: BLE001
        return False
