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


def test_an_unusable_temporary_directory_is_a_clear_error(tmp_path, tpserve_bin, smollm_gguf):
    """The workers' port files go under the temporary directory the environment names (TMPDIR,
    TMP, TEMP, TEMPDIR): one that does not exist ends serve with that said, not an abort
    (`TEMP=0`, a shell variable of that name, used to crash it in std::filesystem)."""
    import os
    for var in ("TMPDIR", "TEMP"):
        env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "TMP", "TEMP", "TEMPDIR")}
        env[var] = str(tmp_path / "missing")
        out = subprocess.run([str(tpserve_bin), "serve", f"--model={smollm_gguf}", "--tp=2",
                              "--port=0"], capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 1, (var, out.returncode, out.stderr[-3000:])
        assert "the temporary directory for the workers' files" in out.stderr, out.stderr[-3000:]
