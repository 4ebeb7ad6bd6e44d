"""Container fuzzing (FORMAT.md §8): byte flips anywhere, truncation at every length, wrong magic and
versions, header JSON edits (with a valid header CRC so the reader must look deeper). Every outcome is
either a FormatError (or another UserError) or - only where nothing protected changed - the exact
original tensors; never another exception type, never a silently wrong decode."""
from __future__ import annotations

import copy
import resource
import struct
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import reference_format as R
from cassandra_rtl.errors import UserError
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.golden.container import read_container, write_container


CONFIGS = {
    "w.c1": CodecConfig(scheme="c1", group_size=32, keep_count=20),
    "w.c2": CodecConfig(scheme="c2", group_size=32, keep_count=9),
    "norm": CodecConfig(scheme="c1", group_size=32, mantissa_bits=7),
    # format 2.0: chunks of several superblocks (one partial), pair groups in both C1 books and the C2 book
    "v2.c1": CodecConfig(scheme="c1", group_size=32, keep_count=28, chunk_superblocks=4, pair_codes=True),
    "v2.c2": CodecConfig(scheme="c2", group_size=32, keep_count=20, chunk_superblocks=2, pair_codes=True),
}


def _build(path: Path):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(3 * 70) * 0.05).astype(np.float32)
    a = (x.view(np.uint32) >> 16).astype(np.uint16).reshape(3, 70)
    a[0, :4] = [0x7F80, 0xFFC1, 0x0001, 0x8000]
    originals = {"w.c1": a, "w.c2": a[:2, :64].copy(), "norm": a[2, :40].copy(), "v2.c1": a[:, :64].copy(),
                 "v2.c2": a[:2].copy()}
    tensors = {n: encode_tensor(originals[n], c) for n, c in CONFIGS.items()}
    header = write_container(path, tensors, meta={"producer": "fuzz"})
    return path.read_bytes(), header, originals


with tempfile.TemporaryDirectory() as _d:
    RAW, HEADER, ORIGINALS = _build(Path(_d) / "base.cass")
DRAFTS = {n: decode_draft(encode_tensor(ORIGINALS[n], c)) for n, c in CONFIGS.items()}
HLEN = struct.unpack_from("<I", RAW, 8)[0]
S = HEADER["sections"]["speculation"]
V = HEADER["sections"]["verification"]


@pytest.fixture
def tmp_path(tmp_path):
    """Fuzzing rewrites the file thousands of times: use tmpfs when there is one (much faster than disk)."""
    shm = Path("/dev/shm")
    if shm.is_dir():
        try:
            with tempfile.TemporaryDirectory(dir=shm) as d:
                yield Path(d)
            return
        except OSError:
            pass
    yield tmp_path


@contextmanager
def address_space_cap(extra=6 << 30):
    """A malformed header must not make the reader allocate absurd arrays; cap the address space so a
    bug shows up as MemoryError instead of taking the machine down."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * resource.getpagesize()
    cap = vm + extra if hard == resource.RLIM_INFINITY else min(hard, vm + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def attempt(path: Path, data: bytes, verification: bool = True):
    """('ok', tensors) or ('error', message); any other exception is returned as ('crash', repr)."""
    path.write_bytes(data)
    try:
        with address_space_cap():
            c = read_container(path, verification=verification)
            out = {n: (decode_full(e) if verification else decode_draft(e)) for n, e in c.tensors.items()}
        return "ok", out
    except UserError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg, repr(msg)
        return "error", msg
    except Exception as exc:  # noqa: BLE001 - this is what the fuzzer looks for
        return "crash", f"{type(exc).__name__}: {exc}"


def same_as_original(out, verification=True):
    want = ORIGINALS if verification else DRAFTS
    return list(out) == list(want) and all(
        np.array_equal(np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)) for a, b in zip(out.values(), want.values()))


def test_base_container_decodes(tmp_path):
    status, out = attempt(tmp_path / "f.cass", RAW)
    assert status == "ok" and same_as_original(out)
    status, out = attempt(tmp_path / "f.cass", RAW, verification=False)
    assert status == "ok" and same_as_original(out, verification=False)


def _region(pos):
    if pos < 4:
        return "magic"
    if pos < 6:
        return "major"
    if pos < 8:
        return "minor"          # any minor version is accepted (§8 preamble)
    if pos < 16:
        return "prefix"
    if pos < 16 + HLEN:
        return "header"
    if pos < S["offset"]:
        return "padding"        # not covered by any CRC; must still never change a decode
    return "section"


@pytest.mark.parametrize("mode", ["invert", "one_bit"])
def test_every_byte_flip(tmp_path, mode):
    bad = []
    for pos in range(len(RAW)):
        data = bytearray(RAW)
        data[pos] ^= 0xFF if mode == "invert" else 1 << (pos % 8)
        status, out = attempt(tmp_path / "f.cass", bytes(data))
        region = _region(pos)
        if status == "crash":
            bad.append((pos, region, out))
        elif status == "ok":
            if region not in ("minor", "padding"):
                bad.append((pos, region, "accepted"))
            elif not same_as_original(out):
                bad.append((pos, region, "silently wrong decode"))
    assert not bad, bad[:10]


def test_flips_in_verification_section_do_not_affect_the_draft_loader(tmp_path):
    for pos in range(V["offset"], V["offset"] + V["length"]):
        data = bytearray(RAW)
        data[pos] ^= 0x5A
        status, out = attempt(tmp_path / "f.cass", bytes(data), verification=False)
        assert status == "ok" and same_as_original(out, verification=False), pos
        status, msg = attempt(tmp_path / "f.cass", bytes(data))
        assert status == "error" and "checksum" in msg, (pos, msg)


def test_every_truncation(tmp_path):
    bad = []
    for n in range(len(RAW)):
        status, out = attempt(tmp_path / "f.cass", RAW[:n])
        if status != "error":
            bad.append((n, status, out if status == "crash" else ""))
        status, out = attempt(tmp_path / "f.cass", RAW[:n], verification=False)
        if n < S["offset"] + S["length"]:
            if status != "error":
                bad.append((n, "draft", status))
        elif status != "ok" or not same_as_original(out, verification=False):
            bad.append((n, "draft loader needs only the speculation section", status))
    assert not bad, bad[:10]


@pytest.mark.parametrize("magic", [b"CASs", b"\x00\x00\x00\x00", b"SSAC", b"GGUF"])
def test_wrong_magic(tmp_path, magic):
    status, msg = attempt(tmp_path / "f.cass", magic + RAW[4:])
    assert status == "error" and "magic" in msg


@pytest.mark.parametrize("major", [0, 1, 4, 0x100, 0xFFFF])
def test_wrong_major_version(tmp_path, major):
    data = bytearray(RAW)
    struct.pack_into("<H", data, 4, major)
    status, msg = attempt(tmp_path / "f.cass", bytes(data))
    assert status == "error" and "version" in msg


@pytest.mark.parametrize("hlen", [0, 1, HLEN - 1, HLEN + 1, len(RAW), 0xFFFFFFFF])
def test_wrong_header_length(tmp_path, hlen):
    data = bytearray(RAW)
    struct.pack_into("<I", data, 8, hlen)
    assert attempt(tmp_path / "f.cass", bytes(data))[0] == "error"


def test_extra_bytes_after_the_last_section_do_not_change_the_decode(tmp_path):
    status, out = attempt(tmp_path / "f.cass", RAW + b"\x00junk")
    assert status == "error" or same_as_original(out)


# ------------------------------------------------------------------------------------- header JSON edits

def edited(mutate) -> bytes:
    h = copy.deepcopy(HEADER)
    mutate(h)
    return R.rewrite_header(RAW, h)


def _t(name):
    return next(i for i, t in enumerate(HEADER["tensors"]) if t["name"] == name)


def _set(*path_and_value):
    *path, value = path_and_value

    def mutate(h):
        node = h
        for k in path[:-1]:
            node = node[_t(k)] if isinstance(node, list) and isinstance(k, str) else node[k]
        node[path[-1]] = value
    return mutate


def _del(*path):
    def mutate(h):
        node = h
        for k in path[:-1]:
            node = node[_t(k)] if isinstance(node, list) and isinstance(k, str) else node[k]
        del node[path[-1]]
    return mutate


def _add(delta, *path):
    def mutate(h):
        node = h
        for k in path[:-1]:
            node = node[_t(k)] if isinstance(node, list) and isinstance(k, str) else node[k]
        node[path[-1]] += delta
    return mutate


C1, C2, V1, V2 = "w.c1", "w.c2", "v2.c1", "v2.c2"
_sec = {n: HEADER["sections"][n]["length"] for n in ("speculation", "verification")}
EDITS = {
    # configs outside §2
    "keep_count 0": _set("tensors", C1, "config", "keep_count", 0),
    "keep_count G+1": _set("tensors", C1, "config", "keep_count", 33),
    "keep_count 2.5": _set("tensors", C1, "config", "keep_count", 2.5),
    "keep_count str": _set("tensors", C2, "config", "keep_count", "9"),
    "keep_count other": _set("tensors", C1, "config", "keep_count", 21),
    "keep_count other c2": _set("tensors", C2, "config", "keep_count", 10),
    "group_size 100": _set("tensors", C1, "config", "group_size", 100),
    "group_size 16": _set("tensors", C2, "config", "group_size", 16),
    "group_size other": _set("tensors", C1, "config", "group_size", 64),
    "mantissa 8": _set("tensors", C1, "config", "mantissa_bits", 8),
    "mantissa -1": _set("tensors", C2, "config", "mantissa_bits", -1),
    "mantissa true": _set("tensors", C1, "config", "mantissa_bits", True),
    "mantissa other": _set("tensors", C2, "config", "mantissa_bits", 4),
    "scheme c3": _set("tensors", C1, "config", "scheme", "c3"),
    "scheme swapped": _set("tensors", C1, "config", "scheme", "c2"),
    "kind bogus": _set("tensors", C1, "config", "kind", "bias"),
    "config missing": _del("tensors", C2, "config"),
    # shapes
    "shape rank 3": _set("tensors", C1, "shape", [3, 7, 10]),
    "shape rank 0": _set("tensors", C1, "shape", []),
    "shape negative": _set("tensors", C1, "shape", [-3, 70]),
    "shape more values": _set("tensors", C1, "shape", [3, 71]),
    "shape fewer values": _set("tensors", C2, "shape", [2, 63]),
    "shape string": _set("tensors", C1, "shape", "3x70"),
    # planes and indexes
    "plane offset past section": _set("tensors", C1, "planes", "spec.codes", "offset", _sec["speculation"] + 1),
    "plane offset negative": _set("tensors", C2, "planes", "verif.rest", "offset", -1),
    "plane length +1": _add(1, "tensors", C1, "planes", "spec.signman", "length"),
    "plane length -1": _add(-1, "tensors", C2, "planes", "spec.mx", "length"),
    "plane length huge": _set("tensors", C2, "planes", "verif.codes", "length", 10 ** 12),
    "plane wrong section": _set("tensors", C1, "planes", "spec.codes", "section", "verification"),
    "plane unknown section": _set("tensors", C1, "planes", "spec.codes", "section", "elsewhere"),
    "plane missing": _del("tensors", C2, "planes", "spec.mx"),
    "index length -2": _add(-2, "tensors", C1, "indexes", "spec.codes", "length"),
    "index length +2": _add(2, "tensors", C2, "indexes", "verif.rest", "length"),
    "index offset outside": _set("tensors", C1, "indexes", "verif.codes", "offset", _sec["verification"]),
    "index missing": _del("tensors", C1, "indexes", "spec.codes"),
    "index of c2 missing": _del("tensors", C2, "indexes", "verif.codes"),
    # books
    "book symbol 300": _set("tensors", C1, "books", "spec", [300]),
    "book duplicate": _set("tensors", C1, "books", "verif", [120, 120]),
    "book 16 entries": _set("tensors", C2, "books", "verif", list(range(16))),
    "book not a list": _set("tensors", C2, "books", "verif", "abc"),
    "spec book missing in c1": _set("tensors", C1, "books", "spec", None),
    "spec book without P": _set("tensors", C1, "books", "spec", [s for s in HEADER["tensors"][0]["books"]["spec"]
                                                                   if s != 256]),
    # format 2.0 fields: chunk size, pair masks, the indexes they imply
    "A missing": _del("tensors", V1, "config", "chunk_superblocks"),
    "A 3": _set("tensors", V1, "config", "chunk_superblocks", 3),
    "A 0": _set("tensors", V2, "config", "chunk_superblocks", 0),
    "A 64 (A*G > 1024)": _set("tensors", V1, "config", "chunk_superblocks", 64),
    "A other": _set("tensors", V1, "config", "chunk_superblocks", 2),
    "A other c2": _set("tensors", V2, "config", "chunk_superblocks", 4),
    "A 1 on chunked": _set("tensors", V2, "config", "chunk_superblocks", 1),
    "A 2 on v1 layout": _set("tensors", C1, "config", "chunk_superblocks", 2),
    "A str": _set("tensors", V1, "config", "chunk_superblocks", "4"),
    "pair_codes str": _set("tensors", V1, "config", "pair_codes", "yes"),
    "pairs missing": _del("tensors", V1, "pairs"),
    "pairs not an object": _set("tensors", V2, "pairs", [0, 0]),
    "spec pairs missing": _del("tensors", V1, "pairs", "spec"),
    "verif pairs missing": _del("tensors", V2, "pairs", "verif"),
    "spec pairs other": _add(1, "tensors", V1, "pairs", "spec"),
    "spec pairs cleared": _set("tensors", V1, "pairs", "spec", 0),
    "verif pairs cleared": _set("tensors", V2, "pairs", "verif", 0),
    "verif pairs other": _set("tensors", V2, "pairs", "verif", HEADER["tensors"][4]["pairs"]["verif"] ^ 1),
    "verif pairs on v1 layout": _set("tensors", C1, "pairs", "verif", 1),
    "spec pairs at or above Q": _set("tensors", V1, "pairs", "spec", 1 << 14),
    "spec pairs negative": _set("tensors", V1, "pairs", "spec", -1),
    "spec pairs bool": _set("tensors", V1, "pairs", "spec", True),
    "spec pairs on c2": _set("tensors", V2, "pairs", "spec", 1),
    "spec book on c2": _set("tensors", V2, "books", "spec", [1, 2]),
    "signman index missing": _del("tensors", V1, "indexes", "spec.signman"),
    "rest index missing": _del("tensors", V1, "indexes", "verif.rest"),
    "index on a computed plane": _set("tensors", C1, "indexes", "spec.signman",
                                      HEADER["tensors"][0]["indexes"]["spec.codes"]),
    "signman index length -2": _add(-2, "tensors", V1, "indexes", "spec.signman", "length"),
    "chunked index length +2": _add(2, "tensors", V2, "indexes", "verif.codes", "length"),
    "chunked plane length -1": _add(-1, "tensors", V2, "planes", "spec.mx", "length"),
    "shape more values on chunked": _set("tensors", V1, "shape", [3, 65]),
    # sections and top level
    "section offset +1": _add(1, "sections", "speculation", "offset"),
    "section offset outside": _set("sections", "verification", "offset", len(RAW) + 10),
    "section length +1": _add(1, "sections", "verification", "length"),
    "section crc": _add(1, "sections", "speculation", "crc32"),
    "section missing": _del("sections", "verification"),
    "format": _set("format", "something"),
    "tensors not a list": _set("tensors", {"a": 1}),
    "tensor not an object": _set("tensors", [1]),
    "duplicate tensor names": _set("tensors", [HEADER["tensors"][0], HEADER["tensors"][0]]),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_header_edit_is_rejected(tmp_path, name):
    data = edited(EDITS[name])
    status, out = attempt(tmp_path / "f.cass", data)
    assert status == "error", (status, out if status == "crash" else "")
    if not name.startswith("section"):                 # the harness kept the sections intact
        assert "checksum" not in out, out


@pytest.mark.parametrize("pad", [0, 1, 63, 64, 65, 1000])
def test_harmless_header_edits_are_accepted(tmp_path, pad):
    """The edit harness itself: a header that grows by any amount (sections move) still decodes."""
    data = edited(_set("meta", "producer", "x" * pad))
    status, out = attempt(tmp_path / "f.cass", data)
    assert status == "ok" and same_as_original(out)
    data = edited(_set("tensors", "norm", "name", "renamed"))
    status, out = attempt(tmp_path / "f.cass", data)
    assert status == "ok" and "renamed" in out and "norm" not in out


# Edits a reader must reject (FORMAT.md §8).
def test_huge_shape_on_draft_path_is_a_format_error(tmp_path):
    data = edited(_set("tensors", C2, "shape", [2 ** 31, 2 ** 31]))
    status, out = attempt(tmp_path / "f.cass", data, verification=False)
    assert status == "error", out


def test_c1_verification_book_with_pruned_mark_is_rejected(tmp_path):
    book = list(HEADER["tensors"][_t(C1)]["books"]["verif"])
    book[0] = 256                                       # same K: the codes still parse
    status, out = attempt(tmp_path / "f.cass", edited(_set("tensors", C1, "books", "verif", book)))
    assert status == "error", "accepted" if status == "ok" and not same_as_original(out) else out


def test_header_json_major_version_is_checked(tmp_path):
    for v in ([1, 0], [2, 0], [3], "3.0"):
        status, _ = attempt(tmp_path / "f.cass", edited(_set("version", v)))
        assert status == "error", v


def test_dtype_other_than_bf16_is_rejected(tmp_path):
    status, _ = attempt(tmp_path / "f.cass", edited(_set("tensors", C1, "dtype", "f32")))
    assert status == "error"


# --------------------------------------------------------------------- every header node x odd JSON values

def _paths(node, pre=()):
    if pre:
        yield pre
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, pre + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, pre + (i,))


ODD = [None, True, -1, 0, 1.5, "x", [], {}, 10 ** 20]
NODES = [p for p in _paths(HEADER) if p[0] != "meta"]


@pytest.mark.parametrize("path", NODES, ids=lambda p: "/".join(map(str, p)))
def test_odd_value_in_every_header_node(tmp_path, path):
    bad = []
    for value in ODD:
        def mutate(h, value=value):
            node = h
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = value
        data = edited(mutate)
        for verification in (True, False):
            status, out = attempt(tmp_path / "f.cass", data, verification)
            if status == "crash":
                bad.append((value, verification, out))
    assert not bad, bad
