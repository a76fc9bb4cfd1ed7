"""Command-line front end to the numpy reference.

  python tests/reference/cli.py logits   --model M --ids 1,2,3 --out f.npy
  python tests/reference/cli.py logits   --model M --prompt TEXT [--chat] --out f.npy
  python tests/reference/cli.py generate --model M --prompt TEXT [--chat] --max-tokens N
  python tests/reference/cli.py generate --model M --ids 1,2,3 --max-tokens N [--no-stop]
  python tests/reference/cli.py tokenize --model M --prompt TEXT [--chat]
  python tests/reference/cli.py suite    --model M [--max-tokens 64] [--out expect.json]

``logits`` saves float32 [T, vocab] logits of a full-sequence forward.
``generate`` is greedy; prints one JSON object (prompt_ids, ids, margins) and
then the decoded text. ``suite`` runs every prompt of prompts.py in one batch
and writes/prints {name: {prompt_ids, ids, margins, text}}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see llama_ref.py; before numpy import

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from llama_ref import LlamaReference, near_ties  # noqa: E402
import prompts as prompts_mod  # noqa: E402
import tokenize_ref  # noqa: E402

DEFAULT_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models",
                             "SmolLM2-135M-Instruct.Q4_1.gguf")


def _ids_from_args(a) -> list:
    if a.ids is not None:
        return [int(t) for t in a.ids.split(",") if t.strip()]
    if a.prompt is None:
        sys.exit("need --ids or --prompt")
    if a.chat:
        return tokenize_ref.encode_chat(a.model, a.prompt)
    return tokenize_ref.encode(a.model, a.prompt)


def _dtype(a):
    return np.float64 if a.f64 else np.float32


def cmd_tokenize(a):
    ids = _ids_from_args(a)
    print(json.dumps(ids))


def cmd_logits(a):
    ids = _ids_from_args(a)
    ref = LlamaReference(a.model, dtype=_dtype(a))
    t0 = time.time()
    logits = ref.forward(ids).astype(np.float32)  # [T, V]
    np.save(a.out, logits)
    print(f"saved logits {logits.shape} to {a.out} ({time.time() - t0:.2f}s)", file=sys.stderr)


def cmd_generate(a):
    ids = _ids_from_args(a)
    ref = LlamaReference(a.model, dtype=_dtype(a))
    res = ref.greedy(ids, a.max_tokens, stop_at_eos=not a.no_stop)
    print(json.dumps({"prompt_ids": res.prompt_ids, "ids": res.ids,
                      "margins": [round(m, 5) for m in res.margins],
                      "near_ties": near_ties(res)}))
    print(tokenize_ref.decode(a.model, res.ids))


def cmd_suite(a):
    ref = LlamaReference(a.model, dtype=_dtype(a))
    named = prompts_mod.all_prompt_ids(a.model)
    t0 = time.time()
    results = ref.greedy_batch(list(named.values()), a.max_tokens, stop_at_eos=not a.no_stop)
    out = {}
    for name, r in zip(named, results):
        out[name] = {"prompt_ids": r.prompt_ids, "ids": r.ids,
                     "margins": [round(m, 5) for m in r.margins],
                     "near_ties": near_ties(r),
                     "text": tokenize_ref.decode(a.model, r.ids)}
    print(f"suite: {len(out)} prompts x {a.max_tokens} tokens in {time.time() - t0:.1f}s", file=sys.stderr)
    s = json.dumps(out, indent=1, ensure_ascii=False)
    if a.out:
        with open(a.out, "w") as f:
            f.write(s)
    else:
        print(s)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, fn in [("logits", cmd_logits), ("generate", cmd_generate),
                     ("tokenize", cmd_tokenize), ("suite", cmd_suite)]:
        sp = sub.add_parser(name)
        sp.set_defaults(fn=fn)
        sp.add_argument("--model", default=DEFAULT_MODEL)
        sp.add_argument("--f64", action="store_true", help="compute in float64 (slower)")
        if name != "suite":
            sp.add_argument("--ids", help="comma-separated token ids")
            sp.add_argument("--prompt", help="text prompt")
            sp.add_argument("--chat", action="store_true", help="wrap --prompt in the GGUF chat template")
        if name in ("generate", "suite"):
            sp.add_argument("--max-tokens", type=int, default=64)
            sp.add_argument("--no-stop", action="store_true", help="do not stop at EOS")
        if name == "logits":
            sp.add_argument("--out", required=True)
        if name == "suite":
            sp.add_argument("--out")
    a = p.parse_args(argv)
    a.fn(a)


if __name__ == "__main__":
    main()
