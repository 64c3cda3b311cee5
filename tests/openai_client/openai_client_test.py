"""The official `openai` Python client drives weir's OpenAI-compatible HTTP server.

The cluster is the real coordinator binary with 2 workers and the EPLB service on
the embedded tiny model (random weights), started once for the module with an API
key (from --api_key_file) and a small HTTP body limit, and stopped with SIGTERM at
the end. Prompt token counts are checked against the Hugging Face `tokenizers`
library reading the same tokenizer.json; /metrics is read with prometheus_client's
text parser; json_schema output is validated with `jsonschema`.

Environment (set by run_test.sh through tests/python_env.sh): WEIR_RUNFILES_ROOT (the
weir workspace in the runfiles), PYTHONPATH (tests/, for weir_cluster), TEST_TMPDIR.
"""

import json
import math
import os
import time
import unittest
import urllib.error
import urllib.request

import jsonschema
import openai
import tokenizers
import weir_cluster
from prometheus_client.parser import text_string_to_metric_families

TMP = weir_cluster.TMP
MODEL_DIR = weir_cluster.MODEL_DIR

REQUEST_TIMEOUT_S = 120

API_KEY = "weir-test-key"
MAX_BODY_BYTES = 1 << 20

BOS = "<｜begin▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"


class Cluster(weir_cluster.Cluster):
    """2 workers and EPLB, serving HTTP with an API key; ready on GET /ready."""

    def __init__(self):
        key_file = os.path.join(TMP, "api_key")
        with open(key_file, "w") as f:
            f.write(API_KEY + "\n")
        super().__init__(workers=2, extra_args=[
            "--http_listen=127.0.0.1:0",
            f"--api_key_file={key_file}",
            f"--http_max_body_bytes={MAX_BODY_BYTES}",
        ])

    def ready(self):
        return self.http is not None and http_get("/ready")[0] == 200


CLUSTER = None
HF = None  # The reference tokenizer.


def http_request(method, path, body=None, headers=None):
    """(status, body bytes) of a plain HTTP request to the cluster."""
    request = urllib.request.Request(f"http://{CLUSTER.http}{path}", data=body, method=method,
                                     headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError):
        return None, b""


def http_get(path, headers=None):
    return http_request("GET", path, headers=headers)


def scrape():
    """/metrics as {(sample name, frozenset(labels)): value}, via prometheus_client."""
    status, body = http_get("/metrics")
    assert status == 200, status
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def sample(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def setUpModule():
    global CLUSTER, HF
    HF = tokenizers.Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    CLUSTER = Cluster()
    CLUSTER.start()


def tearDownModule():
    CLUSTER.shutdown(expected_children=CLUSTER.workers + 1)


def client(api_key=API_KEY):
    return openai.OpenAI(base_url=f"http://{CLUSTER.http}/v1", api_key=api_key, max_retries=0,
                         timeout=REQUEST_TIMEOUT_S)


class OpenAiClientTest(unittest.TestCase):
    def setUp(self):
        self.client = client()

    def complete(self, **kwargs):
        kwargs.setdefault("model", "tiny")
        return self.client.completions.create(**kwargs)

    def chat(self, **kwargs):
        kwargs.setdefault("model", "tiny")
        kwargs.setdefault("messages", [{"role": "user", "content": "Hi"}])
        return self.client.chat.completions.create(**kwargs)

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], ["tiny"])
        self.assertEqual(self.client.models.retrieve("tiny").id, "tiny")
        with self.assertRaises(openai.NotFoundError):
            self.client.models.retrieve("gpt-4")

    def test_completion_and_its_stream_agree(self):
        prompt = "The quick brown fox"
        full = self.complete(prompt=prompt, max_tokens=8, temperature=0,
                             extra_body={"ignore_eos": True})
        self.assertEqual(full.object, "text_completion")
        self.assertEqual(len(full.choices), 1)
        self.assertEqual(full.choices[0].finish_reason, "length")
        self.assertEqual(full.usage.completion_tokens, 8)
        self.assertEqual(full.usage.prompt_tokens, len(HF.encode(prompt).ids))
        self.assertEqual(full.usage.total_tokens, full.usage.prompt_tokens + 8)
        self.assertTrue(full.choices[0].text)

        chunks = list(self.complete(prompt=prompt, max_tokens=8, temperature=0, stream=True,
                                    stream_options={"include_usage": True},
                                    extra_body={"ignore_eos": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        self.assertEqual(text, full.choices[0].text)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        self.assertEqual(finishes[-1], "length")
        self.assertTrue(all(f is None for f in finishes[:-1]))
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 8)
        self.assertEqual(chunks[-1].usage.prompt_tokens, full.usage.prompt_tokens)
        # Without include_usage no chunk carries usage.
        plain = list(self.complete(prompt=prompt, max_tokens=3, temperature=0, stream=True))
        self.assertTrue(all(c.usage is None for c in plain))

    def test_several_prompts_and_token_prompts(self):
        one = self.complete(prompt="alpha", max_tokens=4, temperature=0).choices[0].text
        two = self.complete(prompt="beta", max_tokens=4, temperature=0).choices[0].text
        both = self.complete(prompt=["alpha", "beta"], max_tokens=4, temperature=0)
        self.assertEqual([c.index for c in both.choices], [0, 1])
        self.assertEqual([c.text for c in both.choices], [one, two])
        ids = self.complete(prompt=HF.encode("alpha").ids, max_tokens=4, temperature=0)
        self.assertEqual(ids.choices[0].text, one)
        echoed = self.complete(prompt="alpha", max_tokens=4, temperature=0, echo=True)
        self.assertEqual(echoed.choices[0].text, "alpha" + one)

    def test_n_samples(self):
        prompt = "alpha beta"
        args = dict(max_tokens=8, temperature=1.0, extra_body={"ignore_eos": True})
        both = self.complete(prompt=prompt, n=2, seed=11, **args)
        self.assertEqual([c.index for c in both.choices], [0, 1])
        # Sample i draws with seed + i: each equals a one-sample request.
        one = self.complete(prompt=prompt, seed=11, **args).choices[0].text
        two = self.complete(prompt=prompt, seed=12, **args).choices[0].text
        self.assertEqual([c.text for c in both.choices], [one, two])
        self.assertNotEqual(one, two)
        self.assertEqual(both.usage.completion_tokens, 16)
        self.assertEqual(both.usage.prompt_tokens, len(HF.encode(prompt).ids))
        # Streamed: each choice's chunks add up to its text, one finish each.
        texts, finishes = {}, {}
        for chunk in self.complete(prompt=prompt, n=2, seed=11, stream=True, **args):
            for c in chunk.choices:
                texts[c.index] = texts.get(c.index, "") + c.text
                if c.finish_reason is not None:
                    finishes[c.index] = c.finish_reason
        self.assertEqual(texts, {0: one, 1: two})
        self.assertEqual(finishes, {0: "length", 1: "length"})
        # Chat with n=3, several prompts with n=2.
        chat = self.chat(n=3, max_tokens=4, temperature=1.0, seed=5,
                         extra_body={"ignore_eos": True})
        self.assertEqual(len(chat.choices), 3)
        many = self.complete(prompt=["alpha", "beta"], n=2, max_tokens=4, temperature=0)
        self.assertEqual([c.index for c in many.choices], [0, 1, 2, 3])
        self.assertEqual(many.choices[0].text, many.choices[1].text)  # greedy

    def test_logprobs_and_top_logprobs_up_to_20(self):
        # Chat: 20 alternatives per token, most likely first; greedy picks the first.
        out = self.chat(max_tokens=3, temperature=0, logprobs=True, top_logprobs=20,
                        extra_body={"ignore_eos": True})
        content = out.choices[0].logprobs.content
        self.assertEqual(len(content), 3)
        for item in content:
            values = [t.logprob for t in item.top_logprobs]
            self.assertEqual(len(values), 20)
            self.assertEqual(values, sorted(values, reverse=True))
            self.assertAlmostEqual(item.logprob, values[0], places=5)
            self.assertLessEqual(sum(math.exp(v) for v in values), 1.0 + 1e-4)
        # Streamed, the same entries arrive chunk by chunk.
        streamed = [c.choices[0].logprobs.content
                    for c in self.chat(max_tokens=3, temperature=0, logprobs=True,
                                       top_logprobs=20, stream=True,
                                       extra_body={"ignore_eos": True})
                    if c.choices and c.choices[0].logprobs is not None]
        flat = [item for items in streamed for item in items]
        self.assertEqual([i.logprob for i in flat], [i.logprob for i in content])
        # Completions: `logprobs` = k alternatives; the sampled token's logprob is
        # never above the most likely one.
        seeded = self.complete(prompt="alpha beta", max_tokens=4, temperature=1.0, seed=3,
                               logprobs=5, extra_body={"ignore_eos": True})
        lp = seeded.choices[0].logprobs
        self.assertEqual(len(lp.token_logprobs), 4)
        for logprob, top in zip(lp.token_logprobs, lp.top_logprobs):
            self.assertGreaterEqual(len(top), 1)
            self.assertLessEqual(len(top), 5)
            self.assertLessEqual(logprob, max(top.values()) + 1e-6)

    def test_echo_with_logprobs_scores_the_prompt(self):
        # What lm-evaluation-harness sends: echo + logprobs + max_tokens 1.
        prompt = "alpha beta gamma delta"
        ids = HF.encode(prompt).ids
        echo = self.complete(prompt=prompt, max_tokens=1, temperature=0, logprobs=3, echo=True,
                             extra_body={"ignore_eos": True})
        lp = echo.choices[0].logprobs
        self.assertEqual(echo.usage.prompt_tokens, len(ids))
        self.assertEqual(len(lp.tokens), len(ids) + 1)
        self.assertTrue(echo.choices[0].text.startswith(prompt))
        # Nothing precedes the first prompt token.
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertEqual(lp.text_offset[0], 0)
        for p in range(1, len(ids) + 1):
            self.assertLessEqual(lp.token_logprobs[p], 0.0)
            self.assertLessEqual(lp.token_logprobs[p], max(lp.top_logprobs[p].values()) + 1e-6)
        # Position p's entry is the distribution after ids[:p]: the same as the
        # first generated token's alternatives for the prompt ids[:p].
        for p in (1, len(ids) // 2, len(ids) - 1):
            alone = self.complete(prompt=ids[:p], max_tokens=1, temperature=0, logprobs=3,
                                  extra_body={"ignore_eos": True})
            top = alone.choices[0].logprobs.top_logprobs[0]
            self.assertEqual(set(top), set(lp.top_logprobs[p]), f"position {p}")
            for token, value in top.items():
                self.assertAlmostEqual(value, lp.top_logprobs[p][token], places=4,
                                       msg=f"position {p}")
        # The generated token after the prompt is scored like any completion.
        plain = self.complete(prompt=prompt, max_tokens=1, temperature=0, logprobs=3,
                              extra_body={"ignore_eos": True})
        self.assertAlmostEqual(lp.token_logprobs[-1], plain.choices[0].logprobs.token_logprobs[0],
                               places=4)

    def test_chat_and_its_stream_agree(self):
        messages = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hello there"}]
        full = self.chat(messages=messages, max_tokens=6, temperature=0,
                         extra_body={"ignore_eos": True})
        self.assertEqual(full.object, "chat.completion")
        self.assertEqual(full.choices[0].message.role, "assistant")
        self.assertEqual(full.choices[0].finish_reason, "length")
        self.assertEqual(full.usage.completion_tokens, 6)
        # The DeepSeek chat template, encoded as transformers does (no extra BOS).
        rendered = f"{BOS}Be brief.{USER}Hello there{ASSISTANT}</think>"
        self.assertEqual(full.usage.prompt_tokens,
                         len(HF.encode(rendered, add_special_tokens=False).ids))

        chunks = list(self.chat(messages=messages, max_tokens=6, temperature=0, stream=True,
                                stream_options={"include_usage": True},
                                extra_body={"ignore_eos": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, full.choices[0].message.content)
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices][-1], "length")
        self.assertEqual(chunks[-1].usage.completion_tokens, 6)
        self.assertEqual(len({c.id for c in chunks}), 1)
        self.assertTrue(chunks[0].id.startswith("chatcmpl-"))

    def test_stop_strings(self):
        full = self.complete(prompt="Once upon a time", max_tokens=24, temperature=0,
                             extra_body={"ignore_eos": True}).choices[0].text
        stop = full[len(full) // 2:len(full) // 2 + 3]
        self.assertTrue(stop)
        cut = self.complete(prompt="Once upon a time", max_tokens=24, temperature=0,
                            stop=[stop, "\u2603never"], extra_body={"ignore_eos": True})
        self.assertEqual(cut.choices[0].text, full[:full.find(stop)])
        self.assertEqual(cut.choices[0].finish_reason, "stop")
        streamed = list(self.complete(prompt="Once upon a time", max_tokens=24, temperature=0,
                                      stop=stop, stream=True, extra_body={"ignore_eos": True}))
        self.assertEqual("".join(c.choices[0].text for c in streamed), full[:full.find(stop)])
        self.assertEqual(streamed[-1].choices[0].finish_reason, "stop")

    def test_seeded_sampling_is_repeatable(self):
        def sampled(seed):
            return self.chat(max_tokens=12, temperature=1.0, seed=seed,
                             extra_body={"ignore_eos": True}).choices[0].message.content
        first = sampled(1234)
        self.assertEqual(sampled(1234), first)
        self.assertTrue(any(sampled(s) != first for s in (1, 2, 3)))

    def test_logit_bias_and_top_k_are_honoured(self):
        token = HF.encode("apple", add_special_tokens=False).ids[0]
        out = self.complete(prompt="x", max_tokens=5, temperature=1.0, seed=5,
                            logit_bias={str(token): 100}, extra_body={"ignore_eos": True})
        self.assertEqual(out.choices[0].text, HF.decode([token] * 5))
        # top_k=1 is greedy, whatever the temperature.
        greedy = self.complete(prompt="x", max_tokens=5, temperature=0).choices[0].text
        top1 = self.complete(prompt="x", max_tokens=5, temperature=1.5, seed=9,
                             extra_body={"top_k": 1}).choices[0].text
        self.assertEqual(top1, greedy)

    def test_json_object_parses_and_json_schema_validates(self):
        finished = []
        for seed in range(10):
            out = self.chat(messages=[{"role": "user", "content": "Give JSON"}], max_tokens=64,
                            temperature=1.0, seed=seed, response_format={"type": "json_object"})
            choice = out.choices[0]
            if choice.finish_reason == "stop":
                self.assertIsInstance(json.loads(choice.message.content), dict)
                finished.append(seed)
            else:  # Cut by max_tokens: still an object's prefix.
                self.assertTrue(choice.message.content.startswith("{"))
        self.assertTrue(finished, "no json_object output ended within 64 tokens")

        schema = {"type": "object",
                  "properties": {"name": {"type": "string", "maxLength": 6},
                                 "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                  "required": ["name", "age"], "additionalProperties": False}
        for seed in range(2):
            out = self.chat(messages=[{"role": "user", "content": "Give JSON"}], max_tokens=200,
                            temperature=1.0, seed=seed,
                            response_format={"type": "json_schema",
                                             "json_schema": {"name": "person", "schema": schema,
                                                             "strict": True}})
            self.assertEqual(out.choices[0].finish_reason, "stop")
            jsonschema.validate(json.loads(out.choices[0].message.content), schema)

    def test_bad_requests_get_openai_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.complete(prompt="x", n=17)
        self.assertEqual(e.exception.body["param"], "n")
        with self.assertRaises(openai.BadRequestError) as e:
            self.complete(prompt="x", max_tokens=10 ** 7)
        self.assertEqual(e.exception.body["param"], "max_tokens")
        with self.assertRaises(openai.BadRequestError) as e:
            self.chat(temperature=-1)
        self.assertEqual(e.exception.body["param"], "temperature")
        with self.assertRaises(openai.BadRequestError) as e:
            self.chat(logprobs=True, top_logprobs=21)
        self.assertEqual(e.exception.body["param"], "top_logprobs")
        with self.assertRaises(openai.BadRequestError) as e:
            self.complete(prompt="x", logprobs=21)
        self.assertEqual(e.exception.body["param"], "logprobs")
        with self.assertRaises(openai.BadRequestError) as e:
            self.chat(response_format={"type": "json_schema",
                                       "json_schema": {"name": "x", "schema": {"type": 5}}})
        self.assertEqual(e.exception.body["param"], "response_format")
        with self.assertRaises(openai.BadRequestError) as e:
            self.chat(messages=[{"role": "user", "content": "x"}],
                      tools=[{"type": "function", "function": {"name": "f"}}])
        self.assertEqual(e.exception.body["param"], "tools")
        with self.assertRaises(openai.NotFoundError) as e:
            self.complete(model="gpt-4", prompt="x")
        self.assertEqual(e.exception.body["code"], "model_not_found")

        auth = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
        status, body = http_request("POST", "/v1/completions", b"{not json", auth)
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body)["error"]["code"], "invalid_json")
        big = json.dumps({"prompt": "x" * (MAX_BODY_BYTES + 1)}).encode()
        status, body = http_request("POST", "/v1/completions", big, auth)
        self.assertEqual(status, 413)
        self.assertEqual(json.loads(body)["error"]["code"], "request_too_large")
        # Still healthy and serving.
        self.assertEqual(http_get("/ready")[0], 200)
        self.assertEqual(len(self.complete(prompt="x", max_tokens=1).choices), 1)

    def test_api_key(self):
        with self.assertRaises(openai.AuthenticationError):
            client("wrong-key").models.list()
        with self.assertRaises(openai.AuthenticationError):
            client("wrong-key").completions.create(model="tiny", prompt="x", max_tokens=1)
        status, body = http_get("/v1/models")
        self.assertEqual(status, 401)
        self.assertEqual(json.loads(body)["error"]["code"], "invalid_api_key")
        # Health, readiness and metrics stay open by default.
        self.assertEqual(http_get("/health")[0], 200)
        self.assertEqual(http_get("/metrics")[0], 200)

    def test_metrics_move_with_requests(self):
        before = scrape()
        self.assertEqual(sample(before, "weir_lifecycle", state="ready"), 1)
        self.assertEqual(sample(before, "weir_workers", state="ready"), 2)
        self.complete(prompt="metrics", max_tokens=5, temperature=0,
                      extra_body={"ignore_eos": True})
        list(self.chat(max_tokens=4, temperature=0, stream=True, extra_body={"ignore_eos": True}))
        with self.assertRaises(openai.BadRequestError):
            self.chat(temperature=-1)
        after = scrape()

        def moved(name, **labels):
            return sample(after, name, **labels) - sample(before, name, **labels)

        self.assertGreaterEqual(moved("weir_requests_total", method="Generate", code="OK"), 2)
        self.assertGreaterEqual(
            moved("weir_requests_total", method="Generate", code="INVALID_ARGUMENT"), 1)
        self.assertGreaterEqual(
            moved("weir_request_success_total", finish_reason="max_tokens"), 2)
        self.assertGreaterEqual(moved("weir_generation_tokens_total"), 9)
        self.assertGreaterEqual(moved("weir_prompt_tokens_total"), 2)
        self.assertGreaterEqual(moved("weir_time_to_first_token_seconds_count"), 2)
        self.assertGreaterEqual(moved("weir_e2e_request_latency_seconds_count"), 2)
        self.assertGreaterEqual(moved("weir_inter_token_latency_seconds_count"), 7)
        self.assertGreaterEqual(moved("weir_steps_total"), 9)
        self.assertGreaterEqual(
            moved("weir_http_requests_total", route="/v1/completions", status="200"), 1)
        self.assertGreaterEqual(
            moved("weir_http_requests_total", route="/v1/chat/completions", status="400"), 1)
        self.assertGreater(sample(after, "weir_time_to_first_token_seconds_sum"), 0)
        inf = sample(after, "weir_e2e_request_latency_seconds_bucket", le="+Inf")
        self.assertEqual(inf, sample(after, "weir_e2e_request_latency_seconds_count"))
        for rank in ("0", "1"):
            self.assertIn(("weir_num_requests_waiting", frozenset({("rank", rank)})), after)

    def test_batch_through_files_and_batches(self):
        def line(custom_id, **body):
            body.setdefault("model", "tiny")
            return json.dumps({"custom_id": custom_id, "method": "POST",
                               "url": "/v1/chat/completions", "body": body})

        prompts = {f"q{i}": f"Question {i}" for i in range(3)}
        lines = [line(cid, messages=[{"role": "user", "content": text}], max_tokens=6,
                      temperature=0) for cid, text in prompts.items()]
        # Valid JSON that the engine refuses when the item runs: a per-item error.
        lines.append(line("bad", messages=[{"role": "user", "content": "x"}], max_tokens=2,
                          logit_bias={"99999999": 1}))
        upload = self.client.files.create(file=("batch.jsonl", "\n".join(lines).encode()),
                                          purpose="batch")
        self.assertEqual(upload.purpose, "batch")
        batch = self.client.batches.create(input_file_id=upload.id,
                                           endpoint="/v1/chat/completions",
                                           completion_window="24h", metadata={"run": "test"})
        self.assertEqual(batch.request_counts.total, 4)
        self.assertEqual(batch.metadata, {"run": "test"})
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            self.assertLess(time.monotonic(), deadline, batch)
            time.sleep(0.2)
            batch = self.client.batches.retrieve(batch.id)
        self.assertEqual(batch.status, "completed")
        self.assertEqual(batch.request_counts.completed, 3)
        self.assertEqual(batch.request_counts.failed, 1)
        self.assertIn(batch.id, [b.id for b in self.client.batches.list()])

        outputs = [json.loads(l) for l in
                   self.client.files.content(batch.output_file_id).text.splitlines()]
        self.assertEqual(sorted(o["custom_id"] for o in outputs), sorted(prompts))
        for o in outputs:
            self.assertEqual(o["response"]["status_code"], 200)
            alone = self.chat(messages=[{"role": "user", "content": prompts[o["custom_id"]]}],
                              max_tokens=6, temperature=0)
            body = o["response"]["body"]
            self.assertEqual(body["choices"][0]["message"]["content"],
                             alone.choices[0].message.content)
            self.assertEqual(body["usage"]["prompt_tokens"], alone.usage.prompt_tokens)
        errors = [json.loads(l) for l in
                  self.client.files.content(batch.error_file_id).text.splitlines()]
        self.assertEqual([e["custom_id"] for e in errors], ["bad"])
        self.assertEqual(errors[0]["response"]["status_code"], 400)
        self.assertEqual(errors[0]["response"]["body"]["error"]["param"], "logit_bias")

        # A malformed line refuses the whole batch, naming the line.
        broken = self.client.files.create(file=("broken.jsonl", (lines[0] + "\n{oops").encode()),
                                          purpose="batch")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.batches.create(input_file_id=broken.id, endpoint="/v1/chat/completions",
                                       completion_window="24h")
        self.assertIn("line 2", e.exception.body["message"])
        self.client.files.delete(broken.id)
        with self.assertRaises(openai.NotFoundError):
            self.client.files.retrieve(broken.id)

    def test_batch_line_with_n_holds_every_sample(self):
        # One /v1/completions line with n=3: one output line with three choices,
        # choice i equal to a one-sample request with seed + i.
        args = dict(prompt="alpha beta", max_tokens=8, temperature=1.0, ignore_eos=True)
        line = json.dumps({"custom_id": "n3", "method": "POST", "url": "/v1/completions",
                           "body": dict(model="tiny", n=3, seed=21, **args)})
        upload = self.client.files.create(file=("n.jsonl", line.encode()), purpose="batch")
        batch = self.client.batches.create(input_file_id=upload.id, endpoint="/v1/completions",
                                           completion_window="24h")
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            self.assertLess(time.monotonic(), deadline, batch)
            time.sleep(0.2)
            batch = self.client.batches.retrieve(batch.id)
        self.assertEqual(batch.status, "completed")
        self.assertEqual(batch.request_counts.completed, 1)
        outputs = [json.loads(l) for l in
                   self.client.files.content(batch.output_file_id).text.splitlines()]
        self.assertEqual(len(outputs), 1)
        body = outputs[0]["response"]["body"]
        self.assertEqual([c["index"] for c in body["choices"]], [0, 1, 2])
        alone = [self.complete(prompt="alpha beta", max_tokens=8, temperature=1.0, seed=21 + i,
                               extra_body={"ignore_eos": True})
                 for i in range(3)]
        self.assertEqual([c["text"] for c in body["choices"]],
                         [a.choices[0].text for a in alone])
        self.assertEqual(len(set(c["text"] for c in body["choices"])), 3)
        self.assertEqual(body["usage"]["completion_tokens"], 24)

    def test_closing_a_stream_cancels_its_generation(self):
        before = scrape()
        stream = self.complete(prompt="long", max_tokens=4000, temperature=0, stream=True,
                               extra_body={"ignore_eos": True})
        for i, _ in enumerate(stream):
            if i == 2:
                break
        stream.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = scrape()
            cancelled = (sample(now, "weir_requests_total", method="Generate", code="CANCELLED")
                         - sample(before, "weir_requests_total", method="Generate",
                                  code="CANCELLED"))
            running = sum(sample(now, "weir_num_requests_running", rank=r) for r in ("0", "1"))
            if cancelled >= 1 and running == 0:
                break
            time.sleep(0.1)
        else:
            self.fail("the closed stream's generation was not cancelled")


if __name__ == "__main__":
    unittest.main()
