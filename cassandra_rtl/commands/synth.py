"""`cassandra-rtl synth [--quick] [--only NAME] ...`: the `make synth` flow (Yosys area/timing reports
and the NPU-overhead estimate) from the CLI. Same options as ``python -m cassandra_rtl.synth.flow``."""
from __future__ import annotations


def run(args) -> int:
    from ..synth.flow import run_from_args   # lazy: keeps `cassandra-rtl --help` fast

    return run_from_args(args)


def register(sub):
    from ..synth.flow import add_arguments

    p = sub.add_parser("synth", help="Yosys area/timing of every block and the NPU-overhead estimate "
                                     "(writes build/synth/report.{json,md})")
    add_arguments(p)
    p.set_defaults(func=run)
