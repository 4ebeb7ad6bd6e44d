"""Named configurations of the hw blocks: the registry used by export (Verilog), synthesis and the tbs.

``NAMED_CONFIGS[name]()`` builds a fresh Component; ``CONFIG_INFO[name]`` describes it (block, lanes,
widths, nominal values/cycle, latency in cycles) for the port tables and the synthesis report.

Defaults and why:

* ``zero_counter_w64_l8`` / ``zero_counter_w128_l16``: the parallel zero counter on its own, registered (window =
  8 bits per lane: the mean SmolLM2 code is ~2.8 bits, the longest non-escape code 15); its prefix counts are the
  network the decoder v3 code readers and the KV encoders build on.
* ``decoder_c1v3_l4`` / ``decoder_c1v3_l8`` (+ ``_core``: a cluster's per-instance part) and ``decoder_c2v3_l8``
  (+ ``_core``): decoder v3, reading format 3.0; ``tensor_regs`` / ``tensor_regs_c2``: the registers a cluster of
  v3 cores shares. Earlier decoder versions are retired (CHANGELOG.md); their synthesis rows are
  synth/retired.json.
* ``encoder_kv_c1_l2`` / ``encoder_kv_c2_l2`` (the defaults) and ``*_l8``: the online KV encoders (hw/encoder.py,
  hw/encoder_c2.py), 2 (8) values/cycle, 64-bit plane words; see ``_encoder_factories``.
"""
from __future__ import annotations

from typing import Callable

from amaranth.lib import wiring

from .zero_counter import ZeroCounter

NAMED_CONFIGS: dict[str, Callable[[], wiring.Component]] = {}
CONFIG_INFO: dict[str, dict] = {}


def _register(name: str, factory, **info):
    NAMED_CONFIGS[name] = factory
    CONFIG_INFO[name] = info


for _w, _l in ((64, 8), (128, 16)):
    _register(f"zero_counter_w{_w}_l{_l}", lambda w=_w, l=_l: ZeroCounter(w, l, registered=True),
              block="zero_counter", lanes=_l, window=_w, values_per_cycle=_l, latency_cycles=1,
              description=f"parallel zero counter, {_w}-bit window, {_l} codes/cycle, registered outputs")


def _c1v3_factories():
    """The C1 decoder v3 (hw/decoder_c1_v3.py, docs/datasheets/decoder_c1.md): the format 3.0
    layout of golden/escfield.py, one parser / extractor / lookup set for both modes."""
    from .decoder_c1_v3 import DecoderC1v3, DecoderC1v3Core
    from .tensor_regs import TensorRegisters
    for l in (8, 4):
        word = 8 * l
        # L = 4: the small NPU tile's decoder (npu_tile_s)
        common = dict(variant="v3", lanes=l, word=word, code_word=32, verif_word=32, verif_lanes=l,
                      values_per_cycle=l, values_per_cycle_full=l // 2, latency_cycles=4, layout="format 3.0")
        _register(f"decoder_c1v3_l{l}", lambda l=l: DecoderC1v3(lanes=l), block="decoder_c1v3", **common,
                  description=f"Cassandra-1 decoder v3 (one parser for both modes, escape payloads in the companion "
                              f"field), {l} bf16 values/cycle in draft mode, {l // 2} in full mode, {word}-bit "
                              "spec_signman words, 32-bit code and verif_rest words")
        # a decoder cluster shares one TensorRegisters among its cores: synthesised apart, per instance = core + regs / N
        _register(f"decoder_c1v3_l{l}_core", lambda l=l: DecoderC1v3Core(lanes=l), block="decoder_c1v3_core",
                  **common, cluster_part="instance", shared_regs="tensor_regs",
                  description="Decoder v3 core: the per-instance part of a decoder cluster (NUMEL, CTRL, errors, "
                              "datapath), the tensor's registers on its params input")
    _register("tensor_regs", lambda: TensorRegisters(), block="tensor_regs", kind="tensor_regs",
              cluster_part="shared",
              description="The per-tensor registers and constants a decoder cluster shares (hw/tensor_regs.py)")


_c1v3_factories()


def _c2v3_factories():
    """The C2 decoder v3 (hw/decoder_c2_v3.py, docs/datasheets/decoder_c2.md): format 3.0
    of golden/escfield.py (block-interleaved spec.mx), one spec.mx reader with header registers, pass B half a beat
    a cycle."""
    from .decoder_c2_v3 import DecoderC2v3, DecoderC2v3Core
    from .tensor_regs import TensorRegisters
    common = dict(variant="v3", lanes=8, word=64, verif_word=32, verif_lanes=4, values_per_cycle=8,
                  values_per_cycle_full=4, latency_cycles=3, layout="format 3.0")
    # block "decoder_c2v3": its own BLOCK.KIND (the layout differs); tb/bulk frames it as C2 by its name
    _register("decoder_c2v3_l8", lambda: DecoderC2v3(lanes=8), block="decoder_c2v3", **common,
              description="Cassandra-2 decoder v3 (block-interleaved spec.mx read by one reader with header "
                          "registers, escaped deltas in verif.rest), 8 bf16 values/cycle in draft mode, 4 in full mode, "
                          "64-bit words")
    _register("decoder_c2v3_l8_core", lambda: DecoderC2v3Core(lanes=8), block="decoder_c2v3_core", **common,
              cluster_part="instance", shared_regs="tensor_regs_c2",
              description="C2 decoder v3 core: the per-instance part of a decoder cluster, the tensor's registers "
                          "on its params input")
    _register("tensor_regs_c2", lambda: TensorRegisters("c2"), block="tensor_regs", kind="tensor_regs",
              cluster_part="shared", description="The per-tensor registers a C2 decoder cluster shares")


_c2v3_factories()


def _encoder_factories():
    """KV encoders (docs/datasheets/kv_encoders.md). Default: ``encoder_kv_c1_l2`` / ``encoder_kv_c2_l2``, sized to the
    KV rate (prefill tokens/s x values per token: 0.48-1.86 values per PE cycle for Llama-3-8B at 100 % prefill
    on the devices of synth/overhead.py, docs/datasheets/kv_encoders.md "Rate"): 2 lanes in and out, one vector
    buffer in a ``lib.memory.Memory``, a sequential radix-16 select, 64-bit plane words (the decoders' DMA
    width). ``*_l8``: the same micro-architecture at 8 lanes (kept for the testbench and loopback
    configurations that name it). values_per_cycle is the worst case (pruning, G = 128), measured with
    ``python bench/encoder_rate.py``; values_per_cycle_no_pruning at k = G; latency: one G = 128 vector with
    pruning, first beat in -> last word out."""
    try:
        from .encoder import EncoderKvC1
        from .encoder_c2 import EncoderKvC2
    except ImportError:            # the encoder is optional while it is being developed
        return
    measured = {  # (scheme, L): (values/cycle pruning G=128, values/cycle k=G G=128, latency cycles)
        ("c1", 2): (1.06, 1.97, 189), ("c1", 8): (1.75, 7.47, 94),
        ("c2", 2): (0.93, 1.97, 205), ("c2", 8): (1.42, 7.53, 111),
    }
    for l, word in ((2, 64), (8, 64)):
        for scheme, cls, what in (("c1", EncoderKvC1, "C1"), ("c2", EncoderKvC2, "C2, MX shared exponent")):
            vpc, vpc_all, lat = measured[(scheme, l)]
            _register(f"encoder_kv_{scheme}_l{l}", lambda c=cls, l=l, w=word: c(lanes=l, word=w),
                      block=f"encoder_kv_{scheme}", lanes=l, word=word, max_group=128, layout="format 3.0",
                      values_per_cycle=vpc, values_per_cycle_no_pruning=vpc_all, latency_cycles=lat,
                      description=f"online KV-cache encoder ({what}), {l} bf16 values/cycle in, {word}-bit plane "
                                  "words, one vector buffer (lib.memory), sequential radix-16 select")


_encoder_factories()


# ---- the NPU tile (hw/npu/tile.py, docs/NPU.md) ----
# ``npu_tile``: the headline tile (tb/npu/__init__.py TileParams defaults: 3 x decoder_c1v3_l8_core sharing one
# TensorRegisters, 5 rows, 1536 inputs); ``npu_tile_s``: a small whole tile (1 x decoder_c1v3_l4_core, 2 rows, 64
# inputs) that every flow (generic, gated, sky130, ECP5) runs flat. The headline tile holds ~0.23 M bits of flip-flop
# storage (26 DMA FIFOs of 64 x 64 bits, a 192 x 640-bit activation buffer with 3 asynchronous read ports): flat
# synthesis is out of reach of the WebAssembly Yosys, so ``synth_default=False`` keeps it out of `make synth` / `make
# fpga` (it runs with ``--only npu_tile``), and synth/npu_area.py composes its area from separately synthesised parts
# (docs/NPU.md "Area and clock").
from .npu import DEFAULT_DECODER  # noqa: E402  (a constant; the tile's modules load in the factory)

NPU_TILES = {
    "npu_tile_s": dict(data_bytes=8, instances=1, decoder="decoder_c1v3_l4_core", max_rows=2, max_in=64, burst=8,
                       fifo_depth=16, max_outstanding=4),
    "npu_tile": dict(data_bytes=8, instances=3, decoder=DEFAULT_DECODER, max_rows=5, max_in=1536, burst=16,
                     fifo_depth=64, max_outstanding=16),
}


def _npu_tile_factories():
    def make(params):
        from .npu.tile import NpuTile
        return NpuTile(**params)
    for name, p in NPU_TILES.items():
        dec = CONFIG_INFO[p["decoder"]]
        n, lanes = p["instances"], dec["lanes"]
        _register(name, lambda p=p: make(p), block="npu_tile", kind="npu_tile", **p, lanes=n * lanes,
                  streams=2 + 8 * n, values_per_cycle=n * lanes,
                  values_per_cycle_decoders=n * dec["values_per_cycle"],
                  values_per_cycle_full_decoders=n * dec["values_per_cycle_full"],
                  macs_per_cycle=n * lanes * p["max_rows"], port_bytes_per_cycle=p["data_bytes"],
                  synth_default=name != "npu_tile",
                  description=f"Cassandra NPU tile: {n} x {p['decoder']} fed by a {2 + 8 * n}-stream AXI4 read DMA "
                              f"({p['data_bytes']} B/beat), {n} DotUnit(s) of {lanes} x {p['max_rows']} bf16 "
                              f"products, a {p['max_rows']} x {p['max_in']} activation buffer, an AXI4 write master")


_npu_tile_factories()
# ---- end of the NPU tile block ----


def build(name: str) -> wiring.Component:
    from ..errors import ConfigError
    try:
        return NAMED_CONFIGS[name]()
    except KeyError:
        raise ConfigError(f"unknown hw config {name!r}; known: {', '.join(sorted(NAMED_CONFIGS))}") from None
