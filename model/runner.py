"""Glue shared by the CLI, the demo and the benchmark: build the engine + draft for a named method."""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from cassandra_rtl.errors import ConfigError, ToolMissingError
from cassandra_rtl.golden.config import CodecConfig

from .drafters import (NgramDrafter, build_cassandra, int8_model, layerskip_drafter, search_skip_layers,
                       search_skip_layers_auto)
from .engine import Engine, bf16_cost
from .loader import Checkpoint

DRAFTS = ("cassandra", "layerskip", "ngram", "none", "int8")

# A small built-in calibration text for the layer-skip search (never one of the benchmark prompts).
CALIB_TEXTS = (
    "The history of the printing press begins in the fifteenth century, when movable type made books cheaper.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules inside plants.",
)


@dataclass
class DraftOptions:
    gamma: int = 4
    adaptive: bool = False
    keep_ratio: float = 1.0
    mantissa_bits: int = 3
    group_size: int = 128
    scheme: str = "c1"
    kv_keep_ratio: float = 1.0
    kv_mantissa_bits: int | None = None  # None: same as mantissa_bits
    skip_layers: list[int] | None = None
    n_skip: int = 0  # layer-skip: 0 = choose how many by the search (expected speedup), else this many
    ngram_max: int = 3
    rtl: bool = False
    cache_dir: str | None = None  # keep encoded weights in a .cass container here (None: no cache)
    rtl_layers: list[int] | None = None  # None = every tensor through the RTL; else these layers only


RTL_CONFIG = "decoder_c1v3_l8"   # --rtl's decoder: format 3.0, as an artifact stores it and the RTL KV encoders write


def _bulk():
    try:
        from cassandra_rtl.tb import bulk
    except ImportError as e:
        raise ToolMissingError(f"--rtl: the RTL co-simulation path (cassandra_rtl.tb.bulk) is not available ({e})") \
            from None
    if not bulk.available():
        raise ToolMissingError("--rtl: Verilator, which runs the RTL co-simulation, is not installed (run `make setup`)")
    return bulk


def rtl_kv_decoder():
    """The RTL KV-view decoder ``decode(enc) -> uint16`` (with ``.many(encs)`` batching one step's vectors into
    one co-simulation run), or None when the co-simulation path is unavailable."""
    try:
        bulk = _bulk()
    except ToolMissingError:
        return None

    def fn(enc):
        return bulk.decode_with_rtl(enc, mode="draft", config=RTL_CONFIG)

    fn.many = lambda encs: bulk.decode_many_with_rtl(list(encs), mode="draft", config=RTL_CONFIG, jobs=1)
    return fn


RTL_KV_ENCODER = {"c1": "encoder_kv_c1_l2", "c2": "encoder_kv_c2_l2"}  # hw/configs.py, docs/HARDWARE.md 3 / 3a


def rtl_kv_encoder(scheme: str = "c1"):
    """The RTL KV encoder in place of golden.kv.encode_kv (cassandra_rtl.tb.bulk_encoder.rtl_kv_encoder: every
    plane word asserted equal to golden, ``.many`` = one co-simulation run per step, ``.stats`` its counters),
    or None when the co-simulation path is unavailable."""
    try:
        from cassandra_rtl.tb import bulk_encoder
    except ImportError:
        return None
    if not bulk_encoder.available():
        return None
    return bulk_encoder.rtl_kv_encoder(RTL_KV_ENCODER[scheme])


def rtl_decoder():
    """The RTL-in-the-loop draft decoder ``decode(name, enc) -> uint16``: the generated decoder's Verilog run by
    the verification work's bulk co-simulation (cassandra_rtl.tb.bulk.decode_with_rtl). Raises a one-line
    ToolMissingError when that path or its simulator is unavailable."""
    bulk = _bulk()
    return lambda name, enc: bulk.decode_with_rtl(enc, mode="draft", config=RTL_CONFIG)


def build(ck: Checkpoint, draft: str, o: DraftOptions, progress=None, encoded=None, target=None):
    """Returns (engine, drafter or None, target model). ``draft`` in DRAFTS. ``target``: the model of
    ``ck``'s bits when it is already built (a model artifact's decoded target), so it is not built twice."""
    if draft not in DRAFTS:
        raise ConfigError(f"unknown draft {draft!r} (choose from {', '.join(DRAFTS)})")
    if o.rtl and draft != "cassandra":
        raise ConfigError("--rtl decodes the Cassandra draft's streams: use it with --draft cassandra")
    if o.rtl and o.scheme != "c1":
        raise ConfigError("--rtl: the generated decoder implements scheme c1 only")
    target = ck.build() if target is None else target
    stop = ck.tokenizer.stop_ids if ck.tokenizer else set(ck.args.eos_token_ids)
    if draft == "none":
        return Engine(target, stop_ids=stop), None, target
    if draft == "int8":
        q, cost = int8_model(ck)
        return Engine(q, cost, stop_ids=stop, baseline_cost=bf16_cost(target)), None, q
    if draft == "ngram":
        return Engine(target, stop_ids=stop), NgramDrafter(o.ngram_max), target
    if draft == "layerskip":
        skip = o.skip_layers
        if skip is None:
            tok = ck.tokenizer
            calib = [tok.encode(t) for t in CALIB_TEXTS] if tok else [list(range(1, 40))]
            if o.n_skip:
                skip = search_skip_layers(target, calib, o.n_skip, progress)
            else:
                skip, _ = search_skip_layers_auto(target, calib, o.gamma, progress=progress)
        bad = [i for i in skip if not 0 <= i < ck.args.n_layers]
        if bad:
            raise ConfigError(f"skip layers {bad} out of range 0..{ck.args.n_layers - 1}")
        return Engine(target, stop_ids=stop), layerskip_drafter(target, skip), target
    wcfg = CodecConfig(scheme=o.scheme, keep_ratio=o.keep_ratio, mantissa_bits=o.mantissa_bits,
                       group_size=o.group_size)
    kvm = o.mantissa_bits if o.kv_mantissa_bits is None else o.kv_mantissa_bits
    kcfg = CodecConfig(scheme=o.scheme, keep_ratio=o.kv_keep_ratio, mantissa_bits=kvm,
                       group_size=ck.args.head_dim, kind="kv")
    dec = None
    if o.rtl:
        rtl = rtl_decoder()
        if o.rtl_layers is None:
            dec = rtl
        else:
            chosen = {f"layers.{i}." for i in o.rtl_layers}

            def dec(name, enc):
                if any(name.startswith(c) for c in chosen):
                    return rtl(name, enc)
                from cassandra_rtl.golden.codec import decode_draft

                return decode_draft(enc)
    rtl_names: list[str] = []
    if dec is not None:
        inner = dec

        def dec(name, enc):  # noqa: F811 - record which tensors went through the RTL
            out = inner(name, enc)
            if o.rtl_layers is None or any(name.startswith(f"layers.{i}.") for i in o.rtl_layers):
                rtl_names.append(name)
            return out
    d, tcost = build_cassandra(ck, target, lambda n, s: wcfg, kcfg, progress=progress, decode=dec,
                               encoded=encoded, cache_dir=o.cache_dir, kv_decode=rtl_kv_decoder() if o.rtl else None,
                               kv_encode=rtl_kv_encoder(kcfg.scheme) if o.rtl else None)
    if o.rtl:
        d.info["rtl_weight_tensors"] = len(rtl_names)
        d.info["rtl_kv"] = d.kv_view.decode is not None
        d.info["rtl"] = d.kv_view.rtl
        d.kv_view.rtl["weight_tensors"] = len(rtl_names)
    return Engine(target, tcost, stop_ids=stop, baseline_cost=bf16_cost(target)), d, target


def stderr_progress(label: str):
    def cb(i, n, what):
        print(f"\r[{label}] {i}/{n} {what[:60]:<60}", end="" if i < n else "\n", file=sys.stderr, flush=True)

    return cb


def set_threads(n: int | None) -> None:
    """torch CPU threads; default 1. Decoding a small model is a chain of small matrix-vector products:
    on a 2-core machine extra threads only add synchronisation (SmolLM2 plain decoding:
    18.4 tok/s on 1 thread, 5.0 on all cores), so more than one is opt-in (``--threads``)."""
    torch.set_num_threads(int(n) if n else 1)
