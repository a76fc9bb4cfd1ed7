"""The GPU check's bundle (scripts/gpu-bundle.sh) and its runner (tests/gpu/run.sh), without a
GPU: the bundle made from this build carries every shared library its binaries need but those
the GPU machine provides (the closure check, which also catches a library taken out), and the
runner, which installs and builds nothing, runs every binary from it, records each one's
outcome, writes its JSON under a deadline and when stopped by a signal. CI builds the CUDA
sources (TPSERVE_CUDA=ON), so there these tests run; a build without them skips."""
import json
import os
import signal
import subprocess
import tarfile
import time

import pytest


@pytest.fixture(scope="module")
def bundle(build_dir, repo_root, tmp_path_factory):
    if not (build_dir / "kernels" / "cuda" / "gemm_test").exists():
        if os.environ.get("TPSERVE_CUDA") == "ON":
            pytest.fail(f"TPSERVE_CUDA=ON but {build_dir} has no CUDA test binaries")
        pytest.skip(f"{build_dir} was built without the CUDA sources")
    out = tmp_path_factory.mktemp("gpu-bundle")
    r = subprocess.run([str(repo_root / "scripts" / "gpu-bundle.sh"), "--from-build", str(build_dir),
                        "--out", str(out), "--no-model"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "== bundle:" in r.stdout
    return out


def _unpack(bundle, dest):
    with tarfile.open(bundle / "tpserve-gpu.tar.gz") as tar:
        tar.extractall(dest, filter="tar")
    return dest


def _check(repo_root, folder):
    return subprocess.run([str(repo_root / "scripts" / "gpu-bundle.sh"), "--check", str(folder)],
                          capture_output=True, text=True, timeout=120)


def test_the_bundle_carries_every_library_but_the_gpu_machines(bundle, repo_root, tmp_path):
    unpacked = _unpack(bundle, tmp_path / "b")
    programs = [l for l in (unpacked / "MANIFEST").read_text().splitlines()
                if l and not l.startswith("#")]
    assert {"tpserve", "cuda_decode_throughput", "cuda_llama_model_test", "gemm_test",
            "nccl_communicator_test", "host_staging_communicator_test"} <= set(programs)
    for p in programs:
        assert (unpacked / p).is_file(), p
    libs = {p.name for p in (unpacked / "lib").iterdir()}
    assert any(n.startswith("libgrpc++") for n in libs) and any(n.startswith("libgloo") for n in libs)
    # Provided on the GPU machine (or by any Linux system): never carried.
    assert not any(n.startswith(("libnccl", "libcublas", "libcudart", "libcuda.", "libc.so",
                                 "libstdc++")) for n in libs), sorted(libs)
    r = _check(repo_root, unpacked)
    assert r.returncode == 0 and "closed" in r.stdout, r.stdout + r.stderr

    # A library taken out is named, with the binaries that need it.
    grpc = next(n for n in sorted(libs) if n.startswith("libgrpc++.so"))
    (unpacked / "lib" / grpc).unlink()
    r = _check(repo_root, unpacked)
    assert r.returncode == 1, r.stdout
    assert f"tpserve needs {grpc}: not in lib/ and not provided by the GPU machine" in r.stdout


@pytest.fixture
def gpu_check(request, repo_root, bundle, smollm_gguf):
    """gpu_check(out, deadline) starts tests/gpu/run.sh on the bundle in a process group of its
    own (it starts workers too); every group started is killed when the test ends, passed or
    not."""
    procs = []

    def start(out, deadline):
        env = dict(os.environ, OUT=str(out), TPSERVE_GPU_BUNDLE=str(bundle),
                   TPSERVE_GPU_DEADLINE=str(deadline), TPSERVE_GPU_MODEL=str(smollm_gguf))
        proc = subprocess.Popen([str(repo_root / "tests" / "gpu" / "run.sh")], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        procs.append(proc)
        return proc

    def stop_all():
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

    request.addfinalizer(stop_all)
    return start


def test_the_runner_runs_every_binary_and_writes_its_json(bundle, tmp_path, gpu_check):
    proc = gpu_check(tmp_path, 300)
    log, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, log
    results = json.loads((tmp_path / "gpu_results.json").read_text())
    assert results["finished"] and results["status"] == "passed", log
    assert results["probe"]["gpu"] is False and results["probe"]["ldd_missing"] == {}
    by_name = {b["name"]: b for b in results["binaries"]}
    manifest = [l for l in _unpack(bundle, tmp_path / "b").joinpath("MANIFEST").read_text().splitlines()
                if l.endswith("_test")]
    for name in manifest:
        b = by_name[name]
        assert b["rc"] == 0 and b["signal"] is None and b["report"] is not None, b
        assert b["outcome"] in ("passed", "skipped"), b
        assert b["tests"] > 0 and b["failures"] == 0
    # Without a GPU every test that needs one skips, saying why.
    assert by_name["cuda_llama_model_test"]["outcome"] == "skipped"
    assert "no GPU visible" in log
    assert by_name["cuda_decode_throughput"]["outcome"] == "skipped (no GPU)"
    assert by_name["tpserve generate (CPU)"]["outcome"] == "passed"
    assert by_name["tpserve generate (GPU)"]["outcome"] == "skipped (no GPU)"
    for tp in (1, 2):  # GPU worker processes refuse the Init without a GPU
        assert by_name[f"tpserve generate --workers (GPU workers, TP={tp})"]["outcome"] == \
            "skipped (no GPU)"
    assert len(results["generate"]["cpu_token_ids"]) == 24
    assert {p.name for p in tmp_path.iterdir()} >= {"gpu_results.json", "gpu_run.log"}


def test_past_its_deadline_or_stopped_the_runner_still_writes_its_json(tmp_path, gpu_check):
    # A deadline that leaves nothing to run: every binary is recorded as not run.
    proc = gpu_check(tmp_path / "a", 10)
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, log
    results = json.loads((tmp_path / "a" / "gpu_results.json").read_text())
    assert results["status"] == "failed"
    assert results["binaries"] and all(b["outcome"] == "not run: deadline"
                                       for b in results["binaries"]), results["binaries"]

    # SIGTERM mid-run (a device call killed at its limit): the JSON so far, marked unfinished.
    out = tmp_path / "b"
    proc = gpu_check(out, 300)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "gpu_results.json").exists():
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGTERM)
    log, _ = proc.communicate(timeout=60)
    results = json.loads((out / "gpu_results.json").read_text())
    assert results["finished"] is False, log
    assert results["status"] in ("stopped by a signal", "incomplete"), results["status"]
