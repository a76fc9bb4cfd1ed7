"""Self-consistency checks that make the numpy reference trustworthy.

Run:  .venv/bin/python -m pytest tests/reference -q      (< 60 s on 2 cores)

1. Real model: full-sequence forward == prefill + decode (incremental KV cache).
2. Real model: greedy answers are sensible (" Paris" for the capital of France),
   and the f32 reference agrees with an all-f64 run.
3. Tiny random GGUF (written with gguf.GGUFWriter): LlamaReference == a second,
   deliberately naive per-token implementation (no KV cache, explicit per-head
   loops, explicit RoPE pairs) -- guards GQA mapping, causal mask, RoPE pairing,
   tied/untied output and linear RoPE scaling.
4. RoPE: NeoX RoPE on un-permuted (HF) weights == interleaved RoPE on weights
   permuted exactly like llama.cpp's convert_hf_to_gguf ``permute``.
5. Tokenizer helper and batched greedy sanity.
"""

from __future__ import annotations

import math
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see llama_ref.py

import numpy as np  # noqa: E402
import pytest  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gguf  # noqa: E402
import llama_ref  # noqa: E402
import tokenize_ref  # noqa: E402
from llama_ref import LlamaReference, apply_rope, near_ties, rope_cos_sin  # noqa: E402

MODEL = os.environ.get(
    "TPSERVE_REF_MODEL",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models",
                 "SmolLM2-135M-Instruct.Q4_1.gguf"))
needs_model = pytest.mark.skipif(not os.path.exists(MODEL), reason=f"model not found: {MODEL}")


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    """max|a-b| / max|b| -- the same scale the engine comparison uses."""
    return float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())


@pytest.fixture(scope="module")
def ref():
    return LlamaReference(MODEL)


# --------------------------------------------------------------------------- #
# 1 + 2: the real model
# --------------------------------------------------------------------------- #


@needs_model
def test_config_from_metadata(ref):
    c = ref.cfg
    assert (c.arch, c.n_layer, c.d_model, c.n_ff) == ("llama", 30, 576, 1536)
    assert (c.n_head, c.n_head_kv, c.head_dim, c.n_rot, c.vocab_size) == (9, 3, 64, 64, 49152)
    assert c.rope_theta == 100000.0 and abs(c.rms_eps - 1e-5) < 1e-9
    assert c.tied_embeddings and ref.out_w is ref.tok_embd
    assert not c.rope_neox
    assert (c.bos_token_id, c.eos_token_id) == (1, 2)
    # dequantised layout: [out_features, in_features]
    L = ref.layers[0]
    assert L["wqkv"].shape == (576 + 2 * 192, 576) and L["wd"].shape == (576, 1536)


@needs_model
def test_full_forward_equals_incremental(ref):
    ids = tokenize_ref.encode_chat(MODEL, "Name three primary colours.")
    ids = ids + [504, 3575, 282, 4649, 314, 7042, 30]  # a few continuation tokens
    full = ref.forward(ids)  # [T, V]
    assert full.shape == (len(ids), 49152) and full.dtype == np.float32
    n0 = len(ids) - 8
    inc = [ref.prefill(ids[:n0])]  # [n0, V]
    for t in ids[n0:]:
        inc.append(ref.decode(t)[None])  # [1, V]
    inc = np.concatenate(inc)
    err = rel_err(inc, full)
    print(f"full vs incremental rel err {err:.2e}")
    assert err <= 1e-4


@needs_model
def test_f32_matches_f64(ref):
    ids = tokenize_ref.encode(MODEL, "The quick brown fox jumps over the lazy dog. 12345")
    l32 = ref.forward(ids)
    l64 = LlamaReference(MODEL, dtype=np.float64).forward(ids)
    err = rel_err(l32, l64)
    print(f"f32 vs f64 rel err {err:.2e}")
    assert err < 1e-4  # the reference itself is far inside the 1e-3 engine tolerance


@needs_model
def test_paris_raw_and_chat(ref):
    raw = ref.greedy(tokenize_ref.encode(MODEL, "The capital of France is"), 16)
    text = tokenize_ref.decode(MODEL, raw.ids)
    print("raw :", repr(text), "margins", np.round(raw.margins, 3).tolist())
    first_few = tokenize_ref.decode(MODEL, raw.ids[:3])
    assert " Paris" in first_few

    chat = ref.greedy(tokenize_ref.encode_chat(MODEL, "What is the capital of France?"), 32)
    ctext = tokenize_ref.decode(MODEL, chat.ids)
    print("chat:", repr(ctext))
    assert "Paris" in ctext
    assert chat.ids[-1] == ref.cfg.eos_token_id  # short answer, then <|im_end|>
    assert len(chat.margins) == len(chat.ids) and all(m >= 0 for m in chat.margins)


@needs_model
def test_greedy_batch_matches_single(ref):
    prompts = [tokenize_ref.encode(MODEL, "1, 2, 3, 4,"),
               tokenize_ref.encode_chat(MODEL, "Hi!"),
               tokenize_ref.encode(MODEL, "def add(a, b):")]
    batch = ref.greedy_batch(prompts, 8)
    for p, b in zip(prompts, batch):
        s = ref.greedy(p, 8)
        assert s.ids == b.ids
        np.testing.assert_allclose(s.margins, b.margins, atol=1e-3)


# --------------------------------------------------------------------------- #
# 3 + 4: tiny random model vs naive implementation
# --------------------------------------------------------------------------- #

TINY = dict(n_layer=2, d=64, n_head=4, n_head_kv=2, ff=96, vocab=97, theta=10000.0, eps=1e-5)


def hf_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half row order ->
    GGUF interleaved row order. w: [n_head*hd, in] -> same shape."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def make_tiny_weights(seed=0, tied=True):
    """HF-layout (un-permuted) float32 weights, numpy shapes [out, in]."""
    rng = np.random.default_rng(seed)
    c = TINY
    hd = c["d"] // c["n_head"]
    r = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    w = {"token_embd.weight": r(c["vocab"], c["d"]),
         "output_norm.weight": (1 + r(c["d"])).astype(np.float32)}
    if not tied:
        w["output.weight"] = r(c["vocab"], c["d"])
    for i in range(c["n_layer"]):
        b = f"blk.{i}."
        w[b + "attn_norm.weight"] = (1 + r(c["d"])).astype(np.float32)
        w[b + "ffn_norm.weight"] = (1 + r(c["d"])).astype(np.float32)
        w[b + "attn_q.weight"] = r(c["n_head"] * hd, c["d"])
        w[b + "attn_k.weight"] = r(c["n_head_kv"] * hd, c["d"])
        w[b + "attn_v.weight"] = r(c["n_head_kv"] * hd, c["d"])
        w[b + "attn_output.weight"] = r(c["d"], c["n_head"] * hd)
        w[b + "ffn_gate.weight"] = r(c["ff"], c["d"])
        w[b + "ffn_up.weight"] = r(c["ff"], c["d"])
        w[b + "ffn_down.weight"] = r(c["d"], c["ff"])
    return w


def permute_qk(weights):
    c = TINY
    out = dict(weights)
    for i in range(c["n_layer"]):
        out[f"blk.{i}.attn_q.weight"] = hf_permute(weights[f"blk.{i}.attn_q.weight"], c["n_head"])
        out[f"blk.{i}.attn_k.weight"] = hf_permute(weights[f"blk.{i}.attn_k.weight"], c["n_head_kv"])
    return out


def write_tiny_gguf(path, weights, linear_scale=None):
    c = TINY
    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_block_count(c["n_layer"])
    wr.add_context_length(128)
    wr.add_embedding_length(c["d"])
    wr.add_feed_forward_length(c["ff"])
    wr.add_head_count(c["n_head"])
    wr.add_head_count_kv(c["n_head_kv"])
    wr.add_rope_freq_base(c["theta"])
    wr.add_layer_norm_rms_eps(c["eps"])
    wr.add_rope_dimension_count(c["d"] // c["n_head"])
    if linear_scale is not None:
        wr.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        wr.add_rope_scaling_factor(linear_scale)
    wr.add_eos_token_id(2)
    for name, arr in weights.items():
        wr.add_tensor(name, arr)  # numpy [out, in] -> GGUF ne [in, out]
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return str(path)


def naive_forward(weights, ids, neox: bool, pos_scale: float = 1.0):
    """Deliberately simple float64 implementation, one token and one head at a time.

    No KV cache (keys/values recomputed from the full prefix for every query),
    explicit causal loop, GQA via kv_head = head // (n_head // n_head_kv),
    RoPE written out per pair. -> logits [T, vocab]
    """
    c = TINY
    hd = c["d"] // c["n_head"]
    group = c["n_head"] // c["n_head_kv"]
    W = {k: v.astype(np.float64) for k, v in weights.items()}
    out_w = W.get("output.weight", W["token_embd.weight"])

    def norm(x, w):  # x: [d]
        return x / math.sqrt(sum(float(e) * float(e) for e in x) / len(x) + c["eps"]) * w

    def rope(vec, pos):  # vec: [hd], one head
        out = vec.copy()
        for i in range(hd // 2):
            ang = pos * pos_scale * c["theta"] ** (-2.0 * i / hd)
            a, b = (i, i + hd // 2) if neox else (2 * i, 2 * i + 1)
            out[a] = vec[a] * math.cos(ang) - vec[b] * math.sin(ang)
            out[b] = vec[a] * math.sin(ang) + vec[b] * math.cos(ang)
        return out

    logits = []
    for t in range(len(ids)):
        # Recompute the whole prefix 0..t for query position t (no cache).
        xs = [W["token_embd.weight"][ids[s]].copy() for s in range(t + 1)]  # each [d]
        for l in range(c["n_layer"]):
            b = f"blk.{l}."
            hs = [norm(x, W[b + "attn_norm.weight"]) for x in xs]
            qs = [W[b + "attn_q.weight"] @ h for h in hs]  # [H*hd]
            ks = [W[b + "attn_k.weight"] @ h for h in hs]  # [Hkv*hd]
            vs = [W[b + "attn_v.weight"] @ h for h in hs]  # [Hkv*hd]
            new_xs = []
            for s in range(t + 1):  # every prefix position (needed by the next layer)
                heads = []
                for hh in range(c["n_head"]):
                    g = hh // group
                    q = rope(qs[s][hh * hd:(hh + 1) * hd], s)
                    scores = []
                    for j in range(s + 1):  # causal: keys 0..s only
                        k = rope(ks[j][g * hd:(g + 1) * hd], j)
                        scores.append(float(q @ k) / math.sqrt(hd))
                    m = max(scores)
                    e = [math.exp(z - m) for z in scores]
                    z = sum(e)
                    o = sum((e[j] / z) * vs[j][g * hd:(g + 1) * hd] for j in range(s + 1))
                    heads.append(o)
                x = xs[s] + W[b + "attn_output.weight"] @ np.concatenate(heads)
                h = norm(x, W[b + "ffn_norm.weight"])
                gate = W[b + "ffn_gate.weight"] @ h
                up = W[b + "ffn_up.weight"] @ h
                act = gate / (1 + np.exp(-gate)) * up
                new_xs.append(x + W[b + "ffn_down.weight"] @ act)
            xs = new_xs
        logits.append(out_w @ norm(xs[t], W["output_norm.weight"]))
    return np.array(logits)


TINY_IDS = [3, 17, 42, 5, 96, 0, 17, 8, 61, 23]


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("linear_scale", [None, 4.0])
def test_tiny_model_matches_naive(tmp_path, tied, linear_scale):
    hf = make_tiny_weights(seed=1, tied=tied)
    gg = permute_qk(hf)  # what llama.cpp's converter stores
    path = write_tiny_gguf(tmp_path / "tiny.gguf", gg, linear_scale)
    ref = LlamaReference(path)
    assert ref.cfg.n_head_kv == 2 and ref.cfg.tied_embeddings == tied
    assert ref.cfg.rope_freq_scale == (1.0 / linear_scale if linear_scale else 1.0)
    got = ref.forward(TINY_IDS)  # [T, V]
    pos_scale = 1.0 / linear_scale if linear_scale else 1.0
    # Naive interleaved RoPE on the stored (permuted) weights ...
    want = naive_forward(gg, TINY_IDS, neox=False, pos_scale=pos_scale)
    assert rel_err(got, want) < 1e-5, rel_err(got, want)
    # ... and naive NeoX RoPE on the original HF weights give the same logits.
    want_hf = naive_forward(hf, TINY_IDS, neox=True, pos_scale=pos_scale)
    assert rel_err(want, want_hf) < 1e-10
    # Incremental path on the tiny model too.
    inc = np.concatenate([ref.prefill(TINY_IDS[:3])] + [ref.decode(t)[None] for t in TINY_IDS[3:]])
    assert rel_err(inc, want) < 1e-5


def test_tiny_model_detects_wrong_gqa_and_rope(tmp_path):
    """The naive check has teeth: a wrong RoPE mode or head mapping is caught."""
    hf = make_tiny_weights(seed=2)
    gg = permute_qk(hf)
    path = write_tiny_gguf(tmp_path / "tiny.gguf", gg)
    want = naive_forward(gg, TINY_IDS, neox=False)
    wrong_mode = LlamaReference(path, rope_neox=True).forward(TINY_IDS)
    assert rel_err(wrong_mode, want) > 1e-2
    # Unpermuted weights read as if permuted (i.e. forgetting the converter's permute).
    path2 = write_tiny_gguf(tmp_path / "tiny_hf.gguf", hf)
    assert rel_err(LlamaReference(path2).forward(TINY_IDS), want) > 1e-2


def test_rope_neox_on_hf_equals_interleaved_on_permuted():
    rng = np.random.default_rng(0)
    n_head, hd, d_in, T = 3, 16, 24, 7
    w_hf = rng.standard_normal((n_head * hd, d_in))  # [H*hd, in], HF row order
    w_gg = hf_permute(w_hf, n_head)  # GGUF row order
    x = rng.standard_normal((T, d_in))
    cfg = llama_ref.LlamaConfig(arch="llama", n_layer=1, d_model=d_in, n_ff=1, n_head=n_head, n_head_kv=n_head,
                                head_dim=hd, n_rot=hd, vocab_size=1, rope_theta=500.0, rms_eps=1e-5,
                                context_length=64, tied_embeddings=True)
    cos, sin = rope_cos_sin(cfg, np.arange(T) + 5)
    q_neox = apply_rope((x @ w_hf.T).reshape(T, n_head, hd), cos, sin, hd, neox=True)  # [T, H, hd]
    q_int = apply_rope((x @ w_gg.T).reshape(T, n_head, hd), cos, sin, hd, neox=False)
    # Element map of the permutation: GGUF dim 2i+j  <->  HF dim j*hd/2 + i.
    idx = np.array([j * hd // 2 + i for i in range(hd // 2) for j in range(2)])
    np.testing.assert_allclose(q_int, q_neox[..., idx], rtol=0, atol=1e-12)
    # Hence q.k scores (what attention sees) are identical.
    np.testing.assert_allclose(np.einsum("thd,shd->hts", q_int, q_int),
                               np.einsum("thd,shd->hts", q_neox, q_neox), atol=1e-10)
    # And the modes genuinely differ on the same weights.
    assert not np.allclose(apply_rope((x @ w_gg.T).reshape(T, n_head, hd), cos, sin, hd, neox=True), q_int)


# --------------------------------------------------------------------------- #
# 5: tokenizer helper, near-tie report
# --------------------------------------------------------------------------- #


@needs_model
def test_tokenizer_helper():
    ids = tokenize_ref.encode_chat(MODEL, "What is the capital of France?")
    text = tokenize_ref.decode(MODEL, ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2  # <|im_start|> x3, <|im_end|> x2
    s = "Digits 2024 split: héllo wörld ¿qué? 你好 \t tabs  and  spaces"
    ids = tokenize_ref.encode(MODEL, s)
    assert tokenize_ref.decode(MODEL, ids) == s
    assert tokenize_ref.encode(MODEL, "2024") == [34, 32, 34, 36]  # individual digits
    assert tokenize_ref.encode(MODEL, "The capital of France is") == [504, 3575, 282, 4649, 314]


def test_near_ties():
    r = llama_ref.GreedyResult([1], [5, 6], [0.001, 3.0], [(5, 7), (6, 9)], [10.0, 10.0])
    assert near_ties(r) == [(0, 0.001, 5, 7)]
    top1, top2, m = llama_ref.top2_margin(np.array([0.5, 2.0, 1.5, 2.0], np.float32))
    assert (top1, top2, m) == (1, 3, 0.0)  # exact tie: lowest id wins, margin 0
