"""synth/npu_area.py: the NPU tile's parts and their counts, the composition of a tile's area from its parts (storage
apart, the top level as flat minus parts, the decoder share), and the registry's synth_default flag (no Yosys run)."""
from __future__ import annotations

import pytest

from cassandra_rtl.hw.configs import CONFIG_INFO, NAMED_CONFIGS, NPU_TILES
from cassandra_rtl.synth import flow, npu_area


def test_tiles_registered_headline_out_of_the_default_set():
    for name in ("npu_tile_s", "npu_tile"):
        assert name in NAMED_CONFIGS and CONFIG_INFO[name]["block"] == "npu_tile"
        assert flow.block_kind(name, CONFIG_INFO[name]) == "npu_tile"       # not a decoder / encoder for overhead
    assert CONFIG_INFO["npu_tile"]["synth_default"] is False and CONFIG_INFO["npu_tile_s"]["synth_default"] is True
    from cassandra_rtl.tb.npu import TileParams
    from dataclasses import asdict
    assert NPU_TILES["npu_tile"] == asdict(TileParams())                     # the headline is the driver's default


def test_run_without_only_skips_non_default_blocks(tmp_path):
    blocks = {n: flow.Block(n, lambda: None, "test", {"kind": "other", "synth_default": False}) for n in ("big",)}
    report_blocks: dict = {}
    kept = flow._drop_non_default(blocks, report_blocks)
    assert kept == {} and report_blocks["big"]["status"] == "skipped" and "--only big" in report_blocks["big"]["reason"]


def test_parts_and_counts_of_the_headline():
    ps = npu_area.parts("npu_tile")
    count = {n.split("__")[-1]: p["count"] for n, p in ps.items()}
    assert count["dma_fifo"] == 26 and count["wr_fifo"] == 3
    # the cluster: three cores and the TensorRegisters they share, both in the decoders' group
    assert count["decoder_c1v3_l8_core"] == 3 and count["tensor_regs"] == 1
    assert ps["decoder_c1v3_l8_core"]["group"] == ps["tensor_regs"]["group"] == "decoders"
    assert count["framer_b32"] + count["framer_b64"] == count["unpack"] == 12     # 4 C1 planes x 3 instances
    assert {n.split("__")[-1] for n, p in ps.items() if p["storage"]} == set(npu_area.STORAGE)


def _fake_report(tile: str, flat: float | None) -> dict:
    blocks = {flow.PE_BLOCK: {"status": "ok", "area_ge": 10.0, "flip_flops": 1, "timing": {"est_fmax_mhz": 300.0}}}
    for n, p in npu_area.parts(tile).items():
        area = {"dma": 500.0, "dma_fifo": 10.0, "writer": 50.0, "wr_fifo": 5.0}.get(n.split("__")[-1], 20.0)
        blocks[n] = {"status": "ok", "area_ge": area, "flip_flops": 2, "timing": {"est_fmax_mhz": 400.0}}
    if flat is not None:
        blocks[tile] = {"status": "ok", "area_ge": flat, "flip_flops": 100, "timing": {"est_fmax_mhz": 250.0}}
    return {"blocks": blocks}


def test_compose_small_tile_flat_minus_parts():
    tile = "npu_tile_s"
    ps = npu_area.parts(tile)
    parts_sum = sum(p["count"] * (_fake_report(tile, None)["blocks"][n]["area_ge"]) for n, p in ps.items())
    # the DMA and writer blocks contain their FIFOs: the parts' sum counts those FIFOs twice
    double = 10 * 10.0 + 1 * 5.0
    c = npu_area.compose(_fake_report(tile, parts_sum - double + 7.0), tile)
    assert c["status"] == "ok" and c["flat"]
    assert c["area_ge"]["top"] == pytest.approx(7.0)
    assert c["area_ge"]["dma"] == pytest.approx(500 - 100) and c["area_ge"]["dma_fifo"] == pytest.approx(100)
    assert c["total_ge"] == pytest.approx(c["flat_ge"])
    assert c["storage_ge"] == pytest.approx(100 + 5 + 2 * 20)          # two activation-buffer row slices
    # the decoder cluster: one core (20) and its TensorRegisters (20)
    assert c["decoder_share_percent"] == pytest.approx(100 * 40 / c["total_ge"], abs=0.01)
    assert c["decoder_share_of_logic_percent"] == pytest.approx(100 * 40 / (c["total_ge"] - c["storage_ge"]), abs=0.01)
    assert c["slowest_block"] == tile and c["fmax_mhz"] == 250.0


def test_compose_headline_from_parts_and_the_small_tiles_top_level():
    rep = _fake_report("npu_tile_s", None)
    ps = npu_area.parts("npu_tile_s")
    parts_sum = sum(p["count"] * rep["blocks"][n]["area_ge"] for n, p in ps.items()) - (10 * 10.0 + 5.0)
    rep["blocks"].update(_fake_report("npu_tile_s", parts_sum + 7.0)["blocks"])
    rep["blocks"].update({n: b for n, b in _fake_report("npu_tile", None)["blocks"].items() if n != flow.PE_BLOCK})
    c = npu_area.compose(rep, "npu_tile")
    assert c["status"] == "ok" and not c["flat"] and "estimated" in c["top_level"]
    assert c["area_ge"]["top"] == pytest.approx(3 * 7.0)
    assert c["area_ge"]["dma_fifo"] == pytest.approx(26 * 10.0)
    del rep["blocks"]["npu_tile__dot"]
    assert npu_area.compose(rep, "npu_tile") == {"status": "missing", "missing": ["npu_tile__dot"]}
