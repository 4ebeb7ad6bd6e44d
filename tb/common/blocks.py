"""Which RTL blocks the testbench knows, their named configurations and how to elaborate them.

The hardware blocks come from ``cassandra_rtl.hw`` (imported lazily, so the testbench infrastructure works
before a block exists); ``loopback`` is a testbench-owned 4-deep stream FIFO used only to self-test the
drivers, monitors and scoreboard.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class BlockSpec:
    name: str
    toplevel: str
    test_module: str
    configs: Callable[[], dict[str, dict]]          # name -> parameters (JSON-able)
    factory: Callable[[dict], object]               # parameters -> Amaranth component
    quick: Callable[[], list[str]]                  # configurations exercised by `make test`

    def params(self, config: str) -> dict:
        cfgs = self.configs()
        if config not in cfgs:
            raise KeyError(f"{self.name}: unknown configuration {config!r}; known: {sorted(cfgs)}")
        return cfgs[config]

    def make(self, config: str):
        return self.factory(self.params(config))

    def has_testbench(self) -> bool:
        import importlib.util
        try:
            return importlib.util.find_spec(self.test_module) is not None
        except ModuleNotFoundError:
            return False

    def available(self) -> bool:
        try:
            return bool(self.configs())
        except ImportError:
            return False


# ------------------------------------------------------------------------------------------ loopback

def _loopback(params):
    from amaranth import Module
    from amaranth.lib import fifo, stream, wiring
    from amaranth.lib.wiring import In, Out

    width = params["width"]

    class Loopback(wiring.Component):
        def __init__(self):
            super().__init__({"i_data": In(stream.Signature(width)), "o_data": Out(stream.Signature(width))})

        def elaborate(self, platform):
            m = Module()
            m.submodules.q = q = fifo.SyncFIFOBuffered(width=width, depth=4)
            m.d.comb += [q.w_data.eq(self.i_data.payload), q.w_en.eq(self.i_data.valid),
                         self.i_data.ready.eq(q.w_rdy), self.o_data.payload.eq(q.r_data),
                         self.o_data.valid.eq(q.r_rdy), q.r_en.eq(self.o_data.ready)]
            return m

    return Loopback()


# -------------------------------------------------------------------------------------- hw blocks

def _zc_configs():
    from . import hwapi
    return hwapi.zero_counter_configs()


def _zc_make(params):
    from . import hwapi
    return hwapi.make_zero_counter(params)


def _dec_configs():
    from . import hwapi
    return hwapi.decoder_configs()


def _dec_make(params):
    from . import hwapi
    return hwapi.make_decoder(params)


def _dec2_configs():
    from . import hwapi
    return hwapi.decoder_c2_configs()


def _dec2_make(params):
    from . import hwapi
    return hwapi.make_decoder_c2(params)


def _kvl_configs():
    from . import hwapi
    return hwapi.kv_loopback_c2_configs()


def _kvl_make(params):
    from . import hwapi
    return hwapi.make_kv_loopback_c2(params)


def _enc_configs():
    from . import hwapi
    return hwapi.encoder_configs()


def _enc_make(params):
    from . import hwapi
    return hwapi.make_encoder(params)


def _csr_configs():
    from . import hwapi
    return hwapi.csr_configs()


def _csr_make(params):
    from . import hwapi
    return hwapi.make_csr(params)


def _quick(kind):
    def q():
        from . import hwapi
        return hwapi.quick_configs(kind)
    return q


BLOCKS: dict[str, BlockSpec] = {
    "loopback": BlockSpec("loopback", "tb_loopback", "cassandra_rtl.tb.selftest.test_loopback",
                          lambda: {"w16": {"width": 16}}, _loopback, lambda: ["w16"]),
    "zero_counter": BlockSpec("zero_counter", "cassandra_zero_counter",
                              "cassandra_rtl.tb.zero_counter.test_zero_counter", _zc_configs, _zc_make,
                              _quick("zero_counter")),
    "decoder": BlockSpec("decoder", "cassandra_decoder", "cassandra_rtl.tb.decoder.test_decoder",
                         _dec_configs, _dec_make, _quick("decoder")),
    "decoder_c2": BlockSpec("decoder_c2", "cassandra_decoder_c2", "cassandra_rtl.tb.decoder_c2.test_decoder_c2",
                            _dec2_configs, _dec2_make, _quick("decoder_c2")),
    "encoder": BlockSpec("encoder", "cassandra_encoder", "cassandra_rtl.tb.encoder.test_encoder",
                         _enc_configs, _enc_make, _quick("encoder")),
    "csr": BlockSpec("csr", "cassandra_csr", "cassandra_rtl.tb.csr.test_csr", _csr_configs, _csr_make,
                     _quick("csr")),
    "kv_loopback_c2": BlockSpec("kv_loopback_c2", "cassandra_kv_loopback_c2",
                                "cassandra_rtl.tb.selftest.test_kv_loopback_c2", _kvl_configs, _kvl_make,
                                _quick("kv_loopback_c2")),
}


def get_block(name: str) -> BlockSpec:
    try:
        return BLOCKS[name]
    except KeyError:
        raise KeyError(f"unknown block {name!r}; known: {sorted(BLOCKS)}") from None
