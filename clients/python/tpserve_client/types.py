"""Plain data returned by Client and AsyncClient (frozen dataclasses, no protobuf)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator, List, Optional

from ._stubs import pb

__all__ = ["TokenLogprob", "TokenLogprobs", "Usage", "Delta", "Result", "Tokens", "ModelInfo"]

# GenerateResponse.finish_reason -> the string the client reports (None: not finished).
FINISH_REASONS = {
    pb.FINISH_REASON_UNSPECIFIED: None,
    pb.FINISH_REASON_LENGTH: "length",
    pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_EOS: "eos",
    pb.FINISH_REASON_CANCELLED: "cancelled",
}


@dataclass(frozen=True)
class TokenLogprob:
    """A token with its natural-log probability; `text` may hold part of a UTF-8 character
    (then with U+FFFD), `raw` is the token's bytes."""
    token_id: int
    text: str
    logprob: float
    raw: bytes = b""

    @classmethod
    def from_proto(cls, m) -> "TokenLogprob":
        return cls(token_id=m.token_id, text=m.text, logprob=m.logprob, raw=m.bytes)


@dataclass(frozen=True)
class TokenLogprobs:
    """Log-probabilities for one generated token: the chosen one and the `logprobs` most
    likely alternatives, best first."""
    chosen: TokenLogprob
    top: List[TokenLogprob]

    @classmethod
    def from_proto(cls, m) -> "TokenLogprobs":
        return cls(chosen=TokenLogprob.from_proto(m.chosen),
                   top=[TokenLogprob.from_proto(t) for t in m.top])


@dataclass(frozen=True)
class Usage:
    """Token counts of a finished request (prompt counted after the chat template)."""
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Delta:
    """One streamed step: the text and token ids produced since the previous delta.
    `finish_reason` ("length", "stop", "eos", "cancelled") and `usage` are set on the last
    delta only; `logprobs` is None unless the request asked for logprobs; `seed` (the seed
    of the request's draws, the caller's or the server's) is set on the first delta only."""
    text: str
    token_ids: List[int]
    logprobs: Optional[List[TokenLogprobs]]
    finish_reason: Optional[str]
    usage: Optional[Usage]
    request_id: str
    seed: Optional[int] = None

    @classmethod
    def from_proto(cls, m, want_logprobs: bool) -> "Delta":
        return cls(
            text=m.text,
            token_ids=list(m.token_ids),
            logprobs=[TokenLogprobs.from_proto(l) for l in m.logprobs] if want_logprobs else None,
            finish_reason=FINISH_REASONS.get(m.finish_reason, str(m.finish_reason)),
            usage=(Usage(m.usage.prompt_tokens, m.usage.completion_tokens)
                   if m.HasField("usage") else None),
            request_id=m.request_id,
            seed=m.seed if m.HasField("seed") else None)


@dataclass(frozen=True)
class Result:
    """A whole generation: the deltas of its stream joined; `seed` is the seed its draws used
    (None from a server that does not report it)."""
    text: str
    token_ids: List[int]
    finish_reason: Optional[str]
    usage: Optional[Usage]
    logprobs: Optional[List[TokenLogprobs]]
    request_id: str
    seed: Optional[int] = None


class ResultBuilder:
    """Joins the deltas of a stream into a Result."""

    def __init__(self):
        self._text: List[str] = []
        self._ids: List[int] = []
        self._logprobs: Optional[List[TokenLogprobs]] = None  # None: not asked for
        self._last: Optional[Delta] = None
        self._seed: Optional[int] = None  # the first one a delta reports

    def add(self, delta: Delta) -> None:
        if self._seed is None:
            self._seed = delta.seed
        self._text.append(delta.text)
        self._ids.extend(delta.token_ids)
        if delta.logprobs is not None:
            if self._logprobs is None:
                self._logprobs = []
            self._logprobs.extend(delta.logprobs)
        self._last = delta

    def result(self) -> Result:
        last = self._last
        return Result(text="".join(self._text), token_ids=self._ids,
                      finish_reason=last.finish_reason if last else None,
                      usage=last.usage if last else None, logprobs=self._logprobs,
                      request_id=last.request_id if last else "", seed=self._seed)


class Tokens(List[int]):
    """Token ids (a list of int) with each token's text piece in `.pieces`."""

    def __init__(self, token_ids=(), pieces=()):
        super().__init__(token_ids)
        self.pieces: List[str] = list(pieces)

    def __repr__(self) -> str:
        return f"Tokens({list(self)!r}, pieces={self.pieces!r})"


@dataclass(frozen=True)
class ModelInfo:
    """The served model, its world and the server's limits (GetModelInfo). Reads as a
    dataclass (info.vocab_size) and as a mapping (info["vocab_size"], dict(info))."""
    model_name: str
    architecture: str
    context_length: int
    vocab_size: int
    world_size: int
    backend: str
    max_input_tokens: int
    max_total_tokens: int
    max_new_tokens: int
    max_queue: int
    max_stop_sequences: int
    kv_blocks_total: int
    kv_blocks_free: int
    kv_block_size: int
    ready: bool
    requests_running: int
    requests_waiting: int
    eos_token_id: int
    bos_token_id: int
    prefix_caching: bool
    kv_blocks_cached: int

    @classmethod
    def from_proto(cls, m) -> "ModelInfo":
        return cls(**{f.name: getattr(m, f.name) for f in dataclasses.fields(cls)})

    def keys(self) -> List[str]:
        return [f.name for f in dataclasses.fields(self)]

    def __getitem__(self, key: str):
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
