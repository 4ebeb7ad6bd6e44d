"""`cassandra-rtl generate`: plain or speculative decoding (Cassandra / layer-skip / n-gram draft) on a model.

Streams the generated text, then prints a stats table (or one JSON object with --json).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..argtypes import float_range, int_at_least, int_range, layer_list, non_negative_int, positive_int
from ..errors import ConfigError, InputError
from ..progress import step_progress



def _schedule(text: str) -> str:
    """--adaptive's value, checked here (one line on a bad schedule) and passed to the engine as is."""
    import argparse

    from ..model.engine import parse_schedule
    from ..errors import ConfigError
    try:
        parse_schedule(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text

def _table(s: dict) -> str:
    def f(v, fmt="{:.3f}"):
        return "-" if v is None else fmt.format(v)

    rows = [
        ("draft", s.get("draft")),
        ("numerics", s.get("numerics", "torch")),
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
        ("ready to decode (s, CPU s)", f"{f(s.get('ready_s'), '{:.1f}')}, {f(s.get('ready_cpu_s'), '{:.1f}')}"),
        ("peak RSS (MB) / bf16 weights", f"{f(s.get('peak_rss_bytes', 0) / 1e6, '{:.0f}')} / "
         f"{f(s.get('bf16_weight_bytes_all', 0) / 1e6, '{:.0f}')} = {f(s.get('peak_rss_over_bf16'), '{:.2f}x')}"),
    ]
    for k, v in s["modeled_speedup"].items():
        rows.append((f"modeled speedup vs bf16 AR: {k}", f(v, "{:.2f}x")))
    for k, modes in ((s.get("performance_model") or {}).get("by_device") or {}).items():
        bi, rx = modes.get("batch-invariant") or {}, modes.get("row-exact") or {}
        rows.append((f"  {k}: format x speculation (batch-invariant verify)",
                     f"{f(bi.get('format_speedup'), '{:.2f}')} x {f(bi.get('speculation_speedup'), '{:.2f}')} "
                     f"= {f(bi.get('speedup'), '{:.2f}x')}; row-exact verify {f(rx.get('speedup'), '{:.2f}x')}"))
    npu = s.get("npu") or {}
    if "speedup_measured" in npu:
        rows.append(("NPU tile: speedup measured in cycles (modeled)",
                     f"{f(npu['speedup_measured'], '{:.2f}x')} ({f(npu['speedup_modeled'], '{:.2f}x')}); "
                     f"{f(npu['measured_bytes_fraction'], '{:.3f}')} of the bytes through the RTL"))
    elif "error" in npu:
        rows.append(("NPU tile", npu["error"]))
    if "sampling_check" in s:
        c = s["sampling_check"]
        rows.append(("sampling check (KS of PIT values vs the target)",
                     f"p = {c['p_value']:.3g} over {c['runs']} runs ({'ok' if c['ok'] else 'FAILED'})"))
    if "lossless_vs_plain" in s:
        rows.append(("token-identical to plain greedy", s["lossless_vs_plain"]))
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def _npu_report(m) -> dict:
    """The run's speedup measured in NPU tile cycles (tb/npu/speedup.py; docs/NPU.md), or why it is missing."""
    from ..tb.npu import available
    from ..tb.npu.speedup import generation_report

    cass = m.load_info.path if m.load_info is not None else None
    if not cass or not str(cass).endswith(".cass"):
        return {"error": "the model was not loaded from a .cass artifact (use the model cache or --cass)"}
    if not available():
        return {"error": "Verilator is not available: the tile's cycles cannot be measured"}

    def progress(done, total):
        print(f"[npu] measuring the tile on {Path(cass).name}: job {done}/{total}", file=sys.stderr, flush=True)
    return generation_report(m.last_inputs, cass, progress=progress)


def run(args) -> int:
    if args.npu_rtl_layers and args.numerics != "npu":
        raise ConfigError("--npu-rtl-layers runs layers on the NPU tile: use it with --numerics npu")
    import time

    t_start = time.perf_counter()
    from ..model.api import DEFAULT_CACHE, CassandraModel, load
    from ..model.runner import set_threads
    from ..model.sampling import SamplingParams

    set_threads(args.threads)
    if args.rtl_layers is not None and not args.rtl:
        raise ConfigError("--rtl-layers selects the layers decoded through the RTL: use it with --rtl")
    if args.cass is not None and args.model is not None:
        raise ConfigError("--cass and --model: give one (a .cass model artifact already holds the model)")
    if args.cass is not None:
        fixed = [o for o, v in (("--draft-config", args.draft_config), ("--keep-ratio", args.keep_ratio),
                                ("--mantissa-bits", args.mantissa_bits), ("--kv-mantissa-bits", args.kv_mantissa_bits))
                 if v is not None]
        if fixed:
            raise ConfigError(f"--cass: the container fixes the draft; {fixed[0]} would need a re-encode "
                              "(`cassandra-rtl encode MODEL -o OUT.cass --draft-config ...`)")
    if args.draft == "cassandra":                # codec options checked now, not after loading the model
        from ..golden.config import CodecConfig

        CodecConfig(scheme=args.scheme, group_size=args.group_size,
                    keep_ratio=1.0 if args.keep_ratio is None else args.keep_ratio,
                    mantissa_bits=3 if args.mantissa_bits is None else args.mantissa_bits)
    if args.draft_config is not None and args.draft != "cassandra":
        raise ConfigError("--draft-config configures the Cassandra draft: use it with --draft cassandra")
    sp = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)
    skip = None
    if args.skip_layers:
        try:
            skip = [int(x) for x in args.skip_layers.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"--skip-layers expects comma-separated integers, got {args.skip_layers!r}") from None
    quiet = args.json

    def precheck(tok, margs):                    # the prompt must fit before anything slow runs
        if tok is None:
            raise ConfigError("this checkpoint has no tokenizer")
        text = args.prompt if args.raw else tok.apply_chat(args.prompt, system=args.system)
        n = len(tok.encode(text)) + (margs.bos_token_id is not None)
        if n >= margs.max_seq_len:
            raise InputError(f"prompt of {n} tokens does not fit the context of {margs.max_seq_len} "
                             f"(at most {margs.max_seq_len - 1})")

    prog = None if quiet else step_progress("load")   # a line every few seconds also when not on a terminal
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731 - where the cache is: always said
    if args.cass is not None:
        m = CassandraModel.from_cass(args.cass, draft=args.draft, max_seq_len=args.max_seq_len, verify=args.verify,
                                     rtl=args.rtl, rtl_layers=args.rtl_layers, progress=prog, skip_layers=skip,
                                     n_skip=args.n_skip, precheck=precheck, draft_memory=args.draft_memory)
        m.set_numerics(args.numerics)
    else:
        cache = None if args.no_cache else (args.cache_dir or DEFAULT_CACHE)
        m = load(args.model, draft=args.draft, draft_config=args.draft_config, keep_ratio=args.keep_ratio,
                 mantissa_bits=args.mantissa_bits, kv_mantissa_bits=args.kv_mantissa_bits,
                 kv_keep_ratio=args.kv_keep_ratio, scheme=args.scheme, group_size=args.group_size, cache_dir=cache,
                 max_seq_len=args.max_seq_len, verify=args.verify, rtl=args.rtl, rtl_layers=args.rtl_layers,
                 skip_layers=skip, n_skip=args.n_skip, gamma=args.gamma, progress=prog, say=say,
                 precheck=precheck, draft_memory=args.draft_memory, numerics=args.numerics)
        what = (m.load_info.extra or {}).get("draft_choice") if m.load_info else None
        if what and not quiet and args.draft == "cassandra":
            print(f"[generate] draft: {what}", file=sys.stderr)
    rtl_tiles = []
    if args.npu_rtl_layers:
        from ..tb.npu import available
        from ..tb.npu.loop import attach
        if not available():
            raise ConfigError("--npu-rtl-layers needs Verilator (make setup installs it)")
        rtl_tiles = attach(m, args.npu_rtl_layers)
    ready_s = time.perf_counter() - t_start
    ready_cpu_s = time.process_time()           # CPU time of the process so far (load-independent)
    gamma = args.gamma or m.gamma
    kw = dict(system=args.system, raw=args.raw, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
              seed=args.seed, gamma=gamma, adaptive=args.adaptive, stop=args.stop or ())
    ids = m.encode_prompt(args.prompt, args.system, args.raw)
    for piece in m.stream(ids, args.max_new_tokens, **kw):
        if not quiet:
            sys.stdout.write(piece)
            sys.stdout.flush()
    g = m.last
    summary = g.metrics
    summary["text"] = g.text
    summary["stop"] = g.stop
    summary["ready_s"] = ready_s                # start of the command (after the interpreter) -> ready to decode
    summary["ready_cpu_s"] = ready_cpu_s
    summary["threads"] = __import__("torch").get_num_threads()
    if args.compare and sp.greedy and m.drafter is not None and args.draft != "int8":
        ref = m.generate(ids, args.max_new_tokens, speculative=False, **{**kw, "stop": ()})
        # a stop string ends the speculative run early: its tokens must be a prefix of plain decoding's
        summary["lossless_vs_plain"] = g.tokens == ref.tokens[:len(g.tokens)] if g.stop else ref.tokens == g.tokens
    elif args.compare and not sp.greedy and m.drafter is not None:
        # Sampling: losslessness is distributional, so check the emitted tokens against the target's own
        # distribution over repeated runs (model/sampling_check.py) instead of token identity.
        from ..model.sampling_check import sampling_check
        chk = sampling_check(m.engine, m.drafter, ids, sp, args.max_new_tokens, gamma, runs=50, seed=args.seed)
        summary["sampling_check"] = chk

    if rtl_tiles:
        st = {"layers": list(args.npu_rtl_layers)}
        for t in rtl_tiles:
            for k, v in t.stats.items():
                if k == "by_kind":
                    for kk, vv in v.items():
                        st.setdefault(k, {})[kk] = st.get(k, {}).get(kk, 0) + vv
                else:
                    st[k] = st.get(k, 0) + v
        summary["npu_rtl"] = st
    if args.numerics == "npu" and m.drafter is not None and args.draft == "cassandra":
        summary["npu"] = _npu_report(m)
    if quiet:
        print(json.dumps(summary))
    else:
        sys.stdout.write("\n\n")
        print(_table(summary))
    if args.chat:
        _chat(m, args, g, kw, quiet)
    if summary.get("lossless_vs_plain") is False or (summary.get("sampling_check") or {}).get("ok") is False:
        what = ("the sampled tokens do not follow the target's distribution (sampling check)"
                if "sampling_check" in summary else "speculative output differs from plain greedy decoding")
        print(f"cassandra-rtl generate: error: {what}", file=sys.stderr)
        return 1
    return 0


def _chat(m, args, first, kw, quiet) -> None:
    """--chat: more user turns from stdin (one line each; an empty line or EOF ends), each answered with the
    whole conversation as the prompt."""
    c = m.chat(args.system)
    c.messages += [{"role": "user", "content": args.prompt}, {"role": "assistant", "content": first.text}]
    tty = sys.stdin.isatty()
    kw = {k: v for k, v in kw.items() if k not in ("system", "raw")}
    while True:
        if tty:
            sys.stderr.write("> ")
            sys.stderr.flush()
        line = sys.stdin.readline()
        if not line or not line.strip() or line.strip() in ("/exit", "/quit"):
            return
        pieces = c.stream(line.rstrip("\n"), args.max_new_tokens, **kw)
        for piece in pieces:
            if not quiet:
                sys.stdout.write(piece)
                sys.stdout.flush()
        g = m.last
        if quiet:
            print(json.dumps({"turn": len(c.messages) // 2, "text": g.text, "tokens": g.tokens,
                              "acceptance_rate": g.metrics["acceptance_rate"],
                              "cpu_tokens_per_s": g.metrics["cpu_tokens_per_s"]}))
        else:
            rate = g.metrics["acceptance_rate"]
            sys.stdout.write(f"\n[{len(g.tokens)} tokens, acceptance "
                             f"{'-' if rate is None else f'{rate:.2f}'}]\n")
        sys.stdout.flush()


def register(sub):
    p = sub.add_parser("generate", help="generate text with plain or self-speculative decoding",
                       description=__doc__)
    p.add_argument("--prompt", required=True, help="user message (wrapped in the chat template unless --raw)")
    p.add_argument("--model", default=None, help="a .gguf file or a Hugging Face folder (default: bundled SmolLM2); "
                   "the Cassandra draft is encoded once into the model cache (--cache-dir) and loaded from there")
    p.add_argument("--cass", default=None, help="a model artifact from `cassandra-rtl encode MODEL -o F.cass "
                   "--draft-config ...`: target and draft are decoded from it, nothing is re-encoded")
    p.add_argument("--verify", action="store_true", help="also check every tensor's full decode against the "
                   "digest of the checkpoint's bits recorded in the container (the section CRCs are always checked)")
    p.add_argument("--system", default=None, help="system message for the chat template")
    p.add_argument("--chat", action="store_true", help="multi-turn: after the answer to --prompt, read more user "
                   "turns from stdin (one per line; an empty line or EOF ends)")
    p.add_argument("--stop", action="append", default=None, metavar="TEXT",
                   help="stop when the text contains TEXT (not printed; repeatable)")
    p.add_argument("--max-new-tokens", type=positive_int, default=64)
    p.add_argument("--draft", default="cassandra", choices=["cassandra", "layerskip", "ngram", "none", "int8"],
                   help="draft source; 'none' = plain bf16 decoding, 'int8' = INT8 weight-only plain decoding")
    p.add_argument("--gamma", type=int_range(1, 64), default=None,
                   help="draft length, 1..64 (initial length with --adaptive; default: the gamma recorded in the "
                   "draft allocation, 4 for a uniform draft)")
    p.add_argument("--adaptive", nargs="?", const="hf", default=False, type=_schedule, metavar="SCHEDULE",
                   help="draft-length schedule: 'hf' (the default with a bare --adaptive: +2 after a fully accepted "
                        "draft, -1 else) or 'confidence[:T]' (draft up to --gamma tokens, stop after one of draft "
                        "probability < T, default 0.6; the best schedule on the held-out prompts with --gamma 4, "
                        "docs/DRAFT_SELECTION.md)")
    p.add_argument("--keep-ratio", type=float_range(0, 1, lo_open=True), default=None,
                   help="Cassandra: fraction of weights the draft keeps (uniform draft; default 1.0, and the tuned "
                   "allocation for the bundled model when no uniform option is given)")
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
    p.add_argument("--top-k", type=non_negative_int, default=0, help="sample from the k most likely tokens (0 = off)")
    p.add_argument("--seed", type=int_range(0, 2**63 - 1), default=0)
    p.add_argument("--max-seq-len", type=int_at_least(2), default=2048, help="static KV cache length")
    p.add_argument("--threads", type=int_range(1, 1024), default=None,
                   help="torch CPU threads (1..1024; default 1: decoding a small model is a chain of small "
                   "matrix-vector products, and extra threads only add synchronisation on a few cores)")
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("--compare", action="store_true", help="greedy: also run plain greedy decoding and check token "
                   "identity; sampling: check the emitted tokens against the target distribution over 50 runs")
    p.add_argument("--rtl", action="store_true", help="decode the draft's streams through the RTL in simulation")
    p.add_argument("--rtl-layers", type=layer_list, default=None,
                   help="with --rtl: 'all' or comma-separated layer indices whose weight streams go through the RTL "
                   "(the rest use the golden decoder; the draft is the same either way)")
    p.add_argument("--cache-dir", default=None, help="model cache folder (default ~/.cache/cassandra-rtl, or "
                   "$XDG_CACHE_HOME/cassandra-rtl): one model artifact per model content and draft allocation")
    p.add_argument("--no-cache", action="store_true", help="encode in memory and write nothing to the model cache")
    p.add_argument("--draft-memory", choices=("derived", "copy"), default=None,
                   help="derived: the draft's layers are rebuilt from the target's bits as they run (one model in "
                        "memory; the default, or $CASSANDRA_RTL_DRAFT_MEMORY); copy: the draft decoded into its own "
                        "parameters (about 1.3x faster on a CPU, 0.7x more memory; docs/MODEL.md)")
    p.add_argument("--npu-rtl-layers", type=layer_list, default=None, metavar="LAYERS",
                   help="with --numerics npu: the linear layers of these transformer layers (e.g. 0 or 0,5) run on "
                        "the Verilated NPU tile in every pass (target: full passes, draft: draft passes), checked "
                        "against the reference")
    p.add_argument("--numerics", choices=("torch", "npu"), default="torch",
                   help="torch: bf16 F.linear, a verify pass runs each row as a 1-token step (row-exact); npu: every "
                        "linear layer (target and draft) computes what the NPU tile computes (golden/npu.py, 8 lanes, "
                        "RNE to bf16), batch-invariant, so a verify pass sends its k+1 rows through each layer "
                        "together (one weight read); greedy speculative output equals plain greedy under the same "
                        "numerics (--compare). Much slower on a CPU")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text + table")
    p.set_defaults(func=run)
