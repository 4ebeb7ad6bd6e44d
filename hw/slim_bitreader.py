"""Slim bit reader: hw/bitreader.py's BitReader with a chosen (smaller) number of word slots.

BitReader sizes its ring for a consumer that may take a whole window plus a chunk's padding in one
cycle (``N >= window / word + 3`` slots, a power of two: 4 slots for any window up to a word). The C2
decoder v2's verification planes are read much slower than their words arrive: verif.rest at most
``8 * Lv`` bits and verif.codes at most ``window + 8`` bits per cycle, against 128-bit words at L = 8.
Two slots then suffice for full rate: when the head word is used up, the next is already in the other
slot with at least ``IW - take`` unread bits, which lasts the two cycles until a new word can arrive
(``inp.ready`` stays a registered condition: a slot is free). The logic is BitReader's, unchanged.
"""
from __future__ import annotations

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from ..errors import ConfigError
from .bitreader import BYTE, BitReader, word_layout


class SlimBitReader(BitReader):
    """BitReader with ``slots`` word slots (a power of two >= 2); the window must fit one word."""

    def __init__(self, word: int = 128, window: int = 32, slots: int = 2):
        if not isinstance(word, int) or word < BYTE or word % BYTE or word & (word - 1):
            raise ConfigError(f"input word width must be a power-of-two multiple of 8 bits, got {word!r}")
        if not isinstance(window, int) or not 1 <= window <= word:
            raise ConfigError(f"slim bit reader window must be 1..{word} bits (two slots), got {window!r}")
        if not isinstance(slots, int) or slots < 2 or slots & (slots - 1):
            raise ConfigError(f"slim bit reader slots must be a power of two >= 2, got {slots!r}")
        self.word, self.window, self.slots = word, window, slots
        self.capacity = slots * word
        wiring.Component.__init__(self, {
            "inp": In(stream.Signature(word_layout(word))),
            "enable": In(1), "drain": In(1), "flush": In(1),
            "take": In(bits_for(window + 8)), "skip": In(1), "commit": In(1),
            "win": Out(window), "avail": Out(bits_for(self.capacity)), "end_seen": Out(1),
            "skip_ok": Out(1), "skip_err": Out(1),
        })
