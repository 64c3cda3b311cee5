"""v41.py is causal at every length: the logits of a prefix equal the prefix rows of a longer
sequence's forward — also below the sliding window, where a window of fewer slots than W
once started W - 1 positions back and left a short sequence without its own keys.

    python tools/train/test_v41_causal.py
"""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from v41 import V41Model  # noqa: E402
from v41_config import V41Config  # noqa: E402

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "random", "tiny",
                      "config.json")


class CausalTest(unittest.TestCase):
    def test_prefixes_equal_the_full_rows(self):
        torch.manual_seed(7)
        c = V41Config.load(CONFIG)
        model = V41Model(c).eval()
        model.set_numerics("reference")
        S = 2 * c.window_size + 5  # crosses the window, the index top-k and the pool
        ids = torch.randint(3, c.vocab_size - 1, (1, S))
        with torch.no_grad():
            full = model(ids).logits[0]
            for n in list(range(1, c.window_size + 2)) + [S // 2 + 1, S - 1]:
                part = model(ids[:, :n]).logits[0]
                diff = (full[:n] - part).abs().max().item()
                self.assertLess(diff, 1e-4, f"prefix {n}: {diff}")


if __name__ == "__main__":
    unittest.main()
