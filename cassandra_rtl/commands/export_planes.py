"""`cassandra-rtl export-planes IN.cass --out DIR [--tensor NAME] [--config NAME]`: one tensor, ready for an HDL bench.

Writes everything a plain Verilog testbench needs to decode one tensor of a container through an exported
decoder (docs/datasheets/decoder_c1.md "Programming a tensor" and "Words and bits"), as `$readmemh` files:

  program_draft.hex, program_full.hex   the register writes, one per line: {index[7:0], data[31:0]} (10 hex
                                        digits, index in the HIGH bits as in `cfg_dma` tdata; the plain core's
                                        `cfg__payload` is {data, addr}, index in the LOW bits); on the
                                        AXI4-Lite top write `data` at byte offset 4 * index; START is the
                                        last write
  <port>.hex                            the words of each plane port the configuration has, in order, one per
                                        line: {last, data[W-1:0]} with W the port's width in that
                                        configuration (spec_codes, spec_signman, verif_codes, verif_rest; C2:
                                        spec_mx, verif_codes, verif_rest)
  expected_draft.hex, expected_full.hex the decoded bf16 values in tensor order, one per line (4 hex digits)
  counts.hex                            seven 32-bit numbers, one per line (8 hex digits; its first line,
                                        a comment, names them): writes of the draft and the full program, words of the four
                                        ports (C1: spec_codes, spec_signman, verif_codes, verif_rest; C2:
                                        spec_mx, verif_codes, verif_rest, 0), values
  manifest.json                         the same facts with names, the port widths and the tensor's config

The program and counts files open with `//` comment lines saying their layout ($readmemh skips them).

Draft mode streams the speculation ports only; full mode every port. The words are framed per chunk
(`last` on each chunk's final word; an empty chunk is one zero word), the program comes from the tensor's
header entry (MBITS, KEEP, GROUP, NUMEL, CHUNK, pair masks, books), so a bench reading these files needs no
project code. tests/test_integration_example.py runs tb/integration/tb_decoder_csr_axis.v on Icarus with them.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..cli import CliError

PORTS = {"c1": ("spec_codes", "spec_signman", "verif_codes", "verif_rest"),
         "c2": ("spec_mx", "verif_codes", "verif_rest")}
DEFAULT_CONFIG = {"c1": "decoder_c1v3_l8", "c2": "decoder_c2v3_l8"}   # decoder v3: the planes as a container holds them
PROGRAM_HEADER = ("// one register write per line: {index[7:0], data[31:0]} = index << 32 | data (index in the HIGH\n"
                  "// bits, as cfg_dma tdata); the plain core's cfg__payload is {data, addr} (index in the LOW bits)\n")


def port_widths(config: str) -> dict[str, int]:
    from ..hw.configs import CONFIG_INFO
    info = CONFIG_INFO[config]
    word = info["word"]
    verif = info.get("verif_word", word)
    if not info["block"].startswith("decoder_c2"):
        return {"spec_codes": info.get("code_word", word), "spec_signman": word, "verif_codes": verif,
                "verif_rest": verif}
    return {"spec_mx": word, "verif_codes": verif, "verif_rest": verif}


def export_tensor(enc, config: str, out: Path, name: str = "") -> dict:
    """Write the files of one encoded tensor for ``config``, its planes in the layout the configuration reads
    (tb/decoder/framing.py converts a tensor of another layout); returns the manifest."""
    from ..golden.codec import decode_draft, decode_full
    from ..hw.simutil import decoder_planes, decoder_program
    from ..tb.decoder.framing import config_layout, framed
    widths = port_widths(config)
    scheme = enc.config.scheme
    if (scheme == "c1") != ("spec_codes" in widths):
        raise CliError(f"{config} reads {'C1' if 'spec_codes' in widths else 'C2'} tensors; {name or 'the tensor'} "
                       f"is {scheme.upper()}")
    enc = framed(enc, config_layout(config))
    out.mkdir(parents=True, exist_ok=True)
    programs = {m: decoder_program(enc, m == "full", force_format2=True) for m in ("draft", "full")}
    for mode, prog in programs.items():
        (out / f"program_{mode}.hex").write_text(PROGRAM_HEADER + "".join(f"{a:02x}{d:08x}\n" for a, d in prog))
    words = decoder_planes(enc, True, widths)
    for port, items in words.items():
        digits = (widths[port] + 1 + 3) // 4
        (out / f"{port}.hex").write_text("".join(f"{(last << widths[port]) | data:0{digits}x}\n"
                                                 for data, last in items))
    values = {"draft": decode_draft(enc).reshape(-1), "full": decode_full(enc).reshape(-1)}
    for mode, v in values.items():
        (out / f"expected_{mode}.hex").write_text("".join(f"{int(x):04x}\n" for x in v))
    ports = PORTS[scheme]
    counts = [len(programs["draft"]), len(programs["full"])] + [len(words.get(p, [])) for p in ports]
    counts += [0] * (6 - len(counts)) + [int(enc.numel)]
    names = ["program writes draft", "program writes full"] + [f"words {p}" for p in ports] + ["values"]
    names[2 + len(ports):6] = ["0"] * (4 - len(ports))
    (out / "counts.hex").write_text("// " + ", ".join(names) + "\n" + "".join(f"{c:08x}\n" for c in counts))
    manifest = {"tensor": name, "config": config, "scheme": scheme, "shape": list(enc.shape),
                "numel": int(enc.numel), "port_widths": widths,
                "words": {p: len(w) for p, w in words.items()},
                "program_writes": {m: len(p) for m, p in programs.items()},
                "counts_hex": names,
                "codec_config": enc.config.to_json()}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def run(args) -> int:
    from ..golden.container import read_container
    from ..hw.configs import CONFIG_INFO
    c = read_container(args.input)
    if args.tensor is None:
        if len(c.tensors) != 1:
            example = next(iter(c.tensors), "NAME")
            raise CliError(f"{args.input}: the container holds {len(c.tensors)} tensors; choose one with --tensor "
                           f"(e.g. {example})")
        name = next(iter(c.tensors))
    else:
        name = args.tensor
        if name not in c.tensors:
            raise CliError(f"no tensor {name!r} in {args.input}")
    enc = c.tensors[name]
    config = args.config or DEFAULT_CONFIG[enc.config.scheme]
    if config not in CONFIG_INFO or not CONFIG_INFO[config]["block"].startswith("decoder"):
        raise CliError(f"--config must be a decoder configuration, got {config!r}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CliError(f"{out}: exists and is not a directory")
    m = export_tensor(enc, config, out, name)
    print(f"wrote {out}/: {name} {m['shape']} for {config} ({m['numel']} values; words "
          + ", ".join(f"{p} {n}" for p, n in m["words"].items())
          + f"; program writes draft {m['program_writes']['draft']}, full {m['program_writes']['full']})")
    return 0


def register(sub):
    p = sub.add_parser("export-planes", help="one tensor of a .cass as $readmemh files for an HDL bench "
                       "(register program, plane words per port, expected values)")
    p.add_argument("input")
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--tensor", help="tensor name (required when the container holds several)")
    p.add_argument("--config", help="decoder configuration whose port widths frame the words (default: "
                   "decoder_c1v3_l8 for C1, decoder_c2v3_l8 for C2)")
    p.set_defaults(func=run)
