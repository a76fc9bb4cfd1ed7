#!/usr/bin/env python3
"""Step overhead: the time of each worker step that is neither compute nor collectives, i.e.
moving the Step to the workers and their results back (coordinator wall time less the slowest
rank's compute + collective time, from `serve --step_trace_file`).

For each world size it starts `tpserve serve --tp P` (threads per worker: cores / P), drives it
with tpserve-bench at each concurrency, and reports p50 / p99 of the overhead per step, with the
step's wall time beside it, as a markdown table and JSON.

The load generator runs on the same cores as the server. Each concurrency is driven twice: with
the client at normal priority, and at nice 19, which stands for a client on another host (its
threads then wait while a server thread is runnable). On 2 cores the difference is the time a
woken worker waits for a core that the client's stream readers hold.

  bench/step_overhead.py [--build build] [--tps 1,2] [--concurrency 1,16] [--out FILE.json]
"""
import argparse
import json
import os
import pathlib
import subprocess
import tempfile
import time

from bench_stats import free_port, percentile  # beside this script

REPO = pathlib.Path(__file__).resolve().parents[1]


def run_world(build, model, tp, concurrencies, requests, tmp):
    port = free_port()
    trace = os.path.join(tmp, f"trace_tp{tp}.jsonl")
    threads = max(1, os.cpu_count() // tp)
    server = subprocess.Popen(
        [str(build / "server" / "tpserve"), "serve", f"--model={model}", f"--tp={tp}",
         f"--threads={threads}", f"--port={port}", f"--step_trace_file={trace}"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"serve_tp{tp}.log"), "w"))
    cli = str(build / "clients" / "cpp" / "tpserve-cli")
    bench = str(build / "clients" / "cpp" / "tpserve-bench")
    try:
        deadline = time.time() + 120
        while subprocess.run([cli, f"--server=127.0.0.1:{port}", "--timeout_s=2", "health"],
                             capture_output=True).returncode != 0:
            if time.time() > deadline or server.poll() is not None:
                raise RuntimeError(f"serve --tp {tp} did not become healthy")
            time.sleep(0.2)
        rows = []
        for c, nice in [(c, n) for c in concurrencies for n in (0, 19)]:
            start = sum(1 for _ in open(trace))
            subprocess.run(["nice", "-n", str(nice), bench, f"--server=127.0.0.1:{port}", f"--requests={requests(c)}",
                            f"--concurrency={c}", "--prompt_len=fixed:64", "--output_len=fixed:64",
                            "--warmup=2"], check=True, capture_output=True)
            time.sleep(0.2)  # the last steps' lines
            steps = [json.loads(line) for line in list(open(trace))[start:]]
            decode = [s for s in steps if s["tokens"] == s["sequences"]]
            rows.append({
                "tp": tp, "threads": threads, "concurrency": c, "client_nice": nice, "steps": len(steps),
                "decode_steps": len(decode),
                "overhead_us_p50": percentile([s["overhead_us"] for s in decode], 0.5),
                "overhead_us_p99": percentile([s["overhead_us"] for s in decode], 0.99),
                "wall_us_p50": percentile([s["wall_us"] for s in decode], 0.5),
                "all_steps_overhead_us_p50": percentile([s["overhead_us"] for s in steps], 0.5),
            })
        return rows
    finally:
        server.terminate()
        server.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tps", default="1,2")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--out")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tp in [int(x) for x in a.tps.split(",")]:
            rows += run_world(build, a.model, tp, [int(x) for x in a.concurrency.split(",")],
                              lambda c: 8 if c == 1 else 3 * c, tmp)
    print("| TP | threads/worker | concurrency | client nice | decode steps | overhead p50 (µs) "
          "| p99 (µs) | step wall p50 (µs) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tp']} | {r['threads']} | {r['concurrency']} | {r['client_nice']} | "
              f"{r['decode_steps']} | "
              f"{r['overhead_us_p50']:.0f} | {r['overhead_us_p99']:.0f} | {r['wall_us_p50']:.0f} |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
