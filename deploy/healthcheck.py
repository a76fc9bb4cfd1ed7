#!/usr/bin/env python3
"""Container health check for tpserve: asks grpc.health.v1.Health/Check and exits 0 iff the
answer is SERVING, 1 otherwise (NOT_SERVING, an RPC error, nothing listening, a timeout).

    healthcheck.py [ADDRESS] [--service NAME] [--timeout SECONDS]

ADDRESS defaults to $TPSERVE_HEALTH_ADDR, then 127.0.0.1:50051 (the coordinator); a worker
checks its own port, 127.0.0.1:7001. Needs only grpcio (Debian/Ubuntu python3-grpcio): the
two messages are encoded by hand, as tests/integration/worker_procs.py does, so no generated
health stubs are needed.
"""
import argparse
import os
import sys

import grpc

_METHOD = "/grpc.health.v1.Health/Check"
# HealthCheckResponse.ServingStatus values (grpc/health/v1/health.proto).
_STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
_SERVING = 1


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_request(service):
    """HealthCheckRequest{service = 1 (string)}; the empty service is the empty message."""
    data = service.encode("utf-8")
    return b"\x0a" + _varint(len(data)) + data if data else b""


def decode_status(message):
    """HealthCheckResponse bytes -> the value of field 1 (status, varint); 0 when absent."""
    status, i = 0, 0
    while i < len(message):
        key, i = _read_varint(message, i)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, i = _read_varint(message, i)
            if field == 1:
                status = value
        elif wire_type == 2:
            length, i = _read_varint(message, i)
            i += length
        elif wire_type == 1:
            i += 8
        elif wire_type == 5:
            i += 4
        else:
            raise ValueError(f"unexpected wire type {wire_type}")
    if i != len(message):
        raise ValueError("truncated message")
    return status


def _read_varint(data, i):
    value, shift = 0, 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def check(address, service="", timeout_s=3.0):
    """Returns (serving, description)."""
    # A proxy from the environment (http_proxy) must never carry a local health check.
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(address, options=options) as channel:
        rpc = channel.unary_unary(_METHOD, request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
        try:
            reply = rpc(encode_request(service), timeout=timeout_s)
        except grpc.RpcError as e:
            return False, f"{e.code().name}: {e.details()}"
    try:
        status = decode_status(reply)
    except ValueError as e:
        return False, f"bad HealthCheckResponse: {e}"
    return status == _SERVING, _STATUS_NAMES.get(status, f"status {status}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address", nargs="?",
                        default=os.environ.get("TPSERVE_HEALTH_ADDR", "127.0.0.1:50051"))
    parser.add_argument("--service", default="", help='health service name ("": the server)')
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    args = parser.parse_args(argv)
    serving, what = check(args.address, args.service, args.timeout)
    print(f"{args.address}: {what}", file=sys.stdout if serving else sys.stderr)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
