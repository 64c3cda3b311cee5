"""Model config of DeepSeek-V4.1 (spec §4.1) and the layer roles it implies (spec §4.2).

`V41Config.load(path)` reads the HF-style `config.json` that `models/*/config.json` and
`//tools:gen_model` use (keys under `text_config`, quantization under
`quantization_config`). Field names are the reference's `ModelArgs` names.
"""

import json
from dataclasses import dataclass, field, fields
from typing import Optional


@dataclass
class V41Config:
    vocab_size: int = 4096
    dim: int = 256
    moe_inter_dim: int = 64
    n_layers: int = 12
    n_mtp_layers: int = 3
    n_heads: int = 4
    head_dim: int = 128
    rope_head_dim: int = 32
    q_lora_rank: int = 64
    o_groups: int = 2
    o_lora_rank: int = 64
    norm_eps: float = 1e-20
    n_routed_experts: int = 8
    n_shared_experts: int = 1
    n_activated_experts: int = 2
    score_func: str = "sqrtsoftplus"
    norm_topk_prob: bool = True
    gate_temp: float = 1.0
    route_scale: float = 1.5
    swiglu_limit: float = 10.0
    window_size: int = 8
    compress_ratios: tuple = ()
    kv_source_layers: tuple = ()
    index_source_layers: tuple = ()
    candidate_source_layer: int = -1
    candidate_topk_blocks: int = 0
    candidate_block_size: int = 0
    index_n_heads: int = 4
    index_head_dim: int = 64
    index_topk: int = 8
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    original_seq_len: int = 0
    rope_factor: float = 1.0
    beta_fast: int = 32
    beta_slow: int = 1
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    engram_layer_ids: tuple = ()
    engram_num_embeddings: tuple = ()
    engram_max_ngram_size: int = 4
    engram_n_heads: int = 4
    engram_head_dim: int = 32
    engram_vocab_size: int = 1000
    engram_pad_id: int = 2
    engram_compressed_vocab_size: int = 0
    dspark_block_size: int = 0
    dspark_noise_token_id: int = 0
    dspark_target_layer_ids: tuple = ()
    dspark_markov_rank: int = 16
    dspark_n_routed_experts: int = 0
    dspark_n_activated_experts: int = 0
    fp8_block_size: int = 32
    fp4_block_size: int = 32
    raw_json: Optional[dict] = field(default=None, repr=False, compare=False)

    # HF text_config key -> field name (where they differ)
    _HF_KEYS = {
        "hidden_size": "dim",
        "moe_intermediate_size": "moe_inter_dim",
        "num_hidden_layers": "n_layers",
        "num_nextn_predict_layers": "n_mtp_layers",
        "num_attention_heads": "n_heads",
        "qk_rope_head_dim": "rope_head_dim",
        "rms_norm_eps": "norm_eps",
        "num_experts_per_tok": "n_activated_experts",
        "scoring_func": "score_func",
        "routed_scaling_factor": "route_scale",
        "sliding_window": "window_size",
        "kv_source_layer_ids": "kv_source_layers",
        "index_source_layer_ids": "index_source_layers",
        "candidate_source_layer_id": "candidate_source_layer",
        "engram_pad_token_id": "engram_pad_id",
        "dspark_num_experts_per_tok": "dspark_n_activated_experts",
    }

    @classmethod
    def from_dict(cls, root: dict) -> "V41Config":
        text = root.get("text_config", root)
        names = {f.name for f in fields(cls)}
        kw = {}
        for key, value in text.items():
            name = cls._HF_KEYS.get(key, key)
            if name in names:
                kw[name] = tuple(value) if isinstance(value, list) else value
        rope = text.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type")) == "yarn":
            kw["original_seq_len"] = rope["original_max_position_embeddings"]
            kw["rope_factor"] = rope["factor"]
            kw["beta_fast"] = rope.get("beta_fast", 32)
            kw["beta_slow"] = rope.get("beta_slow", 1)
        q = root.get("quantization_config") or {}
        if "weight_block_size" in q:
            kw["fp8_block_size"] = q["weight_block_size"][0]
        cfg = cls(**kw)
        cfg.raw_json = root
        return cfg

    @classmethod
    def load(cls, path: str) -> "V41Config":
        with open(path) as f:
            return cls.from_dict(json.load(f))

    @property
    def n_blocks(self) -> int:
        return self.n_layers + self.n_mtp_layers

    @property
    def hc_mix_dim(self) -> int:
        return (2 + self.hc_mult) * self.hc_mult

    @property
    def engram_hash_cols(self) -> int:
        return (self.engram_max_ngram_size - 1) * self.engram_n_heads


@dataclass
class LayerRole:
    """What a layer does (spec §4.2). Layers >= n_layers are DSpark stages (mtp.*)."""

    layer: int
    ratio: int = 0
    kind: str = "swa"  # swa | full | reuse | reindex
    is_dspark: bool = False
    kv_source: int = -1  # layer whose compressed KV / index K this layer reads
    index_source: int = -1  # layer whose top-k this layer uses
    candidate_source: int = -1  # pool restricting this layer's indexer, -1 none
    produces_candidates: bool = False
    has_compressor: bool = False  # attn.compressor.* + attn.indexer.{wk,k_norm}
    has_indexer: bool = False  # attn.indexer.{wq_b,weights_proj}
    has_engram: bool = False
    n_experts: int = 0
    n_active: int = 0


def layer_roles(c: V41Config) -> list:
    roles = []
    for layer in range(c.n_blocks):
        r = LayerRole(layer=layer, ratio=c.compress_ratios[layer])
        r.is_dspark = layer >= c.n_layers
        r.has_engram = layer in c.engram_layer_ids and not r.is_dspark
        if r.is_dspark:
            r.n_experts = c.dspark_n_routed_experts or c.n_routed_experts
            r.n_active = c.dspark_n_activated_experts or c.n_activated_experts
        else:
            r.n_experts, r.n_active = c.n_routed_experts, c.n_activated_experts
        if r.ratio > 0 and not r.is_dspark:
            r.kv_source = max(s for s in c.kv_source_layers if s <= layer)
            r.has_compressor = layer in c.kv_source_layers
            r.has_indexer = layer in c.index_source_layers
            r.index_source = layer if r.has_indexer else max(
                s for s in c.index_source_layers if s <= layer)
            r.produces_candidates = r.has_indexer and layer == c.candidate_source_layer
            if r.has_indexer and 0 <= c.candidate_source_layer < layer:
                r.candidate_source = c.candidate_source_layer
            r.kind = ("full" if r.has_compressor else
                      "reindex" if r.has_indexer else "reuse")
        roles.append(r)
    return roles
