"""The integration example of docs/INTEGRATION.md: a plain Verilog-2005 bench (tb/integration/
tb_decoder_csr_axis.v, no cocotb and no project code at simulation time) decodes a tensor exported by
`cassandra-rtl export-planes` through the exported `<name>_csr_axis` top on Icarus — AXI4-Lite register
program, AXI4-Stream planes with random idles, output backpressure — and every value equals golden.
Quick: one small tensor, draft and full, on decoder_c1v3_l4; slow: a SmolLM2 weight on decoder_c1v3_l8."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cassandra_rtl.cli import main as cli
from cassandra_rtl.commands.export_planes import port_widths

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tb" / "integration" / "tb_decoder_csr_axis.v"

pytestmark = pytest.mark.sim


def _need_icarus():
    if shutil.which("iverilog") is None or shutil.which("vvp") is None:
        pytest.skip("iverilog not installed (make test installs it)")


def _build(tmp: Path, config: str) -> Path:
    """Export `<config>_csr_axis` and compile the bench against it; returns the vvp image."""
    from cassandra_rtl.hw.configs import CONFIG_INFO
    from cassandra_rtl.hw.export import export
    export(tmp / "verilog", only=[config], axil=True, quiet=True)
    w = port_widths(config)
    image = tmp / "sim"
    subprocess.run(["iverilog", "-g2005", "-o", str(image), f"-DDUT={config}_csr_axis",
                    f"-Ptb.L={CONFIG_INFO[config]['lanes']}", f"-Ptb.WC={w['spec_codes']}",
                    f"-Ptb.WS={w['spec_signman']}", f"-Ptb.WV={w['verif_codes']}", str(BENCH),
                    str(tmp / "verilog" / f"{config}_csr_axis.v"), str(tmp / "verilog" / f"{config}_csr.v")],
                   check=True, capture_output=True, text=True)
    return image


def _run(image: Path, planes: Path, full: bool, seed: int = 1, dma: bool = False) -> str:
    r = subprocess.run(["vvp", "-n", str(image), f"+dir={planes}", f"+full={int(full)}", f"+seed={seed}",
                        f"+dma={int(dma)}"],
                       capture_output=True, text=True, timeout=3600)
    return (r.stdout.strip().splitlines() or [""])[-1]


def _small_container(path: Path) -> None:
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.container import write_container
    from cassandra_rtl.golden import escfield
    rng = np.random.default_rng(1)
    vals = (rng.standard_normal((8, 96)) * 0.05).astype(np.float32)
    vals.reshape(-1)[::11] *= np.float32(2.0) ** rng.integers(-60, 60, 70)   # rare exponents: escapes in both books
    bits = (vals.view(np.uint32) >> 16).astype(np.uint16)            # truncated to bf16
    enc = encode_tensor(bits, CodecConfig(group_size=32, mantissa_bits=3, keep_ratio=0.75))
    v3 = escfield.to_format3(enc)        # the container holds format 3.0
    assert all(escfield.escapes_per_chunk(v3, p).sum() > 0 for p in ("spec.codes", "verif.codes"))
    write_container(path, {"w": enc})


def _check_layout_comments_and_program_length(cass: Path, planes: Path) -> None:
    """counts.hex and program_*.hex say their layout in a first comment line (the bench reads them with it);
    the program length is the datasheet's formula: draft 9 + K_spec writes, full 11 + K_spec + K_verif
    (decoder_c1.md "Programming a tensor")."""
    import json

    from cassandra_rtl.golden.container import read_container
    counts = (planes / "counts.hex").read_text().splitlines()
    assert counts[0] == ("// program writes draft, program writes full, words spec_codes, words spec_signman, "
                         "words verif_codes, words verif_rest, values")
    man = json.loads((planes / "manifest.json").read_text())
    assert [int(x, 16) for x in counts[1:]] == [man["program_writes"]["draft"], man["program_writes"]["full"],
                                                *man["words"].values(), man["numel"]]
    for mode in ("draft", "full"):
        assert "index in the HIGH" in (planes / f"program_{mode}.hex").read_text().splitlines()[0]
    enc = read_container(cass).tensors["w"]
    assert man["program_writes"] == {"draft": 9 + enc.spec_book.K, "full": 11 + enc.spec_book.K + enc.verif_book.K}


def test_small_tensor_through_the_exported_top_on_icarus(tmp_path):
    _need_icarus()
    _small_container(tmp_path / "t.cass")
    assert cli(["export-planes", str(tmp_path / "t.cass"), "--out", str(tmp_path / "planes"),
                "--config", "decoder_c1v3_l4"]) == 0
    _check_layout_comments_and_program_length(tmp_path / "t.cass", tmp_path / "planes")
    image = _build(tmp_path, "decoder_c1v3_l4")
    for full in (False, True):
        assert _run(image, tmp_path / "planes", full).startswith("PASS values=768 "), full
        # the program as a plain DMA stream: 64-bit {index, value} words on s_axis_cfg_dma, no tuser
        assert _run(image, tmp_path / "planes", full, seed=2, dma=True).startswith("PASS values=768 "), full
    # the bench can fail: one expected value changed, and a plane word missing (OVERRUN)
    bad = tmp_path / "bad"
    shutil.copytree(tmp_path / "planes", bad)
    lines = (bad / "expected_full.hex").read_text().splitlines()
    lines[99] = f"{int(lines[99], 16) ^ 1:04x}"
    (bad / "expected_full.hex").write_text("\n".join(lines) + "\n")
    assert _run(image, bad, True).startswith("FAIL") and "mismatches=1 " in _run(image, bad, True)
    words = (bad / "spec_signman.hex").read_text().splitlines()
    (bad / "spec_signman.hex").write_text("\n".join(words[:4] + words[5:]) + "\n")
    assert "error_code=00000002" in _run(image, bad, False)


def test_export_planes_rejects_the_other_scheme(tmp_path, capsys):
    _small_container(tmp_path / "t.cass")
    assert cli(["export-planes", str(tmp_path / "t.cass"), "--out", str(tmp_path / "p"),
                "--config", "decoder_c2v3_l8"]) == 2
    assert "reads C2 tensors" in capsys.readouterr().err


@pytest.mark.slow
def test_smollm2_weight_through_the_headline_top_on_icarus(tmp_path):
    """A whole SmolLM2 weight (format 2.0 defaults: G = 128, chunks of 8, pair books) through
    decoder_c1v3_l8_csr_axis (the default configuration), draft and full."""
    _need_icarus()
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.golden.container import write_container
    from cassandra_rtl.golden.io import read_tensors
    from cassandra_rtl.model.loader import bundled_model_path
    try:
        path = bundled_model_path()
    except Exception as exc:                        # noqa: BLE001 - the bundled model is optional
        pytest.skip(f"bundled model unavailable: {exc}")
    name, bits = next((n, b) for n, b in read_tensors(path) if n == "blk.0.attn_k.weight")
    write_container(tmp_path / "t.cass", {name: encode_tensor(bits, CodecConfig(keep_ratio=0.75))})
    assert cli(["export-planes", str(tmp_path / "t.cass"), "--out", str(tmp_path / "planes")]) == 0
    image = _build(tmp_path, "decoder_c1v3_l8")
    for full in (False, True):
        assert _run(image, tmp_path / "planes", full, seed=7).startswith(f"PASS values={bits.size} "), full


def test_the_guide_commands_run_as_written(tmp_path):
    """docs/INTEGRATION.md's shell blocks, run as written in one fresh working directory (only `model.cass` /
    `NAME` filled in, `make verilog` left out): the single-configuration export, export-planes, and the bench
    with `+dir=$PWD/...` pass in draft and full mode."""
    import os
    import re
    _need_icarus()
    _small_container(tmp_path / "model.cass")
    guide = (ROOT / "docs" / "INTEGRATION.md").read_text()
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", guide, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.startswith("make "):
                lines.append(line.split("  #")[0].replace("--tensor NAME", "--tensor w"))
    assert any("--only decoder_c1v3_l8" in x for x in lines) and any("+dir=$PWD/" in x for x in lines)
    env = dict(os.environ, REPO=str(ROOT))
    for line in lines:
        r = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, (line, r.stderr[-2000:])
    for full in (0, 1):
        r = subprocess.run(["bash", "-c", f"vvp -n sim +dir=$PWD/planes +full={full}"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=1800)
        assert r.stdout.strip().splitlines()[-1].startswith("PASS values=768 "), r.stdout[-2000:]
