"""Compiled path of the golden codec: golden/_native/codec.c, built on first use, called through ctypes.

The numpy code in codec.py stays the readable, normative implementation; this module produces the same
bytes (planes, chunk offsets, codebooks) and the same decoded arrays, about 10x faster, and is what
``codec.encode_tensor`` / ``decode_draft`` / ``decode_full`` use by default (``impl="auto"``).

Choosing the implementation:

* ``impl="auto"`` (default): the compiled path if it builds, else numpy with one warning line on stderr.
* ``impl="numpy"`` / ``impl="native"``: force one (``native`` raises if it cannot be built).
* environment ``CASSANDRA_RTL_CODEC=numpy|native|auto`` overrides ``auto`` for a whole process.

Build: the C source is compiled once per source hash with ``$CC`` (default ``cc``) ``-O3 -shared -fPIC``
into ``$CASSANDRA_RTL_NATIVE_DIR`` (default ``$XDG_CACHE_HOME/cassandra-rtl`` or ``~/.cache/cassandra-rtl``);
no Python headers, no extra package. Needs a C compiler and a little-endian 64-bit host.

Errors: a malformed stream makes the C decoder return an error code; the numpy decoder is then run on
the same input and raises its precise ``FormatError`` (or, should the two ever disagree, its result wins).
Inputs the compiled path does not handle (empty tensors, missing planes or indexes, books without the
pruned mark) go to the numpy path directly, so behaviour on bad input is exactly the reference's.
"""
from __future__ import annotations

import ctypes
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
    lib.c1_pack.argtypes = [_p, _p, _i64, _i64, _int, _p, _int, _p, _int, _p, _p, _p, _p, _p, _p, _p]
    lib.c1_pack.restype = None
    lib.c2_prepare.argtypes = [_p, _i64, _i64, _i64, _int, _int, _p, _p, _p]
    lib.c2_prepare.restype = None
    lib.c2_pack.argtypes = [_p, _p, _p, _i64, _i64, _int, _int, _p, _int, _p, _p, _p, _p, _p, _p]
    lib.c2_pack.restype = None
    lib.c1_decode.argtypes = [_i64, _i64, _int, _i64, _int, _p, _i64, _p, _p, _i64, _p, _i64, _p, _p, _i64,
                              _p, _int, _p, _int, _p]
    lib.c1_decode.restype = _int
    lib.c2_decode.argtypes = [_i64, _i64, _int, _i64, _int, _p, _i64, _p, _i64, _p, _p, _i64, _p, _p, _int, _p]
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


def _rank(book: Codebook) -> np.ndarray:
    return np.ascontiguousarray(book.rank_table(), dtype=np.int32)


def _table(book: Codebook) -> np.ndarray:
    t = np.zeros(max(book.K, 1), dtype=np.int32)
    t[: book.K] = book.symbols
    return t


def _buf(data) -> tuple[np.ndarray, int]:
    a = np.frombuffer(data, dtype=np.uint8) if len(data) else np.zeros(1, np.uint8)
    return a, len(data)


# ------------------------------------------------------------------------------------------------ encode

def encode_tensor(bits, cfg: CodecConfig, salience=None, books=None) -> _np.EncodedTensor:
    """Same contract and result as the numpy ``codec.encode_tensor``."""
    arr = _np.check_bits(bits)
    flat = np.ascontiguousarray(arr.reshape(-1))
    N, G, m, k = len(flat), cfg.group_size, cfg.mantissa_bits, cfg.keep_count
    if N == 0:
        return _np.encode_tensor(bits, cfg, salience, books, impl="numpy")
    if books is not None and cfg.scheme == "c1" and cfg.prunes and (books[0] is None or PRUNED not in books[0].symbols):
        return _np.encode_tensor(bits, cfg, salience, books, impl="numpy")   # raises its ConfigError
    lib = load()
    nsb = _np.superblock_count(N, G)
    given = salience is not None
    kept = (np.ascontiguousarray(_np.keep_mask(flat, cfg, salience), dtype=np.uint8) if given
            else np.empty(N, dtype=np.uint8))
    offsets = {}
    if cfg.scheme == "c1":
        hs, hv = np.zeros(PRUNED + 1, np.int64), np.zeros(PRUNED + 1, np.int64)
        lib.c1_prepare(_ptr(flat), N, G, k, int(given), _ptr(kept), _ptr(hs), _ptr(hv))
        if books is None:
            spec_book, verif_book = build_codebook(hs, required=PRUNED), build_codebook(hv)
        else:
            spec_book, verif_book = books
        bound = 3 * N + nsb + 16
        codes, vcodes = np.empty(bound, np.uint8), np.empty(bound, np.uint8)
        sm_len = _np.fixed_plane_nbytes("spec.signman", N, cfg)
        rest_len = _np.fixed_plane_nbytes("verif.rest", N, cfg)
        signman, rest = np.empty(sm_len + 16, np.uint8), np.empty(rest_len + 16, np.uint8)
        co, vo = np.empty(nsb + 1, np.int64), np.empty(nsb + 1, np.int64)
        lens = np.zeros(4, np.int64)
        sr, vr = _rank(spec_book), _rank(verif_book)        # held: ctypes gets bare addresses
        lib.c1_pack(_ptr(flat), _ptr(kept), N, G, m, _ptr(sr), spec_book.K, _ptr(vr), verif_book.K, _ptr(codes), _ptr(signman), _ptr(vcodes), _ptr(rest), _ptr(co), _ptr(vo), _ptr(lens))
        if lens[1] != sm_len or lens[3] != rest_len:
            raise AssertionError("compiled codec: fixed plane sizes differ from the format")
        planes = {"spec.codes": codes[: lens[0]].tobytes(), "spec.signman": signman[:sm_len].tobytes(),
                  "verif.codes": vcodes[: lens[2]].tobytes(), "verif.rest": rest[:rest_len].tobytes()}
        offsets = {"spec.codes": co, "verif.codes": vo}
    else:
        spec_book = None
        hd = np.zeros(PRUNED + 1, np.int64)
        X = np.empty((N + MX_BLOCK - 1) // MX_BLOCK, np.uint8)
        lib.c2_prepare(_ptr(flat), N, G, k, m, int(given), _ptr(kept), _ptr(X), _ptr(hd))
        verif_book = build_codebook(hd) if books is None else books[1]
        mx_len = _np.fixed_plane_nbytes("spec.mx", N, cfg)
        mx = np.empty(mx_len + 16, np.uint8)
        vcodes = np.empty(3 * N + nsb + 16, np.uint8)
        rest = np.empty(N + nsb + 16, np.uint8)
        vo, ro = np.empty(nsb + 1, np.int64), np.empty(nsb + 1, np.int64)
        lens = np.zeros(3, np.int64)
        vr = _rank(verif_book)
        lib.c2_pack(_ptr(flat), _ptr(kept), _ptr(X), N, G, m, int(cfg.prunes), _ptr(vr), verif_book.K,
                    _ptr(mx), _ptr(vcodes), _ptr(rest), _ptr(vo), _ptr(ro), _ptr(lens))
        if lens[0] != mx_len:
            raise AssertionError("compiled codec: spec.mx size differs from the format")
        planes = {"spec.mx": mx[:mx_len].tobytes(), "verif.codes": vcodes[: lens[1]].tobytes(),
                  "verif.rest": rest[: lens[2]].tobytes()}
        offsets = {"verif.codes": vo, "verif.rest": ro}
    return _np.EncodedTensor(tuple(arr.shape), cfg, spec_book, verif_book, planes, offsets)


# ------------------------------------------------------------------------------------------------ decode

class _Fallback(Exception):
    """The compiled path does not take this input: the numpy decoder decides."""


def _indexed(enc, name):
    if name not in enc.planes:
        raise _Fallback
    if not _np.has_index(name, enc.config):
        if len(enc.planes[name]):
            raise _Fallback
        return None
    off = enc.offsets.get(name)
    if off is None or len(off) != enc.nsb + 1:
        raise _Fallback
    return np.ascontiguousarray(off, dtype=np.int64)


def _fixed(enc, name):
    data = enc.planes.get(name)
    if data is None or len(data) != _np.fixed_plane_nbytes(name, enc.numel, enc.config):
        raise _Fallback
    return _buf(data)


def _decode(enc: _np.EncodedTensor, full: bool) -> np.ndarray:
    cfg, N = enc.config, enc.numel
    G, m, k = cfg.group_size, cfg.mantissa_bits, cfg.keep_count
    lib = load()
    out = np.empty(N, dtype=np.uint16)
    st, vt = _table(enc.verif_book if enc.spec_book is None else enc.spec_book), _table(enc.verif_book)
    if cfg.scheme == "c1":
        if enc.spec_book is None or "spec.codes" not in enc.planes:
            raise _Fallback
        codes, codes_len = _buf(enc.planes["spec.codes"])
        co = _indexed(enc, "spec.codes")
        signman, sm_len = _fixed(enc, "spec.signman")
        vcodes = rest = vo = None
        vc_len = rest_len = 0
        if full:
            vcodes, vc_len = _buf(enc.planes["verif.codes"]) if "verif.codes" in enc.planes else (None, 0)
            vo = _indexed(enc, "verif.codes")
            rest, rest_len = _fixed(enc, "verif.rest")
        rc = lib.c1_decode(N, G, m, k, int(full), _ptr(codes), codes_len, _ptr(co), _ptr(signman), sm_len,
                           _ptr(vcodes), vc_len, _ptr(vo), _ptr(rest), rest_len,
                           _ptr(st), enc.spec_book.K, _ptr(vt), enc.verif_book.K, _ptr(out))
    else:
        mx, mx_len = _fixed(enc, "spec.mx")
        vcodes = rest = vo = ro = None
        vc_len = rest_len = 0
        if full:
            vo, ro = _indexed(enc, "verif.codes"), _indexed(enc, "verif.rest")
            vcodes, vc_len = _buf(enc.planes["verif.codes"])
            rest, rest_len = _buf(enc.planes["verif.rest"])
        rc = lib.c2_decode(N, G, m, k, int(full), _ptr(mx), mx_len, _ptr(vcodes), vc_len, _ptr(vo),
                           _ptr(rest), rest_len, _ptr(ro), _ptr(vt), enc.verif_book.K, _ptr(out))
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
    return (_np.decode_full if full else _np.decode_draft)(enc, impl="numpy")
