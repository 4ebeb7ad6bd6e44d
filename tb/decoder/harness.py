"""cocotb harness of the C1 and C2 decoders: agents on every port (docs/HARDWARE.md sections 2 / 2a), the
bit-exact scoreboard on every output value, protocol checks on every beat and decoder coverage. The scheme
comes from the configuration's block (``decoder_c1`` / ``decoder_c2``, hw/configs.py CONFIG_INFO)."""
from __future__ import annotations

from collections import deque

import numpy as np

from cassandra_rtl.tb.common.stream import MAX_OFF_RUN, PROFILES, Sink, Source
from cassandra_rtl.tb.decoder import framing as F


def bits_for(n: int) -> int:
    return max(1, int(n).bit_length())


class _PortStatus:
    """busy / error / error_code from the block's own ports."""

    def __init__(self, dut):
        self.dut = dut

    def busy(self) -> int:
        return int(self.dut.busy.value)

    def error(self) -> int:
        return int(self.dut.error.value)

    def error_code(self) -> int:
        return int(self.dut.error_code.value)


class Tensor:
    def __init__(self, enc, full: bool, check: bool = True):
        self.enc, self.full, self.check = enc, full, check
        self.n = enc.numel
        self.sb_ends = F.superblock_ends(enc)
        self.pos = 0
        self.sb = 0          # current superblock


class DecoderHarness:
    """``cfg_agent(pacer, cov)``: the register-write agent (default: a Source on the ``cfg`` stream; the AXI4-Lite
    bench passes its bus master); ``status``: an object with ``busy()``, ``error()``, ``error_code()`` (default:
    the block's ports)."""

    def __init__(self, dut, ctx, profiles: dict | str | None = None, cfg_agent=None, status=None):
        p = ctx.params
        self.dut, self.ctx = dut, ctx
        self.L, self.IW = int(p["lanes"]), int(p["word"])
        self.cb = bits_for(self.L)
        self.scheme = F.decoder_scheme(p)
        self.layout = p.get("layout", F.FORMAT_3)        # the planes' layout (tensors are framed in it)
        ports = list(F.ports(self.scheme).values())
        rng = ctx.rng
        if profiles is None:
            profiles = {}
        elif isinstance(profiles, str):
            profiles = {k: profiles for k in ("cfg", *ports, "out")}
        prof = {k: profiles.get(k, rng.choice(PROFILES)) for k in ("cfg", *ports, "out")}
        self.profiles = prof
        cov = ctx.cov
        IW = self.IW
        # verif_word / code_word: narrower verification / speculation code ports (hw/configs.py CONFIG_INFO)
        self.port_words = {port: int(p.get("verif_word") or IW) if port.startswith("verif")
                           else int(p.get("code_word") or IW) if port == "spec_codes" else IW for port in ports}
        self.cfg = (Source(dut, "cfg", ctx.pacer(prof["cfg"]), cov, encode=lambda aw: aw[0] | (aw[1] << 8))
                    if cfg_agent is None else cfg_agent(ctx.pacer(prof["cfg"]), cov))
        self.status = status or _PortStatus(dut)
        self.planes = {port: Source(dut, port, ctx.pacer(prof[port]), cov,
                                    encode=lambda w, iw=self.port_words[port]: w[0] | (w[1] << iw))
                       for port in ports}
        self.out = Sink(dut, "out", ctx.pacer(prof["out"]), self._beat, cov)
        self.sb = ctx.scoreboard("decoder")
        self.tensors: deque[Tensor] = deque()
        self.error_seen = 0
        self.beats_after_error = 0
        self.engine = ctx.engine([self.cfg, *self.planes.values(), self.out], watchers=[self._watch])
        L = self.L
        self.fill_point = f"dec.lane_fill_L{L}"
        cov.define(self.fill_point, range(1, L + 1))
        cov.define("dec.beat", ["full", "short", "sb_end", "last"])
        if self.scheme == "c1":
            cov.define("dec.spec_rank", [*range(15), "esc"])
            cov.define("dec.spec_K_with_escape", range(16))
        cov.define("dec.verif_rank", [*range(15), "esc"])
        cov.define("dec.mode", ["draft", "full"])
        cov.define("dec.mbits", range(8))
        cov.define("dec.group", [32, 64, 128, 256])
        cov.define("dec.keep", ["all", "one", "partial"])
        cov.define("dec.last_sb", ["full", "partial"])
        cov.define("dec.value_class", ["zero", "subnormal", "normal", "inf", "nan", "pruned"])
        cov.define("dec.stall_all_inputs", ["yes"])
        cov.define("dec.out_stall_while_valid", ["yes"])
        if self.scheme == "c2":
            # C2-specific events (docs/HARDWARE.md 2a): draft-zero lanes (pruned / elem = 0 / elem = 0 of a
            # subnormal), subnormal drafts (draft exponent 0 from a normal or subnormal input), X = 0
            # blocks, c < 0 (every mantissa bit cut), escapes of delta codes, MX block headers (with keep bits,
            # without at k = G) and the header step of each chunk's first block
            cov.define("c2.lane", ["kept_nonzero", "pruned", "elem_zero", "subnormal_draft", "x_zero",
                                   "c_negative"])
            cov.define("c2.header", ["no_keep_bits", "keep_bits", "chunk_header_step"])
            cov.define("c2.verif_K_with_escape", range(16))

    # ----------------------------------------------------------------------------------------- monitors
    def _watch(self):
        err = self.status.error()
        if err:
            self.error_seen += 1
        ins = [s for s in self.planes.values() if s.cur is not None]
        if ins and all(not int(s.ready.value) for s in ins):
            self.ctx.cov.hit("dec.stall_all_inputs", "yes")
        if self.out._r == 0 and int(self.out.valid.value):
            self.ctx.cov.hit("dec.out_stall_while_valid", "yes")

    def _violation(self, msg):
        st = self.status
        self.sb._report(f"decoder protocol: {msg} (cycle {self.engine.cycles}, error={st.error()}, "
                        f"error_code=0x{st.error_code():02x}, busy={st.busy()})")

    def _beat(self, payload: int):
        L, cb = self.L, self.cb
        count = (payload >> (16 * L)) & ((1 << cb) - 1)
        sb_end = (payload >> (16 * L + cb)) & 1
        last = (payload >> (16 * L + cb + 1)) & 1
        lanes = [(payload >> (16 * i)) & 0xFFFF for i in range(L)]
        cov = self.ctx.cov
        if self.error_seen:
            self.beats_after_error += 1
        if not self.tensors:
            self._violation(f"beat with no tensor outstanding (count={count})")
            return
        t = self.tensors[0]
        if not 1 <= count <= L:
            self._violation(f"beat count {count} outside 1..{L}")
            return
        if any(lanes[count:]):
            self._violation(f"unused lanes not zero: count={count} lanes={[hex(x) for x in lanes]}")
        if t.check:
            self.sb.check(lanes[:count], where=f"tensor value {t.pos}")
        cov.hit(self.fill_point, count)
        new = t.pos + count
        end = int(t.sb_ends[t.sb])
        if new > end:
            self._violation(f"beat crosses superblock {t.sb} (values {t.pos}..{new}, sb ends at {end})")
        want_sb_end = new == end
        if bool(sb_end) != want_sb_end:
            self._violation(f"sb_end={sb_end} at value {new} (superblock {t.sb} ends at {end})")
        if bool(last) != (new == t.n):
            self._violation(f"last={last} at value {new} of {t.n}")
        cov.hit("dec.beat", "last" if last else "sb_end" if want_sb_end else "full" if count == L else "short")
        t.pos = new
        if new >= end:
            t.sb += 1
        if last or new >= t.n:
            self.tensors.popleft()

    # ------------------------------------------------------------------------------------------ stimulus
    def cover_tensor(self, enc, full: bool, values: np.ndarray):
        cov, c = self.ctx.cov, enc.config
        cov.hit("dec.mode", "full" if full else "draft")
        cov.hit("dec.mbits", c.mantissa_bits)
        cov.hit("dec.group", c.group_size)
        cov.hit("dec.keep", "all" if c.keep_count == c.group_size else "one" if c.keep_count == 1 else "partial")
        cov.hit("dec.last_sb", "full" if enc.numel % c.group_size == 0 else "partial")
        if self.scheme == "c2":
            self._cover_c2(enc, full, values)
            return
        ranks = F.code_ranks(enc, full)
        for name, r in ranks.items():
            K = enc.spec_book.K if name == "spec" else enc.verif_book.K
            hist = np.bincount(r, minlength=16)
            for rank, n in enumerate(hist):
                if n:
                    cov.hit(f"dec.{name}_rank", "esc" if rank == K else rank, int(n))
            if name == "spec" and hist[K]:
                cov.hit("dec.spec_K_with_escape", K)
        self._cover_value_classes(values)
        if c.prunes:
            cov.hit("dec.value_class", "pruned", int((ranks["spec"] == enc.spec_book.rank_table()[256]).sum()))

    def _cover_value_classes(self, values: np.ndarray):
        """dec.value_class bins of the decoded bf16 values (both schemes)."""
        v = values.astype(np.int64)
        e, f = (v >> 7) & 0xFF, v & 0x7F
        cls = np.where(e == 255, np.where(f == 0, 3, 4), np.where(e == 0, np.where(f == 0, 0, 1), 2))
        for i, name in enumerate(["zero", "subnormal", "normal", "inf", "nan"]):
            n = int((cls == i).sum())
            if n:
                self.ctx.cov.hit("dec.value_class", name, n)

    def _cover_c2(self, enc, full: bool, values: np.ndarray):
        cov, c = self.ctx.cov, enc.config
        self._cover_value_classes(values)
        ln = F.c2_lanes(enc)
        kept, dz, elem = ln["kept"], ln["draft_zero"], ln["elem"]
        draft = F.expected(enc, False).astype(np.int64)
        for name, mask in (("kept_nonzero", kept & ~dz), ("pruned", ~kept), ("elem_zero", kept & (elem == 0)),
                           ("subnormal_draft", kept & ~dz & (((draft >> 7) & 0xFF) == 0)),
                           ("x_zero", ln["X"] == 0), ("c_negative", kept & (ln["c"] < 0))):
            n = int(mask.sum())
            if n:
                cov.hit("c2.lane", name, n)
        if (~kept).any():
            cov.hit("dec.value_class", "pruned", int((~kept).sum()))
        G, N = c.group_size, enc.numel
        nfull, tail = divmod(N, G)
        blocks = nfull * (G // 32) + -(-tail // 32)            # MX blocks of 32 values, one header each
        cov.hit("c2.header", "keep_bits" if c.prunes else "no_keep_bits", blocks)
        cov.hit("c2.header", "chunk_header_step", -(-enc.nsb // c.chunk_superblocks))
        if full:
            K = enc.verif_book.K
            hist = np.bincount(ln["verif_rank"], minlength=16)
            for rank, n in enumerate(hist):
                if n:
                    cov.hit("dec.verif_rank", "esc" if rank == K else rank, int(n))
            if hist[K]:
                cov.hit("c2.verif_K_with_escape", K)

    def submit(self, enc, full: bool, books: bool = True, check: bool = True, planes=None, prog=None):
        """Queue one tensor: register writes, plane words (``planes`` overrides, for malformed streams)."""
        exp = F.expected(enc, full) if check else None
        if check:
            self.sb.expect(exp)
            self.cover_tensor(enc, full, exp)
        self.tensors.append(Tensor(enc, full, check))
        self.cfg.send(prog if prog is not None else F.program(enc, full, books=books))
        pw = planes if planes is not None else self.plane_words(enc, full)
        for port, chunks in pw.items():
            self.planes[port].send(w for ch in chunks for w in ch)

    def plane_words(self, enc, full: bool) -> dict:
        """The words each plane port gets for ``enc``, framed in the decoder's plane layout."""
        return F.plane_words(F.framed(enc, self.layout), full, self.port_words)

    def inputs_idle(self) -> bool:
        return self.cfg.idle and all(s.idle for s in self.planes.values())

    def budget(self) -> int:
        words = sum(len(s.queue) for s in self.planes.values()) + len(self.cfg.queue)
        vals = sum(t.n - t.pos for t in self.tensors)
        return 200 + 40 * (words + vals // self.L + len(self.tensors) * 64)

    async def drain(self, what="decode"):
        """Run until every queued tensor came out completely and the decoder is idle again."""
        await self.engine.run_until(lambda: not self.tensors and self.inputs_idle(), self.budget(), what)
        # busy drops a cycle after the last beat; a status polled over a paced bus (the AXI4-Lite bench) sees it
        # after a poll's address and data phases, each of which a bursty pacer may hold for MAX_OFF_RUN cycles
        await self.engine.run_until(lambda: not self.status.busy(), 64 + 2 * MAX_OFF_RUN,
                                    f"{what}: busy after last beat")
        if self.error_seen:
            raise AssertionError(f"{what}: error output rose (error_code=0x{self.status.error_code():02x})")

    async def write(self, regs):
        self.cfg.send(regs)
        await self.engine.run_until(lambda: self.cfg.idle, 100 + 40 * len(regs), "register writes")

    async def run(self, items, sequential: bool = False):
        """items: (enc, full); back-to-back (all queued at once) unless ``sequential``."""
        for enc, full in items:
            self.submit(enc, full)
            if sequential:
                await self.drain()
        await self.drain()

    def reset_agents(self):
        self.cfg.reset()
        for s in self.planes.values():
            s.reset()
        self.out.reset()
        self.tensors.clear()
        self.sb.expected.clear()
        self.error_seen = 0
        self.beats_after_error = 0
