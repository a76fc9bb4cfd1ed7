"""Build hook of tpserve-client: the gRPC stubs are generated at build time from the
repository's proto/ (never checked in), so the package always speaks the server's protocol.

build_py runs grpc_tools.protoc over proto/tpserve/v1/generate.proto into
tpserve_client/_proto/tpserve/v1/ (in the build tree; in the source tree for an editable
install) and rewrites the stubs' absolute import `from tpserve.v1 import generate_pb2` into a
relative one, so that they live inside the package and clash with no top-level `tpserve`.

The proto directory is ../../proto (this file sits in clients/python of the repository);
TPSERVE_PROTO_DIR overrides it, e.g. to build from a copy of this directory alone."""
import os
import pathlib
import re
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO_DIR = pathlib.Path(os.environ.get("TPSERVE_PROTO_DIR", HERE.parent.parent / "proto"))
PROTOS = ["tpserve/v1/generate.proto"]
STUBS = "tpserve_client/_proto"  # relative to the build (or source) root


def _protoc_main():
    try:
        from grpc_tools import protoc
    except ImportError:
        sys.exit("tpserve-client: building needs grpcio-tools (pip install grpcio-tools, or "
                 "build with build isolation so that pip installs it)")
    return protoc


def generate_stubs(out_dir):
    """Writes the stubs under out_dir (= .../tpserve_client/_proto) with an __init__.py in
    every package directory; returns the written paths."""
    for proto in PROTOS:
        if not (PROTO_DIR / proto).is_file():
            sys.exit(f"tpserve-client: {PROTO_DIR / proto} not found; build from the "
                     f"tpserve repository (clients/python) or set TPSERVE_PROTO_DIR")
    protoc = _protoc_main()
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    import grpc_tools  # its bundled google/protobuf/*.proto, should a proto import one

    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    args = ["grpc_tools.protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={out_dir}",
            f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", *PROTOS]
    if protoc.main(args) != 0:
        sys.exit(f"tpserve-client: protoc failed: {' '.join(args)}")
    written = []
    for path in sorted(out_dir.rglob("*_pb2*.py*")):
        text = path.read_text()
        # `from tpserve.v1 import generate_pb2 as x` -> `from . import generate_pb2 as x`
        fixed = re.sub(r"^from tpserve\.v1 import (\w+_pb2)", r"from . import \1", text,
                       flags=re.MULTILINE)
        if fixed != text:
            path.write_text(fixed)
        written.append(path)
    for d in [out_dir, *sorted(p for p in out_dir.rglob("*") if p.is_dir())]:
        init = d / "__init__.py"
        init.touch()
        written.append(init)
    return written


def runtime_requirements():
    """grpcio and protobuf at least as new as the versions the stubs are generated for (the
    stubs refuse older runtimes when imported)."""
    with tempfile.TemporaryDirectory() as tmp:
        generate_stubs(tmp)
        pb2 = next(pathlib.Path(tmp).rglob("generate_pb2.py")).read_text()
        grpc_stub = next(pathlib.Path(tmp).rglob("generate_pb2_grpc.py")).read_text()
    protobuf = re.search(r"^# Protobuf Python Version: ([0-9.]+)", pb2, re.MULTILINE)
    grpcio = re.search(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'", grpc_stub, re.MULTILINE)
    return [f"grpcio>={grpcio.group(1)}" if grpcio else "grpcio",
            f"protobuf>={protobuf.group(1)}" if protobuf else "protobuf"]


class BuildPyWithStubs(build_py):
    """build_py that also generates the gRPC stubs."""

    def run(self):
        super().run()
        root = HERE if self.editable_mode else pathlib.Path(self.build_lib)
        self._stubs = generate_stubs(root / STUBS)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [str(p) for p in
                                                        getattr(self, "_stubs", [])]


setup(cmdclass={"build_py": BuildPyWithStubs}, install_requires=runtime_requirements())
