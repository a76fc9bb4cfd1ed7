"""Hostile HTTP/1.1 framing against `serve --tp 2 --http_port` (issue 37: one chunked request
with a 70,000-byte trailer field aborted the whole server). Each variant (an overlong trailer
field, 200,000 small trailer fields, too many trailer fields, a chunk extension of many MiB,
Content-Length with Transfer-Encoding either way round, two Content-Lengths, a chunk size past
64 bits, pipelined requests, a pipelined smuggling attempt) gets its own status and an
OpenAI-shaped error naming the part and the limit, within seconds and with the server's memory
bounded, while three streams run alongside; then the server serves a normal streamed request
and the three streams end whole. Every socket has a timeout; the server is stopped in a
finalizer. Budget: about a minute on two cores."""
import concurrent.futures
import json
import socket
import threading
import time

import openai
import pytest

import serve_procs

TP = 2
CALL_S = 120
HEAD = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")
BODY = b'{"model": "m", "prompt": "Hi", "max_tokens": 1}'


def _chunked(body, trailer=b"", extension=b""):
    return HEAD + b"%x%s\r\n%s\r\n0\r\n%s\r\n" % (len(body), extension, body, trailer)


@pytest.fixture(scope="module")
def server(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    log = tmp_path_factory.mktemp("framing") / "serve.log"
    srv = serve_procs.start_serving_http(request, tpserve_bin, smollm_gguf, log, tp=TP,
                                         threads=1)
    yield srv
    assert serve_procs.stop(srv, timeout_s=60) == 0, srv.log_tail()


def _exchange(server, data, timeout_s=20):
    """Sends `data` (from a thread: the server may answer and close before it has all of it)
    and reads until the server closes: (status, body of the first answer, all bytes)."""
    with socket.create_connection(server.http, timeout=timeout_s) as sock:
        def send():
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # refused and closed before all of it was sent
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass  # after its answer, the server reset a connection still sending
        sender.join(timeout_s)
    assert answer.startswith(b"HTTP/1.1 "), answer[:300]
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(answer[9:12]), body, answer


def _rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _error(body):
    return json.loads(body)["error"]["message"]


HOSTILE = [
    ("a 70,000-byte trailer field", _chunked(BODY, b"X-T: " + b"a" * 70000 + b"\r\n"),
     431, "trailers: exceed the limit of 16384 bytes"),
    ("200,000 small trailer fields", _chunked(BODY, b"t: v\r\n" * 200000),
     431, "trailers: exceed the limit of 16384 bytes"),
    ("101 trailer fields", _chunked(BODY, b"".join(b"t%d: v\r\n" % i for i in range(101))),
     431, "trailers: more than 100 fields"),
    ("101 header fields", b"GET /health HTTP/1.1\r\n"
     + b"".join(b"h%d: v\r\n" % i for i in range(101)) + b"\r\n",
     431, "headers: more than 100 fields"),
    ("an 8 MiB chunk extension", _chunked(BODY, extension=b";x=" + b"e" * (8 << 20)),
     400, "chunk extensions: exceed the limit of 4096 bytes"),
    ("4 KiB of extensions over many chunks",
     HEAD + b"".join(b"1;%s\r\n%s\r\n" % (b"e" * 100, BODY[i:i + 1]) for i in range(45))
     + b"0\r\n\r\n", 400, "chunk extensions: exceed the limit of 4096 bytes"),
    ("Content-Length then Transfer-Encoding",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "Transfer-Encoding"),
    ("Transfer-Encoding then Content-Length",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     b"Content-Length: 4\r\n\r\n0\r\n\r\n", 400, "Content-Length"),
    ("two Content-Lengths that differ",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n"
     b"\r\n{}", 400, "Content-Length"),
    ("two Content-Lengths alike",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n"
     b"\r\n{}", 400, "Content-Length: sent twice"),
    ("a chunk size past 64 bits", HEAD + b"10000000000000002\r\n{}\r\n0\r\n\r\n",
     400, "chunked body"),
    ("a chunk size within 64 bits, past the body limit", HEAD + b"ffffffffffffffff\r\n{}",
     413, "body: exceeds the limit"),
]


@pytest.mark.parametrize("what,data,status,says", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_framing_gets_its_status_and_the_server_lives(server, what, data, status,
                                                              says):
    rss = _rss_kib(server.pid)
    start = time.time()
    got, body, _ = _exchange(server, data)
    assert (got, says in _error(body)) == (status, True), (what, body[:300])
    assert time.time() - start < 10, what
    assert server.proc.poll() is None, server.log_tail()
    assert _rss_kib(server.pid) - rss < 64 << 10, what  # KiB: bounded, not the bytes sent
    assert _exchange(server, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[0] \
        == 200


def test_pipelined_requests_are_answered_in_turn_and_a_smuggled_one_refused(server):
    model = json.loads(_exchange(server, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
                                 b"Connection: close\r\n\r\n")[1])["data"][0]["id"]
    good = _chunked(BODY.replace(b'"m"', json.dumps(model).encode()))
    _, _, both = _exchange(server, good + b"GET /health HTTP/1.1\r\nHost: x\r\n"
                           b"Connection: close\r\n\r\n")
    assert both.count(b"HTTP/1.1 200") == 2, both[:600]
    assert both.index(b"text_completion") < both.rindex(b"HTTP/1.1 200"), both[:600]
    # A request hidden behind an ambiguous one is never served: the connection closes at 400.
    _, _, smuggled = _exchange(
        server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert smuggled.startswith(b"HTTP/1.1 400") and smuggled.count(b"HTTP/1.1 ") == 1, smuggled


def test_streams_running_through_the_attacks_end_whole(server):
    client = openai.OpenAI(base_url=f"http://{server.http[0]}:{server.http[1]}/v1",
                           api_key="unused", timeout=CALL_S, max_retries=0)
    model = client.models.list().data[0].id

    def stream(n, started=None):
        s = client.completions.create(model=model, prompt="Tell a story", max_tokens=n,
                                      temperature=0, stream=True,
                                      extra_body={"ignore_eos": True})
        reasons = []
        for c in s:
            if started is not None:
                started.release()
                started = None
            reasons += [c.choices[0].finish_reason] if c.choices else []
        return reasons[-1]

    started = threading.Semaphore(0)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        running = [pool.submit(stream, 256, started) for _ in range(3)]
        for _ in running:
            assert started.acquire(timeout=CALL_S)  # each has its first token
        for what, data, status, _ in HOSTILE:
            assert _exchange(server, data)[0] == status, what
        assert server.proc.poll() is None, server.log_tail()
        assert stream(4) == "length"  # a normal streamed request, after them all
        assert [r.result(timeout=CALL_S) for r in running] == ["length"] * 3
