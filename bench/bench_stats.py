"""Small helpers the bench/ scripts share: a free loopback port, a linear-interpolation
percentile, and a `tpserve serve` run for the length of a `with` block."""
import contextlib
import http.client
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


@contextlib.contextmanager
def serving(build, model, tp, log_dir, timeout_s=120):
    """`tpserve serve` on free ports, ready (GET /health is 200) within `timeout_s`; yields
    (grpc_port, http_port) and stops it after."""
    port, http_port = free_port(), free_port()
    with open(os.path.join(log_dir, "serve.log"), "w") as log:
        server = subprocess.Popen(
            [str(pathlib.Path(build) / "server" / "tpserve"), "serve", f"--model={model}",
             f"--tp={tp}", f"--port={port}", f"--http_port={http_port}"],
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
