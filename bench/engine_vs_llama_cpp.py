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
    ap.add_argument("--exact", action="store_true",
                    help="also run tpserve with --dequantize (f32 weights) for a reference column")
    ap.add_argument("--out")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    results = []
    for t in [int(x) for x in a.threads.split(",")]:
        bw = bandwidth(build, t)
        engine = [str(build / "bench" / "engine_throughput"), a.model, str(t), str(a.prompt),
                  str(a.steps), a.batches]
        ours = run_json(engine + ["packed"])
        exact = run_json(engine + ["exact"]) if a.exact else None
        theirs = run_json([sys.executable, str(REPO / "bench" / "llama_cpp_throughput.py"),
                           a.model, str(t), str(a.prompt), str(a.steps), a.batches])
        results.append({"threads": t, "bandwidth_bytes_s": bw, "tpserve": ours,
                        "tpserve_exact": exact, "llama_cpp": theirs})
    print(f"model {pathlib.Path(a.model).name}; tpserve keeps the file's blocks (packed)"
          + ("; exact: --dequantize, f32 weights" if a.exact else ""))
    print("| threads | measure | tpserve tok/s | llama.cpp tok/s | ratio |"
          + (" exact tok/s |" if a.exact else "") + " tpserve / bandwidth limit |")
    print("|---|---|---|---|---|" + ("---|" if a.exact else "") + "---|")
    for r in results:
        ours, theirs, exact = r["tpserve"], r["llama_cpp"], r["tpserve_exact"]
        # The limit of the bytes this path actually reads per decode step (its stored blocks).
        limit = r["bandwidth_bytes_s"] / ours["decode_bytes_per_step"]

        def row(measure, v, w, e):
            extra = f" {e:.0f} |" if exact is not None else ""
            return f"| {r['threads']} | {measure} | {v:.0f} | {w:.0f} | {v / w:.2f} |{extra}"
        print(row(f"prefill {ours['prefill_tokens']}", ours["prefill_tok_s"],
                  theirs["prefill_tok_s"], exact["prefill_tok_s"] if exact else 0) + " |")
        for b, v in ours["decode_tok_s"].items():
            lim = f"{v / limit:.2f} (limit {limit:.0f} tok/s)" if b == "1" else ""
            print(row(f"decode batch {b}", v, theirs["decode_tok_s"][b],
                      exact["decode_tok_s"][b] if exact else 0) + f" {lim} |")
        print(f"| {r['threads']} | peak RSS | {ours['peak_rss_bytes'] / 2**20:.0f} MiB | | |"
              + (f" {exact['peak_rss_bytes'] / 2**20:.0f} MiB |" if exact else "")
              + f" load {ours['load_s']:.2f} s"
              + (f" (exact {exact['load_s']:.2f} s)" if exact else "") + " |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
