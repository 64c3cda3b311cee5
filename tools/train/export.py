"""Checkpoint import/export in the official V4.1 layout, as //tools:gen_model writes it.

Directory: config.json (HF layout, written verbatim) + model-0000k-of-0000n.safetensors
shards + model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}).
Tensor list and order: `checkpoint_params` mirrors worker/model/checkpoint_layout.cc
(ModelParams / StoredTensors); formats:

  fp8     <name>.weight F8_E4M3 [r, c] + <name>.scale F8_E8M0 [ceil(r/32), ceil(c/32)]
  mxfp4   <name>.weight I8 [r, c/2] (element 2k in the low nibble) + .scale F8_E8M0 [r, c/32]
  fp8rows <name>.weight F8_E4M3 [r, c] + .scale F8_E8M0 [r, c/32]    (Engram tables)
  bf16    <name> BF16,  f32 <name> F32

    model, report = import_checkpoint("/tmp/tiny")        # V41Model, float32 master weights
    export_checkpoint(model, "/tmp/out")                  # quantizes with the same rules

CLI: python tools/train/export.py --src DIR --dst DIR   (import, then export)
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import quant as Q  # noqa: E402
from safetensors_io import RawTensor, raw_from_torch, read_safetensors, write_safetensors  # noqa: E402
from v41 import V41Model  # noqa: E402
from v41_config import V41Config, layer_roles  # noqa: E402

INDEX_NAME = "model.safetensors.index.json"


def checkpoint_params(c: V41Config) -> list:
    """[(name, fmt, shape)] in the generator's order."""
    out = []
    roles = layer_roles(c)
    d, n = c.dim, c.hc_mult

    def block(p, role):
        for site in ("attn", "ffn"):
            out.append((f"{p}{site}_norm.weight", "bf16", [d]))
            out.append((f"{p}hc_{site}_fn", "f32", [c.hc_mix_dim, n * d]))
            out.append((f"{p}hc_{site}_base", "f32", [c.hc_mix_dim]))
            out.append((f"{p}hc_{site}_scale", "f32", [3]))
        a = p + "attn."
        out.extend([
            (a + "wq_a", "fp8", [c.q_lora_rank, d]),
            (a + "q_norm.weight", "bf16", [c.q_lora_rank]),
            (a + "wq_b", "fp8", [c.n_heads * c.head_dim, c.q_lora_rank]),
            (a + "wkv", "fp8", [c.head_dim, d]),
            (a + "kv_norm.weight", "bf16", [c.head_dim]),
            (a + "wo_a", "fp8", [c.o_groups * c.o_lora_rank, c.n_heads * c.head_dim // c.o_groups]),
            (a + "wo_b", "fp8", [d, c.o_groups * c.o_lora_rank]),
            (a + "attn_sink", "f32", [c.n_heads]),
        ])
        if role.has_compressor:
            out.append((a + "compressor.wkv.weight", "bf16", [c.head_dim, d]))
            if role.ratio > 1:
                out.append((a + "compressor.wgate.weight", "bf16", [c.head_dim, d]))
            out.append((a + "compressor.norm.weight", "bf16", [c.head_dim]))
            out.append((a + "indexer.wk.weight", "bf16", [c.index_head_dim, c.head_dim]))
            out.append((a + "indexer.k_norm.weight", "bf16", [c.index_head_dim]))
        if role.has_indexer:
            out.append((a + "indexer.wq_b", "fp8", [c.index_n_heads * c.index_head_dim, c.q_lora_rank]))
            out.append((a + "indexer.weights_proj.weight", "bf16", [c.index_n_heads, d]))
        f = p + "ffn."
        E = role.n_experts
        out.extend([(f + "gate.weight", "bf16", [E, d]), (f + "gate.bias", "f32", [E]),
                    (f + "gate.bias_vl", "f32", [E])])
        for e in range(E):
            x = f"{f}experts.{e}."
            out.extend([(x + "w1", "mxfp4", [c.moe_inter_dim, d]), (x + "w2", "mxfp4", [d, c.moe_inter_dim]),
                        (x + "w3", "mxfp4", [c.moe_inter_dim, d])])
        if c.n_shared_experts > 0:
            inter = c.n_shared_experts * c.moe_inter_dim
            out.extend([(f + "shared_experts.w1", "fp8", [inter, d]),
                        (f + "shared_experts.w2", "fp8", [d, inter]),
                        (f + "shared_experts.w3", "fp8", [inter, d])])
        if role.has_engram:
            rows = c.engram_num_embeddings[c.engram_layer_ids.index(role.layer)]
            out.extend([(p + "engram.embed", "fp8rows", [rows, c.engram_head_dim]),
                        (p + "engram.wkv", "fp8", [(n + 1) * d, c.engram_hash_cols * c.engram_head_dim]),
                        (p + "engram.q_weight", "bf16", [n, d]), (p + "engram.k_weight", "bf16", [n, d])])

    out.append(("embed.weight", "bf16", [c.vocab_size, d]))
    for layer in range(c.n_layers):
        block(f"layers.{layer}.", roles[layer])
    for s in range(c.n_mtp_layers):
        p = f"mtp.{s}."
        block(p, roles[c.n_layers + s])
        if s == 0:
            out.append((p + "main_proj", "fp8", [d, d * len(c.dspark_target_layer_ids)]))
            out.append((p + "main_norm.weight", "bf16", [d]))
        if s == c.n_mtp_layers - 1:
            out.append((p + "norm.weight", "bf16", [d]))
            out.append((p + "markov_head.markov_w1.weight", "bf16", [c.vocab_size, c.dspark_markov_rank]))
            out.append((p + "markov_head.markov_w2.weight", "bf16", [c.vocab_size, c.dspark_markov_rank]))
            out.append((p + "confidence_head.proj.weight", "f32", [1, d + c.dspark_markov_rank]))
    out.append(("norm.weight", "bf16", [d]))
    out.append(("head.weight", "bf16", [c.vocab_size, d]))
    return out


def state_key(name: str, fmt: str) -> str:
    """The V41Model state_dict key of a checkpoint parameter."""
    return name + ".weight" if fmt in ("fp8", "mxfp4", "fp8rows") else name


def _ceil(a, b):
    return (a + b - 1) // b


def stored_decls(name, fmt, shape, c: V41Config) -> list:
    """[(tensor name, dtype, shape)] of one parameter (StoredTensors)."""
    r = shape[0] if shape else 0
    k = shape[1] if len(shape) > 1 else 0
    if fmt == "bf16":
        return [(name, "BF16", shape)]
    if fmt == "f32":
        return [(name, "F32", shape)]
    if fmt == "fp8":
        b = c.fp8_block_size
        return [(name + ".weight", "F8_E4M3", shape), (name + ".scale", "F8_E8M0", [_ceil(r, b), _ceil(k, b)])]
    if fmt == "mxfp4":
        return [(name + ".weight", "I8", [r, k // 2]), (name + ".scale", "F8_E8M0", [r, k // c.fp4_block_size])]
    return [(name + ".weight", "F8_E4M3", shape), (name + ".scale", "F8_E8M0", [r, k // 32])]


def encode_param(t: torch.Tensor, fmt: str, c: V41Config) -> list:
    """float32 values -> [RawTensor] in stored_decls order."""
    t = t.detach().float().cpu()
    if fmt == "bf16":
        return [raw_from_torch(t.to(torch.bfloat16), "BF16")]
    if fmt == "f32":
        return [raw_from_torch(t, "F32")]
    if fmt == "fp8":
        codes, scales = Q.encode_fp8_weight(t, c.fp8_block_size)
    elif fmt == "mxfp4":
        codes, scales = Q.encode_mxfp4(t, c.fp4_block_size)
        return [raw_from_torch(codes, "I8"), raw_from_torch(scales, "F8_E8M0")]
    else:
        codes, scales = Q.encode_fp8_rows(t)
    return [raw_from_torch(codes, "F8_E4M3"), raw_from_torch(scales, "F8_E8M0")]


def decode_param(raws: list, fmt: str, c: V41Config) -> torch.Tensor:
    if fmt in ("bf16", "f32"):
        return raws[0].to_torch().float()
    codes, scales = raws[0].to_torch(), raws[1].to_torch()
    if fmt == "fp8":
        return Q.decode_fp8_weight(codes, scales, c.fp8_block_size)
    if fmt == "mxfp4":
        return Q.decode_mxfp4(codes, scales, c.fp4_block_size)
    return Q.decode_fp8_rows(codes, scales)


def read_checkpoint_tensors(ckpt_dir: str) -> dict:
    index = os.path.join(ckpt_dir, INDEX_NAME)
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(x for x in os.listdir(ckpt_dir) if x.endswith(".safetensors"))
    tensors = {}
    for fname in files:
        tensors.update(read_safetensors(os.path.join(ckpt_dir, fname))[0])
    return tensors


def import_checkpoint(ckpt_dir: str, token_map=None, device="cpu"):
    """Returns (V41Model with the dequantized values as float32 parameters, report dict
    {"missing", "mismatched", "unexpected"}); raises ValueError on missing/mismatched."""
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        config_text = f.read()
    c = V41Config.from_dict(json.loads(config_text))
    model = V41Model(c, token_map)
    model.config_text = config_text
    tensors = read_checkpoint_tensors(ckpt_dir)
    state = model.state_dict()
    report = {"missing": [], "mismatched": [], "unexpected": []}
    used = set()
    with torch.no_grad():
        for name, fmt, shape in checkpoint_params(c):
            decls = stored_decls(name, fmt, shape, c)
            raws = []
            for tname, dtype, tshape in decls:
                t = tensors.get(tname)
                if t is None:
                    report["missing"].append(tname)
                elif t.dtype != dtype or list(t.shape) != list(tshape):
                    report["mismatched"].append(f"{tname}: expected {dtype} {tshape}, found {t.dtype} {t.shape}")
                raws.append(t)
                used.add(tname)
            if any(r is None for r in raws) or report["mismatched"]:
                continue
            state[state_key(name, fmt)].copy_(decode_param(raws, fmt, c).view(shape))
    report["unexpected"] = sorted(set(tensors) - used)
    if report["missing"] or report["mismatched"]:
        raise ValueError(f"checkpoint {ckpt_dir} does not match its config: {report}")
    return model.to(device), report


def export_checkpoint(model: V41Model, out_dir: str, config_text=None, max_shard_bytes=2048 << 20):
    """Writes `model` in the official layout (quantizing with the stored formats' rules)."""
    c = model.c
    if config_text is None:
        config_text = getattr(model, "config_text", None) or json.dumps(c.raw_json, indent=2) + "\n"
    os.makedirs(out_dir, exist_ok=True)
    state = model.state_dict()
    shards, size = [[]], 0
    for name, fmt, shape in checkpoint_params(c):
        raws = encode_param(state[state_key(name, fmt)].reshape(shape), fmt, c)
        decls = stored_decls(name, fmt, shape, c)
        nbytes = sum(r.data.numel() for r in raws)
        if size > 0 and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].extend((d[0], r) for d, r in zip(decls, raws))
        size += nbytes
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(out_dir, fname), shard, {"format": "pt"})
        for tname, r in shard:
            weight_map[tname] = fname
            total += r.data.numel()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(out_dir, INDEX_NAME), "w") as f:
        f.write(json.dumps(index, indent=1, sort_keys=True) + "\n")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(config_text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True, help="checkpoint directory to import")
    ap.add_argument("--dst", required=True, help="directory to export into")
    args = ap.parse_args()
    model, report = import_checkpoint(args.src)
    export_checkpoint(model, args.dst)
    print(f"exported {args.dst}; unexpected tensors in the source: {len(report['unexpected'])}")


if __name__ == "__main__":
    main()
