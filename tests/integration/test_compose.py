"""deploy/docker-compose.yml brought up for real (docker-compose, the engine and the tpserve:cpu
image of conftest's fixtures), with tests/integration/compose/override.yml: Prometheus built
from Debian's package (upstream images cannot be pulled here; Debian packages no Grafana, so
it is not started), and the project network on 10.231.64.0/24, so no traffic leaves this
machine. Secrets from scripts/make-dev-certs.sh, host ports chosen free. It checks that:
- the coordinator starts only once both workers are healthy, then turns healthy itself;
- a request is served over TLS with an API key from outside;
- Prometheus scrapes the coordinator and both workers (its targets API says up);
- a worker killed under a running stream is restarted, and the stream completes with every
  token of an undisturbed greedy run;
- `docker-compose down` leaves no container and no network."""
import json
import os
import pathlib
import re
import signal
import subprocess
import time
import urllib.request

import docker_env
import worker_procs

HERE = pathlib.Path(__file__).resolve().parent
KILL_TOKENS = 256  # greedy, --ignore_eos: the kill lands after the first few


def test_compose_brings_up_the_deployment(request, tmp_path, docker_daemon, cpu_image, binary,
                                          smollm_gguf, repo_root):
    daemon = docker_daemon
    secrets = tmp_path / "secrets"
    subprocess.run([str(repo_root / "scripts" / "make-dev-certs.sh"), str(secrets)], check=True,
                   capture_output=True, timeout=120)
    api_port, http_port, prom_port = (worker_procs.free_port() for _ in range(3))
    env = dict(daemon.env, TPSERVE_SECRETS=str(secrets), TPSERVE_MODELS=str(smollm_gguf.parent),
               TPSERVE_MODEL=smollm_gguf.name, TPSERVE_PORT=str(api_port),
               TPSERVE_HTTP_PORT=str(http_port), PROMETHEUS_PORT=str(prom_port),
               TPSERVE_TEST_COMPOSE_DIR=str(HERE / "compose"))
    project = f"tpservetest{os.getpid()}"
    compose = ["docker-compose", "-p", project, "-f", str(repo_root / "deploy" /
                                                       "docker-compose.yml"),
               "-f", str(HERE / "compose" / "override.yml")]

    def run(*args, timeout=600, check=True):
        out = subprocess.run([*compose, *args], env=env, capture_output=True, text=True,
                             timeout=timeout)
        assert not check or out.returncode == 0, f"{args}: {out.stdout[-3000:]}{out.stderr[-3000:]}"
        return out

    request.addfinalizer(lambda: run("down", "--volumes", "--remove-orphans", check=False))
    run("build", "prometheus", timeout=900)
    run("up", "-d", "--no-build", "coordinator", "worker0", "worker1", "prometheus",
        timeout=600)

    def name(service):
        return f"{project}_{service}_1"

    def inspect(service, template):
        return daemon.docker("inspect", "-f", template, name(service)).stdout.strip()

    started = time.monotonic()
    while inspect("coordinator", "{{.State.Health.Status}}") != "healthy":
        assert time.monotonic() - started < 300, run("logs", "--tail=80").stdout[-4000:]
        time.sleep(1.0)
    # depends_on service_healthy: the coordinator started after both workers were healthy.
    coordinator_start = docker_env.parse_time(inspect("coordinator", "{{.State.StartedAt}}"))
    for worker in ("worker0", "worker1"):
        checks = json.loads(inspect(worker, "{{json .State.Health.Log}}"))
        first_healthy = min(docker_env.parse_time(c["End"]) for c in checks if c["ExitCode"] == 0)
        assert first_healthy <= coordinator_start, (worker, first_healthy, coordinator_start)

    key = next(line for line in (secrets / "api-keys.txt").read_text().splitlines()
               if line.strip() and not line.startswith("#"))
    cli = [str(binary("clients", "cpp", "tpserve-cli")), f"--server=127.0.0.1:{api_port}",
           f"--tls_ca_file={secrets / 'ca.crt'}", f"--api_key={key.strip()}", "--max_resumes=0"]
    answer = subprocess.run([*cli, "generate", "--temperature=0", "--max_tokens=12",
                             "The capital of France is"],
                            capture_output=True, text=True, timeout=120)
    assert answer.returncode == 0 and "Paris" in answer.stdout, (answer.stdout, answer.stderr)

    deadline = time.monotonic() + 90
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/targets",
                                    timeout=10) as r:
            targets = json.load(r)["data"]["activeTargets"]
        up = sorted(t["labels"]["instance"] for t in targets if t["health"] == "up")
        if up == ["coordinator:9090", "worker0:9091", "worker1:9091"]:
            break
        assert time.monotonic() < deadline, targets
        time.sleep(2.0)

    # A worker killed under a stream (once its first tokens have arrived): restarted (restart:
    # unless-stopped), the world rebuilt, the stream's sequence recomputed, and the stream
    # completed with the tokens of an undisturbed run. --max_resumes=0: the server, not a
    # resend of the CLI, carries it through.
    ask = [*cli, "generate", "--json", "--temperature=0", f"--max_tokens={KILL_TOKENS}",
           "--ignore_eos", "Write about the sea."]
    want = docker_env.undisturbed_tokens(ask, KILL_TOKENS)
    victim = int(inspect("worker1", "{{.State.Pid}}"))
    messages, killed, code, err = docker_env.stream_through(
        ask, lambda: os.kill(victim, signal.SIGKILL), 240)
    docker_env.assert_completed(messages, code, err, want)
    assert docker_env.tokens(m for m in messages if m[0] > killed), "no token after the kill"
    assert int(inspect("worker1", "{{.RestartCount}}")) >= 1
    logs = run("logs", "coordinator").stdout
    assert re.search(r"recomputing [1-9]", logs), logs[-3000:]  # the stream was running

    run("down", "--volumes", "--remove-orphans", timeout=300)
    left = daemon.docker("ps", "-a", "-q", "--filter",
                         f"label=com.docker.compose.project={project}").stdout.split()
    assert left == [], left
    networks = daemon.docker("network", "ls", "-q", "--filter",
                             f"label=com.docker.compose.project={project}").stdout.split()
    assert networks == [], networks
