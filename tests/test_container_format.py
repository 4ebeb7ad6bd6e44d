"""The .cass container (FORMAT.md §8) written by golden, parsed by the independent reference: layout,
header fields, section CRCs, plane/index placement, and a full decode from the file bytes alone."""
from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference_format as R
from cassandra_rtl.errors import ConfigError, FormatError
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.golden.container import read_container, write_container
from cassandra_rtl.golden.kv import calibrate_kv_codebooks, encode_kv, kv_config

CONFIGS = {
    "c1.pruned": (CodecConfig(scheme="c1", group_size=64, mantissa_bits=2, keep_count=20), (6, 70)),
    "c2.pruned": (CodecConfig(scheme="c2", group_size=32, mantissa_bits=3, keep_count=9), (5, 77)),
    "c1.all": (CodecConfig(scheme="c1", group_size=32, mantissa_bits=7), (101,)),
    "c2.all": (CodecConfig(scheme="c2", group_size=128, mantissa_bits=0), (3, 200)),
    "c1.big": (CodecConfig(scheme="c1", group_size=32, mantissa_bits=3, keep_count=31), (40, 32)),  # 40 sbs
}


@pytest.fixture
def written(tmp_path, weight_bits):
    tensors, originals = {}, {}
    for i, (name, (cfg, shape)) in enumerate(CONFIGS.items()):
        bits = weight_bits(int(np.prod(shape)), seed=i, special=0.05).reshape(shape)
        originals[name] = bits
        tensors[name] = encode_tensor(bits, cfg)
    kvcfg = kv_config(64, scheme="c1", mantissa_bits=3, keep_ratio=0.5)
    pre = weight_bits(4 * 64, seed=40).reshape(4, 64)
    new = weight_bits(3 * 64, seed=41, special=0.2).reshape(3, 64)
    tensors["kv.l0.k"] = encode_kv(new, kvcfg, calibrate_kv_codebooks(pre, kvcfg))
    originals["kv.l0.k"] = new
    path = tmp_path / "t.cass"
    header = write_container(path, tensors, meta={"producer": "tests", "note": "ünïcode"})
    return path, tensors, originals, header


def test_layout_per_section_8(written):
    path, tensors, originals, _ = written
    c = R.read_container(path)                  # asserts magic and the header / section CRCs
    raw, h = c["raw"], c["header"]
    assert (c["major"], c["minor"]) == (1, 0)
    assert struct.unpack_from("<I", raw, 8)[0] == c["header_len"]
    assert struct.unpack_from("<I", raw, 12)[0] == zlib.crc32(raw[16:16 + c["header_len"]])
    assert h["format"] == "cassandra" and h["version"] == [1, 0]
    assert h["meta"] == {"producer": "tests", "note": "ünïcode"}
    S, V = h["sections"]["speculation"], h["sections"]["verification"]
    assert S["offset"] % 64 == 0 and S["offset"] == -(-(16 + c["header_len"]) // 64) * 64
    assert set(raw[16 + c["header_len"]: S["offset"]]) <= {0}           # zero padding
    assert V["offset"] == S["offset"] + S["length"] and V["offset"] + V["length"] == len(raw)
    assert [t["name"] for t in h["tensors"]] == list(tensors)
    for entry in h["tensors"]:
        enc = tensors[entry["name"]]
        cfg = enc.config
        assert entry["shape"] == list(originals[entry["name"]].shape)
        assert entry["dtype"] == "bf16"
        assert entry["config"]["scheme"] == cfg.scheme and entry["config"]["group_size"] == cfg.group_size
        assert entry["config"]["mantissa_bits"] == cfg.mantissa_bits
        assert entry["config"]["keep_count"] == cfg.keep_count and entry["config"]["kind"] == cfg.kind
        spec_book = entry["books"]["spec"]
        assert (spec_book is None) == (cfg.scheme == "c2")
        assert spec_book == (list(enc.spec_book.symbols) if enc.spec_book else None)
        assert entry["books"]["verif"] == list(enc.verif_book.symbols)
        planes = {}
        for name, ref in entry["planes"].items():
            assert ref["section"] == ("speculation" if name.startswith("spec.") else "verification")
            data = c["sections"][ref["section"]][ref["offset"]: ref["offset"] + ref["length"]]
            assert len(data) == ref["length"]
            assert data == enc.planes[name]
            planes[name] = data
        expected = {"c1": {"spec.codes", "spec.signman", "verif.codes", "verif.rest"},
                    "c2": {"spec.mx", "verif.codes", "verif.rest"}}[cfg.scheme]
        assert set(planes) == expected
        indexed = set(R.indexed_planes(cfg.scheme, cfg.group_size, cfg.keep_count))
        assert set(entry["indexes"]) == indexed
        N = int(np.prod(entry["shape"]))
        nsb = len(R.superblocks(N, cfg.group_size))
        offsets = {}
        for name, ref in entry["indexes"].items():
            assert ref["section"] == entry["planes"][name]["section"]     # §6: the index goes with its plane
            data = c["sections"][ref["section"]][ref["offset"]: ref["offset"] + ref["length"]]
            assert len(data) == 4 * -(-nsb // 16) + 2 * nsb
            offsets[name] = R.parse_index(data, nsb, len(planes[name]))
            assert R.index_bytes(offsets[name]) == data
        # A full decode from the file bytes alone, by the reference.
        args = (planes, offsets, N, cfg.scheme, cfg.group_size, cfg.mantissa_bits, cfg.keep_count,
                spec_book, entry["books"]["verif"])
        full, _ = R.decode(*args, full=True)
        assert full == originals[entry["name"]].reshape(-1).tolist()
        spec_only = {p: d for p, d in planes.items() if p.startswith("spec.")}
        spec_offsets = {p: o for p, o in offsets.items() if p.startswith("spec.")}
        draft, _ = R.decode(spec_only, spec_offsets, *args[2:], full=False)
        assert draft == decode_draft(enc).reshape(-1).tolist()


def test_read_back(written):
    path, tensors, originals, _ = written
    c = read_container(path)
    assert list(c.tensors) == list(tensors)
    assert c.meta == {"producer": "tests", "note": "ünïcode"}
    for name, enc in c.tensors.items():
        assert enc.config == tensors[name].config
        np.testing.assert_array_equal(decode_full(enc), originals[name])
        np.testing.assert_array_equal(decode_draft(enc), decode_draft(tensors[name]))


def test_draft_loader_reads_only_the_speculation_section(written):
    path, tensors, _, header = written
    V = header["sections"]["verification"]
    raw = path.read_bytes()
    cut = path.with_name("cut.cass")
    cut.write_bytes(raw[: V["offset"]])                 # the verification section is gone entirely
    c = read_container(cut, verification=False)
    assert not c.has_verification
    for name, enc in c.tensors.items():
        np.testing.assert_array_equal(decode_draft(enc), decode_draft(tensors[name]))
        with pytest.raises(FormatError):                # no verification data: a clear error
            decode_full(enc)
    with pytest.raises(FormatError):
        read_container(cut)


@pytest.mark.parametrize("minor", [1, 7, 0xFFFF])
def test_any_minor_version_is_accepted(written, minor):
    path, tensors, originals, _ = written
    raw = bytearray(path.read_bytes())
    struct.pack_into("<H", raw, 6, minor)
    path.write_bytes(bytes(raw))
    c = read_container(path)
    for name, enc in c.tensors.items():
        np.testing.assert_array_equal(decode_full(enc), originals[name])


@pytest.mark.parametrize("major", [0, 2, 0xFFFF])
def test_other_major_versions_are_rejected(written, major):
    path = written[0]
    raw = bytearray(path.read_bytes())
    struct.pack_into("<H", raw, 4, major)
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="version"):
        read_container(path)
    with pytest.raises(FormatError, match="version"):
        read_container(path, verification=False)


def test_duplicate_names_are_refused(tmp_path):
    enc = encode_tensor(np.arange(64, dtype=np.uint16), CodecConfig(group_size=32))
    with pytest.raises(ConfigError):
        write_container(tmp_path / "d.cass", [("a", enc), ("a", enc)])


def test_empty_container_and_missing_file(tmp_path):
    write_container(tmp_path / "e.cass", {})
    assert read_container(tmp_path / "e.cass").tensors == {}
    with pytest.raises(FileNotFoundError):
        read_container(tmp_path / "nope.cass")


def test_header_is_plain_json(written):
    path = written[0]
    raw = path.read_bytes()
    hlen = struct.unpack_from("<I", raw, 8)[0]
    json.loads(raw[16:16 + hlen].decode("utf-8"))


# ------------------------------------------------------------------ index contents (§6), CRCs made valid

def _patch_index(path, tensor, plane, mutate):
    """Rewrite the index of ``plane`` of ``tensor`` through ``mutate(anchors, rel) -> (anchors, rel)`` and
    make every CRC valid again, so only the reader's §6 checks stand between it and a wrong decode."""
    c = R.read_container(path)
    h = c["header"]
    entry = next(t for t in h["tensors"] if t["name"] == tensor)
    ref = entry["indexes"][plane]
    sec = bytearray(c["sections"][ref["section"]])
    data = bytes(sec[ref["offset"]: ref["offset"] + ref["length"]])
    nsb = len(R.superblocks(int(np.prod(entry["shape"])), entry["config"]["group_size"]))
    na = (nsb + 15) // 16
    assert 4 * na + 2 * nsb == ref["length"]
    anchors = list(struct.unpack_from(f"<{na}I", data, 0))
    rel = list(struct.unpack_from(f"<{nsb}H", data, 4 * na))
    anchors, rel = mutate(anchors, rel)
    sec[ref["offset"]: ref["offset"] + ref["length"]] = struct.pack(f"<{na}I", *anchors) + struct.pack(f"<{nsb}H", *rel)
    h["sections"][ref["section"]]["crc32"] = zlib.crc32(bytes(sec))
    raw = bytearray(c["raw"])
    start = h["sections"][ref["section"]]["offset"]
    raw[start: start + len(sec)] = sec
    out = path.with_name("patched.cass")
    out.write_bytes(R.rewrite_header(bytes(raw), h))
    return out


def _swap(a, r):
    r[3], r[4] = r[4], r[3]
    return a, r


def _shift_boundary(a, r):
    r[5] += 1
    return a, r


def _past_end(a, r):
    r[-1] = 0xFFFF
    return a, r


def _anchor_moved(a, r):                 # same offsets, but A_1 != o_16 (§6 defines A_j = o_{16j})
    a[1] -= 1
    r[16:32] = [x + 1 for x in r[16:32]]
    return a, r


@pytest.mark.parametrize("mutate", [_swap, _shift_boundary, _past_end, _anchor_moved])
def test_inconsistent_index_is_rejected(written, mutate):
    path, tensors, originals, _ = written
    assert len(R.superblocks(originals["c1.big"].size, 32)) == 40
    bad = _patch_index(path, "c1.big", "spec.codes", mutate)
    with pytest.raises(FormatError):
        c = read_container(bad)
        decode_full(c.tensors["c1.big"])
    with pytest.raises(FormatError):
        c = read_container(bad, verification=False)
        decode_draft(c.tensors["c1.big"])


def test_index_patch_harness_identity(written):
    path, tensors, originals, _ = written
    same = _patch_index(path, "c1.big", "spec.codes", lambda a, r: (a, r))
    np.testing.assert_array_equal(decode_full(read_container(same).tensors["c1.big"]), originals["c1.big"])


# --------------------------------------------------------------------------------- random containers

@st.composite
def _tensor_sets(draw):
    out = []
    for i in range(draw(st.integers(1, 3))):
        G = draw(st.sampled_from([32, 64, 128, 256]))
        cfg = CodecConfig(scheme=draw(st.sampled_from(["c1", "c2"])), group_size=G,
                          mantissa_bits=draw(st.integers(0, 7)), keep_count=draw(st.integers(1, G)))
        n = draw(st.integers(1, 700))
        seed = draw(st.integers(0, 2 ** 31))
        rows = draw(st.sampled_from([r for r in (1, 2, 5) if n % r == 0]))
        out.append((f"t{i}", cfg, seed, (rows, n // rows) if rows > 1 else (n,)))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_tensor_sets())
def test_random_containers_roundtrip_through_the_reference(case):
    import tempfile

    from conftest import _weights
    tensors, originals = {}, {}
    for name, cfg, seed, shape in case:
        bits = _weights(int(np.prod(shape)), seed=seed, special=0.1).reshape(shape)
        originals[name] = bits
        tensors[name] = encode_tensor(bits, cfg)
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/r.cass"
        write_container(path, tensors)
        c = R.read_container(path)
        back = read_container(path)
    for entry in c["header"]["tensors"]:
        name, cfg = entry["name"], entry["config"]
        np.testing.assert_array_equal(decode_full(back.tensors[name]), originals[name])
        planes = {p: c["sections"][r["section"]][r["offset"]: r["offset"] + r["length"]]
                  for p, r in entry["planes"].items()}
        N = originals[name].size
        nsb = len(R.superblocks(N, cfg["group_size"]))
        offsets = {p: R.parse_index(c["sections"][r["section"]][r["offset"]: r["offset"] + r["length"]], nsb,
                                    len(planes[p])) for p, r in entry["indexes"].items()}
        full, _ = R.decode(planes, offsets, N, cfg["scheme"], cfg["group_size"], cfg["mantissa_bits"],
                           cfg["keep_count"], entry["books"]["spec"], entry["books"]["verif"])
        assert full == originals[name].reshape(-1).tolist()
