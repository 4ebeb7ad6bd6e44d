"""Salience of weights for the Cassandra draft, and exact emulation of the draft / its byte cost.

Salience decides which values of each superblock the draft keeps (docs/FORMAT.md §2: the top k_s by
salience, ties to the lower index; the stream records the choice, so the decoder never sees salience).

* ``magnitude``: |w| (the golden encoder's default key ``bits & 0x7FFF``).
* ``wanda``: |w_ij| * ||x_j||, with ||x_j|| the L2 norm of input channel j of that linear layer over
  calibration tokens run through the target (Sun et al., "A Simple and Effective Pruning Approach for
  LLMs", 2023). A superblock runs along the input axis of one output row, so the comparison group is a
  128-input slice of a row -- finer than Wanda's per-row groups. For the tied embedding / LM head the
  activation is the final-normed hidden state entering the head.

Calibration: built-in chat prompts of several domains (math, code, prose, chat), or user-supplied ones;
each prompt plus the target's own greedy continuation is run through the target (float32 twin,
proxy.py) and the squared inputs of every linear layer are summed per channel. Evaluation prompts for the
allocation search (tune.py) are a separate, held-apart set.

``draft_bits`` and ``spec_nbytes`` reproduce ``decode_draft(encode_tensor(...))`` and
``encode_tensor(...).spec_nbytes`` exactly (tested against the golden codec) at a fraction of the cost,
so the search can try many configs; the chosen allocation is then built with the real codec.
"""
from __future__ import annotations

import base64
import hashlib
import json

import numpy as np

from cassandra_rtl.errors import ConfigError
from cassandra_rtl.golden.codebook import build_codebook
from cassandra_rtl.golden.codec import (chunk_count, fixed_plane_nbytes, index_nbytes, keep_mask, per_chunk,
                                        superblock_count)
from cassandra_rtl.golden.config import ESCAPE_PAYLOAD_BITS, MX_BLOCK, PRUNED, CodecConfig

from .proxy import ProxyModel, input_norm_key

SALIENCE_KINDS = ("magnitude", "wanda")

# Built-in calibration prompts: several domains, never used for evaluation (tune.EVAL_PROMPTS, bench.PROMPTS).
CALIBRATION_PROMPTS = (
    # math
    "A train travels 120 km in 1.5 hours. What is its average speed? Show the steps.",
    "Solve for x: 3x + 7 = 25.",
    "What is the sum of the interior angles of a hexagon?",
    # code
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain what a hash map is and give a short JavaScript example.",
    "Fix the bug: for i in range(10) print(i)",
    # prose
    "Write a short paragraph describing an autumn morning in a small village.",
    "Summarize the causes of the French Revolution in a few sentences.",
    "Describe how a bicycle works to a ten-year-old.",
    # chat
    "Hi! Can you recommend a good book for a long flight?",
    "I feel tired every afternoon. Any tips?",
    "What should I pack for a weekend camping trip?",
)


# --------------------------------------------------------------------------------------------- calibration
def chat_ids(ck, text: str, raw: bool = False) -> list[int]:
    tok = ck.tokenizer
    if tok is None:  # tiny test checkpoints: bytes as ids
        ids = [b % ck.args.vocab_size for b in text.encode()]
    else:
        ids = tok.encode(text if raw else tok.apply_chat(text))
    bos = [ck.args.bos_token_id] if ck.args.bos_token_id is not None else []
    return bos + ids


def calibrate(ck, prompts=CALIBRATION_PROMPTS, n_new: int = 32, progress=None, model: ProxyModel | None = None
              ) -> dict[str, np.ndarray]:
    """Per-channel input L2 norms of every linear layer (keys: ``layers.{i}.attn_in|attn_out|mlp_in|mlp_act``,
    ``head_in``) over each prompt + the target's greedy continuation of ``n_new`` tokens."""
    m = model or ProxyModel(ck.args, ck.bits)
    stop = set(ck.tokenizer.stop_ids) if ck.tokenizer else set()
    rec: dict = {}
    ntok = 0
    for i, p in enumerate(prompts):
        ids = chat_ids(ck, p)[: ck.args.max_seq_len - n_new - 1]
        cont = m.greedy(ids, n_new, stop) if n_new else []
        seq = ids + cont
        m.forward(seq, head_rows=slice(0, len(seq)), record=rec)
        ntok += len(seq)
        if progress:
            progress(i + 1, len(prompts), f"calibration {ntok} tokens")
    # Salience only compares values inside one tensor, so each norm vector is scaled to max 1 and stored
    # as float16: the stored (and reloaded) norms are exactly what the salience uses.
    out = {}
    for k, v in sorted(rec.items()):
        n = np.sqrt(v.numpy())
        out[k] = (n / max(float(n.max()), 1e-30)).astype(np.float16)
    return out


def norms_to_json(norms: dict[str, np.ndarray]) -> dict:
    return {k: base64.b64encode(np.asarray(v, dtype="<f2").tobytes()).decode() for k, v in norms.items()}


def norms_from_json(d: dict) -> dict[str, np.ndarray]:
    try:
        return {k: np.frombuffer(base64.b64decode(v), dtype="<f2").astype(np.float16) for k, v in d.items()}
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"bad channel norms in the draft config: {exc}") from None


def norms_digest(norms: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(norms):
        h.update(k.encode())
        h.update(np.asarray(norms[k], dtype="<f2").tobytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ salience
def salience(name: str, bits: np.ndarray, kind: str, norms: dict[str, np.ndarray] | None = None,
             tied: bool = True) -> np.ndarray | None:
    """Scores for ``encode_tensor(bits, cfg, salience=...)``; None = the golden magnitude key."""
    if kind not in SALIENCE_KINDS:
        raise ConfigError(f"unknown salience {kind!r} (choose from {', '.join(SALIENCE_KINDS)})")
    if kind == "magnitude" or bits.ndim != 2:
        return None
    key = input_norm_key(name, tied)
    if key is None or norms is None or key not in norms:
        return None
    xn = np.asarray(norms[key], dtype=np.float64)
    if xn.shape[0] != bits.shape[1]:
        raise ConfigError(f"channel norms {key} have {xn.shape[0]} entries, {name} has {bits.shape[1]} inputs")
    w = _f64(bits)                 # the same float64 operations as |w| * x, in place (one tensor-sized array)
    np.abs(w, out=w)
    w[~np.isfinite(w)] = 1e300  # NaN/Inf weights (never in real checkpoints) rank first
    w *= xn[None, :]
    return w


def _f64(bits: np.ndarray) -> np.ndarray:
    u = bits.astype(np.uint32)
    u <<= 16
    return u.view(np.float32).astype(np.float64)


def salience_fn(kind: str, norms=None, tied: bool = True):
    """A ``salience_for(name, bits)`` hook for ``drafters.build_cassandra``."""
    return lambda name, bits: salience(name, bits, kind, norms, tied)


# ------------------------------------------------------------------------------- exact draft emulation
KEEP_SLICE_VALUES = 1 << 22     # values per keep-set selection slice (whole superblocks)


def kept_mask(bits: np.ndarray, cfg: CodecConfig, sal: np.ndarray | None) -> np.ndarray:
    """``golden.codec.keep_mask`` of the whole tensor, computed a slice of whole superblocks at a time.

    The keep set of a superblock depends on that superblock's values only (FORMAT.md §2: top k_s of the
    superblock by salience, ties to the lower index; only the last superblock may be short), so the golden
    function applied to consecutive superblock-aligned slices gives the identical mask, while its
    temporaries (float64 keys, their negation, the int64 argsort) are a slice's, not ~24 bytes per value of
    the whole tensor (tested equal: tests/test_model_memory.py)."""
    flat = bits.reshape(-1)
    key = None if sal is None else np.asarray(sal).reshape(-1)
    N, G = flat.size, cfg.group_size
    step = max(1, KEEP_SLICE_VALUES // G) * G
    if N <= step or not cfg.prunes:
        return keep_mask(flat, cfg, key)
    if key is not None and key.shape[0] != N:
        return keep_mask(flat, cfg, key)          # golden's own one-line error for a wrong salience size
    out = np.empty(N, dtype=bool)
    for a in range(0, N, step):
        b = min(N, a + step)
        out[a:b] = keep_mask(flat[a:b], cfg, None if key is None else key[a:b])
    return out


def draft_bits(bits: np.ndarray, cfg: CodecConfig, kept: np.ndarray) -> np.ndarray:
    """The draft's bits (docs/FORMAT.md §2.1) = ``decode_draft(encode_tensor(bits, cfg, salience))``."""
    flat = bits.reshape(-1).astype(np.uint16)
    m = cfg.mantissa_bits
    if cfg.scheme == "c1":
        out = flat & np.uint16((0xFFFF << (7 - m)) & 0xFFFF)
    else:
        e = ((flat >> 7) & 0xFF).astype(np.int64)
        N = len(flat)
        X = np.maximum.reduceat(e, np.arange(0, N, MX_BLOCK)) if N else e
        Xv = np.repeat(X, MX_BLOCK)[:N] if N else e
        c = m - (np.maximum(Xv, 1) - np.maximum(e, 1))
        mask = ((0xFFFF << (7 - np.clip(c, 0, 7))) & 0xFFFF).astype(np.uint16)
        out = np.where(c < 0, flat & np.uint16(0x8000), flat & mask).astype(np.uint16)
    out = np.where(kept, out, np.uint16(0)).astype(np.uint16)
    return out.reshape(bits.shape)


def spec_nbytes(bits: np.ndarray, cfg: CodecConfig, kept: np.ndarray) -> int:
    """``encode_tensor(bits, cfg, salience).spec_nbytes`` without packing the planes (format 2.0: chunks
    of A superblocks, pair groups whose suffix bits sit in spec.signman, FORMAT.md §1, §3)."""
    N = bits.size
    if cfg.scheme == "c2":
        return fixed_plane_nbytes("spec.mx", N, cfg)
    G = cfg.group_size
    nsb = superblock_count(N, G)
    nch = chunk_count(N, cfg)
    e = ((bits.reshape(-1) >> 7) & 0xFF).astype(np.int64)
    sym = np.where(kept, e, PRUNED)
    book = build_codebook(np.bincount(sym, minlength=PRUNED + 1), required=PRUNED, pairs=cfg.pair_codes)
    groups = book.group_table()[sym]
    widths = np.where(groups == book.Q, book.Q + 1 + ESCAPE_PAYLOAD_BITS, groups + 1)
    pad = nsb * G - N

    def chunk_bytes(per_value: np.ndarray) -> int:
        per_sb = np.concatenate([per_value, np.zeros(pad, np.int64)]).reshape(nsb, G).sum(1)
        return int(((per_chunk(per_sb, cfg) + 7) >> 3).sum())

    codes = chunk_bytes(widths) + index_nbytes(nch)
    if not book.pairs:
        return codes + fixed_plane_nbytes("spec.signman", N, cfg)
    suffix = np.where(kept, book.pair_bits()[groups], 0)          # P is never in a pair: pruned values add 0
    signman = chunk_bytes(np.where(kept, 1 + cfg.mantissa_bits, 0) + suffix)
    return codes + signman + index_nbytes(nch)                      # spec.signman is indexed with pairs


def describe_norms(norms: dict[str, np.ndarray]) -> str:
    return json.dumps({k: float(np.asarray(v, np.float32).mean()) for k, v in list(norms.items())[:3]})
