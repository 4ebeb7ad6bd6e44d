"""Figure 1 (the paper's Fig. 6a analog): exponent entropy vs our code vs plain rank-unary vs Huffman,
per tensor type, from real encodes of the model's weights and of K/V captured from its static cache."""
from __future__ import annotations

import numpy as np

from report_lib import JsonlCache, key_of, tensor_type

TYPES = ("q", "k", "v", "o", "gate", "up", "down", "embeddings", "lm_head", "kv.k", "kv.v")


def _stats_row(enc, bits) -> dict:
    from cassandra_rtl.golden.stats import public, tensor_stats

    st = tensor_stats(enc, bits)
    row = public(st)
    row["exponent_counts"] = [int(x) for x in st["_exponent_counts"]]
    row["spec_nbytes"] = int(enc.spec_nbytes)
    row["verif_nbytes"] = int(enc.verif_nbytes)
    return row


def weight_tensors(ck, quick: bool):
    """(name, type, bits) of the 2-D weights; --quick: the first and last layer and 4096 embedding rows."""
    last = ck.args.n_layers - 1
    for name, bits in ck.bits.items():
        if bits.ndim != 2:
            continue
        t = tensor_type(name)
        if t is None:
            continue
        if quick:
            if t == "embeddings":
                yield name + "[:4096]", t, bits[:4096]
                continue
            if not (name.startswith("layers.0.") or name.startswith(f"layers.{last}.")):
                continue
        yield name, t, bits


def encode_weights(ck, ident, cfg, quick, cache: JsonlCache, progress) -> dict[str, dict]:
    """Per-tensor stats of real encodes at ``cfg`` (cached). Returns name -> row (with 'type')."""
    from cassandra_rtl.golden.codec import decode_draft, encode_tensor

    out = {}
    items = list(weight_tensors(ck, quick))
    for name, t, bits in progress.bar(items, desc="entropy: encode weights"):
        k = key_of({"v": 1, "what": "weight-stats", "model": ident, "tensor": name, "shape": bits.shape,
                    "cfg": cfg.to_json()})
        row = cache.get(k)
        if row is None:
            enc = encode_tensor(bits, cfg)
            row = _stats_row(enc, bits)
            # the spec formula (FORMAT.md §2.1) the acceptance sweep uses for draft weights, checked here
            row["draft_formula_ok"] = bool(np.array_equal(decode_draft(enc), draft_bits_c1(bits, cfg)))
            cache.put(k, row, meta={"tensor": name, "cfg": cfg.to_json()})
        row = dict(row, type=t)
        out[name] = row
    return out


def draft_bits_c1(bits: np.ndarray, cfg, salience=None) -> np.ndarray:
    """C1 draft view (FORMAT.md §2.1): kept -> bits & (0xFFFF << (7-m)), pruned -> +0."""
    from cassandra_rtl.golden.codec import keep_mask

    m = cfg.mantissa_bits
    mask = np.uint16((0xFFFF << (7 - m)) & 0xFFFF)
    d = np.asarray(bits, dtype=np.uint16) & mask
    if cfg.prunes:
        kept = keep_mask(np.asarray(bits).reshape(-1), cfg, salience).reshape(np.shape(bits))
        d = np.where(kept, d, np.uint16(0)).astype(np.uint16)
    return d


def capture_kv(ck, ident, prompts: list[tuple[str, list[int]]], n_gen: int, kv_cfg, cache: JsonlCache, progress
               ) -> list[dict]:
    """K/V of each prompt (prefill + n_gen greedy tokens) from the target's static cache; codebooks
    calibrated on the prompt's K/V per layer and K/V (as the KV path does), then every position encoded
    with those fixed books. Returns stats rows with type kv.k / kv.v."""
    from cassandra_rtl.golden.kv import calibrate_kv_codebooks, encode_kv
    from cassandra_rtl.model.loader import bf16_to_bits
    from cassandra_rtl.model.runner import DraftOptions, build

    rows = []
    eng = None
    for text, ids in progress.bar(prompts, desc="entropy: KV cache"):
        k = key_of({"v": 1, "what": "kv-stats", "model": ident, "prompt": text, "n_gen": n_gen,
                    "cfg": kv_cfg.to_json()})
        got = cache.get(k)
        if got is None:
            if eng is None:
                eng, _, _ = build(ck, "none", DraftOptions())
            r = eng.generate(ids, n_gen)
            P = len(ids)
            T = P + len(r.tokens) - 1  # the last generated token's K/V is never written
            got = []
            for li in range(ck.args.n_layers):
                for kind, src in (("kv.k", eng.cache.k), ("kv.v", eng.cache.v)):
                    def vecs(n, src=src, li=li):
                        t = src[li, :, :n]  # [nkv, n, hd] -> [n * nkv, hd], token-major
                        return bf16_to_bits(t.transpose(0, 1).reshape(-1, t.shape[-1]))

                    books = calibrate_kv_codebooks(vecs(P), kv_cfg)
                    bits = vecs(T)
                    enc = encode_kv(bits, kv_cfg, books)
                    row = _stats_row(enc, bits)
                    row.update(type=kind, layer=li, prompt_tokens=P, tokens=T)
                    got.append(row)
            cache.put(k, got, meta={"prompt": text, "n_gen": n_gen})
        rows.extend(got)
    return rows


def aggregate_by_type(rows: list[dict]) -> dict[str, dict]:
    """Value-weighted means of per-tensor figures (per-tensor codebooks: the per-tensor entropy is the
    bound), plus the pooled-histogram entropy."""
    from cassandra_rtl.golden.stats import entropy_bits, huffman_bits, unary_rank_bits

    out = {}
    for t in TYPES:
        rs = [r for r in rows if r["type"] == t]
        if not rs:
            continue
        n = sum(r["values"] for r in rs)

        def w(f):
            return sum(f(r) * r["values"] for r in rs) / n

        pooled = np.sum([np.asarray(r["exponent_counts"]) for r in rs], axis=0)
        out[t] = {
            "tensors": len(rs),
            "values": n,
            "entropy": w(lambda r: entropy_bits(np.asarray(r["exponent_counts"]))),
            "huffman": w(lambda r: huffman_bits(np.asarray(r["exponent_counts"]))),
            "unary_rank": w(lambda r: unary_rank_bits(np.asarray(r["exponent_counts"]))),
            # format 2.0 pair groups keep part of each code in the companion field: count it
            "code": w(lambda r: r["exponent_code_bits"] + r.get("exponent_suffix_bits", 0.0)),
            "pooled_entropy": entropy_bits(pooled),
            "total_bits": w(lambda r: r["bits_per_value"]["total"]),
            "spec_bits": w(lambda r: r["bits_per_value"]["speculation"]),
            "verif_bits": w(lambda r: r["bits_per_value"]["verification"]),
            "index_bits": w(lambda r: r["index_bits_per_value"]),
        }
    return out


def plot(agg: dict, out, fname: str, footer: dict) -> str:
    import matplotlib.pyplot as plt

    from report_lib import figure_footer, save

    types = [t for t in TYPES if t in agg]
    series = [("entropy", "exponent entropy (per-tensor)", "#4c72b0"),
              ("huffman", "Huffman (per-tensor)", "#55a868"),
              ("code", "our C1 code (code planes + pair suffix bits)", "#c44e52"),
              ("unary_rank", "plain rank-unary (no cap/escape)", "#8172b2")]
    fig, ax = plt.subplots(figsize=(10, 5.2))
    x = np.arange(len(types))
    wdt = 0.2
    for i, (k, label, color) in enumerate(series):
        vals = [agg[t][k] for t in types]
        bars = ax.bar(x + (i - 1.5) * wdt, vals, wdt, label=label, color=color)
        if k == "code":
            for b, v in zip(bars, vals):
                ax.text(b.get_x() + b.get_width() / 2, v + 0.03, f"{v:.2f}", ha="center", fontsize=6.5)
    ax.set_xticks(x, [f"{t}\n({agg[t]['tensors']})" for t in types], fontsize=8)
    ax.set_ylabel("bits per value (exponent field)")
    ax.set_title("Exponent coding vs entropy per tensor type (Fig. 6a analog); (n) = tensors")
    ax.set_ylim(0, 1.22 * max(agg[t][k] for t in types for k, _, _ in series))
    ax.legend(fontsize=8, ncol=4, loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    figure_footer(fig, **footer)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return save(fig, out, fname)
