"""KV encoder throughput and latency in the Amaranth simulator (docs/HARDWARE.md sections 3 and 3a).

For each (L, G, m, k): random KV vectors (normal values at three scales), books calibrated on the first half
(``golden.kv.calibrate_kv_codebooks``), no input idles, no backpressure; every plane word is checked
against golden ``encode_kv`` (format 3.0). Steady state = marginal cycles per vector between an 8- and a 16-vector
run; latency = first input beat -> last output word of a single vector.

    python bench/encoder_rate.py --scheme c2
    python bench/encoder_rate.py --scheme c1 --configs 2,128,3,64 8,128,3,64

Defaults: the default configurations' shape (L = 2, max_group = 128, 64-bit words) at head_dim 128 and 64,
with and without pruning, and m = 7.
"""
from __future__ import annotations

import argparse

import numpy as np

from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.golden.kv import calibrate_kv_codebooks, encode_kv
from cassandra_rtl.hw.simutil import encoder_program, expected_plane_words, run_encoder

DEFAULT = ["2,128,3,64", "2,128,3,128", "2,64,3,32", "2,64,3,64", "2,128,7,128"]


def vectors(n: int, G: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, G)) * rng.choice([0.05, 1.0, 8.0], size=(n, 1))).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def cycles(scheme: str, L: int, G: int, m: int, k: int, n: int) -> int:
    from cassandra_rtl.hw.encoder import EncoderKvC1
    from cassandra_rtl.hw.encoder_c2 import EncoderKvC2
    bits = vectors(n, G)
    cfg = CodecConfig(scheme=scheme, group_size=G, mantissa_bits=m, keep_count=k, kind="kv")
    books = calibrate_kv_codebooks(vectors(8, G, seed=2), cfg)
    enc = encode_kv(bits, cfg, books)
    dut = (EncoderKvC1 if scheme == "c1" else EncoderKvC2)(L, max_group=128)
    res = run_encoder(dut, bits, encoder_program(cfg, books))
    if res.error_code or any(res.planes[p] != w for p, w in expected_plane_words(enc, dut.word).items()):
        raise SystemExit(f"mismatch against golden at L={L} G={G} m={m} k={k}")
    return res.cycles


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scheme", choices=("c1", "c2"), default="c2")
    ap.add_argument("--configs", nargs="*", default=DEFAULT, help="L,G,m,k tuples")
    a = ap.parse_args(argv)
    print("| L | G | m | k | steady cycles / vector | values / cycle | latency (cycles) |")
    print("|---|---|---|---|---|---|---|")
    for c in a.configs:
        L, G, m, k = (int(t) for t in c.split(","))
        lat = cycles(a.scheme, L, G, m, k, 1)
        steady = (cycles(a.scheme, L, G, m, k, 16) - cycles(a.scheme, L, G, m, k, 8)) / 8
        print(f"| {L} | {G} | {m} | {k} | {steady:.2f} | {G / steady:.2f} | {lat} |", flush=True)


if __name__ == "__main__":
    main()
