"""Client: the synchronous client of tpserve's gRPC API (tpserve.v1.Generation and
grpc.health.v1). One channel per client; a Client may be shared by threads (grpc channels
are thread-safe). Every call raises tpserve_client.errors.TpserveError (a subclass by status
code) instead of grpc.RpcError."""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

import grpc

from . import _health, _security
from ._request import detokenize_request, generate_request, tokenize_request
from ._stubs import pb, pb_grpc
from .errors import from_rpc_error
from .types import Delta, ModelInfo, Result, ResultBuilder, Tokens

__all__ = ["Client", "Stream"]

HEALTH_TIMEOUT_S = 10.0  # health() deadline when neither the call nor the client sets one


class Stream:
    """The deltas of one Generate call, in order; iterate it (the RPC is already running).
    Leaving early cancels the call: use it as a context manager, call cancel(), or drop the
    last reference (as a `for` loop over client.stream(...) does when it breaks). Iterating
    after cancel() raises Cancelled."""

    def __init__(self, call, want_logprobs: bool):
        self._call = call
        self._want_logprobs = want_logprobs

    def __iter__(self) -> Iterator[Delta]:
        return self

    def __next__(self) -> Delta:
        try:
            return Delta.from_proto(next(self._call), self._want_logprobs)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def cancel(self) -> None:
        """Cancels the RPC (a no-op once it has finished); the server frees its batch slot."""
        self._call.cancel()

    close = cancel

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()

    def __del__(self) -> None:
        call = getattr(self, "_call", None)
        if call is not None:
            try:
                call.cancel()
            except Exception:  # interpreter shutdown
                pass


class Client:
    """Client("host:port", timeout=None): `timeout` (seconds) is the default deadline of
    every call, each of which may pass its own `timeout=`; None means no deadline.
    TLS: `ca_file` (PEM CA that signed the server's certificate; without it the system's
    CAs), and for mutual TLS `cert_file` and `key_file` (PEM client certificate and key); or
    `credentials` (grpc.ChannelCredentials) made by the caller. `api_key` is sent as
    "authorization: Bearer KEY" with every call (None: $TPSERVE_API_KEY, if set). `options`
    are grpc channel options."""

    def __init__(self, address: str, timeout: Optional[float] = None, *,
                 credentials: Optional[grpc.ChannelCredentials] = None, options=None,
                 ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None, api_key: Optional[str] = None):
        self.address = address
        self.timeout = timeout
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
               **sampling: Any) -> Stream:
        """Starts a generation and returns its Stream of Delta (finish_reason and usage on
        the last). Exactly one of prompt (raw text), messages (chat, through the model's chat
        template) and token_ids; sampling: max_tokens (required, > 0), temperature (0 =
        greedy), top_k, top_p, min_p, typical_p, repetition_penalty, frequency_penalty,
        presence_penalty, seed, stop, stop_token_ids, ignore_eos, logprobs, request_id."""
        req = generate_request(prompt, messages, token_ids, **sampling)
        try:
            call = self._stub.Generate(req, timeout=self._timeout(timeout),
                                       metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return Stream(call, want_logprobs=req.logprobs > 0)

    def generate(self, prompt: Optional[str] = None,
                 messages: Optional[Iterable[Any]] = None,
                 token_ids: Optional[Iterable[int]] = None, *,
                 timeout: Optional[float] = None, **sampling: Any) -> Result:
        """Runs a generation to its end: the Result joins the stream's deltas."""
        with self.stream(prompt, messages, token_ids, timeout=timeout, **sampling) as s:
            builder = ResultBuilder()
            for delta in s:
                builder.add(delta)
        return builder.result()

    def chat(self, messages: Iterable[Any], *, timeout: Optional[float] = None,
             **sampling: Any) -> Result:
        """generate(messages=...): messages as {"role", "content"} dicts or (role, content)."""
        return self.generate(messages=messages, timeout=timeout, **sampling)

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

    def _unary(self, method, request, timeout: Optional[float]):
        try:
            return method(request, timeout=self._timeout(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
