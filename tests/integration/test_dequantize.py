"""tpserve's GGUF reader and dequantisation (through tests/tools/gguf_dump) against the
independent reference of the `gguf` Python package (gguf.GGUFReader + gguf.quants)."""
import json
import subprocess

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as Q

REL_TOL = 1e-6
# Tensors per gguf_dump run on the real model: bounds the f32 files on disk at once.
BATCH = 40


def _dump(binary, model, out_dir, tensors=(), rows=None):
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [str(binary("tests", "tools", "gguf_dump")), str(model), str(out_dir)]
    for name in tensors:
        cmd += ["--tensor", name]
    if rows is not None:
        cmd += ["--rows", f"{rows[0]}:{rows[1]}"]
    subprocess.run(cmd, check=True, timeout=120)
    with open(out_dir / "index.json") as f:
        return {e["name"]: e for e in json.load(f)}


def _reference(tensor):
    """[n_rows, row_len] f32 from the gguf package's own dequantisation."""
    ref = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    return np.asarray(ref, dtype=np.float32).reshape(-1, int(tensor.shape[0]))


def _relative_error(ours, ref):
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    diff = float(np.max(np.abs(ours.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
    return diff / scale if scale > 0 else diff


def _compare_file(model, binary, out_dir, names=None):
    """Dumps `names` (all tensors when None) and compares each with the reference; returns the
    worst (relative error, name)."""
    reader = gguf.GGUFReader(str(model))
    tensors = [t for t in reader.tensors if names is None or t.name in names]
    assert tensors
    worst = (0.0, "")
    for i in range(0, len(tensors), BATCH):
        batch = tensors[i:i + BATCH]
        index = _dump(binary, model, out_dir, [t.name for t in batch])
        for t in batch:
            entry = index[t.name]
            assert entry["type"] == t.tensor_type.name
            assert entry["dims"] == [int(d) for d in t.shape]
            path = out_dir / entry["file"]
            ours = np.fromfile(path, dtype="<f4")
            path.unlink()
            ref = _reference(t)
            assert ours.size == ref.size, t.name
            err = _relative_error(ours.reshape(ref.shape), ref)
            assert err <= REL_TOL, f"{t.name} ({t.tensor_type.name}): relative error {err:.3g}"
            if err > worst[0] or not worst[1]:
                worst = (err, t.name)
    return worst


def test_every_tensor_of_the_reference_model(smollm_gguf, binary, tmp_path):
    err, name = _compare_file(smollm_gguf, binary, tmp_path / "smollm")
    print(f"worst relative error {err:.3g} ({name})")


def _random_k_blocks(rng, qtype, n_blocks):
    """Random K-quant super-blocks with finite, sane f16 scales (gguf cannot quantise these)."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    scales = rng.uniform(1e-3, 1e-2, size=(n_blocks, 2)).astype(np.float16).view(np.uint8)
    if qtype == Q.Q6_K:
        blocks[:, 208:210] = scales[:, 0:2]  # d is last in block_q6_K
    else:
        blocks[:, 0:4] = scales  # d, dmin lead block_q4_K / block_q5_K
    return blocks


def _write_generated(path, rng):
    """A GGUF file with one tensor of every supported type; returns the tensor names."""
    writer = gguf.GGUFWriter(str(path), "llama")
    rows, cols = 12, 512
    names = []
    data = rng.standard_normal((rows, cols)).astype(np.float32)
    writer.add_tensor("f32", data)
    writer.add_tensor("f16", gguf.quants.quantize(data, Q.F16))
    writer.add_tensor("f32_3d", rng.standard_normal((2, 3, 64)).astype(np.float32))
    names += ["f32", "f16", "f32_3d"]
    for qtype in (Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1):
        name = qtype.name.lower()
        writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        names.append(name)
    for qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        name = qtype.name.lower()
        blocks = _random_k_blocks(rng, qtype, rows * cols // 256)
        writer.add_tensor(name, blocks.reshape(rows, -1), raw_dtype=qtype)
        names.append(name)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return names


@pytest.fixture
def generated_gguf(tmp_path):
    path = tmp_path / "generated.gguf"
    names = _write_generated(path, np.random.default_rng(1234))
    return path, names


def test_every_type_of_a_generated_file(generated_gguf, binary, tmp_path):
    path, names = generated_gguf
    reader = gguf.GGUFReader(str(path))
    assert {t.tensor_type.name for t in reader.tensors} == {
        "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"}
    err, name = _compare_file(path, binary, tmp_path / "gen")
    print(f"worst relative error {err:.3g} ({name})")


def test_row_ranges_equal_slices_of_the_full_dump(generated_gguf, smollm_gguf, binary, tmp_path):
    path, names = generated_gguf
    full = _dump(binary, path, tmp_path / "full")
    for rows in [(0, 1), (3, 7), (5, 12), (11, 100)]:
        part = _dump(binary, path, tmp_path / f"rows_{rows[0]}_{rows[1]}", rows=rows)
        for name in names:
            whole = np.fromfile(tmp_path / "full" / full[name]["file"], dtype="<f4")
            whole = whole.reshape(-1, full[name]["row_len"])
            got = np.fromfile(tmp_path / f"rows_{rows[0]}_{rows[1]}" / part[name]["file"],
                              dtype="<f4")
            lo, hi = part[name]["rows"]
            assert (lo, hi) == (min(rows[0], whole.shape[0]), min(rows[1], whole.shape[0]))
            np.testing.assert_array_equal(got.reshape(-1, whole.shape[1]), whole[lo:hi],
                                          err_msg=f"{name} rows {rows}")
    # The embedding of the real model (Q8_0, 49152 rows): a slice from the middle.
    emb = "token_embd.weight"
    part = _dump(binary, smollm_gguf, tmp_path / "emb", tensors=[emb], rows=(1000, 1010))
    got = np.fromfile(tmp_path / "emb" / part[emb]["file"], dtype="<f4").reshape(10, -1)
    reader = gguf.GGUFReader(str(smollm_gguf))
    tensor = next(t for t in reader.tensors if t.name == emb)
    ref = gguf.quants.dequantize(tensor.data[1000:1010], tensor.tensor_type)
    np.testing.assert_array_equal(got, ref)


def test_bad_arguments_fail_cleanly(binary, smollm_gguf, tmp_path):
    tool = str(binary("tests", "tools", "gguf_dump"))
    r = subprocess.run([tool, str(smollm_gguf), str(tmp_path), "--tensor", "no.such"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "no tensor named 'no.such'" in r.stderr
    r = subprocess.run([tool, str(smollm_gguf)], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x01\x00\x00\x00" + b"\x00" * 16)
    r = subprocess.run([tool, str(bad), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1 and "unsupported GGUF version 1" in r.stderr
