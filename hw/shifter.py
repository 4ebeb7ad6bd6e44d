"""Narrow-output right shifter: ``(vec >> amount)[:width]`` as a log shifter whose stages run from the
amount's most significant bit down, each stage keeping only the bits the later stages can still reach.

Why not Amaranth's ``>>`` / ``bit_select``: Yosys lowers a variable shift (``$shr`` / ``$shiftx``) into a
log shifter least significant bit first over the whole input width and relies on ``opt_clean`` to drop what
the output does not use; with LSB-first stages nearly every bit of every stage is still used, so a 256-bit
view shifted into a 136-bit window costs ~1,430 MUX2 instead of ~890, and an 8-bit ``bit_select`` from 256
bits ~2.3 k GE instead of ~0.9 k. MSB first, stage ``b`` keeps ``width + 2^b - 1`` bits (the largest shift
still to come is ``2^b - 1``), so the total is about ``width * log2(range) + range``.

Measured in the generic flow (synth/flow.py's library, registered output):
256 -> 136 bits by 7 amount bits 3,874 GE of logic with ``>>``, 2,600 GE here.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal


def shift_right(m, vec, amount, width: int, name: str):
    """``(vec >> amount)[:width]`` (zeros shifted in) as an MSB-first log shifter; returns a ``width``-bit
    Signal. ``amount`` is an unsigned Value; only its bits up to the input width are used."""
    cur = vec
    n = len(vec)
    bits = min(len(amount), max(1, n.bit_length()))
    hi_zero = (amount >> bits).any() if len(amount) > bits else None
    for b in reversed(range(bits)):
        step = 1 << b
        keep = width + step - 1                        # the largest shift still to come is step - 1
        src_len = len(cur)
        keep_src = min(keep, src_len)
        shifted = Cat(cur[step:], Const(0, step))[:keep_src] if step < src_len else Const(0, keep_src)
        nxt = Signal(keep_src, name=f"{name}_s{b}")
        m.d.comb += nxt.eq(Mux(amount[b], shifted, cur[:keep_src]))
        cur = nxt
    out = Signal(width, name=name)
    m.d.comb += out.eq(cur if hi_zero is None else Mux(hi_zero, 0, cur))
    return out
