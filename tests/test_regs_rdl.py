"""hw/regs/cassandra.rdl, the one register description, against the Amaranth register block and register file.

The RDL is the source of the C header, the HTML / Markdown register docs and the Python register layer
(``make regs``); hw/regmap.py compares it with the RTL's constants and simulates the AXI4-Lite block. These
tests check that they agree today and that a changed offset, width, access or reset value in the RDL is
caught, and that the generated header compiles and the committed Markdown is the generated one."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from cassandra_rtl.hw import regmap
from cassandra_rtl.hw.csr import Csr
from cassandra_rtl.hw.decoder import Reg

RDL = regmap.RDL_PATH.read_text()


def test_the_description_matches_the_rtl():
    assert regmap.mismatches() == []


# (what is changed in the RDL, the text replaced, its replacement, a word the report must name)
MUTATIONS = [
    ("a block register's offset", "} MODE @ 0x004", "} MODE @ 0x02C", "MODE"),
    ("a local register's offset", "} IRQ_ENABLE @ 0x418", "} IRQ_ENABLE @ 0x41C", "IRQ_ENABLE"),
    ("an array's stride", "} VERIF_SYM[15] @ 0x080 += 0x4", "} VERIF_SYM[15] @ 0x080 += 0x8", "VERIF_SYM"),
    ("an array's length", "} VERIF_SYM[15] @ 0x080", "} VERIF_SYM[14] @ 0x080", "VERIF_SYM[14]"),
    ("a field's width", "} SYM[8:0] = 0;", "} SYM[7:0] = 0;", "spec_sym"),
    ("a pair mask's width", "} MASK[14:0] = 0;\n    } SPEC_PAIRS", "} MASK[15:0] = 0;\n    } SPEC_PAIRS",
     "SPEC_PAIRS"),
    ("a block register's reset", "} G[31:0] = 128;", "} G[31:0] = 64;", "GROUP"),
    ("an identity register's reset", "} MAP_VERSION[23:16] = 1;", "} MAP_VERSION[23:16] = 2;", "VERSION"),
    ("a CTRL bit", "} CLEAR_ERROR[1:1] = 0;", "} CLEAR_ERROR[2:2] = 0;", "CTRL"),
    ("an error bit", "} NO_BOOK[4:4] = 0;", "} NO_BOOK[7:7] = 0;", "ERROR_CODE"),
    ("a block register made readable", 'name = "FULL"; rtl_signal', 'name = "FULL"; sw = rw; rtl_signal',
     "write-only"),
    ("a read-only register made writable", 'sw = r; name = "ID";', 'sw = rw; name = "ID";', "ID"),
    ("a register the RTL does not have", "    } CHUNK @ 0x020;",
     "    } CHUNK @ 0x020;\n    reg { field { rtl_signal = \"reg_m\"; } X[0:0] = 0; } EXTRA @ 0x030;", "EXTRA"),
]


@pytest.mark.parametrize("what,old,new,named", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_changed_description_fails(tmp_path, what, old, new, named):
    assert RDL.count(old) == 1, what
    path = tmp_path / "changed.rdl"
    path.write_text(RDL.replace(old, new))
    found = regmap.mismatches(path)
    assert found and any(named in line for line in found), (what, found)


def test_every_rtl_register_is_described(tmp_path):
    """Both directions of the address check: a register only in the RTL is reported too."""
    root = regmap.load()
    names = {n.split("[")[0] for n, _, _ in regmap.registers(root)}
    assert {r.name for r in Reg} | {n for n in vars(Csr) if n.isupper()} == names
    without_chunk = re.sub(r'    reg \{\n        name = "CHUNK";.*?\} CHUNK @ 0x020;\n', "", RDL, flags=re.S)
    assert "CHUNK @" not in without_chunk
    path = tmp_path / "without_chunk.rdl"
    path.write_text(without_chunk)
    found = regmap.address_mismatches(regmap.load(path))
    assert found == ["CHUNK: in the RTL at 0x020, missing from the register description"], found


def test_generated_c_header_compiles_and_agrees(tmp_path):
    """peakrdl-cheader's header compiles with -Wall -Werror; its struct places every register at the RTL's
    offset and its field macros give the RTL's bits."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    regmap.write_c_header(tmp_path / "cassandra_regs.h")
    checks = [f"CHECK(offsetof(cassandra_csr_t, {n}), {getattr(Csr, n)});" for n in
              ("ID", "VERSION", "BLOCK", "STATUS", "ERROR_CODE", "IRQ_STATUS", "IRQ_ENABLE")]
    checks += [f"CHECK(offsetof(cassandra_csr_t, {r.name}), {4 * int(r)});" for r in Reg]
    checks += ["CHECK(CASSANDRA_CSR__CTRL__START_bm, 1);", "CHECK(CASSANDRA_CSR__CTRL__CLEAR_ERROR_bm, 2);",
               "CHECK(CASSANDRA_CSR__ID__ID_reset, 0x43415353u);", "CHECK(CASSANDRA_CSR__SPEC_SYM__SYM_bw, 9);"]
    (tmp_path / "t.c").write_text(
        '#include <stddef.h>\n#include <stdio.h>\n#include "cassandra_regs.h"\n'
        "static int bad;\n#define CHECK(a, b) do { if ((unsigned long)(a) != (unsigned long)(b)) "
        '{ printf("%s\\n", #a); bad = 1; } } while (0)\n'
        "int main(void) {\n" + "\n".join(checks) + "\nreturn bad;\n}\n")
    subprocess.run([cc, "-Wall", "-Werror", "-o", str(tmp_path / "t"), str(tmp_path / "t.c")], check=True,
                   cwd=tmp_path)
    run = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout


def test_committed_register_map_markdown_is_generated():
    """docs/datasheets/register_map.md is peakrdl-markdown's output for the RDL (`make regs` refreshes it)."""
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        fresh = regmap.write_markdown(Path(d) / "register_map.md").read_text()
    assert regmap.MARKDOWN_DOC.read_text() == fresh, "run `make regs` and commit docs/datasheets/register_map.md"


def test_no_register_description_repeats_a_sentence():
    """The datasheets' register summaries join a register's and its first field's description: neither may
    repeat what the other says."""
    import re

    from cassandra_rtl.hw.datasheets import registers_table
    for which in ("block", "local"):
        for row in registers_table(which).splitlines()[2:]:
            meaning = row.strip().strip("|").split("|")[-1]
            sentences = [x.strip().lower() for x in re.split(r"(?<=\.)\s+", meaning) if x.strip()]
            assert len(sentences) == len(set(sentences)), row
