"""Plane framing between the NPU tile's read DMA and the plane decoders.

The read DMA hands over aligned ``W``-byte memory words (byte 0 = the lowest address = data bits [7:0]).
A decoder takes each plane as ``IW``-bit words framed per chunk (docs/HARDWARE.md "Input words";
``tb.bulk.frame_plane`` / ``hw.simutil.chunk_words``): chunk ``c`` of ``nb`` bytes becomes
``max(1, ceil(nb / (IW / 8)))`` words, its bytes LSB first, the last word zero-padded and flagged ``last``.
In memory the chunks of a plane lie back to back, byte-packed, and a decoder's range of chunks starts at
any byte address, so the DMA's first word carries ``skip = addr % W`` bytes before the range and its last
word may carry bytes after it.

``ByteFramer``  memory words + chunk lengths -> framed plane words (one word a cycle in and out).
``U16Unpack``   memory words of little-endian u16s (a chunk-length table at a W-aligned address) -> one u16
                a cycle, the lengths ``ByteFramer.lens`` takes.

ByteFramer structure: a byte buffer of ``buf_bytes = W + 2 * O`` bytes (``O`` = output word bytes) with a
byte count. A memory word is written at the count (a byte-granular left shift by ``count - skip`` that
depends on registers only; the head word's ``skip`` bytes land below the count and are overwritten by the
buffer's bytes there), an output word is the buffer's first ``O`` bytes with the bytes past the chunk's end
zeroed, and taking it shifts the buffer right by the bytes it held (a byte-granular right shift by
0..``O``). ``inp.ready``, ``lens.ready`` and ``out.valid`` are functions of registers only.

* A word is accepted while the buffer has room for it (``count <= buf_bytes - W``) and the range still
  owes bytes: ``bytes_owed = skip + (lengths read so far) - W * (words accepted)``. The framer thus takes
  exactly ``ceil((skip + sum(lens)) / W)`` words, what the DMA delivers for the range, and never a word of
  the next range. With ``buf_bytes >= W + 2 * O - 1`` a refused word never starves the output: a refusal
  means more than ``buf_bytes - W`` bytes are buffered, so after taking one word at least ``O`` remain.
* Chunk lengths are read up to ``len_depth = 4`` ahead of the chunk being framed (``len_queue``), so
  their bytes are requested early and the next chunk is loaded in the cycle its predecessor's last word
  is taken: no bubble at chunk boundaries, a chunk may take one output cycle (a zero-length chunk: one
  zero word with ``last``). The depth bounds how far the input runs ahead across short chunks: with
  ``W < O`` (input-bound on long chunks, output-bound on short ones) two queued lengths lost 3-7 % of the
  input cycles on a random mix of lengths, four lose 0.5-2 %, eight 0.2-1.5 % (tests/test_npu_framer.py's
  mix, 150 chunks).
* Latency: a ``start`` in cycle 0 with ``lens`` and ``inp`` valid gives ``out.valid`` in cycle 3 (lengths
  read in cycle 1, the first word in cycle 2 at the latest, the chunk loaded at the end of cycle 2).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...errors import ConfigError
from ..bitreader import word_layout

BYTE = 8


def _pow2_in(value, lo: int, hi: int) -> bool:
    return isinstance(value, int) and lo <= value <= hi and value & (value - 1) == 0


def shift_left_bytes(m: Module, vec, amount, nbytes: int, name: str) -> Signal:
    """``(vec << 8 * amount)`` truncated to ``nbytes`` bytes: a log shifter whose stages move whole bytes."""
    cur = vec
    for b in range(len(amount)):
        step = (1 << b) * BYTE
        width = min(len(cur) + step, nbytes * BYTE)
        nxt = Signal(width, name=f"{name}_s{b}")
        m.d.comb += nxt.eq(Mux(amount[b], Cat(Const(0, step), cur)[:width], cur))
        cur = nxt
    out = Signal(nbytes * BYTE, name=name)
    m.d.comb += out.eq(cur)
    return out


def shift_right_bytes(m: Module, vec, amount, name: str) -> Signal:
    """``vec >> 8 * amount`` (zero bytes shifted in), as wide as ``vec``: stages that move whole bytes."""
    cur = vec
    n = len(vec)
    for b in range(len(amount)):
        step = (1 << b) * BYTE
        shifted = Cat(cur[step:], Const(0, step)) if step < n else Const(0, n)
        nxt = Signal(n, name=f"{name}_s{b}")
        m.d.comb += nxt.eq(Mux(amount[b], shifted, cur))
        cur = nxt
    return cur


class ByteFramer(wiring.Component):
    """Aligned ``in_bytes``-byte memory words of a run of chunks -> the chunks framed as ``out_bits``-bit
    plane words.

    Ports
        inp      In(stream 8 * in_bytes)      aligned memory words from the DMA
        lens     In(stream 16)                the chunks' byte lengths, one per chunk, in order
        start    In(1)                        one-cycle pulse (ignored while busy), samples:
        skip     In(range(in_bytes))            bytes of the first word before the range (addr % in_bytes)
        nchunks  In(32)                         chunks in the range; 0: nothing to do (busy stays low)
        out      Out(stream {data: out_bits, last: 1})  ``frame_plane``'s words of the chunks
        busy     Out(1)                       from the cycle after ``start`` until the last chunk's last word
                                              was taken (and, in the one case where no chunk byte is in it,
                                              the range's only word was taken: all lengths 0 and skip > 0)

    The framer takes exactly ``ceil((skip + sum(lens)) / in_bytes)`` input words for a range (none when
    nchunks = 0); the rest of the final word after the range is discarded.
    """

    def __init__(self, in_bytes: int, out_bits: int):
        if not _pow2_in(in_bytes, 4, 64) or not _pow2_in(out_bits, 16, 512):
            self._MustUse__silence = True        # a rejected configuration is not an "unused" design
            raise ConfigError(f"ByteFramer(in_bytes={in_bytes!r}, out_bits={out_bits!r}): in_bytes must be a "
                              f"power of two in 4..64 and out_bits a power of two in 16..512")
        self.in_bytes = in_bytes
        self.out_bits = out_bits
        self.out_bytes = out_bits // BYTE
        self.buf_bytes = in_bytes + 2 * self.out_bytes
        self.len_depth = 4
        super().__init__({
            "inp": In(stream.Signature(BYTE * in_bytes)),
            "lens": In(stream.Signature(16)),
            "start": In(1),
            "skip": In(range(in_bytes)),
            "nchunks": In(32),
            "out": Out(stream.Signature(word_layout(out_bits))),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, O, B = self.in_bytes, self.out_bytes, self.buf_bytes

        busy = Signal(name="busy_r")
        chunks_left = Signal(32)                 # chunks whose last word was not taken yet
        lens_to_read = Signal(32)                # lengths not read from `lens` yet
        D = self.len_depth
        len_queue = [Signal(16, name=f"len_queue{i}") for i in range(D)]   # lengths read ahead, oldest first
        len_queue_count = Signal(range(D + 1))
        chunk_loaded = Signal()                  # chunk_rem holds the chunk being framed
        chunk_rem = Signal(16)                   # its bytes not yet sent
        # skip + lengths read - W * words accepted: in 1 - W .. W + (D + 1) * 65535 (the bytes of the chunk
        # being framed and the queued ones, at most; a chunk is done only once its bytes came in)
        owed_shape = signed((W + (D + 1) * 0xFFFF).bit_length() + 1)
        bytes_owed = Signal(owed_shape)
        head_skip = Signal(range(W))             # bytes to drop from the next word (the range's first word)
        buf = Signal(B * BYTE)                   # buffered bytes, the oldest in bits [7:0]
        buf_count = Signal(range(B + 1))         # bytes held in buf

        m.d.comb += self.busy.eq(busy)

        # ---- output word: the first O bytes, bytes past the chunk's end zeroed
        chunk_last = Signal()
        word_bytes = Signal(range(O + 1))        # chunk bytes in the word being offered
        m.d.comb += [chunk_last.eq(chunk_rem <= O),
                     word_bytes.eq(Mux(chunk_last, chunk_rem, O))]
        m.d.comb += [
            self.out.valid.eq(busy & chunk_loaded & (buf_count >= word_bytes)),
            self.out.payload.data.eq(Cat(*[Mux(word_bytes > i, buf[i * BYTE:(i + 1) * BYTE], 0)
                                           for i in range(O)])),
            self.out.payload.last.eq(chunk_last),
        ]
        out_fire = Signal()
        taken_bytes = Signal(range(O + 1))
        m.d.comb += [out_fire.eq(self.out.valid & self.out.ready),
                     taken_bytes.eq(Mux(out_fire, word_bytes, 0))]
        chunk_done = Signal()
        m.d.comb += chunk_done.eq(out_fire & chunk_last)

        # ---- input word: written at buf_count - head_skip; bytes below buf_count keep the buffer's
        m.d.comb += self.inp.ready.eq(busy & (bytes_owed > 0) & (buf_count <= B - W))
        in_fire = Signal()
        m.d.comb += in_fire.eq(self.inp.valid & self.inp.ready)
        place = Signal(range(B + W + 1))         # the word's byte position + W (never negative)
        m.d.comb += place.eq(buf_count + W - head_skip)
        placed = shift_left_bytes(m, self.inp.payload, place, B + W, "word_placed")
        merged = Signal(B * BYTE)
        m.d.comb += merged.eq(Cat(*[Mux(in_fire & (buf_count <= i),
                                        placed[(W + i) * BYTE:(W + i + 1) * BYTE],
                                        buf[i * BYTE:(i + 1) * BYTE]) for i in range(B)]))
        buf_next = shift_right_bytes(m, merged, taken_bytes, "buf_next")
        m.d.sync += [buf.eq(buf_next),
                     buf_count.eq(buf_count + Mux(in_fire, W - head_skip, 0) - taken_bytes)]
        with m.If(in_fire):
            m.d.sync += head_skip.eq(0)

        # ---- chunk lengths: read up to D ahead into len_queue, the head loaded as its predecessor ends
        m.d.comb += self.lens.ready.eq(busy & (lens_to_read != 0) & (len_queue_count != D))
        len_fire = Signal()
        m.d.comb += len_fire.eq(self.lens.valid & self.lens.ready)
        load_chunk = Signal()                    # the queue's head becomes the chunk being framed
        m.d.comb += load_chunk.eq((~chunk_loaded | chunk_done) & (len_queue_count != 0))
        len_write_at = Signal(range(D + 1))
        m.d.comb += len_write_at.eq(len_queue_count - load_chunk)
        for i in range(D):
            kept = Mux(load_chunk, len_queue[i + 1] if i + 1 < D else 0, len_queue[i])
            m.d.sync += len_queue[i].eq(Mux(len_fire & (len_write_at == i), self.lens.payload, kept))
        m.d.sync += len_queue_count.eq(len_write_at + len_fire)
        with m.If(len_fire):
            m.d.sync += lens_to_read.eq(lens_to_read - 1)
        with m.If(load_chunk):
            m.d.sync += [chunk_rem.eq(len_queue[0]), chunk_loaded.eq(1)]
        with m.Elif(chunk_done):
            m.d.sync += chunk_loaded.eq(0)
        with m.Elif(out_fire):
            m.d.sync += chunk_rem.eq(chunk_rem - word_bytes)

        # ---- bytes owed and the end of the range
        owed_next = Signal(owed_shape)
        chunks_left_next = Signal(32)
        m.d.comb += [owed_next.eq(bytes_owed + Mux(len_fire, self.lens.payload, 0) - Mux(in_fire, W, 0)),
                     chunks_left_next.eq(chunks_left - chunk_done)]
        m.d.sync += [bytes_owed.eq(owed_next), chunks_left.eq(chunks_left_next)]
        with m.If(busy & (chunks_left_next == 0) & (owed_next <= 0)):
            # the range is complete: drop what is left of its last word
            m.d.sync += [busy.eq(0), buf_count.eq(0), chunk_loaded.eq(0), len_queue_count.eq(0)]

        with m.If(~busy & self.start & (self.nchunks != 0)):
            m.d.sync += [busy.eq(1), chunks_left.eq(self.nchunks), lens_to_read.eq(self.nchunks),
                         bytes_owed.eq(self.skip), head_skip.eq(self.skip), buf_count.eq(0),
                         chunk_loaded.eq(0), len_queue_count.eq(0)]
        return m


class U16Unpack(wiring.Component):
    """Aligned ``in_bytes``-byte memory words of little-endian u16s -> one u16 a cycle.

    Ports
        inp    In(stream 8 * in_bytes)   aligned memory words, the table's first u16 in bits [15:0]
        start  In(1)                     one-cycle pulse (ignored while busy), samples:
        count  In(32)                    u16s to emit; 0: nothing to do (busy stays low)
        out    Out(stream 16)            the u16s in address order
        busy   Out(1)                    from the cycle after ``start`` until the last u16 was taken

    Takes exactly ``ceil(count / (in_bytes / 2))`` words; the rest of the last one is dropped. A word is
    read ahead into ``next_word`` while ``cur_word`` is emitted, so the output runs one u16 a cycle with
    ``inp.ready`` a function of registers only; a ``start`` in cycle 0 gives ``out.valid`` in cycle 2.
    """

    def __init__(self, in_bytes: int):
        if not _pow2_in(in_bytes, 4, 64):
            self._MustUse__silence = True
            raise ConfigError(f"U16Unpack(in_bytes={in_bytes!r}): in_bytes must be a power of two in 4..64")
        self.in_bytes = in_bytes
        self.lanes = in_bytes // 2
        super().__init__({
            "inp": In(stream.Signature(BYTE * in_bytes)),
            "start": In(1),
            "count": In(32),
            "out": Out(stream.Signature(16)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        L = self.lanes

        busy = Signal(name="busy_r")
        values_left = Signal(32)                 # u16s not yet taken
        words_to_read = Signal(32)               # words not yet accepted
        cur_word = Signal(8 * self.in_bytes)     # the word being emitted, its next u16 in bits [15:0]
        cur_loaded = Signal()
        cur_lane = Signal(range(L))              # lane of cur_word's next u16
        next_word = Signal(8 * self.in_bytes)    # the word read ahead
        next_loaded = Signal()

        m.d.comb += [self.busy.eq(busy),
                     self.out.valid.eq(cur_loaded),
                     self.out.payload.eq(cur_word[:16]),
                     self.inp.ready.eq(busy & (words_to_read != 0) & ~next_loaded)]
        out_fire = Signal()
        in_fire = Signal()
        m.d.comb += [out_fire.eq(self.out.valid & self.out.ready),
                     in_fire.eq(self.inp.valid & self.inp.ready)]
        cur_free = Signal()                      # cur_word is empty after this cycle (the count's end: below)
        m.d.comb += cur_free.eq(~cur_loaded | (out_fire & (cur_lane == L - 1)))

        with m.If(in_fire):
            m.d.sync += words_to_read.eq(words_to_read - 1)
        with m.If(out_fire):
            m.d.sync += values_left.eq(values_left - 1)
        with m.If(cur_free):
            m.d.sync += cur_lane.eq(0)
            with m.If(next_loaded):
                m.d.sync += [cur_word.eq(next_word), cur_loaded.eq(1), next_loaded.eq(0)]
            with m.Elif(in_fire):
                m.d.sync += [cur_word.eq(self.inp.payload), cur_loaded.eq(1)]
            with m.Else():
                m.d.sync += cur_loaded.eq(0)
        with m.Else():
            with m.If(out_fire):
                m.d.sync += [cur_word.eq(cur_word >> 16), cur_lane.eq(cur_lane + 1)]
            with m.If(in_fire):
                m.d.sync += [next_word.eq(self.inp.payload), next_loaded.eq(1)]

        with m.If(out_fire & (values_left == 1)):
            m.d.sync += [busy.eq(0), cur_loaded.eq(0), next_loaded.eq(0)]
        with m.If(~busy & self.start & (self.count != 0)):
            shift = exact_log2(L)
            m.d.sync += [busy.eq(1), values_left.eq(self.count),
                         words_to_read.eq((self.count + (L - 1)) >> shift),
                         cur_loaded.eq(0), next_loaded.eq(0)]
        return m
