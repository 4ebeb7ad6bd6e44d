"""Figure 2 (the paper's Fig. 7a analog): acceptance rate vs draft compression ratio, greedy, for value
pruning only, mantissa truncation only and both, with the layer-skip and n-gram baselines; the same runs
feed Figure 4 (modeled speedup). Every (config, prompt, tokens) point is cached as a JSON line."""
from __future__ import annotations

import numpy as np

from report_lib import JsonlCache, key_of

# name -> (family, draft method, DraftOptions fields). KV view fixed for every Cassandra point.
KV = {"kv_keep_ratio": 1.0, "kv_mantissa_bits": 3}


def _c(k, m):
    return {"keep_ratio": k, "mantissa_bits": m, **KV}


FULL_CONFIGS = {
    "none": ("reference", "none", {}),
    "int8": ("baseline", "int8", {}),
    "ngram": ("baseline", "ngram", {}),
    "layerskip6": ("baseline", "layerskip", {"n_skip": 6}),
    **{f"c_k1.0_m{m}": ("mantissa", "cassandra", _c(1.0, m)) for m in (1, 2, 3, 4)},
    **{f"c_k{k}_m7": ("prune", "cassandra", _c(k, 7)) for k in (0.9, 0.75, 0.5)},
    **{f"c_k{k}_m{m}": ("both", "cassandra", _c(k, m)) for k, m in ((0.9, 3), (0.75, 3), (0.5, 4))},
}
QUICK_CONFIGS = {
    "none": ("reference", "none", {}),
    "ngram": ("baseline", "ngram", {}),
    "layerskip1": ("baseline", "layerskip", {"n_skip": 1}),
    "c_k1.0_m3": ("mantissa", "cassandra", _c(1.0, 3)),
}
DEFAULT_CASSANDRA = "c_k1.0_m3"  # the project's default draft (README: keep 1.0, 3 mantissa bits)


def hw_key() -> dict:
    from cassandra_rtl.model.metrics import hardware_presets

    return {k: [h.bandwidth, h.flops, h.overhead_s] for k, h in hardware_presets().items()}


class Sweep:
    def __init__(self, ck, ident, prompts, max_new_tokens, gamma, cache: JsonlCache, progress, quick: bool,
                 entropy_rows: dict | None = None):
        self.ck, self.ident, self.prompts = ck, ident, prompts
        self.T, self.gamma, self.cache, self.progress, self.quick = max_new_tokens, gamma, cache, progress, quick
        self.entropy_rows = entropy_rows or {}
        self.refs: dict[str, list[int]] = {}
        self.skip_cache: dict[int, list[int]] = {}
        self.sizes: dict[str, dict] = {}
        self.errors: dict[str, str] = {}

    # ------------------------------------------------------------------------------------------ sizes
    def codec_sizes(self, cfg) -> dict:
        """Real stream sizes of every 2-D weight at ``cfg`` (cached); reuses the entropy stage's encodes."""
        from cassandra_rtl.golden.codec import decode_draft, encode_tensor

        from report_entropy import draft_bits_c1

        k = key_of({"v": 1, "what": "weight-sizes", "model": self.ident, "cfg": cfg.to_json()})
        got = self.cache.get(k)
        if got is not None:
            return got
        names = [n for n, b in self.ck.bits.items() if b.ndim == 2]
        spec, full, checked = {}, {}, 0
        for name in self.progress.bar(names, desc=f"encode k={cfg.keep_ratio:g} m={cfg.mantissa_bits}"):
            bits = self.ck.bits[name]
            row = self.entropy_rows.get(name)
            if row is not None and row["config"] == cfg.to_json():
                spec[name], full[name] = row["spec_nbytes"], row["spec_nbytes"] + row["verif_nbytes"]
                continue
            enc = encode_tensor(bits, cfg)
            spec[name], full[name] = enc.spec_nbytes, enc.spec_nbytes + enc.verif_nbytes
            if name.startswith("layers.0."):  # the draft formula vs the golden decode_draft, on a sample
                if not np.array_equal(decode_draft(enc), draft_bits_c1(bits, cfg)):
                    raise AssertionError(f"draft formula differs from decode_draft on {name} at {cfg}")
                checked += 1
        got = {"spec": spec, "full": full, "draft_checked_tensors": checked}
        self.cache.put(k, got, meta={"cfg": cfg.to_json()})
        return got

    # ---------------------------------------------------------------------------------------- engines
    def skip_layers(self, n_skip: int) -> list[int]:
        from cassandra_rtl.model.drafters import search_skip_layers
        from cassandra_rtl.model.runner import CALIB_TEXTS

        if n_skip in self.skip_cache:
            return self.skip_cache[n_skip]
        calib_texts = CALIB_TEXTS[:1] if self.quick else CALIB_TEXTS
        k = key_of({"v": 1, "what": "skip-search", "model": self.ident, "n_skip": n_skip, "calib": calib_texts})
        got = self.cache.get(k)
        if got is None:
            self.progress.log(f"  layer-skip: greedy search for {n_skip} layers on {len(calib_texts)} calibration texts")
            tok = self.ck.tokenizer
            target = self.ck.build()
            got = search_skip_layers(target, [tok.encode(t) for t in calib_texts], n_skip)
            self.cache.put(k, got, meta={"n_skip": n_skip})
        self.skip_cache[n_skip] = got
        return got

    def tuned_engine(self, path: str):
        """A saved draft-selection config (model/allocation.py, `cassandra-rtl tune --out`): per-tensor codec
        configs, its salience and KV view, built through build_cassandra (real encodes), run at our gamma."""
        from cassandra_rtl.model.allocation import Allocation
        from cassandra_rtl.model.drafters import build_cassandra
        from cassandra_rtl.model.engine import Engine, bf16_cost
        from cassandra_rtl.model.runner import DraftOptions

        al = Allocation.load(path)
        al.check(self.ck)
        target = self.ck.build()
        bar = self.progress.bar(total=sum(1 for b in self.ck.bits.values() if b.ndim == 2), desc="encode tuned")

        def prog(i, n, what):
            bar.update(1)

        d, tcost = build_cassandra(self.ck, target, al.weight_cfg_for, al.kv_cfg(self.ck.args.head_dim),
                                   salience_for=al.salience_for(self.ck), progress=prog)
        bar.close()
        stop = self.ck.tokenizer.stop_ids if self.ck.tokenizer else set(self.ck.args.eos_token_ids)
        d.info["tuned_gamma"] = al.gamma
        return Engine(target, tcost, stop_ids=stop, baseline_cost=bf16_cost(target)), d, DraftOptions(gamma=self.gamma)

    def engine(self, name: str, spec):
        from cassandra_rtl.golden.config import CodecConfig
        from cassandra_rtl.model.drafters import EncodedModel
        from cassandra_rtl.model.runner import DraftOptions, build

        from report_entropy import draft_bits_c1

        fam, draft, kw = spec
        if draft == "tuned":
            return self.tuned_engine(kw["path"])
        kw = dict(kw)
        if draft == "layerskip":
            kw["skip_layers"] = self.skip_layers(kw["n_skip"])
        o = DraftOptions(gamma=self.gamma, **kw)
        if draft != "cassandra":
            eng, d, _ = build(self.ck, draft, o)
            return eng, d, o
        cfg = CodecConfig(scheme=o.scheme, keep_ratio=o.keep_ratio, mantissa_bits=o.mantissa_bits,
                          group_size=o.group_size)
        sizes = self.codec_sizes(cfg)
        em = EncodedModel()
        for n, b in self.ck.bits.items():
            if b.ndim == 2:
                em.draft_bits[n] = draft_bits_c1(b, cfg)
        em.spec_bytes, em.full_bytes = sizes["spec"], sizes["full"]
        eng, d, _ = build(self.ck, "cassandra", o, encoded=em)
        return eng, d, o

    # ------------------------------------------------------------------------------------------ runs
    def point_key(self, name, spec, text):
        return key_of({"v": 1, "what": "accept-point", "model": self.ident, "config": name, "spec": spec,
                       "prompt": text, "tokens": self.T, "gamma": self.gamma, "hw": hw_key()})

    def run(self, configs: dict) -> dict[str, list[dict]]:
        from cassandra_rtl.model.metrics import hardware_presets

        hw = hardware_presets()
        out: dict[str, list[dict]] = {}
        order = ["none"] + [n for n in configs if n != "none"]
        for ci, name in enumerate(order):
            spec = configs[name]
            rows, todo = [], []
            for text, ids in self.prompts:
                r = self.cache.get(self.point_key(name, spec, text))
                (rows.append(r) if r is not None else todo.append((text, ids)))
            self.progress.log(f"  [{ci + 1}/{len(order)}] {name}: {len(rows)} cached, {len(todo)} to run")
            if todo:
                try:
                    eng, d, o = self.engine(name, spec)
                except Exception as exc:  # e.g. a saved tuned config this checkout cannot read
                    if spec[1] != "tuned":
                        raise
                    self.errors[name] = f"{type(exc).__name__}: {exc}"
                    self.progress.log(f"  {name}: skipped ({self.errors[name]})")
                    continue
                for text, ids in self.progress.bar(todo, desc=f"{name}"):
                    r = eng.generate(ids, self.T, drafter=d, gamma=self.gamma, adaptive=o.adaptive)
                    s = r.stats
                    ref = self.refs.get(text)
                    row = {
                        "config": name, "family": spec[0], "draft": spec[1], "options": spec[2], "prompt": text,
                        "tokens": r.tokens, "generated": s.generated, "drafted": s.drafted, "accepted": s.accepted,
                        "drafted_at": s.drafted_at, "accepted_at": s.accepted_at, "steps": s.steps,
                        "step_tokens": s.step_tokens, "bytes": r.ledger.bytes(), "draft_bytes": r.ledger.bytes("draft"),
                        "base_bytes": r.baseline.bytes(),
                        "time": {k: r.ledger.time(h) for k, h in hw.items()},
                        "base_time": {k: r.baseline.time(h) for k, h in hw.items()},
                        "tar_time": {k: r.target_ar.time(h) for k, h in hw.items()} if r.target_ar else None,
                        "decode_s": s.decode_s,
                        "info": {k: v for k, v in r.info.items() if isinstance(v, (int, float, str, list, bool))},
                        "weight_ratio": self.weight_ratio(name, spec, eng, d),
                        "lossless": None if ref is None or spec[1] == "int8" else r.tokens == ref,
                    }
                    self.cache.put(self.point_key(name, spec, text), row, meta={"config": name, "prompt": text})
                    rows.append(row)
            if name == "none":
                self.refs = {r["prompt"]: r["tokens"] for r in rows}
            out[name] = rows
        return out

    def weight_ratio(self, name, spec, eng, d) -> float:
        """Draft weight bytes per pass / bf16 weight bytes per pass (real stream sizes for Cassandra)."""
        from cassandra_rtl.model.engine import bf16_cost

        base = eng.baseline_cost.weight_bytes
        if spec[1] in ("cassandra", "tuned"):
            return d.dcost.weight_bytes / base
        if spec[1] == "layerskip":
            return bf16_cost(eng.target, frozenset(d.skip)).weight_bytes / base
        if spec[1] == "ngram":
            return 0.0
        return eng.cost.weight_bytes / base  # none (1.0) / int8 (its own weights, autoregressive)


def summarize(runs: dict[str, list[dict]]) -> dict[str, dict]:
    out = {}
    for name, rows in runs.items():
        if not rows:
            continue
        r0 = rows[0]
        dr = sum(r["drafted"] for r in rows)
        ac = sum(r["accepted"] for r in rows)
        L = max(len(r["drafted_at"]) for r in rows)
        pd = [sum(r["drafted_at"][j] for r in rows if j < len(r["drafted_at"])) for j in range(L)]
        pa = [sum(r["accepted_at"][j] for r in rows if j < len(r["accepted_at"])) for j in range(L)]
        steps = sum(r["steps"] for r in rows)
        hws = list(r0["time"])
        ll = [r["lossless"] for r in rows if r["lossless"] is not None]
        out[name] = {
            "family": r0["family"], "draft": r0["draft"], "options": r0["options"],
            "prompts": len(rows), "generated": sum(r["generated"] for r in rows),
            "acceptance": ac / dr if dr else None,
            "alpha": sum(pa) / sum(pd) if sum(pd) else None,
            "per_position": [a / d if d else 0.0 for a, d in zip(pa, pd)],
            "tokens_per_step": sum(r["step_tokens"] for r in rows) / steps if steps else None,
            "weight_ratio": r0["weight_ratio"],
            "bytes_ratio": sum(r["bytes"] for r in rows) / sum(r["base_bytes"] for r in rows),
            "draft_bytes_per_token": sum(r["draft_bytes"] for r in rows) / max(1, sum(r["generated"] for r in rows)),
            "speedup": {k: sum(r["base_time"][k] for r in rows) / sum(r["time"][k] for r in rows) for k in hws},
            "speedup_vs_target_ar": ({k: sum(r["tar_time"][k] for r in rows) / sum(r["time"][k] for r in rows)
                                      for k in hws} if all(r["tar_time"] for r in rows) else None),
            "lossless": f"{sum(ll)}/{len(ll)}" if ll else "n/a",
            "token_match": (sum(sum(a == b for a, b in zip(r["tokens"], runs["none"][i]["tokens"]))
                                for i, r in enumerate(rows)) / max(1, sum(len(x["tokens"]) for x in runs["none"])))
            if "none" in runs and len(runs["none"]) == len(rows) else None,
            "skip_layers": r0["info"].get("skip_layers"),
            "tuned_gamma": r0["info"].get("tuned_gamma"),
            "cpu_decode_s": sum(r["decode_s"] for r in rows),
        }
    return out


def plot(summ: dict, tuned: list[dict], out, fname: str, footer: dict, hw_name: str = "orin") -> str:
    import matplotlib.pyplot as plt

    from report_lib import figure_footer, save

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 5.4))
    for k, v in summ.items():
        if v["family"] == "tuned" and v["acceptance"] is not None:
            for a_, y in ((ax, v["acceptance"]), (ax2, v["speedup"][hw_name])):
                a_.plot([v["weight_ratio"]], [y], "X", ms=11, color="black", label="tuned draft config (same harness)")
    styles = {"mantissa": ("mantissa truncation only (keep 1.0)", "o-", "#4c72b0"),
              "prune": ("value pruning only (m = 7, magnitude)", "s-", "#dd8452"),
              "both": ("pruning + truncation", "^-", "#55a868")}
    for fam, (label, st, color) in styles.items():
        pts = sorted((v["weight_ratio"], v["acceptance"], v.get("speedup", {}).get(hw_name), k)
                     for k, v in summ.items() if v["family"] == fam and v["acceptance"] is not None)
        if not pts:
            continue
        xs, ys, sp, names = zip(*pts)
        ax.plot(xs, ys, st, color=color, label=label)
        ax2.plot(xs, sp, st, color=color, label=label)
        for x, y, n in zip(xs, ys, names):
            o = summ[n]["options"]
            ax.annotate(f"k{o['keep_ratio']:g} m{o['mantissa_bits']}", (x, y), fontsize=6.5,
                        textcoords="offset points", xytext=(3, 3))
    marks = {"layerskip": ("*", "#c44e52"), "ngram": ("D", "#8172b2")}
    for k, v in summ.items():
        if v["draft"] in marks and v["acceptance"] is not None:
            mk, color = marks[v["draft"]]
            lab = f"layer-skip ({len(v['skip_layers'] or [])} layers)" if v["draft"] == "layerskip" else "n-gram lookup"
            ax.plot([v["weight_ratio"]], [v["acceptance"]], mk, ms=11, color=color, label=lab)
            ax2.plot([v["weight_ratio"]], [v["speedup"][hw_name]], mk, ms=11, color=color, label=lab)
    if tuned:
        xs = [t["ratio"] for t in tuned]
        ax.plot(xs, [t["acceptance"] for t in tuned], "P--", ms=6, lw=0.8, color="grey",
                label="tune.py rows, Pareto front (its proxy, its prompts)")
        sp = [(t["ratio"], t["speedup"]) for t in tuned if t.get("speedup") is not None]
        if sp:
            ax2.plot(*zip(*sp), "P", ms=6, color="grey", label="tune.py rows (its own estimate)")
    ax.set_xlabel("draft compression ratio (draft weight bytes / bf16 weight bytes, real stream sizes)")
    ax.set_ylabel("acceptance rate (accepted / drafted tokens)")
    ax.set_title("Acceptance vs draft size (Fig. 7a analog), greedy")
    ax.set_xlim(-0.03, 1.5)  # room on the right for the legend
    ax.set_xticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, loc="center right")
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.set_xlabel("draft compression ratio")
    ax2.set_ylabel(f"modeled speedup vs bf16 AR ({hw_name})")
    ax2.set_title("Modeled speedup of the same runs")
    ax2.set_xlim(-0.03, 1.05)
    ax2.grid(alpha=0.3)
    figure_footer(fig, **footer)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    return save(fig, out, fname)
