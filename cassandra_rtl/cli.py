"""`cassandra-rtl` command line: a dispatcher over cassandra_rtl.commands.*.

Bad input never produces a traceback: commands raise ``CliError`` (or the golden codec's
``FormatError``/``ConfigError``), which are printed as one line and exit non-zero.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    from . import commands

    parser = argparse.ArgumentParser(prog="cassandra-rtl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("cassandra-rtl: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place that turns errors into messages
        from .errors import is_user_error

        if is_user_error(exc):
            print(f"cassandra-rtl {args.command}: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
