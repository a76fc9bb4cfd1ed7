"""The CPU image built and run for real, with a Docker engine of the test's own when none
runs (tests/integration/docker_env.py: a private dockerd, a debian:12 base made with
debootstrap and cached between runs, since no image registry is reachable):

`docker build --network host --target cpu` builds tpserve:cpu from this checkout; a container
of it (host network, the model mounted read-only at /models) serves `serve --tp 2`:
- its HEALTHCHECK turns healthy;
- tpserve-cli, from outside, streams an answer, and every process in it runs as uid 10001;
- /metrics is served;
- `docker stop` drains: a stream that has begun (its first tokens printed) when the stop is
  sent goes on past the server's SIGTERM and completes, every token as in an undisturbed
  greedy run, and tpserve exits 0 within the grace period.
The image's size, the build time, the time to healthy, the drain time and the tokens that
arrived after the SIGTERM are printed, and written under $TPSERVE_RESULTS_DIR
(docker_image.json) when it is set."""
import json
import os
import pathlib
import subprocess
import time
import urllib.request

import docker_env
import worker_procs

IMAGE = "tpserve:cpu"  # built by conftest's cpu_image
STOP_GRACE_S = 40
DRAIN_TOKENS = 512  # greedy, --ignore_eos: ~3 s on two CPU cores, far longer than a stop takes


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

    # docker stop (SIGTERM) under a running stream: it completes, with the tokens of an
    # undisturbed run, then tpserve exits 0. The stream is long enough (seconds on a CPU) for
    # the stop to land while it runs; tokens that arrive after the server logged its drain
    # show that it did.
    ask = [*cli, "generate", "--json", "--temperature=0", f"--max_tokens={DRAIN_TOKENS}",
           "--ignore_eos", "Write about the sea."]
    want = docker_env.undisturbed_tokens(ask, DRAIN_TOKENS)
    stopper = []

    def stop():
        stopper.append(subprocess.Popen(
            ["docker", "stop", "-t", str(STOP_GRACE_S), name], env=daemon.env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        request.addfinalizer(stopper[0].kill)  # a no-op once it has exited

    messages, stopping, code, err = docker_env.stream_through(ask, stop, STOP_GRACE_S + 60)
    stopped = stopper[0].wait(timeout=max(1.0, stopping + STOP_GRACE_S + 30 - time.time()))
    image["drain_s"] = round(time.time() - stopping, 1)
    assert stopped == 0, stopper[0].stderr.read()
    docker_env.assert_completed(messages, code, err, want)
    logs = daemon.docker("logs", "--timestamps", name)
    logs = logs.stdout + logs.stderr
    draining = [docker_env.parse_time(line.split(" ", 1)[0]).timestamp()
                for line in logs.splitlines() if ", draining (up to " in line]
    assert len(draining) == 1, logs[-3000:]
    after = docker_env.tokens(m for m in messages if m[0] > draining[0])
    image["tokens_after_sigterm"] = len(after)
    assert after, f"the stream ended before tpserve began to drain: {logs[-3000:]}"
    assert _inspect(daemon, name, "{{.State.ExitCode}}") == "0", logs[-3000:]
    assert image["drain_s"] < STOP_GRACE_S
    _record(image)
