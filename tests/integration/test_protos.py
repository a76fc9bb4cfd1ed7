"""The public and worker protos: the names clients rely on, and a comment on every field."""
import pathlib
import re

from google.protobuf import descriptor_pb2
from tpserve.v1 import generate_pb2, worker_pb2

PROTO_DIR = pathlib.Path(__file__).resolve().parents[2] / "proto" / "tpserve" / "v1"


def test_generation_service_methods():
    svc = generate_pb2.DESCRIPTOR.services_by_name["Generation"]
    methods = {m.name: m for m in svc.methods}
    assert {"Generate", "Tokenize", "Detokenize", "GetModelInfo"} <= set(methods)
    gen = methods["Generate"]
    assert gen.input_type.full_name == "tpserve.v1.GenerateRequest"
    assert gen.output_type.full_name == "tpserve.v1.GenerateResponse"
    assert gen.server_streaming and not gen.client_streaming
    assert methods["Tokenize"].output_type.name == "TokenizeResponse"
    assert methods["GetModelInfo"].output_type.name == "ModelInfo"


def test_generate_request_fields_and_presence():
    fields = generate_pb2.GenerateRequest.DESCRIPTOR.fields_by_name
    expected = ["prompt", "messages", "prompt_token_ids", "max_tokens", "temperature", "top_k",
                "top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty",
                "seed", "stop", "stop_token_ids", "ignore_eos", "logprobs", "request_id"]
    assert set(expected) <= set(fields)
    optional = ["temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                "frequency_penalty", "presence_penalty", "seed"]
    for name in optional:
        assert fields[name].has_presence, name
    req = generate_pb2.GenerateRequest()
    assert not req.HasField("temperature")
    req.temperature = 0.0
    assert req.HasField("temperature")  # 0 (greedy) is distinguishable from unset (1.0)


def test_generate_response_and_finish_reasons():
    fields = generate_pb2.GenerateResponse.DESCRIPTOR.fields_by_name
    assert {"text", "token_ids", "logprobs", "finish_reason", "usage"} <= set(fields)
    names = set(generate_pb2.FinishReason.keys())
    assert {"FINISH_REASON_LENGTH", "FINISH_REASON_STOP", "FINISH_REASON_EOS",
            "FINISH_REASON_CANCELLED"} <= names
    usage = generate_pb2.Usage.DESCRIPTOR.fields_by_name
    assert {"prompt_tokens", "completion_tokens"} <= set(usage)
    msg = generate_pb2.ChatMessage.DESCRIPTOR.fields_by_name
    assert {"role", "content"} <= set(msg)


def test_worker_protocol_messages():
    svc = worker_pb2.DESCRIPTOR.services_by_name["Worker"]
    session = svc.methods_by_name["Session"]
    assert session.client_streaming and session.server_streaming
    coord = worker_pb2.CoordinatorMessage.DESCRIPTOR.oneofs_by_name["kind"]
    assert {f.name for f in coord.fields} == {"init", "store_reply", "step", "shutdown",
                                               "step_masks"}
    work = worker_pb2.WorkerMessage.DESCRIPTOR.oneofs_by_name["kind"]
    assert {f.name for f in work.fields} == {"store_request", "ready", "step_result", "error",
                                             "heartbeat"}
    init = worker_pb2.Init.DESCRIPTOR.fields_by_name
    assert {"model_path", "rank", "world_size", "backend", "kv_budget_bytes",
            "world_generation"} <= set(init)



def test_removed_worker_fields_stay_reserved():
    """Numbers and names of deleted fields are reserved, so that no later field reuses them."""
    removed = [(worker_pb2.Init, 5, "dtype"), (worker_pb2.Step, 3, "freed_blocks"),
               (worker_pb2.CoordinatorMessage, 3, "nccl_id"),
               (worker_pb2.WorkerMessage, 2, "nccl_id"),
               (worker_pb2.StepSequence, 9, "allowed_tokens")]
    for message, number, name in removed:
        proto = descriptor_pb2.DescriptorProto()
        message.DESCRIPTOR.CopyToProto(proto)
        assert name not in message.DESCRIPTOR.fields_by_name
        assert name in proto.reserved_name, (proto.name, name)
        assert any(r.start <= number < r.end for r in proto.reserved_range), (proto.name, number)
    assert "DType" not in worker_pb2.DESCRIPTOR.enum_types_by_name
    assert "NcclUniqueId" not in worker_pb2.DESCRIPTOR.message_types_by_name


FIELD = re.compile(r"^\s*(optional |repeated )?[\w.]+ \w+ = \d+;")
ENUM_VALUE = re.compile(r"^\s*[A-Z0-9_]+ = \d+;")


def test_every_field_and_enum_value_has_a_comment():
    missing = []
    checked = 0
    for proto in sorted(PROTO_DIR.glob("*.proto")):
        lines = proto.read_text().splitlines()
        for i, line in enumerate(lines):
            if FIELD.match(line) or ENUM_VALUE.match(line):
                checked += 1
                prev = lines[i - 1].strip() if i else ""
                if not prev.startswith("//"):
                    missing.append(f"{proto.name}:{i + 1}: {line.strip()}")
    assert checked > 100, f"only {checked} fields and enum values found: the pattern is off"
    assert not missing, "fields without a comment:\n" + "\n".join(missing)
