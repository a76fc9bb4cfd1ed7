"""`tpserve generate`: offline generation on the real SmolLM2 model, streamed."""
import json
import subprocess

import pytest


def _generate(tpserve_bin, model, *args, check=True):
    out = subprocess.run([str(tpserve_bin), "generate", f"--model={model}", *args],
                         capture_output=True, text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def test_chat_answers_paris(tpserve_bin, smollm_gguf):
    out = _generate(tpserve_bin, smollm_gguf, "--chat",
                    "--prompt=What is the capital of France? Answer in one sentence.")
    assert "Paris" in out.stdout, out.stdout


def test_fast_path_answers_as_llama_cpp_and_exact_mode_as_the_reference(tpserve_bin, smollm_gguf):
    """The plain question's first token is a near-tie ("The" against "L" within 0.1 in
    logprob): the fast path (the file's Q4_1 blocks, 8-bit activations) picks "L" and goes on
    "L'Étoile, ..." as llama.cpp does on this file; --dequantize (f32 weights, the numpy
    reference's arithmetic) picks "The" and names Paris."""
    fast = _generate(tpserve_bin, smollm_gguf, "--chat", "--max_tokens=16",
                     "--prompt=What is the capital of France?")
    assert fast.stdout.startswith("L'Étoile"), fast.stdout
    exact = _generate(tpserve_bin, smollm_gguf, "--chat", "--dequantize",
                      "--prompt=What is the capital of France?")
    assert "Paris" in exact.stdout, exact.stdout


def test_json_stream_is_consistent(tpserve_bin, smollm_gguf):
    out = _generate(tpserve_bin, smollm_gguf, "--json", "--max_tokens=24", "--logprobs=3",
                    "--prompt=The three primary colours are")
    lines = [json.loads(l) for l in out.stdout.splitlines()]
    tokens, summary = lines[:-1], lines[-1]
    assert summary["finish_reason"] in ("length", "eos")
    assert summary["token_ids"] == [t["id"] for t in tokens]
    assert summary["completion_tokens"] == len(tokens) <= 24
    assert summary["prompt_tokens"] > 0
    for t in tokens:
        assert t["logprob"] <= 0.0
        assert len(t["top"]) == 3
        assert t["top"][0]["logprob"] >= t["top"][1]["logprob"] >= t["top"][2]["logprob"]
        assert t["id"] == t["top"][0]["id"]  # greedy: the chosen token is the most likely
    text = "".join(t["text"] for t in tokens) + summary.get("text", "")
    decoded = subprocess.run([str(tpserve_bin), "tokenize", f"--model={smollm_gguf}", "--decode",
                              "--skip_special"], input=json.dumps(summary["token_ids"]) + "\n",
                             capture_output=True, text=True, check=True).stdout
    assert text == json.loads(decoded)


def test_seed_determinism(tpserve_bin, smollm_gguf):
    args = ["--json", "--max_tokens=32", "--ignore_eos", "--temperature=1.2", "--top_p=0.95",
            "--prompt=Once upon a time"]

    def ids(seed):
        out = _generate(tpserve_bin, smollm_gguf, *args, f"--seed={seed}")
        return json.loads(out.stdout.splitlines()[-1])["token_ids"]

    first = ids(7)
    assert ids(7) == first
    assert ids(8) != first
    assert len(first) == 32


def test_dashed_flags_are_the_underscored_ones(tpserve_bin, smollm_gguf):
    """--max-tokens 8 is --max_tokens=8 (and so for every flag, the sampling ones included)."""
    dashed = _generate(tpserve_bin, smollm_gguf, "--json", "--max-tokens", "8", "--ignore-eos",
                       "--temperature", "0.8", "--top-k", "5", "--seed", "3",
                       "--prompt", "Once upon a time")
    underscored = _generate(tpserve_bin, smollm_gguf, "--json", "--max_tokens=8", "--ignore_eos",
                            "--temperature=0.8", "--top_k=5", "--seed=3",
                            "--prompt=Once upon a time")
    assert dashed.stdout == underscored.stdout
    assert json.loads(dashed.stdout.splitlines()[-1])["completion_tokens"] == 8


def test_output_streams_before_the_end(tpserve_bin, smollm_gguf):
    proc = subprocess.Popen([str(tpserve_bin), "generate", f"--model={smollm_gguf}", "--json",
                             "--max_tokens=400", "--ignore_eos", "--prompt=Count: 1, 2, 3,"],
                            stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        assert "id" in first
        assert proc.poll() is None, "the first token arrived only after the process ended"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("args,needle", [
    (["--max_tokens=0"], "max_tokens"),
    (["--temperature=-1"], "temperature"),
    (["--top_p=0"], "top_p"),
    (["--min_p=1.5"], "min_p"),
    (["--typical_p=0"], "typical_p"),
    (["--max_tokens=9000"], "context length"),
])
def test_bad_parameters_are_refused(tpserve_bin, smollm_gguf, args, needle):
    out = _generate(tpserve_bin, smollm_gguf, "--prompt=hi", *args, check=False)
    assert out.returncode != 0
    assert needle in out.stderr, out.stderr


def test_missing_model_is_a_clear_error(tpserve_bin, tmp_path):
    out = _generate(tpserve_bin, tmp_path / "nope.gguf", "--prompt=hi", check=False)
    assert out.returncode != 0
    assert "nope.gguf" in out.stderr
