"""Area and clock of the NPU tile (hw/npu/tile.py) in the synthesis flows: the tile flat where the flow can run it,
and the tile as the sum of its separately synthesised parts, storage apart from logic (docs/NPU.md "Area and clock").

    python -m cassandra_rtl.synth.npu_area run   [--out DIR] [--liberty PATH] [--clock-gating] [--jobs 1]
    python -m cassandra_rtl.synth.npu_area table [--docs docs/NPU.md]

``run`` synthesises, with synth/flow.py's options and cache, the PE, the tiles' decoders, the small tile
``npu_tile_s`` flat, and every part of ``npu_tile_s`` and of the headline ``npu_tile`` (hw/configs.py NPU_TILES):

    dma        ReadDma(2 + 8N streams, W, burst, fifo_depth, max_outstanding, priority=1), its FIFOs included
    dma_fifo   one DMA stream FIFO (SyncFIFOBuffered, 8W bits x fifo_depth): storage, x S
    writer     WriteMaster(N, W, burst), its FIFOs included
    wr_fifo    one write FIFO (SyncFIFOBuffered, 9W bits x 2 burst): storage, x N
    actbuf     one row slot of the activation buffer (lib.memory, V x 16 bits x max_in / V words, N asynchronous
               read ports, one write port with a lane enable): storage, x max_rows
    framer_bB  ByteFramer(W, B) per plane port width of the decoder, x N per port of that width
    unpack     U16Unpack(W), x N x planes
    gearbox    Gearbox(V, V), x N;  dot: DotUnit(V, max_rows), x N;  packer: OutPacker(max_rows, W), x N
    decoders   the registry's decoder block, x N (a cluster core: and its shared TensorRegisters, x 1)

and writes the flow's report.json / report.md plus npu_area.json (the composition) under DIR (default
build/synth-npu, -cg with --clock-gating, -<library> with --liberty; kept apart from `make synth`'s reports).
The top level of the tile (command processor, registers, performance counters, activation loader, pass control)
is not a part: it is ``npu_tile_s`` flat minus the sum of its parts, and for the headline tile it is estimated as
that times N / N_s (its per-instance registers and counters dominate it). ``table`` composes docs/NPU.md's table
from the flows' report.json files (and an ECP5 fit of ``npu_tile_s`` from synth/fpga.py's report).

Storage is flip-flops here (DMA FIFOs, activation buffer, write FIFOs); a product would use SRAM macros for it,
so the decoder cluster's share is given of the whole tile and of its logic alone.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..errors import ConfigError, ToolMissingError
from . import flow

SMALL, HEADLINE = "npu_tile_s", "npu_tile"
PART_KIND = "npu_part"
STORAGE = ("dma_fifo", "wr_fifo", "actbuf")
FPGA_OUT = pathlib.Path("build/fpga-npu")


# ---------------------------------------------------------------------------------------------------- wrappers
class FifoPart(wiring.Component):
    """One SyncFIFOBuffered as the DMA and the write master instantiate it, with its ports brought out."""

    def __init__(self, width: int, depth: int):
        self.width, self.depth = width, depth
        super().__init__({"w_data": In(width), "w_en": In(1), "w_rdy": Out(1), "r_data": Out(width), "r_en": In(1),
                          "r_rdy": Out(1), "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = f = SyncFIFOBuffered(width=self.width, depth=self.depth)
        m.d.comb += [f.w_data.eq(self.w_data), f.w_en.eq(self.w_en), self.w_rdy.eq(f.w_rdy),
                     self.r_data.eq(f.r_data), f.r_en.eq(self.r_en), self.r_rdy.eq(f.r_rdy), self.level.eq(f.level)]
        return m


class ActBuffer(wiring.Component):
    """The tile's activation buffer exactly as NpuTile builds it: rows x V bf16 lanes per word, max_in / V words,
    one write port with a per-lane enable, one asynchronous read port per instance."""

    def __init__(self, lanes: int, rows: int, depth: int, read_ports: int):
        self.lanes, self.rows, self.depth, self.read_ports = lanes, rows, depth, read_ports
        word = data.ArrayLayout(16, rows * lanes)
        super().__init__({"w_addr": In(range(depth)), "w_data": In(word), "w_en": In(rows * lanes),
                          "r_addr": In(range(depth)).array(read_ports), "r_data": Out(word).array(read_ports)})

    def elaborate(self, platform):
        m = Module()
        mem = Memory(shape=data.ArrayLayout(16, self.rows * self.lanes), depth=self.depth, init=[])
        m.submodules.mem = mem
        wp = mem.write_port(granularity=1)
        m.d.comb += [wp.addr.eq(self.w_addr), wp.data.eq(self.w_data), wp.en.eq(self.w_en)]
        for i in range(self.read_ports):
            rp = mem.read_port(domain="comb")
            m.d.comb += [rp.addr.eq(self.r_addr[i]), self.r_data[i].eq(rp.data)]
        return m


# ---------------------------------------------------------------------------------------------------- parts
def tile_params(tile: str) -> dict:
    from ..hw.configs import NPU_TILES
    if tile not in NPU_TILES:
        raise ConfigError(f"unknown tile {tile!r}; known: {', '.join(NPU_TILES)}")
    return dict(NPU_TILES[tile])


def parts(tile: str) -> dict[str, dict]:
    """name -> {factory, count, group, storage, block (registry block for the decoders)} of one tile."""
    from ..hw.configs import CONFIG_INFO, NAMED_CONFIGS
    from ..hw.npu.dma import ReadDma
    from ..hw.npu.dot import DotUnit
    from ..hw.npu.framer import ByteFramer, U16Unpack
    from ..hw.npu.gearbox import Gearbox
    from ..hw.npu.tile import GLOBAL_STREAMS, SCHEME_PORTS, STREAMS_PER_INSTANCE
    from ..hw.npu.writer import OutPacker, WriteMaster
    p = tile_params(tile)
    W, N, Rm, dec = p["data_bytes"], p["instances"], p["max_rows"], p["decoder"]
    info = CONFIG_INFO[dec]
    V = info["lanes"]
    S = GLOBAL_STREAMS + STREAMS_PER_INSTANCE * N
    probe = NAMED_CONFIGS[dec]()
    probe._MustUse__silence = True
    scheme = "c2" if info["block"].startswith("decoder_c2") else "c1"
    widths: dict[int, int] = {}
    for port in SCHEME_PORTS[scheme]:
        if port is not None:
            widths[probe.port_words[port]] = widths.get(probe.port_words[port], 0) + 1
    planes = sum(widths.values())
    B, D, O = p["burst"], p["fifo_depth"], p["max_outstanding"]
    out = {
        "dma": dict(factory=lambda: ReadDma(S, W, B, D, O, priority=1), count=1, group="dma"),
        "dma_fifo": dict(factory=lambda: FifoPart(8 * W, D), count=S, group="dma_fifo", storage=True),
        "writer": dict(factory=lambda: WriteMaster(N, W, B), count=1, group="writer"),
        "wr_fifo": dict(factory=lambda: FifoPart(9 * W, 2 * B), count=N, group="wr_fifo", storage=True),
        # one row slot's slice (its V lanes, every word, every read port), x max_rows: the slices share nothing but
        # the address decoders, which the sum counts max_rows times (the whole 5-slot buffer of the headline tile
        # took the WebAssembly Yosys over 16 minutes)
        "actbuf": dict(factory=lambda: ActBuffer(V, 1, p["max_in"] // V, N), count=Rm, group="actbuf", storage=True),
        **{f"framer_b{b}": dict(factory=lambda b=b: ByteFramer(W, b), count=N * k, group="framers")
           for b, k in sorted(widths.items())},
        "unpack": dict(factory=lambda: U16Unpack(W), count=N * planes, group="framers"),
        "gearbox": dict(factory=lambda: Gearbox(V, V), count=N, group="array"),
        "dot": dict(factory=lambda: DotUnit(V, Rm), count=N, group="array"),
        "packer": dict(factory=lambda: OutPacker(Rm, W), count=N, group="array"),
    }
    res = {f"{tile}__{k}": dict(v, storage=v.get("storage", False)) for k, v in out.items()}
    res[dec] = dict(factory=NAMED_CONFIGS[dec], count=N, group="decoders", storage=False, registry=True)
    if info.get("cluster_part") == "instance":      # the cores' shared TensorRegisters, once per cluster
        regs = info["shared_regs"]
        res[regs] = dict(factory=NAMED_CONFIGS[regs], count=1, group="decoders", storage=False, registry=True)
    return res


def cluster_parts(tile: str) -> dict[str, int]:
    """The tile's decoder cluster as parts: name -> count (the cores x N, their shared registers once)."""
    return {n: p["count"] for n, p in parts(tile).items() if p["group"] == "decoders"}


def blocks(tiles=(SMALL, HEADLINE)) -> dict[str, flow.Block]:
    """The flow's blocks: the PE, the small tile flat, and every part of the tiles (decoders from the registry)."""
    hw, note = flow.hw_blocks()
    if note:
        raise ConfigError(f"hw registry: {note}")
    out = dict(flow.builtin_blocks())
    for tile in tiles:
        for name, part in parts(tile).items():
            if part.get("registry"):
                out[name] = hw[name]
            else:
                out[name] = flow.Block(name, part["factory"], "synth.npu_area", {"kind": PART_KIND, "tile": tile})
    out[SMALL] = hw[SMALL]
    # smallest first (one job at a time: the small tile's blocks before the headline's)
    order = [flow.PE_BLOCK] + [n for n in out if n.startswith(SMALL + "__")] + list(cluster_parts(SMALL)) + [SMALL]
    last = [f"{HEADLINE}__{k}" for k in ("actbuf", "dma")]          # the largest: 0.1 M flip-flops each
    names = [n for n in dict.fromkeys(order + list(out)) if n not in last] + last
    return {n: out[n] for n in names if n in out}


# ---------------------------------------------------------------------------------------------------- composition
GROUPS = [  # group, label, storage
    ("decoders", "decoder cluster (N decoders)", False),
    ("dma", "read DMA: control (arbiter, credits, tags, addresses)", False),
    ("framers", "byte framers + chunk-length unpackers", False),
    ("array", "array: gearboxes, DotUnits, output packers", False),
    ("writer", "write master: control", False),
    ("top", "top level: commands, registers, counters, activation loader", False),
    ("dma_fifo", "DMA stream FIFOs", True),
    ("actbuf", "activation buffer", True),
    ("wr_fifo", "write FIFOs", True),
]


def _fmax(b: dict) -> float | None:
    return (b.get("timing") or {}).get("est_fmax_mhz")


def compose(report: dict, tile: str) -> dict:
    """One tile's area by group (GE) and its clock, from a flow's report (blocks by name)."""
    blk = report["blocks"]
    ps = parts(tile)
    missing = [n for n in ps if (blk.get(n) or {}).get("status") != "ok"]
    if missing:
        return {"status": "missing", "missing": missing}
    area = {g: 0.0 for g, _, _ in GROUPS}
    ffs = {g: 0 for g, _, _ in GROUPS}
    clocks = {}
    for n, part in ps.items():
        b = blk[n]
        area[part["group"]] += part["count"] * b["area_ge"]
        ffs[part["group"]] += part["count"] * b["flip_flops"]
        clocks[n] = _fmax(b)
    # the DMA's and the write master's own FIFOs are their storage rows: their control is the rest
    area["dma"] -= area["dma_fifo"]
    ffs["dma"] -= ffs["dma_fifo"]
    area["writer"] -= area["wr_fifo"]
    ffs["writer"] -= ffs["wr_fifo"]
    parts_sum = sum(area.values())
    top_note = None
    flat = blk.get(tile) if (blk.get(tile) or {}).get("status") == "ok" else None
    small = blk.get(SMALL) if (blk.get(SMALL) or {}).get("status") == "ok" else None
    if flat:
        area["top"] = flat["area_ge"] - parts_sum
        ffs["top"] = flat["flip_flops"] - sum(ffs.values())
        top_note = f"{tile} flat minus its parts"
        clocks[tile] = _fmax(flat)
    elif small and tile != SMALL:
        s = compose(report, SMALL)
        if s.get("status") == "ok":
            scale = tile_params(tile)["instances"] / tile_params(SMALL)["instances"]
            area["top"] = s["area_ge"]["top"] * scale
            ffs["top"] = round(s["flip_flops"]["top"] * scale)
            top_note = f"estimated: {SMALL}'s top level x {scale:g} (instances)"
            clocks[SMALL] = _fmax(small)
    total = sum(area.values())
    storage = sum(area[g] for g, _, st in GROUPS if st)
    logic = total - storage
    pe = blk.get(flow.PE_BLOCK) or {}
    known = {n: c for n, c in clocks.items() if c}
    slowest = min(known, key=known.get) if known else None
    return {
        "status": "ok", "tile": tile, "params": tile_params(tile),
        "flat": bool(flat), "top_level": top_note,
        "area_ge": {g: round(v, 1) for g, v in area.items()}, "flip_flops": ffs,
        "total_ge": round(total, 1), "storage_ge": round(storage, 1), "logic_ge": round(logic, 1),
        "flat_ge": flat["area_ge"] if flat else None,
        "decoder_share_percent": round(100 * area["decoders"] / total, 2),
        "decoder_share_of_logic_percent": round(100 * area["decoders"] / logic, 2),
        # the decoders with what feeds them chunk by chunk (byte framers, chunk-length unpackers)
        "decoder_path_share_percent": round(100 * (area["decoders"] + area["framers"]) / total, 2),
        "decoder_path_share_of_logic_percent": round(100 * (area["decoders"] + area["framers"]) / logic, 2),
        "pe_ge": pe.get("area_ge"), "pe_fmax_mhz": _fmax(pe),
        "fmax_mhz_by_block": known, "slowest_block": slowest, "fmax_mhz": known.get(slowest),
    }


def run(opts: flow.FlowOptions, tiles=(SMALL, HEADLINE)) -> dict:
    report = flow.run_flow(opts, blocks=blocks(tiles))
    comp = composition(report, tiles)
    (opts.out / "npu_area.json").write_text(json.dumps(comp, indent=1) + "\n")
    return comp


def composition(report: dict, tiles=(SMALL, HEADLINE)) -> dict:
    """The tiles' composition and synth/overhead.py's decoder figures from one flow's report.json."""
    ov = report.get("overhead") or {}
    comp = {"flow": {k: report["flow"].get(k) for k in ("library", "clock_gating", "command", "nand2_um2")},
            "overhead": {"by_decoder": ov.get("by_decoder") or {},
                         "bytes_per_kflop": {d: r.get("bytes_per_kflop") for d, r in (ov.get("by_device") or {}).items()},
                         "label": {d: r.get("label") for d, r in (ov.get("by_device") or {}).items()}},
            "tiles": {t: compose(report, t) for t in tiles}}
    return comp


# ---------------------------------------------------------------------------------------------------- table
FLOW_DIRS = [("generic", pathlib.Path("build/synth-npu")), ("generic, clock-gated", pathlib.Path("build/synth-npu-cg")),
             ("sky130 hd + OpenSTA", pathlib.Path("build/synth-npu-sky130_fd_sc_hd__tt_025C_1v80"))]


def _load(path: pathlib.Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _g(v) -> str:
    return "—" if v is None else f"{v:,.0f}"


def render_table(flows: list[tuple[str, dict]], fpga: dict | None) -> str:
    lines = []
    for tile in (SMALL, HEADLINE):
        rows = [(label, c["tiles"].get(tile)) for label, c in flows if (c["tiles"].get(tile) or {}).get("status") == "ok"]
        if not rows:
            continue
        p = tile_params(tile)
        shared = [n for n in cluster_parts(tile) if n != p["decoder"]]
        lines += [f"**`{tile}`** ({p['instances']} x `{p['decoder']}`" + "".join(f" + `{n}`" for n in shared)
                  + f", W = {p['data_bytes']}, {p['max_rows']} rows, max_in {p['max_in']}, burst {p['burst']}, FIFO depth {p['fifo_depth']}; "
                  + ("flat synthesis and its parts" if rows[0][1]["flat"] else
                     "**sum of separately synthesised parts**, not a flat synthesis") + "). Area in GE (x PE of the flow):",
                  "",
                  "| | " + " | ".join(label for label, _ in rows) + " |",
                  "|---|" + "---:|" * len(rows)]
        for g, label, st in GROUPS:
            cells = []
            for _, c in rows:
                v = c["area_ge"][g]
                cells.append(f"{_g(v)} ({v / c['pe_ge']:.1f}x)" if c.get("pe_ge") else _g(v))
            mark = " *(storage)*" if st else ""
            if g == "top" and rows[0][1]["top_level"] and not rows[0][1]["flat"]:
                mark += " *(estimate)*"
            lines.append(f"| {label}{mark} | " + " | ".join(cells) + " |")
        lines.append("| **tile total** | " + " | ".join(f"**{_g(c['total_ge'])}** ({c['total_ge'] / c['pe_ge']:.0f}x)"
                                                   for _, c in rows) + " |")
        lines.append("| of which storage (flip-flops here, SRAM in a product) | "
                     + " | ".join(f"{_g(c['storage_ge'])} ({100 * c['storage_ge'] / c['total_ge']:.0f} %)" for _, c in rows)
                     + " |")
        lines.append("| logic without storage | " + " | ".join(_g(c["logic_ge"]) for _, c in rows) + " |")
        lines.append("| **decoder cluster share: of the tile / of its logic** | "
                     + " | ".join(f"**{c['decoder_share_percent']:.1f} % / {c['decoder_share_of_logic_percent']:.1f} %**"
                                  for _, c in rows) + " |")
        lines.append("| decoders + framers + unpackers: of the tile / of its logic | "
                     + " | ".join(f"{c['decoder_path_share_percent']:.1f} % / {c['decoder_path_share_of_logic_percent']:.1f} %"
                                  for _, c in rows) + " |")
        if rows[0][1]["flat"]:
            lines.append("| flat synthesis of the whole tile (the top-level row is flat minus the parts) | " + " | ".join(_g(c["flat_ge"]) for _, c in rows)
                         + " |")
        lines.append("| clock: slowest block, MHz (x PE) | "
                     + " | ".join(f"{c['fmax_mhz']:.0f} ({c['fmax_mhz'] / c['pe_fmax_mhz']:.2f}x), `{c['slowest_block']}`"
                                  if c.get("fmax_mhz") and c.get("pe_fmax_mhz") else "—" for _, c in rows) + " |")
        dot = next((n for n in parts(tile) if n.endswith("__dot")), None)
        lines.append("| clock of the DotUnit (accumulate loop), MHz; PE | "
                     + " | ".join(f"{c['fmax_mhz_by_block'].get(dot, float('nan')):.0f}; {c['pe_fmax_mhz']:.0f}"
                                  for _, c in rows) + " |")
        lines.append("")
        lines += _beside_overhead(tile, flows)
    if fpga:
        b = (fpga.get("blocks") or {}).get(SMALL) or {}
        pe = (fpga.get("blocks") or {}).get(flow.PE_BLOCK) or {}
        # the decoder cluster apart: its parts (cores x N, shared registers) fitted alone
        cluster = cluster_parts(SMALL)
        fits = [((fpga.get("blocks") or {}).get(n) or {}).get("lut4") for n in cluster]
        if b.get("status") == "ok":
            lut = sum(k * f for k, f in zip(cluster.values(), fits)) if all(fits) else None
            share = (f"; the decoder cluster ({' + '.join(f'`{n}`' for n in cluster)}) alone {lut:,} LUT4 "
                     f"({100 * lut / b['lut4']:.0f} % of the tile)" if lut else "")
            lines += [f"ECP5 ({fpga['flow'].get('device')}, nextpnr, out of context, seed(s) "
                      f"{','.join(map(str, b.get('seeds_run') or []))}): `{SMALL}` {b['lut4']:,} LUT4, {b['ff']:,} FF, "
                      f"{b.get('dp16kd') or 0} DP16KD, {b['fmax_mhz']:.1f} MHz"
                      + (f" ({b['fmax_mhz'] / pe['fmax_mhz']:.2f}x the PE's {pe['fmax_mhz']:.1f})" if pe.get("fmax_mhz") else "")
                      + share
                      + "".join(f"; {k} {v:,}" for k, v in (b.get("other_cells") or {}).items())
                      + (" (the FIFOs in distributed RAM)" if (b.get("other_cells") or {}).get("TRELLIS_DPR16X4") else "")
                      + (f"; critical path `{b['critical_path'].get('from')}` -> `{b['critical_path'].get('to')}`"
                         if b.get("critical_path") else "")
                      + ".", ""]
    return "\n".join(lines)


def tile_bytes_per_kflop(tile: str) -> float:
    """Port bytes per 1000 FLOPs of the tile's array at its peak (every row slot, 2 FLOPs a product)."""
    from ..hw.configs import CONFIG_INFO
    p = tile_params(tile)
    return 1000 * p["data_bytes"] / (2 * p["instances"] * CONFIG_INFO[p["decoder"]]["lanes"] * p["max_rows"])


def _beside_overhead(tile: str, flows: list[tuple[str, dict]]) -> list[str]:
    """synth/overhead.py's decoder share of a device's PE array for the tile's decoder, in each flow."""
    from ..hw.configs import CONFIG_INFO
    from ..hw.npu import MAX_CLUSTER
    dec = tile_params(tile)["decoder"]
    out = []
    for label, c in flows:
        by = (c.get("overhead") or {}).get("by_decoder", {}).get(dec)
        if not by or (c["tiles"].get(tile) or {}).get("status") != "ok":
            continue
        bpk = c["overhead"]["bytes_per_kflop"]
        devs = ", ".join(f"{by[d]['percent']:.2f} % ({d}, {bpk.get(d, float('nan')):.2f} B/kFLOP)" for d in by)
        regs = CONFIG_INFO[dec].get("shared_regs")
        with_regs = f" (with `{regs}`, one per {MAX_CLUSTER} cores)" if regs else ""
        out.append(f"- {label}: synth/overhead.py prices `{dec}`{with_regs} at {devs} of a PE array sized to the device's "
                   f"FLOPS; in this tile ({tile_bytes_per_kflop(tile):.1f} B/kFLOP at {tile_params(tile)['max_rows']} "
                   f"rows) the cluster is {c['tiles'][tile]['decoder_share_percent']:.1f} % of the tile, "
                   f"{c['tiles'][tile]['decoder_share_of_logic_percent']:.1f} % of its logic.")
    return out + ([""] if out else [])


MARK = re.compile(r"(<!-- generated: npu-area -->\n).*?(<!-- end generated -->)", re.S)


def table(args) -> int:
    flows = [(label, composition(r)) for label, d in FLOW_DIRS if (r := _load(d / "report.json"))]
    fpga = _load(args.fpga / "report.json")
    text = render_table(flows, fpga)
    if args.docs:
        doc = args.docs.read_text()
        if not MARK.search(doc):
            raise ConfigError(f"{args.docs}: no '<!-- generated: npu-area -->' ... '<!-- end generated -->' block")
        args.docs.write_text(MARK.sub(lambda m: m.group(1) + text + "\n" + m.group(2), doc))
        print(f"updated {args.docs}")
    else:
        print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.synth.npu_area", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="synthesise the tile's parts (and npu_tile_s flat) in one flow")
    flow.add_arguments(r)
    r.add_argument("--tiles", default=f"{SMALL},{HEADLINE}", help="tiles to compose (comma-separated)")
    t = sub.add_parser("table", help="compose docs/NPU.md's table from the flows' report.json")
    t.add_argument("--docs", type=pathlib.Path, help="rewrite the generated npu-area block of this file")
    t.add_argument("--fpga", type=pathlib.Path, default=FPGA_OUT, help=f"synth/fpga.py output dir (default {FPGA_OUT})")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "table":
            return table(args)
        if args.out is None:
            lib = flow.load_library(args.liberty, None)
            args.out = pathlib.Path("build/synth-npu" + ("" if lib.generic else f"-{lib.name}")
                                    + ("-cg" if args.clock_gating else ""))
        dont_use = None
        if args.dont_use:
            pats = [s.strip() for item in args.dont_use for s in item.split(",") if s.strip()]
            dont_use = () if pats == ["none"] else tuple(pats)
        opts = flow.FlowOptions(out=args.out, period_ps=args.period_ps, nand2_um2=args.nand2_um2, jobs=args.jobs,
                                timeout_s=args.timeout, use_cache=not args.no_cache, lib=args.liberty,
                                dont_use=dont_use, cached_only=args.cached_only, clock_gating=args.clock_gating)
        comp = run(opts, tuple(s.strip() for s in args.tiles.split(",") if s.strip()))
    except (ConfigError, ToolMissingError) as exc:
        print(f"npu_area: error: {exc}", file=sys.stderr)
        return 2
    for t_name, c in comp["tiles"].items():
        if c.get("status") == "ok":
            print(f"{t_name}: {c['total_ge']:,.0f} GE ({c['storage_ge']:,.0f} storage), decoders "
                  f"{c['decoder_share_percent']:.1f} % of the tile / {c['decoder_share_of_logic_percent']:.1f} % of its "
                  f"logic; clock {c['fmax_mhz']} MHz ({c['slowest_block']})")
        else:
            print(f"{t_name}: missing {', '.join(c.get('missing', []))}")
    print(f"wrote {opts.out / 'npu_area.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
