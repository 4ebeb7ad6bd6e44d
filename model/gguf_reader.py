"""A minimal GGUF reader: metadata in one pass, tensors as memory-mapped views (no copies).

``gguf.GGUFReader`` builds a numpy view for every part of every field (~98,000 for SmolLM2's tokenizer
arrays) and takes seconds before the first tensor is touched. This reader parses the same file format
(GGUF v2/v3, little endian: header, key/value metadata, tensor infos, aligned data) with ``struct``,
returns plain Python values (numeric arrays as numpy), and maps the tensor data once; dequantization
stays ``gguf.dequantize``. tests/test_model_gguf_reader.py checks it against ``gguf.GGUFReader``.
"""
from __future__ import annotations

import dataclasses
import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np

from cassandra_rtl.errors import InputError

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# GGUF value types -> struct format (scalars); 8 = string, 9 = array
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
          7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]       # ggml order: innermost dimension first
    tensor_type: int
    offset: int                  # absolute byte offset in the file
    n_bytes: int


class GGUFFile:
    """``fields`` (key -> value) and ``tensors`` (name -> TensorInfo) of a GGUF file; ``data(name)``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as fh:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.path}: not a readable GGUF file ({exc})") from None
        self._pos = 0
        try:
            self._parse()
        except (struct.error, UnicodeDecodeError, OverflowError, MemoryError, IndexError) as exc:
            raise InputError(f"{self.path}: truncated or corrupt GGUF file ({type(exc).__name__})") from None

    # -- primitive readers -------------------------------------------------------------------------
    def _take(self, n: int) -> bytes:
        if n < 0 or self._pos + n > len(self._map):
            raise struct.error("read past the end")
        b = self._map[self._pos:self._pos + n]
        self._pos += n
        return b

    def _scalar(self, fmt: str):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def _string(self) -> str:
        return self._take(self._scalar("<Q")).decode("utf-8")

    def _value(self, vtype: int):
        if vtype in _SCALAR:
            return self._scalar(_SCALAR[vtype])
        if vtype == 8:
            return self._string()
        if vtype == 9:
            itype, n = self._scalar("<I"), self._scalar("<Q")
            if itype in _NUMPY:                        # numeric array: one frombuffer, not one parse per item
                dt = np.dtype(_NUMPY[itype]).newbyteorder("<")
                return np.frombuffer(self._take(n * dt.itemsize), dtype=dt).tolist()
            return [self._value(itype) for _ in range(n)]
        raise InputError(f"{self.path}: unknown GGUF value type {vtype}")

    # -- the file ----------------------------------------------------------------------------------
    def _parse(self) -> None:
        if self._take(4) != MAGIC:
            raise InputError(f"{self.path}: not a GGUF file (bad magic)")
        version = self._scalar("<I")
        if version not in (2, 3):
            raise InputError(f"{self.path}: GGUF version {version} is not supported (2, 3; big-endian files "
                             "are not supported either)")
        n_tensors, n_kv = self._scalar("<Q"), self._scalar("<Q")
        if n_tensors > 1 << 24 or n_kv > 1 << 24:
            raise InputError(f"{self.path}: implausible GGUF header ({n_tensors} tensors, {n_kv} fields)")
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string()
            self.fields[key] = self._value(self._scalar("<I"))
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._scalar("<I")
            if n_dims > 8:
                raise InputError(f"{self.path}: tensor {name!r} has {n_dims} dimensions")
            shape = tuple(self._scalar("<Q") for _ in range(n_dims))
            infos.append((name, shape, self._scalar("<I"), self._scalar("<Q")))
        align = int(self.fields.get("general.alignment", DEFAULT_ALIGNMENT))
        base = -(-self._pos // align) * align
        import gguf
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, ttype, off in infos:
            try:
                block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
            except (KeyError, ValueError):
                raise InputError(f"{self.path}: tensor {name!r} has unknown type {ttype}") from None
            numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
            n_bytes = numel // block * size
            if base + off + n_bytes > len(self._map):
                raise InputError(f"{self.path}: tensor {name!r} extends past the end of the file")
            self.tensors[name] = TensorInfo(name, shape, ttype, base + off, n_bytes)

    def data(self, name: str) -> np.ndarray:
        """The tensor's raw data as gguf.GGUFReader gives it: typed for float types, uint8 rows otherwise."""
        import gguf
        t = self.tensors[name]
        raw = np.frombuffer(self._map, dtype=np.uint8, count=t.n_bytes, offset=t.offset)
        qt = gguf.GGMLQuantizationType(t.tensor_type)
        rows = tuple(reversed(t.shape))
        if qt == gguf.GGMLQuantizationType.F32:
            return raw.view(np.float32).reshape(rows)
        if qt == gguf.GGMLQuantizationType.F16:
            return raw.view(np.float16).reshape(rows)
        block, size = gguf.GGML_QUANT_SIZES[qt]
        return raw.reshape(*rows[:-1], rows[-1] // block * size)
