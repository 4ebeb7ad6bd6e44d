"""`cassandra-rtl` command line: a dispatcher over cassandra_rtl.commands.*.

Bad input never produces a traceback: commands raise ``CliError`` or the project's ``UserError``s
(``FormatError``/``ConfigError``/``InputError``/``ToolMissingError``); those, OS errors (a full disk, a
missing or unreadable file) and running out of memory are printed as one line and exit 2. ``--debug``
(or ``CASSANDRA_RTL_DEBUG=1``) shows the traceback instead, for developers.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (the full usage is one --help away)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from . import commands

    parser = Parser(prog="cassandra-rtl", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error (also CASSANDRA_RTL_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)          # a usage error: one line on stderr, exit status 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    debug = args.debug or os.environ.get("CASSANDRA_RTL_DEBUG", "") not in ("", "0")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("cassandra-rtl: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place that turns errors into messages
        from .errors import describe, is_user_error

        if debug or not is_user_error(exc):
            raise
        print(f"cassandra-rtl {args.command}: error: {describe(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
