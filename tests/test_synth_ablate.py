"""synth/ablate.py: the area-by-function ablations of the v3 decoder cores (the synthesis itself is `make`-level
work: `python -m cassandra_rtl.synth.ablate BLOCK`; here, that every ablation still applies to today's source and
builds, and the errors)."""
from __future__ import annotations

import dataclasses
import importlib

import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.synth import ablate, flow


@pytest.mark.parametrize("block", sorted(ablate.SUBJECTS))
def test_every_ablation_applies_to_the_source_and_builds(block):
    """Each edit's text occurs exactly once in the module today, and the edited module builds the block without
    touching the file on disk (a refactor that moves a text fails here, naming the ablation)."""
    subject = ablate.SUBJECTS[block]
    on_disk = (ablate.ROOT / subject.source).read_text()
    real = importlib.import_module(subject.module)
    for ab in subject.ablations:
        text = ablate.edited_source(subject, ab)
        assert text != on_disk, ab.name
        with ablate._Swapped(subject, text) as mod:
            assert importlib.import_module(subject.module) is mod
            dut = subject.build(mod)
            dut._MustUse__used = True
        assert importlib.import_module(subject.module) is real
    assert (ablate.ROOT / subject.source).read_text() == on_disk


def test_the_subject_builds_the_registry_block():
    """The unchanged module builds exactly the registry's block (same RTLIL), so the ablations are differences to
    the block `make synth` reports; an edited module builds a different one."""
    blocks, _ = flow.hw_blocks()
    block = "decoder_c2v3_l8_core"
    subject = ablate.SUBJECTS[block]
    mine = flow.Block(block, lambda: subject.build(importlib.import_module(subject.module)), "hw.configs", {})
    base = flow.elaborate(blocks[block])[0]
    assert flow.elaborate(mine)[0] == base
    ab = {a.name: a for a in subject.ablations}["negative_check"]
    with ablate._Swapped(subject, ablate.edited_source(subject, ab)) as mod:
        edited = flow.elaborate(flow.Block(block, lambda: subject.build(mod), "hw.configs", {}))[0]
    assert edited != base


def test_an_edit_that_no_longer_matches_is_one_line():
    subject = ablate.SUBJECTS["decoder_c2v3_l8_core"]
    moved = dataclasses.replace(subject.ablations[0], edits=(("no such text in the module", "x"),))
    with pytest.raises(ConfigError, match="occurs 0 times in hw/decoder_c2_v3.py"):
        ablate.edited_source(subject, moved)


@pytest.mark.parametrize("argv, msg", [(["decoder_c9"], "no ablations for 'decoder_c9'"),
                                       (["decoder_c2v3_l8_core", "--only", "nope"], "unknown ablation 'nope'")])
def test_bad_input_is_one_line(argv, msg, capsys, tmp_path):
    assert ablate.main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err
    assert not any(tmp_path.iterdir())
