"""Sub-commands of the `cassandra-rtl` CLI.

Each module here defines ``register(subparsers)`` which adds one (or more) sub-parsers whose
``func(args) -> int`` runs the command. cli.py discovers the modules automatically, so adding a
command never means editing cli.py.
"""
