"""tpserve_client: Python client of tpserve's gRPC API (tpserve.v1.Generation).

    from tpserve_client import Client
    with Client("localhost:50051") as c:
        for delta in c.stream(messages=[("user", "Why is the sky blue?")], max_tokens=64):
            print(delta.text, end="", flush=True)

TLS and API keys: Client("host:443", ca_file="ca.pem", api_key="...") (cert_file and
key_file for mutual TLS; the key defaults to $TPSERVE_API_KEY). Client is synchronous,
AsyncClient (grpc.aio) has the same API with coroutines. Failures are TpserveError
subclasses (InvalidArgument, ResourceExhausted, Unavailable, DeadlineExceeded, Cancelled,
Internal, Unauthenticated) carrying the grpc.StatusCode in `.code` and the details in
`.message`. A stream that breaks (UNAVAILABLE: a restarting or draining server, a lost
connection) is resumed where it broke, up to `max_resumes` times (a Client keyword, 8 by
default, and a per-call one); `stream.resumes` counts them. The gRPC stubs are generated
from proto/tpserve/v1/generate.proto when the package is installed."""
from .aio import AsyncClient, AsyncStream
from .client import Client, Stream
from .errors import (Cancelled, DeadlineExceeded, Internal, InvalidArgument,
                     ResourceExhausted, TpserveError, Unauthenticated, Unavailable)
from .types import Delta, ModelInfo, Result, TokenLogprob, TokenLogprobs, Tokens, Usage

__version__ = "0.1.0"

__all__ = ["Client", "AsyncClient", "Stream", "AsyncStream", "Result", "Delta", "Usage",
           "TokenLogprob", "TokenLogprobs", "Tokens", "ModelInfo", "TpserveError",
           "InvalidArgument", "ResourceExhausted", "Unavailable", "DeadlineExceeded",
           "Cancelled", "Internal", "Unauthenticated"]
