"""The `cassandra-rtl` CLI: encode / decode / stats on .npy (uint16, float32) and hand-written .safetensors,
stats --json, and bad input -> non-zero exit with a one-line message on stderr (never a traceback)."""
from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import reference_format as R
from cassandra_rtl.cli import main

ROOT = Path(__file__).resolve().parents[1]


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cassandra_rtl.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


def cli_inproc(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err




def assert_one_line_error(r: subprocess.CompletedProcess, *words):
    assert r.returncode != 0, r
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("cassandra-rtl"), lines[0]
    for w in words:
        assert w.lower() in lines[0].lower(), (w, lines[0])


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple, bytes]], metadata=None):
    """The safetensors layout by hand: u64 LE header length, JSON header, then the data."""
    header, blobs, pos = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + len(data)]}
        blobs.append(data)
        pos += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ----------------------------------------------------------------------------------------------- encode

@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_npy_uint16_roundtrip_and_draft(tmp_path, capsys, weight_bits, scheme):
    bits = weight_bits(5 * 100, seed=1, special=0.05).reshape(5, 100)
    np.save(tmp_path / "w.npy", bits)
    rc, out, _ = cli_inproc(capsys, "encode", tmp_path / "w.npy", "-o", tmp_path / "w.cass", "--scheme", scheme,
                            "--keep-ratio", "0.5", "--mantissa-bits", "2", "--group-size", "64")
    assert rc == 0 and "w.cass" in out
    hdr = R.read_container(tmp_path / "w.cass")["header"]
    assert [t["name"] for t in hdr["tensors"]] == ["w"]
    cfg = hdr["tensors"][0]["config"]
    assert (cfg["scheme"], cfg["group_size"], cfg["mantissa_bits"], cfg["keep_count"]) == \
        (scheme, 64, 2, R.keep_count(0.5, 64))
    assert hdr["tensors"][0]["shape"] == [5, 100]

    rc, _, _ = cli_inproc(capsys, "decode", tmp_path / "w.cass", "-o", tmp_path / "full.npy")
    full = np.load(tmp_path / "full.npy")
    assert rc == 0 and full.dtype == np.uint16
    np.testing.assert_array_equal(full, bits)

    rc, _, _ = cli_inproc(capsys, "decode", tmp_path / "w.cass", "-o", tmp_path / "draft.npy", "--draft")
    draft = np.load(tmp_path / "draft.npy")
    assert rc == 0 and draft.dtype == np.uint16 and draft.shape == (5, 100)
    flat = bits.reshape(-1)
    kept = R.keep_flags_np(flat, 64, 32)
    want = R.draft_c1_np(flat, 2, kept) if scheme == "c1" else \
        R.draft_c2_np(flat, 2, R.block_max_exponent(flat, 64), kept)
    np.testing.assert_array_equal(draft.reshape(-1), want)


@pytest.mark.parametrize("scheme", ["c1", "c2"])
def test_format2_options_roundtrip(tmp_path, capsys, weight_bits, scheme):
    """--chunk-superblocks / --pairs reach the container (FORMAT.md §1, §3.1) and decode losslessly."""
    bits = weight_bits(7 * 300, seed=4, special=0.02).reshape(7, 300)
    np.save(tmp_path / "w.npy", bits)
    rc, _, _ = cli_inproc(capsys, "encode", tmp_path / "w.npy", "-o", tmp_path / "w.cass", "--scheme", scheme,
                          "--keep-ratio", "0.5", "--group-size", "32", "--chunk-superblocks", "4", "--pairs")
    assert rc == 0
    t = R.read_container(tmp_path / "w.cass")["header"]["tensors"][0]
    assert t["config"]["chunk_superblocks"] == 4
    assert any(t["pairs"].values()), t["pairs"]          # these exponents make the DP choose a pair somewhere
    rc, _, _ = cli_inproc(capsys, "decode", tmp_path / "w.cass", "-o", tmp_path / "full.npy")
    assert rc == 0
    np.testing.assert_array_equal(np.load(tmp_path / "full.npy"), bits)
    rc, _, _ = cli_inproc(capsys, "encode", tmp_path / "w.npy", "-o", tmp_path / "w1.cass", "--scheme", scheme,
                          "--group-size", "32", "--chunk-superblocks", "1", "--no-pairs")
    t1 = R.read_container(tmp_path / "w1.cass")["header"]["tensors"][0]
    assert rc == 0 and t1["config"]["chunk_superblocks"] == 1 and not any(t1.get("pairs", {}).values())


def test_default_options(tmp_path, capsys, weight_bits):
    np.save(tmp_path / "w.npy", weight_bits(3 * 128, seed=2).reshape(3, 128))
    rc, _, _ = cli_inproc(capsys, "encode", tmp_path / "w.npy", "-o", tmp_path / "w.cass")
    assert rc == 0
    cfg = R.read_container(tmp_path / "w.cass")["header"]["tensors"][0]["config"]
    # Documented defaults (cassandra_rtl/commands/encode.py help): C1, keep 1.0, m = 3, G = 128.
    assert (cfg["scheme"], cfg["keep_count"], cfg["mantissa_bits"], cfg["group_size"]) == ("c1", 128, 3, 128)


def _rne_cases() -> np.ndarray:
    u = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000,            # ±0, ±Inf
         0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000,            # exact ties: to even (down, up)
         0x3F808001, 0x3F817FFF, 0x3F807FFF,                        # just above / below a tie
         0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7EFFFF,  # overflow to Inf / largest finite
         0x00000001, 0x80000001, 0x00008000, 0x00018000, 0x007FFFFF,  # float32 subnormals
         0x007F8000, 0x00800000, 0x3F800000, 0x3FFFFFFF, 0x40000000]
    rng = np.random.default_rng(3)
    rand = rng.integers(0, 1 << 32, 400, dtype=np.uint64).astype(np.uint32)
    rand = rand[(rand & 0x7FFFFFFF) <= 0x7F800000]                   # no NaNs here
    ties = (rng.integers(0, 1 << 16, 60, dtype=np.uint32) << 16) | 0x8000
    ties = ties[(ties & 0x7FFFFFFF) < 0x7F800000]
    arr = np.concatenate([np.array(u, dtype=np.uint32), rand, ties])
    return arr[: (len(arr) // 4) * 4].view(np.float32).reshape(4, -1)


def test_npy_float32_is_rounded_to_nearest_even(tmp_path, capsys):
    x = _rne_cases()
    np.save(tmp_path / "f.npy", x)
    rc, _, _ = cli_inproc(capsys, "encode", tmp_path / "f.npy", "-o", tmp_path / "f.cass", "--mantissa-bits", "0")
    assert rc == 0
    rc, _, _ = cli_inproc(capsys, "decode", tmp_path / "f.cass", "-o", tmp_path / "o.npy")
    got = np.load(tmp_path / "o.npy")
    want = np.array([R.f32_to_bf16_rne(float(v)) for v in x.reshape(-1)], dtype=np.uint16).reshape(x.shape)
    bad = np.flatnonzero(got != want)
    assert len(bad) == 0, [(hex(int(x.reshape(-1).view(np.uint32)[i])), hex(int(got.reshape(-1)[i])),
                            hex(int(want.reshape(-1)[i]))) for i in bad[:5]]


def test_npy_float32_nan_stays_nan(tmp_path, capsys):
    u = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7F80FFFF], dtype=np.uint32)
    np.save(tmp_path / "n.npy", u.view(np.float32))
    assert cli_inproc(capsys, "encode", tmp_path / "n.npy", "-o", tmp_path / "n.cass")[0] == 0
    assert cli_inproc(capsys, "decode", tmp_path / "n.cass", "-o", tmp_path / "o.npy")[0] == 0
    got = np.load(tmp_path / "o.npy").astype(np.uint32)
    assert np.all(((got >> 7) & 0xFF) == 0xFF) and np.all((got & 0x7F) != 0)   # NaN
    np.testing.assert_array_equal(got >> 15, u >> 31)                          # sign kept


def test_safetensors_bf16_and_f32(tmp_path, capsys, weight_bits):
    wb = weight_bits(4 * 64, seed=4).reshape(4, 64)
    f = (np.random.default_rng(5).standard_normal((3, 50)) * 0.1).astype(np.float32)
    bias = np.linspace(-2, 2, 10, dtype=np.float32)
    write_safetensors(tmp_path / "m.safetensors", {
        "layer.w": ("BF16", wb.shape, wb.astype("<u2").tobytes()),
        "layer.f": ("F32", f.shape, f.astype("<f4").tobytes()),
        "layer.b": ("F32", bias.shape, bias.astype("<f4").tobytes())}, metadata={"format": "pt"})
    rc, _, _ = cli_inproc(capsys, "encode", tmp_path / "m.safetensors", "-o", tmp_path / "m.cass",
                          "--scheme", "c2", "--group-size", "32")
    assert rc == 0
    names = [t["name"] for t in R.read_container(tmp_path / "m.cass")["header"]["tensors"]]
    assert sorted(names) == ["layer.b", "layer.f", "layer.w"]
    expect = {"layer.w": wb,
              "layer.f": np.array([R.f32_to_bf16_rne(float(v)) for v in f.reshape(-1)], np.uint16).reshape(f.shape),
              "layer.b": np.array([R.f32_to_bf16_rne(float(v)) for v in bias], np.uint16)}
    for name, want in expect.items():
        rc, _, _ = cli_inproc(capsys, "decode", tmp_path / "m.cass", "-o", tmp_path / "o.npy", "--tensor", name)
        assert rc == 0
        np.testing.assert_array_equal(np.load(tmp_path / "o.npy"), want)
    # Several tensors and no --tensor: a one-line error.
    r = cli("decode", tmp_path / "m.cass", "-o", tmp_path / "o.npy")
    assert_one_line_error(r, "--tensor")
    r = main(["decode", str(tmp_path / "m.cass"), "-o", str(tmp_path / "o.npy"), "--tensor", "nope"])
    err = capsys.readouterr().err
    r = subprocess.CompletedProcess([], r, "", err)
    assert_one_line_error(r, "nope")


def test_console_script_entry_point(tmp_path, weight_bits):
    exe = Path(sys.executable).with_name("cassandra-rtl")
    if not exe.exists():
        pytest.skip("console script not installed (pip install -e .)")
    np.save(tmp_path / "w.npy", weight_bits(200, seed=6))
    r = subprocess.run([exe, "encode", tmp_path / "w.npy", "-o", tmp_path / "w.cass", "-q"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe, "decode", tmp_path / "w.cass", "-o", tmp_path / "o.npy"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o.npy"), np.load(tmp_path / "w.npy"))


# ------------------------------------------------------------------------------------------------ stats

def test_stats_json(tmp_path, capsys, weight_bits):
    a = weight_bits(6 * 128, seed=7).reshape(6, 128)
    b = weight_bits(300, seed=8).reshape(3, 100)
    write_safetensors(tmp_path / "s.safetensors", {"a": ("BF16", a.shape, a.tobytes()),
                                                   "b": ("BF16", b.shape, b.tobytes())})
    assert cli_inproc(capsys, "encode", tmp_path / "s.safetensors", "-o", tmp_path / "s.cass",
                      "--group-size", "64")[0] == 0
    rc, out, _ = cli_inproc(capsys, "stats", tmp_path / "s.cass", "--json")
    assert rc == 0
    s = json.loads(out)
    n = a.size + b.size
    assert s["values"] == n
    bpv = s["bits_per_value"]
    c = R.read_container(tmp_path / "s.cass")
    spec_bytes, verif_bytes = (len(c["sections"][k]) for k in ("speculation", "verification"))
    assert math.isclose(bpv["speculation"], 8 * spec_bytes / n, rel_tol=1e-9)
    assert math.isclose(bpv["verification"], 8 * verif_bytes / n, rel_tol=1e-9)
    assert math.isclose(bpv["total"], bpv["speculation"] + bpv["verification"], rel_tol=1e-9)
    # Exponent entropy of all values (keep 1.0: the coded symbols are the exponents).
    e = np.concatenate([(a.reshape(-1) >> 7) & 0xFF, (b.reshape(-1) >> 7) & 0xFF])
    p = np.array(list(Counter(e.tolist()).values()), dtype=float) / n
    assert math.isclose(s["exponent_entropy_bits"], float(-(p * np.log2(p)).sum()), rel_tol=1e-9)
    # Exponent code bits (FORMAT.md §3.1): q + 1 code-plane bits for a symbol of group q (escapes Q + 9), plus
    # at most 7 padding bits a chunk; a pair group's suffix bit sits in the companion field (suffix bits).
    code_bits, suffix_bits, chunks = 0, 0, 0
    for t, bits in zip(c["header"]["tensors"], (a, b)):
        groups = R.book_groups(t["books"]["spec"], t["pairs"]["spec"] or 0)
        where = {sym: (q, len(g)) for q, g in enumerate(groups) for sym in g}
        for v in bits.reshape(-1).tolist():
            q, size = where.get((v >> 7) & 0xFF, (len(groups) + 8, 1))
            code_bits += q + 1
            suffix_bits += size - 1
        chunks += -(-len(R.superblocks(bits.size, 64)) // t["config"]["chunk_superblocks"])
    assert code_bits / n <= s["exponent_code_bits"] <= (code_bits + 7 * chunks) / n
    assert math.isclose(s["exponent_suffix_bits"], suffix_bits / n, rel_tol=1e-9)
    # a code cannot beat the entropy (the slack: per-tensor books of tiny tensors vs the pooled entropy)
    assert s["exponent_code_bits"] + s["exponent_suffix_bits"] >= s["exponent_entropy_bits"] - 0.05


def test_stats_table(tmp_path, capsys, weight_bits):
    np.save(tmp_path / "w.npy", weight_bits(1234, seed=9))
    assert cli_inproc(capsys, "encode", tmp_path / "w.npy", "-o", tmp_path / "w.cass")[0] == 0
    rc, out, _ = cli_inproc(capsys, "stats", tmp_path / "w.cass")
    assert rc == 0
    assert "1,234" in out and "bits/value" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


# ------------------------------------------------------------------------------------------- bad input

@pytest.fixture
def good_cass(tmp_path, weight_bits, run):
    np.save(tmp_path / "w.npy", weight_bits(3 * 128, seed=10).reshape(3, 128))
    r = run("encode", tmp_path / "w.npy", "-o", tmp_path / "w.cass", "--keep-ratio", "0.5")
    assert r.returncode == 0, r.stderr
    return tmp_path / "w.cass"


def _corrupt(path: Path, how: str) -> Path:
    raw = bytearray(path.read_bytes())
    hdr = R.read_container(path)["header"]
    if how == "flip":
        raw[hdr["sections"]["speculation"]["offset"] + 3] ^= 0x10
    elif how == "flip-verif":
        raw[hdr["sections"]["verification"]["offset"] + 1] ^= 0x01
    elif how == "truncated":
        raw = raw[: len(raw) - 5]
    elif how == "version":
        struct.pack_into("<H", raw, 4, 4)      # major 4: no reader (1.x, 2.x and 3.x are read)
    elif how == "magic":
        raw[:4] = b"NOPE"
    elif how == "header":
        raw[20] ^= 0x20
    out = path.with_name(f"bad-{how}.cass")
    out.write_bytes(bytes(raw))
    return out


@pytest.mark.parametrize("how,word", [("flip", "checksum"), ("flip-verif", "checksum"), ("truncated", "truncated"),
                                      ("version", "version"), ("magic", "magic"), ("header", "checksum")])
@pytest.mark.parametrize("command", ["decode", "stats"])
def test_bad_container(good_cass, how, word, command, run):
    bad = _corrupt(good_cass, how)
    args = [command, bad] + (["-o", bad.with_suffix(".npy")] if command == "decode" else ["--json"])
    r = (cli if how in ("flip", "truncated") else run)(*args)      # two of them end to end (subprocess)
    assert_one_line_error(r, word)
    assert r.stdout == ""


def test_draft_decode_ignores_a_corrupt_verification_section(good_cass, tmp_path, run):
    bad = _corrupt(good_cass, "flip-verif")
    r = run("decode", bad, "-o", tmp_path / "d.npy", "--draft")
    assert r.returncode == 0, r.stderr
    r2 = run("decode", good_cass, "-o", tmp_path / "d2.npy", "--draft")
    assert r2.returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "d.npy"), np.load(tmp_path / "d2.npy"))


@pytest.mark.parametrize("option,value,word", [("--keep-ratio", "0", "keep ratio"), ("--keep-ratio", "1.5", "keep ratio"),
                                               ("--keep-ratio", "-0.5", "keep ratio"), ("--keep-ratio", "nan", "keep ratio"),
                                               ("--mantissa-bits", "8", "mantissa"), ("--mantissa-bits", "-1", "mantissa"),
                                               ("--group-size", "100", "group size"), ("--group-size", "512", "group size"),
                                               ("--group-size", "0", "group size"),
                                               ("--chunk-superblocks", "3", "chunk_superblocks"),
                                               ("--chunk-superblocks", "16", "at most 1024"),
                                               ("--chunk-superblocks", "0", "chunk_superblocks")])
def test_invalid_config(tmp_path, weight_bits, option, value, word, run):
    np.save(tmp_path / "w.npy", weight_bits(256, seed=11).reshape(2, 128))
    r = (cli if value == "1.5" else run)("encode", tmp_path / "w.npy", "-o", tmp_path / "w.cass", option, value)
    assert_one_line_error(r, word)
    assert not (tmp_path / "w.cass").exists()


@pytest.mark.parametrize("case", ["int32", "int8", "bool", "complex", "rank3", "rank0", "object", "garbage.npy",
                                  "extension.txt", "extension.pt", "missing", "directory", "st-int32",
                                  "st-short"])
def test_bad_input_file(tmp_path, case, run):
    p = tmp_path / "in.npy"
    word = ""
    if case in ("int32", "int8", "bool", "complex"):
        np.save(p, np.zeros((4, 64), dtype={"int32": np.int32, "int8": np.int8, "bool": bool,
                                            "complex": np.complex64}[case]))
        word = "dtype"
    elif case == "rank3":
        np.save(p, np.zeros((2, 3, 64), dtype=np.uint16))
        word = "rank"
    elif case == "rank0":
        np.save(p, np.array(7, dtype=np.uint16))
        word = "rank"
    elif case == "object":
        np.save(p, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif case == "garbage.npy":
        p.write_bytes(b"definitely not an npy file" * 4)
    elif case.startswith("extension"):
        p = tmp_path / ("in." + case.split(".")[1])
        p.write_bytes(b"\x00" * 64)
        word = "unsupported"
    elif case == "missing":
        p = tmp_path / "nope.npy"
        word = "nope.npy"
    elif case == "directory":
        p = tmp_path / "adir.npy"
        p.mkdir()
    elif case == "st-int32":
        p = tmp_path / "in.safetensors"
        write_safetensors(p, {"w": ("I32", (2, 2), bytes(16))})
        word = "I32"
    elif case == "st-short":
        p = tmp_path / "in.safetensors"
        p.write_bytes(b"\x07\x00")
    r = (cli if case in ("int32", "rank3") else run)("encode", p, "-o", tmp_path / "out.cass")
    assert_one_line_error(r, word)


@pytest.mark.parametrize("command", ["decode", "stats"])
def test_missing_container(tmp_path, command, run):
    args = [command, tmp_path / "nope.cass"] + (["-o", tmp_path / "o.npy"] if command == "decode" else [])
    assert_one_line_error(run(*args), "nope.cass")


@pytest.mark.parametrize("case", ["empty.npy", "st-data-short", "st-no-offsets", "st-header-list"])
def test_malformed_input_files_without_traceback(tmp_path, case):
    if case == "empty.npy":
        p = tmp_path / "in.npy"
        p.write_bytes(b"")
    else:
        p = tmp_path / "in.safetensors"
        header = {"st-data-short": {"w": {"dtype": "BF16", "shape": [4, 64], "data_offsets": [0, 512]}},
                  "st-no-offsets": {"w": {"dtype": "BF16", "shape": [4, 64]}},
                  "st-header-list": [1, 2]}[case]
        h = json.dumps(header).encode()
        p.write_bytes(struct.pack("<Q", len(h)) + h + bytes(100))
    assert_one_line_error(cli("encode", p, "-o", tmp_path / "out.cass"))


def test_gguf_f32_q8_0_f16(tmp_path, capsys):
    """A tiny GGUF written with gguf-py: quantized tensors are dequantized (Q8_0 decoded here by hand:
    blocks of an f16 scale and 32 int8), then rounded to bf16 (RNE)."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(12)
    a = (rng.standard_normal((4, 64)) * 0.1).astype(np.float32)
    b = (rng.standard_normal((2, 64)) * 0.1).astype(np.float32)
    c = (rng.standard_normal(64) * 3).astype(np.float16)
    q = gguf.quantize(b, gguf.GGMLQuantizationType.Q8_0)
    w = gguf.GGUFWriter(str(tmp_path / "tiny.gguf"), "llama")
    w.add_tensor("a", a)
    w.add_tensor("b", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("c", c)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    blocks = np.asarray(q, dtype=np.uint8).reshape(-1, 34)
    scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    bq = (blocks[:, 2:].copy().view(np.int8).astype(np.float32) * scale).reshape(2, 64)

    def rne(x):
        return np.array([R.f32_to_bf16_rne(float(v)) for v in np.asarray(x, np.float32).reshape(-1)],
                        dtype=np.uint16).reshape(np.shape(x))

    rc, _, _ = cli_inproc(capsys, "encode", tmp_path / "tiny.gguf", "-o", tmp_path / "t.cass", "--group-size", "32")
    assert rc == 0
    for name, want in {"a": rne(a), "b": rne(bq), "c": rne(c.astype(np.float32))}.items():
        rc, _, _ = cli_inproc(capsys, "decode", tmp_path / "t.cass", "-o", tmp_path / "o.npy", "--tensor", name)
        assert rc == 0
        np.testing.assert_array_equal(np.load(tmp_path / "o.npy"), want)
