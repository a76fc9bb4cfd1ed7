"""AsyncClient: Client's API on grpc.aio, for asyncio. The channel is made on first use, so
it belongs to the event loop that first uses it; use one AsyncClient per loop. Every call
raises tpserve_client.errors.TpserveError (a subclass by status code) instead of
grpc.aio.AioRpcError; cancelling the task that awaits a call cancels the RPC."""
from __future__ import annotations

from typing import Any, AsyncIterator, Iterable, Optional

import grpc
import grpc.aio

from . import _health, _security
from ._request import detokenize_request, generate_request, tokenize_request
from ._stubs import pb, pb_grpc
from .client import HEALTH_TIMEOUT_S
from .errors import from_rpc_error
from .types import Delta, ModelInfo, Result, ResultBuilder, Tokens

__all__ = ["AsyncClient"]


class AsyncClient:
    """AsyncClient("host:port", timeout=None): as Client (the same TLS files and api_key),
    with coroutines, and stream() an async generator."""

    def __init__(self, address: str, timeout: Optional[float] = None, *,
                 credentials: Optional[grpc.ChannelCredentials] = None, options=None,
                 ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None, api_key: Optional[str] = None):
        self.address = address
        self.timeout = timeout
        self._credentials = _security.resolve(credentials, ca_file, cert_file, key_file)
        self._metadata = _security.call_metadata(api_key)
        self._options = options
        self._channel: Optional[grpc.aio.Channel] = None
        self._stub = None
        self._health_check = None

    def _connect(self):
        if self._channel is None:
            if self._credentials is None:
                self._channel = grpc.aio.insecure_channel(self.address, options=self._options)
            else:
                self._channel = grpc.aio.secure_channel(self.address, self._credentials,
                                                        options=self._options)
            self._stub = pb_grpc.GenerationStub(self._channel)
            self._health_check = _health.check_method(self._channel)
        return self._stub

    # --- generation -----------------------------------------------------------------------

    async def stream(self, prompt: Optional[str] = None,
                     messages: Optional[Iterable[Any]] = None,
                     token_ids: Optional[Iterable[int]] = None, *,
                     timeout: Optional[float] = None,
                     **sampling: Any) -> AsyncIterator[Delta]:
        """Yields the Delta of one generation (see Client.stream for the arguments). The RPC
        starts at the first iteration; leaving the loop early (or cancelling the consuming
        task) cancels it."""
        req = generate_request(prompt, messages, token_ids, **sampling)
        want_logprobs = req.logprobs > 0
        call = self._connect().Generate(req, timeout=self._timeout(timeout),
                                        metadata=self._metadata)
        try:
            async for message in call:
                yield Delta.from_proto(message, want_logprobs)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()  # a no-op when the call has finished

    async def generate(self, prompt: Optional[str] = None,
                       messages: Optional[Iterable[Any]] = None,
                       token_ids: Optional[Iterable[int]] = None, *,
                       timeout: Optional[float] = None, **sampling: Any) -> Result:
        """Runs a generation to its end: the Result joins the stream's deltas."""
        builder = ResultBuilder()
        deltas = self.stream(prompt, messages, token_ids, timeout=timeout, **sampling)
        try:
            async for delta in deltas:
                builder.add(delta)
        finally:
            await deltas.aclose()
        return builder.result()

    async def chat(self, messages: Iterable[Any], *, timeout: Optional[float] = None,
                   **sampling: Any) -> Result:
        return await self.generate(messages=messages, timeout=timeout, **sampling)

    # --- tokenizer and model --------------------------------------------------------------

    async def tokenize(self, text: Optional[str] = None,
                       messages: Optional[Iterable[Any]] = None,
                       add_special_tokens: bool = False, *,
                       timeout: Optional[float] = None) -> Tokens:
        stub = self._connect()
        reply = await self._unary(stub.Tokenize,
                                  tokenize_request(text, messages, add_special_tokens), timeout)
        return Tokens(reply.token_ids, reply.pieces)

    async def detokenize(self, token_ids: Iterable[int], skip_special_tokens: bool = False, *,
                         timeout: Optional[float] = None) -> str:
        stub = self._connect()
        reply = await self._unary(stub.Detokenize,
                                  detokenize_request(token_ids, skip_special_tokens), timeout)
        return reply.text

    async def model_info(self, *, timeout: Optional[float] = None) -> ModelInfo:
        stub = self._connect()
        return ModelInfo.from_proto(
            await self._unary(stub.GetModelInfo, pb.GetModelInfoRequest(), timeout))

    async def health(self, service: str = "", *, timeout: Optional[float] = None) -> bool:
        """Whether grpc.health.v1 reports SERVING; False also when nothing answers."""
        self._connect()
        deadline = self._timeout(timeout)
        try:
            reply = await self._health_check(
                _health.check_request(service),
                timeout=HEALTH_TIMEOUT_S if deadline is None else deadline)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                return False
            raise from_rpc_error(e) from None
        return _health.status_of(reply) == _health.SERVING

    # --- lifetime -------------------------------------------------------------------------

    async def close(self) -> None:
        """Closes the channel (cancelling the calls still running)."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = self._health_check = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    async def _unary(self, method, request, timeout: Optional[float]):
        try:
            return await method(request, timeout=self._timeout(timeout),
                                metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
