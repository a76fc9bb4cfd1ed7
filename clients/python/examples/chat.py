#!/usr/bin/env python3
"""Streams a chat answer from a tpserve server:

    python clients/python/examples/chat.py --server localhost:50051 "Why is the sky blue?"
"""
import argparse
import sys

from tpserve_client import Client, TpserveError


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", help="what to ask the model")
    parser.add_argument("--server", default="localhost:50051", help="host:port of tpserve")
    parser.add_argument("--system", default="You are a helpful assistant.",
                        help="system message ('' for none)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds")
    args = parser.parse_args()

    messages = ([("system", args.system)] if args.system else []) + [("user", args.question)]
    try:
        with Client(args.server, timeout=args.timeout) as client:
            for delta in client.stream(messages=messages, max_tokens=args.max_tokens,
                                       temperature=args.temperature):
                print(delta.text, end="", flush=True)
                if delta.finish_reason:
                    print(f"\n[{delta.finish_reason}: {delta.usage.prompt_tokens} prompt + "
                          f"{delta.usage.completion_tokens} generated tokens]",
                          file=sys.stderr)
    except TpserveError as e:
        print(f"\nerror: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
