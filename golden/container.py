"""The .cass container (docs/FORMAT.md §8): header JSON, speculation section, verification section.

Writes version 3.0 (per tensor: ``config.chunk_superblocks`` and the books' pair masks ``pairs``; the planes in
the format 3.0 layout, golden/escfield.py); reads 3.x, 2.x (tensors in the 2.0 layout, which every golden
decoder reads too) and 1.x (a 1.x tensor is the 2.0 case of one superblock per chunk and no pair groups).

A draft loader calls ``read_container(path, verification=False)`` and never reads the verification
section. Every corruption (magic, version, CRC, truncation, bad offsets, bad configs, inconsistent
planes) raises ``FormatError`` with a one-line reason.
"""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ConfigError, FormatError
from .codebook import Codebook
from .codec import (INDEXED, PLANES, SIZED_BY_CODES, EncodedTensor, chunk_count, fixed_plane_nbytes, has_index,
                    index_from_bytes, index_to_bytes, plane_offsets)
from .config import FORMAT_VERSION, PRUNED, READABLE_MAJORS, CodecConfig
from .escfield import EscFieldTensor, to_format3
from .io import atomic_output

MAGIC = b"CASS"
PREFIX = struct.Struct("<4sHHII")   # magic, major, minor, header length, header crc32
ALIGN = 64
SECTIONS = ("speculation", "verification")


@dataclass
class Container:
    tensors: dict[str, EncodedTensor]
    meta: dict = field(default_factory=dict)
    has_verification: bool = True


def _section_of(plane: str) -> str:
    return "speculation" if plane.startswith("spec.") else "verification"


def write_container(path, tensors, meta: dict | None = None) -> dict:
    """Write ``tensors`` (iterable of (name, EncodedTensor) or a dict, in either layout: a 2.0 tensor is
    converted, ``escfield.to_format3``) to ``path`` in format 3.0; returns the header. The file appears
    complete or not at all (written to a temporary file in the same folder, then renamed)."""
    items = list(tensors.items()) if isinstance(tensors, dict) else list(tensors)
    bufs = {s: bytearray() for s in SECTIONS}
    entries = []
    names = set()
    for name, enc in items:
        if name in names:
            raise ConfigError(f"duplicate tensor name {name!r}")
        names.add(name)
        enc = to_format3(enc)
        scheme = enc.config.scheme
        planes, indexes = {}, {}
        for plane in PLANES[scheme][0] + PLANES[scheme][1]:
            sec = _section_of(plane)
            data = enc.planes[plane]
            planes[plane] = {"section": sec, "offset": len(bufs[sec]), "length": len(data)}
            bufs[sec] += data
            if enc.has_index(plane):
                idx = index_to_bytes(np.asarray(enc.offsets[plane]))
                indexes[plane] = {"section": sec, "offset": len(bufs[sec]), "length": len(idx)}
                bufs[sec] += idx
        entries.append({
            "name": name, "shape": list(enc.shape), "dtype": "bf16", "config": enc.config.to_json(),
            "books": {"spec": enc.spec_book.to_json() if enc.spec_book is not None else None,
                      "verif": enc.verif_book.to_json()},
            "pairs": {"spec": enc.spec_book.pairs if enc.spec_book is not None else None,
                      "verif": enc.verif_book.pairs},
            "planes": planes, "indexes": indexes,
        })
    header = {"format": "cassandra", "version": list(FORMAT_VERSION), "meta": meta or {},
              "tensors": entries, "sections": {}}
    # Section offsets depend on the header length, which depends on the offsets' digits: iterate to a fixpoint.
    start = 0
    for _ in range(4):
        pos = start
        for s in SECTIONS:
            header["sections"][s] = {"offset": pos, "length": len(bufs[s]), "crc32": zlib.crc32(bufs[s])}
            pos += len(bufs[s])
        blob = json.dumps(header, separators=(",", ":")).encode()
        need = -(-(PREFIX.size + len(blob)) // ALIGN) * ALIGN
        if need == start:
            break
        start = need
    with atomic_output(path) as f:             # a temporary file + rename: nothing partial on failure
        f.write(PREFIX.pack(MAGIC, FORMAT_VERSION[0], FORMAT_VERSION[1], len(blob), zlib.crc32(blob)))
        f.write(blob)
        f.write(bytes(start - PREFIX.size - len(blob)))
        for s in SECTIONS:
            f.write(bufs[s])
    return header


def read_header(f, file_size: int) -> dict:
    raw = f.read(PREFIX.size)
    if len(raw) < PREFIX.size:
        raise FormatError("truncated container: no complete prefix")
    magic, major, minor, hlen, hcrc = PREFIX.unpack(raw)
    if magic != MAGIC:
        raise FormatError("not a .cass container (bad magic)")
    if major not in READABLE_MAJORS:
        raise FormatError(f"unsupported container version {major}.{minor} (this reader: "
                          f"{', '.join(f'{v}.x' for v in READABLE_MAJORS)})")
    if PREFIX.size + hlen > file_size:
        raise FormatError("truncated container: header runs past the end of the file")
    blob = f.read(hlen)
    if zlib.crc32(blob) != hcrc:
        raise FormatError("header checksum mismatch (corrupt container)")
    try:
        header = json.loads(blob)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"header is not valid JSON: {exc}") from None
    except RecursionError:
        raise FormatError("header JSON is nested too deeply") from None
    if not isinstance(header, dict) or header.get("format") != "cassandra":
        raise FormatError("header does not describe a Cassandra container")
    version = header.get("version")
    # Any minor version of our major is readable (FORMAT.md preamble); the JSON must agree on the major.
    if not (isinstance(version, list) and len(version) == 2 and version[0] == major):
        raise FormatError(f"header version {version!r} disagrees with the prefix's major version {major}")
    return header


def _read_section(f, header: dict, name: str, file_size: int) -> bytes:
    try:
        sec = header["sections"][name]
        off, length, crc = int(sec["offset"]), int(sec["length"]), int(sec["crc32"])
    except (KeyError, TypeError, ValueError):
        raise FormatError(f"header lacks a valid {name} section entry") from None
    if off < 0 or length < 0 or off + length > file_size:
        raise FormatError(f"truncated container: {name} section ends at {off + length}, file has {file_size} bytes")
    f.seek(off)
    data = f.read(length)
    if zlib.crc32(data) != crc:
        raise FormatError(f"{name} section checksum mismatch (corrupt container)")
    return data


def _slice(sections: dict, ref, what: str) -> bytes:
    try:
        sec, off, length = ref["section"], int(ref["offset"]), int(ref["length"])
        data = sections[sec]
    except (KeyError, TypeError, ValueError):
        raise FormatError(f"{what}: bad plane reference") from None
    if off < 0 or length < 0 or off + length > len(data):
        raise FormatError(f"{what}: lies outside its section")
    return data[off: off + length]


MAX_VALUES = 1 << 40   # far above any real tensor; keeps a corrupt shape from allocating absurd arrays


def _config(raw, major: int) -> CodecConfig:
    """The tensor's config: 2.x records chunk_superblocks (required); 1.x has one superblock per chunk."""
    if not isinstance(raw, dict):
        raise ConfigError("codec config must be an object")
    d = dict(raw)
    if major == 1:
        if d.get("chunk_superblocks", 1) != 1 or d.get("pair_codes", False) is not False:
            raise FormatError("a 1.x container holds one superblock per chunk and no pair groups")
        d["chunk_superblocks"], d["pair_codes"] = 1, False
    elif "chunk_superblocks" not in d:
        raise FormatError("config lacks chunk_superblocks (required from version 2.0)")
    else:
        d.setdefault("pair_codes", False)     # informative (the encoder's policy); the books' masks are normative
    return CodecConfig.from_json(d)


def _pairs(entry, major: int, name: str) -> tuple[int | None, int]:
    if major == 1:
        if "pairs" in entry:
            raise FormatError(f"{name}: a 1.x container has no pair groups")
        return 0, 0
    pairs = entry.get("pairs")
    if not isinstance(pairs, dict) or "spec" not in pairs or "verif" not in pairs:
        raise FormatError(f"{name}: tensor entry lacks the books' pair masks (pairs: {{spec, verif}})")
    return pairs["spec"], pairs["verif"]


def _tensor(entry, sections: dict, major: int = FORMAT_VERSION[0]) -> tuple[str, EncodedTensor]:
    if not isinstance(entry, dict):
        raise FormatError("malformed tensor entry in header")
    try:
        name = str(entry["name"])
        shape_raw, books, planes_ref, index_ref = entry["shape"], entry["books"], entry["planes"], entry["indexes"]
        cfg = _config(entry["config"], major)
    except ConfigError as exc:
        raise FormatError(f"invalid config in container: {exc}") from None
    except KeyError as exc:
        raise FormatError(f"tensor entry lacks {exc}") from None
    if entry.get("dtype") != "bf16":
        raise FormatError(f"{name}: unsupported dtype {entry.get('dtype')!r} (format 1.0 stores bf16 only)")
    if not isinstance(shape_raw, list) or len(shape_raw) not in (1, 2) or \
            not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < MAX_VALUES for d in shape_raw):
        raise FormatError(f"{name}: invalid shape {shape_raw!r}")
    shape = tuple(shape_raw)
    numel = 1
    for d in shape:
        numel *= d
    if numel >= MAX_VALUES:
        raise FormatError(f"{name}: shape {shape} is implausibly large")
    if not all(isinstance(x, dict) for x in (books, planes_ref, index_ref)):
        raise FormatError(f"{name}: books, planes and indexes must be objects")
    spec_pairs, verif_pairs = _pairs(entry, major, name)
    if books.get("spec") is None and spec_pairs not in (None, 0):
        raise FormatError(f"{name}: a pair mask for a missing speculation book")
    spec_book = Codebook.from_json(books["spec"], spec_pairs) if books.get("spec") is not None else None
    if cfg.scheme == "c2" and spec_book is not None:
        raise FormatError(f"{name}: a C2 tensor has no speculation codebook")
    verif_book = Codebook.from_json(books.get("verif", []), verif_pairs)
    if PRUNED in verif_book.symbols:
        raise FormatError(f"{name}: the verification book holds the pruned mark, which only the speculation "
                          "alphabet has")
    if cfg.scheme == "c1" and spec_book is None:
        raise FormatError(f"{name}: a C1 tensor needs a speculation codebook")
    nch = chunk_count(numel, cfg)
    planes, offsets = {}, {}
    for plane in PLANES[cfg.scheme][0] + PLANES[cfg.scheme][1]:
        if _section_of(plane) not in sections:
            continue
        if plane not in planes_ref:
            raise FormatError(f"{name}: plane {plane} missing")
        planes[plane] = _slice(sections, planes_ref[plane], f"{name}/{plane}")
        if has_index(plane, cfg, spec_book, verif_book):
            if plane not in index_ref:
                raise FormatError(f"{name}: index of {plane} missing")
            offsets[plane] = index_from_bytes(_slice(sections, index_ref[plane], f"{name}/{plane} index"), nch,
                                              len(planes[plane]), f"{name}/{plane} index")
        else:
            if plane in index_ref:
                raise FormatError(f"{name}: {plane} has an index but its chunk offsets are computed")
            if major >= 3 and plane in SIZED_BY_CODES[cfg.scheme]:
                continue                            # 3.0: sized by its code plane's escapes (checked below)
            expect = fixed_plane_nbytes(plane, numel, cfg) if plane not in INDEXED[cfg.scheme] else 0
            if len(planes[plane]) != expect:
                raise FormatError(f"{name}/{plane}: {len(planes[plane])} bytes, shape and config imply {expect}")
    cls = EscFieldTensor if major >= 3 else EncodedTensor
    enc = cls(shape, cfg, spec_book, verif_book, planes, offsets)
    for plane in SIZED_BY_CODES[cfg.scheme]:
        if major >= 3 and plane in planes and plane not in offsets:
            try:           # checked once here and kept, so slicing and framing do not size the plane again
                offsets[plane] = plane_offsets(enc, plane)
            except FormatError as exc:
                raise FormatError(f"{name}/{exc}") from None
    return name, enc


def read_container(path, verification: bool = True) -> Container:
    """Read and check a container; every FormatError names the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: is not a regular file (a directory?)" if path.exists() else
                                f"no such container: {path}")
    try:
        return _read_container(path, verification)
    except FormatError as exc:
        raise FormatError(f"{path.name}: {exc}") from None


def _read_container(path: Path, verification: bool) -> Container:
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = read_header(f, size)
        wanted = SECTIONS if verification else SECTIONS[:1]
        sections = {s: _read_section(f, header, s, size) for s in wanted}
    tensors = {}
    entries = header.get("tensors")
    if not isinstance(entries, list):
        raise FormatError("header has no tensor list")
    for entry in entries:
        name, enc = _tensor(entry, sections, header["version"][0])
        if name in tensors:
            raise FormatError(f"duplicate tensor {name!r}")
        tensors[name] = enc
    meta = header.get("meta") if isinstance(header.get("meta"), dict) else {}
    return Container(tensors, meta, verification)
