#!/usr/bin/env python3
"""Turns tpserve-bench JSON summaries into one PNG: latency percentiles (time to first token,
inter-token, end to end: p50 / p90 / p99) and output tokens/s, against concurrency (or
arrival rate for Poisson runs). Runs with the same label share a line; a label is e.g.
"TP=2" (tpserve-bench --label).

usage: bench/plot.py --out plot.png result.json [result.json ...]"""
import argparse
import collections
import json
import pathlib

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    """{label: [(x, summary), ...]} sorted by x; x is concurrency, or the rate when 0."""
    series = collections.defaultdict(list)
    for path in paths:
        s = json.loads(pathlib.Path(path).read_text())
        cfg = s["config"]
        x = cfg["concurrency"] or cfg["rate"]
        label = cfg.get("label") or f"world size {cfg.get('world_size', '?')}"
        series[label].append((x, s))
    for points in series.values():
        points.sort(key=lambda p: p[0])
    return series


def plot(series, out, title):
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    panels = [("ttft_s", "time to first token (s)"), ("itl_s", "inter-token latency (s)"),
              ("e2e_s", "end-to-end latency (s)")]
    styles = {"p50": "-", "p90": "--", "p99": ":"}
    rate_runs = any(s["config"]["rate"] > 0 for pts in series.values() for _, s in pts)
    xlabel = "arrival rate (req/s)" if rate_runs else "concurrency (requests in flight)"
    for ax, (key, name) in zip(axes, panels):
        for i, (label, points) in enumerate(sorted(series.items())):
            xs = [x for x, _ in points]
            for q, style in styles.items():
                ax.plot(xs, [s[key][q] for _, s in points], style, marker="o", color=f"C{i}",
                        label=f"{label} {q}")
        ax.set_title(name)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    ax = axes[3]
    for i, (label, points) in enumerate(sorted(series.items())):
        ax.plot([x for x, _ in points], [s["output_tokens_per_s"] for _, s in points], "-o",
                color=f"C{i}", label=label)
    ax.set_title("throughput (output tokens/s)")
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="tpserve-bench")
    args = ap.parse_args()
    plot(load(args.results), args.out, args.title)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
