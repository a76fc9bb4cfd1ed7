"""Client streams for the fault tests: concurrent streams on threads through the Python client,
each one's ids, text, finish reason, reported seed and resumes, and when every delta arrived;
and a bounded wait."""
import threading
import time


class Streams:
    """Runs requests as concurrent client streams on threads; records each stream's ids,
    text, finish reason, reported seed, resumes, and when every delta arrived."""

    def __init__(self, client, requests, timeout_s=600):
        self.results = [None] * len(requests)
        self.arrivals = []  # monotonic time of every delta, all streams
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(client, i, r, timeout_s),
                                          daemon=True)
                         for i, r in enumerate(requests)]
        for t in self._threads:
            t.start()

    def _run(self, client, i, request, timeout_s):
        ids, text, finish = [], [], None
        try:
            stream = client.stream(timeout=timeout_s, **request)
            for d in stream:
                with self._lock:
                    self.arrivals.append(time.monotonic())
                ids.extend(d.token_ids)
                text.append(d.text)
                finish = d.finish_reason or finish
            self.results[i] = dict(ids=ids, text="".join(text), finish=finish,
                                   seed=stream.seed, resumes=stream.resumes)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.results[i] = dict(error=repr(e), ids=ids)

    def tokens(self):
        with self._lock:
            return len(self.arrivals)

    def first_arrival_after(self, t):
        with self._lock:
            return next((a for a in self.arrivals if a > t), None)

    def join(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "streams still running"
        return self.results


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
