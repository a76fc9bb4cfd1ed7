"""Helpers for tests of `tpserve serve`: start it in its own process group (log to a file),
wait for grpc.health.v1 SERVING, find its worker children through /proc, read a Generate
stream, and stop it — every wait bounded, SIGKILL to the whole group past the timeout.

grpcio-health-checking and grpcio-reflection are not needed: the health and reflection
messages are small enough to write and read as raw protobuf bytes here."""
import os
import pathlib
import signal
import subprocess
import time
from dataclasses import dataclass, field

import grpc

from worker_procs import free_port

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
REFLECTION_INFO = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
GENERATE = "/tpserve.v1.Generation/Generate"

# HealthCheckResponse.status (field 1, varint).
SERVING = 1
NOT_SERVING = 2


def _varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def wire_fields(buf):
    """Decodes one protobuf message level: yields (field number, wire type, value), the
    value an int for varints and fixed types, bytes for length-delimited fields."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = bytes(buf[i:i + n]), i + n
        elif wire == 5:
            value, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"unsupported wire type {wire} in {buf!r}")
        yield number, wire, value


def channel(address, credentials=None):
    """A channel of its own (no subchannel shared with other channels, so every one makes
    its own connection and handshake): plaintext, or TLS with `credentials`."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    if credentials is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, credentials, options=options)


def health_status(address, service="", timeout_s=2.0, credentials=None):
    """grpc.health.v1.Health/Check: the status number (SERVING, NOT_SERVING, ...); raises
    grpc.RpcError when the server cannot be reached or refuses. `credentials`
    (grpc.ChannelCredentials): over TLS."""
    request = b"" if not service else b"\x0a" + bytes([len(service)]) + service.encode()
    with channel(address, credentials) as channel_:
        check = channel_.unary_unary(HEALTH_CHECK, request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
        reply = check(request, timeout=timeout_s)
    return next((v for n, w, v in wire_fields(reply) if n == 1 and w == 0), 0)  # 0: UNKNOWN


def list_services(address, timeout_s=10.0):
    """grpc.reflection.v1alpha ServerReflectionInfo with one list_services request: the
    service names the server reports."""
    # ServerReflectionRequest { list_services (field 7) = "*" }
    request = b"\x3a\x01*"
    with grpc.insecure_channel(address) as channel:
        info = channel.stream_stream(REFLECTION_INFO, request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
        replies = list(info(iter([request]), timeout=timeout_s))
    names = []
    for reply in replies:
        # ServerReflectionResponse { list_services_response (6) { service (1) { name (1) } } }
        for n, _, v in wire_fields(reply):
            if n == 6:
                for sn, _, service in wire_fields(v):
                    if sn == 1:
                        names += [name.decode() for nn, _, name in wire_fields(service)
                                  if nn == 1]
    return names


def proc_stat(pid):
    """(state, ppid, start time in clock ticks) of /proc/PID/stat, or None if gone."""
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    rest = text[text.rindex(")") + 2:].split()  # comm may hold spaces and parentheses
    return rest[0], int(rest[1]), int(rest[19])


def children_of(pid):
    """[(child pid, start time)] of the live processes whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat and stat[1] == pid and stat[0] != "Z":
                found.append((int(entry), stat[2]))
    return sorted(found)


def alive(pid, start_time):
    """Whether the process recorded as (pid, start_time) still runs (not a zombie, and the
    pid not reused by another process)."""
    stat = proc_stat(pid)
    return stat is not None and stat[2] == start_time and stat[0] != "Z"


@dataclass
class Server:
    """One `tpserve serve` process: leader of its own process group."""
    proc: subprocess.Popen
    address: str
    log_path: pathlib.Path
    flags: dict
    workers: list = field(default_factory=list)  # [(pid, start time)] after wait_serving

    @property
    def pid(self):
        return self.proc.pid

    def log_tail(self, chars=4000):
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"


def start(tpserve_bin, model, log_path, host="127.0.0.1", port=None, command="serve", **flags):
    """Starts `tpserve serve --model=MODEL --host --port [--FLAG=VALUE ...]` (or another
    command taking those flags, e.g. `coordinator`) with stdout and stderr in `log_path`, in a
    new session so that its workers can be killed as a group."""
    port = port or free_port(host)
    args = [str(tpserve_bin), command, f"--model={model}", f"--host={host}", f"--port={port}"]
    args += [f"--{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in flags.items()]
    log = open(log_path, "wb")
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()  # the child holds its own descriptor
    return Server(proc, f"{host}:{port}", pathlib.Path(log_path), flags)


def wait_serving(server, timeout_s=120.0, credentials=None):
    """Polls health (over TLS with `credentials`) until SERVING; fails early (with the log
    tail) if the process exits. Then records the worker children."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"tpserve serve exited with {server.proc.returncode} before "
                               f"SERVING:\n{server.log_tail()}")
        try:
            status = health_status(server.address, credentials=credentials)
            if status == SERVING:
                server.workers = children_of(server.pid)
                return server
            last = f"health status {status}"
        except grpc.RpcError as e:
            last = e.code()
        time.sleep(0.2)
    raise TimeoutError(f"tpserve serve at {server.address} not SERVING within {timeout_s}s "
                       f"(last: {last}):\n{server.log_tail()}")


def start_serving_http(request, tpserve_bin, model, log_path, timeout_s=120.0, **flags):
    """`start` with an HTTP port (server.http = (host, port)), a finalizer that cleans up, and
    a wait until both the gRPC health check and `GET /health` answer SERVING / 200."""
    import urllib.request  # noqa: PLC0415 (only the HTTP tests need it)
    http_port = free_port("127.0.0.1")
    srv = start(tpserve_bin, model, log_path, http_port=http_port, **flags)
    request.addfinalizer(lambda: cleanup(srv))
    wait_serving(srv, timeout_s=timeout_s)
    srv.http = ("127.0.0.1", http_port)
    deadline = time.time() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health", timeout=5) as r:
                if r.status == 200:
                    return srv
        except OSError:
            pass
        assert time.time() < deadline, srv.log_tail()
        time.sleep(0.2)


def start_with_metrics(request, tmp_path_factory, tpserve_bin, model, name, tp=2, **flags):
    """`start` (log in a fresh `name` directory, threads shared out between the ranks) with a
    Prometheus port (server.metrics = "HOST:PORT"), a finalizer that cleans up, and a wait
    until it serves."""
    log = tmp_path_factory.mktemp(name) / "serve.log"
    metrics_port = free_port("127.0.0.1")
    server = start(tpserve_bin, model, log, tp=tp, threads=max(1, 2 // tp),
                   metrics_port=metrics_port, **flags)
    request.addfinalizer(lambda: cleanup(server))
    wait_serving(server, timeout_s=120)
    server.metrics = f"127.0.0.1:{metrics_port}"
    return server


def metric(server, name):
    """The sum of metric `name`'s samples (every label set) on server.metrics."""
    import urllib.request  # noqa: PLC0415 (only the metrics tests need it)
    with urllib.request.urlopen(f"http://{server.metrics}/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def wait_exit(server, timeout_s):
    """Waits for the serve process; past the timeout SIGKILLs its whole process group and
    returns None (the exit code otherwise)."""
    try:
        return server.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(server)
        return None


def kill_group(server):
    # The leader is not reaped yet, so its pid (the group id) cannot have been reused.
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.proc.wait(timeout=30)


def stop(server, timeout_s=60.0):
    """SIGTERM (drain), then SIGKILL to the group past the timeout. Returns serve's exit code
    (None when it had to be killed)."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    return wait_exit(server, timeout_s)


def kill_workers(server):
    """SIGKILLs the recorded workers still alive (once serve has gone); returns them."""
    left = [w for w in server.workers if alive(*w)]
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def cleanup(server):
    """For finalizers: stop serve (bounded) and kill whatever of its world is left."""
    stop(server)
    kill_workers(server)


def wait_workers_gone(server, timeout_s=10.0):
    """Recorded workers still alive after `timeout_s` (empty when all are gone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [w for w in server.workers if alive(*w)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@dataclass
class Stream:
    """What one Generate stream returned."""
    messages: list
    ids: list
    text: str
    finish_reason: int
    usage: object
    request_ids: set


def collect(call):
    """Reads a Generate call (an iterator of GenerateResponse) to its end and checks the
    stream's shape: finish_reason and usage on the last message only."""
    messages = list(call)
    assert messages, "the stream ended without a message"
    for i, m in enumerate(messages[:-1]):
        assert m.finish_reason == 0, f"message {i} of {len(messages)} has a finish_reason"
        assert not m.HasField("usage"), f"message {i} of {len(messages)} has usage"
    last = messages[-1]
    assert last.finish_reason != 0, "the last message has no finish_reason"
    assert last.HasField("usage"), "the last message has no usage"
    return Stream(messages=messages,
                  ids=[t for m in messages for t in m.token_ids],
                  text="".join(m.text for m in messages),
                  finish_reason=last.finish_reason,
                  usage=last.usage,
                  request_ids={m.request_id for m in messages})
