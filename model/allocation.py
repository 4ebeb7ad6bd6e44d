"""A draft allocation: per-tensor codec configs + KV view + salience, as a reusable JSON config.

Saved by ``cassandra-rtl tune`` (JSON file and/or the ``draft_allocation`` entry of a .cass container's
``meta``), loaded by ``cassandra-rtl generate --draft-config PATH``. Plugs into
``drafters.build_cassandra(ck, target, weight_cfg_for=alloc.weight_cfg_for, kv_cfg=alloc.kv_cfg(head_dim),
salience_for=alloc.salience_for(ck))``.

JSON (``"format": "cassandra-draft-config"``, version 1)::

    {"format": "cassandra-draft-config", "version": 1,
     "model": "SmolLM2-135M-Instruct.Q4_1.gguf",          # informative
     "bands": 3,                                           # layer bands used by group names
     "default": {codec config},                            # every 2-D weight not matched below
     "groups": {"wq.b0": {codec config}, "emb": {...}},    # group = tensor type . layer band (group_of)
     "tensors": {"layers.3.w_down": {codec config}},       # explicit per-tensor overrides (win over groups)
     "kv": {"scheme": "c1", "mantissa_bits": 3, "keep_ratio": 1.0},  # the draft's KV view
     "gamma": 4,                                           # draft length the search found best
     "salience": {"kind": "wanda" | "magnitude", "calibration": {...}, "norms": {key: base64 <f2}, "digest": ...},
     "estimate": {...}}                                    # the search's proxy numbers (informative)

A codec config is ``{"scheme", "group_size", "mantissa_bits", "keep_count" | "keep_ratio"}``.
"""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

from cassandra_rtl.errors import ConfigError, InputError
from cassandra_rtl.golden.config import CodecConfig

from .transformer import LAYER_LINEARS

FORMAT = "cassandra-draft-config"
VERSION = 1
META_KEY = "draft_allocation"  # key of the allocation in a .cass container's meta
TYPES = tuple(LAYER_LINEARS) + ("emb",)
# The tuned allocation of the bundled SmolLM2-135M-Instruct (`--draft-config bundled`), found by
# `cassandra-rtl tune` (docs/DRAFT_SELECTION.md).
BUNDLED = Path(__file__).parent / "allocations" / "smollm2-135m-instruct.json"


def option_key(cfg: CodecConfig | None) -> str:
    if cfg is None:
        return "none"
    return f"{cfg.scheme}/G{cfg.group_size}/k{cfg.keep_count}/m{cfg.mantissa_bits}"


def group_of(name: str, n_layers: int, bands: int = 3) -> str:
    """``emb`` for the embedding / LM head; ``<type>.b<band>`` for layer linears (bands of equal layer count)."""
    if name in ("tok_emb", "lm_head"):
        return "emb"
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "layers":
        band = int(parts[1]) * bands // max(n_layers, 1)
        return f"{parts[2]}.b{band}"
    return name


def all_groups(n_layers: int, bands: int = 3) -> list[str]:
    return ["emb"] + [f"{t}.b{b}" for b in range(bands) for t in LAYER_LINEARS]


def _cfg_json(cfg: CodecConfig) -> dict:
    return {"scheme": cfg.scheme, "group_size": cfg.group_size, "mantissa_bits": cfg.mantissa_bits,
            "keep_count": cfg.keep_count}


def _cfg_from(d, kind="weight") -> CodecConfig:
    if not isinstance(d, dict):
        raise ConfigError("a codec config in the draft config must be an object")
    unknown = set(d) - {"scheme", "group_size", "mantissa_bits", "keep_count", "keep_ratio", "kind"}
    if unknown:
        raise ConfigError(f"unknown codec config keys {sorted(unknown)}")
    kw = {k: d[k] for k in ("scheme", "group_size", "mantissa_bits", "keep_count", "keep_ratio") if k in d}
    try:
        return CodecConfig(kind=kind, **kw)
    except TypeError as exc:
        raise ConfigError(f"bad codec config: {exc}") from None


class Allocation:
    def __init__(self, default: CodecConfig | None = None, groups: dict | None = None, tensors: dict | None = None,
                 kv: CodecConfig | None = None, gamma: int = 4, n_layers: int = 30, bands: int = 3,
                 salience: dict | None = None, model: str = "", estimate: dict | None = None):
        self.default = default or CodecConfig(keep_ratio=1.0, mantissa_bits=3)
        self.groups = dict(groups or {})
        self.tensors = dict(tensors or {})
        # KV view: group size is set to head_dim when built (kv_cfg); kept here as scheme/keep/m
        self.kv = kv or CodecConfig(keep_ratio=1.0, mantissa_bits=3, group_size=64, kind="kv")
        self.gamma = int(gamma)
        self.n_layers = int(n_layers)
        self.bands = int(bands)
        self.salience = dict(salience or {"kind": "magnitude"})
        self.model = model
        self.estimate = dict(estimate or {})

    # -- resolution ---------------------------------------------------------------------------------
    def cfg_for(self, name: str) -> CodecConfig:
        if name in self.tensors:
            return self.tensors[name]
        g = group_of(name, self.n_layers, self.bands)
        return self.groups.get(g, self.default)

    def group_cfg(self, group: str) -> CodecConfig:
        return self.groups.get(group, self.default)

    def with_group(self, group: str, cfg: CodecConfig) -> "Allocation":
        a = self.copy()
        a.groups[group] = cfg
        return a

    def with_kv(self, cfg: CodecConfig) -> "Allocation":
        a = self.copy()
        a.kv = cfg
        return a

    def copy(self) -> "Allocation":
        return Allocation(self.default, self.groups, self.tensors, self.kv, self.gamma, self.n_layers, self.bands,
                          copy.deepcopy(self.salience), self.model, copy.deepcopy(self.estimate))

    # -- build_cassandra hooks ----------------------------------------------------------------------
    def weight_cfg_for(self, name: str, shape) -> CodecConfig:
        return self.cfg_for(name)

    def kv_cfg(self, head_dim: int) -> CodecConfig:
        return CodecConfig(scheme=self.kv.scheme, keep_ratio=self.kv.keep_count / self.kv.group_size,
                           mantissa_bits=self.kv.mantissa_bits, group_size=head_dim, kind="kv")

    def salience_for(self, ck):
        """``salience_for(name, bits)`` hook; Wanda norms come from the config (never recomputed)."""
        from .salience import norms_from_json, salience_fn

        kind = self.salience.get("kind", "magnitude")
        norms = norms_from_json(self.salience["norms"]) if kind == "wanda" and "norms" in self.salience else None
        if kind == "wanda" and norms is None:
            raise ConfigError("draft config: salience 'wanda' needs its channel norms ('salience.norms')")
        return salience_fn(kind, norms, ck.args.tie_embeddings)

    def check(self, ck) -> None:
        """Raise a ConfigError if this allocation does not fit the checkpoint."""
        if self.n_layers != ck.args.n_layers:
            raise ConfigError(f"draft config is for {self.n_layers} layers, the model has {ck.args.n_layers}")
        names = {n for n, b in ck.bits.items() if b.ndim == 2}
        extra = set(self.tensors) - names
        if extra:
            raise ConfigError(f"draft config names tensors the model lacks: {sorted(extra)[:3]}")

    # -- summary ------------------------------------------------------------------------------------
    def describe(self) -> dict:
        """Compact description for run summaries."""
        from collections import Counter

        used = Counter(option_key(c) for c in list(self.groups.values()) + [self.default])
        return {"draft_config": {"groups": {g: option_key(c) for g, c in sorted(self.groups.items())},
                                 "default": option_key(self.default), "kv": option_key(self.kv),
                                 "salience": self.salience.get("kind"), "gamma": self.gamma,
                                 "options_used": dict(used)}}

    def digest(self) -> str:
        d = self.to_json(include_norms=False)
        d.pop("estimate", None)
        d.pop("model", None)
        d["salience"] = {"kind": self.salience.get("kind"), "digest": self.salience.get("digest")}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    # -- JSON ---------------------------------------------------------------------------------------
    def to_json(self, include_norms: bool = True) -> dict:
        sal = dict(self.salience)
        if not include_norms:
            sal.pop("norms", None)
        return {"format": FORMAT, "version": VERSION, "model": self.model, "bands": self.bands,
                "n_layers": self.n_layers, "default": _cfg_json(self.default),
                "groups": {g: _cfg_json(c) for g, c in sorted(self.groups.items())},
                "tensors": {n: _cfg_json(c) for n, c in sorted(self.tensors.items())},
                "kv": {"scheme": self.kv.scheme, "keep_ratio": self.kv.keep_ratio,
                       "mantissa_bits": self.kv.mantissa_bits},
                "gamma": self.gamma, "salience": sal, "estimate": self.estimate}

    @classmethod
    def from_json(cls, d) -> "Allocation":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ConfigError(f"not a draft config (expected \"format\": \"{FORMAT}\")")
        if d.get("version") != VERSION:
            raise ConfigError(f"unsupported draft config version {d.get('version')!r} (this reader: {VERSION})")
        try:
            kvd = d.get("kv", {})
            if not isinstance(kvd, dict):
                raise ConfigError("draft config: 'kv' must be an object")
            kv = CodecConfig(scheme=kvd.get("scheme", "c1"), keep_ratio=kvd.get("keep_ratio", 1.0),
                             mantissa_bits=kvd.get("mantissa_bits", 3), group_size=64, kind="kv")
            groups, tensors = d.get("groups", {}), d.get("tensors", {})
            if not isinstance(groups, dict) or not isinstance(tensors, dict):
                raise ConfigError("draft config: 'groups' and 'tensors' must be objects")
            gamma = d.get("gamma", 4)
            if not isinstance(gamma, int) or isinstance(gamma, bool) or not 1 <= gamma <= 64:
                raise ConfigError(f"draft config: gamma must be an integer in 1..64, got {gamma!r}")
            sal = d.get("salience", {"kind": "magnitude"})
            if not isinstance(sal, dict) or sal.get("kind", "magnitude") not in ("magnitude", "wanda"):
                raise ConfigError("draft config: salience.kind must be 'magnitude' or 'wanda'")
            return cls(default=_cfg_from(d.get("default", {})),
                       groups={str(g): _cfg_from(c) for g, c in groups.items()},
                       tensors={str(n): _cfg_from(c) for n, c in tensors.items()},
                       kv=kv, gamma=gamma, n_layers=int(d.get("n_layers", 30)), bands=int(d.get("bands", 3)),
                       salience=sal, model=str(d.get("model", "")), estimate=d.get("estimate") or {})
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"bad draft config: {exc}") from None

    def save(self, path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path) -> "Allocation":
        """From a JSON file, from the meta of a .cass container, or ``bundled`` (the bundled model's tuned one)."""
        p = BUNDLED if str(path) == "bundled" else Path(path)
        if not p.exists():
            raise InputError(f"draft config not found: {p}")
        if p.suffix == ".cass":
            from cassandra_rtl.golden.container import read_header

            with open(p, "rb") as f:
                header = read_header(f, p.stat().st_size)
            meta = header.get("meta") or {}
            if META_KEY not in meta:
                raise ConfigError(f"{p}: the container's meta holds no {META_KEY!r}")
            return cls.from_json(meta[META_KEY])
        try:
            d = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p}: not valid JSON ({exc})") from None
        return cls.from_json(d)


def uniform(n_layers: int, scheme="c1", keep_ratio=1.0, mantissa_bits=3, group_size=128, **kw) -> Allocation:
    return Allocation(CodecConfig(scheme=scheme, keep_ratio=keep_ratio, mantissa_bits=mantissa_bits,
                                  group_size=group_size), n_layers=n_layers, **kw)


def build_engine(ck, alloc: Allocation, progress=None, decode=None, kv_decode=None):
    """(engine, Cassandra drafter, target) for ``alloc`` through the ``build_cassandra`` hooks."""
    from .drafters import build_cassandra
    from .engine import Engine, bf16_cost

    alloc.check(ck)
    target = ck.build()
    stop = ck.tokenizer.stop_ids if ck.tokenizer else set(ck.args.eos_token_ids)
    d, tcost = build_cassandra(ck, target, alloc.weight_cfg_for, alloc.kv_cfg(ck.args.head_dim),
                               salience_for=alloc.salience_for(ck), progress=progress, decode=decode,
                               kv_decode=kv_decode)
    d.info.update(alloc.describe())
    return Engine(target, tcost, stop_ids=stop, baseline_cost=bf16_cost(target)), d, target
