"""Each side of a Session validates what its peer sends (issue 14's hostile messages).

A "coordinator" test client holding a valid cluster certificate (mutual TLS with a CA made by
`openssl` in the test: authenticated, so only validation stands between it and the worker)
sends a standalone `tpserve worker` every hostile Init and, on a session it built properly,
every hostile Step and StepMasks: each gets an error naming the field, and the worker stays up and keeps
serving the same session. A fake worker (a Python gRPC server)
answers Ready and then steps with ids outside the vocabulary: `tpserve generate --workers`
and `tpserve coordinator` refuse its step with a message, the coordinator fails the request
after three refused steps, and it stays up."""
import math
import queue
import subprocess
import threading
from concurrent import futures

import grpc
import pytest

import pki
import serve_procs
from tpserve.v1 import generate_pb2, generate_pb2_grpc, worker_pb2, worker_pb2_grpc
from worker_procs import free_port, stop, wait_healthy

VOCAB = 49152  # SmolLM2


class Session:
    """One Session on a worker, driven message by message; over TLS with `credentials`
    (grpc.ChannelCredentials), plaintext without."""

    def __init__(self, address, credentials=None):
        self._channel = (grpc.insecure_channel(address) if credentials is None
                         else grpc.secure_channel(address, credentials))
        self._out = queue.Queue()
        self._replies = worker_pb2_grpc.WorkerStub(self._channel).Session(
            iter(self._out.get, None), timeout=120)

    def send(self, **fields):
        self._out.put(worker_pb2.CoordinatorMessage(**fields))

    def reply(self):
        return next(self._replies)

    def close(self):
        self._out.put(None)
        self._channel.close()


@pytest.fixture(scope="module")
def worker(tpserve_bin, smollm_gguf, tmp_path_factory):
    """A worker with cluster credentials, and the credentials of a "coordinator" its CA
    signed: (address, process, grpc.ChannelCredentials)."""
    d = tmp_path_factory.mktemp("peer_pki")
    ca = pki.make_ca(d, "ca")
    worker_key, worker_cert = pki.make_cert(d, "worker", ca, pki.SERVER_EXT)
    client_key, client_cert = pki.make_cert(d, "coordinator", ca, pki.CLIENT_EXT)
    credentials = grpc.ssl_channel_credentials(root_certificates=ca[1].read_bytes(),
                                               private_key=client_key.read_bytes(),
                                               certificate_chain=client_cert.read_bytes())
    address = f"127.0.0.1:{free_port()}"
    # --model: models load from its directory only (the default --model_root).
    proc = subprocess.Popen([str(tpserve_bin), "worker", f"--listen={address}",
                             f"--model={smollm_gguf}", f"--cluster_ca_file={ca[1]}",
                             f"--cluster_cert_file={worker_cert}",
                             f"--cluster_key_file={worker_key}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(address, credentials=credentials)
        yield address, proc, credentials
    finally:
        assert stop([proc]) == [0]


def _init(model, **overrides):
    fields = dict(model_path=str(model), rank=0, world_size=1,
                  backend=worker_pb2.COMM_BACKEND_AUTO, kv_budget_bytes=64 << 20, threads=1)
    fields.update(overrides)
    return worker_pb2.Init(**fields)


HOSTILE_INITS = [
    (dict(world_size=0), "world_size must be >= 1"),
    (dict(rank=3, world_size=2), "rank 3 is out of range for world_size 2"),
    (dict(world_size=1 << 20), "world_size 1048576 is above the limit of 1024"),
    (dict(kv_budget_bytes=1 << 62), "kv_budget_bytes 4611686018427387904 is above the limit"),
    (dict(threads=1 << 20), "threads 1048576 is above the limit of"),
    (dict(kv_block_size=1 << 20), "kv_block_size 1048576 is above the limit of 256"),
    (dict(model_path="/no/such/dir/../model.gguf"),
     "is not a readable model under this worker's --model_root"),
    (dict(model_path="/etc/passwd"), "is not a readable model under this worker's --model_root"),
    (dict(model_path=""), "model_path is empty"),
    # A forged epoch would take the worker over and lock out every later coordinator.
    (dict(coordinator_epoch=(1 << 64) - 1), "coordinator_epoch 18446744073709551615 is later"),
]


@pytest.mark.parametrize("overrides,message", HOSTILE_INITS,
                         ids=[m.split(" ")[0] for _, m in HOSTILE_INITS])
def test_hostile_inits_are_refused_and_the_worker_stays_up(worker, smollm_gguf, overrides,
                                                           message):
    address, proc, credentials = worker
    session = Session(address, credentials)
    try:
        session.send(init=_init(smollm_gguf, **overrides))
        reply = session.reply()
        assert message in reply.error, reply
    finally:
        session.close()
    assert proc.poll() is None
    wait_healthy(address, credentials=credentials)


def _seq(seq_id=1, tokens=(1,), start_pos=0, blocks=(0,), sample=True, **sampling):
    sampling = {"top_p": 1.0, "repetition_penalty": 1.0, **sampling}
    return worker_pb2.StepSequence(
        seq_id=seq_id, token_ids=list(tokens), start_pos=start_pos, block_table=list(blocks),
        sample=sample, sampling=worker_pb2.SamplingParams(**sampling))


HOSTILE_STEPS = [
    ([_seq(start_pos=1 << 31)], "start_pos 2147483648 is above 2147483647"),
    ([_seq(tokens=())], "sequence 0: no tokens"),
    ([_seq(tokens=(VOCAB,))], f"token id {VOCAB} is outside the vocabulary"),
    ([_seq(tokens=(-7,))], "token id -7 is outside the vocabulary"),
    ([_seq(blocks=(1 << 30,))], "KV block 1073741824 is outside"),
    ([_seq(blocks=(0xFFFFFFFF,))], "block_table holds 4294967295"),
    ([_seq(start_pos=40, blocks=(0,))], "block table has 1 blocks"),
    ([_seq(blocks=(0,) * 200000)], "block table has 200000 blocks, more than the cache's"),
    ([_seq(start_pos=100000, blocks=(0,))], "leave the context"),
    ([_seq(tokens=[1] * 600, blocks=list(range(38)))], "a step holds 1 to 512 tokens, got 600"),
    ([_seq(temperature=math.nan)], "sampling: temperature"),
    ([_seq(top_k=-5)], "top_k must be >= 0, got -5"),
    ([_seq(logprobs=10 ** 6)], "logprobs 1000000 is above the limit of 100"),
    ([_seq(repetition_penalty=-1.0)], "repetition_penalty"),
    ([_seq(seq_id=5), _seq(seq_id=5, blocks=(1,))], "seq_id 5 appears twice"),
]


def _mask(*allowed):
    bits = bytearray((VOCAB + 7) // 8)
    for t in allowed:
        bits[t // 8] |= 1 << (t % 8)
    return bytes(bits)


# StepMasks that follow a Step (masks_follow) to rank 0: the masks and what the worker says.
HOSTILE_MASKS = [
    (lambda step_id: worker_pb2.StepMasks(step_id=step_id, masks=[
        worker_pb2.SequenceMask(seq_id=9, allowed_tokens=_mask(5))]),
     "masks[0]: seq_id 9 is not a sampling sequence"),
    (lambda step_id: worker_pb2.StepMasks(step_id=step_id, masks=[
        worker_pb2.SequenceMask(seq_id=1, allowed_tokens=b"\x01" * 7)]),
     "allowed_tokens holds 7 bytes, want 6144"),
    (lambda step_id: worker_pb2.StepMasks(step_id=step_id, masks=[
        worker_pb2.SequenceMask(seq_id=1, allowed_tokens=_mask())]),
     "allowed_tokens allows no token"),
    (lambda step_id: worker_pb2.StepMasks(step_id=step_id, masks=[
        worker_pb2.SequenceMask(seq_id=1, allowed_tokens=_mask(5)),
        worker_pb2.SequenceMask(seq_id=1, allowed_tokens=_mask(5))]),
     "masks[1]: seq_id 1 has a mask at position 0 already"),
    (lambda step_id: worker_pb2.StepMasks(step_id=step_id, masks=[
        worker_pb2.SequenceMask(seq_id=1, allowed_tokens=_mask(5), position=1)]),
     "masks[0]: seq_id 1: position 1 is past its 0 proposals"),
]


def test_hostile_steps_are_refused_on_a_live_session(worker, smollm_gguf):
    address, proc, credentials = worker
    session = Session(address, credentials)
    try:
        session.send(init=_init(smollm_gguf))
        ready = session.reply()
        assert ready.HasField("ready"), ready
        assert ready.ready.vocab_size == VOCAB
        step_id = 0
        for sequences, message in HOSTILE_STEPS:
            step_id += 1
            session.send(step=worker_pb2.Step(step_id=step_id, sequences=sequences))
            result = session.reply().step_result
            assert result.step_id == step_id
            assert message in result.error, (message, result.error)
            assert not result.tokens
        for masks, message in HOSTILE_MASKS:
            step_id += 1
            session.send(step=worker_pb2.Step(step_id=step_id, sequences=[_seq()],
                                              masks_follow=True))
            session.send(step_masks=masks(step_id))
            result = session.reply().step_result
            assert message in result.error, (message, result.error)
            assert not result.tokens
        # Good masks bind the sample: the one token allowed is drawn.
        step_id += 1
        session.send(step=worker_pb2.Step(step_id=step_id, sequences=[_seq()],
                                          masks_follow=True))
        session.send(step_masks=worker_pb2.StepMasks(step_id=step_id, masks=[
            worker_pb2.SequenceMask(seq_id=1, allowed_tokens=_mask(4242))]))
        result = session.reply().step_result
        assert not result.error, result.error
        assert [t.token_id for t in result.tokens] == [4242]
        # The same session still serves a good step: greedy, with two alternatives.
        session.send(step=worker_pb2.Step(step_id=step_id + 1, sequences=[
            _seq(tokens=(1, 504, 3458), blocks=(0,), logprobs=2)]))
        result = session.reply().step_result
        assert not result.error, result.error
        assert len(result.tokens) == 1 and 0 <= result.tokens[0].token_id < VOCAB
        assert len(result.tokens[0].top_token_ids) == 2
    finally:
        session.close()
    assert proc.poll() is None
    wait_healthy(address, credentials=credentials)


class FakeWorker(worker_pb2_grpc.WorkerServicer):
    """Answers Init with a plausible Ready, then every Step with `token_id` for each sampled
    sequence (and a top list of out-of-range ids when logprobs were asked for)."""

    def __init__(self, token_id, kv_blocks=256):
        self.token_id = token_id
        self.kv_blocks = kv_blocks
        self.steps = 0
        self.lock = threading.Lock()

    def Session(self, requests, context):
        for message in requests:
            if message.HasField("init"):
                yield worker_pb2.WorkerMessage(ready=worker_pb2.Ready(
                    kv_blocks=self.kv_blocks, weight_bytes=1, kv_bytes=1, vocab_size=VOCAB,
                    comm_backend="gloo", threads=1))
            elif message.HasField("step"):
                with self.lock:
                    self.steps += 1
                result = worker_pb2.StepResult(step_id=message.step.step_id)
                for seq in message.step.sequences:
                    if seq.sample:
                        result.tokens.add(seq_id=seq.seq_id, token_id=self.token_id,
                                          top_token_ids=[VOCAB + 1] * min(
                                              seq.sampling.logprobs, 1),
                                          top_logprobs=[-1.0] * min(seq.sampling.logprobs, 1))
                yield worker_pb2.WorkerMessage(step_result=result)
            elif message.HasField("shutdown"):
                return


def _serve_fake(fake):
    """(address, server) of `fake` served on loopback."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    worker_pb2_grpc.add_WorkerServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return f"127.0.0.1:{port}", server


@pytest.fixture
def fake_worker():
    fake = FakeWorker(token_id=10 ** 6)
    address, server = _serve_fake(fake)
    yield address, fake
    server.stop(grace=None)


def test_generate_refuses_a_ready_with_more_kv_blocks_than_the_budget(tpserve_bin, smollm_gguf):
    """A Ready claiming 2^32-1 blocks would have the coordinator allocate ~100 GB of block
    bookkeeping: it is refused against the KV budget the coordinator sent, with a message."""
    fake = FakeWorker(token_id=1, kv_blocks=0xFFFFFFFF)
    address, server = _serve_fake(fake)
    try:
        out = subprocess.run([str(tpserve_bin), "generate", f"--model={smollm_gguf}",
                              "--prompt=hello", "--max_tokens=4", f"--workers={address}"],
                             capture_output=True, text=True, timeout=120)
    finally:
        server.stop(grace=None)
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])  # an error, not a signal
    assert "Ready: kv_blocks 4294967295 exceeds" in out.stderr, out.stderr[-2000:]
    assert fake.steps == 0


def test_generate_refuses_a_fake_workers_out_of_range_ids(tpserve_bin, smollm_gguf,
                                                           fake_worker):
    address, fake = fake_worker
    out = subprocess.run([str(tpserve_bin), "generate", f"--model={smollm_gguf}",
                          "--prompt=hello", "--max_tokens=4", "--logprobs=2",
                          f"--workers={address}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])  # an error, not a signal
    assert "token_id 1000000 is outside the vocabulary [0, 49152)" in out.stderr, \
        out.stderr[-2000:]
    assert fake.steps >= 1


def test_coordinator_refuses_a_fake_workers_step_and_stays_up(tpserve_bin, smollm_gguf,
                                                              fake_worker):
    address, fake = fake_worker
    port = free_port()
    proc = subprocess.Popen([str(tpserve_bin), "coordinator", f"--model={smollm_gguf}",
                             f"--workers={address}", f"--port={port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(f"127.0.0.1:{port}", timeout_s=60)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = generate_pb2_grpc.GenerationStub(channel)
            request = generate_pb2.GenerateRequest(prompt="hello", max_tokens=4, logprobs=2)
            with pytest.raises(grpc.RpcError) as refused:
                for _ in stub.Generate(request, timeout=60):
                    pass
            # Its steps refused each time, the request is failed after six in a row (no
            # endless loop of rebuilds), with the reason.
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "the workers failed 6 steps of this request" in refused.value.details()
            assert "token_id 1000000 is outside the vocabulary" in refused.value.details()
        assert fake.steps == 6
        assert proc.poll() is None, "the coordinator died"
        wait_healthy(f"127.0.0.1:{port}", timeout_s=10)
    finally:
        stop([proc])
    log = proc.stderr.read()
    assert "token_id 1000000 is outside the vocabulary [0, 49152)" in log, log[-3000:]


def test_worker_port_serves_no_reflection_and_refuses_compressed_messages(tpserve_bin,
                                                                          smollm_gguf):
    """A plaintext worker (loopback, no cluster credentials) does not describe its services,
    and refuses a compressed message before inflating it (gRPC checks the 64 MiB receive
    limit only after inflating)."""
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([str(tpserve_bin), "worker", f"--listen={address}",
                             f"--model={smollm_gguf}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(address)
        with pytest.raises(grpc.RpcError) as no_reflection:
            serve_procs.list_services(address)
        assert no_reflection.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with grpc.insecure_channel(address) as channel:
            stream = worker_pb2_grpc.WorkerStub(channel).Session(
                iter([worker_pb2.CoordinatorMessage(init=_init(smollm_gguf))]), timeout=30,
                compression=grpc.Compression.Gzip)
            with pytest.raises(grpc.RpcError) as compressed:
                list(stream)
        assert compressed.value.code() == grpc.StatusCode.UNIMPLEMENTED, compressed.value
        assert proc.poll() is None
    finally:
        assert stop([proc]) == [0]
