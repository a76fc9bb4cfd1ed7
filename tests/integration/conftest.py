"""Shared fixtures for the pytest suites: where the build and the models are, and the
Python gRPC stubs generated from proto/ for the tests."""
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TPSERVE_BUILD_DIR", REPO / "build")).resolve()
SMOLLM = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEN = pathlib.Path(__file__).resolve().parent / "_gen"


def _generate_stubs():
    """Compiles proto/tpserve/v1/*.proto into Python modules under _gen/ (once per run)."""
    GEN.mkdir(exist_ok=True)
    protos = sorted(str(p.relative_to(REPO / "proto")) for p in (REPO / "proto").rglob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{REPO / 'proto'}",
         f"--python_out={GEN}", f"--grpc_python_out={GEN}", *protos],
        check=True)
    for d in (GEN / "tpserve", GEN / "tpserve" / "v1"):
        (d / "__init__.py").touch()
    if str(GEN) not in sys.path:
        sys.path.insert(0, str(GEN))


_generate_stubs()


@pytest.fixture(scope="session")
def repo_root():
    return REPO


@pytest.fixture(scope="session")
def build_dir():
    if not BUILD.is_dir():
        pytest.fail(f"no build directory at {BUILD}: run scripts/test.sh (or set TPSERVE_BUILD_DIR)")
    return BUILD


def _binary(build, *parts):
    path = build.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"{path} is missing: build the project first (scripts/test.sh)")
    return path


@pytest.fixture(scope="session")
def tpserve_bin(build_dir):
    return _binary(build_dir, "server", "tpserve")


@pytest.fixture(scope="session")
def binary(build_dir):
    """binary('tests', 'tools', 'gguf_dump') -> path of a built program under the build dir."""
    return lambda *parts: _binary(build_dir, *parts)


@pytest.fixture(scope="session")
def smollm_gguf():
    if not SMOLLM.exists():
        pytest.fail(f"{SMOLLM} is missing: run scripts/fetch-model.sh")
    return SMOLLM


@pytest.fixture(scope="session")
def docker_daemon():
    """A Docker engine (docker_env.Daemon: a private dockerd when none answers), stopped at
    the end of the run if this run started it."""
    import docker_env  # only the container tests need it
    daemon = docker_env.Daemon().start()
    yield daemon
    daemon.stop()


@pytest.fixture(scope="session")
def cpu_image(docker_daemon):
    """tpserve:cpu built from this checkout (`docker build --network host --target cpu`) on the
    debootstrapped debian:12 base; {"base_image_s", "build_s", "image_mb"} measured."""
    import time

    import docker_env
    figures = {"base_image_s": round(docker_env.ensure_debian_base(docker_daemon), 1)}
    start = time.monotonic()
    docker_daemon.docker("build", "--network", "host", "--target", "cpu", "-t", "tpserve:cpu",
                         str(REPO), timeout=2400)
    figures["build_s"] = round(time.monotonic() - start, 1)
    size = docker_daemon.docker("image", "inspect", "-f", "{{.Size}}", "tpserve:cpu").stdout
    figures["image_mb"] = round(int(size.strip()) / 1e6, 1)
    return figures
