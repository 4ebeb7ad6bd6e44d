"""`cassandra-rtl encode INPUT -o OUT.cass`: split tensors into speculation and verification data."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..golden.codec import encode_tensor
from ..golden.config import CodecConfig
from ..golden.container import write_container
from ..errors import ConfigError, InputError
from ..golden.io import check_output_path, count_tensors, read_tensors
from ..progress import progress

# Defaults (docs/FORMAT.md, README): C1, G = 128, keep everything, 3 mantissa bits. Mantissa truncation
# alone keeps SmolLM2's draft acceptance high (~0.8 at m = 3), while magnitude pruning of half the
# weights ruins it; the draft-selection work revisits these defaults.
DEFAULTS = dict(scheme="c1", keep_ratio=1.0, mantissa_bits=3, group_size=128)
# Rank-1 tensors (norm scales, biases) are tiny: the draft reads them exactly.
VECTOR_CONFIG = dict(keep_ratio=1.0, mantissa_bits=7)


def add_codec_options(p):
    p.add_argument("--scheme", choices=["c1", "c2"], default=DEFAULTS["scheme"],
                   help="c1: rank-unary exponent codes (default); c2: MX-style shared exponents")
    p.add_argument("--keep-ratio", type=float, default=DEFAULTS["keep_ratio"],
                   help="fraction of each superblock the draft keeps, in (0, 1] (default 1.0)")
    p.add_argument("--mantissa-bits", type=int, default=DEFAULTS["mantissa_bits"],
                   help="mantissa bits the draft keeps, 0..7 (default 3)")
    p.add_argument("--group-size", type=int, default=DEFAULTS["group_size"],
                   help="superblock size G: 32, 64, 128 or 256 (default 128)")
    p.add_argument("--chunk-superblocks", type=int, default=None, metavar="A",
                   help="format 2.0: superblocks per chunk, a power of two <= 64 with A*G <= 1024 "
                        "(default: the format's policy, 1024/G for weights)")
    p.add_argument("--pairs", action=argparse.BooleanOptionalAction, default=None,
                   help="format 2.0: pair groups in the codebooks (default: the format's policy, on for weights)")


def config_from_args(args) -> CodecConfig:
    return CodecConfig(scheme=args.scheme, keep_ratio=args.keep_ratio, mantissa_bits=args.mantissa_bits,
                       group_size=args.group_size, chunk_superblocks=getattr(args, "chunk_superblocks", None),
                       pair_codes=getattr(args, "pairs", None))


def config_for(name: str, ndim: int, base: CodecConfig) -> CodecConfig:
    if ndim == 1:
        return CodecConfig(scheme=base.scheme, group_size=base.group_size, chunk_superblocks=base.chunk_superblocks,
                           pair_codes=base.pair_codes, **VECTOR_CONFIG)
    return base


def encode_file(inp, out, base: CodecConfig, quiet: bool = False) -> dict:
    """Encode every tensor of ``inp`` into the container ``out`` (written atomically: on any error no
    partial file is left and an existing ``out`` is unchanged)."""
    check_output_path(out)                      # before the slow part: refuse a directory / device early
    if Path(out).exists() and Path(inp).exists() and Path(out).samefile(inp):
        raise InputError(f"{out}: is the input file; give another output path")
    total = count_tensors(inp)
    encoded = {}
    t0 = time.perf_counter()
    values = 0
    for name, bits in progress(read_tensors(inp), total=total, desc=f"encode {Path(inp).name}", unit="tensor",
                               disable=quiet):
        if name in encoded:
            raise InputError(f"{Path(inp).name}: tensor name {name!r} appears twice")
        try:
            encoded[name] = encode_tensor(bits, config_for(name, bits.ndim, base))
        except InputError as exc:
            raise InputError(f"{Path(inp).name}: tensor {name!r}: {exc}") from None
        values += bits.size
    if not encoded:
        raise InputError(f"{Path(inp).name}: holds no tensors")
    meta = {"producer": "cassandra-rtl encode", "source": Path(inp).name, "default_config": base.to_json()}
    write_container(out, encoded, meta)
    return {"tensors": len(encoded), "values": values, "seconds": time.perf_counter() - t0}


def encode_model_artifact(args) -> dict:
    """``encode MODEL -o F.cass --draft-config ... | --calibrate``: the model artifact `generate --cass` runs
    from (model/artifact.py): every tensor under the model path's names, the allocation and the model's
    arguments and tokenizer in the meta."""
    import sys

    from ..model.api import choose_allocation
    from ..model.artifact import source_digest, write_artifact
    from ..model.loader import load
    from ..progress import step_progress

    inp = Path(args.input)
    check_output_path(args.output)
    if not inp.exists():
        raise InputError(f"model not found: {inp}")
    if not (inp.is_dir() or inp.suffix.lower() == ".gguf"):
        raise InputError(f"{inp}: a model artifact is written from a .gguf file or a Hugging Face folder")
    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    prog = None if args.quiet else step_progress("encode")
    dc = args.draft_config
    uniform_opts = {k: getattr(args, k) if dc in (None, "uniform") else None for k in ("keep_ratio", "mantissa_bits")}
    if dc is not None and dc != "uniform" and any(
            getattr(args, k) != DEFAULTS[k] for k in ("keep_ratio", "mantissa_bits", "scheme", "group_size")):
        raise ConfigError("--draft-config fixes every tensor's codec config: drop --keep-ratio/--mantissa-bits/"
                          "--scheme/--group-size (or use --draft-config uniform)")
    ck = load(inp, max_seq_len=1 << 20)        # the model's own context; generate --max-seq-len caps it
    _, alloc = choose_allocation(None, ck.args.n_layers, dc if dc is not None else "uniform",
                                 uniform_opts["keep_ratio"], uniform_opts["mantissa_bits"], None, 1.0, args.scheme,
                                 args.group_size)
    if dc in (None, "uniform"):
        alloc.n_layers = ck.args.n_layers
    if args.calibrate:
        from ..model.salience import CALIBRATION_PROMPTS, calibrate, norms_digest, norms_to_json

        say(f"[encode] calibrating Wanda salience on {len(CALIBRATION_PROMPTS)} built-in prompts")
        norms = calibrate(ck, progress=prog)
        alloc.salience = {"kind": "wanda", "calibration": {"prompts": list(CALIBRATION_PROMPTS), "new_tokens": 32,
                                                           "source": "target greedy"},
                          "norms": norms_to_json(norms), "digest": norms_digest(norms)}
    alloc.model = inp.name
    info = write_artifact(ck, alloc, args.output, digest=source_digest(inp), progress=prog, consume=True)
    info["bf16_bytes"] = 2 * info["values"]
    return info


def run(args) -> int:
    if args.draft_config is not None or args.calibrate:
        info = encode_model_artifact(args)
        if not args.quiet:
            print(f"wrote {args.output}: model artifact, {info['tensors']} tensors, {info['values']:,} values, "
                  f"{info['bytes'] / 1e6:.1f} MB ({info['bytes'] / info['bf16_bytes']:.1%} of bf16) in "
                  f"{info['seconds']:.1f} s; run it with `cassandra-rtl generate --cass {args.output} --prompt ...`")
        return 0
    base = config_from_args(args)
    info = encode_file(args.input, args.output, base, quiet=args.quiet)
    if not args.quiet:
        print(f"wrote {args.output}: {info['tensors']} tensors, {info['values']:,} values "
              f"in {info['seconds']:.1f} s")
    return 0


def register(sub):
    p = sub.add_parser("encode", help="encode .npy/.safetensors/.gguf tensors into a .cass container")
    p.add_argument("input", help=".npy (uint16 raw bf16 bits or float32), .safetensors or .gguf; with "
                   "--draft-config/--calibrate a .gguf or a Hugging Face folder")
    p.add_argument("-o", "--output", required=True, help="output .cass container")
    add_codec_options(p)
    p.add_argument("--draft-config", default=None, metavar="FILE|bundled|uniform",
                   help="write a model artifact for `generate --cass`: every tensor with this draft allocation "
                   "(a `cassandra-rtl tune` JSON or .cass, `bundled` = the bundled model's tuned one, `uniform` = "
                   "the codec options above), plus the model's arguments and tokenizer")
    p.add_argument("--calibrate", action="store_true",
                   help="model artifact with Wanda salience calibrated on the built-in prompts (the keep sets "
                   "follow activations; with --draft-config: recalibrated for it)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=run)
