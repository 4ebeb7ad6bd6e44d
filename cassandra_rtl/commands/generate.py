"""`cassandra-rtl generate`: plain or speculative decoding (Cassandra / layer-skip / n-gram draft) on a model.

Streams the generated text, then prints a stats table (or one JSON object with --json).
"""
from __future__ import annotations

import json
import sys

from ..argtypes import float_range, int_at_least, int_range, layer_list, non_negative_int, positive_int
from ..errors import ConfigError, InputError


def _table(s: dict) -> str:
    def f(v, fmt="{:.3f}"):
        return "-" if v is None else fmt.format(v)

    rows = [
        ("draft", s.get("draft")),
        ("generated tokens", s["generated"]),
        ("prompt tokens", s["prompt_tokens"]),
        ("acceptance rate", f(s["acceptance_rate"])),
        ("acceptance per draft position", " ".join(f"{x:.2f}" for x in s["acceptance_per_position"]) or "-"),
        ("tokens per verify step", f(s["tokens_per_step"])),
        ("mean gamma", f(s["mean_gamma"], "{:.2f}")),
        ("bytes read / token (MB)", f(s["bytes_per_token"] / 1e6, "{:.2f}")),
        ("  of which draft (MB)", f(s["draft_bytes_per_token"] / 1e6, "{:.2f}")),
        ("bf16 autoregressive bytes / token (MB)", f(s["bf16_ar_bytes_per_token"] / 1e6, "{:.2f}")),
        ("CPU tokens/s (decode)", f(s["cpu_tokens_per_s"], "{:.2f}")),
    ]
    for k, v in s["modeled_speedup"].items():
        rows.append((f"modeled speedup vs bf16 AR: {k}", f(v, "{:.2f}x")))
    for k, modes in ((s.get("performance_model") or {}).get("by_device") or {}).items():
        bi, rx = modes.get("batch-invariant") or {}, modes.get("row-exact") or {}
        rows.append((f"  {k}: format x speculation (batch-invariant verify)",
                     f"{f(bi.get('format_speedup'), '{:.2f}')} x {f(bi.get('speculation_speedup'), '{:.2f}')} "
                     f"= {f(bi.get('speedup'), '{:.2f}x')}; row-exact verify {f(rx.get('speedup'), '{:.2f}x')}"))
    if "sampling_check" in s:
        c = s["sampling_check"]
        rows.append(("sampling check (KS of PIT values vs the target)",
                     f"p = {c['p_value']:.3g} over {c['runs']} runs ({'ok' if c['ok'] else 'FAILED'})"))
    if "lossless_vs_plain" in s:
        rows.append(("token-identical to plain greedy", s["lossless_vs_plain"]))
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def run(args) -> int:
    from ..model.drafters import default_cache_dir
    from ..model.loader import load
    from ..model.runner import DraftOptions, build, set_threads
    from ..model.sampling import SamplingParams
    from ..progress import step_progress

    set_threads(args.threads)
    if args.rtl_layers is not None and not args.rtl:
        raise ConfigError("--rtl-layers selects the layers decoded through the RTL: use it with --rtl")
    if args.draft == "cassandra":                # codec options checked now, not after loading the model
        from ..golden.config import CodecConfig

        CodecConfig(scheme=args.scheme, group_size=args.group_size,
                    keep_ratio=1.0 if args.keep_ratio is None else args.keep_ratio,
                    mantissa_bits=3 if args.mantissa_bits is None else args.mantissa_bits)
    # draft selection (issue 7): a tuned per-tensor allocation from `cassandra-rtl tune` (JSON or .cass meta)
    alloc = None
    uniform_given = any(v is not None for v in (args.keep_ratio, args.mantissa_bits, args.kv_mantissa_bits))
    if (args.draft == "cassandra" and args.draft_config is None and args.model is None and not uniform_given
            and args.rtl_layers is None):
        # The bundled model's default draft is the tuned allocation of issue 7 (docs/DRAFT_SELECTION.md).
        args.draft_config = "bundled"
        if not args.json:
            print("[generate] draft: the tuned allocation for the bundled model (--draft-config bundled); "
                  "--keep-ratio / --mantissa-bits select a uniform draft instead", file=sys.stderr)
    args.keep_ratio = 1.0 if args.keep_ratio is None else args.keep_ratio
    args.mantissa_bits = 3 if args.mantissa_bits is None else args.mantissa_bits
    if args.draft_config:
        from ..model.allocation import Allocation

        if args.draft != "cassandra":
            raise ConfigError("--draft-config configures the Cassandra draft: use it with --draft cassandra")
        alloc = Allocation.load(args.draft_config)
    if args.gamma is None:
        args.gamma = alloc.gamma if alloc is not None else 4
    sp = SamplingParams(temperature=args.temperature, top_p=args.top_p)
    skip = None
    if args.skip_layers:
        try:
            skip = [int(x) for x in args.skip_layers.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"--skip-layers expects comma-separated integers, got {args.skip_layers!r}") from None
    rtl_layers = args.rtl_layers
    if alloc is not None and args.rtl and rtl_layers is not None:
        raise ConfigError("--draft-config with --rtl decodes every layer through the RTL (omit --rtl-layers)")
    opts = DraftOptions(gamma=args.gamma, adaptive=args.adaptive, keep_ratio=args.keep_ratio,
                        mantissa_bits=args.mantissa_bits, group_size=args.group_size, scheme=args.scheme,
                        kv_keep_ratio=args.kv_keep_ratio, kv_mantissa_bits=args.kv_mantissa_bits,
                        skip_layers=skip, n_skip=args.n_skip, rtl=args.rtl, rtl_layers=rtl_layers,
                        cache_dir=None if args.no_cache else default_cache_dir())
    quiet = args.json
    ck = load(args.model, max_seq_len=args.max_seq_len)
    n_layers = ck.args.n_layers
    for opt, layers in (("--rtl-layers", rtl_layers), ("--skip-layers", skip)):
        bad = [i for i in layers or () if not 0 <= i < n_layers]
        if bad:
            raise ConfigError(f"{opt}: layer {bad[0]} does not exist ({ck.source} has layers 0..{n_layers - 1})")
    if args.n_skip >= n_layers:
        raise ConfigError(f"--n-skip {args.n_skip}: the model has only {n_layers} layers")
    tok = ck.tokenizer
    if tok is None:
        raise ConfigError("this checkpoint has no tokenizer")
    text = args.prompt if args.raw else tok.apply_chat(args.prompt)
    ids = ([ck.args.bos_token_id] if ck.args.bos_token_id is not None else []) + tok.encode(text)
    if len(ids) >= ck.args.max_seq_len:
        raise InputError(f"prompt of {len(ids)} tokens does not fit the context of {ck.args.max_seq_len} "
                         f"(at most {ck.args.max_seq_len - 1})")
    prog = None if quiet else step_progress("build")   # a line every few seconds also when not on a terminal
    if alloc is not None:
        from ..model.allocation import build_engine
        from ..model.runner import rtl_decoder, rtl_kv_decoder

        eng, drafter, _ = build_engine(ck, alloc, progress=prog, decode=rtl_decoder() if args.rtl else None,
                                       kv_decode=rtl_kv_decoder() if args.rtl else None)
    else:
        eng, drafter, _ = build(ck, args.draft, opts, progress=prog)

    printed = [0]
    gen_ids: list[int] = []

    def on_tokens(new):
        gen_ids.extend(new)
        if quiet:
            return
        s = tok.decode(gen_ids)
        if s.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for the next token
            return
        sys.stdout.write(s[printed[0]:])
        sys.stdout.flush()
        printed[0] = len(s)

    res = eng.generate(ids, args.max_new_tokens, drafter=drafter, gamma=args.gamma, adaptive=args.adaptive,
                       sp=sp, seed=args.seed, on_tokens=on_tokens)
    summary = res.summary()
    summary["text"] = tok.decode(res.tokens)
    summary["model"] = ck.source
    from ..model import metrics
    summary.update(metrics.model_summary(res, eng, drafter))       # performance model v2 + its inputs
    if args.compare and sp.greedy and args.draft not in ("none", "int8"):
        plain, _, _ = build(ck, "none", DraftOptions())
        ref = plain.generate(ids, args.max_new_tokens)
        summary["lossless_vs_plain"] = ref.tokens == res.tokens
    elif args.compare and not sp.greedy and drafter is not None:
        # Sampling: losslessness is distributional, so check the emitted tokens against the target's own
        # distribution over repeated runs (model/sampling_check.py) instead of token identity.
        from ..model.sampling_check import sampling_check
        chk = sampling_check(eng, drafter, ids, sp, args.max_new_tokens, args.gamma, runs=50, seed=args.seed)
        summary["sampling_check"] = chk

    if quiet:
        print(json.dumps(summary))
    else:
        s = tok.decode(gen_ids)
        sys.stdout.write(s[printed[0]:] + "\n\n")
        print(_table(summary))
    if summary.get("lossless_vs_plain") is False or (summary.get("sampling_check") or {}).get("ok") is False:
        what = ("the sampled tokens do not follow the target's distribution (sampling check)"
                if "sampling_check" in summary else "speculative output differs from plain greedy decoding")
        print(f"cassandra-rtl generate: error: {what}", file=sys.stderr)
        return 1
    return 0


def register(sub):
    p = sub.add_parser("generate", help="generate text with plain or self-speculative decoding",
                       description=__doc__)
    p.add_argument("--prompt", required=True, help="user message (wrapped in the chat template unless --raw)")
    p.add_argument("--model", default=None, help="a .gguf file or a Hugging Face folder (default: bundled SmolLM2)")
    p.add_argument("--max-new-tokens", type=positive_int, default=64)
    p.add_argument("--draft", default="cassandra", choices=["cassandra", "layerskip", "ngram", "none", "int8"],
                   help="draft source; 'none' = plain bf16 decoding, 'int8' = INT8 weight-only plain decoding")
    p.add_argument("--gamma", type=int_range(1, 64), default=None,
                   help="draft length, 1..64 (initial length with --adaptive; default 4, or the gamma recorded in --draft-config)")
    p.add_argument("--adaptive", action="store_true", help="adapt gamma: +2 after a fully accepted draft, -1 else")
    p.add_argument("--keep-ratio", type=float_range(0, 1, lo_open=True), default=None,
                   help="Cassandra: fraction of weights the draft keeps (uniform draft; default 1.0, and the tuned allocation for the bundled model when no "
                   "uniform option is given)")
    p.add_argument("--mantissa-bits", type=int_range(0, 7), default=None,
                   help="Cassandra: mantissa bits the draft keeps (0..7; uniform draft, default 3)")
    p.add_argument("--group-size", type=int, default=128, choices=[32, 64, 128, 256],
                   help="Cassandra: weight superblock size")
    p.add_argument("--scheme", default="c1", choices=["c1", "c2"], help="Cassandra: format scheme")
    p.add_argument("--kv-keep-ratio", type=float_range(0, 1, lo_open=True), default=1.0,
                   help="Cassandra: KV view keep ratio")
    p.add_argument("--kv-mantissa-bits", type=int_range(0, 7), default=None, help="Cassandra: KV view mantissa bits "
                   "(default: --mantissa-bits)")
    p.add_argument("--draft-config", default=None, help="Cassandra: a tuned per-tensor draft allocation from "
                   "`cassandra-rtl tune` (JSON, or a .cass container holding it in its meta); overrides "
                   "--keep-ratio/--mantissa-bits/--scheme/--group-size/--kv-*")
    p.add_argument("--skip-layers", default=None, help="layer-skip: comma-separated layers (default: searched)")
    p.add_argument("--n-skip", type=non_negative_int, default=0, help="layer-skip: layers to skip when searching "
                   "(0 = let the search choose by expected speedup)")
    p.add_argument("--temperature", type=float_range(0, 100), default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float_range(0, 1, lo_open=True), default=1.0)
    p.add_argument("--seed", type=int_range(0, 2**63 - 1), default=0)
    p.add_argument("--max-seq-len", type=int_at_least(2), default=2048, help="static KV cache length")
    p.add_argument("--threads", type=int_range(1, 1024), default=None, help="torch CPU threads (1..1024)")
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("--compare", action="store_true", help="greedy: also run plain greedy decoding and check token "
                   "identity; sampling: check the emitted tokens against the target distribution over 50 runs")
    p.add_argument("--rtl", action="store_true", help="decode the draft's streams through the RTL in simulation")
    p.add_argument("--rtl-layers", type=layer_list, default=None,
                   help="with --rtl: 'all' or comma-separated layer indices whose weight streams go through the RTL (the rest use the golden decoder)")
    p.add_argument("--no-cache", action="store_true", help="do not keep the encoded draft in "
                   "~/.cache/cassandra-rtl (a .cass container per model and config)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text + table")
    p.set_defaults(func=run)
