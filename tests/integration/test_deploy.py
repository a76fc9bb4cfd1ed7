"""Static checks of the deployment files (no Docker daemon, no cluster): the Compose files
through `docker-compose config`, the Kubernetes manifests through kubernetes-validate's
bundled schemas, the Dockerfile through deploy/check_dockerfile.py, the Grafana dashboard
and Prometheus config against the metric names tpserve exports, and the container health
check script against a small in-process grpc.health.v1 server."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import grpc
import pytest
import yaml

from conftest import REPO
from worker_procs import free_port

DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "docker-compose.yml"
COMPOSE_GPU = DEPLOY / "docker-compose.gpu.yml"
HEALTHCHECK = DEPLOY / "healthcheck.py"
CHECK_DOCKERFILE = DEPLOY / "check_dockerfile.py"

# Every metric tpserve exports (README "Metrics"); histograms add _bucket, _sum and _count.
COORDINATOR_METRICS = {
    "tpserve_requests_total", "tpserve_prompt_tokens_total", "tpserve_generated_tokens_total",
    "tpserve_requests_running", "tpserve_requests_waiting", "tpserve_kv_cache_usage_ratio",
    "tpserve_preemptions_total", "tpserve_worker_up", "tpserve_prefix_cache_queries_total",
    "tpserve_prefix_cache_hits_total", "tpserve_prefix_cache_blocks",
    "tpserve_prefix_cache_evictions_total",
}
COORDINATOR_HISTOGRAMS = {
    "tpserve_time_to_first_token_seconds", "tpserve_inter_token_latency_seconds",
    "tpserve_request_duration_seconds", "tpserve_queue_duration_seconds", "tpserve_batch_size",
    "tpserve_step_duration_seconds",
}
WORKER_METRICS = {
    "tpserve_worker_allreduce_bytes_total", "tpserve_worker_weight_bytes",
    "tpserve_worker_kv_cache_bytes",
}
WORKER_HISTOGRAMS = {
    "tpserve_worker_step_duration_seconds", "tpserve_worker_allreduce_duration_seconds",
}
HISTOGRAMS = COORDINATOR_HISTOGRAMS | WORKER_HISTOGRAMS
METRICS = COORDINATOR_METRICS | WORKER_METRICS | HISTOGRAMS

# Kubernetes versions the manifests must validate against: a current one and the newest
# schema kubernetes-validate bundles.
K8S_VERSIONS = ["1.31.0", "latest"]
# API groups served by CRDs (no bundled schema): checked for shape only.
CRD_GROUPS = {"monitoring.coreos.com", "leaderworkerset.x-k8s.io"}


def _load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------
# Docker Compose


def _compose_config(*files):
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (scripts/install-deps.sh installs it)")
    args = [exe]
    for f in files:
        args += ["-f", str(f)]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TPSERVE_", "COMPOSE_", "DOCKER_", "GRAFANA_", "PROMETHEUS_"))}
    out = subprocess.run(args + ["config"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, f"docker-compose config failed:\n{out.stderr}"
    return yaml.safe_load(out.stdout)


def _tpserve_services(config):
    return {n: s for n, s in config["services"].items() if s.get("image", "").startswith("tpserve")}


def test_compose_config_cpu():
    config = _compose_config(COMPOSE)
    services = config["services"]
    assert set(services) == {"coordinator", "worker0", "worker1", "prometheus", "grafana"}
    tpserve = _tpserve_services(config)
    assert set(tpserve) == {"coordinator", "worker0", "worker1"}
    for name, s in tpserve.items():
        assert s["build"]["target"] == "cpu", name
        assert any(v.endswith(":/models:ro") for v in s["volumes"]), name
        assert s["restart"] in ("unless-stopped", "always", "on-failure"), name
        assert s["stop_grace_period"] == "40s", name
        test = s["healthcheck"]["test"]
        assert test[0] == "CMD" and test[1] == "/usr/local/bin/tpserve-healthcheck", name
        assert test[2] == ("127.0.0.1:50051" if name == "coordinator" else "127.0.0.1:7001")
    for w in ("worker0", "worker1"):
        command = tpserve[w]["command"]
        assert command[0] == "worker"
        assert "--listen=0.0.0.0:7001" in command and "--metrics_port=9091" in command
        _assert_worker_cluster_tls(config, tpserve[w])
    coordinator = tpserve["coordinator"]
    assert coordinator["depends_on"] == {"worker0": {"condition": "service_healthy"},
                                         "worker1": {"condition": "service_healthy"}}
    command = coordinator["command"]
    assert command[0] == "coordinator"
    assert "--workers=worker0:7001,worker1:7001" in command
    assert "--host=0.0.0.0" in command and "--metrics_port=9090" in command
    model = next(a for a in command if a.startswith("--model="))
    assert model.startswith("--model=/models/")
    _assert_coordinator_security(config, coordinator)
    # Third-party images are pinned.
    for name in ("prometheus", "grafana"):
        image = services[name]["image"]
        assert ":" in image and not image.endswith(":latest"), image
    # Prometheus and Grafana get the files of deploy/.
    mounts = " ".join(services["prometheus"]["volumes"] + services["grafana"]["volumes"])
    assert "deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml" in mounts
    assert "deploy/grafana/provisioning:/etc/grafana/provisioning" in mounts
    assert "deploy/grafana/dashboards:/var/lib/grafana/dashboards" in mounts


CLUSTER_FLAGS = ("--cluster_ca_file", "--cluster_cert_file", "--cluster_key_file")


def _assert_cluster_flags(config, service, who):
    """Mutual TLS between coordinator and workers: the three --cluster_* flags name Compose
    secrets the service mounts, made from deploy/secrets/cluster-*."""
    command = service["command"]
    secrets = dict(zip(CLUSTER_FLAGS, ("tpserve_cluster_ca", f"tpserve_cluster_{who}_cert",
                                       f"tpserve_cluster_{who}_key")))
    mounted = {s["source"] if isinstance(s, dict) else s for s in service["secrets"]}
    for flag, secret in secrets.items():
        assert f"{flag}=/run/secrets/{secret}" in command, (who, flag)
        assert secret in mounted, (who, secret)
        assert "/deploy/secrets/cluster-" in config["secrets"][secret]["file"], secret


def _assert_worker_cluster_tls(config, worker):
    _assert_cluster_flags(config, worker, "worker")
    assert "--model_root=/models" in worker["command"]
    assert "--insecure_cluster" not in worker["command"]
    # Its health check presents the worker's certificate (the port asks for one).
    test = worker["healthcheck"]["test"]
    assert "--tls_cert_file=/run/secrets/tpserve_cluster_worker_cert" in test, test


def _assert_coordinator_security(config, coordinator):
    """TLS and API keys on the public port, from Compose secrets mounted at /run/secrets/,
    and the health check speaking TLS."""
    flags = {"--tls_cert_file": "tpserve_tls_cert", "--tls_key_file": "tpserve_tls_key",
             "--api_key_file": "tpserve_api_keys"}
    for flag, secret in flags.items():
        assert f"{flag}=/run/secrets/{secret}" in coordinator["command"], flag
    mounted = {s["source"] if isinstance(s, dict) else s for s in coordinator["secrets"]}
    assert set(flags.values()) | {"tpserve_tls_ca"} <= mounted
    assert mounted <= set(config["secrets"])
    for name in mounted:
        assert config["secrets"][name]["file"].startswith(str(REPO / "deploy" / "secrets")), name
    env = coordinator["environment"]
    assert env["TPSERVE_HEALTH_TLS_CA"] == "/run/secrets/tpserve_tls_ca"
    _assert_cluster_flags(config, coordinator, "coordinator")
    assert env["TPSERVE_HEALTH_TLS_SERVER_NAME"]
    assert "--reflection" not in " ".join(coordinator["command"])


def test_compose_config_gpu_override():
    config = _compose_config(COMPOSE, COMPOSE_GPU)
    tpserve = _tpserve_services(config)
    device_ids = []
    for w in ("worker0", "worker1"):
        s = tpserve[w]
        assert s["build"]["target"] == "cuda" and s["image"] == "tpserve:cuda"
        (device,) = s["deploy"]["resources"]["reservations"]["devices"]
        assert device["capabilities"] == ["gpu"] and device["driver"] == "nvidia"
        assert len(device["device_ids"]) == 1
        device_ids += device["device_ids"]
        # The base file's health check survives the override's partial one.
        assert s["healthcheck"]["test"][2] == "127.0.0.1:7001"
        assert s["command"][-1] == "--device=0", "the container's one GPU"
    assert len(set(device_ids)) == 2, "each worker gets a GPU of its own"
    assert "--comm=nccl" in tpserve["coordinator"]["command"]
    _assert_coordinator_security(config, tpserve["coordinator"])
    for w in ("worker0", "worker1"):
        _assert_worker_cluster_tls(config, tpserve[w])
    assert tpserve["coordinator"]["build"]["target"] == "cpu"
    assert tpserve["coordinator"]["depends_on"]["worker0"]["condition"] == "service_healthy"


# --------------------------------------------------------------------------------------------
# Kubernetes


def _k8s_documents():
    """(path relative to deploy/k8s, document) for every YAML document under deploy/k8s."""
    docs = []
    for path in sorted(K8S.rglob("*.yaml")):
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc is not None:
                    docs.append((str(path.relative_to(K8S)), doc))
    return docs


def _is_crd(doc):
    return doc["apiVersion"].split("/")[0] in CRD_GROUPS


def _by_kind(kind, name=None, under=""):
    found = [d for p, d in _k8s_documents()
             if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
             and os.path.dirname(p) == under]
    assert len(found) == 1, f"{kind} {name} in deploy/k8s/{under}: {len(found)} found"
    return found[0]


def _kubernetes_validate():
    try:
        import kubernetes_validate  # noqa: PLC0415
        import kubernetes_validate.utils  # noqa: PLC0415
    except ImportError:
        pytest.fail("kubernetes-validate is missing from .venv (pip install -r scripts/requirements.txt)")
    return kubernetes_validate


def _validate(doc, version):
    kv = _kubernetes_validate()
    if version == "latest":
        version = kv.utils.latest_version()
    try:
        kv.validate(doc, version, strict=True)
    except kv.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} against Kubernetes {version}: "
                    f"{path}: {e.message}")


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_validate(version):
    docs = [(p, d) for p, d in _k8s_documents() if not _is_crd(d)]
    kinds = {(p, d["kind"]) for p, d in docs}
    for expected in [("configmap.yaml", "ConfigMap"), ("model-pvc.yaml", "PersistentVolumeClaim"),
                     ("workers-statefulset.yaml", "StatefulSet"),
                     ("workers-statefulset.yaml", "Service"),
                     ("coordinator-deployment.yaml", "Deployment"),
                     ("networkpolicy.yaml", "NetworkPolicy"),
                     ("coordinator-deployment.yaml", "Service"),
                     ("secrets/secrets.yaml", "Secret"),
                     ("gpu/workers-statefulset.yaml", "StatefulSet")]:
        assert expected in kinds, expected
    for _, doc in docs:
        _validate(doc, version)


def test_k8s_validation_rejects_a_bad_manifest():
    """kubernetes-validate really checks (strict: unknown fields; types)."""
    kv = _kubernetes_validate()
    sts = json.loads(json.dumps(_by_kind("StatefulSet", "tpserve-worker")))
    sts["spec"]["podManagementPolicy_typo"] = "Parallel"
    with pytest.raises(kv.ValidationError):
        kv.validate(sts, "1.31.0", strict=True)
    sts = json.loads(json.dumps(_by_kind("StatefulSet", "tpserve-worker")))
    sts["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["periodSeconds"] = "x"
    with pytest.raises(kv.ValidationError):
        kv.validate(sts, "1.31.0", strict=True)


def test_k8s_crd_manifests_are_well_formed():
    crds = {d["kind"]: d for _, d in _k8s_documents() if _is_crd(d)}
    assert set(crds) == {"PodMonitor", "LeaderWorkerSet"}
    for doc in crds.values():
        assert doc["apiVersion"].endswith("/v1")
        assert doc["metadata"]["name"]
        assert "namespace" not in doc["metadata"]
    monitor = crds["PodMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} == {"metrics"}
    lws = crds["LeaderWorkerSet"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 3  # one coordinator and two workers
    # The pod templates inside the CRD are ordinary pod templates: validate them as such.
    for key in ("leaderTemplate", "workerTemplate"):
        _validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": key.lower()},
                   "template": template[key]}, "1.31.0")
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    script = leader["args"][0]
    assert "LWS_LEADER_ADDRESS" in script and "LWS_GROUP_SIZE" in script
    assert "exec /usr/local/bin/tpserve coordinator" in script
    # Kubernetes would expand $(...) itself: the shell's arithmetic must be escaped as $$((.
    assert "$((" not in script.replace("$$((", "")


def _container(doc):
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return container


def test_k8s_workers_and_coordinator_agree():
    config = _by_kind("ConfigMap", "tpserve-config")["data"]
    sts = _by_kind("StatefulSet", "tpserve-worker")
    headless = _by_kind("Service", "tpserve-worker")
    deployment = _by_kind("Deployment", "tpserve-coordinator")
    service = _by_kind("Service", "tpserve")
    pvc = _by_kind("PersistentVolumeClaim", "tpserve-models")

    # Stable worker names, in rank order, for every replica.
    assert headless["spec"]["clusterIP"] == "None"
    assert sts["spec"]["serviceName"] == headless["metadata"]["name"]
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["replicas"] == 2
    expected = [f"tpserve-worker-{r}.tpserve-worker:7001" for r in range(sts["spec"]["replicas"])]
    assert config["TPSERVE_WORKERS"].split(",") == expected
    assert headless["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()
    assert {p["port"] for p in service["spec"]["ports"]} == {50051, 8000, 9090}

    # The coordinator's flags come from the ConfigMap.
    coordinator = _container(deployment)
    args = coordinator["args"]
    assert args[0] == "coordinator"
    for arg in args[1:]:
        for var in re.findall(r"\$\(([A-Z_]+)\)", arg):
            assert var in config, f"{arg}: {var} is not in tpserve-config"
    assert "--workers=$(TPSERVE_WORKERS)" in args and "--model=$(TPSERVE_MODEL)" in args
    assert config["TPSERVE_MODEL"].startswith("/models/")

    # Probes: ports that speak TLS (which Kubernetes' gRPC probes cannot) are probed by
    # tpserve-healthcheck: the coordinator's verifying its certificate, the workers' (mutual
    # TLS) presenting the worker's own certificate.
    worker = _container(sts)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = worker[probe]["exec"]["command"]
        assert command[:2] == ["/usr/local/bin/tpserve-healthcheck", "127.0.0.1:7001"], probe
        for flag, key in (("--tls_ca_file", "ca.crt"), ("--tls_cert_file", "tls.crt"),
                          ("--tls_key_file", "tls.key")):
            assert f"{flag}=/etc/tpserve/cluster/{key}" in command, (probe, flag)
        assert worker[probe]["timeoutSeconds"] >= 3, probe
        command = coordinator[probe]["exec"]["command"]
        assert command[:2] == ["/usr/local/bin/tpserve-healthcheck", "127.0.0.1:50051"], probe
        assert "--tls_ca_file=/etc/tpserve/tls/ca.crt" in command, probe
        assert "--tls_server_name=tpserve" in command and service["metadata"]["name"] == "tpserve"
        assert coordinator[probe]["timeoutSeconds"] >= 3, probe  # a Python start per probe

    # TLS and API keys from the Secrets of secrets/secrets.yaml, mounted as directories (not
    # subPath, which the kubelet never updates) so that rotations reach tpserve.
    pod_spec = deployment["spec"]["template"]["spec"]
    secret_volumes = {v["name"]: v["secret"]["secretName"] for v in pod_spec["volumes"]
                      if "secret" in v}
    mounts = {m["mountPath"]: m for m in coordinator["volumeMounts"]}
    flags = {"--tls_cert_file": ("/etc/tpserve/tls", "tpserve-tls", "tls.crt"),
             "--tls_key_file": ("/etc/tpserve/tls", "tpserve-tls", "tls.key"),
             "--api_key_file": ("/etc/tpserve/api-keys", "tpserve-api-keys", "api-keys.txt")}
    for flag, (directory, secret, key) in flags.items():
        assert f"{flag}={directory}/{key}" in args, flag
        mount = mounts[directory]
        assert mount["readOnly"] and "subPath" not in mount, flag
        assert secret_volumes[mount["name"]] == secret, flag
        stored = _by_kind("Secret", secret, under="secrets")
        assert key in stored["stringData"], (secret, key)
    assert "ca.crt" in _by_kind("Secret", "tpserve-tls", under="secrets")["stringData"]
    # Mutual TLS between coordinator and workers: the --cluster_* flags name the files of a
    # Secret of each side's own, mounted whole at /etc/tpserve/cluster.
    for doc, container, secret in ((deployment, coordinator, "tpserve-cluster-coordinator"),
                                   (sts, worker, "tpserve-cluster-worker")):
        volumes = {v["name"]: v["secret"]["secretName"]
                   for v in doc["spec"]["template"]["spec"]["volumes"] if "secret" in v}
        mount = next(m for m in container["volumeMounts"]
                     if m["mountPath"] == "/etc/tpserve/cluster")
        assert mount["readOnly"] and "subPath" not in mount
        assert volumes[mount["name"]] == secret
        stored = _by_kind("Secret", secret, under="secrets")["stringData"]
        for flag, key in (("--cluster_ca_file", "ca.crt"), ("--cluster_cert_file", "tls.crt"),
                          ("--cluster_key_file", "tls.key")):
            assert f"{flag}=/etc/tpserve/cluster/{key}" in container["args"], (secret, flag)
            assert key in stored, (secret, key)
    assert "--model_root=/models" in worker["args"]
    assert not any(a.startswith("--insecure_cluster") for a in worker["args"])
    # Gloo between hosts is plaintext: the NetworkPolicy admits only the world's pods to the
    # workers (and Prometheus to their metrics port).
    policy = _by_kind("NetworkPolicy", "tpserve-worker")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= \
        sts["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    for rule in policy["spec"]["ingress"]:
        sources = rule.get("from")
        if sources is None:  # from anywhere: the metrics port only
            assert [p["port"] for p in rule["ports"]] == [9091], rule
            continue
        for source in sources:
            labels = source["podSelector"]["matchLabels"]
            assert labels["app.kubernetes.io/name"] == "tpserve", rule
            assert labels["app.kubernetes.io/component"] in ("worker", "coordinator"), rule
            if labels["app.kubernetes.io/component"] == "coordinator":
                assert [p["port"] for p in rule["ports"]] == [7001], rule
    assert pod_spec["securityContext"]["fsGroup"] == pod_spec["securityContext"]["runAsGroup"]
    assert not any(a.startswith("--reflection") for a in args)
    startup = coordinator["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300

    # Draining: the preStop sleep and the drain fit in the grace period.
    pod = deployment["spec"]["template"]["spec"]
    sleep = int(coordinator["lifecycle"]["preStop"]["exec"]["command"][-1])
    drain = int(config["TPSERVE_DRAIN_TIMEOUT_S"])
    assert pod["terminationGracePeriodSeconds"] >= sleep + drain + 5
    assert deployment["spec"]["strategy"]["type"] == "Recreate"

    # The model: one read-only volume at /models in every pod.
    assert pvc["spec"]["accessModes"] == ["ReadOnlyMany"]
    for doc, container in ((deployment, coordinator), (sts, worker)):
        volumes = doc["spec"]["template"]["spec"]["volumes"]
        claim = next(v for v in volumes if "persistentVolumeClaim" in v)
        assert claim["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
        mount = next(m for m in container["volumeMounts"] if m["name"] == claim["name"])
        assert mount["mountPath"] == "/models" and mount["readOnly"] is True
        assert "requests" in container["resources"] and "limits" in container["resources"]
        assert doc["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True

    # Prometheus scrape annotations match the metrics ports.
    for doc, port in ((deployment, "9090"), (sts, "9091")):
        annotations = doc["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == port
        assert annotations["prometheus.io/path"] == "/metrics"


def test_k8s_gpu_workers():
    cpu = _by_kind("StatefulSet", "tpserve-worker")
    gpu = _by_kind("StatefulSet", "tpserve-worker", under="gpu")
    container = _container(gpu)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["image"].endswith(":cuda")
    # Same names and ranks as the CPU StatefulSet: the coordinator does not change.
    assert gpu["spec"]["serviceName"] == cpu["spec"]["serviceName"]
    assert gpu["spec"]["replicas"] == cpu["spec"]["replicas"]
    # The CPU worker's arguments plus the one GPU the container is given.
    assert container["args"] == _container(cpu)["args"] + ["--device=0"]


# --------------------------------------------------------------------------------------------
# Dockerfile


def _run_check_dockerfile(path, *extra):
    return subprocess.run([sys.executable, str(CHECK_DOCKERFILE), str(path), *extra],
                          capture_output=True, text=True, timeout=30)


def test_dockerfile_passes_the_linter():
    out = _run_check_dockerfile(REPO / "Dockerfile")
    assert out.returncode == 0, out.stdout + out.stderr
    text = (REPO / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", text, re.MULTILINE | re.IGNORECASE)
    assert [name for _, name in stages] == ["build-cpu", "cpu", "build-cuda", "cuda"]
    assert stages[0][0].startswith("debian:") and stages[1][0].endswith("-slim")
    assert "devel" in stages[2][0] and "runtime" in stages[3][0]
    assert text.count("-DTPSERVE_CUDA=OFF") == 1 and text.count("-DTPSERVE_CUDA=ON") == 1
    assert "EXPOSE 50051 8000 9090 7001 9091" in text
    ignore = (REPO / ".dockerignore").read_text().split()
    for pattern in ("build*/", "models/", ".venv/", ".cache/"):
        assert pattern in ignore, pattern


# Each mutation of the real Dockerfile must be caught, with a message naming the problem.
BAD_DOCKERFILES = {
    "root user": (lambda t: t.replace("USER 10001:10001", "USER root"), "runs as root"),
    "no user": (lambda t: t.replace("USER 10001:10001\n", ""), "has no USER"),
    "shell entrypoint": (lambda t: t.replace('ENTRYPOINT ["/usr/local/bin/tpserve"]',
                                             "ENTRYPOINT /usr/local/bin/tpserve"), "exec form"),
    "no healthcheck": (lambda t: re.sub(r"HEALTHCHECK [^\n]*\\\n[^\n]*\n", "", t),
                       "no HEALTHCHECK"),
    "add url": (lambda t: t.replace("WORKDIR /src\n", "WORKDIR /src\nADD https://e.org/x.tgz /x\n", 1),
                "ADD of a URL"),
    "latest tag": (lambda t: t.replace("FROM debian:${DEBIAN_VERSION} AS", "FROM debian:latest AS"),
                   "latest tag"),
    "untagged": (lambda t: t.replace("FROM debian:${DEBIAN_VERSION} AS", "FROM debian AS"), "no tag"),
    "recommends": (lambda t: t.replace("apt-get install -y --no-install-recommends \\",
                                       "apt-get install -y \\", 1), "--no-install-recommends"),
    "apt lists": (lambda t: t.replace(" && rm -rf /var/lib/apt/lists/*\n", "\n", 1),
                  "/var/lib/apt/lists"),
    "model copied": (lambda t: t.replace("WORKDIR /var/lib/tpserve\n",
                                         "COPY models/ /models/\nWORKDIR /var/lib/tpserve\n", 1),
                     "model files"),
    "unnamed stage": (lambda t: t.replace(" AS build-cpu", ""), "has no name"),
    "no cpu target": (lambda t: t.replace(" AS cpu", " AS cpu-runtime"), "no stage named cpu"),
    "cuda not last": (lambda t: t + "FROM debian:12 AS extra\n",
                      "the last stage"),
}


@pytest.mark.parametrize("defect", sorted(BAD_DOCKERFILES))
def test_dockerfile_linter_catches(defect, tmp_path):
    mutate, message = BAD_DOCKERFILES[defect]
    good = (REPO / "Dockerfile").read_text()
    bad = mutate(good)
    assert bad != good, f"the mutation for {defect!r} no longer applies to the Dockerfile"
    (tmp_path / ".dockerignore").write_text((REPO / ".dockerignore").read_text())
    (tmp_path / "Dockerfile").write_text(bad)
    out = _run_check_dockerfile(tmp_path / "Dockerfile")
    assert out.returncode == 1, f"{defect}: not caught\n{out.stdout}"
    assert message in out.stdout, out.stdout


def test_dockerfile_linter_wants_models_ignored(tmp_path):
    (tmp_path / "Dockerfile").write_text((REPO / "Dockerfile").read_text())
    (tmp_path / ".dockerignore").write_text(".git\nbuild*/\n")  # models/ would be sent
    out = _run_check_dockerfile(tmp_path / "Dockerfile")
    assert out.returncode == 1 and ".dockerignore does not leave models/ out" in out.stdout


def test_dockerfile_linter_rejects_a_bad_file(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get update && apt-get install -y curl\n"
                   "ADD http://example.com/model.gguf /models/\nCMD tpserve\n")
    out = _run_check_dockerfile(bad)
    assert out.returncode == 1
    for message in ("has no name", "no tag", "no stage named cpu", "no stage named cuda",
                    "--no-install-recommends", "/var/lib/apt/lists", "ADD of a URL",
                    "model files"):
        assert message in out.stdout, message


def _runtime_packages(binary, env=None):
    return subprocess.run(["bash", str(DEPLOY / "runtime-packages.sh"), str(binary)],
                          capture_output=True, text=True, timeout=60, env=env)


def _ldd_paths(binary):
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True)
    return re.findall(r"=> (/\S+)", out.stdout)


def test_runtime_packages_script(tmp_path):
    """deploy/runtime-packages.sh (the Dockerfile's runtime list) maps libraries to packages."""
    if shutil.which("dpkg-query") is None or shutil.which("ldd") is None:
        pytest.skip("no dpkg or ldd on this machine")
    binary = shutil.which("ls")
    out = _runtime_packages(binary)
    assert out.returncode == 0, out.stderr
    packages = out.stdout.split()
    assert "libc6" in packages and packages == sorted(set(packages))
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", p) for p in packages), packages
    # A library that no package owns is an error, not a silent gap in the runtime image.
    library = next(p for p in _ldd_paths(binary) if "/libc.so" not in p)
    shutil.copy(library, tmp_path)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    out = _runtime_packages(binary, env)
    assert out.returncode == 1 and "no package owns" in out.stderr, out.stderr


# --------------------------------------------------------------------------------------------
# Prometheus and Grafana


def _metric_names(expr):
    """The tpserve metric families an expression reads (_bucket/_sum/_count stripped)."""
    names = set()
    for token in re.findall(r"\btpserve_[a-z0-9_]+", expr):
        for suffix in ("_bucket", "_sum", "_count"):
            if token.endswith(suffix) and token[: -len(suffix)] in HISTOGRAMS:
                token = token[: -len(suffix)]
        names.add(token)
    return names


def _dashboard():
    with open(DEPLOY / "grafana" / "dashboards" / "tpserve.json", encoding="utf-8") as f:
        return json.load(f)


def _panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _expressions(dashboard):
    return [(p["title"], t["expr"]) for p in _panels(dashboard) if p["type"] != "row"
            for t in p["targets"]]


def test_grafana_dashboard_uses_only_tpserve_metrics():
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    used = set()
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in _panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "prometheus", panel["title"]
        for target in panel["targets"]:
            names = _metric_names(target["expr"])
            assert names, f"{panel['title']}: {target['expr']} reads no tpserve metric"
            assert names <= METRICS, f"{panel['title']}: unknown {names - METRICS}"
            for h in names & HISTOGRAMS:
                # Histograms are read as quantiles over their buckets' per-second rate.
                assert re.search(rf"histogram_quantile\(0\.\d+, sum by \([a-z, ]*le[a-z, ]*\) "
                                 rf"\(rate\({h}_bucket\[1m\]\)\)\)", target["expr"]), target["expr"]
            used |= names
    expected = {"tpserve_time_to_first_token_seconds", "tpserve_inter_token_latency_seconds",
                "tpserve_generated_tokens_total", "tpserve_requests_running",
                "tpserve_requests_waiting", "tpserve_kv_cache_usage_ratio", "tpserve_worker_up",
                "tpserve_step_duration_seconds", "tpserve_worker_step_duration_seconds",
                "tpserve_worker_allreduce_duration_seconds"}
    assert expected <= used, f"no panel for {expected - used}"
    for metric in ("tpserve_time_to_first_token_seconds", "tpserve_inter_token_latency_seconds"):
        quantiles = {float(q) for _, e in _expressions(dashboard) if metric in e
                     for q in re.findall(r"histogram_quantile\((0\.\d+)", e)}
        assert {0.5, 0.9, 0.99} <= quantiles, metric


def test_grafana_queries_are_valid_promql(tmp_path):
    """promtool (Debian `prometheus`) parses every panel query as a recording rule."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"tpserve:dashboard_query_{i}", "expr": expr}
        for i, (_, expr) in enumerate(_expressions(_dashboard()))]}]}
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_grafana_provisioning():
    provisioning = DEPLOY / "grafana" / "provisioning"
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    (ds,) = datasources["datasources"]
    assert ds["type"] == "prometheus" and ds["uid"] == "prometheus"
    assert ds["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((provisioning / "dashboards" / "tpserve.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


def test_prometheus_config_scrapes_coordinator_and_workers(tmp_path):
    path = DEPLOY / "prometheus" / "prometheus.yml"
    config = yaml.safe_load(path.read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"]
               for t in sc["targets"]}
    assert targets == {"coordinator:9090", "worker0:9091", "worker1:9091"}
    for job in config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"
    promtool = shutil.which("promtool")
    if promtool is not None:
        out = subprocess.run([promtool, "check", "config", str(path)], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
