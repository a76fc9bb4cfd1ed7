"""Speculative decoding (`serve --speculative ngram`, and `draft` with a draft model made of
SmolLM2's first blocks by scripts/requantize.py --layers) end to end on SmolLM2: every request gets
exactly the token ids (and log-probabilities) it gets without speculation — greedy, and seeded
at temperature 0.8 with top-p; with stop strings and logprobs; alone and sixteen at once; at
TP=1, 2 and 3; in a KV cache so tight that requests are preempted and recomputed; across a
worker killed mid-stream; and a resumed stream continues exactly. Input-grounded prompts get
proposals accepted (usage and metrics say so), every KV block is free once idle (rollback
leaks none), and bad flags are refused at start: a draft model that is missing, does not load
or has another vocabulary among them. Every call has a deadline; servers are stopped in
finalizers."""
import concurrent.futures
import json
import os
import pathlib
import signal
import subprocess
import sys

import grpc
import pytest

import serve_procs
from serve_procs import collect, start_with_metrics
from tpserve.v1 import generate_pb2 as pb
from tpserve.v1 import generate_pb2_grpc as pb_grpc

CALL_S = 180
DRAFT_LAYERS = 6  # of SmolLM2's 30 blocks
PROMPTS = json.loads((pathlib.Path(__file__).parent / "data" /
                      "speculative_prompts.json").read_text())


def _generate(server, req):
    with grpc.insecure_channel(server.address) as ch:
        return collect(pb_grpc.GenerationStub(ch).Generate(req, timeout=CALL_S))


def _concurrently(server, reqs):
    with concurrent.futures.ThreadPoolExecutor(len(reqs)) as pool:
        return list(pool.map(lambda r: _generate(server, r), reqs))


def _info(server):
    with grpc.insecure_channel(server.address) as ch:
        return pb_grpc.GenerationStub(ch).GetModelInfo(pb.GetModelInfoRequest(), timeout=60)


def _request(prompt, seeded, max_tokens=48, **fields):
    sampling = dict(temperature=0.8, top_p=0.9, seed=17) if seeded else dict(temperature=0.0)
    return pb.GenerateRequest(messages=[pb.ChatMessage(role="user", content=prompt)],
                              max_tokens=max_tokens, **sampling, **fields)


def _requests():
    """Grounded and open-ended prompts, greedy and seeded; some with logprobs or a stop."""
    reqs = []
    for i, prompt in enumerate(PROMPTS["grounded"] + PROMPTS["open"]):
        extra = {}
        if i % 3 == 1:
            extra["logprobs"] = 2
        if i % 4 == 2:
            extra["stop"] = [", and", "\n\n"]
        reqs.append(_request(prompt, seeded=i % 2 == 1, **extra))
    return reqs


def _same(a, b):
    assert a.ids == b.ids, (a.text, b.text)
    assert a.finish_reason == b.finish_reason
    assert a.text == b.text
    la = [(t.chosen.token_id, t.chosen.logprob) for m in a.messages for t in m.logprobs]
    lb = [(t.chosen.token_id, t.chosen.logprob) for m in b.messages for t in m.logprobs]
    assert la == lb


@pytest.fixture(scope="module")
def plain(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    return start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf, "spec_off")


@pytest.fixture(scope="module")
def spec(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    return start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf, "spec_ngram",
                              speculative="ngram", num_speculative_tokens=4)


@pytest.fixture(scope="module")
def draft_gguf(tmp_path_factory, repo_root, smollm_gguf):
    out = tmp_path_factory.mktemp("draft") / f"smollm2-{DRAFT_LAYERS}-layers.gguf"
    subprocess.run([sys.executable, str(repo_root / "scripts" / "requantize.py"), str(smollm_gguf),
                    str(out), "--type", "Q4_1", "--layers", str(DRAFT_LAYERS)],
                   check=True, timeout=600)
    return out


@pytest.fixture(scope="module")
def reference(plain):
    """Each request alone on the server without speculation."""
    return [_generate(plain, r) for r in _requests()]


def test_tokens_are_those_of_plain_decoding_alone_and_in_a_batch(spec, reference):
    reqs = _requests()
    alone = [_generate(spec, r) for r in reqs]
    for a, b in zip(reference, alone):
        _same(a, b)
    grounded = alone[:len(PROMPTS["grounded"])]
    assert sum(r.usage.speculative_accepted_tokens for r in grounded) > 0, "nothing accepted"
    for r in alone:
        assert r.usage.speculative_accepted_tokens <= r.usage.speculative_proposed_tokens
        assert r.usage.speculative_accepted_tokens < r.usage.completion_tokens or \
            r.usage.completion_tokens == 0
    batch = (reqs + reqs)[:16]  # sixteen at once: speculating and plain sequences in steps
    for a, b in zip(reference + reference, _concurrently(spec, batch)):
        _same(a, b)
    info = _info(spec)
    assert info.kv_blocks_free == info.kv_blocks_total, "a rolled-back position kept its block"
    drafted = serve_procs.metric(spec, "tpserve_spec_draft_tokens_total")
    accepted = serve_procs.metric(spec, "tpserve_spec_accepted_tokens_total")
    assert drafted >= accepted > 0
    assert serve_procs.metric(spec, "tpserve_spec_accepted_by_position_total") == accepted


def test_structured_output_masks_bind_every_verified_position(plain, spec):
    """Under a JSON schema, a regex and json_object, proposals the grammar refuses are cut and
    each verified position is drawn under its own mask: the tokens are those of plain decoding,
    greedy and seeded, alone and together, and grounded JSON gets proposals accepted."""
    schema = json.dumps({"type": "object", "properties": {
        "name": {"type": "string"}, "born": {"type": "integer"}, "field": {"type": "string"},
        "known_for": {"type": "string"}}, "required": ["name", "born"]})
    grounded = PROMPTS["grounded"][5]  # rewrite a JSON object
    reqs = [_request(grounded, seeded=False, max_tokens=64,
                     structured_output=pb.StructuredOutput(json_schema=schema)),
            _request(grounded, seeded=True, max_tokens=64, logprobs=2,
                     structured_output=pb.StructuredOutput(json_object=True)),
            _request(PROMPTS["grounded"][4], seeded=False, max_tokens=48,
                     structured_output=pb.StructuredOutput(regex=r"[A-Za-z]+(, [a-z]+)*\.?")),
            _request(PROMPTS["open"][1], seeded=True, max_tokens=32,
                     structured_output=pb.StructuredOutput(json_schema=schema))]
    want = [_generate(plain, r) for r in reqs]
    alone = [_generate(spec, r) for r in reqs]
    for a, b in zip(want, alone):
        _same(a, b)
    assert json.loads(alone[0].text)["born"] == 1815, alone[0].text
    assert alone[0].usage.speculative_accepted_tokens > 0, "no proposal kept under the schema"
    for a, b in zip(want + want, _concurrently(spec, reqs + reqs)):
        _same(a, b)
    info = _info(spec)
    assert info.kv_blocks_free == info.kv_blocks_total


def test_a_draft_model_keeps_the_tokens_alone_and_in_a_batch(request, tmp_path_factory,
                                                             tpserve_bin, smollm_gguf, reference):
    # SmolLM2 as its own draft: its greedy proposals are accepted where the target's draw is
    # greedy too, and rejected where it is seeded (a first-blocks draft is rarely right).
    draft = start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf, "spec_draft",
                               speculative="draft", draft_model=smollm_gguf)
    reqs = _requests()
    alone = [_generate(draft, r) for r in reqs]
    for a, b in zip(reference, alone):
        _same(a, b)
    for r in alone:
        assert r.usage.speculative_accepted_tokens <= r.usage.speculative_proposed_tokens
    assert sum(r.usage.speculative_accepted_tokens for r in alone) > 0, "nothing accepted"
    for a, b in zip(reference[:8], _concurrently(draft, reqs[:8])):
        _same(a, b)
    info = _info(draft)
    assert info.kv_blocks_free == info.kv_blocks_total
    assert serve_procs.metric(draft, "tpserve_spec_draft_tokens_total") >= \
        serve_procs.metric(draft, "tpserve_spec_accepted_tokens_total") > 0
    assert "draft model" in draft.log_tail(1 << 20)
    assert serve_procs.stop(draft, timeout_s=60) == 0, draft.log_tail()


def test_a_resumed_stream_continues_exactly(spec, reference):
    req = _requests()[1]  # grounded and seeded, with logprobs
    whole = reference[1]
    assert len(whole.ids) > 6
    resumed = pb.GenerateRequest()
    resumed.CopyFrom(req)
    resumed.resume.token_ids.extend(whole.ids[:5])
    assert whole.ids[:5] + _generate(spec, resumed).ids == whole.ids


@pytest.mark.parametrize("tp", [1, 3])
def test_other_world_sizes_keep_the_tokens(request, tmp_path_factory, tpserve_bin, smollm_gguf,
                                           tp):
    reqs = [_request(PROMPTS["grounded"][0], seeded=False, max_tokens=32),
            _request(PROMPTS["grounded"][2], seeded=True, max_tokens=32, logprobs=1),
            _request(PROMPTS["open"][0], seeded=True, max_tokens=32)]
    off = start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf,
                             f"spec_off_tp{tp}", tp=tp)
    want = [_generate(off, r) for r in reqs]
    assert serve_procs.stop(off, timeout_s=60) == 0, off.log_tail()
    modes = [dict(speculative="ngram")]
    if tp == 3:  # the draft model runs beside any world: here one of three ranks
        modes.append(dict(speculative="draft", draft_model=request.getfixturevalue("draft_gguf")))
    for flags in modes:
        on = start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf,
                                f"spec_{flags['speculative']}_tp{tp}", tp=tp, **flags)
        for a, b in zip(want, _concurrently(on, reqs)):
            _same(a, b)
        counted = "accepted" if flags["speculative"] == "ngram" else "draft"  # see above
        assert serve_procs.metric(on, f"tpserve_spec_{counted}_tokens_total") > 0
        assert serve_procs.stop(on, timeout_s=60) == 0, on.log_tail()


def test_preempted_requests_keep_the_tokens(request, tmp_path_factory, tpserve_bin, smollm_gguf,
                                            reference):
    tight = start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf, "spec_tight",
                               speculative="ngram", kv_budget_mb=6, max_batch_tokens=24,
                               max_running=16)
    reqs = _requests()[:8]
    for a, b in zip(reference, _concurrently(tight, reqs)):
        _same(a, b)
    assert serve_procs.metric(tight, "tpserve_preemptions_total") > 0, "the KV cache never ran out"
    assert serve_procs.metric(tight, "tpserve_spec_accepted_tokens_total") > 0
    info = _info(tight)
    assert info.kv_blocks_free == info.kv_blocks_total
    assert serve_procs.stop(tight, timeout_s=60) == 0, tight.log_tail()


def test_a_killed_worker_loses_no_token(request, tmp_path_factory, tpserve_bin, smollm_gguf,
                                        plain):
    victim = start_with_metrics(request, tmp_path_factory, tpserve_bin, smollm_gguf, "spec_kill",
                                speculative="ngram")
    reqs = [_request(p, seeded=i % 2 == 1, max_tokens=64)
            for i, p in enumerate(PROMPTS["grounded"][:3])]
    want = [_generate(plain, r) for r in reqs]
    with grpc.insecure_channel(victim.address) as ch:
        stub = pb_grpc.GenerationStub(ch)
        calls = [stub.Generate(r, timeout=CALL_S) for r in reqs]
        heads = [next(c) for c in calls]  # every stream is running
        os.kill(victim.workers[1][0], signal.SIGKILL)
        got = [list(h.token_ids) + [t for m in c for t in m.token_ids]
               for c, h in zip(calls, heads)]
    assert got == [w.ids for w in want]
    assert "recomputing" in victim.log_tail(1 << 20)
    assert serve_procs.stop(victim, timeout_s=60) == 0, victim.log_tail()


@pytest.mark.parametrize("flags,says", [
    (["--speculative=ngram", "--num_speculative_tokens=0"], "--num_speculative_tokens: 0"),
    (["--speculative=ngram", "--num_speculative_tokens=17"], "is outside [1, 16]"),
    (["--speculative=sometimes"], "--speculative: 'sometimes' is not one of off, ngram, draft"),
    (["--speculative=draft"], "--draft_model: --speculative draft needs a draft model"),
    (["--speculative=ngram", "--draft_model=x.gguf"], "--draft_model: given without"),
])
def test_bad_flags_are_refused_at_start(tpserve_bin, smollm_gguf, flags, says):
    done = subprocess.run([tpserve_bin, "serve", f"--model={smollm_gguf}", "--port=0"] + flags,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert says in done.stderr, done.stderr[-2000:]


def _tiny_gguf(repo_root, out):
    subprocess.run([sys.executable, str(repo_root / "scripts" / "make-tiny-model.py"),
                    "--out", str(out), "--name", "tiny", "--d-model", "64", "--heads", "4",
                    "--kv-heads", "2", "--ffn", "96", "--vocab", "300"], check=True, timeout=120)
    return out / "tiny.gguf"


@pytest.mark.parametrize("draft,says", [
    ("missing", "--draft_model {path}: "),
    ("not_gguf", "--draft_model {path}: "),
    ("other_vocabulary", "--draft_model: its vocabulary has 300 tokens, the target's 49152"),
])
def test_a_draft_model_that_cannot_serve_is_refused_at_start(tpserve_bin, smollm_gguf, repo_root,
                                                            tmp_path, draft, says):
    path = tmp_path / "draft.gguf"
    if draft == "not_gguf":
        path.write_bytes(b"this is not a GGUF file\n" * 64)
    elif draft == "other_vocabulary":
        path = _tiny_gguf(repo_root, tmp_path / "tiny")
    done = subprocess.run([tpserve_bin, "serve", f"--model={smollm_gguf}", "--port=0", "--tp=1",
                           "--speculative=draft", f"--draft_model={path}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert says.format(path=path) in done.stderr, done.stderr[-2000:]
