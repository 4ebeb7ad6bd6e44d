"""The draft's view of the KV cache in the Cassandra format.

K/V of accepted tokens are written at full precision by the target; this module encodes them with the
golden KV path (one superblock = one KV vector of head_dim values per layer / kv-head / token; codebooks
fixed at prefill) and writes their speculation view into the draft's cache.
"""
from __future__ import annotations

import numpy as np
import torch

from cassandra_rtl.golden.kv import calibrate_kv_codebooks, decode_kv_draft, encode_kv  # the RTL encoder mirrors it

from .loader import bf16_to_bits, bits_to_bf16
from .transformer import KVCache


class KVSpecView:
    """Encodes target K/V slices into the format and fills a draft cache with their speculation view."""

    def __init__(self, cfg, n_layers: int, decode=None, encode=None):
        """``decode(enc) -> uint16`` optionally replaces decode_kv_draft (the RTL in the loop); its output is
        asserted equal to the golden decode. ``encode(bits, cfg, books) -> EncodedTensor`` (with ``.many`` for
        one co-simulation run per step and ``.stats``) optionally replaces encode_kv: the RTL KV encoder
        (cassandra_rtl.tb.bulk_encoder.rtl_kv_encoder), which asserts its planes equal to golden's."""
        self.decode = decode
        self.encode = encode
        self.rtl: dict = {}  # counters of the RTL in the loop, filled in place (the drafter's info["rtl"])
        self.cfg = cfg
        self.n_layers = n_layers
        self.books = None
        self.spec_bytes = 0
        self.verif_bytes = 0
        self.vectors = 0  # KV vectors encoded (per layer, K and V, per kv-head, per token)
        self.tokens = 0

    @staticmethod
    def _bits(t: torch.Tensor) -> np.ndarray:
        # [nkv, n, hd] -> [n * nkv, hd], token-major
        return bf16_to_bits(t.transpose(0, 1).reshape(-1, t.shape[-1]))

    def calibrate(self, target: KVCache, n: int) -> None:
        """Codebooks per layer and K/V from the prefill's K/V (never from later tokens)."""
        self.books = [[calibrate_kv_codebooks(self._bits(c[li, :, :n]), self.cfg) for c in (target.k, target.v)]
                      for li in range(self.n_layers)]

    def sync(self, target: KVCache, draft: KVCache, start: int, stop: int) -> None:
        if stop <= start:
            return
        work = []
        for li in range(self.n_layers):
            for j, (src, dst) in enumerate(((target.k, draft.k), (target.v, draft.v))):
                sl = src[li, :, start:stop]  # [nkv, n, hd]
                work.append((li, dst, sl.shape, (self._bits(sl), self.cfg, self.books[li][j])))
        if self.encode is not None:  # the RTL KV encoder: every layer's K and V of this step in one run
            many = getattr(self.encode, "many", None)
            encs = many([b for *_, b in work]) if many else [self.encode(*b) for *_, b in work]
            st = getattr(self.encode, "stats", None)
            if st is not None:
                self.rtl.update(kv_vectors_encoded=st.vectors, kv_encode_mismatches=st.mismatches,
                                kv_encode_cycles=st.cycles, kv_encode_sim_seconds=round(st.seconds, 4))
        else:
            encs = [encode_kv(*b) for *_, b in work]
        jobs = []
        for (li, dst, shape, _), enc in zip(work, encs):
            self.spec_bytes += enc.spec_nbytes
            self.verif_bytes += enc.verif_nbytes
            jobs.append((li, dst, shape, enc, decode_kv_draft(enc)))
        if self.decode is not None:  # the RTL in the loop: one co-simulation run per step when batched
            many = getattr(self.decode, "many", None)
            rtl = many([e for *_, e, _ in jobs]) if many else [self.decode(e) for *_, e, _ in jobs]
            for (li, *_, d), r in zip(jobs, rtl):
                if not np.array_equal(np.asarray(r).reshape(d.shape), d):
                    raise AssertionError(f"RTL KV draft decode differs from the golden one (layer {li})")
            self.rtl["kv_vectors_decoded"] = self.rtl.get("kv_vectors_decoded", 0) + sum(e.nsb for e in encs)
        for li, dst, shape, enc, d in jobs:
            view = bits_to_bf16(d).view(stop - start, shape[0], shape[2])
            dst[li, :, start:stop] = view.transpose(0, 1)
        self.tokens += stop - start

    def spec_bytes_per_token(self) -> float:
        return self.spec_bytes / self.tokens if self.tokens else 0.0

    def full_bytes_per_token(self) -> float:
        return (self.spec_bytes + self.verif_bytes) / self.tokens if self.tokens else 0.0
