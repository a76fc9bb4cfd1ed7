"""A Docker engine for the image and Compose tests, on a machine with no image registry:

- `Daemon.start()` uses the engine DOCKER_HOST (or the default socket) names when one answers;
  otherwise it starts a private `dockerd` (no iptables, no IP forwarding, no default bridge)
  with its own socket and exec root in a temporary folder, and its images and build cache in
  CACHE_DIR, so that they last between runs on the same machine. `stop()` stops only a
  daemon it started, by its PID, bounded.
- `ensure_debian_base()` makes the `debian:12` and `debian:12-slim` images the Dockerfile
  starts from, with `debootstrap --variant=minbase bookworm` and `docker import`, unless the
  engine has them already (cached).

Skips (pytest.skip with the reason) when dockerd or debootstrap is not installed, or the
engine cannot start here."""
import os
import pathlib
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
            pytest.skip("no docker client (apt-get install docker.io)")
        if self._answers():
            return self
        if shutil.which("dockerd") is None:
            pytest.skip("no dockerd (apt-get install docker.io)")
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
                pytest.skip(f"dockerd does not start here:\n{text}")
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
        pytest.skip("no debootstrap (apt-get install debootstrap)")
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
