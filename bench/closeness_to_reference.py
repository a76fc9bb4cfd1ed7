#!/usr/bin/env python3
"""How close greedy continuations stay to the exact numpy reference (tests/reference): tpserve's
fast path (the file's quantised blocks), tpserve's exact mode (--dequantize) and llama.cpp
(llama-cpp-python, same GGUF), on the 18 reference prompts, 64 tokens each. For each engine:
continuations identical to the reference's, and partings where the reference's top-two margin
was clear (above 2% of max|logit|) — the ones rounding noise does not explain.

  bench/closeness_to_reference.py [--model M] [--build build] [--tokens 64] [--out F.json]"""
import argparse
import ctypes
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "reference"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import llama_ref  # noqa: E402
import prompts as ref_prompts  # noqa: E402

CLEAR = 0.02


def tpserve_greedy(build, model, prompts, tokens, weights):
    out = subprocess.run([str(build / "tests" / "tools" / "engine_probe"), model, "greedy",
                          str(tokens), "2", weights],
                         input="".join(json.dumps(p) + "\n" for p in prompts),
                         capture_output=True, text=True, check=True)
    return [json.loads(l) for l in out.stdout.splitlines()]


def llama_cpp_greedy(model, prompts, tokens, eos):
    import llama_cpp as lc
    quiet = lc.llama_log_callback(lambda level, text, user_data: None)
    lc.llama_backend_init()
    lc.llama_log_set(quiet, ctypes.c_void_p())
    m = lc.llama_model_load_from_file(model.encode(), lc.llama_model_default_params())
    vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(m))
    results = []
    for p in prompts:
        cp = lc.llama_context_default_params()
        cp.n_ctx = len(p) + tokens + 8
        cp.n_batch = cp.n_ubatch = max(64, len(p))
        cp.n_threads = cp.n_threads_batch = 2
        ctx = lc.llama_init_from_model(m, cp)
        batch = lc.llama_batch_init(cp.n_batch, 0, 1)
        ids, pos, feed = [], 0, list(p)
        while len(ids) < tokens:
            for i, t in enumerate(feed):
                batch.token[i], batch.pos[i] = t, pos + i
                batch.n_seq_id[i], batch.seq_id[i][0] = 1, 0
                batch.logits[i] = i == len(feed) - 1
            batch.n_tokens = len(feed)
            if lc.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            pos += len(feed)
            row = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, len(feed) - 1),
                                        shape=(vocab,))
            best = int(np.argmax(row))  # a tie goes to the lowest id, as in the reference
            ids.append(best)
            if best == eos:
                break
            feed = [best]
        lc.llama_batch_free(batch)
        lc.llama_free(ctx)
        results.append(ids)
    return results


def score(name, got, want):
    identical, clear = 0, 0
    for g, w in zip(got, want):
        if g == w.ids:
            identical += 1
            continue
        step = next(i for i, (a, b) in enumerate(zip(g + [None], w.ids + [None])) if a != b)
        clear += w.margins[step] >= CLEAR * w.max_abs[step]
    return {"engine": name, "identical": identical, "clear_partings": clear, "prompts": len(got)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    ids = ref_prompts.all_prompt_ids(a.model)
    prompts = [ids[n] for n in ids]
    ref = llama_ref.LlamaReference(a.model)
    want = ref.greedy_batch(prompts, a.tokens)
    eos = ref.cfg.eos_token_id if ref.cfg.eos_token_id is not None else -1
    rows = [score("tpserve fast path", tpserve_greedy(build, a.model, prompts, a.tokens,
                                                      "packed"), want),
            score("tpserve --dequantize", tpserve_greedy(build, a.model, prompts, a.tokens,
                                                         "exact"), want),
            score("llama.cpp", llama_cpp_greedy(a.model, prompts, a.tokens, eos), want)]
    print(f"greedy {a.tokens}-token continuations of {len(prompts)} prompts against the numpy "
          f"reference ({pathlib.Path(a.model).name})")
    print("| engine | identical | partings at a clear margin (> 2% of max|logit|) |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['identical']} of {r['prompts']} | {r['clear_partings']} |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
