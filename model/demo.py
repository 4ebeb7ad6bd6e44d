"""Step 2 of `cassandra-rtl demo`: Cassandra self-speculative decoding on the bundled SmolLM2 next to plain
greedy decoding, with the RTL in the loop for one layer when the co-simulation path is available. Goes
through the Python API (model/api.py): the model artifact is encoded once into the model cache."""
from __future__ import annotations

import torch

from cassandra_rtl.errors import ToolMissingError

from .api import load
from .runner import rtl_decoder

PROMPT = "What is the capital of France? Answer in one sentence."


def run_demo(args, max_new_tokens: int = 32) -> int:
    torch.set_num_threads(1)                    # one thread: never slower here (docs/MODEL.md, threads)
    rtl = True
    try:
        rtl_decoder()
    except ToolMissingError as e:
        print(f"   (RTL in the loop skipped: {e})")
        rtl = False
    m = load(None, keep_ratio=1.0, mantissa_bits=3, gamma=3, rtl=rtl, rtl_layers=[0] if rtl else None,
             say=lambda msg: print("   " + msg))
    ids = m.encode_prompt(PROMPT)
    ref = m.generate(ids, max_new_tokens, speculative=False)
    res = m.generate(ids, max_new_tokens, gamma=3)
    s, d = res.metrics, m.drafter
    print(f"   prompt: {PROMPT}")
    print(f"   plain greedy : {ref.text!r}")
    print(f"   Cassandra    : {res.text!r}" + ("  (layer 0 decoded by the RTL)" if rtl else ""))
    same = res.tokens == ref.tokens
    print(f"   token-identical: {same}; acceptance {s['acceptance_rate']:.3f}; tokens/step {s['tokens_per_step']:.2f}; "
          f"draft {d.info['draft_weight_bytes'] / 1e6:.1f} MB vs bf16 {d.info['bf16_weight_bytes'] / 1e6:.1f} MB; "
          f"peak RSS {s['peak_rss_bytes'] / 1e6:.0f} MB")
    print("   modeled speedup vs bf16 autoregressive: "
          + ", ".join(f"{k} {v:.2f}x" for k, v in s["modeled_speedup"].items()))
    return 0 if same else 1
