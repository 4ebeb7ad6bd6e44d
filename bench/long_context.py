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
            e.stop_ids = set()  # decode the full budget (tokens after an end-of-turn are still the target's greedy
            #                     continuation; first_stop_at records where the answer itself ended)
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
            stops = set(tok.stop_ids)
            s["first_stop_at"] = next((i for i, t in enumerate(r.tokens) if t in stops), None)
            s["text_head"] = tok.decode(r.tokens[:120])
            if out:
                out.write(json.dumps(s) + "\n")
                out.flush()
    return 0


def run_proxy(a) -> int:
    """Teacher-forced agreement on the document itself (not on generated text): at each context C the target
    (float32 proxy of model/proxy.py, the tuner's) runs the first C + W document tokens; the draft (the tuned
    allocation's weights, exact emulation of decode_draft) runs the last W tokens after the *KV view* of the
    target's K/V of the first C positions (or the exact K/V), and agreement = draft top-1 == target top-1 on
    those W positions (the tuner's acceptance proxy, docs/DRAFT_SELECTION.md). The W positions attend to the
    draft's own K/V inside the window (a W/C approximation)."""
    import numpy as np
    import torch

    from cassandra_rtl.model.allocation import Allocation
    from cassandra_rtl.model.loader import bf16_to_bits, bits_to_bf16, load
    from cassandra_rtl.model.proxy import ProxyModel
    from cassandra_rtl.model.salience import draft_bits, kept_mask, norms_from_json
    from cassandra_rtl.model.tune import Tuner

    torch.set_num_threads(a.threads)
    contexts = [int(x) for x in a.contexts.split(",")]
    W = a.window
    ck = load(a.model, max_seq_len=max(contexts) + W + 8)
    tok = ck.tokenizer
    text, digest = document()
    doc = tok.encode(text)
    say = lambda s: print(f"[long_context proxy] {s}", file=sys.stderr, flush=True)  # noqa: E731
    al = Allocation.load(a.draft_config)
    norms = norms_from_json(al.salience["norms"]) if "norms" in al.salience else None
    t = Tuner(ck, al.salience.get("kind", "magnitude"), norms, None)
    target = ProxyModel(ck.args, ck.bits)
    draft = ProxyModel.__new__(ProxyModel)
    draft.a, draft.cos, draft.sin = target.a, target.cos, target.sin
    draft.w = dict(target.w)
    for n in t.names:
        draft.w[n] = t.draft_f32(n, al.cfg_for(n))
    kv_cfg = al.kv_cfg(ck.args.head_dim)
    out = open(a.out, "a") if a.out else None
    for C in contexts:
        t0 = time.perf_counter()
        seq = doc[: C + W]
        past = None
        for i in range(0, C, 1024):  # the target over the context in chunks (bounded attention memory)
            _, past = target.forward(seq[i:min(C, i + 1024)], head_rows=slice(0, 0), return_kv=True, past=past)
        logits, _ = target.forward(seq[C:C + W], past=past)
        # rows: predictions of tokens C+1 .. C+W from positions C .. C+W-1 (position C-1's prediction skipped)
        top = logits.argmax(-1)
        row = {"context": C, "window": W, "document_digest": digest, "draft_config": a.draft_config,
               "kv_config": kv_cfg.to_json() if hasattr(kv_cfg, "to_json") else str(kv_cfg)}
        for view in ("kv_view", "kv_exact"):
            if view == "kv_view":
                vpast = []
                for k, v in past:
                    pair = []
                    for x in (k, v):
                        b = bf16_to_bits(x).reshape(-1, x.shape[-1])
                        d = draft_bits(b, kv_cfg, kept_mask(b, kv_cfg, None))
                        pair.append(bits_to_bf16(np.asarray(d).reshape(b.shape)).float().reshape(x.shape))
                    vpast.append(tuple(pair))
            else:
                vpast = [(bits_to_bf16(bf16_to_bits(k)).float(), bits_to_bf16(bf16_to_bits(v)).float())
                         for k, v in past]
            dl, _ = draft.forward(seq[C:C + W], past=vpast)
            agree = float((dl.argmax(-1) == top).float().mean())
            lp, lq = torch.log_softmax(logits, -1), torch.log_softmax(dl, -1)
            kl = float((lp.exp() * (lp - lq)).sum(-1).mean())
            row[view] = {"agreement": agree, "kl": kl}
        row["seconds"] = time.perf_counter() - t0
        say(f"ctx {C}: agreement kv_view {row['kv_view']['agreement']:.3f} (KL {row['kv_view']['kl']:.3f}), "
            f"kv_exact {row['kv_exact']['agreement']:.3f} (KL {row['kv_exact']['kl']:.3f}), {row['seconds']:.0f} s")
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
    return 0


def load_rows(files, kind: str = "decode") -> list[dict]:
    """Rows of --out files: ``decode`` (generation runs) or ``proxy`` (teacher-forced agreement) ones."""
    rows = []
    for fn in files:
        rows += [json.loads(x) for x in Path(fn).read_text().splitlines() if x.strip()]
    if kind == "proxy":
        return sorted((r for r in rows if "window" in r), key=lambda r: r["context"])
    return sorted((r for r in rows if "view" in r), key=lambda r: (r["view"], r["context"]))


def proxy_table(rows) -> str:
    lines = ["| context | window | agreement, KV view | KL, KV view | agreement, exact K/V | KL, exact K/V |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['context']} | {r['window']} | {r['kv_view']['agreement']:.3f} | {r['kv_view']['kl']:.3f} | "
                     f"{r['kv_exact']['agreement']:.3f} | {r['kv_exact']['kl']:.3f} |")
    return "\n".join(lines)


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


def plot(rows, png, proxy=()) -> None:
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
    for view, mk in (("kv_view", "^-"), ("kv_exact", "v--")):
        if proxy:
            ax.plot([r["context"] for r in proxy], [r[view]["agreement"] for r in proxy], mk, color="grey",
                    label=f"teacher-forced agreement on the document, {'KV view' if view == 'kv_view' else 'exact K/V'}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("acceptance (decode) / top-1 agreement (teacher-forced)")
    ax.set_ylim(0, 1.02)
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
    ap.add_argument("--proxy", action="store_true",
                    help="teacher-forced draft/target agreement on the document itself instead of decoding")
    ap.add_argument("--window", type=int, default=64, help="--proxy: positions scored after each context")
    a = ap.parse_args(argv)
    if a.table:
        rows, proxy = load_rows(a.table), load_rows(a.table, "proxy")
        if rows:
            print(table(rows))
        if proxy:
            print("\n" + proxy_table(proxy))
        if a.plot:
            plot(rows, a.plot, proxy)
            print(f"wrote {a.plot}", file=sys.stderr)
        return 0
    return run_proxy(a) if a.proxy else run(a)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT.parent))
    raise SystemExit(main())
