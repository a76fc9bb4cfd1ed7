"""tpserve-cli across a coordinator restart: `tpserve coordinator` over two separately
started `tpserve worker`s (TP=2, SmolLM2) is frozen once the CLI has printed part of its
answer, SIGKILLed, and a new coordinator starts on the same port over the same workers. The
CLI resends the request with the token ids it holds (GenerateRequest.resume) and its output
equals an undisturbed run's: greedy as text, sampled (the seed the server reported) as token
ids. With --max_resumes=0 the break is the CLI's error. tpserve-bench, restarted under, counts
its resumes and receives every token exactly once. Every process and wait is bounded."""
import json
import os
import re
import select
import signal
import subprocess
import time

import grpc
import pytest

import serve_procs
import worker_procs
from tpserve.v1 import generate_pb2 as pb
from tpserve.v1 import generate_pb2_grpc as pb_grpc

TP = 2
CLI_S = 60  # a whole CLI run, the restart included
PROMPT = "Write a short story about a lighthouse keeper."


class World:
    """Workers that outlive coordinators, and the coordinator of the moment on one port."""

    def __init__(self, tpserve_bin, model, tmp_path):
        self.tpserve_bin, self.model, self.tmp_path = tpserve_bin, model, tmp_path
        self.ports = [worker_procs.free_port() for _ in range(TP)]
        self.workers = []
        self.coordinator = None
        self.port = None
        self.restarts = 0

    def start_workers(self):
        for rank, port in enumerate(self.ports):
            with open(self.tmp_path / f"worker{rank}.log", "wb") as log:
                self.workers.append(subprocess.Popen(
                    [str(self.tpserve_bin), "worker", f"--listen=127.0.0.1:{port}",
                     f"--model_root={self.model.parent}"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
        for port in self.ports:
            worker_procs.wait_healthy(f"127.0.0.1:{port}")

    def start_coordinator(self):
        log = self.tmp_path / f"coordinator{self.restarts}.log"
        self.coordinator = serve_procs.start(
            self.tpserve_bin, self.model, log, port=self.port, command="coordinator", threads=1,
            workers=",".join(f"127.0.0.1:{p}" for p in self.ports))
        self.port = int(self.coordinator.address.rsplit(":", 1)[1])
        serve_procs.wait_serving(self.coordinator, timeout_s=60)

    def restart_coordinator(self):
        """SIGKILL of the coordinator (frozen or not), then a new one on the same port."""
        serve_procs.kill_group(self.coordinator)
        self.restarts += 1
        self.start_coordinator()

    @property
    def address(self):
        return self.coordinator.address

    def close(self):
        if self.coordinator is not None:
            serve_procs.cleanup(self.coordinator)
        worker_procs.stop(self.workers)


@pytest.fixture
def world(request, tmp_path, tpserve_bin, smollm_gguf):
    w = World(tpserve_bin, smollm_gguf, tmp_path)
    request.addfinalizer(w.close)
    w.start_workers()
    w.start_coordinator()
    return w


@pytest.fixture
def cli(binary):
    return binary("clients", "cpp", "tpserve-cli")


def run(cli, world, *args):
    out = subprocess.run([str(cli), f"--server={world.address}", *args], capture_output=True,
                         timeout=CLI_S)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return out.stdout


def run_across_restart(cli, world, *args, min_bytes=16):
    """Runs the CLI; once it has printed `min_bytes` bytes, freezes the coordinator (SIGSTOP:
    the stream stops where it is), checks that the CLI is still waiting for the rest, and
    restarts the coordinator. Returns (stdout bytes, stderr text, exit code)."""
    proc = subprocess.Popen([str(cli), f"--server={world.address}", *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        head = bytearray()
        deadline = time.monotonic() + CLI_S
        while len(head) < min_bytes and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 4096)
                assert chunk, f"the CLI ended before printing {min_bytes} bytes: {bytes(head)!r}"
                head += chunk
        os.kill(world.coordinator.pid, signal.SIGSTOP)
        assert len(head) >= min_bytes, f"the CLI printed only {bytes(head)!r}"
        time.sleep(0.2)  # a CLI that had everything would exit now
        assert proc.poll() is None, "the stream ended before the coordinator stopped"
        world.restart_coordinator()
        rest, err = proc.communicate(timeout=CLI_S)
        return bytes(head) + rest, err.decode(errors="replace"), proc.returncode
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def resumed_after(stderr):
    """Token counts of the CLI's "resuming after N tokens: ..." lines."""
    return [int(n) for n in re.findall(r"resuming after (\d+) tokens: ", stderr)]


def test_greedy_text_continues_across_a_coordinator_restart(cli, world):
    args = ("generate", "--chat_template", "--temperature=0", "--max_tokens=48", "--ignore_eos",
            PROMPT)
    want = run(cli, world, *args)
    got, stderr, code = run_across_restart(cli, world, *args)
    assert code == 0, stderr
    counts = resumed_after(stderr)
    assert counts and 0 < counts[0] < 48, stderr
    assert "UNAVAILABLE" in stderr, stderr
    assert got.decode() == want.decode(), stderr


def test_sampled_tokens_continue_with_the_reported_seed(cli, world):
    args = ("generate", "--json", "--temperature=0.9", "--max_tokens=48", "--ignore_eos", PROMPT)
    got, stderr, code = run_across_restart(cli, world, *args, min_bytes=400)
    assert code == 0, stderr
    assert resumed_after(stderr), stderr
    lines = [json.loads(line) for line in got.decode().splitlines()]
    seeds = {line["seed"] for line in lines if "seed" in line}
    assert len(seeds) == 1, seeds  # every stream of the call reported the same seed
    request_ids = {line["request_id"] for line in lines}
    assert len(request_ids) == 1, request_ids  # the resend kept the server's request id
    want = [json.loads(line) for line in
            run(cli, world, *args, f"--seed={seeds.pop()}").decode().splitlines()]
    ids = [i for line in lines for i in line["token_ids"]]
    assert len(ids) == 48
    assert ids == [i for line in want for i in line["token_ids"]]
    assert "".join(line["text"] for line in lines) == "".join(line["text"] for line in want)
    assert lines[-1]["finish_reason"] == "length"


def test_max_resumes_zero_fails_on_the_break(cli, world):
    args = ("generate", "--max_resumes=0", "--temperature=0", "--max_tokens=48", "--ignore_eos",
            PROMPT)
    got, stderr, code = run_across_restart(cli, world, *args, min_bytes=8)
    assert code == 14, (code, stderr)  # UNAVAILABLE
    assert "UNAVAILABLE" in stderr and not resumed_after(stderr), stderr


def wait_running(address, timeout_s=CLI_S):
    """Polls GetModelInfo until a request runs."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.GenerationStub(channel)
        while time.monotonic() < deadline:
            if stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10).requests_running > 0:
                return
            time.sleep(0.01)
    raise TimeoutError("no request started running")


def test_bench_counts_resumes_and_receives_every_token_once(binary, world, tmp_path):
    bench = binary("clients", "cpp", "tpserve-bench")
    out_json = tmp_path / "bench.json"
    proc = subprocess.Popen(
        [str(bench), f"--server={world.address}", "--requests=4", "--concurrency=4",
         "--prompt_len=fixed:16", "--output_len=fixed:64", "--warmup=0",
         f"--json_out={out_json}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_running(world.address)
        time.sleep(0.05)
        os.kill(world.coordinator.pid, signal.SIGSTOP)
        world.restart_coordinator()
        _, stderr = proc.communicate(timeout=CLI_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, stderr
    s = json.loads(out_json.read_text())
    assert s["ok"] == 4 and s["errors"] == {}, s
    assert s["resumes"] >= 1, s
    assert s["output_tokens"] == 4 * 64, s  # none lost, none twice
    assert f"{s['resumes']} resumes" in stderr, stderr
