"""Fanout repair before static timing: buffer trees on high-fanout nets ABC never saw.

ABC maps (and buffers, ``buffer -N 8``) only the combinational logic between flip-flops. The nets that
leave a flip-flop output, or a tie cell, reach ABC as primary inputs and are never buffered: in a decoder
one register (a mode bit, a read pointer) can drive 500 gate inputs through a single ``dfxtp_1``, which
OpenSTA then times at ~11 ns for that one pin — an artefact no real flow leaves in (OpenROAD's
``repair_design`` buffers such nets before timing). This pass does the same, simply: every net with more
than ``max_fanout`` sinks gets a tree of the library's strongest non-inverting buffer, ``max_fanout``
sinks per buffer, level by level, and the netlist is written as structural Verilog for OpenSTA. The
buffers are real cells: their area is added to the block's area (reported separately as well).
"""
from __future__ import annotations

import dataclasses
import re

DEFAULT_MAX_FANOUT = 16


@dataclasses.dataclass
class Repair:
    verilog: str
    buffers: int
    buffer_area: float           # in the library's area unit
    nets_repaired: int
    worst_fanout_before: int
    buffer_cell: str
    cells: dict                  # the repaired netlist's cells (the module's plus the buffers)


_LIB_FACTS: dict[str, tuple] = {}      # library digest -> (pin directions, buffer): one Liberty parse per library


def _library_facts(lib) -> tuple[dict[str, dict[str, str]], tuple[str, str, str]]:
    key = lib.digest()
    if key not in _LIB_FACTS:
        _LIB_FACTS[key] = (_pin_directions(lib.text.decode("utf-8", errors="replace")), pick_buffer(lib))
    return _LIB_FACTS[key]


def _pin_directions(lib_text: str) -> dict[str, dict[str, str]]:
    """{cell: {pin: "input"|"output"}} for every cell, from the Liberty text."""
    from .library import _cells
    out = {}
    for name, body in _cells(lib_text):
        pins = {}
        for m in re.finditer(r'\bpin\s*\(\s*"?([^")\s]+)"?\s*\)\s*\{', body):
            d = re.search(r"direction\s*:\s*\"?(\w+)", body[m.end():m.end() + 400])
            if d:
                pins[m.group(1)] = d.group(1)
        out[name] = pins
    return out


TARGET_DRIVE = 4        # a x4 buffer drives DEFAULT_MAX_FANOUT gate inputs at a moderate slew


def pick_buffer(lib) -> tuple[str, str, str]:
    """(cell, input pin, output pin) of the usable plain buffer (function = its one input) whose drive
    strength suffix is closest to TARGET_DRIVE (sky130: ``buf_4``); the smallest if none is named by drive."""
    from .library import _cells, _pin_functions
    best = None
    for name, body in _cells(lib.text.decode("utf-8", errors="replace")):
        if not lib.usable(name) or name in lib.sequential or "clkbuf" in name:
            continue
        funcs = _pin_functions(body)
        ins = re.findall(r'\bpin\s*\(\s*"?([^")\s]+)"?\s*\)\s*\{[^{}]*?direction\s*:\s*"?input', body)
        if len(funcs) == 1 and len(ins) == 1 and funcs[0][1].strip("()") == ins[0]:
            drive = re.search(r"_(\d+)$", name)
            key = (-abs((int(drive.group(1)) if drive else 1) - TARGET_DRIVE), -lib.cell_area[name])
            if best is None or key > best[0]:
                best = (key, name, ins[0], funcs[0][0])
    if best is None:
        raise ValueError(f"library {lib.name}: no plain buffer cell for fanout repair")
    return best[1], best[2], best[3]


def repair(netlist: dict, top: str, lib, max_fanout: int = DEFAULT_MAX_FANOUT) -> Repair:
    mod = netlist["modules"][top]
    cells = mod["cells"]
    dirs, (buf, buf_in, buf_out) = _library_facts(lib)
    # net -> list of (cell, pin, index) sinks; drivers are ports or output pins
    sinks: dict[int, list[tuple[str, str, int]]] = {}
    for cname, c in cells.items():
        for pin, bits in c["connections"].items():
            if dirs.get(c["type"], {}).get(pin) == "output":
                continue
            for i, b in enumerate(bits):
                if isinstance(b, int):
                    sinks.setdefault(b, []).append((cname, pin, i))
    out_port_bits = {b for p in mod["ports"].values() if p["direction"] == "output" for b in p["bits"]
                     if isinstance(b, int)}
    next_bit = 1 + max([b for c in cells.values() for bits in c["connections"].values() for b in bits
                        if isinstance(b, int)] + [b for p in mod["ports"].values() for b in p["bits"]
                                                  if isinstance(b, int)] + [1])
    new_cells: dict[str, dict] = {}
    worst = max((len(v) for v in sinks.values()), default=0)
    repaired = 0
    for net, loads in list(sinks.items()):
        if len(loads) <= max_fanout:
            continue
        repaired += 1
        level = loads
        while len(level) > max_fanout:
            groups = [level[i:i + max_fanout] for i in range(0, len(level), max_fanout)]
            nxt = []
            for g in groups:
                bname = f"fanout_buf_{len(new_cells)}"
                bit = next_bit
                next_bit += 1
                new_cells[bname] = {"type": buf, "connections": {buf_in: [net], buf_out: [bit]}}
                for (cname, pin, i) in g:
                    target = new_cells if cname in new_cells else cells
                    target[cname]["connections"][pin][i] = bit
                nxt.append((bname, buf_in, 0))
            level = nxt
    cells = {**cells, **new_cells}
    area = len(new_cells) * lib.cell_area[buf]
    return Repair(_verilog(top, mod["ports"], cells, out_port_bits), len(new_cells), area, repaired, worst, buf,
                  cells)


def _verilog(top: str, ports: dict, cells: dict, _out_bits: set[int]) -> str:
    def net(b) -> str:
        if b in ("0", "1"):
            return f"1'b{b}"
        if b in ("x", "z"):
            return "1'b0"
        return f"n{b}"

    lines = [f"module {top} (" + ", ".join(f"\\{p} " for p in ports) + ");"]
    wires = set()
    for c in cells.values():
        for bits in c["connections"].values():
            wires.update(b for b in bits if isinstance(b, int))
    for p in ports.values():
        wires.update(b for b in p["bits"] if isinstance(b, int))
    lines += [f"  wire n{b};" for b in sorted(wires)]
    for pname, p in ports.items():
        w = len(p["bits"])
        rng = f"[{w - 1}:0] " if w > 1 else ""
        lines.append(f"  {p['direction']} {rng}\\{pname} ;")
        for i, b in enumerate(p["bits"]):
            ref = f"\\{pname} [{i}]" if w > 1 else f"\\{pname} "
            if p["direction"] == "input":
                lines.append(f"  assign {net(b)} = {ref};" if isinstance(b, int) else "")
            else:
                lines.append(f"  assign {ref} = {net(b)};")
    for i, (cname, c) in enumerate(cells.items()):
        conns = ", ".join(f".{pin}({net(bits[0]) if len(bits) == 1 else '{' + ', '.join(net(b) for b in reversed(bits)) + '}'})"
                          for pin, bits in c["connections"].items())
        lines.append(f"  {c['type']} c{i} ({conns});")
    lines.append("endmodule")
    return "\n".join(ln for ln in lines if ln) + "\n"
