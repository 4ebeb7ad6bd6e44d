"""Long-context workload: acceptance of the Cassandra draft (weights + KV view) vs context length, and the
modeled speedup (performance model v2, model/metrics.py) per device as the KV cache grows.

    python bench/long_context.py [--contexts 512,1024,2048,4096,7900] [--new-tokens 256] [--out FILE.jsonl]
                                 [--kv-exact] [--plot docs/figures/long_context.png] [--table FILE.jsonl]

For every context length C the prompt is the first C tokens of a long technical document (this repository's
docs/*.md, digest recorded) in the chat template, followed by a question asking for a step-by-step summary
(a reasoning-style decode); the target decodes ``--new-tokens`` tokens greedily with the tuned draft of the
bundled model (model/allocations/, gamma from the allocation unless --gamma). ``--kv-exact`` also runs the
same weight draft reading the target's exact K/V (KV view keep 1.0, m 7 = lossless), which separates the
weight draft's acceptance from the KV view's. ``--check`` also decodes plain greedy and compares (doubles the
time). Progress goes to stderr; one JSON line per (context, view) to --out, with the model's inputs. Not part
of `make test` (hours at 8k on one loaded core).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("docs/FORMAT.md", "docs/HARDWARE.md", "docs/VERIFICATION.md", "docs/SYNTHESIS.md", "docs/MODEL.md")
QUESTION = ("\n\nSummarise the document above. Then explain, step by step, why its design decisions were made "
            "and what could go wrong with each of them.")


def document() -> tuple[str, str]:
    text = "\n\n".join((ROOT / p).read_text() for p in DOCS if (ROOT / p).exists())
    return text, hashlib.sha256(text.encode()).hexdigest()[:16]


def prompt_ids(tok, doc_ids: list[int], ctx: int) -> list[int]:
    """Chat-templated prompt of about ``ctx`` tokens: a document prefix + QUESTION (trimmed to fit)."""
    q = len(tok.encode(tok.apply_chat(QUESTION)))
    n = max(16, ctx - q)
    while True:
        ids = tok.encode(tok.apply_chat(tok.decode(doc_ids[:n]) + QUESTION))
        if len(ids) <= ctx or n <= 16:
            return ids
        n -= len(ids) - ctx


def run(a) -> int:
    import torch

    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.model.allocation import Allocation, build_engine
    from cassandra_rtl.model.drafters import build_cassandra
    from cassandra_rtl.model.engine import Engine
    from cassandra_rtl.model.loader import load
    from cassandra_rtl.model.metrics import model_summary

    torch.set_num_threads(a.threads)
    contexts = [int(x) for x in a.contexts.split(",")]
    ck = load(a.model, max_seq_len=max(contexts) + a.new_tokens + 8)
    tok = ck.tokenizer
    if max(contexts) + a.new_tokens > ck.args.max_seq_len:
        print(f"error: the model's context is {ck.args.max_seq_len} tokens; --contexts + --new-tokens exceed it",
              file=sys.stderr)
        return 2
    text, digest = document()
    doc_ids = tok.encode(text)
    say = lambda s: print(f"[long_context] {s}", file=sys.stderr, flush=True)  # noqa: E731
    say(f"document: {len(doc_ids)} tokens (digest {digest}); model context {ck.args.max_seq_len}")
    al = Allocation.load(a.draft_config)
    t0 = time.perf_counter()
    eng, d, target = build_engine(ck, al)
    views = [("kv_view", d, eng)]
    if a.kv_exact:
        exact_kv = CodecConfig(scheme="c1", keep_ratio=1.0, mantissa_bits=7, group_size=ck.args.head_dim, kind="kv")
        d2, tcost2 = build_cassandra(ck, target, al.weight_cfg_for, exact_kv, salience_for=al.salience_for(ck),
                                     encoded=d.encoded)
        views.append(("kv_exact", d2, Engine(target, tcost2, stop_ids=set(), baseline_cost=eng.baseline_cost)))
    say(f"draft built in {time.perf_counter() - t0:.0f} s; gamma {a.gamma or al.gamma}")
    out = open(a.out, "a") if a.out else None
    plain = Engine(target, stop_ids=set()) if a.check else None
    for ctx in contexts:
        ids = prompt_ids(tok, doc_ids, ctx)
        for view, drafter, e in views:
            e.stop_ids = set()  # decode the full budget: the workload is the length, not the answer
            done = [0]
            t1 = time.perf_counter()

            def progress(new, view=view, t1=t1):
                done[0] += len(new)
                if done[0] % 32 < len(new) or done[0] >= a.new_tokens:
                    say(f"ctx {len(ids)} {view}: {done[0]}/{a.new_tokens} tokens, {time.perf_counter() - t1:.0f} s")

            r = e.generate(ids, a.new_tokens, drafter=drafter, gamma=a.gamma or al.gamma, on_tokens=progress)
            s = r.summary()
            s.update(model_summary(r, e, drafter, with_passes=True))
            s.update(context=len(ids), context_target=ctx, view=view, document_digest=digest,
                     wall_s=time.perf_counter() - t1, gamma=a.gamma or al.gamma, draft_config=a.draft_config)
            if plain is not None:
                ref = plain.generate(ids, a.new_tokens)
                s["lossless"] = ref.tokens == r.tokens
            kv_share = r.ledger.passes and sum(p.kv_bytes for p in r.ledger.passes) / max(1, r.ledger.bytes())
            s["kv_share_of_bytes"] = kv_share
            pm = s["performance_model"]["by_device"]
            say(f"ctx {len(ids)} {view}: acceptance {s['acceptance_rate']:.3f} alpha {s['alpha']:.3f} "
                f"KV {100 * kv_share:.0f}% of bytes; speedup "
                + ", ".join(f"{k} {v['batch-invariant']['speedup']:.2f}x" for k, v in pm.items())
                + (f"; lossless {s['lossless']}" if "lossless" in s else ""))
            if out:
                s.pop("tokens", None)
                out.write(json.dumps(s) + "\n")
                out.flush()
    return 0


def load_rows(files) -> list[dict]:
    rows = []
    for fn in files:
        rows += [json.loads(x) for x in Path(fn).read_text().splitlines() if x.strip()]
    return sorted(rows, key=lambda r: (r["view"], r["context"]))


def table(rows) -> str:
    devs = list(rows[0]["performance_model"]["by_device"]) if rows else []
    lines = ["| context | view | acceptance | alpha | tokens/step | KV % of bytes | "
             + " | ".join(f"{k} speedup (= format x speculation), row-exact" for k in devs) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(devs)]
    for r in rows:
        cells = []
        for k in devs:
            b = r["performance_model"]["by_device"][k]
            bi = b["batch-invariant"]
            cells.append(f"{bi['speedup']:.2f}x (= {bi['format_speedup']:.2f} x {bi['speculation_speedup']:.2f}), "
                         f"{b['row-exact']['speedup']:.2f}x")
        lines.append(f"| {r['context']} | {r['view']} | {r['acceptance_rate']:.3f} | {r['alpha']:.3f} | "
                     f"{r['tokens_per_step']:.2f} | {100 * r['kv_share_of_bytes']:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows, png) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for view, mk in (("kv_view", "o-"), ("kv_exact", "s--")):
        rs = [r for r in rows if r["view"] == view]
        if rs:
            ax.plot([r["context"] for r in rs], [r["acceptance_rate"] for r in rs], mk,
                    label={"kv_view": "draft weights + KV view (k 1.0, m 3)",
                           "kv_exact": "draft weights, exact K/V"}[view])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("acceptance (accepted / drafted)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    rs = [r for r in rows if r["view"] == "kv_view"]
    for k, c in zip(rs[0]["performance_model"]["by_device"] if rs else [], ("C0", "C1", "C2")):
        xs = [r["context"] for r in rs]
        for mode, st in (("batch-invariant", "-"), ("row-exact", ":")):
            ax2.plot(xs, [r["performance_model"]["by_device"][k][mode]["speedup"] for r in rs], st, marker="o",
                     color=c, label=f"{rs[0]['performance_model']['devices'][k]['name'].split(' (')[0]}, {mode}")
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("context length (tokens)")
    ax2.set_ylabel("modeled speedup vs bf16 AR (decode)")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=6.5)
    fig.suptitle("SmolLM2-135M-Instruct, tuned Cassandra draft, greedy: long context", fontsize=10)
    fig.text(0.01, 0.01, "python bench/long_context.py --table ... --plot " + str(png), fontsize=6, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--draft-config", default="bundled")
    ap.add_argument("--contexts", default="512,1024,2048,4096,7900")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--gamma", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--kv-exact", action="store_true", help="also run the weight draft on exact K/V")
    ap.add_argument("--check", action="store_true", help="also decode plain greedy and compare tokens")
    ap.add_argument("--out", default=None)
    ap.add_argument("--table", nargs="+", default=None, help="only print the table (and --plot) of these JSONL files")
    ap.add_argument("--plot", default=None, help="write the figure here (with --table)")
    a = ap.parse_args(argv)
    if a.table:
        rows = load_rows(a.table)
        print(table(rows))
        if a.plot:
            plot(rows, a.plot)
            print(f"wrote {a.plot}", file=sys.stderr)
        return 0
    return run(a)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT.parent))
    raise SystemExit(main())
