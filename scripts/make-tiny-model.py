#!/usr/bin/env python3
"""make-tiny-model: random-weight Llama-shaped models of any size, as GGUF and/or a Hugging
Face safetensors directory that describe THE SAME model.

  scripts/make-tiny-model.py --out /tmp/tiny --layers 2 --d-model 64 --heads 4 --kv-heads 2 \
      --ffn 128 --weight-type Q4_1 --format both

writes /tmp/tiny/<name>.gguf and /tmp/tiny/hf/ (config.json, model.safetensors or shards with
model.safetensors.index.json, tokenizer.json, tokenizer_config.json).

How the two formats agree:
  * The 2-D matrices are made in the GGUF layout and stored there as --weight-type (F32, F16,
    BF16, Q8_0, Q4_0, Q4_1 through gguf.quants.quantize; Q4_K, Q5_K, Q6_K, which the gguf
    package cannot quantise, as random valid blocks with small f16 scales). The safetensors
    copy holds exactly what those GGUF tensors dequantise to, with Hugging Face names, and the
    Q/K rows un-permuted back to the Hugging Face "rotate-half" order (llama.cpp's converter
    applies permute(w, n_head) to Q/K; we apply its inverse).
  * --st-dtype F32 (default) makes the safetensors values bit-identical to the dequantised
    GGUF values; F16/BF16 round them (exact when --weight-type is the same type). Norm weights
    (F32 in GGUF) are always chosen representable in --st-dtype.
  * config.json carries the f32-rounded rope_theta and rms_norm_eps that GGUF stores.
  * Tokenizer: --tokenizer-from PATH.gguf copies the tokenizer.* metadata of a GGUF model
    (gpt2-style BPE) and writes the equivalent tokenizer.json; otherwise a tiny byte-level BPE
    vocabulary (3 specials, 256 byte tokens, a few merges, ChatML template). --vocab pads the
    vocabulary with unused tokens up to that size.
Weights are normal * 0.02 (norms 1 + normal * 0.02) so forward passes stay finite.
"""
import argparse
import json
import pathlib
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

QUANT_TYPES = {"BF16": QT.BF16, "Q8_0": QT.Q8_0, "Q4_0": QT.Q4_0, "Q4_1": QT.Q4_1}
KQUANT_TYPES = {"Q4_K": QT.Q4_K, "Q5_K": QT.Q5_K, "Q6_K": QT.Q6_K}
WEIGHT_TYPES = ["F32", "F16", *QUANT_TYPES, *KQUANT_TYPES]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
DEFAULT_MERGES = ["h e", "Ġ t", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s"]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def permute(w, n_head):
    """llama.cpp convert_hf_to_gguf permute: HF rotate-half rows -> GGUF interleaved rows."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    """Inverse of permute: GGUF interleaved rows -> HF rotate-half rows."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_bf16_bits(x):
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def round_to(x, st_dtype):
    """The float32 values x would read back as after storing them as st_dtype."""
    if st_dtype == "F16":
        return x.astype(np.float16).astype(np.float32)
    if st_dtype == "BF16":
        return (to_bf16_bits(x).astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32)


def random_kquant_blocks(rng, qtype, n_blocks):
    """Random but valid K-quant blocks: random quants and sub-scales, small f16 super-scales."""
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    b = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    def f16(lo, hi):
        return rng.uniform(lo, hi, size=n_blocks).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    if qtype in (QT.Q4_K, QT.Q5_K):  # d, dmin, scales[12], (qh[32]), qs[128]
        b[:, 0:2] = f16(1e-4, 2e-4)
        b[:, 2:4] = f16(1e-4, 2e-4)
    else:  # Q6_K: ql[128], qh[64], scales[16] (int8), d
        b[:, 192:208] = rng.integers(-16, 17, size=(n_blocks, 16)).astype(np.int8).view(np.uint8)
        b[:, 208:210] = f16(1e-4, 2e-4)
    return b


def make_matrix(rng, rows, cols, wtype):
    """A [rows, cols] weight in GGUF row order -> (payload, raw_dtype or None, dequantised f32)."""
    if wtype in KQUANT_TYPES or wtype in QUANT_TYPES:
        qt = KQUANT_TYPES.get(wtype) or QUANT_TYPES[wtype]
        block = gguf.GGML_QUANT_SIZES[qt][0]
        if cols % block:
            sys.exit(f"make-tiny-model: {wtype} needs every matrix width to be a multiple of "
                     f"{block}, got {cols} (choose --d-model, --ffn, --head-dim accordingly)")
    if wtype in KQUANT_TYPES:
        qt = KQUANT_TYPES[wtype]
        q = random_kquant_blocks(rng, qt, rows * cols // 256).reshape(rows, -1)
        return q, qt, gguf.quants.dequantize(q, qt).reshape(rows, cols).astype(np.float32)
    w = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
    if wtype == "F32":
        return w, None, w
    if wtype == "F16":
        h = w.astype(np.float16)
        return h, None, h.astype(np.float32)
    qt = QUANT_TYPES[wtype]
    q = gguf.quants.quantize(w, qt)
    return q, qt, gguf.quants.dequantize(q, qt).reshape(rows, cols).astype(np.float32)


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def default_tokenizer():
    """Tiny byte-level BPE: 3 specials, the 256 byte tokens, a few merges, ChatML."""
    b2u = bytes_to_unicode()
    tokens = SPECIALS + [b2u[b] for b in range(256)]
    merges = list(DEFAULT_MERGES)
    tokens += ["".join(m.split(" ")) for m in merges]
    types = [gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS))
    return {"model": "gpt2", "pre": "gpt2", "tokens": tokens, "types": [int(t) for t in types],
            "merges": merges, "bos": 1, "eos": 2, "chat_template": CHATML, "extra": {}}


def tokenizer_from_gguf(path):
    """The tokenizer.* metadata of a GGUF file (gpt2-style BPE only)."""
    r = gguf.GGUFReader(path)
    f = {k: v.contents() for k, v in r.fields.items() if k.startswith("tokenizer.")}
    if f.get("tokenizer.ggml.model") != "gpt2":
        sys.exit(f"make-tiny-model: {path}: tokenizer model {f.get('tokenizer.ggml.model')!r} "
                 "is not supported (only gpt2-style byte-level BPE)")
    known = {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
             "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
             "tokenizer.ggml.eos_token_id", "tokenizer.chat_template"}
    extra = {k: (v, r.fields[k].types) for k, v in f.items() if k not in known}
    return {"model": "gpt2", "pre": f.get("tokenizer.ggml.pre", "gpt2"),
            "tokens": list(f["tokenizer.ggml.tokens"]),
            "types": [int(t) for t in f["tokenizer.ggml.token_type"]],
            "merges": list(f.get("tokenizer.ggml.merges", [])),
            "bos": int(f.get("tokenizer.ggml.bos_token_id", -1)),
            "eos": int(f.get("tokenizer.ggml.eos_token_id", -1)),
            "chat_template": f.get("tokenizer.chat_template", CHATML), "extra": extra}


def pad_vocab(tok, vocab):
    n = len(tok["tokens"])
    if vocab is None:
        return
    if vocab < n:
        sys.exit(f"make-tiny-model: --vocab {vocab} is smaller than the tokenizer's {n} tokens")
    tok["tokens"] += [f"<|unused_{i}|>" for i in range(vocab - n)]
    tok["types"] += [int(gguf.TokenType.UNUSED)] * (vocab - n)


def hf_pre_tokenizer(pre):
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    if pre == "smollm":
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]}
    if pre == "llama-bpe":
        regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                 r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            dict(byte_level, use_regex=False)]}
    return byte_level


def write_hf_tokenizer(out, tok, context):
    control = {int(gguf.TokenType.CONTROL), int(gguf.TokenType.USER_DEFINED)}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": tok["types"][i] == int(gguf.TokenType.CONTROL)}
             for i, t in enumerate(tok["tokens"]) if tok["types"][i] in control]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": None, "pre_tokenizer": hf_pre_tokenizer(tok["pre"]),
          "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                             "use_regex": False},
          "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                      "use_regex": False},
          "model": {"type": "BPE", "dropout": None, "unk_token": None,
                    "continuing_subword_prefix": None, "end_of_word_suffix": None,
                    "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": {t: i for i, t in enumerate(tok["tokens"])},
                    "merges": tok["merges"]}}
    (out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")
    name = lambda i: tok["tokens"][i] if 0 <= i < len(tok["tokens"]) else None  # noqa: E731
    cfg = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": context,
           "bos_token": name(tok["bos"]), "eos_token": name(tok["eos"]),
           "chat_template": tok["chat_template"], "clean_up_tokenization_spaces": False,
           "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"}
                                    for a in added}}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=1),
                                               encoding="utf-8")


def write_safetensors(path, tensors, st_dtype):
    """tensors: list of (name, float32 array) -> one .safetensors file (data contiguous)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors:
        if st_dtype == "F32":
            raw = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        elif st_dtype == "F16":
            raw = np.ascontiguousarray(arr.astype("<f2")).tobytes()
        else:
            raw = to_bf16_bits(arr).astype("<u2").tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def build(args):
    rng = np.random.default_rng(args.seed)
    head_dim = args.head_dim or args.d_model // args.heads
    if args.heads % args.kv_heads or head_dim % 2:
        sys.exit("make-tiny-model: --heads must be a multiple of --kv-heads and head_dim even")
    tok = tokenizer_from_gguf(args.tokenizer_from) if args.tokenizer_from else default_tokenizer()
    pad_vocab(tok, args.vocab)
    vocab = len(tok["tokens"])
    eps = float(np.float32(args.norm_eps))
    theta = float(np.float32(args.rope_theta))

    # canonical name -> (payload, raw_dtype, dequantised GGUF-order f32, HF name, HF values)
    tensors = []

    def matrix(name, hf, rows, cols, n_perm=0):
        payload, raw, deq = make_matrix(rng, rows, cols, args.weight_type)
        hf_vals = unpermute(deq, n_perm) if n_perm else deq
        tensors.append((name, payload, raw, hf, round_to(hf_vals, args.st_dtype)))

    def norm(name, hf, n):
        v = round_to((1.0 + rng.standard_normal(n) * 0.02).astype(np.float32), args.st_dtype)
        tensors.append((name, v, None, hf, v))

    matrix("token_embd.weight", "model.embed_tokens.weight", vocab, args.d_model)
    for i in range(args.layers):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        norm(b + "attn_norm.weight", p + "input_layernorm.weight", args.d_model)
        matrix(b + "attn_q.weight", p + "self_attn.q_proj.weight", args.heads * head_dim,
               args.d_model, args.heads)
        matrix(b + "attn_k.weight", p + "self_attn.k_proj.weight", args.kv_heads * head_dim,
               args.d_model, args.kv_heads)
        matrix(b + "attn_v.weight", p + "self_attn.v_proj.weight", args.kv_heads * head_dim,
               args.d_model)
        matrix(b + "attn_output.weight", p + "self_attn.o_proj.weight", args.d_model,
               args.heads * head_dim)
        norm(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", args.d_model)
        matrix(b + "ffn_gate.weight", p + "mlp.gate_proj.weight", args.ffn, args.d_model)
        matrix(b + "ffn_up.weight", p + "mlp.up_proj.weight", args.ffn, args.d_model)
        matrix(b + "ffn_down.weight", p + "mlp.down_proj.weight", args.d_model, args.ffn)
    norm("output_norm.weight", "model.norm.weight", args.d_model)
    if not args.tied:
        matrix("output.weight", "lm_head.weight", vocab, args.d_model)

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.format in ("gguf", "both"):
        w = gguf.GGUFWriter(str(out / f"{args.name}.gguf"), "llama")
        w.add_name(args.name)
        w.add_block_count(args.layers)
        w.add_context_length(args.context)
        w.add_embedding_length(args.d_model)
        w.add_feed_forward_length(args.ffn)
        w.add_head_count(args.heads)
        w.add_head_count_kv(args.kv_heads)
        w.add_rope_freq_base(theta)
        w.add_layer_norm_rms_eps(eps)
        w.add_rope_dimension_count(head_dim)
        if head_dim * args.heads != args.d_model:
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)
        w.add_vocab_size(vocab)
        w.add_tokenizer_model(tok["model"])
        w.add_tokenizer_pre(tok["pre"])
        w.add_token_list(tok["tokens"])
        w.add_token_types(tok["types"])
        w.add_token_merges(tok["merges"])
        if tok["bos"] >= 0:
            w.add_bos_token_id(tok["bos"])
        if tok["eos"] >= 0:
            w.add_eos_token_id(tok["eos"])
        w.add_chat_template(tok["chat_template"])
        for key, (value, types) in tok["extra"].items():
            w.add_key_value(key, value, types[0], types[-1] if len(types) > 1 else None)
        for name, payload, raw, _, _ in tensors:
            w.add_tensor(name, payload, raw_dtype=raw)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    if args.format in ("safetensors", "both"):
        hf_dir = out / "hf"
        hf_dir.mkdir(exist_ok=True)
        st = [(hf, vals) for _, _, _, hf, vals in tensors]
        if args.st_shards <= 1:
            write_safetensors(hf_dir / "model.safetensors", st, args.st_dtype)
        else:
            n = args.st_shards
            weight_map = {}
            for s in range(n):
                fname = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
                part = st[s::n]
                write_safetensors(hf_dir / fname, part, args.st_dtype)
                weight_map.update({name: fname for name, _ in part})
            (hf_dir / "model.safetensors.index.json").write_text(
                json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
        config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                  "_name_or_path": args.name, "vocab_size": vocab, "hidden_size": args.d_model,
                  "intermediate_size": args.ffn, "num_hidden_layers": args.layers,
                  "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads,
                  "head_dim": head_dim, "max_position_embeddings": args.context,
                  "rope_theta": theta, "rms_norm_eps": eps, "rope_scaling": None,
                  "tie_word_embeddings": args.tied, "hidden_act": "silu",
                  "attention_bias": False, "torch_dtype": {"F32": "float32", "F16": "float16",
                                                           "BF16": "bfloat16"}[args.st_dtype]}
        if tok["bos"] >= 0:
            config["bos_token_id"] = tok["bos"]
        if tok["eos"] >= 0:
            config["eos_token_id"] = tok["eos"]
        (hf_dir / "config.json").write_text(json.dumps(config, indent=1))
        write_hf_tokenizer(hf_dir, tok, args.context)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--name", default="tiny-llama", help="model name (GGUF file stem)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=0, help="default d_model / heads")
    p.add_argument("--ffn", type=int, default=128)
    p.add_argument("--vocab", type=int, default=None,
                   help="pad the tokenizer's vocabulary to this size (default: its own size)")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    tied = p.add_mutually_exclusive_group()
    tied.add_argument("--tied", dest="tied", action="store_true", default=True,
                      help="LM head shares token_embd (default)")
    tied.add_argument("--untied", dest="tied", action="store_false", help="separate output.weight")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weight-type", choices=WEIGHT_TYPES, default="F32",
                   help="type of the 2-D matrices in the GGUF (norms are F32)")
    p.add_argument("--st-dtype", choices=["F32", "F16", "BF16"], default="F32",
                   help="dtype of the safetensors copy")
    p.add_argument("--st-shards", type=int, default=1,
                   help="split the safetensors copy into N shards with an index")
    p.add_argument("--format", choices=["gguf", "safetensors", "both"], default="both")
    p.add_argument("--tokenizer-from", metavar="PATH.gguf",
                   help="copy the tokenizer of this GGUF model")
    args = p.parse_args(argv)
    for k in ("layers", "d_model", "heads", "kv_heads", "ffn", "context"):
        if getattr(args, k) <= 0:
            p.error(f"--{k.replace('_', '-')} must be positive")
    build(args)


if __name__ == "__main__":
    main()
