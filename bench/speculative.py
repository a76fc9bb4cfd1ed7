#!/usr/bin/env python3
"""Speculative decoding's speed, in one run: two `tpserve serve` side by side, one with
`--speculative ngram` (or `--mode draft`: `--speculative draft` with a draft model, by default
SmolLM2's first --draft_layers blocks made by scripts/requantize.py) and one without, the same greedy chat requests sent to each in
alternating rounds, on input-grounded prompts (copy a text, correct spelling, return a function
unchanged, quote a passage; tests/integration/data/speculative_prompts.json) and on open-ended
ones, at each concurrency and TP degree. Reports output tokens/s with / without (from each
run's start to its last token, so prefill included), the same for decode alone (each request's
tokens after its first over the time from its first token to its last), and the mean
accepted length (tokens per target step of a speculating request: completion / (completion -
accepted)). The tokens are the same both ways (speculation is exact), so the ratio is speed
alone. Goals: grounded at concurrency 1 >= 2x; open-ended >= 0.97x; concurrency 16 >= 0.95x.

  bench/speculative.py [--build build] [--tp 1,2] [--concurrency 1,4,16] [--rounds 2]
                       [--max_tokens 96] [--mode ngram|draft] [--draft_model F]
                       [--draft_layers 6] [--out bench/results/speculative.json]
"""
import argparse
import concurrent.futures
import contextlib
import http.client
import json
import pathlib
import subprocess
import sys
import tempfile
import time

from bench_stats import percentile, serving  # beside this script

REPO = pathlib.Path(__file__).resolve().parents[1]
PROMPTS = json.loads((REPO / "tests" / "integration" / "data" /
                      "speculative_prompts.json").read_text())


def chat(http_port, prompt, max_tokens):
    """One greedy chat request, streamed: (completion tokens, accepted proposals, text, seconds
    from the first token to the last)."""
    conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=600)
    conn.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"},
                 body=json.dumps({"messages": [{"role": "user", "content": prompt}],
                                  "max_tokens": max_tokens, "temperature": 0, "stream": True,
                                  "stream_options": {"include_usage": True}}))
    r = conn.getresponse()
    assert r.status == 200, r.read()
    text, usage, first, last = [], None, None, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices", []):
            if choice.get("delta", {}).get("content"):
                last = time.perf_counter()
                first = first or last
                text.append(choice["delta"]["content"])
    conn.close()
    details = usage.get("completion_tokens_details", {})
    return (usage["completion_tokens"], details.get("accepted_prediction_tokens", 0),
            "".join(text), (last - first) if first else 0.0)


def run(http_port, prompts, concurrency, requests, max_tokens):
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        out = list(pool.map(lambda i: chat(http_port, prompts[i % len(prompts)], max_tokens),
                            range(requests)))
    wall = time.perf_counter() - start
    tokens = sum(o[0] for o in out)
    accepted = sum(o[1] for o in out)
    # Decode alone: each request's tokens after its first, over the time they took.
    decode = sum(max(0, o[0] - 1) for o in out) / max(1e-9, sum(o[3] for o in out))
    return {"tokens": tokens, "accepted": accepted, "tokens_per_s": tokens / wall,
            "decode_tokens_per_s": decode, "texts": [o[2] for o in out]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tp", default="1,2")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max_tokens", type=int, default=96)
    ap.add_argument("--mode", choices=["ngram", "draft"], default="ngram")
    ap.add_argument("--draft_model", help="draft mode's GGUF (default: made from --model)")
    ap.add_argument("--draft_layers", type=int, default=6)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as drafts:
        flags = [f"--speculative={a.mode}"]
        if a.mode == "draft":
            draft = a.draft_model or str(pathlib.Path(drafts) / "draft.gguf")
            if not a.draft_model:
                subprocess.run([sys.executable, str(REPO / "scripts" / "requantize.py"), a.model,
                                draft, "--type", "Q4_1", "--layers", str(a.draft_layers)],
                               check=True)
            flags.append(f"--draft_model={draft}")
        for tp in [int(x) for x in a.tp.split(",")]:
            rows += measure(a, tp, flags)
    print(f"| TP | prompts | concurrency | off tok/s | {a.mode} tok/s | {a.mode} / off | "
          "decode alone, on / off | mean accepted length |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tp']} | {r['prompts']} | {r['concurrency']} | {r['off_tokens_per_s']:.1f} | "
              f"{r['on_tokens_per_s']:.1f} | {r['on_over_off']:.2f} | "
              f"{r['decode_on_over_off']:.2f} | {r['mean_accepted_length']:.2f} |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps({"mode": a.mode, "rows": rows}, indent=1) + "\n")


def measure(a, tp, flags):
    """The rows of one TP degree: each prompt kind at each concurrency, off against on."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        off = stack.enter_context(serving(a.build, a.model, tp, tmp, name="off"))[1]
        on = stack.enter_context(serving(a.build, a.model, tp, tmp, name="on",
                                         flags=flags))[1]
        for kind in ("grounded", "open"):
            for c in [int(x) for x in a.concurrency.split(",")]:
                # Every prompt at least once, and two rounds of the pool at each concurrency.
                requests = len(PROMPTS[kind]) * -(-2 * c // len(PROMPTS[kind]))
                runs = {"off": [], "on": []}
                for _ in range(a.rounds):
                    for mode, port in (("off", off), ("on", on)):
                        runs[mode].append(run(port, PROMPTS[kind], c, requests, a.max_tokens))
                assert runs["off"][0]["texts"] == runs["on"][0]["texts"], "outputs differ"
                tps = {m: percentile([r["tokens_per_s"] for r in runs[m]], 0.5) for m in runs}
                dps = {m: percentile([r["decode_tokens_per_s"] for r in runs[m]], 0.5)
                       for m in runs}
                on_tokens = sum(r["tokens"] for r in runs["on"])
                on_accepted = sum(r["accepted"] for r in runs["on"])
                rows.append({"tp": tp, "prompts": kind, "concurrency": c,
                             "requests": requests, "rounds": a.rounds,
                             "off_tokens_per_s": tps["off"], "on_tokens_per_s": tps["on"],
                             "on_over_off": tps["on"] / tps["off"],
                             "decode_on_over_off": dps["on"] / dps["off"],
                             "mean_accepted_length":
                                 on_tokens / max(1, on_tokens - on_accepted)})
                print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main()
