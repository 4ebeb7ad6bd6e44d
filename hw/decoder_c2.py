"""The pieces the C2 decoders share (hw/decoder_c2_v3.py, hw/decoder_c2_v2.py, docs/datasheets/decoder_c2.md).

* ``c2_decoder_signature``: the ports of every C2 decoder (docs/datasheets/decoder_c2.md); ``c2_port_signature``:
  the same with the verification planes at their own word width (interface v2.1);
* ``draft_consts`` / ``draft_lane``: FORMAT section 4's draft bf16 of a lane with one normalising shift;
* ``prefix_sums``: exclusive prefix sums of named nodes (Sklansky);
* ``DecoderC2._draft_lane``: FORMAT section 4's draft bf16 of a lane from (s, elem, X) and its rest width,
  called by DecoderC2v2 as ``DecoderC2._draft_lane(self, ...)``.

``DecoderC2`` keeps its constructor (parameters checked, the C2 ports) but no longer elaborates: its v1
datapath (one cycle over spec.mx fields -> elements -> draft-zero flags -> verification code lanes and rest
prefix sums -> lane fit -> every reader's take; 0.47x the PE clock at L = 8) is retired. Its last version is
hw/decoder_c2.py at commit d0f60ad; its figures are the "v1 (retired)" rows of docs/SYNTHESIS.md and
synth/v1_retired.json.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..errors import ConfigError
from ..golden.config import ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, MX_BLOCK
from .bitreader import word_layout
from .decoder import (BF16_BITS, ERROR_BITS, FIELD_MAX, MAX_CODE_BITS, DecoderC1, cfg_layout, check_lanes_word,
                      out_layout)

G_MAX = max(ALLOWED_GROUP_SIZES)
MX_MAX = G_MAX // MX_BLOCK                          # MX blocks per superblock (8)
X_BITS = 8                                          # E8M0 shared exponent
X_REGION = X_BITS * MX_MAX                          # at most 64 bits of X per chunk
MX_FIELD_MAX = BF16_MANTISSA_BITS + 2               # (m+2)-bit sign|element field, m <= 7: 9 bits
ELEM_BITS = BF16_MANTISSA_BITS + 1                  # an element has m+1 <= 8 bits
MERGE_GROUP = 128                                   # the default mx window merges headers up to this G
MERGE_HEADER = MERGE_GROUP + X_BITS * MERGE_GROUP // MX_BLOCK    # 160 bits: bitmap + X of G = 128


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
    """The ports of every C2 decoder (DecoderC2v2, hw/decoder_c2_v2.py; the retired DecoderC2): docs/datasheets/decoder_c2.md."""
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
    """FORMAT section 4's draft bf16 of a lane with one normalising shift (hw/decoder_c2.py's ``_draft_lane``
    shifts the element to bit 7 first, then by ``sh = min(lz, max(X,1) - 1)``): with ``elem`` the field's
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
    """docs/datasheets/decoder_c2.md's C2 ports with the verification planes at their own word width (2c, interface
    v2.1): spec_mx ``word`` bits, verif_codes / verif_rest ``verif_word`` bits."""
    sig = c2_decoder_signature(lanes, word)
    vplane = In(stream.Signature(word_layout(verif_word)))
    return {**sig, "verif_codes": vplane, "verif_rest": vplane}


class DecoderC2(DecoderC1):
    """The v1 Cassandra-2 decoder's parameters and ports (``lanes`` bf16 values per beat); no longer elaborates.

    Parameters
        lanes       L, values per output beat (1..32)
        word        IW, bits per input word on every plane (multiple of 8; default 16 * L: spec.mx needs
                    up to ~10.3 bits per value, so 8 * L would starve at high m and keep ratios)
        window      W, code window of the verif.codes zero counter (>= 24; default max(24, 8 * L))
        mx_window   Wm, window of the spec.mx reader (>= 9 * L + 64: a first beat's L widest fields behind
                    the largest X region; default 9 * L + 160, which also holds the bitmap of G <= 128 so
                    those superblocks need no HEAD cycle); a bitmap in HEAD is read Wm bits per cycle

    The v1 datapath is retired: the constructor and ``_draft_lane`` remain (DecoderC2v2 uses the latter).
    """

    def __init__(self, lanes: int = 8, word: int | None = None, window: int | None = None,
                 mx_window: int | None = None):
        word = 16 * lanes if word is None else word
        window = max(MAX_CODE_BITS, 8 * lanes) if window is None else window
        check_lanes_word(lanes, word, window)
        min_mx = MX_FIELD_MAX * lanes + X_REGION
        mx_window = MX_FIELD_MAX * lanes + MERGE_HEADER if mx_window is None else mx_window
        if not isinstance(mx_window, int) or not min_mx <= mx_window <= 4 * G_MAX:
            raise ConfigError(f"spec.mx window must be {min_mx}..{4 * G_MAX} bits at {lanes} lanes (the X "
                              f"region plus L fields of {MX_FIELD_MAX} bits), got {mx_window!r}")
        self.lanes, self.word, self.window, self.mx_window = lanes, word, window, mx_window
        self.rest_window = FIELD_MAX * lanes            # L rest fields of at most 8 bits
        # Group sizes whose whole header (G bitmap bits + G/4 X bits) and L fields fit in the window: their
        # full superblocks read the bitmap on the first beat instead of in a HEAD cycle.
        self.merge_groups = tuple(g for g in ALLOWED_GROUP_SIZES
                                  if g + X_BITS * g // MX_BLOCK + MX_FIELD_MAX * lanes <= mx_window)
        wiring.Component.__init__(self, c2_decoder_signature(lanes, word))

    def elaborate(self, platform):
        raise NotImplementedError("DecoderC2's v1 datapath is retired (hw/decoder_c2.py at commit d0f60ad): use "
                                  "DecoderC2v2 (decoder_c2v2_*)")

    def _draft_lane(self, m, r, lane, i):
        """FORMAT section 4: draft bf16 of a lane from (s, elem, X); also its rest width for full mode.

        With ``elem8 = elem << (7-m)`` (the element's MSB at bit 7) and ``sh = min(lz, max(X,1) - 1)``,
        the mantissa is ``(elem8 << sh)[6:0]`` in both the normal and the subnormal case, and the value is
        normal iff bit 7 of ``elem8 << sh`` is set (exponent ``max(X,1) - sh``, else 0); the cut bits
        number ``7 - c = 7 - m + sh``."""
        mm = r["m"]
        f, x = lane["field"], lane["x"]
        elem8 = Signal(ELEM_BITS, name=f"elem8_{i}")
        sign = Signal(name=f"sign{i}")
        m.d.comb += [elem8.eq((f << lane["fr"])[:ELEM_BITS]),
                     sign.eq((f >> (mm + 1))[0])]
        lz = leading_zeros8(m, elem8, f"lz{i}")
        xm1 = Signal(BF16_EXPONENT_BITS, name=f"xm1_{i}")          # max(X,1) - 1
        m.d.comb += xm1.eq(Mux(x == 0, 0, x - 1))
        sh = Signal(4, name=f"sh{i}")
        m.d.comb += sh.eq(Mux(xm1 < lz, xm1, lz))
        norm = Signal(ELEM_BITS, name=f"norm{i}")
        m.d.comb += norm.eq((elem8 << sh)[:ELEM_BITS])
        exp = Signal(BF16_EXPONENT_BITS, name=f"dexp{i}")
        m.d.comb += exp.eq(Mux(norm[7], xm1 + 1 - sh, 0))
        nz = Signal(name=f"nz{i}")
        m.d.comb += nz.eq(lane["kept"] & (elem8 != 0))
        draft = Signal(BF16_BITS, name=f"draft{i}")
        m.d.comb += draft.eq(Mux(lane["kept"], Cat(norm[:BF16_MANTISSA_BITS], exp, sign), 0))
        width = Signal(4, name=f"rest_w{i}")                       # rest field: 8 bits if draft-zero
        m.d.comb += width.eq(Mux(nz, lane["fr"] + sh, FIELD_MAX))
        lane.update(draft=draft, nz=nz, rest_w=width)
