"""Power-up state: the decoders and KV encoders run from random flip-flop and memory contents.

Silicon starts every flip-flop and memory word at an arbitrary value, and the reset sets only the registers that
have one. The datapath buffers have none (the word slots of hw/bitreader.py and hw/code_reader.py with its ones
counts, the C2 decoder v3's stage registers behind their valid flags; the encoders' ``lib.memory`` vector buffer
never had one), while Amaranth's simulator and its Verilog start every register at its reset value. Here
the bulk Verilator harnesses run the Verilog without initial values (``tb.bulk.without_initial_values``) from
per-seed random state (``--x-initial unique``, ``Verilated::randReset(2)``), reset for 4 cycles, then decode or
encode bit-exactly against golden. The harness reports whether its outputs showed uninitialised state before the
reset, so a build that lost the random state fails here instead of passing on zeros.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib.memory import Memory

from cassandra_rtl.golden import escfield
from cassandra_rtl.golden.codec import decode_draft, decode_full
from cassandra_rtl.tb import bulk
from cassandra_rtl.tb import bulk_encoder as BE
from cassandra_rtl.tb.decoder import data as D

from test_tb_bulk_encoder import random_batches

pytestmark = pytest.mark.sim

SEEDS = (1, 2, 3)


def test_without_initial_values_leaves_declarations_only():
    m = Module()
    with_reset, without = Signal(8, init=0x5A, name="with_reset"), Signal(8, init=0x3C, reset_less=True, name="without")
    m.submodules.mem = mem = Memory(shape=8, depth=4, init=[1, 2, 3, 4])
    rd = mem.read_port(domain="comb")
    out = Signal(24)
    m.d.sync += [with_reset.eq(with_reset + 1), without.eq(without + 1)]
    m.d.comb += [rd.addr.eq(with_reset[:2]), out.eq(with_reset | (without << 8) | (rd.data << 16))]
    text = verilog.convert(m, ports=[out], name="t")
    declared_with_value = re.compile(r"^\s*reg\b[^;]*=[^;]*;", re.M)
    # Amaranth writes power-up values: the registers' reset values, the memory's contents
    assert "reg [7:0] with_reset = 8'h5a;" in text and "reg [7:0] without = 8'h3c;" in text and "initial" in text
    stripped = bulk.without_initial_values(text)
    assert not declared_with_value.search(stripped) and "initial" not in stripped
    assert "reg [7:0] with_reset ;" in stripped and "reg [7:0] without ;" in stripped
    assert "reg [7:0] mem [3:0];" in stripped
    assert "with_reset <= " in stripped and "8'h5a;" in stripped        # the reset itself stays
    # nothing else changed: the memory's initial block (begin, 4 words, end) went, and each declaration with a
    # value lost only the value
    assert len(text.splitlines()) - len(stripped.splitlines()) == 6
    for ln in declared_with_value.findall(text):
        assert re.sub(r"\s*=[^;]*;", " ;", ln) in stripped.splitlines(), ln


def test_without_initial_values_handles_escaped_and_partial_memory_words():
    text = ("module t;\n  reg [7:0] \\a.b [1:0];\n  initial begin\n    \\a.b [0] = 8'h01;\n    \\a.b [1][3:0] = 4'h2;\n"
            "  end\n  reg [3:0] \\$x  = 4'h3;\nendmodule\n")
    out = bulk.without_initial_values(text)
    assert "initial" not in out and "8'h01" not in out and "reg [3:0] \\$x ;" in out
    with pytest.raises(RuntimeError, match="initial value is left"):
        bulk.without_initial_values("module t;\n  initial x = 1;\nendmodule\n")


def _random_c1v3(rng):
    """(format 2.0 tensor for the reference, its format 3.0 twin for decoder v3)"""
    return [escfield.encode(D.random_tensor(rng, D.random_numel(rng, (cfg := D.random_config(rng)).group_size, 30)),
                            cfg) for _ in range(10)]


def _random_c2v3(rng):
    """(format 2.0 tensor for the reference, its format 3.0 twin for the C2 decoder v3)"""
    return [escfield.encode(D.random_c2_tensor(rng, D.random_numel(rng, (cfg := D.random_c2_config(rng)).group_size,
                                                                    30)), cfg) for _ in range(10)]


@pytest.mark.parametrize("config,make", [
    ("decoder_c1v3_l8", _random_c1v3),
    ("decoder_c2v3_l8", _random_c2v3),
    pytest.param("decoder_c1v3_l4", _random_c1v3, marks=pytest.mark.slow),
])
def test_decoder_from_random_power_up_state(config, make):
    if not bulk.available():
        pytest.skip("Verilator not available")
    made = make(np.random.default_rng(99))
    refs, encs = zip(*made)
    st = bulk.BulkStats()
    for seed in SEEDS:
        for mode in ("draft", "full"):
            got = bulk.decode_many_with_rtl(list(encs), mode, config=config, jobs=1, idle=0.2, backpressure=0.3,
                                            seed=seed, stats=st, power_up=True)
            for i, (enc, g) in enumerate(zip(refs, got)):
                ref = decode_full(enc) if mode == "full" else decode_draft(enc)
                bad = np.flatnonzero(g.reshape(-1) != ref.reshape(-1))
                assert len(bad) == 0, f"seed {seed} {mode} tensor {i}: {len(bad)} mismatches, first at {bad[:5]}"
    assert st.values == 2 * len(SEEDS) * sum(e.numel for e in encs)
    assert st.power_up_nonzero >= 1          # the runs did start from uninitialised state


@pytest.mark.slow
@pytest.mark.parametrize("config", ["encoder_kv_c1_l2", "encoder_kv_c2_l2"])
def test_kv_encoder_from_random_power_up_state(config):
    if not BE.available():
        pytest.skip("Verilator not available")
    batches = random_batches(np.random.default_rng(23), BE.scheme_of(config), 12)
    st = BE.EncoderStats()
    for seed in SEEDS:
        BE.encode_many_with_rtl(batches, config, idle=0.2, backpressure=0.3, seed=seed, stats=st, power_up=True)
    assert st.mismatches == 0 and st.vectors == len(SEEDS) * sum(len(x) for x, _, _ in batches)
    assert st.power_up_nonzero >= 1
