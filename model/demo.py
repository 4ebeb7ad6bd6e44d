"""Step 2 of `cassandra-rtl demo`: Cassandra self-speculative decoding on the bundled SmolLM2 next to plain
greedy decoding, with the RTL in the loop for one layer when the co-simulation path is available."""
from __future__ import annotations

import torch

from cassandra_rtl.errors import ToolMissingError

from .loader import load
from .drafters import default_cache_dir
from .runner import DraftOptions, build, rtl_decoder

PROMPT = "What is the capital of France? Answer in one sentence."


def run_demo(args, max_new_tokens: int = 32) -> int:
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    ck = load()
    tok = ck.tokenizer
    ids = tok.encode(tok.apply_chat(PROMPT))
    rtl = True
    try:
        rtl_decoder()
    except ToolMissingError as e:
        print(f"   (RTL in the loop skipped: {e})")
        rtl = False
    plain, _, _ = build(ck, "none", DraftOptions())
    ref = plain.generate(ids, max_new_tokens)
    o = DraftOptions(gamma=3, keep_ratio=1.0, mantissa_bits=3, rtl=rtl, rtl_layers=[0] if rtl else None,
                     cache_dir=default_cache_dir())
    eng, d, _ = build(ck, "cassandra", o)
    res = eng.generate(ids, max_new_tokens, drafter=d, gamma=o.gamma)
    s = res.summary()
    print(f"   prompt: {PROMPT}")
    print(f"   plain greedy : {tok.decode(ref.tokens)!r}")
    print(f"   Cassandra    : {tok.decode(res.tokens)!r}" + ("  (layer 0 decoded by the RTL)" if rtl else ""))
    same = res.tokens == ref.tokens
    print(f"   token-identical: {same}; acceptance {s['acceptance_rate']:.3f}; tokens/step {s['tokens_per_step']:.2f}; "
          f"draft {d.info['draft_weight_bytes'] / 1e6:.1f} MB vs bf16 {d.info['bf16_weight_bytes'] / 1e6:.1f} MB")
    print("   modeled speedup vs bf16 autoregressive: "
          + ", ".join(f"{k} {v:.2f}x" for k, v in s["modeled_speedup"].items()))
    return 0 if same else 1
