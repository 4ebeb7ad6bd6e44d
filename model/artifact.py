"""The model artifact: one .cass container that holds a model ready for Cassandra generation.

``cassandra-rtl encode MODEL -o model.cass --draft-config FILE|bundled|uniform [--calibrate]`` writes it;
``cassandra-rtl generate --cass model.cass`` runs from it; ``generate --model X`` writes one into a cache
(keyed by the model's content digest and the draft allocation) on first use and loads it afterwards.

Contents (docs/MODEL.md "The model artifact"): every tensor of the checkpoint in the format, under the
model path's names (``tok_emb``, ``layers.{i}.wq``, ...; GGUF q/k rows already un-permuted) — 2-D weights
with the allocation's per-tensor codec config and salience-selected keep sets (the speculation section
records which values are kept, so the salience is never needed again), 1-D tensors exact in both views
(c1, keep 1.0, m = 7) — and in the container's ``meta``:

* ``draft_allocation``: the allocation (``allocation.py``; per-tensor configs, KV view, gamma);
* ``model``: ``{"version", "args" (ModelArgs), "tokenizer" (tokenizer.json text, chat template, special
  tokens, stop ids), "source", "source_sha256", "tensor_sha256" (per tensor, of the original bf16 bits),
  "bf16_bytes"}``.

Loading streams the file: the header is parsed, the two sections' CRC-32s are checked in 16 MB pieces,
then every tensor's planes are sliced out of a read-only memory map (pages dropped again with
``madvise(MADV_DONTNEED)`` once the tensor is decoded), decoded with ``decode_full`` into the target's
parameter and with ``decode_draft`` into the draft's, and freed. No copy of the whole container, of the
encoded model or of a decoded model other than the two the engine runs on is ever held. The section CRCs
are the integrity check; ``verify=True`` also compares every full decode with the recorded digest of the
checkpoint's bits.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import mmap
import os
import resource
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from cassandra_rtl.errors import ConfigError, FormatError, InputError
from cassandra_rtl.golden.codec import decode_draft, decode_full, encode_tensor
from cassandra_rtl.golden.config import FORMAT_VERSION, CodecConfig

from .allocation import META_KEY, Allocation
from .transformer import ModelArgs, Transformer

ARTIFACT_KEY = "model"       # key of the model description in the container's meta
ARTIFACT_VERSION = 1
VECTOR_CFG = dict(scheme="c1", keep_ratio=1.0, mantissa_bits=7)   # 1-D tensors: exact in both views
SECTION_NAMES = ("speculation", "verification")
CHUNK = 16 << 20


# ------------------------------------------------------------------------------------------ small helpers
def peak_rss_bytes() -> int:
    """Peak resident set size of this program so far: ``VmHWM`` of /proc/self/status, else getrusage
    ``ru_maxrss``. (They agree for a process started from a shell; ``ru_maxrss`` also keeps the peak from
    before ``exec``, i.e. the parent's RSS at ``fork`` — a large Python process that spawns the CLI would
    otherwise lend its own size to the child's figure.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc ``malloc_trim``): parsing the header and
    building the tokenizer free tens of MB of small blocks that would otherwise stay resident."""
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC = None


def current_rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _source_files(p: Path) -> list[Path]:
    if p.is_file():
        return [p]
    keep = {"config.json", "tokenizer.json", "tokenizer_config.json"}
    return sorted(f for f in p.iterdir() if f.is_file() and (f.name in keep or f.suffix == ".safetensors"))


def source_digest(path, memo_dir=None) -> str:
    """sha256 over the files the loader reads (a .gguf, or a Hugging Face folder's config, tokenizer and
    safetensors files, by name). With ``memo_dir`` the digest is remembered per (path, size, mtime) in
    ``memo_dir/digests.json`` so a large model is hashed once."""
    p = Path(path).resolve()
    files = _source_files(p)
    stamp = [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    memo = Path(memo_dir) / "digests.json" if memo_dir else None
    key = json.dumps(stamp)
    table = {}
    if memo is not None and memo.is_file():
        try:
            table = json.loads(memo.read_text())
            if isinstance(table, dict) and isinstance(table.get(key), str):
                return table[key]
        except (OSError, ValueError):
            table = {}
    h = hashlib.sha256()
    for f in files:
        if p.is_dir():                           # a folder's files by name; a single file by content only
            h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
    digest = h.hexdigest()
    if memo is not None:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            table = table if isinstance(table, dict) else {}
            table[key] = digest
            tmp = memo.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(table))
            tmp.replace(memo)
        except OSError:
            pass
    return digest


def is_bundled(path, memo_dir=None) -> bool:
    """Is ``path`` the bundled SmolLM2 GGUF (the same file, or a copy of it)?"""
    from .loader import bundled_model_path

    try:
        b = bundled_model_path()
    except InputError:
        return False
    p = Path(path)
    if not p.is_file():
        return False
    if p.resolve() == b.resolve():
        return True
    return p.stat().st_size == b.stat().st_size and source_digest(p, memo_dir) == source_digest(b, memo_dir)


def tensor_digest(bits: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(bits, dtype="<u2").tobytes()).hexdigest()[:32]


def args_to_json(a: ModelArgs) -> dict:
    return a.to_dict()


def args_from_json(d) -> ModelArgs:
    if not isinstance(d, dict):
        raise FormatError("model meta: 'args' must be an object")
    names = {f.name for f in dataclasses.fields(ModelArgs)}
    unknown = set(d) - names
    if unknown:
        raise FormatError(f"model meta: unknown model arguments {sorted(unknown)} (written by a newer version?)")
    try:
        return ModelArgs(**d)
    except TypeError as exc:
        raise FormatError(f"model meta: bad model arguments ({exc})") from None


def tokenizer_to_json(tok) -> dict | None:
    if tok is None:
        return None
    return {"tokenizer_json": tok.tok.to_str(), "chat_template": tok.chat_template, "bos_token": tok.bos_token,
            "eos_token": tok.eos_token, "stop_ids": sorted(int(i) for i in tok.stop_ids)}


def tokenizer_from_json(d):
    if d is None:
        return None
    from tokenizers import Tokenizer

    from .tokenizer import ChatTokenizer

    try:
        tk = Tokenizer.from_str(d["tokenizer_json"])
        return ChatTokenizer(tk, chat_template=d.get("chat_template"), bos_token=d.get("bos_token"),
                             eos_token=d.get("eos_token"), stop_ids={int(i) for i in d.get("stop_ids", [])})
    except Exception as exc:  # noqa: BLE001 - tokenizers raises bare Exceptions
        raise FormatError(f"model meta: cannot rebuild the tokenizer ({exc})") from None


# ------------------------------------------------------------------------------------------ writing
def encode_checkpoint(ck, alloc: Allocation, progress=None, consume: bool = False, format3: bool = False):
    """Yields ``(name, EncodedTensor)`` for every tensor of ``ck``: 2-D weights with ``alloc``'s config and
    salience, 1-D exact; in the 2.0 layout, or with ``format3`` in format 3.0 (what a container stores).
    ``decode_full`` is checked against the checkpoint's bits here, once, at encode time.
    ``consume``: drop each tensor from ``ck.bits`` once it is encoded (the checkpoint is not needed again)."""
    from cassandra_rtl.golden import escfield

    def encode(bits, cfg, salience=None):
        return escfield.encode3(bits, cfg, salience) if format3 else encode_tensor(bits, cfg, salience)
    alloc.check(ck)
    sal = alloc.salience_for(ck)
    names = list(ck.bits)
    vec = CodecConfig(**VECTOR_CFG)
    for i, name in enumerate(names):
        b = ck.bits[name]
        if b.ndim == 2:
            enc = encode(b, alloc.cfg_for(name), salience=sal(name, b))
        else:
            enc = encode(b, vec)
        if not np.array_equal(decode_full(enc).reshape(b.shape), b):
            raise AssertionError(f"decode_full({name}) differs from the original bits")
        if consume:
            del ck.bits[name], b
        if progress:
            progress(i + 1, len(names), f"encode {name}")
        yield name, enc


def artifact_meta(ck, alloc: Allocation, digest: str | None = None, producer: str = "cassandra-rtl encode") -> dict:
    a = copy.deepcopy(ck.args)
    return {"producer": producer, "source": Path(str(ck.source)).name,
            META_KEY: alloc.to_json(),
            ARTIFACT_KEY: {"version": ARTIFACT_VERSION, "args": args_to_json(a),
                           "tokenizer": tokenizer_to_json(ck.tokenizer), "source": Path(str(ck.source)).name,
                           "source_sha256": digest,
                           "tensor_sha256": {n: tensor_digest(b) for n, b in ck.bits.items()},
                           "bf16_bytes": int(sum(b.size * 2 for b in ck.bits.values()))}}


def write_artifact(ck, alloc: Allocation, path, digest: str | None = None, progress=None,
                   producer: str = "cassandra-rtl encode", consume: bool = False) -> dict:
    """Encode ``ck`` with ``alloc`` into the model artifact ``path`` (atomic: complete or absent).
    ``consume``: empty ``ck.bits`` while encoding (peak memory: the encoded model twice, not the checkpoint too)."""
    from cassandra_rtl.golden.container import write_container

    t0 = time.perf_counter()
    meta = artifact_meta(ck, alloc, digest, producer)
    values = int(sum(b.size for b in ck.bits.values()))
    enc = dict(encode_checkpoint(ck, alloc, progress, consume, format3=True))
    write_container(path, enc, meta)
    return {"path": str(path), "bytes": Path(path).stat().st_size, "tensors": len(enc),
            "values": values, "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------ reading
class _SectionView:
    """A section of a memory-mapped container, sliceable like the bytes ``read_container`` would hold;
    remembers the pages it handed out so that they can be dropped from the process again."""

    def __init__(self, mm: mmap.mmap, offset: int, length: int):
        self.mm, self.offset, self.length = mm, offset, length
        self.mv = memoryview(mm)                 # planes are zero-copy views of the mapped file
        self.lo, self.hi = None, None

    def __len__(self):
        return self.length

    def __getitem__(self, s):
        if not isinstance(s, slice):
            raise TypeError("section views are sliced only")
        start, stop, _ = s.indices(self.length)
        a, b = self.offset + start, self.offset + max(start, stop)
        self.lo = a if self.lo is None else min(self.lo, a)
        self.hi = b if self.hi is None else max(self.hi, b)
        return self.mv[a:b]

    def release(self):
        if self.lo is not None:
            _drop_pages(self.mm, self.lo, self.hi)
        self.lo = self.hi = None


def _drop_pages(mm: mmap.mmap, a: int, b: int) -> None:
    if not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    page = mmap.PAGESIZE
    a0 = a - a % page
    n = min(len(mm), b) - a0
    if n > 0:
        try:
            mm.madvise(mmap.MADV_DONTNEED, a0, n)
        except (OSError, ValueError):
            pass


@dataclass
class Artifact:
    path: Path
    header: dict
    args: ModelArgs
    tokenizer: object
    alloc: Allocation
    info: dict
    size: int
    meta: dict = field(default_factory=dict)

    @property
    def bf16_bytes(self) -> int:
        return int(self.info.get("bf16_bytes", 0))

    def entries(self) -> list:
        t = self.header.get("tensors")
        if not isinstance(t, list):
            raise FormatError(f"{self.path.name}: header has no tensor list")
        return t

    def tensors(self, verification: bool = True):
        """``(name, EncodedTensor)`` one at a time, planes sliced from a memory map (checked by the section
        CRCs first). The previous tensor's pages are dropped when the next one is read."""
        try:
            from cassandra_rtl.golden.container import _tensor
        except ImportError:                     # the container module changed: read it whole instead
            _tensor = None
        if _tensor is None:
            from cassandra_rtl.golden.container import read_container

            yield from read_container(self.path, verification).tensors.items()
            return
        wanted = SECTION_NAMES if verification else SECTION_NAMES[:1]
        with open(self.path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None
        if mm is None:
            raise FormatError(f"{self.path.name}: empty file")
        try:
            views = {}
            for s in wanted:
                off, length, crc = self._section(s)
                got = 0
                for a in range(off, off + length, CHUNK):
                    b = min(off + length, a + CHUNK)
                    got = zlib.crc32(mm[a:b], got)
                    _drop_pages(mm, a, b)
                if got != crc:
                    raise FormatError(f"{self.path.name}: {s} section checksum mismatch (corrupt container)")
                views[s] = _SectionView(mm, off, length)
            seen = set()
            for entry in self.entries():
                try:
                    name, enc = _tensor(entry, views)
                except FormatError as exc:
                    raise FormatError(f"{self.path.name}: {exc}") from None
                if name in seen:
                    raise FormatError(f"{self.path.name}: duplicate tensor {name!r}")
                seen.add(name)
                yield name, enc
                del enc                          # the consumer decoded it: drop its pages from the process
                for v in views.values():
                    v.release()
        finally:
            views = None
            try:
                mm.close()
            except BufferError:                  # a caller still holds a plane view: the map closes with it
                pass

    def _section(self, name: str) -> tuple[int, int, int]:
        try:
            sec = self.header["sections"][name]
            off, length, crc = int(sec["offset"]), int(sec["length"]), int(sec["crc32"])
        except (KeyError, TypeError, ValueError):
            raise FormatError(f"{self.path.name}: header lacks a valid {name} section entry") from None
        if off < 0 or length < 0 or off + length > self.size:
            raise FormatError(f"{self.path.name}: truncated container: {name} section ends at {off + length}, "
                              f"file has {self.size} bytes")
        return off, length, crc


def open_artifact(path) -> Artifact:
    """Parse the header of a model artifact (tensors are read later, streamed, by ``load_models``)."""
    from cassandra_rtl.golden.container import read_header

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: is not a regular file" if p.exists() else f"no such container: {p}")
    size = p.stat().st_size
    try:
        with open(p, "rb") as f:
            header = read_header(f, size)
    except FormatError as exc:
        raise FormatError(f"{p.name}: {exc}") from None
    meta = header.get("meta") if isinstance(header.get("meta"), dict) else {}
    info = meta.get(ARTIFACT_KEY)
    if not isinstance(info, dict) or META_KEY not in meta:
        raise InputError(f"{p}: holds tensors but no model (a plain `cassandra-rtl encode` container); write a "
                         "model artifact with `cassandra-rtl encode MODEL -o OUT.cass --draft-config "
                         "bundled|uniform|FILE`")
    if info.get("version") != ARTIFACT_VERSION:
        raise FormatError(f"{p.name}: model artifact version {info.get('version')!r} is not supported "
                          f"(this reader: {ARTIFACT_VERSION})")
    try:
        alloc = Allocation.from_json(meta[META_KEY])
    except ConfigError as exc:
        raise FormatError(f"{p.name}: {exc}") from None
    args = args_from_json(info.get("args"))
    return Artifact(p, header, args, tokenizer_from_json(info.get("tokenizer")), alloc, info, size, meta)


def _param_bits(p: torch.Tensor) -> np.ndarray:
    return p.data.view(torch.int16).numpy().view(np.uint16)


@dataclass
class Loaded:
    """What ``load_models`` built: the target, the draft (or None), the bytes each reads per tensor."""

    target: Transformer
    draft: Transformer | None
    spec_bytes: dict
    full_bytes: dict
    seconds: float
    rtl_tensors: list = field(default_factory=list)
    verified: bool = False
    rtl_values: int = 0              # weight values whose draft decode came from the RTL (== golden, asserted)


def decode_into(dst: np.ndarray, enc, fn, step_values: int = 1 << 22) -> None:
    """``dst[:] = fn(enc).reshape(-1)``, a large tensor decoded a slice of chunks at a time (whole
    superblocks, on chunk boundaries) so that only one slice's output is ever held besides ``dst``."""
    n = int(np.prod(enc.shape))
    if n <= 2 * step_values:
        np.copyto(dst, fn(enc).reshape(-1))
        return
    from cassandra_rtl.golden import codec

    G = enc.config.group_size
    A = int(getattr(enc.config, "chunk_superblocks", 1) or 1)
    per = max(A, (step_values // (G * A)) * A)           # superblocks per slice, a multiple of the chunk
    nsb = -(-n // G)
    if not hasattr(codec, "slice_superblocks"):          # a codec without slicing: decode it whole
        np.copyto(dst, fn(enc).reshape(-1))
        return
    for s in range(0, nsb, per):
        out = fn(codec.slice_superblocks(enc, s, min(nsb, s + per))).reshape(-1)
        dst[s * G: s * G + out.size] = out


DRAFT_MEMORY = ("derived", "copy")


def _c1_mask(m: int) -> int:
    """The int16 AND mask that keeps sign, exponent and the top ``m`` mantissa bits (FORMAT.md §2.1, C1)."""
    return int(np.array((0xFFFF << (7 - m)) & 0xFFFF, dtype=np.uint16).view(np.int16))


class DerivedDraft(Transformer):
    """The Cassandra draft without a second copy of its layers (``draft_memory="derived"``).

    A C1 draft weight is the target's bits with the mantissa cut to m bits where the speculation stream
    keeps the value, 0 where it prunes it (FORMAT.md §2.1). So a layer's draft matrices are rebuilt from the
    target's parameters into one layer-sized scratch just before the layer runs (``_block``): an AND with the
    mantissa mask and, for a tensor that prunes, a multiply by its keep bitmap (1 bit per value, packed).
    ``load_models`` checks every derived tensor against ``decode_draft`` of the speculation stream when it
    records the bitmap, so the draft computes on exactly the decoded draft's bits. The embedding / LM head
    (and any tensor that is not derivable, e.g. C2) keep their own decoded storage; 1-D tensors are the
    target's own (exact in both views)."""

    def __init__(self, args: ModelArgs, target: Transformer):
        # no storage: every 2-D weight is derived or given its own (allocating them first, even untouched,
        # would leave the C heap with a model-sized free region that later temporaries fault in)
        from .transformer import placeholder, uninitialized_weights

        with uninitialized_weights(placeholder):
            super().__init__(args)
        self.__dict__["_src"] = target           # not a submodule: the target is its own model
        self._scratch: dict = {}                 # linear name -> one layer-sized bf16 buffer shared by all layers
        self._plan: list[list] = [[] for _ in range(args.n_layers)]   # per layer: (dst, src, mask, keep bits)
        self._filled = -1
        for blk, tblk in zip(self.layers, target.layers):
            for mod, tmod in ((blk.attn_norm, tblk.attn_norm), (blk.ffn_norm, tblk.ffn_norm),
                              (blk.attn.q_norm, tblk.attn.q_norm), (blk.attn.k_norm, tblk.attn.k_norm)):
                if mod is not None:
                    mod.weight = tmod.weight
            for n in ("bq", "bk", "bv"):
                if getattr(blk.attn, n) is not None:
                    setattr(blk.attn, n, getattr(tblk.attn, n))
        self.norm.weight = target.norm.weight

    @staticmethod
    def _owner(blk, n):
        return blk.attn if n in ("wq", "wk", "wv", "wo") else blk.mlp

    def derive(self, li: int, n: str, mask: int, keep: np.ndarray | None) -> None:
        """Layer ``li``'s ``n`` becomes a view of the shared scratch, rebuilt from the target before use."""
        blk, tblk = self.layers[li], self._src.layers[li]
        src = getattr(self._owner(tblk, n), n)
        key = (n, tuple(src.shape))
        if key not in self._scratch:
            self._scratch[key] = torch.empty(src.shape, dtype=torch.bfloat16)
        buf = self._scratch[key]
        setattr(self._owner(blk, n), n, torch.nn.Parameter(buf, requires_grad=False))
        self._plan[li].append((_param_bits(buf).reshape(-1).view(np.int16),
                               _param_bits(src).reshape(-1).view(np.int16), np.int16(mask), keep))
        self._filled = -1

    def own(self, name: str) -> torch.Tensor:
        """Give ``name`` (a 2-D weight that is not derived) its own storage; returns it."""
        ref = self.named_weights()[name]
        t = torch.empty(ref.shape, dtype=torch.bfloat16)
        if name == "tok_emb":
            self.tok_emb = torch.nn.Parameter(t, requires_grad=False)
        elif name == "lm_head":
            self.lm_head = torch.nn.Parameter(t, requires_grad=False)
        else:
            _, i, n = name.split(".")
            setattr(self._owner(self.layers[int(i)], n), n, torch.nn.Parameter(t, requires_grad=False))
        return t

    def _fill(self, li: int) -> None:
        for dst, src, mask, keep in self._plan[li]:
            np.bitwise_and(src, mask, out=dst)
            if keep is not None:
                np.multiply(dst, np.unpackbits(keep, count=dst.size, bitorder="little"), out=dst,
                            casting="unsafe")
        self._filled = li

    def _block(self, blk, li, x, start_pos, cache, **kw):
        if self._filled != li and self._plan[li]:
            self._fill(li)
        return super()._block(blk, li, x, start_pos, cache, **kw)

    def resident_bytes(self) -> int:
        """Bytes the draft holds besides the target: the scratch, the keep bitmaps, own tensors."""
        own = sum(p.numel() * 2 for n, p in self.named_weights().items()
                  if p.dim() == 2 and not any(p.data_ptr() == b.data_ptr() for b in self._scratch.values()))
        return (sum(b.numel() * 2 for b in self._scratch.values()) + own
                + sum(k.nbytes for plan in self._plan for _, _, _, k in plan if k is not None))


def _derivable(name: str, enc) -> bool:
    return name.startswith("layers.") and len(enc.shape) == 2 and enc.config.scheme == "c1"


def _keep_bits(draft: np.ndarray, target: np.ndarray, mask: int) -> np.ndarray | None | bool:
    """The keep bitmap that rebuilds ``draft`` from ``target`` (None: nothing pruned; False: not derivable)."""
    cut = target & np.uint16(mask & 0xFFFF)
    eq = draft == cut
    if eq.all():
        return None
    if draft[~eq].any():
        return False
    return np.packbits(eq, bitorder="little")


def load_models(tensors, args: ModelArgs, draft: bool = True, rtl=None, rtl_layers=None, digests=None,
                originals=None, progress=None, total=None, step_values: int = 1 << 22,
                draft_memory: str = "derived") -> Loaded:
    """Build the target (``decode_full``) and the draft (``decode_draft``) from ``(name, EncodedTensor)``
    pairs, one tensor at a time into preallocated parameters.

    ``draft_memory``: ``"derived"`` (default) keeps no copy of the draft's C1 layer matrices: they are
    rebuilt from the target's bits layer by layer as the draft runs (``DerivedDraft``; every one checked
    here against ``decode_draft``); ``"copy"`` decodes the whole draft into its own parameters.
    ``rtl(name, enc)`` optionally decodes the draft's streams through the RTL (asserted equal to golden)
    for the layers in ``rtl_layers`` (None: every 2-D tensor); it returns None for a tensor it cannot read. ``digests`` (name -> tensor_digest): check
    every full decode against them (``--verify``). ``originals`` (name -> bits): the checkpoint itself is
    at hand (encode and run in one process), so the target takes its bits and ``decode_full`` is checked
    against them."""
    from .transformer import uninitialized_weights

    if draft_memory not in DRAFT_MEMORY:
        raise ConfigError(f"unknown draft memory mode {draft_memory!r} (choose from {', '.join(DRAFT_MEMORY)})")
    t0 = time.perf_counter()
    with uninitialized_weights():              # pages become resident as each tensor is decoded into them
        target = Transformer(args).eval()
        if draft and draft_memory == "copy":
            dm = Transformer(args).eval()
    if draft and draft_memory == "derived":
        dm = DerivedDraft(args, target).eval()
    elif not draft:
        dm = None
    tw = target.named_weights()
    dw = dm.named_weights() if dm is not None else {}
    spec_bytes, full_bytes, rtl_names, seen, rtl_values = {}, {}, [], set(), 0
    chosen = None if rtl_layers is None else tuple(f"layers.{i}." for i in rtl_layers)
    for i, (name, enc) in enumerate(tensors):
        if name not in tw:
            raise InputError(f"tensor {name!r} is not a parameter of the {args.arch} model described by the meta")
        shape = tuple(tw[name].shape)
        if tuple(enc.shape) != shape:
            raise InputError(f"tensor {name!r} has shape {tuple(enc.shape)}, the model needs {shape}")
        tb = _param_bits(tw[name]).reshape(-1)
        decode_into(tb, enc, decode_full, step_values)
        if originals is not None:
            if not np.array_equal(tb, originals[name].reshape(-1)):
                raise AssertionError(f"decode_full({name}) differs from the original bits")
        elif digests is not None and tensor_digest(tb) != digests.get(name):
            raise FormatError(f"{name}: the full decode differs from the checkpoint's bits (digest mismatch)")
        if dm is not None:
            if len(shape) == 2:
                derived = isinstance(dm, DerivedDraft) and _derivable(name, enc)
                if derived:
                    db = np.empty(tb.size, np.uint16)          # one tensor's draft, checked and dropped
                elif isinstance(dm, DerivedDraft):
                    db = _param_bits(dm.own(name)).reshape(-1)
                else:
                    db = _param_bits(dw[name]).reshape(-1)
                decode_into(db, enc, decode_draft, step_values)
                r = rtl(name, enc) if rtl is not None and (chosen is None or name.startswith(chosen)) else None
                if r is not None:                      # None: a tensor the RTL does not read (golden decodes it)
                    r = np.asarray(r).reshape(-1)
                    if not np.array_equal(r, db):
                        raise AssertionError(f"RTL draft decode of {name} differs from the golden decode_draft")
                    rtl_names.append(name)
                    rtl_values += db.size
                    del r
                if derived:
                    mask = _c1_mask(enc.config.mantissa_bits)
                    keep = _keep_bits(db, tb, mask)
                    if keep is False:                  # never for a C1 stream; kept as a copy if it happens
                        np.copyto(_param_bits(dm.own(name)).reshape(-1), db)
                    else:
                        _, li, n = name.split(".")
                        dm.derive(int(li), n, mask, keep)
                    del db
                spec_bytes[name] = enc.spec_nbytes
            elif not isinstance(dm, DerivedDraft):
                np.copyto(_param_bits(dw[name]).reshape(-1), tb)
        if len(shape) == 2:
            full_bytes[name] = enc.spec_nbytes + enc.verif_nbytes
        seen.add(name)
        del enc
        if progress:
            progress(i + 1, total or len(tw), f"decode {name}")
    missing = set(tw) - seen
    if missing:
        raise InputError(f"the container lacks tensors {sorted(missing)[:3]}")
    return Loaded(target, dm, spec_bytes, full_bytes, time.perf_counter() - t0, rtl_names,
                  digests is not None or originals is not None, rtl_values)


def cache_path(cache_dir, digest: str, alloc: Allocation, source_name: str) -> Path:
    """``<cache_dir>/<model stem>-<key>.cass``; the key covers the model's content digest, the allocation,
    the artifact and container format versions (never the path the model was named by)."""
    key = hashlib.sha256(json.dumps([ARTIFACT_VERSION, list(FORMAT_VERSION), digest, alloc.digest()]).encode())
    key = key.hexdigest()[:20]
    folder = Path(os.path.expanduser(str(cache_dir)))
    if folder.is_dir():                        # the same content under another name: the entry already there
        for hit in sorted(folder.glob(f"*-{key}.cass")):
            return hit
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(source_name).stem)[:48]
    return folder / f"{stem}-{key}.cass"
