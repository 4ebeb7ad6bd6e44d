"""A standard-cell library as the synthesis flow needs it: cells, areas, flip-flops, tie cells, dont_use.

    lib = load_library(path, dont_use=None)     # .lib or .lib.gz

The flow maps onto any Liberty file. Two kinds:

* the **generic** library written by synth/liberty.py (NAND2 = 1 area unit, timed by synth/timing.py's
  logical-effort walk; the default, for users without a real library);
* a **real** library, e.g. SkyWater SKY130 ``sky130_fd_sc_hd`` (area in µm², NLDM tables, timed by
  OpenSTA, synth/sta.py). Areas are also given in gate equivalents (GE = area / the library's smallest
  two-input NAND), so blocks can be compared across libraries as ratios.

``dont_use``: glob patterns of cells synthesis must not pick (passed to ``dfflibmap``/``abc
-dont_use``). When none are given, a known library gets the list a real flow uses (sky130 hd:
OpenROAD's dont_use list — probes, ``lpflow_*`` isolation/retention cells, delay cells — plus the
physical-only cells), everything else none. Tie cells are found by function (a pin whose function is a
constant 1 / 0) and used explicitly by ``hilomap``, so they are not subject to dont_use.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import gzip
import hashlib
import pathlib
import re

from ..errors import ConfigError

# Cells a real digital flow never lets synthesis use, per library family (prefix of the library name).
KNOWN_DONT_USE: dict[str, tuple[str, ...]] = {
    "sky130_fd_sc_hd": (
        "*__probe_*", "*__lpflow_*", "*__clkdlybuf*", "*__dlygate*", "*__dlymetal*",
        "*__tap*", "*__fill*", "*__decap*", "*__diode*", "*__conb*",
    ),
}
# Corner names as they appear in library names (sky130: tt_025C_1v80 = typical, 25 °C, 1.80 V).
_CORNER_RE = re.compile(r"(tt|ff|ss|fs|sf)_(n?\d+C)_(\d+v\d+)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Library:
    path: pathlib.Path
    name: str                          # the Liberty `library (...)` name
    text: bytes                        # the uncompressed Liberty text (copied next to each design)
    cell_area: dict[str, float]        # every cell, in the library's area unit
    sequential: frozenset[str]         # cells with an ff/latch group
    clock_gates: frozenset[str]        # integrated clock gates (clock_gating_integrated_cell)
    nand2_cell: str                    # smallest-area 2-input NAND (the GE unit)
    tie_hi: tuple[str, str]            # (cell, pin) driving constant 1
    tie_lo: tuple[str, str]            # (cell, pin) driving constant 0
    dont_use: tuple[str, ...]
    generic: bool                      # the project's generic library (timed by synth/timing.py)
    time_unit_ns: float

    @property
    def nand2_area(self) -> float:
        return self.cell_area[self.nand2_cell]

    @property
    def corner(self) -> str:
        if self.generic:
            return "single nominal corner (generic logical-effort model)"
        m = _CORNER_RE.search(self.name)
        if not m:
            return "as characterised in the file (corner not named)"
        kind = {"tt": "typical", "ff": "fast", "ss": "slow", "fs": "fast-slow", "sf": "slow-fast"}[m.group(1).lower()]
        temp = int(m.group(2)[:-1].replace("n", "-"))
        return f"{m.group(0)} ({kind}, {temp} °C, {m.group(3).replace('v', '.')} V)"

    @property
    def area_unit(self) -> str:
        return "GE" if self.generic else "µm²"

    def usable(self, cell: str) -> bool:
        return not any(fnmatch.fnmatchcase(cell, p) for p in self.dont_use)

    def digest(self) -> str:
        h = hashlib.sha256(self.text)
        h.update("\0".join(self.dont_use).encode())
        return h.hexdigest()

    def describe(self) -> dict:
        return {"library": self.name, "path": str(self.path), "kind": "generic" if self.generic else "real",
                "corner": self.corner, "area_unit": self.area_unit, "nand2_cell": self.nand2_cell,
                "nand2_area": self.nand2_area, "dont_use": list(self.dont_use),
                "timing_engine": "synth/timing.py (logical effort)" if self.generic else "OpenSTA (NLDM)"}


def _cells(text: str):
    """(name, body) of every ``cell (...) { ... }`` group, by brace matching."""
    for m in re.finditer(r'\bcell\s*\(\s*"?([^")\s]+)"?\s*\)\s*\{', text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            j = text.find("{", i)
            k = text.find("}", i)
            if k < 0:
                break
            if 0 <= j < k:
                depth, i = depth + 1, j + 1
            else:
                depth, i = depth - 1, k + 1
        yield m.group(1), text[m.end():i]


def _pin_functions(body: str) -> list[tuple[str, str]]:
    return [(p, f.replace(" ", "")) for p, f in re.findall(
        r'\bpin\s*\(\s*"?([^")\s]+)"?\s*\)\s*\{[^{}]*?function\s*:\s*"([^"]*)"', body)]


_NAND2_FUNCS = {"!(A&B)", "!(A*B)", "(!A)|(!B)", "!(A1&A2)", "!(A1*A2)", "(!A1)|(!A2)", "!(AB)", "!(A1A2)"}


def load_library(path: str | pathlib.Path, dont_use: list[str] | tuple[str, ...] | None = None) -> Library:
    """Parse a Liberty file (plain or .gz). ConfigError with one line when it is not usable."""
    from . import liberty as generic_lib
    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"Liberty file not found: {path}")
    raw = path.read_bytes()
    try:
        data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError) as exc:
        raise ConfigError(f"{path}: not a readable gzip file ({exc})") from None
    text = data.decode("utf-8", errors="replace")
    name_m = re.search(r'\blibrary\s*\(\s*"?([^")\s]+)"?\s*\)', text)
    if not name_m:
        raise ConfigError(f"{path}: not a Liberty file (no `library (...)` group)")
    name = name_m.group(1)
    unit_m = re.search(r'time_unit\s*:\s*"?\s*1\s*(ps|ns)"?', text)
    time_unit_ns = 0.001 if unit_m and unit_m.group(1) == "ps" else 1.0
    area, seq, icg, nand2, hi, lo = {}, set(), set(), [], None, None
    for cell, body in _cells(text):
        am = re.search(r"\barea\s*:\s*([0-9.eE+-]+)", body)
        area[cell] = float(am.group(1)) if am else 0.0
        if re.search(r"\bclock_gating_integrated_cell\s*:", body):
            icg.add(cell)
            continue
        if re.search(r"\b(ff|latch|ff_bank|latch_bank)\s*\(", body):
            seq.add(cell)
            continue
        funcs = _pin_functions(body)
        for pin, f in funcs:
            if f in ("1", "\"1\"") and hi is None:
                hi = (cell, pin)
            if f in ("0", "\"0\"") and lo is None:
                lo = (cell, pin)
            if f in _NAND2_FUNCS:
                nand2.append(cell)
    if not area:
        raise ConfigError(f"{path}: no cells in library {name!r}")
    generic = name == generic_lib.LIB_NAME
    if dont_use is None:
        dont_use = next((pats for prefix, pats in KNOWN_DONT_USE.items() if name.startswith(prefix)), ())
    dont_use = tuple(dont_use)
    usable_nand2 = [c for c in nand2 if not any(fnmatch.fnmatchcase(c, p) for p in dont_use)] or nand2
    if not usable_nand2:
        raise ConfigError(f"{path}: no two-input NAND cell found (needed as the gate-equivalent unit)")
    if hi is None or lo is None:
        raise ConfigError(f"{path}: no tie-high/tie-low cell (a pin with function \"1\"/\"0\") found")
    if not seq:
        raise ConfigError(f"{path}: no flip-flop cells in library {name!r}")
    return Library(path=path, name=name, text=data, cell_area=area, sequential=frozenset(seq),
                   clock_gates=frozenset(icg),
                   nand2_cell=min(usable_nand2, key=lambda c: (area[c], c)), tie_hi=hi, tie_lo=lo,
                   dont_use=dont_use, generic=generic, time_unit_ns=time_unit_ns)
