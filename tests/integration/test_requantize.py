"""scripts/requantize.py on the real model (SmolLM2 Q4_1 -> Q8_0): the benchmarks use it to get
a second weight type on real weights, so the copy must be the same model -- same metadata
(general.file_type aside), same tensor names, order and dims -- with every 2-D weight now Q8_0,
the 1-D norms still F32 and bit-identical, and the dequantised weights within Q8_0's rounding
of the source's. Checked with the gguf package's reader and dequantisation, independently of
the script's own read-back check. Only Q8_0 here: one conversion is ~10 s on two cores."""
import subprocess
import sys

import numpy as np

import gguf

# Q8_0 rounds each value to within half a step (block max / 127) plus the f16 rounding of the
# block scale: ~0.0044 of the largest |weight| at worst. Relative to the tensor's largest |w|.
REL_TOL = 5e-3
LLAMA_FTYPE_MOSTLY_Q8_0 = 7


def _run(repo_root, *args):
    return subprocess.run([sys.executable, str(repo_root / "scripts" / "requantize.py"), *args],
                          capture_output=True, text=True, timeout=300)


def test_q8_0_copy_of_the_real_model(repo_root, smollm_gguf, tmp_path):
    out_path = tmp_path / "smollm-q8_0.gguf"
    r = _run(repo_root, str(smollm_gguf), str(out_path), "--type", "Q8_0")
    assert r.returncode == 0, r.stderr
    print(r.stdout)
    assert "Q8_0:" in r.stdout and "F32:" in r.stdout and "wrote" in r.stdout
    assert not (tmp_path / "smollm-q8_0.gguf.tmp").exists()

    src = gguf.GGUFReader(str(smollm_gguf))
    out = gguf.GGUFReader(str(out_path))

    # Metadata: same keys in the same order, same types and bytes, but general.file_type.
    keys = [k for k in src.fields if not k.startswith("GGUF.")]
    assert [k for k in out.fields if not k.startswith("GGUF.")] == keys
    for key in keys:
        a, b = src.fields[key], out.fields[key]
        assert a.types == b.types, key
        if key == "general.file_type":
            assert b.contents() == LLAMA_FTYPE_MOSTLY_Q8_0
        else:
            assert [bytes(p) for p in a.parts] == [bytes(p) for p in b.parts], key

    # Tensors: names, order and dims as the source; 2-D -> Q8_0, 1-D -> F32; values close.
    assert [t.name for t in out.tensors] == [t.name for t in src.tensors]
    worst = (0.0, "")
    for s, o in zip(src.tensors, out.tensors):
        assert [int(d) for d in o.shape] == [int(d) for d in s.shape], s.name
        ref = gguf.quants.dequantize(s.data, s.tensor_type)
        got = gguf.quants.dequantize(o.data, o.tensor_type)
        assert got.shape == ref.shape, s.name
        if len(s.shape) == 1:
            assert o.tensor_type == gguf.GGMLQuantizationType.F32, s.name
            np.testing.assert_array_equal(got, ref, err_msg=s.name)
            continue
        assert o.tensor_type == gguf.GGMLQuantizationType.Q8_0, s.name
        if s.tensor_type == gguf.GGMLQuantizationType.Q8_0:  # token_embd: copied as is
            np.testing.assert_array_equal(o.data, s.data, err_msg=s.name)
            continue
        scale = float(np.max(np.abs(ref)))
        err = float(np.max(np.abs(got.astype(np.float64) - ref))) / scale
        assert err <= REL_TOL, f"{s.name}: max |diff| {err:.3g} of max |w|"
        if err > worst[0]:
            worst = (err, s.name)
    print(f"worst max|diff|/max|w| {worst[0]:.3g} ({worst[1]})")


def test_bad_arguments_fail_cleanly(repo_root, smollm_gguf, tmp_path):
    r = _run(repo_root, str(smollm_gguf), str(tmp_path / "out.gguf"), "--type", "Q5_K")
    assert r.returncode == 2 and "invalid choice: 'Q5_K'" in r.stderr
    r = _run(repo_root, str(tmp_path / "missing.gguf"), str(tmp_path / "out.gguf"),
             "--type", "Q8_0")
    assert r.returncode == 2 and "does not exist" in r.stderr
    assert not any(tmp_path.iterdir())


def test_first_layers_only_make_a_smaller_model_the_engine_runs(repo_root, smollm_gguf, tmp_path,
                                                                tpserve_bin):
    """--layers K (the GPU check's real-weights model): the real tokenizer and embedding, the
    first K blocks bit for bit, block_count K; and tpserve loads and runs it."""
    out_path = tmp_path / "smollm-l2.gguf"
    r = _run(repo_root, str(smollm_gguf), str(out_path), "--type", "Q4_1", "--layers", "2")
    assert r.returncode == 0, r.stderr
    src = gguf.GGUFReader(str(smollm_gguf))
    out = gguf.GGUFReader(str(out_path))
    assert out.fields["llama.block_count"].contents() == 2
    assert src.fields["llama.block_count"].contents() == 30
    tokens = "tokenizer.ggml.tokens"
    assert [bytes(p) for p in out.fields[tokens].parts] == [bytes(p) for p in src.fields[tokens].parts]
    kept = [t for t in src.tensors if not t.name.startswith("blk.") or int(t.name.split(".")[1]) < 2]
    assert [t.name for t in out.tensors] == [t.name for t in kept]
    assert any(t.name.startswith("blk.1.") for t in out.tensors)
    for s, o in zip(kept, out.tensors):
        if s.tensor_type == gguf.GGMLQuantizationType.Q4_1 or len(s.shape) == 1:
            np.testing.assert_array_equal(o.data, s.data, err_msg=s.name)  # copied as is
        else:
            assert s.name == "token_embd.weight" and o.tensor_type == gguf.GGMLQuantizationType.Q4_1
    assert out_path.stat().st_size < smollm_gguf.stat().st_size * 0.4

    gen = subprocess.run([str(tpserve_bin), "generate", f"--model={out_path}", "--prompt=Paris is",
                          "--max_tokens=4", "--ignore_eos", "--json", "--threads=1"],
                         capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr
    assert gen.stdout.count('"token"') >= 4 or gen.stdout.count("\n") >= 4, gen.stdout


def test_layers_out_of_range_fail_cleanly(repo_root, smollm_gguf, tmp_path):
    for layers in ("0", "31"):
        r = _run(repo_root, str(smollm_gguf), str(tmp_path / "out.gguf"), "--type", "Q4_1",
                 "--layers", layers)
        assert r.returncode == 1 and f"--layers {layers}: the model has 30 blocks" in r.stderr
    assert not any(tmp_path.iterdir())
