"""RTL in the loop: the draft's layer-0 weight streams and its KV view decoded by the generated decoder
(Verilator bulk co-simulation), asserted bit-equal to golden, and generation unchanged."""
import pytest
import torch

from cassandra_rtl.model.engine import Engine
from cassandra_rtl.model.runner import DraftOptions, build
from cassandra_rtl.model.testing import tiny_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.sim]
torch.set_num_threads(1)


def test_rtl_in_the_loop_tiny():
    bulk = pytest.importorskip("cassandra_rtl.tb.bulk")
    if not bulk.available():
        pytest.skip("Verilator not available")
    ck = tiny_checkpoint(seed=0, vocab=300, head_dim=64, n_heads=2, n_kv_heads=1, dim=128, hidden_dim=256)
    prompt = list(range(5, 17))
    ref = Engine(ck.build()).generate(prompt, 10)
    eng, d, _ = build(ck, "cassandra", DraftOptions(mantissa_bits=2, rtl=True, rtl_layers=[0]))
    r = eng.generate(prompt, 10, drafter=d, gamma=3)
    assert r.tokens == ref.tokens
    assert d.info["rtl_weight_tensors"] == 7 and d.info["rtl_kv"]


def test_rtl_in_the_loop_from_a_model_artifact(tmp_path):
    """--rtl on the artifact path: the chosen layers' draft streams are decoded from the container by the RTL
    (asserted equal to golden while loading), the draft is the same as without --rtl, generation unchanged."""
    bulk = pytest.importorskip("cassandra_rtl.tb.bulk")
    if not bulk.available():
        pytest.skip("Verilator not available")
    from cassandra_rtl.model import api
    from cassandra_rtl.model.testing import write_hf_folder

    hf = write_hf_folder(tmp_path / "hf", head_dim=64, n_heads=2, n_kv_heads=1, dim=128, hidden_dim=256)
    plain = api.load(hf, mantissa_bits=2, cache_dir=tmp_path / "c", say=None)
    m = api.load(hf, mantissa_bits=2, cache_dir=tmp_path / "c", rtl=True, rtl_layers=[1], say=None)
    assert m.load_info.kind == "cache-hit"
    a, b = plain.generate("the cat", 10), m.generate("the cat", 10)
    assert a.tokens == b.tokens == plain.generate("the cat", 10, speculative=False).tokens
    assert b.metrics["rtl_weight_tensors"] == 7 and b.metrics["rtl_kv"]
    assert b.metrics["draft_weight_bytes"] == a.metrics["draft_weight_bytes"]


def test_rtl_kv_encoder_in_the_loop_from_a_model_artifact(tmp_path):
    """--rtl: every step's new K/V vectors are encoded by the RTL KV encoder (planes asserted equal to golden)
    and decoded by the RTL decoder; the counters land in the run's metrics (``rtl``)."""
    bulk = pytest.importorskip("cassandra_rtl.tb.bulk")
    be = pytest.importorskip("cassandra_rtl.tb.bulk_encoder")
    if not (bulk.available() and be.available()):
        pytest.skip("Verilator not available")
    from cassandra_rtl.model import api
    from cassandra_rtl.model.testing import write_hf_folder

    hf = write_hf_folder(tmp_path / "hf", head_dim=64, n_heads=2, n_kv_heads=1, dim=128, hidden_dim=256)
    m = api.load(hf, mantissa_bits=2, cache_dir=None, rtl=True, rtl_layers=[0], say=None)
    g = m.generate("the cat", 6)
    assert g.tokens == m.generate("the cat", 6, speculative=False).tokens
    r = g.metrics["rtl"]
    n_layers, kv_heads = m.args.n_layers, m.args.n_kv_heads
    assert r["weight_tensors"] == 7 and r["kv_encode_mismatches"] == 0
    assert r["weight_values"] == sum(p.numel() for n, p in m.target.named_weights().items()
                                     if n.startswith("layers.0.") and p.dim() == 2)
    assert r["kv_vectors_encoded"] == r["kv_vectors_decoded"] >= 2 * n_layers * kv_heads * len(m.encode_prompt("the cat"))
