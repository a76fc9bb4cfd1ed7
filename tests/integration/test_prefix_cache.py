"""Prefix caching (`serve --prefix_caching`, on by default) end to end on SmolLM2: requests
that share a long system prompt get exactly the tokens they get with caching off, greedy and
seeded, one after the other and in a concurrent batch, at TP=1 and TP=2; the hit metric shows
the reuse, a second chat turn reuses the first turn's blocks, an idle server's KV is cached
but evictable, and under memory pressure cached blocks are evicted while no request is
preempted or refused. Every RPC has a deadline; the servers are stopped in finalizers."""
import concurrent.futures
import os
import signal
import time

import grpc
import pytest

import serve_procs
from serve_procs import collect, start_with_metrics
from tpserve.v1 import generate_pb2 as pb
from tpserve.v1 import generate_pb2_grpc as pb_grpc

CALL_S = 180
SYSTEM = ("You are a meticulous assistant for a lighthouse museum. Answer every question "
          "about lighthouses, their keepers, their lamps and lenses, and the ships they "
          "guided, in plain words and in no more than two sentences. ") * 3
QUESTIONS = ["Who kept the lamp lit?", "What is a Fresnel lens?", "Why are towers striped?",
             "How far can the light be seen?"]


def _generate(server, **fields):
    with grpc.insecure_channel(server.address) as ch:
        return collect(pb_grpc.GenerationStub(ch).Generate(pb.GenerateRequest(**fields),
                                                           timeout=CALL_S))


def _info(server):
    with grpc.insecure_channel(server.address) as ch:
        return pb_grpc.GenerationStub(ch).GetModelInfo(pb.GetModelInfoRequest(), timeout=60)


def _chat(question, seeded):
    fields = dict(messages=[pb.ChatMessage(role="system", content=SYSTEM),
                            pb.ChatMessage(role="user", content=question)],
                  max_tokens=12, ignore_eos=True)
    if seeded:
        fields.update(temperature=0.9, seed=17)
    else:
        fields.update(temperature=0.0)
    return fields


def _conversation(server):
    """Three turns, each the whole conversation so far (the previous turns' blocks cached),
    greedy: the ids of each answer."""
    messages = [pb.ChatMessage(role="system", content=SYSTEM)]
    answers = []
    for question in QUESTIONS[:3]:
        messages.append(pb.ChatMessage(role="user", content=question))
        got = _generate(server, messages=messages, max_tokens=16, temperature=0)
        answers.append(got.ids)
        messages.append(pb.ChatMessage(role="assistant", content=got.text))
    return answers


def _workload(server):
    """Each question greedy and seeded, one after the other, then all at once; then a
    multi-turn conversation."""
    alone = [_generate(server, **_chat(q, s)).ids for s in (False, True) for q in QUESTIONS]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        batch = list(pool.map(lambda a: _generate(server, **_chat(*a)).ids,
                              [(q, s) for s in (False, True) for q in QUESTIONS]))
    return alone, batch + _conversation(server)


@pytest.mark.parametrize("tp", [1, 2])
def test_tokens_identical_with_and_without_caching(request, tmp_path_factory, tpserve_bin,
                                                   smollm_gguf, tp):
    cold = start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf, f"off{tp}", tp,
                              prefix_caching=False)
    want_alone, want_batch = _workload(cold)
    assert serve_procs.metric(cold, "tpserve_prefix_cache_hits_total") == 0
    assert not _info(cold).prefix_caching
    serve_procs.stop(cold, timeout_s=60)

    warm = start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf, f"on{tp}", tp)
    assert _info(warm).prefix_caching
    got_alone, got_batch = _workload(warm)
    assert got_alone == want_alone
    assert got_batch == want_batch
    queries = serve_procs.metric(warm, "tpserve_prefix_cache_queries_total")
    hits = serve_procs.metric(warm, "tpserve_prefix_cache_hits_total")
    assert queries > 0 and hits / queries > 0.5, (hits, queries)
    # Idle: nothing held, the prefix still cached.
    deadline = time.time() + 10
    while serve_procs.metric(warm, "tpserve_kv_cache_usage_ratio") != 0:
        assert time.time() < deadline, "KV still held with no request running"
        time.sleep(0.1)
    info = _info(warm)
    assert info.kv_blocks_free == info.kv_blocks_total and info.kv_blocks_cached > 0
    assert serve_procs.metric(warm, "tpserve_prefix_cache_blocks") == info.kv_blocks_cached
    serve_procs.stop(warm, timeout_s=60)


@pytest.fixture(scope="module")
def server(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    srv = start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf, "turns", 2)
    yield srv
    assert serve_procs.stop(srv, timeout_s=60) == 0, srv.log_tail()


def test_second_turn_reuses_the_first(server):
    turn1 = [pb.ChatMessage(role="system", content=SYSTEM),
             pb.ChatMessage(role="user", content="What is a lighthouse?")]
    first = _generate(server, messages=turn1, max_tokens=24, temperature=0)
    hits_before = serve_procs.metric(server, "tpserve_prefix_cache_hits_total")
    turn2 = turn1 + [pb.ChatMessage(role="assistant", content=first.text),
                     pb.ChatMessage(role="user", content="And who keeps it?")]
    _generate(server, messages=turn2, max_tokens=8, temperature=0)
    reused = serve_procs.metric(server, "tpserve_prefix_cache_hits_total") - hits_before
    block = _info(server).kv_block_size
    # At least every full block of the first turn's prompt.
    assert reused >= (first.usage.prompt_tokens // block) * block > 0, reused


def test_world_rebuild_empties_the_cache_and_streams_stay_identical(server):
    """A worker killed while shared-prefix streams run: the world is rebuilt with new KV
    memory, so the cache starts empty; the streams are recomputed and carry exactly the
    tokens of an undisturbed run, and the cache fills and hits again."""
    reqs = [_chat(q, seeded) for q, seeded in zip(QUESTIONS, (False, True, False, True))]
    for r in reqs:
        r["max_tokens"] = 40
    alone = [_generate(server, **r).ids for r in reqs]  # warms the cache too
    assert _info(server).kv_blocks_cached > 0
    with grpc.insecure_channel(server.address) as ch:
        stub = pb_grpc.GenerationStub(ch)
        calls = [stub.Generate(pb.GenerateRequest(**r), timeout=CALL_S) for r in reqs]
        heads = [next(c) for c in calls]  # every stream is running
        os.kill(server.workers[1][0], signal.SIGKILL)
        got = [list(h.token_ids) + [t for m in c for t in m.token_ids]
               for c, h in zip(calls, heads)]
    assert got == alone
    serve_procs.wait_serving(server, timeout_s=120)  # records the new worker
    hits = serve_procs.metric(server, "tpserve_prefix_cache_hits_total")
    again = _generate(server, **reqs[0]).ids
    assert again == alone[0]
    assert serve_procs.metric(server, "tpserve_prefix_cache_hits_total") > hits


def test_pressure_evicts_cached_blocks_before_preempting(request, tmp_path_factory, tpserve_bin,
                                                         smollm_gguf):
    srv = start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf, "pressure", 1,
                             kv_budget_mb=6)
    info = _info(srv)
    assert info.kv_blocks_total < 16, "the budget should leave room for few prompts"
    block = info.kv_block_size
    cached_tokens = 0
    for i in range(8):  # distinct prompts, each fitting alone: the cache must give way
        q = QUESTIONS[i % len(QUESTIONS)]
        got = _generate(srv, prompt=f"{i}. " + " ".join([q] * 6), max_tokens=8,
                        temperature=0, ignore_eos=True)
        assert len(got.ids) == 8
        cached_tokens += got.usage.prompt_tokens
    assert cached_tokens > info.kv_blocks_total * block, (cached_tokens, info.kv_blocks_total)
    assert serve_procs.metric(srv, "tpserve_prefix_cache_evictions_total") > 0
    assert serve_procs.metric(srv, "tpserve_preemptions_total") == 0
    # Two at once, every free block cached: growing as they decode, they need half the cache
    # each, which they get only if cached blocks give way; a running one is never preempted.
    prompts = [f"Two {i}. " + " ".join([QUESTIONS[i]] * 3) for i in range(2)]
    lengths = [_generate(srv, prompt=p, max_tokens=1).usage.prompt_tokens for p in prompts]
    half = (info.kv_blocks_total // 2) * block
    evictions = serve_procs.metric(srv, "tpserve_prefix_cache_evictions_total")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(
            lambda a: _generate(srv, prompt=a[0], max_tokens=half - a[1], temperature=0,
                                ignore_eos=True), zip(prompts, lengths)))
    assert [len(o.ids) for o in outs] == [half - n for n in lengths]
    assert serve_procs.metric(srv, "tpserve_prefix_cache_evictions_total") > evictions
    assert serve_procs.metric(srv, "tpserve_preemptions_total") == 0
    assert serve_procs.stop(srv, timeout_s=60) == 0, srv.log_tail()
