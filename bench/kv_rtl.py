"""Real K/V vectors of the model path through the RTL KV encoder (tb/bulk_encoder, Verilator).

Runs the Cassandra model path (``cassandra_rtl.model.api.load``, the bundled SmolLM2 unless --model) for
--max-new-tokens tokens of one prompt, capturing every call of the golden KV encode
(``model.kvformat.encode_kv(bits, cfg, books)``, wrapped) grouped by ``KVSpecView.sync`` (one group =
one step: prefill, then each accepted run of tokens), then pushes each step's vectors through the RTL
encoder in one harness run per step (what ``generate --rtl`` would do) and compares every plane word with
golden. ``--also-c2``: the same vectors through the C2 encoder with C2 books calibrated on the prefill.

    nice -n 10 python bench/kv_rtl.py --max-new-tokens 30 --threads 1 [--json out.json]

Prints vectors, values, mismatches, simulated cycles, values/cycle (including the register programming
between batches) and simulation / wall seconds, per encoder configuration.

Measured (bundled SmolLM2-135M, default prompt, 30 tokens, format 3.0 encoders, 2-core machine under load;
``nice -n 10 python bench/kv_rtl.py --max-new-tokens 30 --threads 1 --also-c2 [--kv-keep-ratio 0.5]``):

| KV config (G = 64, m = 3) | encoder | steps | vectors | values | mismatches | values/cycle (per step / one batch per book) | sim s |
|---|---|---:|---:|---:|---:|---|---:|
| keep 64 (bundled allocation) | encoder_kv_c1_l2 | 12 | 12,420 | 794,880 | 0 | 1.77 / 1.92 | 0.19 |
| same vectors, C2 books | encoder_kv_c2_l2 | 12 | 12,420 | 794,880 | 0 | 1.79 / 1.93 | 0.21 |
| keep 32 (uniform, --kv-keep-ratio 0.5) | encoder_kv_c1_l2 | 11 | 12,420 | 794,880 | 0 | 0.94 / 0.98 | 0.36 |
| same vectors, C2 books | encoder_kv_c2_l2 | 11 | 12,420 | 794,880 | 0 | 0.83 / 0.86 | 0.40 |

"per step" includes the register programming and the drain between the 60 batches (30 layers x K/V) of
each step; "one batch per book" is every captured vector of a (layer, K/V) in one batch.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def capture(prompt: str, max_new_tokens: int, model=None, threads: int = 1, kv_keep_ratio=None):
    """[[(bits, cfg, books), ...] per sync call] and the generation's metrics."""
    from cassandra_rtl.model import kvformat
    from cassandra_rtl.model.api import load
    from cassandra_rtl.model.runner import set_threads

    set_threads(threads)
    steps: list[list] = []
    golden_encode = kvformat.encode_kv
    golden_sync = kvformat.KVSpecView.sync

    def encode_kv(bits, cfg, books):
        steps[-1].append((np.array(bits, dtype=np.uint16, copy=True), cfg, books))
        return golden_encode(bits, cfg, books)

    def sync(self, target, draft, start, stop):
        steps.append([])
        return golden_sync(self, target, draft, start, stop)

    kvformat.encode_kv, kvformat.KVSpecView.sync = encode_kv, sync
    try:
        kw = {} if kv_keep_ratio is None else {"kv_keep_ratio": kv_keep_ratio, "keep_ratio": 1.0}
        t0 = time.perf_counter()
        m = load(model, **kw)
        g = m.generate(prompt, max_new_tokens=max_new_tokens)
        wall = time.perf_counter() - t0
    finally:
        kvformat.encode_kv, kvformat.KVSpecView.sync = golden_encode, golden_sync
    return [s for s in steps if s], {"tokens": len(g.tokens), "model_wall_s": round(wall, 1),
                                     "text": g.text[:80]}


def c2_batches(steps):
    """The same vectors as C2 KV configs (same G, m, keep) with C2 books calibrated on the prefill (step 0)."""
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.kv import calibrate_kv_codebooks

    books, cfgs = [], []
    for bits, cfg, _ in steps[0]:
        c2 = CodecConfig(scheme="c2", group_size=cfg.group_size, mantissa_bits=cfg.mantissa_bits,
                         keep_count=cfg.keep_count, kind="kv")
        cfgs.append(c2)
        books.append(calibrate_kv_codebooks(bits, c2))
    return [[(bits, cfgs[i], books[i]) for i, (bits, _, _) in enumerate(s)] for s in steps]


def through_rtl(steps, config: str) -> dict:
    from cassandra_rtl.tb import bulk_encoder as BE

    BE.build_harness(config)
    st = BE.EncoderStats()
    t0 = time.perf_counter()
    for batches in steps:                     # one harness run per step, as generate --rtl would do
        BE.encode_many_with_rtl(batches, config, stats=st, strict=False)
    wall = time.perf_counter() - t0
    steady = BE.EncoderStats()                # every vector of a (layer, K/V) in one batch: no per-step programming
    merged = {}
    for batches in steps:
        for i, (bits, cfg, books) in enumerate(batches):
            merged.setdefault(i, (cfg, books, []))[2].append(bits)
    BE.encode_many_with_rtl([(np.concatenate(b), c, k) for c, k, b in merged.values()], config, stats=steady,
                            strict=False)
    return {"config": config, "steps": len(steps), "vectors": st.vectors, "values": st.values,
            "mismatches": st.mismatches, "cycles": st.cycles, "values_per_cycle": round(st.values_per_cycle, 3),
            "sim_seconds": round(st.seconds, 4), "wall_seconds": round(wall, 2),
            "values_per_cycle_one_batch_per_book": round(steady.values_per_cycle, 3),
            "mismatches_one_batch_per_book": steady.mismatches}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", default="Explain in two sentences why the sky is blue.")
    ap.add_argument("--max-new-tokens", type=int, default=30)
    ap.add_argument("--model", default=None, help="default: the bundled SmolLM2-135M")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--kv-keep-ratio", type=float, default=None,
                    help="a uniform draft with this KV keep ratio (default: the model's allocation)")
    ap.add_argument("--config", default=None, help="encoder configuration (default encoder_kv_c1_l2)")
    ap.add_argument("--also-c2", action="store_true", help="also through encoder_kv_c2_l2 (C2 books)")
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args(argv)
    from cassandra_rtl.tb import bulk_encoder as BE

    if not BE.available():
        print("kv_rtl: Verilator is not installed (run `make setup`)", file=sys.stderr)
        return 2
    steps, gen = capture(a.prompt, a.max_new_tokens, a.model, a.threads, a.kv_keep_ratio)
    if not steps:
        print("kv_rtl: the model path encoded no K/V vectors (not a Cassandra draft?)", file=sys.stderr)
        return 1
    cfg0 = steps[0][0][1]
    out = {"generation": gen, "kv_config": {"scheme": cfg0.scheme, "G": cfg0.group_size, "m": cfg0.mantissa_bits,
                                            "keep": cfg0.keep_count},
           "batches_per_step": len(steps[0]), "runs": [through_rtl(steps, a.config or BE.DEFAULT_CONFIG[cfg0.scheme])]}
    if a.also_c2 and cfg0.scheme == "c1":
        out["runs"].append(through_rtl(c2_batches(steps), BE.DEFAULT_CONFIG["c2"]))
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 1 if any(r["mismatches"] or r["mismatches_one_batch_per_book"] for r in out["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
