"""Compiled path of the golden codec: golden/_native/codec.c, built on first use, called through ctypes.

The numpy code in codec.py stays the readable, normative implementation; this module produces the same
bytes (planes, chunk offsets, codebooks) and the same decoded arrays, about 10x faster, and is what
``codec.encode_tensor`` / ``decode_draft`` / ``decode_full`` and ``escfield.encode`` / ``decode`` use by default
(``impl="auto"``), in format 3.0 and the 2.0 layout (chunks of ``chunk_superblocks`` superblocks, pair groups):
the codebooks, with the group-size DP, are still built here in Python (``build_codebook``) and handed to C as
small tables.

Choosing the implementation:

* ``impl="auto"`` (default): the compiled path if it builds, else numpy with one warning line on stderr.
* ``impl="numpy"`` / ``impl="native"``: force one (``native`` raises if it cannot be built).
* environment ``CASSANDRA_RTL_CODEC=numpy|native|auto`` overrides ``auto`` for a whole process.

Build: the C source is compiled once per source hash with ``$CC`` (default ``cc``) ``-O3 -shared -fPIC``
into ``$CASSANDRA_RTL_NATIVE_DIR`` (default ``$XDG_CACHE_HOME/cassandra-rtl`` or ``~/.cache/cassandra-rtl``);
no Python headers, no extra package. Needs a C compiler and a little-endian 64-bit host.

Why ctypes + cc, not numba or a built extension (fresh Debian, Python 3.11, gcc, PyPI only): numba would add
numba + llvmlite (which bundles LLVM), a JIT compile in every new process (or a cache), and a package whose numpy
pin must follow ours; a setuptools C extension needs ``setup.py``, the Python headers at install and a rebuild on
every editable install. The ctypes path adds no package and no header, only the C compiler; the price is ~3 s on
the first call per machine and source version. ``CASSANDRA_RTL_NATIVE_MARCH=1`` adds ``-march=native`` (no
measurable gain here, so off); the keep-threshold count has an AVX2 clone chosen at load.

What makes it fast, in order (the draft decode is 1.5-2.2x faster than the full one): no data-dependent branches
in the value loops (kept / pruned, draft-zero and normal / subnormal are mask arithmetic: at keep 0.5 a branch
mispredicts every other value), rank-unary codes taken from a 64-bit register (one ``ctz`` + shift per code, a
byte of short codes per table step), encoders that compute a superblock's fields first and then write one plane
per loop (one live bit writer), C2's full decode with a 2^(m+1)-entry element -> (draft bits, rest width) table
per shared exponent. What is left is serial by nature: one code after the other in each code plane and the
variable-width ``verif.rest`` fields.

Errors: a malformed stream makes the C decoder return an error code; the numpy decoder is then run on
the same input and raises its precise ``FormatError`` (or, should the two ever disagree, its result wins).
Inputs the compiled path does not handle (empty tensors, missing planes or indexes, books without the
pruned mark) go to the numpy path directly, so behaviour on bad input is exactly the reference's.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from . import codec as _np
from .codebook import Codebook, build_codebook
from .config import MX_BLOCK, PRUNED, CodecConfig

ENV_IMPL = "CASSANDRA_RTL_CODEC"
ENV_DIR = "CASSANDRA_RTL_NATIVE_DIR"
ENV_MARCH = "CASSANDRA_RTL_NATIVE_MARCH"   # "1": add -march=native (measured: no gain here; off by default)
SOURCE = Path(__file__).with_name("_native") / "codec.c"
CFLAGS = ["-O3", "-shared", "-fPIC", "-std=c11", "-fno-strict-aliasing"]
IMPLS = ("auto", "numpy", "native")
FORMAT2 = True     # reads and writes format 2.0 (chunks, pair groups): codec.py then sends those tensors here

_lock = threading.Lock()
_lib = None            # the loaded library, once built
_error: str | None = None   # why it could not be built (then every auto call uses numpy)
_warned = False

_p = ctypes.c_void_p
_i64 = ctypes.c_int64
_int = ctypes.c_int


def _cache_dir() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cassandra-rtl"


def _cpu_id() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor()


def _build() -> ctypes.CDLL:
    if sys.byteorder != "little" or ctypes.sizeof(ctypes.c_void_p) != 8:
        raise OSError("the compiled codec needs a little-endian 64-bit host")
    src = SOURCE.read_bytes()
    cc = os.environ.get("CC", "cc")
    native = os.environ.get(ENV_MARCH, "0") == "1"
    flags = CFLAGS + (["-march=native"] if native else [])
    # -march=native code runs on this CPU only: the cache key includes the CPU's identity and flags.
    tag = hashlib.sha256(src + " ".join([cc] + flags + [platform.machine(), _cpu_id() if native else ""]).encode()
                         ).hexdigest()[:16]
    out_dir = _cache_dir()
    so = out_dir / f"codec-{tag}.so"
    if not so.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
        os.close(fd)
        try:
            r = subprocess.run([cc, *flags, "-o", tmp, str(SOURCE)], capture_output=True, text=True)
            if r.returncode != 0 and native:          # a compiler without -march=native: portable flags
                r = subprocess.run([cc, *CFLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True)
            if r.returncode != 0:
                msg = (r.stderr.strip().splitlines() or ["no output"])[-1]
                raise OSError(f"{cc} failed: {msg}")
            os.replace(tmp, so)          # atomic: concurrent first uses (pytest -n) never see half a file
        except FileNotFoundError:
            raise OSError(f"no C compiler ({cc}) on PATH") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    lib = ctypes.CDLL(str(so))
    lib.c1_prepare.argtypes = [_p, _i64, _i64, _i64, _int, _p, _p, _p]
    lib.c1_prepare.restype = None
    lib.c1_pack.argtypes = [_p, _p, _i64, _i64, _int, _i64, _p, _int, _p, _int, _p, _p, _p, _p, _p, _p, _int]
    lib.c1_pack.restype = None
    lib.c2_prepare.argtypes = [_p, _i64, _i64, _i64, _int, _int, _p, _p, _p]
    lib.c2_prepare.restype = None
    lib.c2_pack.argtypes = [_p, _p, _p, _i64, _i64, _int, _i64, _int, _p, _int, _p, _p, _p, _p, _p, _int]
    lib.c2_pack.restype = None
    lib.c1_decode.argtypes = [_i64, _i64, _int, _i64, _i64, _int, _p, _i64, _p, _p, _i64, _p, _p, _i64, _p,
                              _p, _i64, _p, _p, _int, _p, _int, _i64, _p, _int]
    lib.c1_decode.restype = _int
    lib.c2_decode.argtypes = [_i64, _i64, _int, _i64, _i64, _int, _p, _i64, _p, _p, _i64, _p, _p, _i64, _p,
                              _p, _int, _i64, _p, _int]
    lib.c2_decode.restype = _int
    return lib


def load():
    """The compiled library, building it on first use; None (and the reason in ``unavailable_reason()``)
    if it cannot be built."""
    global _lib, _error
    if _lib is None and _error is None:
        with _lock:
            if _lib is None and _error is None:
                try:
                    _lib = _build()
                except OSError as exc:
                    _error = str(exc)
    return _lib


def unavailable_reason() -> str | None:
    load()
    return _error


def resolve(impl: str = "auto") -> str:
    """'native' or 'numpy' for a requested impl (the environment overrides 'auto')."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        env = os.environ.get(ENV_IMPL, "auto").strip().lower() or "auto"
        if env not in IMPLS:
            raise ValueError(f"{ENV_IMPL} must be one of {IMPLS}, got {env!r}")
        impl = env
    if impl == "numpy":
        return "numpy"
    if load() is None:
        if impl == "native":
            raise RuntimeError(f"the compiled codec is unavailable: {_error}")
        global _warned
        if not _warned:
            _warned = True
            print(f"cassandra-rtl: compiled codec unavailable ({_error}); using the numpy codec (~10x slower)",
                  file=sys.stderr)
        return "numpy"
    return "native"


# ------------------------------------------------------------------------------------------------ helpers

def _ptr(a: np.ndarray | None):
    return None if a is None else a.ctypes.data


@functools.lru_cache(maxsize=256)
def _tables(book: Codebook) -> tuple[np.ndarray, np.ndarray, int]:
    """(encoder table, decoder table, Q) of a book (Codebook is frozen and hashable: cached per book).
    Encoder, per symbol 0..256: group q | pair << 8 | suffix t << 9 (q = Q: escape).
    Decoder, per group q < Q: S[b_q] | S[b_q + pair] << 9 | pair << 18."""
    g = book.group_table()
    pair = book.pair_bits()
    enc = np.ascontiguousarray(g | (pair[g] << 8) | (book.suffix_table() << 9), dtype=np.int32)
    Q = book.Q
    dec = np.zeros(max(Q, 1), dtype=np.int32)
    if Q:
        syms, b = book.symbol_table(), book.group_starts()[:-1]
        dec[:Q] = syms[b] | (syms[b + pair[:-1]] << 9) | (pair[:-1] << 18)
    enc.flags.writeable = dec.flags.writeable = False
    return enc, dec, Q


def _fixed_offsets(name: str, numel: int, cfg: CodecConfig) -> np.ndarray:
    """codec.fixed_offsets without per-superblock arrays: every chunk but the last has the same size."""
    G, A = cfg.group_size, cfg.chunk_superblocks
    nsb = _np.superblock_count(numel, G)
    nch = (nsb + A - 1) // A
    n_last = numel - (nsb - 1) * G
    full, last = (int(_np.fixed_superblock_bits(name, np.array([n]), np.array([cfg.kept_in(n)]), cfg)[0])
                  for n in (G, n_last))
    off = np.arange(nch + 1, dtype=np.int64) * ((A * full + 7) >> 3)
    off[nch] = off[nch - 1] + (((nsb - (nch - 1) * A - 1) * full + last + 7) >> 3)
    return off


# ------------------------------------------------------------------------------------------------ encode

def encode_tensor(bits, cfg: CodecConfig, salience=None, books=None) -> _np.EncodedTensor:
    """Same contract and result as the numpy ``codec.encode_tensor``."""
    return _encode(bits, cfg, salience, books)[0]


def encode_layouts(bits, cfg: CodecConfig, salience=None, books=None):
    """``(format 2.0 tensor, format 3.0 tensor)`` of the same values, books and keep mask: the result of the
    numpy ``escfield.encode``, with one selection and book build for both."""
    return _encode(bits, cfg, salience, books, layouts=(2, 3))


def _encode(bits, cfg: CodecConfig, salience=None, books=None, layouts=(2,)) -> list:
    from .escfield import EscFieldTensor
    arr = _np.check_bits(bits)
    flat = np.ascontiguousarray(arr.reshape(-1))
    N, G, m, k, A = len(flat), cfg.group_size, cfg.mantissa_bits, cfg.keep_count, cfg.chunk_superblocks
    if N == 0 or (books is not None and cfg.scheme == "c1" and cfg.prunes
                  and (books[0] is None or PRUNED not in books[0].symbols)):    # numpy raises its ConfigError
        if layouts == (2,):
            return [_np.encode_tensor(bits, cfg, salience, books, impl="numpy")]
        from .escfield import encode as encode_numpy
        both = encode_numpy(bits, cfg, salience, books, impl="numpy")
        return [both[0] if layout == 2 else both[1] for layout in layouts]
    lib = load()
    nsb = _np.superblock_count(N, G)
    nch = (nsb + A - 1) // A
    given = salience is not None
    kept = (np.ascontiguousarray(_np.keep_mask(flat, cfg, salience), dtype=np.uint8) if given
            else np.empty(N, dtype=np.uint8))
    if cfg.scheme == "c1":
        hs, hv = np.zeros(PRUNED + 1, np.int64), np.zeros(PRUNED + 1, np.int64)
        lib.c1_prepare(_ptr(flat), N, G, k, int(given), _ptr(kept), _ptr(hs), _ptr(hv))
        if books is None:
            spec_book = build_codebook(hs, required=PRUNED, pairs=cfg.pair_codes)
            verif_book = build_codebook(hv, pairs=cfg.pair_codes)
        else:
            spec_book, verif_book = books
        (se, _, sQ), (ve, _, vQ) = _tables(spec_book), _tables(verif_book)   # held: ctypes gets bare addresses

        def pack(l3):
            bound = 3 * N + nch + 16
            bufs = (np.empty(bound, np.uint8), np.empty(3 * N + nch + 16, np.uint8), np.empty(bound, np.uint8),
                    np.empty(3 * N + nch + 16, np.uint8))             # codes, signman, vcodes, rest
            off, lens = np.empty((4, nch + 1), np.int64), np.zeros(4, np.int64)
            lib.c1_pack(_ptr(flat), _ptr(kept), N, G, m, A, _ptr(se), sQ, _ptr(ve), vQ, *map(_ptr, bufs),
                        _ptr(off), _ptr(lens), l3)
            return bufs, off, lens
        names = ("spec.codes", "spec.signman", "verif.codes", "verif.rest")
    else:
        spec_book = None
        hd = np.zeros(PRUNED + 1, np.int64)
        X = np.empty((N + MX_BLOCK - 1) // MX_BLOCK, np.uint8)
        lib.c2_prepare(_ptr(flat), N, G, k, m, int(given), _ptr(kept), _ptr(X), _ptr(hd))
        verif_book = build_codebook(hd, pairs=cfg.pair_codes) if books is None else books[1]
        ve, _, vQ = _tables(verif_book)

        def pack(l3):
            bufs = (np.empty(_np.fixed_plane_nbytes("spec.mx", N, cfg) + 16, np.uint8),
                    np.empty(3 * N + nch + 16, np.uint8), np.empty(3 * N + nch + 16, np.uint8))
            off, lens = np.empty((3, nch + 1), np.int64), np.zeros(3, np.int64)
            lib.c2_pack(_ptr(flat), _ptr(kept), _ptr(X), N, G, m, A, int(cfg.prunes), _ptr(ve), vQ,
                        *map(_ptr, bufs), _ptr(off), _ptr(lens), l3)
            return bufs, off, lens
        names = ("spec.mx", "verif.codes", "verif.rest")
    out = []
    for layout in layouts:
        bufs, off, lens = pack(int(layout == 3))
        planes, offsets = {}, {}
        for i, (name, buf) in enumerate(zip(names, bufs)):
            planes[name] = buf[: lens[i]].tobytes()
            if layout == 3 or name in _np.INDEXED[cfg.scheme] or _np.has_index(name, cfg, spec_book, verif_book):
                offsets[name] = off[i].copy()          # a 3.0 tensor holds every plane's chunk offsets
            elif lens[i] != _np.fixed_plane_nbytes(name, N, cfg):
                raise AssertionError(f"compiled codec: {name} size differs from the format")
        cls = EscFieldTensor if layout == 3 else _np.EncodedTensor
        out.append(cls(tuple(arr.shape), cfg, spec_book, verif_book, planes, offsets))
    return out


# ------------------------------------------------------------------------------------------------ decode

class _Fallback(Exception):
    """The compiled path does not take this input: the numpy decoder decides."""


def _plane(enc, name, l3: bool = False):
    """(buffer, length, chunk offsets or None) of a plane; offsets None = C1 verif.codes of a tensor
    that prunes nothing (the plane must then be empty), or a format 3.0 field plane without an index (the
    C decoder finds its chunks one after the other)."""
    data = enc.planes.get(name)
    if data is None:
        raise _Fallback
    n = len(data)
    buf = np.zeros(n + _slack(enc.config), np.uint8)        # the C readers load 8 bytes unchecked
    buf[:n] = np.frombuffer(data, np.uint8)
    indexed = _np.has_index(name, enc.config, enc.spec_book, enc.verif_book)
    if l3 and not indexed and name in _np.SIZED_BY_CODES[enc.config.scheme]:
        return buf, n, None
    if indexed:
        off = enc.offsets.get(name)
        if off is None or len(off) != enc.nchunks + 1:
            raise _Fallback
        return buf, n, np.ascontiguousarray(off, dtype=np.int64)
    if name in _np.INDEXED[enc.config.scheme]:        # C1 verif.codes without an index
        if n:
            raise _Fallback
        return buf, n, None
    off = _fixed_offsets(name, enc.numel, enc.config)
    if off[-1] != n:
        raise _Fallback
    return buf, n, off


def _slack(cfg: CodecConfig) -> int:
    """Zero bytes after every plane handed to the C decoders: codec.c's MIN_SLACK(A, G) (reads of a chunk
    run at most 24 bits per value past its start, and load 8 bytes)."""
    return 3 * cfg.chunk_superblocks * cfg.group_size + 16


def _decode(enc: _np.EncodedTensor, full: bool) -> np.ndarray:
    l3 = enc.format_major == 3
    cfg, N = enc.config, enc.numel
    G, m, k, A = cfg.group_size, cfg.mantissa_bits, cfg.keep_count, cfg.chunk_superblocks
    lib = load()
    out = np.empty(N, dtype=np.uint16)
    _, vt, vQ = _tables(enc.verif_book)
    if cfg.scheme == "c1":
        if enc.spec_book is None:
            raise _Fallback
        _, st, sQ = _tables(enc.spec_book)
        codes, codes_len, co = _plane(enc, "spec.codes", l3)
        signman, sm_len, so = _plane(enc, "spec.signman", l3)
        vcodes = rest = vo = ro = None
        vc_len = rest_len = 0
        if full:
            vcodes, vc_len, vo = _plane(enc, "verif.codes", l3)
            rest, rest_len, ro = _plane(enc, "verif.rest", l3)
        rc = lib.c1_decode(N, G, m, k, A, int(full), _ptr(codes), codes_len, _ptr(co), _ptr(signman), sm_len,
                           _ptr(so), _ptr(vcodes), vc_len, _ptr(vo), _ptr(rest), rest_len, _ptr(ro),
                           _ptr(st), sQ, _ptr(vt), vQ, _slack(cfg), _ptr(out), int(l3))
    else:
        mx, mx_len, mo = _plane(enc, "spec.mx")
        vcodes = rest = vo = ro = None
        vc_len = rest_len = 0
        if full:
            vcodes, vc_len, vo = _plane(enc, "verif.codes")
            rest, rest_len, ro = _plane(enc, "verif.rest")
        rc = lib.c2_decode(N, G, m, k, A, int(full), _ptr(mx), mx_len, _ptr(mo), _ptr(vcodes), vc_len, _ptr(vo),
                           _ptr(rest), rest_len, _ptr(ro), _ptr(vt), vQ, _slack(cfg), _ptr(out), int(l3))
    if rc != 0:
        raise _Fallback
    return out.reshape(enc.shape)


def decode_draft(enc: _np.EncodedTensor) -> np.ndarray:
    return _decode_or_numpy(enc, False)


def decode_full(enc: _np.EncodedTensor) -> np.ndarray:
    return _decode_or_numpy(enc, True)


def _decode_or_numpy(enc, full):
    if enc.numel > 0:
        try:
            return _decode(enc, full)
        except _Fallback:
            pass
    if enc.format_major == 3:
        from .escfield import decode as decode3
        return decode3(enc, full, impl="numpy")
    return (_np.decode_full if full else _np.decode_draft)(enc, impl="numpy")
