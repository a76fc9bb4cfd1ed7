"""Mutual TLS between the coordinator and its workers, the loopback-only rule for workers
without credentials, and --model_root (issue 14, "Cluster").

- The hijack test: `tpserve serve --tp 2` (its workers hold certificates of an ephemeral CA
  made at start); a worker is killed mid-stream, and during the whole rebuild both worker
  ports are hammered with Sessions from a plaintext client, a TLS client with no
  certificate and one with a certificate of a foreign CA (made with openssl here). None
  gets any message; the world comes back and the streams end token-identical to an
  undisturbed run on the same server.
- A standalone worker with --cluster_* files (a CA made with openssl here) refuses those
  three clients and serves one with a right certificate up to Ready.
- A worker without credentials asked to listen on 0.0.0.0 listens on 127.0.0.1 only;
  --insecure_cluster (or credentials) binds as asked.
- --model_root: paths outside it (`..`, elsewhere, a symlink out) get the message a missing
  path gets.
Every wait is bounded."""
import os
import signal
import socket
import subprocess
import threading
import time

import grpc
import pytest

import pki
import serve_procs
from test_peer_validation import Session, _init
from test_serve import LENGTH, STREAM_S, SUBJECTS, TP, _serve, _stop_cleanly, generate, greedy
from tpserve.v1 import generate_pb2_grpc as pb_grpc
from tpserve.v1 import worker_pb2, worker_pb2_grpc
from worker_procs import free_port, stop

ATTEMPT_S = 2.0  # how long one hostile Session waits for a message


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A cluster CA with a worker and a coordinator certificate, and a foreign CA with a
    client certificate: {name: (key path, cert path)}, "ca"/"foreign_ca" as (key, cert)."""
    d = tmp_path_factory.mktemp("cluster-pki")
    ca = pki.make_ca(d, "ca")
    foreign = pki.make_ca(d, "foreign_ca")
    return {
        "ca": ca,
        "foreign_ca": foreign,
        "worker": pki.make_cert(d, "worker", ca, pki.SERVER_EXT),
        "coordinator": pki.make_cert(d, "coordinator", ca, pki.CLIENT_EXT),
        "stranger": pki.make_cert(d, "stranger", foreign, pki.CLIENT_EXT),
    }


def _tls(ca_pem, pair=None):
    """grpc TLS channel credentials trusting `ca_pem` (bytes), with a client (key, cert)."""
    if pair is None:
        return grpc.ssl_channel_credentials(root_certificates=ca_pem)
    return grpc.ssl_channel_credentials(root_certificates=ca_pem,
                                        private_key=pair[0].read_bytes(),
                                        certificate_chain=pair[1].read_bytes())


def _session_reply(address, credentials, init):
    """Opens a Session (plaintext when `credentials` is None), sends `init` and waits up to
    ATTEMPT_S for a first message: (message or None, status code or None)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    ch = (grpc.insecure_channel(address, options=options) if credentials is None
          else grpc.secure_channel(address, credentials, options=options))
    try:
        replies = worker_pb2_grpc.WorkerStub(ch).Session(
            iter([worker_pb2.CoordinatorMessage(init=init)]), timeout=ATTEMPT_S)
        try:
            return next(replies), None
        except StopIteration:
            return None, grpc.StatusCode.OK
        except grpc.RpcError as e:
            return None, e.code()
    finally:
        ch.close()


def _listening(pid):
    """[(ip, port)] of the TCP sockets `pid` listens on (IPv4 and IPv6, from /proc; a
    v4-mapped address as IPv4)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = open(table).read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            hex_ip, hex_port = local.split(":")
            raw = bytes.fromhex(hex_ip)
            if width == 8:
                ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
            else:  # four little-endian 32-bit words
                ip = socket.inet_ntop(socket.AF_INET6,
                                      b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
            if ip.startswith("::ffff:") and "." in ip:  # an IPv4 address on a dual-stack socket
                ip = ip[len("::ffff:"):]
            found.append((ip, int(hex_port, 16)))
    return found


def _wait_listening(pid, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _listening(pid)
        if found:
            return found
        time.sleep(0.1)
    raise TimeoutError(f"pid {pid} listens on nothing after {timeout_s}s")


def _flag_of(pid, name):
    """The value of --NAME=VALUE on the command line of process `pid`."""
    args = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"--{name}="))


def _serve_worker_port(pid):
    """The port a `serve` worker listens on, from the port file serve gave it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            return int(open(_flag_of(pid, "port_file")).read())
        except (FileNotFoundError, ValueError):
            time.sleep(0.1)
    raise TimeoutError(f"worker {pid} wrote no port file")


def _cluster_ca_of(worker_pid):
    """The CA certificate a `serve` worker trusts: --cluster_ca_file=/proc/self/fd/N names a
    memfd it inherited, read here through /proc/PID/fd/N (same user)."""
    fd = _flag_of(worker_pid, "cluster_ca_file").split("/")[-1]
    return open(f"/proc/{worker_pid}/fd/{fd}", "rb").read()


# --- the hijack test -------------------------------------------------------------------------

class Hammer:
    """Threads opening hostile Sessions on `addresses` until stopped; every message any of
    them receives is kept (there must be none)."""

    def __init__(self, addresses, clients, init):
        self.attempts = 0
        self.messages = []
        self.codes = {}
        self._stop = threading.Event()
        self._mu = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(a, name, creds, init),
                                          daemon=True)
                         for a in addresses for name, creds in clients.items()]

    def _run(self, address, name, credentials, init):
        while not self._stop.is_set():
            message, code = _session_reply(address, credentials, init)
            with self._mu:
                self.attempts += 1
                self.codes[(name, code)] = self.codes.get((name, code), 0) + 1
                if message is not None:
                    self.messages.append((address, name, message))
            time.sleep(0.05)

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=ATTEMPT_S + 10)


def test_hijack_during_rebuild_gets_nothing(request, tmp_path_factory, tpserve_bin,
                                            smollm_gguf, certs):
    server = _serve(request, tmp_path_factory, tpserve_bin, smollm_gguf, "hijack")
    workers = [pid for pid, _ in server.workers]
    ports = [_serve_worker_port(pid) for pid in workers]
    for pid, port in zip(workers, ports):
        assert ("127.0.0.1", port) in _wait_listening(pid)
        assert all(ip == "127.0.0.1" for ip, _ in _listening(pid)), _listening(pid)
    addresses = [f"127.0.0.1:{p}" for p in ports]
    ca_pem = _cluster_ca_of(workers[0])
    clients = {"plaintext": None,
               "no certificate": _tls(ca_pem),
               "foreign CA": _tls(ca_pem, certs["stranger"])}
    init = _init(smollm_gguf, threads=1)
    # Even before any death: nobody but the coordinator gets a word from a worker.
    for address in addresses:
        for name, creds in clients.items():
            message, code = _session_reply(address, creds, init)
            assert message is None and code == grpc.StatusCode.UNAVAILABLE, (name, message,
                                                                              code)

    channel = grpc.insecure_channel(server.address)
    request.addfinalizer(channel.close)
    stub = pb_grpc.GenerationStub(channel)
    reqs = [greedy(max_tokens=32, ignore_eos=True, prompt=f"Write about {SUBJECTS[i]}.")
            for i in range(3)]
    undisturbed = [generate(stub, r).ids for r in reqs]

    with Hammer(addresses, clients, init) as hammer:
        calls = [stub.Generate(r, timeout=STREAM_S) for r in reqs]
        first = [next(c) for c in calls]  # every stream is running
        os.kill(workers[1], signal.SIGKILL)
        got = []
        for c, head in zip(calls, first):
            ids, reason = list(head.token_ids), head.finish_reason
            for m in c:
                ids.extend(m.token_ids)
                reason = m.finish_reason
            got.append((ids, reason))
        # The world is back (a new generation), the hammer still going.
        deadline = time.monotonic() + 60
        while serve_procs.health_status(server.address) != serve_procs.SERVING:
            assert time.monotonic() < deadline, server.log_tail()
            time.sleep(0.2)
    print(f"hostile sessions during the rebuild: {hammer.attempts}, {hammer.codes}")
    assert hammer.messages == [], hammer.messages[:3]
    assert hammer.attempts >= 3 * len(addresses) * len(clients), hammer.codes
    # Refused at the handshake (or, on a loaded machine, still handshaking at the deadline):
    # never an answer of the Worker service (FAILED_PRECONDITION, OK, ...).
    codes = {code for (_, code) in hammer.codes}
    assert codes <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}, hammer.codes
    assert grpc.StatusCode.UNAVAILABLE in codes, hammer.codes
    for i, ((ids, reason), want) in enumerate(zip(got, undisturbed)):
        assert ids == want, f"request {i} changed across the worker's death"
        assert reason == LENGTH
    log = server.log_tail(1 << 20)
    assert "died" in log, log[-3000:]
    # Health answers SERVING to the public; the restarted worker is ours again.
    assert generate(stub, reqs[0]).ids == undisturbed[0]
    _stop_cleanly(server)


# --- a standalone worker with cluster credentials ---------------------------------------------

def _worker(tpserve_bin, listen, *flags, log=None):
    return subprocess.Popen([str(tpserve_bin), "worker", f"--listen={listen}", *map(str, flags)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=log or subprocess.DEVNULL)


def _cluster_flags(certs, name="worker"):
    key, cert = certs[name]
    return [f"--cluster_ca_file={certs['ca'][1]}", f"--cluster_cert_file={cert}",
            f"--cluster_key_file={key}"]


def test_worker_with_credentials_serves_only_its_cluster(request, tpserve_bin, smollm_gguf,
                                                         certs):
    port = free_port()
    address = f"127.0.0.1:{port}"
    proc = _worker(tpserve_bin, address, f"--model={smollm_gguf}", *_cluster_flags(certs))
    request.addfinalizer(lambda: stop([proc]))
    _wait_listening(proc.pid)
    ca_pem = certs["ca"][1].read_bytes()
    init = _init(smollm_gguf, threads=1)
    for name, creds in {"plaintext": None, "no certificate": _tls(ca_pem),
                        "foreign CA": _tls(ca_pem, certs["stranger"])}.items():
        message, code = _session_reply(address, creds, init)
        assert message is None and code == grpc.StatusCode.UNAVAILABLE, (name, message, code)
    # The right certificate: a whole Init up to Ready.
    session = Session(address, credentials=_tls(ca_pem, certs["coordinator"]))
    try:
        session.send(init=init)
        reply = session.reply()
        assert reply.HasField("ready"), reply
    finally:
        session.close()
    # A coordinator that trusts another CA does not take this worker either.
    message, code = _session_reply(address, _tls(certs["foreign_ca"][1].read_bytes(),
                                                 certs["stranger"]), init)
    assert message is None and code == grpc.StatusCode.UNAVAILABLE
    assert proc.poll() is None
    assert stop([proc]) == [0]


def test_generate_over_mutual_tls_and_refused_without_it(request, tpserve_bin, smollm_gguf,
                                                         certs):
    address = f"127.0.0.1:{free_port()}"
    proc = _worker(tpserve_bin, address, f"--model={smollm_gguf}", *_cluster_flags(certs))
    request.addfinalizer(lambda: stop([proc]))
    _wait_listening(proc.pid)
    base = [str(tpserve_bin), "generate", f"--model={smollm_gguf}", "--prompt=Hello",
            "--max_tokens=3", "--temperature=0", f"--workers={address}"]
    ok = subprocess.run(base + _cluster_flags(certs, "coordinator"), capture_output=True,
                        text=True, timeout=180)
    assert ok.returncode == 0, ok.stderr[-2000:]
    plain = subprocess.run(base, capture_output=True, text=True, timeout=180)
    assert plain.returncode != 0


# --- loopback only without credentials ------------------------------------------------------

def _host_address():
    """A non-loopback IPv4 address of this host, or None."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                             capture_output=True, text=True, timeout=10).stdout
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            return fields[fields.index("inet") + 1].split("/")[0]
    return None


def _connects(address, port):
    try:
        socket.create_connection((address, port), timeout=2).close()
        return True
    except OSError:
        return False


WILDCARD = ("0.0.0.0", "::")  # gRPC binds 0.0.0.0 as a dual-stack [::] where it can


@pytest.mark.parametrize("flags,bound", [
    ([], ("127.0.0.1",)),
    (["--insecure_cluster"], WILDCARD),
    ("credentials", WILDCARD),
], ids=["no-credentials", "insecure-cluster", "credentials"])
def test_worker_binds_loopback_without_credentials(request, tmp_path, tpserve_bin, certs,
                                                   flags, bound):
    if flags == "credentials":
        flags = _cluster_flags(certs)
    port = free_port("0.0.0.0")
    log = open(tmp_path / "worker.log", "wb")
    proc = _worker(tpserve_bin, f"0.0.0.0:{port}", *flags, log=log)
    log.close()
    request.addfinalizer(lambda: stop([proc]))
    listening = _wait_listening(proc.pid)
    assert listening and all(ip in bound and p == port for ip, p in listening), listening
    other = _host_address()
    if other is not None:  # reachable from another host's point of view only when asked for
        assert _connects(other, port) == (bound == WILDCARD), (other, port)
    text = (tmp_path / "worker.log").read_text()
    if not flags:
        assert "loopback only" in text, text[-2000:]
    if flags == ["--insecure_cluster"]:
        assert "--insecure_cluster: plaintext" in text, text[-2000:]
    assert stop([proc]) == [0]


# --- --model_root ----------------------------------------------------------------------------

def test_model_root_refuses_outside_as_missing(request, tmp_path, tpserve_bin, smollm_gguf):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside.gguf").write_bytes(b"GGUF")
    (root / "escape.gguf").symlink_to(smollm_gguf.resolve())
    address = f"127.0.0.1:{free_port()}"
    proc = _worker(tpserve_bin, address, f"--model_root={root}")
    request.addfinalizer(lambda: stop([proc]))
    _wait_listening(proc.pid)

    def refusal(path):
        session = Session(address)
        try:
            session.send(init=_init(path))
            reply = session.reply()
        finally:
            session.close()
        assert reply.error, reply
        return reply.error.replace(str(path), "PATH")

    missing = refusal(root / "missing.gguf")
    assert "PATH" in missing and "--model_root" in missing, missing
    cases = {
        "dotdot": root / "sub" / ".." / ".." / "outside.gguf",
        "absolute elsewhere": tmp_path / "outside.gguf",
        "the real model, outside": smollm_gguf.resolve(),
        "symlink escaping": root / "escape.gguf",
        "missing outside": tmp_path / "nothing-here.gguf",
        "system file": "/etc/passwd",
        "directory outside": tmp_path,
    }
    for name, path in cases.items():
        assert refusal(path) == missing, name
    assert proc.poll() is None
    assert stop([proc]) == [0]


def test_worker_without_model_root_refuses_every_model(request, tpserve_bin, smollm_gguf):
    address = f"127.0.0.1:{free_port()}"
    proc = _worker(tpserve_bin, address)
    request.addfinalizer(lambda: stop([proc]))
    _wait_listening(proc.pid)
    session = Session(address)
    try:
        session.send(init=_init(smollm_gguf))
        reply = session.reply()
    finally:
        session.close()
    assert "--model_root" in reply.error, reply
    assert stop([proc]) == [0]
