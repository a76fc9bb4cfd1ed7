#!/usr/bin/env python3
"""Prefix caching on a chat-like load: every request is a shared system prompt of
--prefix tokens followed by its own --question tokens (synthetic ids, tpserve-bench
--shared_prefix_len), at each concurrency, against `tpserve serve --tp P` with
--prefix_caching on and off, one server after the other in one run. Reports TTFT p50 / p99,
output tokens/s and the hit rate (tpserve_prefix_cache_hits_total over _queries_total over
the measured requests), and the TTFT ratio off / on.

  bench/prefix_cache.py [--build build] [--tp 2] [--concurrency 1,8] [--requests 32]
                        [--prefix 512] [--question 32] [--output 16] [--out F.json]
"""
import argparse
import json
import os
import pathlib
import subprocess
import tempfile
import time
import urllib.request

from bench_stats import free_port  # beside this script

REPO = pathlib.Path(__file__).resolve().parents[1]


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " "))


def run_server(a, caching, tmp):
    build = pathlib.Path(a.build)
    port, metrics_port = free_port(), free_port()
    threads = max(1, os.cpu_count() // a.tp)
    server = subprocess.Popen(
        [str(build / "server" / "tpserve"), "serve", f"--model={a.model}", f"--tp={a.tp}",
         f"--threads={threads}", f"--port={port}", f"--metrics_port={metrics_port}",
         f"--prefix_caching={'true' if caching else 'false'}"],
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(tmp, f"serve_{caching}.log"), "w"))
    cli = str(build / "clients" / "cpp" / "tpserve-cli")
    bench = str(build / "clients" / "cpp" / "tpserve-bench")
    rows = []
    try:
        deadline = time.time() + 120
        while subprocess.run([cli, f"--server=127.0.0.1:{port}", "--timeout_s=2", "health"],
                             capture_output=True).returncode != 0:
            if time.time() > deadline or server.poll() is not None:
                raise RuntimeError("serve did not become healthy")
            time.sleep(0.2)
        for k, c in enumerate(int(x) for x in a.concurrency.split(",")):
            queries = metric(metrics_port, "tpserve_prefix_cache_queries_total")
            hits = metric(metrics_port, "tpserve_prefix_cache_hits_total")
            out = os.path.join(tmp, f"bench_{caching}_{c}.json")
            # The warm-up requests share the prefix too: a system prompt is always in use.
            subprocess.run([bench, f"--server=127.0.0.1:{port}", f"--requests={a.requests}",
                            f"--concurrency={c}", f"--shared_prefix_len={a.prefix}",
                            f"--prompt_len=fixed:{a.question}", f"--output_len=fixed:{a.output}",
                            # Each concurrency its own questions (and prefix): a second run
                            # of the same ones would find them cached whole.
                            f"--seed={1 + 1000 * k}", "--warmup=2", f"--json_out={out}"],
                           check=True, capture_output=True)
            summary = json.load(open(out))
            queries = metric(metrics_port, "tpserve_prefix_cache_queries_total") - queries
            hits = metric(metrics_port, "tpserve_prefix_cache_hits_total") - hits
            rows.append({"caching": caching, "concurrency": c, "summary": summary,
                         "hit_rate": hits / queries if queries else 0.0})
    finally:
        server.terminate()
        server.wait(timeout=60)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prefix", type=int, default=512)
    ap.add_argument("--question", type=int, default=32)
    ap.add_argument("--output", type=int, default=16)
    ap.add_argument("--out")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_server(a, False, tmp) + run_server(a, True, tmp)
    print(f"TP={a.tp}, {a.requests} requests: {a.prefix}-token shared prefix + {a.question} "
          f"own tokens, {a.output} output tokens")
    print("| caching | concurrency | TTFT p50 (ms) | TTFT p99 (ms) | output tok/s | hit rate |")
    print("|---|---|---|---|---|---|")

    for r in rows:
        s = r["summary"]
        print(f"| {'on' if r['caching'] else 'off'} | {r['concurrency']} | "
              f"{s['ttft_s']['p50'] * 1e3:.0f} | {s['ttft_s']['p99'] * 1e3:.0f} | "
              f"{s['output_tokens_per_s']:.1f} | {r['hit_rate']:.2f} |")
    for c in sorted({r["concurrency"] for r in rows}):
        off = next(r["summary"] for r in rows if r["concurrency"] == c and not r["caching"])
        on = next(r["summary"] for r in rows if r["concurrency"] == c and r["caching"])
        print(f"concurrency {c}: TTFT p50 off / on = "
              f"{off['ttft_s']['p50'] / on['ttft_s']['p50']:.1f}x, tok/s on / off = "
              f"{on['output_tokens_per_s'] / off['output_tokens_per_s']:.2f}x")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
