"""Helpers shared by the Amaranth-simulation tests of the C1 and C2 decoders (tests/test_hw_decoder.py,
tests/test_hw_decoder_c2.py): bf16 test data, the golden reference, the bit-exact check of a run, and the
reset-mid-stream / recovery-after-CLEAR_ERROR scenarios."""
from __future__ import annotations

import dataclasses

import numpy as np

from cassandra_rtl.golden.codec import decode_draft, decode_full, superblock_sizes
from cassandra_rtl.hw.decoder import CTRL_CLEAR_ERROR, Reg
from cassandra_rtl.hw.simutil import DecodeJob, Stalls, decoder_program, run_decoder


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def weights(n: int, seed: int, scale: float = 0.02) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return bf16(rng.standard_normal(n) * scale)


def expected(enc, full):
    return (decode_full(enc) if full else decode_draft(enc)).reshape(-1)


def check(res, jobs):
    assert res.error_code == 0, f"error_code {res.error_code:#x}"
    assert len(res.values) == len(jobs)
    for vals, meta, job in zip(res.values, res.meta, jobs):
        ref = expected(job.enc, job.full)
        assert len(vals) == len(ref)
        bad = np.flatnonzero(vals != ref)
        assert not len(bad), f"value {bad[0]}: got {vals[bad[0]]:#06x}, expected {ref[bad[0]]:#06x}"
        # Beat structure: superblock ends where the golden superblock sizes say, `last` only at the end.
        n_s, _ = superblock_sizes(job.enc.numel, job.enc.config)
        ends = np.cumsum([c for c, _, _ in meta])[[i for i, (_, e, _) in enumerate(meta) if e]]
        assert list(ends) == list(np.cumsum(n_s))
        assert [l for _, _, l in meta] == [0] * (len(meta) - 1) + [1]


def check_recovers(dut, bad, good_enc, pre_wait, ref=None, full=True):
    """Run the malformed job ``bad``, then (after ``pre_wait`` cycles) CLEAR_ERROR and the good tensor in
    full mode (or draft mode: ``full=False``): no error is left and the last values out are the good tensor's,
    exactly (``ref``: its values, when the golden decoders cannot read ``good_enc`` itself). (The good tensor
    writes every format 2.0 register it needs: the bad job may have left other values.)"""
    clear = [(int(Reg.CTRL), CTRL_CLEAR_ERROR)]
    good = DecodeJob(good_enc, full, program=clear + decoder_program(good_enc, full, force_format2=True),
                     pre_wait=pre_wait, gate=True)
    res = run_decoder(dut, [bad, good], Stalls(0.0, 0.0), max_cycles=20000)
    assert res.error_code == 0
    ref = expected(good_enc, full) if ref is None else ref
    got = np.concatenate(res.values)
    assert len(got) >= len(ref) and np.array_equal(got[-len(ref):], ref)


def with_chunk(v3, plane: str, c: int, edit):
    """``v3`` with chunk ``c`` of ``plane`` replaced by ``edit(chunk bytes)`` (the index moved to match)."""
    off = [int(o) for o in v3.offsets[plane]]
    data = v3.planes[plane]
    new = edit(data[off[c]: off[c + 1]])
    delta = len(new) - (off[c + 1] - off[c])
    planes = dict(v3.planes, **{plane: data[:off[c]] + new + data[off[c + 1]:]})
    offsets = dict(v3.offsets, **{plane: np.array(off[: c + 1] + [o + delta for o in off[c + 1:]], dtype=np.int64)})
    return dataclasses.replace(v3, planes=planes, offsets=offsets)


def bulk_harness(config: str):
    """The bulk Verilator harness of ``config`` (a module fixture's body); skips without Verilator."""
    import pytest

    from cassandra_rtl.tb import bulk
    if not bulk.available():
        pytest.skip("Verilator not available")
    return bulk.build_harness(config)


def escfield_check(pairs, mode: str, config: str, **kw):
    """(format 2.0 tensor, format 3.0 twin) pairs through ``config``'s exported RTL in the bulk harness: every
    value equals the layout's golden decode, itself equal to the format 2.0 twin's golden decode. Returns the
    harness's BulkStats."""
    from cassandra_rtl.golden import escfield
    from cassandra_rtl.tb import bulk

    st = bulk.BulkStats()
    got = bulk.decode_many_with_rtl([v3 for _, v3 in pairs], mode, config=config, stats=st, jobs=1, **kw)
    for (std, v3), g in zip(pairs, got):
        ref = escfield.decode(v3, mode == "full").reshape(-1)
        assert np.array_equal(ref, (decode_full(std) if mode == "full" else decode_draft(std)).reshape(-1))
        bad = np.flatnonzero(g.reshape(-1) != ref)
        assert len(bad) == 0, f"{len(bad)} mismatches of {std.numel} ({std.config}), first at {bad[:5]}"
    assert st.values == sum(std.numel for std, _ in pairs)
    return st

