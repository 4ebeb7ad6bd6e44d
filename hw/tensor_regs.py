"""Per-tensor registers of a decoder cluster: written once, read by every decoder instance.

A decoder cluster (docs/NPU.md "Decoder cluster") decodes one tensor with N instances, each on its own
range of chunks. Everything but NUMEL and CTRL describes the tensor, not the instance: MODE, MBITS, KEEP,
GROUP, CHUNK, the books and their pair masks. ``TensorRegisters`` holds those registers once and derives
from them, once, the constants a decoder needs per tensor; ``TENSOR_PARAMS`` is the interface every
instance reads (decoder v3's core, hw/decoder_c1_v3.py ``DecoderC1v3Core``). An instance keeps NUMEL, CTRL,
its error register and its datapath.

    cfg writes (no instance busy) --> TensorRegisters --params--+--> core 0 (NUMEL, CTRL, errors)
                                                                +--> core 1
                                                                +--> ...

The register map is the C1 decoder's (hw/regs/cassandra.rdl); the cluster writes the tensor's registers
once and NUMEL / CTRL per instance. The derived constants settle two cycles after the last write; a core
waits two cycles from START before it reads them.
"""
from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ..errors import ConfigError
from ..golden.config import ALLOWED_GROUP_SIZES, BF16_EXPONENT_BITS, BF16_MANTISSA_BITS, K_MAX, PRUNED, SCHEMES
from .decoder import (CFG_DATA_BITS, ERROR_BITS, MAX_CHUNK_LOG, SYMBOL_BITS, C1RegisterFile, Format2Registers, Reg,
                      cfg_layout, ctrl_register_case)
from .code_reader import popcounts

GMAX = max(ALLOWED_GROUP_SIZES)
KEEP_MUL_BITS = 3        # bits of last_n the KEEP multiplier takes a cycle: 3 cycles for 9 bits
GROUP_BITS = 4                      # a group index q < K_MAX = 15 (15 stands for "none")

TENSOR_PARAMS = data.StructLayout({
    "full": 1,                                              # MODE: draft (0) or full (1)
    "m": bits_for(BF16_MANTISSA_BITS),                      # MBITS
    "g": bits_for(max(ALLOWED_GROUP_SIZES)),                # GROUP
    "k": bits_for(max(ALLOWED_GROUP_SIZES)),                # KEEP: values kept per full superblock
    "chunk_sbs": bits_for(1 << MAX_CHUNK_LOG),              # superblocks per chunk, 2^CHUNK
    "spec_pairs": K_MAX, "verif_pairs": K_MAX,              # pair masks
    "spec_tab": data.ArrayLayout(SYMBOL_BITS, K_MAX),       # speculation book: rank -> symbol
    "verif_tab": data.ArrayLayout(BF16_EXPONENT_BITS, K_MAX),
    "spec_q": GROUP_BITS, "verif_q": GROUP_BITS,            # groups Q of each book (the escape group)
    "spec_base": data.ArrayLayout(GROUP_BITS, K_MAX),       # rank of each group's first symbol
    "verif_base": data.ArrayLayout(GROUP_BITS, K_MAX),
    "q_p": GROUP_BITS,                                      # the group of the pruned mark P (15: none)
    "p_pruned": 1,                                          # codes of group q_p are pruned values
    "bad": 1,                                               # the config check fails (CONFIG at START)
    "no_book": 1,                                           # a book the mode needs is not loaded (NO_BOOK)
    "bad_books": 1,                                         # a pair mask or P's group is inconsistent (CONFIG)
})


def book_groups(m, k, pairs, name):
    """Groups of a book with pair mask ``pairs``: Q = K - popcount(pairs) and ``bad`` (a pair bit at q >= Q:
    the mask does not describe K symbols), registered from the registers every cycle, and the group bases
    b_q = q + popcount(pairs[0:q]) (a 15-entry table, combinational from the pair register)."""
    pc = popcounts(m, pairs, f"{name}_pc")
    q = Signal(range(K_MAX + 1), name=f"{name}_q")
    # the bases are combinational from the (registered) pair mask: its popcount tree (~12 levels) runs
    # beside the window / entry logic that selects among them (-104 FFs, -1.0 k GE)
    bases = Array(Signal(4, name=f"{name}_b{i}") for i in range(K_MAX))
    bad = Signal(name=f"{name}_pairs_bad")
    ok_q = Signal(5)
    m.d.comb += ok_q.eq(k - pc[K_MAX])
    m.d.sync += q.eq(ok_q[:4])
    over = pc[K_MAX] > k
    for i in range(K_MAX):
        m.d.comb += bases[i].eq(i + pc[i])
        over = over | (pairs[i] & (ok_q[:4] <= i))
    m.d.sync += bad.eq(over)
    return q, bases, bad


def pruned_group(m, r, spec_base):
    """The group of the pruned mark P in the speculation book (15: not in the book) and whether P sits in a
    pair group (a bad mask: CONFIG), registered in two steps from the registers (position, then group)."""
    idx_p = Signal(4, name="idx_p")                 # position of P in the symbol list (15: absent)
    ip = Const(K_MAX, 4)
    for i in reversed(range(K_MAX)):
        ip = Mux((r["spec_tab"][i] == PRUNED) & (i < r["spec_k"]), i, ip)
    m.d.sync += idx_p.eq(ip)
    q_p = Signal(4, name="q_p")
    p_paired = Signal(name="p_paired")
    before_p = Const(0, 4)
    paired = Const(0, 1)
    for i in range(K_MAX):
        pi = r["spec_pairs"][i]
        before_p = before_p + (pi & (spec_base[i] < idx_p))
        paired = paired | (pi & ((spec_base[i] == idx_p) | (spec_base[i] + 1 == idx_p)))
    m.d.sync += [q_p.eq(Mux(idx_p == K_MAX, K_MAX, idx_p - before_p)), p_paired.eq(paired & (idx_p != K_MAX))]
    return q_p, p_paired


class TensorRegisters(Format2Registers, C1RegisterFile, wiring.Component):
    """The tensor's registers and constants, shared by a decoder cluster.

    Parameters
        scheme   "c1" or "c2": which books the decoders read (C2 has no speculation book: its constants are
                 zero, SPEC_PAIRS is not a register, NO_BOOK and the pair checks look at the verification book
                 in full mode only)

    Ports
        cfg      In(stream {addr, data})  register writes (NUMEL and CTRL are the instances' and ignored here)
        accept   In(1)                    writes are taken (no instance is busy): ``cfg.ready``
        params   Out(TENSOR_PARAMS)       the tensor's registers and derived constants
    """

    def __init__(self, scheme: str = "c1"):
        if scheme not in SCHEMES:
            raise ConfigError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
        self.scheme = scheme
        self.PAIR_BOOKS = ("spec", "verif") if scheme == "c1" else ("verif",)
        super().__init__({"cfg": In(stream.Signature(cfg_layout)), "accept": In(1), "params": Out(TENSOR_PARAMS)})

    def elaborate(self, platform):
        m = Module()
        r = self._registers(m)
        start, clear = Signal(), Signal()         # CTRL is decoded by the instances
        m.d.comb += self.cfg.ready.eq(self.accept)
        self._write_registers(m, r, start, clear)
        r["numel"] = Const(1, CFG_DATA_BITS)      # NUMEL is checked per instance: not part of this check
        p = self.params
        full = r["full"]
        verif_q, verif_base, verif_pbad = book_groups(m, r["verif_k"], r["verif_pairs"], "verif")
        m.d.sync += p.chunk_sbs.eq(Const(1, 1) << r["chunk"])
        m.d.comb += [p.full.eq(full), p.m.eq(r["m"]), p.g.eq(r["g"]), p.k.eq(r["k"]),
                     p.verif_pairs.eq(r["verif_pairs"]), p.verif_q.eq(verif_q), p.bad.eq(self._config_error(r))]
        for i in range(K_MAX):
            m.d.comb += [p.verif_tab[i].eq(r["verif_tab"][i]), p.verif_base[i].eq(verif_base[i])]
        if self.scheme == "c2":
            m.d.comb += [p.q_p.eq(K_MAX), p.no_book.eq(full & ~r["verif_loaded"]), p.bad_books.eq(full & verif_pbad)]
            return m
        spec_q, spec_base, spec_pbad = book_groups(m, r["spec_k"], r["spec_pairs"], "spec")
        q_p, p_paired = pruned_group(m, r, spec_base)
        m.d.sync += p.p_pruned.eq(q_p != spec_q)
        m.d.comb += [p.spec_pairs.eq(r["spec_pairs"]), p.spec_q.eq(spec_q), p.q_p.eq(q_p),
                     p.no_book.eq(~r["spec_loaded"] | (full & ~r["verif_loaded"])),
                     p.bad_books.eq(spec_pbad | p_paired | (full & verif_pbad))]
        for i in range(K_MAX):
            m.d.comb += [p.spec_tab[i].eq(r["spec_tab"][i]), p.spec_base[i].eq(spec_base[i])]
        return m


class ClusterCore:
    """Mixin of a decoder cluster's core (a ``DecoderC1``-interface component with a ``params`` port): the
    registers an instance keeps, and the tensor's last-superblock keep count by a serial multiplier."""

    def _instance_control(self, m):
        """What an instance keeps of the register file: CTRL (START / CLEAR_ERROR), NUMEL, busy and the sticky
        error register with its raise vector (the tensor's registers come in on ``params``)."""
        cfg = self.cfg
        start, clear, busy = Signal(name="start"), Signal(name="clear"), Signal(name="busy")
        err, raise_err = Signal(ERROR_BITS, name="err"), Signal(ERROR_BITS, name="raise_err")
        numel = Signal(CFG_DATA_BITS, name="reg_numel")
        self._drive_control(m, busy, err)
        with m.If(cfg.valid & cfg.ready):
            with m.Switch(cfg.payload.addr):
                ctrl_register_case(m, start, clear, cfg.payload.data)
                with m.Case(Reg.NUMEL):
                    m.d.sync += numel.eq(cfg.payload.data)
        return start, clear, busy, err, raise_err, numel

    @staticmethod
    def _last_keep(m, go, numel, p):
        """Values the tensor's last superblock keeps, ceil(k * last_n / G) (FORMAT.md: ``kept_in``), by a serial
        multiplier taking ``KEEP_MUL_BITS`` bits of last_n a cycle from START (``go``) on, done before the first
        beat reaches D (no full multiplier per instance): ``(last_k, ready)``."""
        nb, rb = bits_for(GMAX), KEEP_MUL_BITS
        last_n = Signal(nb, name="k_last_n")
        m.d.comb += last_n.eq(((numel - 1) & (p.g - 1)) + 1)
        mul_a, mul_b = Signal(2 * nb, name="k_mul_a"), Signal(nb, name="k_mul_b")
        acc = Signal(2 * nb, name="k_acc")
        steps = -(-nb // rb)
        left = Signal(range(steps + 1), name="k_left")
        with m.If(go):
            m.d.sync += [mul_a.eq(p.k), mul_b.eq(last_n), acc.eq(0), left.eq(steps)]
        with m.Elif(left != 0):
            m.d.sync += [mul_a.eq(mul_a << rb), mul_b.eq(mul_b >> rb), left.eq(left - 1),
                         acc.eq(acc + mul_a * mul_b[:rb])]
        last_k = Signal(nb, name="k_last_k")
        rounded = acc + p.g - 1
        with m.Switch(p.g):
            for gv in ALLOWED_GROUP_SIZES:
                with m.Case(gv):
                    m.d.comb += last_k.eq(rounded >> exact_log2(gv))
        return last_k, (left == 0) & ~go

    @staticmethod
    def _sticky_errors(m, err, fault, raise_err, halt, start_err, clear, busy, stop):
        """The sticky error register: a datapath error (``raise_err``) is registered in ``fault`` and applied a
        cycle later with the pipeline halted (``halt``: ``err |= fault``, busy and the ``stop`` statements: the
        stages' valid flags); START's own errors are set at once; CLEAR_ERROR clears while idle."""
        m.d.sync += fault.eq(Mux(halt, 0, raise_err))
        with m.If(halt):
            m.d.sync += [err.eq(err | fault), busy.eq(0)] + stop
        with m.Elif(start_err.any()):
            m.d.sync += err.eq(err | start_err)
        with m.Elif(clear & ~busy):
            m.d.sync += err.eq(0)


def wrap_cluster_core(m, top, regs, core, ports):
    """``top`` (a decoder with its own register file) as a cluster of one: ``regs`` (a ``TensorRegisters``) and
    ``core`` (its ``ClusterCore``) share ``top.cfg``; the plane ``ports``, ``out`` and the status go through."""
    m.submodules.regs, m.submodules.core = regs, core
    for port in ports:
        wiring.connect(m, wiring.flipped(getattr(top, port)), getattr(core, port))
    wiring.connect(m, core.out, wiring.flipped(top.out))
    m.d.comb += [core.params.eq(regs.params), regs.accept.eq(~core.busy),
                 regs.cfg.payload.eq(top.cfg.payload), core.cfg.payload.eq(top.cfg.payload),
                 regs.cfg.valid.eq(top.cfg.valid), core.cfg.valid.eq(top.cfg.valid), top.cfg.ready.eq(core.cfg.ready),
                 top.busy.eq(core.busy), top.error.eq(core.error), top.error_code.eq(core.error_code)]

