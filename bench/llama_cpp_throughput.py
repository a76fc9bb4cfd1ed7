#!/usr/bin/env python3
"""llama.cpp (through the PyPI package llama-cpp-python) measured the way
bench/engine_throughput.cc measures tpserve, for side-by-side figures on the same GGUF:

  llama_cpp_throughput.py MODEL THREADS [PROMPT_TOKENS=128] [DECODE_STEPS=32] [BATCHES=1,8,32]
                          [REPS=3]

Prints one JSON object: prefill tokens/s for one prompt, and total decode tokens/s of B
sequences decoding together (llama_batch with one token per sequence per step), medians of REPS.
"""
import ctypes
import json
import statistics
import sys
import time

import llama_cpp as lc


# llama.cpp keeps the pointer: the callback object must outlive every call.
_QUIET_LOG = lc.llama_log_callback(lambda level, text, user_data: None)


def _memory_clear(ctx):
    if hasattr(lc, "llama_memory_clear"):
        lc.llama_memory_clear(lc.llama_get_memory(ctx), True)
    else:
        lc.llama_kv_self_clear(ctx)


def _tokens(n, salt):
    return [(1000 + 7919 * (i + salt)) % 49152 for i in range(n)]


class Runner:
    def __init__(self, path, threads, max_seqs, n_ctx):
        lc.llama_backend_init()
        lc.llama_log_set(_QUIET_LOG, ctypes.c_void_p())
        mparams = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(path.encode(), mparams)
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = max(512, max_seqs * 16)
        cparams.n_ubatch = cparams.n_batch
        cparams.n_seq_max = max_seqs
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        self.ctx = lc.llama_init_from_model(self.model, cparams)
        self.batch = lc.llama_batch_init(cparams.n_batch, 0, max_seqs)

    def decode(self, entries):
        """entries: [(token, pos, seq, want_logits)]"""
        b = self.batch
        for i, (tok, pos, seq, logits) in enumerate(entries):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
        b.n_tokens = len(entries)
        rc = lc.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")


def main():
    path, threads = sys.argv[1], int(sys.argv[2])
    prompt = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 32
    batches = [int(b) for b in sys.argv[5].split(",")] if len(sys.argv) > 5 else [1, 8, 32]
    reps = int(sys.argv[6]) if len(sys.argv) > 6 else 3
    max_b = max(batches)
    r = Runner(path, threads, max_b, max_b * (max(prompt, 16 + steps) + 16))
    out = {"threads": threads, "prefill_tokens": prompt, "reps": reps}
    rates = []
    for rep in range(reps):
        _memory_clear(r.ctx)
        toks = _tokens(prompt, rep)
        t0 = time.perf_counter()
        r.decode([(t, i, 0, i == prompt - 1) for i, t in enumerate(toks)])
        rates.append(prompt / (time.perf_counter() - t0))
    out["prefill_tok_s"] = statistics.median(rates)
    out["decode_tok_s"] = {}
    for b in batches:
        rates = []
        for rep in range(reps):
            _memory_clear(r.ctx)
            r.decode([(t, i, s, i == 15) for s in range(b) for i, t in enumerate(_tokens(16, s))])
            t0 = time.perf_counter()
            for step in range(steps):
                r.decode([(100 + s, 16 + step, s, True) for s in range(b)])
            rates.append(b * steps / (time.perf_counter() - t0))
        out["decode_tok_s"][str(b)] = statistics.median(rates)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
