"""`serve` on a model that passes the coordinator's checks (tokenizer, config) but that no
worker can load (here a NaN scale in one block of one tensor) exits non-zero within 10 s and
prints the workers' error, naming the tensor, instead of rebuilding the world forever."""
import shutil
import subprocess
import time

import numpy as np
from gguf import GGUFReader

TENSOR = "blk.0.ffn_down.weight"


def _with_nan_scale(src, dst):
    shutil.copyfile(src, dst)
    tensor = next(t for t in GGUFReader(str(dst)).tensors if t.name == TENSOR)
    with open(dst, "r+b") as f:
        f.seek(tensor.data_offset)  # the first block's f16 scale d (Q4_1, Q8_0, Q4_0 alike)
        f.write(np.array([np.nan], dtype=np.float16).tobytes())


def test_a_model_no_worker_can_load_ends_serve(tmp_path, tpserve_bin, smollm_gguf):
    bad = tmp_path / "bad.gguf"
    _with_nan_scale(smollm_gguf, bad)
    start = time.monotonic()
    out = subprocess.run([str(tpserve_bin), "serve", f"--model={bad}", "--tp=2", "--port=0"],
                         capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert out.returncode == 1, out.stderr[-3000:]
    assert took < 10, f"serve took {took:.1f} s to give up"
    assert "the workers cannot serve the model" in out.stderr, out.stderr[-3000:]
    assert TENSOR in out.stderr and "non-finite" in out.stderr, out.stderr[-3000:]
