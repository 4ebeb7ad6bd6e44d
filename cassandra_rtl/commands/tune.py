"""`cassandra-rtl tune`: search the Cassandra draft's per-tensor allocation (keep ratio, mantissa bits, scheme)
and KV view that maximise modeled speedup; write it as a reusable draft config (JSON) and/or record it in
a .cass container's meta. `cassandra-rtl generate --draft-config PATH` uses it.

Method: docs/DRAFT_SELECTION.md (Wanda-style salience from calibration prompts; teacher-forced agreement
on held-apart prompts as the acceptance proxy; exact speculation-stream bytes; greedy per-group descent).

The candidates are evaluated one after another in this process, or with ``--jobs N`` by N threads, or with
``--cluster local:N`` / ``--cluster tcp://host:8786`` / $CASSANDRA_RTL_CLUSTER on Dask workers
(cassandra_rtl/executor.py, docs/CLUSTER.md): the same draft config and log on every executor.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..argtypes import int_at_least, int_range, non_negative_int, positive_int
from ..errors import ConfigError, InputError
from ..executor import Executor, add_cluster_argument, check_cluster


def _prompts(path):
    if path is None:
        return None
    p = Path(path)
    if not p.exists():
        raise InputError(f"prompt file not found: {p}")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise InputError(f"{p}: not a UTF-8 text file") from None
    if p.suffix == ".json":
        try:
            items = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"{p}: not valid JSON ({exc})") from None
        if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
            raise InputError(f"{p}: expected a JSON list of strings")
    else:
        items = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not items:
        raise InputError(f"{p}: no prompts")
    return tuple(items)


def _options(spec: str | None):
    from ..model.tune import DEFAULT_OPTIONS

    if not spec:
        return DEFAULT_OPTIONS
    out = []
    for item in spec.split(","):
        try:
            s, k, m = item.split(":")
            out.append((s, float(k), int(m)))
        except ValueError:
            raise ConfigError(f"--options: expected scheme:keep:mantissa items, got {item!r}") from None
    return tuple(out)


def run(args) -> int:
    from ..model.loader import load
    from ..model.runner import set_threads
    from ..model.salience import CALIBRATION_PROMPTS
    from ..model.tune import EVAL_PROMPTS, run_search, write_container_with

    from ..golden.io import check_output_path

    set_threads(args.threads)
    if not args.out and not args.container:
        raise ConfigError("give --out DRAFT.json and/or --container OUT.cass")
    spec = check_cluster(args.cluster)          # one line, exit 2, before the model is loaded
    for out in (args.out, args.container):      # refused now, not after minutes of search
        if out:
            check_output_path(out)
    calib = _prompts(args.calib_prompts) or CALIBRATION_PROMPTS
    evalp = _prompts(args.eval_prompts) or EVAL_PROMPTS
    validate = _prompts(args.validate_prompts)
    opts = _options(args.options)
    if args.quick:
        evalp = evalp[:3]
        calib = calib[:4]
    t0 = time.perf_counter()

    def say(msg):
        if not args.quiet:
            print(f"[tune {time.perf_counter() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    def prog(i, n, what):
        say(f"{i}/{n} {what}")

    ck = load(args.model, max_seq_len=args.max_seq_len)
    say(f"model {ck.source}: {ck.args.n_layers} layers, dim {ck.args.dim}")
    # no --cluster / $CASSANDRA_RTL_CLUSTER and --jobs 1: every candidate in this process, one after another
    ex = Executor(args.cluster, jobs=args.jobs, progress=not args.quiet) if spec or args.jobs > 1 else None
    try:
        if ex is not None:
            say("candidates on " + ", ".join(f"{k} {v}" for k, v in ex.describe().items()))
        alloc, report = run_search(ck, salience_kind=args.salience, calib_prompts=calib, eval_prompts=evalp,
                                   n_new=args.new_tokens, options=opts, bands=args.bands,
                                   ctx=args.ctx, max_steps=args.max_steps, cache_dir=args.cache,
                                   quick=args.quick, progress=prog, say=say, log_path=args.log, executor=ex)
    finally:
        if ex is not None:
            ex.close()
    if args.validate_top:
        from ..model.tune import pick_by_validation

        alloc = pick_by_validation(ck, alloc, report, args.validate_top, validate,
                                   args.validate_tokens, progress=prog, say=say)
        report["best"] = {**report["best"], "validated": alloc.estimate["validated"]}
    if args.out:
        alloc.save(args.out)
        say(f"wrote {args.out}")
    if args.container:
        write_container_with(ck, alloc, args.container, progress=prog)
        say(f"wrote {args.container} (allocation in meta['draft_allocation'])")
    best = report["best"]
    print(json.dumps({"best": best, "uniform_best": report.get("uniform_best"),
                      "out": args.out, "container": args.container}) if args.json else
          f"best: agreement {best['agreement']:.3f}, draft {100 * best['draft_frac']:.1f}% of bf16 "
          f"({best['bits_per_value']:.2f} bits/value), gamma {best['gamma']}, "
          f"modeled speedup {best['speedup']:.2f}x (proxy estimate; measure with "
          f"`cassandra-rtl generate --draft-config ...`)")
    return 0


def register(sub):
    p = sub.add_parser("tune", help="search the Cassandra draft's per-tensor allocation (draft selection)",
                       description=__doc__)
    p.add_argument("--model", default=None, help="a .gguf file or a Hugging Face folder (default: bundled SmolLM2)")
    p.add_argument("--out", default=None, help="write the draft config JSON here")
    p.add_argument("--container", default=None, help="also encode the model with it into this .cass container")
    p.add_argument("--salience", default="wanda", choices=["wanda", "magnitude"])
    p.add_argument("--calib-prompts", default=None, help="calibration prompts: text file (one per line) or JSON list")
    p.add_argument("--eval-prompts", default=None, help="held-apart evaluation prompts (same forms)")
    p.add_argument("--new-tokens", type=positive_int, default=32, help="target continuation length per prompt")
    p.add_argument("--options", default=None, help="candidate per-group options scheme:keep:mantissa,...")
    p.add_argument("--bands", type=positive_int, default=3, help="layer bands per tensor type in the search")
    p.add_argument("--ctx", type=positive_int, default=128, help="context length assumed by the cost model")
    p.add_argument("--max-steps", type=non_negative_int, default=40, help="greedy descent steps")
    p.add_argument("--validate-top", type=non_negative_int, default=0,
                   help="re-rank the N best proxy candidates by real "
                   "speculative decoding and keep the best measured (slow: minutes per candidate on SmolLM2)")
    p.add_argument("--validate-prompts", default=None, help="prompts for --validate-top (default: the benchmark "
                   "prompts of model/bench.py; same file forms as --calib-prompts)")
    p.add_argument("--validate-tokens", type=positive_int, default=48, help="new tokens per prompt for --validate-top")
    p.add_argument("--cache", default="build/tune", help="cache directory for calibration / evaluation data")
    p.add_argument("--log", default=None, help="append every evaluated candidate as a JSON line here")
    p.add_argument("--max-seq-len", type=int_at_least(2), default=512)
    p.add_argument("--threads", type=int_range(1, 1024), default=None, help="torch CPU threads (1..1024)")
    p.add_argument("--quick", action="store_true", help="4 calibration and 3 evaluation prompts, the quick "
                   "search (SmolLM2: ~45 s on this 2-core machine at low load)")
    p.add_argument("--jobs", type=int_range(1, 64), default=1,
                   help="candidates evaluated at once by a local pool of threads (1..64; default 1: one after "
                        "another)")
    add_cluster_argument(p)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
