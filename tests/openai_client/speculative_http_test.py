"""Speculative decoding seen through the OpenAI-compatible HTTP API, with the official
`openai` Python client.

Two real clusters (coordinator, 1 worker, EPLB) on the trained tiny (models/tiny,
whose DSpark stages are trained, so drafts are accepted) serve the same greedy
completions, one with --speculative=off and one with --speculative=dspark: the texts
and token counts must be equal (speculation is lossless), the speculative cluster
must report accepted drafts in usage.completion_tokens_details.
accepted_prediction_tokens (never more than the completion's tokens, never fewer
than zero) and the drafts verification rejected in rejected_prediction_tokens,
and the plain one must report none of either. A streamed completion's final
usage chunk (stream_options.include_usage) carries the same counts as the
non-streamed one.

Environment (set by run_test.sh through tests/python_env.sh): WEIR_RUNFILES_ROOT,
PYTHONPATH (tests/, for weir_cluster), TEST_TMPDIR.
"""

import os
import unittest
import urllib.request

import openai
import weir_cluster

TRAINED_TINY = os.path.join(weir_cluster.ROOT, "models", "tiny")
REQUEST_TIMEOUT_S = 120

# Held-out-like text the trained tiny continues with accepted drafts (its corpus is
# software documentation).
PROMPTS = [
    "This program is free software; you can redistribute it",
    "To install the package, run the following command:",
    "The function returns a pointer to the first element of",
    "See the GNU General Public License for more details.",
]


class HttpCluster(weir_cluster.Cluster):
    def __init__(self, name, speculative):
        super().__init__(workers=1, name=name, extra_args=[
            f"--model_dir={TRAINED_TINY}",
            f"--speculative={speculative}",
            # every draft verified: the test wants accepted drafts reported
            "--verify_length=fixed",
            "--http_listen=127.0.0.1:0",
        ])

    def ready(self):
        if self.http is None:
            return False
        try:
            with urllib.request.urlopen(f"http://{self.http}/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False


def connect(cluster):
    """An `openai` client of `cluster` and the model it serves."""
    client = openai.OpenAI(base_url=f"http://{cluster.http}/v1", api_key="unused",
                           timeout=REQUEST_TIMEOUT_S, max_retries=0)
    return client, client.models.list().data[0].id


def complete_all(client, model):
    """Greedy completions of PROMPTS (32 tokens each, EOS ignored): a list of
    (text, completion_tokens, accepted_prediction_tokens, rejected_prediction_tokens)."""
    out = []
    for prompt in PROMPTS:
        r = client.completions.create(model=model, prompt=prompt, max_tokens=32,
                                      temperature=0, extra_body={"ignore_eos": True})
        details = r.usage.completion_tokens_details
        accepted = details.accepted_prediction_tokens if details is not None else None
        rejected = details.rejected_prediction_tokens if details is not None else None
        out.append((r.choices[0].text, r.usage.completion_tokens, accepted, rejected))
    return out


def streamed_usage(client, model, prompt):
    text, usage = "", None
    for chunk in client.completions.create(model=model, prompt=prompt, max_tokens=32,
                                           temperature=0, stream=True,
                                           stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True}):
        for choice in chunk.choices:
            text += choice.text
        if chunk.usage is not None:
            usage = chunk.usage
    return text, usage


class SpeculativeHttpTest(unittest.TestCase):
    def test_speculation_is_lossless_and_reports_accepted_drafts(self):
        results = {}
        for speculative in ("off", "dspark"):
            cluster = HttpCluster(f"coordinator_{speculative}", speculative)
            cluster.start()
            try:
                client, model = connect(cluster)
                results[speculative] = complete_all(client, model)
                if speculative == "dspark":
                    stream_text, stream_usage = streamed_usage(client, model, PROMPTS[0])
            finally:
                cluster.stop()
        off, on = results["off"], results["dspark"]
        for i, prompt in enumerate(PROMPTS):
            with self.subTest(prompt=prompt):
                self.assertEqual(on[i][0], off[i][0], "speculation changed the greedy text")
                self.assertEqual(on[i][1], off[i][1])
                self.assertEqual(off[i][1], 32)
                self.assertEqual(off[i][2], 0, "accepted drafts reported with speculation off")
                self.assertEqual(off[i][3], 0, "rejected drafts reported with speculation off")
                self.assertIsNotNone(on[i][3])
                self.assertGreaterEqual(on[i][3], 0)
                self.assertIsNotNone(on[i][2])
                self.assertGreaterEqual(on[i][2], 0)
                self.assertLessEqual(on[i][2], on[i][1])
        accepted = sum(r[2] for r in on)
        rejected = sum(r[3] for r in on)
        total = sum(r[1] for r in on)
        print(f"accepted drafts: {accepted} of {total} completion tokens over "
              f"{len(PROMPTS)} greedy completions; {rejected} drafts rejected")
        self.assertGreater(rejected, 0, "no draft was rejected (DSpark's stages are weak)")
        self.assertGreater(accepted, 0, "no draft was accepted on the trained tiny")
        # Streaming: the final usage chunk carries the same counts.
        self.assertEqual(stream_text, on[0][0])
        self.assertIsNotNone(stream_usage)
        self.assertEqual(stream_usage.completion_tokens, on[0][1])
        self.assertEqual(stream_usage.completion_tokens_details.accepted_prediction_tokens,
                         on[0][2])
        self.assertEqual(stream_usage.completion_tokens_details.rejected_prediction_tokens,
                         on[0][3])


if __name__ == "__main__":
    unittest.main()
