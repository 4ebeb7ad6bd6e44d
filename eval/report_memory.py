"""Figure 3 (the paper's Fig. 14 analog): memory footprint vs context length for bf16, Cassandra (the
lossless total at the measured bits/value: the draft is a subset of those bits, so it costs no memory)
and a trained-draft scheme that adds a separate draft network; the longest context that fits a budget."""
from __future__ import annotations

import numpy as np

GIB = 2 ** 30

# An 8B-class Llama config (Llama-3.1-8B: 32 layers, GQA 32/8 heads, head_dim 128, 8.03 B parameters of which
# 1-D norms are ~0.27 M; 128k trained context). Only the shape matters here; the bits/value are SmolLM2's.
LLAMA8B = {"name": "Llama-3.1-8B-class (config only)", "params_2d": 8_030_000_000 - 266_240, "params_1d": 266_240,
           "n_layers": 32, "n_kv_heads": 8, "head_dim": 128, "max_context": 131072}


def trained_context(path, default: int) -> int:
    """The model's own context length from GGUF metadata / config.json (the loader caps it for the harness)."""
    from pathlib import Path

    p = Path(path)
    try:
        if p.suffix == ".gguf":
            import gguf

            r = gguf.GGUFReader(str(p))
            for k, f in r.fields.items():
                if k.endswith(".context_length"):
                    return int(f.parts[f.data[0]][0])
        elif (p / "config.json").is_file():
            import json

            return int(json.loads((p / "config.json").read_text()).get("max_position_embeddings", default))
    except Exception:  # metadata is a nicety here; fall back to the harness context
        pass
    return default


def model_shape(ck, name: str, path=None) -> dict:
    a = ck.args
    p2 = sum(int(b.size) for b in ck.bits.values() if b.ndim == 2)
    p1 = sum(int(b.size) for b in ck.bits.values() if b.ndim != 2)
    return {"name": name, "params_2d": p2, "params_1d": p1, "n_layers": a.n_layers, "n_kv_heads": a.n_kv_heads,
            "head_dim": a.head_dim,
            "max_context": trained_context(path, a.max_seq_len) if path else a.max_seq_len}


def schemes(shape: dict, w_bits: float, kv_bits: float, draft_fraction: float) -> dict[str, tuple[float, float]]:
    """scheme -> (fixed bytes, bytes per token of context)."""
    kv_values = 2 * shape["n_layers"] * shape["n_kv_heads"] * shape["head_dim"]  # K and V per token
    w_bf16 = 2.0 * (shape["params_2d"] + shape["params_1d"])
    return {
        "bf16 (weights + KV)": (w_bf16, 2.0 * kv_values),
        f"Cassandra lossless ({w_bits:.2f} b/w, {kv_bits:.2f} b/kv)": (
            shape["params_2d"] * w_bits / 8 + 2.0 * shape["params_1d"], kv_values * kv_bits / 8),
        f"trained draft (+{100 * draft_fraction:g}% net & KV)": (
            w_bf16 * (1 + draft_fraction), 2.0 * kv_values * (1 + draft_fraction)),
    }


def max_context(fixed: float, per_token: float, budget: float) -> int:
    return max(0, int((budget - fixed) // per_token)) if per_token > 0 else 0


def analyse(shapes_budgets, w_bits, kv_bits, draft_fraction) -> list[dict]:
    out = []
    for shape, budget_gib in shapes_budgets:
        sch = schemes(shape, w_bits, kv_bits, draft_fraction)
        rows = []
        for k, (fixed, per) in sch.items():
            rows.append({"scheme": k, "fixed_gib": fixed / GIB, "kv_bytes_per_token": per,
                         "max_context": max_context(fixed, per, budget_gib * GIB)})
        bf = rows[0]["max_context"]
        for r in rows:
            r["vs_bf16"] = r["max_context"] / bf if bf else None
        out.append({"model": shape, "budget_gib": budget_gib, "rows": rows})
    return out


def plot(results, w_bits, kv_bits, draft_fraction, out, fname: str, footer: dict) -> str:
    import matplotlib.pyplot as plt

    from report_lib import figure_footer, save

    fig, axes = plt.subplots(1, len(results), figsize=(12, 5.2))
    colors = ["#4c72b0", "#c44e52", "#55a868"]
    for ax, res in zip(np.atleast_1d(axes), results):
        shape, budget = res["model"], res["budget_gib"]
        sch = schemes(shape, w_bits, kv_bits, draft_fraction)
        top = max(r["max_context"] for r in res["rows"])
        ctx = np.linspace(0, max(top * 1.3, 1024), 400)
        for (name, (fixed, per)), r, c in zip(sch.items(), res["rows"], colors):
            ax.plot(ctx / 1000, (fixed + per * ctx) / GIB, color=c, label=f"{name}: {r['max_context']:,} tok")
            ax.plot([r["max_context"] / 1000], [budget], "o", color=c)
        ax.axhline(budget, color="black", ls="--", lw=0.9, label=f"budget {budget:g} GiB")
        ax.axvline(shape["max_context"] / 1000, color="grey", ls=":", lw=0.9,
                   label=f"model's trained context {shape['max_context']:,}")
        ax.set_xlabel("context length (k tokens)")
        ax.set_ylabel("footprint (GiB)")
        ax.set_title(shape["name"], fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("Memory footprint vs context (Fig. 14 analog): longest context within the budget", fontsize=11)
    figure_footer(fig, **footer)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    return save(fig, out, fname)
