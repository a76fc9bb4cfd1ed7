#!/usr/bin/env python3
"""Structured output's cost, in one run: (1) build/bench/grammar_masks over the schema corpus on
the model's vocabulary — compile time per schema, token-mask time per token at batch 1 and per
step at batch 16 (p50, p99, µs); (2) one `tpserve serve`, the same chat requests with a JSON
schema (response_format) and without, alternating, at each concurrency: output tokens/s of
each and their ratio (goal >= 0.9x).

  bench/structured_output.py [--build build] [--tp 2] [--concurrency 1,8] [--rounds 2]
                             [--out bench/results/structured_output.json]
"""
import argparse
import concurrent.futures
import json
import pathlib
import subprocess
import tempfile
import time

from bench_stats import percentile, post_chat, serving  # beside this script

REPO = pathlib.Path(__file__).resolve().parents[1]
PROMPT = "List some people with their names and ages, as JSON."
SCHEMA = {"type": "array", "minItems": 6, "maxItems": 6, "items": {
    "type": "object", "additionalProperties": False, "required": ["name", "age", "city"],
    "properties": {"name": {"type": "string", "maxLength": 24},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "city": {"type": "string", "maxLength": 24}}}}
TOKENS = 96


def chat(http_port, seed, schema):
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": TOKENS, "seed": seed,
            "temperature": 0.8}
    if schema:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "people", "schema": SCHEMA}}
    else:
        body["ignore_eos"] = True
    return post_chat(http_port, body)["usage"]["completion_tokens"]


def run(http_port, schema, concurrency, requests):
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(lambda i: chat(http_port, i, schema), range(requests)))
    wall = time.perf_counter() - start
    return {"schema": schema, "concurrency": concurrency, "requests": requests, "tokens": tokens,
            "tokens_per_s": tokens / wall}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--corpus", default=str(REPO / "tests" / "schemas" / "corpus.json"))
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    masks = json.loads(subprocess.run(
        [str(pathlib.Path(a.build) / "bench" / "grammar_masks"), a.model, a.corpus],
        check=True, capture_output=True, text=True).stdout)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, serving(a.build, a.model, a.tp, tmp) as ports:
        _, http_port = ports
        for c in [int(x) for x in a.concurrency.split(",")]:
            requests = max(4, 2 * c)
            run(http_port, True, c, 2)  # warm-up (the schema compiles once)
            for _ in range(a.rounds):
                rows.append(run(http_port, False, c, requests))
                rows.append(run(http_port, True, c, requests))
    ratios = {}
    for c in sorted({r["concurrency"] for r in rows}):
        med = lambda s: percentile([r["tokens_per_s"] for r in rows  # noqa: E731
                                    if r["concurrency"] == c and r["schema"] == s], 0.5)
        ratios[c] = {"free_tokens_per_s": med(False), "schema_tokens_per_s": med(True),
                     "schema_over_free": med(True) / med(False)}
    print(json.dumps(masks, indent=1))
    print("| concurrency | free tok/s | schema tok/s | schema / free |")
    print("|---|---|---|---|")
    for c, r in ratios.items():
        print(f"| {c} | {r['free_tokens_per_s']:.1f} | {r['schema_tokens_per_s']:.1f} | "
              f"{r['schema_over_free']:.2f} |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(
            {"masks": masks, "serving": rows, "ratios": ratios, "tp": a.tp}, indent=1) + "\n")


if __name__ == "__main__":
    main()
