"""The public port's trust boundary: `tpserve serve` with TLS (--tls_cert_file,
--tls_key_file), mutual TLS (--tls_client_ca_file) and API keys (--api_key_file), driven by
tpserve-cli, tpserve-bench and the Python client.

Certificates are made with the `openssl` command (pki.py): CA 1 signs the server's
certificate (SAN 127.0.0.1 and localhost) and a client's; a foreign CA signs another client's;
CA 1 also signs an expired client certificate (`-days -1`); CA 2 signs the server's next
certificate, written over the first to test rotation, and then an expired one.

Two servers at TP=1 (SmolLM2), started together: `tls` (TLS + API keys, files re-read every
second) and `mtls` (mutual TLS, no keys; /metrics on --metrics_host=127.0.0.2, another
loopback address, to show that the flag moves it off --host). Generations are of a few
tokens. The rotation tests come last, as they change `tls`'s files. Every process is stopped
in a finalizer; everything stays on the loopback interface. Budget: under a minute on two
cores."""
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import grpc
import pytest

import python_client_pkg
import serve_procs
import worker_procs
from pki import CLIENT_EXT, SERVER_EXT, make_ca, make_cert

RPC_S = 20
KEY_1 = "first-key-0123456789abcdef"
KEY_2 = "second-key-fedcba9876543210"
METRICS_HOST = "127.0.0.2"  # loopback too, but not --host


# --- certificates ---------------------------------------------------------------------------

def replace(path, data):
    """Writes `path` whole, by a rename, as a rotation would."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca1, ca2, foreign = make_ca(d, "ca1"), make_ca(d, "ca2"), make_ca(d, "foreign")
    return {"dir": d, "ca1": ca1, "ca2": ca2, "foreign": foreign,
            "server": make_cert(d, "server", ca1, SERVER_EXT),
            "server2": make_cert(d, "server2", ca2, SERVER_EXT),
            "expired_server": make_cert(d, "expired-server", ca2, SERVER_EXT, days=-1),
            "client": make_cert(d, "client", ca1, CLIENT_EXT),
            "foreign_client": make_cert(d, "foreign-client", foreign, CLIENT_EXT),
            "expired_client": make_cert(d, "expired-client", ca1, CLIENT_EXT, days=-1)}


def creds(ca, client=None):
    """grpc channel credentials trusting `ca` (key, pem), presenting `client` if given."""
    return grpc.ssl_channel_credentials(
        root_certificates=ca[1].read_bytes(),
        private_key=client[0].read_bytes() if client else None,
        certificate_chain=client[1].read_bytes() if client else None)


# --- the servers ----------------------------------------------------------------------------

def free_pair():
    """A port p with p free on METRICS_HOST (the coordinator's metrics) and p + 1 free on
    127.0.0.1 (its worker's)."""
    for _ in range(50):
        p = worker_procs.free_port()
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind((METRICS_HOST, p))
                b.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no free pair of ports")


@pytest.fixture(scope="module")
def servers(request, tmp_path_factory, tpserve_bin, smollm_gguf, pki):
    """{"tls": ..., "mtls": ...}, both SERVING. `tls` serves copies of the server files
    (in its own directory, rotated by the tests) and the key file keys.txt there."""
    d = tmp_path_factory.mktemp("tls-serve")
    live_key, live_cert = d / "server.key", d / "server.pem"
    live_key.write_bytes(pki["server"][0].read_bytes())
    live_cert.write_bytes(pki["server"][1].read_bytes())
    keys = d / "keys.txt"
    keys.write_text(f"# test keys\n\n{KEY_1}\n")
    started = {}
    started["tls"] = serve_procs.start(
        tpserve_bin, smollm_gguf, d / "tls.log", tp=1, threads=1, tls_cert_file=live_cert,
        tls_key_file=live_key, tls_refresh_interval_s=1, api_key_file=keys)
    request.addfinalizer(lambda: serve_procs.cleanup(started["tls"]))
    metrics_port = free_pair()
    started["mtls"] = serve_procs.start(
        tpserve_bin, smollm_gguf, d / "mtls.log", tp=1, threads=1,
        tls_cert_file=pki["server"][1], tls_key_file=pki["server"][0],
        tls_client_ca_file=pki["ca1"][1], metrics_port=metrics_port,
        metrics_host=METRICS_HOST)
    started["mtls"].metrics_port = metrics_port
    request.addfinalizer(lambda: serve_procs.cleanup(started["mtls"]))
    serve_procs.wait_serving(started["tls"], timeout_s=120, credentials=creds(pki["ca1"]))
    serve_procs.wait_serving(started["mtls"], timeout_s=120,
                             credentials=creds(pki["ca1"], pki["client"]))
    started["tls"].files = {"key": live_key, "cert": live_cert, "keys": keys}
    return started


@pytest.fixture(scope="module")
def tc(tmp_path_factory, repo_root):
    return python_client_pkg.install(tmp_path_factory.mktemp("python-client"), repo_root)


def cli(binary, server, *args, env=None):
    """tpserve-cli --server=ADDRESS ARGS...: the CompletedProcess."""
    return subprocess.run([str(binary("clients", "cpp", "tpserve-cli")),
                           f"--server={server.address}", "--timeout_s=30", *args],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ if env is None else env))


def no_key_env():
    return {k: v for k, v in os.environ.items() if k != "TPSERVE_API_KEY"}


def model_info_code(server, credentials, api_key=None):
    """GetModelInfo's status code over a fresh channel (OK when it answers)."""
    metadata = [("authorization", f"Bearer {api_key}")] if api_key else None
    with serve_procs.channel(server.address, credentials) as ch:
        call = ch.unary_unary("/tpserve.v1.Generation/GetModelInfo",
                              request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        try:
            call(b"", timeout=RPC_S, metadata=metadata)
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()


def poll(what, check, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        time.sleep(0.25)


# --- startup errors -------------------------------------------------------------------------

@pytest.mark.parametrize("flags, named", [
    ({"tls_cert_file": "CERT"}, "--tls_key_file"),
    ({"tls_key_file": "KEY"}, "--tls_cert_file"),
    ({"tls_cert_file": "/nonexistent/cert.pem", "tls_key_file": "KEY"}, "--tls_cert_file"),
    ({"tls_cert_file": "GARBAGE", "tls_key_file": "KEY"}, "--tls_cert_file"),
    ({"tls_cert_file": "CERT", "tls_key_file": "GARBAGE"}, "--tls_key_file"),
    ({"tls_cert_file": "CERT", "tls_key_file": "OTHER_KEY"}, "--tls_key_file"),
    ({"tls_client_ca_file": "CA"}, "--tls_client_ca_file"),
    ({"tls_cert_file": "CERT", "tls_key_file": "KEY", "tls_client_ca_file": "GARBAGE"},
     "--tls_client_ca_file"),
])
def test_misconfiguration_is_a_startup_error_naming_the_flag(tpserve_bin, smollm_gguf, pki,
                                                             flags, named):
    garbage = pki["dir"] / "garbage.pem"
    garbage.write_text("this is not PEM\n")
    files = {"CERT": pki["server"][1], "KEY": pki["server"][0], "CA": pki["ca1"][1],
             "OTHER_KEY": pki["client"][0], "GARBAGE": garbage}
    args = [f"--{k}={files.get(v, v)}" for k, v in flags.items()]
    proc = subprocess.run([str(tpserve_bin), "serve", f"--model={smollm_gguf}", "--tp=1",
                           "--port=0", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tpserve: ") and named in last, proc.stderr[-2000:]


def test_unreadable_api_key_file_is_a_startup_error(tpserve_bin, smollm_gguf, tmp_path):
    proc = subprocess.run([str(tpserve_bin), "serve", f"--model={smollm_gguf}", "--tp=1",
                           "--port=0", f"--api_key_file={tmp_path / 'missing.txt'}"],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 1 and "--api_key_file" in proc.stderr, proc.stderr[-2000:]


# --- TLS and API keys -----------------------------------------------------------------------

def test_cli_generates_over_tls_with_the_api_key(binary, servers, pki):
    tls = servers["tls"]
    ok = cli(binary, tls, f"--tls_ca_file={pki['ca1'][1]}", f"--api_key={KEY_1}",
             "--max_tokens=3", "--temperature=0", "generate", "The capital of France is",
             env=no_key_env())
    assert ok.returncode == 0 and ok.stdout.strip(), ok.stderr
    # The key from the environment when --api_key is not given.
    env = dict(no_key_env(), TPSERVE_API_KEY=KEY_1)
    assert cli(binary, tls, f"--tls_ca_file={pki['ca1'][1]}", "info", env=env).returncode == 0


def test_cli_without_or_with_a_wrong_key_is_unauthenticated(binary, servers, pki):
    tls = servers["tls"]
    for key_args in ([], ["--api_key=not-a-key"]):
        proc = cli(binary, tls, f"--tls_ca_file={pki['ca1'][1]}", *key_args, "--max_tokens=2",
                   "generate", "hi", env=no_key_env())
        assert proc.returncode == grpc.StatusCode.UNAUTHENTICATED.value[0], proc.stderr
        assert "UNAUTHENTICATED" in proc.stderr
        assert ("missing" if not key_args else "not accepted") in proc.stderr
        assert "not-a-key" not in proc.stderr  # the key is never echoed


def test_bench_runs_over_tls_with_the_api_key(binary, servers, pki, tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [str(binary("clients", "cpp", "tpserve-bench")), f"--server={servers['tls'].address}",
         f"--tls_ca_file={pki['ca1'][1]}", f"--api_key={KEY_1}", "--requests=1",
         "--warmup=0", "--concurrency=1", "--prompt_len=fixed:4", "--output_len=fixed:2",
         "--timeout_s=60", f"--json_out={out}"],
        capture_output=True, text=True, timeout=120, env=no_key_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert '"ok": 1' in out.read_text()


def test_python_client_over_tls_with_the_api_key(tc, servers, pki):
    tls = servers["tls"]
    with tc.Client(tls.address, timeout=RPC_S, ca_file=str(pki["ca1"][1]),
                   api_key=KEY_1) as c:
        result = c.generate("The capital of France is", max_tokens=3, temperature=0.0)
        assert result.usage.completion_tokens >= 1 and result.text
        assert c.tokenize("hello")
    for key in ("", "wrong-key"):
        with tc.Client(tls.address, timeout=RPC_S, ca_file=str(pki["ca1"][1]),
                       api_key=key) as c:
            with pytest.raises(tc.Unauthenticated) as e:
                c.model_info()
            assert "wrong-key" not in e.value.message
            with pytest.raises(tc.Unauthenticated):
                c.generate("hi", max_tokens=2)
            assert c.health()  # health needs no key


def test_python_async_client_over_tls_with_the_api_key(tc, servers, pki):
    import asyncio

    async def run():
        async with tc.AsyncClient(servers["tls"].address, timeout=RPC_S,
                                  ca_file=str(pki["ca1"][1]), api_key=KEY_1) as c:
            return await c.model_info()

    assert asyncio.run(run()).world_size == 1


def test_health_needs_no_api_key(servers, pki):
    assert serve_procs.health_status(servers["tls"].address,
                                     credentials=creds(pki["ca1"])) == serve_procs.SERVING


def test_plaintext_client_is_refused(servers, binary):
    with pytest.raises(grpc.RpcError) as e:
        serve_procs.health_status(servers["tls"].address, timeout_s=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    proc = cli(binary, servers["tls"], f"--api_key={KEY_1}", "info")
    assert proc.returncode == grpc.StatusCode.UNAVAILABLE.value[0], proc.stderr


def test_client_trusting_another_ca_refuses_the_server(servers, pki):
    with pytest.raises(grpc.RpcError) as e:
        serve_procs.health_status(servers["tls"].address, timeout_s=5,
                                  credentials=creds(pki["foreign"]))
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_reflection_is_off_by_default(servers, pki):
    with serve_procs.channel(servers["tls"].address, creds(pki["ca1"])) as ch:
        info = ch.stream_stream(serve_procs.REFLECTION_INFO, request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as e:
            list(info(iter([b"\x3a\x01*"]), timeout=RPC_S))
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_metrics_bind_the_metrics_host(servers):
    port = servers["mtls"].metrics_port
    with urllib.request.urlopen(f"http://{METRICS_HOST}:{port}/metrics", timeout=10) as r:
        assert r.status == 200 and b"tpserve_requests_total" in r.read()
    with pytest.raises(urllib.error.URLError):  # not on --host
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


# --- mutual TLS -----------------------------------------------------------------------------

def test_mtls_serves_a_client_certificate_of_its_ca(tc, servers, pki):
    mtls = servers["mtls"]
    assert model_info_code(mtls, creds(pki["ca1"], pki["client"])) == grpc.StatusCode.OK
    with tc.Client(mtls.address, timeout=RPC_S, ca_file=str(pki["ca1"][1]),
                   cert_file=str(pki["client"][1]), key_file=str(pki["client"][0])) as c:
        assert c.generate("Hi", max_tokens=2, temperature=0.0).usage.completion_tokens >= 1


@pytest.mark.parametrize("client", [None, "foreign_client", "expired_client"])
def test_mtls_refuses_a_missing_foreign_or_expired_client_certificate(servers, pki, client):
    mtls = servers["mtls"]
    code = model_info_code(mtls, creds(pki["ca1"], pki[client] if client else None))
    assert code == grpc.StatusCode.UNAVAILABLE, code
    # The same server still serves the right certificate meanwhile.
    assert model_info_code(mtls, creds(pki["ca1"], pki["client"])) == grpc.StatusCode.OK


def test_cli_with_a_client_certificate(binary, servers, pki):
    mtls = servers["mtls"]
    base = [f"--tls_ca_file={pki['ca1'][1]}"]
    good = cli(binary, mtls, *base, f"--tls_cert_file={pki['client'][1]}",
               f"--tls_key_file={pki['client'][0]}", "info", env=no_key_env())
    assert good.returncode == 0, good.stderr
    bad = cli(binary, mtls, *base, "info", env=no_key_env())
    assert bad.returncode == grpc.StatusCode.UNAVAILABLE.value[0], bad.stderr
    half = cli(binary, mtls, *base, f"--tls_cert_file={pki['client'][1]}", "info")
    assert half.returncode == 64 and "--tls_key_file" in half.stderr, half.stderr


# --- rotation without restart (last: they change the `tls` server's files) -----------------

def test_rotated_certificate_serves_new_connections(servers, pki):
    tls = servers["tls"]
    pid = tls.pid
    replace(tls.files["key"], pki["server2"][0].read_bytes())
    replace(tls.files["cert"], pki["server2"][1].read_bytes())
    poll("the certificate of CA 2 served",
         lambda: model_info_code(tls, creds(pki["ca2"]), KEY_1) == grpc.StatusCode.OK)
    assert model_info_code(tls, creds(pki["ca1"]), KEY_1) == grpc.StatusCode.UNAVAILABLE
    assert tls.proc.poll() is None and tls.pid == pid


def test_rotated_api_key_file(servers, pki):
    tls = servers["tls"]
    ca = creds(pki["ca2"])  # the certificate rotated by the test above
    assert model_info_code(tls, ca, KEY_1) == grpc.StatusCode.OK
    replace(tls.files["keys"], f"{KEY_2}\n".encode())
    poll("the old key refused",
         lambda: model_info_code(tls, ca, KEY_1) == grpc.StatusCode.UNAUTHENTICATED,
         timeout_s=10)
    assert model_info_code(tls, ca, KEY_2) == grpc.StatusCode.OK
    assert tls.proc.poll() is None


def test_expired_server_certificate_is_refused_by_clients(tc, servers, pki):
    tls = servers["tls"]
    replace(tls.files["key"], pki["expired_server"][0].read_bytes())
    replace(tls.files["cert"], pki["expired_server"][1].read_bytes())
    # Same CA (2) as the certificate it replaces: only its dates differ.
    poll("the expired certificate refused",
         lambda: model_info_code(tls, creds(pki["ca2"]), KEY_2) == grpc.StatusCode.UNAVAILABLE)
    with tc.Client(tls.address, timeout=RPC_S, ca_file=str(pki["ca2"][1]), api_key=KEY_2) as c:
        with pytest.raises(tc.Unavailable):
            c.model_info()
    assert tls.proc.poll() is None
