"""Small helpers the bench/ scripts share: a free loopback port, a linear-interpolation
percentile, a chat request over HTTP, and a `tpserve serve` run for the length of a `with`
block."""
import contextlib
import http.client
import json
import os
import pathlib
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values, q):
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def post_chat(http_port, body, timeout_s=600):
    """POSTs `body` to /v1/chat/completions on the loopback port; the answer (asserted 200)."""
    conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=timeout_s)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    answer = json.loads(r.read())
    conn.close()
    assert r.status == 200, answer
    return answer


@contextlib.contextmanager
def serving(build, model, tp, log_dir, timeout_s=120, flags=(), name="serve"):
    """`tpserve serve` (with `flags`, e.g. ["--speculative=ngram"]) on free ports, ready (GET
    /health is 200) within `timeout_s`, logging to `log_dir`/`name`.log; yields (grpc_port,
    http_port) and stops it after."""
    port, http_port = free_port(), free_port()
    with open(os.path.join(log_dir, f"{name}.log"), "w") as log:
        server = subprocess.Popen(
            [str(pathlib.Path(build) / "server" / "tpserve"), "serve", f"--model={model}",
             f"--tp={tp}", f"--port={port}", f"--http_port={http_port}", *flags],
            stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.time() + timeout_s
            while True:
                try:
                    c = http.client.HTTPConnection("127.0.0.1", http_port, timeout=2)
                    c.request("GET", "/health")
                    if c.getresponse().status == 200:
                        break
                except OSError:
                    pass
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("serve did not become ready")
                time.sleep(0.2)
            yield port, http_port
        finally:
            server.terminate()
            server.wait(timeout=60)
