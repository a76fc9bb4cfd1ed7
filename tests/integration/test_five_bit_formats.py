"""Q5_0 and Q5_1 weights (Gemma 3's GGUFs carry Q5_0) end to end, on real weights: SmolLM2's
first 4 blocks requantised by scripts/requantize.py. Each file is served from its own blocks
(the log counts the matrices held in the format), close to its exact mode (--dequantize: the
same weights in f32) and, on the canonical path, with the same tokens and logprobs to the last
bit at world sizes 1, 2 and 3 (workers over loopback) as offline."""
import re
import subprocess
import sys

import pytest

from worker_procs import generate_ids, start_local

PROMPT = "The capital of France is"
MAX_TOKENS = 16


@pytest.fixture(scope="module", params=["Q5_0", "Q5_1"])
def model(request, repo_root, smollm_gguf, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param.lower()) / f"smollm-l4-{request.param}.gguf"
    r = subprocess.run([sys.executable, str(repo_root / "scripts" / "requantize.py"),
                        str(smollm_gguf), str(out), "--type", request.param, "--layers", "4"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return request.param, out


def _stream(lines):
    return [(l.get("id"), l.get("logprob"), l.get("top")) for l in lines[:-1]]


def test_held_in_its_blocks_and_close_to_the_exact_mode(tpserve_bin, model):
    name, path = model
    run = subprocess.run([str(tpserve_bin), "generate", f"--model={path}", "--json",
                          f"--max_tokens={MAX_TOKENS}", "--temperature=0", "--logprobs=2",
                          f"--prompt={PROMPT}", "--threads=1", "--ignore_eos"],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    # Every matrix in the format, none converted: "holds 17 Q5_0 matrices" (per block, qkv,
    # o, gate_up and down, and the tied embedding).
    held = re.search(r"weights: rank 0 holds (\d+) (\S+) matrices\n", run.stderr)
    assert held and held.group(2) == name and int(held.group(1)) >= 4 * 4 + 1, run.stderr[-2000:]
    _, fast = generate_ids([], tpserve_bin, path, PROMPT, False, MAX_TOKENS,
                           extra=["--logprobs=2", "--ignore_eos"])
    _, exact = generate_ids([], tpserve_bin, path, PROMPT, False, MAX_TOKENS,
                            extra=["--logprobs=2", "--ignore_eos", "--dequantize"])
    # The fast path rounds activations to 8 bits per block of 32; the weights are the same.
    # While the greedy tokens agree, the chosen tokens' logprobs stay within 0.1 nat.
    agreed = 0
    for f, e in zip(fast[:-1], exact[:-1]):
        if f["id"] != e["id"]:
            break
        assert f["logprob"] == pytest.approx(e["logprob"], abs=0.1), (name, agreed, f, e)
        agreed += 1
    assert agreed >= 3, f"{name}: the fast path parts from the exact mode at token {agreed}"


def test_every_world_size_gives_the_offline_bits(request, tpserve_bin, model, tmp_path):
    name, path = model
    _, workers = start_local(request, tpserve_bin, path, tmp_path, 3)
    want_ids, want = generate_ids([], tpserve_bin, path, PROMPT, False, MAX_TOKENS,
                                  extra=["--logprobs=2"])
    for world in (1, 2, 3):
        got_ids, got = generate_ids([], tpserve_bin, path, PROMPT, False, MAX_TOKENS,
                                    workers=workers[:world], extra=["--logprobs=2"])
        assert got_ids == want_ids, f"{name} at world size {world}"
        assert _stream(got) == _stream(want), f"{name} at world size {world}"
