"""Unit tests of the testbench infrastructure itself (no simulator): the decoder framing re-implemented
in tb/ agrees with docs/HARDWARE.md's executable form (hw/simutil.py) and with the vectorised bulk
framing; the zero counter's reference model agrees with the golden codec's ctz; scoreboard and coverage
catch what they must."""
from __future__ import annotations

import numpy as np
import pytest

from cassandra_rtl.golden import bitpack
from cassandra_rtl.golden.codec import superblock_chunks
from cassandra_rtl.golden.config import CodecConfig
from cassandra_rtl.tb.common.coverage import Coverage
from cassandra_rtl.tb.common.scoreboard import Mismatch, Scoreboard
from cassandra_rtl.tb.decoder import data as D
from cassandra_rtl.tb.decoder import framing as F
from cassandra_rtl.tb.zero_counter.reference import code_stream_windows, zero_counter


def _encs():
    rng = np.random.default_rng(5)
    out = []
    for _ in range(8):
        cfg = D.random_config(rng)
        out.append(D.encode(D.random_tensor(rng, D.random_numel(rng, cfg.group_size, 5)), cfg))
    return out


@pytest.mark.parametrize("word_bits", [32, 64, 128])
def test_framing_matches_hw_simutil(word_bits):
    simutil = pytest.importorskip("cassandra_rtl.hw.simutil")
    for enc in _encs():
        for full in (False, True):
            mine = {p: [w for ch in chunks for w in ch] for p, chunks in F.plane_words(enc, full, word_bits).items()}
            theirs = simutil.decoder_planes(enc, full, word_bits)
            assert mine == {k: list(v) for k, v in theirs.items()}
            assert [tuple(x) for x in F.program(enc, full)] == \
                [tuple(x) for x in simutil.decoder_program(enc, full, force_format2=True)]


@pytest.mark.parametrize("word_bits", [32, 64, 128])
def test_bulk_framing_matches_per_chunk_framing(word_bits):
    from cassandra_rtl.tb.bulk import frame_plane

    wb = word_bits // 8
    for enc in _encs():
        for plane in enc.planes:
            data, last = frame_plane(enc, plane, word_bits)
            words = [w for c in superblock_chunks(enc, plane) for w in F.chunk_to_words(c, word_bits)]
            assert len(words) == len(last)
            assert [int.from_bytes(bytes(row), "little") for row in data] == [w for w, _ in words]
            assert last.tolist() == [l for _, l in words]
            assert data.shape[1] == wb


def test_framed_layouts():
    """Format 2.0 frames the tensor itself; format 3.0 re-encodes the same values and books
    (golden/escfield.py): code planes shrink by 8 bits an escape, each (code, field) pair keeps its bytes; an
    unknown layout is refused; a keep mask chosen by salience is kept."""
    from cassandra_rtl.golden import escfield
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.golden.config import PRUNED

    rng = np.random.default_rng(3)
    bits = D.uniform_bits(rng, 3 * 128 + 17)           # uniform patterns: escapes in both code planes
    enc = D.encode(bits, CodecConfig(group_size=128, mantissa_bits=3, keep_ratio=0.5))
    assert F.framed(enc) is enc and F.framed(enc, F.FORMAT_2) is enc
    v3 = F.framed(enc, F.FORMAT_3)
    assert isinstance(v3, escfield.EscFieldTensor) and v3.numel == enc.numel
    _, ref = escfield.encode(bits, enc.config, books=(enc.spec_book, enc.verif_book))
    assert v3.planes == ref.planes
    for code, field in (("spec.codes", "spec.signman"), ("verif.codes", "verif.rest")):
        assert len(v3.planes[code]) < len(enc.planes[code])
        assert len(v3.planes[code]) + len(v3.planes[field]) == len(enc.planes[code]) + len(enc.planes[field])
    assert F.escape_code_bits(5) == 14 and F.escape_code_bits(5, F.FORMAT_3) == 6
    with pytest.raises(ValueError, match="unknown plane layout"):
        F.framed(enc, "format 4.0")
    # a pruning config whose tensor prunes nothing (one short superblock keeps all): its book has no P
    few = D.encode(bits[:5], CodecConfig(group_size=128, mantissa_bits=3, keep_count=127))
    assert few.config.prunes and PRUNED not in few.spec_book.symbols
    assert np.array_equal(escfield.decode(F.framed(few, F.FORMAT_3), True).reshape(-1), bits[:5])
    sal = rng.random(len(bits))
    salient = F.framed(encode_tensor(bits, enc.config, salience=sal), F.FORMAT_3)
    assert salient.planes == escfield.encode(bits, enc.config, salience=sal)[1].planes
    assert salient.planes != v3.planes


def test_empty_chunk_is_one_zero_word():
    assert F.chunk_to_words(b"", 64) == [(0, 1)]
    assert F.chunk_to_words(b"\x01" * 9, 64) == [(0x0101010101010101, 0), (0x01, 1)]


def test_zero_counter_reference_agrees_with_golden_ctz():
    rng = np.random.default_rng(1)
    wins = rng.integers(0, 2**32, 2000, dtype=np.uint64)
    ctz = bitpack.ctz32(wins)
    for w, c in zip(wins.tolist(), ctz.tolist()):
        e = zero_counter(int(w), 32, 4)
        if c == 32:
            assert e["valid"] == 0 and e["consumed"] == 0
        else:
            assert e["rank"][0] == c and e["end"][0] == c + 1
        # ends strictly increase, ranks are the gaps
        n = bin(e["valid"]).count("1")
        ends = e["end"][:n]
        assert all(b > a for a, b in zip(ends, ends[1:]))
        assert all(e["rank"][i] == ends[i] - 1 - (ends[i - 1] if i else 0) for i in range(n))


def test_code_stream_windows_have_codes():
    rng = np.random.default_rng(2)
    wins = code_stream_windows(rng, 64, 50, K=15)
    assert len(wins) == 50 and any(w for w in wins)


def test_scoreboard_flags_mismatch_and_missing_values():
    sb = Scoreboard("t")
    sb.expect([1, 2, 3])
    sb.check([1, 5])
    assert sb.mismatches == 1 and sb.values == 2
    with pytest.raises(Mismatch):
        sb.finish()                 # one mismatch + one value never seen
    assert sb.mismatches == 2


def test_coverage_merge_and_percent():
    a, b = Coverage(), Coverage()
    a.define("p", [0, 1, 2, 3])
    a.hit("p", 0)
    b.define("p", [0, 1, 2, 3])
    b.hit("p", 3, 5)
    m = Coverage.merge([a.report(), b.report()])
    assert m.summary()["p"] == (2, 4)
    assert m.percent() == 50.0


def test_input_port_parser():
    from cassandra_rtl.tb.common.build import input_ports

    text = "module top(a, b__valid, \\c , clk);\n  input [3:0] a;\n  input b__valid;\n  output \\c ;\n  input clk;\n" \
           "function f; input x; endfunction\nendmodule\n"
    assert input_ports(text) == ["a", "b__valid", "clk"]


def test_specials_cover_every_class():
    v = np.array(D.SPECIALS, dtype=np.int64)
    e, f = (v >> 7) & 0xFF, v & 0x7F
    assert ((e == 0) & (f == 0)).any() and ((e == 0) & (f != 0)).any()
    assert ((e == 255) & (f == 0)).any() and ((e == 255) & (f != 0)).any()
    # a NaN whose payload lies only in bits a 3-bit draft cuts: its draft is Inf
    assert ((e == 255) & (f != 0) & ((f >> 4) == 0)).any()


def test_f32_to_bf16_rne():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, np.inf, np.nan], dtype=np.float32)
    got = D.f32_to_bf16(x)
    assert got[:5].tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80]
    assert (got[5] & 0x7F80) == 0x7F80 and (got[5] & 0x7F)


def test_bursty_pacer_idle_runs_fit_the_hang_budgets():
    """A bursty source's idle runs are bounded (MAX_OFF_RUN) below the smallest hang budget a bench gives
    a queued register write (100 + 40 cycles), yet still reach the 16+ cycle bin; every other profile
    is memoryless with p(idle) <= 0.8, so a 140-cycle idle run has probability 0.8**140."""
    import random

    from cassandra_rtl.tb.common.stream import MAX_OFF_RUN, Pacer

    assert MAX_OFF_RUN < 100 + 40
    longest, long_runs = 0, 0
    for seed in range(20):
        p, run = Pacer(random.Random(seed), "bursty"), 0
        for _ in range(20_000):
            if p.active():
                long_runs += run >= 16
                run = 0
            else:
                run += 1
                longest = max(longest, run)
    assert longest == MAX_OFF_RUN         # the cap is reached (runs of mean 40 are common enough) ...
    assert long_runs > 100                # ... and idle runs of 16+ cycles stay frequent
