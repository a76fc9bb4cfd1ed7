"""The GPU check's bundle (scripts/gpu-bundle.sh) and its runner (tests/gpu/run.sh), without a
GPU: the bundle made from this build carries every shared library its binaries need but those
the GPU machine provides (the closure check, which also catches a library taken out), and the
runner, which installs and builds nothing, runs every binary from it, records each one's
outcome, writes its JSON under a deadline and when stopped by a signal. CI builds the CUDA
sources (TPSERVE_CUDA=ON), so there these tests run; a build without them skips them.
The runner's own rules also run on a fake bundle of shell scripts (FAKE), on any build: a
test binary that crashes or writes no report is a failure, and worker processes that write no
port file and ignore SIGTERM cannot keep it past its deadline."""
import json
import os
import pathlib
import signal
import subprocess
import tarfile
import sys
import textwrap
import time

import pytest

SUMMARIZE = pathlib.Path(__file__).resolve().parents[2] / "tests" / "gpu" / "summarize.py"


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
def run_sh(request, repo_root):
    """run_sh(out, deadline, bundle, **env) starts tests/gpu/run.sh on `bundle` in a process
    group of its own (it starts workers too); every group started is killed when the test
    ends, passed or not."""
    procs = []

    def start(out, deadline, bundle, **env):
        env = dict(os.environ, OUT=str(out), TPSERVE_GPU_BUNDLE=str(bundle),
                   TPSERVE_GPU_DEADLINE=str(deadline), **env)
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


@pytest.fixture
def gpu_check(run_sh, bundle, smollm_gguf):
    """gpu_check(out, deadline): run_sh on the bundle of this build, with SmolLM2."""
    return lambda out, deadline: run_sh(out, deadline, bundle,
                                        TPSERVE_GPU_MODEL=str(smollm_gguf))


def _finish(proc, deadline, out):
    """Waits for run.sh (bounded); checks that it kept to its deadline, by its own clock and by
    ours. Returns (its output, its results)."""
    started = time.monotonic()
    log, _ = proc.communicate(timeout=deadline + 60)
    wall_s = time.monotonic() - started
    results = json.loads((out / "gpu_results.json").read_text())
    assert results["elapsed_s"] <= results["deadline_s"] == deadline, (results["elapsed_s"], log)
    assert wall_s <= deadline + 2, (wall_s, log)
    return log, results


def test_the_runner_runs_every_binary_and_writes_its_json(bundle, tmp_path, gpu_check):
    proc = gpu_check(tmp_path, 300)
    log, results = _finish(proc, 300, tmp_path)
    assert proc.returncode == 0, log
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
    log, results = _finish(proc, 10, tmp_path / "a")
    assert proc.returncode == 1, log
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
    assert results["elapsed_s"] <= results["deadline_s"], results
    assert results["status"] in ("stopped by a signal", "incomplete"), results["status"]


# --- the runner's rules on a fake bundle ---------------------------------------------------

# Each program of the fake bundle, a shell script. A *_test is run with --gtest_output=json:PATH.
FAKE = {
    # A GoogleTest binary that passes: its report, as GoogleTest writes it (two-space indent).
    "passes_test": """
        cat >"${1#--gtest_output=json:}" <<'EOF'
        {
          "tests": 1,
          "failures": 0,
          "testsuites": [{"name": "Fake", "testsuite": [
            {"name": "Passes", "status": "RUN", "result": "COMPLETED"}]}]
        }
        EOF
        """,
    # One that dies of a signal before GoogleTest writes its report.
    "crashes_test": """
        echo "about to crash"
        kill -SEGV $$
        """,
    # One that exits 0 and writes no report (a main() that never ran the tests).
    "writes_no_report_test": "exit 0",
    "cuda_decode_throughput": "exit 2  # no GPU",
    # generate: 3 token ids on the CPU (--device=-1), exit 1 otherwise (no GPU). worker:
    # FAKE_WORKER=stubborn writes no port file, records its PID, and ignores SIGTERM.
    "tpserve": """
        if [ "$1" = worker ]; then
          if [ "${FAKE_WORKER:-}" = stubborn ]; then
            echo $$ >>"$FAKE_PIDS"
            trap '' TERM
            while :; do sleep 0.2; done
          fi
          for a in "$@"; do case "$a" in --port_file=*) echo 1 >"${a#--port_file=}" ;; esac; done
          exec sleep 600
        fi
        for a in "$@"; do [ "$a" = --device=-1 ] && { echo '{"token_ids":[1,2,3]}'; exit 0; }; done
        exit 1
        """,
}


@pytest.fixture
def fake_bundle(tmp_path):
    """A bundle of shell scripts (FAKE) in the layout scripts/gpu-bundle.sh makes."""
    src, out = tmp_path / "fake-src", tmp_path / "fake-bundle"
    src.mkdir()
    out.mkdir()
    (src / "MANIFEST").write_text("# fake bundle of test_gpu_bundle.py\n" + "".join(
        f"{name}\n" for name in FAKE))
    for name, body in FAKE.items():
        (src / name).write_text("#!/bin/sh\n" + textwrap.dedent(body).lstrip())
        (src / name).chmod(0o755)
    with tarfile.open(out / "tpserve-gpu.tar.gz", "w:gz") as tar:
        for p in sorted(src.iterdir()):
            tar.add(p, arcname=p.name)
    return out


def _no_gpu(results):
    if results["probe"]["gpu"]:
        pytest.skip("a GPU is visible: the fake bundle's generations would not skip")


def test_a_crashed_test_binary_or_a_missing_report_is_a_failure(run_sh, fake_bundle, tmp_path):
    out = tmp_path / "out"
    proc = run_sh(out, 60, fake_bundle, TPSERVE_GPU_MODEL=str(tmp_path / "fake.gguf"))
    log, results = _finish(proc, 60, out)
    _no_gpu(results)
    by_name = {b["name"]: b for b in results["binaries"]}
    assert by_name["passes_test"]["outcome"] == "passed", by_name["passes_test"]
    assert by_name["passes_test"]["failures"] == 0
    crashed = by_name["crashes_test"]
    assert crashed["outcome"] == "crashed (SIGSEGV)" and crashed["signal"] == "SIGSEGV", crashed
    assert crashed["rc"] == 128 + signal.SIGSEGV and crashed["report"] is None, crashed
    assert crashed["failures"] != 0  # null: not "0 failures"
    silent = by_name["writes_no_report_test"]
    assert silent["outcome"] == "no report (rc 0)" and silent["report"] is None, silent
    # Everything else went as it should without a GPU; the two bad binaries fail the run.
    assert by_name["tpserve generate (CPU)"]["outcome"] == "passed"
    for tp in (1, 2):
        assert by_name[f"tpserve generate --workers (GPU workers, TP={tp})"]["outcome"] == \
            "skipped (no GPU)"
    assert results["finished"] is True and results["status"] == "failed", results["status"]
    assert proc.returncode == 1, log
    summary = subprocess.run([sys.executable, str(SUMMARIZE), str(out / "gpu_results.json")],
                             capture_output=True, text=True, timeout=60)
    assert summary.returncode == 1 and "crashed (SIGSEGV)" in summary.stdout, summary.stdout


def test_workers_that_hang_cannot_keep_the_runner_past_its_deadline(run_sh, fake_bundle,
                                                                    tmp_path):
    # Workers that write no port file and ignore SIGTERM: the port wait and the stop are
    # bounded (SIGKILL after the grace), workers are not started when too little time is left,
    # and the run still ends, its JSON written, within the deadline. A small log cap: the log
    # keeps the newest output.
    out, pids = tmp_path / "out", tmp_path / "worker-pids"
    deadline = 35
    proc = run_sh(out, deadline, fake_bundle, TPSERVE_GPU_MODEL=str(tmp_path / "fake.gguf"),
                  FAKE_WORKER="stubborn", FAKE_PIDS=str(pids), TPSERVE_GPU_LOG_KB="1")
    log, results = _finish(proc, deadline, out)
    _no_gpu(results)
    assert results["finished"] is True and results["status"] == "failed", log
    served = [b for b in results["binaries"] if "GPU workers" in b["name"]]
    assert [b["name"] for b in served] == [f"tpserve generate --workers (GPU workers, TP={tp})"
                                           for tp in (1, 2)], served
    assert served[0]["outcome"] == "failed: rank 0 wrote no port file", served[0]
    assert served[1]["outcome"] in ("failed: rank 0 wrote no port file", "not run: deadline")
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == (1 if served[1]["outcome"] == "not run: deadline" else 3), started
    for pid in started:  # each one SIGKILLed past its grace: gone, not even a zombie
        assert not pathlib.Path(f"/proc/{pid}").exists(), pid
    kept = (out / "gpu_run.log").read_bytes()
    longest = max(len(line.encode()) + 1 for line in log.splitlines())
    assert len(kept) <= 1024 + longest, (len(kept), longest)  # the cap and the line past it
    assert b"older output dropped" in kept, kept
    assert kept.rstrip().endswith(log.encode().rstrip()[-40:]), kept  # the newest output
