"""Multi-host tensor parallelism on one machine: three `tpserve worker` processes, each in
its own network namespace with its own address and its own /dev/shm (a private tmpfs in a
mount namespace of its own, so no two share memory, as on separate hosts), and the `tpserve
generate` client in a coordinator namespace, all joined by a bridge in a dedicated namespace.
`--comm auto` must choose Gloo, which runs between the namespaces' addresses (10.231.0.0/24,
only ever these); `--comm shm` must be refused. The tokens must equal the offline ones (which
test_tensor_parallel.py shows loopback worlds reproduce exactly) in exact mode, --dequantize:
on the fast path a split sum may round an activation differently and part at a near tie.
Coordinator and workers authenticate each other with mutual TLS (a cluster CA made here with
openssl; the workers' certificate names their addresses), as workers on other hosts must.

A link dropped between the hosts (`ip link set down`, then up) under streams loses none.

Skips with the reason when namespaces cannot be made (not root, no `ip`, no netns support).
Every namespace and link made here is removed in a finalizer."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
import prompts as reference_prompts  # noqa: E402
import pki  # noqa: E402
from worker_procs import generate_ids, stop  # noqa: E402

BRIDGE_NS = "tps-br"
CLIENT_NS = "tps-c"
WORKER_NS = ["tps-w0", "tps-w1", "tps-w2"]
ADDRESS = {CLIENT_NS: "10.231.0.10", "tps-w0": "10.231.0.11", "tps-w1": "10.231.0.12",
           "tps-w2": "10.231.0.13"}
PORT = 50051
MAX_TOKENS = 64
PROMPTS = [reference_prompts.PROMPTS[0], reference_prompts.PROMPTS[11]]  # raw and chat
HERE = os.path.dirname(os.path.abspath(__file__))


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def _in(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


@pytest.fixture(scope="module")
def network(request):
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2)")
    existing = _ip("netns", "list").stdout
    for ns in [BRIDGE_NS, CLIENT_NS, *WORKER_NS]:
        if ns in existing.split():
            pytest.skip(f"namespace {ns} already exists (another run?); not touching it")
    made = []

    def cleanup():
        # Deleting a namespace deletes the links inside it (and their veth peers).
        for ns in reversed(made):
            _ip("netns", "del", ns, check=False)
    request.addfinalizer(cleanup)
    try:
        _ip("netns", "add", BRIDGE_NS)
        made.append(BRIDGE_NS)
        _ip("-n", BRIDGE_NS, "link", "add", "br0", "type", "bridge")
        _ip("-n", BRIDGE_NS, "link", "set", "br0", "up")
        for ns in [CLIENT_NS, *WORKER_NS]:
            _ip("netns", "add", ns)
            made.append(ns)
            # Created inside `ns`, the peer end moved straight to the bridge namespace.
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"{ns}-p",
                "netns", BRIDGE_NS)
            _ip("-n", BRIDGE_NS, "link", "set", f"{ns}-p", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{ADDRESS[ns]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot build the namespaces: {' '.join(e.cmd)}: {e.stderr.strip()}")
    return made


def _own_dev_shm(*cmd):
    """`cmd` in a mount namespace of its own with a private /dev/shm: another host's memory."""
    if shutil.which("unshare") is None:
        pytest.skip("no `unshare` command (util-linux)")
    script = 'mount -t tmpfs -o size=64m tpserve-test /dev/shm && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *cmd]


@pytest.fixture(scope="module")
def worker_logs(tmp_path_factory):
    return tmp_path_factory.mktemp("netns-workers")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Mutual TLS between the coordinator and the workers, from a CA made here: the workers'
    certificate names their three addresses. {"worker": flags, "coordinator": flags, "probe":
    (ca, key, cert) paths for the health probe, which presents the coordinator's certificate}."""
    d = tmp_path_factory.mktemp("netns-pki")
    ca = pki.make_ca(d, "ca")
    sans = ",".join(f"IP:{ADDRESS[ns]}" for ns in WORKER_NS)
    worker = pki.make_cert(d, "worker", ca, f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n")
    coordinator = pki.make_cert(d, "coordinator", ca, pki.CLIENT_EXT)

    def flags(pair):
        return [f"--cluster_ca_file={ca[1]}", f"--cluster_cert_file={pair[1]}",
                f"--cluster_key_file={pair[0]}"]
    return {"worker": flags(worker), "coordinator": flags(coordinator),
            "probe": [str(ca[1]), str(coordinator[0]), str(coordinator[1])]}


@pytest.fixture(scope="module")
def workers(request, network, tpserve_bin, worker_logs, smollm_gguf, cluster):
    procs = []
    request.addfinalizer(lambda: stop(procs))
    addresses = [f"{ADDRESS[ns]}:{PORT}" for ns in WORKER_NS]
    for ns, address in zip(WORKER_NS, addresses):
        log = open(worker_logs / f"{ns}.log", "wb")
        procs.append(subprocess.Popen(
            _in(ns, *_own_dev_shm(str(tpserve_bin), "worker", f"--listen={address}",
                                  f"--model_root={smollm_gguf.parent}", *cluster["worker"])),
            stdout=subprocess.DEVNULL, stderr=log))
        log.close()
    # Health is probed from the coordinator's namespace: the only place that reaches them.
    probe = ("import sys, grpc; from worker_procs import wait_healthy; "
             "ca, key, cert = (open(p, 'rb').read() for p in sys.argv[1:4]); "
             "creds = grpc.ssl_channel_credentials(ca, key, cert); "
             "[wait_healthy(a, credentials=creds) for a in sys.argv[4:]]")
    subprocess.run(_in(CLIENT_NS, sys.executable, "-c", probe, *cluster["probe"], *addresses),
                   check=True, timeout=90, env={**os.environ, "PYTHONPATH": HERE})
    yield addresses
    assert stop(procs) == [0] * len(procs)


@pytest.mark.parametrize("prompt", PROMPTS, ids=[p["name"] for p in PROMPTS])
def test_three_hosts_match_offline(tpserve_bin, smollm_gguf, workers, worker_logs, cluster,
                                   prompt):
    want, _ = generate_ids([], tpserve_bin, smollm_gguf, prompt["text"], prompt["chat"],
                           MAX_TOKENS, extra=["--dequantize"])
    got, _ = generate_ids(_in(CLIENT_NS), tpserve_bin, smollm_gguf, prompt["text"],
                          prompt["chat"], MAX_TOKENS, workers=workers,
                          extra=["--dequantize", *cluster["coordinator"]])
    assert got == want
    for ns in WORKER_NS:
        log = (worker_logs / f"{ns}.log").read_text()
        assert "communicator gloo" in log and "communicator shm" not in log, log[-2000:]


def test_shared_memory_across_hosts_is_refused(tpserve_bin, smollm_gguf, workers, cluster):
    out = subprocess.run(_in(CLIENT_NS, str(tpserve_bin), "generate", f"--model={smollm_gguf}",
                             "--prompt=hi", "--max_tokens=2", f"--workers={','.join(workers)}",
                             "--comm=shm", *cluster["coordinator"]),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "COMM_BACKEND_SHM needs every rank on one host" in out.stderr, out.stderr[-2000:]


def _coordinator(tpserve_bin, smollm_gguf, port, log_path, workers, cluster, *flags):
    """`tpserve coordinator` in the client namespace over `workers`, once it serves."""
    with open(log_path, "wb") as log:
        coordinator = subprocess.Popen(
            _in(CLIENT_NS, str(tpserve_bin), "coordinator", f"--model={smollm_gguf}",
                "--host=127.0.0.1", f"--port={port}", f"--workers={','.join(workers)}",
                *flags, *cluster["coordinator"]),
            stdout=log, stderr=subprocess.STDOUT)
    try:
        probe = "import sys; from worker_procs import wait_healthy; wait_healthy(sys.argv[1], 120)"
        subprocess.run(_in(CLIENT_NS, sys.executable, "-c", probe, f"127.0.0.1:{port}"),
                       check=True, timeout=150, env={**os.environ, "PYTHONPATH": HERE})
    except BaseException:
        _stop_coordinator(coordinator)
        raise
    return coordinator


def _stop_coordinator(coordinator):
    coordinator.send_signal(signal.SIGTERM)
    try:
        coordinator.wait(timeout=60)
    except subprocess.TimeoutExpired:
        coordinator.kill()
        coordinator.wait(timeout=30)


def test_a_link_dropped_and_restored_loses_no_stream(tpserve_bin, binary, smollm_gguf, workers,
                                                     worker_logs, cluster):
    """`tpserve coordinator` in the client namespace over the three worker hosts, 3 greedy
    streams; rank 1's link goes down for 4 s (`ip link set down`), then up. The coordinator
    finds rank 1 silent within its hang timeout and rebuilds the world once the link is back;
    every stream ends with the text of an undisturbed run, with no client resume."""
    port = 50061
    log_path = worker_logs / "coordinator.log"
    coordinator = _coordinator(tpserve_bin, smollm_gguf, port, log_path, workers, cluster)
    try:
        cli = binary("clients", "cpp", "tpserve-cli")

        def streams():
            return [subprocess.Popen(
                _in(CLIENT_NS, str(cli), f"--server=127.0.0.1:{port}", "--max_resumes=0",
                    "--timeout_s=240", "generate", "--temperature=0", "--max_tokens=96",
                    "--ignore_eos", f"Write about {subject}."),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for subject in ("rivers", "bridges", "clocks")]

        def outputs(procs):
            out = [p.communicate(timeout=300) for p in procs]
            assert all(p.returncode == 0 for p in procs), [o[1][-1000:] for o in out]
            return [o[0] for o in out]

        undisturbed = outputs(streams())
        # Over Gloo at three ranks a sum must not depend on the batch: runs that batch the
        # streams differently agree.
        assert outputs(streams()) == undisturbed, "two undisturbed runs differ"
        running = streams()
        time.sleep(2.0)
        _ip("-n", WORKER_NS[1], "link", "set", "eth0", "down")
        time.sleep(4.0)
        _ip("-n", WORKER_NS[1], "link", "set", "eth0", "up")
        assert outputs(running) == undisturbed
        text = log_path.read_text(errors="replace")
        assert "worker rank 1 " in text and "hung or stopped" in text, text[-3000:]
    finally:
        _stop_coordinator(coordinator)


def test_a_host_lost_for_good_shrinks_the_world_and_grows_it_back(tpserve_bin, binary,
                                                                  smollm_gguf, workers,
                                                                  worker_logs, cluster):
    """The elastic world across hosts: `tpserve coordinator --min_world_size=2
    --rejoin_timeout_s=2` over the three worker hosts, 2 greedy and 2 seeded streams; rank 2's
    link goes down for good mid-stream. The coordinator finds it silent, waits out the rejoin
    timeout, and serves on at 2 (re-planned shards: both remaining workers load their new
    slices); every stream ends with the tokens of an undisturbed run at 3 (the canonical path:
    the same logits at every world size), with no client resume. When the link comes back,
    the world grows back to 3."""
    port = 50071
    log_path = worker_logs / "coordinator-elastic.log"
    coordinator = _coordinator(tpserve_bin, smollm_gguf, port, log_path, workers, cluster,
                               "--min_world_size=2", "--rejoin_timeout_s=2")
    try:
        cli = binary("clients", "cpp", "tpserve-cli")

        def streams():
            runs = [("rivers", ["--temperature=0"]), ("bridges", ["--temperature=0"]),
                    ("clocks", ["--temperature=0.8", "--seed=11"]),
                    ("maps", ["--temperature=0.8", "--top_p=0.9", "--seed=12"])]
            return [subprocess.Popen(
                _in(CLIENT_NS, str(cli), f"--server=127.0.0.1:{port}", "--max_resumes=0",
                    "--timeout_s=300", "generate", *flags, "--max_tokens=128", "--ignore_eos",
                    f"Write about {subject}."),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for subject, flags in runs]

        def outputs(procs):
            out = [p.communicate(timeout=360) for p in procs]
            assert all(p.returncode == 0 for p in procs), [o[1][-1000:] for o in out]
            return [o[0] for o in out]

        def worlds():
            return re.findall(r"world generation \d+ up: (\d) of 3", log_path.read_text(
                errors="replace"))

        undisturbed = outputs(streams())
        running = streams()
        time.sleep(3.0)
        _ip("-n", WORKER_NS[2], "link", "set", "eth0", "down")
        assert outputs(running) == undisturbed
        assert worlds()[-1] == "2", worlds()
        text = log_path.read_text(errors="replace")
        assert f"worker 2 ({workers[2]}) lost" in text, text[-3000:]
        _ip("-n", WORKER_NS[2], "link", "set", "eth0", "up")
        deadline = time.monotonic() + 120
        while worlds()[-1] != "3":
            assert time.monotonic() < deadline, f"the world did not grow back: {worlds()}"
            time.sleep(0.2)
        assert outputs(streams()) == undisturbed, "the grown world answers differently"
    finally:
        _ip("-n", WORKER_NS[2], "link", "set", "eth0", "up", check=False)
        _stop_coordinator(coordinator)
