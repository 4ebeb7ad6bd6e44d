"""The decoder's host-side contract (docs/HARDWARE.md section 2), re-implemented independently of
hw/simutil.py: register writes, plane words, expected output values. Pure Python + numpy (no cocotb), so
the bulk C++ harness and `cassandra-rtl cosim` use it too."""
from __future__ import annotations

import numpy as np

from cassandra_rtl.golden.codec import PLANES, EncodedTensor, decode_draft, decode_full, superblock_chunks

# Register map (docs/HARDWARE.md "Registers").
CTRL, MODE, MBITS, KEEP, GROUP, NUMEL, SPEC_K, VERIF_K = 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07
CHUNK, SPEC_PAIRS, VERIF_PAIRS = 0x08, 0x09, 0x0A      # format 2.0: log2 superblocks per chunk, pair masks
SPEC_SYM, VERIF_SYM = 0x10, 0x20
CTRL_START, CTRL_CLEAR_ERROR = 1, 2

# error_code bits
ERR_CODE, ERR_OVERRUN, ERR_TOO_LONG, ERR_KEEP, ERR_NO_BOOK, ERR_CONFIG = range(6)
ERROR_NAMES = {ERR_CODE: "CODE", ERR_OVERRUN: "OVERRUN", ERR_TOO_LONG: "TOO_LONG", ERR_KEEP: "KEEP",
               ERR_NO_BOOK: "NO_BOOK", ERR_CONFIG: "CONFIG"}

PORTS = {"spec.codes": "spec_codes", "spec.signman": "spec_signman",
         "verif.codes": "verif_codes", "verif.rest": "verif_rest"}
# Cassandra-2 (docs/HARDWARE.md 2a / 3a): one speculation plane, spec.mx
PORTS_C2 = {"spec.mx": "spec_mx", "verif.codes": "verif_codes", "verif.rest": "verif_rest"}
SCHEME_PORTS = {"c1": PORTS, "c2": PORTS_C2}


# Plane layouts (hw/configs.py CONFIG_INFO "layout"): decoder v3 reads format 3.0 (golden/escfield.py: an escape's
# 8 raw bits in the companion field, C2's spec.mx by MX block), as containers hold it; golden still writes and
# converts the format 2.0 layout (``framed``).
FORMAT_2 = "format 2.0"
FORMAT_3 = "format 3.0"
LAYOUTS = (FORMAT_2, FORMAT_3)


def params_layout(params: dict) -> str:
    """The plane layout a decoder configuration's CONFIG_INFO entry ``params`` reads (its "layout")."""
    return params.get("layout", FORMAT_3)


def config_layout(config: str) -> str:
    """The plane layout decoder configuration ``config`` reads (hw/configs.py CONFIG_INFO "layout")."""
    from cassandra_rtl.hw.configs import CONFIG_INFO
    return params_layout(CONFIG_INFO[config])


def encode_in(bits, cfg, layout: str) -> EncodedTensor:
    """``bits`` encoded by the golden codec straight into ``layout`` (no conversion through the other)."""
    from cassandra_rtl.golden import escfield
    from cassandra_rtl.golden.codec import encode_tensor
    if layout not in LAYOUTS:
        raise ValueError(f"unknown plane layout {layout!r}; known: {', '.join(LAYOUTS)}")
    return escfield.encode3(bits, cfg) if layout == FORMAT_3 else encode_tensor(bits, cfg)


def framed(enc: EncodedTensor, layout: str = FORMAT_2) -> EncodedTensor:
    """The tensor whose planes go onto the ports of a decoder reading ``layout``: ``enc`` itself when it is
    in that layout, else the same values, books and keep mask in the other (golden/escfield.py
    ``to_format2`` / ``to_format3``; the expected values stay ``enc``'s golden decode)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown plane layout {layout!r}; known: {', '.join(LAYOUTS)}")
    from cassandra_rtl.errors import FormatError
    from cassandra_rtl.golden import escfield
    try:
        return escfield.to_format3(enc) if layout == FORMAT_3 else escfield.to_format2(enc)
    except FormatError as exc:
        raise ValueError(f"{exc}; it cannot be framed in the {layout} layout") from None


def decoder_scheme(params: dict) -> str:
    """The scheme a decoder configuration reads (hw/configs.py CONFIG_INFO "block"): the C2 decoder family
    (decoder_c2, decoder_c2v3) reads Cassandra-2 tensors, every other decoder Cassandra-1."""
    return "c2" if str(params.get("block", "")).startswith("decoder_c2") else "c1"


def escape_code_bits(K: int, layout: str = FORMAT_2) -> int:
    """Bits an escape takes in a code plane of a book without pairs (Q = K): K zeros, a one and, in format
    2.0, the 8-bit payload."""
    return K + 1 + (8 if layout == FORMAT_2 else 0)


def ports(scheme: str) -> dict[str, str]:
    """plane name -> port name of the decoder / encoder of ``scheme``."""
    return SCHEME_PORTS[scheme]


def program(enc: EncodedTensor, full: bool, start: bool = True, books: bool = True) -> list[tuple[int, int]]:
    """Register writes (addr, data) for one tensor: MODE, MBITS, KEEP, GROUP, NUMEL, the format 2.0 CHUNK
    and pair masks (always written, so a tensor never inherits the previous one's), books, START."""
    c = enc.config
    w = [(MODE, int(full)), (MBITS, c.mantissa_bits), (KEEP, c.keep_count), (GROUP, c.group_size),
         (NUMEL, enc.numel), (CHUNK, int(c.chunk_superblocks).bit_length() - 1)]
    if enc.spec_book is not None:
        w.append((SPEC_PAIRS, int(enc.spec_book.pairs)))
    if full:
        w.append((VERIF_PAIRS, int(enc.verif_book.pairs)))
    if books:
        if enc.spec_book is not None:          # C2 has no speculation book (SPEC_* accepted and ignored)
            w += [(SPEC_SYM + r, s) for r, s in enumerate(enc.spec_book.symbols)] + [(SPEC_K, enc.spec_book.K)]
        if full:
            w += [(VERIF_SYM + r, s) for r, s in enumerate(enc.verif_book.symbols)] + [(VERIF_K, enc.verif_book.K)]
    if start:
        w.append((CTRL, CTRL_START))
    return w


def chunk_to_words(chunk: bytes, word_bits: int) -> list[tuple[int, int]]:
    """(data, last) words of one chunk: byte b in bits 8*(b mod IW/8) of word b div (IW/8), LSB first;
    last word zero-padded with last=1; an empty chunk is one all-zero word with last=1."""
    nb = word_bits // 8
    if len(chunk) == 0:
        return [(0, 1)]
    n = -(-len(chunk) // nb)
    words = [(int.from_bytes(chunk[i * nb:(i + 1) * nb], "little"), 0) for i in range(n)]
    words[-1] = (words[-1][0], 1)
    return words


def planes_read(enc: EncodedTensor, full: bool) -> tuple[str, ...]:
    spec, verif = PLANES[enc.config.scheme]
    return spec + (verif if full else ())


def plane_words(enc: EncodedTensor, full: bool, word_bits) -> dict[str, list[list[tuple[int, int]]]]:
    """port name -> per-chunk list of (data, last) words (a chunk = chunk_superblocks superblocks); ``word_bits`` is one width for every
    port or a {port: width} map (decoders with fewer verification lanes have narrower verif ports)."""
    names = ports(enc.config.scheme)
    width = (lambda port: word_bits[port]) if isinstance(word_bits, dict) else (lambda port: word_bits)
    return {names[p]: [chunk_to_words(c, width(names[p])) for c in superblock_chunks(enc, p)]
            for p in planes_read(enc, full)}


def expected(enc: EncodedTensor, full: bool) -> np.ndarray:
    return (decode_full(enc) if full else decode_draft(enc)).reshape(-1).astype(np.uint16)


def superblock_ends(enc: EncodedTensor) -> np.ndarray:
    """Value index (exclusive) at which each superblock ends."""
    G, N = enc.config.group_size, enc.numel
    return np.minimum(np.arange(1, enc.nsb + 1) * G, N)


def code_ranks(enc: EncodedTensor, full: bool) -> dict[str, np.ndarray]:
    """Rank (0..K-1, or K for an escape) of every code the decoder reads, for coverage."""
    from cassandra_rtl.golden.codec import _decode_c1_spec   # the golden symbols of spec.codes
    from cassandra_rtl.golden.config import PRUNED

    sym = _decode_c1_spec(enc)[2]
    out = {"spec": enc.spec_book.rank_table()[sym]}
    if full:
        e = (decode_full(enc).reshape(-1).astype(np.int64) >> 7) & 0xFF
        out["verif"] = enc.verif_book.rank_table()[e[sym == PRUNED]]
    return out


def c2_lanes(enc: EncodedTensor) -> dict[str, np.ndarray]:
    """Per value of a C2 tensor, re-derived from the bf16 values (FORMAT.md section 4), for coverage and
    directed stimulus: X (shared exponent of its MX block), kept, elem, draft_zero, delta = X - e, and the
    verification-code rank of every draft-zero value (K = escape)."""
    from cassandra_rtl.golden.codec import c2_draft_fields, keep_mask
    from cassandra_rtl.golden.config import MX_BLOCK

    v = decode_full(enc).reshape(-1).astype(np.int64)
    e, mant = (v >> 7) & 0xFF, v & 0x7F
    N = len(v)
    X = np.maximum.reduceat(e, np.arange(0, N, MX_BLOCK))[np.arange(N) // MX_BLOCK] if N else e
    kept = keep_mask(v.astype(np.uint16), enc.config)
    c, elem = c2_draft_fields(e, mant, X, enc.config.mantissa_bits)
    dz = ~kept | (elem == 0)
    delta = X - e
    return {"X": X, "e": e, "kept": kept, "c": c, "elem": elem, "draft_zero": dz, "delta": delta,
            "verif_rank": enc.verif_book.rank_table()[delta[dz]]}
