"""tests/gpu/summarize.py, the last step of the GPU check: merges GoogleTest JSON reports and
the decode benchmark into one result file; a failed test makes it exit 1."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "gpu" / "summarize.py"


def _report(cases):
    return {"testsuites": [{"name": "CudaLlamaModelTest", "testsuite": cases}]}


def _run(tmp_path, cases, bench):
    gtest = tmp_path / "gtest"
    gtest.mkdir()
    (gtest / "cuda_llama_model_test.json").write_text(json.dumps(_report(cases)))
    bench_path = tmp_path / "bench.json"
    if bench is not None:
        bench_path.write_text(json.dumps(bench))
    out = tmp_path / "gpu_results.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--gtest", str(gtest), "--bench",
                           str(bench_path), "--seconds", "12", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    return proc, json.loads(out.read_text())


def test_merges_results_properties_and_bench(tmp_path):
    cases = [
        {"name": "SmolLm2GreedyTokensAgreeWithTheCpu", "status": "RUN", "result": "COMPLETED",
         "time": "1s", "smollm2_teacher_forced_agree": 32, "smollm2_steps": 32},
        {"name": "TwoRanksSharingOneGpuThroughStagedGloo", "status": "RUN",
         "result": "SKIPPED", "time": "0s"},
    ]
    bench = {"hbm_limit_gbps": 4800, "results": [
        {"batch": 1, "tokens_per_s": 250.0, "fraction_of_hbm_limit": 0.8}]}
    proc, result = _run(tmp_path, cases, bench)
    assert proc.returncode == 0, proc.stderr
    assert result["totals"] == {"passed": 1, "failed": 0, "skipped": 1}
    smol = result["tests"][0]
    assert smol["properties"] == {"smollm2_teacher_forced_agree": 32, "smollm2_steps": 32}
    assert result["decode_bench"]["results"][0]["tokens_per_s"] == 250.0
    assert "decode batch   1:     250.0 tokens/s,  80.0% of 4800 GB/s" in proc.stdout


def test_a_failure_fails_the_run_and_a_missing_bench_is_null(tmp_path):
    cases = [{"name": "SyntheticModelMatchesTheCpuBackend", "status": "RUN",
              "result": "COMPLETED", "failures": [{"failure": "err 0.3 > 0.05"}]}]
    proc, result = _run(tmp_path, cases, None)
    assert proc.returncode == 1
    assert result["totals"]["failed"] == 1
    assert result["tests"][0]["failures"] == ["err 0.3 > 0.05"]
    assert result["decode_bench"] is None
