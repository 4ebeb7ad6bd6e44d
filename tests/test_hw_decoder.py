"""The decoder interface (hw/decoder.py ``DecoderC1``, the base of decoder v3) and the word framing: the shared
constructor's parameter checks, ``simutil.chunk_words``, and decoder v3's own parameter checks."""
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


def test_the_shared_interface_does_not_elaborate():
    """DecoderC1 has ports and registers but no datapath: elaborating it is one clear message naming the
    decoders that have one, not an AttributeError deep in Amaranth."""
    from amaranth.sim import Simulator

    dut = DecoderC1(4)
    with pytest.raises(NotImplementedError, match="DecoderC1v3.*DecoderC2v3"):
        Simulator(dut)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("cls,kw", [("DecoderC1v3", {"lanes": 2}), ("DecoderC1v3", {"lanes": 16}),
                                    ("DecoderC1v3", {"lanes": 8, "code_word": 32, "verif_word": 64}),
                                    ("DecoderC1v3", {"lanes": 4, "code_word": 16, "verif_word": 16}),
                                    ("DecoderC1v3", {"lanes": 8, "code_word": 1024}),
                                    ("DecoderC1v3", {"lanes": 8, "code_word": 48}),
                                    ("DecoderC2v3", {"lanes": 2}), ("DecoderC2v3", {"lanes": 32}),
                                    ("DecoderC2v3", {"lanes": 8, "word": 48}), ("DecoderC2v3", {"lanes": 8, "word": 16}),
                                    ("DecoderC2v3", {"lanes": 8, "verif_word": 16}),
                                    ("DecoderC2v3", {"lanes": 8, "verif_word": 48})])
def test_decoder_v3_rejects_bad_parameters(cls, kw):
    """Out-of-range lanes and word widths are one ConfigError at construction (the C1 code readers' span is two
    code words, at most 1024 bits)."""
    from cassandra_rtl.hw.decoder_c1_v3 import DecoderC1v3
    from cassandra_rtl.hw.decoder_c2_v3 import DecoderC2v3
    with pytest.raises(ConfigError):
        {"DecoderC1v3": DecoderC1v3, "DecoderC2v3": DecoderC2v3}[cls](**kw)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_decoder_v3_verification_words_follow_the_code_words():
    from cassandra_rtl.hw.decoder_c1_v3 import DecoderC1v3
    assert DecoderC1v3(8, code_word=64).port_words == {"spec_codes": 64, "spec_signman": 64, "verif_codes": 64,
                                                       "verif_rest": 64}
