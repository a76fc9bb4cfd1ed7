"""The gRPC stubs generated at install time from proto/tpserve/v1/generate.proto (see
setup.py); absent in a source checkout that was never built."""
try:
    from ._proto.tpserve.v1 import generate_pb2 as pb
    from ._proto.tpserve.v1 import generate_pb2_grpc as pb_grpc
except ImportError as e:  # pragma: no cover - only in an unbuilt source tree
    raise ImportError(
        "tpserve_client's gRPC stubs are missing: they are generated when the package is "
        "installed (pip install clients/python, or pip install -e clients/python)") from e

__all__ = ["pb", "pb_grpc"]
