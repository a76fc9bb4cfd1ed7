"""`tpserve generate --stop` stops exactly as the server does for the same request: one token
loop (BatchEngine) and one finish decision for both. Greedy, on SmolLM2: the same tokens, the
same text (cut before the stop string, even one that ends inside a token or spans two) and
the same finish reason from `tpserve generate` (the model in process) and from `tpserve serve`
(a world of one worker) driven through tpserve.v1.Generation. The stop strings are taken from
the greedy continuation itself, so they do occur and the test can fail.

Budget: one serve start and a dozen 32-token generations on two cores, about a minute."""
import json
import subprocess

import grpc
import pytest

import serve_procs
from serve_procs import collect
from tpserve.v1 import generate_pb2 as pb
from tpserve.v1 import generate_pb2_grpc as pb_grpc

PROMPT = "The capital of France is"
MAX_TOKENS = 32
STREAM_S = 120
REASONS = {pb.FINISH_REASON_LENGTH: "length", pb.FINISH_REASON_STOP: "stop",
           pb.FINISH_REASON_EOS: "eos"}


@pytest.fixture(scope="module")
def stub(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    log = tmp_path_factory.mktemp("serve_stop") / "serve.log"
    server = serve_procs.start(tpserve_bin, smollm_gguf, log, tp=1, threads=1)
    request.addfinalizer(lambda: serve_procs.cleanup(server))  # bounded, idempotent
    serve_procs.wait_serving(server, timeout_s=120)
    channel = serve_procs.channel(server.address)
    request.addfinalizer(channel.close)
    return pb_grpc.GenerationStub(channel)


def _generate(tpserve_bin, model, *args):
    """`tpserve generate --json` greedy: (token ids, text, finish reason)."""
    out = subprocess.run([str(tpserve_bin), "generate", f"--model={model}", "--json",
                          "--threads=1", "--temperature=0", f"--max_tokens={MAX_TOKENS}",
                          f"--prompt={PROMPT}", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    tokens, summary = lines[:-1], lines[-1]
    assert summary["token_ids"] == [t["id"] for t in tokens]
    return summary["token_ids"], "".join(t["text"] for t in tokens), summary["finish_reason"]


def _serve(stub, **fields):
    """The server's answer to the same request: (token ids, text, finish reason)."""
    call = stub.Generate(pb.GenerateRequest(prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0.0,
                                            **fields), timeout=STREAM_S)
    stream = collect(call)
    return stream.ids, stream.text, REASONS[stream.finish_reason]


@pytest.fixture(scope="module")
def full(tpserve_bin, smollm_gguf):
    """The greedy continuation without stop conditions."""
    ids, text, reason = _generate(tpserve_bin, smollm_gguf)
    assert reason == "length" and len(ids) == MAX_TOKENS, (reason, text)
    return ids, text


def test_without_stop_generate_is_the_server(tpserve_bin, smollm_gguf, stub, full):
    assert _serve(stub) == (*full, "length")


# Each picked from the greedy text by a rule, so that it occurs: a word spanning two tokens'
# worth of text, a prefix of a token (the stop ends inside it), and a later word.
def _two_words(text):
    words = text.split()
    return f"{words[2]} {words[3]}"


def _inside_a_token(text):
    return text.split()[0][:3]


def _later_word(text):
    return text.split()[-4]


@pytest.mark.parametrize("pick", [_two_words, _inside_a_token, _later_word])
def test_stop_string_ends_like_the_server(tpserve_bin, smollm_gguf, stub, full, pick):
    _, full_text = full
    stop = pick(full_text)
    assert stop in full_text and "," not in stop, stop
    got = _generate(tpserve_bin, smollm_gguf, f"--stop={stop}")
    want = _serve(stub, stop=[stop])
    assert got == want
    ids, text, reason = got
    assert reason == "stop"
    assert text == full_text[:full_text.index(stop)]
    assert len(ids) < MAX_TOKENS


def test_stop_lists_add_up_and_split_at_commas(tpserve_bin, smollm_gguf, stub, full):
    _, full_text = full
    first, second = _later_word(full_text), _two_words(full_text)
    want = _serve(stub, stop=["zzzz", first, second])
    assert want[2] == "stop"
    assert _generate(tpserve_bin, smollm_gguf, f"--stop=zzzz,{first}", "--stop", second) == want
    assert _generate(tpserve_bin, smollm_gguf, f"--stop=zzzz,{first},{second}") == want


def test_stop_token_id_ends_like_the_server(tpserve_bin, smollm_gguf, stub, full):
    full_ids, _ = full
    stop_id = full_ids[5]
    got = _generate(tpserve_bin, smollm_gguf, f"--stop_token_ids={stop_id}")
    assert got == _serve(stub, stop_token_ids=[stop_id])
    assert got[2] == "stop" and got[0] == full_ids[:full_ids.index(stop_id) + 1]


def test_text_mode_prints_the_same_text(tpserve_bin, smollm_gguf, full):
    _, full_text = full
    stop = _two_words(full_text)
    out = subprocess.run([str(tpserve_bin), "generate", f"--model={smollm_gguf}", "--threads=1",
                          "--temperature=0", f"--max_tokens={MAX_TOKENS}", f"--prompt={PROMPT}",
                          f"--stop={stop}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == full_text[:full_text.index(stop)] + "\n"


def test_bad_stop_is_refused_as_by_the_server(tpserve_bin, smollm_gguf, stub):
    out = subprocess.run([str(tpserve_bin), "generate", f"--model={smollm_gguf}", "--prompt=hi",
                          "--stop=a,b,c,d,e"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    with pytest.raises(grpc.RpcError) as refused:
        collect(stub.Generate(pb.GenerateRequest(prompt="hi", max_tokens=4,
                                                 stop=list("abcde")), timeout=STREAM_S))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() in out.stderr, out.stderr


def test_typical_p_sampling_is_the_same_in_generate_and_the_server(tpserve_bin, smollm_gguf, stub):
    """typical_p (the sampling option added end to end as the codec's demonstration) reaches
    the sampler on both paths: seeded draws agree token for token, and differ from the same
    seed without it."""
    sampled = ["--temperature=1.0", "--seed=7"]
    ids, text, reason = _generate(tpserve_bin, smollm_gguf, *sampled, "--typical_p=0.3")
    call = stub.Generate(pb.GenerateRequest(prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=1.0,
                                            seed=7, typical_p=0.3), timeout=STREAM_S)
    stream = collect(call)
    assert (stream.ids, stream.text, REASONS[stream.finish_reason]) == (ids, text, reason)
    plain, _, _ = _generate(tpserve_bin, smollm_gguf, *sampled)
    assert plain != ids
