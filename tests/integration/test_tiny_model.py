"""scripts/make-tiny-model.py and the C++ weight sources: the GGUF and the safetensors copy of
one tiny model must give the same ModelConfig and the same tensors (every canonical name,
whole and sliced) through tests/tools/weights_dump, and the GGUF values must match the gguf
package's own dequantisation. Also: SmolLM2's ModelConfig."""
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import gguf

CASES = [
    # id, extra make-tiny-model arguments
    ("f32_tied", ["--d-model", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "96"]),
    ("q4_1_untied_gqa", ["--d-model", "96", "--heads", "6", "--kv-heads", "2", "--ffn", "160",
                         "--weight-type", "Q4_1", "--untied", "--vocab", "300"]),
    ("q8_0_sharded", ["--d-model", "64", "--heads", "2", "--kv-heads", "1", "--ffn", "64",
                      "--weight-type", "Q8_0", "--st-shards", "3", "--layers", "3"]),
    ("q4_0_headdim", ["--d-model", "64", "--heads", "4", "--kv-heads", "4", "--head-dim", "32",
                      "--ffn", "64", "--weight-type", "Q4_0"]),
    ("f16_st_f16", ["--d-model", "32", "--heads", "2", "--kv-heads", "1", "--ffn", "48",
                    "--weight-type", "F16", "--st-dtype", "F16"]),
    ("bf16_st_bf16", ["--d-model", "32", "--heads", "4", "--kv-heads", "2", "--ffn", "40",
                      "--weight-type", "BF16", "--st-dtype", "BF16", "--untied"]),
    ("q4_k", ["--d-model", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "256",
              "--weight-type", "Q4_K", "--layers", "1"]),
    ("q5_k", ["--d-model", "256", "--heads", "2", "--kv-heads", "2", "--ffn", "256",
              "--weight-type", "Q5_K", "--layers", "1", "--untied"]),
    ("q6_k", ["--d-model", "256", "--heads", "8", "--kv-heads", "2", "--ffn", "512",
              "--weight-type", "Q6_K", "--layers", "1"]),
]


def make(repo_root, out, args):
    subprocess.run([sys.executable, str(repo_root / "scripts" / "make-tiny-model.py"),
                    "--out", str(out), "--name", "tiny", "--rope-theta", "50000", *args],
                   check=True)
    return out / "tiny.gguf", out / "hf"


def run_json(tool, *args):
    return json.loads(subprocess.run([str(tool), *map(str, args)], check=True,
                                     capture_output=True, text=True).stdout)


def dump(tool, model, out_dir, shapes):
    out_dir.mkdir()
    subprocess.run([str(tool), "dump", str(model), str(out_dir)], check=True)
    return {n: np.fromfile(out_dir / f"{n}.f32", dtype="<f4").reshape(s) for n, s in shapes.items()}


def read_safetensors(path):
    """Independent numpy reader (F32 only)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        assert t["dtype"] == "F32"
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(t["shape"])
    return out


@pytest.mark.parametrize("case_id,args", CASES, ids=[c[0] for c in CASES])
def test_gguf_and_safetensors_agree(tmp_path, repo_root, binary, case_id, args):
    tool = binary("tests", "tools", "weights_dump")
    gguf_path, hf_dir = make(repo_root, tmp_path / "m", args)

    cfg_g = run_json(tool, "config", gguf_path)
    cfg_s = run_json(tool, "config", hf_dir)
    assert cfg_g == cfg_s
    assert cfg_g["name"] == "tiny" and cfg_g["rope_theta"] == 50000.0
    assert cfg_g["tied_embeddings"] == ("--untied" not in args)

    list_g = run_json(tool, "list", gguf_path)
    list_s = run_json(tool, "list", hf_dir)
    assert list_g["format"] == "gguf" and list_s["format"] == "safetensors"
    assert list_g["tensors"] == list_s["tensors"]
    shapes = list_g["tensors"]
    n_layers = cfg_g["n_layers"]
    assert len(shapes) == 2 + 9 * n_layers + (0 if cfg_g["tied_embeddings"] else 1)
    assert shapes["token_embd.weight"] == [cfg_g["vocab_size"], cfg_g["d_model"]]
    assert shapes["blk.0.attn_q.weight"] == [cfg_g["n_heads"] * cfg_g["head_dim"], cfg_g["d_model"]]
    assert shapes["blk.0.attn_k.weight"] == [cfg_g["n_kv_heads"] * cfg_g["head_dim"],
                                             cfg_g["d_model"]]
    assert shapes["output_norm.weight"] == [1, cfg_g["d_model"]]

    tg = dump(tool, gguf_path, tmp_path / "dg", shapes)
    ts = dump(tool, hf_dir, tmp_path / "ds", shapes)
    for name in shapes:
        assert np.array_equal(tg[name], ts[name]), name
        assert np.isfinite(tg[name]).all() and np.abs(tg[name]).max() < 4.0, name

    # The C++ GGUF values against the gguf package's own dequantisation.
    reader = gguf.GGUFReader(gguf_path)
    for t in reader.tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        assert np.array_equal(ref.reshape(tg[t.name].shape), tg[t.name]), t.name
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["llama.block_count"].contents() == n_layers

    # Slices read directly equal the slice of the whole tensor.
    rng = np.random.default_rng(0)
    for name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_down.weight",
                 "token_embd.weight", "output_norm.weight"):
        rows, cols = shapes[name]
        r0, r1 = sorted(rng.integers(0, rows + 1, 2))
        c0, c1 = sorted(rng.integers(0, cols + 1, 2))
        for model, full, tag in ((gguf_path, tg, "g"), (hf_dir, ts, "s")):
            out = tmp_path / f"slice_{tag}_{name}.f32"
            subprocess.run([str(tool), "read", str(model), name, str(out), str(r0), str(r1),
                            str(c0), str(c1)], check=True)
            got = np.fromfile(out, dtype="<f4").reshape(r1 - r0, c1 - c0)
            assert np.array_equal(got, full[name][r0:r1, c0:c1]), (name, tag)

    # The safetensors copy is in HF (rotate-half) order: llama.cpp's permute of the stored
    # HF rows gives the GGUF rows the C++ source presents.
    if "--st-dtype" not in args:
        files = sorted(hf_dir.glob("*.safetensors"))
        hf = {}
        for f in files:
            hf.update(read_safetensors(f))
        hd = cfg_g["head_dim"]
        for part, heads in (("q", cfg_g["n_heads"]), ("k", cfg_g["n_kv_heads"])):
            w = hf[f"model.layers.0.self_attn.{part}_proj.weight"]
            perm = w.reshape(heads, 2, hd // 2, -1).swapaxes(1, 2).reshape(w.shape)
            assert np.array_equal(perm, tg[f"blk.0.attn_{part}.weight"])
            if hd > 2:
                assert not np.array_equal(w, perm)

    # The HF tokenizer loads and round-trips text.
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    assert tok.get_vocab_size() == cfg_g["vocab_size"]
    ids = tok.encode("the cat in there").ids
    assert tok.decode(ids) == "the cat in there"
    tcfg = json.loads((hf_dir / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tcfg["chat_template"] and tcfg["eos_token"] == "<|im_end|>"


def test_tokenizer_from_smollm(tmp_path, repo_root, binary, smollm_gguf):
    tool = binary("tests", "tools", "weights_dump")
    gguf_path, hf_dir = make(repo_root, tmp_path / "m",
                             ["--d-model", "32", "--heads", "2", "--kv-heads", "1", "--ffn", "32",
                              "--layers", "1", "--tokenizer-from", str(smollm_gguf)])
    src = gguf.GGUFReader(smollm_gguf)
    dst = gguf.GGUFReader(gguf_path)
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                "tokenizer.chat_template", "tokenizer.ggml.pre", "tokenizer.ggml.padding_token_id"):
        assert src.fields[key].contents() == dst.fields[key].contents(), key
    cfg_g = run_json(tool, "config", gguf_path)
    assert cfg_g == run_json(tool, "config", hf_dir)
    assert cfg_g["vocab_size"] == 49152 and cfg_g["bos_token_id"] == 1
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    assert tok.get_vocab_size() == 49152
    ids = tok.encode("Hello world").ids
    assert tok.decode(ids) == "Hello world"
    assert tok.token_to_id("<|im_end|>") == 2


def test_smollm_config(binary, smollm_gguf):
    cfg = run_json(binary("tests", "tools", "weights_dump"), "config", smollm_gguf)
    assert cfg["architecture"] == "llama"
    assert cfg["n_layers"] == 30
    assert cfg["d_model"] == 576
    assert cfg["ffn_dim"] == 1536
    assert cfg["n_heads"] == 9 and cfg["n_kv_heads"] == 3 and cfg["head_dim"] == 64
    assert cfg["rope_theta"] == 100000.0
    assert cfg["norm_eps"] == pytest.approx(1e-5, rel=1e-6)
    assert cfg["context_length"] == 8192
    assert cfg["vocab_size"] == 49152
    assert cfg["tied_embeddings"] is True
    assert cfg["rope_scaling"]["type"] == "none" and cfg["rope_style"] == "interleaved"
    assert cfg["bos_token_id"] == 1 and cfg["eos_token_ids"] == [2]


def test_bad_arguments_fail_cleanly(tmp_path, repo_root):
    script = repo_root / "scripts" / "make-tiny-model.py"
    r = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--d-model", "64",
                        "--weight-type", "Q4_K"], capture_output=True, text=True)
    assert r.returncode != 0 and "multiple of 256" in r.stderr
    r = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--heads", "4",
                        "--kv-heads", "3"], capture_output=True, text=True)
    assert r.returncode != 0 and "--kv-heads" in r.stderr
