"""Draft-length schedules of the engine (engine.parse_schedule): fixed, HF's +2/-1 and the confidence stop,
on a tiny random model: greedy stays token-identical to plain greedy, and the confidence schedule drafts
fewer tokens than the fixed cap (it stops after doubted tokens) while never exceeding it."""
import pytest
import torch

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.kv import kv_config
from cassandra_rtl.model.drafters import NgramDrafter, build_cassandra, uniform_cfg
from cassandra_rtl.model.engine import Schedule, parse_schedule, Engine
from cassandra_rtl.model.sampling import SamplingParams
from cassandra_rtl.model.testing import tiny_checkpoint

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup():
    ck = tiny_checkpoint(seed=0)
    m = ck.build()
    d, tcost = build_cassandra(ck, m, uniform_cfg(1.0, 1), kv_config(32, mantissa_bits=1))
    return m, d, tcost


def prompts(n, vocab=320, length=10):
    return [torch.randint(0, vocab, (length + s,), generator=torch.Generator().manual_seed(100 + s)).tolist()
            for s in range(n)]


def test_parse_schedule():
    assert parse_schedule(False).kind == "fixed" and parse_schedule(True).kind == "hf"
    assert parse_schedule("confidence") == Schedule("confidence", 0.6)
    assert parse_schedule("confidence:0.35").threshold == 0.35
    for bad in ("confidence:1.5", "confidence:0", "confidence:x", "sometimes"):
        with pytest.raises(ConfigError):
            parse_schedule(bad)


def test_confidence_schedule_lossless_and_shorter(setup):
    m, d, tcost = setup
    plain, spec = Engine(m), Engine(m, tcost)
    fixed_drafted = conf_drafted = 0
    for p in prompts(3):
        ref = plain.generate(p, 24).tokens
        r_fixed = spec.generate(p, 24, drafter=d, gamma=4)
        r_conf = spec.generate(p, 24, drafter=d, gamma=4, adaptive="confidence:0.9")
        assert r_fixed.tokens == ref and r_conf.tokens == ref
        assert max(r_conf.stats.gammas) <= 4 and min(r_conf.stats.gammas) >= 1
        fixed_drafted += r_fixed.stats.drafted
        conf_drafted += r_conf.stats.drafted
        # every draft pass is in the ledger: one per drafted token
        assert sum(1 for x in r_conf.ledger.passes if x.kind == "draft") == r_conf.stats.drafted
    assert conf_drafted < fixed_drafted


def test_confidence_schedule_sampling_runs(setup):
    m, d, tcost = setup
    r = Engine(m, tcost).generate(prompts(1)[0], 16, drafter=d, gamma=4, adaptive="confidence:0.5",
                                  sp=SamplingParams(temperature=1.0), seed=3)
    assert len(r.tokens) == 16 and max(r.stats.gammas) <= 4


def test_confidence_schedule_needs_probabilities(setup):
    m, _, _ = setup
    with pytest.raises(ConfigError, match="probabilities"):
        Engine(m).generate(prompts(1)[0], 8, drafter=NgramDrafter(), gamma=3, adaptive="confidence")


# ---------------------------------------------------------------------------- the tuner's v2 objective
def test_simulate_steps_by_hand():
    from cassandra_rtl.model.tune import simulate_steps

    ag, cf = [[1, 1, 0, 1, 1]], [[0.9, 0.9, 0.3, 0.9, 0.2]]
    # cap 4: step 1 drafts 4, accepts 2 (+1 target token) -> i = 3; step 2 drafts the 2 left, accepts 2
    assert simulate_steps(ag, cf, 4) == (3 + 3, 4 + 2, 2)
    # confidence 0.5: step 1 stops after position 2 (p 0.3): 3 drafts; step 2 stops after position 4 (p 0.2)
    assert simulate_steps(ag, cf, 4, 0.5) == (3 + 3, 3 + 2, 2)
    assert simulate_steps(ag, cf, 1) == (2 + 1 + 2, 3, 3)  # one draft per step: 2, then a miss, then 2


def test_v2_speedups_reduce_to_bytes_without_overhead():
    from cassandra_rtl.model.metrics import hardware_presets
    from cassandra_rtl.model.tune import v2_speedups

    sim = (30, 20, 10)  # 30 tokens, 20 draft passes, 10 verify passes
    r = v2_speedups(sim, 30.0e6, 70.0e6, 100.0e6, 0, 0, 0, 128, 1000, hardware_presets(0.0))
    want = 30 * 100.0 / (20 * 30.0 + 10 * 70.0)
    for dev in r.values():
        assert abs(dev["speedup"] - want) < 1e-9
        assert abs(dev["format_speedup"] * dev["speculation_speedup"] - dev["speedup"]) < 1e-9
    # a per-pass overhead weighs most where a pass is shortest (the 4090)
    ov = v2_speedups(sim, 30.0e6, 70.0e6, 100.0e6, 0, 0, 0, 128, 1000, hardware_presets())
    assert ov["rtx4090"]["speedup"] < ov["orin"]["speedup"] < want


def test_tuner_v2_objective_charges_the_real_target_bytes():
    from cassandra_rtl.golden.codec import encode_tensor
    from cassandra_rtl.golden.config import CodecConfig
    from cassandra_rtl.model.allocation import Allocation
    from cassandra_rtl.model.salience import calibrate
    from cassandra_rtl.model.tune import Tuner, make_eval_set

    ck = tiny_checkpoint(seed=5, std=0.1)
    norms = calibrate(ck, ("alpha beta gamma", "x = 1 + 2"), n_new=2)
    es = make_eval_set(ck, ("one more thing", "print(3)"), n_new=4)
    t = Tuner(ck, "wanda", norms, es, objective="v2", device="orin")
    al = Allocation(default=CodecConfig(keep_ratio=0.5, mantissa_bits=2, group_size=32),
                    kv=CodecConfig(keep_ratio=1.0, mantissa_bits=3, group_size=64, kind="kv"),
                    n_layers=ck.args.n_layers, salience={"kind": "wanda"})
    r = t.evaluate(al)
    want = t.one_d_bytes
    for n in t.names:
        enc = encode_tensor(ck.bits[n], al.cfg_for(n), salience=t._salience(n))
        want += enc.spec_nbytes + enc.verif_nbytes
    assert r["target_bytes"] == want and r["objective"] == "v2:orin"
    assert r["speedup"] == r["by_device"]["orin"]["speedup"] == max(r["by_schedule"].values())
    assert "agree_rows" not in r  # the per-position detail is not kept in the result
    # a layer-skip draft carved from the same bits: that layer's weights are not charged, the proxy changes
    sk = t.evaluate(al, skip_layers=[1])
    layer1 = sum(t.tensor_bytes(n, al.cfg_for(n)) for n in t.names if n.startswith("layers.1."))
    assert sk["draft_bytes"] == r["draft_bytes"] - layer1 > 0 and sk["skip_layers"] == [1]
    assert sk["target_bytes"] == r["target_bytes"] and sk["kl"] != r["kl"]


# --------------------------------------------------------------------------------- bench config names
def test_bench_config_names_and_oracle(tmp_path, capsys):
    """<base>[_conf<T>|_hf]_g<G> names resolve; a confidence config runs end to end on a tiny HF folder
    (lossless); --table --oracle takes per prompt the fastest config, so it is never below the best config."""
    import json

    from cassandra_rtl.model import bench
    from cassandra_rtl.model.testing import write_hf_folder

    assert bench.resolve_config("c_k1.0_m2_conf0.7_g4") == (
        "cassandra", {"keep_ratio": 1.0, "mantissa_bits": 2, "kv_mantissa_bits": 3, "gamma": 4,
                      "adaptive": "confidence:0.7"})
    assert bench.resolve_config("mine_hf_g3", {"mine": "x.json"}) == ("alloc:mine", {"gamma": 3, "adaptive": True})
    with pytest.raises(ConfigError):
        bench.resolve_config("mine_g3")
    d = write_hf_folder(tmp_path / "m", max_pos=160)
    out = tmp_path / "b.jsonl"
    names = ["c_k1.0_m3_g2", "c_k1.0_m3_conf0.5_g4"]
    assert bench.main(["--model", str(d), "--configs", ",".join(names), "--prompt-set", "bench", "--prompts", "2",
                       "--max-new-tokens", "8", "--out", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["lossless"] for r in rows] == ["2/2", "2/2"] and rows[1]["adaptive"] == "confidence:0.5"
    runs = {}
    for x in out.read_text().splitlines():
        r = json.loads(x)
        if "model_inputs" in r:
            runs.setdefault(r["config"], []).append(r)
    o = bench.oracle(runs, names, bench.presets_from(bench_args()))
    for k, v in o.items():
        best = max(r["performance_model"]["by_device"][k]["batch-invariant"]["speedup"] for r in rows)
        assert v["speedup"] >= best - 1e-9 and sum(v["wins"].values()) == 2


def bench_args():
    import argparse

    return argparse.Namespace(overhead_us=None, synth_report=None, decoder=None)


def test_confidence_schedule_sampling_is_exact(setup):
    """Speculative sampling under the confidence schedule (k chosen from the draft's own distribution) still emits
    tokens distributed as the target's: the PIT + KS check of model/sampling_check.py passes."""
    from cassandra_rtl.model.sampling_check import sampling_check

    m, d, tcost = setup
    r = sampling_check(Engine(m, tcost), d, prompts(1)[0], SamplingParams(temperature=1.0), max_new_tokens=8,
                       gamma=4, runs=40, adaptive="confidence:0.3")
    assert r["ok"] and r["values"] == 320, r
