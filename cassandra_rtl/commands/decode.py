"""`cassandra-rtl decode IN.cass -o OUT.npy [--draft] [--tensor NAME]`: raw bf16 bits out.

``-o`` is used exactly as given (no ``.npy`` is appended; a directory or a device is refused) and is
written atomically: a temporary file in the same folder, renamed when complete, so a failure (a full
disk) leaves no partial file and an existing OUT unchanged.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..cli import CliError
from ..errors import FormatError
from ..golden.codec import decode_draft, decode_full
from ..golden.container import read_container
from ..golden.io import atomic_output, check_output_path


def run(args) -> int:
    check_output_path(args.output)              # before reading / decoding anything
    c = read_container(args.input, verification=not args.draft)
    if args.tensor is None:
        if len(c.tensors) != 1:
            example = next(iter(c.tensors), "NAME")
            raise CliError(f"{args.input}: the container holds {len(c.tensors)} tensors; choose one with --tensor "
                           f"(e.g. {example})")
        name = next(iter(c.tensors))
    else:
        name = args.tensor
        if name not in c.tensors:
            raise CliError(f"no tensor {name!r} in {args.input}")
    enc = c.tensors[name]
    try:
        bits = decode_draft(enc) if args.draft else decode_full(enc)
    except FormatError as exc:
        raise FormatError(f"{Path(args.input).name}: tensor {name!r}: {exc}") from None
    with atomic_output(args.output) as f:
        np.save(f, bits)
    print(f"wrote {args.output}: {name} {list(bits.shape)} uint16 ({'draft' if args.draft else 'full'} bf16 bits, "
          f".npy format)")
    return 0


def register(sub):
    p = sub.add_parser("decode", help="decode one tensor of a .cass container to raw uint16 bf16 bits")
    p.add_argument("input")
    p.add_argument("-o", "--output", required=True, help="output file, written exactly at this path in .npy "
                   "format (uint16); not a directory or device")
    p.add_argument("--draft", action="store_true", help="the draft view (speculation data only)")
    p.add_argument("--tensor", help="tensor name (required when the container holds several)")
    p.set_defaults(func=run)
