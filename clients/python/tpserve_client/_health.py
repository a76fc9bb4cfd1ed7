"""grpc.health.v1.Health/Check as raw protobuf bytes (no grpcio-health-checking needed):
HealthCheckRequest {string service = 1}, HealthCheckResponse {ServingStatus status = 1}."""
from __future__ import annotations

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING = 1


def check_request(service: str) -> bytes:
    data = service.encode()
    return b"\x0a" + _varint(len(data)) + data if data else b""


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf: bytes, i: int):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def status_of(reply: bytes) -> int:
    """HealthCheckResponse.status (0, UNKNOWN, when absent)."""
    status, i = 0, 0
    while i < len(reply):
        key, i = _read_varint(reply, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(reply, i)
            if number == 1:
                status = value
        elif wire == 1:
            i += 8
        elif wire == 2:
            n, i = _read_varint(reply, i)
            i += n
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"malformed HealthCheckResponse {reply!r}")
    return status


def _identity(b: bytes) -> bytes:
    return b


def check_method(channel):
    """The Check method on a grpc.Channel or grpc.aio.Channel, taking and returning bytes."""
    return channel.unary_unary(HEALTH_CHECK, request_serializer=_identity,
                               response_deserializer=_identity)
