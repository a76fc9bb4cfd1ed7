"""`tpserve serve` over shared memory, its default when every worker is on one host (both
the collectives and the coordinator's step link), on one server started the default way
(--threads unset, --step_timeout_s 5), in this order:

- each worker takes its share of the CPUs (usable CPUs / workers, at least 1), and an idle
  server burns no CPU (nothing polls between steps);
- a segment left in /dev/shm by a killed world (its creator's pid dead) is removed when the
  next world is made;
- a rank stopped with SIGSTOP is seen within --hang_timeout_s (2 s, the default; its
  heartbeats stop), well before --step_timeout_s: health NOT_SERVING, the log names that rank,
  serve kills and restarts it, the world is rebuilt and the streams complete with exactly the
  tokens of an undisturbed run;
- a rank SIGKILLed while the streams run (so in the middle of its collectives): its peer's step
  fails at once (the coordinator sees the broken stream and aborts it), not at the deadline;
  the world is rebuilt and the streams complete token-identical;
- the whole world SIGKILLed leaves no segment behind.
The undisturbed runs come from test_serve's server (`stub`)."""
import os
import signal
import subprocess
import time

import grpc
import pytest

import serve_procs
from test_serve import (RPC_S, STREAM_S, SUBJECTS, TP, LENGTH, channel, generate,  # noqa: F401
                        greedy, server, stub)
from tpserve.v1 import generate_pb2 as pb
from tpserve.v1 import generate_pb2_grpc as pb_grpc

STEP_TIMEOUT_S = 5
HANG_TIMEOUT_S = 2  # serve's default


def _pid_namespace():
    link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    return link[link.index("[") + 1:link.index("]")]


def _dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _segments_of(pids):
    names = [f for f in os.listdir("/dev/shm") if f.startswith("tpserve-shm.")]
    return [f for f in names if any(f".{pid}." in f for pid in pids)]


@pytest.fixture(scope="module")
def stale_segment():
    """A segment as a world killed while making it would leave: made before the server starts."""
    path = f"/dev/shm/tpserve-shm.{_pid_namespace()}.{_dead_pid()}.00000000deadbeef"
    with open(path, "wb") as f:
        f.write(b"\0" * 4096)
    yield path
    if os.path.exists(path):
        os.unlink(path)


@pytest.fixture(scope="module")
def shm_server(request, tmp_path_factory, tpserve_bin, smollm_gguf, stale_segment):
    log = tmp_path_factory.mktemp("serve-shm") / "serve.log"
    server = serve_procs.start(tpserve_bin, smollm_gguf, log, tp=TP,
                               step_timeout_s=STEP_TIMEOUT_S)
    request.addfinalizer(lambda: serve_procs.cleanup(server))
    serve_procs.wait_serving(server, timeout_s=120)
    assert len(server.workers) == TP, server.log_tail()
    return server


def _cpu_seconds(pids):
    total = 0
    for pid in pids:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def shm_stub(request, shm_server):
    ch = grpc.insecure_channel(shm_server.address)
    request.addfinalizer(ch.close)
    return pb_grpc.GenerationStub(ch)


def _finish(calls, heads):
    got = []
    for c, head in zip(calls, heads):
        ids = list(head.token_ids)
        for m in c:
            ids.extend(m.token_ids)
        got.append(ids)
    return got


def _requests(n, offset):
    return [greedy(max_tokens=40, ignore_eos=True, prompt=f"Write about {SUBJECTS[offset + i]}.")
            for i in range(n)]


def test_workers_share_the_cpus_and_an_idle_server_burns_none(shm_server, shm_stub):
    want = max(1, len(os.sched_getaffinity(0)) // TP)
    log = shm_server.log_tail(1 << 20)
    for rank in range(TP):
        assert f"Ready: rank {rank} " in log and f"B, {want} threads, communicator shm, " \
            "steps over the shared-memory link" in log, log[-3000:]
    assert "steps over the shared-memory link" in log
    generate(shm_stub, greedy(max_tokens=4, prompt="Warm up."))
    time.sleep(1.5)  # the last step's polling is over
    pids = [shm_server.pid] + [pid for pid, _ in shm_server.workers]
    before, start = _cpu_seconds(pids), time.monotonic()
    time.sleep(3)
    used = (_cpu_seconds(pids) - before) / (time.monotonic() - start)
    assert used < 0.05, f"an idle server used {used:.0%} of a core"


def test_world_is_over_shm_and_stale_segments_are_gone(shm_server, shm_stub, stale_segment):
    info = shm_stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=RPC_S)
    assert info.world_size == TP and info.backend == "shm", info
    assert not os.path.exists(stale_segment), "the dead world's segment is still there"
    assert "removed the segment of a killed world" in shm_server.log_tail(1 << 20)
    assert _segments_of([pid for pid, _ in shm_server.workers]) == [], \
        "a running world keeps no name in /dev/shm"


def test_sigstopped_rank_is_seen_within_the_hang_timeout(shm_server, shm_stub, stub):
    reqs = _requests(2, 0)
    alone = [generate(stub, r).ids for r in reqs]
    calls = [shm_stub.Generate(r, timeout=STREAM_S) for r in reqs]
    heads = [next(c) for c in calls]
    victim = shm_server.workers[1]
    os.kill(victim[0], signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        while serve_procs.health_status(shm_server.address) == serve_procs.SERVING:
            assert time.monotonic() - stopped < HANG_TIMEOUT_S + 5, \
                "a stopped rank went unseen past the hang timeout"
            time.sleep(0.05)
        seen = time.monotonic() - stopped
    finally:
        if serve_procs.alive(*victim):
            os.kill(victim[0], signal.SIGCONT)
    assert seen <= HANG_TIMEOUT_S + 1.0, f"seen after {seen:.1f}s"
    assert _finish(calls, heads) == alone
    log = shm_server.log_tail(1 << 20)
    assert "is down: worker rank 1 " in log and "hung or stopped" in log, log[-3000:]
    assert "missed its deadline" not in log
    assert "killing worker rank 1 " in log, log[-3000:]
    assert not serve_procs.alive(*victim), "the hung child was not killed"


def test_sigkilled_rank_mid_collective_fails_the_step_at_once(shm_server, shm_stub, stub):
    serve_procs.wait_serving(shm_server, timeout_s=120)  # the world rebuilt after the stop
    reqs = _requests(3, 2)
    alone = [generate(stub, r).ids for r in reqs]
    calls = [shm_stub.Generate(r, timeout=STREAM_S) for r in reqs]
    heads = [next(c) for c in calls]
    log_before = len(shm_server.log_tail(1 << 22))
    os.kill(shm_server.workers[1][0], signal.SIGKILL)
    killed = time.monotonic()
    assert _finish(calls, heads) == alone
    took = time.monotonic() - killed
    log = shm_server.log_tail(1 << 22)[log_before:]
    down = [line for line in log.splitlines() if "is down: worker rank" in line]
    assert down, log[-3000:]
    assert "missed its deadline" not in down[0], down[0]
    # Rebuilt and the rest of the streams computed well before a step could time out twice.
    assert took < 4 * STEP_TIMEOUT_S, f"{took:.1f}s"


def test_a_killed_world_leaves_no_segment(shm_server):
    serve_procs.wait_serving(shm_server, timeout_s=120)
    pids = [pid for pid, _ in shm_server.workers]
    serve_procs.kill_group(shm_server)
    serve_procs.kill_workers(shm_server)
    assert serve_procs.wait_workers_gone(shm_server) == []
    assert _segments_of(pids) == []
