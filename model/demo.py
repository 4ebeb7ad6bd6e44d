"""Step 2 of `cassandra-rtl demo`: Cassandra self-speculative decoding on the bundled SmolLM2 next to plain
greedy decoding, with layer 0's draft weights decoded by the Verilated C1 decoder (and its KV vectors by the
KV encoder / decoder RTL) when the co-simulation path is available. Goes through the Python API
(model/api.py) with the same model cache and tuned draft allocation as `cassandra-rtl generate`, and writes
one plot, build/demo/speculation.png: tokens per verify step, and bytes read per token against bf16."""
from __future__ import annotations

import time
from pathlib import Path

import torch

from cassandra_rtl.errors import ToolMissingError
from cassandra_rtl.progress import step_progress

from .api import load
from .runner import rtl_decoder

PROMPT = "Explain in a few sentences how a refrigerator keeps food cold."
MAX_NEW_TOKENS = 96


def plot(metrics: dict, path: Path, gamma: int) -> Path:
    """Left: tokens each verify step emitted (1 = every draft token rejected, gamma + 1 = all accepted).
    Right: modeled bytes read per generated token, Cassandra (draft + target) against bf16 autoregressive."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = metrics["tokens_at_step"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [3, 1]})
    a.bar(range(1, len(steps) + 1), steps, color="tab:blue")
    a.axhline(1, color="grey", lw=0.8, ls=":")
    a.axhline(metrics["tokens_per_step"], color="tab:orange", lw=1.2,
              label=f"mean {metrics['tokens_per_step']:.2f} tokens/step")
    a.set_ylim(0, gamma + 1.5)
    a.set_xlabel("verify step")
    a.set_ylabel("tokens emitted")
    a.set_title(f"SmolLM2-135M, gamma {gamma}: acceptance {metrics['acceptance_rate']:.2f}")
    a.legend(loc="upper right", fontsize=8)
    mb = 1e6
    draft, target = metrics["draft_bytes_per_token"] / mb, metrics["target_bytes_per_token"] / mb
    b.bar(["bf16 AR"], [metrics["bf16_ar_bytes_per_token"] / mb], color="grey")
    b.bar(["Cassandra"], [target], color="tab:blue", label="target")
    b.bar(["Cassandra"], [draft], bottom=[target], color="tab:green", label="draft")
    b.set_ylabel("MB read per token (modeled)")
    b.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_demo(args, max_new_tokens: int = MAX_NEW_TOKENS) -> int:
    torch.set_num_threads(1)                    # one thread: never slower here (docs/MODEL.md, threads)
    rtl = True
    try:
        rtl_decoder()
    except ToolMissingError as e:
        print(f"   (RTL in the loop skipped: {e})")
        rtl = False
    t0 = time.perf_counter()
    print("   loading the model (the tuned draft allocation; layer 0's draft weights through the RTL)"
          if rtl else "   loading the model (the tuned draft allocation)", flush=True)
    m = load(None, rtl=rtl, rtl_layers=[0] if rtl else None, progress=step_progress("load"),
             say=lambda msg: print("   " + msg, flush=True))
    print(f"   ready in {time.perf_counter() - t0:.0f} s", flush=True)
    ids = m.encode_prompt(PROMPT)
    print(f"   prompt: {PROMPT}\n   plain greedy decoding ({max_new_tokens} tokens at most) ...", flush=True)
    ref = m.generate(ids, max_new_tokens, speculative=False)
    print("   Cassandra speculative decoding ...", flush=True)
    res = m.generate(ids, max_new_tokens)
    s, same = res.metrics, res.tokens == ref.tokens
    print(f"   answer ({s['generated']} tokens, token-identical to plain greedy: {same}):")
    print("     " + res.text.strip().replace("\n", "\n     "))
    steps = s["tokens_at_step"]
    print(f"   speculation: acceptance {s['acceptance_rate']:.3f} (per draft position "
          + " ".join(f"{a:.2f}" for a in s["acceptance_per_position"]) + f"), {s['tokens_per_step']:.2f} tokens per "
          f"verify step over {len(steps)} steps (gamma {s['mean_gamma']:.1f}; tokens per step: "
          + " ".join(map(str, steps[:32])) + (" ..." if len(steps) > 32 else "") + ")")
    print(f"   bytes read per token (modeled): {s['bytes_per_token'] / 1e6:.1f} MB (draft "
          f"{s['draft_bytes_per_token'] / 1e6:.1f} + target {s['target_bytes_per_token'] / 1e6:.1f}) vs bf16 "
          f"autoregressive {s['bf16_ar_bytes_per_token'] / 1e6:.1f} MB = "
          f"{s['bytes_per_token'] / s['bf16_ar_bytes_per_token']:.2f}x")
    r = s.get("rtl")
    if r:
        print(f"   RTL in the loop (layer 0): {r['weight_tensors']} weight tensors, {r['weight_values']:,} values "
              f"decoded by the Verilated C1 decoder ({r['weight_mismatches']} mismatches against golden); "
              f"{r['kv_vectors_encoded']:,} KV vectors encoded by the KV encoder RTL "
              f"({r['kv_encode_mismatches']} mismatches), {r['kv_vectors_decoded']:,} decoded")
    print("   modeled speedup vs bf16 autoregressive: "
          + ", ".join(f"{k} {v:.2f}x" for k, v in s["modeled_speedup"].items())
          + f"; peak RSS {s['peak_rss_bytes'] / 1e6:.0f} MB")
    png = plot(s, Path(args.out) / "speculation.png", max(len(s["acceptance_per_position"]), 1))
    print(f"   plot: {png}")
    ok = same and (not r or (r["weight_mismatches"] == 0 and r["kv_encode_mismatches"] == 0))
    return 0 if ok else 1
