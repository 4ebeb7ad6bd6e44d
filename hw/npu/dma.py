"""Multi-stream AXI4 read DMA of the NPU tile (docs/NPU.md "Memory path").

``S`` independent read streams share one AXI4 read channel (single ID, in-order responses, INCR bursts of
``data_bytes``-byte beats). A stream is programmed with a start address and a word count (``load``); the DMA
then fetches its words in bursts and delivers them, in order, on that stream's output FIFO.

Design
  * Credit by reservation: a burst for stream ``s`` is issued only when ``s``'s FIFO has room for every beat
    already in flight for it plus the new burst (``room = depth - level - inflight``). R data therefore never
    waits: ``rready`` is tied high and the memory sees a master that always drains.
  * Burst length = min(``burst``, words left, words to the next 4 KiB boundary): AXI4 forbids a burst that
    crosses one.
  * One AR register; the next request is chosen by a rotating-priority arbiter among the eligible streams the
    cycle the register is empty or handing its request over, so back-to-back ARs go out one per cycle. An
    optional ``priority`` stream goes first whenever it is eligible (the tile's activations: a pass cannot
    compute before they are in, while the plane streams only need to stay ahead).
  * A stream sustains at most fifo_depth / (latency + burst) words per cycle (its reserved room bounds what
    it has in flight), which sets the FIFO depth for a memory latency (docs/NPU.md "Sizing").
  * A tag FIFO records the stream of each issued burst; R beats go to the FIFO of the tag at its head, which
    is popped on ``rlast``. At most ``max_outstanding`` bursts are in flight (the tag FIFO's depth).

Recurrences closing in one cycle: the AR register's load (eligible -> rotating priority encoder -> the chosen
stream's address / count update), ~S-input priority + a 40-bit adder.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ...errors import ConfigError

ADDR_BITS = 40
PAGE = 4096                      # AXI4: a burst never crosses a 4 KiB boundary
WORDS_BITS = 32
DATA_BYTES = (4, 8, 16, 32, 64)


def check_port(component, who: str, data_bytes, burst=None) -> None:
    """The AXI port parameters every NPU block checks: ``data_bytes`` per beat, ``burst`` beats within 4 KiB."""
    if data_bytes not in DATA_BYTES:
        component._MustUse__silence = True     # a rejected configuration is not an unused design
        raise ConfigError(f"{who} data_bytes must be 4, 8, 16, 32 or 64, got {data_bytes!r}")
    if burst is not None and (not isinstance(burst, int) or not 1 <= burst <= 256 or burst * data_bytes > PAGE):
        component._MustUse__silence = True
        raise ConfigError(f"{who} burst must be 1..256 beats within 4 KiB, got {burst!r}")


def burst_beats(m, name: str, beat_addr, left, burst: int, data_bytes: int):
    """Beats of the next burst of a region at beat address ``beat_addr`` with ``left`` beats to go:
    min(burst, left, beats to the next 4 KiB boundary)."""
    page_beats = PAGE // data_bytes
    to_page = Signal(range(page_beats + 1), name=f"{name}_to_page")
    m.d.comb += to_page.eq(page_beats - beat_addr[:exact_log2(page_beats)])
    lim = Mux(left < burst, left[:bits_for(burst)], burst)
    beats = Signal(range(burst + 1), name=f"{name}_blen")
    m.d.comb += beats.eq(Mux(to_page < lim, to_page, lim))
    return beats


def rotating_pick(m, name: str, requests, rr):
    """The first set bit of ``requests`` at or after position ``rr``, wrapping (a rotating-priority arbiter's
    choice; meaningful when any bit is set)."""
    n = len(requests)
    rot = Signal(2 * n, name=f"{name}_rotated")
    m.d.comb += rot.eq(Cat(requests, requests) >> rr)
    offset = Signal(range(n), name=f"{name}_offset")
    for j in reversed(range(n)):
        with m.If(rot[j]):
            m.d.comb += offset.eq(j)
    wrap = Signal(range(2 * n), name=f"{name}_wrap")
    m.d.comb += wrap.eq(rr + offset)
    pick = Signal(range(n), name=name)
    m.d.comb += pick.eq(Mux(wrap >= n, wrap - n, wrap))
    return pick


class ReadDma(wiring.Component):
    """``streams`` read streams over one AXI4 read master of ``data_bytes``-byte beats.

    Ports
        load, load_sel, load_addr, load_words   program stream ``load_sel`` (address aligned to data_bytes,
                                                words to fetch) with a one-cycle ``load``; a stream loaded
                                                while active is restarted (the tile never does that)
        out[s]           stream of data_bytes*8-bit words of stream s, in address order
        active           bit s: stream s has words to request or in flight
        ar_*, r_*        the AXI4 read address / data channels (len = beats - 1, size = log2 data_bytes)
        rresp_err        sticky: a beat came back with RRESP != OKAY
    """

    def __init__(self, streams: int, data_bytes: int = 8, burst: int = 16, fifo_depth: int = 64,
                 max_outstanding: int = 16, priority: int | None = None):
        if not isinstance(streams, int) or not 1 <= streams <= 64:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"ReadDma streams must be 1..64, got {streams!r}")
        check_port(self, "ReadDma", data_bytes, burst)
        if not isinstance(fifo_depth, int) or fifo_depth < burst:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"ReadDma fifo_depth must be >= burst ({burst}), got {fifo_depth!r}")
        if priority is not None and not (isinstance(priority, int) and 0 <= priority < streams):
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"ReadDma priority must be a stream index, got {priority!r}")
        if not isinstance(max_outstanding, int) or max_outstanding < 1:
            self._MustUse__silence = True     # a rejected configuration is not an unused design
            raise ConfigError(f"ReadDma max_outstanding must be >= 1, got {max_outstanding!r}")
        self.streams, self.data_bytes, self.burst = streams, data_bytes, burst
        self.fifo_depth, self.max_outstanding, self.priority = fifo_depth, max_outstanding, priority
        dw = 8 * data_bytes
        super().__init__({
            "load": In(1), "load_sel": In(range(streams)), "load_addr": In(ADDR_BITS), "load_words": In(WORDS_BITS),
            "out": Out(stream.Signature(dw)).array(streams),
            "active": Out(streams),
            "ar_addr": Out(ADDR_BITS), "ar_len": Out(8), "ar_valid": Out(1), "ar_ready": In(1),
            "r_data": In(dw), "r_resp": In(2), "r_last": In(1), "r_valid": In(1), "r_ready": Out(1),
            "rresp_err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        S, W, B, D = self.streams, self.data_bytes, self.burst, self.fifo_depth
        lw = exact_log2(W)

        # ---- per-stream state: next address (in words), words left to request, beats in flight
        addr = [Signal(ADDR_BITS - lw, name=f"s{s}_word_addr") for s in range(S)]
        left = [Signal(WORDS_BITS, name=f"s{s}_words_left") for s in range(S)]
        inflight = [Signal(range(D + 1), name=f"s{s}_inflight") for s in range(S)]
        fifos = []
        for s in range(S):
            f = SyncFIFOBuffered(width=8 * W, depth=D)
            m.submodules[f"fifo{s}"] = f
            fifos.append(f)
            m.d.comb += [self.out[s].payload.eq(f.r_data), self.out[s].valid.eq(f.r_rdy), f.r_en.eq(self.out[s].ready)]

        # ---- burst lengths and eligibility
        blen = [burst_beats(m, f"s{s}", addr[s], left[s], B, W) for s in range(S)]
        elig = Signal(S)
        for s in range(S):
            room = Signal(range(-D - 1, D + 1), name=f"s{s}_room")
            m.d.comb += room.eq(D - fifos[s].level - inflight[s])
            m.d.comb += elig[s].eq((left[s] != 0) & (room >= blen[s]))

        # ---- outstanding bursts (tag FIFO of stream ids, in AR order)
        tags = SyncFIFOBuffered(width=bits_for(S - 1) or 1, depth=self.max_outstanding)
        m.submodules.tags = tags

        # ---- AR register and the rotating-priority choice
        ar_full = Signal(name="ar_reg_full")
        ar_sel = Signal(range(S), name="ar_reg_stream")
        rr = Signal(range(S), name="ar_rr")
        handoff = ar_full & self.ar_ready
        can_load = (~ar_full | handoff) & tags.w_rdy
        any_e = elig.any()
        pick = rotating_pick(m, "ar_pick", elig, rr)
        if self.priority is not None:                   # the priority stream goes first when eligible
            with m.If(elig[self.priority]):
                m.d.comb += pick.eq(self.priority)
        issue = can_load & any_e
        m.d.comb += [self.ar_valid.eq(ar_full), self.r_ready.eq(1)]
        with m.If(handoff):
            m.d.sync += ar_full.eq(0)
        with m.If(issue):
            m.d.sync += [ar_full.eq(1), ar_sel.eq(pick), rr.eq(Mux(pick == S - 1, 0, pick + 1))]
            for s in range(S):
                with m.If(pick == s):
                    m.d.sync += [self.ar_addr.eq(Cat(Const(0, lw), addr[s])), self.ar_len.eq(blen[s] - 1)]
        m.d.comb += [tags.w_en.eq(issue), tags.w_data.eq(pick)]

        # ---- R channel: beats to the FIFO of the head tag
        r_fire = self.r_valid & self.r_ready
        head = tags.r_data
        m.d.comb += tags.r_en.eq(r_fire & self.r_last)
        with m.If(r_fire & (self.r_resp != 0)):
            m.d.sync += self.rresp_err.eq(1)
        for s in range(S):
            m.d.comb += [fifos[s].w_data.eq(self.r_data), fifos[s].w_en.eq(r_fire & (head == s))]

        # ---- per-stream updates (reservation on issue, one beat delivered per R beat)
        for s in range(S):
            got = r_fire & (head == s)
            took = issue & (pick == s)
            m.d.sync += inflight[s].eq(inflight[s] + Mux(took, blen[s], 0) - got)
            with m.If(self.load & (self.load_sel == s)):
                m.d.sync += [addr[s].eq(self.load_addr[lw:]), left[s].eq(self.load_words)]
            with m.Elif(took):
                m.d.sync += [addr[s].eq(addr[s] + blen[s]), left[s].eq(left[s] - blen[s])]
            m.d.comb += self.active[s].eq((left[s] != 0) | (inflight[s] != 0))
        return m
