"""tests/gpu/summarize.py, which prints what the GPU check (tests/gpu/run.sh) recorded in its
gpu_results.json: each binary's outcome, the test cases that failed or recorded properties,
the decode benchmark and the GPU-against-CPU generation; exit 1 unless the run finished and
passed."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "gpu" / "summarize.py"


def _binary(name, outcome, cases, **extra):
    report = {"tests": len(cases), "failures": 0,
              "testsuites": [{"name": "CudaLlamaModelTest", "testsuite": cases}]}
    return {"name": name, "kind": "gtest", "outcome": outcome, "rc": 0, "signal": None,
            "timed_out": False, "seconds": 2, "timeout_s": 240, "tests": len(cases),
            "failures": 0, "skipped": 0, "report": report, **extra}


def _results(binaries, status="passed", finished=True, bench=None, generate=None):
    return {"script": "tests/gpu/run.sh", "bundle": "tpserve GPU bundle: abc", "deadline_s": 480,
            "elapsed_s": 35, "finished": finished, "status": status,
            "probe": {"nvidia_smi": "NVIDIA H200, 143771 MiB, 580.159.04", "gpu": True,
                      "ldd_missing": {}},
            "binaries": binaries, "decode_bench": bench, "generate": generate}


def _run(tmp_path, results):
    path = tmp_path / "gpu_results.json"
    path.write_text(json.dumps(results))
    return subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True,
                          text=True, timeout=60)


def test_prints_outcomes_properties_bench_and_generation(tmp_path):
    cases = [
        {"name": "SmolLm2GreedyTokensAgreeWithTheCpu", "status": "RUN", "result": "COMPLETED",
         "time": "1s", "smollm2_teacher_forced_agree": 32, "smollm2_steps": 32},
        {"name": "TwoRanksSharingOneGpuThroughStagedGloo", "status": "RUN",
         "result": "SKIPPED", "time": "0s"},
    ]
    bench = {"hbm_limit_gbps": 4800, "results": [
        {"batch": 1, "tokens_per_s": 250.0, "fraction_of_hbm_limit": 0.8}]}
    generate = {"model": "m.gguf", "cpu_token_ids": [1, 2], "gpu_token_ids": [1, 2],
                "same_tokens": True, "served_tp1_token_ids": [1, 2],
                "served_tp2_token_ids": [1, 3]}
    proc = _run(tmp_path, _results([_binary("cuda_llama_model_test", "passed", cases)],
                                   bench=bench, generate=generate))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "GPU: NVIDIA H200" in out
    assert "passed             cuda_llama_model_test (2 s, 2 tests" in out
    assert ("CudaLlamaModelTest.SmolLm2GreedyTokensAgreeWithTheCpu "
            "smollm2_teacher_forced_agree=32 smollm2_steps=32") in out
    assert "test cases: 1 passed, 1 skipped" in out
    assert "decode batch   1:     250.0 tokens/s,  80.0% of 4800 GB/s" in out
    assert "GPU and CPU greedy tokens agree" in out
    assert "through GPU workers, TP=1: the same tokens as in process" in out
    assert "through GPU workers, TP=2: other tokens than in process" in out
    assert "status: passed (finished, 35 s of 480 s)" in out


def test_a_failure_or_an_unfinished_run_exits_1_and_shows_why(tmp_path):
    cases = [{"name": "SyntheticModelMatchesTheCpuBackend", "status": "RUN",
              "result": "COMPLETED", "failures": [{"failure": "err 0.3 > 0.05"}]}]
    crashed = {"name": "gemm_test", "kind": "gtest", "outcome": "crashed (SIGSEGV)", "rc": 139,
               "signal": "SIGSEGV", "timed_out": False, "seconds": 1, "timeout_s": 120,
               "tests": None, "failures": None, "skipped": 0, "report": None}
    proc = _run(tmp_path, _results([_binary("cuda_llama_model_test", "failed", cases), crashed],
                                   status="failed"))
    assert proc.returncode == 1
    assert "failed  CudaLlamaModelTest.SyntheticModelMatchesTheCpuBackend" in proc.stdout
    assert "err 0.3 > 0.05" in proc.stdout
    assert "crashed (SIGSEGV)  gemm_test" in proc.stdout

    proc = _run(tmp_path, _results([], status="stopped by a signal", finished=False))
    assert proc.returncode == 1
    assert "status: stopped by a signal (unfinished" in proc.stdout
