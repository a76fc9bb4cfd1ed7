"""The OpenAI-compatible HTTP API (`serve --http_port`) end to end, on `serve --tp 2`: the
official `openai` package (whole and streamed, chat and completions), raw SSE framing through
`curl -N`, tokens equal to the gRPC API's for the same seeded request, 16 concurrent streaming
clients, a client killed mid-stream (its KV freed, seen through /metrics), 30+ malformed
requests (each its status and an OpenAI-shaped error body, the server serving on), a
slow-loris client, and API keys. Every call has a timeout; the servers are stopped in
finalizers. Budget: about two minutes on two cores."""
import asyncio
import http.client
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse

import grpc
import openai
import pytest

import pki
import serve_procs
from serve_procs import collect
from worker_procs import free_port
from tpserve.v1 import generate_pb2 as pb
from tpserve.v1 import generate_pb2_grpc as pb_grpc

TP = 2
CALL_S = 120
MAX_BODY = 4 << 20  # the default --max_request_bytes


def _start(request, tmp_path_factory, tpserve_bin, model, name, tls=None, credentials=None,
           **flags):
    log = tmp_path_factory.mktemp(name) / "serve.log"
    http_port = free_port("127.0.0.1")
    metrics_port = free_port("127.0.0.1")
    server = serve_procs.start(tpserve_bin, model, log, tp=TP, threads=1, http_port=http_port,
                               metrics_port=metrics_port, **flags)
    request.addfinalizer(lambda: serve_procs.cleanup(server))
    serve_procs.wait_serving(server, timeout_s=120, credentials=credentials)
    server.http = f"127.0.0.1:{http_port}"
    server.metrics = f"127.0.0.1:{metrics_port}"
    deadline = time.time() + 30
    while _get(server.http, "/health", tls=tls)[0] != 200:
        assert time.time() < deadline, f"/health never 200:\n{server.log_tail()}"
        time.sleep(0.2)
    return server


@pytest.fixture(scope="module")
def server(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    srv = _start(request, tmp_path_factory, tpserve_bin, smollm_gguf, "openai")
    yield srv
    assert serve_procs.stop(srv, timeout_s=60) == 0, srv.log_tail()


@pytest.fixture(scope="module")
def model_name(server):
    return json.loads(_get(server.http, "/v1/models")[1])["data"][0]["id"]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"http://{server.http}/v1", api_key="unused", timeout=CALL_S,
                         max_retries=0)


def _connect(address, tls=None):
    if tls is None:
        return http.client.HTTPConnection(address, timeout=CALL_S)
    return http.client.HTTPSConnection(address, timeout=CALL_S, context=tls)


def _get(address, path, tls=None):
    return _call(address, "GET", path, tls=tls)


def _call(address, method, path, body=b"", headers=None, tls=None):
    conn = _connect(address, tls)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _metric(server, name, labels=""):
    text = _get(server.metrics, "/metrics")[1].decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and labels in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _grpc_text(server, **fields):
    with grpc.insecure_channel(server.address) as ch:
        res = collect(pb_grpc.GenerationStub(ch).Generate(pb.GenerateRequest(**fields),
                                                           timeout=CALL_S))
    return res


def test_models_and_health(server, model_name):
    status, body = _get(server.http, "/v1/models")
    listing = json.loads(body)
    assert status == 200 and listing["object"] == "list"
    assert listing["data"][0]["object"] == "model" and listing["data"][0]["max_model_len"] > 0
    assert _get(server.http, "/health") == (200, b'{"status":"ok"}')
    status, body = _get(server.http, f"/v1/models/{urllib.parse.quote(model_name)}")
    assert status == 200 and json.loads(body)["id"] == model_name
    status, body = _get(server.http, "/v1/models/gpt-4")
    assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found"


def test_completion_matches_grpc(server, client, model_name):
    """The same seeded request through both APIs: the same text."""
    fields = dict(prompt="The capital of France is", max_tokens=12, temperature=0.8, seed=7,
                  ignore_eos=True)
    want = _grpc_text(server, **fields)
    got = client.completions.create(model=model_name, prompt=fields["prompt"], max_tokens=12,
                                    temperature=0.8, seed=7, extra_body={"ignore_eos": True})
    assert got.choices[0].text == want.text
    assert got.choices[0].finish_reason == "length"
    assert got.usage.completion_tokens == 12 and got.usage.prompt_tokens > 0
    assert got.object == "text_completion" and got.id.startswith("cmpl-")


def test_chat_whole_and_streamed_agree(server, client, model_name):
    messages = [{"role": "user", "content": "Name a colour."}]
    whole = client.chat.completions.create(model=model_name, messages=messages, max_tokens=10,
                                           temperature=0.7, seed=3)
    chunks = list(client.chat.completions.create(
        model=model_name, messages=messages, max_tokens=10, temperature=0.7, seed=3, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.role == "assistant"
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        whole.usage.completion_tokens
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] in ("stop", "length") and all(f is None for f in finish[:-1])
    want = _grpc_text(server, messages=[pb.ChatMessage(role="user", content="Name a colour.")],
                      max_tokens=10, temperature=0.7, seed=3)
    assert text == want.text


def test_max_tokens_may_be_left_out(server, client, model_name):
    """As OpenAI and vLLM serve them: a completion gives 16 tokens; a chat runs to its end (or
    to the rest of the context under the server's limits), as LangChain and most UIs ask."""
    got = client.completions.create(model=model_name, prompt="Once upon a time",
                                    temperature=0, extra_body={"ignore_eos": True})
    assert got.choices[0].finish_reason == "length" and got.usage.completion_tokens == 16
    chat = client.chat.completions.create(
        model=model_name, temperature=0,
        messages=[{"role": "user", "content": "Say hello in one short sentence."}])
    assert chat.choices[0].finish_reason == "stop", chat
    assert 0 < chat.usage.completion_tokens < 200
    want = _grpc_text(server, messages=[pb.ChatMessage(role="user",
                                                       content="Say hello in one short sentence.")],
                      max_tokens=200, temperature=0)
    assert chat.choices[0].message.content == want.text


def test_streamed_completion_and_logprobs(client, model_name):
    stream = client.completions.create(model=model_name, prompt="One, two,", max_tokens=6,
                                       temperature=0, stream=True, logprobs=2,
                                       extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert len(chunks) == 6
    offsets = []
    for c in chunks:
        lp = c.choices[0].logprobs
        assert len(lp.tokens) == 1 and lp.token_logprobs[0] <= 0
        assert 1 <= len(lp.top_logprobs[0]) <= 2
        offsets += lp.text_offset
    whole = client.completions.create(model=model_name, prompt="One, two,", max_tokens=6,
                                      temperature=0, logprobs=2, extra_body={"ignore_eos": True})
    tokens = whole.choices[0].logprobs.tokens
    # Each token's offset: the characters of the tokens before it, streamed or not.
    assert offsets == whole.choices[0].logprobs.text_offset
    assert offsets == [len("".join(tokens[:i])) for i in range(len(tokens))]
    assert "".join(tokens) == whole.choices[0].text
    chat = client.chat.completions.create(
        model=model_name, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
        temperature=0, logprobs=True, top_logprobs=3)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    assert all(len(t.top_logprobs) == 3 and t.logprob <= 0 for t in content)
    assert content[0].top_logprobs[0].logprob >= content[0].top_logprobs[-1].logprob


def test_logprobs_bytes_are_the_tokens_raw_bytes(client, model_name):
    """Emoji take several tokens each here, none of them whole UTF-8: their `token` texts are
    U+FFFD, and only their raw `bytes` put the answer back together."""
    chat = client.chat.completions.create(
        model=model_name, messages=[{"role": "user", "content": "Write three emoji."}],
        max_tokens=12, temperature=0, logprobs=True, top_logprobs=1,
        extra_body={"ignore_eos": True})
    content = chat.choices[0].logprobs.content
    text = chat.choices[0].message.content
    assert b"".join(bytes(t.bytes) for t in content) == text.encode(), (text, content)
    partial = [t for t in content if "\ufffd" in t.token]
    assert partial, f"no token split a character in {text!r}: the case is not exercised"
    for t in content:
        assert bytes(t.top_logprobs[0].bytes).decode(errors="replace") == t.top_logprobs[0].token


def test_n_choices_and_stop(client, model_name):
    got = client.completions.create(model=model_name, prompt="Once upon a time", max_tokens=8,
                                    temperature=1.0, seed=11, n=3)
    assert [c.index for c in got.choices] == [0, 1, 2]
    assert got.usage.completion_tokens <= 24
    assert len({c.text for c in got.choices}) > 1, "the choices drew from one seed"
    again = client.completions.create(model=model_name, prompt="Once upon a time", max_tokens=8,
                                      temperature=1.0, seed=11, n=3)
    assert [c.text for c in again.choices] == [c.text for c in got.choices]
    streamed = ["", "", ""]
    for chunk in client.completions.create(model=model_name, prompt="Once upon a time",
                                           max_tokens=8, temperature=1.0, seed=11, n=3,
                                           stream=True):
        streamed[chunk.choices[0].index] += chunk.choices[0].text
    assert streamed == [c.text for c in got.choices]
    stopped = client.completions.create(model=model_name, prompt="1, 2, 3, 4,", max_tokens=20,
                                        temperature=0, stop=[" 7"])
    assert stopped.choices[0].finish_reason == "stop" and " 7" not in stopped.choices[0].text


def test_curl_sse_framing(server, model_name):
    body = json.dumps({"model": model_name, "prompt": "Hello", "max_tokens": 3, "temperature": 0,
                       "stream": True, "ignore_eos": True})
    out = subprocess.run(["curl", "-sN", "--max-time", "60", "-H",
                          "Content-Type: application/json", "-d", body,
                          f"http://{server.http}/v1/completions"],
                         capture_output=True, timeout=90, check=True).stdout.decode()
    events = [e for e in out.split("\n\n") if e and not e.startswith(":")]
    assert events[-1] == "data: [DONE]", out
    assert len(events) == 4, out
    for e in events[:-1]:
        assert e.startswith("data: {"), out
        assert json.loads(e[len("data: "):])["object"] == "text_completion"


def test_sixteen_concurrent_streams(server, model_name):
    async def one(client, i):
        stream = await client.completions.create(model=model_name, prompt=f"Count to {i}:",
                                                 max_tokens=8, temperature=0, stream=True,
                                                 extra_body={"ignore_eos": True})
        return [c.choices[0].text async for c in stream]

    async def all_of():
        async with openai.AsyncOpenAI(base_url=f"http://{server.http}/v1", api_key="unused",
                                      timeout=CALL_S, max_retries=0) as client:
            return await asyncio.gather(*(one(client, i) for i in range(16)))

    results = asyncio.run(asyncio.wait_for(all_of(), CALL_S))
    assert all(len(r) == 8 for r in results)


def test_client_killed_mid_stream_frees_kv(server, model_name):
    script = (
        "import openai, sys\n"
        f"c = openai.OpenAI(base_url='http://{server.http}/v1', api_key='x', max_retries=0)\n"
        f"s = c.completions.create(model={model_name!r}, prompt='Tell a story', max_tokens=400,"
        " temperature=0, stream=True, extra_body={'ignore_eos': True})\n"
        "for i, _ in enumerate(s):\n"
        "    if i == 2: print('streaming', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"streaming"
        assert _metric(server, "tpserve_requests_running") == 1
        cancelled_before = _metric(server, "tpserve_requests_total",
                                   'api="http",status="cancelled"')
        proc.kill()
        proc.wait(timeout=10)
        _expect_cancelled_and_freed(server, cancelled_before)
    finally:
        proc.kill()


def _expect_cancelled_and_freed(server, cancelled_before):
    """Within 5 s: no request running, no KV held, one more request counted cancelled."""
    deadline = time.time() + 5
    while _metric(server, "tpserve_requests_running") != 0 or \
            _metric(server, "tpserve_kv_cache_usage_ratio") != 0:
        assert time.time() < deadline, "the gone client's request still holds its KV"
        time.sleep(0.05)
    assert _metric(server, "tpserve_requests_total",
                   'api="http",status="cancelled"') == cancelled_before + 1


def test_client_gone_before_a_whole_answer_frees_kv(server, model_name):
    """Not streaming: the server has nothing to write until the end, yet a client that goes
    away (an SDK's timeout) is seen within 100 ms and its request cancelled, as vLLM does."""
    cancelled_before = _metric(server, "tpserve_requests_total", 'api="http",status="cancelled"')
    host, port = server.http.split(":")
    body = json.dumps({"model": model_name, "prompt": "Tell a story", "max_tokens": 400,
                       "temperature": 0, "ignore_eos": True}).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.time() + 30
        while _metric(server, "tpserve_requests_running") != 1:
            assert time.time() < deadline
            time.sleep(0.05)
    _expect_cancelled_and_freed(server, cancelled_before)


def _malformed(model):
    good = {"model": model, "prompt": "hi", "max_tokens": 2}
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    js = {"Content-Type": "application/json"}

    def post(path, body, status, param=None, headers=js):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return ("POST", path, raw, headers, status, param)

    def with_(base, **kv):
        return {**base, **kv}

    c, cc = "/v1/completions", "/v1/chat/completions"
    return [
        post(c, b"{not json", 400, "body"),
        post(c, b"[1, 2]", 400, "body"),
        post(c, b"", 400, "body"),
        post(c, with_(good, prompt=None), 400, "prompt"),
        post(c, with_(good, prompt=5), 400, "prompt"),
        post(c, with_(good, prompt=["a", "b"]), 400, "prompt"),
        post(c, with_(good, prompt=[1, "x"]), 400, "prompt[1]"),
        post(c, with_(good, prompt=[2 ** 40]), 400, "prompt[0]"),
        post(c, with_(good, prompt=[10 ** 7]), 400, "prompt[0]"),
        post(c, with_(good, max_completion_tokens=10 ** 6), 400, "max_completion_tokens"),
        post(c, with_(good, max_tokens=10 ** 12), 400, "max_tokens"),
        post(c, with_(good, max_tokens=-1), 400, "max_tokens"),
        post(c, with_(good, max_tokens=0), 400, "max_tokens"),
        post(c, with_(good, max_tokens="10"), 400, "max_tokens"),
        post(c, with_(good, max_tokens=1.5), 400, "max_tokens"),
        post(c, with_(good, max_tokens=10 ** 9), 400, "max_tokens"),
        post(c, with_(good, temperature="hot"), 400, "temperature"),
        post(c, with_(good, temperature=-1), 400, "temperature"),
        post(c, with_(good, top_p=2), 400, "top_p"),
        post(c, with_(good, top_k=-5), 400, "top_k"),
        post(c, with_(good, seed="3"), 400, "seed"),
        post(c, with_(good, stop=7), 400, "stop"),
        post(c, with_(good, stop=["a", 1]), 400, "stop[1]"),
        post(c, with_(good, stream="yes"), 400, "stream"),
        post(c, with_(good, stream_options={"include_usage": True}), 400, "stream_options"),
        post(c, with_(good, n=0), 400, "n"),
        post(c, with_(good, n=50), 400, "n"),
        post(c, with_(good, logprobs=99), 400, "logprobs"),
        post(c, with_(good, echo=True), 400, "echo"),
        post(c, with_(good, logit_bias={"1": 5}), 400, "logit_bias"),
        post(c, with_(good, user=5), 400, "user"),
        post(c, with_(good, model="gpt-4"), 404, "model"),
        post(c, good, 415, "Content-Type", headers={}),
        post(c, good, 415, "Content-Type", headers={"Content-Type": "text/plain"}),
        post(c, b"x" * (MAX_BODY + 1), 413, "body"),
        post(c, b"[" * 100000 + b"]" * 100000, 400, "body"),
        post(cc, with_(chat, messages=[]), 400, "messages"),
        post(cc, with_(chat, messages="hi"), 400, "messages"),
        post(cc, with_(chat, messages=[{"content": "hi"}]), 400, "messages[0].role"),
        post(cc, with_(chat, messages=[{"role": "user", "content": 5}]), 400,
             "messages[0].content"),
        post(cc, with_(chat, messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
             400, "messages[0].content[0].type"),
        post(cc, with_(chat, top_logprobs=2), 400, "top_logprobs"),
        post(cc, with_(chat, logprobs=True, top_logprobs=99), 400, "top_logprobs"),
        post(cc, with_(chat, tools=[{"type": "function"}]), 400, "tools[0].function"),
        ("GET", c, b"", {}, 405, None),
        ("DELETE", "/v1/models", b"", {}, 405, None),
        ("GET", "/v2/nothing", b"", {}, 404, None),
    ]


def test_malformed_requests(server, model_name):
    cases = _malformed(model_name)
    assert len(cases) >= 30
    for method, path, body, headers, status, param in cases:
        got, raw = _call(server.http, method, path, body, headers)
        what = f"{method} {path} {body[:80]!r} {headers}"
        assert got == status, f"{what}: {got} {raw[:300]!r}"
        error = json.loads(raw)["error"]
        assert error["message"] and error["type"], what
        if param is not None:
            assert error["param"] == param, f"{what}: {error}"
    # Still serving.
    status, raw = _call(server.http, "POST", "/v1/completions",
                        json.dumps({"prompt": "hi", "max_tokens": 2}).encode(),
                        {"Content-Type": "application/json"})
    assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] >= 1


def test_slow_loris_is_dropped_and_others_served(server, client, model_name):
    host, port = server.http.split(":")
    slow = socket.create_connection((host, int(port)), timeout=30)
    try:
        slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # never finished
        got = client.completions.create(model=model_name, prompt="Hi", max_tokens=2)
        assert got.usage.completion_tokens >= 1
        start = time.time()
        answer = b""
        while chunk := slow.recv(4096):  # the server answers (an error) and closes
            answer += chunk
        assert time.time() - start < 20
        assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer[:200]
    finally:
        slow.close()


def _raw(server, request_bytes, timeout_s=30):
    """Sends raw bytes and reads until the server closes: (elapsed s, the answer)."""
    host, port = server.http.split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        start = time.time()
        try:
            sock.sendall(request_bytes)
        except OSError:
            pass  # refused before all was sent: the answer is still there to read
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return time.time() - start, answer


def test_a_slow_loris_dripping_bytes_is_dropped_at_the_request_deadline(server, client,
                                                                        model_name):
    """One header byte per second keeps a per-read timeout happy forever; the server's
    deadline covers the whole request (10 s)."""
    host, port = server.http.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as slow:
        slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        start = time.time()
        closed_after = None
        for i in range(25):
            try:
                slow.sendall(b"X-Drip-%d: y\r\n" % i)
            except OSError:
                closed_after = time.time() - start
                break
            time.sleep(1)
        assert closed_after is not None and closed_after < 15, closed_after
    got = client.completions.create(model=model_name, prompt="Hi", max_tokens=2)
    assert got.usage.completion_tokens >= 1


def test_framing_limits_hold_before_a_body_is_read(server):
    """A chunked body over the limit (413: the limit holds without a Content-Length), a
    compressed body (415: the server never inflates), 1 MiB of headers (431), and a request
    line that never ends: each refused with an OpenAI error, the server serving on."""
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
    _, answer = _raw(server, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunk * 6)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"body: exceeds the limit of" in answer
    _, answer = _raw(server, head + b"Content-Encoding: gzip\r\nContent-Length: 20\r\n\r\n"
                     + b"\x1f\x8b" + b"\0" * 18)
    assert answer.startswith(b"HTTP/1.1 415") and b"Content-Encoding" in answer, answer[:300]
    _, answer = _raw(server, head + b"X-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431") and b"headers: exceed" in answer, answer[:300]
    _, answer = _raw(server, b"GET /" + b"a" * (8 << 20))  # no end of line
    assert answer.startswith(b"HTTP/1.1 4"), answer[:300]
    assert _get(server.http, "/health")[0] == 200


def _held_connections(address, count, timeout_s=20):
    """`count` idle connections the server has taken as served: one it answered at once (a 503:
    a connection from before, such as a /health probe, was still ending when it came) is
    replaced, until `count` are open with nothing said to them."""
    host, port = address.split(":")
    held = []
    deadline = time.time() + timeout_s
    while True:
        while len(held) < count:
            held.append(socket.create_connection((host, int(port)), timeout=30))
        time.sleep(0.3)
        for sock in list(held):
            sock.setblocking(False)
            try:
                sock.recv(1, socket.MSG_PEEK)  # an answer, or its end
            except BlockingIOError:
                sock.settimeout(30)
                continue  # silent: held
            except OSError:
                pass
            held.remove(sock)
            sock.close()
        if len(held) == count:
            return held
        assert time.time() < deadline, "the server would not hold the idle connections"


def test_connections_beyond_the_limit_are_answered_503_at_once(request, tmp_path_factory,
                                                                tpserve_bin, smollm_gguf):
    """--http_max_connections idle connections hold every slot: the next is told so (503), not
    queued unanswered; once they go, the server serves again."""
    srv = _start(request, tmp_path_factory, tpserve_bin, smollm_gguf, "openai-slots",
                 http_max_connections=4)
    idle = _held_connections(srv.http, 4)
    try:
        elapsed, answer = _raw(srv, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503") and b"at most 4" in answer, \
            (elapsed, answer[:300], srv.log_tail())
        assert elapsed < 2
    finally:
        for sock in idle:
            sock.close()
    deadline = time.time() + 10
    while _get(srv.http, "/health")[0] != 200:
        assert time.time() < deadline
        time.sleep(0.1)
    assert serve_procs.stop(srv, timeout_s=60) == 0, srv.log_tail()


def test_requests_counted_by_api(server):
    assert _metric(server, "tpserve_requests_total", 'api="http",status="ok"') >= 5
    assert _metric(server, "tpserve_requests_total", 'api="http",status="invalid_argument"') >= 20


def test_tls_keys_name_and_drain(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    """The gRPC port's TLS files and API keys on the HTTP port, --served_model_name, a full
    queue (429), and SIGTERM: /health and new requests 503 at once, the open streams finish,
    serve exits 0."""
    d = tmp_path_factory.mktemp("openai-pki")
    ca = pki.make_ca(d, "ca")
    key, cert = pki.make_cert(d, "server", ca, pki.SERVER_EXT)
    keys = d / "keys.txt"
    keys.write_text("sk-test-one\n")
    tls = ssl.create_default_context(cafile=str(ca[1]))
    srv = _start(request, tmp_path_factory, tpserve_bin, smollm_gguf, "openai-tls",
                 tls=tls, credentials=grpc.ssl_channel_credentials(ca[1].read_bytes()),
                 api_key_file=str(keys), tls_cert_file=str(cert), tls_key_file=str(key),
                 served_model_name="smol-test", max_running=1, max_queue=1)
    base = f"https://{srv.http}/v1"
    conn = _connect(srv.http, tls)
    conn.request("GET", "/v1/models")
    r = conn.getresponse()
    assert r.status == 401 and r.getheader("WWW-Authenticate") == "Bearer"
    assert json.loads(r.read())["error"]["type"] == "authentication_error"
    conn.close()
    # A body from a client without a key is never read: the 401 comes before it is sent.
    conn = _connect(srv.http, tls)
    conn.putrequest("POST", "/v1/completions")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(MAX_BODY))
    conn.endheaders()
    r = conn.getresponse()
    assert r.status == 401 and json.loads(r.read())["error"]["type"] == "authentication_error"
    conn.close()
    assert _get(srv.http, "/health", tls=tls)[0] == 200  # probes need no key
    with pytest.raises((http.client.HTTPException, OSError)):
        _get(srv.http, "/health")  # plaintext to a TLS port
    http_client = openai.DefaultHttpxClient(verify=tls, timeout=CALL_S)
    bad = openai.OpenAI(base_url=base, api_key="sk-wrong", max_retries=0, http_client=http_client)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="smol-test", prompt="hi", max_tokens=1)
    good = openai.OpenAI(base_url=base, api_key="sk-test-one", max_retries=0,
                         http_client=http_client)
    assert good.models.list().data[0].id == "smol-test"
    assert good.models.retrieve("smol-test").id == "smol-test"
    # Rotation: new files in place (another CA's certificate) serve the next connection.
    ca2 = pki.make_ca(d, "ca2")
    key2, cert2 = pki.make_cert(d, "server2", ca2, pki.SERVER_EXT)
    key.write_bytes(key2.read_bytes())
    cert.write_bytes(cert2.read_bytes())
    tls = ssl.create_default_context(cafile=str(ca2[1]))
    assert _get(srv.http, "/health", tls=tls)[0] == 200
    http_client = openai.DefaultHttpxClient(verify=tls, timeout=CALL_S)
    good = openai.OpenAI(base_url=base, api_key="sk-test-one", max_retries=0,
                         http_client=http_client)
    def open_stream(tokens):
        return good.completions.create(model="smol-test", prompt="Count:", max_tokens=tokens,
                                       temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})

    running = open_stream(40)
    chunks = [next(iter(running))]  # running: the one batch slot taken
    waiting = open_stream(4)  # the one queue place taken
    with pytest.raises(openai.RateLimitError) as full:
        open_stream(4)
    assert full.value.status_code == 429 and full.value.code == "queue_full"
    srv.proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 10
    while _get(srv.http, "/health", tls=tls)[0] != 503:
        assert time.time() < deadline, "/health still 200 while draining"
        time.sleep(0.05)
    with pytest.raises(openai.APIStatusError) as draining:
        good.completions.create(model="smol-test", prompt="hi", max_tokens=1)
    assert draining.value.status_code == 503
    chunks += list(running)
    assert len(chunks) == 40 and chunks[-1].choices[0].finish_reason == "length"
    assert len(list(waiting)) == 4
    assert serve_procs.wait_exit(srv, 60) == 0, srv.log_tail()
