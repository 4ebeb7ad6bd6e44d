"""Measure the decoder's values/cycle on SmolLM2 tensors (the numbers in docs/HARDWARE.md section 6).

    python -m cassandra_rtl.hw.measure [--config decoder_c1_l16] [--mode draft|full] [--keep 0.5]
                                       [--max-values 2000000] [--amaranth] [--scheme c1|c2] [--mbits 3]
                                       [--chunk A] [--pairs]

Tensors: every 2-D linear weight of the bundled SmolLM2-135M GGUF (dequantised, rounded to bf16 RNE by
``golden.io``), the first ``8192 / in_features * 4`` rows of each (so every tensor type is sampled),
encoded per tensor (own books) with G = 128, m = 3. The default backend is the verification team's
compiled Verilator harness on the exported Verilog (``cassandra_rtl.tb.bulk``: whole tensors, no
per-cycle Python); ``--amaranth`` runs the Amaranth simulator instead (slow: use a small --max-values).
Every decoded value is compared with the golden decode. Reported: values/cycle (including the
per-tensor register programming) and values/beat (the steady-state lane occupancy).
``--scheme c2`` encodes the same tensors with Cassandra-2 for a ``decoder_c2_*`` config (Amaranth only:
the bulk harness drives the C1 ports). ``--chunk A --pairs``: format 2.0 streams (chunks of A
superblocks, books with pair groups); ``--chunk 1 --no-pairs``: v1.0 streams; default: golden's policy
(``golden.config.FORMAT2_DEFAULTS``: v1.0 while it is False).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from ..errors import ConfigError


def sample_tensors(keep: float, max_values: int, m: int = 3, group: int = 128, scheme: str = "c1",
                   chunk: int | None = None, pairs: bool | None = None):
    from ..golden.codec import encode_tensor
    from ..golden.config import CodecConfig
    from ..golden.io import bundled_model_path, read_tensors

    encs, n = [], 0
    for name, bits in read_tensors(bundled_model_path()):
        if bits.ndim != 2 or "embd" in name or "norm" in name:
            continue
        rows = max(1, min(bits.shape[0], 8192 // bits.shape[1] * 4))
        b = np.ascontiguousarray(bits[:rows])
        encs.append(encode_tensor(b, CodecConfig(scheme=scheme, group_size=group, mantissa_bits=m, keep_ratio=keep,
                                                 chunk_superblocks=chunk, pair_codes=pairs)))
        n += b.size
        if n >= max_values:
            break
    return encs


def measure(config: str, mode: str, keep: float, max_values: int, amaranth: bool = False, scheme: str = "c1",
            m: int = 3, chunk: int | None = None, pairs: bool | None = None) -> dict:
    from ..golden.codec import decode_draft, decode_full

    t0 = time.time()
    encs = sample_tensors(keep, max_values, m=m, scheme=scheme, chunk=chunk, pairs=pairs)
    full = mode == "full"
    if amaranth:
        from .configs import build
        from .simutil import DecodeJob, Stalls, run_decoder
        dut = build(config)
        values = cycles = beats = 0
        outs = []
        for enc in encs:
            res = run_decoder(dut, [DecodeJob(enc, full)], Stalls())
            outs.append(res.values[0])
            values += len(res.values[0])
            cycles += res.cycles
            beats += len(res.meta[0])
    else:
        from ..tb.bulk import BulkStats, decode_many_with_rtl
        st = BulkStats()
        outs = decode_many_with_rtl(encs, mode, config, jobs=2, stats=st)
        values, cycles, beats = st.values, st.cycles, st.beats
    mismatches = sum(int(not np.array_equal(np.asarray(o).reshape(-1),
                                            (decode_full(e) if full else decode_draft(e)).reshape(-1)))
                     for o, e in zip(outs, encs))
    code_bits = sum(len(e.planes[p]) * 8 for e in encs for p in e.planes
                    if p.startswith("spec") or full)
    cfg0 = encs[0].config if encs else None
    return {"config": config, "scheme": scheme, "m": m, "mode": mode, "keep": keep,
            "chunk": cfg0.chunk_superblocks if cfg0 else chunk, "pairs": cfg0.pair_codes if cfg0 else pairs,
            "bits_per_value": round(code_bits / values, 4) if values else 0.0,
            "tensors": len(encs), "values": values,
            "cycles": cycles, "beats": beats, "values_per_cycle": round(values / cycles, 3),
            "values_per_beat": round(values / beats, 3), "mismatched_tensors": mismatches,
            "backend": "amaranth" if amaranth else "verilator-bulk", "seconds": round(time.time() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="decoder_c1_l16")
    ap.add_argument("--mode", choices=("draft", "full"), default="draft")
    ap.add_argument("--keep", type=float, default=0.5)
    ap.add_argument("--max-values", type=int, default=2_000_000)
    ap.add_argument("--amaranth", action="store_true")
    ap.add_argument("--scheme", choices=("c1", "c2"), default="c1")
    ap.add_argument("--mbits", type=int, default=3, help="draft mantissa bits m")
    ap.add_argument("--chunk", type=int, default=None,
                    help="format 2.0: superblocks per chunk A (1 = v1.0 framing; default: golden's policy)")
    ap.add_argument("--pairs", action=argparse.BooleanOptionalAction, default=None,
                    help="format 2.0: books with pair groups (default: golden's policy)")
    a = ap.parse_args(argv)
    try:
        res = measure(a.config, a.mode, a.keep, a.max_values, a.amaranth, a.scheme, a.mbits, a.chunk, a.pairs)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res))
    return 0 if res["mismatched_tensors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
