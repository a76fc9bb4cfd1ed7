#!/usr/bin/env python3
"""Side-by-side CPU throughput: tpserve's engine against llama.cpp (llama-cpp-python) on the
same GGUF and threads, with the machine's measured read bandwidth, in one run.

  bench/engine_vs_llama_cpp.py [--model M] [--build build] [--threads 1,2] [--rounds 3]
                               [--reps 5] [--out FILE.json]

Needs `pip install llama-cpp-python` in the project venv (see bench/requirements.txt).
Each thread count runs in rounds: both engines back to back, alternating which goes first, each
reporting medians of --reps repetitions. A ratio is taken within a round, and the table gives the
median ratio with its range over the rounds. Prints a markdown table; ratios are what to quote,
since this machine is shared.
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
from statistics import median

REPO = pathlib.Path(__file__).resolve().parents[1]


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def bandwidth(build, threads):
    out = subprocess.run([str(build / "bench" / "bandwidth_bench"), "--benchmark_format=json",
                          "--benchmark_min_time=1"], check=True, capture_output=True,
                         text=True).stdout
    # The best of the plain stream and the streams prefetched non-temporally (as the decode
    # tiles read): the limit is the best read rate the machine showed.
    rates = [b["GB/s"] * 1e9 for b in json.loads(out)["benchmarks"]
             if re.search(rf"threads:{threads}(/|$)", b["name"])]
    if not rates:
        raise RuntimeError(f"no bandwidth figure for {threads} threads in {out}")
    return max(rates)


def measures(run):
    """{measure name: tok/s} of one engine's run: prefill, then decode per batch."""
    out = {f"prefill {run['prefill_tokens']}": run["prefill_tok_s"]}
    out.update({f"decode batch {b}": v for b, v in run["decode_tok_s"].items()})
    return out


def summarise(rounds):
    """Per measure: the median rates over the rounds and the median, min and max of the ratios
    taken round by round (each round ran both engines back to back)."""
    summary = {}
    for name in measures(rounds[0]["tpserve"]):
        ours = [measures(r["tpserve"])[name] for r in rounds]
        theirs = [measures(r["llama_cpp"])[name] for r in rounds]
        ratios = [o / t for o, t in zip(ours, theirs)]
        summary[name] = {"tpserve_tok_s": median(ours), "llama_cpp_tok_s": median(theirs),
                         "ratio": median(ratios), "ratio_min": min(ratios),
                         "ratio_max": max(ratios)}
    return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds per thread count, each running both engines back to back "
                         "(alternating which goes first); ratios are taken within a round")
    ap.add_argument("--reps", type=int, default=5,
                    help="repetitions per measure inside one engine's run (its median)")
    ap.add_argument("--exact", action="store_true",
                    help="also run tpserve with --dequantize (f32 weights) for a reference column")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.rounds < 1 or a.reps < 1:
        ap.error("--rounds and --reps must be at least 1")
    build = pathlib.Path(a.build)
    results = []
    for t in [int(x) for x in a.threads.split(",")]:
        engine = [str(build / "bench" / "engine_throughput"), a.model, str(t), str(a.prompt),
                  str(a.steps), a.batches]
        llama = [sys.executable, str(REPO / "bench" / "llama_cpp_throughput.py"), a.model, str(t),
                 str(a.prompt), str(a.steps), a.batches, str(a.reps)]
        rounds = []
        for i in range(a.rounds):
            run = {"bandwidth_bytes_s": bandwidth(build, t)}
            # Alternate the order, so that neither engine always runs on a machine the other
            # has just warmed or cooled.
            for who in (("tpserve", "llama_cpp") if i % 2 == 0 else ("llama_cpp", "tpserve")):
                run[who] = run_json(engine + ["packed", str(a.reps)] if who == "tpserve"
                                    else llama)
            rounds.append(run)
        exact = run_json(engine + ["exact", str(a.reps)]) if a.exact else None
        results.append({"threads": t, "rounds": rounds, "summary": summarise(rounds),
                        "bandwidth_bytes_s": median([r["bandwidth_bytes_s"] for r in rounds]),
                        "tpserve_exact": exact})
    print(f"model {pathlib.Path(a.model).name}; tpserve keeps the file's blocks (packed); "
          f"{a.rounds} rounds of both engines, medians of {a.reps} reps each"
          + ("; exact: --dequantize, f32 weights" if a.exact else ""))
    print("| threads | measure | tpserve tok/s | llama.cpp tok/s | ratio (min-max) |"
          + (" exact tok/s |" if a.exact else "") + " tpserve / bandwidth limit |")
    print("|---|---|---|---|---|" + ("---|" if a.exact else "") + "---|")
    for r in results:
        exact = r["tpserve_exact"]
        exact_rates = measures(exact) if exact else {}
        first = r["rounds"][0]["tpserve"]
        # The limit of the bytes this path actually reads per decode step (its stored blocks),
        # at the median bandwidth measured across the rounds.
        limit = r["bandwidth_bytes_s"] / first["decode_bytes_per_step"]
        for name, m in r["summary"].items():
            extra = f" {exact_rates[name]:.0f} |" if exact else ""
            lim = (f"{m['tpserve_tok_s'] / limit:.2f} (limit {limit:.0f} tok/s)"
                   if name == "decode batch 1" else "")
            print(f"| {r['threads']} | {name} | {m['tpserve_tok_s']:.0f} | "
                  f"{m['llama_cpp_tok_s']:.0f} | {m['ratio']:.2f} ({m['ratio_min']:.2f}-"
                  f"{m['ratio_max']:.2f}) |{extra} {lim} |")
        print(f"| {r['threads']} | peak RSS | {first['peak_rss_bytes'] / 2**20:.0f} MiB | | |"
              + (f" {exact['peak_rss_bytes'] / 2**20:.0f} MiB |" if exact else "")
              + f" load {first['load_s']:.2f} s"
              + (f" (exact {exact['load_s']:.2f} s)" if exact else "") + " |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
