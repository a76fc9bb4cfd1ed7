"""clients/python (tpserve_client) resuming broken Generate streams, against a fake
Generation server in this process (no model): the fake streams the tokens 100, 101, ...
(text "<k>") and breaks each attempt as the test's plan says: an abort with a status, a
server stopped and started again on the same port, or a stream that ends and then fails.
It records every request, so the tests check each resend (resume.token_ids, resume.seed,
request_id, the rest unchanged), that the caller sees every delta once and in order, which
statuses do not resume, max_resumes and the deadline of the whole stream.

The package is installed the real way (python_client_pkg: pip install of a copy next to
proto/, stubs generated from it). Backoffs are a few milliseconds; every call has a deadline
and the fake servers are stopped by the fixture. Budget: a few seconds."""
import asyncio
import threading
import time
from concurrent import futures

import grpc
import pytest

import python_client_pkg

TOTAL = 8  # tokens of a full stream
DRAWN_SEED = 4242  # the seed the fake draws for an unseeded first attempt
RPC_S = 10  # default deadline of the clients' calls
FAST = dict(resume_backoff_s=0.005, resume_backoff_max_s=0.02)  # backoff for the tests


def token(k):
    return 100 + k


def text(k):
    return f"<{k}>"


FULL_IDS = [token(k) for k in range(TOTAL)]
FULL_TEXT = "".join(text(k) for k in range(TOTAL))

# How an attempt ends after its messages (the plan's second element).
FINISH = "finish"  # the stream runs to its last message
RESTART = "restart"  # the server stops; a new one starts on the same port RESTART_DOWN_S later
AFTER_LAST = "after_last"  # the last message, then UNAVAILABLE
RESTART_DOWN_S = 0.3


@pytest.fixture(scope="module")
def tc(tmp_path_factory, repo_root):
    module = python_client_pkg.install(tmp_path_factory.mktemp("python-client-resume"),
                                       repo_root)
    yield module
    import sys
    sys.path.remove(str(module.SITE))


class FakeGeneration:
    """A Generation servicer whose attempts follow `plan`: a list of (messages, end) per
    attempt, messages = how many to send before `end` (None: all), end = FINISH, RESTART,
    AFTER_LAST or (grpc.StatusCode, details) to abort with. Attempts past the plan finish.
    report_seed=False plays a server that predates Resume (no seed, resume ignored)."""

    def __init__(self, pb, on_restart):
        self._pb = pb
        self._on_restart = on_restart
        self._lock = threading.Lock()
        self.reset([])

    def reset(self, plan, step_s=0.0, report_seed=True):
        with self._lock:
            self.plan = list(plan)
            self.step_s = step_s
            self.report_seed = report_seed
            self.requests = []  # every GenerateRequest received, in order

    def Generate(self, request, context):
        pb = self._pb
        with self._lock:
            attempt = len(self.requests)
            copy = pb.GenerateRequest()
            copy.CopyFrom(request)
            self.requests.append(copy)
            sends, end = self.plan[attempt] if attempt < len(self.plan) else (None, FINISH)
            step_s, report_seed = self.step_s, self.report_seed
        held = list(request.resume.token_ids) if report_seed else []
        if held != FULL_IDS[:len(held)]:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"bad resume {held}")
        if request.HasField("seed"):
            seed = request.seed
        elif request.resume.HasField("seed"):
            seed = request.resume.seed
        else:
            seed = DRAWN_SEED + 1000 * attempt  # a server that lost the stream draws anew
        request_id = request.request_id or f"srv-{attempt}"
        start = len(held)
        stop = TOTAL if sends is None else min(TOTAL, start + sends)
        for k in range(start, stop):
            message = pb.GenerateResponse(token_ids=[token(k)], text=text(k),
                                          request_id=request_id)
            if k == start and report_seed:
                message.seed = seed
            if k == TOTAL - 1:
                message.finish_reason = pb.FINISH_REASON_LENGTH
                message.usage.prompt_tokens = 3
                message.usage.completion_tokens = TOTAL
            yield message
            if step_s:
                time.sleep(step_s)
        if end == FINISH:
            return
        if end == AFTER_LAST:
            context.abort(grpc.StatusCode.UNAVAILABLE, "Socket closed")
        if end == RESTART:
            threading.Thread(target=self._on_restart, daemon=True).start()
            deadline = time.monotonic() + 5
            while context.is_active() and time.monotonic() < deadline:
                time.sleep(0.01)
            return
        code, details = end
        context.abort(code, details)


class FakeServer:
    """FakeGeneration served on 127.0.0.1 (one port, across restarts); the other methods
    answer UNIMPLEMENTED (the generated servicer's)."""

    def __init__(self, tc):
        pb_grpc = tc._stubs.pb_grpc
        servicer = type("FakeGenerationServicer", (FakeGeneration, pb_grpc.GenerationServicer),
                        {})
        self.fake = servicer(tc._stubs.pb, self._restart)
        self._add = pb_grpc.add_GenerationServicer_to_server
        self._lock = threading.Lock()
        self.port = 0
        self._server = self._start()
        self.address = f"127.0.0.1:{self.port}"

    def _start(self):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self._add(self.fake, server)
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        assert self.port
        server.start()
        return server

    def _restart(self):
        with self._lock:
            self._server.stop(grace=None).wait(5)
            time.sleep(RESTART_DOWN_S)
            self._server = self._start()

    def stop(self):
        with self._lock:
            self._server.stop(grace=None).wait(5)


@pytest.fixture(scope="module")
def server(tc):
    s = FakeServer(tc)
    yield s
    s.stop()


@pytest.fixture
def fake(server):
    server.fake.reset([])
    return server.fake


def check_stream(deltas, seed, request_id):
    """Every token once, in order; the seed on the first delta only, finish_reason and usage
    on the last only, one request id."""
    assert [t for d in deltas for t in d.token_ids] == FULL_IDS
    assert "".join(d.text for d in deltas) == FULL_TEXT
    assert deltas[0].seed == seed and all(d.seed is None for d in deltas[1:])
    assert all(d.finish_reason is None and d.usage is None for d in deltas[:-1])
    assert deltas[-1].finish_reason == "length" and deltas[-1].usage.completion_tokens == TOTAL
    assert {d.request_id for d in deltas} == {request_id}


def check_resend(first, resend, held, seed, request_id):
    """`resend` is `first` with resume = (held, seed) and the request id."""
    assert list(resend.resume.token_ids) == held
    assert resend.resume.HasField("seed") and resend.resume.seed == seed
    assert resend.request_id == request_id
    rest = type(resend)()
    rest.CopyFrom(resend)
    rest.ClearField("resume")
    rest.request_id = first.request_id
    assert rest == first


# --- the rule -----------------------------------------------------------------------------------

def test_which_failures_resume(tc):
    from tpserve_client._resume import ResumePolicy, is_resumable

    code = grpc.StatusCode
    assert is_resumable(code.UNAVAILABLE, "failed to connect to all addresses")
    assert is_resumable(code.UNAVAILABLE, "")
    assert is_resumable(code.INTERNAL, "Received RST_STREAM with error code 2")
    assert is_resumable(code.UNKNOWN, "Stream removed (Socket closed)")
    assert not is_resumable(code.INTERNAL, "step failed: out of memory")
    assert not is_resumable(code.UNKNOWN, "Exception iterating responses")
    for c in (code.INVALID_ARGUMENT, code.RESOURCE_EXHAUSTED, code.DEADLINE_EXCEEDED,
              code.CANCELLED, code.UNAUTHENTICATED, code.PERMISSION_DENIED, code.NOT_FOUND,
              code.FAILED_PRECONDITION, code.UNIMPLEMENTED):
        assert not is_resumable(c, "Socket closed"), c
    policy = ResumePolicy()
    assert (policy.max_resumes, policy.backoff_s, policy.backoff_max_s) == (8, 0.1, 2.0)
    for k, ceiling in enumerate([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]):
        assert ceiling / 2 <= policy.delay_s(k) <= ceiling
    assert policy.delay_s(10_000) <= 2.0
    with pytest.raises(ValueError):
        tc.Client("127.0.0.1:1", max_resumes=-1)
    with pytest.raises(ValueError):
        tc.Client("127.0.0.1:1", resume_backoff_s=3.0, resume_backoff_max_s=2.0)


def test_delta_and_result_carry_the_seed(tc):
    from tpserve_client._stubs import pb
    from tpserve_client.types import ResultBuilder

    first = pb.GenerateResponse(text="a", token_ids=[1], request_id="r", seed=0)
    later = pb.GenerateResponse(text="b", token_ids=[2], request_id="r",
                                finish_reason=pb.FINISH_REASON_EOS)
    d0, d1 = tc.Delta.from_proto(first, False), tc.Delta.from_proto(later, False)
    assert (d0.seed, d1.seed) == (0, None)  # 0 is a seed, not "unset"
    builder = ResultBuilder()
    builder.add(d0)
    builder.add(d1)
    res = builder.result()
    assert (res.text, res.token_ids, res.seed, res.finish_reason) == ("ab", [1, 2], 0, "eos")
    # Delta and Result still build without a seed.
    assert tc.Delta("x", [], None, None, None, "r").seed is None
    assert tc.Result("x", [], None, None, None, "r").seed is None


# --- resuming -----------------------------------------------------------------------------------

def test_resumes_after_unavailable_and_a_broken_transport(tc, server, fake):
    fake.reset([(3, (grpc.StatusCode.UNAVAILABLE, "draining")),
                (2, (grpc.StatusCode.INTERNAL, "Received RST_STREAM with error code 2"))])
    with tc.Client(server.address, timeout=RPC_S, **FAST) as client:
        stream = client.stream("hi", max_tokens=TOTAL, temperature=0.7, top_k=5)
        deltas = list(stream)
    check_stream(deltas, DRAWN_SEED, "srv-0")
    assert (stream.resumes, stream.seed, stream.request_id) == (2, DRAWN_SEED, "srv-0")
    first, second, third = fake.requests
    assert not first.HasField("resume") and first.request_id == ""
    check_resend(first, second, FULL_IDS[:3], DRAWN_SEED, "srv-0")
    check_resend(first, third, FULL_IDS[:5], DRAWN_SEED, "srv-0")


def test_callers_seed_and_id_and_a_break_before_the_first_message(tc, server, fake):
    fake.reset([(0, (grpc.StatusCode.UNAVAILABLE, "world not ready")),
                (2, (grpc.StatusCode.UNKNOWN, "Stream removed"))])
    with tc.Client(server.address, timeout=RPC_S, **FAST) as client:
        res = client.chat([("user", "hi")], max_tokens=TOTAL, seed=7, request_id="mine")
    assert (res.text, res.token_ids, res.seed, res.request_id) == (FULL_TEXT, FULL_IDS, 7,
                                                                   "mine")
    assert res.finish_reason == "length" and res.usage.completion_tokens == TOTAL
    first, second, third = fake.requests
    assert second == first and not second.HasField("resume")  # nothing held: sent as is
    check_resend(first, third, FULL_IDS[:2], 7, "mine")


def test_resumes_across_a_server_restart(tc, server, fake):
    fake.reset([(3, RESTART)])
    with tc.Client(server.address, timeout=RPC_S, max_resumes=50, resume_backoff_s=0.01,
                   resume_backoff_max_s=0.1) as client:
        start = time.monotonic()
        stream = client.stream("hi", max_tokens=TOTAL)
        deltas = list(stream)
        elapsed = time.monotonic() - start
    check_stream(deltas, DRAWN_SEED, "srv-0")
    # Resends that met no server (connection refused) count too; the fake saw two requests.
    assert stream.resumes >= 1 and len(fake.requests) == 2, stream.resumes
    check_resend(fake.requests[0], fake.requests[1], FULL_IDS[:3], DRAWN_SEED, "srv-0")
    assert RESTART_DOWN_S <= elapsed < RESTART_DOWN_S + 3


def test_a_break_after_the_last_message_ends_the_stream(tc, server, fake):
    fake.reset([(None, AFTER_LAST)])
    with tc.Client(server.address, timeout=RPC_S, **FAST) as client:
        stream = client.stream("hi", max_tokens=TOTAL)
        check_stream(list(stream), DRAWN_SEED, "srv-0")
    assert stream.resumes == 0 and len(fake.requests) == 1


def test_a_server_without_resume_is_refused(tc, server, fake):
    fake.reset([(3, (grpc.StatusCode.UNAVAILABLE, "draining"))], report_seed=False)
    with tc.Client(server.address, timeout=RPC_S, **FAST) as client:
        stream = client.stream("hi", max_tokens=TOTAL, seed=3)
        got = []
        with pytest.raises(tc.TpserveError) as e:
            for d in stream:
                got.extend(d.token_ids)
    assert e.value.code == grpc.StatusCode.UNIMPLEMENTED and "resume" in e.value.message
    assert got == FULL_IDS[:3]  # never the stream's start twice


# --- what does not resume ---------------------------------------------------------------------

def test_max_resumes_bounds_the_resends(tc, server, fake):
    always = [(1, (grpc.StatusCode.UNAVAILABLE, "draining"))] * 20
    with tc.Client(server.address, timeout=RPC_S, max_resumes=3, **FAST) as client:
        for max_resumes, expect in ((None, 3), (1, 1), (0, 0)):
            fake.reset(always)
            stream = client.stream("hi", max_tokens=TOTAL, max_resumes=max_resumes)
            got = []
            with pytest.raises(tc.Unavailable) as e:
                for d in stream:
                    got.extend(d.token_ids)
            assert e.value.code == grpc.StatusCode.UNAVAILABLE
            assert "draining" in e.value.message and "max_resumes" in e.value.message
            assert stream.resumes == expect and len(fake.requests) == expect + 1
            assert got == FULL_IDS[:expect + 1]  # one new token per attempt, each once
            with pytest.raises(tc.Unavailable, match="max_resumes"):  # and it stays ended
                next(stream)
            assert len(fake.requests) == expect + 1
    with tc.Client(server.address, timeout=RPC_S, max_resumes=0) as client:
        fake.reset(always)
        with pytest.raises(tc.Unavailable):
            client.generate("hi", max_tokens=TOTAL)
        assert len(fake.requests) == 1


NOT_RESUMED = [
    (grpc.StatusCode.INVALID_ARGUMENT, "max_tokens: must be > 0", "InvalidArgument"),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full", "ResourceExhausted"),
    (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline", "DeadlineExceeded"),
    (grpc.StatusCode.UNAUTHENTICATED, "no key", "Unauthenticated"),
    (grpc.StatusCode.PERMISSION_DENIED, "no", "TpserveError"),
    (grpc.StatusCode.CANCELLED, "cancelled by the server", "Cancelled"),
    (grpc.StatusCode.INTERNAL, "step failed", "Internal"),
    (grpc.StatusCode.UNKNOWN, "Exception iterating responses", "TpserveError"),
]


def test_other_failures_are_not_resumed(tc, server, fake):
    with tc.Client(server.address, timeout=RPC_S, **FAST) as client:
        for code, details, error in NOT_RESUMED:
            fake.reset([(2, (code, details))])
            stream = client.stream("hi", max_tokens=TOTAL)
            with pytest.raises(getattr(tc, error)) as e:
                list(stream)
            assert (e.value.code, e.value.message) == (code, details)
            assert stream.resumes == 0 and len(fake.requests) == 1, code
        # The caller's cancel() is not resumed either.
        fake.reset([], step_s=0.02)
        stream = client.stream("hi", max_tokens=TOTAL)
        next(stream)
        stream.cancel()
        with pytest.raises(tc.Cancelled):
            next(stream)
        assert stream.resumes == 0 and len(fake.requests) == 1


def test_the_deadline_bounds_the_whole_stream(tc, server, fake):
    # Every attempt breaks at once: resends until the deadline, not max_resumes.
    fake.reset([(0, (grpc.StatusCode.UNAVAILABLE, "draining"))] * 10_000)
    with tc.Client(server.address, max_resumes=10_000, resume_backoff_s=0.02,
                   resume_backoff_max_s=0.05) as client:
        start = time.monotonic()
        with pytest.raises(tc.Unavailable) as e:
            list(client.stream("hi", max_tokens=TOTAL, timeout=0.5))
        assert time.monotonic() - start < 0.9
        assert "deadline" in e.value.message and len(fake.requests) >= 3
    # Slow attempts that would finish on the third, 3 * 0.45 s in: the 1 s deadline ends it.
    fake.reset([(3, (grpc.StatusCode.UNAVAILABLE, "draining"))] * 3, step_s=0.15)
    with tc.Client(server.address, timeout=1.0, **FAST) as client:
        start = time.monotonic()
        with pytest.raises((tc.DeadlineExceeded, tc.Unavailable)):
            list(client.stream("hi", max_tokens=TOTAL))
        assert time.monotonic() - start < 1.4
        # The third attempt starts about 0.9 s in, or not at all on a loaded machine; the
        # stream never completes (that would take the third attempt's full 0.45 s).
        assert len(fake.requests) in (2, 3)


# --- AsyncClient --------------------------------------------------------------------------------

def test_async_resumes(tc, server, fake):
    async def main():
        async with tc.AsyncClient(server.address, timeout=RPC_S, **FAST) as aclient:
            fake.reset([(3, (grpc.StatusCode.UNAVAILABLE, "draining")),
                        (2, (grpc.StatusCode.INTERNAL, "Stream removed (Socket closed)"))])
            stream = aclient.stream("hi", max_tokens=TOTAL, temperature=0.5)
            deltas = [d async for d in stream]
            check_stream(deltas, DRAWN_SEED, "srv-0")
            assert (stream.resumes, stream.seed, stream.request_id) == (2, DRAWN_SEED,
                                                                        "srv-0")
            first, second, third = fake.requests
            check_resend(first, second, FULL_IDS[:3], DRAWN_SEED, "srv-0")
            check_resend(first, third, FULL_IDS[:5], DRAWN_SEED, "srv-0")

            fake.reset([(4, RESTART)])
            res = await aclient.generate("hi", max_tokens=TOTAL, seed=11, max_resumes=50)
            assert (res.token_ids, res.text, res.seed) == (FULL_IDS, FULL_TEXT, 11)
            check_resend(fake.requests[0], fake.requests[1], FULL_IDS[:4], 11, "srv-0")

            fake.reset([(1, (grpc.StatusCode.UNAVAILABLE, "draining"))] * 10)
            with pytest.raises(tc.Unavailable, match="max_resumes"):
                await aclient.generate("hi", max_tokens=TOTAL, max_resumes=2)
            assert len(fake.requests) == 3
            fake.reset([(2, (grpc.StatusCode.INVALID_ARGUMENT, "bad"))])
            with pytest.raises(tc.InvalidArgument):
                await aclient.generate("hi", max_tokens=TOTAL)
            assert len(fake.requests) == 1

            # Leaving the loop cancels the stream; the deadline bounds resends.
            fake.reset([], step_s=0.02)
            async for _ in aclient.stream("hi", max_tokens=TOTAL):
                break
            fake.reset([(0, (grpc.StatusCode.UNAVAILABLE, "draining"))] * 10_000)
            start = time.monotonic()
            with pytest.raises(tc.Unavailable, match="deadline"):
                await aclient.generate("hi", max_tokens=TOTAL, timeout=0.3,
                                       max_resumes=10_000)
            assert time.monotonic() - start < 0.7

    asyncio.run(asyncio.wait_for(main(), 30))
