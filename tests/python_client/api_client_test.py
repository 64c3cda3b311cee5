"""An independent Python client drives weir's public gRPC API end to end.

The stubs are generated from proto/ at test time (run_test.sh); the cluster is
the real coordinator binary with 2 workers and the EPLB service on the embedded
tiny model, started once for the module and stopped with SIGTERM at the end.
Text is checked against the Hugging Face `tokenizers` library reading the same
models/tiny/tokenizer.json, so the client owns an independent reference for
Tokenize and for the streamed text.

Environment (set by run_test.sh): WEIR_PYGEN_DIR (generated stubs),
WEIR_RUNFILES_ROOT (the weir workspace in the runfiles), TEST_TMPDIR.
"""

import concurrent.futures
import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.environ["WEIR_PYGEN_DIR"])

import grpc  # noqa: E402
import tokenizers  # noqa: E402
from proto import health_pb2, health_pb2_grpc  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

ROOT = os.environ["WEIR_RUNFILES_ROOT"]
TMP = os.environ["TEST_TMPDIR"]
MODEL_DIR = os.path.join(ROOT, "models", "tiny")

# Generous: 2 cores shared with other cluster tests.
STARTUP_TIMEOUT_S = 180
RPC_TIMEOUT_S = 120
SHUTDOWN_TIMEOUT_S = 60

INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT
FinishReason = inference_pb2.FinishReason

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"


def _children(pid):
    """Direct children of `pid`, from /proc."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _descendants(pid):
    out = []
    for child in _children(pid):
        out.append(child)
        out.extend(_descendants(child))
    return out


def _die_with_parent():
    """Runs in the child before exec: SIGTERM when this test process dies, so
    a killed test leaves no coordinator behind (its children follow it)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


class Cluster:
    """The coordinator binary as a child process (it spawns workers and EPLB)."""

    def __init__(self, workers=2):
        self.workers = workers
        self.address_file = os.path.join(TMP, "coordinator.addr")
        log_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", TMP)
        self.log_path = os.path.join(log_dir, "coordinator.log")
        self.proc = None
        self.address = None
        self.channel = None

    def log_tail(self, lines=60):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self):
        argv = [
            os.path.join(ROOT, "coordinator", "main"),
            "--listen=127.0.0.1:0",
            f"--address_file={self.address_file}",
            f"--model_dir={MODEL_DIR}",
            f"--model_cache_dir={os.path.join(TMP, 'models')}",
            f"--worker_binary={os.path.join(ROOT, 'worker', 'main')}",
            f"--eplb_binary={os.path.join(ROOT, 'eplb', 'main')}",
            f"--workers={self.workers}",
            f"--startup_timeout_s={STARTUP_TIMEOUT_S}",
        ]
        if os.path.exists(self.address_file):  # A stale address must not be polled.
            os.remove(self.address_file)
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=TMP,
                                     preexec_fn=_die_with_parent)
        log.close()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"coordinator exited with {self.proc.returncode} during "
                                   f"start-up:\n{self.log_tail()}")
            if self.channel is None and os.path.exists(self.address_file):
                with open(self.address_file) as f:
                    address = f.read().strip()
                if address:
                    self.address = address
                    self.channel = grpc.insecure_channel(address)
            if self.channel is not None and self._ready():
                return
            time.sleep(0.1)
        raise RuntimeError(f"cluster not ready in {STARTUP_TIMEOUT_S} s:\n{self.log_tail()}")

    def _ready(self):
        health = health_pb2_grpc.HealthStub(self.channel)
        inference = inference_pb2_grpc.InferenceStub(self.channel)
        try:
            status = health.Check(health_pb2.HealthCheckRequest(service="weir.v1.Inference"),
                                  timeout=2).status
            if status != health_pb2.HealthCheckResponse.SERVING:
                return False
            inference.GetModelInfo(inference_pb2.GetModelInfoRequest(), timeout=10)
            return True
        except grpc.RpcError:
            return False

    def stop(self):
        """SIGTERM; returns (exit code, pids of descendants still alive)."""
        if self.proc is None or self.proc.poll() is not None:
            return (self.proc.returncode if self.proc else None), []
        family = _descendants(self.proc.pid)
        if self.channel is not None:
            self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S
        survivors = [p for p in family if _alive(p)]
        while survivors and time.monotonic() < deadline:
            time.sleep(0.1)
            survivors = [p for p in family if _alive(p)]
        for pid in survivors:  # Do not leak them into the next test.
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return code, survivors


CLUSTER = None
HF = None  # The reference tokenizer.
CONFIG = None  # models/tiny/config.json


def setUpModule():
    global CLUSTER, HF, CONFIG
    HF = tokenizers.Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    with open(os.path.join(MODEL_DIR, "config.json")) as f:
        CONFIG = json.load(f)
    CLUSTER = Cluster(workers=2)
    started = time.monotonic()
    try:
        CLUSTER.start()
    except BaseException:
        CLUSTER.stop()
        raise
    print(f"cluster ready at {CLUSTER.address} in {time.monotonic() - started:.1f} s",
          file=sys.stderr)


def tearDownModule():
    family = _descendants(CLUSTER.proc.pid)
    code, survivors = CLUSTER.stop()
    if code != 0:
        raise AssertionError(f"coordinator exit code {code} after SIGTERM:\n{CLUSTER.log_tail()}")
    if len(family) != CLUSTER.workers + 1:
        raise AssertionError(f"expected {CLUSTER.workers} workers + EPLB under the coordinator, "
                             f"found pids {family}")
    if survivors:
        raise AssertionError(f"processes outlived the coordinator: {survivors}")


def greedy_request(ids, max_new_tokens, stream=True):
    request = inference_pb2.GenerateRequest()
    request.tokens.ids.extend(ids)
    request.sampling.temperature = 0.0
    request.stop.max_new_tokens = max_new_tokens
    request.stop.ignore_eos = True
    request.output.stream_tokens = stream
    return request


class Stream:
    """The events of one Generate call, split by kind."""

    def __init__(self, events):
        self.kinds = [e.WhichOneof("event") for e in events]
        self.accepted = [e.accepted for e in events if e.HasField("accepted")]
        self.deltas = [e.delta for e in events if e.HasField("delta")]
        self.finals = [e.final for e in events if e.HasField("final")]

    @property
    def final(self):
        return self.finals[0]

    @property
    def streamed_ids(self):
        return [t for d in self.deltas for t in d.token_ids]

    @property
    def streamed_text(self):
        return "".join(d.text for d in self.deltas)


class ApiTestCase(unittest.TestCase):
    def setUp(self):
        self.inference = inference_pb2_grpc.InferenceStub(CLUSTER.channel)
        self.health = health_pb2_grpc.HealthStub(CLUSTER.channel)

    def generate(self, request):
        return Stream(list(self.inference.Generate(request, timeout=RPC_TIMEOUT_S)))

    def tokenize_text(self, text, add_special_tokens=True, return_pieces=False):
        return self.inference.Tokenize(
            inference_pb2.TokenizeRequest(text=text, add_special_tokens=add_special_tokens,
                                          return_pieces=return_pieces),
            timeout=RPC_TIMEOUT_S)

    def prompt(self, text):
        return list(self.tokenize_text(text).ids)

    def assert_well_formed(self, stream):
        """Accepted first, then deltas, then exactly one Final, last."""
        self.assertGreater(len(stream.kinds), 0)
        self.assertEqual(stream.kinds[0], "accepted", stream.kinds)
        self.assertEqual(stream.kinds[-1], "final", stream.kinds)
        self.assertEqual(stream.kinds.count("accepted"), 1, stream.kinds)
        self.assertEqual(stream.kinds.count("final"), 1, stream.kinds)
        self.assertEqual(stream.final.sample_index, 0)
        for delta in stream.deltas:
            self.assertEqual(delta.sample_index, 0)


class HealthTest(ApiTestCase):
    def test_check(self):
        serving = health_pb2.HealthCheckResponse.SERVING
        for service in ["", "weir.v1.Inference", "weir.v1.BatchJobs"]:
            with self.subTest(service=service):
                response = self.health.Check(health_pb2.HealthCheckRequest(service=service),
                                             timeout=RPC_TIMEOUT_S)
                self.assertEqual(response.status, serving)

    def test_unknown_service_is_not_found(self):
        with self.assertRaises(grpc.RpcError) as caught:
            self.health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"),
                              timeout=RPC_TIMEOUT_S)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_watch_sends_current_status(self):
        call = self.health.Watch(health_pb2.HealthCheckRequest(service="weir.v1.Inference"),
                                 timeout=RPC_TIMEOUT_S)
        try:
            first = next(call)
        finally:
            call.cancel()
        self.assertEqual(first.status, health_pb2.HealthCheckResponse.SERVING)


class ModelAndStateTest(ApiTestCase):
    def test_model_info_matches_config(self):
        info = self.inference.GetModelInfo(inference_pb2.GetModelInfoRequest(),
                                           timeout=RPC_TIMEOUT_S)
        self.assertEqual(info.name, "tiny")
        self.assertEqual(info.vocab_size, CONFIG["text_config"]["vocab_size"])
        self.assertEqual(list(info.eos_token_ids), [CONFIG["eos_token_id"]])
        self.assertTrue(info.HasField("bos_token_id"))
        self.assertEqual(info.bos_token_id, CONFIG["bos_token_id"])
        self.assertEqual(info.pad_token_id, CONFIG["pad_token_id"])
        self.assertEqual(info.parallelism.dp, CLUSTER.workers)
        self.assertEqual(info.parallelism.num_experts, CONFIG["text_config"]["n_routed_experts"])
        self.assertNotEqual(info.revision, "")
        self.assertGreater(info.features.max_batch_items, 0)
        self.assertGreater(info.max_context_tokens, 0)

    def test_model_info_unknown_model_is_not_found(self):
        with self.assertRaises(grpc.RpcError) as caught:
            self.inference.GetModelInfo(inference_pb2.GetModelInfoRequest(model="no-such-model"),
                                        timeout=RPC_TIMEOUT_S)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_server_state(self):
        before = self.inference.GetServerState(inference_pb2.GetServerStateRequest(),
                                               timeout=RPC_TIMEOUT_S)
        self.assertEqual(before.lifecycle, inference_pb2.LIFECYCLE_READY)
        self.assertEqual(sorted(w.rank for w in before.workers), list(range(CLUSTER.workers)))
        children = _children(CLUSTER.proc.pid)
        for worker in before.workers:
            self.assertEqual(worker.state, inference_pb2.WORKER_STATE_READY, worker)
            self.assertIn(worker.pid, children, "a worker that is not the coordinator's child")
        self.assertNotEqual(before.eplb_address, "")
        # The step loop runs steps for a request.
        self.generate(greedy_request(self.prompt("count the steps"), 3))
        after = self.inference.GetServerState(inference_pb2.GetServerStateRequest(),
                                              timeout=RPC_TIMEOUT_S)
        self.assertGreaterEqual(after.steps, before.steps + 3)


class GenerateTest(ApiTestCase):
    def test_streamed_greedy(self):
        prompt = self.prompt("The quick brown fox jumps over the lazy dog")
        for max_new in [1, 13]:
            with self.subTest(max_new_tokens=max_new):
                stream = self.generate(greedy_request(prompt, max_new))
                self.assert_well_formed(stream)
                self.assertEqual(stream.accepted[0].prompt_tokens, len(prompt))
                self.assertNotEqual(stream.accepted[0].server_request_id, "")
                ids = stream.streamed_ids
                self.assertEqual(len(ids), max_new)
                self.assertTrue(all(t < CONFIG["text_config"]["vocab_size"] for t in ids), ids)
                final = stream.final
                self.assertEqual(final.reason, FinishReason.FINISH_REASON_MAX_TOKENS)
                self.assertEqual(final.usage.prompt_tokens, len(prompt))
                self.assertEqual(final.usage.completion_tokens, max_new)
                self.assertGreater(final.timings.total_ms, 0)
                self.assertGreater(final.timings.ttft_ms, 0)
                self.assertLessEqual(final.timings.ttft_ms, final.timings.total_ms)
                # The streamed text is the detokenized ids (special tokens kept:
                # skip_special_tokens is false by default).
                self.assertEqual(stream.streamed_text, HF.decode(ids, skip_special_tokens=False))

    def test_stream_and_final_agree(self):
        prompt = self.prompt("Streaming and non-streaming must agree.")
        streamed = self.generate(greedy_request(prompt, 10, stream=True))
        whole = self.generate(greedy_request(prompt, 10, stream=False))
        self.assert_well_formed(whole)
        self.assertEqual(whole.deltas, [], "deltas without stream_tokens")
        self.assertEqual(list(whole.final.full_token_ids), streamed.streamed_ids)
        self.assertEqual(whole.final.full_text, streamed.streamed_text)
        self.assertEqual(whole.final.usage.completion_tokens, 10)

    def test_greedy_is_deterministic(self):
        prompt = self.prompt("Determinism: the same greedy request twice.")
        first = self.generate(greedy_request(prompt, 12)).streamed_ids
        second = self.generate(greedy_request(prompt, 12)).streamed_ids
        self.assertEqual(len(first), 12)
        self.assertEqual(first, second)
        # Also when the copies share steps with each other.
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            crowd = list(pool.map(lambda _: self.generate(greedy_request(prompt, 12)).streamed_ids,
                                  range(3)))
        for ids in crowd:
            self.assertEqual(ids, first)

    def test_seeded_sampling_is_reproducible(self):
        request = greedy_request(self.prompt("Seeded sampling"), 10)
        request.sampling.temperature = 1.0
        request.sampling.seed = 1234
        first = self.generate(request)
        second = self.generate(request)
        self.assertEqual(len(first.streamed_ids), 10)
        self.assertEqual(first.streamed_ids, second.streamed_ids)
        self.assertEqual(first.streamed_text, second.streamed_text)

    def test_stop_token(self):
        prompt = self.prompt("Stop at a token")
        full = self.generate(greedy_request(prompt, 16)).streamed_ids
        stop = full[5]
        first = full.index(stop)
        request = greedy_request(prompt, 16)
        request.stop.stop_token_ids.append(stop)
        stream = self.generate(request)
        self.assertEqual(stream.final.reason, FinishReason.FINISH_REASON_STOP_TOKEN)
        self.assertEqual(stream.final.WhichOneof("matched_stop"), "stop_token_id")
        self.assertEqual(stream.final.stop_token_id, stop)
        # The matched stop token is the last id generated.
        self.assertEqual(stream.streamed_ids, full[:first + 1])
        self.assertEqual(stream.final.usage.completion_tokens, first + 1)

    def test_chat_input(self):
        chat = inference_pb2.ChatInput(messages=[
            inference_pb2.ChatMessage(role="user", content="Say hello."),
        ])
        expected = self.inference.Tokenize(inference_pb2.TokenizeRequest(chat=chat),
                                           timeout=RPC_TIMEOUT_S)
        request = inference_pb2.GenerateRequest(chat=chat)
        request.sampling.temperature = 0.0
        request.stop.max_new_tokens = 4
        request.stop.ignore_eos = True
        request.output.stream_tokens = True
        stream = self.generate(request)
        self.assertEqual(stream.accepted[0].prompt_tokens, expected.count)
        self.assertEqual(stream.final.usage.prompt_tokens, expected.count)
        # The same prompt as ids gives the same tokens.
        by_ids = self.generate(greedy_request(list(expected.ids), 4))
        self.assertEqual(stream.streamed_ids, by_ids.streamed_ids)

    def test_invalid_arguments(self):
        vocab = CONFIG["text_config"]["vocab_size"]
        max_context = self.inference.GetModelInfo(inference_pb2.GetModelInfoRequest(),
                                                  timeout=RPC_TIMEOUT_S).max_context_tokens
        prompt = self.prompt("a valid prompt")
        cases = {}
        cases["no input"] = inference_pb2.GenerateRequest()
        empty = greedy_request([], 4)
        empty.tokens.SetInParent()
        cases["empty token list"] = empty
        cases["token id == vocab_size"] = greedy_request([5, vocab], 4)
        cases["token id 0xFFFFFFFF"] = greedy_request([0xFFFFFFFF], 4)
        # Not checked: text "" (api.md lists empty input as INVALID_ARGUMENT, but
        # the server encodes it with BOS and serves a 1-token prompt).
        cases["prompt over max_context_tokens"] = greedy_request([5] * (max_context + 1), 4)
        cases["max_new_tokens 0"] = greedy_request(prompt, 0)
        for field, value in [("temperature", -1.0), ("temperature", math.nan),
                             ("temperature", math.inf), ("top_p", 1.5), ("top_p", 0.0),
                             ("top_k", -1), ("min_p", 2.0), ("repetition_penalty", 0.0),
                             ("presence_penalty", 3.0)]:
            request = greedy_request(prompt, 4)
            setattr(request.sampling, field, value)
            cases[f"{field}={value}"] = request
        too_many_samples = greedy_request(prompt, 4)
        too_many_samples.sampling.num_samples = 1000000
        cases["num_samples 10^6"] = too_many_samples
        bias = greedy_request(prompt, 4)
        bias.sampling.logit_bias[vocab] = 1.0
        cases["logit_bias id == vocab_size"] = bias
        stop_id = greedy_request(prompt, 4)
        stop_id.stop.stop_token_ids.append(vocab)
        cases["stop token id == vocab_size"] = stop_id
        chat = inference_pb2.GenerateRequest()
        chat.chat.messages.add(role="user", content="hi")
        chat.chat.template_kwargs["not_allow_listed"] = "true"
        cases["chat kwarg not allow-listed"] = chat
        for name, request in cases.items():
            with self.subTest(case=name):
                events = []
                with self.assertRaises(grpc.RpcError) as caught:
                    for event in self.inference.Generate(request, timeout=RPC_TIMEOUT_S):
                        events.append(event)
                self.assertEqual(caught.exception.code(), INVALID_ARGUMENT,
                                 caught.exception.details())
                self.assertEqual(events, [], "events before the error")
        # The server keeps serving.
        ok = self.generate(greedy_request(prompt, 2))
        self.assertEqual(len(ok.streamed_ids), 2)

    def test_unknown_model_is_not_found(self):
        request = greedy_request(self.prompt("which model"), 2)
        request.model = "no-such-model"
        with self.assertRaises(grpc.RpcError) as caught:
            list(self.inference.Generate(request, timeout=RPC_TIMEOUT_S))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)


class GenerateBatchTest(ApiTestCase):
    def run_batch(self, batch):
        return list(self.inference.GenerateBatch(batch, timeout=RPC_TIMEOUT_S))

    def test_per_item_error_and_input_order(self):
        vocab = CONFIG["text_config"]["vocab_size"]
        prompt_a = self.prompt("First batch item")
        prompt_c = self.prompt("Third batch item, shorter output")
        batch = inference_pb2.GenerateBatchRequest(
            batch_id="python-client-batch", ordering=inference_pb2.BATCH_ORDERING_INPUT_ORDER)
        batch.defaults.sampling.temperature = 0.0
        batch.defaults.stop.max_new_tokens = 6
        batch.defaults.stop.ignore_eos = True
        batch.items.add(custom_id="a").request.tokens.ids.extend(prompt_a)
        batch.items.add(custom_id="b").request.text = "Hello world"
        batch.items.add(custom_id="bad").request.tokens.ids.extend([5, vocab])
        item_c = batch.items.add(custom_id="c").request
        item_c.tokens.ids.extend(prompt_c)
        item_c.stop.max_new_tokens = 3
        item_c.stop.ignore_eos = True
        events = self.run_batch(batch)

        kinds = [e.WhichOneof("event") for e in events]
        self.assertEqual(kinds[-1], "summary", kinds)
        self.assertEqual(kinds.count("summary"), 1, kinds)
        results = [e.item_result for e in events if e.HasField("item_result")]
        self.assertEqual([r.custom_id for r in results], ["a", "b", "bad", "c"])
        self.assertEqual([r.index for r in results], [0, 1, 2, 3])

        bad = results[2]
        self.assertEqual(bad.WhichOneof("outcome"), "error")
        self.assertEqual(bad.error.code, INVALID_ARGUMENT.value[0])
        self.assertNotEqual(bad.error.message, "")

        expected = {
            "a": (prompt_a, 6),
            "b": (list(HF.encode("Hello world", add_special_tokens=True).ids), 6),
            "c": (prompt_c, 3),
        }
        for result in [results[0], results[1], results[3]]:
            with self.subTest(custom_id=result.custom_id):
                prompt, max_new = expected[result.custom_id]
                self.assertEqual(result.WhichOneof("outcome"), "result", result)
                self.assertEqual(len(result.result.samples), 1)
                sample = result.result.samples[0]
                self.assertEqual(sample.reason, FinishReason.FINISH_REASON_MAX_TOKENS)
                self.assertEqual(len(sample.full_token_ids), max_new)
                self.assertEqual(sample.usage.completion_tokens, max_new)
                self.assertEqual(sample.usage.prompt_tokens, len(prompt))
                self.assertEqual(result.result.accepted.prompt_tokens, len(prompt))
                self.assertEqual(sample.full_text,
                                 HF.decode(list(sample.full_token_ids), skip_special_tokens=False))
                # A batch item generates what a lone Generate does.
                alone = self.generate(greedy_request(prompt, max_new))
                self.assertEqual(list(sample.full_token_ids), alone.streamed_ids)

        counts = events[-1].summary.counts
        self.assertEqual((counts.total, counts.completed, counts.failed, counts.cancelled),
                         (4, 3, 1, 0))

    def test_structural_errors(self):
        prompt = self.prompt("structural")
        duplicate = inference_pb2.GenerateBatchRequest()
        duplicate.defaults.stop.max_new_tokens = 2
        duplicate.items.add(custom_id="x").request.tokens.ids.extend(prompt)
        duplicate.items.add(custom_id="x").request.tokens.ids.extend(prompt)
        no_id = inference_pb2.GenerateBatchRequest()
        no_id.items.add().request.tokens.ids.extend(prompt)
        for name, batch in [("duplicate custom_id", duplicate), ("empty custom_id", no_id),
                            ("no items", inference_pb2.GenerateBatchRequest())]:
            with self.subTest(case=name):
                events = []
                with self.assertRaises(grpc.RpcError) as caught:
                    for event in self.inference.GenerateBatch(batch, timeout=RPC_TIMEOUT_S):
                        events.append(event)
                self.assertEqual(caught.exception.code(), INVALID_ARGUMENT)
                self.assertEqual(events, [])


class TokenizeTest(ApiTestCase):
    TEXTS = [
        "The quick brown fox jumps over the lazy dog.",
        "  leading spaces,\n\nblank lines\tand tabs  ",
        "numbers 1234567 and 3.14159",
        "naïve café, 東京タワー, Ελληνικά, emoji 🙂👍",
        f"special tokens in text: {USER}hi{ASSISTANT}",
    ]

    def test_text_matches_reference(self):
        for text in self.TEXTS:
            for add_special in [False, True]:
                with self.subTest(text=text, add_special_tokens=add_special):
                    got = self.tokenize_text(text, add_special_tokens=add_special)
                    want = HF.encode(text, add_special_tokens=add_special).ids
                    self.assertEqual(list(got.ids), want)
                    self.assertEqual(got.count, len(want))

    def test_bos_only_with_special_tokens(self):
        text = self.TEXTS[0]
        plain = list(self.tokenize_text(text, add_special_tokens=False).ids)
        special = list(self.tokenize_text(text, add_special_tokens=True).ids)
        self.assertEqual(special, [CONFIG["bos_token_id"]] + plain)

    def test_pieces_round_trip(self):
        for text in self.TEXTS:
            with self.subTest(text=text):
                got = self.tokenize_text(text, add_special_tokens=False, return_pieces=True)
                self.assertEqual(len(got.pieces), len(got.ids))
                if "\ufffd" not in "".join(got.pieces):  # No token splits a character.
                    self.assertEqual("".join(got.pieces), text)
                # Decoding the ids gives the text back.
                self.assertEqual(HF.decode(list(got.ids), skip_special_tokens=False), text)
        # An ASCII text never splits a character, so the check above ran.
        ascii_text = self.TEXTS[0]
        got = self.tokenize_text(ascii_text, add_special_tokens=False, return_pieces=True)
        self.assertEqual("".join(got.pieces), ascii_text)

    def tokenize_chat(self, messages, **kwargs):
        chat = inference_pb2.ChatInput(
            messages=[inference_pb2.ChatMessage(role=r, content=c) for r, c in messages])
        for key, value in kwargs.items():
            chat.template_kwargs[key] = value
        return self.inference.Tokenize(inference_pb2.TokenizeRequest(chat=chat),
                                       timeout=RPC_TIMEOUT_S)

    def assert_chat(self, messages, rendered, **kwargs):
        got = self.tokenize_chat(messages, **kwargs)
        want = HF.encode(rendered, add_special_tokens=False).ids
        self.assertEqual(list(got.ids), want, rendered)
        self.assertEqual(got.count, len(want))

    def test_chat_template(self):
        system, user = "You are terse.", "What is 2+2?"
        messages = [("system", system), ("user", user)]
        with self.subTest(mode="default: generation prompt, no thinking"):
            self.assert_chat(messages, f"{BOS}{system}{USER}{user}{ASSISTANT}</think>")
        with self.subTest(mode="thinking"):
            self.assert_chat(messages, f"{BOS}{system}{USER}{user}{ASSISTANT}<think>",
                             thinking="true")
        with self.subTest(mode="no generation prompt"):
            self.assert_chat(messages, f"{BOS}{system}{USER}{user}",
                             add_generation_prompt="false")
        with self.subTest(mode="multi-turn, earlier reasoning dropped"):
            turns = messages + [("assistant", "let me think</think>4"), ("user", "And 3+3?")]
            self.assert_chat(
                turns,
                f"{BOS}{system}{USER}{user}{ASSISTANT}</think>4{EOS}{USER}And 3+3?"
                f"{ASSISTANT}</think>")

    def test_chat_differs_from_plain_text(self):
        got = list(self.tokenize_chat([("user", "hello")]).ids)
        plain = list(self.tokenize_text("hello", add_special_tokens=False).ids)
        self.assertEqual(got[0], CONFIG["bos_token_id"])
        self.assertNotEqual(got, plain)
        # The user text is in there, between the role markers.
        self.assertEqual(got[2:2 + len(plain)], plain)

    def test_bad_requests(self):
        cases = {
            "no input": inference_pb2.TokenizeRequest(),
            "unknown chat role": inference_pb2.TokenizeRequest(chat=inference_pb2.ChatInput(
                messages=[inference_pb2.ChatMessage(role="wizard", content="x")])),
            "empty chat": inference_pb2.TokenizeRequest(chat=inference_pb2.ChatInput()),
            "chat kwarg value": inference_pb2.TokenizeRequest(chat=inference_pb2.ChatInput(
                messages=[inference_pb2.ChatMessage(role="user", content="x")],
                template_kwargs={"thinking": "maybe"})),
        }
        for name, request in cases.items():
            with self.subTest(case=name):
                with self.assertRaises(grpc.RpcError) as caught:
                    self.inference.Tokenize(request, timeout=RPC_TIMEOUT_S)
                self.assertEqual(caught.exception.code(), INVALID_ARGUMENT)


class CancelTest(ApiTestCase):
    def test_unknown_id_is_not_found(self):
        response = self.inference.Cancel(
            inference_pb2.CancelRequest(request_ids=["never-submitted"]), timeout=RPC_TIMEOUT_S)
        self.assertEqual([(r.id, r.outcome) for r in response.results],
                         [("never-submitted", inference_pb2.CancelResponse.OUTCOME_NOT_FOUND)])

    def test_empty_request_is_invalid(self):
        with self.assertRaises(grpc.RpcError) as caught:
            self.inference.Cancel(inference_pb2.CancelRequest(), timeout=RPC_TIMEOUT_S)
        self.assertEqual(caught.exception.code(), INVALID_ARGUMENT)


if __name__ == "__main__":
    unittest.main()
