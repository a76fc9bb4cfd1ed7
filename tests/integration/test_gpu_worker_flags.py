"""GPU worker options on a machine without a GPU: bad --devices / --comm / --tp combinations
are refused with a message naming the flag, a CPU worker refuses an NCCL Init, and a worker
started with --device whose GPU is absent fails the Init with a reason and keeps serving."""

import subprocess
import threading

import grpc
import pytest

from tpserve.v1 import worker_pb2, worker_pb2_grpc
from conftest import SMOLLM
from worker_procs import free_port, stop, wait_healthy


@pytest.mark.parametrize("flags, message", [
    (["--comm=mpi"], "--comm: 'mpi' is not auto, shm, gloo or nccl"),
    (["--devices=0,x"], "--devices: 'x' is not a GPU ordinal"),
    (["--tp=2", "--devices=0"], "--devices lists 1 GPUs for --tp 2"),
])
def test_serve_refuses_bad_gpu_flags(tpserve_bin, smollm_gguf, flags, message):
    proc = subprocess.run([str(tpserve_bin), "serve", f"--model={smollm_gguf}", "--port=0",
                           *flags], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert message in proc.stderr


def _init_session(address, model, backend):
    """Opens a Session, sends Init for a world of one and returns the first reply and the
    stream's final status code."""
    with grpc.insecure_channel(address) as channel:
        stub = worker_pb2_grpc.WorkerStub(channel)
        init = worker_pb2.CoordinatorMessage()
        init.init.model_path = str(model)
        init.init.rank = 0
        init.init.world_size = 1
        init.init.backend = backend
        answered = threading.Event()

        def messages():  # Init, then the stream stays open until the worker answers: a
            yield init   # closed stream is a coordinator gone, whose world is abandoned
            answered.wait(60)

        replies = stub.Session(messages(), timeout=60)
        first = None
        code = grpc.StatusCode.OK
        try:
            for reply in replies:
                first = first or reply
                answered.set()
        except grpc.RpcError as e:
            code = e.code()
        answered.set()
        return first, code


@pytest.fixture
def worker(tpserve_bin, request):
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([str(tpserve_bin), "worker", f"--listen={address}",
                             f"--model_root={SMOLLM.parent}",
                             *getattr(request, "param", [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(address)
        yield address, proc
    finally:
        stop([proc])


def test_cpu_worker_refuses_an_nccl_init(worker, smollm_gguf):
    address, _ = worker
    reply, code = _init_session(address, smollm_gguf, worker_pb2.COMM_BACKEND_NCCL)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "COMM_BACKEND_NCCL needs a GPU worker (start it with --device N)" in reply.error


@pytest.mark.parametrize("worker", [["--device=0"]], indirect=True)
def test_gpu_worker_without_a_gpu_fails_init_and_keeps_serving(worker, smollm_gguf):
    address, proc = worker
    reply, _ = _init_session(address, smollm_gguf, worker_pb2.COMM_BACKEND_GLOO)
    # A CUDA build finds no GPU (no driver or no device); a CPU-only build has no backend.
    assert reply is not None and reply.error, reply
    assert any(s in reply.error for s in ("no usable GPU", "visible GPUs",
                                          "this build has no CUDA backend")), reply.error
    assert proc.poll() is None  # no crash
    wait_healthy(address)
