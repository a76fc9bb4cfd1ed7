"""The container health check (deploy/healthcheck.py) against a test gRPC health server:
SERVING, NOT_SERVING, unknown statuses, the address from the environment, the service name,
and nothing listening."""
import concurrent.futures
import os
import subprocess
import sys
import threading
import time

import grpc
import pytest

from conftest import REPO
from pki import make_ca, make_cert
from test_deploy import _load_module
from worker_procs import free_port

HEALTHCHECK = REPO / "deploy" / "healthcheck.py"



class _HealthServer:
    """grpc.health.v1.Health/Check with raw bytes: status 1 SERVING, 2 NOT_SERVING; an
    unknown service name gets NOT_FOUND (as gRPC's own health service answers)."""

    def __init__(self, tls=None):
        """`tls`: (key, certificate) paths, to serve TLS instead of plaintext."""
        self.status = b"\x08\x01"
        self.delay_s = 0.0
        self.requests = []
        self._lock = threading.Lock()
        self.port = free_port()
        self._server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
            "Check": grpc.unary_unary_rpc_method_handler(self._check),
        })
        self._server.add_generic_rpc_handlers((handler,))
        if tls is None:
            self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        else:
            credentials = grpc.ssl_server_credentials([(tls[0].read_bytes(),
                                                        tls[1].read_bytes())])
            self._server.add_secure_port(f"127.0.0.1:{self.port}", credentials)
        self._server.start()

    def _check(self, request, context):
        with self._lock:
            self.requests.append(request)
        if self.delay_s:
            time.sleep(self.delay_s)
        if request not in (b"", b"\x0a\x00"):  # HealthCheckRequest{service: non-empty}
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return self.status

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def stop(self):
        self._server.stop(grace=None)


@pytest.fixture()
def health_server():
    server = _HealthServer()
    yield server
    server.stop()


def _healthcheck(*args, env=None, timeout=30):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TPSERVE_HEALTH_")}
    full_env.update(env or {})
    start = time.monotonic()
    out = subprocess.run([sys.executable, str(HEALTHCHECK), *args], capture_output=True,
                         text=True, timeout=timeout, env=full_env)
    return out, time.monotonic() - start


def test_healthcheck_serving(health_server):
    out, _ = _healthcheck(health_server.address)
    assert out.returncode == 0, out.stderr
    assert "SERVING" in out.stdout
    assert health_server.requests == [b""]  # the server's own health: service ""


def test_healthcheck_not_serving(health_server):
    health_server.status = b"\x08\x02"
    out, _ = _healthcheck(health_server.address)
    assert out.returncode == 1
    assert "NOT_SERVING" in out.stderr


def test_healthcheck_unknown_status_is_unhealthy(health_server):
    health_server.status = b""  # status absent = UNKNOWN
    out, _ = _healthcheck(health_server.address)
    assert out.returncode == 1 and "UNKNOWN" in out.stderr


def test_healthcheck_address_from_environment(health_server):
    out, _ = _healthcheck(env={"TPSERVE_HEALTH_ADDR": health_server.address})
    assert out.returncode == 0, out.stderr
    health_server.status = b"\x08\x02"
    out, _ = _healthcheck(env={"TPSERVE_HEALTH_ADDR": health_server.address})
    assert out.returncode == 1


def test_healthcheck_service_name(health_server):
    out, _ = _healthcheck(health_server.address, "--service", "tpserve.v1.Generation")
    assert out.returncode == 1 and "NOT_FOUND" in out.stderr
    assert health_server.requests == [b"\x0a\x15tpserve.v1.Generation"]


def test_healthcheck_nothing_listening():
    out, elapsed = _healthcheck(f"127.0.0.1:{free_port()}")
    assert out.returncode == 1
    assert "UNAVAILABLE" in out.stderr
    assert elapsed < 15


def test_healthcheck_times_out(health_server):
    health_server.delay_s = 3.0
    out, elapsed = _healthcheck(health_server.address, "--timeout", "0.5")
    assert out.returncode == 1 and "DEADLINE_EXCEEDED" in out.stderr
    assert elapsed < 2.9


def test_healthcheck_over_tls(tmp_path):
    """A coordinator serving TLS with a certificate for its Service name (as deploy/k8s/ and
    compose do), checked at 127.0.0.1: the CA and the name are needed."""
    ca = make_ca(tmp_path, "ca")
    server = _HealthServer(tls=make_cert(tmp_path, "server", ca,
                                         "subjectAltName=DNS:tpserve\n"))
    try:
        tls = ["--tls_ca_file", str(ca[1]), "--tls_server_name", "tpserve"]
        out, _ = _healthcheck(server.address, *tls)
        assert out.returncode == 0 and "SERVING" in out.stdout, out.stderr
        out, _ = _healthcheck(server.address, "--timeout", "2")  # plaintext
        assert out.returncode == 1 and "UNAVAILABLE" in out.stderr
        out, _ = _healthcheck(server.address, "--timeout", "2", *tls[:2])  # 127.0.0.1 not in it
        assert out.returncode == 1 and "UNAVAILABLE" in out.stderr
        other = make_ca(tmp_path, "other")
        out, _ = _healthcheck(server.address, "--timeout", "2", "--tls_ca_file", str(other[1]),
                              "--tls_server_name", "tpserve")
        assert out.returncode == 1 and "UNAVAILABLE" in out.stderr
        out, _ = _healthcheck(server.address, "--tls_server_name", "tpserve")
        assert out.returncode == 2 and "--tls_ca_file" in out.stderr
        # The image's HEALTHCHECK gives no flags: the environment does.
        out, _ = _healthcheck(server.address, env={"TPSERVE_HEALTH_TLS_CA": str(ca[1]),
                                                   "TPSERVE_HEALTH_TLS_SERVER_NAME": "tpserve"})
        assert out.returncode == 0 and "SERVING" in out.stdout, out.stderr
    finally:
        server.stop()


def test_healthcheck_codec():
    hc = _load_module(HEALTHCHECK, "tpserve_healthcheck")
    assert hc.encode_request("") == b""
    assert hc.encode_request("a" * 200) == b"\x0a\xc8\x01" + b"a" * 200
    assert hc.decode_status(b"\x08\x01") == 1
    assert hc.decode_status(b"") == 0
    # Unknown fields of every wire type are skipped.
    assert hc.decode_status(b"\x12\x02hi\x19" + bytes(8) + b"\x25" + bytes(4) + b"\x08\x02") == 2
    with pytest.raises(ValueError):
        hc.decode_status(b"\x08")
