#!/usr/bin/env python3
"""Worker memory and load time, packed (the file's blocks) against exact (--dequantize):
starts `tpserve serve --tp N` for each N, waits until it serves, and reads each worker
process's resident memory (VmRSS, and its anonymous part RssAnon, which excludes the model
file's page cache mapped for reading) against the model file's size.

  bench/worker_memory.py [--model M] [--build build] [--tps 1,2] [--kv_budget_mb 32] [--out F]

Prints a markdown table; stops everything it starts."""
import argparse
import json
import pathlib
import signal
import subprocess
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def children(pid):
    out = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(c) for c in text]
    return out


def status_kb(pid, field):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def measure(build, model, tp, exact, kv_mb, port):
    cmd = [str(build / "server" / "tpserve"), "serve", f"--model={model}", f"--tp={tp}",
           f"--threads={max(1, 2 // tp)}", f"--port={port}", f"--kv_budget_mb={kv_mb}"]
    if exact:
        cmd.append("--dequantize")
    start = time.monotonic()
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cli = [str(build / "clients" / "cpp" / "tpserve-cli"), f"--server=127.0.0.1:{port}",
               "--timeout_s=2", "health"]
        for _ in range(600):
            if subprocess.run(cli, capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"{cmd} did not become healthy")
        ready_s = time.monotonic() - start
        workers = children(srv.pid)
        return {"tp": tp, "weights": "exact" if exact else "packed", "ready_s": ready_s,
                "workers": [{"rss_kb": status_kb(w, "VmRSS"), "anon_kb": status_kb(w, "RssAnon")}
                            for w in workers]}
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--tps", default="1,2")
    ap.add_argument("--kv_budget_mb", type=int, default=32)
    ap.add_argument("--port", type=int, default=50171)
    ap.add_argument("--out")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    file_mb = pathlib.Path(a.model).stat().st_size / 2**20
    rows = [measure(build, a.model, int(tp), exact, a.kv_budget_mb, a.port)
            for tp in a.tps.split(",") for exact in (False, True)]
    print(f"model {pathlib.Path(a.model).name}: {file_mb:.0f} MiB; KV budget "
          f"{a.kv_budget_mb} MiB per worker")
    print("| TP | weights | time to serving | per worker RSS (MiB) | RSS / file | anonymous (MiB) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        rss = [w["rss_kb"] / 1024 for w in r["workers"]]
        anon = [w["anon_kb"] / 1024 for w in r["workers"]]
        print(f"| {r['tp']} | {r['weights']} | {r['ready_s']:.1f} s | "
              f"{', '.join(f'{v:.0f}' for v in rss)} | "
              f"{', '.join(f'{v / file_mb:.2f}' for v in rss)} | "
              f"{', '.join(f'{v:.0f}' for v in anon)} |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps({"file_mb": file_mb, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
