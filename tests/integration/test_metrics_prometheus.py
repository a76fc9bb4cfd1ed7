"""`tpserve serve --metrics_port=Q`: the Prometheus metrics of the coordinator (at
http://HOST:Q/metrics) and of each worker rank r (at http://HOST:(Q+1+r)/metrics).

Two tests, each on a server of its own (SmolLM2, TP=2, one thread per worker), so that the
counters start from zero:

1. test_metrics_text_names_and_types — no Prometheus: after one request and one refusal,
   GET the three /metrics pages and check every metric of the contract is there with the
   right `# TYPE` line and that the time histograms' buckets run from le="0.001" to le="60".
2. test_prometheus_scrapes_the_load — a real Prometheus server (the Debian `prometheus`
   package; the test is skipped when the binary is missing) scrapes the three targets every
   second while a bounded load runs (12 greedy streams 4 at a time, 2 refusals, 1 cancelled
   stream); then its HTTP API must agree with what the clients saw: tokens streamed,
   requests by status, first tokens, worker up/bytes, and a second burst must grow the
   workers' all-reduce byte counters.

Every RPC has a deadline, every wait a bound; the servers and Prometheus are stopped in
finalizers (SIGTERM, then SIGKILL). Budget: well under two minutes on two cores."""
import concurrent.futures
import json
import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import grpc
import pytest

import serve_procs
import worker_procs
from serve_procs import collect
from tpserve.v1 import generate_pb2 as pb
from tpserve.v1 import generate_pb2_grpc as pb_grpc

TP = 2
HOST = "127.0.0.1"
RPC_S = 30
STREAM_S = 120
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

# The contract: coordinator metrics and their types.
COORDINATOR_METRICS = {
    "tpserve_requests_total": "counter",
    "tpserve_time_to_first_token_seconds": "histogram",
    "tpserve_inter_token_latency_seconds": "histogram",
    "tpserve_request_duration_seconds": "histogram",
    "tpserve_queue_duration_seconds": "histogram",
    "tpserve_prompt_tokens_total": "counter",
    "tpserve_generated_tokens_total": "counter",
    "tpserve_requests_running": "gauge",
    "tpserve_requests_waiting": "gauge",
    "tpserve_kv_cache_usage_ratio": "gauge",
    "tpserve_batch_size": "histogram",
    "tpserve_step_duration_seconds": "histogram",
    "tpserve_step_overhead_seconds": "histogram",
    "tpserve_preemptions_total": "counter",
    "tpserve_prefix_cache_queries_total": "counter",
    "tpserve_prefix_cache_hits_total": "counter",
    "tpserve_prefix_cache_blocks": "gauge",
    "tpserve_prefix_cache_evictions_total": "counter",
    "tpserve_worker_up": "gauge",
    "tpserve_world_size": "gauge",
}
WORKER_METRICS = {
    "tpserve_worker_step_duration_seconds": "histogram",
    "tpserve_worker_allreduce_duration_seconds": "histogram",
    "tpserve_worker_allreduce_bytes_total": "counter",
    "tpserve_worker_weight_bytes": "gauge",
    "tpserve_worker_kv_cache_bytes": "gauge",
    "tpserve_worker_threads": "gauge",
    "tpserve_worker_communicator_info": "gauge",
}
STATUSES = ["ok", "cancelled", "invalid_argument", "resource_exhausted", "unavailable",
            "deadline_exceeded", "internal"]
# Histograms of durations: buckets from 1 ms to 60 s, except a collective's, which over
# shared memory takes microseconds (from 5 us), and a step's overhead (from 10 us).
FIRST_BUCKET, LAST_BUCKET = 0.001, 60.0
FIRST_BUCKET_OF = {"tpserve_worker_allreduce_duration_seconds": 5e-6,
                   "tpserve_step_overhead_seconds": 1e-5}


# --- ports, servers -------------------------------------------------------------------------

def metrics_url(port):
    return f"http://{HOST}:{port}/metrics"


def http_get(url, timeout_s=5.0):
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.status, r.read().decode("utf-8", errors="replace")


def wait_metrics(server, ports, timeout_s=30.0):
    """Polls GET /metrics on every port until each answers 200; fails with the log tail."""
    deadline = time.monotonic() + timeout_s
    pending = list(ports)
    last = {}
    while pending:
        if server.proc.poll() is not None:
            raise RuntimeError(f"serve exited with {server.proc.returncode}:\n"
                               f"{server.log_tail()}")
        for port in list(pending):
            try:
                status, _ = http_get(metrics_url(port), timeout_s=2.0)
                if status == 200:
                    pending.remove(port)
                last[port] = status
            except (urllib.error.URLError, OSError) as e:
                last[port] = repr(e)
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"/metrics not answering on {pending} within {timeout_s}s "
                               f"(last: {last}):\n{server.log_tail()}")
        time.sleep(0.2)


def start_server(request, tmp_path, tpserve_bin, model):
    """`tpserve serve --tp=2 --threads=1 --metrics_port=Q`, SERVING and its three /metrics
    pages answering. Returns (server, Q)."""
    q = worker_procs.free_port_run(TP + 1, HOST)
    server = serve_procs.start(tpserve_bin, model, tmp_path / "serve.log", host=HOST,
                               tp=TP, threads=1, metrics_port=q)
    request.addfinalizer(lambda: serve_procs.cleanup(server))  # bounded, idempotent
    serve_procs.wait_serving(server, timeout_s=120)
    assert len(server.workers) == TP, \
        f"expected {TP} worker children of serve, found {server.workers}:\n{server.log_tail()}"
    wait_metrics(server, [q + i for i in range(TP + 1)])
    return server, q


def stop_cleanly(server):
    code = serve_procs.stop(server, timeout_s=60)
    left = serve_procs.wait_workers_gone(server)
    serve_procs.kill_workers(server)
    assert code == 0, f"serve exited with {code} on SIGTERM:\n{server.log_tail()}"
    assert left == [], f"workers {left} outlived serve"


# --- requests -------------------------------------------------------------------------------

def greedy(max_tokens, ignore_eos=False, **kw):
    return pb.GenerateRequest(max_tokens=max_tokens, temperature=0.0, ignore_eos=ignore_eos,
                              **kw)


def chat(*turns):
    return [pb.ChatMessage(role=r, content=c) for r, c in turns]


SUBJECTS = ["the moon", "a red bicycle", "winter in Norway", "how bread rises",
            "the history of chess", "a lighthouse keeper", "prime numbers", "the colour blue",
            "an old library", "volcanoes", "a jazz trio", "honey bees"]


def load_requests():
    """12 distinct greedy requests, max_tokens 4..16, raw prompts and chats, every other one
    with ignore_eos."""
    reqs = []
    for i, subject in enumerate(SUBJECTS):
        r = greedy(max_tokens=4 + (i * 5) % 13, ignore_eos=i % 2 == 0)
        if i % 2 == 0:
            r.prompt = f"Write one sentence about {subject}:"
        else:
            r.messages.extend(chat(("user", f"Tell me one fact about {subject}.")))
        reqs.append(r)
    assert {r.max_tokens for r in reqs} <= set(range(4, 17))
    return reqs


def run_pool(stub, reqs, parallel):
    """Runs the requests `parallel` at a time; returns their Streams in order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = [pool.submit(lambda r: collect(stub.Generate(r, timeout=STREAM_S)), r)
                   for r in reqs]
        return [f.result(timeout=STREAM_S + 30) for f in futures]


def refused(stub, req):
    """The status code of a Generate that must fail before any token."""
    with pytest.raises(grpc.RpcError) as e:
        for m in stub.Generate(req, timeout=RPC_S):
            assert not m.token_ids, "a refused request streamed tokens"
    return e.value.code()


CANCEL_MAX_TOKENS = 40
CANCEL_READ = 3  # messages read before cancelling


def cancelled_stream(stub):
    """Starts a long greedy stream, reads CANCEL_READ messages, cancels it. Returns the
    number of token ids the client received."""
    call = stub.Generate(greedy(CANCEL_MAX_TOKENS, ignore_eos=True,
                                prompt="Count slowly: one, two, three,"), timeout=STREAM_S)
    received = 0
    for _ in range(CANCEL_READ):
        m = next(call)
        assert m.finish_reason == 0, "the stream to cancel finished early"
        received += len(m.token_ids)
    call.cancel()
    with pytest.raises(grpc.RpcError) as e:
        for _ in call:
            pass
    assert e.value.code() == grpc.StatusCode.CANCELLED
    return received


# --- the Prometheus text format -------------------------------------------------------------

TYPE_RE = re.compile(r"^# TYPE (\S+) (\S+)\s*$")
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LE_RE = re.compile(r'le="([^"]*)"')


def parse_text(text):
    """{name: type} from the # TYPE lines and {sample name: [(labels text, value)]}."""
    types, samples = {}, {}
    for line in text.splitlines():
        m = TYPE_RE.match(line)
        if m:
            types[m.group(1)] = m.group(2)
            continue
        if line.startswith("#") or not line.strip():
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"not a sample line: {line!r}"
        samples.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    return types, samples


def check_page(name, text, contract, extra_label=None):
    """Every metric of `contract` has its # TYPE line and samples; time histograms have
    buckets from 1 ms to 60 s. Returns the parsed samples."""
    types, samples = parse_text(text)
    problems = []
    for metric, kind in contract.items():
        if types.get(metric) != kind:
            problems.append(f"{metric}: # TYPE {types.get(metric, '(missing)')}, want {kind}")
            continue
        series = samples.get(metric + "_bucket" if kind == "histogram" else metric, [])
        if not series:
            problems.append(f"{metric}: no samples")
            continue
        if extra_label and not all(extra_label in labels for labels, _ in series):
            problems.append(f"{metric}: a series without {extra_label}: {series}")
        if kind == "histogram":
            for suffix in ("_sum", "_count"):
                if not samples.get(metric + suffix):
                    problems.append(f"{metric}{suffix}: no samples")
            les = sorted({m for labels, _ in series for m in LE_RE.findall(labels)},
                         key=lambda s: float(s.replace("Inf", "inf")))
            if "+Inf" not in les:
                problems.append(f"{metric}: no le=\"+Inf\" bucket ({les})")
            if metric.endswith("_seconds"):
                finite = [float(le) for le in les if le != "+Inf"]
                first = FIRST_BUCKET_OF.get(metric, FIRST_BUCKET)
                if not finite or not math.isclose(finite[0], first) \
                        or not math.isclose(finite[-1], LAST_BUCKET):
                    problems.append(f"{metric}: buckets {les}, want le=\"{first:g}\" .. le=\"60\"")
                elif '0.001' not in les or '60' not in les:
                    problems.append(f"{metric}: buckets spelled {les[0]!r} .. {les[-2]!r}, "
                                    f"want \"0.001\" .. \"60\"")
    assert not problems, f"{name} /metrics:\n  " + "\n  ".join(problems) + \
        f"\n--- page ---\n{text[:6000]}"
    return samples


def test_metrics_text_names_and_types(request, tmp_path, tpserve_bin, smollm_gguf):
    server, q = start_server(request, tmp_path, tpserve_bin, smollm_gguf)
    with grpc.insecure_channel(server.address) as ch:
        stub = pb_grpc.GenerationStub(ch)
        # One finished request and one refusal, so that label sets created on first use exist.
        res = collect(stub.Generate(greedy(3, ignore_eos=True, prompt="Hello there,"),
                                    timeout=STREAM_S))
        assert len(res.ids) == 3
        assert refused(stub, pb.GenerateRequest(prompt="hi", max_tokens=0)) == \
            grpc.StatusCode.INVALID_ARGUMENT

        status, text = http_get(metrics_url(q))
        assert status == 200
        samples = check_page("coordinator", text, COORDINATOR_METRICS)
        by_status = dict(samples["tpserve_requests_total"])
        assert any('status="ok"' in k and v == 1 for k, v in by_status.items()), by_status
        assert any('status="invalid_argument"' in k and v == 1 for k, v in by_status.items()), \
            by_status
        generated = sum(v for _, v in samples["tpserve_generated_tokens_total"])
        assert generated == 3, f"tpserve_generated_tokens_total {generated}, the client got 3"
        assert [v for _, v in samples["tpserve_world_size"]] == [float(TP)]
        up = sorted(samples["tpserve_worker_up"])
        assert [v for _, v in up] == [1.0] * TP and \
            all(f'rank="{r}"' in up[r][0] for r in range(TP)), up

        for rank in range(TP):
            status, text = http_get(metrics_url(q + 1 + rank))
            assert status == 200
            samples = check_page(f"worker rank {rank}", text, WORKER_METRICS,
                                 extra_label=f'rank="{rank}"')
            assert sum(v for _, v in samples["tpserve_worker_allreduce_bytes_total"]) > 0
            assert sum(v for _, v in samples["tpserve_worker_weight_bytes"]) > 0
    stop_cleanly(server)


# --- a real Prometheus ----------------------------------------------------------------------

PROMETHEUS_CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tpserve-coordinator
    static_configs:
      - targets: ["{host}:{q}"]
  - job_name: tpserve-worker
    static_configs:
{workers}
"""
WORKER_TARGET = """\
      - targets: ["{host}:{port}"]
        labels:
          tp_rank: "{rank}"
"""


class Prometheus:
    def __init__(self, proc, base, log_path):
        self.proc, self.base, self.log_path = proc, base, log_path

    def log_tail(self, chars=3000):
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"

    def stop(self, timeout_s=10.0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)

    def query(self, expr):
        """Instant query: [(labels dict, value)]."""
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        _, body = http_get(url)
        reply = json.loads(body)
        assert reply["status"] == "success", reply
        assert reply["data"]["resultType"] == "vector", reply
        return [(r["metric"], float(r["value"][1])) for r in reply["data"]["result"]]

    def scalar(self, expr):
        """The value of a query that gives at most one series (0 when none)."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr}: {result}"
        return result[0][1] if result else 0.0

    def wait_scraped_after(self, t, timeout_s=20.0):
        """Waits until every target has been scraped (successfully) at a time later than t
        (seconds since the epoch); returns the `up` series."""
        deadline = time.monotonic() + timeout_s
        while True:
            stamps = self.query("timestamp(up)")
            ups = self.query("up")
            if len(stamps) == TP + 1 and all(v > t for _, v in stamps) \
                    and all(v == 1 for _, v in ups):
                return ups
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"targets not all scraped after {t} within {timeout_s}s: timestamp(up) "
                    f"{stamps}, up {ups}; targets: {self.targets()}\n{self.log_tail()}")
            time.sleep(0.25)

    def targets(self):
        try:
            _, body = http_get(f"{self.base}/api/v1/targets")
            return [(t["labels"], t["health"], t.get("lastError"))
                    for t in json.loads(body)["data"]["activeTargets"]]
        except Exception as e:  # only for messages
            return repr(e)


def start_prometheus(request, tmp_path, q):
    workers = "".join(WORKER_TARGET.format(host=HOST, port=q + 1 + r, rank=r)
                      for r in range(TP))
    config = tmp_path / "prometheus.yml"
    config.write_text(PROMETHEUS_CONFIG.format(host=HOST, q=q, workers=workers))
    port = worker_procs.free_port_run(1, HOST)
    log_path = tmp_path / "prometheus.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address={HOST}:{port}", "--log.level=info"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=tmp_path)
    prom = Prometheus(proc, f"http://{HOST}:{port}", log_path)
    request.addfinalizer(prom.stop)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {proc.returncode}:\n{prom.log_tail()}")
        try:
            if http_get(f"{prom.base}/-/ready", timeout_s=2.0)[0] == 200:
                return prom
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"prometheus not ready within 30s:\n{prom.log_tail()}")
        time.sleep(0.2)


def by_label(series, label):
    return {m.get(label): v for m, v in series}


def test_prometheus_scrapes_the_load(request, tmp_path, tpserve_bin, smollm_gguf):
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip(f"no prometheus binary ({PROMETHEUS}): apt-get install prometheus")
    t0 = time.monotonic()
    server, q = start_server(request, tmp_path, tpserve_bin, smollm_gguf)
    prom = start_prometheus(request, tmp_path, q)
    # All three targets up before the load (and the config's jobs and ranks as meant).
    ups = prom.wait_scraped_after(time.time())
    assert sorted((m["job"], m.get("tp_rank", "")) for m, _ in ups) == \
        [("tpserve-coordinator", "")] + [("tpserve-worker", str(r)) for r in range(TP)], ups

    with grpc.insecure_channel(server.address) as ch:
        stub = pb_grpc.GenerationStub(ch)
        # --- the load: 12 streams 4 at a time, 2 refusals, 1 cancelled stream.
        reqs = load_requests()
        bad = [pb.GenerateRequest(prompt="hi", max_tokens=0),
               pb.GenerateRequest(messages=chat(("user", "hi")), max_tokens=0)]
        results = {}

        def refusals():
            results["bad"] = [refused(stub, r) for r in bad]
        side = threading.Thread(target=refusals)
        side.start()
        streams = run_pool(stub, reqs, parallel=4)
        side.join(timeout=RPC_S * 3)
        assert not side.is_alive()
        assert results["bad"] == [grpc.StatusCode.INVALID_ARGUMENT] * 2, results["bad"]
        cancel_received = cancelled_stream(stub)
        load_end = time.time()

        completed_tokens = sum(len(s.ids) for s in streams)
        for r, s in zip(reqs, streams):
            assert 1 <= len(s.ids) <= r.max_tokens
            assert s.usage.completion_tokens == len(s.ids)
        received = completed_tokens + cancel_received
        first_tokens = sum(1 for s in streams if s.ids) + (1 if cancel_received else 0)
        assert cancel_received >= 1  # three messages were read, each with a token
        prompt_tokens = sum(s.usage.prompt_tokens for s in streams)

        # --- what Prometheus saw. Counters are updated before the streams end (or shortly
        # after): wait for a scrape of every target taken after the load, then poll until the
        # values settle or ~20 s pass.
        prom.wait_scraped_after(load_end + 0.5)

        def observe():
            return {
                "generated": prom.scalar("sum(tpserve_generated_tokens_total)"),
                "ttft": prom.scalar("sum(tpserve_time_to_first_token_seconds_count)"),
                "status": by_label(prom.query("sum by (status) (tpserve_requests_total)"),
                                   "status"),
                "duration": prom.scalar("sum(tpserve_request_duration_seconds_count)"),
                "queue": prom.scalar("sum(tpserve_queue_duration_seconds_count)"),
                "prompt": prom.scalar("sum(tpserve_prompt_tokens_total)"),
                "itl": prom.scalar("sum(tpserve_inter_token_latency_seconds_count)"),
                "steps": prom.scalar("sum(tpserve_step_duration_seconds_count)"),
                "batch_count": prom.scalar("sum(tpserve_batch_size_count)"),
                "batch_sum": prom.scalar("sum(tpserve_batch_size_sum)"),
                "running": prom.scalar("sum(tpserve_requests_running)"),
                "waiting": prom.scalar("sum(tpserve_requests_waiting)"),
                "kv_ratio": prom.query("tpserve_kv_cache_usage_ratio"),
                "worker_up": prom.query("tpserve_worker_up"),
            }

        # The cancelled stream: the server may have counted tokens it had already sent (into
        # gRPC's buffers) or produced before it saw the cancel but that the client never read,
        # up to the stream's max_tokens; so the generated total is at least what the clients
        # got and at most that plus the cancelled stream's unread remainder.
        slack = CANCEL_MAX_TOKENS - cancel_received
        want_status = {"ok": len(streams), "invalid_argument": len(bad), "cancelled": 1}

        def settled(o):
            statuses = {k: v for k, v in o["status"].items() if v}
            return (received <= o["generated"] <= received + slack
                    and o["ttft"] == first_tokens and statuses == want_status
                    and o["running"] == 0 and o["waiting"] == 0)

        deadline = time.monotonic() + 20
        seen = observe()
        while not settled(seen) and time.monotonic() < deadline:
            time.sleep(0.5)
            seen = observe()
        context = (f"clients received {received} tokens ({completed_tokens} in "
                   f"{len(streams)} finished streams, {cancel_received} in the cancelled "
                   f"one), {first_tokens} got a first token; Prometheus: {seen}")

        print(context)  # shown with pytest -s
        assert received <= seen["generated"] <= received + slack, \
            f"sum(tpserve_generated_tokens_total) = {seen['generated']}: " + context
        assert seen["ttft"] == first_tokens, \
            f"tpserve_time_to_first_token_seconds_count = {seen['ttft']}: " + context
        statuses = {k: v for k, v in seen["status"].items() if v}
        assert statuses == want_status, \
            f"tpserve_requests_total by status {seen['status']}, want {want_status}: " + context
        assert set(seen["status"]) <= set(STATUSES), seen["status"]
        assert seen["running"] == 0 and seen["waiting"] == 0, context
        # One duration per finished request: the 12, perhaps the cancelled one, never more
        # than every request made.
        assert len(streams) <= seen["duration"] <= len(streams) + 1 + len(bad), context
        assert seen["queue"] >= len(streams), context
        # Prompt tokens of the finished streams, the cancelled prompt's (< 64) on top.
        assert prompt_tokens < seen["prompt"] <= prompt_tokens + 64, \
            f"sum(tpserve_prompt_tokens_total) = {seen['prompt']}, finished streams' prompts " \
            f"{prompt_tokens}: " + context
        # Inter-token latencies: one per token after the first of each request, at most.
        assert 0 < seen["itl"] <= seen["generated"] - first_tokens + slack, context
        # Every streamed token came from one sequence of one step.
        assert seen["steps"] > 0 and seen["batch_count"] > 0, context
        assert seen["batch_sum"] >= received, context
        assert all(0 <= v <= 1 for _, v in seen["kv_ratio"]) and seen["kv_ratio"], context
        # The coordinator's view of its world: one series per rank, each 1.
        assert sorted((m.get("rank"), v) for m, v in seen["worker_up"]) == \
            [(str(r), 1.0) for r in range(TP)], f"tpserve_worker_up: {seen['worker_up']}"

        # --- workers: each target reports its own rank, and has reduced something.
        def worker_values(metric):
            series = prom.query(f"sum by (rank, tp_rank) ({metric})")
            for m, _ in series:
                assert m.get("rank") == m.get("tp_rank"), \
                    f"{metric}: the worker scraped as rank {m.get('tp_rank')} says rank " \
                    f"{m.get('rank')}: {series}"
            got = by_label(series, "rank")
            assert sorted(got) == [str(r) for r in range(TP)], f"{metric}: {series}"
            return got

        before = worker_values("tpserve_worker_allreduce_bytes_total")
        assert all(v > 0 for v in before.values()), f"all-reduce bytes {before}"
        for metric in ("tpserve_worker_allreduce_duration_seconds_count",
                       "tpserve_worker_step_duration_seconds_count",
                       "tpserve_worker_weight_bytes", "tpserve_worker_kv_cache_bytes"):
            values = worker_values(metric)
            assert all(v > 0 for v in values.values()), f"{metric}: {values}"

        # --- a second burst grows every rank's all-reduce bytes.
        burst = run_pool(stub, [greedy(6, ignore_eos=True, prompt=f"Say something about {s}:")
                                for s in SUBJECTS[:4]], parallel=4)
        assert all(len(s.ids) == 6 for s in burst)
        burst_end = time.time()
        prom.wait_scraped_after(burst_end + 0.5)
        after = worker_values("tpserve_worker_allreduce_bytes_total")
        assert all(after[r] > before[r] for r in before), \
            f"all-reduce bytes before the burst {before}, after {after}"
        # And the coordinator counted the burst's tokens too.
        generated_after = prom.scalar("sum(tpserve_generated_tokens_total)")
        assert generated_after - seen["generated"] == 24, \
            f"generated tokens {seen['generated']} -> {generated_after} over a 24-token burst"

        # All three targets healthy throughout the end.
        ups = prom.query("up")
        assert len(ups) == TP + 1 and all(v == 1 for _, v in ups), ups

    stop_cleanly(server)
    prom.stop()
    assert time.monotonic() - t0 < 120, f"took {time.monotonic() - t0:.0f}s"
