"""An independent Python client drives weir's public gRPC API end to end.

The stubs are generated from proto/ at test time (run_test.sh); the cluster is
the real coordinator binary with 2 workers and the EPLB service on the embedded
tiny model, started once for the module and stopped with SIGTERM at the end.
Text is checked against the Hugging Face `tokenizers` library reading the same
models/random/tiny/tokenizer.json, so the client owns an independent reference for
Tokenize and for the streamed text.

Environment (set by run_test.sh and tests/python_env.sh): WEIR_PYGEN_DIR (generated
stubs), WEIR_RUNFILES_ROOT (the weir workspace in the runfiles), PYTHONPATH (tests/, for
weir_cluster), TEST_TMPDIR.

Size: over the 800-line budget on purpose. Every test shares the one cluster this
module starts; split by topic, each file would start (and tokenize against) a cluster
of its own, and the suite would pay that start-up once per file.
"""

import concurrent.futures
import json
import math
import os
import random
import re
import sys
import time
import unittest

sys.path.insert(0, os.environ["WEIR_PYGEN_DIR"])

import grpc  # noqa: E402
import jsonschema  # noqa: E402
import tokenizers  # noqa: E402
import weir_cluster  # noqa: E402
from proto import google_rpc_pb2  # noqa: E402
from proto import health_pb2, health_pb2_grpc  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

MODEL_DIR = weir_cluster.MODEL_DIR

RPC_TIMEOUT_S = 120

INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT
FinishReason = inference_pb2.FinishReason

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"


class Cluster(weir_cluster.Cluster):
    """Ready when Health says weir.v1.Inference is SERVING and GetModelInfo
    answers; `channel` is the test's gRPC channel to it."""

    # Metadata of the readiness call (an API key).
    metadata = ()

    def __init__(self, workers=2, name="coordinator", extra_args=()):
        super().__init__(workers=workers, name=name, extra_args=extra_args)
        self.channel = None

    def ready(self):
        if self.channel is None:
            if self.address is None:
                return False
            self.channel = grpc.insecure_channel(self.address)
        health = health_pb2_grpc.HealthStub(self.channel)
        inference = inference_pb2_grpc.InferenceStub(self.channel)
        try:
            status = health.Check(health_pb2.HealthCheckRequest(service="weir.v1.Inference"),
                                  timeout=2).status
            if status != health_pb2.HealthCheckResponse.SERVING:
                return False
            inference.GetModelInfo(inference_pb2.GetModelInfoRequest(), timeout=10,
                                   metadata=self.metadata)
            return True
        except grpc.RpcError:
            return False

    def close(self):
        if self.channel is not None:
            self.channel.close()


CLUSTER = None
HF = None  # The reference tokenizer.
CONFIG = None  # models/random/tiny/config.json


def setUpModule():
    global CLUSTER, HF, CONFIG
    HF = tokenizers.Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    with open(os.path.join(MODEL_DIR, "config.json")) as f:
        CONFIG = json.load(f)
    CLUSTER = Cluster(workers=2)
    CLUSTER.start()


def tearDownModule():
    CLUSTER.shutdown(expected_children=CLUSTER.workers + 1)


def error_details(error):
    """The google.rpc.Status in a failed call's `grpc-status-details-bin`
    trailer, and its details by short type name ({"ErrorInfo": ...})."""
    types = {"google.rpc.ErrorInfo": google_rpc_pb2.ErrorInfo,
             "google.rpc.RetryInfo": google_rpc_pb2.RetryInfo,
             "google.rpc.BadRequest": google_rpc_pb2.BadRequest}
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = google_rpc_pb2.Status.FromString(value)
            details = {}
            for any_detail in status.details:
                name = any_detail.type_url.rsplit("/", 1)[-1]
                if name in types:
                    details[name.split(".")[-1]] = types[name].FromString(any_detail.value)
            return status, details
    return None, {}


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
        children = weir_cluster.children(CLUSTER.proc.pid)
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

    def test_num_samples(self):
        request = greedy_request(self.prompt("Several samples"), 6, stream=False)
        request.sampling.temperature = 1.0
        request.sampling.seed = 77
        request.sampling.num_samples = 3
        forked_before = self.forked_samples()
        several = self.generate(request)
        # Samples 1 and 2 forked sample 0's prefill (the prompt ran once).
        self.assertEqual(self.forked_samples() - forked_before, 2)
        self.assertEqual(several.kinds, ["accepted", "final", "final", "final"])
        self.assertEqual(sorted(f.sample_index for f in several.finals), [0, 1, 2])
        by_index = {f.sample_index: list(f.full_token_ids) for f in several.finals}
        # Sample i draws with seed + i: it equals a one-sample request with that seed.
        for i in range(3):
            alone = greedy_request(self.prompt("Several samples"), 6, stream=False)
            alone.sampling.temperature = 1.0
            alone.sampling.seed = 77 + i
            self.assertEqual(by_index[i], list(self.generate(alone).final.full_token_ids))
        self.assertEqual(len({tuple(v) for v in by_index.values()}), 3)
        # Streamed: deltas name their sample.
        request.output.stream_tokens = True
        streamed = self.generate(request)
        for i in range(3):
            self.assertEqual([t for d in streamed.deltas if d.sample_index == i
                              for t in d.token_ids], by_index[i])
        request.sampling.num_samples = 17
        with self.assertRaises(grpc.RpcError) as e:
            self.generate(request)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("sampling.num_samples", e.exception.details())

    def forked_samples(self):
        return self.inference.GetServerState(inference_pb2.GetServerStateRequest(),
                                             timeout=RPC_TIMEOUT_S).forked_samples

    def test_logprobs_without_streaming(self):
        prompt = self.prompt("Score this prompt")
        request = greedy_request(prompt, 3, stream=False)
        request.output.top_logprobs = 4
        request.output.prompt_logprobs = 2
        request.output.echo_prompt = True
        request.output.skip_special_tokens = True  # no BOS text
        final = self.generate(request).final
        self.assertEqual(len(final.logprobs), 3)
        for token, entry in zip(final.full_token_ids, final.logprobs):
            self.assertEqual(entry.token_id, token)
            self.assertEqual(entry.rank, 1)  # greedy
            self.assertEqual(len(entry.top), 4)
            self.assertEqual(entry.top[0].token_id, token)
            self.assertAlmostEqual(entry.top[0].logprob, entry.logprob, places=6)
        entries = final.prompt_logprobs.tokens
        self.assertEqual([e.token_id for e in entries], prompt)
        self.assertFalse(entries[0].HasField("rank"))
        for e in entries[1:]:
            self.assertEqual(len(e.top), 2)
            self.assertLessEqual(e.logprob, e.top[0].logprob + 1e-6)
            self.assertGreaterEqual(e.rank, 1)
        self.assertTrue(final.full_text.startswith("Score this prompt"), final.full_text)

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
        # Encoding adds BOS, but an empty text is still an empty prompt.
        cases["text empty"] = inference_pb2.GenerateRequest(text="")
        cases["prompt over max_context_tokens"] = greedy_request([5] * (max_context + 1), 4)
        cases["max_new_tokens 0"] = greedy_request(prompt, 0)
        cases["max_new_tokens 2^32-1"] = greedy_request(prompt, 0xFFFFFFFF)
        cases["max_new_tokens max_context"] = greedy_request(prompt, max_context)
        empty_stop = greedy_request(prompt, 4)
        empty_stop.stop.stop_strings.append("")
        cases["empty stop string"] = empty_stop
        queue_time = greedy_request(prompt, 4)
        queue_time.max_queue_time.seconds = -1
        cases["negative max_queue_time"] = queue_time
        labels = greedy_request(prompt, 4)
        for i in range(10000):
            labels.labels[f"k{i}"] = "v"
        cases["10000 labels"] = labels
        for k in [0, -2]:
            truncate = greedy_request(prompt, 4)
            truncate.truncate_prompt_tokens = k
            cases[f"truncate_prompt_tokens {k}"] = truncate
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

    def test_item_timeout(self):
        batch = inference_pb2.GenerateBatchRequest(batch_id="timeouts")
        # Long enough for the 2-token item on a machine loaded several times
        # over (4 s was not, once), far too short for 60,000 tokens.
        batch.item_timeout.FromMilliseconds(15000)
        batch.defaults.sampling.temperature = 0.0
        batch.defaults.stop.ignore_eos = True
        endless = batch.items.add(custom_id="endless").request
        endless.tokens.ids.extend(self.prompt("A very long answer"))
        endless.stop.max_new_tokens = 60000
        short = batch.items.add(custom_id="short").request
        short.tokens.ids.extend(self.prompt("A short answer"))
        short.stop.max_new_tokens = 2
        started = time.monotonic()
        events = self.run_batch(batch)
        elapsed = time.monotonic() - started
        results = {e.item_result.custom_id: e.item_result for e in events
                   if e.HasField("item_result")}
        late = results["endless"].result.samples[0]
        self.assertEqual(late.reason, inference_pb2.FINISH_REASON_DEADLINE)
        # What it generated before the deadline is kept.
        self.assertGreater(len(late.full_token_ids), 0)
        self.assertLess(len(late.full_token_ids), 60000)
        self.assertEqual(late.usage.completion_tokens, len(late.full_token_ids))
        self.assertEqual(results["short"].result.samples[0].reason,
                         inference_pb2.FINISH_REASON_MAX_TOKENS)
        summary = events[-1].summary.counts
        self.assertEqual((summary.completed, summary.failed), (1, 1))
        self.assertLess(elapsed, 120)  # the deadline, not the 60,000 tokens, ended it
        # The server goes on serving.
        self.assertEqual(len(self.generate(greedy_request([5, 6], 2)).streamed_ids), 2)

        for bad in (-1, 0):
            batch.item_timeout.FromMilliseconds(bad)
            with self.assertRaises(grpc.RpcError) as e:
                self.run_batch(batch)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("item_timeout", e.exception.details())

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


class ValidationTest(ApiTestCase):
    """The fields checked as the proto documents them, and the error details."""

    def model_info(self):
        return self.inference.GetModelInfo(inference_pb2.GetModelInfoRequest(),
                                           timeout=RPC_TIMEOUT_S)

    def expect_invalid(self, request):
        with self.assertRaises(grpc.RpcError) as caught:
            list(self.inference.Generate(request, timeout=RPC_TIMEOUT_S))
        self.assertEqual(caught.exception.code(), INVALID_ARGUMENT, caught.exception.details())
        return caught.exception

    def first_event(self, request):
        """Starts `request`, returns its first event and cancels the call."""
        call = self.inference.Generate(request, timeout=RPC_TIMEOUT_S)
        try:
            return next(call)
        finally:
            call.cancel()

    def test_prompt_and_new_token_limits_are_the_advertised_ones(self):
        info = self.model_info()
        self.assertEqual(info.max_prompt_tokens, info.max_context_tokens - 1)
        self.assertEqual(info.max_new_tokens_limit, info.max_context_tokens - 1)
        self.assertEqual(info.features.max_labels, 16)
        # One token over the advertised prompt limit: PROMPT_TOO_LONG{tokens, limit}.
        error = self.expect_invalid(greedy_request([5] * (info.max_prompt_tokens + 1), 1))
        status, details = error_details(error)
        self.assertIsNotNone(status, "no grpc-status-details-bin")
        self.assertEqual(status.code, INVALID_ARGUMENT.value[0])
        self.assertEqual(details["ErrorInfo"].reason, "PROMPT_TOO_LONG")
        self.assertEqual(details["ErrorInfo"].domain, "weir")
        self.assertEqual(dict(details["ErrorInfo"].metadata),
                         {"tokens": str(info.max_prompt_tokens + 1),
                          "limit": str(info.max_prompt_tokens)})
        # One over max_new_tokens_limit is refused naming the field; the limit passes.
        prompt = self.prompt("limits")
        error = self.expect_invalid(greedy_request(prompt, info.max_new_tokens_limit + 1))
        _, details = error_details(error)
        self.assertEqual([v.field for v in details["BadRequest"].field_violations],
                         ["stop.max_new_tokens"])
        first = self.first_event(greedy_request(prompt, info.max_new_tokens_limit))
        self.assertEqual(first.WhichOneof("event"), "accepted")

    def test_truncate_prompt_tokens(self):
        prompt = self.prompt("Only the last five tokens of this prompt are kept by the server")
        self.assertGreater(len(prompt), 8)
        request = greedy_request(prompt, 6)
        request.truncate_prompt_tokens = 5
        kept = self.generate(request)
        self.assertEqual(kept.accepted[0].prompt_tokens, 5)
        self.assertEqual(kept.final.usage.prompt_tokens, 5)
        self.assertEqual(kept.streamed_ids, self.generate(greedy_request(prompt[-5:], 6)).streamed_ids)
        # -1 (documented in the proto): keep the last max_context - max_new_tokens.
        request.truncate_prompt_tokens = -1
        untouched = self.generate(request)
        self.assertEqual(untouched.final.usage.prompt_tokens, len(prompt))
        info = self.model_info()
        request = greedy_request(prompt, info.max_context_tokens - 4)
        request.truncate_prompt_tokens = -1
        first = self.first_event(request)
        self.assertEqual(first.WhichOneof("event"), "accepted")
        self.assertEqual(first.accepted.prompt_tokens, 4)

    def test_invalid_utf8_is_invalid_argument(self):
        # Raw bytes: text (field 5) = FF FE, which no proto3 client library sends.
        generate = CLUSTER.channel.unary_stream(
            "/weir.v1.Inference/Generate", request_serializer=lambda b: b,
            response_deserializer=inference_pb2.GenerateEvent.FromString)
        with self.assertRaises(grpc.RpcError) as caught:
            list(generate(b"\x2a\x02\xff\xfe", timeout=RPC_TIMEOUT_S))
        self.assertEqual(caught.exception.code(), INVALID_ARGUMENT)
        self.assertIn("invalid UTF-8 in weir.v1.GenerateRequest.text", caught.exception.details())
        _, details = error_details(caught.exception)
        self.assertEqual(details["ErrorInfo"].reason, "INVALID_UTF8")
        self.assertEqual([v.field for v in details["BadRequest"].field_violations], ["text"])
        # Bytes that are no protobuf at all.
        with self.assertRaises(grpc.RpcError) as caught:
            list(generate(b"\xff\xff\xff\xff", timeout=RPC_TIMEOUT_S))
        self.assertEqual(caught.exception.code(), INVALID_ARGUMENT)
        self.assertNotEqual(caught.exception.details(), "")
        # The server keeps serving.
        self.assertEqual(len(self.generate(greedy_request(self.prompt("still"), 2)).streamed_ids), 2)

    def test_admission_reports_occupancy_and_limits(self):
        idle = self.inference.GetServerState(inference_pb2.GetServerStateRequest(),
                                             timeout=RPC_TIMEOUT_S).admission
        self.assertEqual(idle.limit_requests, 4096)  # --max_queued_requests
        self.assertEqual(idle.limit_tokens, 1 << 22)  # --max_queued_prompt_tokens
        prompt = self.prompt("keep the queue busy for a while")
        call = self.inference.Generate(greedy_request(prompt, 400), timeout=RPC_TIMEOUT_S)
        try:
            next(call)  # Accepted: the request is admitted.
            busy = self.inference.GetServerState(inference_pb2.GetServerStateRequest(),
                                                 timeout=RPC_TIMEOUT_S).admission
        finally:
            call.cancel()
        self.assertGreaterEqual(busy.queued_requests, 1)
        self.assertGreaterEqual(busy.queued_tokens, len(prompt))

    def test_batch_item_errors_carry_reasons(self):
        info = self.model_info()
        batch = inference_pb2.GenerateBatchRequest(
            batch_id="reasons", ordering=inference_pb2.BATCH_ORDERING_INPUT_ORDER)
        batch.defaults.sampling.temperature = 0.0
        batch.defaults.stop.max_new_tokens = 3
        batch.defaults.stop.ignore_eos = True
        batch.items.add(custom_id="long").request.tokens.ids.extend(
            [5] * (info.max_prompt_tokens + 1))
        bad_stop = batch.items.add(custom_id="bad_stop").request
        bad_stop.tokens.ids.extend([5, 6])
        bad_stop.stop.stop_strings.append("")
        empty = batch.items.add(custom_id="empty").request
        empty.tokens.ids.extend([5, 6])
        empty.constraint.regex = ""
        batch.items.add(custom_id="ok").request.tokens.ids.extend([5, 6])
        events = list(self.inference.GenerateBatch(batch, timeout=RPC_TIMEOUT_S))
        results = {e.item_result.custom_id: e.item_result for e in events
                   if e.HasField("item_result")}
        self.assertEqual(results["long"].error.reason, "PROMPT_TOO_LONG")
        self.assertEqual(dict(results["long"].error.metadata),
                         {"tokens": str(info.max_prompt_tokens + 1),
                          "limit": str(info.max_prompt_tokens)})
        self.assertEqual(results["bad_stop"].error.code, INVALID_ARGUMENT.value[0])
        self.assertEqual(results["bad_stop"].error.reason, "INVALID_ARGUMENT")
        sample = results["empty"].result.samples[0]
        self.assertEqual(sample.reason, FinishReason.FINISH_REASON_GRAMMAR_TERMINATED)
        self.assertEqual(list(sample.full_token_ids), [])
        self.assertEqual(len(results["ok"].result.samples[0].full_token_ids), 3)


class QueueFullTest(unittest.TestCase):
    """RESOURCE_EXHAUSTED carries RetryInfo: a cluster admitting one request."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster(workers=1, name="queue_full",
                              extra_args=["--max_queued_requests=1", "--eplb=false"])
        cls.cluster.start()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.shutdown()

    def test_full_queue_says_when_to_retry(self):
        inference = inference_pb2_grpc.InferenceStub(self.cluster.channel)
        busy = inference.Generate(greedy_request([5, 6, 7], 1000), timeout=RPC_TIMEOUT_S)
        try:
            next(busy)  # Admitted: the one slot is taken.
            with self.assertRaises(grpc.RpcError) as caught:
                list(inference.Generate(greedy_request([5, 6], 2), timeout=RPC_TIMEOUT_S))
            state = inference.GetServerState(inference_pb2.GetServerStateRequest(),
                                             timeout=RPC_TIMEOUT_S).admission
        finally:
            busy.cancel()
        self.assertEqual(caught.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        status, details = error_details(caught.exception)
        self.assertIsNotNone(status, "no grpc-status-details-bin")
        self.assertIn("RetryInfo", details)
        delay = details["RetryInfo"].retry_delay
        self.assertGreater(delay.seconds + delay.nanos / 1e9, 0)
        self.assertEqual(details["ErrorInfo"].reason, "QUEUE_FULL")
        self.assertEqual((state.queued_requests, state.limit_requests), (1, 1))


def _random_schema(rng, depth=0):
    """A bounded JSON Schema the engine supports (so outputs end quickly)."""
    kinds = ["integer", "boolean", "null", "enum", "string", "pattern", "const"]
    if depth < 2:
        kinds += ["object", "object", "array", "one_of", "any_of", "tagged"]
    kind = rng.choice(kinds)
    if kind == "integer":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 200)}
    if kind in ("boolean", "null"):
        return {"type": kind}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", 1, 2.5, None, True], rng.randint(1, 3))}
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(0, 4)}
    if kind == "pattern":
        return {"type": "string", "pattern": rng.choice(["^[a-z]{1,3}$", "^[0-9]{2}-[A-Z]$"])}
    if kind == "const":
        return {"const": rng.choice(["x", 7, False, "é"])}
    if kind == "object":
        props = {f"p{i}": _random_schema(rng, depth + 1) for i in range(rng.randint(0, 3))}
        required = [p for p in props if rng.random() < 0.6]
        return {"type": "object", "properties": props, "required": required,
                "additionalProperties": False}
    if kind == "array":
        return {"type": "array", "items": _random_schema(rng, depth + 1),
                "maxItems": rng.randint(0, 2)}
    if kind == "one_of":  # disjoint by type
        branches = [{"type": "integer", "minimum": 0, "maximum": 9},
                    {"type": "string", "maxLength": 2}, {"type": "null"}, {"type": "boolean"}]
        return {"oneOf": rng.sample(branches, rng.randint(2, 4))}
    if kind == "tagged":  # disjoint by a required discriminator
        return {"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "boolean"}},
             "required": ["kind", "x"], "additionalProperties": False},
            {"type": "object", "properties": {"kind": {"const": "b"},
                                              "y": _random_schema(rng, depth + 1)},
             "required": ["kind"], "additionalProperties": False}]}
    return {"anyOf": [_random_schema(rng, depth + 1), _random_schema(rng, depth + 1)]}


def _random_regex(rng):
    pieces = ["[a-z]{1,4}", "[0-9]{2}", "(yes|no)", "-", "\\.", "[A-Z]?", "(ab|cd){1,2}",
              "[a-f0-9]{3}", " ", "x*"]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(1, 4)))


class StructuredOutputTest(ApiTestCase):
    def constrained(self, constraint, seed, stream=False, **kwargs):
        request = inference_pb2.GenerateRequest(text="Answer:", constraint=constraint)
        request.sampling.temperature = 1.0
        request.sampling.seed = seed
        request.stop.max_new_tokens = kwargs.get("max_new_tokens", 256)
        request.output.stream_tokens = stream
        return request

    def eos_id(self):
        return CONFIG["eos_token_id"]

    def test_the_eos_that_ends_a_generation_is_not_text(self):
        regex = "[a-z]{1,30}"
        for stream in [False, True]:
            with self.subTest(stream=stream):
                request = self.constrained(inference_pb2.StructuredOutput(regex=regex), 3, stream)
                # Push the EOS as soon as the grammar allows it (after one token).
                request.sampling.logit_bias[self.eos_id()] = 100.0
                out = self.generate(request)
                self.assertEqual(out.final.reason, FinishReason.FINISH_REASON_EOS)
                ids = out.streamed_ids if stream else list(out.final.full_token_ids)
                text = out.streamed_text if stream else out.final.full_text
                self.assertEqual(ids[-1], self.eos_id())
                self.assertNotIn(EOS, text)
                self.assertIsNotNone(re.fullmatch(regex, text), text)
                self.assertEqual(text, HF.decode(ids[:-1], skip_special_tokens=False))
        # Unconstrained too; include_stop_in_output keeps it.
        request = greedy_request(self.prompt("end now"), 8)
        request.stop.ignore_eos = False
        request.sampling.logit_bias[self.eos_id()] = 100.0
        out = self.generate(request)
        self.assertEqual(out.final.reason, FinishReason.FINISH_REASON_EOS)
        self.assertEqual((out.streamed_ids, out.streamed_text), ([self.eos_id()], ""))
        self.assertEqual(out.final.usage.completion_tokens, 1)
        request.stop.include_stop_in_output = True
        self.assertEqual(self.generate(request).streamed_text, EOS)

    def test_constraints_admitting_only_empty_end_without_a_token(self):
        constraints = [inference_pb2.StructuredOutput(regex=""),
                       inference_pb2.StructuredOutput(regex="()"),
                       inference_pb2.StructuredOutput(regex="a{0}"),
                       inference_pb2.StructuredOutput(ebnf='root ::= ""'),
                       inference_pb2.StructuredOutput(
                           choice=inference_pb2.ChoiceList(choices=[""]))]
        for constraint in constraints:
            for stream in [False, True]:
                with self.subTest(constraint=str(constraint).strip(), stream=stream):
                    out = self.generate(self.constrained(constraint, 1, stream))
                    self.assert_well_formed(out)
                    self.assertEqual(out.final.reason,
                                     FinishReason.FINISH_REASON_GRAMMAR_TERMINATED)
                    self.assertEqual(out.streamed_ids, [])
                    self.assertEqual(list(out.final.full_token_ids), [])
                    self.assertEqual(out.final.full_text, "")
                    self.assertEqual(out.final.usage.completion_tokens, 0)

    def test_unenforceable_schemas_are_refused_naming_the_feature(self):
        cases = {
            "oneOf": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
            "const": {"type": "string", "const": 5},
            "multipleOf": {"type": "integer", "multipleOf": 3},
        }
        for feature, schema in cases.items():
            with self.subTest(feature=feature):
                request = self.constrained(
                    inference_pb2.StructuredOutput(json_schema=json.dumps(schema)), 1)
                with self.assertRaises(grpc.RpcError) as caught:
                    list(self.inference.Generate(request, timeout=RPC_TIMEOUT_S))
                self.assertEqual(caught.exception.code(), INVALID_ARGUMENT)
                self.assertIn(feature, caught.exception.details())
                _, details = error_details(caught.exception)
                self.assertEqual(details["ErrorInfo"].reason, "GRAMMAR_INVALID")

    def test_generated_schemas_and_regexes_hold_under_sampling(self):
        """Random constraints, random sampling; every finished output is checked by
        an independent validator (jsonschema, Python re)."""
        rng = random.Random(21)
        jobs = []
        for i in range(40):
            schema = _random_schema(rng)
            jobs.append(("schema", schema, self.constrained(
                inference_pb2.StructuredOutput(json_schema=json.dumps(schema)), 100 + i)))
        for i in range(40):
            regex = _random_regex(rng)
            jobs.append(("regex", regex, self.constrained(
                inference_pb2.StructuredOutput(regex=regex), 200 + i)))

        def run(job):
            return self.generate(job[2]).final

        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            finals = list(pool.map(run, jobs))
        checked = 0
        for (kind, constraint, _), final in zip(jobs, finals):
            if final.reason == FinishReason.FINISH_REASON_MAX_TOKENS:
                continue  # Cut short: not a complete document.
            self.assertIn(final.reason, (FinishReason.FINISH_REASON_EOS,
                                         FinishReason.FINISH_REASON_GRAMMAR_TERMINATED))
            checked += 1
            text = final.full_text
            self.assertNotIn(EOS, text)
            if kind == "regex":
                self.assertIsNotNone(re.fullmatch(constraint, text), f"{constraint!r}: {text!r}")
            else:
                try:
                    jsonschema.validate(json.loads(text), constraint)
                except (ValueError, jsonschema.ValidationError) as e:
                    self.fail(f"{json.dumps(constraint)}: {text!r}: {e}")
        reasons = [FinishReason.Name(f.reason) for f in finals]
        print(f"constrained outputs: {checked}/{len(jobs)} complete and valid; "
              f"{reasons.count('FINISH_REASON_EOS')} ended by EOS, "
              f"{reasons.count('FINISH_REASON_GRAMMAR_TERMINATED')} by the grammar", file=sys.stderr)
        self.assertGreaterEqual(checked, len(jobs) // 2)


class KeyedCluster(Cluster):
    """A cluster started with --api_key: ready once health (open) says SERVING and
    GetModelInfo answers with the key."""

    KEY = "weir-test-key-7f3a"
    metadata = (("authorization", "Bearer " + KEY),)


class ApiKeyTest(unittest.TestCase):
    """--api_key on gRPC, seen from grpcio: public calls need "authorization: Bearer
    <key>"; health stays open (the orchestrator's probes)."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = KeyedCluster(workers=1, name="api_key",
                                   extra_args=["--api_key=" + KeyedCluster.KEY, "--eplb=false",
                                               "--http_open_health_and_metrics"])
        cls.cluster.start()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.shutdown()

    def call(self, metadata):
        inference = inference_pb2_grpc.InferenceStub(self.cluster.channel)
        return list(inference.Generate(greedy_request([5, 6, 7], 4), timeout=RPC_TIMEOUT_S,
                                       metadata=metadata))

    def test_the_right_key_generates(self):
        events = self.call([("authorization", "Bearer " + KeyedCluster.KEY)])
        tokens = [t for e in events if e.HasField("delta") for t in e.delta.token_ids]
        self.assertEqual(len(tokens), 4)

    def test_no_key_or_a_wrong_one_is_unauthenticated(self):
        for metadata in ([], [("authorization", "Bearer wrong")],
                         [("authorization", KeyedCluster.KEY)],  # no "Bearer "
                         [("authorization", "Bearer " + KeyedCluster.KEY + "x")]):
            with self.subTest(metadata=metadata):
                with self.assertRaises(grpc.RpcError) as caught:
                    self.call(metadata)
                self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        # Unary public calls too.
        inference = inference_pb2_grpc.InferenceStub(self.cluster.channel)
        with self.assertRaises(grpc.RpcError) as caught:
            inference.GetServerState(inference_pb2.GetServerStateRequest(), timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    def test_health_stays_open(self):
        health = health_pb2_grpc.HealthStub(self.cluster.channel)
        status = health.Check(health_pb2.HealthCheckRequest(service="weir.v1.Inference"),
                              timeout=10).status
        self.assertEqual(status, health_pb2.HealthCheckResponse.SERVING)


if __name__ == "__main__":
    unittest.main()
