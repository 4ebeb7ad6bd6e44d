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
from cassandra_rtl.golden import container
from cassandra_rtl.golden.container import read_container, write_container
from cassandra_rtl.golden.escfield import EscFieldTensor, to_format2, to_format3
from cassandra_rtl.golden.kv import calibrate_kv_codebooks, encode_kv, kv_config

CONFIGS = {
    "c1.pruned": (CodecConfig(scheme="c1", group_size=64, mantissa_bits=2, keep_count=20), (6, 70)),
    "c2.pruned": (CodecConfig(scheme="c2", group_size=32, mantissa_bits=3, keep_count=9), (5, 77)),
    "c1.all": (CodecConfig(scheme="c1", group_size=32, mantissa_bits=7), (101,)),
    "c2.all": (CodecConfig(scheme="c2", group_size=128, mantissa_bits=0), (3, 200)),
    "c1.big": (CodecConfig(scheme="c1", group_size=32, mantissa_bits=3, keep_count=31, chunk_superblocks=1),
               (40, 32)),  # 40 superblocks = 40 chunks
    # format 2.0: chunks of A superblocks, pair groups in the books
    "c1.v2": (CodecConfig(scheme="c1", group_size=32, mantissa_bits=3, keep_count=12, chunk_superblocks=4,
                          pair_codes=True), (6, 70)),
    "c2.v2": (CodecConfig(scheme="c2", group_size=64, mantissa_bits=2, keep_count=40, chunk_superblocks=2,
                          pair_codes=True), (5, 77)),
    "c1.v2.all": (CodecConfig(scheme="c1", group_size=128, mantissa_bits=4, chunk_superblocks=8, pair_codes=True),
                  (3, 500)),
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
    assert (c["major"], c["minor"]) == (3, 0)
    assert struct.unpack_from("<I", raw, 8)[0] == c["header_len"]
    assert struct.unpack_from("<I", raw, 12)[0] == zlib.crc32(raw[16:16 + c["header_len"]])
    assert h["format"] == "cassandra" and h["version"] == [3, 0]
    assert h["meta"] == {"producer": "tests", "note": "ünïcode"}
    S, V = h["sections"]["speculation"], h["sections"]["verification"]
    assert S["offset"] % 64 == 0 and S["offset"] == -(-(16 + c["header_len"]) // 64) * 64
    assert set(raw[16 + c["header_len"]: S["offset"]]) <= {0}           # zero padding
    assert V["offset"] == S["offset"] + S["length"] and V["offset"] + V["length"] == len(raw)
    assert [t["name"] for t in h["tensors"]] == list(tensors)
    for entry in h["tensors"]:
        enc = to_format3(tensors[entry["name"]])          # the file holds format 3.0's planes
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
        assert entry["config"]["chunk_superblocks"] == cfg.chunk_superblocks
        sp, vp = entry["pairs"]["spec"], entry["pairs"]["verif"]
        assert (sp, vp) == ((enc.spec_book.pairs if enc.spec_book else None), enc.verif_book.pairs)
        sp = sp or 0
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
        indexed = set(R.indexed_planes(cfg.scheme, cfg.group_size, cfg.keep_count, sp, vp))
        assert set(entry["indexes"]) == indexed
        N = int(np.prod(entry["shape"]))
        nsb = len(R.chunk_ranges(N, cfg.group_size, cfg.chunk_superblocks))        # chunks
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
        kw = dict(A=cfg.chunk_superblocks, spec_pairs=sp, verif_pairs=vp)
        full, _ = R.decode(*args, full=True, **kw)
        assert full == originals[entry["name"]].reshape(-1).tolist()
        spec_only = {p: d for p, d in planes.items() if p.startswith("spec.")}
        spec_offsets = {p: o for p, o in offsets.items() if p.startswith("spec.")}
        draft, _ = R.decode(spec_only, spec_offsets, *args[2:], full=False, **kw)
        assert draft == decode_draft(enc).reshape(-1).tolist()


def test_read_back(written):
    path, tensors, originals, _ = written
    c = read_container(path)
    assert list(c.tensors) == list(tensors)
    assert c.meta == {"producer": "tests", "note": "ünïcode"}
    for name, enc in c.tensors.items():
        assert isinstance(enc, EscFieldTensor) and enc.config == tensors[name].config
        assert enc.planes == to_format3(tensors[name]).planes                # weights: 2.0 in; KV: 3.0 in
        assert to_format2(enc).planes == to_format2(tensors[name]).planes
        if name == "kv.l0.k":                                            # 3.0 in: its 2.0 layout from scratch
            assert to_format2(enc).planes == encode_tensor(originals[name], enc.config,
                                                           books=(enc.spec_book, enc.verif_book)).planes
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


@pytest.mark.parametrize("major", [0, 4, 0xFFFF])
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
    nsb = len(R.chunk_ranges(int(np.prod(entry["shape"])), entry["config"]["group_size"],
                             entry["config"]["chunk_superblocks"]))          # index entries = chunks
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
                          mantissa_bits=draw(st.integers(0, 7)), keep_count=draw(st.integers(1, G)),
                          chunk_superblocks=draw(st.sampled_from([a for a in (1, 2, 4, 8, 32) if a * G <= 1024])),
                          pair_codes=draw(st.booleans()))
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
        A = cfg["chunk_superblocks"]
        nch = len(R.chunk_ranges(N, cfg["group_size"], A))
        offsets = {p: R.parse_index(c["sections"][r["section"]][r["offset"]: r["offset"] + r["length"]], nch,
                                    len(planes[p])) for p, r in entry["indexes"].items()}
        full, _ = R.decode(planes, offsets, N, cfg["scheme"], cfg["group_size"], cfg["mantissa_bits"],
                           cfg["keep_count"], entry["books"]["spec"], entry["books"]["verif"], A=A,
                           spec_pairs=entry["pairs"]["spec"] or 0, verif_pairs=entry["pairs"]["verif"])
        assert full == originals[name].reshape(-1).tolist()


# ------------------------------------------------------------------------------------ reading version 1.0

# A container written by golden 1.0 (commit cab4490; /tmp/mkv1.py in the commit message of this test):
# rng = np.random.default_rng(1234); x = (rng.standard_normal(180) * 0.03).astype(np.float32);
# a = bf16 bits of x as (2, 90); a[0, :3] = 0x7F80, 0xFFC1, 0x0001;
# "c1" = c1 G=32 k=20 of a, "c2" = c2 G=32 k=9 of a[:, :64], "c1all" = c1 G=64 m=5 of a[1].
V1_CONTAINER = (
    "Q0FTUwEAAADlBwAAdpcHNXsiZm9ybWF0IjoiY2Fzc2FuZHJhIiwidmVyc2lvbiI6WzEsMF0sIm1ldGEiOnsicHJvZHVjZXIiOiJnb2xkZW4gMS"
    "4wIChjb21taXQgY2FiNDQ5MCkifSwidGVuc29ycyI6W3sibmFtZSI6ImMxIiwic2hhcGUiOlsyLDkwXSwiZHR5cGUiOiJiZjE2IiwiY29uZmln"
    "Ijp7InNjaGVtZSI6ImMxIiwiZ3JvdXBfc2l6ZSI6MzIsIm1hbnRpc3NhX2JpdHMiOjMsImtlZXBfY291bnQiOjIwLCJrZWVwX3JhdGlvIjowLj"
    "YyNSwia2luZCI6IndlaWdodCJ9LCJib29rcyI6eyJzcGVjIjpbMjU2LDEyMiwxMjEsMTIwLDEyMywyNTVdLCJ2ZXJpZiI6WzEyMCwxMTksMTE4"
    "LDEyMSwxMTYsMTE3LDExNSwwXX0sInBsYW5lcyI6eyJzcGVjLmNvZGVzIjp7InNlY3Rpb24iOiJzcGVjdWxhdGlvbiIsIm9mZnNldCI6MCwibG"
    "VuZ3RoIjo1Mn0sInNwZWMuc2lnbm1hbiI6eyJzZWN0aW9uIjoic3BlY3VsYXRpb24iLCJvZmZzZXQiOjY4LCJsZW5ndGgiOjU3fSwidmVyaWYu"
    "Y29kZXMiOnsic2VjdGlvbiI6InZlcmlmaWNhdGlvbiIsIm9mZnNldCI6MCwibGVuZ3RoIjoyNH0sInZlcmlmLnJlc3QiOnsic2VjdGlvbiI6In"
    "ZlcmlmaWNhdGlvbiIsIm9mZnNldCI6NDAsImxlbmd0aCI6MTI0fX0sImluZGV4ZXMiOnsic3BlYy5jb2RlcyI6eyJzZWN0aW9uIjoic3BlY3Vs"
    "YXRpb24iLCJvZmZzZXQiOjUyLCJsZW5ndGgiOjE2fSwidmVyaWYuY29kZXMiOnsic2VjdGlvbiI6InZlcmlmaWNhdGlvbiIsIm9mZnNldCI6Mj"
    "QsImxlbmd0aCI6MTZ9fX0seyJuYW1lIjoiYzIiLCJzaGFwZSI6WzIsNjRdLCJkdHlwZSI6ImJmMTYiLCJjb25maWciOnsic2NoZW1lIjoiYzIi"
    "LCJncm91cF9zaXplIjozMiwibWFudGlzc2FfYml0cyI6Mywia2VlcF9jb3VudCI6OSwia2VlcF9yYXRpbyI6MC4yODEyNSwia2luZCI6IndlaW"
    "dodCJ9LCJib29rcyI6eyJzcGVjIjpudWxsLCJ2ZXJpZiI6WzIsMyw0LDEzMywxMzQsMTM1LDEsNSw2LDEzMiwxMzYsNyw4LDEzOSwxNDBdfSwi"
    "cGxhbmVzIjp7InNwZWMubXgiOnsic2VjdGlvbiI6InNwZWN1bGF0aW9uIiwib2Zmc2V0IjoxMjUsImxlbmd0aCI6NDR9LCJ2ZXJpZi5jb2Rlcy"
    "I6eyJzZWN0aW9uIjoidmVyaWZpY2F0aW9uIiwib2Zmc2V0IjoxNjQsImxlbmd0aCI6NTV9LCJ2ZXJpZi5yZXN0Ijp7InNlY3Rpb24iOiJ2ZXJp"
    "ZmljYXRpb24iLCJvZmZzZXQiOjIzMSwibGVuZ3RoIjoxMTh9fSwiaW5kZXhlcyI6eyJ2ZXJpZi5jb2RlcyI6eyJzZWN0aW9uIjoidmVyaWZpY2"
    "F0aW9uIiwib2Zmc2V0IjoyMTksImxlbmd0aCI6MTJ9LCJ2ZXJpZi5yZXN0Ijp7InNlY3Rpb24iOiJ2ZXJpZmljYXRpb24iLCJvZmZzZXQiOjM0"
    "OSwibGVuZ3RoIjoxMn19fSx7Im5hbWUiOiJjMWFsbCIsInNoYXBlIjpbOTBdLCJkdHlwZSI6ImJmMTYiLCJjb25maWciOnsic2NoZW1lIjoiYz"
    "EiLCJncm91cF9zaXplIjo2NCwibWFudGlzc2FfYml0cyI6NSwia2VlcF9jb3VudCI6NjQsImtlZXBfcmF0aW8iOjEuMCwia2luZCI6IndlaWdo"
    "dCJ9LCJib29rcyI6eyJzcGVjIjpbMTIxLDEyMiwxMjAsMTE5LDExOCwxMTcsMTIzLDExNl0sInZlcmlmIjpbXX0sInBsYW5lcyI6eyJzcGVjLm"
    "NvZGVzIjp7InNlY3Rpb24iOiJzcGVjdWxhdGlvbiIsIm9mZnNldCI6MTY5LCJsZW5ndGgiOjMyfSwic3BlYy5zaWdubWFuIjp7InNlY3Rpb24i"
    "OiJzcGVjdWxhdGlvbiIsIm9mZnNldCI6MjA5LCJsZW5ndGgiOjY4fSwidmVyaWYuY29kZXMiOnsic2VjdGlvbiI6InZlcmlmaWNhdGlvbiIsIm"
    "9mZnNldCI6MzYxLCJsZW5ndGgiOjB9LCJ2ZXJpZi5yZXN0Ijp7InNlY3Rpb24iOiJ2ZXJpZmljYXRpb24iLCJvZmZzZXQiOjM2MSwibGVuZ3Ro"
    "IjoyM319LCJpbmRleGVzIjp7InNwZWMuY29kZXMiOnsic2VjdGlvbiI6InNwZWN1bGF0aW9uIiwib2Zmc2V0IjoyMDEsImxlbmd0aCI6OH19fV"
    "0sInNlY3Rpb25zIjp7InNwZWN1bGF0aW9uIjp7Im9mZnNldCI6MjA0OCwibGVuZ3RoIjoyNzcsImNyYzMyIjoyMTE2OTk1NTQ2fSwidmVyaWZp"
    "Y2F0aW9uIjp7Im9mZnNldCI6MjMyNSwibGVuZ3RoIjozODQsImNyYzMyIjo0MTU2NjY1ODM4fX19AAAAAAAAAAAAAAAgOKF0WdhM5UkDIStrtW"
    "guheQDbFsmKzOh21JpmJKZ3JV2JQSRfXRGi0RJEpMB2GXmooSQAAAAAAAACgATABsAJAAuAMA1ayydWD+BoinZqdQKS30TVClflFVjxtx2O0Kj"
    "AyZAfCMnDRKOqASCrGLkNke2LBR6d8jM8ciIB2OJAkD/iAMIAQQAArNCAnvZ1mpsMQoqJYAoe6WSgqwtFywEQRV7tCJb7hkHtF0Csc+DAlJbog"
    "aCTCESUshIUaYHyUFSosEwBJQGAgMAAAAAAAAVAKeDoI0QbAovHBPsMWPidYtY0coPJAcOhJURohMAI2E4I05JrUkJbE6E99rjQVkbI5BBoN/Q"
    "6d6NhDErd/NmFX4Yh2EHgP4hULuBqVgiVRgBWIwgjAVgmqxBC5IQAAAAAAAABAAHAAwAEQAVABABFiSFjLIv87dURX82wOLL4v9kOH7sefg9Og"
    "80iTnvwqD9nKzMwwp0pkeh/QppZRitzwDWQKAheQAdieKyngsilgaM8erBgvF4ePaIV4DSP9QDcFcbJi7CYIQtonMp9VQZwDoG9PsbdxaxEeMP"
    "pb7dI3ezeudvW4dXZAcAgP8AhAAiRBBECCKAIIIQhIgQBAABgBAiAAEWCEyBygLAwAUkAb78HiAAChwIMkALSAEFNKUeAAAAAAAAGwAmAC4AEA"
    "EWVDK1aMwo+yLTf5uEVVR/9gM8Eo4rLP5Pppgjfux5jd85qjQPySRCHu+SD2p/cLIyrknWh6IzPQoFnhtE2CQDNhSvHkwCL+bxBM/uBfEKovQP"
    "kI4BcAhXG0Y4iTCIIWET0bmUeiWVAWw6RoB+/exB59Y4BAAAAAAAAB8APABZAI4mpEiPMzTNryqS7hQKf2/dnvfv/hwO"
)


def _v1_originals():
    rng = np.random.default_rng(1234)
    x = (rng.standard_normal(2 * 90) * 0.03).astype(np.float32)
    a = (x.view(np.uint32) >> 16).astype(np.uint16).reshape(2, 90)
    a[0, :3] = [0x7F80, 0xFFC1, 0x0001]
    return {"c1": a, "c2": a[:, :64], "c1all": a[1]}


def test_reads_a_version_1_container(tmp_path):
    import base64
    path = tmp_path / "v1.cass"
    path.write_bytes(base64.b64decode("".join(V1_CONTAINER)))
    assert R.read_container(path)["major"] == 1
    c = read_container(path)
    want = _v1_originals()
    assert list(c.tensors) == list(want)
    for name, enc in c.tensors.items():
        assert enc.config.chunk_superblocks == 1 and enc.config.pair_codes is False
        assert enc.verif_book.pairs == 0 and (enc.spec_book is None or enc.spec_book.pairs == 0)
        np.testing.assert_array_equal(decode_full(enc), want[name])
        again = encode_tensor(want[name], enc.config, impl="numpy")       # v1 planes == 2.0 at A = 1, no pairs
        assert again.planes == enc.planes
    c = read_container(path, verification=False)
    for name, enc in c.tensors.items():
        np.testing.assert_array_equal(decode_draft(enc), decode_draft(encode_tensor(want[name], enc.config)))


def _v1_edit(tmp_path, mutate):
    import base64
    raw = base64.b64decode("".join(V1_CONTAINER))
    (tmp_path / "v1.cass").write_bytes(raw)
    h = R.read_container(tmp_path / "v1.cass")["header"]
    mutate(h)
    out = tmp_path / "v1e.cass"
    out.write_bytes(R.rewrite_header(raw, h))
    return out


@pytest.mark.parametrize("mutate,msg", [
    (lambda h: h["tensors"][0]["config"].update(chunk_superblocks=2), "1.x container"),
    (lambda h: h["tensors"][0].update(pairs={"spec": 0, "verif": 0}), "1.x container has no pair"),
    (lambda h: h["tensors"][0]["config"].update(pair_codes=True), "1.x container"),
])
def test_version_1_container_with_2_0_fields_is_rejected(tmp_path, mutate, msg):
    with pytest.raises(FormatError, match=msg):
        read_container(_v1_edit(tmp_path, mutate))


def test_version_2_entry_needs_chunk_superblocks_and_pairs(written):
    path = written[0]
    c = R.read_container(path)
    for mutate, msg in [(lambda t: t["config"].pop("chunk_superblocks"), "chunk_superblocks"),
                        (lambda t: t.pop("pairs"), "pair masks"),
                        (lambda t: t["pairs"].pop("verif"), "pair masks"),
                        (lambda t: t["config"].update(chunk_superblocks=3), "chunk_superblocks"),
                        (lambda t: t["config"].update(chunk_superblocks=64), "at most 1024"),
                        (lambda t: t["pairs"].update(verif=1 << 14), "pair mask"),
                        (lambda t: t["pairs"].update(spec=None), "pair mask"),
                        (lambda t: t["pairs"].update(verif="1"), "pair mask")]:
        h = json.loads(json.dumps(c["header"]))
        mutate(next(t for t in h["tensors"] if t["name"] == "c1.v2"))
        bad = path.with_name("bad.cass")
        bad.write_bytes(R.rewrite_header(c["raw"], h))
        with pytest.raises(FormatError, match=msg):
            read_container(bad)


# ------------------------------------------------------------------------------------ reading version 2.0

def test_reads_a_version_2_container(tmp_path, monkeypatch, written):
    """A 2.x container holds the 2.0 layout (the writer of 2.0 is this one converting to 2.0 instead of 3.0):
    read as format 2.0 tensors, which every golden decoder takes, and converted on writing."""
    _, tensors, originals, _ = written
    path = tmp_path / "v2.cass"
    with monkeypatch.context() as mp:
        mp.setattr(container, "FORMAT_VERSION", (2, 0))
        mp.setattr(container, "to_format3", to_format2)
        write_container(path, tensors)
    assert R.read_container(path)["major"] == 2
    c = read_container(path)
    for name, enc in c.tensors.items():
        assert type(enc).format_major == 2 and enc.planes == to_format2(tensors[name]).planes
        np.testing.assert_array_equal(decode_full(enc), originals[name])
        np.testing.assert_array_equal(decode_draft(read_container(path, verification=False).tensors[name]),
                                      decode_draft(tensors[name]))
    again = tmp_path / "v3.cass"
    write_container(again, c.tensors)                       # 2.0 in, 3.0 out
    assert R.read_container(again)["major"] == 3
    for name, enc in read_container(again).tensors.items():
        assert enc.planes == to_format3(tensors[name]).planes
