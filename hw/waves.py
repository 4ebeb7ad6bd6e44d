"""Timing diagrams of the decoders, recorded from simulation (not drawn by hand).

``python -m cassandra_rtl.hw.waves --out docs/datasheets/waves`` (``make waves``) simulates decoder_c1v3_l4
(C1) and decoder_c2v3_l8 (C2) in the Amaranth simulator on the worked example of the datasheets (16 values,
G = 32, draft mode, the planes in format 3.0) in three scenarios and writes, per block and scenario, the WaveDrom JSON of the ports
cycle by cycle (``<block>_<scenario>.json``) and, with the ``wavedrom`` package installed, its SVG:

* ``start``  the last register writes and START, the plane words waiting, the tensor's beats to ``last``;
* ``stall``  the same tensor with the last plane port idle for 3 cycles and ``out.ready`` low for 2;
* ``error``  the first plane's chunk with one word too many: TOO_LONG, ``busy`` falls; the next tensor's
             words, offered while the error is set, are drained (lost); CLEAR_ERROR written on ``cfg``.

Also ``kv_vector`` (encoder_kv_c1_l2: the last register writes, one vector in, the four planes out) and
``csr_bus`` (the AXI4-Lite register block: a write, a read, a write refused while busy, DONE and its clear).

Each row is sampled before the clock edge of its cycle, so a transfer happens in a column where valid and
ready are both high. tests/test_waves.py checks the committed JSON is what the simulation gives today and
states the datasheets' cycle counts from it.
"""
from __future__ import annotations

import json
from pathlib import Path

SCENARIOS = ("start", "stall", "error")
WAVES = Path(__file__).resolve().parent.parent / "docs" / "datasheets" / "waves"


BLOCKS = {"c1": ("decoder_c1v3_l4", ("spec_codes", "spec_signman")), "c2": ("decoder_c2v3_l8", ("spec_mx",))}


def _example(scheme: str = "c1"):
    import numpy as np
    from ..golden.config import CodecConfig
    from ..golden.escfield import encode3
    from .datasheets import EXAMPLE_VALUES
    return encode3(np.array(EXAMPLE_VALUES, dtype=np.uint16),
                   CodecConfig(scheme=scheme, group_size=32, mantissa_bits=3, keep_count=24,
                               chunk_superblocks=1, pair_codes=False))


def record(scenario: str, block: str = "c1") -> dict:
    """Simulate one scenario; returns {"rows": [per-cycle dict of port values], "marks": {...}}."""
    from amaranth.sim import Simulator
    from .configs import NAMED_CONFIGS
    from .decoder import CTRL_CLEAR_ERROR, Reg
    from .simutil import decoder_planes, decoder_program

    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}")
    config, ports = BLOCKS[block]
    enc = _example(block)
    dut = NAMED_CONFIGS[config]()
    program = decoder_program(enc, False)
    planes = decoder_planes(enc, False, dut.port_words)
    n_first = {p: len(w) for p, w in planes.items()}
    if scenario == "error":                        # one word too many in the first plane's chunk: TOO_LONG
        w = planes[ports[0]]
        planes[ports[0]] = w[:-1] + [(w[-1][0], 0), (0, 1)]
        n_first = {p: len(w) for p, w in planes.items()}
        for p in planes:                           # the next tensor's words, offered once the error is up
            planes[p] = planes[p] + decoder_planes(enc, False, dut.port_words)[p]
    shown_from = len(program) - 2                  # the diagram starts at the write before START
    rows, marks = [], {}

    async def bench(ctx):
        pos = {p: 0 for p in ports}
        cfg_pos, cycle, clear_sent = 0, 0, False
        while cycle < 60:
            # drive: cfg, the planes (words are waiting from cycle 0), out.ready
            writes = program if not clear_sent else program + [(int(Reg.CTRL), CTRL_CLEAR_ERROR)]
            if scenario == "error" and cfg_pos == len(program) and "error" in marks and cycle >= marks["error"] + 3:
                clear_sent = True
                writes = program + [(int(Reg.CTRL), CTRL_CLEAR_ERROR)]
            cfg_valid = cfg_pos < len(writes)
            ctx.set(dut.cfg.valid, cfg_valid)
            if cfg_valid:
                ctx.set(dut.cfg.payload.addr, writes[cfg_pos][0])
                ctx.set(dut.cfg.payload.data, writes[cfg_pos][1])
            started = cfg_pos >= len(program)
            for p in ports:
                idle = scenario == "stall" and p == ports[-1] and "start" in marks and \
                    marks["start"] + 1 <= cycle < marks["start"] + 4
                valid = pos[p] < len(planes[p]) and not idle
                if pos[p] >= n_first[p]:                # a next tensor's word: only after the error
                    valid = valid and "error" in marks
                ctx.set(getattr(dut, p).valid, valid)
                if pos[p] < len(planes[p]):
                    ctx.set(getattr(dut, p).payload.data, planes[p][pos[p]][0])
                    ctx.set(getattr(dut, p).payload.last, planes[p][pos[p]][1])
            out_ready = not (scenario == "stall" and marks.get("first_beat") is not None
                             and marks["first_beat"] + 1 <= cycle < marks["first_beat"] + 3)
            ctx.set(dut.out.ready, out_ready)
            # sample (before the edge)
            row = {"cfg.valid": ctx.get(dut.cfg.valid), "cfg.ready": ctx.get(dut.cfg.ready),
                   "cfg.addr": Reg(writes[cfg_pos][0]).name if cfg_valid and writes[cfg_pos][0] in
                   {int(r) for r in Reg} else (f"SYM{writes[cfg_pos][0] - 0x10}" if cfg_valid else None),
                   "busy": ctx.get(dut.busy), "error_code": ctx.get(dut.error_code),
                   "out.valid": ctx.get(dut.out.valid), "out.ready": ctx.get(dut.out.ready),
                   "out.count": ctx.get(dut.out.payload.count), "out.last": ctx.get(dut.out.payload.last)}
            for p in ports:
                s = getattr(dut, p)
                row[f"{p}.valid"], row[f"{p}.ready"] = ctx.get(s.valid), ctx.get(s.ready)
                row[f"{p}.last"] = ctx.get(s.payload.last) if ctx.get(s.valid) else 0
            rows.append(row)
            # transfers at this edge
            if cfg_valid and row["cfg.ready"]:
                if cfg_pos == len(program) - 1:
                    marks["start"] = cycle
                cfg_pos += 1
            for p in ports:
                if row[f"{p}.valid"] and row[f"{p}.ready"]:
                    pos[p] += 1
            if row["out.valid"]:
                marks.setdefault("first_beat", cycle)
                if row["out.ready"] and row["out.last"]:
                    marks["last_beat"] = cycle
            if row["error_code"] and "error" not in marks:
                marks["error"] = cycle
            if scenario == "error" and clear_sent and not row["error_code"] and "cleared" not in marks:
                marks["cleared"] = cycle
            if "busy_fell" not in marks and "start" in marks and cycle > marks["start"] + 1 and not row["busy"]:
                marks["busy_fell"] = cycle
            cycle += 1
            await ctx.tick()
            done = ("last_beat" in marks and cycle > marks["last_beat"] + 2) or \
                   ("cleared" in marks and cycle > marks["cleared"] + 1)
            if done:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return {"rows": rows[shown_from:], "marks": {k: v - shown_from for k, v in marks.items()}}


def _bits(values) -> str:
    out, prev = [], None
    for v in values:
        v = int(bool(v))
        out.append("." if v == prev else str(v))
        prev = v
    return "".join(out)


def _data(values) -> tuple[str, list[str]]:
    wave, data, prev = [], [], object()
    for v in values:
        if v == prev:
            wave.append(".")
        elif v is None:
            wave.append("x")
        else:
            wave.append("=")
            data.append(str(v))
        prev = v
    return "".join(wave), data


def wavedrom(scenario: str, rec: dict | None = None, block: str = "c1") -> dict:
    """The WaveDrom description of one recorded scenario."""
    rec = rec or record(scenario, block)
    config, ports = BLOCKS[block]
    rows = rec["rows"]

    def col(key):
        return [r[key] for r in rows]

    def data_row(name, values):
        wave, data = _data(values)
        return {"name": name, "wave": wave, "data": data}

    count = [r["out.count"] if r["out.valid"] else None for r in rows]
    err = [hex(r["error_code"]) if r["error_code"] else "0" for r in rows]
    sig = [{"name": "clk", "wave": "p" + "." * (len(rows) - 1)},
           ["cfg", {"name": "valid", "wave": _bits(col("cfg.valid"))},
            {"name": "ready", "wave": _bits(col("cfg.ready"))}, data_row("addr", col("cfg.addr"))]]
    for p in ports:
        sig.append([p, {"name": "valid", "wave": _bits(col(f"{p}.valid"))},
                    {"name": "ready", "wave": _bits(col(f"{p}.ready"))},
                    {"name": "last", "wave": _bits(col(f"{p}.last"))}])
    sig.append(["out", {"name": "valid", "wave": _bits(col("out.valid"))},
                {"name": "ready", "wave": _bits(col("out.ready"))}, data_row("count", count),
                {"name": "last", "wave": _bits([r["out.last"] and r["out.valid"] for r in rows])}])
    sig += [{"name": "busy", "wave": _bits(col("busy"))}, data_row("error_code", err)]
    name = {"c1": "C1", "c2": "C2"}[block]
    titles = {"start": f"{name} decoder: tensor start ({config}, draft, the worked example)",
              "stall": f"{name} decoder: an idle input and output backpressure",
              "error": f"{name} decoder: an error (TOO_LONG), draining, CLEAR_ERROR"}
    return {"signal": sig, "head": {"text": titles[scenario], "tick": 0},
            "config": {"hscale": 1}, "marks": rec["marks"]}


def record_kv() -> dict:
    """encoder_kv_c1_l2 on the KV datasheet's example vector: the last register writes, the 16 input beats,
    the four planes' words (every output ready)."""
    import numpy as np
    from amaranth.sim import Simulator
    from ..golden.codec import encode_tensor
    from ..golden.config import CodecConfig
    from .configs import NAMED_CONFIGS
    from .datasheets import EXAMPLE_VALUES, _reg_name
    from .simutil import encoder_program
    vec = np.array(EXAMPLE_VALUES * 2, dtype=np.uint16)
    cfg = CodecConfig(group_size=32, mantissa_bits=3, keep_count=24, kind="kv")
    enc = encode_tensor(vec.reshape(1, 32), cfg)
    program = encoder_program(cfg, (enc.spec_book, enc.verif_book))
    dut = NAMED_CONFIGS["encoder_kv_c1_l2"]()
    planes = ("spec_codes", "spec_signman", "verif_codes", "verif_rest")
    rows, marks = [], {}

    async def bench(ctx):
        cfg_pos, beat, cycle, lasts = 0, 0, 0, 0
        for p in planes:
            ctx.set(getattr(dut, p).ready, 1)
        while cycle < 200 and lasts < len(planes):
            cfg_valid = cfg_pos < len(program)
            ctx.set(dut.cfg.valid, cfg_valid)
            if cfg_valid:
                ctx.set(dut.cfg.payload.addr, program[cfg_pos][0])
                ctx.set(dut.cfg.payload.data, program[cfg_pos][1])
            inp_valid = not cfg_valid and beat < 16
            ctx.set(dut.inp.valid, inp_valid)
            if inp_valid:
                for lane in range(2):
                    ctx.set(dut.inp.payload.lanes[lane], int(vec[2 * beat + lane]))
                ctx.set(dut.inp.payload.last, beat == 15)
            row = {"cfg.valid": cfg_valid, "cfg.ready": ctx.get(dut.cfg.ready),
                   "cfg.addr": _reg_name(program[cfg_pos][0]) if cfg_valid else None,
                   "inp.valid": inp_valid, "inp.ready": ctx.get(dut.inp.ready),
                   "inp.last": inp_valid and beat == 15, "busy": ctx.get(dut.busy), "error_code": ctx.get(dut.error_code)}
            for p in planes:
                s = getattr(dut, p)
                row[f"{p}.valid"] = ctx.get(s.valid)
                row[f"{p}.last"] = ctx.get(s.valid) and ctx.get(s.payload.last)
            rows.append(row)
            if cfg_valid and row["cfg.ready"]:
                cfg_pos += 1
            if inp_valid and row["inp.ready"]:
                marks.setdefault("first_beat_in", cycle)
                beat += 1
            for p in planes:
                if row[f"{p}.last"]:
                    lasts += 1
                    marks[f"{p}_last"] = cycle
            cycle += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    shown = len(program) - 2
    return {"rows": rows[shown:], "marks": {k: v - shown for k, v in marks.items()}}


def record_csr() -> dict:
    """The AXI4-Lite register block (hw/csr.py, on its own, the block's busy / cfg.ready driven): a write
    (OKAY), a read of ID, a block-register write while the block is busy (SLVERR, not forwarded), busy
    falling (DONE interrupt), the DONE bit cleared by writing one."""
    from amaranth.sim import Simulator
    from .csr import AxiLiteCsr, Csr, IRQ_DONE
    dut = AxiLiteCsr(1, 4, 4, program_port=False)
    rows, marks = [], {}
    sig = ("awvalid", "awready", "wvalid", "wready", "bvalid", "bready", "arvalid", "arready", "rvalid", "rready")

    async def bench(ctx):
        ops = [("w", Csr.IRQ_ENABLE, IRQ_DONE), ("r", Csr.ID, 0), ("busy", 0, 0), ("w", 4 * 5, 64),
               ("idle", 0, 0), ("nop", 0, 0), ("nop", 0, 0), ("nop", 0, 0), ("w", Csr.IRQ_STATUS, IRQ_DONE)]
        busy = 0
        state = {"op": 0, "phase": "start"}
        for cycle in range(40):
            op = ops[state["op"]] if state["op"] < len(ops) else None
            kind = op[0] if op else None
            if kind == "busy" and state["phase"] == "start":
                busy = 1
                state["op"] += 1
                op = ops[state["op"]]
                kind = op[0]
            if kind == "idle" and state["phase"] == "start":
                busy = 0
                marks["busy_fell"] = cycle
                state["op"] += 1
                op = ops[state["op"]]
                kind = op[0]
            ctx.set(dut.busy, busy)
            ctx.set(dut.cfg.ready, not busy)
            if kind == "w" and state["phase"] == "start":
                ctx.set(dut.s_axil_awaddr, op[1]); ctx.set(dut.s_axil_wdata, op[2]); ctx.set(dut.s_axil_wstrb, 0xF)
                ctx.set(dut.s_axil_awvalid, 1); ctx.set(dut.s_axil_wvalid, 1); state["phase"] = "addr"
            if kind == "r" and state["phase"] == "start":
                ctx.set(dut.s_axil_araddr, op[1]); ctx.set(dut.s_axil_arvalid, 1); state["phase"] = "addr"
            ctx.set(dut.s_axil_bready, 1)
            ctx.set(dut.s_axil_rready, 1)
            row = {k: ctx.get(getattr(dut, f"s_axil_{k}")) for k in sig}
            row.update({"bresp": ctx.get(dut.s_axil_bresp) if row["bvalid"] else None,
                        "rdata": hex(ctx.get(dut.s_axil_rdata)) if row["rvalid"] else None,
                        "addr": hex(op[1]) if kind in ("w", "r") and (ctx.get(dut.s_axil_awvalid) or
                                                                     ctx.get(dut.s_axil_arvalid)) else None,
                        "cfg.valid": ctx.get(dut.cfg.valid), "busy": busy, "irq": ctx.get(dut.irq)})
            rows.append(row)
            if kind == "nop":
                state = {"op": state["op"] + 1, "phase": "start"}
            if row["bvalid"] or row["rvalid"]:
                if row["bvalid"] and row["bresp"] == 2:
                    marks["slverr"] = cycle
                state = {"op": state["op"] + 1, "phase": "start"}
            if row["irq"] and "irq" not in marks:
                marks["irq"] = cycle
            await ctx.tick()                       # the handshakes above happen at this edge
            for ch in ("aw", "w", "ar"):
                if row[f"{ch}valid"] and row[f"{ch}ready"]:
                    ctx.set(getattr(dut, f"s_axil_{ch}valid"), 0)
            if state["op"] >= len(ops) and cycle > marks.get("irq", 99) + 4:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return {"rows": rows, "marks": marks}


def _desc(rows, spec, title, marks) -> dict:
    """WaveDrom from rows: spec = [(label, key, "bit" | "data")] or (group, [...])."""
    def one(label, key, kind):
        values = [r[key] for r in rows]
        if kind == "bit":
            return {"name": label, "wave": _bits(values)}
        wave, data = _data(values)
        return {"name": label, "wave": wave, "data": data}
    sig = [{"name": "clk", "wave": "p" + "." * (len(rows) - 1)}]
    for item in spec:
        if isinstance(item[1], list):
            sig.append([item[0]] + [one(*x) for x in item[1]])
        else:
            sig.append(one(*item))
    return {"signal": sig, "head": {"text": title, "tick": 0}, "config": {"hscale": 1}, "marks": marks}


def wavedrom_kv(rec: dict | None = None) -> dict:
    rec = rec or record_kv()
    planes = ("spec_codes", "spec_signman", "verif_codes", "verif_rest")
    spec = [("cfg", [("valid", "cfg.valid", "bit"), ("ready", "cfg.ready", "bit"), ("addr", "cfg.addr", "data")]),
            ("inp", [("valid", "inp.valid", "bit"), ("ready", "inp.ready", "bit"), ("last", "inp.last", "bit")])]
    spec += [(p, [("valid", f"{p}.valid", "bit"), ("last", f"{p}.last", "bit")]) for p in planes]
    spec += [("busy", "busy", "bit")]
    return _desc(rec["rows"], spec, "C1 KV encoder: one vector (encoder_kv_c1_l2, G = 32, k = 24; outputs ready)",
                 rec["marks"])


def wavedrom_csr(rec: dict | None = None) -> dict:
    rec = rec or record_csr()
    spec = [("AW / W", [("awvalid", "awvalid", "bit"), ("awready", "awready", "bit"), ("wvalid", "wvalid", "bit"),
                        ("wready", "wready", "bit"), ("addr", "addr", "data")]),
            ("B", [("bvalid", "bvalid", "bit"), ("bresp", "bresp", "data")]),
            ("AR / R", [("arvalid", "arvalid", "bit"), ("arready", "arready", "bit"), ("rvalid", "rvalid", "bit"),
                        ("rdata", "rdata", "data")]),
            ("block", [("busy", "busy", "bit"), ("cfg.valid", "cfg.valid", "bit")]), ("irq", "irq", "bit")]
    return _desc(rec["rows"], spec, "AXI4-Lite register block: write, read, a write refused while busy (SLVERR), "
                 "DONE", rec["marks"])


def descriptions() -> dict[str, dict]:
    """Every diagram: file stem -> WaveDrom description."""
    out = {f"{b}_{sc}": wavedrom(sc, block=b) for b in BLOCKS for sc in SCENARIOS}
    out["kv_vector"] = wavedrom_kv()
    out["csr_bus"] = wavedrom_csr()
    return out


def write(out: Path = WAVES, svg: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, desc in descriptions().items():
        path = out / f"{stem}.json"
        path.write_text(json.dumps(desc, indent=1) + "\n")
        written.append(path)
        if svg:
            import wavedrom as wd
            picture = {k: v for k, v in desc.items() if k != "marks"}
            wd.render(json.dumps(picture)).saveas(str(out / f"{stem}.svg"))
            written.append(out / f"{stem}.svg")
    return written


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m cassandra_rtl.hw.waves", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(WAVES))
    ap.add_argument("--no-svg", action="store_true", help="WaveDrom JSON only (no wavedrom package needed)")
    args = ap.parse_args(argv)
    for p in write(Path(args.out), svg=not args.no_svg):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
