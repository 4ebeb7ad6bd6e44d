"""The one place that knows the hardware blocks' Python constructors (hw/*.py). Adapting the testbench to
an RTL interface change means editing this file (and the block's test module), nothing else.

Configurations are the hardware engineer's named ones (hw/configs.py NAMED_CONFIGS / CONFIG_INFO) plus a
few testbench-only corner configurations of the zero counter (combinational, smallest window, odd sizes).
"""
from __future__ import annotations

import importlib


def _hw(module: str):
    return importlib.import_module(f"cassandra_rtl.hw.{module}")


def _named(block_prefix: str) -> dict[str, dict]:
    configs = _hw("configs")
    out = {}
    for name, info in configs.CONFIG_INFO.items():
        if str(info.get("block", "")).startswith(block_prefix):
            out[name] = {"named": name, **{k: v for k, v in info.items() if k != "description"}}
    return out


# ------------------------------------------------------------------------------------ zero counter
# ZeroCounter(window=W, lanes=L, registered=False) (docs/HARDWARE.md section 1).
ZERO_COUNTER_EXTRA = {
    "tb_w24_l1": {"window": 24, "lanes": 1, "registered": False},     # smallest legal window, one lane
    "tb_w64_l8_comb": {"window": 64, "lanes": 8, "registered": False},
    "tb_w100_l13": {"window": 100, "lanes": 13, "registered": True},  # non-power-of-two W and L
}


def zero_counter_configs() -> dict[str, dict]:
    out = {}
    for name, p in _named("zero_counter").items():
        out[name] = {**p, "registered": True}
    out.update(ZERO_COUNTER_EXTRA)
    return out


def make_zero_counter(params):
    if "named" in params:
        comp = _hw("configs").NAMED_CONFIGS[params["named"]]()
        assert (comp.window, comp.lanes) == (params["window"], params["lanes"]), params
        return comp
    return _hw("zero_counter").ZeroCounter(window=params["window"], lanes=params["lanes"],
                                           registered=params["registered"])


# ---------------------------------------------------------------------------------------- decoder

def decoder_configs() -> dict[str, dict]:
    return _named("decoder_c1")


def decoder_c2_configs() -> dict[str, dict]:
    """DecoderC2(lanes=L, word=IW) (docs/HARDWARE.md 2a): decoder_c2_l8 / decoder_c2_l16."""
    return _named("decoder_c2")


def make_decoder_c2(params):
    return _hw("configs").NAMED_CONFIGS[params["named"]]()


def make_decoder(params):
    return _hw("configs").NAMED_CONFIGS[params["named"]]()


# ---------------------------------------------------------------------------------------- encoder

def encoder_configs() -> dict[str, dict]:
    return _named("encoder")


def make_encoder(params):
    return _hw("configs").NAMED_CONFIGS[params["named"]]()


QUICK = {"zero_counter": ["zero_counter_w64_l8", "tb_w64_l8_comb"], "decoder": ["decoder_c1_l4", "decoder_c1_l8"],
         "decoder_c2": ["decoder_c2_l8"], "encoder": ["encoder_kv_c1_l8", "encoder_kv_c2_l8"]}


def quick_configs(kind: str) -> list[str]:
    return list(QUICK[kind])
