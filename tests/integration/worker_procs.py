"""Helpers for tests that run `tpserve worker` processes: start them, wait for their
grpc.health.v1 SERVING, run `tpserve generate`, and stop them (always bounded)."""
import json
import os
import random
import signal
import socket
import subprocess
import time

import grpc

# HealthCheckRequest{} is empty; HealthCheckResponse{status: SERVING} is field 1 = 1.
_SERVING = b"\x08\x01"


def _ephemeral_low():
    """The first port of the kernel's ephemeral range (what a bind to port 0 and an outgoing
    connection draw from)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed out by this process, never handed out twice.
_HANDED_OUT = set()
_RNG = random.Random(os.getpid() ^ time.monotonic_ns())


def _bindable(host, port):
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_port_run(n, host="127.0.0.1"):
    """A port Q such that Q .. Q+n-1 are all free now, for servers to listen on. They come from
    the 8000 ports below the ephemeral range: a port drawn from that range (as a bind to port 0
    gives) can be taken, between this check and the server's own bind, by any socket bound to
    port 0 meanwhile, such as a worker the server starts first (seen: a coordinator's metrics
    port taken so)."""
    high = _ephemeral_low()
    low = max(1024, high - 8000)
    for _ in range(2000):
        q = _RNG.randrange(low, high - n + 1)
        ports = range(q, q + n)
        if not _HANDED_OUT.intersection(ports) and all(_bindable(host, p) for p in ports):
            _HANDED_OUT.update(ports)
            return q
    raise RuntimeError(f"no run of {n} free ports below {high}")


def free_port(host="127.0.0.1"):
    return free_port_run(1, host)


def wait_healthy(address, timeout_s=30.0, credentials=None):
    """Polls grpc.health.v1.Health/Check on `address` until SERVING or the deadline; over
    TLS with `credentials` (grpc.ChannelCredentials: a worker with cluster credentials)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        with (grpc.insecure_channel(address) if credentials is None
              else grpc.secure_channel(address, credentials)) as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                        request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
            try:
                if check(b"", timeout=2.0) == _SERVING:
                    return
            except grpc.RpcError as e:
                last = e
        time.sleep(0.1)
    raise TimeoutError(f"worker at {address} not SERVING within {timeout_s}s: {last}")


def start_local(request, tpserve_bin, model, log_dir, count):
    """Starts `count` `tpserve worker` processes on loopback (plaintext, --model_root the
    model's folder; logs in `log_dir`), stopped by a finalizer of `request`; waits until they
    are healthy. Returns (processes, addresses)."""
    ports = [free_port() for _ in range(count)]
    procs = []
    request.addfinalizer(lambda: stop(procs))
    for rank, port in enumerate(ports):
        with open(log_dir / f"worker{rank}.log", "wb") as log:
            procs.append(subprocess.Popen(
                [str(tpserve_bin), "worker", f"--listen=127.0.0.1:{port}",
                 f"--model_root={model.parent}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
    addresses = [f"127.0.0.1:{p}" for p in ports]
    for address in addresses:
        wait_healthy(address)
    return procs, addresses


def stop(procs, timeout_s=10.0):
    """SIGTERM, then SIGKILL past the timeout; returns the exit codes."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait(timeout=timeout_s))
    return codes


def generate_ids(cmd_prefix, tpserve_bin, model, prompt, chat, max_tokens, workers=None,
                 timeout_s=240, extra=(), threads=1):
    """Runs `tpserve generate --json` greedy (with `extra` flags; in process on `threads`
    threads, or on `workers`) and returns (token ids, all JSON lines)."""
    cmd = [*cmd_prefix, str(tpserve_bin), "generate", f"--model={model}", "--json",
           f"--max_tokens={max_tokens}", "--temperature=0", f"--prompt={prompt}", *extra]
    if chat:
        cmd.append("--chat")
    if workers:
        cmd.append(f"--workers={','.join(workers)}")
    else:
        cmd.append(f"--threads={threads}")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    assert out.returncode == 0, f"{cmd}: {out.stderr[-2000:]}"
    lines = [json.loads(l) for l in out.stdout.splitlines()]
    return lines[-1]["token_ids"], lines
