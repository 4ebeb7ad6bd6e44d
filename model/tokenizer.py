"""Tokenizer (Hugging Face `tokenizers`) and chat template (jinja2) for GGUF and HF checkpoints."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from cassandra_rtl.errors import InputError


@dataclass
class ChatTokenizer:
    tok: "object"  # tokenizers.Tokenizer
    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None
    stop_ids: set[int] = field(default_factory=set)

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special)

    def apply_chat(self, user_text: str, system: str | None = None) -> str:
        """The prompt text for one user turn plus the assistant generation prompt."""
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user_text}]
        if not self.chat_template:
            return user_text
        return self.apply_messages(msgs)

    def apply_messages(self, msgs: list[dict]) -> str:
        """The prompt text for a conversation (``[{"role", "content"}, ...]``) plus the generation prompt."""
        if not self.chat_template:
            return "\n".join(m["content"] for m in msgs)
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(msg):
            raise InputError(f"chat template: {msg}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        try:
            tpl = env.from_string(self.chat_template)
            return tpl.render(messages=msgs, add_generation_prompt=True, bos_token=self.bos_token or "",
                              eos_token=self.eos_token or "")
        except jinja2.TemplateError as e:
            raise InputError(f"cannot render the chat template: {e}") from None


# The split regexes of the Hugging Face tokenizer.json files these GGUF pre-tokenizer names stand for
# (llama.cpp's LLAMA3 and QWEN2 pre-types): words with an optional leading non-letter, numbers in runs
# of at most 3 digits (Llama 3) or single digits (Qwen2/Qwen3), punctuation runs, newlines, spaces.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
# Pre-tokenizer names handled exactly; any other name is refused, never approximated.
SUPPORTED_GGUF_PRE = ("default", "gpt2", "smollm", "starcoder", "refact", "llama3", "llama-bpe", "qwen2")


def gguf_pre_tokenizer(pre: str):
    """The tokenizers pre-tokenizer for a GGUF ``tokenizer.ggml.pre`` name; InputError for unknown names."""
    from tokenizers import Regex, pre_tokenizers

    if pre in ("default", "gpt2"):
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder", "refact"):
        # SmolLM / StarCoder tokenizer.json: individual digits, then GPT-2's byte-level regex split.
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    if pre in ("llama3", "llama-bpe", "qwen2"):
        split = _QWEN2_SPLIT if pre == "qwen2" else _LLAMA3_SPLIT
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    raise InputError(f"unsupported GGUF pre-tokenizer {pre!r} (supported: {', '.join(SUPPORTED_GGUF_PRE)}); "
                     "use the model's Hugging Face folder (tokenizer.json) instead")


def tokenizer_from_gguf_fields(fields: dict) -> ChatTokenizer:
    """Byte-level BPE (tokenizer.ggml.model == 'gpt2') from GGUF metadata."""
    from tokenizers import Tokenizer, decoders, models, AddedToken

    model = fields.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise InputError(f"unsupported GGUF tokenizer model {model!r} (only gpt2-style byte-level BPE)")
    tokens, merges = fields.get("tokenizer.ggml.tokens"), fields.get("tokenizer.ggml.merges")
    if not (isinstance(tokens, list) and tokens and all(isinstance(x, str) for x in tokens)):
        raise InputError("GGUF tokenizer.ggml.tokens is missing or not a list of strings")
    if not (isinstance(merges, list) and all(isinstance(x, str) for x in merges)):
        raise InputError("GGUF tokenizer.ggml.merges is missing or not a list of strings")
    merges = [tuple(m.split(" ", 1)) for m in merges]
    types = fields.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if not (isinstance(types, list) and len(types) == len(tokens) and all(isinstance(x, int) for x in types)):
        raise InputError("GGUF tokenizer.ggml.token_type must list one integer type per token")
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    pre = fields.get("tokenizer.ggml.pre", "default")
    tk.pre_tokenizer = gguf_pre_tokenizer(pre)
    if pre == "qwen2":
        from tokenizers import normalizers
        tk.normalizer = normalizers.NFC()          # as Qwen2/Qwen3's tokenizer.json
    tk.decoder = decoders.ByteLevel()
    special = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if int(ty) == 3]
    tk.add_special_tokens(special)
    bos = fields.get("tokenizer.ggml.bos_token_id")
    eos = fields.get("tokenizer.ggml.eos_token_id")
    for key, v in (("bos", bos), ("eos", eos)):
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(tokens)):
            raise InputError(f"GGUF tokenizer.ggml.{key}_token_id {v!r} is not a token id (vocabulary {len(tokens)})")
    stop = set()
    if eos is not None:
        stop.add(int(eos))
    for name in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>"):
        if name in vocab:
            stop.add(vocab[name])
    return ChatTokenizer(
        tk,
        chat_template=fields.get("tokenizer.chat_template"),
        bos_token=tokens[int(bos)] if bos is not None else None,
        eos_token=tokens[int(eos)] if eos is not None else None,
        stop_ids=stop,
    )


def read_json_object(path: Path) -> dict:
    """A JSON file that must hold an object (config.json, tokenizer_config.json); one InputError otherwise."""
    try:
        cfg = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise InputError(f"{path}: invalid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(cfg).__name__}")
    return cfg


def tokenizer_from_hf_folder(folder: Path) -> ChatTokenizer:
    from tokenizers import Tokenizer

    tj = folder / "tokenizer.json"
    if not tj.is_file():
        raise InputError(f"{folder}: no tokenizer.json")
    try:
        tk = Tokenizer.from_file(str(tj))
    except Exception as e:  # noqa: BLE001 - the library raises bare Exceptions
        raise InputError(f"{tj}: cannot load tokenizer: {e}") from None
    cfg = {}
    tc = folder / "tokenizer_config.json"
    if tc.is_file():
        cfg = read_json_object(tc)

    def _tokstr(v):
        v = v.get("content") if isinstance(v, dict) else v
        if v is not None and not isinstance(v, str):
            raise InputError(f"{tc}: special tokens must be strings, got {v!r}")
        return v

    bos, eos = _tokstr(cfg.get("bos_token")), _tokstr(cfg.get("eos_token"))
    stop = set()
    vocab = tk.get_vocab(with_added_tokens=True)
    for name in [eos, "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>"]:
        if name and name in vocab:
            stop.add(vocab[name])
    tpl = cfg.get("chat_template")
    if isinstance(tpl, list):  # [{name, template}, ...]
        named = [t for t in tpl if isinstance(t, dict) and isinstance(t.get("template"), str)]
        if not named:
            raise InputError(f"{tc}: chat_template list holds no {{name, template}} entry")
        tpl = next((t["template"] for t in named if t.get("name") == "default"), named[0]["template"])
    if tpl is not None and not isinstance(tpl, str):
        raise InputError(f"{tc}: chat_template must be a string or a list of {{name, template}}, got {tpl!r}")
    return ChatTokenizer(tk, chat_template=tpl, bos_token=bos, eos_token=eos, stop_ids=stop)
