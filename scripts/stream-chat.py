#!/usr/bin/env python3
"""Streams one chat answer from a running tpserve: waits (bounded) for the server's health
to turn SERVING, sends the question as a chat message, prints the text as it arrives, then
the finish reason and token counts. A small stand-in until the command-line client exists.

usage: stream-chat.py [--server HOST:PORT] [--max-tokens N] [--wait S] QUESTION"""
import argparse
import pathlib
import subprocess
import sys
import time

import grpc

ROOT = pathlib.Path(__file__).resolve().parents[1]
GEN = ROOT / ".cache" / "pygen"


def stubs():
    """Compiles proto/ into .cache/pygen (each run: cheap) and imports the public API."""
    GEN.mkdir(parents=True, exist_ok=True)
    protos = [str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto")]
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'proto'}",
                    f"--python_out={GEN}", f"--grpc_python_out={GEN}", *protos], check=True)
    for d in (GEN / "tpserve", GEN / "tpserve" / "v1"):
        (d / "__init__.py").touch()
    sys.path.insert(0, str(GEN))
    from tpserve.v1 import generate_pb2, generate_pb2_grpc  # noqa: E402
    return generate_pb2, generate_pb2_grpc


def wait_serving(channel, seconds):
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check(b"", timeout=2.0) == b"\x08\x01":  # HealthCheckResponse{status: SERVING}
                return
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    sys.exit(f"stream-chat: the server was not SERVING within {seconds} s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("question")
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--wait", type=float, default=120.0)
    args = parser.parse_args()
    pb, rpc = stubs()
    with grpc.insecure_channel(args.server) as channel:
        wait_serving(channel, args.wait)
        stub = rpc.GenerationStub(channel)
        request = pb.GenerateRequest(messages=[pb.ChatMessage(role="user", content=args.question)],
                                     max_tokens=args.max_tokens, temperature=0)
        print(f"user> {args.question}\nassistant> ", end="", flush=True)
        start = time.monotonic()
        try:
            for message in stub.Generate(request, timeout=300):
                print(message.text, end="", flush=True)
                if message.finish_reason:
                    reason = pb.FinishReason.Name(message.finish_reason)
                    print(f"\n[{reason}: {message.usage.prompt_tokens} prompt tokens, "
                          f"{message.usage.completion_tokens} generated in "
                          f"{time.monotonic() - start:.2f} s]")
        except grpc.RpcError as e:
            sys.exit(f"\nstream-chat: {e.code().name}: {e.details()}")


if __name__ == "__main__":
    main()
