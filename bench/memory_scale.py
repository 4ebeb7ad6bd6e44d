"""Peak RSS of Cassandra generation against model size (target: <= 2.5x the bf16 weight bytes).

For each size, a synthetic Llama-shaped checkpoint (random bf16 weights at a realistic scale: linears
N(0, 0.02), embedding N(0, 0.02), norms ~1; the bundled SmolLM2's tokenizer, vocabulary 49,152; tied
embeddings) is written as a Hugging Face folder into ``--out``, encoded once to a model artifact
(``cassandra-rtl encode DIR -o DIR.cass --draft-config uniform --keep-ratio 0.75 --mantissa-bits 3``), and
``cassandra-rtl generate --cass DIR.cass ... --threads 1 --json`` runs in a fresh process for each draft
memory mode (``$CASSANDRA_RTL_DRAFT_MEMORY`` = derived, the default, and copy). The real SmolLM2-135M row
uses the bundled GGUF and its tuned allocation (``--draft-config bundled``). Every child runs under
``nice -n 10``, one at a time.

    python bench/memory_scale.py                          # 135m, 0.5b, 1b + SmolLM2 (make bench-memory)
    python bench/memory_scale.py --sizes 135m --modes derived --max-new-tokens 2

Columns: bf16 bytes of the weights; the process's peak RSS (getrusage ``ru_maxrss``, the json's
``peak_rss_bytes``); RSS / bf16; (RSS - baseline) / bf16 with baseline = ``load.baseline_rss_bytes`` (the RSS
before any weight is read: interpreter, torch, tokenizer); the encode's own peak RSS; decode tokens/s.
Results also go to ``--out/results.jsonl``. Never part of the tests.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name -> Llama shape (vocabulary 49,152, tied embeddings, head_dim 64)
SIZES = {
    "135m": dict(dim=576, n_layers=30, n_heads=9, n_kv_heads=3, hidden_dim=1536),      # SmolLM2-135M's shape
    "0.5b": dict(dim=1024, n_layers=28, n_heads=16, n_kv_heads=4, hidden_dim=4096),
    "1b": dict(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, hidden_dim=8192),     # Llama-3.2-1B's shape
}
VOCAB = 49152
PROMPT = "What is the capital of France?"
# a child that runs the CLI and reports its own peak RSS (the encode prints no json)
# (VmHWM: the child's own peak; ru_maxrss would also count this process's RSS, inherited through fork)
CHILD = ("import sys\nfrom cassandra_rtl.cli import main\nfrom cassandra_rtl.model.artifact import peak_rss_bytes\n"
         "rc = main(sys.argv[1:])\nprint('PEAK_RSS_BYTES', peak_rss_bytes(), file=sys.stderr)\nsys.exit(rc)\n")
WRITER = "import sys\nsys.path.insert(0, sys.argv[1])\nimport memory_scale as m\nm.write_checkpoint(m.Path(sys.argv[2]), m.SIZES[sys.argv[3]])\n"
# SmolLM2-135M's shape (model/transformer.py ModelArgs defaults), without importing torch here
SMOLLM2 = dict(dim=576, n_layers=30, n_heads=9, n_kv_heads=3, hidden_dim=1536)


def params_of(shape: dict) -> int:
    d, h, kv, hd = shape["dim"], shape["hidden_dim"], shape["n_kv_heads"] * 64, 64
    q = shape["n_heads"] * hd
    per_layer = d * q * 2 + d * kv * 2 + 3 * d * h + 2 * d
    return VOCAB * d + shape["n_layers"] * per_layer + d


def write_checkpoint(folder: Path, shape: dict, seed: int = 0) -> None:
    """A synthetic HF folder (config.json, model.safetensors, SmolLM2's tokenizer); skipped when present."""
    import torch
    from safetensors.torch import save_file

    from cassandra_rtl.model.loader import bundled_model_path, load_gguf

    stamp = folder / "shape.json"
    want = json.dumps({**shape, "vocab": VOCAB, "seed": seed}, sort_keys=True)
    if stamp.is_file() and stamp.read_text() == want and (folder / "model.safetensors").is_file():
        return
    folder.mkdir(parents=True, exist_ok=True)
    tok = load_gguf(bundled_model_path()).tokenizer     # the real tokenizer (its memory is part of the baseline)
    tok.tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": tok.chat_template, "eos_token": tok.eos_token, "bos_token": tok.bos_token}))
    d, hd = shape["dim"], 64
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": d,
           "num_hidden_layers": shape["n_layers"], "num_attention_heads": shape["n_heads"],
           "num_key_value_heads": shape["n_kv_heads"], "intermediate_size": shape["hidden_dim"], "head_dim": hd,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 2048,
           "tie_word_embeddings": True, "eos_token_id": sorted(tok.stop_ids)[0], "torch_dtype": "bfloat16"}
    g = torch.Generator().manual_seed(seed)

    def rand(*s, std=0.02):
        return (torch.randn(*s, generator=g) * std).to(torch.bfloat16)

    t = {"model.embed_tokens.weight": rand(VOCAB, d), "model.norm.weight": (1 + rand(d, std=0.05))}
    q, kv, h = shape["n_heads"] * hd, shape["n_kv_heads"] * hd, shape["hidden_dim"]
    for i in range(shape["n_layers"]):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = rand(q, d)
        t[p + "self_attn.k_proj.weight"] = rand(kv, d)
        t[p + "self_attn.v_proj.weight"] = rand(kv, d)
        t[p + "self_attn.o_proj.weight"] = rand(d, q)
        t[p + "mlp.gate_proj.weight"] = rand(h, d)
        t[p + "mlp.up_proj.weight"] = rand(h, d)
        t[p + "mlp.down_proj.weight"] = rand(d, h)
        t[p + "input_layernorm.weight"] = 1 + rand(d, std=0.05)
        t[p + "post_attention_layernorm.weight"] = 1 + rand(d, std=0.05)
    save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    stamp.write_text(want)


def child(argv: list[str], env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    r = subprocess.run(["nice", "-n", "10", sys.executable, "-c", CHILD, *argv], capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"memory_scale: {' '.join(argv[:3])} failed: {r.stderr.strip().splitlines()[-1:]}")
    return r, time.perf_counter() - t0


def peak_of(r) -> int:
    lines = [x for x in r.stderr.splitlines() if x.startswith("PEAK_RSS_BYTES ")]
    return int(lines[-1].split()[1]) if lines else 0


def encode(src: Path, out: Path, opts: list[str]) -> dict:
    """Encode once (skipped when the artifact is newer than the source); the encode's peak RSS."""
    memo = out.with_suffix(".encode.json")
    if out.is_file() and memo.is_file() and out.stat().st_mtime >= src.stat().st_mtime:
        return json.loads(memo.read_text())
    r, secs = child(["encode", str(src), "-o", str(out), *opts, "-q"])
    rec = {"encode_peak_rss_bytes": peak_of(r), "encode_s": round(secs, 1), "cass_bytes": out.stat().st_size}
    memo.write_text(json.dumps(rec))
    return rec


def generate(cass: Path, mode: str, n: int) -> dict:
    r, secs = child(["generate", "--cass", str(cass), "--prompt", PROMPT, "--max-new-tokens", str(n),
                     "--threads", "1", "--json"], env={"CASSANDRA_RTL_DRAFT_MEMORY": mode})
    j = json.loads(r.stdout.strip().splitlines()[-1])
    load = j.get("load") or {}
    return {"mode": load.get("draft_memory", mode), "bf16_bytes": j["bf16_weight_bytes_all"],
            "peak_rss_bytes": j["peak_rss_bytes"], "baseline_rss_bytes": load.get("baseline_rss_bytes"),
            "draft_resident_bytes": load.get("draft_resident_bytes"), "ready_s": round(j.get("ready_s", 0), 1),
            "tokens_per_s": j.get("cpu_tokens_per_s"), "acceptance_rate": j.get("acceptance_rate"),
            "generated": j.get("generated"), "wall_s": round(secs, 1)}


SPEED_PROMPTS = ("What is the capital of France?", "Explain in two sentences why the sky is blue.",
                 "Write a Python function that returns the n-th Fibonacci number.")
SPEED = r"""
import gc, json, sys, time
import torch
from cassandra_rtl.model import api
torch.set_num_threads(1)
cass, n, prompts = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
out = {}
for rep in range(2):                     # derived, copy, derived, copy: load drifts hit both alike
    for mode in ("derived", "copy"):
        m = api.load(cass, draft_memory=mode)
        for p in prompts:
            ids = m.encode_prompt(p)
            m.generate(ids, 4)           # warm-up
            c0, w0 = time.process_time(), time.perf_counter()
            g = m.generate(ids, n)
            c, w = time.process_time() - c0, time.perf_counter() - w0
            r = out.setdefault(mode, {"cpu_s": 0.0, "wall_s": 0.0, "tokens": 0, "runs": {}})
            r["cpu_s"] += c; r["wall_s"] += w; r["tokens"] += len(g.tokens)
            r["runs"][p] = g.tokens
        del m; gc.collect()
print(json.dumps(out))
"""


def speed(cass: Path, n: int) -> dict:
    """Decode speed of the two draft memory modes on SmolLM2 (one thread; CPU seconds, which the machine's
    load changes less than wall time), and whether their tokens are identical."""
    r = subprocess.run(["nice", "-n", "10", sys.executable, "-c", SPEED, str(cass), str(n), json.dumps(SPEED_PROMPTS)],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"memory_scale: --speed failed: {r.stderr.strip().splitlines()[-1:]}")
    j = json.loads(r.stdout.strip().splitlines()[-1])
    res = {m: {"tok_per_cpu_s": v["tokens"] / v["cpu_s"], "tok_per_s": v["tokens"] / v["wall_s"],
               "tokens": v["tokens"]} for m, v in j.items()}
    res["identical_tokens"] = j["derived"]["runs"] == j["copy"]["runs"]
    return res


def table(rows: list[dict]) -> str:
    out = ["| model | params | bf16 MB | draft memory | baseline MB | peak RSS MB | RSS / bf16 | (RSS - baseline) / bf16 "
           "| draft extra MB | encode peak MB | tok/s |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r["bf16_bytes"]
        out.append(f"| {r['model']} | {r['params'] / 1e6:,.0f} M | {b / 1e6:,.1f} | {r['mode']} | "
                   f"{r['baseline_rss_bytes'] / 1e6:,.0f} | {r['peak_rss_bytes'] / 1e6:,.0f} | "
                   f"{r['peak_rss_bytes'] / b:.2f}x | {(r['peak_rss_bytes'] - r['baseline_rss_bytes']) / b:.2f}x | "
                   f"{(r['draft_resident_bytes'] or 0) / 1e6:,.0f} | {r['encode_peak_rss_bytes'] / 1e6:,.0f} | "
                   f"{r['tokens_per_s'] or 0:.2f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="135m,0.5b,1b", help=f"comma-separated, from {', '.join(SIZES)}")
    ap.add_argument("--modes", default="derived,copy", help="draft memory modes (derived, copy)")
    ap.add_argument("--max-new-tokens", type=int, default=4)
    ap.add_argument("--smollm2-tokens", type=int, default=24, help="new tokens for the real SmolLM2 row")
    ap.add_argument("--no-smollm2", action="store_true", help="skip the real SmolLM2 row")
    ap.add_argument("--out", default=str(ROOT / "build" / "memory"))
    ap.add_argument("--speed", type=int, default=0, metavar="N",
                    help="also time N new tokens x 3 prompts, twice, in both modes on SmolLM2 (tok per CPU-s)")
    a = ap.parse_args(argv)
    sizes = [s for s in a.sizes.split(",") if s]
    bad = [s for s in sizes if s not in SIZES]
    if bad:
        ap.error(f"--sizes: unknown size {bad[0]!r} (choose from {', '.join(SIZES)})")
    modes = [m for m in a.modes.split(",") if m]
    if any(m not in ("derived", "copy") for m in modes):
        ap.error("--modes: choose from derived, copy")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    jobs = []
    # this process stays small (no torch): every child's figure is its own
    if not a.no_smollm2:
        where = subprocess.run([sys.executable, "-m", "cassandra_rtl.cli", "where-model"], capture_output=True,
                               text=True, cwd=ROOT)
        if where.returncode != 0:
            raise SystemExit(f"memory_scale: no bundled model ({where.stderr.strip()}); use --no-smollm2")
        jobs.append(("SmolLM2-135M (real, tuned draft)", Path(where.stdout.strip()), out / "smollm2.cass",
                     ["--draft-config", "bundled"], params_of(SMOLLM2), a.smollm2_tokens))
    for s in sizes:
        folder = out / f"llama-{s}"
        print(f"[memory_scale] writing {folder} ({params_of(SIZES[s]) / 1e6:,.0f} M parameters)", file=sys.stderr)
        subprocess.run(["nice", "-n", "10", sys.executable, "-c", WRITER, str(Path(__file__).parent), str(folder), s],
                       check=True, cwd=ROOT)
        jobs.append((f"synthetic Llama {s}", folder, out / f"llama-{s}.cass",
                     ["--draft-config", "uniform", "--keep-ratio", "0.75", "--mantissa-bits", "3"],
                     params_of(SIZES[s]), a.max_new_tokens))
    with open(out / "results.jsonl", "a") as log:
        for name, src, cass, opts, params, n in jobs:
            print(f"[memory_scale] {name}: encode", file=sys.stderr, flush=True)
            enc = encode(Path(src), cass, opts)
            for mode in modes:
                print(f"[memory_scale] {name}: generate ({mode})", file=sys.stderr, flush=True)
                r = {"model": name, "params": params, **enc, **generate(cass, mode, n)}
                rows.append(r)
                log.write(json.dumps({**r, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
                log.flush()
    print(table(rows))
    if a.speed and not a.no_smollm2:
        sp = speed(out / "smollm2.cass", a.speed)
        print(f"\nSmolLM2 decode speed, {a.speed} new tokens x {len(SPEED_PROMPTS)} prompts x 2, one thread: "
              + "; ".join(f"{m} {sp[m]['tok_per_cpu_s']:.2f} tok/CPU-s ({sp[m]['tok_per_s']:.2f} tok/s wall)"
                          for m in ("derived", "copy"))
              + f"; derived/copy {sp['derived']['tok_per_cpu_s'] / sp['copy']['tok_per_cpu_s']:.2f}; "
              f"identical tokens: {sp['identical_tokens']}")
        with open(out / "results.jsonl", "a") as log:
            log.write(json.dumps({"speed": sp, "n": a.speed}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
