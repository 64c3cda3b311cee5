// Decode step time of the V4.1 model on the CUDA backend (CudaOps) through
// Model::ForwardBatch, at several batch sizes, against a memory floor
// measured in the same process:
//   floor = (weight bytes + KV bytes the step's kernels read) / device copy
//           bandwidth (cudaMemcpy device-to-device, read + write counted)
// The bytes are counted by CudaOps itself (CudaOpsStats::weight_bytes_read,
// kv_bytes_read): the fp32 weights this backend holds, as every kernel of
// the step was given them, plus the gathered KV rows and index keys.
// Also reported per step: the device time inside kernels and copies (CUDA
// events around every op), the time the GPU runs no kernel (step time minus
// kernel time), and the host time outside the ops (the model's own host
// code). CudaOps copies activations to and from the host around every op and
// synchronizes after each, so the step is expected to be far above the
// floor: this binary is the measurement harness for the backends that follow.
//
// Then the same batches on DeviceDecoder (worker/model/device_decoder.h):
// activations and KV resident on the device, each decode step one CUDA graph
// replay (and, for comparison, the same kernels launched eagerly). Its floor
// is the stored-form floor (tools/bench/decode_floor.h: the bytes a step must
// read as the model stores them — FP8 dense weights + scales, the MXFP4
// experts hit, KV in the cache's formats), with the old fp32 floor (the
// CudaOps run's bytes) printed next to it;
// gpu_idle is the step's wall time minus the device time between events
// around the graph (host preparation, the input copy, the logits copy).
// A third run replays graphs with the expert-parallel exchange on: an NCCL
// communicator of one rank (the worker's single-GPU configuration), so every
// MoE layer packs its blocks and moves them through NCCL (device copies in a
// world of 1); the table's last line is its step time over the plain graph's.
//
// With --ep_slice=N instead: one expert-parallel rank's slice of a large
// config (--slice_config, V4.1-Flash by default): every attention and dense
// weight, n_routed_experts / N routed experts (the experts one rank of EP=N
// holds; each token's top-k then lands on them, the per-rank expert work of
// EP=N with DP=N), Engram dropped (its tables are row-sharded in EP and
// not synthesized). Weights are synthetic, drawn on the device
// (CreateSyntheticDeviceDecoder, testonly; routed experts MXFP4 as stored,
// the rest fp32 as the decoder holds them). Sequences start empty and decode
// --context positions before the timed steps. The floor counts the bytes a
// step must read in stored form (decode_floor.h): dense weights, the routed
// experts hit (expected distinct experts under uniform routing), and the KV
// and index keys the attention reads at the timed positions; the old fp32
// floor is printed next to it.
//
// With --csv=PATH every measured row also goes to PATH (tools/bench/decode_csv.h:
// model, path, numerics, mode, batch, step, floor, old fp32 floor, ratios,
// tokens/s, graph nodes), which tools/bench/plot.py renders as step vs floor
// by batch size.
//
//   tools/bazel build //tools/bench:decode_gpu   (run on the GPU machine from
//   the repository root: it reads models/small/config.json)

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/init.h"
#include "base/logging.h"
#include "parallel/nccl_communicator.h"
#include "tools/bench/decode_csv.h"
#include "tools/bench/decode_floor.h"
#include "tools/bench/fp8_peak.h"
#include "tools/bench/kernel_timeline.h"
#include "worker/model/cuda_ops.h"
#include "worker/model/device_decoder.h"
#include "worker/model/device_decoder_synthetic.h"
#include "worker/model/layer_roles.h"
#include "worker/model/model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/sampling/sampler.h"

ABSL_FLAG(std::string, config, "models/small/config.json", "config.json of the model.");
ABSL_FLAG(std::string, dir, "", "Where to generate the checkpoint (default: a temp dir).");
ABSL_FLAG(std::string, batches, "1,8,32,64", "Batch sizes (sequences per decode step).");
ABSL_FLAG(int, prompt, 16, "Prompt tokens per sequence (one prefill step for the batch).");
ABSL_FLAG(int, warmup, 2, "Decode steps before timing.");
ABSL_FLAG(int, steps, 8, "Timed decode steps per batch size.");
ABSL_FLAG(bool, bf16, true, "ActivationPrecision::kBf16 (else kFp32).");
ABSL_FLAG(bool, cuda_ops, true, "Measure the CudaOps path (Model::ForwardBatch).");
ABSL_FLAG(bool, device_decoder, true, "Measure DeviceDecoder (graphs and eager).");
ABSL_FLAG(int, ep_slice, 0,
          "> 0: only the slice benchmark: one rank of EP=N of --slice_config on DeviceDecoder "
          "with synthetic weights.");
ABSL_FLAG(std::string, slice_config, "models/v41-flash/config.json",
          "Config the --ep_slice benchmark slices.");
ABSL_FLAG(int, context, 64, "--ep_slice: positions decoded before the timed steps.");
ABSL_FLAG(int, prefill_chunk, 0,
          "--ep_slice: > 0 fills each sequence's context by device-resident prefill chunks of "
          "this many positions (DeviceDecoder::StepRows, the last chunk's last row's logits "
          "only), timed, with model FLOPs against cuBLASLt's FP8 GEMM; 0 decodes the context "
          "one position a step.");
ABSL_FLAG(int, prefill_mixed_rows, 0,
          "--ep_slice --prefill_chunk: N > 0 puts N other sequences' generated positions (one "
          "row each, first in the step) beside every prefill chunk, as a serving step that "
          "mixes a prompt chunk with decode rows does; they start with an 8-position prompt "
          "of their own, untimed. The prefill line still counts the chunks' positions only.");
ABSL_FLAG(bool, slice_profile, true,
          "--ep_slice: also step an eager decoder with section events at the smallest and "
          "largest batch and print where its device time goes.");
ABSL_FLAG(std::string, numerics, "reference,fast",
          "DeviceDecoder numerics to measure, in order (reference, fast).");
ABSL_FLAG(
    std::string, expert_tile, "",
    "kFast: the grouped MXFP4 experts' CTA tile (w4m8, w4m8s4, w4m8s3, w4m16s4, w4m32, w8m64; "
    "empty: chosen from the rows per expert; DeviceDecoderOptions::expert_tile).");
ABSL_FLAG(bool, expert_wgmma, false,
          "kFast: the routed experts' block sums on wgmma (DeviceDecoderOptions::expert_wgmma); "
          "false: the f16 mma pair.");
ABSL_FLAG(bool, expert_wgmma_f16, false,
          "kFast: the routed experts' f16 block sums on wgmma m64nNk16 f16, the mma pair's bits "
          "(DeviceDecoderOptions::expert_wgmma_f16).");
ABSL_FLAG(bool, dense_wgmma_f16, false,
          "kFast: FP8 linears of more than 256 rows on wgmma f16, the mma pair's bits "
          "(DeviceDecoderOptions::dense_wgmma_f16).");
ABSL_FLAG(bool, dense_wgmma_f16_decode, false,
          "FP8 linears of at most 16 rows on f16 wgmma too, the same bits "
          "(DeviceDecoderOptions::dense_wgmma_f16_decode).");
ABSL_FLAG(bool, expert_prefill_tiles, true,
          "kFast with --expert_wgmma: prefill steps run the routed experts on the FP8 tile form "
          "(DeviceDecoderOptions::expert_prefill_tiles; the MXFP4 kernel's bits).");
ABSL_FLAG(bool, expert_tiles_resident, false,
          "With the tile form: every layer's experts converted once and kept in the arena, not "
          "converted a prefill step (DeviceDecoderOptions::expert_tiles_resident; same bits).");
ABSL_FLAG(bool, attention_wgmma, true,
          "kFast: the sparse attention on one CTA a query for 64 heads (wgmma) instead of "
          "one a query and 16 heads (mma.sync) (DeviceDecoderOptions::attention_wgmma).");
ABSL_FLAG(int32_t, attention_range_tiles, 0,
          "With --attention_wgmma: the least 64-entry tiles of a query's list a CTA takes (0: 2, "
          "the decode latency; 16: one CTA a query, the prefill throughput) "
          "(DeviceDecoderOptions::attention_range_tiles).");
ABSL_FLAG(int32_t, prompt_range_tiles, 16,
          "The prefill chunks' positions (a prompt's: SetPromptEnd) on the wgmma attention with "
          "this many tiles a CTA, the decode steps' as --attention_wgmma / "
          "--attention_range_tiles say (0: off; DeviceDecoderOptions::prompt_range_tiles).");
ABSL_FLAG(bool, staged_attention, true,
          "kFast, unstored pools (small): the attention's rows staged in shared memory (same "
          "bits; DeviceDecoderOptions::staged_attention).");
ABSL_FLAG(int32_t, attention_heads_per_block, 0,
          "With --staged_attention: the heads of a query one block takes (0: chosen from the "
          "launch's size; 1, 2, 4 or 8; same bits; DeviceDecoderOptions::"
          "attention_heads_per_block).");
ABSL_FLAG(bool, fused_attention_out, true,
          "kFast, unstored pools: the staged attention writes the grouped output projection's "
          "input with the inverse RoPE itself (same bits; DeviceDecoderOptions::"
          "fused_attention_out).");
ABSL_FLAG(bool, direct_wo_a, true,
          "kFast, bf16 grouped wo_a: its bf16 input written by the launch before it and u "
          "written in place by the product (two launches a layer fewer, same bits; "
          "DeviceDecoderOptions::direct_wo_a).");
ABSL_FLAG(bool, fused_swiglu_fp8, true,
          "kFast, FP8 shared expert: the SwiGLU writes w2's FP8 input itself (one launch a "
          "layer fewer, same bits; DeviceDecoderOptions::fused_swiglu_fp8).");
ABSL_FLAG(bool, bf16_branches, true,
          "kFast: the collapse-norm makes h's bf16 form for the bf16 products that read it, "
          "and the window-KV / compressor branch runs with bf16 weights too (same bits; "
          "DeviceDecoderOptions::bf16_branches).");
ABSL_FLAG(int64_t, gate_logits_in_block_macs, 0,
          "kFast: gates of at most this many multiply-adds a token sum their logits in "
          "MoeGate's block (one launch a layer fewer, same bits; DeviceDecoderOptions::"
          "gate_logits_in_block_macs; 0: MoeGateLogits always).");
ABSL_FLAG(bool, reduce_fp8_out, true,
          "kFast with --direct_wo_a: the grouped wo_a's split reduce also writes wo_b's FP8 "
          "input (one launch a layer fewer, same bits; DeviceDecoderOptions::reduce_fp8_out).");
ABSL_FLAG(int64_t, parallel_compressor_rows, 256,
          "Steps of at least this many rows run the compressor's decode kernel with a thread a "
          "row (same bits; DeviceDecoderOptions::parallel_compressor_rows; 0: never).");
ABSL_FLAG(int32_t, tile_conversion_rows, 1,
          "Tile rows one CTA of the experts' MXFP4 -> FP8 conversion walks (same codes; "
          "DeviceDecoderOptions::tile_conversion_rows).");
ABSL_FLAG(bool, attention_grouped_out, true,
          "kFast, stored pools: the wgmma attention writes wo_a's input transposed with the "
          "inverse RoPE (same bits, one launch a layer fewer; DeviceDecoderOptions::"
          "attention_grouped_out).");
ABSL_FLAG(bool, hc_mix_transposed, true,
          "fast_mhc: HcMixSplitK's warp sums with the reduction transposed (same bits; "
          "DeviceDecoderOptions::hc_mix_transposed).");
ABSL_FLAG(bool, hc_mix_token_loop, false,
          "fast_mhc: HcMixSplitK's token loop for calls of 64 tokens and more (same bits; "
          "DeviceDecoderOptions::hc_mix_token_loop).");
ABSL_FLAG(bool, indexer_shared_keys, true,
          "IndexerScore launches of 512 rows and more (prefill chunks) take the shared-keys "
          "form (same bits; DeviceDecoderOptions::indexer_shared_keys).");
ABSL_FLAG(bool, prompt_kv_mirror, true,
          "The prompt attention of eager steps reads bf16 mirrors of the rows its prompts may "
          "read, dequantized once a layer (same bits; DeviceDecoderOptions::prompt_kv_mirror).");
ABSL_FLAG(bool, attention_overlap, false,
          "kWgmma64 attention: the next tile's QK^T issued behind this tile's PV (same bits; "
          "DeviceDecoderOptions::attention_overlap).");
ABSL_FLAG(bool, coalesced_tile_conversion, true,
          "The experts' MXFP4 -> FP8 tile conversion in its row-major form (same codes; "
          "DeviceDecoderOptions::coalesced_tile_conversion).");
ABSL_FLAG(bool, fp8_ws_halves, false,
          "FP8 products on the warp-specialized prefill tile: each K block's sums in two halves, "
          "one folded while the other runs (same bits; DeviceDecoderOptions::fp8_ws_halves).");
ABSL_FLAG(bool, scaled_x16_panel, false,
          "With --x16_panel: the panel holds in-range blocks scaled by their scales, so the FP8 "
          "prefill tile folds such stages without its table (same bits; "
          "DeviceDecoderOptions::scaled_x16_panel).");
ABSL_FLAG(bool, used_rows_only, true,
          "The routed experts' SwiGLU and FP8 quantizations stop at the grouped rows in use "
          "(same bits; DeviceDecoderOptions::used_rows_only).");
ABSL_FLAG(bool, hc_mix_prefill_grid, false,
          "fast_mhc: HcMixSplitK's prefill grid (splits on y, 8 token groups a CTA) for calls "
          "of 256 tokens and more (same bits; DeviceDecoderOptions::hc_mix_prefill_grid).");
ABSL_FLAG(bool, stored_wo_a, false,
          "kFast, bf16 wo_a: held as the FP8 codes + scales it re-encodes to, widened by the "
          "product (same bits, half the bytes; DeviceDecoderOptions::stored_wo_a).");
ABSL_FLAG(bool, slice_bf16_wo_a, true,
          "--ep_slice: the slice's grouped wo_a as checkpoints load it (bf16 values, no "
          "act_quant: the bf16 product V4.1 runs, twice the FP8 bytes; --direct_wo_a and "
          "--reduce_fp8_out apply to it); false: the FP8 product with act_quant of the "
          "measurements before 2026-12-06.");
ABSL_FLAG(bool, prompt_bf16_linears, true,
          "kFast: the prompt positions' FP8 linears as Bf16Gemm over the operands dequantized "
          "exactly to bf16 (no per-32 fold; other low bits than the FP8 products, by role: "
          "DeviceDecoderOptions::prompt_bf16_linears).");
ABSL_FLAG(bool, prompt_bf16_experts, true,
          "With --prompt_bf16_linears: the prompt positions' routed experts on the bf16 route "
          "too (MXFP4 codes widened to bf16 in the product's stages, no tile conversion; "
          "DeviceDecoderOptions::prompt_bf16_experts).");
ABSL_FLAG(bool, fp8_span_products, true,
          "Eager steps of both roles: the FP8 products over the generated rows' ranges alone "
          "(DeviceDecoderOptions::fp8_span_products; same bits).");
ABSL_FLAG(bool, fused_expert_swiglu_fp8, true,
          "The routed experts' prefill forms: h's FP8 form in the SwiGLU's launch "
          "(DeviceDecoderOptions::fused_expert_swiglu_fp8; same bits).");
ABSL_FLAG(int32_t, bf16_route_widener_warps, 0,
          "--prompt_bf16_experts: the warps widening the MXFP4 codes in each CTA of the "
          "experts' bf16 route, 4 or 8 (0: the kernel's default; "
          "DeviceDecoderOptions::bf16_route_widener_warps; same bits).");
ABSL_FLAG(bool, bf16_route_register_a, true,
          "--prompt_bf16_experts: the experts' bf16 route with the consumers widening their own "
          "wgmma A fragments in registers, no widener warps "
          "(DeviceDecoderOptions::bf16_route_register_a; same bits).");
ABSL_FLAG(int32_t, bf16_route_x_rows, 256,
          "--bf16_route_register_a: X rows a CTA of the experts' bf16 route, 128 (0), 80 or 256 "
          "(DeviceDecoderOptions::bf16_route_x_rows; same bits).");
ABSL_FLAG(bool, bf16_route_swiglu, true,
          "With the route's 256-row tile: the gate and up products and the SwiGLU in one launch "
          "(DeviceDecoderOptions::bf16_route_swiglu; same bits).");
ABSL_FLAG(bool, bf16_route_tail_rows, false,
          "With the route's 256-row tile: an expert's last tile holds up to 32 rows past 256 "
          "(DeviceDecoderOptions::bf16_route_tail_rows; same bits).");
ABSL_FLAG(bool, bf16_route_multicast, false,
          "With the route's 256-row tile: pairs of CTAs share each X stage by a TMA multicast "
          "(DeviceDecoderOptions::bf16_route_multicast; same bits).");
ABSL_FLAG(bool, wide_group_rows, true,
          "MoeGroupRows past 4,096 pairs numbered by each warp of its block in parallel "
          "(DeviceDecoderOptions::wide_group_rows; same bits).");
ABSL_FLAG(bool, indexer_mma_sum, false,
          "With --indexer_mma: the prefill indexer's head sum through shared memory "
          "(DeviceDecoderOptions::indexer_mma_sum; same bits).");
ABSL_FLAG(bool, indexer_mma_bf16, true,
          "With --indexer_mma: the prefill indexer's operands staged once as bf16, its "
          "fragments by ldmatrix (DeviceDecoderOptions::indexer_mma_bf16; same bits).");
ABSL_FLAG(bool, indexer_decode_mma, false,
          "Decode steps' indexer on the tensor cores, a block a query "
          "(DeviceDecoderOptions::indexer_decode_mma; same bits).");
ABSL_FLAG(bool, prompt_tf32_mhc_wide, false,
          "With --prompt_tf32_mhc: HcMixTf32 with two m16 tiles a warp "
          "(DeviceDecoderOptions::prompt_tf32_mhc_wide; same bits).");
ABSL_FLAG(bool, topk_in_registers, false,
          "The sparse attention's top-k of rows of up to 8,192 visible entries in registers "
          "(DeviceDecoderOptions::topk_in_registers; same positions).");
ABSL_FLAG(bool, bf16_cutlass_fit_tile, false,
          "With --bf16_cutlass: CUTLASS's tile over W rows chosen for each product's waves "
          "(DeviceDecoderOptions::bf16_cutlass_fit_tile; same bits).");
ABSL_FLAG(bool, prompt_fp8_lt, false,
          "An all-prompt step's FP8 products on cuBLASLt's block-scaled FP8 GEMM over the "
          "re-blocked stored forms (DeviceDecoderOptions::prompt_fp8_lt; other bits).");
ABSL_FLAG(bool, prompt_fp8_lt_blocks, false,
          "With --prompt_fp8_lt: W's scales per 128 x 128 block instead of per row and 128 of K "
          "(DeviceDecoderOptions::prompt_fp8_lt_blocks).");
ABSL_FLAG(bool, combine_vec16, true,
          "MoeCombine over prefill's whole rows 16 bytes of columns a thread "
          "(DeviceDecoderOptions::combine_vec16; same bits).");
ABSL_FLAG(bool, bf16_route_deep_ring, true,
          "--bf16_route_register_a: the route's producer completes its copies on the ring's "
          "barriers, every free slot in flight (DeviceDecoderOptions::bf16_route_deep_ring; "
          "same bits).");
ABSL_FLAG(bool, bf16_route_stage_scale_test, true,
          "--bf16_route_register_a: one scale test a stage, the widening branch-free "
          "(DeviceDecoderOptions::bf16_route_stage_scale_test; same bits).");
ABSL_FLAG(bool, bf16_route_fit_tile_rows, false,
          "With --bf16_route_stage_scale_test: the route's wgmma N fit to each tile's rows "
          "(DeviceDecoderOptions::bf16_route_fit_tile_rows; same bits).");
ABSL_FLAG(int, bf16_route_warpgroups, 3,
          "With --bf16_route_stage_scale_test: the route's consumer warpgroups a CTA, 2 (0) or 3 "
          "(DeviceDecoderOptions::bf16_route_warpgroups; same bits).");
ABSL_FLAG(bool, bf16_route_gate_up_bf16, false,
          "The route's gate and up products write bf16 bits and the SwiGLU reads them "
          "(DeviceDecoderOptions::bf16_route_gate_up_bf16; same bits).");
ABSL_FLAG(bool, bf16_route_ballot_search, true,
          "The route's CTAs find their expert by a warp's ballot instead of a walk over the "
          "experts (DeviceDecoderOptions::bf16_route_ballot_search; same bits).");
ABSL_FLAG(bool, bf16_experts_every_row, false,
          "Every row's routed experts on the bf16 register route, decode's too "
          "(DeviceDecoderOptions::bf16_experts_every_row; changes decode's fast numerics).");
ABSL_FLAG(bool, bf16_route_decode_mma, false,
          "With --bf16_experts_every_row: decode steps' experts on the route's decode form "
          "(mma.sync, each warp's W through its own ring; DeviceDecoderOptions::"
          "bf16_route_decode_mma; same bits).");
ABSL_FLAG(bool, bf16_ws_m256, false,
          "The bf16 products' warp-specialized prefill tile over 256 X rows a CTA "
          "(DeviceDecoderOptions::bf16_ws_m256; same bits).");
ABSL_FLAG(bool, bf16_ws_m256_large, false,
          "The same 256-row tile only for products of 2,048 rows and more over weights of 32 Mi "
          "elements and more (DeviceDecoderOptions::bf16_ws_m256_large; same bits).");
ABSL_FLAG(bool, prompt_bf16_unsplit, true,
          "prompt_bf16_linears: the prompt's products unsplit whatever their weight "
          "(DeviceDecoderOptions::prompt_bf16_unsplit; other bits for prompt rows, still "
          "batch-invariant).");
ABSL_FLAG(bool, bf16_cutlass, true,
          "The bf16 prefill products Bf16GemmCutlass takes (unsplit: pair with "
          "--prompt_bf16_unsplit) on CUTLASS's Hopper GEMM (DeviceDecoderOptions::bf16_cutlass; "
          "the unsplit tile's bits).");
ABSL_FLAG(bool, indexer_mma, true,
          "The prefill chunks' IndexerScore dots on the tensor cores over q's MXFP4 form and the "
          "MXFP4 index keys (DeviceDecoderOptions::indexer_mma; the same bits wherever a dot's "
          "exact sum fits fp32).");
ABSL_FLAG(bool, prompt_bf16_gate, true,
          "prompt_bf16_linears with bf16 activations: the prompt rows' gate logits as one bf16 "
          "GEMM over the gate's bf16 bits (DeviceDecoderOptions::prompt_bf16_gate; other bits for "
          "prompt rows' logits, the same products summed in another order).");
ABSL_FLAG(bool, prompt_norm_dequant_bf16, false,
          "The prompt's products of h's FP8 form read the collapse-norm's bf16 values of it "
          "instead of widening the codes each (DeviceDecoderOptions::prompt_norm_dequant_bf16; "
          "same bits).");
ABSL_FLAG(bool, prompt_gate_norm_bf16, true,
          "With --prompt_bf16_gate: the FFN's collapse-norm writes h's bf16 bits for the prompt's "
          "gate GEMM instead of a ToBf16 launch (DeviceDecoderOptions::prompt_gate_norm_bf16; "
          "same bits).");
ABSL_FLAG(bool, prompt_tf32_mhc, true,
          "prompt_bf16_linears: the prompt rows' mHC coefficients on TF32 tensor cores, three "
          "products a pair (DeviceDecoderOptions::prompt_tf32_mhc; other bits for prompt rows).");
ABSL_FLAG(bool, prompt_tf32_mhc_promote, false,
          "With --prompt_tf32_mhc: its sums promoted to round-to-nearest fp32 adds every 16 "
          "elements (DeviceDecoderOptions::prompt_tf32_mhc_promote; other bits for prompt rows).");
ABSL_FLAG(bool, bf16_ws_persistent, true,
          "The bf16 products' warp-specialized prefill tile persistent (a CTA an SM at most; "
          "DeviceDecoderOptions::bf16_ws_persistent; same bits).");
ABSL_FLAG(bool, expert_out_bf16, true,
          "The experts' prefill forms write their outputs as bf16 bits for the combine "
          "(DeviceDecoderOptions::expert_out_bf16; same bits).");
ABSL_FLAG(bool, x16_panel, true,
          "Prefill: the FP8 products on the warp-specialized tile read X's f16 panel "
          "(DeviceDecoderOptions::prefill_x16_panel; same bits).");
ABSL_FLAG(int, kv_block_tokens, 0,
          "Positions a KV block of the paged compressed pools covers "
          "(DeviceDecoderOptions::kv_block_tokens; 0: the decoder's default).");
ABSL_FLAG(bool, dense_wgmma, false,
          "kFast: the FP8 linears' block sums on wgmma (DeviceDecoderOptions::dense_wgmma); "
          "false: the f16 mma pair.");
ABSL_FLAG(bool, programmatic, true,
          "Graphs with programmatic edges between kernels "
          "(DeviceDecoderOptions::programmatic_launch); false: ordinary edges.");
ABSL_FLAG(int64_t, max_positions, 0,
          "--ep_slice: the decoder's max_positions (0: the context plus the steps). A serving "
          "decoder's is its longest context, and some kernels' widths follow it (the indexer's "
          "scores and top-k), so a larger value times a step as a server would run it.");
ABSL_FLAG(bool, fused_rope, true,
          "kFast: RoPE inside the launch before it (the FP8 product's split-K reduce, the "
          "attention output's transpose; same bits) (DeviceDecoderOptions::fused_rope).");
ABSL_FLAG(bool, fused_kv_rows, true,
          "kFast: each KV row's norm, RoPE, quantization and scatter in one launch "
          "(KvRowFinish; same bits) (DeviceDecoderOptions::fused_kv_rows).");
ABSL_FLAG(bool, fold_row_ops, true,
          "kFast: the indexer query's MXFP4 form and weights' scale in IndexerScore, the "
          "unstored attention output's bf16 boundary in SparseAttention, the Engram "
          "embeddings' in their lookup and the gate reading its keys in place (same bits) "
          "(DeviceDecoderOptions::fold_row_ops).");
ABSL_FLAG(bool, fused_split_reduce, false,
          "Split-K linears at small batch sum in their last split CTA "
          "(DeviceDecoderOptions::fused_split_reduce); false: a second kernel.");
ABSL_FLAG(int64_t, fp8_split_target, 0,
          "kFast FP8 linears: the split-K rule's target of 32-row CTAs "
          "(DeviceDecoderOptions::fp8_split_target_ctas; ChooseFp8GemmSplits; 0: its "
          "default, 1,024).");
ABSL_FLAG(int32_t, fp8_split_min_stages, 0,
          "kFast FP8 linears: the fewest 128-wide K stages a split walks "
          "(DeviceDecoderOptions::fp8_split_min_stages; 0: the rule's default, 4).");
ABSL_FLAG(bool, bf16_split_k, true,
          "kFast bf16 linears split K by weight shape (DeviceDecoderOptions::bf16_split_k); "
          "false: one CTA walks all of K.");
ABSL_FLAG(int32_t, norm_cluster_ranks, 0,
          "The mHC collapse-norms' CTAs a token (DeviceDecoderOptions::norm_cluster_ranks: "
          "1 one block, 2 / 4 / 8 a cluster, 0 by the token count; the same bits).");
ABSL_FLAG(int32_t, norm_block_threads, 256,
          "The mHC collapse-norms' threads with a block a token "
          "(DeviceDecoderOptions::norm_block_threads: 256, or 1,024 (0 = 1,024); the same bits).");
ABSL_FLAG(bool, fast_mhc, true,
          "kFast: the mHC coefficients on HcMixSplitK (DeviceDecoderOptions::fast_mhc).");
ABSL_FLAG(bool, weight_prefetch, true,
          "--ep_slice: DeviceDecoderOptions::weight_prefetch (FP8 linears ask L2 for their "
          "weights before waiting for the kernel before them).");
ABSL_FLAG(bool, concurrent_branches, true,
          "--ep_slice: DeviceDecoderOptions::concurrent_branches (the shared expert, the window "
          "KV and the compressor on parallel branches of the step's graph).");
ABSL_FLAG(bool, device_greedy, true,
          "--ep_slice: each step's tokens are its rows' argmax on the device "
          "(StepRowsGreedy, as the serving executor does for plain greedy rows); false: the "
          "logits come back and the worker's sampler picks on the host (timed apart).");
ABSL_FLAG(bool, profile_timed_steps, false,
          "--ep_slice: cudaProfilerStart / Stop around the timed graph steps only, for "
          "`ncu --profile-from-start off` (one step's kernels, none of the fill's).");
ABSL_FLAG(bool, profile_prefill, false,
          "--ep_slice with --prefill_chunk: cudaProfilerStart / Stop around the timed prefill "
          "only, for `ncu --profile-from-start off` (the chunks' kernels, none of the setup's "
          "or the untimed fill's).");
ABSL_FLAG(bool, kernel_timeline, false,
          "--ep_slice: record the timed steps' kernels with CUPTI (graph nodes one by one) "
          "and print where the steps' time goes: the GPU's span and idle time, each "
          "kernel's share of the wall time (an interval k kernels share counts 1/k to each) "
          "and the largest idle gaps. The recording slows the timed steps a little.");
ABSL_FLAG(bool, prefill_timeline, false,
          "--ep_slice --prefill_chunk: record the timed prefill's kernels with CUPTI and print "
          "where a sequence's prefill goes, as --kernel_timeline does for decode steps (the "
          "rows are us a sequence: every chunk of one sequence together).");
ABSL_FLAG(std::string, csv, "",
          "Also write every measured row to this CSV file (tools/bench/decode_csv.h), for "
          "tools/bench/plot.py.");

namespace {

using Clock = std::chrono::steady_clock;
using weir::model::CudaOps;
using weir::model::CudaOpsStats;

// Prints " name ms" for each profile section of `after` less `before`, over
// `per` (steps), largest first, with `decimals`, then the line's end.
void PrintSections(const std::map<std::string, double>& before,
                   const std::map<std::string, double>& after, int per, int decimals) {
  std::vector<std::pair<double, std::string>> parts;
  for (const auto& [name, secs] : after) {
    const auto it = before.find(name);
    parts.push_back({(secs - (it == before.end() ? 0.0 : it->second)) / per, name});
  }
  std::sort(parts.rbegin(), parts.rend());
  for (const auto& [secs, name] : parts)
    std::printf(" %s %.*f", name.c_str(), decimals, secs * 1e3);
  std::printf("\n");
}

double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

// Device copy bandwidth in bytes/s (read + write counted), median of 9 copies
// of 1 GiB, after one warm-up copy.
double CopyBandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  WEIR_CHECK(cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess);
  WEIR_CHECK(cudaMemset(a, 1, bytes) == cudaSuccess);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int i = 0; i < 10; ++i) {
    cudaEventRecord(e0);
    WEIR_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess);
    cudaEventRecord(e1);
    WEIR_CHECK(cudaEventSynchronize(e1) == cudaSuccess);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (i > 0) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3);
}

int64_t Argmax(std::span<const float> row) {
  return std::max_element(row.begin(), row.end()) - row.begin();
}

// What a worker does on the host with a step's logits [rows, vocab] before
// its next step: each row's greedy token by its sampler, no logprob asked
// (the executor's call for a plain greedy row).
std::vector<weir::worker::sampling::SampleResult> SampleGreedy(std::span<const float> logits,
                                                               int rows, int64_t vocab) {
  weir::worker::sampling::SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<weir::worker::sampling::SampleRow> sample_rows(rows);
  for (int b = 0; b < rows; ++b) {
    sample_rows[b] = {
        .logits = logits.data() + b * vocab, .params = &greedy, .want_logprob = false};
  }
  return weir::worker::sampling::SampleBatch(sample_rows, static_cast<int32_t>(vocab));
}

CudaOpsStats Delta(const CudaOpsStats& b, const CudaOpsStats& a) {
  CudaOpsStats d;
  d.calls = b.calls - a.calls;
  d.host_seconds = b.host_seconds - a.host_seconds;
  d.upload_seconds = b.upload_seconds - a.upload_seconds;
  d.kernel_seconds = b.kernel_seconds - a.kernel_seconds;
  d.download_seconds = b.download_seconds - a.download_seconds;
  d.upload_bytes = b.upload_bytes - a.upload_bytes;
  d.download_bytes = b.download_bytes - a.download_bytes;
  d.weight_bytes_read = b.weight_bytes_read - a.weight_bytes_read;
  d.kv_bytes_read = b.kv_bytes_read - a.kv_bytes_read;
  d.weight_uploads = b.weight_uploads - a.weight_uploads;
  d.cpu_fallbacks = b.cpu_fallbacks - a.cpu_fallbacks;
  return d;
}

// --numerics as a list.
std::vector<weir::model::DecodeNumerics> NumericsList() {
  std::vector<weir::model::DecodeNumerics> out;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_numerics), ',')) {
    auto n = weir::model::ParseDecodeNumerics(std::string(part));
    WEIR_CHECK(n.ok()) << n.status();
    out.push_back(*n);
  }
  WEIR_CHECK(!out.empty()) << "--numerics is empty";
  return out;
}

// --csv, opened by main (null without it).
std::optional<weir::bench::DecodeCsv> csv_out;

void CsvRow(const weir::bench::DecodeRow& row) {
  if (!csv_out.has_value()) return;
  absl::Status s = csv_out->Add(row);
  WEIR_CHECK(s.ok()) << s;
}

// The model's name for the CSV: its config's directory ("models/small/config.json" -> "small").
std::string ModelName(const std::string& config) {
  return std::filesystem::path(config).parent_path().filename().string();
}

// decode_gpu --kernel_timeline: the summary of `steps` timed steps at `batch`.
void PrintTimeline(int batch, int steps, const weir::bench::TimelineSummary& t) {
  std::printf(
      "      kernel timeline of batch %d (%d steps, CUPTI): %lld kernels in %lld launches, GPU "
      "span %.1f us a step, idle %.1f us (%.2f%%); host between launches %.1f us a step\n",
      batch, steps, static_cast<long long>(t.kernels), static_cast<long long>(t.launches),
      t.span_us / steps, t.idle_us / steps, t.span_us > 0 ? 100.0 * t.idle_us / t.span_us : 0.0,
      t.host_us / steps);
  std::printf(
      "      %10s %10s %7s %9s  kernel (us a step; wall: the span shared among the "
      "kernels running)\n",
      "wall", "busy", "count", "mean");
  const size_t shown = std::min<size_t>(t.shares.size(), 30);
  for (size_t i = 0; i < shown; ++i) {
    const weir::bench::TimelineShare& s = t.shares[i];
    std::printf("      %10.1f %10.1f %7lld %9.2f  %s\n", s.wall_us / steps, s.busy_us / steps,
                static_cast<long long>(s.count / steps), s.busy_us / std::max<int64_t>(s.count, 1),
                s.name.c_str());
  }
  for (const weir::bench::TimelineGap& g : t.gaps) {
    std::printf("      idle gap %.2f us: %s -> %s\n", g.us, g.before.c_str(), g.after.c_str());
  }
}

// The decoder options every decode_gpu table takes from the flags (the
// sizes, graphs and profile are each table's own).
weir::model::DeviceDecoderOptions DecoderOptionsFromFlags(weir::model::DecodeNumerics numerics) {
  return {.numerics = numerics,
          .fast_mhc = absl::GetFlag(FLAGS_fast_mhc),
          .kv_block_tokens = absl::GetFlag(FLAGS_kv_block_tokens),
          .programmatic_launch = absl::GetFlag(FLAGS_programmatic),
          .fused_split_reduce = absl::GetFlag(FLAGS_fused_split_reduce),
          .fused_rope = absl::GetFlag(FLAGS_fused_rope),
          .fused_kv_rows = absl::GetFlag(FLAGS_fused_kv_rows),
          .fold_row_ops = absl::GetFlag(FLAGS_fold_row_ops),
          .fp8_split_target_ctas = absl::GetFlag(FLAGS_fp8_split_target),
          .fp8_split_min_stages = absl::GetFlag(FLAGS_fp8_split_min_stages),
          .bf16_split_k = absl::GetFlag(FLAGS_bf16_split_k),
          .prompt_bf16_unsplit = absl::GetFlag(FLAGS_prompt_bf16_unsplit),
          .norm_cluster_ranks = absl::GetFlag(FLAGS_norm_cluster_ranks),
          .norm_block_threads = absl::GetFlag(FLAGS_norm_block_threads),
          .weight_prefetch = absl::GetFlag(FLAGS_weight_prefetch),
          .concurrent_branches = absl::GetFlag(FLAGS_concurrent_branches),
          .expert_tile = absl::GetFlag(FLAGS_expert_tile),
          .expert_wgmma = absl::GetFlag(FLAGS_expert_wgmma),
          .expert_wgmma_f16 = absl::GetFlag(FLAGS_expert_wgmma_f16),
          .dense_wgmma = absl::GetFlag(FLAGS_dense_wgmma),
          .dense_wgmma_f16 = absl::GetFlag(FLAGS_dense_wgmma_f16),
          .dense_wgmma_f16_decode = absl::GetFlag(FLAGS_dense_wgmma_f16_decode),
          .expert_prefill_tiles = absl::GetFlag(FLAGS_expert_prefill_tiles),
          .expert_tiles_resident = absl::GetFlag(FLAGS_expert_tiles_resident),
          .prefill_x16_panel = absl::GetFlag(FLAGS_x16_panel),
          .attention_wgmma = absl::GetFlag(FLAGS_attention_wgmma),
          .attention_range_tiles = absl::GetFlag(FLAGS_attention_range_tiles),
          .prompt_range_tiles = absl::GetFlag(FLAGS_prompt_range_tiles),
          .staged_attention = absl::GetFlag(FLAGS_staged_attention),
          .attention_heads_per_block = absl::GetFlag(FLAGS_attention_heads_per_block),
          .fused_attention_out = absl::GetFlag(FLAGS_fused_attention_out),
          .direct_wo_a = absl::GetFlag(FLAGS_direct_wo_a),
          .fused_swiglu_fp8 = absl::GetFlag(FLAGS_fused_swiglu_fp8),
          .bf16_branches = absl::GetFlag(FLAGS_bf16_branches),
          .gate_logits_in_block_macs = absl::GetFlag(FLAGS_gate_logits_in_block_macs),
          .reduce_fp8_out = absl::GetFlag(FLAGS_reduce_fp8_out),
          .parallel_compressor_rows = absl::GetFlag(FLAGS_parallel_compressor_rows),
          .tile_conversion_rows = absl::GetFlag(FLAGS_tile_conversion_rows),
          .stored_wo_a = absl::GetFlag(FLAGS_stored_wo_a),
          .attention_grouped_out = absl::GetFlag(FLAGS_attention_grouped_out),
          .hc_mix_prefill_grid = absl::GetFlag(FLAGS_hc_mix_prefill_grid),
          .hc_mix_transposed = absl::GetFlag(FLAGS_hc_mix_transposed),
          .hc_mix_token_loop = absl::GetFlag(FLAGS_hc_mix_token_loop),
          .prompt_kv_mirror = absl::GetFlag(FLAGS_prompt_kv_mirror),
          .attention_overlap = absl::GetFlag(FLAGS_attention_overlap),
          .coalesced_tile_conversion = absl::GetFlag(FLAGS_coalesced_tile_conversion),
          .fp8_ws_halves = absl::GetFlag(FLAGS_fp8_ws_halves),
          .used_rows_only = absl::GetFlag(FLAGS_used_rows_only),
          .indexer_shared_keys = absl::GetFlag(FLAGS_indexer_shared_keys),
          .indexer_mma = absl::GetFlag(FLAGS_indexer_mma),
          .indexer_mma_sum = absl::GetFlag(FLAGS_indexer_mma_sum),
          .indexer_mma_bf16 = absl::GetFlag(FLAGS_indexer_mma_bf16),
          .indexer_decode_mma = absl::GetFlag(FLAGS_indexer_decode_mma),
          .topk_in_registers = absl::GetFlag(FLAGS_topk_in_registers),
          .scaled_x16_panel = absl::GetFlag(FLAGS_scaled_x16_panel),
          .prompt_bf16_linears = absl::GetFlag(FLAGS_prompt_bf16_linears),
          .prompt_bf16_experts = absl::GetFlag(FLAGS_prompt_bf16_experts),
          .fp8_span_products = absl::GetFlag(FLAGS_fp8_span_products),
          .fused_expert_swiglu_fp8 = absl::GetFlag(FLAGS_fused_expert_swiglu_fp8),
          .bf16_route_widener_warps = absl::GetFlag(FLAGS_bf16_route_widener_warps),
          .bf16_route_register_a = absl::GetFlag(FLAGS_bf16_route_register_a),
          .bf16_route_x_rows = absl::GetFlag(FLAGS_bf16_route_x_rows),
          .bf16_route_swiglu = absl::GetFlag(FLAGS_bf16_route_swiglu),
          .bf16_route_tail_rows = absl::GetFlag(FLAGS_bf16_route_tail_rows),
          .bf16_route_multicast = absl::GetFlag(FLAGS_bf16_route_multicast),
          .wide_group_rows = absl::GetFlag(FLAGS_wide_group_rows),
          .combine_vec16 = absl::GetFlag(FLAGS_combine_vec16),
          .bf16_route_deep_ring = absl::GetFlag(FLAGS_bf16_route_deep_ring),
          .bf16_route_stage_scale_test = absl::GetFlag(FLAGS_bf16_route_stage_scale_test),
          .bf16_route_fit_tile_rows = absl::GetFlag(FLAGS_bf16_route_fit_tile_rows),
          .bf16_route_warpgroups = absl::GetFlag(FLAGS_bf16_route_warpgroups),
          .bf16_route_ballot_search = absl::GetFlag(FLAGS_bf16_route_ballot_search),
          .bf16_route_gate_up_bf16 = absl::GetFlag(FLAGS_bf16_route_gate_up_bf16),
          .bf16_experts_every_row = absl::GetFlag(FLAGS_bf16_experts_every_row),
          .bf16_route_decode_mma = absl::GetFlag(FLAGS_bf16_route_decode_mma),
          .bf16_ws_m256 = absl::GetFlag(FLAGS_bf16_ws_m256),
          .bf16_ws_m256_large = absl::GetFlag(FLAGS_bf16_ws_m256_large),
          .bf16_cutlass = absl::GetFlag(FLAGS_bf16_cutlass),
          .bf16_cutlass_fit_tile = absl::GetFlag(FLAGS_bf16_cutlass_fit_tile),
          .prompt_fp8_lt = absl::GetFlag(FLAGS_prompt_fp8_lt),
          .prompt_fp8_lt_blocks = absl::GetFlag(FLAGS_prompt_fp8_lt_blocks),
          .prompt_bf16_gate = absl::GetFlag(FLAGS_prompt_bf16_gate),
          .prompt_gate_norm_bf16 = absl::GetFlag(FLAGS_prompt_gate_norm_bf16),
          .prompt_norm_dequant_bf16 = absl::GetFlag(FLAGS_prompt_norm_dequant_bf16),
          .prompt_tf32_mhc = absl::GetFlag(FLAGS_prompt_tf32_mhc),
          .prompt_tf32_mhc_promote = absl::GetFlag(FLAGS_prompt_tf32_mhc_promote),
          .prompt_tf32_mhc_wide = absl::GetFlag(FLAGS_prompt_tf32_mhc_wide),
          .bf16_ws_persistent = absl::GetFlag(FLAGS_bf16_ws_persistent),
          .expert_out_bf16 = absl::GetFlag(FLAGS_expert_out_bf16)};
}

}  // namespace

weir::model::ActivationPrecision options_precision() {
  return absl::GetFlag(FLAGS_bf16) ? weir::model::ActivationPrecision::kBf16
                                   : weir::model::ActivationPrecision::kFp32;
}

// DeviceDecoder at every batch size: each sequence is prefilled by `model`
// (its own backend) and imported, then warm-up and timed decode steps run,
// first replaying graphs, then eagerly.
void DeviceDecoderTable(weir::model::Model& model, weir::model::ActivationPrecision precision,
                        const std::vector<int>& batches, const std::vector<double>& floors,
                        const std::vector<double>& cuda_ops_step, double bandwidth) {
  const weir::model::ModelConfig& c = model.config();
  const int prompt = absl::GetFlag(FLAGS_prompt), steps = absl::GetFlag(FLAGS_steps),
            warmup = absl::GetFlag(FLAGS_warmup);
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  std::printf("\nDeviceDecoder (device-resident, one CUDA graph per padded batch size):\n");
  auto id = weir::parallel::NcclCommunicator::MakeUniqueId();
  WEIR_CHECK(id.ok()) << id.status();
  auto nccl = weir::parallel::NcclCommunicator::Create(weir::Rank(0), 1, *id,
                                                       {.device = weir::DeviceOrdinal(0)});
  WEIR_CHECK(nccl.ok()) << nccl.status();
  for (weir::model::DecodeNumerics numerics : NumericsList()) {
  std::printf("numerics %s:\n", weir::model::DecodeNumericsName(numerics));
  std::printf("%5s %6s %10s %10s %8s %8s %10s %8s %12s %10s %12s %8s\n", "batch", "mode",
              "step_ms", "device_ms", "gpu_idle", "tok/s", "floor_ms", "ratio", "fp32_floor",
              "fp32_ratio", "vs_cuda_ops", "kernels");
  std::vector<double> graph_step(batches.size()), exchange_step(batches.size());
  for (const char* mode : {"graph", "nccl1", "eager"}) {
    const bool graphs = mode[0] != 'e', exchange = mode[0] == 'n';
    weir::model::DeviceDecoderOptions options = DecoderOptionsFromFlags(numerics);
    options.max_sequences = max_batch;
    options.max_positions = prompt + warmup + steps + 8;
    options.max_batch = max_batch;
    options.use_graphs = graphs;
    options.profile = !graphs;
    if (exchange) options.communicator = nccl->get();
    auto dd = weir::model::DeviceDecoder::Create(model, precision, options);
    WEIR_CHECK(dd.ok()) << dd.status();
    if (mode[0] == 'g') {
      const weir::model::DeviceDecoderStats& st = (*dd)->stats();
      std::printf("      weights %.1f MiB; fast dense layers %d (bf16 %d), reference dense %d, "
                  "fast MoE layers %d\n",
                  st.weight_bytes / 1048576.0, st.fast_dense, st.bf16_dense, st.reference_dense,
                  st.fast_moe_layers);
    }
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const int batch = batches[bi];
      std::vector<int> slots(batch);
      std::vector<int64_t> next(batch);
      for (int b = 0; b < batch; ++b) {
        auto seq = model.NewSequence();
        std::vector<int64_t> tokens;
        for (int i = 0; i < prompt; ++i) tokens.push_back((b * 7919 + i * 104729) % c.vocab_size);
        auto logits = model.Forward(*seq, tokens, 0);
        WEIR_CHECK(logits.ok()) << logits.status();
        std::vector<float> last(logits->end() - c.vocab_size, logits->end());
        next[b] = Argmax(last);
        slots[b] = b;
        WEIR_CHECK((*dd)->Import(b, *seq).ok());
      }
      auto step = [&]() {
        // The serving executor's call: the logits stay in the decoder's
        // pinned buffer (no 33 MB copy a step at batch 64 of V4.1), and its
        // sampler picks each row's greedy token (no logprob asked).
        auto logits = (*dd)->StepView(slots, next);
        WEIR_CHECK(logits.ok()) << logits.status();
        const std::vector<weir::worker::sampling::SampleResult> sampled =
            SampleGreedy(*logits, batch, c.vocab_size);
        for (int b = 0; b < batch; ++b) next[b] = sampled[b].token;
      };
      for (int i = 0; i < warmup; ++i) step();
      const weir::model::DeviceDecoderStats before = (*dd)->stats();
      std::vector<double> times;
      for (int i = 0; i < steps; ++i) {
        const auto s0 = Clock::now();
        step();
        times.push_back(Seconds(s0));
      }
      const weir::model::DeviceDecoderStats& after = (*dd)->stats();
      const double device_s = (after.device_seconds - before.device_seconds) / steps;
      double total = 0;
      for (double t : times) total += t;
      std::sort(times.begin(), times.end());
      const double step_s = times[times.size() / 2];
      if (graphs) (exchange ? exchange_step : graph_step)[bi] = step_s;
      // The stored-form floor at the timed steps' mean position.
      const double stored_s =
          weir::bench::StoredStepBytes(c, batch, prompt + warmup + steps / 2) / bandwidth;
      std::printf("%5d %6s %10.3f %10.3f %8.3f %8.0f %10.4f %8.1f %12.4f %10.1f %12.1f %8lld\n",
                  batch, mode, step_s * 1e3, device_s * 1e3, (total / steps - device_s) * 1e3,
                  batch / step_s, stored_s * 1e3, step_s / stored_s, floors[bi] * 1e3,
                  floors[bi] > 0 ? step_s / floors[bi] : 0.0,
                  step_s > 0 ? cuda_ops_step[bi] / step_s : 0.0,
                  graphs ? static_cast<long long>(after.graph_nodes) : 0LL);
      CsvRow({.model = ModelName(absl::GetFlag(FLAGS_config)), .path = "device_decoder",
              .numerics = weir::model::DecodeNumericsName(numerics), .mode = mode,
              .batch = batch, .context = prompt + warmup + steps / 2, .step_ms = step_s * 1e3,
              .device_ms = device_s * 1e3, .floor_ms = stored_s * 1e3,
              .fp32_floor_ms = floors[bi] > 0 ? std::optional<double>(floors[bi] * 1e3)
                                              : std::nullopt,
              .graph_nodes = graphs ? std::optional<int64_t>(after.graph_nodes) : std::nullopt});
      if (!graphs) {  // where the eager step's device time goes (events between sections)
        std::printf("      sections (ms per step):");
        PrintSections(before.section_seconds, after.section_seconds, steps, 3);
      }
      for (int b = 0; b < batch; ++b) WEIR_CHECK((*dd)->Release(b).ok());
    }
  }
  std::printf("expert exchange over NCCL (world of 1) / local graph step:");
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    std::printf(" b%d %.3f", batches[bi],
                graph_step[bi] > 0 ? exchange_step[bi] / graph_step[bi] : 0.0);
  }
  std::printf("\n");
  }
  std::printf("columns: step_ms median wall time of Step (inputs, replay, logits copy); "
              "device_ms device time of the step's kernels (events around them); gpu_idle mean "
              "step minus device time; floor_ms = the bytes a step must read in stored form "
              "(tools/bench/decode_floor.h: FP8 dense weights + scales, MXFP4 experts hit, KV in "
              "the cache's formats) / copy bandwidth, ratio = step / that; fp32_floor and "
              "fp32_ratio: the old floor, the fp32 bytes the reference kernels read (CudaOps "
              "run); vs_cuda_ops = CudaOps step / this step; kernels = nodes of the step's "
              "CUDA graph\n");
}

// Feeds `context` positions to `slot` (started) in StepRows chunks of up to
// `chunk` rows; only the last chunk asks for logits (its last row). They are
// the sequence's prompt (SetPromptEnd), the later steps its output. Each
// step also takes one generated position of every slot in `mixed` (started
// and past their prompts), in the step's first rows, their logits unasked.
void FillByChunks(weir::model::DeviceDecoder& dd, int slot, int64_t context, int chunk,
                  int64_t vocab, std::span<const int> mixed = {}) {
  WEIR_CHECK(dd.SetPromptEnd(slot, context).ok());
  const int64_t extra = static_cast<int64_t>(mixed.size());
  for (int64_t at = 0; at < context;) {
    const int64_t n = std::min<int64_t>(chunk, context - at);
    std::vector<int> rows(mixed.begin(), mixed.end());
    rows.resize(extra + n, slot);
    std::vector<int64_t> toks(extra + n);
    for (int64_t j = 0; j < extra; ++j) toks[j] = (mixed[j] * 7919 + at * 104729) % vocab;
    for (int64_t j = 0; j < n; ++j) toks[extra + j] = (slot * 7919 + (at + j) * 104729) % vocab;
    const int last[] = {static_cast<int>(extra + n - 1)};
    auto logits = dd.StepRows(
        rows, toks, at + n == context ? std::span<const int>(last) : std::span<const int>());
    WEIR_CHECK(logits.ok()) << logits.status();
    at += n;
  }
}

// The --ep_slice benchmark (see the file comment).
int SliceBench(const std::vector<int>& batches, double bandwidth) {
  const int ep = absl::GetFlag(FLAGS_ep_slice), context = absl::GetFlag(FLAGS_context);
  const int steps = absl::GetFlag(FLAGS_steps), warmup = absl::GetFlag(FLAGS_warmup);
  absl::StatusOr<weir::model::ModelConfig> loaded =
      weir::model::LoadModelConfig(absl::GetFlag(FLAGS_slice_config));
  WEIR_CHECK(loaded.ok()) << loaded.status();
  weir::model::ModelConfig c = *loaded;
  WEIR_CHECK(c.n_routed_experts % ep == 0) << "experts do not split over --ep_slice";
  const int64_t all_experts = c.n_routed_experts;
  c.n_routed_experts /= ep;
  c.engram_layer_ids.clear();
  c.engram_num_embeddings.clear();
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int chunk = absl::GetFlag(FLAGS_prefill_chunk);
  double peak_tflops = 0;  // cuBLASLt FP8, measured once
  if (chunk > 0) {
    absl::StatusOr<double> peak = weir::bench::CublasLtFp8Tflops();
    WEIR_CHECK(peak.ok()) << peak.status();
    peak_tflops = *peak;
    std::printf("cuBLASLt FP8 GEMM 8192^3 (e4m3, fp32 accumulation, bf16 out): %.0f TFLOP/s\n",
                peak_tflops);
  }
  double fp32_dense = 0;  // dense bytes as the reference holds them (its run, if any)
  for (weir::model::DecodeNumerics numerics : NumericsList()) {
  const auto t0 = Clock::now();
  // The slice's decoder options from the flags (graphs; the profile below
  // turns them off).
  weir::model::DeviceDecoderOptions options = DecoderOptionsFromFlags(numerics);
  // --prefill_mixed_rows: the sequences whose generated rows join the chunks,
  // in the slots after the spare; each takes a row a chunk step of every fill.
  const int mixed_rows = chunk > 0 ? std::max(absl::GetFlag(FLAGS_prefill_mixed_rows), 0) : 0;
  std::vector<int> mixed_slots(mixed_rows);
  for (int i = 0; i < mixed_rows; ++i) mixed_slots[i] = max_batch + 1 + i;
  const int64_t chunk_steps = chunk > 0 ? (context + chunk - 1) / chunk : 0;
  int64_t fills = 1;  // the spare slot's, then every batch's sequences
  for (int batch : batches) fills += batch;
  options.max_sequences = max_batch + 1 + mixed_rows;  // + a spare slot for the untimed prefill
  options.max_positions =
      std::max<int64_t>({absl::GetFlag(FLAGS_max_positions), context + warmup + steps + 8,
                         mixed_rows > 0 ? 8 + chunk_steps * fills + 8 : 0});
  options.max_batch = std::max(max_batch, chunk + mixed_rows);
  options.max_rows_per_slot = std::max(chunk, 1);
  auto dd = weir::model::CreateSyntheticDeviceDecoder(c, options_precision(), options, 1,
                                                      absl::GetFlag(FLAGS_slice_bf16_wo_a));
  WEIR_CHECK(dd.ok()) << dd.status();
  std::printf(
      "numerics %s: fast dense layers %d (bf16 %d, of them wo_a groups held as FP8 %d), "
      "reference dense %d, fast MoE layers %d\n",
      weir::model::DecodeNumericsName(numerics), (*dd)->stats().fast_dense,
      (*dd)->stats().bf16_dense, (*dd)->stats().stored_wo_a, (*dd)->stats().reference_dense,
      (*dd)->stats().fast_moe_layers);
  const weir::model::DeviceDecoderStats& st0 = (*dd)->stats();
  const double dense_bytes =
      static_cast<double>(st0.weight_bytes - st0.expert_bytes - st0.embed_bytes);
  if (numerics == weir::model::DecodeNumerics::kReference) fp32_dense = dense_bytes;
  const double per_expert = static_cast<double>(st0.expert_bytes) /
                            static_cast<double>(c.n_layers * c.n_routed_experts);
  std::printf("slice of %s for one rank of EP=%d: %lld of %lld routed experts (top %lld), dim "
              "%lld, %d layers, Engram dropped; arena %.1f GiB (dense %.1f GiB as held, experts "
              "%.1f GiB in %d MXFP4 layers, embedding %.1f GiB, pools %.2f GiB); built in %.1f s\n",
              absl::GetFlag(FLAGS_slice_config).c_str(), ep,
              static_cast<long long>(c.n_routed_experts), static_cast<long long>(all_experts),
              static_cast<long long>(c.n_activated_experts), static_cast<long long>(c.dim),
              c.n_layers, st0.arena_bytes / 1073741824.0, dense_bytes / 1073741824.0,
              st0.expert_bytes / 1073741824.0, st0.mxfp4_layers, st0.embed_bytes / 1073741824.0,
              st0.pool_bytes / 1073741824.0, Seconds(t0));
  if (st0.tile_resident_bytes > 0) {
    std::printf("experts' tile form resident: %.1f GiB, %d layers converted exactly\n",
                st0.tile_resident_bytes / 1073741824.0, st0.tile_form_layers);
  }
  // KV pools: bytes an entry as held against the model's stored form (issue 16).
  std::printf("%-17s %12s %10s %14s %16s %7s\n", "kv pool", "entries", "MiB", "held B/entry",
              "stored B/entry", "ratio");
  for (const weir::model::DeviceKvPool& pool : st0.kv_pools) {
    const double per_entry =
        pool.entries > 0 ? static_cast<double>(pool.bytes) / static_cast<double>(pool.entries) : 0;
    std::printf("%-17s %12lld %10.1f %14.1f %16lld %7.2f\n", pool.name.c_str(),
                static_cast<long long>(pool.entries), pool.bytes / 1048576.0, per_entry,
                static_cast<long long>(pool.stored_bytes_per_entry),
                pool.stored_bytes_per_entry > 0 ? per_entry / pool.stored_bytes_per_entry : 0.0);
  }
  const weir::model::LayerRoles roles(c);
  std::printf("%5s %8s %10s %10s %8s %8s %10s %8s %10s %12s %10s %8s\n", "batch", "context",
              "step_ms", "device_ms", "gpu_idle", "tok/s", "floor_ms", "ratio", "floor_GB",
              "fp32_floor_ms", "fp32_ratio", "kernels");
  for (int batch : batches) {
    std::vector<int> slots(batch);
    std::vector<int64_t> tokens(batch);
    for (int b = 0; b < batch; ++b) {
      slots[b] = b;
      WEIR_CHECK((*dd)->Start(b).ok());
    }
    int64_t pos = 0;
    // The host's sampling of each step's rows (SampleGreedy), timed apart
    // (the inputs stay synthetic, so the routing does not follow the random
    // weights' argmax).
    double sample_s = 0;
    const bool device_greedy = absl::GetFlag(FLAGS_device_greedy);
    auto step = [&]() {
      for (int b = 0; b < batch; ++b) tokens[b] = (b * 7919 + pos * 104729) % c.vocab_size;
      if (device_greedy) {  // the argmax on the device, 4 bytes a row back
        auto picks = (*dd)->StepRowsGreedy(slots, tokens, std::nullopt);
        WEIR_CHECK(picks.ok()) << picks.status();
        ++pos;
        return;
      }
      auto logits = (*dd)->StepView(slots, tokens);
      WEIR_CHECK(logits.ok()) << logits.status();
      const auto s0 = Clock::now();
      for (const weir::worker::sampling::SampleResult& r :
           SampleGreedy(*logits, batch, c.vocab_size)) {
        WEIR_CHECK(r.status.ok()) << r.status;
      }
      sample_s += Seconds(s0);
      ++pos;
    };
    if (chunk > 0) {
      // Device-resident prefill: each sequence's context in chunks of one
      // slot (the last chunk returns its last row's logits), after one
      // untimed fill of a spare slot that captures the chunk graphs.
      auto fill = [&](int slot) {
        FillByChunks(**dd, slot, context, chunk, c.vocab_size, mixed_slots);
      };
      if (batch == batches.front()) {
        for (int s : mixed_slots) {  // their own prompts first, untimed
          WEIR_CHECK((*dd)->Start(s).ok());
          FillByChunks(**dd, s, 8, chunk, c.vocab_size);
        }
        WEIR_CHECK((*dd)->Start(batch).ok());
        fill(batch);
        WEIR_CHECK((*dd)->Release(batch).ok());
      }
      const bool prefill_timeline = absl::GetFlag(FLAGS_prefill_timeline);
      if (prefill_timeline) {
        WEIR_CHECK(cudaDeviceSynchronize() == cudaSuccess);
        const absl::Status started = weir::bench::StartKernelRecording();
        WEIR_CHECK(started.ok()) << started;
      }
      const bool profile_prefill = absl::GetFlag(FLAGS_profile_prefill);
      if (profile_prefill) WEIR_CHECK(cudaProfilerStart() == cudaSuccess);
      const double dev0 = (*dd)->stats().device_seconds;
      const auto f0 = Clock::now();
      for (int b = 0; b < batch; ++b) fill(b);
      const double wall = Seconds(f0), dev = (*dd)->stats().device_seconds - dev0;
      if (profile_prefill) WEIR_CHECK(cudaProfilerStop() == cudaSuccess);
      if (prefill_timeline) {
        WEIR_CHECK(cudaDeviceSynchronize() == cudaSuccess);
        absl::StatusOr<std::vector<weir::bench::KernelRecord>> records =
            weir::bench::StopKernelRecording();
        WEIR_CHECK(records.ok()) << records.status();
        std::printf("      prefill timeline (the rows of one sequence of %d positions):\n",
                    context);
        PrintTimeline(batch, batch, weir::bench::SummarizeTimeline(std::move(*records), 10));
      }
      double flops = 0;
      for (int64_t p = 0; p < context; ++p) flops += weir::bench::PrefillFlopsPerToken(c, p);
      flops *= batch;
      const double tokens_filled = static_cast<double>(batch) * context;
      std::printf(
          "prefill: %d sequence(s) x %d positions in chunks of %d: %.3f s (device %.3f "
          "s), %.0f tok/s, %.1f TFLOP/s model FLOPs = %.3f of cuBLASLt FP8 (%.0f)\n",
          batch, context, chunk, wall, dev, tokens_filled / wall, flops / wall / 1e12,
          flops / wall / 1e12 / peak_tflops, peak_tflops);
      if (mixed_rows > 0) {
        std::printf(
            "      with %d other sequences' generated rows in every chunk step; %lld FP8 "
            "calls over their rows' ranges alone since start\n",
            mixed_rows, static_cast<long long>((*dd)->stats().fp8_span_products));
      }
      if ((*dd)->stats().prompt_bf16_products > 0) {
        std::printf("      prompt_bf16_linears: %lld FP8 products run as bf16 since start\n",
                    static_cast<long long>((*dd)->stats().prompt_bf16_products));
      }
      if ((*dd)->stats().fp8_lt_products > 0) {
        std::printf("      prompt_fp8_lt: %lld FP8 products run on cuBLASLt since start\n",
                    static_cast<long long>((*dd)->stats().fp8_lt_products));
      }
      if ((*dd)->stats().mma_key_scores > 0) {
        std::printf(
            "      indexer_mma: %lld IndexerScore launches on the tensor cores since start\n",
            static_cast<long long>((*dd)->stats().mma_key_scores));
      }
      if ((*dd)->stats().prompt_gate_products > 0) {
        std::printf(
            "      prompt_bf16_gate: %lld layers' prompt gate logits as a bf16 GEMM since start\n",
            static_cast<long long>((*dd)->stats().prompt_gate_products));
      }
      if ((*dd)->stats().prompt_tf32_mixes > 0) {
        std::printf("      prompt_tf32_mhc: %lld mHC calls on TF32 tensor cores since start\n",
                    static_cast<long long>((*dd)->stats().prompt_tf32_mixes));
      }
      if ((*dd)->stats().cutlass_products > 0) {
        std::printf("      bf16_cutlass: %lld bf16 products on CUTLASS since start\n",
                    static_cast<long long>((*dd)->stats().cutlass_products));
      }
      if ((*dd)->stats().prompt_bf16_expert_layers > 0) {
        std::printf(
            "      prompt_bf16_experts: %lld layers' experts on the bf16 route since start\n",
            static_cast<long long>((*dd)->stats().prompt_bf16_expert_layers));
      }
      // The same-bits options' reach (the forty-first session saw two of them
      // move the chunk by nothing measurable: these say whether they ran).
      if ((*dd)->stats().bf16_gate_up_layers > 0) {
        std::printf(
            "      bf16_route_gate_up_bf16: %lld route layers with bf16 gate / up since start\n",
            static_cast<long long>((*dd)->stats().bf16_gate_up_layers));
      }
      if ((*dd)->stats().route_x256_layers > 0) {
        std::printf(
            "      bf16_route_x_rows 256: %lld route layers on the 256-row tile since start\n",
            static_cast<long long>((*dd)->stats().route_x256_layers));
      }
      if ((*dd)->stats().route_swiglu_layers > 0) {
        std::printf(
            "      bf16_route_swiglu: %lld route layers with the SwiGLU fused since start\n",
            static_cast<long long>((*dd)->stats().route_swiglu_layers));
      }
      if ((*dd)->stats().prompt_gate_norm_inputs > 0) {
        std::printf(
            "      prompt_gate_norm_bf16: %lld prompt gate products reading the norm's bf16 form "
            "since start\n",
            static_cast<long long>((*dd)->stats().prompt_gate_norm_inputs));
      }
      if ((*dd)->stats().prompt_norm_dequant_inputs > 0) {
        std::printf(
            "      prompt_norm_dequant_bf16: %lld prompt products reading the norm's dequantized "
            "bf16 since start\n",
            static_cast<long long>((*dd)->stats().prompt_norm_dequant_inputs));
      }
      pos = context;
      for (int i = 0; i < warmup; ++i) step();
    } else {
      for (int i = 0; i < context + warmup; ++i) step();
    }
    const double before = (*dd)->stats().device_seconds;
    const int64_t first = pos;
    std::vector<double> times;
    sample_s = 0;
    const bool profiled = absl::GetFlag(FLAGS_profile_timed_steps);
    const bool timeline = absl::GetFlag(FLAGS_kernel_timeline);
    if (profiled) WEIR_CHECK(cudaProfilerStart() == cudaSuccess);
    if (timeline) {
      WEIR_CHECK(cudaDeviceSynchronize() == cudaSuccess);
      const absl::Status started = weir::bench::StartKernelRecording();
      WEIR_CHECK(started.ok()) << started;
    }
    for (int i = 0; i < steps; ++i) {
      const auto s0 = Clock::now();
      step();
      times.push_back(Seconds(s0));
    }
    if (profiled) WEIR_CHECK(cudaProfilerStop() == cudaSuccess);
    if (timeline) {
      WEIR_CHECK(cudaDeviceSynchronize() == cudaSuccess);
      absl::StatusOr<std::vector<weir::bench::KernelRecord>> records =
          weir::bench::StopKernelRecording();
      WEIR_CHECK(records.ok()) << records.status();
      PrintTimeline(batch, steps, weir::bench::SummarizeTimeline(std::move(*records), 10));
    }
    const double device_s = ((*dd)->stats().device_seconds - before) / steps;
    double total = 0;
    for (double t : times) total += t;
    std::sort(times.begin(), times.end());
    const double step_s = times[times.size() / 2];
    // Bytes one timed step reads (at its mean position).
    const int64_t p = first + steps / 2;
    double kv = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      const weir::model::LayerRole& role = roles[l];
      int64_t rows = std::min<int64_t>(p + 1, c.window_size);
      if (role.ratio > 0) {
        const int64_t visible = (p + 1) / role.ratio;
        rows += std::min<int64_t>(visible, c.index_topk);
        if (role.index_source == l) kv += static_cast<double>(visible * c.index_head_dim) * 4;
      }
      kv += static_cast<double>(rows * c.head_dim) * 4;
    }
    // The old floor: fp32 dense weights and KV as the reference kernels read them.
    const double fp32_bytes =
        fp32_dense +
        per_expert * c.n_layers *
            weir::bench::ExpectedExpertsHit(c.n_routed_experts, c.n_activated_experts, batch) +
        kv * batch;
    const double bytes = weir::bench::StoredStepBytes(c, batch, p);
    const double floor_s = bytes / bandwidth;
    std::printf("%5d %8lld %10.3f %10.3f %8.3f %8.0f %10.3f %8.1f %10.3f %12.3f %10.1f %8lld\n",
                batch, static_cast<long long>(p), step_s * 1e3, device_s * 1e3,
                (total / steps - device_s) * 1e3, batch / step_s, floor_s * 1e3,
                step_s / floor_s, bytes * 1e-9,
                fp32_dense > 0 ? fp32_bytes / bandwidth * 1e3 : 0.0,
                fp32_dense > 0 ? step_s / (fp32_bytes / bandwidth) : 0.0,
                static_cast<long long>((*dd)->stats().graph_nodes));
    CsvRow({.model = absl::StrCat(ModelName(absl::GetFlag(FLAGS_slice_config)), " ep", ep,
                                  " slice"),
            .path = "ep_slice", .numerics = weir::model::DecodeNumericsName(numerics),
            .mode = "graph", .batch = batch, .context = p, .step_ms = step_s * 1e3,
            .device_ms = device_s * 1e3, .floor_ms = floor_s * 1e3,
            .fp32_floor_ms = fp32_dense > 0
                                 ? std::optional<double>(fp32_bytes / bandwidth * 1e3)
                                 : std::nullopt,
            .graph_nodes = static_cast<int64_t>((*dd)->stats().graph_nodes)});
    std::printf(
        "      graph of batch %d: %lld nodes, %lld programmatic edges; %lld RoPEs fused into "
        "other launches, %lld KvRowFinish launches, %lld passes folded since the decoder's start "
        "(--fused_rope, --fused_kv_rows, --fold_row_ops)\n",
        batch, static_cast<long long>((*dd)->stats().graph_nodes),
        static_cast<long long>((*dd)->stats().programmatic_edges),
        static_cast<long long>((*dd)->stats().fused_ropes),
        static_cast<long long>((*dd)->stats().fused_kv_rows),
        static_cast<long long>((*dd)->stats().folded_row_ops));
    if ((*dd)->stats().route_decode_mma_layers > 0) {
      std::printf(
          "      bf16_route_decode_mma: %lld route layers of decode steps on the decode form "
          "since start (%lld with h's bf16 values from the SwiGLU launch, %lld with X's from "
          "the gather)\n",
          static_cast<long long>((*dd)->stats().route_decode_mma_layers),
          static_cast<long long>((*dd)->stats().route_h_bf16_layers),
          static_cast<long long>((*dd)->stats().route_x_gathered_layers));
    }
    if ((*dd)->stats().decode_mma_key_scores > 0) {
      std::printf(
          "      indexer_decode_mma: %lld decode IndexerScore launches on the tensor cores since "
          "start\n",
          static_cast<long long>((*dd)->stats().decode_mma_key_scores));
    }
    if (device_greedy) {
      std::printf(
          "      greedy tokens picked on the device (ArgmaxRows over %lld logits a row, "
          "%d ids copied back; --device_greedy)\n",
          static_cast<long long>(c.vocab_size), batch);
    } else {
      std::printf(
          "      the host's greedy sampling of the %d rows (%lld tokens each; in step_ms and "
          "gpu_idle): %.3f ms a step\n",
          batch, static_cast<long long>(c.vocab_size), sample_s / steps * 1e3);
    }
    for (int b = 0; b < batch; ++b) WEIR_CHECK((*dd)->Release(b).ok());
  }
  if (absl::GetFlag(FLAGS_slice_profile)) {
    dd->reset();  // one slice on the device at a time
    weir::model::DeviceDecoderOptions eager_options = options;
    eager_options.use_graphs = false;
    eager_options.profile = true;
    auto eager = weir::model::CreateSyntheticDeviceDecoder(c, options_precision(), eager_options, 1,
                                                           absl::GetFlag(FLAGS_slice_bf16_wo_a));
    WEIR_CHECK(eager.ok()) << eager.status();
    for (int batch : {batches.front(), max_batch}) {
      std::vector<int> slots(batch);
      std::vector<int64_t> tokens(batch);
      for (int b = 0; b < batch; ++b) {
        slots[b] = b;
        WEIR_CHECK((*eager)->Start(b).ok());
      }
      std::map<std::string, double> before;
      int first_step = 0;
      if (chunk > 0) {  // the context by chunks, as above, its sections printed
        const std::map<std::string, double> start = (*eager)->stats().section_seconds;
        for (int b = 0; b < batch; ++b) FillByChunks(**eager, b, context, chunk, c.vocab_size);
        first_step = context;
        std::printf("  eager prefill of %d x %d positions, sections (ms):", batch, context);
        PrintSections(start, (*eager)->stats().section_seconds, 1, 1);
      }
      for (int i = first_step; i < context + warmup + steps; ++i) {
        if (i == context + warmup) before = (*eager)->stats().section_seconds;
        for (int b = 0; b < batch; ++b) tokens[b] = (b * 7919 + i * 104729) % c.vocab_size;
        WEIR_CHECK((*eager)->StepView(slots, tokens).ok());
      }
      std::printf("  eager b%d sections (ms per step):", batch);
      PrintSections(before, (*eager)->stats().section_seconds, steps, 3);
      for (int b = 0; b < batch; ++b) WEIR_CHECK((*eager)->Release(b).ok());
    }
  }
  }
  std::printf("columns: as the DeviceDecoder table; context = mean position of the timed "
              "steps; floor_GB = bytes one step must read in stored form (FP8 dense weights + "
              "scales, the expected MXFP4 routed experts hit, KV in the cache's formats: "
              "tools/bench/decode_floor.h), floor_ms = that / copy bandwidth; fp32_floor_ms and "
              "fp32_ratio: the old floor (dense weights and KV at 4 bytes per element, as the "
              "reference kernels hold them). Per GPU: tok/s is this rank's decode throughput "
              "at that batch per rank.\n");
  return 0;
}

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "Decode step time on the CUDA backend", "decode_gpu");
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines appear as they are measured
  std::vector<int> batches;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int b = 0;
    WEIR_CHECK(absl::SimpleAtoi(part, &b) && b > 0) << "bad --batches";
    batches.push_back(b);
  }
  const int prompt = absl::GetFlag(FLAGS_prompt), steps = absl::GetFlag(FLAGS_steps);
  WEIR_CHECK(prompt >= 1 && steps >= 1) << "need --prompt >= 1 and --steps >= 1";

  if (const std::string path = absl::GetFlag(FLAGS_csv); !path.empty()) {
    absl::StatusOr<weir::bench::DecodeCsv> opened = weir::bench::DecodeCsv::Open(path);
    WEIR_CHECK(opened.ok()) << opened.status();
    csv_out.emplace(std::move(*opened));
  }
  const double bandwidth = CopyBandwidth();
  std::printf("device copy bandwidth (read + write): %.0f GB/s\n", bandwidth * 1e-9);
  if (absl::GetFlag(FLAGS_ep_slice) > 0) return SliceBench(batches, bandwidth);

  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) dir = (std::filesystem::temp_directory_path() / "weir_decode_gpu").string();
  auto t0 = Clock::now();
  auto ckpt = weir::model::GenerateAndOpenCheckpoint(absl::GetFlag(FLAGS_config), dir, 1);
  WEIR_CHECK(ckpt.ok()) << ckpt.status();
  weir::model::ModelOptions options;
  options.precision = absl::GetFlag(FLAGS_bf16) ? weir::model::ActivationPrecision::kBf16
                                                : weir::model::ActivationPrecision::kFp32;
  CudaOps* cuda = nullptr;
  options.make_ops = [&cuda](weir::model::ActivationPrecision p)
      -> absl::StatusOr<std::unique_ptr<weir::model::Ops>> {
    auto ops = CudaOps::Create(p, {.time_ops = true});
    if (!ops.ok()) return ops.status();
    cuda = ops->get();
    return std::unique_ptr<weir::model::Ops>(std::move(*ops));
  };
  auto model = weir::model::Model::Create((*ckpt)->config(), **ckpt, std::move(options));
  WEIR_CHECK(model.ok()) << model.status();
  const weir::model::ModelConfig& c = (*model)->config();
  std::printf("model %s (%s activations): dim %lld, %d layers, %lld routed experts (top %lld), "
              "vocab %lld; checkpoint + load %.1f s\n",
              absl::GetFlag(FLAGS_config).c_str(), absl::GetFlag(FLAGS_bf16) ? "bf16" : "fp32",
              static_cast<long long>(c.dim), c.n_layers,
              static_cast<long long>(c.n_routed_experts),
              static_cast<long long>(c.n_activated_experts), static_cast<long long>(c.vocab_size),
              Seconds(t0));
  std::printf("%5s %10s %10s %10s %7s %10s %10s %10s %10s %9s %9s %7s\n", "batch", "step_ms",
              "floor_ms", "ratio", "tok/s", "kernel_ms", "copy_ms", "gpu_idle", "host_ops",
              "w_MiB", "kv_MiB", "ops");

  std::vector<double> floors(batches.size(), 0), cuda_ops_step(batches.size(), 0);
  for (size_t bi = 0; bi < batches.size() && absl::GetFlag(FLAGS_cuda_ops); ++bi) {
    const int batch = batches[bi];
    std::vector<std::unique_ptr<weir::model::SequenceState>> seqs;
    std::vector<weir::model::SequenceState*> states;
    std::vector<std::vector<int64_t>> tokens(batch);
    std::vector<int64_t> starts(batch, 0);
    for (int b = 0; b < batch; ++b) {
      seqs.push_back((*model)->NewSequence());
      states.push_back(seqs.back().get());
      for (int i = 0; i < prompt; ++i) tokens[b].push_back((b * 7919 + i * 104729) % c.vocab_size);
    }
    auto step = [&]() -> std::vector<std::vector<float>> {
      std::vector<std::span<const int64_t>> rows(tokens.begin(), tokens.end());
      auto logits = (*model)->ForwardBatch(states, rows, starts);
      WEIR_CHECK(logits.ok()) << logits.status();
      for (int b = 0; b < batch; ++b) {
        starts[b] += static_cast<int64_t>(tokens[b].size());
        const int64_t v = c.vocab_size;
        std::vector<float>& l = (*logits)[b];
        std::vector<float> last(l.end() - v, l.end());
        tokens[b] = {Argmax(last)};  // greedy next token
      }
      return std::move(*logits);
    };
    step();  // prefill: `prompt` tokens per sequence in one step
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) step();
    const CudaOpsStats before = cuda->cuda_stats();
    std::vector<double> times;
    for (int i = 0; i < steps; ++i) {
      const auto s0 = Clock::now();
      step();
      times.push_back(Seconds(s0));
    }
    const CudaOpsStats d = Delta(cuda->cuda_stats(), before);
    double total = 0;
    for (double t : times) total += t;
    std::sort(times.begin(), times.end());
    const double step_s = times[times.size() / 2];  // median
    const double mean_s = total / steps;
    const double kernel_s = d.kernel_seconds / steps;
    const double copy_s = (d.upload_seconds + d.download_seconds) / steps;
    const double bytes = static_cast<double>(d.weight_bytes_read + d.kv_bytes_read) / steps;
    const double floor_s = bytes / bandwidth;
    floors[bi] = floor_s;
    cuda_ops_step[bi] = step_s;
    std::printf("%5d %10.3f %10.4f %10.0f %7.0f %10.3f %10.3f %10.3f %10.3f %9.1f %9.2f %7lld\n",
                batch, step_s * 1e3, floor_s * 1e3, step_s / floor_s, batch / step_s,
                kernel_s * 1e3, copy_s * 1e3, (mean_s - kernel_s) * 1e3,
                (d.host_seconds / steps) * 1e3,
                d.weight_bytes_read / steps / 1048576.0, d.kv_bytes_read / steps / 1048576.0,
                static_cast<long long>(d.calls / steps));
    const int64_t position = prompt + absl::GetFlag(FLAGS_warmup) + steps / 2;
    CsvRow({.model = ModelName(absl::GetFlag(FLAGS_config)), .path = "cuda_ops",
            .numerics = absl::GetFlag(FLAGS_bf16) ? "bf16" : "fp32", .mode = "ops",
            .batch = batch, .context = position, .step_ms = step_s * 1e3,
            .device_ms = kernel_s * 1e3,
            .floor_ms = weir::bench::StoredStepBytes(c, batch, position) / bandwidth * 1e3,
            .fp32_floor_ms = floor_s * 1e3});
    if (d.cpu_fallbacks > 0 || d.weight_uploads > 0) {
      std::printf("      (%lld CPU fallbacks, %lld weight uploads during the timed steps)\n",
                  static_cast<long long>(d.cpu_fallbacks), static_cast<long long>(d.weight_uploads));
    }
  }
  std::printf("columns: step_ms median decode step; floor_ms (w_MiB + kv_MiB) / copy bandwidth; "
              "ratio step / floor; kernel_ms and copy_ms device time (mean per step); gpu_idle "
              "mean step minus kernel time; host_ops wall time inside the ops (the rest of the "
              "step is the model's host code); ops = Ops calls per step\n");
  if (absl::GetFlag(FLAGS_device_decoder)) {
    DeviceDecoderTable(**model, options_precision(), batches, floors, cuda_ops_step, bandwidth);
  }
  return 0;
}
