"""Hugging Face `tokenizers` encode/decode MB/s on the tokenizer benchmark corpus, the
reference for bench/tokenizer_bench.cc.

    python bench/tokenizer_hf.py [--corpus /tmp/tpserve_tokenizer_corpus.jsonl] [--count N]

Writes the corpus (bench/corpus.py, JSON lines) when missing, builds SmolLM2's tokenizer from
the GGUF metadata exactly as tests/integration/test_tokenizer.py does, and times encode
(single-threaded, one string at a time like the C++ bench) and decode.
"""
import argparse
import json
import os
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpus  # noqa: E402


def smollm_tokenizer(gguf_path):
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    fields = GGUFReader(str(gguf_path)).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"].contents()]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


def best_of(fn, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="/tmp/tpserve_tokenizer_corpus.jsonl")
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--model", default=str(HERE.parent / "models" /
                                               "SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = parser.parse_args()
    if not os.path.exists(args.corpus):
        with open(args.corpus, "w", encoding="utf-8") as f:
            for s in corpus.generate(args.count, seed=1234):
                f.write(json.dumps(s, ensure_ascii=False) + "\n")
    with open(args.corpus, encoding="utf-8") as f:
        texts = [json.loads(line) for line in f]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    tok = smollm_tokenizer(args.model)
    ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    enc = best_of(lambda: [tok.encode(t, add_special_tokens=False) for t in texts])
    enc_batch = best_of(lambda: tok.encode_batch(texts, add_special_tokens=False))
    dec = best_of(lambda: [tok.decode(i, skip_special_tokens=False) for i in ids])
    print(json.dumps({
        "corpus": args.corpus, "strings": len(texts), "megabytes": round(mb, 3),
        "hf_encode_MBps": round(mb / enc, 2),
        "hf_encode_batch_MBps (all cores)": round(mb / enc_batch, 2),
        "hf_decode_MBps": round(mb / dec, 2)}, indent=1))


if __name__ == "__main__":
    main()
