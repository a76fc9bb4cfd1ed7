"""AsyncClient: Client's API on grpc.aio, for asyncio. The channel is made on first use, so
it belongs to the event loop that first uses it; use one AsyncClient per loop. Every call
raises tpserve_client.errors.TpserveError (a subclass by status code) instead of
grpc.aio.AioRpcError; cancelling the task that awaits a call cancels the RPC."""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Optional

import grpc
import grpc.aio

from . import _health, _security
from ._request import detokenize_request, generate_request, tokenize_request
from ._resume import ProgressView, ResumePolicy, StreamProgress, channel_options
from ._stubs import pb, pb_grpc
from .client import HEALTH_TIMEOUT_S
from .errors import TpserveError, from_rpc_error
from .types import Delta, ModelInfo, Result, ResultBuilder, Tokens

__all__ = ["AsyncClient", "AsyncStream"]


class AsyncStream(ProgressView):
    """The deltas of one Generate call, for `async for`; the RPC starts at the first
    iteration. Leaving early cancels it: break out of the loop (dropping the stream), cancel
    the consuming task, `await aclose()`, call cancel() or use `async with`; iterating after
    that ends at once. Resumes a broken stream as Stream does; `resumes`, `seed` and
    `request_id` as there. Belongs to the event loop of its client."""

    def __init__(self, start: Callable[[Any, Optional[float]], Any], progress: StreamProgress):
        self._start = start  # (request, timeout_s) -> a running grpc.aio call
        self._progress = progress
        self._call = None  # the attempt running now; None before the first iteration
        self._closed = False

    def __aiter__(self) -> "AsyncStream":
        return self

    async def __anext__(self) -> Delta:
        try:
            return await self._next()
        except asyncio.CancelledError:
            self.cancel()
            raise

    async def _next(self) -> Delta:
        if self._call is None and not self._closed:
            self._call = self._start(*self._progress.start())
        while not self._closed:
            try:
                message = await self._call.read()
            except grpc.RpcError as e:
                if self._closed:
                    break
                delay_s = self._progress.after_failure(e)  # raises when it does not resume
                if delay_s is None:
                    break
                await asyncio.sleep(delay_s)
                if self._closed:
                    break
                self._call = self._start(*self._progress.resend())
                continue
            if message is grpc.aio.EOF:
                break
            try:
                delta = self._progress.accept(message)
            except TpserveError:
                self.cancel()
                raise
            if delta is not None:
                return delta
        raise StopAsyncIteration

    def cancel(self) -> None:
        """Cancels the RPC (a no-op once it has finished); the server frees its batch slot."""
        self._closed = True
        if self._call is not None:
            self._call.cancel()

    async def aclose(self) -> None:
        self.cancel()

    async def __aenter__(self) -> "AsyncStream":
        return self

    async def __aexit__(self, *exc) -> None:
        self.cancel()


class AsyncClient:
    """AsyncClient("host:port", timeout=None): as Client (the same TLS files, api_key and
    resume settings), with coroutines, and stream() an AsyncStream."""

    def __init__(self, address: str, timeout: Optional[float] = None, *,
                 credentials: Optional[grpc.ChannelCredentials] = None, options=None,
                 ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None, api_key: Optional[str] = None,
                 max_resumes: int = 8, resume_backoff_s: float = 0.1,
                 resume_backoff_max_s: float = 2.0):
        self.address = address
        self.timeout = timeout
        self._resume_policy = ResumePolicy(max_resumes, resume_backoff_s, resume_backoff_max_s)
        self._credentials = _security.resolve(credentials, ca_file, cert_file, key_file)
        self._metadata = _security.call_metadata(api_key)
        self._options = channel_options(options, self._resume_policy)
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

    def stream(self, prompt: Optional[str] = None,
               messages: Optional[Iterable[Any]] = None,
               token_ids: Optional[Iterable[int]] = None, *,
               timeout: Optional[float] = None, max_resumes: Optional[int] = None,
               **sampling: Any) -> AsyncStream:
        """The AsyncStream of one generation's Delta (see Client.stream for the arguments):
        `async for delta in client.stream(...)`. The RPC starts at the first iteration;
        leaving the loop early (or cancelling the consuming task) cancels it."""
        req = generate_request(prompt, messages, token_ids, **sampling)
        progress = StreamProgress(req, self._resume_policy.with_max_resumes(max_resumes),
                                  self._timeout(timeout))
        return AsyncStream(self._start_generate, progress)

    async def generate(self, prompt: Optional[str] = None,
                       messages: Optional[Iterable[Any]] = None,
                       token_ids: Optional[Iterable[int]] = None, *,
                       timeout: Optional[float] = None, max_resumes: Optional[int] = None,
                       **sampling: Any) -> Result:
        """Runs a generation to its end: the Result joins the stream's deltas."""
        builder = ResultBuilder()
        deltas = self.stream(prompt, messages, token_ids, timeout=timeout,
                             max_resumes=max_resumes, **sampling)
        try:
            async for delta in deltas:
                builder.add(delta)
        finally:
            await deltas.aclose()
        return builder.result()

    async def chat(self, messages: Iterable[Any], *, timeout: Optional[float] = None,
                   max_resumes: Optional[int] = None, **sampling: Any) -> Result:
        return await self.generate(messages=messages, timeout=timeout,
                                   max_resumes=max_resumes, **sampling)

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

    def _start_generate(self, request, timeout_s: Optional[float]):
        return self._connect().Generate(request, timeout=timeout_s, metadata=self._metadata)

    async def _unary(self, method, request, timeout: Optional[float]):
        try:
            return await method(request, timeout=self._timeout(timeout),
                                metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
