"""A worker's Session lifecycle, against a real `tpserve worker` played by a fake coordinator
over the raw Session RPC:
 - heartbeats (Init.heartbeat_interval_ms) arrive at about the interval while the worker loads
   its weights, while it idles after Ready (with the steps it has done) and while an Init
   waits for a busy worker; an interval below the limit is refused;
 - a Session with a later coordinator_epoch takes the worker over, whether the current one is
   building its world (waiting on a peer), loading weights or serving: it gets Ready, and the
   superseded one is told why and its stream ends (ABORTED when its coordinator ends it on
   hearing why, CANCELLED when it does not);
 - a Session with an earlier (or the same) epoch is refused with FAILED_PRECONDITION while the
   later one holds the worker;
 - closing a Session mid-load (end of stream or Shutdown) abandons the load: a new Init gets
   Ready within one load time (measured here) plus 2 s, and the log shows the load cancelled.
Each test runs its own worker, every wait is bounded."""
import queue
import subprocess
import threading
import time

import grpc
import pytest

from tpserve.v1 import worker_pb2, worker_pb2_grpc
from worker_procs import free_port, stop, wait_healthy

SUPERSEDED = "superseded by a coordinator with a later epoch"
INTERVAL_MS = 20


class Session:
    """One Session on a worker, played as its coordinator. A thread reads the replies as they
    come, each with its arrival time, and then the RPC's status. `close_on_error`: end the
    stream on the first error message, as a coordinator that hears why would."""

    def __init__(self, address, close_on_error=True):
        self._channel = grpc.insecure_channel(address)
        self._out = queue.Queue()
        self._call = worker_pb2_grpc.WorkerStub(self._channel).Session(
            iter(self._out.get, None), timeout=120)
        self._close_on_error = close_on_error
        self._replies = queue.Queue()  # (time.monotonic(), WorkerMessage); None at the end
        self.received = []  # every reply taken by next() so far, skipped ones included
        self.code = None
        self.details = None
        self._ended = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        try:
            for message in self._call:
                self._replies.put((time.monotonic(), message))
                if message.error and self._close_on_error:
                    self.close()
            self.code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            self.code, self.details = e.code(), e.details()
        finally:
            self._ended.set()
            self._replies.put(None)

    def send(self, **fields):
        self._out.put(worker_pb2.CoordinatorMessage(**fields))
        return time.monotonic()

    def init(self, model, **overrides):
        """Sends an Init for a world of one (overridable); returns when it was sent."""
        fields = dict(model_path=str(model), rank=0, world_size=1,
                      backend=worker_pb2.COMM_BACKEND_AUTO, kv_budget_bytes=64 << 20, threads=1)
        fields.update(overrides)
        return self.send(init=worker_pb2.Init(**fields))

    def next(self, kind, timeout_s):
        """(arrival time, message) of the next reply of `kind`, skipping the others."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                item = self._replies.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no {kind} within {timeout_s} s; got {self.kinds()}")
            if item is None:
                self._replies.put(None)
                pytest.fail(f"the stream ended ({self.code} {self.details}) before a {kind}; "
                            f"got {self.kinds()}")
            self.received.append(item)
            if item[1].WhichOneof("kind") == kind:
                return item

    def drain(self):
        """Takes every reply that arrived so far (into `received`)."""
        while True:
            try:
                item = self._replies.get_nowait()
            except queue.Empty:
                return
            if item is None:
                self._replies.put(None)
                return
            self.received.append(item)

    def kinds(self):
        return [m.WhichOneof("kind") for _, m in self.received]

    def heartbeats(self, since=0.0, until=float("inf")):
        return [(t, m.heartbeat) for t, m in self.received
                if m.HasField("heartbeat") and since <= t < until]

    def wait_end(self, timeout_s):
        assert self._ended.wait(timeout_s), f"the stream did not end within {timeout_s} s"
        self.drain()
        return self.code, self.details

    def close(self):
        """Ends the stream (half-close), as a coordinator that is done."""
        self._out.put(None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._call.cancel()
        self._channel.close()


@pytest.fixture
def worker(tpserve_bin, smollm_gguf, tmp_path):
    """A plaintext worker serving from SmolLM2's directory: (address, its log's path)."""
    address = f"127.0.0.1:{free_port()}"
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(tpserve_bin), "worker", f"--listen={address}",
                                 f"--model={smollm_gguf}"],
                                stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_healthy(address)
        yield address, log_path
    finally:
        assert stop([proc]) == [0], log_path.read_text()[-3000:]


def log_since(log_path, offset):
    return log_path.read_bytes()[offset:].decode(errors="replace")


def await_log(log_path, offset, text, timeout_s=30.0):
    """Waits for `text` in the log past `offset`."""
    deadline = time.monotonic() + timeout_s
    while text not in log_since(log_path, offset):
        assert time.monotonic() < deadline, (text, log_since(log_path, offset)[-3000:])
        time.sleep(0.005)


def one_step(session, step_id):
    """Runs a one-token greedy step and returns its result."""
    session.send(step=worker_pb2.Step(step_id=step_id, sequences=[worker_pb2.StepSequence(
        seq_id=1, token_ids=[1], start_pos=0, block_table=[0], sample=True,
        sampling=worker_pb2.SamplingParams(top_p=1.0, repetition_penalty=1.0))]))
    _, message = session.next("step_result", 30)
    assert not message.step_result.error, message.step_result.error
    return message.step_result


def measure_load(address, model):
    """Seconds from Init to Ready of one exact-mode load (the longest this model takes)."""
    with Session(address) as s:
        sent = s.init(model, dequantize=True)
        ready_at, _ = s.next("ready", 60)
        s.send(shutdown=worker_pb2.Shutdown(reason="measured"))
        s.close()
        s.wait_end(30)
    return ready_at - sent


def test_heartbeat_interval_below_the_limit_is_refused(worker, smollm_gguf):
    address, _ = worker
    with Session(address) as s:
        s.init(smollm_gguf, heartbeat_interval_ms=5)
        _, message = s.next("error", 30)
        assert "Init: heartbeat_interval_ms 5 is below the limit of 10" in message.error
        assert s.wait_end(30)[0] == grpc.StatusCode.INVALID_ARGUMENT


def test_heartbeats_while_loading_and_while_idle(worker, smollm_gguf):
    address, _ = worker
    interval = INTERVAL_MS / 1000
    with Session(address) as s:
        sent = s.init(smollm_gguf, dequantize=True, heartbeat_interval_ms=INTERVAL_MS)
        ready_at, _ = s.next("ready", 60)
        load = s.heartbeats(until=ready_at)
        load_s = ready_at - sent
        # Throughout the load (the executor busy), at about the interval.
        assert len(load) >= max(2, int(load_s / interval / 4)), (load_s, len(load))
        times = [sent] + [t for t, _ in load] + [ready_at]
        assert max(b - a for a, b in zip(times, times[1:])) < 0.5, times
        assert all(h.steps_done == 0 for _, h in load)

        one_step(s, 1)
        idle_from = time.monotonic()
        time.sleep(1.0)  # idle
        s.drain()
        idle = s.heartbeats(since=idle_from + 0.1, until=idle_from + 1.0)
        expected = 0.9 / interval  # 45
        assert expected * 0.3 <= len(idle) <= expected * 1.5 + 2, len(idle)
        assert all(h.steps_done == 1 for _, h in idle), idle


def test_a_later_epoch_takes_over_a_session_waiting_on_its_peers(worker, smollm_gguf):
    address, log_path = worker
    with Session(address) as first, Session(address) as second:
        # Rank 0 of two: it asks the store for its peer, and no reply ever comes.
        first.init(smollm_gguf, world_size=2, coordinator_epoch=100, heartbeat_interval_ms=50)
        first.next("store_request", 30)
        second.init(smollm_gguf, coordinator_epoch=200)
        second.next("ready", 30)
        _, message = first.next("error", 10)
        assert message.error == SUPERSEDED
        code, details = first.wait_end(10)
        assert (code, details) == (grpc.StatusCode.ABORTED, SUPERSEDED)
        one_step(second, 1)  # the new Session serves
    assert ("a coordinator with epoch 200 takes this worker over from the Session of epoch 100"
            in log_path.read_text())


def test_a_later_epoch_takes_over_a_session_loading_weights(worker, smollm_gguf):
    address, log_path = worker
    with Session(address) as first, Session(address) as second:
        first.init(smollm_gguf, dequantize=True, coordinator_epoch=100)
        await_log(log_path, 0, "loading weights")
        second.init(smollm_gguf, coordinator_epoch=200)
        second.next("ready", 30)
        assert first.next("error", 10)[1].error == SUPERSEDED
        assert first.wait_end(10) == (grpc.StatusCode.ABORTED, SUPERSEDED)
        assert "ready" not in first.kinds()
    log = log_path.read_text()
    assert "weight load cancelled after" in log, log[-3000:]
    assert log.count("weights: rank 0 holds") == 1, log[-3000:]  # the second's load only


def test_a_later_epoch_takes_over_a_serving_session_of_a_hung_coordinator(worker, smollm_gguf):
    address, log_path = worker
    with Session(address, close_on_error=False) as first, Session(address) as second:
        first.init(smollm_gguf, coordinator_epoch=100)
        first.next("ready", 30)
        one_step(first, 1)
        second.init(smollm_gguf, coordinator_epoch=200)
        second.next("ready", 30)
        # Told why, it does not end its stream: the worker cuts it off.
        assert first.next("error", 10)[1].error == SUPERSEDED
        assert first.wait_end(10)[0] == grpc.StatusCode.CANCELLED
        one_step(second, 1)


TAKEN_OVER = ("a coordinator with a later epoch (200) has taken this worker over; this "
              "coordinator's epoch is 150")


def test_an_earlier_epoch_is_refused_while_a_later_one_holds_the_worker(worker, smollm_gguf):
    address, _ = worker
    with Session(address) as holder:
        holder.init(smollm_gguf, coordinator_epoch=200)
        holder.next("ready", 30)
        for epoch, message, graced in [
                (150, TAKEN_OVER, False),  # refused at once
                (0, "this worker already serves a Session of a coordinator with a later epoch",
                 True),
                (200, "this worker already serves a Session", True)]:
            with Session(address) as late:
                late.init(smollm_gguf, coordinator_epoch=epoch, heartbeat_interval_ms=50)
                assert late.next("error", 30)[1].error == message
                assert late.wait_end(30) == (grpc.StatusCode.FAILED_PRECONDITION, message)
                assert "ready" not in late.kinds()
                # A busy worker refuses after a one-second grace, heartbeating (every 50 ms).
                beats = len(late.heartbeats())
                assert (5 <= beats <= 30) if graced else beats <= 4, late.kinds()
        one_step(holder, 1)  # untouched
    # Free again, the worker still refuses the coordinator it was taken over from.
    with Session(address) as late:
        late.init(smollm_gguf, coordinator_epoch=150)
        assert late.next("error", 30)[1].error == TAKEN_OVER


@pytest.mark.parametrize("how", ["end_of_stream", "shutdown"])
def test_closing_a_session_mid_load_frees_the_worker_at_once(worker, smollm_gguf, how):
    address, log_path = worker
    load_s = measure_load(address, smollm_gguf)
    offset = log_path.stat().st_size
    with Session(address) as first:
        first.init(smollm_gguf, dequantize=True)
        await_log(log_path, offset, "loading weights")
        if how == "shutdown":
            first.send(shutdown=worker_pb2.Shutdown(reason="a peer died"))
        first.close()
        closed_at = time.monotonic()
        with Session(address) as second:
            second.init(smollm_gguf, dequantize=True)
            ready_at, _ = second.next("ready", 60)
        assert ready_at - closed_at < load_s + 2.0, (ready_at - closed_at, load_s)
        first.wait_end(10)
        assert "ready" not in first.kinds()
    log = log_since(log_path, offset)
    assert "weight load cancelled after" in log, log[-3000:]
    assert log.count("weights: rank 0 holds") == 1, log[-3000:]  # the second's load only
