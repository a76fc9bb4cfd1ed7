#!/usr/bin/env python3
"""Container health check for tpserve: asks grpc.health.v1.Health/Check and exits 0 iff the
answer is SERVING, 1 otherwise (NOT_SERVING, an RPC error, nothing listening, a timeout).

    healthcheck.py [ADDRESS] [--service NAME] [--timeout SECONDS]
                   [--tls_ca_file CA [--tls_server_name NAME]
                    [--tls_cert_file CERT --tls_key_file KEY]]

ADDRESS defaults to $TPSERVE_HEALTH_ADDR, then 127.0.0.1:50051 (the coordinator); a worker
checks its own port, 127.0.0.1:7001. A coordinator serving TLS (--tls_cert_file) is checked
with --tls_ca_file, the CA that signed its certificate, and --tls_server_name, a name in that
certificate when it does not hold the address dialled (e.g. `tpserve`, checked at
127.0.0.1); --tls_cert_file/--tls_key_file present a client certificate (mutual TLS). Their
defaults come from $TPSERVE_HEALTH_TLS_CA, $TPSERVE_HEALTH_TLS_SERVER_NAME,
$TPSERVE_HEALTH_TLS_CERT and $TPSERVE_HEALTH_TLS_KEY, so that the image's own HEALTHCHECK
works against a TLS port too. grpc.health.v1 asks for no API key. Needs only grpcio (Debian/Ubuntu python3-grpcio): the
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


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def channel_for(address, tls=None):
    """A plaintext channel, or a TLS one when `tls` (a dict of ca_file, server_name,
    cert_file, key_file; ca_file required) is given."""
    # A proxy from the environment (http_proxy) must never carry a local health check.
    options = [("grpc.enable_http_proxy", 0)]
    if not tls:
        return grpc.insecure_channel(address, options=options)
    if tls.get("server_name"):
        options.append(("grpc.ssl_target_name_override", tls["server_name"]))
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(tls["ca_file"]),
        private_key=_read(tls["key_file"]) if tls.get("key_file") else None,
        certificate_chain=_read(tls["cert_file"]) if tls.get("cert_file") else None)
    return grpc.secure_channel(address, credentials, options=options)


def check(address, service="", timeout_s=3.0, tls=None):
    """Returns (serving, description)."""
    try:
        channel = channel_for(address, tls)
    except OSError as e:
        return False, f"cannot read a TLS file: {e}"
    with channel:
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
    env = os.environ.get
    parser.add_argument("--tls_ca_file", default=env("TPSERVE_HEALTH_TLS_CA", ""),
                        help="PEM CA of the server's certificate")
    parser.add_argument("--tls_server_name", default=env("TPSERVE_HEALTH_TLS_SERVER_NAME", ""),
                        help="name to verify in the server's certificate (default: the host)")
    parser.add_argument("--tls_cert_file", default=env("TPSERVE_HEALTH_TLS_CERT", ""),
                        help="PEM client certificate (mutual TLS)")
    parser.add_argument("--tls_key_file", default=env("TPSERVE_HEALTH_TLS_KEY", ""),
                        help="PEM key of --tls_cert_file")
    args = parser.parse_args(argv)
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        parser.error("--tls_cert_file and --tls_key_file go together")
    if (args.tls_server_name or args.tls_cert_file) and not args.tls_ca_file:
        parser.error("TLS needs --tls_ca_file")
    tls = None
    if args.tls_ca_file:
        tls = {"ca_file": args.tls_ca_file, "server_name": args.tls_server_name,
               "cert_file": args.tls_cert_file, "key_file": args.tls_key_file}
    serving, what = check(args.address, args.service, args.timeout, tls)
    print(f"{args.address}: {what}", file=sys.stdout if serving else sys.stderr)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
