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
    """The C1 decoders with their own register file: decoder v3 decoder_c1v3_l4 / _l8 (docs/datasheets/decoder_c1.md);
    not a cluster's per-instance core, which takes its tensor registers from a shared TensorRegisters."""
    return {n: p for n, p in _named("decoder_c1").items() if "cluster_part" not in p}


def decoder_c2_configs() -> dict[str, dict]:
    """The C2 decoders with their own register file: decoder v3 decoder_c2v3_l8 (docs/datasheets/decoder_c2.md);
    not a cluster's per-instance core."""
    return {n: p for n, p in _named("decoder_c2").items() if "cluster_part" not in p}


def make_decoder_c2(params):
    return _hw("configs").NAMED_CONFIGS[params["named"]]()


def make_decoder(params):
    return _hw("configs").NAMED_CONFIGS[params["named"]]()


# ---------------------------------------------------------------------------------------- encoder

def encoder_configs() -> dict[str, dict]:
    return _named("encoder")


def make_encoder(params):
    return _hw("configs").NAMED_CONFIGS[params["named"]]()


# ------------------------------------------------------------------ C2 encoder -> decoder loopback
# EncoderKvC2(lanes=L, word=IW) planes (format 3.0) wired straight into DecoderC2v3(lanes=L, word=IW) (no glue;
# HARDWARE.md 3a), both at the encoder's 64-bit word. ``drop_verif`` = 1 (draft mode) accepts and discards the
# two verification planes instead of forwarding them.
KV_LOOPBACK_C2 = {"kv_c2_l4": {"lanes": 4, "word": 64}}


def kv_loopback_c2_configs() -> dict[str, dict]:
    return {k: dict(v) for k, v in KV_LOOPBACK_C2.items()}


def make_kv_loopback_c2(params):
    from amaranth import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    DecoderC2v3 = _hw("decoder_c2_v3").DecoderC2v3        # reads the format 3.0 the KV encoder writes
    EncoderKvC2 = _hw("encoder_c2").EncoderKvC2
    L, IW = int(params["lanes"]), int(params["word"])

    class KvLoopbackC2(wiring.Component):
        def __init__(self):
            self.enc = EncoderKvC2(lanes=L, word=IW)
            self.dec = DecoderC2v3(lanes=L, word=IW)
            em, dm = self.enc.signature.members, self.dec.signature.members
            super().__init__({"inp": em["inp"], "enc_cfg": em["cfg"], "dec_cfg": dm["cfg"], "out": dm["out"],
                              "drop_verif": In(1), "enc_busy": Out(1), "enc_error": Out(1),
                              "enc_error_code": Out(len(self.enc.error_code)), "busy": Out(1), "error": Out(1),
                              "error_code": Out(len(self.dec.error_code))})

        def elaborate(self, platform):
            m = Module()
            m.submodules.enc = enc = self.enc
            m.submodules.dec = dec = self.dec
            wiring.connect(m, wiring.flipped(self.inp), enc.inp)
            wiring.connect(m, wiring.flipped(self.enc_cfg), enc.cfg)
            wiring.connect(m, wiring.flipped(self.dec_cfg), dec.cfg)
            wiring.connect(m, dec.out, wiring.flipped(self.out))
            wiring.connect(m, enc.spec_mx, dec.spec_mx)
            for name in ("verif_codes", "verif_rest"):
                src, dst = getattr(enc, name), getattr(dec, name)
                m.d.comb += [dst.payload.eq(src.payload), dst.valid.eq(src.valid & ~self.drop_verif),
                             src.ready.eq(dst.ready | self.drop_verif)]
            m.d.comb += [self.enc_busy.eq(enc.busy), self.enc_error.eq(enc.error),
                         self.enc_error_code.eq(enc.error_code), self.busy.eq(dec.busy), self.error.eq(dec.error),
                         self.error_code.eq(dec.error_code)]
            return m

    return KvLoopbackC2()


# ------------------------------------------------------------------ AXI4-Lite register block on a decoder
# CsrTop(name) (hw/csr.py, docs/HARDWARE.md 5a): the decoder's data streams, its control ports as AXI4-Lite.

def bench_frames(params: dict) -> bool:
    """The decoder benches can frame the configuration's plane layout (tb/decoder/framing.py LAYOUTS)."""
    from cassandra_rtl.tb.decoder.framing import LAYOUTS, params_layout
    return params_layout(params) in LAYOUTS


def reads_containers(params: dict) -> bool:
    """The configuration is one ``cosim`` runs: a decoder reading a plane layout the benches can frame
    (format 3.0 for decoder v3, what containers hold; tb/decoder/framing.py)."""
    return bench_frames(params)


def csr_configs() -> dict[str, dict]:
    return {n: p for n, p in {**decoder_configs(), **decoder_c2_configs()}.items() if bench_frames(p)}


def make_csr(params):
    return _hw("csr").CsrTop(params["named"])


QUICK = {"zero_counter": ["zero_counter_w64_l8", "tb_w64_l8_comb"],
         # decoder v3 (the NPU tile's) at its small sizes; L = 8 runs in `make sim-full`
         "decoder": ["decoder_c1v3_l4"],
         "decoder_c2": ["decoder_c2v3_l8"], "encoder": ["encoder_kv_c1_l2", "encoder_kv_c2_l2"],
         # not in `make sim`: direct coupling deadlocks on some full-mode streams (see docs/VERIFICATION.md
         # Findings); run it with `tb.run --blocks kv_loopback_c2 --configs kv_c2_l4`
         "kv_loopback_c2": [], "csr": ["decoder_c1v3_l4"]}


def quick_configs(kind: str) -> list[str]:
    return list(QUICK[kind])
