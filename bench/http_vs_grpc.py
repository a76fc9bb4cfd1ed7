#!/usr/bin/env python3
"""The OpenAI HTTP front end against the gRPC API: the same streamed requests, side by side on
one `tpserve serve` (both ports), at each concurrency. For each API it reports the output
tokens/s and the inter-token latency p50 / p99 as the client sees it, and the HTTP front end's
overhead per streamed token (HTTP's ITL p50 less gRPC's). Both clients are plain Python
(grpcio stubs; http.client reading SSE lines), so the client side costs alike; rounds alternate
gRPC, HTTP, gRPC, HTTP so that the machine's drift falls on both.

  bench/http_vs_grpc.py [--build build] [--tp 2] [--concurrency 1,16] [--rounds 2] [--out F.json]
"""
import argparse
import concurrent.futures
import http.client
import json
import pathlib
import subprocess
import sys
import tempfile
import time

from bench_stats import percentile, serving  # beside this script

REPO = pathlib.Path(__file__).resolve().parents[1]
PROMPT = "Write a long story about a lighthouse keeper and the sea."
TOKENS = 48


def stubs(tmp):
    out = pathlib.Path(tmp) / "stubs"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{REPO / 'proto'}",
                    f"--python_out={out}", f"--grpc_python_out={out}",
                    str(REPO / "proto" / "tpserve" / "v1" / "generate.proto")], check=True)
    sys.path.insert(0, str(out))
    from tpserve.v1 import generate_pb2, generate_pb2_grpc  # noqa: E402
    return generate_pb2, generate_pb2_grpc


def grpc_stream(address, pb, pb_grpc, seed):
    import grpc
    with grpc.insecure_channel(address) as ch:
        stub = pb_grpc.GenerationStub(ch)
        times = []
        for _ in stub.Generate(pb.GenerateRequest(prompt=PROMPT, max_tokens=TOKENS, seed=seed,
                                                  temperature=0.8, ignore_eos=True),
                               timeout=300):
            times.append(time.perf_counter())
        return times


def http_stream(address, seed):
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    body = json.dumps({"prompt": PROMPT, "max_tokens": TOKENS, "seed": seed, "temperature": 0.8,
                       "ignore_eos": True, "stream": True})
    conn.request("POST", "/v1/completions", body=body,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    times = []
    for line in r:
        if line.startswith(b"data: {"):
            times.append(time.perf_counter())
        elif line.startswith(b"data: [DONE]"):
            break
    conn.close()
    return times


def run(api, fn, concurrency, requests):
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        streams = list(pool.map(fn, range(requests)))
    wall = time.perf_counter() - start
    assert all(len(t) == TOKENS for t in streams), [len(t) for t in streams]
    itl = [b - a for t in streams for a, b in zip(t, t[1:])]
    return {"api": api, "concurrency": concurrency, "requests": requests,
            "tokens_per_s": requests * TOKENS / wall,
            "itl_p50_ms": percentile(itl, 0.5) * 1e3, "itl_p99_ms": percentile(itl, 0.99) * 1e3}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pb, pb_grpc = stubs(tmp)
        with serving(a.build, a.model, a.tp, tmp) as (port, http_port):
            grpc_fn = lambda i: grpc_stream(f"127.0.0.1:{port}", pb, pb_grpc, i)  # noqa: E731
            http_fn = lambda i: http_stream(f"127.0.0.1:{http_port}", i)  # noqa: E731
            rows = []
            for c in [int(x) for x in a.concurrency.split(",")]:
                requests = max(8, 2 * c)
                run("grpc", grpc_fn, c, 2)  # warm-up
                for _ in range(a.rounds):
                    rows.append(run("grpc", grpc_fn, c, requests))
                    rows.append(run("http", http_fn, c, requests))
    print("| concurrency | API | tok/s | ITL p50 (ms) | ITL p99 (ms) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['api']} | {r['tokens_per_s']:.1f} | "
              f"{r['itl_p50_ms']:.2f} | {r['itl_p99_ms']:.2f} |")
    print()
    print("| concurrency | HTTP / gRPC tok/s | HTTP / gRPC ITL p50 | HTTP overhead per token (µs) |")
    print("|---|---|---|---|")
    for c in sorted({r["concurrency"] for r in rows}):
        g = [r for r in rows if r["concurrency"] == c and r["api"] == "grpc"]
        h = [r for r in rows if r["concurrency"] == c and r["api"] == "http"]
        med = lambda rs, k: percentile([r[k] for r in rs], 0.5)  # noqa: E731
        print(f"| {c} | {med(h, 'tokens_per_s') / med(g, 'tokens_per_s'):.2f} | "
              f"{med(h, 'itl_p50_ms') / med(g, 'itl_p50_ms'):.2f} | "
              f"{(med(h, 'itl_p50_ms') - med(g, 'itl_p50_ms')) * 1e3:.0f} |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
