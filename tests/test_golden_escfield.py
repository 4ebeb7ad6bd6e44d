"""The format 3.0 layout (golden/escfield.py, read by decoder v3) against format 2.0: the same bytes,
indexes included, chunk by chunk; a field plane whose book has no pair is sized from its code plane's escapes
(no index), checked against the encoder's offsets and the escapes counted from the values."""
from __future__ import annotations

import numpy as np
import pytest

from cassandra_rtl.golden import escfield
from cassandra_rtl.golden.codec import _fields, has_index, keep_mask, plane_chunks, plane_offsets
from cassandra_rtl.golden.config import PRUNED, CodecConfig
from cassandra_rtl.tb.decoder import data as D


def _cases(seed=11, n=40):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        cfg = D.random_config(rng)
        bits = D.random_tensor(rng, D.random_numel(rng, cfg.group_size, 20))
        yield bits, cfg


def test_same_bytes_as_format_2_chunk_by_chunk():
    for bits, cfg in _cases():
        std, v3 = escfield.encode(bits, cfg)
        for field, code in escfield.FIELD_OF.items():
            a = [len(x) + len(y) for x, y in zip(plane_chunks(std, code), plane_chunks(std, field))]
            b = [len(x) + len(y) for x, y in zip(plane_chunks(v3, code), plane_chunks(v3, field))]
            assert a == b, cfg
        assert (v3.spec_nbytes, v3.verif_nbytes) == (std.spec_nbytes, std.verif_nbytes), cfg


def _escapes_from_values(bits, cfg, std, code_plane):
    """Reference: escaped symbols per chunk, from the values and the books (not from the planes)."""
    flat = np.asarray(bits, dtype=np.uint16).reshape(-1)
    kept = keep_mask(flat, cfg)
    _, e, _ = _fields(flat)
    chunk = np.arange(len(flat)) // cfg.chunk_values
    if code_plane == "spec.codes":
        book, sym, where = std.spec_book, np.where(kept, e, PRUNED), np.ones(len(flat), dtype=bool)
    else:
        book, sym, where = std.verif_book, e, ~kept
    if book is None:
        return np.zeros(std.nchunks, dtype=np.int64)
    esc = where & (book.group_table()[sym] == book.Q)
    return np.bincount(chunk[esc], minlength=std.nchunks)


def test_escapes_per_chunk_and_field_sizes_follow_from_the_code_planes():
    sized = escapes = 0
    for bits, cfg in _cases():
        std, v3 = escfield.encode(bits, cfg)
        for field, code in escfield.FIELD_OF.items():
            got = escfield.escapes_per_chunk(v3, code)
            assert np.array_equal(got, _escapes_from_values(bits, cfg, std, code)), (cfg, code)
            escapes += int(got.sum())
            if not has_index(field, cfg, std.spec_book, std.verif_book):
                assert np.array_equal(escfield.field_offsets(v3, field), plane_offsets(v3, field)), (cfg, field)
                assert v3.index_bytes(field) == 0
                sized += 1
    assert sized >= 20 and escapes > 100          # the cases do exercise both


@pytest.mark.parametrize("keep", [1.0, 0.3])
def test_every_bf16_pattern(keep):
    bits = np.random.default_rng(2).permutation(np.arange(1 << 16, dtype=np.uint32)).astype(np.uint16)
    cfg = CodecConfig(group_size=128, mantissa_bits=3, keep_ratio=keep, chunk_superblocks=8, pair_codes=False)
    std, v3 = escfield.encode(bits, cfg)
    for field, code in escfield.FIELD_OF.items():
        assert escfield.escapes_per_chunk(v3, code).sum() > 0 or (code == "verif.codes" and keep == 1.0)
        assert np.array_equal(escfield.field_offsets(v3, field), plane_offsets(v3, field))
    assert v3.spec_nbytes + v3.verif_nbytes == std.spec_nbytes + std.verif_nbytes


def test_golden_decode_equals_format_2():
    """escfield.decode (unpaired field planes located without an index) gives format 2.0's draft and the
    original bits, on random configurations, data kinds and books with escapes."""
    from cassandra_rtl.golden.codec import decode_draft

    for bits, cfg in _cases(seed=12, n=30):
        std, v3 = escfield.encode(bits, cfg)
        assert np.array_equal(escfield.decode(v3, False), decode_draft(std)), cfg
        assert np.array_equal(escfield.decode(v3, True).reshape(-1), np.asarray(bits).reshape(-1)), cfg


def _with_plane(v3, plane, data):
    import dataclasses
    return dataclasses.replace(v3, planes={**v3.planes, plane: bytes(data)})


def test_malformed_planes_are_refused():
    from cassandra_rtl.errors import FormatError

    cfg = CodecConfig(group_size=64, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=4, pair_codes=False)
    bits = D.weights_like(np.random.default_rng(4), 64 * 8)
    _, v3 = escfield.encode(bits, cfg)
    escfield.decode(v3, True)                            # well formed
    sm = bytearray(v3.planes["spec.signman"])
    with pytest.raises(FormatError, match="spec.signman"):         # one byte short: its code plane says more
        escfield.decode(_with_plane(v3, "spec.signman", sm[:-1]), False)
    codes = bytearray(v3.planes["spec.codes"])
    codes[-1] |= 0x80                                    # a one in the last chunk's padding: one code too many
    with pytest.raises(FormatError, match="spec.codes"):
        escfield.decode(_with_plane(v3, "spec.codes", codes), False)
    codes = bytearray(v3.planes["spec.codes"])
    codes[0:3] = b"\x00\x00\x00"                          # a zero run longer than Q at the first chunk's start
    with pytest.raises(FormatError, match="spec.codes"):
        escfield.decode(_with_plane(v3, "spec.codes", codes), False)


def test_c2_same_bytes_and_golden_decode():
    """C2: a draft-zero value's delta escapes into the front of its verif.rest field; spec.mx is block by block.
    Same bytes chunk by chunk, the escapes counted from the code plane match the values', and the golden
    decode gives format 2.0's draft and the original bits."""
    from cassandra_rtl.golden.codec import c2_draft_fields, decode_draft
    from cassandra_rtl.golden.config import MX_BLOCK

    rng = np.random.default_rng(13)
    escapes = 0
    for _ in range(30):
        cfg = D.random_c2_config(rng)
        bits = D.random_c2_tensor(rng, D.random_numel(rng, cfg.group_size, 12))
        std, v3 = escfield.encode(bits, cfg)
        assert [len(x) for x in plane_chunks(v3, "spec.mx")] == [len(x) for x in plane_chunks(std, "spec.mx")]
        a = [len(x) + len(y) for x, y in zip(plane_chunks(std, "verif.codes"), plane_chunks(std, "verif.rest"))]
        b = [len(x) + len(y) for x, y in zip(plane_chunks(v3, "verif.codes"), plane_chunks(v3, "verif.rest"))]
        assert a == b and (v3.spec_nbytes, v3.verif_nbytes) == (std.spec_nbytes, std.verif_nbytes), cfg
        flat = np.asarray(bits, dtype=np.uint16).reshape(-1)
        kept = keep_mask(flat, cfg)
        _, e, mant = _fields(flat)
        X = np.maximum.reduceat(e, np.arange(0, len(flat), MX_BLOCK))[np.arange(len(flat)) // MX_BLOCK]
        dz = ~kept | (c2_draft_fields(e, mant, X, cfg.mantissa_bits)[1] == 0)
        book = std.verif_book
        want = np.bincount((np.arange(len(flat)) // cfg.chunk_values)[dz & (book.group_table()[X - e] == book.Q)],
                           minlength=std.nchunks)
        got = escfield.escapes_per_chunk(v3, "verif.codes")
        assert np.array_equal(got, want), cfg
        escapes += int(got.sum())
        assert np.array_equal(escfield.decode(v3, False), decode_draft(std)), cfg
        assert np.array_equal(escfield.decode(v3, True).reshape(-1), flat), cfg
    assert escapes > 100


def ref_c2_spec_mx(bits, cfg) -> list[bytes]:
    """The block-interleaved spec.mx chunks written out bit by bit from the values (FORMAT.md section 4's
    fields, LSB first): per MX block its X, its keep bits when the config prunes, its kept values'
    ``(s << (m+1)) | elem`` fields; a chunk padded with zeros to a byte."""
    from cassandra_rtl.golden.codec import c2_draft_fields
    from cassandra_rtl.golden.config import MX_BLOCK

    flat = np.asarray(bits, dtype=np.uint16).reshape(-1)
    kept = keep_mask(flat, cfg)
    s, e, mant = _fields(flat)
    m, out = cfg.mantissa_bits, []
    for c0 in range(0, len(flat), cfg.chunk_values):
        stream = []

        def put(v, w):
            stream.extend((int(v) >> i) & 1 for i in range(w))
        for b0 in range(c0, min(c0 + cfg.chunk_values, len(flat)), MX_BLOCK):
            blk = range(b0, min(b0 + MX_BLOCK, len(flat)))
            X = max(int(e[i]) for i in blk)
            put(X, 8)
            if cfg.prunes:
                for i in blk:
                    put(kept[i], 1)
            for i in blk:
                if kept[i]:
                    _, elem = c2_draft_fields(np.array([e[i]]), np.array([mant[i]]), np.array([X]), m)
                    put((int(s[i]) << (m + 1)) | int(elem[0]), m + 2)
        stream += [0] * (-len(stream) % 8)
        out.append(np.packbits(np.array(stream, dtype=np.uint8), bitorder="little").tobytes())
    return out


def test_c2_spec_mx_is_block_by_block():
    """spec.mx against its bit-by-bit reference, chunk by chunk, with and without pruning, A = 1 and A > 1,
    a partial last block and superblock."""
    rng = np.random.default_rng(21)
    cases = [(CodecConfig(scheme="c2", group_size=G, mantissa_bits=m, keep_ratio=keep, chunk_superblocks=A),
              n) for G, m, keep, A, n in [(32, 0, 1.0, 1, 32 * 3), (64, 3, 0.5, 4, 64 * 9 + 17),
                                          (128, 7, 0.3, 2, 128 * 5 + 100), (256, 2, 1 / 256, 1, 256 * 2 + 33),
                                          (32, 5, 0.75, 32, 32 * 70 + 5)]]
    for _ in range(6):
        cfg = D.random_c2_config(rng)
        cases.append((cfg, D.random_numel(rng, cfg.group_size, 6)))
    for cfg, n in cases:
        bits = D.random_c2_tensor(rng, n)
        _, v3 = escfield.encode(bits, cfg)
        assert plane_chunks(v3, "spec.mx") == ref_c2_spec_mx(bits, cfg), cfg


@pytest.mark.parametrize("keep", [1.0, 0.3])
def test_c2_every_bf16_pattern(keep):
    from cassandra_rtl.golden.codec import decode_draft

    bits = np.random.default_rng(3).permutation(np.arange(1 << 16, dtype=np.uint32)).astype(np.uint16)
    cfg = CodecConfig(scheme="c2", group_size=128, mantissa_bits=3, keep_ratio=keep, chunk_superblocks=8)
    std, v3 = escfield.encode(bits, cfg)
    assert np.array_equal(escfield.decode(v3, False), decode_draft(std))
    assert np.array_equal(escfield.decode(v3, True), bits)


def test_c2_malformed_spec_mx_is_refused():
    from cassandra_rtl.errors import FormatError

    cfg = CodecConfig(scheme="c2", group_size=64, mantissa_bits=3, keep_ratio=0.5, chunk_superblocks=4)
    _, v3 = escfield.encode(D.weights_like(np.random.default_rng(5), 64 * 7 + 32), cfg)
    escfield.decode(v3, True)
    # the last superblock is one block of 32 values keeping 16, after three superblocks of the chunk (2 X bytes,
    # 64 keep bits, 32 fields of 5 bits each): a flipped keep bit makes it keep 15 or 17
    for bit in range(8 + 32):
        pos = 8 * int(plane_offsets(v3, "spec.mx")[1]) + 3 * (16 + 64 + 32 * 5) + bit
        mx = bytearray(v3.planes["spec.mx"])
        mx[pos >> 3] ^= 1 << (pos & 7)
        if bit < 8:                                      # X: another draft, no framing error
            assert not np.array_equal(escfield.decode(_with_plane(v3, "spec.mx", mx), False), escfield.decode(v3, False))
            continue
        with pytest.raises(FormatError, match="spec.mx: superblock 7 keeps 1[57] values"):
            escfield.decode(_with_plane(v3, "spec.mx", mx), False)
