"""Auto-resume of Generate streams, the rules shared by Client's Stream and AsyncClient's
AsyncStream (which only do the I/O: read, sleep, start the next attempt).

- is_resumable: the one rule of which failures resume.
- ResumePolicy: how many resumes, and the backoff before each.
- StreamProgress: one logical stream across its attempts: what the caller has received
  (token ids, seed, request id), the deltas it sees, the request each resend carries and the
  deadline of the whole stream. Not thread-safe: it belongs to the stream's consumer.

A resend is the same GenerateRequest with `resume.token_ids` = every token id received,
`resume.seed` = the seed the stream's first message reported (or the request's own), and the
server's request_id when the caller gave none; the server streams only what comes after, so
the caller sees one uninterrupted stream (see GenerateRequest.resume in generate.proto)."""
from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import grpc

from ._stubs import pb
from .errors import TpserveError, from_rpc_error
from .types import Delta

__all__ = ["ResumePolicy", "StreamProgress", "is_resumable", "channel_options"]

# INTERNAL / UNKNOWN resume only when the details say the transport broke (the server itself
# never answers UNKNOWN, and its INTERNAL would fail the same way again). Lowercase.
_BROKEN_TRANSPORT = ("rst_stream", "stream removed", "socket closed", "connection reset",
                     "broken pipe", "goaway", "transport closed", "connection closed",
                     "endpoint closing")


def is_resumable(code: grpc.StatusCode, details: str) -> bool:
    """Whether a Generate stream that failed with (code, details) before its last message is
    worth resending: UNAVAILABLE (no server, restarting, draining, world not ready), and
    INTERNAL or UNKNOWN from a broken transport (RST_STREAM, "Socket closed"). Never
    INVALID_ARGUMENT, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, CANCELLED, UNAUTHENTICATED,
    PERMISSION_DENIED or anything else."""
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        lowered = (details or "").lower()
        return any(phrase in lowered for phrase in _BROKEN_TRANSPORT)
    return False


@dataclass(frozen=True)
class ResumePolicy:
    """At most `max_resumes` resends per stream (0: never resume), the k-th (from 0) after a
    delay of min(backoff_max_s, backoff_s * 2**k) times a jitter in [0.5, 1]."""
    max_resumes: int = 8
    backoff_s: float = 0.1
    backoff_max_s: float = 2.0

    def __post_init__(self):
        if not isinstance(self.max_resumes, int) or self.max_resumes < 0:
            raise ValueError(f"max_resumes must be an int >= 0, not {self.max_resumes!r}")
        if not 0 < self.backoff_s <= self.backoff_max_s:
            raise ValueError(f"resume backoff: need 0 < resume_backoff_s ({self.backoff_s}) "
                             f"<= resume_backoff_max_s ({self.backoff_max_s})")

    def with_max_resumes(self, max_resumes: Optional[int]) -> "ResumePolicy":
        """This policy, with a call's own max_resumes when it gives one."""
        if max_resumes is None:
            return self
        return dataclasses.replace(self, max_resumes=max_resumes)

    def delay_s(self, resumes_so_far: int) -> float:
        ceiling = min(self.backoff_max_s, self.backoff_s * 2 ** min(resumes_so_far, 30))
        return ceiling * random.uniform(0.5, 1.0)


def channel_options(options: Optional[Sequence[Tuple[str, object]]],
                    policy: ResumePolicy) -> List[Tuple[str, object]]:
    """The caller's channel options, plus a reconnect backoff as short as the resume backoff
    (unless the caller set one): gRPC's default (1 s growing to 120 s) would fail every resend
    fast with UNAVAILABLE for seconds after a restarted server is back."""
    merged = list(options or [])
    named = {name for name, _ in merged}
    for name, value_s in (("grpc.initial_reconnect_backoff_ms", policy.backoff_s),
                          ("grpc.max_reconnect_backoff_ms", policy.backoff_max_s)):
        if name not in named:
            merged.append((name, max(1, int(value_s * 1000))))
    return merged


class StreamProgress:
    """One logical Generate stream across its attempts. The stream calls start() for the
    first attempt, accept() for each message, after_failure() when an attempt fails and,
    unless that raised, resend() for the next attempt."""

    def __init__(self, request, policy: ResumePolicy, timeout_s: Optional[float]):
        self._request = request
        self._want_logprobs = request.logprobs > 0
        self._policy = policy
        self._timeout_s = timeout_s
        self._deadline: Optional[float] = None  # time.monotonic() at which the stream ends
        self._received = False  # any message, in any attempt
        self._first_of_attempt = True
        self._attempt_resumed = False  # the current attempt carries `resume`
        self.token_ids: List[int] = []  # every token id the caller has received
        self.seed: Optional[int] = request.seed if request.HasField("seed") else None
        self.request_id: str = request.request_id  # "" until the server reports one
        self.resumes = 0
        self.finished = False  # the last message (finish_reason set) arrived
        self._failed: Optional[TpserveError] = None  # what ended the stream, raised again

    def start(self) -> Tuple[object, Optional[float]]:
        """(request, timeout_s) of the first attempt; the stream's deadline starts now."""
        if self._timeout_s is not None:
            self._deadline = time.monotonic() + self._timeout_s
        return self._request, self._timeout_s

    def accept(self, message) -> Optional[Delta]:
        """The caller's Delta for a message, or None for one that carries nothing new (a
        resumed attempt's empty opening). Raises TpserveError (UNIMPLEMENTED) when a resumed
        attempt opens without a seed: a server that predates Resume, which would send the
        stream again from its start."""
        first = self._first_of_attempt
        self._first_of_attempt = False
        has_seed = message.HasField("seed")
        if first and self._attempt_resumed and not has_seed:
            raise self._fail(TpserveError(
                grpc.StatusCode.UNIMPLEMENTED,
                "the server did not resume the stream (its first message reports no seed): "
                "it predates GenerateRequest.resume"))
        delta = Delta.from_proto(message, self._want_logprobs)
        logical_first = not self._received
        self._received = True
        if has_seed and self.seed is None:
            self.seed = message.seed
        if message.request_id and not self.request_id:
            self.request_id = message.request_id
        self.token_ids.extend(delta.token_ids)
        if delta.finish_reason is not None:
            self.finished = True
        if not logical_first:
            if delta.seed is not None:  # the seed is the logical stream's first delta's
                delta = dataclasses.replace(delta, seed=None)
            if first and not (delta.text or delta.token_ids or delta.logprobs or
                              delta.finish_reason is not None):
                return None
        return delta

    def after_failure(self, error: grpc.RpcError) -> Optional[float]:
        """Seconds to wait before resend(), for an attempt that failed with `error`; None
        when the stream had already ended (its last message arrived: the caller holds
        everything). Raises the error as a TpserveError when the stream does not resume: a
        status that does not resume, max_resumes spent, or the deadline too close."""
        if self.finished:
            return None
        if self._failed is not None:
            raise self._failed
        err = from_rpc_error(error)
        if not is_resumable(err.code, err.message):
            raise self._fail(err)
        if self.resumes >= self._policy.max_resumes:
            raise self._fail(_noted(err, f"not resumed: max_resumes="
                                         f"{self._policy.max_resumes} resumes spent"))
        delay = self._policy.delay_s(self.resumes)
        if self._deadline is not None and time.monotonic() + delay >= self._deadline:
            raise self._fail(_noted(err, f"not resumed: the call's deadline "
                                         f"({self._timeout_s} s) passes first, after "
                                         f"{self.resumes} resumes"))
        return delay

    def resend(self) -> Tuple[object, Optional[float]]:
        """(request, timeout_s) of the next attempt: the request with `resume` (once anything
        was received) and the server's request_id; the deadline left of the whole stream."""
        self.resumes += 1
        self._first_of_attempt = True
        request = pb.GenerateRequest()
        request.CopyFrom(self._request)
        request.request_id = self.request_id
        self._attempt_resumed = self._received
        if self._received:
            request.resume.token_ids.extend(self.token_ids)
            if self.seed is not None:
                request.resume.seed = self.seed
        timeout_s = None
        if self._deadline is not None:
            timeout_s = max(0.0, self._deadline - time.monotonic())
        return request, timeout_s


    def _fail(self, err: TpserveError) -> TpserveError:
        """Records err as the end of the stream (a later failure raises it again)."""
        err.__suppress_context__ = True  # the grpc.RpcError it stands for adds nothing
        self._failed = err
        return err


def _noted(err: TpserveError, note: str) -> TpserveError:
    """err, of the same class and code, with `note` appended to its message."""
    return type(err)(err.code, f"{err.message} ({note})" if err.message else note)


class ProgressView:
    """What a stream (sync or async) reports of its logical stream: how many times it resumed,
    the seed in use and the request id. The stream sets `self._progress` (StreamProgress) and
    `self._call` (its running attempt, cancelled when the stream is dropped)."""
    _progress: StreamProgress

    def __del__(self) -> None:
        call = getattr(self, "_call", None)
        if call is not None:
            try:
                call.cancel()
            except Exception:  # interpreter shutdown, or the event loop is gone
                pass

    @property
    def resumes(self) -> int:
        return self._progress.resumes

    @property
    def seed(self) -> Optional[int]:
        return self._progress.seed

    @property
    def request_id(self) -> str:
        return self._progress.request_id
