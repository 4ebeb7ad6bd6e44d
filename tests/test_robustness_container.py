"""Structural container fuzzing: mutate what lies *inside* the CRC-protected sections
and header - plane bytes, C2 keep-bitmap bits, index entries, plane offsets/lengths, books, keep counts -
and recompute every checksum, so only the golden reader's own consistency checks (FORMAT.md §8: "readers
reject every plane inconsistency") stand between a mutation and the output.

Oracle per case: the golden reader either raises a UserError (one line) or decodes, and then its output
(full and draft) equals the independent scalar reference decoder (tests/reference_format.py) run on the
same bytes, which must accept them too. Anything else - another exception type (IndexError, ...), an
accepted container the reference rejects, or different values - is a failure.

Quick set: ~2,000 seeded cases (make test); `-m slow` runs 20,000.
"""
from __future__ import annotations

import copy
import json
import random
import struct
import zlib

import numpy as np
import pytest

import reference_format as R
from cassandra_rtl.errors import UserError
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import FORMAT_VERSION, CodecConfig
from cassandra_rtl.golden.container import read_container, write_container


def _bits(n, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 0.05).astype(np.float32)
    b = (x.view(np.uint32) >> 16).astype(np.uint16)
    pick = rng.random(n) < 0.04
    b[pick] = rng.integers(0, 1 << 16, int(pick.sum()), dtype=np.uint16)
    b[:6] = [0x7F80, 0xFFC1, 0x0001, 0x8000, 0x0000, 0x3F80]
    b[7::53] = 0x0041                                    # rare exponents: escapes in the codes
    return b


CASES = {   # name: (bits, config) - small tensors, every plane kind, pruning and not, both schemes
    "c1.prune": (_bits(3 * 64 + 20, 1).reshape(-1), CodecConfig(scheme="c1", group_size=32, keep_count=20)),
    "c1.keep": (_bits(2 * 50, 2).reshape(2, 50), CodecConfig(scheme="c1", group_size=32, mantissa_bits=5)),
    "c2.prune": (_bits(2 * 96, 3).reshape(2, 96), CodecConfig(scheme="c2", group_size=64, keep_count=40)),
    "c2.keep": (_bits(150, 4), CodecConfig(scheme="c2", group_size=32, mantissa_bits=2)),
    # one exponent, nothing pruned: no value is zero in the draft, so verif.codes holds no code at all
    "c2.dense": ((0x3F80 | np.arange(96, dtype=np.uint16) % 128 | (np.arange(96, dtype=np.uint16) % 2) << 15
                  ).astype(np.uint16), CodecConfig(scheme="c2", group_size=32, mantissa_bits=3)),
    # format 2.0: chunks of several superblocks (the last partial) and pair groups in every book
    "c1.v2": (_bits(7 * 32 + 9, 5).reshape(-1), CodecConfig(scheme="c1", group_size=32, keep_count=28,
                                                            chunk_superblocks=2, pair_codes=True)),
    "c1.v2.keep": (_bits(5 * 32 + 3, 6).reshape(-1), CodecConfig(scheme="c1", group_size=32, mantissa_bits=4,
                                                                 chunk_superblocks=4, pair_codes=True)),
    "c2.v2": (_bits(2 * 160, 7).reshape(2, 160), CodecConfig(scheme="c2", group_size=32, keep_count=20,
                                                             chunk_superblocks=4, pair_codes=True)),
}


def _assemble(header: dict, sections: dict[str, bytes]) -> bytes:
    """A container from a header and section bytes with *every* checksum and offset recomputed."""
    h = copy.deepcopy(header)
    start = 0
    for _ in range(6):
        pos = start
        for s in ("speculation", "verification"):
            h["sections"][s] = {"offset": pos, "length": len(sections[s]), "crc32": zlib.crc32(sections[s])}
            pos += len(sections[s])
        blob = json.dumps(h, separators=(",", ":")).encode()
        need = -(-(16 + len(blob)) // 64) * 64
        if need == start:
            break
        start = need
    return (struct.pack("<4sHHII", b"CASS", *FORMAT_VERSION, len(blob), zlib.crc32(blob)) + blob + bytes(start - 16 - len(blob))
            + sections["speculation"] + sections["verification"])


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    p = tmp_path_factory.mktemp("fuzz") / "base.cass"
    header = write_container(p, {n: encode_tensor(b, c) for n, (b, c) in CASES.items()})
    raw = p.read_bytes()
    secs = {s: raw[header["sections"][s]["offset"]: header["sections"][s]["offset"] + header["sections"][s]["length"]]
            for s in ("speculation", "verification")}
    assert _assemble(header, secs) == raw                 # the harness reproduces the writer byte for byte
    return header, secs


# ---------------------------------------------------------------------------------------------- reference

def _reference(header: dict, sections: dict[str, bytes], full: bool) -> dict:
    """name -> values per the scalar reference; RefFormatError (or any exception) = rejected."""
    out = {}
    for t in header["tensors"]:
        cfg = t["config"]
        scheme, G, m, k = cfg["scheme"], cfg["group_size"], cfg["mantissa_bits"], cfg["keep_count"]
        A, sp, vp = cfg["chunk_superblocks"], t["pairs"]["spec"] or 0, t["pairs"]["verif"]
        N = int(np.prod(t["shape"]))
        nch = len(R.chunk_ranges(N, G, A))
        planes, offsets = {}, {}
        for name, ref in t["planes"].items():
            sec = sections.get(ref["section"])
            if sec is None or not full and ref["section"] != "speculation":   # a draft loader reads spec.* only
                continue
            planes[name] = sec[ref["offset"]: ref["offset"] + ref["length"]]
            if name in R.indexed_planes(scheme, G, k, sp, vp):
                ir = t["indexes"][name]
                offsets[name] = R.parse_index(sections[ir["section"]][ir["offset"]: ir["offset"] + ir["length"]],
                                              nch, len(planes[name]))
        spec = t["books"]["spec"]
        vals, _ = R.decode(planes, offsets, N, scheme, G, m, k, spec, t["books"]["verif"], full=full, A=A,
                           spec_pairs=sp, verif_pairs=vp)
        out[t["name"]] = vals
    return out


def judge(header: dict, sections: dict[str, bytes], tmp_path) -> str | None:
    """None when the case is handled correctly, else a description of the failure."""
    p = tmp_path / "m.cass"
    p.write_bytes(_assemble(header, sections))
    results = {}
    for full in (True, False):
        try:
            c = read_container(p, verification=full)
            results[full] = {n: (decode_full(e) if full else decode_draft(e)).reshape(-1).tolist()
                             for n, e in c.tensors.items()}
        except UserError as exc:
            msg = str(exc)
            if not msg or "\n" in msg:
                return f"error message not one line: {msg!r}"
            results[full] = None
        except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
            return f"crash ({'full' if full else 'draft'}): {type(exc).__name__}: {exc}"
        if results[full] is not None:
            try:
                want = _reference(header, sections, full)
            except Exception as exc:  # noqa: BLE001 - the reference rejects it (any way)
                return f"golden accepted ({'full' if full else 'draft'}) what the reference rejects: {exc}"
            if want != results[full]:
                bad = next(n for n in want if want[n] != results[full].get(n))
                return f"golden decode of {bad} differs from the reference ({'full' if full else 'draft'})"
    return None


# ------------------------------------------------------------------------------------------------ mutators

def _plane_span(header, tname, plane):
    t = next(t for t in header["tensors"] if t["name"] == tname)
    r = t["planes"][plane]
    return r["section"], r["offset"], r["length"]


def _sb_bit(t, s):
    """Bit offset of superblock ``s``'s first spec.mx field in its plane: its chunk's start, then the fields
    of the chunk's earlier superblocks (§1: back to back inside a chunk)."""
    cfg = t["config"]
    G, k, m, A = cfg["group_size"], cfg["keep_count"], cfg["mantissa_bits"], cfg["chunk_superblocks"]
    N = int(np.prod(t["shape"]))
    offs = R.chunk_offsets("spec.mx", "c2", N, G, m, k, A=A)
    sbs = R.superblocks(N, G)
    c = s // A
    return 8 * offs[c] + sum(R.fixed_chunk_bits("spec.mx", "c2", G, m, k, n) for _, n in sbs[c * A: s])


def _flip(sections, sec, pos, bit):
    b = bytearray(sections[sec])
    b[pos] ^= 1 << bit
    return {**sections, sec: bytes(b)}


def mutate(header, sections, rng: random.Random):
    """One random structural mutation: (kind, header', sections')."""
    h = copy.deepcopy(header)
    tensors = h["tensors"]
    t = rng.choice(tensors)
    name, scheme = t["name"], t["config"]["scheme"]
    kind = rng.choice(["plane bit", "bitmap bit", "bitmap swap", "index entry", "plane length", "plane offset",
                       "book", "keep count", "mantissa", "group size", "shape", "chunk size", "pairs"])
    if kind == "plane bit":
        plane = rng.choice(sorted(t["planes"]))
        sec, off, n = _plane_span(h, name, plane)
        if n == 0:
            return kind, h, sections
        pos = off + rng.randrange(n)
        return f"{kind} {name}/{plane}", h, _flip(sections, sec, pos, rng.randrange(8))
    if kind in ("bitmap bit", "bitmap swap"):
        c2 = [x for x in tensors if x["config"]["scheme"] == "c2" and x["config"]["keep_count"] < x["config"]["group_size"]]
        if not c2:
            return kind, h, sections
        t = rng.choice(c2)
        name = t["name"]
        sec, off, n = _plane_span(h, name, "spec.mx")
        G, m = t["config"]["group_size"], t["config"]["mantissa_bits"]
        N = int(np.prod(t["shape"]))
        sbs = R.superblocks(N, G)
        s = rng.randrange(len(sbs))
        base_bit = _sb_bit(t, s)
        ns = sbs[s][1]                               # the superblock's most bits, all kept:
        if base_bit + 8 * -(-ns // 32) + ns * (m + 3) > 8 * n:     # an earlier mutation moved the layout
            return kind, h, sections
        data = sections[sec]

        def get(i):
            return (data[off + (base_bit + i) // 8] >> ((base_bit + i) % 8)) & 1
        keep_bits, pos = [], 0                        # format 3.0: per MX block [X][keep bits][kept fields]
        for b0 in range(0, sbs[s][1], 32):
            nb = min(32, sbs[s][1] - b0)
            keep_bits += [pos + 8 + j for j in range(nb)]
            pos += 8 + nb + sum(get(pos + 8 + j) for j in range(nb)) * (m + 2)
        out = sections
        if kind == "bitmap bit":
            bits = [rng.choice(keep_bits)]
        else:   # swap a kept and a pruned value: the keep count still matches, the fields move
            ones = [i for i in keep_bits if get(i)]
            zeros = [i for i in keep_bits if not get(i)]
            if not ones or not zeros:
                return kind, h, sections
            bits = [rng.choice(ones), rng.choice(zeros)]
        for i in bits:
            out = _flip(out, sec, off + (base_bit + i) // 8, (base_bit + i) % 8)
        return f"{kind} {name}", h, out
    if kind == "index entry":
        if not t["indexes"]:
            return kind, h, sections
        plane = rng.choice(sorted(t["indexes"]))
        r = t["indexes"][plane]
        b = bytearray(sections[r["section"]])
        pos = r["offset"] + 2 * rng.randrange(max(1, r["length"] // 2))
        v = struct.unpack_from("<H", b, pos)[0]
        struct.pack_into("<H", b, pos, (v + rng.choice([-2, -1, 1, 2, 256])) & 0xFFFF)
        return f"{kind} {name}/{plane}", h, {**sections, r["section"]: bytes(b)}
    if kind in ("plane length", "plane offset"):
        plane = rng.choice(sorted(t["planes"]))
        key = "length" if kind == "plane length" else "offset"
        t["planes"][plane][key] = max(0, t["planes"][plane][key] + rng.choice([-8, -2, -1, 1, 2, 8]))
        return f"{kind} {name}/{plane}", h, sections
    if kind == "book":
        which = "verif" if scheme == "c2" or rng.random() < 0.5 else "spec"
        book = list(t["books"][which])
        op = rng.choice(["drop", "add", "swap"])
        if op == "drop" and book:
            book.pop(rng.randrange(len(book)))
        elif op == "add":
            book.append(rng.choice([x for x in range(255) if x not in book]))
        elif len(book) >= 2:
            i, j = rng.sample(range(len(book)), 2)
            book[i], book[j] = book[j], book[i]
        t["books"][which] = book
        return f"{kind} {op} {name}/{which}", h, sections
    if kind == "keep count":
        t["config"]["keep_count"] = max(1, min(t["config"]["group_size"], t["config"]["keep_count"] + rng.choice([-1, 1])))
        return f"{kind} {name}", h, sections
    if kind == "mantissa":
        t["config"]["mantissa_bits"] = (t["config"]["mantissa_bits"] + rng.choice([-1, 1])) % 8
        return f"{kind} {name}", h, sections
    if kind == "group size":
        G = t["config"]["group_size"]
        t["config"]["group_size"] = rng.choice([g for g in (32, 64, 128, 256) if g != G])
        t["config"]["keep_count"] = min(t["config"]["keep_count"], t["config"]["group_size"])
        return f"{kind} {name}", h, sections
    if kind == "chunk size":
        A = t["config"]["chunk_superblocks"]
        t["config"]["chunk_superblocks"] = rng.choice([a for a in (1, 2, 4, 8) if a != A])
        return f"{kind} {name}", h, sections
    if kind == "pairs":
        which = "verif" if scheme == "c2" or rng.random() < 0.5 else "spec"
        t["pairs"][which] ^= 1 << rng.randrange(4)
        return f"{kind} {name}/{which}", h, sections
    # shape: same number of values in another layout, or one value more / fewer
    N = int(np.prod(t["shape"]))
    t["shape"] = rng.choice([[N], [1, N], [N + 1], [max(N - 1, 0)], [2, N // 2 + 1]])
    return f"{kind} {name}", h, sections


def run_fuzz(base, tmp_path, n, seed):
    header, sections = base
    rng = random.Random(seed)
    failures, kinds = [], {}
    for i in range(n):
        kind, h, secs = mutate(header, sections, rng)
        if rng.random() < 0.3:                            # two mutations at once now and then
            kind2, h, secs = mutate(h, secs, rng)
            kind = f"{kind} + {kind2}"
        kinds[kind.split()[0]] = kinds.get(kind.split()[0], 0) + 1
        why = judge(h, secs, tmp_path)
        if why:
            failures.append((i, kind, why))
    return failures, kinds


def test_base_container_matches_reference(base, tmp_path):
    assert judge(*base, tmp_path) is None


def test_structural_fuzz_quick(base, tmp_path):
    failures, kinds = run_fuzz(base, tmp_path, 2000, seed=15)
    assert not failures, failures[:8]


@pytest.mark.slow
def test_structural_fuzz_long(base, tmp_path):
    failures, kinds = run_fuzz(base, tmp_path, 20000, seed=1515)
    assert not failures, failures[:8]


@pytest.mark.parametrize("tname", ["c2.prune", "c2.dense", "c2.v2"])
def test_c2_draft_zeros_claiming_more_verification_codes_than_the_plane_holds(base, tmp_path, tname):
    """Valid CRCs, a C2 speculation plane whose draft-zero values need more codes than
    verif.codes holds (c2.dense: a plane without a single code) -> FormatError, not an IndexError in
    _decode_codes_with_escapes."""
    header, sections = base
    t = next(t for t in header["tensors"] if t["name"] == tname)
    sec, off, n = _plane_span(header, tname, "spec.mx")
    data = bytearray(sections[sec])
    N, G, k = int(np.prod(t["shape"])), t["config"]["group_size"], t["config"]["keep_count"]
    # every kept value's element field -> 0 (draft zero), so each needs a verification code the plane lacks;
    # format 3.0's spec.mx: per MX block [X (8)][keep bits, if k < G][the kept values' (m+2)-bit fields]
    m = t["config"]["mantissa_bits"]

    def bit(pos):
        return (data[pos // 8] >> (pos % 8)) & 1
    for s, (_, ns) in enumerate(R.superblocks(N, G)):
        pos = 8 * off + _sb_bit(t, s)
        for b0 in range(0, ns, 32):
            nb = min(32, ns - b0)
            nk = sum(bit(pos + 8 + j) for j in range(nb)) if k < G else nb
            pos += 8 + (nb if k < G else 0)
            for j in range(nk):
                for b in range(m + 1):                   # element bits (the sign bit stays)
                    q = pos + j * (m + 2) + b
                    data[q // 8] &= ~(1 << (q % 8)) & 0xFF
            pos += nk * (m + 2)
    p = tmp_path / "m.cass"
    p.write_bytes(_assemble(header, {**sections, sec: bytes(data)}))
    c = read_container(p)
    from cassandra_rtl.errors import FormatError
    with pytest.raises(FormatError, match="verif.codes"):
        decode_full(c.tensors[tname])
