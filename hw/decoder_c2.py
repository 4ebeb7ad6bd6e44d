"""The pieces the C2 decoders share (hw/decoder_c2_v3.py, docs/datasheets/decoder_c2.md).

* ``c2_decoder_signature``: the C2 ports with every plane at one word width; ``c2_port_signature``: the same with
  the verification planes at their own word width (the decoder v3 ports);
* ``draft_consts`` / ``draft_lane``: FORMAT section 4's draft bf16 of a lane with one normalising shift;
* ``prefix_sums``: exclusive prefix sums of named nodes (Sklansky).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out

from ..golden.config import BF16_EXPONENT_BITS, BF16_MANTISSA_BITS
from .bitreader import word_layout
from .decoder import BF16_BITS, ERROR_BITS, FIELD_MAX, cfg_layout, out_layout

X_BITS = 8                                          # E8M0 shared exponent
MX_FIELD_MAX = BF16_MANTISSA_BITS + 2               # (m+2)-bit sign|element field, m <= 7: 9 bits


def prefix_sums(m: Module, values: list, width: int, name: str) -> list:
    """Exclusive prefix sums: ``out[j] = sum(values[:j])`` for j in 0..n (Sklansky, named nodes)."""
    n = len(values)
    node = list(values)
    span, level = 1, 0
    while span < n:
        nxt = list(node)
        for j in range(n):
            if (j // span) % 2 == 1:
                src = (j // span) * span - 1
                s = Signal(width, name=f"{name}_l{level}_{j}")
                m.d.comb += s.eq(node[j] + node[src])
                nxt[j] = s
        node, span, level = nxt, span * 2, level + 1
    return [Const(0, width)] + node


def leading_zeros8(m: Module, v, name: str):
    """Leading zeros of an 8-bit value (8 when it is zero)."""
    lz = Signal(4, name=name)
    acc = Const(8, 4)
    for b in range(8):                     # higher bits override: the last match is the leading one
        acc = Mux(v[b], 7 - b, acc)
    m.d.comb += lz.eq(acc)
    return lz


def c2_decoder_signature(lanes: int, word: int) -> dict:
    """The C2 ports with every plane at ``word`` bits (docs/datasheets/decoder_c2.md "Ports")."""
    plane = stream.Signature(word_layout(word))
    return {
        "spec_mx": In(plane), "verif_codes": In(plane), "verif_rest": In(plane),
        "cfg": In(stream.Signature(cfg_layout)),
        "out": Out(stream.Signature(out_layout(lanes))),
        "busy": Out(1), "error": Out(1), "error_code": Out(ERROR_BITS),
    }


def draft_consts(m, x, mm, name: str) -> dict:
    """The beat's shared constants of ``draft_lane`` (one X per beat): ``a = max(X,1) - 1 + (7 - m)``, ``a + 1``
    and the element mask (bits 0..m)."""
    a = Signal(BF16_EXPONENT_BITS + 1, name=f"{name}_a")
    a1 = Signal(BF16_EXPONENT_BITS + 1, name=f"{name}_a1")
    emask = Signal(BF16_MANTISSA_BITS + 1, name=f"{name}_emask")
    m.d.comb += [a.eq(Mux(x == 0, 0, x - 1) + (BF16_MANTISSA_BITS - mm)), a1.eq(a + 1),
                 emask.eq(Cat(Const(1, 1), *[mm >= j for j in range(1, BF16_MANTISSA_BITS + 1)]))]
    return {"a": a, "a1": a1, "emask": emask}


def draft_lane(m, k: dict, mm, lane: dict, name: str) -> None:
    """FORMAT section 4's draft bf16 of a lane with one normalising shift: with ``elem`` the field's
    m+1 element bits and ``T = min(a, lz8(elem)) = (7 - m) + sh``, the mantissa is ``(elem << T)[6:0]``, the
    value is normal iff bit 7 of it is set (exponent ``a + 1 - T = max(X,1) - sh``, else 0) and the cut bits
    number ``T``. Sets ``draft``, ``nz`` (kept and elem != 0) and ``rest_w`` (T, or 8 if draft-zero)."""
    f = lane["field"]
    elem = Signal(BF16_MANTISSA_BITS + 1, name=f"{name}_elem")
    sign = Signal(name=f"{name}_sign")
    m.d.comb += [elem.eq(f[:BF16_MANTISSA_BITS + 1] & k["emask"]), sign.eq((f >> (mm + 1))[0])]
    lz = leading_zeros8(m, elem, f"{name}_lz")
    t = Signal(4, name=f"{name}_t")
    m.d.comb += t.eq(Mux(k["a"] < lz, k["a"][:4], lz))
    norm = Signal(BF16_MANTISSA_BITS + 1, name=f"{name}_norm")
    m.d.comb += norm.eq((elem << t)[:BF16_MANTISSA_BITS + 1])
    exp = Signal(BF16_EXPONENT_BITS, name=f"{name}_exp")
    m.d.comb += exp.eq(Mux(norm[BF16_MANTISSA_BITS], k["a1"] - t, 0))
    nz = Signal(name=f"{name}_nz")
    m.d.comb += nz.eq(lane["kept"] & (elem != 0))
    draft = Signal(BF16_BITS, name=f"{name}_draft")
    m.d.comb += draft.eq(Mux(lane["kept"], Cat(norm[:BF16_MANTISSA_BITS], exp, sign), 0))
    width = Signal(4, name=f"{name}_rest_w")
    m.d.comb += width.eq(Mux(nz, t, FIELD_MAX))
    lane.update(draft=draft, nz=nz, rest_w=width)


def c2_port_signature(lanes: int, word: int, verif_word: int) -> dict:
    """The C2 ports with the verification planes at their own word width (docs/datasheets/decoder_c2.md "Ports"):
    spec_mx ``word`` bits, verif_codes / verif_rest ``verif_word`` bits."""
    sig = c2_decoder_signature(lanes, word)
    vplane = In(stream.Signature(word_layout(verif_word)))
    return {**sig, "verif_codes": vplane, "verif_rest": vplane}
