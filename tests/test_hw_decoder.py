"""The C1 decoder interface (hw/decoder.py ``DecoderC1``, the base of the v2 decoders) and the word framing.

The v1 C1 datapath is retired and so are its Amaranth-simulator tests (this file at commit d0f60ad); the v2
decoder's are tests/test_hw_decoder_c1_v2.py. What remains: the shared constructor's parameter checks and
``simutil.chunk_words``.
"""
from __future__ import annotations

import pytest

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.hw.decoder import DecoderC1
from cassandra_rtl.hw.simutil import chunk_words


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("kw", [{"lanes": 0}, {"lanes": 33}, {"lanes": 4, "word": 12}, {"lanes": 4, "word": 48}, {"lanes": 4, "window": 16},
                                {"lanes": 4, "verif_lanes": 0}, {"lanes": 4, "verif_lanes": 5},
                                {"lanes": 8, "verif_lanes": 4, "verif_word": 12}])
def test_decoder_rejects_bad_parameters(kw):
    with pytest.raises(ConfigError):
        DecoderC1(**kw)


def test_chunk_words_framing():
    assert chunk_words(b"", 32) == [(0, 1)]
    assert chunk_words(bytes([1, 2, 3, 4, 5]), 32) == [(0x04030201, 0), (0x05, 1)]


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("cls", ["DecoderC1", "DecoderC2"])
def test_retired_v1_datapaths_say_so(cls):
    """The v1 classes keep their constructors (the v2 decoders and tests use their ports) but do not
    elaborate: one clear message naming the v2 class, not an AttributeError deep in Amaranth."""
    from amaranth.sim import Simulator

    from cassandra_rtl.hw import decoder, decoder_c2
    dut = getattr(decoder if cls == "DecoderC1" else decoder_c2, cls)(4)
    with pytest.raises(NotImplementedError, match="retired.*" + cls + "v2"):
        Simulator(dut)
