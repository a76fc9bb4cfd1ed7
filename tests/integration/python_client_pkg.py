"""clients/python installed the real way for the tests that use it: `pip install --no-deps
--no-build-isolation --target SITE` of a copy of clients/python next to a copy of proto/, so
that its build hook generates the gRPC stubs; then imported from SITE, never from the source
tree."""
import importlib
import shutil
import subprocess
import sys


def install(root, repo_root):
    """Installs tpserve_client under `root` (a fresh directory) and returns the module, SITE
    first on sys.path and any tpserve_client imported before forgotten."""
    src = root / "src"
    shutil.copytree(repo_root / "clients" / "python", src / "clients" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "_proto",
                                                  "__pycache__"))
    shutil.copytree(repo_root / "proto", src / "proto")  # ../../proto of clients/python
    site = root / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--target", str(site),
         str(src / "clients" / "python")],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
    stubs = site / "tpserve_client" / "_proto" / "tpserve" / "v1"
    assert (stubs / "generate_pb2.py").is_file() and (stubs / "generate_pb2_grpc.py").is_file()
    assert "from . import generate_pb2" in (stubs / "generate_pb2_grpc.py").read_text()
    for name in [m for m in sys.modules if m == "tpserve_client" or
                 m.startswith("tpserve_client.")]:
        del sys.modules[name]
    sys.path.insert(0, str(site))
    module = importlib.import_module("tpserve_client")
    module.SITE = site
    return module
