"""`tpserve serve` and `tpserve coordinator` when the world is under strain: a KV cache so
small that requests are preempted and recomputed, a worker killed mid-stream (restarted, the
world rebuilt, the streams continued), and a coordinator over workers started on their own.
Every request must carry exactly the tokens of an undisturbed run on test_serve's roomy
server. Helpers and the reference server come from test_serve."""
import os
import signal

import grpc
import pytest

import serve_procs
import worker_procs
# The fixtures server/channel/stub are imported so that pytest finds them here too.
from test_serve import (FILLER, INVALID, LENGTH, RPC_S, STREAM_S, SUBJECTS, TP, _serve,  # noqa: F401
                        _stop_cleanly, channel, chat, generate, greedy, run_concurrently, server,
                        stub, wait_idle)
from tpserve.v1 import generate_pb2 as pb
from tpserve.v1 import generate_pb2_grpc as pb_grpc


# --- 1b. KV cache exhaustion: preemption by recompute, chunked prefill ---------------------

@pytest.fixture(scope="module")
def tight_stub(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    """A server whose KV cache holds ~96 tokens per worker (3 MiB) and whose steps compute at
    most 24 tokens: a dozen concurrent requests must preempt and re-prefill in chunks."""
    server = _serve(request, tmp_path_factory, tpserve_bin, smollm_gguf, "tight",
                    kv_budget_mb=3, max_batch_tokens=24, max_running=16)
    channel = grpc.insecure_channel(server.address)
    request.addfinalizer(channel.close)
    return server, pb_grpc.GenerationStub(channel)


def test_preemption_by_recompute_keeps_every_token(stub, tight_stub):
    server, tight = tight_stub
    info = tight.GetModelInfo(pb.GetModelInfoRequest(), timeout=RPC_S)
    capacity = info.kv_blocks_total * info.kv_block_size
    assert capacity < 200, f"the tight server holds {capacity} tokens: the test lost its point"
    reqs = []
    for i in range(12):
        r = greedy(max_tokens=18 + i % 7, ignore_eos=True)
        r.prompt = f"Here are some notes about {SUBJECTS[i]}. " + " ".join(FILLER[:1 + i % 3])
        reqs.append(r)
    alone = [generate(stub, r) for r in reqs]  # the roomy main server, one at a time
    too_big = greedy(max_tokens=capacity, prompt="Hello")
    with pytest.raises(grpc.RpcError) as e:
        generate(tight, too_big, timeout=RPC_S)
    assert e.value.code() == INVALID and "KV cache capacity" in e.value.details(), e.value
    batched = run_concurrently(tight, reqs)
    differ = [i for i, (a, b) in enumerate(zip(alone, batched)) if a.ids != b.ids]
    assert not differ, f"requests {differ} changed under preemption"
    assert all(b.finish_reason == LENGTH for b in batched)
    wait_idle(tight)
    log = server.log_tail(1 << 20)
    assert "preempted" in log, "the KV cache never ran out: no preemption happened"


# --- 1c. a worker dies mid-stream ------------------------------------------------------------

def test_killed_worker_is_restarted_and_streams_continue(request, tmp_path_factory, tpserve_bin,
                                                          smollm_gguf, stub):
    """SIGKILL of one worker child: serve restarts it, the coordinator rebuilds the world and
    recomputes the running sequences from their token history; the streams go on and carry
    exactly the tokens of an undisturbed run."""
    server = _serve(request, tmp_path_factory, tpserve_bin, smollm_gguf, "serve-kill")
    channel = grpc.insecure_channel(server.address)
    request.addfinalizer(channel.close)
    victim = pb_grpc.GenerationStub(channel)
    reqs = [greedy(max_tokens=40, ignore_eos=True, prompt=f"Write about {SUBJECTS[i]}.")
            for i in range(3)]
    alone = [generate(stub, r) for r in reqs]
    calls = [victim.Generate(r, timeout=STREAM_S) for r in reqs]
    first = [next(c) for c in calls]  # every stream is running
    os.kill(server.workers[1][0], signal.SIGKILL)
    got = []
    for c, head in zip(calls, first):
        ids = list(head.token_ids)
        reason = head.finish_reason
        for m in c:
            ids.extend(m.token_ids)
            reason = m.finish_reason
        got.append((ids, reason))
    for i, ((ids, reason), a) in enumerate(zip(got, alone)):
        assert ids == a.ids, f"request {i} changed across the worker's death"
        assert reason == LENGTH
    assert serve_procs.health_status(server.address) == 1  # SERVING
    log = server.log_tail(1 << 20)
    assert "died" in log and "recomputing" in log, log[-3000:]
    _stop_cleanly(server)


# --- 1d. `tpserve coordinator` over workers started on their own ----------------------------

def test_coordinator_over_separately_started_workers(request, tmp_path, tpserve_bin, smollm_gguf,
                                                      stub):
    """The multi-host shape on loopback: two `tpserve worker` processes, then `tpserve
    coordinator --workers`; its answers equal `serve`'s."""
    workers, addresses = worker_procs.start_local(request, tpserve_bin, smollm_gguf, tmp_path, TP)
    server = serve_procs.start(tpserve_bin, smollm_gguf, tmp_path / "coordinator.log",
                               command="coordinator", threads=1, workers=",".join(addresses))
    request.addfinalizer(lambda: serve_procs.cleanup(server))
    serve_procs.wait_serving(server, timeout_s=120)
    with grpc.insecure_channel(server.address) as channel:
        coordinator = pb_grpc.GenerationStub(channel)
        info = coordinator.GetModelInfo(pb.GetModelInfoRequest(), timeout=RPC_S)
        assert info.world_size == TP and info.ready
        for i in range(3):
            req = greedy(max_tokens=12, messages=chat(("user", f"Tell me about {SUBJECTS[i]}.")))
            assert generate(coordinator, req).ids == generate(stub, req).ids
    assert serve_procs.stop(server, timeout_s=60) == 0, server.log_tail()
    assert all(w.poll() is None for w in workers), "the workers must outlive the coordinator"
