"""The Python API of the model path (README "Python API"); ``cassandra-rtl generate`` is built on it.

    from cassandra_rtl.model.api import load

    m = load("model.cass")                  # a model artifact (or a .gguf / HF folder / None = bundled SmolLM2)
    g = m.generate("What is the capital of France?", max_new_tokens=32)
    print(g.text, g.tokens, g.metrics["acceptance_rate"])
    for piece in m.stream("Write a haiku about the sea.", temperature=0.7, top_k=40, stop=["\\n\\n"]):
        print(piece, end="", flush=True)
    m.last                                  # the Generation of the last stream
    m = load(numerics="npu")                # every linear layer as the NPU tile computes it (batched verify)

``load(MODEL)`` for a .gguf or a Hugging Face folder encodes the model once into the cache
(``cache_dir``, default ``~/.cache/cassandra-rtl``; ``cache_dir=None``: encode in memory, write nothing)
and loads the artifact from there; the draft allocation is chosen from the model's content (the bundled
SmolLM2 -> its tuned allocation), never from how it was named.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from cassandra_rtl.errors import ConfigError, FormatError, InputError
from cassandra_rtl.golden.config import CodecConfig

from . import artifact as art_mod
from .allocation import Allocation, uniform
from .engine import Engine, bf16_cost
from .sampling import SamplingParams

DEFAULT_CACHE = "default"
DRAFTS = ("cassandra", "layerskip", "ngram", "none", "int8")
DRAFT_MEMORY_ENV = "CASSANDRA_RTL_DRAFT_MEMORY"


def default_draft_memory() -> str:
    """``derived`` (the draft's layers rebuilt from the target's bits as they run: one model in memory) unless
    ``$CASSANDRA_RTL_DRAFT_MEMORY`` says ``copy`` (the draft decoded into its own parameters)."""
    import os

    v = os.environ.get(DRAFT_MEMORY_ENV, "").strip() or "derived"
    if v not in art_mod.DRAFT_MEMORY:
        raise ConfigError(f"${DRAFT_MEMORY_ENV}={v!r}: choose from {', '.join(art_mod.DRAFT_MEMORY)}")
    return v


def default_cache_dir() -> str:
    from .drafters import default_cache_dir as d

    return d()


@dataclass
class Generation:
    text: str
    tokens: list[int]
    metrics: dict
    stop: str | None = None          # the stop string that ended the run, if any


@dataclass
class LoadInfo:
    kind: str                        # "cass" | "cache-hit" | "cache-miss" | "memory" | "checkpoint"
    seconds: float
    path: str | None = None
    bytes: int | None = None
    verified: bool = False
    baseline_rss_bytes: int = 0      # RSS before any weight was read (interpreter + torch + tokenizer)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        d = {"from": self.kind, "seconds": self.seconds, "path": self.path, "bytes": self.bytes,
             "verified": self.verified, "baseline_rss_bytes": self.baseline_rss_bytes}
        d.update(self.extra)
        return d


def _say_default(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def choose_allocation(model_path: Path | None, n_layers: int | None, draft_config=None, keep_ratio=None,
                      mantissa_bits=None, kv_mantissa_bits=None, kv_keep_ratio=1.0, scheme="c1", group_size=128,
                      memo_dir=None) -> tuple[str, "Allocation | None"]:
    """(description, allocation). The tuned allocation for the bundled model (recognised by content),
    a given draft config, or the uniform draft of the codec options. ``n_layers`` None: a uniform allocation
    is returned later (its layer count is the model's)."""
    uniform_given = any(v is not None for v in (keep_ratio, mantissa_bits, kv_mantissa_bits))
    if draft_config is not None and str(draft_config) != "uniform":
        if uniform_given:
            raise ConfigError("--draft-config fixes the draft: drop --keep-ratio/--mantissa-bits/--kv-mantissa-bits")
        return f"draft config {draft_config}", Allocation.load(draft_config)
    elif not uniform_given and model_path is not None and art_mod.is_bundled(model_path, memo_dir):
        return "the tuned allocation of the bundled model (--draft-config bundled)", Allocation.load("bundled")
    k = 1.0 if keep_ratio is None else keep_ratio
    m = 3 if mantissa_bits is None else mantissa_bits
    kvm = m if kv_mantissa_bits is None else kv_mantissa_bits
    kv = CodecConfig(scheme=scheme, keep_ratio=kv_keep_ratio, mantissa_bits=kvm, group_size=64, kind="kv")
    al = uniform(n_layers or 1, scheme=scheme, keep_ratio=k, mantissa_bits=m, group_size=group_size, kv=kv)
    return f"uniform draft: {scheme} keep {k} m {m}, KV m {kvm}", al


class CassandraModel:
    """A model ready to decode: the target, a drafter (or None for plain decoding), the tokenizer."""

    def __init__(self, engine: Engine, drafter, target, tokenizer, args, source: str, alloc=None,
                 load: LoadInfo | None = None, gamma: int = 4):
        self.engine, self.drafter, self.target = engine, drafter, target
        self.tokenizer, self.args, self.source, self.alloc = tokenizer, args, source, alloc
        self.load_info = load
        self.gamma = gamma
        self.last: Generation | None = None
        self.numerics = "torch"

    def set_numerics(self, numerics: str = "torch") -> "CassandraModel":
        """``torch`` (bf16 ``F.linear``, row-exact verify) or ``npu``: every linear layer of the target and of
        a model-based draft (the Cassandra draft on its decoded draft weights) computes what the NPU tile
        computes, and a verify pass reads each weight once (model/npu_numerics.py). Returns self."""
        from .npu_numerics import check_numerics

        check_numerics(numerics)
        models = [self.target, self.engine.target, getattr(self.drafter, "model", None)]
        for x in {id(x): x for x in models if x is not None}.values():
            x.set_numerics(numerics)
        self.numerics = numerics
        return self

    # ------------------------------------------------------------------------------------ loading
    @classmethod
    def from_cass(cls, path, *, draft: str = "cassandra", max_seq_len: int = 2048, verify: bool = False,
                  rtl: bool = False, rtl_layers=None, progress=None, skip_layers=None, n_skip: int = 0,
                  precheck=None, draft_memory: str | None = None, _kind: str = "cass") -> "CassandraModel":
        """Load a model artifact (``cassandra-rtl encode MODEL -o F.cass --draft-config ...``).
        ``draft_memory``: ``"derived"`` / ``"copy"`` (``artifact.load_models``; None: ``default_draft_memory()``)."""
        t0 = time.perf_counter()
        draft_memory = draft_memory or default_draft_memory()
        a = art_mod.open_artifact(path)
        art_mod.trim_heap()                       # the header's parse and the tokenizer's build leave freed heap
        base_rss = art_mod.current_rss_bytes()    # interpreter + torch + tokenizer, before any weight is read
        _check_layers(a.args.n_layers, rtl_layers, skip_layers, n_skip)
        args = _with_context(a.args, max_seq_len)
        if precheck:
            precheck(a.tokenizer, args)
        rtl_fn, kv_fn = _rtl_fns(rtl, draft, a.alloc)
        loaded = art_mod.load_models(a.tensors(), args, draft=(draft == "cassandra"), rtl=rtl_fn,
                                     rtl_layers=rtl_layers, digests=a.info.get("tensor_sha256") if verify else None,
                                     progress=progress, total=len(a.entries()), draft_memory=draft_memory)
        info = LoadInfo(_kind, 0.0, str(a.path), a.size, verify, base_rss, _draft_memory_info(loaded, draft_memory))
        tok, alloc, where = a.tokenizer, a.alloc, str(a.path)
        a = None                                  # the header (tensor list, meta) is not needed any more
        m = cls._assemble(loaded, args, tok, where, alloc, info, draft, rtl, kv_fn, skip_layers, n_skip, progress)
        info.seconds = time.perf_counter() - t0
        return m

    @classmethod
    def from_model(cls, model=None, *, draft: str = "cassandra", draft_config=None, keep_ratio=None,
                   mantissa_bits=None, kv_mantissa_bits=None, kv_keep_ratio: float = 1.0, scheme: str = "c1",
                   group_size: int = 128, cache_dir=DEFAULT_CACHE, max_seq_len: int = 2048, verify: bool = False,
                   rtl: bool = False, rtl_layers=None, skip_layers=None, n_skip: int = 0, gamma=None,
                   progress=None, say: Callable[[str], None] | None = _say_default,
                   precheck=None, draft_memory: str | None = None) -> "CassandraModel":
        """Load a .gguf / Hugging Face folder (None: the bundled SmolLM2). The Cassandra draft goes through a
        model artifact in ``cache_dir`` (encoded once per model content + allocation); ``cache_dir=None``
        encodes in memory. ``precheck(tokenizer, args)`` runs before any slow work (the CLI checks its
        prompt there)."""
        from .loader import bundled_model_path, load

        if draft not in DRAFTS:
            raise ConfigError(f"unknown draft {draft!r} (choose from {', '.join(DRAFTS)})")
        if rtl and draft != "cassandra":
            raise ConfigError("--rtl decodes the Cassandra draft's streams: use it with --draft cassandra")
        if draft_config is not None and draft != "cassandra":
            raise ConfigError("--draft-config configures the Cassandra draft: use it with --draft cassandra")
        say = say or (lambda msg: None)
        t0 = time.perf_counter()
        base_rss = art_mod.current_rss_bytes()
        path = Path(model) if model is not None else bundled_model_path()
        if not path.exists():
            raise InputError(f"model not found: {path}")
        if draft != "cassandra":
            ck = load(path, max_seq_len=max_seq_len)
            _check_layers(ck.args.n_layers, rtl_layers, skip_layers, n_skip)
            if precheck:
                precheck(ck.tokenizer, ck.args)
            from .runner import DraftOptions, build

            o = DraftOptions(gamma=gamma or 4, skip_layers=skip_layers, n_skip=n_skip)
            eng, d, target = build(ck, draft, o, progress=progress)
            info = LoadInfo("checkpoint", time.perf_counter() - t0, str(path), None, False, base_rss)
            return cls(eng, d, target, ck.tokenizer, ck.args, ck.source, None, info, gamma or 4)
        memo = None if cache_dir is None else (default_cache_dir() if cache_dir == DEFAULT_CACHE else cache_dir)
        what, alloc = choose_allocation(path, None, draft_config, keep_ratio, mantissa_bits, kv_mantissa_bits,
                                        kv_keep_ratio, scheme, group_size, memo)
        if scheme != "c1" and rtl:
            raise ConfigError("--rtl: the generated decoder implements scheme c1 only")
        cpath = None
        if memo is not None:
            digest = art_mod.source_digest(path, memo)
            cpath = art_mod.cache_path(memo, digest, alloc, path.name)
            if cpath.is_file():
                try:
                    a = art_mod.open_artifact(cpath)
                    ok = a.info.get("source_sha256") == digest
                except (InputError, ConfigError, ValueError, OSError):
                    ok = False
                if ok:
                    say(f"[generate] model cache: loading {cpath} ({cpath.stat().st_size / 1e6:.1f} MB, "
                        f"{path.name} encoded earlier; --cache-dir DIR, --no-cache)")
                    try:
                        m = cls.from_cass(cpath, max_seq_len=max_seq_len, verify=verify, rtl=rtl,
                                          rtl_layers=rtl_layers, progress=progress, precheck=precheck,
                                          draft_memory=draft_memory, _kind="cache-hit")
                    except FormatError as exc:       # written by another version of the format: encode again
                        say(f"[generate] model cache: {cpath.name} is unreadable ({exc}); encoding again")
                    else:                            # baseline: from_cass's, after the tokenizer
                        m.load_info.seconds = time.perf_counter() - t0
                        m.load_info.extra["draft_choice"] = what
                        return m._with_gamma(gamma)
        ck = load(path, max_seq_len=1 << 20)      # the model's own context; --max-seq-len applies when loading
        _check_layers(ck.args.n_layers, rtl_layers, skip_layers, n_skip)
        if precheck:
            precheck(ck.tokenizer, _with_context(ck.args, max_seq_len))
        if alloc.n_layers != ck.args.n_layers and draft_config is None:
            alloc.n_layers = ck.args.n_layers     # the uniform allocation takes the model's layer count
        alloc.check(ck)
        if cpath is not None:
            t1 = time.perf_counter()
            cpath.parent.mkdir(parents=True, exist_ok=True)
            w = art_mod.write_artifact(ck, alloc, cpath, digest=digest, progress=progress,
                                       producer="cassandra-rtl generate (model cache)", consume=True)
            say(f"[generate] model cache: encoded {path.name} once into {cpath} ({w['bytes'] / 1e6:.1f} MB, "
                f"{time.perf_counter() - t1:.1f} s); later runs load it (--cache-dir DIR, --no-cache)")
            del ck
            m = cls.from_cass(cpath, max_seq_len=max_seq_len, verify=verify, rtl=rtl, rtl_layers=rtl_layers,
                              progress=progress, draft_memory=draft_memory, _kind="cache-miss")
            m.load_info.seconds = time.perf_counter() - t0
            m.load_info.baseline_rss_bytes = base_rss
            m.load_info.extra["draft_choice"] = what
            return m._with_gamma(gamma)
        # no cache: encode and decode one tensor at a time in memory (the checkpoint's bits are the check)
        args = _with_context(ck.args, max_seq_len)
        rtl_fn, kv_fn = _rtl_fns(rtl, draft, alloc)
        loaded = art_mod.load_models(art_mod.encode_checkpoint(ck, alloc), args, draft=True, rtl=rtl_fn,
                                     rtl_layers=rtl_layers, originals=ck.bits, progress=progress, total=len(ck.bits),
                                     draft_memory=draft_memory or default_draft_memory())
        tok, source = ck.tokenizer, ck.source
        del ck
        info = LoadInfo("memory", 0.0, None, None, True, base_rss,
                        {"draft_choice": what, **_draft_memory_info(loaded, draft_memory or default_draft_memory())})
        m = cls._assemble(loaded, args, tok, source, alloc, info, draft, rtl, kv_fn, None, 0, progress)
        info.seconds = time.perf_counter() - t0
        return m._with_gamma(gamma)

    @classmethod
    def _assemble(cls, loaded, args, tok, source, alloc, info, draft, rtl, kv_fn, skip_layers, n_skip, progress):
        from .drafters import cassandra_drafter

        target = loaded.target
        stop = tok.stop_ids if tok else set(args.eos_token_ids)
        if draft == "cassandra":
            d, tcost = cassandra_drafter(target, loaded.draft, alloc.kv_cfg(args.head_dim), loaded.spec_bytes,
                                         loaded.full_bytes, kv_fn[0], cfg0=alloc.cfg_for("layers.0.wq"),
                                         kv_encode=kv_fn[1])
            d.encoded.seconds = loaded.seconds
            d.info["encode_s"] = 0.0
            d.info["load_s"] = loaded.seconds
            d.info.update(alloc.describe())
            if rtl:
                d.info["rtl_weight_tensors"] = len(loaded.rtl_tensors)
                d.info["rtl_kv"] = d.kv_view.decode is not None
                d.info["rtl"] = d.kv_view.rtl          # filled in place by every step (KVSpecView.sync)
                d.kv_view.rtl["weight_tensors"] = len(loaded.rtl_tensors)
                d.kv_view.rtl["weight_values"] = loaded.rtl_values
                d.kv_view.rtl["weight_mismatches"] = 0      # a mismatch stops the load (AssertionError)
            eng = Engine(target, tcost, stop_ids=stop, baseline_cost=bf16_cost(target))
            return cls(eng, d, target, tok, args, source, alloc, info, alloc.gamma)
        # other drafts read only the target (decoded from the container)
        from .loader import Checkpoint
        from .runner import DraftOptions, build

        ck = Checkpoint(args, {n: art_mod._param_bits(p) for n, p in target.named_weights().items()}, tok, source)
        eng, d, tgt = build(ck, draft, DraftOptions(skip_layers=skip_layers, n_skip=n_skip), progress=progress,
                            target=target)            # the decoded target itself: not a second copy
        return cls(eng, d, tgt, tok, args, source, alloc, info, 4)

    def _with_gamma(self, gamma):
        if gamma:
            self.gamma = int(gamma)
        return self

    # ------------------------------------------------------------------------------------ decoding
    def encode_prompt(self, prompt: str, system: str | None = None, raw: bool = False) -> list[int]:
        tok = self.tokenizer
        if tok is None:
            raise ConfigError("this checkpoint has no tokenizer")
        text = prompt if raw else tok.apply_chat(prompt, system=system)
        ids = ([self.args.bos_token_id] if self.args.bos_token_id is not None else []) + tok.encode(text)
        if len(ids) >= self.args.max_seq_len:
            raise InputError(f"prompt of {len(ids)} tokens does not fit the context of {self.args.max_seq_len} "
                             f"(at most {self.args.max_seq_len - 1})")
        return ids

    def chat(self, system: str | None = None) -> "Chat":
        """A multi-turn conversation: ``c = m.chat(); c.send("hi").text; for piece in c.stream("and?"): ...``."""
        return Chat(self, system)

    def encode_messages(self, msgs: list[dict]) -> list[int]:
        tok = self.tokenizer
        if tok is None:
            raise ConfigError("this checkpoint has no tokenizer")
        ids = ([self.args.bos_token_id] if self.args.bos_token_id is not None else []) + \
            tok.encode(tok.apply_messages(msgs))
        if len(ids) >= self.args.max_seq_len:
            raise InputError(f"the conversation has {len(ids)} tokens, more than the context of "
                             f"{self.args.max_seq_len} holds (at most {self.args.max_seq_len - 1})")
        return ids

    def stream(self, prompt, max_new_tokens: int = 64, *, system: str | None = None, raw: bool = False,
               temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, seed: int = 0, gamma: int | None = None,
               adaptive: bool = False, stop=(), speculative: bool = True) -> Iterator[str]:
        """Yields the generated text piece by piece (whole UTF-8 characters; a stop string is never yielded);
        ``self.last`` holds the Generation afterwards. ``prompt``: a string, or token ids."""
        ids = list(prompt) if isinstance(prompt, (list, tuple)) else self.encode_prompt(prompt, system, raw)
        sp = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k)
        stops = [s for s in (stop or ()) if s]
        tok = self.tokenizer
        gen_ids: list[int] = []
        state = {"printed": 0, "stop": None, "cut": None}

        def stop_fn(out):
            if not stops or tok is None:
                return False
            s = tok.decode(out)
            hits = [(s.find(x), x) for x in stops if x in s]
            if hits:
                pos, x = min(hits)
                state["stop"], state["cut"] = x, pos
                return True
            return False

        drafter = self.drafter if speculative else None
        it = self.engine.steps(ids, max_new_tokens, drafter, gamma or self.gamma, adaptive, sp, seed,
                               stop_fn=stop_fn if stops else None)
        res = None
        while True:
            try:
                new = next(it)
            except StopIteration as done:
                res = done.value
                break
            gen_ids.extend(new)
            if tok is None:
                continue
            s = tok.decode(gen_ids)
            if s.endswith("\ufffd"):               # an incomplete UTF-8 sequence: wait for the next token
                continue
            # hold back a tail that could be the start of a stop string
            hold = max((len(x) - 1 for x in stops), default=0)
            upto = len(s) - hold if state["stop"] is None else state["cut"]
            if stops and state["stop"] is None:
                for x in stops:
                    if x in s:
                        upto = min(upto, s.find(x))
            if upto > state["printed"]:
                yield s[state["printed"]:upto]
                state["printed"] = upto
        text = tok.decode(res.tokens) if tok is not None else ""
        if state["stop"] is not None:
            text = text[:state["cut"]]
        if tok is not None and len(text) > state["printed"]:
            yield text[state["printed"]:]
        self.last = Generation(text, list(res.tokens), self._metrics(res), state["stop"])

    def generate(self, prompt, max_new_tokens: int = 64, **kw) -> Generation:
        """Decode ``prompt`` (string or token ids); returns text, tokens and metrics (``Result.summary()``,
        the performance model, load figures, peak RSS)."""
        for _ in self.stream(prompt, max_new_tokens, **kw):
            pass
        return self.last

    def _metrics(self, res) -> dict:
        from . import metrics

        s = res.summary()
        s["model"] = self.source
        s.update(metrics.model_summary(res, self.engine, self.drafter))
        self.last_inputs = metrics.run_inputs(res, self.engine, self.drafter)   # the run's passes (npu timing)
        rss = art_mod.peak_rss_bytes()
        bf16 = self.target.param_bytes()
        s["bf16_weight_bytes_all"] = bf16
        s["peak_rss_bytes"] = rss
        s["peak_rss_over_bf16"] = rss / bf16 if bf16 else None
        if self.load_info is not None:
            li = self.load_info.to_json()
            s["load"] = li
            base = self.load_info.baseline_rss_bytes
            s["peak_rss_above_baseline_over_bf16"] = (rss - base) / bf16 if bf16 and base else None
        return s


class Chat:
    """The conversation so far (system, user and assistant turns); every turn is decoded from the whole
    conversation rendered by the chat template."""

    def __init__(self, model: CassandraModel, system: str | None = None):
        self.model = model
        self.messages: list[dict] = [{"role": "system", "content": system}] if system else []

    def stream(self, text: str, max_new_tokens: int = 256, **kw) -> Iterator[str]:
        msgs = self.messages + [{"role": "user", "content": text}]
        ids = self.model.encode_messages(msgs)
        yield from self.model.stream(ids, max_new_tokens, **kw)
        self.messages = msgs + [{"role": "assistant", "content": self.model.last.text}]

    def send(self, text: str, max_new_tokens: int = 256, **kw) -> Generation:
        for _ in self.stream(text, max_new_tokens, **kw):
            pass
        return self.model.last


def load(model=None, *, numerics: str = "torch", **kw) -> CassandraModel:
    """A ``.cass`` model artifact, a .gguf, a Hugging Face folder, or None (the bundled SmolLM2).
    ``numerics``: ``torch`` or ``npu`` (``CassandraModel.set_numerics``)."""
    from .npu_numerics import check_numerics

    check_numerics(numerics)
    return _load(model, **kw).set_numerics(numerics)


def _load(model=None, **kw) -> CassandraModel:
    if model is not None and str(model).endswith(".cass"):
        bad = sorted(k for k in kw if k in ("draft_config", "keep_ratio", "mantissa_bits", "kv_mantissa_bits",
                                             "kv_keep_ratio", "scheme", "group_size", "cache_dir") and
                     kw[k] not in (None, DEFAULT_CACHE, 1.0, "c1", 128))
        if bad:
            raise ConfigError(f"a .cass model fixes its draft: {', '.join(bad)} cannot be changed (re-encode instead)")
        keep = {k: v for k, v in kw.items() if k in ("draft", "max_seq_len", "verify", "rtl", "rtl_layers", "progress",
                                                     "skip_layers", "n_skip", "draft_memory")}
        return CassandraModel.from_cass(model, **keep)
    return CassandraModel.from_model(model, **kw)


def _draft_memory_info(loaded, mode: str) -> dict:
    """``draft_memory`` and the bytes the draft holds besides the target (for ``--json``'s ``load``)."""
    d = loaded.draft
    if d is None:
        return {}
    extra = d.resident_bytes() if isinstance(d, art_mod.DerivedDraft) else d.param_bytes()
    return {"draft_memory": mode, "draft_resident_bytes": int(extra)}


def _with_context(args, max_seq_len):
    import copy

    a = copy.deepcopy(args)
    if max_seq_len:
        a.max_seq_len = min(a.max_seq_len, int(max_seq_len))
    return a


def _check_layers(n_layers, rtl_layers, skip_layers, n_skip):
    for opt, layers in (("--rtl-layers", rtl_layers), ("--skip-layers", skip_layers)):
        bad = [i for i in layers or () if not 0 <= i < n_layers]
        if bad:
            raise ConfigError(f"{opt}: layer {bad[0]} does not exist (the model has layers 0..{n_layers - 1})")
    if n_skip and n_skip >= n_layers:
        raise ConfigError(f"--n-skip {n_skip}: the model has only {n_layers} layers")


def _rtl_fns(rtl: bool, draft: str, alloc):
    if not rtl:
        return None, (None, None)
    if draft != "cassandra":
        raise ConfigError("--rtl decodes the Cassandra draft's streams: use it with --draft cassandra")
    from .runner import rtl_decoder, rtl_kv_decoder, rtl_kv_encoder

    dec = rtl_decoder()

    def fn(name, enc):
        if enc.config.scheme != "c1":            # the generated decoder reads c1; golden decodes the rest
            return None
        return dec(name, enc)

    return fn, (rtl_kv_decoder(), rtl_kv_encoder(alloc.kv.scheme))
