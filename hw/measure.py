"""Measure the decoder's values/cycle on SmolLM2 tensors, or on synthetic tensors of a chosen escape density
(the throughput tables of docs/datasheets/decoder_c1.md "Latency and throughput").

    python -m cassandra_rtl.hw.measure [--config decoder_c1v3_l8] [--mode draft|full] [--keep 0.5]
                                       [--max-values 2000000] [--amaranth] [--scheme c1|c2] [--mbits 3]
                                       [--chunk A] [--pairs] [--escapes P[,P...]]

Tensors: every 2-D linear weight of the bundled SmolLM2-135M GGUF (dequantised, rounded to bf16 RNE by
``golden.io``), the first ``8192 / in_features * 4`` rows of each (so every tensor type is sampled),
encoded per tensor (own books) with G = 128, m = 3. The default backend is the verification team's
compiled Verilator harness on the exported Verilog (``cassandra_rtl.tb.bulk``: whole tensors, no
per-cycle Python); ``--amaranth`` runs the Amaranth simulator instead (slow: use a small --max-values).
Every decoded value is compared with the golden decode. Reported: values/cycle (including the
per-tensor register programming) and values/beat (the steady-state lane occupancy).
``--scheme c2`` encodes the same tensors with Cassandra-2 for a ``decoder_c2*`` config. Each tensor goes to the
decoder in the plane layout it reads (format 3.0, tb/decoder/framing.py). ``--chunk A --pairs``: chunks of A
superblocks, books with pair groups; ``--chunk 1 --no-pairs``: the 1.0 framing; default: golden's policy.

``--escapes P[,P...]``: instead of SmolLM2, one synthetic C1 tensor of ``--max-values`` values per P
(``escape_tensor``: a fraction P of the values get an exponent outside every book, half of them large, so
kept and escaped on ``spec.codes``, half small, so pruned and escaped on ``verif.codes``); each point
reports the escapes per plane, and the points after the first the extra cycles per escape of the mode's
plane(s) against the first point (give 0 first).
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


def escape_tensor(fraction: float, numel: int, keep: float = 0.5, m: int = 3, seed: int = 1):
    """A C1 tensor (G = 128, format 2.0 defaults) whose escape density is set by ``fraction``: the other
    values have one of 14 common exponents (113..126, uniform), so every book holds them; a value drawn as
    rare gets an exponent from 64 large ones (160..223: kept, an escape on ``spec.codes``) or 64 small ones
    (40..103: pruned, an escape on ``verif.codes``), half each; signs and mantissas uniform."""
    from ..golden.codec import encode_tensor
    from ..golden.config import CodecConfig
    rng = np.random.default_rng(seed)
    numel = -(-numel // 1024) * 1024
    exp = rng.integers(113, 127, numel)
    rare = rng.random(numel) < fraction
    big = rng.random(numel) < 0.5
    exp = np.where(rare & big, rng.integers(160, 224, numel), np.where(rare, rng.integers(40, 104, numel), exp))
    bits = (rng.integers(0, 2, numel) << 15) | (exp << 7) | rng.integers(0, 128, numel)
    bits = bits.astype(np.uint16).reshape(-1, 1024)
    return encode_tensor(bits, CodecConfig(group_size=128, mantissa_bits=m, keep_ratio=keep))


def count_escapes(enc) -> dict:
    """Escaped codes per plane of a C1 tensor: kept values whose exponent is not in the speculation book,
    pruned values whose exponent is not in the verification book."""
    from ..golden.codec import decode_draft, decode_full
    full = decode_full(enc).reshape(-1)
    kept = decode_draft(enc).reshape(-1) != 0
    exp = (full >> 7) & 0xFF
    spec = np.isin(exp, [s for s in enc.spec_book.symbols if s < 256])
    verif = np.isin(exp, list(enc.verif_book.symbols))
    return {"spec": int((kept & ~spec).sum()), "verif": int((~kept & ~verif).sum())}


def measure_escapes(config: str, mode: str, fractions: list[float], numel: int, keep: float = 0.5,
                    m: int = 3) -> list[dict]:
    """One synthetic tensor per escape fraction through the bulk Verilator harness; the points after the first
    get ``cycles_per_escape``: (their cycles - the first point's) / (their escapes - its) on the plane(s)
    the mode reads (draft: spec.codes; full: both code planes)."""
    from ..golden.codec import decode_draft, decode_full
    from ..tb.bulk import BulkStats, decode_many_with_rtl
    from .configs import CONFIG_INFO
    nominal = CONFIG_INFO[config]["values_per_cycle" + ("_full" if mode == "full" else "")]
    out = []
    for p in fractions:
        enc = escape_tensor(p, numel, keep, m)
        st = BulkStats()
        (res,) = decode_many_with_rtl([enc], mode, config, jobs=1, stats=st)
        ref = decode_full(enc) if mode == "full" else decode_draft(enc)
        esc = count_escapes(enc)
        n = esc["spec"] + (esc["verif"] if mode == "full" else 0)
        row = {"config": config, "mode": mode, "keep": keep, "m": m, "fraction": p, "values": st.values,
               "spec_escapes": esc["spec"], "verif_escapes": esc["verif"],
               "escapes_per_value": round(n / st.values, 4), "cycles": st.cycles, "beats": st.beats,
               "values_per_cycle": round(st.values / st.cycles, 3),
               "of_nominal": round(st.values / st.cycles / nominal, 3),
               "mismatch": int(not np.array_equal(np.asarray(res).reshape(-1), ref.reshape(-1)))}
        if out and n != out[0]["_escapes"]:
            row["cycles_per_escape"] = round((st.cycles - out[0]["cycles"]) / (n - out[0]["_escapes"]), 2)
        row["_escapes"] = n
        out.append(row)
    for r in out:
        del r["_escapes"]
    return out


def measure(config: str, mode: str, keep: float, max_values: int, amaranth: bool = False, scheme: str = "c1",
            m: int = 3, chunk: int | None = None, pairs: bool | None = None) -> dict:
    from ..golden.codec import decode_draft, decode_full

    t0 = time.time()
    encs = sample_tensors(keep, max_values, m=m, scheme=scheme, chunk=chunk, pairs=pairs)
    full = mode == "full"
    if amaranth:
        from ..tb.decoder.framing import config_layout, framed
        from .configs import build
        from .simutil import DecodeJob, Stalls, run_decoder
        dut = build(config)
        values = cycles = beats = 0
        outs = []
        for enc in encs:            # framed in the layout the decoder reads; compared with enc's own decode
            res = run_decoder(dut, [DecodeJob(framed(enc, config_layout(config)), full)], Stalls())
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
    ap.add_argument("--config", default="decoder_c1v3_l8")
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
    ap.add_argument("--escapes", help="comma-separated escape fractions: synthetic tensors instead of SmolLM2 "
                    "(C1; --max-values values each)")
    a = ap.parse_args(argv)
    if a.escapes:
        rows = measure_escapes(a.config, a.mode, [float(x) for x in a.escapes.split(",")], a.max_values, a.keep,
                               a.mbits)
        for r in rows:
            print(json.dumps(r))
        return 0 if not any(r["mismatch"] for r in rows) else 1
    try:
        res = measure(a.config, a.mode, a.keep, a.max_values, a.amaranth, a.scheme, a.mbits, a.chunk, a.pairs)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res))
    return 0 if res["mismatched_tensors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
