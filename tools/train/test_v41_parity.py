"""Parity of v41.py with the official reference: tests/golden/tiny/ref_fp32.safetensors.

The golden run drove the reference's `model.py` over 39 tokens as a 23-token prefill and
16 teacher-forced decode steps, with DSpark drafting after every decode step. Causal
attention over the full sequence equals that incremental run, so one full forward of
V41Model (numerics "reference") must reproduce every stored tensor:

    tools/bazel run //tools:gen_model -- --config=$PWD/models/random/tiny/config.json \
        --out=/tmp/weir_tiny_seed1 --seed=1
    python tools/train/test_v41_parity.py [-v]     # WEIR_TINY_CKPT overrides the directory

Skips (exit 0, with a message) when torch or the checkpoint is missing.
"""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(os.path.dirname(HERE))
GOLDEN = os.path.join(REPO, "tests", "golden", "tiny", "ref_fp32.safetensors")
CKPT = os.environ.get("WEIR_TINY_CKPT", os.path.join(tempfile.gettempdir(), "weir_tiny_seed1"))
GOLDEN_SHA256 = "6018033d481d5b5fd01e6ceb597a81f65e17f9ed4533d600dc310b1b49999290"

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

LOGIT_TOL = 1e-4  # max |diff| on logits (fp32 rounding level; measured ~2e-6)
REL_TOL = 1e-5    # max |diff| / max |ref| per row for hidden states and logits


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


class ParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if torch is None:
            raise unittest.SkipTest("torch is not installed")
        shard = os.path.join(CKPT, "model-00001-of-00001.safetensors")
        if not os.path.exists(shard):
            raise unittest.SkipTest(f"no tiny checkpoint at {CKPT}: run tools/bazel run //tools:gen_model "
                                    "-- --config=$PWD/models/random/tiny/config.json --out=<dir> --seed=1 "
                                    "and set WEIR_TINY_CKPT=<dir>")
        import hashlib
        with open(shard, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != GOLDEN_SHA256:
                raise unittest.SkipTest(f"{shard} is not the checkpoint the golden data was made from")
        import export
        from safetensors_io import read_safetensors
        torch.set_num_threads(int(os.environ.get("WEIR_TORCH_THREADS", "1")))
        cls.model, _ = export.import_checkpoint(CKPT)
        cls.model.set_numerics("reference")
        cls.model.eval()
        raw, _ = read_safetensors(GOLDEN)
        cls.g = {k: v.to_torch() for k, v in raw.items()}
        cls.ids = cls.g["input_ids"].long().unsqueeze(0)
        cls.n_prefill = cls.g["prefill.logits"].shape[0]
        with torch.no_grad():
            cls.out = cls.model(cls.ids, want_block_out=True)
        cls.report = {}

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "report", None):
            print("\nparity (max |diff|, max |diff| / max |ref|):", file=sys.stderr)
            for k, v in cls.report.items():
                print(f"  {k}: {v}", file=sys.stderr)

    def test_logits(self):
        ref = torch.cat([self.g["prefill.logits"], self.g["decode.logits"]])
        got = self.out.logits[0]
        diff = (got - ref).abs().max().item()
        rows = ((got - ref).abs().amax(-1) / ref.abs().amax(-1)).max().item()
        agree = (got.argmax(-1) == ref.argmax(-1)).sum().item()
        self.report["logits"] = f"{diff:.3g}, worst row {rows:.3g}, argmax {agree}/{ref.shape[0]}"
        self.assertLess(diff, LOGIT_TOL)
        self.assertLess(rows, REL_TOL)
        self.assertEqual(agree, ref.shape[0])
        n = self.n_prefill
        self.assertEqual(got[n - 1].argmax().item(), self.g["prefill.next_id"].item())
        self.assertTrue(torch.equal(got[n:].argmax(-1).int(), self.g["decode.next_ids"]))

    def test_main_hidden(self):
        ref = torch.cat([self.g["prefill.main_hidden"], self.g["decode.main_hidden"]])
        got = self.out.main_hidden[0]
        self.report["main_hidden"] = f"{(got - ref).abs().max().item():.3g}, {_rel(got, ref):.3g}"
        self.assertLess(_rel(got, ref), REL_TOL)

    def test_block_out(self):
        got = torch.stack([x[0] for x in self.out.block_out])  # [L, S, n, d]
        ref = self.g["prefill.block_out_last"]
        worst = _rel(got[:, self.n_prefill - 1], ref)
        for i, step in enumerate(self.g["decode.block_out_steps"].tolist()):
            worst = max(worst, _rel(got[:, self.n_prefill + step], self.g["decode.block_out"][i]))
        self.report["block_out"] = f"{worst:.3g} (relative)"
        self.assertLess(worst, REL_TOL)

    def test_gate_ids(self):
        got = torch.stack([r.indices[0] for r in self.out.routers]).int()  # [L, S, k]
        n = self.n_prefill
        self.assertTrue(torch.equal(got[:, :n], self.g["prefill.gate_ids"]))
        self.assertTrue(torch.equal(got[:, n:].permute(1, 0, 2), self.g["decode.gate_ids"]))
        self.report["gate_ids"] = "identical"

    def _sets(self, rows, offset):
        return [sorted(v - offset for v in r if v >= 0) for r in rows.tolist()]

    def test_topk_idxs(self):
        sources = sorted(self.out.indexer)
        n = self.n_prefill
        W = self.model.c.window_size
        for j, layer in enumerate(sources):
            got = self.out.indexer[layer].topk[0]
            pre = self._sets(self.g["prefill.topk_idxs"][j], n)
            dec = self._sets(self.g["decode.topk_idxs"][:, j], W)
            self.assertEqual(self._sets(got[:n], 0), pre, f"prefill top-k of layer {layer}")
            self.assertEqual(self._sets(got[n:], 0), dec, f"decode top-k of layer {layer}")
        self.report["topk_idxs"] = f"identical sets for index sources {sources}"

    def test_engram_hash(self):
        got = self.model.hasher(self.ids)[0]
        self.assertTrue(torch.equal(got, self.g["engram.hash_ids"]))
        self.report["engram.hash_ids"] = "identical"

    def test_dspark(self):
        n = self.n_prefill
        steps = self.g["decode.next_ids"].shape[0]
        anchors = torch.arange(n, n + steps).unsqueeze(0)
        first = self.g["decode.next_ids"].long().unsqueeze(0)
        with torch.no_grad():
            ids, logits, conf = self.model.dspark_draft(self.out.main_hidden, anchors, first)
        self.assertTrue(torch.equal(ids[0].int(), self.g["dspark.draft_ids"]))
        ref_conf = self.g["dspark.confidence"]
        cdiff = (conf[0] - ref_conf).abs().max().item()
        self.assertLess(cdiff, 1e-3 * max(1.0, ref_conf.abs().max().item()))
        worst, ldiff = 0.0, 0.0
        for i, step in enumerate(self.g["dspark.logits_steps"].tolist()):
            ref = self.g["dspark.logits"][i]
            worst = max(worst, _rel(logits[0, step], ref))
            ldiff = max(ldiff, (logits[0, step] - ref).abs().max().item())
        self.report["dspark"] = (f"draft ids identical; logits {ldiff:.3g} (rel {worst:.3g}); "
                                 f"confidence {cdiff:.3g}")
        self.assertLess(ldiff, LOGIT_TOL)
        self.assertLess(worst, REL_TOL)


if __name__ == "__main__":
    unittest.main()
