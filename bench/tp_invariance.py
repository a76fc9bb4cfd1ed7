#!/usr/bin/env python3
"""One model whatever the world: how often a world of P ranks gives the world of one's answer,
and what the canonical path (exact row-parallel sums, the default) costs against float sums
(--tp_invariant=false, as before it), side by side in one run.

Invariance: 14 held-out prompts (tests/reference/prompts.py, less the first four), 32 greedy
tokens with their logprobs (`generate --json --logprobs=2`), in process at 1 thread (the
reference) and 2 threads, and on 2 and 3 worker processes; per mode, the prompts whose token
ids are identical to the reference's, and those whose chosen-token logprobs are too, bit for
bit (the JSON carries every float's shortest round-trip digits).

Cost: `engine_throughput` at TP=1 (1 thread, batch 1 and 8 decode tok/s, WEIGHTS=packed
against packed-float), and `serve --tp 2` streaming greedy chat requests at concurrency 1 and
16 (decode tok/s: each request's tokens after its first over the time they took), the two
modes alternating, medians over --rounds.

  bench/tp_invariance.py [--build build] [--rounds 3] [--out bench/results/tp_invariance.json]
"""
import argparse
import contextlib
import json
import pathlib
import subprocess
import sys
import tempfile

from bench_stats import free_port, percentile, serving  # beside this script
from speculative import run as run_chats  # streamed chat requests, decode tok/s

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "reference"))
sys.path.insert(0, str(REPO / "tests" / "integration"))
import prompts as reference_prompts  # noqa: E402
from worker_procs import generate_ids, stop, wait_healthy  # noqa: E402

HELD_OUT = reference_prompts.PROMPTS[4:]
TOKENS = 32
MODES = {"canonical": [], "float_sums": ["--tp_invariant=false"]}


def invariance(build, model):
    tpserve = pathlib.Path(build) / "server" / "tpserve"
    procs, workers = [], []
    try:
        for _ in range(3):
            workers.append(f"127.0.0.1:{free_port()}")
            procs.append(subprocess.Popen([str(tpserve), "worker", f"--listen={workers[-1]}",
                                           f"--model_root={pathlib.Path(model).parent}"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for w in workers:
            wait_healthy(w)
        rows = []
        for mode, flags in MODES.items():
            extra = ["--logprobs=2", *flags]
            counts = {}
            for p in HELD_OUT:
                ref_ids, ref = generate_ids([], tpserve, model, p["text"], p["chat"], TOKENS,
                                            extra=extra)
                runs = {"TP=1, 2 threads": generate_ids([], tpserve, model, p["text"], p["chat"],
                                                        TOKENS, extra=extra, threads=2)}
                for world in (2, 3):
                    runs[f"TP={world}"] = generate_ids([], tpserve, model, p["text"], p["chat"],
                                                       TOKENS, workers=workers[:world],
                                                       extra=extra)
                for name, (ids, lines) in runs.items():
                    c = counts.setdefault(name, {"ids": 0, "logprob_bits": 0})
                    c["ids"] += ids == ref_ids
                    c["logprob_bits"] += [l.get("logprob") for l in lines] == \
                        [l.get("logprob") for l in ref]
            for name, c in counts.items():
                rows.append({"mode": mode, "against TP=1, 1 thread": name,
                             "prompts": len(HELD_OUT), "ids_identical": c["ids"],
                             "logprob_bits_identical": c["logprob_bits"]})
                print(json.dumps(rows[-1]), flush=True)
        return rows
    finally:
        stop(procs)


def engine_cost(build, model, rounds):
    tput = pathlib.Path(build) / "bench" / "engine_throughput"
    runs = {"packed": [], "packed-float": []}
    for _ in range(rounds):
        for weights in runs:
            out = subprocess.run([str(tput), model, "1", "128", "48", "1,8", weights, "3"],
                                 check=True, capture_output=True, text=True).stdout
            runs[weights].append(json.loads(out))
    row = {"tp": 1, "threads": 1, "rounds": rounds}
    for b in ("1", "8"):
        canon = percentile([r["decode_tok_s"][b] for r in runs["packed"]], 0.5)
        floats = percentile([r["decode_tok_s"][b] for r in runs["packed-float"]], 0.5)
        row[f"batch{b}_canonical_tok_s"] = canon
        row[f"batch{b}_float_sums_tok_s"] = floats
        row[f"batch{b}_canonical_over_float"] = canon / floats
    prefill = {w: percentile([r["prefill_tok_s"] for r in runs[w]], 0.5) for w in runs}
    row["prefill128_canonical_over_float"] = prefill["packed"] / prefill["packed-float"]
    print(json.dumps(row), flush=True)
    return row


def serve_cost(build, model, rounds, concurrencies, tp=2):
    chats = json.loads((REPO / "tests" / "integration" / "data" /
                        "speculative_prompts.json").read_text())["open"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        ports = {mode: stack.enter_context(serving(build, model, tp, tmp, name=mode,
                                                   flags=flags))[1]
                 for mode, flags in MODES.items()}
        for c in concurrencies:
            requests = len(chats) * -(-2 * c // len(chats))
            runs = {mode: [] for mode in MODES}
            for _ in range(rounds):
                for mode, port in ports.items():
                    runs[mode].append(run_chats(port, chats, c, requests, 64))
            decode = {m: percentile([r["decode_tokens_per_s"] for r in runs[m]], 0.5)
                      for m in runs}
            total = {m: percentile([r["tokens_per_s"] for r in runs[m]], 0.5) for m in runs}
            rows.append({"tp": tp, "concurrency": c, "requests": requests, "rounds": rounds,
                         "decode_canonical_tok_s": decode["canonical"],
                         "decode_float_sums_tok_s": decode["float_sums"],
                         "decode_canonical_over_float": decode["canonical"] / decode["float_sums"],
                         "output_canonical_over_float": total["canonical"] / total["float_sums"]})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--out")
    a = ap.parse_args()
    result = {}

    def stage(name, fn):  # each stage's figures kept as they come
        result[name] = fn()
        if a.out:
            pathlib.Path(a.out).write_text(json.dumps(result, indent=1) + "\n")

    stage("invariance", lambda: invariance(a.build, a.model))
    stage("engine_tp1", lambda: engine_cost(a.build, a.model, a.rounds))
    stage("serve_tp2", lambda: serve_cost(a.build, a.model, a.rounds,
                                          [int(c) for c in a.concurrency.split(",")]))
    print("| mode | against TP=1, 1 thread | token ids identical | logprob bits identical |")
    print("|---|---|---|---|")
    for r in result["invariance"]:
        print(f"| {r['mode']} | {r['against TP=1, 1 thread']} | {r['ids_identical']}/"
              f"{r['prompts']} | {r['logprob_bits_identical']}/{r['prompts']} |")
    e = result["engine_tp1"]
    print(f"\nTP=1 engine decode, canonical / float sums: batch 1 "
          f"{e['batch1_canonical_over_float']:.3f}, batch 8 {e['batch8_canonical_over_float']:.3f}"
          f"; prefill 128 {e['prefill128_canonical_over_float']:.3f}")
    for r in result["serve_tp2"]:
        print(f"serve --tp 2, concurrency {r['concurrency']}: decode canonical / float sums "
              f"{r['decode_canonical_over_float']:.3f}")


if __name__ == "__main__":
    main()
