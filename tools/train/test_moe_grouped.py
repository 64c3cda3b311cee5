"""The grouped MoE of v41.py (dense and sorted-group paths) equals the per-expert loop it
replaced, in float and qat numerics, forward and gradients, to rounding level.

    python tools/train/test_moe_grouped.py
"""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import v41  # noqa: E402
from v41_config import V41Config, layer_roles  # noqa: E402

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "random", "tiny",
                      "config.json")


def loop_moe(moe, x):
    """The former MoE.forward: one expert at a time over its routed rows (the reference)."""
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    _, _, idx, w = moe.gate(x)
    y = torch.zeros_like(x, dtype=torch.float32)
    for e, expert in enumerate(moe.experts):
        rows, slot = torch.where(idx == e)
        if rows.numel():
            y = y.index_add(0, rows, expert(x[rows], w[rows, slot, None]))
    y = y + moe.shared_experts(x)
    load = torch.bincount(idx.flatten(), minlength=len(moe.experts))
    return y.view(shape), load


class GroupedMoETest(unittest.TestCase):
    def check(self, layer, mode, dense_max):
        torch.manual_seed(3)
        c = V41Config.load(CONFIG)
        num = v41.Numerics()
        num.quant = mode != "float"
        moe = v41.MoE(num, c, layer_roles(c)[layer])
        with torch.no_grad():  # routing biases as after some training
            moe.gate.bias.copy_(0.05 * torch.randn_like(moe.gate.bias))
        x = torch.randn(3, 37, c.dim) * 2.0
        params = list(moe.parameters())
        x1 = x.clone().requires_grad_(True)
        y1, load1 = loop_moe(moe, x1)
        g1 = torch.autograd.grad((y1 * torch.cos(y1)).sum(), [x1] + params, allow_unused=True)
        old = v41.MoE.dense_max_experts
        v41.MoE.dense_max_experts = dense_max
        try:
            x2 = x.clone().requires_grad_(True)
            y2, router = moe(x2)
            g2 = torch.autograd.grad((y2 * torch.cos(y2)).sum(), [x2] + params, allow_unused=True)
        finally:
            v41.MoE.dense_max_experts = old
        tag = f"layer {layer} {mode} dense_max {dense_max}"
        self.assertTrue(torch.equal(load1, router.load), tag)
        scale = y1.abs().max().item()
        self.assertLess((y1 - y2).abs().max().item(), 2e-6 * scale, tag)
        names = ["x"] + [n for n, _ in moe.named_parameters()]
        for n, a, b in zip(names, g1, g2):
            a = torch.zeros_like(b) if a is None else a
            b = torch.zeros_like(a) if b is None else b
            tol = 1e-5 * max(a.abs().max().item(), 1e-12)
            self.assertLess((a - b).abs().max().item(), tol, f"{tag}: grad {n}")

    def test_backbone_layer(self):  # 8 experts top-2
        for mode in ("float", "qat"):
            for dense_max in (16, 0):
                self.check(3, mode, dense_max)

    def test_dspark_stage(self):  # 4 experts top-2
        c = V41Config.load(CONFIG)
        for mode in ("float", "qat"):
            for dense_max in (16, 0):
                self.check(c.n_layers, mode, dense_max)


if __name__ == "__main__":
    unittest.main()
