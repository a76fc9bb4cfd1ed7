"""Prints what tests/gpu/run.sh recorded in gpu_results.json: the probe, each binary's outcome,
every test case that did not pass or recorded properties (token agreement, logit errors), the
decode benchmark's tokens/s and fraction of the HBM limit, and the GPU's and CPU's generation.

  python3 tests/gpu/summarize.py .cache/gpu/gpu_results.json

Exit status: 0 when the run finished and passed."""

import json
import sys

# Keys of a GoogleTest testcase object that are not recorded properties.
_GTEST_KEYS = {"name", "file", "line", "status", "result", "timestamp", "time", "classname",
               "failures", "skipped"}


def test_cases(report: dict) -> list:
    """(name, outcome, properties, failure texts) of every case in a GoogleTest JSON report."""
    cases = []
    for suite in report.get("testsuites", []):
        for case in suite.get("testsuite", []):
            failures = [f.get("failure", "") for f in case.get("failures", [])]
            outcome = ("skipped" if case.get("result") == "SKIPPED"
                       else "failed" if failures else "passed")
            props = {k: v for k, v in case.items() if k not in _GTEST_KEYS}
            cases.append((f"{suite['name']}.{case['name']}", outcome, props, failures))
    return cases


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        results = json.load(f)
    probe = results.get("probe", {})
    print(f"GPU: {probe.get('nvidia_smi', '?')}; bundle: {results.get('bundle', '?')}")
    for name, missing in probe.get("ldd_missing", {}).items():
        print(f"  ldd {name}: missing {missing}")
    totals = {}
    for b in results.get("binaries", []):
        line = f"  {b['outcome']:18s} {b['name']} ({b['seconds']} s"
        if b.get("tests") is not None:
            line += f", {b['tests']} tests, {b['failures']} failed, {b['skipped']} skipped"
        print(line + ")")
        for name, outcome, props, failures in test_cases(b.get("report") or {}):
            totals[outcome] = totals.get(outcome, 0) + 1
            if outcome == "failed" or props:
                extra = " ".join(f"{k}={v}" for k, v in props.items())
                print(f"      {outcome:7s} {name} {extra}")
                for text in failures:
                    print("        " + text.replace("\n", "\n        ")[:600])
    print("  test cases: " + ", ".join(f"{n} {k}" for k, n in sorted(totals.items())))
    bench = results.get("decode_bench")
    if bench:
        for r in bench.get("results", []):
            print(f"  decode batch {r['batch']:3d}: {r['tokens_per_s']:9.1f} tokens/s, "
                  f"{100 * r['fraction_of_hbm_limit']:5.1f}% of {bench['hbm_limit_gbps']:.0f} GB/s")
    gen = results.get("generate")
    if gen:
        print(f"  generate on {gen['model']}: GPU and CPU greedy tokens "
              f"{'agree' if gen['same_tokens'] else 'differ' if gen['same_tokens'] is False else 'not both run'}")
        gpu = gen.get("gpu_token_ids")
        for tp in (1, 2):
            served = gen.get(f"served_tp{tp}_token_ids")
            if served and gpu:
                print(f"  generate through GPU workers, TP={tp}: "
                      f"{'the same tokens as' if served == gpu else 'other tokens than'} in process")
    print(f"status: {results.get('status')} ({'finished' if results.get('finished') else 'unfinished'}, "
          f"{results.get('elapsed_s')} s of {results.get('deadline_s')} s)")
    return 0 if results.get("finished") and results.get("status") == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
