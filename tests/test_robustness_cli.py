"""Hostile input to the CLI, one test (class) per kind of input: bad input of every kind ends in one line
on stderr and a non-zero exit - never a traceback, never a wrong result, never a partial file - and slow
work starts only after every argument was checked. Plus the input-reader fuzzers (npy, safetensors, gguf):
truncations, byte flips and header edits, every case an InputError/UserError or a correct read."""
from __future__ import annotations

import errno
import json
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import reference_format as R
from cassandra_rtl.cli import main
from cassandra_rtl.errors import UserError

ROOT = Path(__file__).resolve().parents[1]




def one_line_error(r: subprocess.CompletedProcess, *words):
    assert r.returncode not in (0, None), (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("cassandra-rtl"), lines[0]
    for w in words:
        assert w.lower() in lines[0].lower(), (w, lines[0])
    return lines[0]


def leftovers(folder: Path, keep=()) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def st_file(path: Path, header, data: bytes = bytes(128)) -> Path:
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return path


@pytest.fixture
def small_npy(tmp_path, weight_bits):
    p = tmp_path / "w.npy"
    np.save(p, weight_bits(3 * 128, seed=21).reshape(3, 128))
    return p


@pytest.fixture
def small_cass(tmp_path, small_npy, run):
    r = run("encode", small_npy, "-o", tmp_path / "w.cass", "-q")
    assert r.returncode == 0, r.stderr
    return tmp_path / "w.cass"


def tiny_gguf(path: Path) -> Path:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("a", (np.arange(4 * 64, dtype=np.float32).reshape(4, 64) - 100) / 64)
    w.add_tensor("b", np.linspace(-1, 1, 64, dtype=np.float32).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ------------------------------------------------------------------ row 1: encode on broken .gguf files

@pytest.mark.parametrize("case", ["empty", "random", "header-only", "counts-too-big", "magic-only"])
def test_encode_broken_gguf(tmp_path, run, case):
    p = tmp_path / "m.gguf"
    if case == "empty":
        p.write_bytes(b"")
    elif case == "random":
        p.write_bytes(np.random.default_rng(1).bytes(4000))
    elif case == "header-only":
        gguf = pytest.importorskip("gguf")
        w = gguf.GGUFWriter(str(p), "llama")
        w.add_tensor("a", np.ones((2, 64), np.float32))
        w.write_header_to_file()                     # header declaring one tensor, nothing after it
        w.close()
    elif case == "counts-too-big":
        p.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 5, 0))
    else:
        p.write_bytes(b"GGUF")
    one_line_error(run("encode", p, "-o", tmp_path / "o.cass"), "m.gguf")
    assert not (tmp_path / "o.cass").exists()


def gguf_fuzz(tmp_path, run, n_cuts, n_flips, seed):
    """The class behind row 1: a valid tiny GGUF cut at many lengths or with bytes flipped - every case
    is a clean read or a one-line error, and nothing is left behind."""
    good = tiny_gguf(tmp_path / "good.gguf").read_bytes()
    p = tmp_path / "m.gguf"
    rng = random.Random(seed)
    cuts = sorted(set(list(range(0, 200, 7)) + [rng.randrange(len(good)) for _ in range(n_cuts)]))
    flips = []
    for _ in range(n_flips):
        data = bytearray(good)
        for _ in range(rng.choice([1, 1, 2, 4])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        flips.append(bytes(data))
    for data in [good[:n] for n in cuts] + flips:
        p.write_bytes(data)
        r = run("encode", p, "-o", tmp_path / "o.cass", "-q")
        if r.returncode:
            one_line_error(r)
        assert "Traceback" not in r.stderr, r.stderr
    assert leftovers(tmp_path, keep={"good.gguf", "m.gguf", "o.cass"}) == []
    return len(cuts) + len(flips)


def test_gguf_truncations_and_flips(tmp_path, run):
    assert gguf_fuzz(tmp_path, run, 40, 60, seed=5) > 100


@pytest.mark.slow
def test_gguf_fuzz_long(tmp_path, run):
    gguf_fuzz(tmp_path, run, 500, 2000, seed=55)


# -------------------------------------------------------------------- row 2: .npy with a huge header shape

def _npy_with_header(path: Path, header: str, data: bytes = bytes(64)) -> Path:
    header = header + " " * (-(len(header) + 11) % 64) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
    return path


@pytest.mark.parametrize("shape", ["(1000000000000, 1000000)", "(1 << 62,)", "(4, 64)", "(-5, 4)"])
def test_encode_npy_header_declares_more_than_the_file(tmp_path, run, shape):
    p = _npy_with_header(tmp_path / "h.npy", f"{{'descr': '<u2', 'fortran_order': False, 'shape': {shape}, }}")
    one_line_error(run("encode", p, "-o", tmp_path / "o.cass"), "h.npy")


def npy_fuzz(tmp_path, run, weight_bits, n_flips, seed):
    """Truncations and header byte edits of a real .npy: an error line, or exactly what numpy reads."""
    good = tmp_path / "good.npy"
    arr = weight_bits(2 * 64, seed=3).reshape(2, 64)
    np.save(good, arr)
    raw = good.read_bytes()
    p = tmp_path / "f.npy"
    rng = random.Random(seed)
    cases = [raw[:n] for n in range(0, 140, 3)]
    for _ in range(n_flips):
        b = bytearray(raw)
        for _ in range(rng.choice([1, 1, 2])):
            b[rng.randrange(128)] = rng.randrange(256)
        cases.append(bytes(b))
    for data in cases:
        p.write_bytes(data)
        r = run("encode", p, "-o", tmp_path / "o.cass", "-q")
        if r.returncode:
            one_line_error(r)
            continue
        d = run("decode", tmp_path / "o.cass", "-o", tmp_path / "d.npy")
        assert d.returncode == 0, d.stderr
        got = np.load(tmp_path / "d.npy")
        ref = np.load(p, allow_pickle=False)          # what numpy itself reads from the mutated file
        assert got.shape == ref.shape
        if ref.dtype == np.uint16:
            np.testing.assert_array_equal(got, ref)
    assert leftovers(tmp_path, keep={"good.npy", "f.npy", "o.cass", "d.npy"}) == []
    return len(cases)


def test_npy_reader_fuzz(tmp_path, run, weight_bits):
    assert npy_fuzz(tmp_path, run, weight_bits, 80, seed=7) > 100


@pytest.mark.slow
def test_npy_reader_fuzz_long(tmp_path, run, weight_bits):
    npy_fuzz(tmp_path, run, weight_bits, 3000, seed=77)


# -------------------------------------------------------------- row 3: safetensors with odd header values

@pytest.mark.parametrize("info,word", [
    ({"dtype": "BF16", "shape": [-8, -8], "data_offsets": [0, 128]}, "shape"),
    ({"dtype": "BF16", "shape": [8.5, 8], "data_offsets": [0, 128]}, "shape"),
    ({"dtype": "BF16", "shape": [8, 8], "data_offsets": [0.0, 128.0]}, "data_offsets"),
    ({"dtype": "BF16", "shape": [8, 8], "data_offsets": ["0", "128"]}, "data_offsets"),
    ({"dtype": ["BF16"], "shape": [8, 8], "data_offsets": [0, 128]}, "dtype"),
    ({"dtype": "BF16", "shape": "8x8", "data_offsets": [0, 128]}, "shape"),
    ({"dtype": "BF16", "shape": [True, 64], "data_offsets": [0, 128]}, "shape"),
    ({"dtype": "BF16", "shape": [8, 8], "data_offsets": [0]}, "data_offsets"),
    ({"dtype": "BF16", "shape": [2, 2, 2, 8], "data_offsets": [0, 128]}, "rank"),
    ({"dtype": "BF16", "shape": [], "data_offsets": [0, 2]}, "rank"),
    (7, "dtype/shape"),
])
def test_encode_safetensors_odd_header_values(tmp_path, run, info, word):
    p = st_file(tmp_path / "m.safetensors", {"w": info})
    one_line_error(run("encode", p, "-o", tmp_path / "o.cass"), "m.safetensors", word)
    assert not (tmp_path / "o.cass").exists()


def test_safetensors_reader_fuzz(tmp_path, run):
    """Every header value of a valid file replaced by odd JSON values: an error line or a correct read."""
    good = {"w": {"dtype": "BF16", "shape": [2, 32], "data_offsets": [0, 128]}}
    data = np.arange(64, dtype="<u2").tobytes()
    odd = [None, True, -1, 0, 1.5, "x", [], {}, 10 ** 20, [1, 2], [-1, 64]]
    for key in ("dtype", "shape", "data_offsets"):
        for v in odd:
            h = json.loads(json.dumps(good))
            h["w"][key] = v
            p = st_file(tmp_path / "m.safetensors", h, data)
            r = run("encode", p, "-o", tmp_path / "o.cass", "-q")
            if r.returncode:
                one_line_error(r, "m.safetensors")
            else:   # only a layout with the same 64 values can be accepted, and it must read them exactly
                d = run("decode", tmp_path / "o.cass", "-o", tmp_path / "d.npy")
                np.testing.assert_array_equal(np.load(tmp_path / "d.npy").reshape(-1), np.arange(64))


def safetensors_fuzz(tmp_path, run, n, seed):
    """Byte edits anywhere in a valid two-tensor file (header JSON included) and truncations: an error
    line, or a read of exactly what the (possibly edited) header describes."""
    torch = pytest.importorskip("torch")
    safetensors = pytest.importorskip("safetensors.torch")
    rng = random.Random(seed)
    a = np.arange(2 * 32, dtype="<u2")
    b = np.linspace(-1, 1, 16).astype("<f4")
    header = {"a": {"dtype": "BF16", "shape": [2, 32], "data_offsets": [0, 128]},
              "b": {"dtype": "F32", "shape": [16], "data_offsets": [128, 192]}}
    good = st_file(tmp_path / "good.safetensors", header, a.tobytes() + b.tobytes()).read_bytes()
    p = tmp_path / "m.safetensors"
    cases = [good[:k] for k in range(0, len(good), 9)]
    for _ in range(n):
        d = bytearray(good)
        for _ in range(rng.choice([1, 1, 2, 3])):
            d[rng.randrange(len(d))] = rng.choice([rng.randrange(256), ord("-"), ord("."), ord("9"), ord('"')])
        cases.append(bytes(d))
    accepted = 0
    for data in cases:
        p.write_bytes(data)
        r = run("encode", p, "-o", tmp_path / "o.cass", "-q")
        if r.returncode:
            one_line_error(r, "m.safetensors")
            continue
        accepted += 1
        assert r.stderr == "", r.stderr
        try:                                           # the safetensors library as an independent reader
            ref = safetensors.load_file(str(p))
        except Exception:  # noqa: BLE001 - stricter than the format needs (alignment, contiguity, ...)
            continue
        from cassandra_rtl.golden.container import read_container
        from cassandra_rtl.golden.codec import decode_full
        from cassandra_rtl.model.loader import bf16_to_bits

        got = {n: decode_full(e) for n, e in read_container(tmp_path / "o.cass").tensors.items()}
        assert sorted(got) == sorted(ref)
        for name, t in ref.items():
            want = bf16_to_bits(t.float() if t.dtype != torch.bfloat16 else t)
            nan = np.isnan(t.float().numpy())               # NaN payloads may differ; NaN must stay NaN
            assert np.all((got[name][nan] & 0x7F80) == 0x7F80) and np.all(got[name][nan] & 0x7F)
            np.testing.assert_array_equal(got[name][~nan], want[~nan])
    assert leftovers(tmp_path, keep={"good.safetensors", "m.safetensors", "o.cass"}) == []
    return len(cases), accepted


def test_safetensors_byte_fuzz(tmp_path, run):
    n, accepted = safetensors_fuzz(tmp_path, run, 100, seed=9)
    assert n > 100 and accepted > 0                    # data-byte edits are valid files


@pytest.mark.slow
def test_safetensors_byte_fuzz_long(tmp_path, run):
    safetensors_fuzz(tmp_path, run, 4000, seed=99)


# -------------------------------------------------- row 4: a full disk (atomic outputs, nothing left behind)

def _enospc_after(monkeypatch, nbytes: int):
    """Every AtomicWriter.write fails with ENOSPC once ``nbytes`` were written (what a full disk does)."""
    from cassandra_rtl.golden import io as gio

    real = gio.AtomicWriter.write
    state = {"n": 0}

    def write(self, data):
        data = bytes(memoryview(data).cast("B"))
        room = nbytes - state["n"]
        if len(data) > room:
            real(self, data[:max(room, 0)])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        state["n"] += len(data)
        return real(self, data)
    monkeypatch.setattr(gio.AtomicWriter, "write", write)


@pytest.mark.parametrize("existing", [False, True])
@pytest.mark.parametrize("room", [0, 100])
def test_encode_onto_a_full_disk(tmp_path, run, small_npy, monkeypatch, existing, room):
    out = tmp_path / "o.cass"
    if existing:
        out.write_bytes(b"previous contents")
    _enospc_after(monkeypatch, room)
    one_line_error(run("encode", small_npy, "-o", out), "no space left")
    assert leftovers(tmp_path, keep={"w.npy"}) == (["o.cass"] if existing else [])
    if existing:
        assert out.read_bytes() == b"previous contents"


@pytest.mark.parametrize("room", [0, 100])
def test_decode_onto_a_full_disk(tmp_path, run, small_cass, monkeypatch, room):
    _enospc_after(monkeypatch, room)
    one_line_error(run("decode", small_cass, "-o", tmp_path / "d.npy"), "no space left")
    assert leftovers(tmp_path, keep={"w.npy", "w.cass"}) == []


@pytest.mark.parametrize("command", ["encode", "decode"])
def test_dev_full_is_refused_before_any_work(tmp_path, run, small_npy, small_cass, command):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    src = small_npy if command == "encode" else small_cass
    before = Path("/dev/full.npy").exists() and Path("/dev/full.npy").stat().st_mtime_ns
    one_line_error(run(command, src, "-o", "/dev/full"), "/dev/full", "not a regular file")
    assert (Path("/dev/full.npy").exists() and Path("/dev/full.npy").stat().st_mtime_ns) == before  # nothing new


def test_real_enospc_through_the_cli_subprocess(tmp_path, small_npy):
    """End to end in a subprocess, where a tmpfs of 64 KiB is available: the real ENOSPC path."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    big = tmp_path / "big.npy"
    np.save(big, np.zeros((4, 1 << 16), np.uint16))
    # A file that fills /dev/shm is not an option on a shared machine; use RLIMIT_FSIZE instead: writes past
    # the limit fail with EFBIG (SIGXFSZ ignored), the same error path as ENOSPC.
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); from cassandra_rtl.cli import main; "
            f"sys.exit(main(['encode', {str(big)!r}, '-o', {str(tmp_path / 'o.cass')!r}, '-q']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    one_line_error(r, "too large")
    assert leftovers(tmp_path, keep={"w.npy", "big.npy"}) == []


# ------------------------------------------------------------------------- row 5: cosim's own .npy reader

@pytest.mark.parametrize("case", ["empty", "random", "huge-header", "float32", "missing", "txt"])
def test_cosim_bad_npy(tmp_path, run, case):
    p = tmp_path / "x.npy"
    if case == "empty":
        p.write_bytes(b"")
    elif case == "random":
        p.write_bytes(np.random.default_rng(2).bytes(300))
    elif case == "huge-header":
        _npy_with_header(p, "{'descr': '<u2', 'fortran_order': False, 'shape': (1000000000000, 1000000), }")
    elif case == "float32":
        np.save(p, np.ones(256, np.float32))
    elif case == "txt":
        p = tmp_path / "x.txt"
        p.write_text("hello")
    one_line_error(run("cosim", p), p.name)


# ---------------------------------------------------------------------- row 6: cosim --config validation

@pytest.mark.parametrize("config,word", [("nope", "unknown"), ("encoder_kv_c1_l8", "not a decoder"),
                                         ("zero_counter_w64_l8", "not a decoder"),
                                         ("decoder_c2v3_l8", "decoder_c1v3_l8")])
def test_cosim_config_checked_against_the_container(run, small_cass, config, word):
    one_line_error(run("cosim", small_cass, "--config", config), config, word)


def test_cosim_c1_config_on_a_c2_container_names_the_c2_decoder(tmp_path, run, small_npy):
    r = run("encode", small_npy, "-o", tmp_path / "c2.cass", "--scheme", "c2", "-q")
    assert r.returncode == 0
    line = one_line_error(run("cosim", tmp_path / "c2.cass", "--config", "decoder_c1v3_l8"), "decoder_c2v3_l8")
    assert "implements c1" not in line.lower()          # row 12: the stale message is gone


# ------------------------------------------------- row 7: C2 planes that disagree, through decode and stats

@pytest.mark.parametrize("command", ["decode", "stats"])
def test_c2_inconsistent_planes_through_the_cli(tmp_path, run, command):
    """A C2 tensor without draft-zero values (verif.codes holds no code) whose speculation plane is then
    edited - with every CRC recomputed - so that one value becomes zero in the draft."""
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.container import write_container

    bits = (0x3F80 | np.arange(64, dtype=np.uint16) % 128).astype(np.uint16)
    cfg = CodecConfig(scheme="c2", group_size=32, mantissa_bits=3)
    header = write_container(tmp_path / "ok.cass", {"t": encode_tensor(bits, cfg)})
    raw = bytearray((tmp_path / "ok.cass").read_bytes())
    sec = header["sections"]["speculation"]
    ref = header["tensors"][0]["planes"]["spec.mx"]
    pos = 8 * (sec["offset"] + ref["offset"]) + 8                # first element field after X of block 0
    for b in range(cfg.mantissa_bits + 1):
        raw[(pos + b) // 8] &= ~(1 << ((pos + b) % 8)) & 0xFF
    h = json.loads(json.dumps(header))
    spec = bytes(raw[sec["offset"]: sec["offset"] + sec["length"]])
    import zlib
    h["sections"]["speculation"]["crc32"] = zlib.crc32(spec)
    bad = tmp_path / "bad.cass"
    bad.write_bytes(R.rewrite_header(bytes(raw), h))
    args = [command, bad] + (["-o", tmp_path / "d.npy"] if command == "decode" else ["--json"])
    one_line_error(run(*args), "verif.codes")


# ---------------------------------------------------------------- row 8: generate --model DIR, config.json

@pytest.mark.parametrize("cfg,word", [([], "JSON object"), ("x", "JSON object"), (None, "JSON object"),
                                      ({"architectures": "LlamaForCausalLM"}, "architectures"),
                                      ({"architectures": ["LlamaForCausalLM"]}, "missing"),
                                      ({"architectures": ["LlamaForCausalLM"], "num_attention_heads": "4"}, "integer"),
                                      ({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 0}, ">= 1"),
                                      ({"architectures": ["LlamaForCausalLM"], "rope_scaling": [1]}, "rope_scaling")])
def test_generate_bad_config_json(tmp_path, run, cfg, word):
    pytest.importorskip("torch")
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    one_line_error(run("generate", "--model", d, "--prompt", "hi", "--draft", "none"), "config.json", word)


def test_generate_config_json_fuzz(tmp_path, run):
    """Every field of a real tiny model's config.json replaced by odd values: a one-line error or a run."""
    pytest.importorskip("torch")
    from cassandra_rtl.model.testing import write_hf_folder

    d = tmp_path / "model"
    write_hf_folder(d)
    good = json.loads((d / "config.json").read_text())
    rng = random.Random(3)
    for key in sorted(good):
        for v in rng.sample([None, True, -1, 0, 1.5, "x", [], {}, 10 ** 20], 3):
            cfg = dict(good, **{key: v})
            (d / "config.json").write_text(json.dumps(cfg))
            r = run("generate", "--model", d, "--prompt", "hi", "--draft", "none", "--max-new-tokens", "1",
                    "--json")
            assert "Traceback" not in r.stderr, (key, v, r.stderr[-2000:])
            if r.returncode:
                one_line_error(r)


# ----------------------------------------------------------------------------------- row 9: decode -o

def test_decode_writes_exactly_the_path_given(tmp_path, run, small_cass, small_npy):
    out = tmp_path / "out.bin"
    r = run("decode", small_cass, "-o", out)
    assert r.returncode == 0 and f"wrote {out}" in r.stdout
    assert out.is_file() and not Path(str(out) + ".npy").exists()
    np.testing.assert_array_equal(np.load(out), np.load(small_npy))


def test_decode_refuses_a_directory(tmp_path, run, small_cass):
    d = tmp_path / "outdir"
    d.mkdir()
    one_line_error(run("decode", small_cass, "-o", d), "directory")
    assert not (tmp_path / "outdir.npy").exists() and list(d.iterdir()) == []


def test_decode_refuses_a_missing_folder_before_decoding(tmp_path, run, small_cass):
    one_line_error(run("decode", small_cass, "-o", tmp_path / "no" / "such" / "o.npy"), "does not exist")


# ------------------------------------------------------------------------------------- row 10: 0-d .npy

@pytest.mark.parametrize("dtype", [np.float32, np.uint16, np.float64, np.float16])
def test_encode_0d_npy_is_rejected(tmp_path, run, dtype):
    p = tmp_path / "s.npy"
    np.save(p, np.array(1.5 if dtype != np.uint16 else 7, dtype=dtype))
    one_line_error(run("encode", p, "-o", tmp_path / "o.cass"), "rank 0")
    assert not (tmp_path / "o.cass").exists()


def test_float_to_bf16_keeps_the_shape():
    from cassandra_rtl.golden.io import float_to_bf16_bits

    assert float_to_bf16_bits(np.float32(1.0)).shape == ()
    assert float_to_bf16_bits(np.ones((2, 3), np.float64)).shape == (2, 3)


# --------------------------------------------------------- row 11: cosim --max-values / --jobs ranges

@pytest.mark.parametrize("opt,val", [("--max-values", "-1"), ("--max-values", "0"), ("--jobs", "0"),
                                     ("--jobs", "-1"), ("--jobs", str(10 ** 30)), ("--mbits", "8"), ("--keep", "0"),
                                     ("--group", "100")])
def test_cosim_argument_ranges(run, small_cass, opt, val):
    one_line_error(run("cosim", small_cass, opt, val), opt)


def test_cosim_refuses_a_run_that_checks_nothing(tmp_path, run, monkeypatch):
    """Before the simulator is even looked for: a 0-value .npy, or a container whose tensors of the chosen
    decoder's scheme hold no value."""
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.container import write_container
    from cassandra_rtl.tb.common import tools

    monkeypatch.setattr(tools, "ensure_simulator", lambda sim: pytest.fail("looked for a simulator first"))
    p = tmp_path / "e.npy"
    np.save(p, np.zeros(0, np.uint16))
    one_line_error(run("cosim", p), "0 values")
    write_container(tmp_path / "e.cass", {"t": encode_tensor(np.zeros(0, np.uint16), CodecConfig())})
    one_line_error(run("cosim", tmp_path / "e.cass"), "0 values")


# --------------------------------------------------------------------- row 13/14: generate argument ranges

@pytest.mark.parametrize("opt,val", [("--gamma", "0"), ("--gamma", "-3"), ("--gamma", "65"), ("--threads", "0"),
                                     ("--threads", "-2"), ("--threads", str(10 ** 30)), ("--seed", "-1"),
                                     ("--max-new-tokens", "0"), ("--top-p", "0"), ("--temperature", "-1"),
                                     ("--mantissa-bits", "9"), ("--keep-ratio", "1.5"), ("--rtl-layers", "a,b"),
                                     ("--rtl-layers", "-1"), ("--n-skip", "-1"), ("--max-seq-len", "1"),
                                     ("--adaptive", "confidence:1.5"), ("--adaptive", "sometimes"),
                                     ("--draft-memory", "shared")])
def test_generate_argument_ranges_checked_at_parse_time(run, opt, val, monkeypatch):
    import cassandra_rtl.model.loader as loader

    monkeypatch.setattr(loader, "load", lambda *a, **k: pytest.fail("the model was loaded before the check"))
    one_line_error(run("generate", "--prompt", "hi", opt, val), opt)


def test_generate_rtl_layers_beyond_the_model(tmp_path, run, monkeypatch):
    pytest.importorskip("torch")
    from cassandra_rtl.model import runner
    from cassandra_rtl.model.testing import write_hf_folder

    d = tmp_path / "model"
    write_hf_folder(d)                                # 3 layers
    monkeypatch.setattr(runner, "build", lambda *a, **k: pytest.fail("the draft was built before the check"))
    one_line_error(run("generate", "--model", d, "--prompt", "hi", "--rtl", "--rtl-layers", "0,99"),
                   "--rtl-layers", "99", "0..2")
    one_line_error(run("generate", "--model", d, "--prompt", "hi", "--rtl-layers", "0"), "--rtl")


# ---------------------------------------------------------- row 15: stats progress and --per-tensor

def test_stats_progress_lines_when_stderr_is_not_a_terminal(small_cass, monkeypatch, capsys):
    from cassandra_rtl.golden import stats as gstats

    real = gstats.tensor_stats
    monkeypatch.setattr("cassandra_rtl.commands.stats.tensor_stats", lambda e: (time.sleep(0.3), real(e))[1])
    monkeypatch.setenv("CASSANDRA_RTL_PROGRESS_SECONDS", "0.1")
    from cassandra_rtl.commands.stats import container_stats

    container_stats(small_cass)
    err = capsys.readouterr().err
    assert "[stats] 1/1 tensor" in err, err


def test_progress_lines_every_interval(capsys):
    from cassandra_rtl.progress import LineProgress

    list(LineProgress(range(3), desc="x", unit="step", every=0.0))
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[:3] == ["[x] 1/3 step, 0 s", "[x] 2/3 step, 0 s", "[x] 3/3 step, 0 s"], lines


def test_stats_per_tensor_without_json(run, small_cass):
    r = run("stats", small_cass, "--per-tensor")
    assert r.returncode == 0
    assert "bits/value per tensor" in r.stdout and "\nw " in r.stdout, r.stdout


# ------------------------------------------------------------------- row 16: big-endian .npy inputs

@pytest.mark.parametrize("dtype", [">f4", ">f8", ">f2", ">u2"])
def test_encode_big_endian_npy(tmp_path, run, dtype):
    x = np.linspace(-3, 3, 2 * 64).reshape(2, 64)
    a = (x * 1000 % 60000).astype(dtype) if dtype == ">u2" else x.astype(dtype)
    np.save(tmp_path / "be.npy", a)
    r = run("encode", tmp_path / "be.npy", "-o", tmp_path / "be.cass", "-q")
    assert r.returncode == 0, r.stderr
    assert run("decode", tmp_path / "be.cass", "-o", tmp_path / "d.npy").returncode == 0
    native = a.astype(a.dtype.newbyteorder("="))
    want = native if dtype == ">u2" else np.array([R.f32_to_bf16_rne(float(v)) for v in
                                                   native.astype(np.float32).reshape(-1)]).reshape(a.shape)
    if dtype == ">f8":
        from cassandra_rtl.golden.io import float_to_bf16_bits
        want = float_to_bf16_bits(native)             # f64 -> bf16 without double rounding (test_golden_io)
    np.testing.assert_array_equal(np.load(tmp_path / "d.npy"), want)


# ------------------------------------------------------------------------ the error path and --debug

def test_debug_flag_shows_the_traceback(tmp_path, run, capsys):
    p = tmp_path / "e.npy"
    p.write_bytes(b"")
    one_line_error(run("encode", p, "-o", tmp_path / "o.cass"))
    with pytest.raises(UserError):
        main(["--debug", "encode", str(p), "-o", str(tmp_path / "o.cass")])


def test_os_errors_are_one_line(tmp_path, run, small_npy):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        one_line_error(run("encode", small_npy, "-o", ro / "o.cass"), "permission denied")
    finally:
        ro.chmod(0o700)


def test_usage_errors_are_one_line(run):
    one_line_error(run("encode"), "required")
    one_line_error(run("nope"), "invalid choice")


# --------------------------------------------------------- tune: outputs and ranges before the search

@pytest.mark.parametrize("argv,word", [(["--out", "/dev/full"], "not a regular file"),
                                       (["--out", "{tmp}"], "directory"),
                                       (["--container", "{tmp}/no/x.cass"], "does not exist"),
                                       (["--out", "{tmp}/a.json", "--threads", "0"], "--threads"),
                                       (["--out", "{tmp}/a.json", "--new-tokens", "0"], "--new-tokens"),
                                       (["--out", "{tmp}/a.json", "--options", "c1:x:3"], "--options")])
def test_tune_checks_before_the_search(tmp_path, run, monkeypatch, argv, word):
    import cassandra_rtl.model.loader as loader

    monkeypatch.setattr(loader, "load", lambda *a, **k: pytest.fail("the model was loaded before the check"))
    one_line_error(run("tune", *[a.format(tmp=tmp_path) for a in argv]), word)


@pytest.mark.parametrize("schemes,want", [(("c2",), "decoder_c2v3_l8"), (("c1",), "decoder_c1v3_l8"),
                                          (("c1", "c2"), "decoder_c1v3_l8")])
def test_cosim_default_decoder_follows_the_container(tmp_path, run, monkeypatch, weight_bits, schemes, want):
    """Row 12 without a simulator: the configuration handed to the bulk harness (stubbed by the golden
    decode) is the container's scheme's decoder; the other scheme's tensors are counted as skipped."""
    from cassandra_rtl.golden.codec import decode_full, encode_tensor
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.container import write_container
    from cassandra_rtl.tb import bulk
    from cassandra_rtl.tb.common import tools

    tensors = {f"t{s}": encode_tensor(weight_bits(300, seed=i), CodecConfig(scheme=s)) for i, s in enumerate(schemes)}
    write_container(tmp_path / "m.cass", tensors)
    seen = {}

    def fake(encs, mode, config, jobs, stats):
        seen["config"] = config
        return [decode_full(e) for e in encs]
    monkeypatch.setattr(tools, "ensure_simulator", lambda sim: sim)
    monkeypatch.setattr(bulk, "decode_many_with_rtl", fake)
    r = run("cosim", tmp_path / "m.cass", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert seen["config"] == want and rep["config"] == want and rep["values"] == 300
    other = "c1" if want == "decoder_c2v3_l8" else "c2"
    assert rep[f"skipped_{other}_tensors"] == len(schemes) - 1


@pytest.mark.sim
@pytest.mark.slow
def test_cosim_c2_container_uses_the_c2_decoder_by_default(tmp_path, run, small_npy):
    """Row 12: a C2-only container is co-simulated on the C2 decoder v3 by default."""
    from cassandra_rtl.tb import bulk

    if not bulk.available():
        pytest.skip("Verilator not available")
    assert run("encode", small_npy, "-o", tmp_path / "c2.cass", "--scheme", "c2", "--keep-ratio", "0.5",
               "-q").returncode == 0
    r = run("cosim", tmp_path / "c2.cass", "--json", "--jobs", "1")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert (rep["config"], rep["scheme"], rep["values"], rep["mismatches"]) == ("decoder_c2v3_l8", "c2", 3 * 128, 0)


# ------------------------------------------------------------ messages name the file; input != output

def test_encode_refuses_to_overwrite_its_input(tmp_path, run, small_npy):
    before = small_npy.read_bytes()
    one_line_error(run("encode", small_npy, "-o", small_npy), "input file")
    assert small_npy.read_bytes() == before


@pytest.mark.parametrize("command", ["decode", "stats"])
def test_container_errors_name_the_file(tmp_path, run, small_npy, command):
    args = ["-o", tmp_path / "d.npy"] if command == "decode" else []
    one_line_error(run(command, small_npy, *args), "w.npy", "bad magic")
    one_line_error(run(command, tmp_path, *args), str(tmp_path), "not a regular file")


def test_deeply_nested_header_json(tmp_path, run):
    import zlib

    blob = b"[" * 100000 + b"]" * 100000
    p = tmp_path / "deep.cass"
    p.write_bytes(struct.pack("<4sHHII", b"CASS", 1, 0, len(blob), zlib.crc32(blob)) + blob)
    one_line_error(run("stats", p), "deep.cass", "nested")
    st = st_file(tmp_path / "deep.safetensors", None)
    st.write_bytes(struct.pack("<Q", len(blob)) + blob)
    one_line_error(run("encode", st, "-o", tmp_path / "o.cass"), "deep.safetensors")


@pytest.mark.parametrize("name,data", [("p.txt", b"\xff\xfe\x00bad"), ("p.json", b"[" * 100000),
                                       ("p.json", b'{"a": 1}'), ("p.txt", b"\n\n")])
def test_tune_prompt_files(tmp_path, run, monkeypatch, name, data):
    import cassandra_rtl.model.loader as loader

    monkeypatch.setattr(loader, "load", lambda *a, **k: pytest.fail("the model was loaded before the check"))
    (tmp_path / name).write_bytes(data)
    one_line_error(run("tune", "--out", tmp_path / "a.json", "--calib-prompts", tmp_path / name), name)


def test_progress_heartbeat_while_one_item_takes_long(capsys):
    from cassandra_rtl.progress import LineProgress

    def slow():
        time.sleep(0.5)                              # e.g. a GGUF parsed before the first tensor
        yield 1

    assert list(LineProgress(slow(), total=1, desc="enc", unit="tensor", every=0.1)) == [1]
    lines = capsys.readouterr().err.strip().splitlines()
    assert any(ln.startswith("[enc] 0/1 tensor") for ln in lines), lines      # before the first item
    assert lines[-1].startswith("[enc] 1/1 tensor"), lines


def test_encode_gguf_with_a_duplicate_tensor_name(tmp_path, run):
    gguf = pytest.importorskip("gguf")
    p = tmp_path / "dup.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_tensor("a", np.ones((2, 64), np.float32))
    w.add_tensor("b", np.zeros((2, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    raw = p.read_bytes()
    i = raw.index(b"\x01\x00\x00\x00\x00\x00\x00\x00b")    # the second name (u64 length 1, 'b') -> 'a'
    p.write_bytes(raw[:i + 8] + b"a" + raw[i + 9:])
    r = run("encode", p, "-o", tmp_path / "o.cass")
    if r.returncode == 0:                                  # gguf-py itself may refuse duplicates first
        pytest.fail("a GGUF with two tensors named 'a' was encoded as one")
    one_line_error(r, "dup.gguf")
