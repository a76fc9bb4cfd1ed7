"""A Docker engine for the image and Compose tests, on a machine with no image registry:

- `Daemon.start()` uses the engine DOCKER_HOST (or the default socket) names when one answers;
  otherwise it starts a private `dockerd` (no iptables, no IP forwarding, no default bridge)
  with its own socket and exec root in a temporary folder, and its images and build cache in
  CACHE_DIR, so that they last between runs on the same machine. `stop()` stops only a
  daemon it started, by its PID, bounded.
- `ensure_debian_base()` makes the `debian:12` and `debian:12-slim` images the Dockerfile
  starts from, with `debootstrap --variant=minbase bookworm` and `docker import`, unless the
  engine has them already (cached).

- `stream_through()` runs a streaming `tpserve-cli generate --json` and hits it with a fault
  (a `docker stop`, a killed worker) once its first tokens have arrived, then reads it to the
  end, each message with its arrival time; `assert_completed()` checks that it finished with
  the tokens of `undisturbed_tokens()`, the same request run alone. `parse_time()` reads
  Docker's timestamps.

Skips (pytest.skip with the reason) when the docker client, dockerd or debootstrap is not
installed, or dockerd does not start here; with TPSERVE_REQUIRE_DOCKER=1 in the environment
(.ci/run sets it) each of these fails instead (pytest.fail, same reason), so that a run where
the container tests could not run is not green."""
import datetime
import json
import os
import pathlib
import select
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

CACHE_DIR = pathlib.Path(os.environ.get("TPSERVE_DOCKER_CACHE",
                                        pathlib.Path.home() / ".cache" / "tpserve-docker"))
MIRROR = "http://deb.debian.org/debian"
BASE_TAGS = ("debian:12", "debian:12-slim")
REQUIRE_DOCKER = os.environ.get("TPSERVE_REQUIRE_DOCKER") == "1"


def _unavailable(reason):
    """The engine cannot be had here: skips the test, or fails it under TPSERVE_REQUIRE_DOCKER=1."""
    if REQUIRE_DOCKER:
        pytest.fail(f"{reason}\n(TPSERVE_REQUIRE_DOCKER=1: the container tests must run)",
                    pytrace=False)
    pytest.skip(reason)


class Daemon:
    def __init__(self):
        self.env = dict(os.environ)
        self.proc = None
        self.tmp = None

    def docker(self, *args, timeout=600, check=True, **kw):
        """Runs `docker ARGS` against this engine; returns the CompletedProcess."""
        out = subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True,
                             timeout=timeout, **kw)
        if check and out.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: {out.returncode}\n"
                                 f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        return out

    def _answers(self):
        try:
            return subprocess.run(["docker", "info"], env=self.env, capture_output=True,
                                  timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def start(self):
        if shutil.which("docker") is None:
            _unavailable("no docker client (apt-get install docker.io)")
        if self._answers():
            return self
        if shutil.which("dockerd") is None:
            _unavailable("no dockerd (apt-get install docker.io)")
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="tpserve-dockerd-"))
        data = CACHE_DIR / "data"
        data.mkdir(parents=True, exist_ok=True)
        sock = self.tmp / "docker.sock"
        log = open(self.tmp / "dockerd.log", "wb")
        self.proc = subprocess.Popen(
            ["dockerd", "--iptables=false", "--ip-forward=false", "--bridge=none",
             f"--data-root={data}", f"--exec-root={self.tmp / 'exec'}",
             f"--pidfile={self.tmp / 'docker.pid'}", f"-H=unix://{sock}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        self.env["DOCKER_HOST"] = f"unix://{sock}"
        deadline = time.monotonic() + 60
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = (self.tmp / "dockerd.log").read_text(errors="replace")[-3000:]
                self.stop()
                _unavailable(f"dockerd does not start here:\n{text}")
            time.sleep(0.5)
        return self

    def log_tail(self):
        if self.tmp is None:
            return "(an engine this test did not start)"
        return (self.tmp / "dockerd.log").read_text(errors="replace")[-3000:]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        if self.tmp is not None:
            _unmount_below(self.tmp)  # dockerd leaves its netns bind mount in the exec root
            shutil.rmtree(self.tmp, ignore_errors=True)


def _unmount_below(folder):
    """Unmounts whatever is still mounted under `folder`, deepest first (best effort)."""
    try:
        mounts = [line.split()[1] for line in pathlib.Path("/proc/mounts").read_text()
                  .splitlines()]
    except OSError:
        return
    prefix = str(folder).rstrip("/") + "/"
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", point], capture_output=True, timeout=30)


def ensure_debian_base(daemon):
    """debian:12 and debian:12-slim in the engine (made once, then cached); seconds spent."""
    have = all(daemon.docker("image", "inspect", tag, check=False).returncode == 0
               for tag in BASE_TAGS)
    if have:
        return 0.0
    if shutil.which("debootstrap") is None:
        _unavailable("no debootstrap (apt-get install debootstrap)")
    start = time.monotonic()
    root = pathlib.Path(tempfile.mkdtemp(prefix="tpserve-rootfs-"))
    try:
        out = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(root), MIRROR],
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, f"debootstrap: {out.stdout[-2000:]}\n{out.stderr[-2000:]}"
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        daemon.docker("import", "-", BASE_TAGS[0], stdin=tar.stdout, timeout=600)
        tar.wait(timeout=60)
        for tag in BASE_TAGS[1:]:
            daemon.docker("tag", BASE_TAGS[0], tag)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return time.monotonic() - start


def parse_time(text):
    """Docker's RFC 3339 timestamps (nanoseconds, 'Z' or an offset) as an aware datetime."""
    text = text.strip().replace("Z", "+00:00")
    if "." in text:
        head, rest = text.split(".", 1)
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits):]
        text = f"{head}.{digits[:6]}{zone}"
    return datetime.datetime.fromisoformat(text)


def stream_through(cmd, fault, timeout_s):
    """Runs `cmd`, a `tpserve-cli generate --json ...`, reading its stdout as it comes. Once its
    first tokens have arrived, and while the stream is still running (the CLI has not exited,
    no message has a finish reason), calls `fault()`, which must not block; then reads the
    stream to its end. Everything within `timeout_s`; the CLI is killed past it.
    Returns (messages, fault_time, exit code, stderr): messages as (time.time() of arrival,
    JSON object) pairs, fault_time the time.time() at which `fault()` had returned."""
    deadline = time.monotonic() + timeout_s
    messages, pending, fault_time = [], b"", None
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=err)
        try:
            while True:
                left = deadline - time.monotonic()
                assert left > 0, f"the stream did not end within {timeout_s} s: {messages[-3:]}"
                if select.select([proc.stdout], [], [], min(left, 1.0))[0]:
                    chunk = os.read(proc.stdout.fileno(), 1 << 16)
                    if not chunk:
                        break
                    now = time.time()
                    *lines, pending = (pending + chunk).split(b"\n")
                    messages += [(now, json.loads(line)) for line in lines if line.strip()]
                if fault_time is None and tokens(messages):
                    ended = [m for _, m in messages if "finish_reason" in m]
                    assert proc.poll() is None and not ended, \
                        f"the stream ended before the fault: {ended or proc.poll()}"
                    fault()
                    fault_time = time.time()
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    assert fault_time is not None, f"the CLI printed no token (exit {code}): {stderr[-2000:]}"
    return messages, fault_time, code, stderr


def tokens(messages):
    """The token ids of (arrival time, JSON object) pairs, in order."""
    return [i for _, m in messages for i in m.get("token_ids", ())]


def undisturbed_tokens(cmd, max_tokens, timeout_s=120):
    """Runs `cmd` (`tpserve-cli generate --json ...`, greedy) to its end; its token ids, checked
    to be `max_tokens` of them."""
    out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=timeout_s)
    assert out.returncode == 0, out.stderr[-2000:]
    ids = tokens((0, json.loads(line)) for line in out.stdout.splitlines() if line.strip())
    assert len(ids) == max_tokens, out.stdout[-2000:]
    return ids


def assert_completed(messages, code, stderr, want):
    """What stream_through() returned is a stream that finished: exit 0, finish reason length
    with every token asked for, and the token ids `want` (an undisturbed greedy run)."""
    assert code == 0, stderr[-2000:]
    last = messages[-1][1]
    assert last.get("finish_reason") == "length", last
    assert last["usage"]["completion_tokens"] == len(want), last
    got = tokens(messages)
    differ = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert got == want, (f"the stream differs from an undisturbed run: {len(got)} tokens, "
                         f"{len(want)} undisturbed, first difference at {differ[:1]}")
