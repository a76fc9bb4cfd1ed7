"""Structured output and tool calls end to end, on `serve --tp 2` with the real SmolLM2 model:
every schema of tests/schemas/corpus.json through the official `openai` client (chat with
response_format json_schema), greedy and at temperature 1, each finished output valid under
Python's `jsonschema`; json_object; regexes and grammars through gRPC (each output matched by
Python's `re`); bad schemas, regexes and grammars refused with the field and the JSON pointer;
tool calls (`auto`, `required`, a named function, `none`), whole and streamed, and a multi-turn
conversation with a tool's result; a resumed stream that keeps to its grammar; constrained
requests preempted and recomputed in a tight KV cache, and served from the prefix cache, with
the tokens they get alone on a roomy server; other world sizes. Every call has
a timeout; the server is stopped in a finalizer. Budget: a few minutes on two cores."""
import concurrent.futures
import json
import pathlib
import re

import grpc
import jsonschema
import openai
import pytest

import serve_procs
from serve_procs import collect
from worker_procs import free_port
from tpserve.v1 import generate_pb2 as pb
from tpserve.v1 import generate_pb2_grpc as pb_grpc

TP = 2
CALL_S = 180
CORPUS = pathlib.Path(__file__).resolve().parents[1] / "schemas" / "corpus.json"
MAX_TOKENS = 384


@pytest.fixture(scope="module")
def server(request, tmp_path_factory, tpserve_bin, smollm_gguf):
    log = tmp_path_factory.mktemp("structured") / "serve.log"
    srv = serve_procs.start_serving_http(request, tpserve_bin, smollm_gguf, log, tp=TP,
                                         threads=1)
    yield srv
    assert serve_procs.stop(srv, timeout_s=60) == 0, srv.log_tail()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url="http://%s:%d/v1" % server.http, api_key="unused",
                         timeout=CALL_S,
                         max_retries=0)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def _schema_chat(client, model, entry, temperature, seed):
    prompt = (f"Reply with a JSON value for this schema ({entry['name']}): "
              f"{json.dumps(entry['schema'])}")
    got = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS,
        temperature=temperature, seed=seed,
        response_format={"type": "json_schema",
                         "json_schema": {"name": re.sub(r"[^a-zA-Z0-9_-]", "_",
                                                        entry["name"])[:64],
                                         "schema": entry["schema"], "strict": True}})
    return got.choices[0]


def test_every_schema_of_the_corpus_greedy_and_sampled(client, model):
    corpus = json.loads(CORPUS.read_text())
    assert len(corpus) >= 100
    jobs = [(e, t, i) for i, e in enumerate(corpus) for t in (0.0, 1.0)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda j: (j, _schema_chat(client, model, *j)), jobs))
    cut = []
    for (entry, temperature, _), choice in results:
        if choice.finish_reason == "length":
            cut.append((entry["name"], temperature))  # documented: the text may not parse
            continue
        assert choice.finish_reason == "stop", (entry["name"], choice)
        value = json.loads(choice.message.content)
        jsonschema.validate(value, entry["schema"])
    # A small model may ramble inside a string until max_tokens; nearly all must finish.
    assert len(cut) <= len(jobs) // 20, cut


def test_json_object(client, model):
    got = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Give a JSON object with a cat's name and age."}],
        max_tokens=MAX_TOKENS, temperature=0, response_format={"type": "json_object"})
    assert got.choices[0].finish_reason == "stop", got
    assert isinstance(json.loads(got.choices[0].message.content), dict)


def _grpc(server, **fields):
    with grpc.insecure_channel(server.address) as ch:
        return collect(pb_grpc.GenerationStub(ch).Generate(pb.GenerateRequest(**fields),
                                                           timeout=CALL_S))


@pytest.mark.parametrize("regex", [
    r"[0-9]{3}-[0-9]{4}",
    r"(yes|no|maybe)",
    r"[A-Z][a-z]{1,12} [A-Z][a-z]{1,12}",
    r"\d+(\.\d{1,2})?",
    r"(red|green|blue)(, (red|green|blue)){0,3}",
    r"[a-z]{2,8}@[a-z]{3,8}\.(com|org)",
])
def test_regex_through_grpc(server, regex):
    for temperature in (0.0, 1.0):
        res = _grpc(server, prompt="Answer: ", max_tokens=64, temperature=temperature, seed=7,
                    structured_output=pb.StructuredOutput(regex=regex))
        assert res.finish_reason in (pb.FINISH_REASON_STOP, pb.FINISH_REASON_EOS), res
        assert re.fullmatch(regex, res.text), (regex, res.text)


def test_grammar_through_grpc(server):
    grammar = r'''
root ::= "SELECT " cols " FROM " name (" WHERE " name " = " num)? ";"
cols ::= name (", " name)*
name ::= [a-z_]{1,12}
num ::= [0-9]{1,4}
'''
    res = _grpc(server, prompt="Write an SQL query: ", max_tokens=96, temperature=0.8, seed=3,
                structured_output=pb.StructuredOutput(grammar=grammar))
    assert res.finish_reason in (pb.FINISH_REASON_STOP, pb.FINISH_REASON_EOS), res
    assert re.fullmatch(r"SELECT [a-z_]{1,12}(, [a-z_]{1,12})* FROM [a-z_]{1,12}"
                        r"( WHERE [a-z_]{1,12} = [0-9]{1,4})?;", res.text), res.text


def test_a_resumed_stream_keeps_to_its_grammar(server):
    fields = dict(prompt="A date: ", max_tokens=40, temperature=1.0, seed=11,
                  structured_output=pb.StructuredOutput(regex=r"20[0-9]{2}-[01][0-9]-[0-3][0-9]"))
    whole = _grpc(server, **fields)
    assert len(whole.ids) >= 3, whole
    resumed = _grpc(server, **fields, resume=pb.Resume(token_ids=whole.ids[:2]))
    assert whole.ids[:2] + resumed.ids == whole.ids
    with grpc.insecure_channel(server.address) as ch:
        off = pb_grpc.GenerationStub(ch).Tokenize(pb.TokenizeRequest(text="hello"),
                                                  timeout=CALL_S).token_ids
    with pytest.raises(grpc.RpcError) as bad:  # tokens the grammar never allowed
        _grpc(server, **fields, resume=pb.Resume(token_ids=list(off)))
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "structured_output" in bad.value.details()


@pytest.mark.parametrize("field,text,says", [
    ("json_schema", '{"type": "number", "multipleOf": 3}', "/multipleOf"),
    ("json_schema", '{"type": "object", "properties": {"a": {"not": {}}}}', "/properties/a/not"),
    ("json_schema", "{not json", "structured_output.json_schema"),
    ("regex", "(a", "structured_output.regex"),
    ("regex", "a(?=b)", "lookahead"),
    ("grammar", "root ::= root \"a\"", "left-recursive"),
    ("grammar", "root ::= missing", "missing"),
])
def test_bad_constraints_are_refused_by_name(server, field, text, says):
    with pytest.raises(grpc.RpcError) as e:
        _grpc(server, prompt="x", max_tokens=4,
              structured_output=pb.StructuredOutput(**{field: text}))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in e.value.details(), e.value.details()


def test_bad_schema_over_http_names_the_field_and_pointer(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "x"}], max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {
                "name": "n", "schema": {"type": "object", "properties": {
                    "a": {"type": "integer", "multipleOf": 2}}}}})
    body = e.value.body
    assert "response_format.json_schema.schema" in body["message"], body
    assert "/properties/a/multipleOf" in body["message"], body
    assert body["param"] == "response_format.json_schema.schema"


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string",
                                                             "maxLength": 40}},
                   "required": ["zone"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


def _check_call(call, tools):
    spec = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert call.type == "function" and call.id
    assert call.function.name in spec, call
    jsonschema.validate(json.loads(call.function.arguments), spec[call.function.name])


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "get_time"}}])
def test_tool_calls_forced_whole_and_streamed(client, model, choice):
    tools = [WEATHER, TIME]
    # One call each (a small model given room for more keeps calling until max_tokens).
    got = client.chat.completions.create(model=model, messages=ASK, tools=tools,
                                         tool_choice=choice, max_tokens=200, temperature=0,
                                         parallel_tool_calls=False)
    c = got.choices[0]
    assert c.finish_reason == "tool_calls", c
    assert len(c.message.tool_calls) == 1
    assert c.message.content is None and c.message.tool_calls
    for call in c.message.tool_calls:
        _check_call(call, tools)
        if isinstance(choice, dict):
            assert call.function.name == "get_time"
    stream = client.chat.completions.create(model=model, messages=ASK, tools=tools,
                                            tool_choice=choice, max_tokens=200, temperature=0,
                                            parallel_tool_calls=False, stream=True)
    calls, finish = {}, None
    for chunk in stream:
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"id": d.id, "name": "", "arguments": ""})
                entry["name"] += d.function.name or ""
                entry["arguments"] += d.function.arguments or ""
            finish = ch.finish_reason or finish
    assert finish == "tool_calls"
    assert [(v["name"], v["arguments"]) for _, v in sorted(calls.items())] == \
        [(t.function.name, t.function.arguments) for t in c.message.tool_calls]


def test_parallel_tool_calls_each_keep_to_their_schema(client, model):
    tools = [WEATHER, TIME]
    got = client.chat.completions.create(
        model=model, tools=tools, tool_choice="required", max_tokens=120, temperature=0,
        messages=[{"role": "user", "content": "The weather in Paris and the time in Tokyo?"}])
    c = got.choices[0]
    if c.finish_reason == "length":  # more calls were coming: the text so far is calls
        assert c.message.content.startswith('<tool_call>{"name": "'), c
        done = c.message.content.rsplit("</tool_call>", 1)[0]
        assert done.count("<tool_call>") >= 2, c
        for call in done.split("</tool_call>"):
            body = json.loads(call.strip().removeprefix("<tool_call>"))
            jsonschema.validate(body["arguments"], {t["function"]["name"]: t["function"][
                "parameters"] for t in tools}[body["name"]])
    else:
        assert c.finish_reason == "tool_calls", c
        for call in c.message.tool_calls:
            _check_call(call, tools)


def test_tool_choice_auto_and_none(client, model):
    got = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER],
                                         tool_choice="auto", max_tokens=200, temperature=0)
    c = got.choices[0]
    if c.message.tool_calls:
        assert c.finish_reason == "tool_calls"
        for call in c.message.tool_calls:
            _check_call(call, [WEATHER])
    else:
        assert c.message.content and not c.message.content.lstrip().startswith("<")
    none = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER],
                                          tool_choice="none", max_tokens=30, temperature=0)
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].finish_reason in ("stop", "length")


def test_a_conversation_with_a_tool_result(client, model):
    first = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER],
                                           tool_choice="required", max_tokens=200,
                                           parallel_tool_calls=False,
                                           temperature=0).choices[0].message
    assert first.tool_calls
    messages = ASK + [
        {"role": "assistant", "content": None,
         "tool_calls": [c.model_dump() for c in first.tool_calls]},
        {"role": "tool", "tool_call_id": first.tool_calls[0].id,
         "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    answer = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER],
                                            tool_choice="none", max_tokens=60, temperature=0)
    assert answer.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model, max_tokens=4, tools=[WEATHER],
            messages=ASK + [{"role": "tool", "tool_call_id": "call_unknown", "content": "1"}])
    assert "tool_call_id" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER],
                                       tool_choice={"type": "function",
                                                    "function": {"name": "nope"}},
                                       max_tokens=4)
    assert e.value.body["param"] == "tool_choice.function.name"


@pytest.mark.parametrize("tp", [1, 3])
def test_other_world_sizes_keep_to_the_grammar(request, tmp_path_factory, tpserve_bin,
                                               smollm_gguf, tp):
    log = tmp_path_factory.mktemp(f"structured_tp{tp}") / "serve.log"
    srv = serve_procs.start_serving_http(request, tpserve_bin, smollm_gguf, log, tp=tp,
                                         threads=1)
    entry = {"name": "person", "schema": {
        "type": "object", "additionalProperties": False, "required": ["name", "age"],
        "properties": {"name": {"type": "string", "maxLength": 20},
                       "age": {"type": "integer", "minimum": 0, "maximum": 120}}}}
    c = openai.OpenAI(base_url="http://%s:%d/v1" % srv.http, api_key="unused", timeout=CALL_S,
                      max_retries=0)
    for temperature in (0.0, 1.0):
        choice = _schema_chat(c, c.models.list().data[0].id, entry, temperature, 11)
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), entry["schema"])
    regex = r"[a-z]{2,8}@[a-z]{3,8}\.(com|org)"
    res = _grpc(srv, prompt="Email: ", max_tokens=64, temperature=1.0, seed=5,
                structured_output=pb.StructuredOutput(regex=regex))
    assert res.finish_reason in (pb.FINISH_REASON_STOP, pb.FINISH_REASON_EOS), res
    assert re.fullmatch(regex, res.text), res.text
    assert serve_procs.stop(srv, timeout_s=60) == 0, srv.log_tail()


def test_a_stop_string_ends_a_constrained_output(server):
    res = _grpc(server, prompt="Is the sky blue? Answer: ", max_tokens=48, temperature=0,
                stop=[","], structured_output=pb.StructuredOutput(
                    regex=r"(yes|no), because [a-z ]{1,40}\."))
    assert res.finish_reason == pb.FINISH_REASON_STOP, res
    assert res.text in ("yes", "no"), res.text


def test_preempted_and_prefix_cached_requests_keep_their_grammar_and_tokens(
        request, tmp_path_factory, tpserve_bin, smollm_gguf, server):
    """A KV cache of under 200 tokens and steps of at most 24: eight concurrent constrained
    requests are preempted and recomputed (their grammar state kept), and each gets exactly
    the tokens it gets alone on the roomy server; run twice more, one is served from the
    prefix cache the second time, with the same tokens."""
    log = tmp_path_factory.mktemp("structured_tight") / "serve.log"
    metrics_port = free_port("127.0.0.1")
    tight = serve_procs.start_serving_http(request, tpserve_bin, smollm_gguf, log, tp=TP,
                                           threads=1, kv_budget_mb=3, max_batch_tokens=24,
                                           max_running=16, metrics_port=metrics_port)
    tight.metrics = f"127.0.0.1:{metrics_port}"
    regex = r"([a-z]+ ){4,40}[a-z]+\."
    subjects = ["lighthouses", "kettles", "glaciers", "owls", "violins", "bridges", "tides",
                "lanterns"]
    reqs = [dict(prompt=f"Here are some notes about {s}, written as lowercase words with no "
                        f"punctuation until the end: ", max_tokens=26 + i % 5, temperature=0,
                 structured_output=pb.StructuredOutput(regex=regex))
            for i, s in enumerate(subjects)]
    alone = [_grpc(server, **r) for r in reqs]
    with concurrent.futures.ThreadPoolExecutor(len(reqs)) as pool:
        batched = list(pool.map(lambda r: _grpc(tight, **r), reqs))
    for a, b in zip(alone, batched):
        assert a.ids == b.ids, (a.text, b.text)
        if b.finish_reason == pb.FINISH_REASON_LENGTH:  # ended inside: a prefix of the language
            assert re.fullmatch(r"([a-z]+ )*[a-z]*", b.text), b.text
        else:
            assert re.fullmatch(regex, b.text), b.text
    assert serve_procs.metric(tight, "tpserve_preemptions_total") > 0, "the KV cache never ran out"
    assert _grpc(tight, **reqs[0]).ids == alone[0].ids  # its prefix cached (the batch's evicted)
    hits = serve_procs.metric(tight, "tpserve_prefix_cache_hits_total")
    again = _grpc(tight, **reqs[0])
    assert again.ids == alone[0].ids
    assert serve_procs.metric(tight, "tpserve_prefix_cache_hits_total") > hits, "no prefix was reused"
    assert serve_procs.stop(tight, timeout_s=60) == 0, tight.log_tail()
