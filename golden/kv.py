"""The KV-cache path of the format (docs/FORMAT.md §1, §3.1): one superblock per K/V vector.

The codebooks are calibrated from the prefill (which the encoder sees before any generated token) and
then fixed; later tokens whose exponents the books lack are escaped. The pruning rule is the magnitude
key with ties to the lower index, which the RTL encoder (hw/encoder.py) implements.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .codebook import Codebook, build_codebook
from .codec import EncodedTensor, c2_draft_fields, check_bits, decode_draft, decode_full, keep_mask
from .config import MX_BLOCK, PRUNED, CodecConfig


def kv_config(head_dim: int, scheme: str = "c1", mantissa_bits: int = 3, keep_ratio: float = 1.0) -> CodecConfig:
    """KV policy (FORMAT.md §1, §3.1): one vector per chunk, books without pair groups (what the RTL KV
    encoders write), whatever ``FORMAT2_DEFAULTS`` says."""
    return CodecConfig(scheme=scheme, group_size=head_dim, mantissa_bits=mantissa_bits, keep_ratio=keep_ratio,
                       kind="kv")


def _check(bits, cfg: CodecConfig) -> np.ndarray:
    arr = check_bits(bits)
    if cfg.kind != "kv":
        raise ConfigError("KV functions need a config with kind='kv'")
    if arr.ndim != 2 or arr.shape[1] != cfg.group_size:
        raise ConfigError(f"KV vectors must be [n_vectors, head_dim={cfg.group_size}], got {arr.shape}")
    return arr


def calibrate_kv_codebooks(prefill_bits, cfg: CodecConfig) -> tuple[Codebook | None, Codebook]:
    """(speculation book, verification book) from the prefill's K or V vectors of one layer."""
    arr = _check(prefill_bits, cfg)
    flat = arr.reshape(-1)
    kept = keep_mask(flat, cfg)
    e = ((flat >> 7) & 0xFF).astype(np.int64)
    if cfg.scheme == "c1":
        sym = np.where(kept, e, PRUNED)
        counts = np.bincount(sym, minlength=PRUNED + 1)
        if cfg.prunes and counts[PRUNED] == 0:
            counts[PRUNED] = 1
        spec = build_codebook(counts, required=PRUNED if cfg.prunes else None, pairs=cfg.pair_codes)
        return spec, build_codebook(np.bincount(e[~kept], minlength=PRUNED + 1), pairs=cfg.pair_codes)
    X = np.maximum.reduceat(e, np.arange(0, len(e), MX_BLOCK))[np.arange(len(e)) // MX_BLOCK]
    _, elem = c2_draft_fields(e, (flat & 0x7F).astype(np.int64), X, cfg.mantissa_bits)
    zero = ~kept | (elem == 0)
    return None, build_codebook(np.bincount((X - e)[zero], minlength=PRUNED + 1), pairs=cfg.pair_codes)


def encode_kv(bits, cfg: CodecConfig, books: tuple[Codebook | None, Codebook]) -> EncodedTensor:
    """Encode KV vectors (one superblock each) with fixed books in format 3.0 (golden/escfield.py) - what
    the RTL KV encoders emit."""
    from .escfield import encode3
    return encode3(_check(bits, cfg), cfg, books=books)


def decode_kv_draft(enc: EncodedTensor) -> np.ndarray:
    return decode_draft(enc)


def decode_kv_full(enc: EncodedTensor) -> np.ndarray:
    return decode_full(enc)
