"""bf16 x bf16 -> fp32 multiply-accumulate processing element (the NPU reference for synthesis).

This PE is not part of the Cassandra data path. It exists so the decoder/encoder area can be compared
with the compute array of an NPU *in the same synthesis flow and cell library* (synth/flow.py), which is
how the paper's "decoder ~2 % of a 64 TFLOPS NPU" claim is checked here.

Arithmetic (bit-exact, tested against numpy float32 in tests/test_synth_pe_mac.py):

* The product ``a * b`` of two bf16 values (8-bit significands) has a 16-bit significand and is therefore
  exact in fp32 whenever it lies in the fp32 normal range. It is rounded only by over/underflow:
  above the fp32 range it becomes +-inf; below 2**-126 it is flushed to a signed zero (FTZ).
* The accumulation ``acc + p`` is an IEEE-754 fp32 addition, round-to-nearest-even, with three extra
  bits (guard, round, sticky) so it is correctly rounded. A sum whose magnitude is below 2**-126
  (an fp32 subnormal) is flushed to a zero with the sum's sign (FTZ). Overflow gives +-inf.
* Subnormal bf16 inputs are read as zero (DAZ). An exact-zero sum of non-zero operands is +0
  (x + (-x) = +0 under RNE); -0 + -0 = -0.
* Any NaN input, inf * 0 and inf + (-inf) give the canonical quiet NaN 0x7FC00000.

In short: ``acc' = FTZ(fl32_RNE(acc + FTZ(a * b)))`` -- a non-fused MAC whose only difference from
numpy's float32 arithmetic is the flush of subnormals.

Pipeline (one MAC per cycle, two stages):

* stage 1 (``a``, ``b``, ``en``, ``clear`` sampled): bf16 multiply, product registered as an fp32 word;
* stage 2: the fp32 adder adds the registered product to the accumulator (or to -0.0 when ``clear``
  was asserted, because -0.0 is the exact additive identity: -0 + x == x for every x, +0 included).

The accumulator is in a feedback loop, so the fp32 adder must fit one cycle; it is the critical path.
``acc`` shows the result two cycles after the operands were presented with ``en`` high.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..errors import ConfigError

BF16_WIDTH = 16
FP32_WIDTH = 32
FP32_QNAN = 0x7FC00000
FP32_INF = 0x7F800000


def _lzc(m: Module, value, name: str):
    """Leading-zero count of ``value`` as a log-depth tree (a priority chain would be ~width deep).

    Returns (count, all_zero). The count is only meaningful when ``all_zero`` is 0.
    """
    width = len(value)
    size = 1
    while size < width:
        size *= 2
    # Pad at the LSB end with ones so the padding never adds leading zeros when value != 0.
    padded = Cat(Const((1 << (size - width)) - 1, size - width), value) if size > width else value

    def tree(bits, lo, n):
        if n == 1:
            return Const(0, 0), ~bits[lo]
        half = n // 2
        hi_cnt, hi_zero = tree(bits, lo + half, half)
        lo_cnt, lo_zero = tree(bits, lo, half)
        # If the upper half is all zero, count = half + count(lower); else count(upper).
        cnt = Mux(hi_zero, Cat(lo_cnt, Const(1, 1)), Cat(hi_cnt, Const(0, 1)))
        return cnt, hi_zero & lo_zero

    count, _ = tree(padded, 0, size)
    cnt_sig = Signal(len(count), name=f"{name}_lzc")
    zero_sig = Signal(name=f"{name}_zero")
    # The padding makes the tree's own all-zero flag useless; test the unpadded value instead.
    m.d.comb += [cnt_sig.eq(count), zero_sig.eq(value == 0)]
    return cnt_sig, zero_sig


def bf16_mul(m: Module, a, b, name: str = "prod"):
    """bf16 ``a`` x bf16 ``b`` -> fp32 as a 32-bit Signal (combinational): exact unless it leaves the normal
    range (DAZ inputs; below 2**-126 a zero of sign sa ^ sb; at or above 2**128 an infinity; NaN or inf x 0 ->
    the canonical quiet NaN). Stage 1 of PeMacBf16 and of the NPU tile's DotUnit (hw/npu/dot.py)."""
    sa, ea, fa = a[15], a[7:15], a[0:7]
    sb, eb, fb = b[15], b[7:15], b[0:7]
    a_zero = ea == 0                     # zero or subnormal (DAZ)
    b_zero = eb == 0
    a_inf = (ea == 0xFF) & (fa == 0)
    b_inf = (eb == 0xFF) & (fb == 0)
    a_nan = (ea == 0xFF) & (fa != 0)
    b_nan = (eb == 0xFF) & (fb != 0)

    sig = Signal(16, name=f"{name}_sig")     # (1.fa) * (1.fb) in [1, 4): 2 integer + 14 fraction bits
    m.d.comb += sig.eq(Cat(fa, Const(1, 1)) * Cat(fb, Const(1, 1)))
    carry = sig[15]
    # Normalised 15-bit fraction (hidden bit dropped): exact, fits fp32's 23-bit fraction.
    frac15 = Mux(carry, sig[0:15], Cat(Const(0, 1), sig[0:14]))
    # Biased fp32 exponent: ea + eb - 127 + carry, in [-125, 382] for normal inputs.
    pexp = Signal(range(-256, 512), name=f"{name}_exp")
    m.d.comb += pexp.eq(ea + eb - 127 + carry)

    p_sign = sa ^ sb
    p_nan = a_nan | b_nan | (a_inf & b_zero) | (a_zero & b_inf)
    p_inf = (a_inf | b_inf) & ~p_nan
    p_ovf = ~(a_inf | b_inf | a_zero | b_zero | a_nan | b_nan) & (pexp >= 255)
    p_zero = (a_zero | b_zero | (pexp <= 0)) & ~p_nan & ~p_inf

    prod = Signal(FP32_WIDTH, name=name)
    with m.If(p_nan):
        m.d.comb += prod.eq(FP32_QNAN)
    with m.Elif(p_inf | p_ovf):
        m.d.comb += prod.eq(Cat(Const(FP32_INF, 31), p_sign))
    with m.Elif(p_zero):
        m.d.comb += prod.eq(Cat(Const(0, 31), p_sign))
    with m.Else():
        m.d.comb += prod.eq(Cat(Const(0, 8), frac15, pexp[0:8], p_sign))
    return prod


class PeMacBf16(wiring.Component):
    """One bf16 x bf16 + fp32 MAC per cycle.

    Ports
        a, b   In(16)   bf16 operands, sampled when ``en`` is high
        en     In(1)    accumulate this cycle's product
        clear  In(1)    with ``en``: start a new sum (acc := a*b) instead of acc := acc + a*b
        acc    Out(32)  fp32 accumulator (two cycles of latency from a/b)
        acc_valid Out(1) high the cycle after an accumulation step updated ``acc``
    """

    def __init__(self, *, flush_subnormals: bool = True):
        # Only the FTZ/DAZ variant is implemented: gradual underflow would add a subnormal
        # normalisation path that an NPU accumulator usually omits. Refuse the other request rather
        # than silently building something different.
        if flush_subnormals is not True:
            self._MustUse__silence = True   # a rejected configuration is not an "unused" design
            raise ConfigError("PeMacBf16 implements flush-to-zero only (flush_subnormals=True)")
        self.flush_subnormals = flush_subnormals
        super().__init__({
            "a": In(BF16_WIDTH),
            "b": In(BF16_WIDTH),
            "en": In(1),
            "clear": In(1),
            "acc": Out(FP32_WIDTH),
            "acc_valid": Out(1),
        })

    # Synthesis metadata read by synth/flow.py: one multiply-accumulate (2 FLOP) per cycle.
    flops_per_cycle = 2

    def elaborate(self, platform):
        m = Module()

        # ---------------- stage 1: bf16 x bf16 -> fp32 (exact unless over/underflow) -------------
        prod = bf16_mul(m, self.a, self.b, "prod")

        prod_r = Signal(FP32_WIDTH, name="prod_r")
        en_r = Signal(name="en_r")
        clear_r = Signal(name="clear_r")
        m.d.sync += [en_r.eq(self.en), clear_r.eq(self.clear)]
        with m.If(self.en):
            m.d.sync += prod_r.eq(prod)

        # ---------------- stage 2: fp32 accumulate (RNE, FTZ) ----------------------------------
        acc = Signal(FP32_WIDTH, name="acc_r")
        # -0.0 is the additive identity for every x (+0 included), so `clear` just swaps it in.
        x = Mux(clear_r, Const(0x80000000, 32), acc)
        y = prod_r
        total = self._fp32_add(m, x, y)
        with m.If(en_r):
            m.d.sync += acc.eq(total)
        m.d.sync += self.acc_valid.eq(en_r)
        m.d.comb += self.acc.eq(acc)
        return m

    @staticmethod
    def _fp32_add(m: Module, x, y):
        """Correctly rounded (RNE) fp32 x + y with FTZ/DAZ; returns a 32-bit Signal."""
        sx, ex, fx = x[31], x[23:31], x[0:23]
        sy, ey, fy = y[31], y[23:31], y[0:23]
        x_nan = (ex == 0xFF) & (fx != 0)
        y_nan = (ey == 0xFF) & (fy != 0)
        x_inf = (ex == 0xFF) & (fx == 0)
        y_inf = (ey == 0xFF) & (fy == 0)

        # Order by magnitude (exponent then fraction compare as one 31-bit integer) so the
        # subtraction below never goes negative and only the smaller operand is shifted. Both
        # exponent differences are computed beside the compare, not after it (shorter path).
        swap = Signal(name="add_swap")
        m.d.comb += swap.eq(y[0:31] > x[0:31])
        s_big = Mux(swap, sy, sx)
        e_big = Signal(8, name="add_e_big")
        f_big = Signal(23, name="add_f_big")
        e_small = Signal(8, name="add_e_small")
        f_small = Signal(23, name="add_f_small")
        m.d.comb += [
            e_big.eq(Mux(swap, ey, ex)), e_small.eq(Mux(swap, ex, ey)),
            f_big.eq(Mux(swap, fy, fx)), f_small.eq(Mux(swap, fx, fy)),
        ]
        d_xy = Signal(8, name="add_d_xy")
        d_yx = Signal(8, name="add_d_yx")
        m.d.comb += [d_xy.eq(ex - ey), d_yx.eq(ey - ex)]
        d = Signal(8, name="add_d")                               # e_big - e_small >= 0
        m.d.comb += d.eq(Mux(swap, d_yx, d_xy))
        # DAZ: exponent 0 means zero (the hidden bit is 0 and the fraction is ignored).
        m_big = Cat(Mux(e_big == 0, 0, f_big), e_big != 0)       # 24 bits
        m_small = Cat(Mux(e_small == 0, 0, f_small), e_small != 0)

        # Alignment: shift the smaller significand right by d. The 56-bit window keeps every bit
        # for shifts up to 31 (so the sticky bit is exact); at 32 or more only "non-zero" is left.
        wide = Signal(56, name="add_aligned")                     # m_small * 2**(32 - d[0:5])
        m.d.comb += wide.eq(Cat(Const(0, 32), m_small) >> d[0:5])
        far = d[5:8] != 0
        sticky_in = Mux(far, m_small != 0, wide[0:30].any())
        y_al = Cat(sticky_in, Mux(far, 0, wide[30:56]))            # 27 bits: sig(24) G R S
        x_al = Cat(Const(0, 3), m_big)                            # 27 bits

        subtract = sx ^ sy
        raw = Signal(28, name="add_raw")
        m.d.comb += raw.eq(Mux(subtract, x_al - y_al, x_al + y_al))

        # Normalisation: a carry shifts right by one (the shifted-out bit joins the sticky);
        # otherwise shift left by the leading-zero count of the 27-bit result.
        lzc, raw_zero = _lzc(m, raw[0:27], "add")
        norm = Signal(27, name="add_norm")                        # 1.xxx (23 frac) G R S
        exp_n = Signal(range(-64, 512), name="add_exp_norm")
        with m.If(raw[27]):
            m.d.comb += [norm.eq(Cat(raw[1] | raw[0], raw[2:28])), exp_n.eq(e_big + 1)]
        with m.Else():
            m.d.comb += [norm.eq(raw[0:27] << lzc), exp_n.eq(e_big - lzc)]

        # Round to nearest, ties to even, on the 24-bit significand.
        g = norm[2]
        rs = norm[1] | norm[0]
        lsb = norm[3]
        round_up = g & (rs | lsb)
        mant = Signal(25, name="add_mant")
        m.d.comb += mant.eq(norm[3:27] + round_up)
        exp_r = Signal(range(-64, 512), name="add_exp_round")
        frac = Signal(23, name="add_frac")
        with m.If(mant[24]):                                      # 1.111..1 + ulp = 10.000..0
            m.d.comb += [exp_r.eq(exp_n + 1), frac.eq(0)]
        with m.Else():
            m.d.comb += [exp_r.eq(exp_n), frac.eq(mant[0:23])]

        result = Signal(32, name="add_result")
        any_nan = x_nan | y_nan | (x_inf & y_inf & subtract)
        with m.If(any_nan):
            m.d.comb += result.eq(FP32_QNAN)
        with m.Elif(x_inf | y_inf):
            m.d.comb += result.eq(Cat(Const(FP32_INF, 31), Mux(x_inf, sx, sy)))
        with m.Elif(raw_zero & ~raw[27]):
            # Exact zero: -0 only if both operands were negative (RNE rule).
            m.d.comb += result.eq(Cat(Const(0, 31), sx & sy))
        with m.Elif(exp_r >= 255):
            m.d.comb += result.eq(Cat(Const(FP32_INF, 31), s_big))
        with m.Elif(exp_r <= 0):
            m.d.comb += result.eq(Cat(Const(0, 31), s_big))       # FTZ keeps the sign
        with m.Else():
            m.d.comb += result.eq(Cat(frac, exp_r[0:8], s_big))
        return result
