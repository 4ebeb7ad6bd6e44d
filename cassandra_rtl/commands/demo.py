"""`cassandra-rtl demo` (what `make demo` runs): the whole pipeline on the bundled SmolLM2-135M.

1. encode the model into build/demo/smollm2.cass and print its stats table (computed a part of a tensor at a
   time: the process peak stays near `generate`'s);
2. a longer answer by speculative decoding with the Cassandra draft next to plain greedy decoding, layer 0's
   draft weights and the KV vectors through the Verilated RTL: acceptance, tokens per verify step, bytes read
   per token against bf16, and a plot in build/demo/speculation.png (model/demo.py).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from ..golden.config import CodecConfig
from ..golden.io import bundled_model_path
from .encode import DEFAULTS, encode_file
from .stats import container_stats, format_table


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gguf_path = bundled_model_path()
    cass = out / "smollm2.cass"
    print(f"== the bundled model: {gguf_path} (`cassandra-rtl where-model` prints this path)")
    if not cass.exists() or cass.stat().st_mtime < gguf_path.stat().st_mtime or args.force:
        print(f"== 1. encoding {gguf_path.name} -> {cass} (defaults: {DEFAULTS})")
        info = encode_file(gguf_path, cass, CodecConfig(**DEFAULTS))
        print(f"   {info['tensors']} tensors, {info['values']:,} values in {info['seconds']:.1f} s")
    else:
        print(f"== 1. {cass} is up to date (use --force to re-encode)")
    print(f"   statistics of {cass.name} ...", flush=True)
    print(format_table({k: v for k, v in container_stats(cass).items() if k != "per_tensor"}), flush=True)
    if importlib.util.find_spec("cassandra_rtl.model.demo") is None:
        print("\n== 2. (the model path is not installed yet: skipping speculative decoding)")
        return 0
    from ..model.demo import run_demo

    print("\n== 2. speculative decoding on the bundled model, RTL in the loop for layer 0", flush=True)
    return run_demo(args)


def register(sub):
    p = sub.add_parser("demo", help="encode the bundled SmolLM2, print stats, run speculative decoding")
    p.add_argument("--out", default="build/demo", help="output folder (default build/demo)")
    p.add_argument("--force", action="store_true", help="re-encode even if the container is up to date")
    p.set_defaults(func=run)
