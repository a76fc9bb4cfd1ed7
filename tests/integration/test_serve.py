"""`tpserve serve`: the public gRPC API end to end — SmolLM2 on a tensor-parallel world of two
worker processes (Gloo on CPU), driven through tpserve.v1.Generation, grpc.health.v1 and
reflection.

One server (limits set apart from the defaults, so GetModelInfo and the error messages show
the flags were read; --reflection) serves most tests; a second one with --max_running=1
--max_queue=2 and reflection left at its default (off) serves the queue-full test, and a third is drained with SIGTERM and must
exit. Every RPC has a deadline and every process wait a timeout; the servers are stopped in
finalizers, their process groups SIGKILLed when they do not exit. Budget: about three minutes
on two cores, where a decoding step of world size 2 takes ~0.1 s — short prompts, at most 16
tokens per request but for the cancel, deadline and drain streams; the 64 requests of the
batch test, run alone one after the other first, take most of it."""
import concurrent.futures
import itertools
import re
import signal
import threading
import time

import grpc
import pytest

import serve_procs
from serve_procs import collect
from tpserve.v1 import generate_pb2 as pb
from tpserve.v1 import generate_pb2_grpc as pb_grpc

TP = 2
# The main server's limits: set apart from the defaults, and from each other, so that a
# number in an error message and in GetModelInfo can only come from the right flag.
LIMITS = {"max_input_tokens": 300, "max_total_tokens": 1400, "max_new_tokens": 1200,
          "max_queue": 200, "max_running": 64, "max_stop_sequences": 5,
          "max_batch_tokens": 512, "kv_budget_mb": 256}
RPC_S = 30  # deadline of unary calls
STREAM_S = 180  # deadline of a stream of a few dozen tokens, even in a batch of 64 on 2 cores

LENGTH = pb.FINISH_REASON_LENGTH
STOP = pb.FINISH_REASON_STOP
EOS = pb.FINISH_REASON_EOS
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _serve(request, tmp_path_factory, tpserve_bin, model, name, **flags):
    log = tmp_path_factory.mktemp(name) / "serve.log"
    server = serve_procs.start(tpserve_bin, model, log, tp=TP, threads=1, **flags)
    request.addfinalizer(lambda: serve_procs.cleanup(server))  # bounded, idempotent
    serve_procs.wait_serving(server, timeout_s=120)
    assert len(server.workers) == TP, \
        f"expected {TP} worker children of serve, found {server.workers}:\n{server.log_tail()}"
    return server


def _stop_cleanly(server):
    code = serve_procs.stop(server, timeout_s=60)
    left = serve_procs.wait_workers_gone(server)
    serve_procs.kill_workers(server)
    assert code == 0, f"serve exited with {code} on SIGTERM:\n{server.log_tail()}"
    assert left == [], f"workers {left} outlived serve"


@pytest.fixture(scope="module")
def server(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    srv = _serve(request, tmp_path_factory, tpserve_bin, smollm_gguf, "serve", reflection=True,
                 **LIMITS)
    yield srv
    _stop_cleanly(srv)


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(server.address) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel):
    return pb_grpc.GenerationStub(channel)


@pytest.fixture(scope="module")
def info(stub):
    return stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=RPC_S)


@pytest.fixture(scope="module")
def small_server(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    srv = _serve(request, tmp_path_factory, tpserve_bin, smollm_gguf, "serve-small",
                 max_running=1, max_queue=2)  # reflection off: the default
    yield srv
    _stop_cleanly(srv)


@pytest.fixture(scope="module")
def small_stub(small_server):
    with grpc.insecure_channel(small_server.address) as ch:
        yield pb_grpc.GenerationStub(ch)


# --- helpers ------------------------------------------------------------------------------

def generate(stub, req, timeout=STREAM_S):
    return collect(stub.Generate(req, timeout=timeout))


def greedy(max_tokens, ignore_eos=False, **kw):
    return pb.GenerateRequest(max_tokens=max_tokens, temperature=0.0, ignore_eos=ignore_eos,
                              **kw)


def chat(*turns):
    """chat(("user", "hi"), ...) -> [ChatMessage]."""
    return [pb.ChatMessage(role=r, content=c) for r, c in turns]


def detokenize(stub, ids):
    return stub.Detokenize(pb.DetokenizeRequest(token_ids=ids, skip_special_tokens=True),
                           timeout=RPC_S).text


def wait_idle(stub, timeout_s=5.0):
    """Polls GetModelInfo until nothing runs or waits and every KV block is free."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=RPC_S)
        if (info.requests_running == 0 and info.requests_waiting == 0
                and info.kv_blocks_free == info.kv_blocks_total):
            return info
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not idle {timeout_s}s later: running {info.requests_running}, waiting "
                f"{info.requests_waiting}, KV blocks free {info.kv_blocks_free} of "
                f"{info.kv_blocks_total}")
        time.sleep(0.05)


def check_stream(stub, req, res):
    """The invariants of one finished greedy stream without stop strings."""
    assert res.usage.completion_tokens == len(res.ids)
    assert len(res.ids) <= req.max_tokens
    if req.ignore_eos:
        assert res.finish_reason == LENGTH
    else:
        assert res.finish_reason in (LENGTH, EOS)
    if res.finish_reason == LENGTH:
        assert len(res.ids) == req.max_tokens
    # The deltas, in order, spell the decoded ids: nothing lost, duplicated or reordered.
    assert res.text == detokenize(stub, list(res.ids))
    if req.prompt:
        counts = {len(stub.Tokenize(pb.TokenizeRequest(text=req.prompt, add_special_tokens=s),
                                    timeout=RPC_S).token_ids) for s in (False, True)}
        assert res.usage.prompt_tokens in counts
    elif req.messages:
        templated = len(stub.Tokenize(pb.TokenizeRequest(messages=req.messages),
                                      timeout=RPC_S).token_ids)
        # Tokenize may or may not open the assistant turn; Generate does.
        assert templated <= res.usage.prompt_tokens <= templated + 8
    if req.request_id:
        assert res.request_ids == {req.request_id}
    else:
        assert len(res.request_ids) == 1 and "" not in res.request_ids


# --- 1. 64 concurrent streams give the tokens of each request alone ------------------------

SUBJECTS = ["the moon", "a red bicycle", "winter in Norway", "how bread rises",
            "the history of chess", "a lighthouse keeper", "prime numbers", "the colour blue",
            "an old library", "volcanoes", "a jazz trio", "honey bees", "Roman roads",
            "a paper aeroplane", "tidal pools", "a clockmaker"]
FILLER = ["It has been studied for many years.", "Children often ask questions about it.",
          "Some people find it fascinating, others find it dull.",
          "There are many books on the subject.", "Experts still disagree about the details."]


def batch_requests():
    """64 distinct greedy requests: raw prompts and chats of varied length, 3..14 tokens,
    every third with ignore_eos, every other with a request_id."""
    reqs = []
    for i in range(64):
        style, s = divmod(i, 16)
        r = greedy(max_tokens=3 + (i * 7) % 12, ignore_eos=i % 3 == 0,
                   request_id=f"batch-{i}" if i % 2 == 0 else "")
        if style == 0:
            r.prompt = f"Write one sentence about {SUBJECTS[s]}:"
        elif style == 1:
            r.prompt = (f"Here are some notes about {SUBJECTS[s]}. "
                        + " ".join(FILLER[:1 + i % 5]) + f" In short, {SUBJECTS[s]} is")
        elif style == 2:
            r.messages.extend(chat(("user", f"Tell me one fact about {SUBJECTS[s]}.")))
        elif s % 2 == 0:
            r.messages.extend(chat(("system", "You are a concise assistant; answer in one line."),
                                   ("user", f"What should I know about {SUBJECTS[s]}?")))
        else:
            r.messages.extend(chat(("user", f"Do you know about {SUBJECTS[s]}?"),
                                   ("assistant", "Yes, a little."),
                                   ("user", "Tell me the most surprising part.")))
        reqs.append(r)
    return reqs


def run_concurrently(stub, reqs):
    """Starts every request at once (one thread and one stream each)."""
    barrier = threading.Barrier(len(reqs))

    def run(req):
        barrier.wait(timeout=60)
        return generate(stub, req)
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(reqs)) as pool:
        futures = [pool.submit(run, r) for r in reqs]
        return [f.result(timeout=STREAM_S + 60) for f in futures]


class RunningMonitor:
    """Records the largest requests_running GetModelInfo reports while in the `with`."""

    def __init__(self, stub):
        self.stub, self.most, self._done = stub, 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self):
        while not self._done.is_set():
            try:
                info = self.stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=5)
                self.most = max(self.most, info.requests_running)
            except grpc.RpcError:
                pass
            self._done.wait(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join(timeout=10)


def test_64_concurrent_streams_match_each_alone(stub):
    reqs = batch_requests()
    assert len({r.SerializeToString() for r in reqs}) == 64
    alone = [generate(stub, r) for r in reqs]
    for i, (req, res) in enumerate(zip(reqs, alone)):
        try:
            check_stream(stub, req, res)
        except AssertionError as e:
            raise AssertionError(f"request {i} alone: {e}") from e
    with RunningMonitor(stub) as monitor:
        batched = run_concurrently(stub, reqs)
    differ = [i for i, (a, b) in enumerate(zip(alone, batched))
              if (a.ids, a.text, a.finish_reason) != (b.ids, b.text, b.finish_reason)]
    assert not differ, "in the batch, requests %s differ from alone, e.g. #%d: %s vs %s" % (
        differ, differ[0], batched[differ[0]].ids, alone[differ[0]].ids)
    for i, (req, res) in enumerate(zip(reqs, batched)):
        assert res.usage == alone[i].usage, f"request {i}"
        if req.request_id:
            assert res.request_ids == {req.request_id}, f"request {i}"
    assert monitor.most >= 8, f"at most {monitor.most} requests ran together out of 64"
    wait_idle(stub)


# --- 2. seeded sampling ---------------------------------------------------------------------

def seeded(seed):
    return pb.GenerateRequest(prompt="Once upon a time, in a quiet town by the sea,",
                              max_tokens=16, temperature=0.8, top_p=0.9, seed=seed,
                              ignore_eos=True)


def test_seed_gives_the_same_tokens_alone_and_in_a_batch(stub):
    first = generate(stub, seeded(1234))
    assert len(first.ids) == 16 and first.finish_reason == LENGTH
    assert generate(stub, seeded(1234)).ids == first.ids
    others = [seeded(99), greedy(12, prompt="The three primary colours are"),
              greedy(6, messages=chat(("user", "Name a fruit.")))]
    reqs = [seeded(1234), others[0], seeded(1234), others[1], seeded(1234), others[2]]
    batched = run_concurrently(stub, reqs)
    for i in (0, 2, 4):
        assert batched[i].ids == first.ids, f"seeded copy #{i} in the batch"
        assert batched[i].text == first.text
    assert batched[1].ids == generate(stub, others[0]).ids
    assert batched[1].ids != first.ids, "seeds 99 and 1234 drew the same 16 tokens"
    wait_idle(stub)


# --- 3. cancellation and deadlines free the batch -------------------------------------------

LONG = dict(prompt="Count slowly: one, two, three,", ignore_eos=True, temperature=0.0)


def test_cancel_mid_stream_frees_the_batch(stub):
    call = stub.Generate(pb.GenerateRequest(max_tokens=400, **LONG), timeout=STREAM_S)
    for _ in range(3):
        assert next(call).finish_reason == 0
    busy = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=RPC_S)
    assert busy.requests_running >= 1 and busy.kv_blocks_free < busy.kv_blocks_total
    call.cancel()
    with pytest.raises(grpc.RpcError) as e:
        for _ in call:
            pass
    assert e.value.code() == grpc.StatusCode.CANCELLED
    wait_idle(stub, timeout_s=5.0)


def test_deadline_exceeded_frees_the_batch(stub):
    call = stub.Generate(pb.GenerateRequest(max_tokens=1000, **LONG), timeout=1.0)
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        collect(call)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e.value.details()
    assert time.monotonic() - start < 10
    wait_idle(stub, timeout_s=5.0)


# --- 4. bad requests ------------------------------------------------------------------------

BAD_UTF8_MARK = "@@BAD-UTF8@@"


def bad_utf8(req):
    """The serialised request with BAD_UTF8_MARK (exactly once) replaced by as many bytes
    that are not UTF-8 — protobuf for Python refuses to build such a string field itself."""
    raw = req.SerializeToString()
    mark = BAD_UTF8_MARK.encode()
    assert raw.count(mark) == 1
    bad = b"ab\xc3\x28\xff\xfe" + b"x" * (len(mark) - 6)  # same length: lengths stay valid
    return raw.replace(mark, bad)


def _ids(n, token=100):
    return [token] * n


L = LIMITS
# prompt + max_tokens one over max_total_tokens, each part within its own limit.
TOTAL_PROMPT = L["max_input_tokens"] - 50
assert L["max_total_tokens"] - TOTAL_PROMPT + 1 <= L["max_new_tokens"]
# (id, build(info) -> GenerateRequest or raw bytes, needles). Each needle must appear in the
# status message: a str (case-insensitively), a tuple of alternatives, or an int (as a number).
BAD_REQUESTS = [
    ("no_prompt", lambda i: pb.GenerateRequest(max_tokens=4), ["prompt"]),
    ("prompt_and_messages",
     lambda i: pb.GenerateRequest(prompt="hi", messages=chat(("user", "hi")), max_tokens=4),
     ["prompt", "messages"]),
    ("prompt_and_ids",
     lambda i: pb.GenerateRequest(prompt="hi", prompt_token_ids=[1, 2], max_tokens=4),
     ["prompt", "prompt_token_ids"]),
    ("messages_and_ids",
     lambda i: pb.GenerateRequest(messages=chat(("user", "hi")), prompt_token_ids=[1],
                                  max_tokens=4),
     ["prompt", "prompt_token_ids"]),
    ("prompt_ids_over_max_input_tokens",
     lambda i: pb.GenerateRequest(prompt_token_ids=_ids(L["max_input_tokens"] + 1),
                                  max_tokens=1),
     [("prompt", "max_input_tokens"), L["max_input_tokens"]]),
    ("prompt_text_over_max_input_tokens",
     lambda i: pb.GenerateRequest(prompt="hello " * (L["max_input_tokens"] + 100), max_tokens=1),
     [("prompt", "max_input_tokens"), L["max_input_tokens"]]),
    ("prompt_plus_max_tokens_over_max_total_tokens",
     lambda i: pb.GenerateRequest(prompt_token_ids=_ids(TOTAL_PROMPT),
                                  max_tokens=L["max_total_tokens"] - TOTAL_PROMPT + 1),
     [("max_tokens", "max_total_tokens"), L["max_total_tokens"]]),
    ("max_tokens_zero", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=0), ["max_tokens"]),
    ("max_tokens_over_max_new_tokens",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=L["max_new_tokens"] + 1),
     ["max_tokens", L["max_new_tokens"]]),
    ("temperature_negative",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, temperature=-0.5),
     ["temperature"]),
    ("temperature_nan",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, temperature=float("nan")),
     ["temperature"]),
    ("top_k_negative", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, top_k=-1),
     ["top_k"]),
    ("top_p_zero", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, top_p=0.0),
     ["top_p"]),
    ("top_p_over_one", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, top_p=1.5),
     ["top_p"]),
    ("top_p_nan",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, top_p=float("nan")), ["top_p"]),
    ("min_p_negative", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, min_p=-0.1),
     ["min_p"]),
    ("min_p_over_one", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, min_p=1.5),
     ["min_p"]),
    ("typical_p_zero", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, typical_p=0.0),
     ["typical_p"]),
    ("typical_p_over_one",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, typical_p=1.5), ["typical_p"]),
    ("repetition_penalty_zero",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, repetition_penalty=0.0),
     ["repetition_penalty"]),
    ("repetition_penalty_over_ten",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, repetition_penalty=11.0),
     ["repetition_penalty", 10]),
    ("repetition_penalty_nan",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, repetition_penalty=float("nan")),
     ["repetition_penalty"]),
    ("frequency_penalty_over_two",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, frequency_penalty=2.5),
     ["frequency_penalty"]),
    ("presence_penalty_under_minus_two",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, presence_penalty=-3.0),
     ["presence_penalty"]),
    ("too_many_stop_strings",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4,
                                  stop=[f"s{k}" for k in range(L["max_stop_sequences"] + 1)]),
     ["stop", L["max_stop_sequences"]]),
    ("empty_stop_string",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, stop=["end", ""]), ["stop"]),
    ("stop_string_over_256_bytes",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, stop=["é" * 128 + "x"]),
     ["stop", 256]),
    ("prompt_token_id_vocab_size",
     lambda i: pb.GenerateRequest(prompt_token_ids=[1, i.vocab_size], max_tokens=4),
     ["prompt_token_ids", ("vocab", lambda i: i.vocab_size)]),
    ("prompt_token_id_negative",
     lambda i: pb.GenerateRequest(prompt_token_ids=[5, -1], max_tokens=4),
     ["prompt_token_ids"]),
    ("stop_token_id_vocab_size",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, stop_token_ids=[i.vocab_size]),
     ["stop_token_ids"]),
    ("stop_token_id_negative",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, stop_token_ids=[-7]),
     ["stop_token_ids"]),
    ("logprobs_over_20",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, logprobs=21), ["logprobs", 20]),
    ("prompt_not_utf8",
     lambda i: bad_utf8(pb.GenerateRequest(prompt=f"say {BAD_UTF8_MARK}", max_tokens=4)),
     ["prompt"]),
    ("message_content_not_utf8",
     lambda i: bad_utf8(pb.GenerateRequest(messages=chat(("user", f"say {BAD_UTF8_MARK}")),
                                           max_tokens=4)),
     ["messages"]),
    ("stop_not_utf8",
     lambda i: bad_utf8(pb.GenerateRequest(prompt="hi", max_tokens=4, stop=[BAD_UTF8_MARK])),
     ["stop"]),
    ("chat_role_unknown",
     lambda i: pb.GenerateRequest(messages=chat(("robot", "beep")), max_tokens=4),
     [("messages", "role")]),
    ("request_id_over_256_bytes",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=4, request_id="r" * 257),
     ["request_id", 256]),
]


def _mentions(details, needle):
    if isinstance(needle, int):
        return re.search(rf"(?<!\d){needle}(?!\d)", details) is not None
    return needle.lower() in details.lower()


def call_generate(channel, stub, req, timeout=RPC_S):
    """Generate with a GenerateRequest or with its raw serialised bytes."""
    if isinstance(req, bytes):
        raw = channel.unary_stream(serve_procs.GENERATE, request_serializer=lambda b: b,
                                   response_deserializer=pb.GenerateResponse.FromString)
        return collect(raw(req, timeout=timeout))
    return collect(stub.Generate(req, timeout=timeout))


@pytest.mark.parametrize("build,needles", [c[1:] for c in BAD_REQUESTS],
                         ids=[c[0] for c in BAD_REQUESTS])
def test_bad_request_is_invalid_argument(channel, stub, info, build, needles):
    with pytest.raises(grpc.RpcError) as e:
        call_generate(channel, stub, build(info))
    code, details = e.value.code(), e.value.details() or ""
    assert code == INVALID, f"{code}: {details}"
    for needle in needles:
        alternatives = needle if isinstance(needle, tuple) else (needle,)
        # A callable alternative is resolved against GetModelInfo (the vocabulary size).
        alternatives = [a(info) if callable(a) else a for a in alternatives]
        assert any(_mentions(details, a) for a in alternatives), \
            f"{alternatives} not in the message {details!r}"


# The edges of each rule, accepted (each generates one or two tokens).
ACCEPTED = [
    ("top_p_one", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=2, temperature=1.0,
                                               top_p=1.0, seed=1)),
    ("min_p_one_top_k_zero", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=2, min_p=1.0,
                                                          top_k=0, seed=2)),
    ("min_p_zero", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=2, min_p=0.0, seed=3)),
    ("typical_p_one", lambda i: pb.GenerateRequest(prompt="hi", max_tokens=2, typical_p=1.0,
                                                   seed=4)),
    ("penalties_at_limits",
     lambda i: pb.GenerateRequest(prompt="hi hi hi", max_tokens=2, temperature=0.0,
                                  repetition_penalty=10.0, frequency_penalty=-2.0,
                                  presence_penalty=2.0)),
    ("stop_strings_at_limits",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=2, temperature=0.0,
                                  stop=["é" * 128] + [f"zq{k}" for k in
                                                      range(L["max_stop_sequences"] - 1)])),
    ("empty_message_content",
     lambda i: pb.GenerateRequest(messages=chat(("system", ""), ("user", "")), max_tokens=2,
                                  temperature=0.0)),
    ("prompt_at_max_input_tokens",
     lambda i: pb.GenerateRequest(prompt_token_ids=_ids(L["max_input_tokens"] - 1) +
                                  [i.vocab_size - 1], max_tokens=1, temperature=0.0)),
    ("request_id_256_bytes",
     lambda i: pb.GenerateRequest(prompt="hi", max_tokens=1, request_id="r" * 256)),
]


@pytest.mark.parametrize("build", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_limits_are_inclusive(stub, info, build):
    req = build(info)
    res = generate(stub, req, timeout=120)
    assert 1 <= len(res.ids) <= req.max_tokens
    if req.request_id:
        assert res.request_ids == {req.request_id}


def test_logprobs_20(stub):
    res = generate(stub, greedy(3, ignore_eos=True, prompt="The sky is", logprobs=20))
    assert len(res.ids) == 3
    for m in res.messages:
        assert len(m.logprobs) == len(m.token_ids)
        for token, lp in zip(m.token_ids, m.logprobs):
            assert lp.chosen.token_id == token and lp.chosen.logprob <= 0.0
            assert len(lp.top) == 20
            values = [t.logprob for t in lp.top]
            assert values == sorted(values, reverse=True)
            assert lp.top[0].token_id == token  # greedy: the chosen one is the most likely


def test_still_generates_after_bad_requests(stub):
    res = generate(stub, greedy(8, ignore_eos=True, prompt="The capital of France is"))
    assert len(res.ids) == 8 and res.finish_reason == LENGTH
    wait_idle(stub)


# --- 5. stop strings and stop token ids ------------------------------------------------------

STOP_PROMPT = "The quick brown fox jumps over the lazy dog. Then the fox"


def boundary_stop(res):
    """A stop string spanning the boundary between two streamed tokens (up to two characters
    each side), whose first occurrence in the text is at that boundary. Returns (stop string,
    its offset, number of ids up to and including the token that completes it)."""
    offset, n_ids = 0, 0
    ends = []  # (text end offset, ids so far, text) after each message
    for m in res.messages:
        offset += len(m.text)
        n_ids += len(m.token_ids)
        ends.append((offset, n_ids, m.text))
    for k in range(1, len(ends) - 1):
        (end, _, left), (_, ids_right, right) = ends[k], ends[k + 1]
        if not left.strip() or not right.strip():
            continue
        stop = left[-2:] + right[:2]
        start = end - len(left[-2:])
        if stop.strip() and res.text.find(stop) == start:
            return stop, start, ids_right
    pytest.fail(f"no stop string spans a token boundary in {[m.text for m in res.messages]}")


def test_stop_string_across_token_boundary(stub):
    full = generate(stub, greedy(16, ignore_eos=True, prompt=STOP_PROMPT))
    assert full.finish_reason == LENGTH
    stop, start, n_ids = boundary_stop(full)
    res = generate(stub, greedy(16, ignore_eos=True, prompt=STOP_PROMPT,
                                stop=["never-in-output-qzx", stop]))
    assert res.finish_reason == STOP
    assert res.text == full.text[:start], f"stop {stop!r}"
    assert stop not in res.text
    # Generation ends at the token that completes the stop string (streamed or not).
    assert res.ids in (full.ids[:n_ids], full.ids[:n_ids - 1]), (res.ids, full.ids, n_ids)
    assert res.usage.completion_tokens == len(res.ids)
    wait_idle(stub)


def test_stop_token_id(stub, info):
    full = generate(stub, greedy(16, ignore_eos=True, prompt=STOP_PROMPT))
    # The first generated token from the third on that appeared not before it (nor is EOS).
    k = next((k for k in range(2, len(full.ids))
              if full.ids[k] not in full.ids[:k] and full.ids[k] != info.eos_token_id), None)
    assert k is not None, f"no new token from the third on in {full.ids}"
    res = generate(stub, greedy(16, ignore_eos=True, prompt=STOP_PROMPT,
                                stop_token_ids=[full.ids[k]]))
    assert res.finish_reason == STOP
    assert res.ids in (full.ids[:k], full.ids[:k + 1]), (res.ids, full.ids, k)
    # The text ends before the stop token or right after it; never past it.
    assert res.text in (detokenize(stub, full.ids[:k]), detokenize(stub, full.ids[:k + 1]))
    assert res.usage.completion_tokens == len(res.ids)


# --- 6. tokenizer, model info, health, reflection ---------------------------------------------

def test_tokenize_detokenize_round_trip(stub, info):
    text = "Hello, world! Grüße aus Köln — 日本語 ✓ 1234"
    tok = stub.Tokenize(pb.TokenizeRequest(text=text), timeout=RPC_S)
    assert len(tok.token_ids) > 0 and len(tok.pieces) == len(tok.token_ids)
    assert all(0 <= t < info.vocab_size for t in tok.token_ids)
    assert stub.Detokenize(pb.DetokenizeRequest(token_ids=tok.token_ids),
                           timeout=RPC_S).text == text
    msgs = chat(("user", "What is the capital of France?"))
    templated = stub.Tokenize(pb.TokenizeRequest(messages=msgs), timeout=RPC_S).token_ids
    plain = stub.Tokenize(pb.TokenizeRequest(text=msgs[0].content), timeout=RPC_S).token_ids
    assert len(templated) > len(plain)
    assert msgs[0].content in stub.Detokenize(pb.DetokenizeRequest(token_ids=templated),
                                              timeout=RPC_S).text
    with pytest.raises(grpc.RpcError) as e:
        stub.Detokenize(pb.DetokenizeRequest(token_ids=[1, info.vocab_size]), timeout=RPC_S)
    assert e.value.code() == INVALID and "token_ids" in e.value.details()


def test_model_info(stub, info):
    assert info.world_size == TP
    assert info.backend == "shm"  # auto: both workers on this host
    assert info.ready
    assert info.architecture == "llama" and info.model_name
    assert info.vocab_size > 0 and 0 <= info.eos_token_id < info.vocab_size
    assert -1 <= info.bos_token_id < info.vocab_size
    assert info.context_length >= L["max_total_tokens"]
    for name in ("max_input_tokens", "max_total_tokens", "max_new_tokens", "max_queue",
                 "max_stop_sequences"):
        assert getattr(info, name) == L[name], name
    assert info.kv_blocks_total > 0 and info.kv_block_size > 0
    idle = wait_idle(stub)
    assert idle.kv_blocks_total == info.kv_blocks_total


def test_health_serving(server):
    assert serve_procs.health_status(server.address) == serve_procs.SERVING


def test_reflection_lists_the_service(server):
    assert "tpserve.v1.Generation" in serve_procs.list_services(server.address)


# --- 7. a full queue -------------------------------------------------------------------------

def wait_counts(stub, running, waiting, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=RPC_S)
        if (info.requests_running, info.requests_waiting) == (running, waiting):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"running {info.requests_running}, waiting "
                                 f"{info.requests_waiting}; wanted {running}, {waiting}")
        time.sleep(0.05)


def test_full_queue_is_resource_exhausted(small_stub):
    calls = []
    try:
        calls.append(small_stub.Generate(pb.GenerateRequest(max_tokens=1000, **LONG),
                                         timeout=STREAM_S))
        assert next(calls[0]).finish_reason == 0  # it runs (--max_running=1)
        for _ in range(2):  # these two wait (--max_queue=2)
            calls.append(small_stub.Generate(pb.GenerateRequest(max_tokens=1000, **LONG),
                                             timeout=STREAM_S))
        wait_counts(small_stub, running=1, waiting=2)
        with pytest.raises(grpc.RpcError) as e:
            generate(small_stub, greedy(1, prompt="hi"), timeout=RPC_S)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value.details()
        assert "queue" in e.value.details().lower()
    finally:
        for c in calls:
            c.cancel()
    wait_idle(small_stub, timeout_s=5.0)
    res = generate(small_stub, greedy(2, ignore_eos=True, prompt="hi"))
    assert len(res.ids) == 2


def test_reflection_is_off_by_default(small_server):
    with pytest.raises(grpc.RpcError) as e:
        serve_procs.list_services(small_server.address)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


# --- 8. SIGTERM drains ------------------------------------------------------------------------

DRAIN_TOKENS = 40  # still running when SIGTERM lands and the probes come (seconds on CPU)


def test_sigterm_drains_then_exits(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    srv = _serve(request, tmp_path_factory, tpserve_bin, smollm_gguf, "serve-drain",
                 drain_timeout_s=30)
    with grpc.insecure_channel(srv.address) as ch, grpc.insecure_channel(srv.address) as probe:
        grpc.channel_ready_future(probe).result(timeout=10)
        probe_stub = pb_grpc.GenerationStub(probe)
        call = pb_grpc.GenerationStub(ch).Generate(
            greedy(DRAIN_TOKENS, ignore_eos=True, prompt="Count slowly: one, two, three,"),
            timeout=STREAM_S)
        first = next(call)
        # The rest of the stream is read meanwhile, so that its end is seen when it comes.
        drained = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        rest = drained.submit(lambda: collect(itertools.chain([first], call)))
        srv.proc.send_signal(signal.SIGTERM)

        # A new request is refused once the drain has begun, while the first one still runs.
        deadline, code, accepted = time.monotonic() + 10, None, 0
        while time.monotonic() < deadline:
            try:
                generate(probe_stub, greedy(1, prompt="hi"), timeout=5)
                accepted += 1  # it came before the signal was handled: try again
            except grpc.RpcError as e:
                code, draining = e.code(), not rest.done()
                break
            time.sleep(0.02)
        assert code == grpc.StatusCode.UNAVAILABLE, f"{code} ({accepted} accepted)"
        assert draining, f"new requests were accepted ({accepted}) until the drained stream " \
            "ended, not refused as soon as the drain began"
        try:
            assert serve_procs.health_status(srv.address) == serve_procs.NOT_SERVING
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e  # unreachable: fine too

        res = rest.result(timeout=STREAM_S)
        drained.shutdown()
        assert res.finish_reason == LENGTH and len(res.ids) == DRAIN_TOKENS

    code = serve_procs.wait_exit(srv, timeout_s=60)
    assert code == 0, f"serve exited with {code}:\n{srv.log_tail()}"
    assert serve_procs.wait_workers_gone(srv, timeout_s=10) == [], "workers outlived serve"
