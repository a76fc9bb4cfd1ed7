"""Merges the GoogleTest JSON reports and the decode benchmark of tests/gpu/run.sh into one
JSON file and prints a short summary: per test its result and recorded properties (token
agreement, logit errors), totals, and the benchmark's tokens/s and fraction of bandwidth."""

import argparse
import json
import pathlib
import sys

# Keys of a GoogleTest testcase object that are not recorded properties.
_GTEST_KEYS = {"name", "file", "line", "status", "result", "timestamp", "time", "classname",
               "failures", "skipped"}


def collect_tests(folder: pathlib.Path) -> list:
    cases = []
    for report in sorted(folder.glob("*.json")):
        data = json.loads(report.read_text())
        for suite in data.get("testsuites", []):
            for case in suite.get("testsuite", []):
                result = case.get("result", "")
                outcome = "skipped" if result == "SKIPPED" else (
                    "failed" if case.get("failures") else "passed")
                cases.append({
                    "binary": report.stem,
                    "test": f"{suite['name']}.{case['name']}",
                    "outcome": outcome,
                    "failures": [f.get("failure", "") for f in case.get("failures", [])],
                    "properties": {k: v for k, v in case.items() if k not in _GTEST_KEYS},
                })
    return cases


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gtest", type=pathlib.Path, required=True)
    parser.add_argument("--bench", type=pathlib.Path, required=True)
    parser.add_argument("--seconds", type=int, default=0)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args()

    cases = collect_tests(args.gtest)
    totals = {k: sum(1 for c in cases if c["outcome"] == k)
              for k in ("passed", "failed", "skipped")}
    bench = json.loads(args.bench.read_text()) if args.bench.exists() else None
    result = {"seconds": args.seconds, "totals": totals, "tests": cases, "decode_bench": bench}
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"tests: {totals['passed']} passed, {totals['failed']} failed, "
          f"{totals['skipped']} skipped")
    for c in cases:
        if c["outcome"] != "passed" or c["properties"]:
            extra = " ".join(f"{k}={v}" for k, v in c["properties"].items())
            print(f"  {c['outcome']:7s} {c['test']} {extra}")
    if bench:
        for r in bench["results"]:
            print(f"  decode batch {r['batch']:3d}: {r['tokens_per_s']:9.1f} tokens/s, "
                  f"{100 * r['fraction_of_hbm_limit']:5.1f}% of {bench['hbm_limit_gbps']:.0f} GB/s")
    print(f"results: {args.out}")
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
