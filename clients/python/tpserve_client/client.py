"""Client: the synchronous client of tpserve's gRPC API (tpserve.v1.Generation and
grpc.health.v1). One channel per client; a Client may be shared by threads (grpc channels
are thread-safe). Every call raises tpserve_client.errors.TpserveError (a subclass by status
code) instead of grpc.RpcError."""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Iterator, Optional

import grpc

from . import _health, _security
from ._request import detokenize_request, generate_request, tokenize_request
from ._resume import ProgressView, ResumePolicy, StreamProgress, channel_options
from ._stubs import pb, pb_grpc
from .errors import Cancelled, TpserveError, from_rpc_error
from .types import Delta, ModelInfo, Result, ResultBuilder, Tokens

__all__ = ["Client", "Stream"]

HEALTH_TIMEOUT_S = 10.0  # health() deadline when neither the call nor the client sets one
CANCELLED_WHILE_RESUMING = "cancelled by the caller while resuming the stream"


class Stream(ProgressView):
    """The deltas of one Generate call, in order; iterate it (the RPC is already running).
    Leaving early cancels the call: use it as a context manager, call cancel(), or drop the
    last reference (as a `for` loop over client.stream(...) does when it breaks). Iterating
    after cancel() raises Cancelled.

    A stream that breaks before its last delta (UNAVAILABLE, or a broken transport) is
    resumed: the request is sent again with the tokens received so far and the stream goes
    on where it broke, at most `max_resumes` times within the call's deadline (see
    _resume.py). `resumes` counts the resends, `seed` is the seed of the request's draws and
    `request_id` its id (each None / "" until known). Iterate it from one thread; cancel()
    may come from any."""

    def __init__(self, start: Callable[[Any, Optional[float]], Any], progress: StreamProgress):
        self._start = start  # (request, timeout_s) -> a running grpc call
        self._progress = progress
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._call = None  # GUARDED_BY(_lock): the attempt running now
        self._open(*progress.start())

    def __iter__(self) -> Iterator[Delta]:
        return self

    def __next__(self) -> Delta:
        while True:
            try:
                message = next(self._call)
            except grpc.RpcError as e:
                if self._cancelled.is_set():
                    raise from_rpc_error(e) from None
                delay_s = self._progress.after_failure(e)  # raises when it does not resume
                if delay_s is None:
                    raise StopIteration from None
                if self._cancelled.wait(delay_s):
                    raise Cancelled(grpc.StatusCode.CANCELLED, CANCELLED_WHILE_RESUMING)
                self._open(*self._progress.resend())
                continue
            try:
                delta = self._progress.accept(message)
            except TpserveError:
                self._call.cancel()
                raise
            if delta is not None:
                return delta

    def cancel(self) -> None:
        """Cancels the RPC (a no-op once it has finished); the server frees its batch slot."""
        self._cancelled.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()

    close = cancel

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


    def _open(self, request, timeout_s: Optional[float]) -> None:
        with self._lock:
            if self._cancelled.is_set():
                raise Cancelled(grpc.StatusCode.CANCELLED, CANCELLED_WHILE_RESUMING)
            try:
                self._call = self._start(request, timeout_s)
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None


class Client:
    """Client("host:port", timeout=None): `timeout` (seconds) is the default deadline of
    every call, each of which may pass its own `timeout=`; None means no deadline.
    TLS: `ca_file` (PEM CA that signed the server's certificate; without it the system's
    CAs), and for mutual TLS `cert_file` and `key_file` (PEM client certificate and key); or
    `credentials` (grpc.ChannelCredentials) made by the caller. `api_key` is sent as
    "authorization: Bearer KEY" with every call (None: $TPSERVE_API_KEY, if set). `options`
    are grpc channel options.
    Resuming broken streams (see Stream): `max_resumes` resends per stream at most (0: never;
    each call may pass its own), the k-th after min(resume_backoff_max_s, resume_backoff_s *
    2**k) seconds, jittered; the channel's reconnect backoff is set to match unless `options`
    set it."""

    def __init__(self, address: str, timeout: Optional[float] = None, *,
                 credentials: Optional[grpc.ChannelCredentials] = None, options=None,
                 ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None, api_key: Optional[str] = None,
                 max_resumes: int = 8, resume_backoff_s: float = 0.1,
                 resume_backoff_max_s: float = 2.0):
        self.address = address
        self.timeout = timeout
        self._resume_policy = ResumePolicy(max_resumes, resume_backoff_s, resume_backoff_max_s)
        options = channel_options(options, self._resume_policy)
        credentials = _security.resolve(credentials, ca_file, cert_file, key_file)
        self._metadata = _security.call_metadata(api_key)
        if credentials is None:
            self._channel = grpc.insecure_channel(address, options=options)
        else:
            self._channel = grpc.secure_channel(address, credentials, options=options)
        self._stub = pb_grpc.GenerationStub(self._channel)
        self._health_check = _health.check_method(self._channel)

    # --- generation -----------------------------------------------------------------------

    def stream(self, prompt: Optional[str] = None, messages: Optional[Iterable[Any]] = None,
               token_ids: Optional[Iterable[int]] = None, *, timeout: Optional[float] = None,
               max_resumes: Optional[int] = None, **sampling: Any) -> Stream:
        """Starts a generation and returns its Stream of Delta (finish_reason and usage on
        the last). Exactly one of prompt (raw text), messages (chat, through the model's chat
        template) and token_ids; sampling: max_tokens (required, > 0), temperature (0 =
        greedy), top_k, top_p, min_p, typical_p, repetition_penalty, frequency_penalty,
        presence_penalty, seed, stop, stop_token_ids, ignore_eos, logprobs, request_id.
        `timeout` bounds the whole stream, resumes included; `max_resumes` overrides the
        client's."""
        req = generate_request(prompt, messages, token_ids, **sampling)
        progress = StreamProgress(req, self._resume_policy.with_max_resumes(max_resumes),
                                  self._timeout(timeout))
        return Stream(self._start_generate, progress)

    def generate(self, prompt: Optional[str] = None,
                 messages: Optional[Iterable[Any]] = None,
                 token_ids: Optional[Iterable[int]] = None, *,
                 timeout: Optional[float] = None, max_resumes: Optional[int] = None,
                 **sampling: Any) -> Result:
        """Runs a generation to its end: the Result joins the stream's deltas."""
        with self.stream(prompt, messages, token_ids, timeout=timeout,
                         max_resumes=max_resumes, **sampling) as s:
            builder = ResultBuilder()
            for delta in s:
                builder.add(delta)
        return builder.result()

    def chat(self, messages: Iterable[Any], *, timeout: Optional[float] = None,
             max_resumes: Optional[int] = None, **sampling: Any) -> Result:
        """generate(messages=...): messages as {"role", "content"} dicts or (role, content)."""
        return self.generate(messages=messages, timeout=timeout, max_resumes=max_resumes,
                             **sampling)

    # --- tokenizer and model --------------------------------------------------------------

    def tokenize(self, text: Optional[str] = None, messages: Optional[Iterable[Any]] = None,
                 add_special_tokens: bool = False, *,
                 timeout: Optional[float] = None) -> Tokens:
        """Token ids of `text` (or of chat `messages` through the chat template): a list of
        int whose `.pieces` holds each token's text."""
        reply = self._unary(self._stub.Tokenize,
                            tokenize_request(text, messages, add_special_tokens), timeout)
        return Tokens(reply.token_ids, reply.pieces)

    def detokenize(self, token_ids: Iterable[int], skip_special_tokens: bool = False, *,
                   timeout: Optional[float] = None) -> str:
        reply = self._unary(self._stub.Detokenize,
                            detokenize_request(token_ids, skip_special_tokens), timeout)
        return reply.text

    def model_info(self, *, timeout: Optional[float] = None) -> ModelInfo:
        """The served model, its world, the server's limits and its load now."""
        return ModelInfo.from_proto(
            self._unary(self._stub.GetModelInfo, pb.GetModelInfoRequest(), timeout))

    def health(self, service: str = "", *, timeout: Optional[float] = None) -> bool:
        """Whether grpc.health.v1 reports SERVING; False also when nothing answers
        (UNAVAILABLE). Other failures raise."""
        deadline = self._timeout(timeout)
        try:
            reply = self._health_check(_health.check_request(service),
                                       timeout=HEALTH_TIMEOUT_S if deadline is None else deadline)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                return False
            raise from_rpc_error(e) from None
        return _health.status_of(reply) == _health.SERVING

    # --- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the channel (cancelling the calls still running)."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    def _start_generate(self, request, timeout_s: Optional[float]):
        return self._stub.Generate(request, timeout=timeout_s, metadata=self._metadata)

    def _unary(self, method, request, timeout: Optional[float]):
        try:
            return method(request, timeout=self._timeout(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
