"""Text -> token ids without tpserve, built only from the GGUF's own metadata.

* ``load_tokenizer(path)``: an HF ``tokenizers`` byte-level BPE assembled from
  tokenizer.ggml.tokens / tokenizer.ggml.merges, with the GPT-2 style
  pre-tokenizer used by SmolLM2 (individual digits, then ByteLevel regex split),
  a ByteLevel decoder, and every token of token_type 3 (CONTROL) registered as
  an added *special* token (so "<|im_start|>" in text maps to one id).
* ``render_chat(path, messages)``: the GGUF's tokenizer.chat_template rendered
  with jinja2 (add_generation_prompt=True).
* ``encode(path, text)`` / ``encode_chat(path, user_text)`` / ``decode(path, ids)``.

No BOS is prepended (tokenizer.ggml.add_bos_token is False for SmolLM2; the
ChatML template itself starts with <|im_start|>). ``encode`` honours the flag.
"""

from __future__ import annotations

import functools
from typing import Dict, List, Sequence

import jinja2
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from llama_ref import gguf_reader  # cached GGUFReader shared with the model loader

TOKEN_TYPE_CONTROL = 3


def _fields(path: str) -> Dict[str, object]:
    r = gguf_reader(path)
    keys = ["tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.merges",
            "tokenizer.ggml.token_type", "tokenizer.chat_template",
            "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.add_bos_token"]
    return {k: (r.fields[k].contents() if k in r.fields else None) for k in keys}


@functools.lru_cache(maxsize=4)
def _meta(path: str) -> Dict[str, object]:
    return _fields(path)


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str) -> Tokenizer:
    m = _meta(path)
    if m["tokenizer.ggml.model"] != "gpt2":
        raise NotImplementedError(f"only byte-level BPE (gpt2) tokenizers, got {m['tokenizer.ggml.model']!r}")
    tokens: List[str] = m["tokenizer.ggml.tokens"]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(s.split(" ", 1)) for s in m["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(tokens[i], special=True, normalized=False)
                for i, tt in enumerate(m["tokenizer.ggml.token_type"]) if tt == TOKEN_TYPE_CONTROL]
    tok.add_special_tokens(specials)
    # Sanity: special tokens keep their GGUF ids.
    for a in specials:
        assert tok.token_to_id(a.content) == vocab[a.content]
    return tok


def encode(path: str, text: str, add_bos: bool | None = None) -> List[int]:
    """Raw text -> ids. Special-token strings in ``text`` are parsed as specials."""
    m = _meta(path)
    ids = load_tokenizer(path).encode(text, add_special_tokens=False).ids
    if add_bos is None:
        add_bos = bool(m["tokenizer.ggml.add_bos_token"])
    if add_bos and m["tokenizer.ggml.bos_token_id"] is not None:
        ids = [int(m["tokenizer.ggml.bos_token_id"])] + ids
    return ids


def decode(path: str, ids: Sequence[int], skip_special: bool = False) -> str:
    return load_tokenizer(path).decode(list(ids), skip_special_tokens=skip_special)


def render_chat(path: str, messages: List[Dict[str, str]], add_generation_prompt: bool = True) -> str:
    m = _meta(path)
    tmpl = m["tokenizer.chat_template"]
    if tmpl is None:
        raise ValueError("GGUF has no tokenizer.chat_template")
    toks = m["tokenizer.ggml.tokens"]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    bos = toks[m["tokenizer.ggml.bos_token_id"]] if m["tokenizer.ggml.bos_token_id"] is not None else ""
    eos = toks[m["tokenizer.ggml.eos_token_id"]] if m["tokenizer.ggml.eos_token_id"] is not None else ""
    return env.from_string(tmpl).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                        bos_token=bos, eos_token=eos)


def encode_chat(path: str, user_text: str, system: str | None = None) -> List[int]:
    """Single-turn ChatML prompt (template default system message unless given) -> ids."""
    msgs = ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": user_text}]
    return encode(path, render_chat(path, msgs), add_bos=False)
