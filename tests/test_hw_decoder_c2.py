"""C2 decoder test cases shared with tests/test_hw_decoder_c2_v2.py (which imports them from here).

The v1 C2 decoder (hw/decoder_c2.py ``DecoderC2``) is retired and so are its tests (this file at commit
d0f60ad); what remains are the case builders the v2 tests use: ``c2`` (a C2 tensor), the bf16 pattern sets
and the malformed-stream cases with their error bits (they can move into the v2 test file when its owner
takes them).
"""
from __future__ import annotations

import numpy as np

from cassandra_rtl.golden.codec import encode_tensor, superblock_chunks
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.hw.decoder import Err, Reg
from cassandra_rtl.hw.simutil import DecodeJob, decoder_planes, decoder_program
from hw_helpers import weights


def c2(bits, group=64, m=3, keep=None, keep_count=None, books=None, kind="weight"):
    cfg = CodecConfig(scheme="c2", group_size=group, mantissa_bits=m, keep_ratio=keep, keep_count=keep_count,
                      kind=kind)
    return encode_tensor(bits, cfg, books=books)


def _spread_patterns(step=61, seed=5):
    pats = np.arange(0, 65536, step, dtype=np.uint16)              # every exponent, both signs
    pats = np.concatenate([pats, np.array([0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF, 1, 0x807F,
                                           0x0080, 0x8001, 0x0040], np.uint16)])
    np.random.default_rng(seed).shuffle(pats)
    return pats


def _sorted_patterns(every: int = 1) -> np.ndarray:
    """Patterns in order, every ``every``-th MX block of 32 consecutive patterns: each block's X is its
    exponent, and elem = 0 / c < 0 / subnormal drafts all occur inside the blocks."""
    return np.arange(65536, dtype=np.uint16).reshape(-1, 32)[::every].reshape(-1)


def _error_case(kind):
    bits = weights(256, 21)
    enc = c2(bits, 64, 3, 0.5)
    planes = decoder_planes(enc, True, 64)
    prog = decoder_program(enc, True)
    job = DecodeJob(enc, True, planes=planes)
    first_last = {p: [i for i, (_, l) in enumerate(w) if l][0] for p, w in planes.items()}
    if kind == "code":            # a run of more than K zeros at the start of verif.codes
        w = list(planes["verif_codes"])
        w[0] = (0, w[0][1])
        planes["verif_codes"] = w
        return job, Err.CODE
    if kind == "negative":        # the book maps rank 0 to delta 255: X - delta < 0
        job.program = [(a, 255 if a == Reg.VERIF_SYM else d) for a, d in prog]
        return job, Err.CODE
    if kind == "overrun_mx":      # spec.mx chunk 0 ends one word early
        w = list(planes["spec_mx"])
        i = first_last["spec_mx"]
        w[i - 1] = (w[i - 1][0], 1)
        del w[i]
        planes["spec_mx"] = w
        return job, Err.OVERRUN
    if kind == "overrun_x":       # spec.mx chunk 0 ends right after the bitmap, before its X bytes
        w = list(planes["spec_mx"])
        planes["spec_mx"] = [(w[0][0], 1)] + w[first_last["spec_mx"] + 1:]
        return job, Err.OVERRUN
    if kind == "overrun_head":    # G = 128: spec.mx chunk 0 ends inside the 128-bit bitmap
        enc = c2(bits, 128, 3, 0.5)
        planes = decoder_planes(enc, True, 64)
        w = planes["spec_mx"]
        planes["spec_mx"] = [(w[0][0], 1)] + w[[i for i, (_, l) in enumerate(w) if l][0] + 1:]
        return DecodeJob(enc, True, planes=planes), Err.OVERRUN
    if kind == "overrun_rest":    # verif.rest chunk 0 ends one word early
        w = list(planes["verif_rest"])
        i = first_last["verif_rest"]
        w[i - 1] = (w[i - 1][0], 1)
        del w[i]
        planes["verif_rest"] = w
        return job, Err.OVERRUN
    if kind == "too_long":        # verif.rest chunk 0 gets an extra zero word before its last
        w = list(planes["verif_rest"])
        w.insert(first_last["verif_rest"], (0, 0))
        planes["verif_rest"] = w
        return job, Err.TOO_LONG
    if kind == "padding":         # a non-zero bit after the last field of spec.mx chunk 0
        used = 64 + 16 + 32 * 5                   # bitmap, 2 X, 32 fields of m + 2 = 5 bits
        assert len(superblock_chunks(enc, "spec.mx")[0]) * 8 == used and used % 64
        w = list(planes["spec_mx"])
        i = first_last["spec_mx"]
        w[i] = (w[i][0] | 1 << (used % 64), 1)
        planes["spec_mx"] = w
        return job, Err.TOO_LONG
    if kind == "keep":            # one more bit set in superblock 0's keep bitmap
        w = list(planes["spec_mx"])
        kept0 = w[0][0] & ((1 << 64) - 1)
        free = next(b for b in range(64) if not kept0 >> b & 1)
        w[0] = (w[0][0] | 1 << free, w[0][1])
        planes["spec_mx"] = w
        return job, Err.KEEP
    if kind == "no_book":         # full mode without VERIF_K written
        return DecodeJob(enc, True, program=[(a, d) for a, d in prog if a != Reg.VERIF_K]), Err.NO_BOOK
    if kind == "config":
        return DecodeJob(enc, True, program=[(a, 100 if a == Reg.GROUP else d) for a, d in prog]), Err.CONFIG
    raise KeyError(kind)


ERROR_KINDS = ["code", "negative", "overrun_mx", "overrun_x", "overrun_head", "overrun_rest", "too_long", "padding", "keep",
               "no_book", "config"]


# One case per error bit also checks the recovery (the others take the same clear/drain path).
RECOVERY_KINDS = {"code", "overrun_mx", "too_long", "keep", "no_book", "config"}

