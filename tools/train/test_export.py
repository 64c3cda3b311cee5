"""Checkpoint import/export tests (tools/train/export.py).

    python tools/train/test_export.py [-v]

* round trip of the generator's checkpoint (WEIR_TINY_CKPT, default <tmp>/weir_tiny_seed1;
  skipped when absent): import -> export -> import gives identical values, the index and
  config files are byte-identical, FP8 / BF16 / F32 tensors byte-identical (MXFP4 blocks
  may re-encode with a halved scale and doubled codes: same values);
* a randomly initialised model (as after training): import(export(m)) holds exactly the
  stored-form values of m, so m's "qat" forward equals the re-imported model's
  "reference" forward bit for bit;
* both exports pass the project's checker when it is built
  (tools/bazel build //tools:checkpoint_check; WEIR_CHECKPOINT_CHECK overrides the path).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(os.path.dirname(HERE))
CKPT = os.environ.get("WEIR_TINY_CKPT", os.path.join(tempfile.gettempdir(), "weir_tiny_seed1"))
CHECKER = os.environ.get("WEIR_CHECKPOINT_CHECK",
                         os.path.join(REPO, "bazel-bin", "tools", "checkpoint_check"))

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def _files(d):
    return sorted(f for f in os.listdir(d))


class ExportTest(unittest.TestCase):
    def setUp(self):
        if torch is None:
            self.skipTest("torch is not installed")
        torch.set_num_threads(int(os.environ.get("WEIR_TORCH_THREADS", "1")))
        self.tmp = tempfile.mkdtemp(prefix="weir_export_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, d):
        if not os.path.exists(CHECKER):
            print(f"\n(no {CHECKER}: checkpoint_check skipped)", file=sys.stderr)
            return
        r = subprocess.run([CHECKER, f"--dir={d}"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        print("\n" + (r.stdout + r.stderr).strip().splitlines()[-1], file=sys.stderr)

    def test_round_trip_of_generated_checkpoint(self):
        if not os.path.exists(os.path.join(CKPT, "config.json")):
            self.skipTest(f"no checkpoint at {CKPT} (tools/bazel run //tools:gen_model -- "
                          "--config=$PWD/models/random/tiny/config.json --out=<dir> --seed=1)")
        import export
        from safetensors_io import read_safetensors
        a, report = export.import_checkpoint(CKPT)
        self.assertEqual(report["unexpected"], [])
        out = os.path.join(self.tmp, "rt")
        export.export_checkpoint(a, out)
        self.assertEqual(_files(out), _files(CKPT))
        for name in ("config.json", export.INDEX_NAME):
            with open(os.path.join(out, name), "rb") as f, open(os.path.join(CKPT, name), "rb") as g:
                self.assertEqual(f.read(), g.read(), name)
        b, _ = export.import_checkpoint(out)
        sa, sb = a.state_dict(), b.state_dict()
        self.assertEqual(sorted(sa), sorted(sb))
        for k in sa:
            self.assertTrue(torch.equal(sa[k], sb[k]), k)
        shard = [f for f in _files(out) if f.endswith(".safetensors")][0]
        ra, _ = read_safetensors(os.path.join(CKPT, shard))
        rb, _ = read_safetensors(os.path.join(out, shard))
        self.assertEqual(list(ra), list(rb))
        for k in ra:
            if ".experts." not in k:  # all but the MXFP4 experts: the same bytes
                self.assertTrue(torch.equal(ra[k].data, rb[k].data), k)
        self.check(out)

    def test_trained_model_exports_its_stored_form(self):
        import export
        from v41 import V41Model
        from v41_config import V41Config
        cfg = V41Config.load(os.path.join(REPO, "models", "random", "tiny", "config.json"))
        torch.manual_seed(0)
        m = V41Model(cfg)
        with torch.no_grad():  # give every tensor non-trivial values, as training would
            for name, p in m.named_parameters():
                p.add_(torch.randn_like(p) * 0.02)
            for layer in list(m.layers) + list(m.mtp):
                layer.ffn.gate.bias.uniform_(-0.05, 0.05)
        with open(os.path.join(REPO, "models", "random", "tiny", "config.json")) as f:
            m.config_text = f.read()
        out = os.path.join(self.tmp, "trained")
        export.export_checkpoint(m, out)
        b, report = export.import_checkpoint(out)
        self.assertEqual(report["unexpected"], [])
        m.set_numerics("qat")
        b.set_numerics("qat")
        sa, sb = m.state_dict(), b.state_dict()
        with torch.no_grad():  # re-imported values are the stored form of m's values
            for name, fmt, shape in export.checkpoint_params(cfg):
                k = export.state_key(name, fmt)
                want = export.decode_param(export.encode_param(sa[k].view(shape), fmt, cfg), fmt, cfg)
                self.assertTrue(torch.equal(sb[k].view(shape), want), k)
        ids = torch.randint(0, cfg.vocab_size, (2, 21))
        with torch.no_grad():
            la, lb = m(ids).logits, b(ids).logits
        self.assertTrue(torch.equal(la, lb), (la - lb).abs().max().item())
        self.check(out)


if __name__ == "__main__":
    unittest.main()
