"""Trains a V4.1-architecture model (the embedded `tiny`) from pre-tokenized text.

    python tools/train/train.py --config models/tiny/config.json \
        --data /path/with/tokens_{train,heldout}.u16 --out RUN_DIR [--max_minutes 9]

Three phases, run in order; every invocation resumes where the last stopped (RUN_DIR/state.pt)
and stops itself before --max_minutes, so a full run is a few short calls:

  backbone  next-token cross-entropy, float numerics. Also: the indexer objective (KL from
            each index source's own attention over the same compressed entries to its
            indexer's distribution, indexer inputs detached so it trains only the indexer),
            MoE routing by the noaux_tc bias update (not a gradient: each step every expert's
            bias moves by --bias_rate toward the mean load) plus a small sequence-wise
            balance loss, as DeepSeek-V3 trains it.
  qat       the same objectives with the stored form in the forward (FP8 / MXFP4 weights,
            quantized activations and KV, straight-through gradients), at a lower rate, so
            the exported FP8/MXFP4 checkpoint is the model that was evaluated.
  dspark    the backbone frozen (qat numerics); the DSpark stages, Markov head and
            confidence head learn spec 4.8's loss: anchors sampled per sequence, block
            [token after the anchor, noise...], 0.1 CE + 0.9 L1(p_draft - p_target) +
            1.0 BCE(confidence, 1 - L1/2), position weight exp(-k/4).

At the end (or with --eval_only) it evaluates on the held-out ids: perplexity (float and
stored-form numerics), the DSpark greedy acceptance at block 5 (drafts checked against the
target's own greedy continuation), and exports the checkpoint in the official layout into
RUN_DIR/export. Results go to RUN_DIR/results.json.
"""

import argparse
import json
import lzma
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import export as E  # noqa: E402
import v41  # noqa: E402
from v41 import V41Model  # noqa: E402
from v41_config import V41Config  # noqa: E402

PHASES = ("backbone", "qat", "dspark")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True, help="directory of tokens_train.u16 / tokens_heldout.u16")
    ap.add_argument("--token_map", default="", help="Engram map json {size, map} (hf_engram.py)")
    ap.add_argument("--out", required=True, help="run directory (state, logs, export)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max_minutes", type=float, default=9.0)
    ap.add_argument("--seq_len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--budget", default="8,2,7",
                    help="minutes per phase (backbone,qat,dspark): a phase's step count is fixed "
                         "from the rate of its first steps and kept in the state")
    ap.add_argument("--steps", default="", help="backbone,qat,dspark steps (instead of --budget)")
    ap.add_argument("--snapshot", default="",
                    help="directory for a small resumable copy (bf16 weights in <16 MB files, "
                         "the phase and step; no optimizer state), written when a call stops "
                         "and read when RUN_DIR/state.pt is missing")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--qat_lr", type=float, default=3e-4)
    ap.add_argument("--dspark_lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight_decay", type=float, default=0.1)
    ap.add_argument("--indexer_weight", type=float, default=1.0)
    ap.add_argument("--balance_weight", type=float, default=1e-4)
    ap.add_argument("--bias_rate", type=float, default=1e-3)
    ap.add_argument("--anchors", type=int, default=32, help="DSpark anchors per sequence (distinct)")
    ap.add_argument("--dspark_warm_start", action=argparse.BooleanOptionalAction, default=True,
                    help="start the DSpark stages from the trained target layers "
                         "(dspark_target_layer_ids) and the final norm (once, at the phase start)")
    ap.add_argument("--dspark_ce_target", choices=("target", "data"), default="target",
                    help="the CE term's token: the target's argmax (DeepSpec trains on target-"
                         "generated text, where the next token is the target's own) or the data's")
    ap.add_argument("--init_checkpoint", default="",
                    help="start from an exported checkpoint (the official layout, e.g. models/tiny) "
                         "at --start_phase instead of from random weights; its stages count as "
                         "warm-started")
    ap.add_argument("--start_phase", choices=PHASES, default="dspark",
                    help="the first phase run after --init_checkpoint")
    ap.add_argument("--dspark_greedy_minutes", type=float, default=0.0,
                    help="at the DSpark phase's start, this long generating a pool of windows "
                         "whose last --dspark_greedy_tokens ids are the target's own greedy "
                         "continuation (stored-form numerics); every --dspark_greedy_every-th "
                         "step then trains on pool windows, anchors inside the continuation")
    ap.add_argument("--dspark_pool", default="",
                    help="pools made beforehand by weir_greedy_pool.py (comma-separated uint16 "
                         "window files, .xz or not, each with its .json beside it), used as "
                         "--dspark_greedy_minutes' pool is; no time is spent generating")
    ap.add_argument("--dspark_greedy_tokens", type=int, default=128)
    ap.add_argument("--dspark_greedy_every", type=int, default=2)
    ap.add_argument("--dspark_greedy_batch", type=int, default=512)
    ap.add_argument("--compile", choices=("off", "sinkhorn", "model"), default="off",
                    help="torch.compile for the training steps: the mHC Sinkhorn only (most of an "
                         "eager step's kernels) or the model's whole forward; falls back to eager, "
                         "with a message, if compiling fails")
    ap.add_argument("--compile_mode", default="default",
                    help="torch.compile mode, e.g. default or max-autotune-no-cudagraphs")
    ap.add_argument("--eval_batches", type=int, default=16)
    ap.add_argument("--accept_windows", type=int, default=64, help="held-out windows for DSpark")
    ap.add_argument("--eval_only", action="store_true")
    ap.add_argument("--log_every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=20261202)
    return ap.parse_args(argv)


class Tokens:
    """Random windows of seq_len + 1 ids from a uint16 file (documents are BOS ... EOS)."""

    def __init__(self, path, seq_len, seed):
        self.ids = np.fromfile(path, dtype="<u2")
        self.seq_len = seq_len
        self.rng = np.random.default_rng(seed)
        if len(self.ids) < seq_len + 2:
            raise ValueError(f"{path}: {len(self.ids)} ids, fewer than a window")

    def batch(self, n, device):
        starts = self.rng.integers(0, len(self.ids) - self.seq_len - 1, size=n)
        rows = np.stack([self.ids[s:s + self.seq_len + 1] for s in starts]).astype(np.int64)
        return torch.from_numpy(rows).to(device)

    def fixed(self, n, device):
        """The same n windows every call (evaluation): evenly spaced through the file."""
        span = len(self.ids) - self.seq_len - 1
        starts = np.linspace(0, span, n, dtype=np.int64)
        rows = np.stack([self.ids[s:s + self.seq_len + 1] for s in starts]).astype(np.int64)
        return torch.from_numpy(rows).to(device)


def gates(model, dspark):
    """The Gate modules of the backbone (or of the DSpark stages)."""
    blocks = model.mtp if dspark else model.layers
    return [b.ffn.gate for b in blocks]


def update_biases(gate_list, routers, rate):
    """noaux_tc: each expert's routing bias moves toward balance by a fixed step."""
    with torch.no_grad():
        for gate, r in zip(gate_list, routers):
            load = r.load.float()
            gate.bias += rate * torch.sign(load.mean() - load)


def balance_loss(routers, n_active):
    """DeepSeek-V3's sequence-wise balance loss: sum_e f_e * P_e per sequence, averaged."""
    total = 0.0
    for r in routers:
        E = r.scores.shape[-1]
        B, S, _ = r.scores.shape
        p = r.scores / (r.scores.sum(-1, keepdim=True) + 1e-20)
        P = p.mean(dim=1)                                                   # [B, E]
        counts = torch.zeros(B, E, device=p.device)
        counts.scatter_add_(1, r.indices.reshape(B, -1), torch.ones_like(r.indices.reshape(B, -1), dtype=torch.float32))
        f = counts * E / (n_active * S)
        total = total + (f * P).sum(-1).mean()
    return total / max(1, len(routers))


def indexer_loss(indexer):
    """Mean over index sources and query rows with visible entries of KL(target || softmax(I))."""
    losses = []
    for out in indexer.values():
        if out.target is None:
            continue
        visible = torch.isfinite(out.scores)
        rows = visible.any(-1)
        logp = torch.log_softmax(out.scores.masked_fill(~visible, -1e30), dim=-1)
        tgt = out.target.masked_fill(~visible, 0.0)
        kl = (torch.xlogy(tgt, tgt) - tgt * logp).masked_fill(~visible, 0.0).sum(-1)
        # mean over rows with visible entries, without a host sync (0 when there are none)
        losses.append((kl * rows).sum() / rows.sum().clamp_min(1))
    return torch.stack(losses).mean() if losses else None


def backbone_step(model, ids, args, fwd=None):
    """fwd: the (maybe compiled) forward to call instead of model. parts are detached
    tensors (read them only when logging: .item() would wait for the GPU every step)."""
    out = (fwd or model)(ids[:, :-1], want_indexer_targets=args.indexer_weight > 0)
    ce = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), ids[:, 1:].reshape(-1))
    loss = ce
    parts = {"ce": ce.detach()}
    if args.indexer_weight > 0:
        kl = indexer_loss(out.indexer)
        if kl is not None:
            loss = loss + args.indexer_weight * kl
            parts["indexer_kl"] = kl.detach()
    if args.balance_weight > 0:
        bal = balance_loss(out.routers, model.c.n_activated_experts)
        loss = loss + args.balance_weight * bal
        parts["balance"] = bal.detach()
    return loss, parts, out.routers


def sample_anchors(B, S, n, bs, gen, device, lo=0):
    """Anchor positions p, lo <= p, with p + 1 + bs <= S - 1 (the block's targets exist),
    sorted, distinct within a window while n allows."""
    hi = S - bs - 2
    span = hi - lo + 1
    if n <= span:
        a = torch.rand(B, span, generator=gen).argsort(dim=1)[:, :n].sort(dim=1).values
    else:
        a = torch.randint(0, span, (B, n), generator=gen).sort(dim=1).values
    return (a + lo).to(device)


@torch.no_grad()
def greedy_pool(model, draw, seconds, gen_tokens):
    """Windows from draw() ([n, S + 1] ids on the device): a real prefix, then the target's
    own greedy continuation (the current numerics) over the last gen_tokens positions, a
    draw() at a time until `seconds` have passed (at least one). What a served greedy
    sequence's drafter sees: context the target wrote, block targets the target's argmaxes.
    Returns (ids [N, S + 1], the first generated position)."""
    t0, out, cut = time.time(), [], None
    while not out or time.time() - t0 < seconds:
        ids = draw()
        cut = ids.shape[1] - gen_tokens
        if cut < 1:
            raise ValueError(f"--dspark_greedy_tokens {gen_tokens} leaves no prefix")
        for t in range(cut, ids.shape[1]):
            ids[:, t] = model(ids[:, :t]).logits[:, -1].argmax(-1)
        out.append(ids)
    return torch.cat(out), cut


def load_pool(paths, seq_len, device):
    """weir_greedy_pool.py pools (comma-separated FILE or FILE.xz, each with FILE.json beside
    it), one after the other: (ids [N, seq_len + 1] on the device, the first generated
    position, which they must share)."""
    parts, first = [], None
    for path in paths.split(","):
        plain = path[:-3] if path.endswith(".xz") else path
        with open(plain + ".json") as f:
            meta = json.load(f)
        if meta["width"] != seq_len + 1:
            raise ValueError(f"{path}: windows of {meta['width']} ids, --seq_len {seq_len} "
                             f"needs {seq_len + 1}")
        if first is not None and meta["first_generated"] != first:
            raise ValueError(f"{path}: generated from {meta['first_generated']}, the pool "
                             f"before it from {first}")
        first = meta["first_generated"]
        opener = lzma.open if path.endswith(".xz") else open
        with opener(path, "rb") as f:
            ids = np.frombuffer(f.read(), dtype="<u2").reshape(-1, meta["width"])
        if ids.shape[0] != meta["windows"]:
            raise ValueError(f"{path}: {ids.shape[0]} windows, its .json says {meta['windows']}")
        parts.append(ids)
    return torch.from_numpy(np.concatenate(parts).astype(np.int64)).to(device), int(first)


def dspark_loss(model, ids, anchors, ce_target="target", fwd=None):
    """Spec 4.8's DSpark loss on anchors [B, A] of the windows ids [B, S].

    Slots as dspark_forward: anchor p, block [t_{p+1}, noise x (bs-1)] at p+1..p+bs, slot i
    predicts the token at p+2+i; p_target is the target's distribution at position p+1+i
    (the one that predicts p+2+i); the Markov / confidence prev token is t_{p+1+i}.
    ce_target "target": the CE token is the target's argmax there (what greedy verification
    accepts; DeepSpec's data is target-generated), "data": the text's token."""
    c = model.c
    bs = c.dspark_block_size
    with torch.no_grad():
        out = (fwd or model)(ids)
        p_all = torch.softmax(out.logits.float(), dim=-1)                     # [B, S, V]
    B, A = anchors.shape
    k = torch.arange(bs, device=ids.device)
    pos_in = anchors[..., None] + 1 + k                                      # p+1+i: prev token
    tokens_in = ids.gather(1, pos_in.reshape(B, -1)).view(B, A, bs)
    block = torch.full_like(tokens_in, c.dspark_noise_token_id)
    block[..., 0] = tokens_in[..., 0]
    target_tokens = ids.gather(1, (pos_in + 1).reshape(B, -1)).view(B, A, bs)
    p_target = p_all.gather(1, pos_in.reshape(B, -1, 1).expand(-1, -1, p_all.shape[-1]))
    p_target = p_target.view(B, A, bs, -1)
    if ce_target == "target":
        target_tokens = p_target.argmax(-1)
    d = model.dspark_forward(out.main_hidden.detach(), anchors, block, prev_ids=tokens_in)
    logp = torch.log_softmax(d.logits.float(), dim=-1)
    ce = -logp.gather(-1, target_tokens[..., None]).squeeze(-1)              # [B, A, bs]
    l1 = (logp.exp() - p_target).abs().sum(-1)
    accept = (1.0 - 0.5 * l1).detach().clamp(0.0, 1.0)
    bce = F.binary_cross_entropy_with_logits(d.confidence.float(), accept, reduction="none")
    w = torch.exp(-k.float() / 4.0)
    per = 0.1 * ce + 0.9 * l1 + 1.0 * bce
    loss = (per * w).sum(-1).mean() / w.sum()
    with torch.no_grad():
        parts = {"ce": (ce * w).sum(-1).mean() / w.sum(), "l1": (l1 * w).sum(-1).mean() / w.sum(),
                 "accept_soft": accept.mean(), "bce": bce.mean(),
                 "top1_agree": (logp.argmax(-1) == p_target.argmax(-1)).float().mean()}
    return loss, parts, d.routers


def dspark_warm_start(model):
    """Stage s starts as target layer dspark_target_layer_ids[s] (the last id for extra
    stages): every tensor of the same name and shape (attention, mHC, norms, shared
    expert), the first n routed experts and their gate rows; the last stage's norm from the
    final norm. main_proj / main_norm, the Markov and confidence heads stay as initialised;
    the routing biases start at zero."""
    c, copied = model.c, 0
    ids = c.dspark_target_layer_ids or [c.n_layers - 1]
    with torch.no_grad():
        for s, stage in enumerate(model.mtp):
            src = model.layers[ids[min(s, len(ids) - 1)]].state_dict()
            n = len(stage.ffn.experts)
            for name, t in stage.state_dict().items():
                if name.endswith("gate.bias") or name.endswith("gate.bias_vl"):
                    t.zero_()
                    continue
                if name.startswith("ffn.experts."):
                    if int(name.split(".")[2]) >= n:
                        continue
                v = src.get(name)
                if v is None:
                    continue
                if name == "ffn.gate.weight":
                    v = v[:n]
                if v.shape == t.shape:
                    t.copy_(v)
                    copied += 1
        model.mtp[-1].norm.weight.copy_(model.norm.weight)
    return copied


def lr_at(step, total, base, warmup):
    if step < warmup:
        return base * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def make_optimizer(model, phase, args):
    if phase == "dspark":
        params = [p for p in model.mtp.parameters() if p.requires_grad]
        lr = args.dspark_lr
    else:
        params = [p for n, p in model.named_parameters() if not n.startswith("mtp.")]
        lr = args.lr if phase == "backbone" else args.qat_lr
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8), lr


@torch.no_grad()
def perplexity(model, data, args, mode):
    model.set_numerics(mode)
    nll, n = 0.0, 0
    for i in range(args.eval_batches):
        ids = data.fixed(args.eval_batches * 8, args.device)[i * 8:(i + 1) * 8]
        out = model(ids[:, :-1])
        nll += F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]).float(),
                               ids[:, 1:].reshape(-1), reduction="sum").item()
        n += ids[:, 1:].numel()
    return math.exp(nll / n), nll / n


@torch.no_grad()
def dspark_acceptance(model, data, args, positions=(31, 63, 127, 191), ids_all=None):
    """Greedy, block 5: from a held-out prefix ending at p, the target's argmax t* at p+1,
    the drafts of the block; the target then runs over prefix + t* + drafts and a draft is
    accepted while it equals the target's argmax after the accepted prefix. Returns the mean
    accepted drafts and the mean tokens per verification (accepted + 1)."""
    model.set_numerics("qat")
    bs = model.c.dspark_block_size
    if ids_all is None:
        ids_all = data.fixed(args.accept_windows, args.device)
    accepted, count = [], 0
    for p in positions:
        if p + 1 >= ids_all.shape[1]:
            continue
        prefix = ids_all[:, :p + 1]
        out = model(prefix)
        first = out.logits[:, -1].argmax(-1)                                 # t* at p+1
        anchors = torch.full((prefix.shape[0], 1), p, device=prefix.device, dtype=torch.int64)
        drafts, _, _ = model.dspark_draft(out.main_hidden, anchors, first[:, None])
        seq = torch.cat([prefix, drafts[:, 0]], dim=1)                       # + t*, d1..d5
        ver = model(seq).logits.argmax(-1)                                   # [B, p+1+1+bs]
        want = ver[:, p + 1:p + 1 + bs]                                      # after t*, after d_i
        got = drafts[:, 0, 1:]
        match = (want == got).long().cumprod(dim=1).sum(dim=1)
        accepted.append(match.float())
        count += match.numel()
    acc = torch.cat(accepted)
    hist = torch.bincount(acc.long(), minlength=bs + 1).tolist()
    return {"mean_accepted_drafts": acc.mean().item(), "mean_tokens_per_verify": acc.mean().item() + 1,
            "histogram_accepted": hist, "samples": count, "block": bs}


def save_state(path, model, opt, state):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict() if opt else None,
                "state": state, "torch_rng": torch.get_rng_state()}, tmp)
    os.replace(tmp, path)


def save_snapshot(snap_dir, model, state, max_bytes=15 << 20):
    """bf16 weights in files under max_bytes, plus state.json: what a later call on a fresh
    machine needs to go on (the optimizer starts again)."""
    os.makedirs(snap_dir, exist_ok=True)
    shards, cur, size = [], {}, 0
    for k, v in model.state_dict().items():
        t = v.detach().to("cpu", torch.bfloat16 if v.is_floating_point() else v.dtype)
        n = t.numel() * t.element_size()
        if cur and size + n > max_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = t
        size += n
    shards.append(cur)
    for i, shard in enumerate(shards):
        torch.save(shard, os.path.join(snap_dir, f"weights_{i}.pt"))
    with open(os.path.join(snap_dir, "state.json"), "w") as f:
        json.dump({"state": state, "shards": len(shards)}, f)


def load_snapshot(snap_dir, model):
    with open(os.path.join(snap_dir, "state.json")) as f:
        meta = json.load(f)
    full = {}
    for i in range(meta["shards"]):
        full.update(torch.load(os.path.join(snap_dir, f"weights_{i}.pt"), map_location="cpu"))
    own = model.state_dict()
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in full.items()})
    return meta["state"]


def load_checkpoint(model, ckpt_dir, token_map_path, backbone_only=False):
    """model's parameters from an exported checkpoint (all, or all but the DSpark stages');
    returns import_checkpoint's report."""
    imported, report = E.import_checkpoint(ckpt_dir, load_token_map(token_map_path))
    new = imported.state_dict()
    if backbone_only:
        new = {k: (v if k.startswith("mtp.") else new[k]) for k, v in model.state_dict().items()}
    model.load_state_dict(new)
    return report


def load_token_map(path):
    if not path:
        return None
    with open(path) as f:
        return json.load(f)["map"]


def main(argv=None):
    args = parse_args(argv)
    t_start = time.time()
    # A minute is kept for the evaluation and export that follow the last phase.
    deadline = t_start + args.max_minutes * 60 - 60
    torch.manual_seed(args.seed)
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    cfg = V41Config.load(args.config)
    with open(args.config) as f:
        config_text = f.read()
    model = V41Model(cfg, load_token_map(args.token_map)).to(args.device)
    model.config_text = config_text
    train = Tokens(os.path.join(args.data, "tokens_train.u16"), args.seq_len, args.seed)
    held = Tokens(os.path.join(args.data, "tokens_heldout.u16"), args.seq_len, args.seed + 1)
    budget = dict(zip(PHASES, (float(m) * 60 for m in args.budget.split(","))))
    state_path = os.path.join(args.out, "state.pt")
    state = {"phase": 0, "step": 0, "log": [], "seconds": 0.0, "totals": {}}
    if args.steps:
        state["totals"] = dict(zip(PHASES, (int(s) for s in args.steps.split(","))))
    saved = None
    if not os.path.exists(state_path) and args.snapshot and \
            os.path.exists(os.path.join(args.snapshot, "state.json")):
        state = load_snapshot(args.snapshot, model)
        print(f"from snapshot: phase {PHASES[min(state['phase'], 2)]} step {state['step']} "
              "(bf16 weights, fresh optimizer)", flush=True)
        train.rng = np.random.default_rng(args.seed + 1000 * state["phase"] + state["step"])
        if state.get("init_checkpoint") and PHASES[min(state["phase"], 2)] == "dspark":
            # The snapshot's bf16 copy would round the frozen backbone's fp32 tensors (the
            # routing biases): take them from the checkpoint again, exactly.
            load_checkpoint(model, state["init_checkpoint"], args.token_map, backbone_only=True)
    elif os.path.exists(state_path):
        saved = torch.load(state_path, map_location=args.device, weights_only=False)
        model.load_state_dict(saved["model"])
        state = saved["state"]
        torch.set_rng_state(saved["torch_rng"].cpu())
        train.rng = np.random.default_rng(args.seed + 1000 * state["phase"] + state["step"])
        print(f"resumed: phase {PHASES[min(state['phase'], 2)]} step {state['step']}", flush=True)
    elif args.init_checkpoint:
        report = load_checkpoint(model, args.init_checkpoint, args.token_map)
        state["phase"] = PHASES.index(args.start_phase)
        state["dspark_warm_started"] = True
        state["init_checkpoint"] = args.init_checkpoint
        print(f"from checkpoint {args.init_checkpoint} at phase {args.start_phase} "
              f"(unexpected tensors: {len(report['unexpected'])})", flush=True)
    gen = torch.Generator().manual_seed(args.seed + state["step"])
    pool, pool_cut = None, 0
    compiled = None
    if args.compile != "off" and not args.eval_only:
        try:
            if args.compile == "model":
                compiled = torch.compile(model, mode=args.compile_mode)
            else:
                v41.set_sinkhorn(torch.compile(v41.sinkhorn_split, mode=args.compile_mode,
                                               dynamic=True))
                compiled = model
        except Exception as e:  # noqa: BLE001
            print(f"torch.compile unavailable ({e}); eager", flush=True)
            v41.set_sinkhorn(None)
    log = open(os.path.join(args.out, "train.log"), "a")

    while not args.eval_only and state["phase"] < len(PHASES):
        phase = PHASES[state["phase"]]
        total = state["totals"].get(phase, 10 ** 9)  # fixed after the first steps (--budget)
        model.set_numerics("float" if phase == "backbone" else "qat")
        for p in model.parameters():
            p.requires_grad_(phase != "dspark")
        for p in model.mtp.parameters():
            p.requires_grad_(phase == "dspark")
        opt, base_lr = make_optimizer(model, phase, args)
        if saved is not None and saved.get("opt") is not None and saved["state"]["phase"] == state["phase"]:
            opt.load_state_dict(saved["opt"])
        saved = None
        warmup = args.warmup if phase == "backbone" else args.warmup // 4
        if phase == "dspark" and args.dspark_warm_start and not state.get("dspark_warm_started"):
            n = dspark_warm_start(model)
            state["dspark_warm_started"] = True
            print(f"dspark: stages warm-started from layers {cfg.dspark_target_layer_ids} "
                  f"({n} tensors)", flush=True)
        if phase == "dspark" and args.dspark_pool and pool is None:
            pool, pool_cut = load_pool(args.dspark_pool, args.seq_len, args.device)
            print(f"dspark: greedy pool of {pool.shape[0]} windows from {args.dspark_pool}, "
                  f"ids {pool_cut}.. weir's own", flush=True)
        if phase == "dspark" and args.dspark_greedy_minutes > 0 and pool is None:
            model.eval()
            t_pool = time.time()
            pool, pool_cut = greedy_pool(
                model, lambda: train.batch(args.dspark_greedy_batch, args.device),
                args.dspark_greedy_minutes * 60, args.dspark_greedy_tokens)
            print(f"dspark: greedy pool of {pool.shape[0]} windows, ids {pool_cut}.. the "
                  f"target's own, in {time.time() - t_pool:.0f} s", flush=True)
        model.train()
        t_phase = time.time()
        t_rate, step_rate = None, state["step"]
        while state["step"] < total:
            if phase not in state["totals"] and state["step"] - step_rate == 10 and t_rate is None:
                t_rate = time.time()  # the first steps (allocation, caches) are not timed
            if phase not in state["totals"] and t_rate is not None and \
                    state["step"] - step_rate == 40:
                rate = 30 / (time.time() - t_rate)
                total = max(state["step"] + 1, int(budget[phase] * rate))
                state["totals"][phase] = total
                print(f"{phase}: {rate:.2f} steps/s, {total} steps in "
                      f"{budget[phase] / 60:.1f} min", flush=True)
            if time.time() > deadline:
                state["seconds"] += time.time() - t_start
                save_state(state_path, model, opt, state)
                if args.snapshot:
                    save_snapshot(args.snapshot, model, state)
                print(f"time limit: saved at phase {phase} step {state['step']}", flush=True)
                return 3
            lr = lr_at(state["step"], total, base_lr, warmup)
            for g in opt.param_groups:
                g["lr"] = lr
            from_pool = phase == "dspark" and pool is not None and \
                state["step"] % max(1, args.dspark_greedy_every) == 0
            if from_pool:
                rows = torch.randint(0, pool.shape[0], (args.batch,), generator=gen)
                ids = pool[rows.to(pool.device)]
            else:
                ids = train.batch(args.batch, args.device)
            if phase == "dspark":
                # Pool windows: the block's first id (p + 1) is the first generated or later.
                anchors = sample_anchors(ids.shape[0], ids.shape[1], args.anchors,
                                         cfg.dspark_block_size, gen, args.device,
                                         lo=pool_cut - 1 if from_pool else 0)
                step_fn = lambda f: dspark_loss(model, ids, anchors, args.dspark_ce_target, f)
                gate_list = gates(model, dspark=True)
            else:
                step_fn = lambda f: backbone_step(model, ids, args, f)
                gate_list = gates(model, dspark=False)
            opt.zero_grad(set_to_none=True)
            if compiled is not None:
                try:
                    loss, parts, routers = step_fn(compiled)
                    loss.backward()
                except Exception as e:  # noqa: BLE001 - any compile failure: go on eagerly
                    print(f"torch.compile failed ({type(e).__name__}: {str(e)[:300]}); "
                          "continuing eager", flush=True)
                    compiled = None
                    v41.set_sinkhorn(None)
                    opt.zero_grad(set_to_none=True)
            if compiled is None:
                loss, parts, routers = step_fn(None)
                loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(
                [p for g in opt.param_groups for p in g["params"]], 1.0)
            opt.step()
            update_biases(gate_list, routers, args.bias_rate)
            state["step"] += 1
            if state["step"] % args.log_every == 0 or state["step"] == total:
                rate = (state["step"] - step_rate) / max(1e-9, time.time() - t_phase)  # this call's steps
                entry = {"phase": phase, "step": state["step"], "pool": from_pool,
                         "loss": loss.item(), "lr": lr,
                         "grad_norm": grad_norm.item(), **{k: v.item() for k, v in parts.items()}}
                state["log"].append(entry)
                line = json.dumps(entry)
                print(f"{line} ({rate:.2f} steps/s this call)", flush=True)
                log.write(line + "\n")
                log.flush()
        state["phase"] += 1
        state["step"] = 0
        save_state(state_path, model, None, state)

    v41.set_sinkhorn(None)  # evaluation: eager (other shapes)
    model.eval()
    results = {"config": args.config, "seq_len": args.seq_len}
    for mode in ("float", "qat"):
        ppl, nll = perplexity(model, held, args, mode)
        results[f"heldout_ppl_{mode}"] = ppl
        results[f"heldout_nll_{mode}"] = nll
        print(f"held-out perplexity ({mode}): {ppl:.2f}", flush=True)
    if len(model.mtp):
        results["dspark"] = dspark_acceptance(model, held, args)
        print(f"DSpark greedy block {cfg.dspark_block_size}: {results['dspark']}", flush=True)
        # As a served greedy sequence drafts: anchors inside the target's own continuation
        # of held-out prefixes (64 real ids, then 192 greedy).
        model.set_numerics("qat")
        windows, cut = greedy_pool(model, lambda: held.fixed(args.accept_windows, args.device),
                                   0, args.seq_len + 1 - 64)
        results["dspark_generated"] = dspark_acceptance(
            model, held, args, positions=(cut + 15, cut + 63, cut + 127, cut + 183), ids_all=windows)
        print(f"DSpark greedy block {cfg.dspark_block_size}, anchors in the target's own "
              f"continuation: {results['dspark_generated']}", flush=True)
    model.set_numerics("qat")
    E.export_checkpoint(model.cpu(), os.path.join(args.out, "export"), config_text=config_text)
    results["train_log_tail"] = state["log"][-6:]
    results["steps"] = state["totals"]
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"exported {os.path.join(args.out, 'export')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
