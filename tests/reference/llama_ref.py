"""Independent numpy reference implementation of the Llama-family forward pass.

This module is the *oracle* the C++ engine (tpserve) is checked against. It
deliberately shares no code with the C++: weights are read with the PyPI
``gguf`` package (``gguf.GGUFReader`` + ``gguf.quants.dequantize``) and every
operation is written out below in plain numpy.

Model (per layer ``l``; ``D`` = d_model, ``H`` = query heads, ``Hkv`` = KV
heads, ``hd`` = head_dim, ``F`` = FFN width, ``V`` = vocab, ``T`` = tokens)::

    x  = embed[ids]                                   # [T, D]
    h  = rmsnorm(x) * attn_norm                       # [T, D]
    q  = h @ Wq.T   -> [T, H,   hd]                   # Wq: [H*hd,   D]
    k  = h @ Wk.T   -> [T, Hkv, hd]                   # Wk: [Hkv*hd, D]
    v  = h @ Wv.T   -> [T, Hkv, hd]                   # Wv: [Hkv*hd, D]
    q, k = rope(q, pos), rope(k, pos)
    a  = softmax(q k^T / sqrt(hd) + causal) v         # query head j uses KV head j // (H/Hkv)
    x += a.reshape(T, H*hd) @ Wo.T                    # Wo: [D, H*hd]
    h  = rmsnorm(x) * ffn_norm
    x += (silu(h @ Wg.T) * (h @ Wu.T)) @ Wd.T         # Wg, Wu: [F, D]; Wd: [D, F]
    logits = (rmsnorm(x) * output_norm) @ Wout.T      # Wout = output.weight or token_embd (tied)

RoPE modes
----------
llama.cpp's ``convert_hf_to_gguf.py`` permutes the rows of ``attn_q``/``attn_k``
for the llama architecture (``permute``: reshape(n_head, 2, hd/2, in)
.swapaxes(1, 2)) so that the HF "rotate-half" RoPE becomes the *interleaved*
("normal", GGML rope mode 0) RoPE acting on adjacent pairs ``(2i, 2i+1)``.
That is the default here (``rope_neox=False``). The NeoX / rotate-half mode
(pairs ``(i, i + n_rot/2)``) is available via ``rope_neox=True`` for
architectures whose GGUF stores un-permuted weights.

Numerics
--------
Weights are dequantised once to float32 and cached per file. The default
compute dtype is float32 (what the C++ engine uses); RMSNorm statistics and the
softmax are evaluated in float64 and cast back, which costs nothing and
removes the only places where f32 can lose noticeable precision. Pass
``dtype=np.float64`` for an all-float64 run (weights are upcast; slower) to
quantify the f32 error of the reference itself.

Quantisation error is NOT a concern here: both implementations consume the
same dequantised values (Q4_1 / Q8_0 dequantisation is exact in f32).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Dict, List, Optional, Sequence

# OpenBLAS threads spin-wait; on a small shared CPU box (2 cores, other jobs)
# multi-threaded sgemm was measured 5-30x SLOWER than single-threaded. Default
# to one thread unless the caller chose otherwise; this must precede the first
# numpy import in the process to take effect.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import gguf  # noqa: E402


# --------------------------------------------------------------------------- #
# Configuration
# --------------------------------------------------------------------------- #


@dataclasses.dataclass
class LlamaConfig:
    arch: str
    n_layer: int
    d_model: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int  # number of rotated dims per head (== head_dim unless partial RoPE)
    vocab_size: int
    rope_theta: float
    rms_eps: float
    context_length: int
    tied_embeddings: bool
    rope_neox: bool = False
    # RoPE scaling. Linear: positions are multiplied by rope_freq_scale (= 1/factor).
    rope_scaling_type: str = "none"
    rope_freq_scale: float = 1.0
    # Per-frequency divisors (llama3-style scaling), shape [n_rot/2], or None.
    rope_freq_factors: Optional[np.ndarray] = None
    bos_token_id: Optional[int] = None
    eos_token_id: Optional[int] = None


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


# Architectures whose GGUF Q/K are stored in HF (un-permuted) order and therefore
# need rotate-half RoPE. The llama converter permutes; these do not.
_NEOX_ARCHES = {"qwen2", "qwen3", "phi3", "gptneox", "stablelm", "falcon", "olmo2", "gemma", "gemma2"}


def _llama3_freq_factors(n_rot: int, theta: float, factor: float, low: float, high: float,
                         orig_ctx: int) -> np.ndarray:
    """HF ``_compute_llama3_parameters`` expressed as per-frequency divisors. [n_rot/2]"""
    inv_freq = theta ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    wavelen = 2 * math.pi / inv_freq
    low_wavelen = orig_ctx / low
    high_wavelen = orig_ctx / high
    out = np.ones_like(inv_freq)
    out[wavelen > low_wavelen] = factor
    mid = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
    smooth = (orig_ctx / wavelen[mid] - low) / (high - low)
    # scaled inv_freq = (1-s) * f/factor + s * f  ->  divisor = 1 / ((1-s)/factor + s)
    out[mid] = 1.0 / ((1 - smooth) / factor + smooth)
    return out


def config_from_reader(reader: gguf.GGUFReader, tensors: Dict[str, np.ndarray]) -> LlamaConfig:
    arch = _field(reader, "general.architecture")
    p = arch + "."

    def req(key):
        v = _field(reader, p + key)
        if v is None:
            raise KeyError(f"GGUF is missing {p + key}")
        return v

    d_model = int(req("embedding_length"))
    n_head = int(req("attention.head_count"))
    n_head_kv = int(_field(reader, p + "attention.head_count_kv", n_head))
    head_dim = int(_field(reader, p + "attention.key_length", d_model // n_head))
    n_rot = int(_field(reader, p + "rope.dimension_count", head_dim))
    theta = float(_field(reader, p + "rope.freq_base", 10000.0))
    vocab = tensors["token_embd.weight"].shape[0]

    scaling_type = str(_field(reader, p + "rope.scaling.type", "none"))
    factor = float(_field(reader, p + "rope.scaling.factor", 1.0) or 1.0)
    freq_scale = 1.0
    freq_factors = None
    if "rope_freqs.weight" in tensors:
        # llama3-style scaling as written by llama.cpp's converter: theta_i /= ff[i]
        freq_factors = tensors["rope_freqs.weight"].astype(np.float64)
        scaling_type = "llama3"
    elif scaling_type == "llama3":
        freq_factors = _llama3_freq_factors(
            n_rot, theta, factor,
            float(_field(reader, p + "rope.scaling.low_freq_factor", 1.0)),
            float(_field(reader, p + "rope.scaling.high_freq_factor", 4.0)),
            int(_field(reader, p + "rope.scaling.original_context_length", 8192)))
    elif scaling_type == "linear":
        freq_scale = 1.0 / factor
    elif scaling_type not in ("none", ""):
        raise NotImplementedError(f"rope scaling type {scaling_type!r} not supported by the reference")

    return LlamaConfig(
        arch=arch,
        n_layer=int(req("block_count")),
        d_model=d_model,
        n_ff=int(req("feed_forward_length")),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_rot=n_rot,
        vocab_size=vocab,
        rope_theta=theta,
        rms_eps=float(req("attention.layer_norm_rms_epsilon")),
        context_length=int(_field(reader, p + "context_length", 2048)),
        tied_embeddings="output.weight" not in tensors,
        rope_neox=arch in _NEOX_ARCHES,
        rope_scaling_type=scaling_type,
        rope_freq_scale=freq_scale,
        rope_freq_factors=freq_factors,
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
    )


# --------------------------------------------------------------------------- #
# Weight loading (dequantise once, cache per file)
# --------------------------------------------------------------------------- #

_READERS: Dict[tuple, gguf.GGUFReader] = {}
_CACHE: Dict[tuple, Dict[str, np.ndarray]] = {}


def _file_key(path: str) -> tuple:
    st = os.stat(path)
    return (os.path.realpath(path), st.st_mtime_ns, st.st_size)


def gguf_reader(path: str) -> gguf.GGUFReader:
    """Cached ``gguf.GGUFReader`` (parsing SmolLM2's 100k tokenizer strings takes
    several seconds; tokenize_ref shares this instance)."""
    key = _file_key(path)
    if key not in _READERS:
        _READERS[key] = gguf.GGUFReader(path)
    return _READERS[key]


def load_gguf(path: str):
    """Return (reader, {name: float32 ndarray}) with every tensor dequantised.

    Cached by (realpath, mtime, size) so repeated constructions are free.
    ``gguf.quants.dequantize`` returns arrays in numpy (row-major) order, i.e. a
    tensor with GGUF ne = [in, out] comes back as shape [out, in].
    """
    key = _file_key(path)
    reader = gguf_reader(path)
    if key not in _CACHE:
        tensors = {}
        for t in reader.tensors:
            arr = gguf.quants.dequantize(t.data, t.tensor_type)
            arr = np.ascontiguousarray(arr, dtype=np.float32)
            expect = tuple(int(n) for n in reversed(list(t.shape)))
            assert arr.shape == expect, (t.name, arr.shape, expect)
            tensors[t.name] = arr
        _CACHE[key] = tensors
    return reader, _CACHE[key]


# --------------------------------------------------------------------------- #
# Primitive ops
# --------------------------------------------------------------------------- #


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x: [T, D], w: [D] -> [T, D]; statistics in float64."""
    x64 = x.astype(np.float64)
    inv = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return ((x64 * inv) * w).astype(x.dtype)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def rope_cos_sin(cfg: LlamaConfig, pos: np.ndarray):
    """pos: [T] int -> cos, sin: [T, n_rot/2] (float64).

    theta_i = pos * freq_scale * base^(-2i/n_rot) / freq_factor_i
    """
    inv_freq = cfg.rope_theta ** (-np.arange(0, cfg.n_rot, 2, dtype=np.float64) / cfg.n_rot)
    if cfg.rope_freq_factors is not None:
        inv_freq = inv_freq / cfg.rope_freq_factors
    ang = (pos.astype(np.float64) * cfg.rope_freq_scale)[:, None] * inv_freq[None, :]
    return np.cos(ang), np.sin(ang)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, n_rot: int, neox: bool) -> np.ndarray:
    """x: [T, n_heads, hd]; cos/sin: [T, n_rot/2]. Rotates the first n_rot dims.

    interleaved (neox=False): pairs (x[2i], x[2i+1])           -- GGML mode 0
    neox        (neox=True):  pairs (x[i],  x[i + n_rot/2])    -- HF rotate_half
    """
    out = x.copy()
    c = cos[:, None, :].astype(x.dtype)  # [T, 1, n_rot/2]
    s = sin[:, None, :].astype(x.dtype)
    if neox:
        half = n_rot // 2
        x0, x1 = x[..., :half], x[..., half:n_rot]
        out[..., :half] = x0 * c - x1 * s
        out[..., half:n_rot] = x0 * s + x1 * c
    else:
        x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * c - x1 * s
        out[..., 1:n_rot:2] = x0 * s + x1 * c
    return out


# --------------------------------------------------------------------------- #
# KV cache
# --------------------------------------------------------------------------- #


class KVCache:
    """Per-layer K/V storage: k[l], v[l]: [Hkv, capacity, hd]; grows by doubling."""

    def __init__(self, cfg: LlamaConfig, dtype, capacity: int = 256):
        self.cfg, self.dtype, self.n = cfg, dtype, 0
        self._alloc(capacity)

    def _alloc(self, cap):
        shape = (self.cfg.n_head_kv, cap, self.cfg.head_dim)
        new_k = [np.zeros(shape, self.dtype) for _ in range(self.cfg.n_layer)]
        new_v = [np.zeros(shape, self.dtype) for _ in range(self.cfg.n_layer)]
        if hasattr(self, "k"):
            for l in range(self.cfg.n_layer):
                new_k[l][:, : self.n] = self.k[l][:, : self.n]
                new_v[l][:, : self.n] = self.v[l][:, : self.n]
        self.k, self.v, self.capacity = new_k, new_v, cap

    def reserve(self, n_total: int):
        if n_total > self.capacity:
            self._alloc(max(n_total, 2 * self.capacity))


# --------------------------------------------------------------------------- #
# Model
# --------------------------------------------------------------------------- #


@dataclasses.dataclass
class GreedyResult:
    prompt_ids: List[int]
    ids: List[int]  # generated ids (excluding the prompt)
    margins: List[float]  # top1 - top2 logit at each generation step
    top2: List[tuple]  # (top1_id, top2_id) at each step
    max_abs: List[float]  # max|logit| at each step (scale for relative tolerances)


class LlamaReference:
    """Reference forward pass over a GGUF file.

    forward(ids)            -> logits [T, V]   stateless, full sequence
    prefill(ids)            -> logits [T, V]   resets the internal KV cache
    decode(token)           -> logits [V]      appends one token to it
    greedy(ids, n)          -> GreedyResult    argmax generation + top-2 margins
    greedy_batch([ids], n)  -> [GreedyResult]  several prompts in lock-step (fast)

    ``rope_neox`` overrides the RoPE mode inferred from the architecture.
    """

    def __init__(self, path: str, dtype=np.float32, rope_neox: Optional[bool] = None):
        self.path = path
        self.dtype = np.dtype(dtype)
        reader, tensors = load_gguf(path)
        self.reader = reader
        self.cfg = config_from_reader(reader, tensors)
        if rope_neox is not None:
            self.cfg.rope_neox = rope_neox
        c = self.cfg
        w = lambda name: tensors[name].astype(self.dtype, copy=False)  # noqa: E731

        self.tok_embd = w("token_embd.weight")  # [V, D]
        assert self.tok_embd.shape == (c.vocab_size, c.d_model)
        self.out_w = self.tok_embd if c.tied_embeddings else w("output.weight")  # [V, D]
        self.out_norm = w("output_norm.weight")  # [D]

        q_dim, kv_dim = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        self.layers = []
        for i in range(c.n_layer):
            b = f"blk.{i}."
            wq, wk, wv = w(b + "attn_q.weight"), w(b + "attn_k.weight"), w(b + "attn_v.weight")
            assert wq.shape == (q_dim, c.d_model) and wk.shape == (kv_dim, c.d_model), (wq.shape, wk.shape)
            wg, wu, wd = w(b + "ffn_gate.weight"), w(b + "ffn_up.weight"), w(b + "ffn_down.weight")
            assert wg.shape == (c.n_ff, c.d_model) and wd.shape == (c.d_model, c.n_ff)
            bias = [tensors.get(b + f"attn_{n}.bias") for n in "qkv"]  # qwen2-style, optional
            self.layers.append(dict(
                attn_norm=w(b + "attn_norm.weight"),  # [D]
                # Fused projections (one matmul each): rows = [q | k | v] and [gate | up].
                wqkv=np.ascontiguousarray(np.concatenate([wq, wk, wv], 0)),  # [q_dim + 2 kv_dim, D]
                bqkv=(np.concatenate(bias).astype(self.dtype) if all(x is not None for x in bias) else None),
                wo=w(b + "attn_output.weight"),  # [D, q_dim]
                ffn_norm=w(b + "ffn_norm.weight"),  # [D]
                wgu=np.ascontiguousarray(np.concatenate([wg, wu], 0)),  # [2F, D]
                wd=wd,  # [D, F]
            ))
        self.cache: Optional[KVCache] = None

    # ---- core ------------------------------------------------------------ #

    def _attend(self, l: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, cache: KVCache) -> np.ndarray:
        """Causal GQA attention for one sequence segment, appending k/v to ``cache``.

        q: [T, H, hd], k/v: [T, Hkv, hd] (RoPE already applied) at absolute
        positions cache.n .. cache.n+T-1.  -> [T, H*hd] (head-major).
        """
        c = self.cfg
        T, H, hd = q.shape
        Hkv = c.n_head_kv
        G = H // Hkv  # query heads per KV head: head j = g*G + r uses KV head g
        start = cache.n
        S = start + T  # keys visible to the last query
        cache.k[l][:, start:S] = k.transpose(1, 0, 2)  # [Hkv, T, hd]
        cache.v[l][:, start:S] = v.transpose(1, 0, 2)
        K = cache.k[l][:, :S]  # [Hkv, S, hd]
        V = cache.v[l][:, :S]  # [Hkv, S, hd]

        qg = q.reshape(T, Hkv, G, hd).transpose(1, 2, 0, 3).reshape(Hkv, G * T, hd)  # [Hkv, G*T, hd]
        scores = (qg @ K.transpose(0, 2, 1)).astype(np.float64)  # [Hkv, G*T, S]
        scores *= 1.0 / math.sqrt(hd)
        scores = scores.reshape(Hkv, G, T, S)
        if T > 1:  # query t (absolute start+t) may see keys s <= start+t
            mask = np.arange(S)[None, :] > (start + np.arange(T))[:, None]  # [T, S]
            scores[:, :, mask] = -np.inf
        scores -= scores.max(-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(-1, keepdims=True)  # softmax in float64
        p = p.astype(self.dtype).reshape(Hkv, G * T, S)
        att = (p @ V).reshape(Hkv, G, T, hd)  # [Hkv, G, T, hd]
        return att.transpose(2, 0, 1, 3).reshape(T, H * hd)  # [T, H*hd]

    def _step(self, segments: Sequence[Sequence[int]], caches: Sequence[KVCache],
              want_logits: str = "all") -> List[np.ndarray]:
        """Advance several independent sequences at once.

        Segment i (its new tokens) is appended to caches[i] at positions
        caches[i].n onwards. All tokens of all segments share each weight matmul
        (N = total new tokens, rows concatenated), which is what makes batched
        greedy decoding fast on a bandwidth-bound CPU; attention is per segment.

        Returns, per segment, logits [T_i, V] ("all") or [V] ("last").
        """
        c = self.cfg
        H, Hkv, hd = c.n_head, c.n_head_kv, c.head_dim
        q_dim, kv_dim = H * hd, Hkv * hd
        lens = [len(s) for s in segments]
        bounds = np.concatenate([[0], np.cumsum(lens)])  # segment i = rows bounds[i]:bounds[i+1]
        ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in segments])  # [N]
        pos = np.concatenate([np.arange(cc.n, cc.n + n) for cc, n in zip(caches, lens)])  # [N]
        for cc, n in zip(caches, lens):
            cc.reserve(cc.n + n)
        cos, sin = rope_cos_sin(c, pos)  # [N, n_rot/2]
        N = len(ids)

        x = self.tok_embd[ids]  # [N, D]
        for l, L in enumerate(self.layers):
            h = rmsnorm(x, L["attn_norm"], c.rms_eps)  # [N, D]
            qkv = h @ L["wqkv"].T  # [N, q_dim + 2*kv_dim]
            if L["bqkv"] is not None:
                qkv = qkv + L["bqkv"]
            q = apply_rope(qkv[:, :q_dim].reshape(N, H, hd), cos, sin, c.n_rot, c.rope_neox)  # [N, H, hd]
            k = apply_rope(qkv[:, q_dim:q_dim + kv_dim].reshape(N, Hkv, hd), cos, sin, c.n_rot, c.rope_neox)
            v = qkv[:, q_dim + kv_dim:].reshape(N, Hkv, hd)  # [N, Hkv, hd]
            att = np.empty((N, q_dim), dtype=self.dtype)  # [N, H*hd]
            for i, cc in enumerate(caches):
                r = slice(bounds[i], bounds[i + 1])
                att[r] = self._attend(l, q[r], k[r], v[r], cc)
            x = x + att @ L["wo"].T  # [N, D]

            h = rmsnorm(x, L["ffn_norm"], c.rms_eps)  # [N, D]
            gu = h @ L["wgu"].T  # [N, 2F]
            x = x + (silu(gu[:, :c.n_ff]) * gu[:, c.n_ff:]) @ L["wd"].T  # [N, D]

        for cc, n in zip(caches, lens):
            cc.n += n
        if want_logits == "last":
            last = bounds[1:] - 1
            logits = rmsnorm(x[last], self.out_norm, c.rms_eps) @ self.out_w.T  # [B, V]
            return list(logits)
        logits = rmsnorm(x, self.out_norm, c.rms_eps) @ self.out_w.T  # [N, V]
        return [logits[bounds[i]:bounds[i + 1]] for i in range(len(segments))]

    # ---- public API ------------------------------------------------------ #

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg, self.dtype)

    def forward(self, token_ids: Sequence[int]) -> np.ndarray:
        """Full-sequence, stateless forward. -> logits [T, V]"""
        return self._step([list(token_ids)], [self.new_cache()])[0]

    def prefill(self, token_ids: Sequence[int], logits: str = "all") -> np.ndarray:
        """Reset the internal cache and process the prompt.

        -> logits [T, V] (logits="all") or [V] for the last position (logits="last").
        """
        self.cache = self.new_cache()
        return self._step([list(token_ids)], [self.cache], logits)[0]

    def decode(self, token: int) -> np.ndarray:
        """Append one token to the internal cache. -> logits [V]"""
        if self.cache is None:
            raise RuntimeError("call prefill() first")
        return self._step([[int(token)]], [self.cache], "last")[0]

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, stop_at_eos: bool = True) -> GreedyResult:
        """Greedy (argmax) generation of one prompt, recording top-2 margins."""
        return self.greedy_batch([prompt_ids], max_tokens, stop_at_eos)[0]

    def greedy_batch(self, prompts: Sequence[Sequence[int]], max_tokens: int,
                     stop_at_eos: bool = True) -> List[GreedyResult]:
        """Greedy generation for several prompts in lock-step (results identical to
        running each alone, up to f32 matmul-blocking noise). Ties -> lowest id.
        A sequence stops after emitting EOS (kept in ``ids``) if stop_at_eos."""
        caches = [self.new_cache() for _ in prompts]
        for cc, p in zip(caches, prompts):
            cc.reserve(len(p) + max_tokens)
        results = [GreedyResult(list(p), [], [], [], []) for p in prompts]
        logits = self._step([list(p) for p in prompts], caches, "last")  # B x [V]
        active = list(range(len(prompts)))
        for step in range(max_tokens):
            nxt = []
            for i, lg in zip(active, logits):
                top1, top2, margin = top2_margin(lg)
                r = results[i]
                r.ids.append(top1)
                r.margins.append(margin)
                r.top2.append((top1, top2))
                r.max_abs.append(float(np.abs(lg).max()))
                if not (stop_at_eos and top1 == self.cfg.eos_token_id):
                    nxt.append(i)
            active = nxt
            if not active or step + 1 == max_tokens:
                break
            logits = self._step([[results[i].ids[-1]] for i in active], [caches[i] for i in active], "last")
        return results


def top2_margin(logits: np.ndarray):
    """logits [V] -> (argmax id, runner-up id, top1 - top2 logit)."""
    i1 = int(np.argmax(logits))
    l2 = logits.astype(np.float64).copy()
    l2[i1] = -np.inf
    i2 = int(np.argmax(l2))
    return i1, i2, float(logits[i1]) - float(logits[i2])


def greedy_margins(ref: LlamaReference, prompt_ids: Sequence[int], max_tokens: int,
                   stop_at_eos: bool = True) -> List[float]:
    """Near-tie report: the top1-top2 logit margin at each step of a greedy run.

    Small margins (say < 1e-3 * max|logit|) mark the steps where a correct engine
    may legitimately diverge from the reference.
    """
    return ref.greedy(prompt_ids, max_tokens, stop_at_eos).margins


def near_ties(result: GreedyResult, rel: float = 2e-3):
    """Steps of a GreedyResult whose top-2 margin is below ``rel * max|logit|``.

    -> [(step, margin, top1_id, top2_id)]. With the 1e-3 * max|logit| logits
    tolerance, two engines may each be off by that much, so a margin below
    2e-3 * max|logit| can flip the argmax without either being wrong.
    """
    return [(i, m, *result.top2[i]) for i, m in enumerate(result.margins)
            if m < rel * result.max_abs[i]]
