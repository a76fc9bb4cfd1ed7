"""The CPU image built and run for real, with a Docker engine of the test's own when none
runs (tests/integration/docker_env.py: a private dockerd, a debian:12 base made with
debootstrap and cached between runs, since no image registry is reachable):

`docker build --network host --target cpu` builds tpserve:cpu from this checkout; a container
of it (host network, the model mounted read-only at /models) serves `serve --tp 2`:
- its HEALTHCHECK turns healthy;
- tpserve-cli, from outside, streams an answer, and every process in it runs as uid 10001;
- /metrics is served;
- `docker stop` drains: a stream running at the stop completes, and tpserve exits 0 within
  the grace period.
The image's size, the build time, the time to healthy and the drain time are printed, and
written under $TPSERVE_RESULTS_DIR (docker_image.json) when it is set."""
import json
import os
import pathlib
import subprocess
import time
import urllib.request

import worker_procs

IMAGE = "tpserve:cpu"  # built by conftest's cpu_image
STOP_GRACE_S = 40


def _record(figures):
    print(f"\ndocker image: {json.dumps(figures)}")
    out_dir = os.environ.get("TPSERVE_RESULTS_DIR")
    if out_dir:
        (pathlib.Path(out_dir) / "docker_image.json").write_text(
            json.dumps(figures, indent=2) + "\n")


def _inspect(daemon, name, template):
    return daemon.docker("inspect", "-f", template, name).stdout.strip()


def test_the_cpu_image_serves_as_non_root_and_drains(request, docker_daemon, cpu_image, binary,
                                                     smollm_gguf):
    daemon, image = docker_daemon, dict(cpu_image)
    port, metrics_port = worker_procs.free_port(), worker_procs.free_port()
    name = f"tpserve-image-test-{os.getpid()}"
    request.addfinalizer(lambda: daemon.docker("rm", "-f", name, check=False))
    started = time.monotonic()
    daemon.docker("run", "-d", "--name", name, "--network", "host",
                  "-v", f"{smollm_gguf.parent}:/models:ro",
                  "-e", f"TPSERVE_HEALTH_ADDR=127.0.0.1:{port}", IMAGE,
                  "serve", f"--model=/models/{smollm_gguf.name}", "--tp=2", "--host=127.0.0.1",
                  f"--port={port}", f"--metrics_port={metrics_port}")
    while (health := _inspect(daemon, name, "{{.State.Health.Status}}")) != "healthy":
        assert health in ("starting", ""), (health, daemon.docker("logs", name).stderr[-3000:])
        assert time.monotonic() - started < 300, daemon.docker("logs", name).stderr[-3000:]
        time.sleep(0.5)
    image["healthy_s"] = round(time.monotonic() - started, 1)

    cli = [str(binary("clients", "cpp", "tpserve-cli")), f"--server=127.0.0.1:{port}",
           "--max_resumes=0"]
    answer = subprocess.run([*cli, "generate", "--temperature=0", "--max_tokens=12",
                             "The capital of France is"],
                            capture_output=True, text=True, timeout=120)
    assert answer.returncode == 0 and "Paris" in answer.stdout, (answer.stdout, answer.stderr)

    processes = daemon.docker("top", name, "-eo", "uid,pid,comm").stdout.splitlines()[1:]
    assert len(processes) >= 3, processes  # serve and its two workers
    assert all(line.split()[0] == "10001" for line in processes), processes

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    assert 'tpserve_requests_total{api="grpc",status="ok"} 1' in metrics, metrics[:2000]

    # docker stop (SIGTERM) under a running stream: it completes, then tpserve exits 0.
    stream = subprocess.Popen([*cli, "generate", "--temperature=0", "--max_tokens=96",
                               "--ignore_eos", "Write about the sea."],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    request.addfinalizer(stream.kill)  # a no-op once it has exited
    time.sleep(1.0)
    stopping = time.monotonic()
    daemon.docker("stop", "-t", str(STOP_GRACE_S), name, timeout=STOP_GRACE_S + 30)
    image["drain_s"] = round(time.monotonic() - stopping, 1)
    out, err = stream.communicate(timeout=60)
    assert stream.returncode == 0, err[-2000:]
    assert _inspect(daemon, name, "{{.State.ExitCode}}") == "0", \
        daemon.docker("logs", name).stderr[-3000:]
    assert image["drain_s"] < STOP_GRACE_S
    _record(image)
