"""DeepSeek-V4.1 in plain torch, for training (spec ../../../shared/spec/model-v41.md §4).

Full-sequence causal forward over [B, S] token ids (no KV cache): the logits at every
position equal what the official reference computes by prefill + one-token decode
steps (tools/train/test_v41_parity.py checks that against tests/golden/tiny).

    cfg = V41Config.load("models/tiny/config.json")
    model = V41Model(cfg).to(device)            # float32 master weights
    model.set_numerics("float")                 # or "qat" / "reference"
    out = model(ids, want_indexer_targets=True) # V41Output
    d = model.dspark_forward(out.main_hidden.detach(), anchors, block_ids, prev_ids)

Numerics (model.set_numerics):
  "float"      no quantization: float32 weights and activations (fast pre-training).
  "qat"        the stored form, with straight-through gradients: weights rounded to
               their checkpoint format every forward (FP8 e4m3 32x32 tiles + UE8M0,
               MXFP4 routed experts, FP8 Engram rows, bf16 where the checkpoint is bf16),
               activations FP8 per 32 before FP8/FP4 GEMMs, window KV FP8, compressed KV
               FP4 (16, E4M3 scale), index Q/K MXFP4. Forward values are exactly the
               quantized ones.
  "reference"  "qat" plus the golden run's tie rules (stable top-k: equal scores go to the
               lower index) and autocast disabled: fp32 everywhere. For parity checks on
               CUDA also set torch.backends.cuda.matmul.allow_tf32 = False.

Parameter names are the checkpoint names (spec §4.10), e.g. `layers.3.attn.wq_a.weight`,
so export.py maps state_dict() entries 1:1 to stored tensors. The MoE routing biases
(`ffn.gate.bias`, `bias_vl`) are buffers: the noaux_tc update is not a gradient step.
"""

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

import quant as Q
from engram_hash import EngramHasher
from v41_config import LayerRole, V41Config, layer_roles


class Numerics:
    """Shared by every module of one model; mutate through V41Model.set_numerics."""

    def __init__(self):
        self.quant = False
        self.exact = False


def topk_idx(x: torch.Tensor, k: int, exact: bool) -> torch.Tensor:
    """Indices of the k largest along the last dim, largest first. exact: ties go to the
    lower index (the golden run's rule); otherwise torch.topk's order."""
    if exact:
        return torch.sort(x, dim=-1, descending=True, stable=True).indices[..., :k]
    return torch.topk(x, k, dim=-1).indices


class QLinear(nn.Module):
    """y = x W^T with W stored as `fmt`: fp8 (32x32 tiles), mxfp4, bf16 or f32. With
    quantization on, FP8/FP4 GEMMs quantize their input to FP8 per 32 (act_quant)."""

    def __init__(self, num: Numerics, in_f: int, out_f: int, fmt: str, act_quant=None):
        super().__init__()
        self.num, self.fmt = num, fmt
        self.act_quant = fmt in ("fp8", "mxfp4") if act_quant is None else act_quant
        self.weight = nn.Parameter(torch.empty(out_f, in_f))
        nn.init.uniform_(self.weight, -math.sqrt(3.0 / in_f), math.sqrt(3.0 / in_f))

    def qweight(self) -> torch.Tensor:
        w = self.weight
        if not self.num.quant or self.fmt == "f32":
            return w
        fn = {"fp8": Q.fake_fp8_weight, "mxfp4": Q.fake_fp4_e8m0, "bf16": Q.round_bf16}[self.fmt]
        return Q.ste(w, fn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.num.quant and self.act_quant:
            x = Q.ste(x, Q.fake_fp8)
        return F.linear(x, self.qweight())


def qparam(num: Numerics, p: torch.Tensor, fmt: str) -> torch.Tensor:
    return Q.ste(p, Q.round_bf16) if num.quant and fmt == "bf16" else p


def stacked_qweight(lins) -> torch.Tensor:
    """torch.stack of the QLinears' qweight() [n, out, in], one quantizer call for all
    (MXFP4 / bf16 quantize along the last dim only, so stacking does not change them)."""
    first = lins[0]
    if first.num.quant and first.fmt == "fp8":  # 32x32 tiles: per matrix
        return torch.stack([lin.qweight() for lin in lins])
    w = torch.stack([lin.weight for lin in lins])
    if not first.num.quant or first.fmt == "f32":
        return w
    return Q.ste(w, {"mxfp4": Q.fake_fp4_e8m0, "bf16": Q.round_bf16}[first.fmt])


class RMSNorm(nn.Module):
    def __init__(self, num: Numerics, dim: int, eps: float):
        super().__init__()
        self.num, self.eps = num, eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x = x.float()
        x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps)
        return qparam(self.num, self.weight, "bf16") * x


def rope_freqs(c: V41Config, compressed: bool, n_pos: int, device) -> tuple:
    """(cos, sin) [n_pos, rope_head_dim/2]; YaRN and compress_rope_theta for ratio > 0."""
    dim = c.rope_head_dim
    base = c.compress_rope_theta if compressed else c.rope_theta
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if compressed and c.original_seq_len > 0:
        def corr(rot):
            return dim * math.log(c.original_seq_len / (rot * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(corr(c.beta_fast)), 0)
        high = min(math.ceil(corr(c.beta_slow)), dim - 1)
        ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / max(high - low, 1e-3)).clamp(0, 1)
        keep = 1 - ramp
        freqs = freqs / c.rope_factor * (1 - keep) + freqs * keep
    ang = torch.outer(torch.arange(n_pos, dtype=torch.float32), freqs)
    return torch.cos(ang).to(device), torch.sin(ang).to(device)


def apply_rope(x, cos, sin, rd: int, inverse=False):
    """Rotates the last `rd` dims of x as adjacent pairs (2i, 2i+1). cos/sin broadcast
    against x[..., :rd/2] (e.g. [S, rd/2] for x [B, S, D] -> pass cos[:, None] for heads)."""
    head, tail = x[..., :-rd], x[..., -rd:].float().unflatten(-1, (-1, 2))
    a, b = tail[..., 0], tail[..., 1]
    if inverse:
        sin = -sin
    rot = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([head, rot], dim=-1)


def masked_attn(q, keys, mask, sink, scale):
    """q [B, S, H, D], keys [B, N, D] (K = V), mask [B or 1, S, N] bool (True = the query
    sees the key), sink [H]. Softmax over the visible keys with exp(sink) in the
    denominator; two batched matmuls (the visible sets are small windows + top-k, but a
    dense masked product is far cheaper than gathering keys per query at training sizes)."""
    B, S, H, D = q.shape
    z = torch.matmul(q.reshape(B, S * H, D), keys.transpose(1, 2)).view(B, S, H, -1) * scale
    z = z.masked_fill(~mask.unsqueeze(2), float("-inf"))
    z = torch.cat([z, sink.view(1, 1, -1, 1).expand(B, S, -1, 1)], dim=-1)
    p = torch.softmax(z, dim=-1)[..., :-1]
    return torch.matmul(p.reshape(B, S * H, -1), keys).view(B, S, H, D)


def window_mask(S: int, W: int, device) -> torch.Tensor:
    """[S, S] bool: row i sees keys max(0, i - W + 1)..i (a sequence shorter than the window
    sees all its earlier positions)."""
    i = torch.arange(S, device=device)
    d = i[:, None] - i[None, :]
    return (d >= 0) & (d < min(W, S))


@dataclass
class FwdState:
    """Per-forward shared slots (spec §4.3.5): one entry per source layer."""
    S: int
    rope: dict
    ckv: dict = field(default_factory=dict)       # kv source -> compressed KV [B, T, D]
    index_k: dict = field(default_factory=dict)   # kv source -> index K [B, T, iD]
    topk: dict = field(default_factory=dict)      # index source -> [B, S, k] (-1 unused)
    cmask: dict = field(default_factory=dict)     # index source -> top-k as a mask [B, S, T]
    win: Optional[torch.Tensor] = None            # window mask [S, S] (window_mask)
    pool: Optional[torch.Tensor] = None           # candidate mask [B, S, T]
    indexer: dict = field(default_factory=dict)   # index source -> IndexerOut
    want_targets: bool = False
    detach_indexer: bool = True


@dataclass
class IndexerOut:
    """scores: I[b, s, t] with -inf where t is not visible (or outside the pool);
    topk: chosen compressed positions [B, S, k], -1 unused; target (want_indexer_targets):
    the attention the indexer selects for (see V41Model.forward), detached."""
    scores: torch.Tensor
    topk: torch.Tensor
    target: Optional[torch.Tensor] = None


@dataclass
class RouterOut:
    """logits: x Wg^T / gate_temp [B, S, E]; scores: sqrtsoftplus(logits); indices [B, S, k]
    (highest biased score first); weights [B, S, k]; load: tokens per expert [E]."""
    logits: torch.Tensor
    scores: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor
    load: torch.Tensor


class Compressor(nn.Module):
    def __init__(self, num, c: V41Config, ratio: int):
        super().__init__()
        self.ratio = ratio
        self.wkv = QLinear(num, c.dim, c.head_dim, "bf16")
        if ratio > 1:
            self.wgate = QLinear(num, c.dim, c.head_dim, "bf16")
        self.norm = RMSNorm(num, c.head_dim, c.norm_eps)

    def forward(self, x):
        """x [B, S, d] -> pre-RoPE latents of the complete groups [B, S // r, D]."""
        r = self.ratio
        if r == 1:
            return self.norm(self.wkv(x))
        cut = x.shape[1] - x.shape[1] % r
        x = x[:, :cut].float()
        kv = self.wkv(x).unflatten(1, (-1, r))
        score = self.wgate(x).unflatten(1, (-1, r))
        return self.norm((kv * score.softmax(dim=2)).sum(dim=2))


class Indexer(nn.Module):
    def __init__(self, num, c: V41Config, role: LayerRole):
        super().__init__()
        self.num, self.c, self.role = num, c, role
        if role.has_compressor:
            self.wk = QLinear(num, c.head_dim, c.index_head_dim, "bf16")
            self.k_norm = RMSNorm(num, c.index_head_dim, c.norm_eps)
        if role.has_indexer:
            self.wq_b = QLinear(num, c.q_lora_rank, c.index_n_heads * c.index_head_dim, "fp8")
            self.weights_proj = QLinear(num, c.dim, c.index_n_heads, "bf16")

    def keys(self, latent, cos, sin):
        k = apply_rope(self.k_norm(self.wk(latent)), cos, sin, self.c.rope_head_dim)
        return Q.ste(k, Q.fake_fp4_e8m0) if self.num.quant else k

    def scores(self, x, qr, index_k, cos, sin):
        """I [B, S, T] before masking."""
        c = self.c
        q = self.wq_b(qr).unflatten(-1, (c.index_n_heads, c.index_head_dim))
        q = apply_rope(q, cos[:, None], sin[:, None], c.rope_head_dim)
        if self.num.quant:
            q = Q.ste(q, Q.fake_fp4_e8m0)
        w = self.weights_proj(x) * (c.index_head_dim ** -0.5 * c.index_n_heads ** -0.5)
        s = torch.einsum("bshd,btd->bsht", q, index_k)
        return (s.relu() * w.unsqueeze(-1)).sum(dim=2)


def candidate_pool(scores, compress_lens, topk_blocks: int, block: int, exact: bool):
    """Hierarchical pool (spec §4.3.4): per row the `topk_blocks` best blocks of `block`
    positions (block score = max), the newest visible block pinned. -> bool [B, S, T]."""
    T = scores.shape[-1]
    s = F.pad(scores, (0, -T % block), value=float("-inf")).unflatten(-1, (-1, block)).amax(-1)
    nb = s.shape[-1]
    last = (compress_lens - 1).div(block, rounding_mode="floor")  # [S]
    s = s.masked_fill(torch.arange(nb, device=s.device) == last.unsqueeze(-1), float("inf"))
    top = topk_idx(s, min(topk_blocks, nb), exact)
    keep = torch.zeros_like(s, dtype=torch.bool).scatter_(-1, top, s.gather(-1, top) > float("-inf"))
    return keep.repeat_interleave(block, dim=-1)[..., :T]


class Attention(nn.Module):
    def __init__(self, num, c: V41Config, role: LayerRole):
        super().__init__()
        self.num, self.c, self.role = num, c, role
        H, D = c.n_heads, c.head_dim
        self.attn_sink = nn.Parameter(torch.zeros(H))
        self.wq_a = QLinear(num, c.dim, c.q_lora_rank, "fp8")
        self.q_norm = RMSNorm(num, c.q_lora_rank, c.norm_eps)
        self.wq_b = QLinear(num, c.q_lora_rank, H * D, "fp8")
        self.wkv = QLinear(num, c.dim, D, "fp8")
        self.kv_norm = RMSNorm(num, D, c.norm_eps)
        # block-diagonal over groups; FP8 in the checkpoint, bf16 einsum in the reference
        self.wo_a = QLinear(num, H * D // c.o_groups, c.o_groups * c.o_lora_rank, "fp8", act_quant=False)
        self.wo_b = QLinear(num, c.o_groups * c.o_lora_rank, c.dim, "fp8")
        if role.has_compressor:
            self.compressor = Compressor(num, c, role.ratio)
        if role.has_compressor or role.has_indexer:
            self.indexer = Indexer(num, c, role)

    def _kv(self, x, cos, sin):
        kv = apply_rope(self.kv_norm(self.wkv(x)), cos, sin, self.c.rope_head_dim)
        return Q.ste(kv, Q.fake_fp8) if self.num.quant else kv

    def _query(self, x, cos, sin):
        qr = self.q_norm(self.wq_a(x))
        q = self.wq_b(qr).unflatten(-1, (self.c.n_heads, self.c.head_dim))
        return qr, apply_rope(q, cos[..., None, :], sin[..., None, :], self.c.rope_head_dim)

    def _output(self, o, cos, sin):
        c = self.c
        o = apply_rope(o, cos[..., None, :], sin[..., None, :], c.rope_head_dim, inverse=True)
        o = o.flatten(-2).unflatten(-1, (c.o_groups, -1))
        wo_a = self.wo_a.qweight().view(c.o_groups, c.o_lora_rank, -1)
        return self.wo_b(torch.einsum("bsgd,grd->bsgr", o, wo_a).flatten(-2))

    def forward(self, x, st: FwdState):
        c, role = self.c, self.role
        B, S, _ = x.shape
        W, r = c.window_size, role.ratio
        cos, sin = st.rope["cmp" if r else "swa"]
        cos, sin = cos[:S], sin[:S]
        qr, q = self._query(x, cos, sin)
        kv = self._kv(x, cos, sin)
        if st.win is None or st.win.shape[0] != S:
            st.win = window_mask(S, W, x.device)
        mask, keys = st.win.unsqueeze(0), kv
        if r > 0:
            if role.has_compressor:
                self._compress(x, st, r)
            if role.has_indexer:
                self._index(x, qr, q, st)
            keys = torch.cat([kv, st.ckv[role.kv_source]], dim=1)
            cmask = st.cmask[role.index_source]
            mask = torch.cat([mask.expand(B, -1, -1), cmask], dim=-1)
        o = masked_attn(q, keys, mask, self.attn_sink, c.head_dim ** -0.5)
        return self._output(o, cos, sin)

    def _compress(self, x, st, r):
        c = self.c
        latent = self.compressor(x)  # [B, T, D]
        T = latent.shape[1]
        cos, sin = st.rope["cmp"]
        cos, sin = cos[: T * r: r], sin[: T * r: r]  # entry j sits at position j * r
        src = latent.detach() if st.detach_indexer else latent
        st.index_k[self.role.layer] = self.indexer.keys(src, cos, sin)
        ckv = apply_rope(latent, cos, sin, c.rope_head_dim)
        st.ckv[self.role.layer] = Q.ste(ckv, Q.fake_fp4_e4m3) if self.num.quant else ckv

    def _index(self, x, qr, q, st):
        c, role, exact = self.c, self.role, self.num.exact
        S, r = x.shape[1], role.ratio
        index_k = st.index_k[role.kv_source]
        T = index_k.shape[1]
        cos, sin = st.rope["cmp"]
        if st.detach_indexer:
            x, qr = x.detach(), qr.detach()
        s = self.indexer.scores(x, qr, index_k, cos[:S], sin[:S])
        lens = (torch.arange(1, S + 1, device=x.device) // r)  # visible entries per row
        s = s.masked_fill(torch.arange(T, device=x.device) >= lens.unsqueeze(-1), float("-inf"))
        if role.produces_candidates:
            st.pool = candidate_pool(s.detach(), lens, c.candidate_topk_blocks,
                                     c.candidate_block_size, exact)
        elif role.candidate_source >= 0:
            s = s.masked_fill(~st.pool, float("-inf"))
        k = min(c.index_topk, T)
        if k == 0:
            top = torch.empty(*s.shape[:2], 0, dtype=torch.long, device=x.device)
        else:
            top = topk_idx(s.detach(), k, exact)
            ok = (top < lens.view(1, -1, 1)) & (s.gather(-1, top) > float("-inf"))
            top = torch.where(ok, top, -1).sort(dim=-1).values
        st.topk[role.layer] = top
        # the chosen entries as a mask (-1 = unused goes to a spare last column)
        cm = torch.zeros(*top.shape[:2], T + 1, dtype=torch.bool, device=x.device)
        st.cmask[role.layer] = cm.scatter_(-1, torch.where(top >= 0, top, T), True)[..., :T]
        target = None
        if st.want_targets and T > 0:
            with torch.no_grad():
                z = torch.einsum("bshd,btd->bsht", q, st.ckv[role.kv_source]) * c.head_dim ** -0.5
                z = z.masked_fill(~torch.isfinite(s).unsqueeze(2), float("-inf"))
                p = torch.softmax(z, dim=-1).nan_to_num(0.0)
                target = p.mean(dim=2)
        st.indexer[role.layer] = IndexerOut(scores=s, topk=top, target=target)

    def forward_draft(self, x, main_x, anchors, st: FwdState):
        """DSpark stage attention. x [B*A, bs, d] block tokens at positions p+1..p+bs;
        main_x [B, S, d]; anchors [B, A] = p. Keys: this stage's K/V of main_x at positions
        max(0, p-W+1)..p, plus the whole block (bidirectional)."""
        c = self.c
        B, A = anchors.shape
        W, bs = c.window_size, x.shape[1]
        cos_t, sin_t = st.rope["swa"]
        S = main_x.shape[1]
        main_kv = self._kv(main_x, cos_t[:S], sin_t[:S])  # [B, S, D]
        ctx_pos = anchors.unsqueeze(-1) - W + 1 + torch.arange(W, device=x.device)  # [B, A, W]
        ctx = main_kv.gather(1, ctx_pos.clamp_min(0).view(B, A * W, 1).expand(-1, -1, c.head_dim))
        ctx = ctx.view(B * A, W, -1)
        bpos = (anchors.unsqueeze(-1) + 1 + torch.arange(bs, device=x.device)).view(B * A, bs)
        cos, sin = cos_t[bpos], sin_t[bpos]  # [B*A, bs, rd/2]
        _, q = self._query(x, cos, sin)
        kv = self._kv(x, cos, sin)
        keys = torch.cat([ctx, kv], dim=1)  # [B*A, W + bs, D]
        valid = torch.cat([ctx_pos.view(B * A, W) >= 0,
                           torch.ones(B * A, bs, dtype=torch.bool, device=x.device)], dim=1)
        o = masked_attn(q, keys, valid.unsqueeze(1), self.attn_sink, c.head_dim ** -0.5)
        return self._output(o, cos, sin)


class Gate(nn.Module):
    def __init__(self, num, c: V41Config, n_experts: int, k: int):
        super().__init__()
        self.num, self.c, self.k = num, c, k
        self.weight = nn.Parameter(torch.empty(n_experts, c.dim))
        nn.init.uniform_(self.weight, -math.sqrt(3.0 / c.dim), math.sqrt(3.0 / c.dim))
        self.register_buffer("bias", torch.zeros(n_experts))
        self.register_buffer("bias_vl", torch.zeros(n_experts))

    def forward(self, x):
        c = self.c
        logits = F.linear(x.float(), qparam(self.num, self.weight, "bf16")) / c.gate_temp
        if c.score_func == "sqrtsoftplus":
            scores = F.softplus(logits).sqrt()
        elif c.score_func == "sigmoid":
            scores = logits.sigmoid()
        else:
            scores = logits.softmax(dim=-1)
        idx = topk_idx((scores + self.bias).detach(), self.k, self.num.exact)
        w = scores.gather(-1, idx)
        if c.norm_topk_prob and self.k > 1:
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        return logits, scores, idx, w * c.route_scale


class Expert(nn.Module):
    def __init__(self, num, c: V41Config, fmt: str):
        super().__init__()
        self.limit = c.swiglu_limit
        self.w1 = QLinear(num, c.dim, c.moe_inter_dim, fmt)
        self.w2 = QLinear(num, c.moe_inter_dim, c.dim, fmt)
        self.w3 = QLinear(num, c.dim, c.moe_inter_dim, fmt)

    def forward(self, x, weight=None):
        gate, up = self.w1(x), self.w3(x)
        if self.limit > 0:
            up = up.clamp(-self.limit, self.limit)
            gate = gate.clamp(max=self.limit)
        h = F.silu(gate) * up
        return self.w2(h if weight is None else weight * h)


class MoE(nn.Module):
    """Routed experts computed together: their (quantized) weights stacked once per forward.
    Few experts (dense_max_experts or fewer): every row through every expert as two GEMMs,
    the routing weight zero for unchosen experts (exactly 0 contributions). More experts:
    (row, slot) pairs sorted by expert into padded groups and batched matmuls."""
    dense_max_experts = 16

    def __init__(self, num, c: V41Config, role: LayerRole):
        super().__init__()
        assert c.n_shared_experts == 1
        self.num, self.limit = num, c.swiglu_limit
        self.gate = Gate(num, c, role.n_experts, role.n_active)
        self.experts = nn.ModuleList(Expert(num, c, "mxfp4") for _ in range(role.n_experts))
        self.shared_experts = Expert(num, c, "fp8")

    def _swiglu(self, gate, up):
        if self.limit > 0:
            up = up.clamp(-self.limit, self.limit)
            gate = gate.clamp(max=self.limit)
        return F.silu(gate) * up

    def _act(self, x):
        return Q.ste(x, Q.fake_fp8) if self.num.quant and self.experts[0].w1.act_quant else x

    def routed(self, x, idx, w):
        """sum_k w_k * Expert_{idx_k}(x) for x [N, d], idx / w [N, k] -> [N, d] fp32."""
        ex = self.experts
        E, (N, d), k = len(ex), x.shape, idx.shape[1]
        w1 = stacked_qweight([e.w1 for e in ex])        # [E, I, d]
        w3 = stacked_qweight([e.w3 for e in ex])
        w2 = stacked_qweight([e.w2 for e in ex])        # [E, d, I]
        I = w1.shape[1]
        xa = self._act(x)
        if E <= self.dense_max_experts:
            gu = F.linear(xa, torch.cat([w1, w3], dim=0).reshape(2 * E * I, d)).view(N, 2, E, I)
            wd = torch.zeros(N, E, dtype=w.dtype, device=x.device).scatter(1, idx, w)
            h = (self._swiglu(gu[:, 0], gu[:, 1]) * wd.unsqueeze(-1)).reshape(N, E * I)
            # blocks of 32 along E*I stay inside one expert (I % 32 == 0): same quantization
            return F.linear(self._act(h), w2.permute(1, 0, 2).reshape(d, E * I))
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        e_sorted = flat[order]
        counts = torch.zeros(E, dtype=torch.long, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
        start = torch.cumsum(counts, 0) - counts
        slot = torch.arange(N * k, device=x.device) - start[e_sorted]
        cap = int(counts.max())  # one host sync: the padded group size
        rows = order.div(k, rounding_mode="floor")
        buf = xa.new_zeros(E, cap, d).index_put((e_sorted, slot), xa[rows])
        gate, up = torch.bmm(buf, w1.transpose(1, 2)), torch.bmm(buf, w3.transpose(1, 2))
        wg = w.new_zeros(E, cap).index_put((e_sorted, slot), w.reshape(-1)[order])
        h = self._act(self._swiglu(gate, up) * wg.unsqueeze(-1))
        out = torch.bmm(h, w2.transpose(1, 2))[e_sorted, slot]  # [N*k, d]
        return torch.zeros(N, d, dtype=out.dtype, device=x.device).index_add(0, rows, out)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        logits, scores, idx, w = self.gate(x)
        y = self.routed(x, idx, w).float() + self.shared_experts(x)
        flat = idx.flatten()
        load = torch.zeros(len(self.experts), dtype=torch.long, device=x.device)
        load = load.scatter_add_(0, flat, torch.ones_like(flat))
        lead = shape[:-1]
        router = RouterOut(logits.view(*lead, -1), scores.view(*lead, -1), idx.view(*lead, -1),
                           w.view(*lead, -1), load)
        return y.view(shape), router


class Engram(nn.Module):
    def __init__(self, num, c: V41Config, rows: int):
        super().__init__()
        self.num, self.c = num, c
        self.embed = nn.Embedding(rows, c.engram_head_dim)
        nn.init.uniform_(self.embed.weight, -math.sqrt(3.0), math.sqrt(3.0))
        self.wkv = QLinear(num, c.engram_hash_cols * c.engram_head_dim, c.dim * (c.hc_mult + 1), "fp8")
        self.q_weight = nn.Parameter(torch.ones(c.hc_mult, c.dim))
        self.k_weight = nn.Parameter(torch.ones(c.hc_mult, c.dim))

    def forward(self, X, hash_ids):
        """X [B, S, n, d] streams; hash_ids [B, S, cols] -> X with the gated value added."""
        c, n, d = self.c, self.c.hc_mult, self.c.dim
        e = self.embed(hash_ids)  # rows are FP8 per 32 columns: quantizing the gathered rows is exact
        if self.num.quant:
            e = Q.ste(e, Q.fake_fp8)
        kv = self.wkv(e.flatten(-2))
        key, value = kv.split([n * d, d], dim=-1)
        key = key.unflatten(-1, (n, d))
        weight = qparam(self.num, self.q_weight, "bf16") * qparam(self.num, self.k_weight, "bf16")
        h, eps = X.float(), c.norm_eps
        rstd = torch.rsqrt(h.square().mean(-1) + eps) * torch.rsqrt(key.square().mean(-1) + eps)
        dot = (h * weight * key).sum(-1) * rstd * d ** -0.5
        gate = torch.sigmoid(torch.copysign(dot.abs().clamp_min(1e-6).sqrt(), dot))
        return h + gate.unsqueeze(-1) * value.unsqueeze(-2)


def sinkhorn_split(mixes, scale, base, n: int, iters: int, eps: float):
    """mixes [..., (2+n)n] -> pre [..., n], post [..., n], comb [..., n, n] (spec §4.6)."""
    pre = torch.sigmoid(mixes[..., :n] * scale[0] + base[:n]) + eps
    post = 2 * torch.sigmoid(mixes[..., n: 2 * n] * scale[1] + base[n: 2 * n])
    comb = (mixes[..., 2 * n:] * scale[2] + base[2 * n:]).unflatten(-1, (n, n))
    comb = comb.softmax(dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return pre, post, comb


_sinkhorn_fn = sinkhorn_split


def set_sinkhorn(fn=None):
    """Replaces the Sinkhorn function the blocks call (e.g. a torch.compile of
    sinkhorn_split: 20 tiny iterations are most of the kernels of an eager step); None
    restores sinkhorn_split."""
    global _sinkhorn_fn
    _sinkhorn_fn = fn or sinkhorn_split


def hc_collapse(X, pre):
    """[..., n, d] x [..., n] -> [..., d]"""
    return torch.sum(pre.unsqueeze(-1) * X.float(), dim=-2)


class Block(nn.Module):
    """One layer: single-pass mHC around attention and MoE (spec §4.6)."""

    def __init__(self, num, c: V41Config, role: LayerRole):
        super().__init__()
        self.c, self.role = c, role
        n, d, m = c.hc_mult, c.dim, c.hc_mix_dim
        self.attn_norm = RMSNorm(num, d, c.norm_eps)
        self.ffn_norm = RMSNorm(num, d, c.norm_eps)
        for site in ("attn", "ffn"):
            fn = nn.Parameter(torch.empty(m, n * d))
            nn.init.uniform_(fn, -math.sqrt(3.0 / (n * d)), math.sqrt(3.0 / (n * d)))
            setattr(self, f"hc_{site}_fn", fn)
            setattr(self, f"hc_{site}_base", nn.Parameter(torch.zeros(m)))
            setattr(self, f"hc_{site}_scale", nn.Parameter(torch.full((3,), 0.5)))
        self.attn = Attention(num, c, role)
        self.ffn = MoE(num, c, role)
        if role.has_engram:
            rows = c.engram_num_embeddings[c.engram_layer_ids.index(role.layer)]
            self.engram = Engram(num, c, rows)

    def mixes(self, X, site: str):
        c = self.c
        x = X.flatten(-2).float()
        rsqrt = torch.rsqrt(x.square().mean(-1, keepdim=True) + c.norm_eps)
        m = F.linear(x, getattr(self, f"hc_{site}_fn")) * rsqrt
        return _sinkhorn_fn(m, getattr(self, f"hc_{site}_scale"), getattr(self, f"hc_{site}_base"),
                              c.hc_mult, c.hc_sinkhorn_iters, c.hc_eps)

    @staticmethod
    def expand(y, X, post, comb):
        return post.unsqueeze(-1) * y.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * X.unsqueeze(-2), dim=-3)

    def forward(self, X, pre_in, attn_fn):
        """X [..., n, d]; pre_in [..., n] (previous block's FFN pre, one-hot for the first).
        Returns (X', ffn_pre, RouterOut)."""
        a_pre, a_post, a_comb = self.mixes(X, "attn")
        y = attn_fn(self.attn_norm(hc_collapse(X, pre_in)))
        X = self.expand(y, X, a_post, a_comb)
        f_pre, f_post, f_comb = self.mixes(X, "ffn")
        z, router = self.ffn(self.ffn_norm(hc_collapse(X, a_pre)))
        return self.expand(z, X, f_post, f_comb), f_pre, router


@dataclass
class V41Output:
    logits: torch.Tensor                  # [B, S, V] fp32
    hidden: torch.Tensor                  # [B, S, d] collapsed final hidden (pre-norm)
    main_hidden: Optional[torch.Tensor]   # [B, S, len(targets) * d] DSpark target features
    routers: list                         # per backbone layer RouterOut
    indexer: dict                         # index source layer -> IndexerOut
    block_out: Optional[list] = None      # per layer output streams [B, S, n, d]


@dataclass
class DSparkOutput:
    logits: torch.Tensor                  # [B, A, bs, V] base logits (+ Markov bias if prev given)
    hidden: torch.Tensor                  # [B, A, bs, d] collapsed hidden (confidence input)
    confidence: Optional[torch.Tensor]    # [B, A, bs] logits of P(accept)
    markov_embed: Optional[torch.Tensor]  # [B, A, bs, rank]
    routers: list


class V41Model(nn.Module):
    def __init__(self, c: V41Config, token_map=None):
        super().__init__()
        self.c = c
        self.num = Numerics()
        self.roles = layer_roles(c)
        self.embed = nn.Embedding(c.vocab_size, c.dim)
        nn.init.uniform_(self.embed.weight, -math.sqrt(3.0), math.sqrt(3.0))
        self.layers = nn.ModuleList(Block(self.num, c, self.roles[i]) for i in range(c.n_layers))
        self.norm = RMSNorm(self.num, c.dim, c.norm_eps)
        self.head = QLinear(self.num, c.dim, c.vocab_size, "bf16")
        self.mtp = nn.ModuleList(Block(self.num, c, self.roles[c.n_layers + s])
                                 for s in range(c.n_mtp_layers if c.dspark_block_size else 0))
        if len(self.mtp):
            first, last = self.mtp[0], self.mtp[-1]
            first.main_proj = QLinear(self.num, c.dim * len(c.dspark_target_layer_ids), c.dim, "fp8")
            first.main_norm = RMSNorm(self.num, c.dim, c.norm_eps)
            last.norm = RMSNorm(self.num, c.dim, c.norm_eps)
            last.markov_head = nn.Module()
            last.markov_head.markov_w1 = nn.Embedding(c.vocab_size, c.dspark_markov_rank)
            last.markov_head.markov_w2 = QLinear(self.num, c.dspark_markov_rank, c.vocab_size, "bf16")
            last.confidence_head = nn.Module()
            last.confidence_head.proj = QLinear(self.num, c.dim + c.dspark_markov_rank, 1, "f32")
        self.hasher = EngramHasher(c, token_map) if c.engram_layer_ids else None
        self._rope = {}

    # ---- numerics -------------------------------------------------------------------------

    def set_numerics(self, mode: str):
        """"float" | "qat" | "reference" (module docstring)."""
        assert mode in ("float", "qat", "reference"), mode
        self.num.quant = mode != "float"
        self.num.exact = mode == "reference"

    def _ropes(self, n_pos: int, device):
        key = (n_pos, str(device))
        if key not in self._rope:
            if len(self._rope) >= 8:
                self._rope.clear()
            self._rope[key] = {"swa": rope_freqs(self.c, False, n_pos, device),
                               "cmp": rope_freqs(self.c, True, n_pos, device)}
        return self._rope[key]

    def _embed(self, ids):
        e = self.embed(ids)
        return Q.ste(e, Q.round_bf16) if self.num.quant else e

    # ---- backbone ---------------------------------------------------------------------------

    def forward(self, ids: torch.Tensor, want_indexer_targets: bool = False,
                want_block_out: bool = False, detach_indexer: bool = True) -> V41Output:
        """ids [B, S] int64, each row a sequence starting at position 0 (causal).

        Indexer objective: for every index source layer L, `indexer[L].scores` are the
        indexer logits I over compressed entries (-inf where not visible, and outside the
        candidate pool for Reindex layers) and, with want_indexer_targets, `target` is the
        distribution they should match: layer L's own attention over the same entries,
        softmax_t(q_h . ckv_t / sqrt(D)) over the visible (pool) entries, averaged over
        heads, detached. A KL(target || softmax(I)) trains the indexer. detach_indexer
        (default) feeds the indexer detached inputs, so that loss trains only the indexer's
        own weights (wq_b, weights_proj, wk, k_norm), as in DeepSeek-V3.2's recipe."""
        with torch.autocast(ids.device.type, enabled=False) if self.num.exact else nullcontext():
            return self._forward(ids, want_indexer_targets, want_block_out, detach_indexer)

    def _forward(self, ids, want_targets, want_block_out, detach_indexer):
        c = self.c
        B, S = ids.shape
        st = FwdState(S=S, rope=self._ropes(S + c.dspark_block_size + 1, ids.device),
                      want_targets=want_targets, detach_indexer=detach_indexer)
        hashes = self.hasher(ids) if self.hasher is not None else None
        X = self._embed(ids).unsqueeze(2).repeat(1, 1, c.hc_mult, 1)
        pre = torch.zeros(B, S, c.hc_mult, device=ids.device)
        pre[..., 0] = 1.0
        feats, routers, outs = [], [], [] if want_block_out else None
        for i, layer in enumerate(self.layers):
            if layer.role.has_engram:
                X = layer.engram(X, hashes[:, :, c.engram_layer_ids.index(i)])
            if i in c.dspark_target_layer_ids:
                feats.append(X.mean(dim=2))
            X, pre, router = layer(X, pre, lambda x, a=layer.attn: a(x, st))
            routers.append(router)
            if outs is not None:
                outs.append(X)
        h = hc_collapse(X, pre)
        logits = F.linear(self.norm(h), self.head.qweight())
        main_hidden = torch.cat(feats, dim=-1) if feats else None
        return V41Output(logits, h, main_hidden, routers, st.indexer, outs)

    # ---- DSpark -----------------------------------------------------------------------------

    def dspark_forward(self, main_hidden, anchors, block_ids, prev_ids=None) -> DSparkOutput:
        """Draft blocks for many anchors at once (spec §4.8).

        main_hidden [B, S, 3d] (from forward(); detach it to keep the backbone frozen);
        anchors [B, A] int64 positions p; block_ids [B, A, bs] tokens at positions
        p+1..p+bs (usually [t_{p+1}, noise, ...]). Block position i predicts the token at
        p+2+i. prev_ids [B, A, bs]: the token before each predicted one (position p+1+i;
        teacher forcing) for the Markov bias and the confidence head; None = base only."""
        with torch.autocast(main_hidden.device.type, enabled=False) if self.num.exact else nullcontext():
            c, first, last = self.c, self.mtp[0], self.mtp[-1]
            B, A, bs = block_ids.shape
            S = main_hidden.shape[1]
            st = FwdState(S=S, rope=self._ropes(S + bs + 1, main_hidden.device))
            main_x = first.main_norm(first.main_proj(main_hidden))
            X = self._embed(block_ids.reshape(B * A, bs)).unsqueeze(2).repeat(1, 1, c.hc_mult, 1)
            pre = torch.zeros(B * A, bs, c.hc_mult, device=X.device)
            pre[..., 0] = 1.0
            routers = []
            for stage in self.mtp:
                fn = lambda x, a=stage.attn: a.forward_draft(x, main_x, anchors, st)
                X, pre, router = stage(X, pre, fn)
                routers.append(router)
            h = hc_collapse(X, pre)
            logits = F.linear(last.norm(h), self.head.qweight()).view(B, A, bs, -1)
            h = h.view(B, A, bs, -1)
            if prev_ids is None:
                return DSparkOutput(logits, h, None, None, routers)
            bias, emb = self.markov(prev_ids)
            return DSparkOutput(logits + bias, h, self.confidence(h, emb), emb, routers)

    def markov(self, prev_ids):
        """Low-rank bigram bias: (logit bias [..., V], Markov embedding [..., rank])."""
        mh = self.mtp[-1].markov_head
        emb = mh.markov_w1(prev_ids)
        if self.num.quant:
            emb = Q.ste(emb, Q.round_bf16)
        return F.linear(emb, mh.markov_w2.qweight()), emb

    def confidence(self, h, emb):
        return self.mtp[-1].confidence_head.proj(torch.cat([h, emb], dim=-1).float()).squeeze(-1)

    @torch.no_grad()
    def dspark_draft(self, main_hidden, anchors, first_ids):
        """Greedy drafting as the reference's forward_spec: block [t*, noise...], Markov
        prev = the previous draft. Returns (ids [B, A, bs+1] with t* first, logits
        [B, A, bs, V], confidence [B, A, bs])."""
        c = self.c
        bs = c.dspark_block_size
        block = first_ids.new_full((*first_ids.shape, bs), c.dspark_noise_token_id)
        block[..., 0] = first_ids
        out = self.dspark_forward(main_hidden, anchors, block)
        ids, logits, conf = [first_ids], [], []
        for i in range(bs):
            bias, emb = self.markov(ids[-1])
            li = out.logits[:, :, i] + bias
            logits.append(li)
            conf.append(self.confidence(out.hidden[:, :, i], emb))
            ids.append(li.argmax(dim=-1))
        return torch.stack(ids, -1), torch.stack(logits, 2), torch.stack(conf, -1)
