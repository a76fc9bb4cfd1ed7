"""Builds the protobuf requests from the keyword arguments of Client and AsyncClient."""
from __future__ import annotations

from typing import Any, Iterable, Optional

from ._stubs import pb

# GenerateRequest fields taken as keyword arguments ("sampling"), by kind.
_OPTIONAL = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repetition_penalty",
             "frequency_penalty", "presence_penalty", "seed")  # proto3 optional: unset = default
_PLAIN = ("max_tokens", "ignore_eos", "logprobs", "request_id")
_LISTS = ("stop", "stop_token_ids")
SAMPLING_ARGS = frozenset(_OPTIONAL + _PLAIN + _LISTS)


def chat_messages(messages: Iterable[Any]):
    """[pb.ChatMessage] from {"role": ..., "content": ...} dicts, (role, content) pairs or
    objects with .role and .content."""
    out = []
    for m in messages:
        if isinstance(m, dict):
            role, content = m["role"], m["content"]
        elif isinstance(m, (tuple, list)) and len(m) == 2:
            role, content = m
        elif hasattr(m, "role") and hasattr(m, "content"):
            role, content = m.role, m.content
        else:
            raise TypeError(f"a chat message is a {{'role', 'content'}} dict or a (role, "
                            f"content) pair, not {m!r}")
        out.append(pb.ChatMessage(role=role, content=content))
    return out


def generate_request(prompt: Optional[str] = None, messages: Optional[Iterable[Any]] = None,
                     token_ids: Optional[Iterable[int]] = None, **sampling: Any):
    """A GenerateRequest. Which of prompt, messages and token_ids is given (exactly one) and
    the values of the sampling arguments are checked by the server (InvalidArgument)."""
    unknown = set(sampling) - SAMPLING_ARGS
    if unknown:
        raise TypeError(f"unknown argument(s) {', '.join(sorted(unknown))}; sampling "
                        f"arguments are {', '.join(sorted(SAMPLING_ARGS))}")
    req = pb.GenerateRequest()
    if prompt is not None:
        req.prompt = prompt
    if messages is not None:
        req.messages.extend(chat_messages(messages))
    if token_ids is not None:
        req.prompt_token_ids.extend(token_ids)
    for name, value in sampling.items():
        if value is None:
            continue  # not set: the server's default
        if name == "stop" and isinstance(value, str):
            value = [value]
        if name in _LISTS:
            getattr(req, name).extend(value)
        else:
            setattr(req, name, value)
    return req


def tokenize_request(text: Optional[str], messages: Optional[Iterable[Any]],
                     add_special_tokens: bool):
    req = pb.TokenizeRequest(add_special_tokens=add_special_tokens)
    if text is not None:
        req.text = text
    if messages is not None:
        req.messages.extend(chat_messages(messages))
    return req


def detokenize_request(token_ids: Iterable[int], skip_special_tokens: bool):
    return pb.DetokenizeRequest(token_ids=list(token_ids),
                                skip_special_tokens=skip_special_tokens)
