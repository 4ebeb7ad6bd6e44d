"""`cassandra-rtl decode IN.cass -o OUT.npy [--draft] [--tensor NAME]`: raw bf16 bits out."""
from __future__ import annotations

import numpy as np

from ..cli import CliError
from ..golden.codec import decode_draft, decode_full
from ..golden.container import read_container


def run(args) -> int:
    c = read_container(args.input, verification=not args.draft)
    if args.tensor is None:
        if len(c.tensors) != 1:
            example = next(iter(c.tensors), "NAME")
            raise CliError(f"the container holds {len(c.tensors)} tensors; choose one with --tensor (e.g. {example})")
        name = next(iter(c.tensors))
    else:
        name = args.tensor
        if name not in c.tensors:
            raise CliError(f"no tensor {name!r} in {args.input}")
    enc = c.tensors[name]
    bits = decode_draft(enc) if args.draft else decode_full(enc)
    np.save(args.output, bits)
    print(f"wrote {args.output}: {name} {list(bits.shape)} uint16 ({'draft' if args.draft else 'full'} bf16 bits)")
    return 0


def register(sub):
    p = sub.add_parser("decode", help="decode one tensor of a .cass container to raw uint16 bf16 bits")
    p.add_argument("input")
    p.add_argument("-o", "--output", required=True, help="output .npy (uint16)")
    p.add_argument("--draft", action="store_true", help="the draft view (speculation data only)")
    p.add_argument("--tensor", help="tensor name (required when the container holds several)")
    p.set_defaults(func=run)
