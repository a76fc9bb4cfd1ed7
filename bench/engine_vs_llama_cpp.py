#!/usr/bin/env python3
"""Side-by-side CPU throughput: tpserve's engine against llama.cpp (llama-cpp-python) on the
same GGUF and threads, with the machine's measured read bandwidth, in one run.

  bench/engine_vs_llama_cpp.py [--model M] [--build build] [--threads 1,2] [--out FILE.json]

Needs `pip install llama-cpp-python` in the project venv (see bench/requirements.txt).
Prints a markdown table; ratios are what to quote, since this machine is shared.
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def bandwidth(build, threads):
    out = subprocess.run([str(build / "bench" / "bandwidth_bench"), "--benchmark_format=json",
                          "--benchmark_min_time=1"], check=True, capture_output=True,
                         text=True).stdout
    for b in json.loads(out)["benchmarks"]:
        if re.search(rf"threads:{threads}(/|$)", b["name"]):
            return b["GB/s"] * 1e9
    raise RuntimeError(f"no bandwidth figure for {threads} threads in {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--out")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    results = []
    for t in [int(x) for x in a.threads.split(",")]:
        bw = bandwidth(build, t)
        ours = run_json([str(build / "bench" / "engine_throughput"), a.model, str(t),
                         str(a.prompt), str(a.steps), a.batches])
        theirs = run_json([sys.executable, str(REPO / "bench" / "llama_cpp_throughput.py"),
                           a.model, str(t), str(a.prompt), str(a.steps), a.batches])
        results.append({"threads": t, "bandwidth_bytes_s": bw, "tpserve": ours,
                        "llama_cpp": theirs})
    print("| threads | measure | tpserve tok/s | llama.cpp tok/s | ratio | tpserve / bandwidth limit |")
    print("|---|---|---|---|---|---|")
    for r in results:
        ours, theirs = r["tpserve"], r["llama_cpp"]
        limit = r["bandwidth_bytes_s"] / ours["decode_bytes_per_step"]
        print(f"| {r['threads']} | prefill {ours['prefill_tokens']} | {ours['prefill_tok_s']:.0f} | "
              f"{theirs['prefill_tok_s']:.0f} | {ours['prefill_tok_s'] / theirs['prefill_tok_s']:.2f} | |")
        for b, v in ours["decode_tok_s"].items():
            w = theirs["decode_tok_s"][b]
            lim = f"{v / limit:.2f} (limit {limit:.0f} tok/s)" if b == "1" else ""
            print(f"| {r['threads']} | decode batch {b} | {v:.0f} | {w:.0f} | {v / w:.2f} | {lim} |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
