// worker/model/device_decoder.h
//
// DeviceDecoder: batched decode steps of the V4.1 backbone with activations,
// weights and KV resident on one CUDA device, each step replayed as a CUDA
// graph captured once per padded batch size. It is the device-resident
// counterpart of Model::ForwardBatch for one-token rows (decode); prefill
// stays on the eager path (Model with CudaOps or CpuOps), whose SequenceState
// is then copied in with Import.
//
// Flow of a Step(slots, tokens):
//   host: validate; hash the Engram rows; compute the step's metadata (token,
//         position, slot, window rows, compressed-entry rows, visible lengths
//         per ratio) for a batch padded up to a multiple of `batch_interval`
//         (pad rows run in a scratch slot) and copy it with one
//         cudaMemcpyAsync into fixed device buffers;
//   device: the graph of that padded size (captured on its first use) runs the
//         whole backbone: embedding, per layer Engram, mHC mixes, attention
//         (projections, RoPE from a device position table, FP8 window KV
//         written into the slot's ring, compressor and index keys appended to
//         the slot's compressed pools, indexer scores over the slot's keys,
//         candidate pool, top-k, sparse attention over one KV pool with
//         absolute row indices, grouped output projection), MoE (gate, rows
//         grouped by expert, row-stable grouped expert products, SwiGLU,
//         combine with the shared expert), then the head;
//   host: copies the logits [rows, vocab] back and synchronizes.
// Every op is the same kernel arithmetic as CudaOps (and so as CpuOps): the
// logits equal Model::ForwardBatch on CpuOps with row_stable_logits bit for
// bit (device_decoder_test.cc checks it over 64 steps).
//
// Device memory: one block in Create (a cudaMalloc, or a block of
// options.memory, the worker's one arena) holds the weights (fp32, exactly
// dequantized, as CudaOps), the KV pools of every slot and the activations of
// the largest batch; nothing is allocated on the step path. The pools per
// slot: a window ring [window, head_dim] per backbone layer and, per
// kv-source layer of ratio r > 1, the compressor's partial group [r,
// head_dim] x 2. The compressed KV and the index keys are paged: one pool of
// kv_blocks blocks, a block covering kv_block_tokens positions of one
// sequence (block_tokens / r entries of every ratio-r kv-source layer, as
// worker/kv_cache lays out its host blocks), a block table per slot on the
// device through which the steps write entries and the indexer and the
// attention read them. The tables are the decoder's own (blocks taken as a
// sequence grows, returned at Release) or, with
// options.external_block_tables, the caller's (SetBlockTable: a worker's
// blocks from the coordinator's plans). Values are stored as fp32 holding the
// quantized formats' exact values (FP8 window KV, FP4 compressed KV, MXFP4
// index keys), as the CPU reference keeps them.
//
// Expert parallelism (options.communicator): the decoder is one rank of an EP
// group and holds the routed experts of its slots in options.placement. Every
// MoE layer of a step then runs, inside the same graph:
//   ExpertSlots (replica choice as CommunicatorExpertExecutor) ->
//   MoeDispatchPack (blocks of a fixed `padded rows` capacity per peer) -> one
//   NCCL group of sends and receives (x rows, local slots, route weights) ->
//   MoeGroupRows over the received rows of every rank -> grouped expert
//   products -> CopyRows of the outputs into per-peer return blocks -> NCCL
//   all-to-all back -> MoeCombine in ascending expert id (so the logits stay
//   bit-identical to one process).
// Block sizes are constants of the padded batch, so NCCL calls are captured
// with the rest of the step. With a world > 1 every rank must call Step the
// same number of times (a rank without rows passes an empty batch) and each
// step is padded to the full batch capacity, so that block sizes agree
// across ranks. A world of 1 moves the blocks with device copies.
//
// Several positions of one sequence in a step (StepRows, up to
// max_rows_per_slot): a run's window KV goes to staging rows its later rows
// read (its last `window` rows then move into the slot's ring), the
// compressor applies a slot's rows in order
// (CompressorDecode runs), the Engram n-grams see the earlier rows, and the
// head runs only for the rows whose logits are asked.
//
// Not covered (Step returns UNIMPLEMENTED or Create INVALID_ARGUMENT): image
// tokens, sharded Engram tables. The
// expert load (for EPLB) is counted on the device (TakeExpertLoad), and a new
// expert map is installed between steps (SetPlacement).
//
// Thread safety: not thread-safe; one Step at a time. The instance owns its
// stream; every call has finished on the device when it returns.

#ifndef WEIR_WORKER_MODEL_DEVICE_DECODER_H_
#define WEIR_WORKER_MODEL_DEVICE_DECODER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/decode_backend.h"
#include "worker/model/device_arena.h"
#include "worker/model/expert_placement.h"
#include "worker/model/model.h"
#include "worker/model/ops.h"
#include "worker/model/sequence_state.h"

namespace weir::parallel {
class NcclCommunicator;
}  // namespace weir::parallel

namespace weir::model {

// The arithmetic of a step (shared/GPU.md "Two numerics").
enum class DecodeNumerics {
  // Every op repeats the CPU's arithmetic order: the logits equal
  // Model::ForwardBatch on CpuOps bit for bit. The oracle.
  kReference,
  // Tensor cores on stored forms, where a layer has them: dense FP8 linears
  // as e4m3 codes + UE8M0 32 x 32 tile scales (Fp8BlockGemm over activations
  // quantized by ActQuantFp8, the same act_quant as the reference), routed
  // experts as MXFP4 (Mxfp4ExpertFfn: gate/up, SwiGLU, route weight and the
  // FP8 quantization of h fused, then w2). Not bit-identical to the CPU:
  // each product differs from the reference only by fp32 summation order
  // (bounds in the kernels' headers); batch-invariant on its own (a row's
  // logits never depend on the other rows). A layer without a stored form
  // (bf16 linears, a weight that does not re-encode exactly, expert shapes
  // the grouped kernel does not take) keeps the reference kernel; stats()
  // counts both kinds. The small fp32 products are spread over the GPU: the
  // mHC mixes on RowStableDot and the gate logits on MoeGateLogits (both
  // keep the reference's bits: a mix or a gate logit moved by one rounding
  // flips near-tie expert choices downstream, measured), the head on DotRows
  // (fixed order, not the reference's; it feeds no later layer).
  kFast,
};

// "reference" / "fast".
const char* DecodeNumericsName(DecodeNumerics n);
// Parses DecodeNumericsName's spellings; INVALID_ARGUMENT otherwise.
absl::StatusOr<DecodeNumerics> ParseDecodeNumerics(std::string_view name);

// Rows above which DeviceDecoderOptions::dense_wgmma_f16 takes a linear to
// f16 wgmma (its 128 x 128 tile).
inline constexpr int64_t kDenseWgmmaF16MinRows = 256;
// Rows above which kAuto runs the FP8 products on the warp-specialized
// prefill tile, so steps that may need DeviceDecoderOptions::prefill_x16_panel.
inline constexpr int64_t kX16PanelMinRows = 256;
// Rows up to which DeviceDecoderOptions::dense_wgmma_f16_decode does.
inline constexpr int64_t kDenseWgmmaF16DecodeRows = 16;

struct DeviceDecoderOptions {
  int device = 0;
  DecodeNumerics numerics = DecodeNumerics::kReference;
  // kFast: the routed experts on Mxfp4ExpertFfn (false: the reference's
  // grouped kernel, the dense linears still fast; for fidelity studies).
  bool fast_experts = true;
  // kFast: the mHC coefficients on HcMixSplitK (fp32 products and sum of
  // squares split over K in a fixed order, batch-invariant, one launch: the
  // EP8 slice of V4.1-Flash 24.0 -> 20.1 ms a step at batch 1). On by
  // default: on trained weights (models/tiny) it keeps the bars
  // (one-step top-1 0.998, median row error 2.5e-7, expert choices 0.9995
  // equal; device_decoder_fast_test TrainedTiny*). False keeps the
  // reference's products (RowStableDot, then HcMix) and bits: on random
  // weights a mix moved by ~1e-7 flips near-tie expert choices downstream
  // (small bf16: top-1 0.83 with it, above 0.95 without).
  bool fast_mhc = true;
  // kFast: the head on DotRows (false: the reference's row-stable product;
  // for fidelity studies).
  bool fast_dot_rows = true;
  // kFast with the Markov head on DotRows: a draft block's Markov head in one
  // MarkovDraft launch (the same bits as the per-position loop of 4 kernels,
  // which false keeps; vocab x rank up to kMarkovDraftMaxProducts). Off until
  // its tests (markov_test, FusedMarkovGivesTheLoopsBits) have run on a GPU.
  bool fused_markov = false;
  // kFast with bf16 activations: the bf16 linears (the grouped wo_a, the
  // head, compressor / indexer projections, Engram's wkv) held in bf16 on
  // Bf16Gemm's tensor cores (false: fp32 on the reference kernel; the head
  // then on DotRows). Their inputs are bf16-valued in that mode, so only the
  // summation order differs from the reference.
  bool fast_bf16 = true;
  // kFast on head_dim 512 (V4.1-Flash): the KV pools in the model's stored
  // form (window FP8 e4m3 + UE8M0 per 32, 528 bytes a row; compressed FP4
  // e2m1 + E4M3 per 16, 288 bytes) read by SparseDecodeAttention (tensor
  // cores, one CTA per query and 16 heads) instead of fp32 rows (2048 bytes)
  // and the reference attention. The stored values are exactly the ones the
  // reference's fake quantization keeps; only the attention's arithmetic
  // differs (kernels/cuda/attention/sparse_decode_attention_sm90.h).
  bool stored_kv = true;
  // Sequences held at once (slots 0 .. max_sequences-1).
  int max_sequences = 64;
  // Positions one slot can hold (prompt + generated).
  int64_t max_positions = 2048;
  // Paged compressed pools (see the file comment): positions a block covers,
  // a multiple of every compress ratio of the model (INVALID_ARGUMENT at
  // Create otherwise); 0: the smallest such multiple >= 64.
  int kv_block_tokens = 0;
  // Blocks in the pool; 0: enough for every slot at max_positions (the
  // footprint of unpaged pools). Fewer lets more slots share the memory of
  // the sequences actually held: a step that needs more blocks than are
  // free is OUT_OF_RANGE and changes nothing.
  int64_t kv_blocks = 0;
  // The slots' block tables come from the caller (SetBlockTable) instead of
  // the decoder's own free list: the decoder never takes a block itself, and
  // a step whose rows pass a slot's table is OUT_OF_RANGE.
  bool external_block_tables = false;
  // Speculative verification on the device: Rollback may undo up to this
  // many of a slot's last positions (a verification's rejected drafts).
  // Runs of up to max_rollback + 1 rows write their window KV straight into
  // rings of window + max_rollback rows a slot and layer, and the
  // compressor's partial groups live in rings of ratio + max_rollback rows,
  // so the positions undone never overwrote one the kept positions read.
  // 0: no rollback (rings of window and ratio rows).
  int max_rollback = 0;
  // DSpark drafting on the device (speculative decoding): the model's DSpark
  // stages live here too; every step writes their rings (the targets' mean
  // over the mHC streams, main_proj, each stage's window KV) for every row,
  // and DraftBatch runs a block through the stages and the heads. Needs a
  // model with stages. With a communicator every rank holds all the stages'
  // experts (never exchanged), so DraftBatch is no collective: the ranks of
  // an expert-parallel group draft each for its own sequences; the rings
  // follow Rollback like the backbone's.
  bool drafting = false;
  // > 0: Create lowers max_positions (to no less than 2) until the arena fits
  // in this many bytes; options() then reports the value used.
  size_t arena_budget_bytes = 0;
  // Largest batch of one Step; batches are padded up to a multiple of
  // batch_interval (one graph per padded size).
  int max_batch = 64;
  int batch_interval = 8;
  // Most consecutive positions of one sequence in a Step (StepRows: a
  // prefill chunk, or a verification's token and drafts); 1 to max_batch.
  // The rows of such a run write their window KV into staging rows (one a
  // batch row and layer), which the run's later rows read; the last
  // `window` of them move into the slot's ring after the attention.
  int max_rows_per_slot = 1;
  // Replay CUDA graphs (false: launch the same kernels eagerly every step).
  bool use_graphs = true;
  // Steps of more (padded) rows than this launch eagerly even with
  // use_graphs (prefill chunks: launches are small beside their work, and a
  // graph would be captured for every new size).
  int64_t graph_max_rows = 256;
  // Graphs: the edges between the project's kernels are programmatic
  // (kernels/cuda/programmatic_graph.h), so each kernel launches while the
  // one before it finishes and waits in its prologue; same results, less
  // time between kernels. False: ordinary edges (benchmarks compare both).
  bool programmatic_launch = true;
  // kFast split-K linears at up to kFp8GemmFusedReduceMaxM rows: the last
  // split CTA of each tile sums the partials (Fp8BlockGemmParams::
  // split_counters) instead of a second kernel; same bits either way. Off by
  // default: measured slower on the EP8 slice (batch 1 16.52 vs 15.83 ms,
  // batch 8 23.60 vs 22.98; H200, tools/bench README "decode_gpu"), when it
  // also turned concurrent_branches off; a branch now has counters of its own.
  bool fused_split_reduce = false;
  // RoPE inside the launch before it where that launch can take it, the same
  // bits (ApplyRope's arithmetic, kernels/cuda/rope_pair.cuh): the query's
  // and the indexer query's in their FP8 product's split-K reduce (decode
  // steps), the attention output's inverse one in the transpose before its
  // grouped projection. DeviceDecoderStats::fused_ropes counts them. On the
  // EP8 slice's decode step the attention output's 40 and the indexer
  // query's 8 fuse (the query's wq_b runs unsplit at decode: the split rule
  // reaches its CTAs without one), 1,797 -> 1,749 graph nodes, and the step
  // takes the same time (H100, alternating runs: batch 1 11.33 - 11.35 ms
  // against 11.34 - 11.37, batch 8 19.37 - 19.42 against 19.33 - 19.41):
  // with programmatic edges those launches were off the critical path. On:
  // the same bits, fewer launches, not slower.
  bool fused_rope = true;
  // kFast: each KV-like row's end in one KvRowFinish launch
  // (kernels/cuda/decode/kv_rows.h), the same bits: the window KV's norm,
  // RoPE, quantization and scatter into its ring (4 - 5 launches), the
  // compressed latent's norm, RoPE and store (3 - 4; its pre-RoPE row stays
  // for the index keys' product) and the index keys' (3 - 4).
  // DeviceDecoderStats::fused_kv_rows counts the fused launches.
  bool fused_kv_rows = true;
  // kFast: small passes over a launch's input or output folded into that
  // launch, the same bits: the indexer query's MXFP4 fake quantization and
  // its weights' scale into IndexerScore (IndexerScoreParams::q_mxfp4,
  // weights_factor), the bf16 boundary of the unstored pools' attention
  // output into SparseAttention (round_bf16), the Engram embeddings' into
  // their lookup and the Engram keys' and value's copies into the gate
  // (reading the projection's output in place). Two launches fewer a layer
  // with an indexer, one a layer on the unstored pools, three an Engram layer.
  // DeviceDecoderStats::folded_row_ops counts the passes folded. Its tests
  // (kernels' indexer_score_test, sparse_attention_test, engram_test and
  // device_decoder_fast_test's FusedRowLaunches case) pass on an H100; with
  // fused_kv_rows small's step went 582 -> 500 kernels, 1.458 -> 1.399 ms at
  // batch 1 and 2.448 -> 2.385 ms at batch 64 (2026-12-06).
  bool fold_row_ops = true;
  // kFast FP8 linears: the split-K rule's knobs (ChooseFp8GemmSplits: about
  // this many CTAs of 32 weight rows, at least this many 128-wide K stages a
  // split). Each setting has its own bits; the decoder keeps one for every
  // call. For sweeps (decode_gpu --fp8_split_target / --fp8_split_min_stages);
  // the split-K scratch grows with the target.
  // 0: the rule's own constants (kFp8GemmSplitTargetCtas, kFp8GemmMinSplitStages).
  int64_t fp8_split_target_ctas = 0;
  int fp8_split_min_stages = 0;
  // kFast bf16 linears (V4.1's grouped wo_a): split-K by weight shape
  // (ChooseBf16GemmSplits) and a second kernel summing the partials in split
  // order; false: one CTA walks all of K (other bits, also batch-invariant).
  bool bf16_split_k = true;
  // prompt_bf16_linears: the prompt's products unsplit whatever their weight
  // (bf16_split_k then governs the bf16 weights' products only). Other bits
  // for a prompt row, still its X row's and W's alone (no split at any
  // chunk length), and the products CUTLASS can take (bf16_cutlass). On:
  // at 4,096 rows the splits buy no parallelism and their fold costs (the
  // EP8 chunk 0.576 -> 0.567 s alone, 0.535 s with bf16_cutlass; H100,
  // thirty-eighth session).
  bool prompt_bf16_unsplit = true;
  // The mHC collapse-norms (HcCollapseNorm, HcExpandCollapseNorm): CTAs a
  // token (HcCollapseNormParams::cluster_ranks; 1 = a block a token, 2 / 4 /
  // 8 = a cluster, 0 = by the step's token count). The same bits whatever it
  // is; for sweeps (decode_gpu --norm_cluster_ranks).
  int norm_cluster_ranks = 0;
  // With a block a token (the steps of more than 64 rows, or ranks 1): its
  // threads (HcCollapseNormParams::block_threads), 256 (four blocks an SM
  // overlap one token's loads with another's norm) or 1,024 (0 or 1,024).
  // The same bits. 256 by default since the forty-first session (H100): the
  // EP8 chunk 0.470 -> 0.462 / 0.463 s alone (the prompt's
  // HcExpandCollapseNorm 30.0 -> 24.5 ms of it).
  int norm_block_threads = 256;
  // kFast FP8 linears: the CTAs ask L2 for their weight rows before they
  // wait for the kernel before them (Fp8BlockGemmParams::prefetch_weights),
  // so with programmatic edges a decode step's weights stream during the
  // previous kernel. A hint: same results either way.
  bool weight_prefetch = true;
  // kFast, one rank: independent parts of a step run on a second stream (a
  // parallel branch of its graph) with their own FP8 and split-K scratch:
  // the shared expert beside the routed experts, the window KV and the
  // compressor beside the query projections. Same results either way.
  bool concurrent_branches = true;
  // Eager steps only (use_graphs false): record CUDA events between the
  // step's sections (embedding, Engram, mHC, attention parts, MoE parts,
  // head) and add their device times to DeviceDecoderStats::section_seconds.
  bool profile = false;
  // The head with the row-stable product (CpuOps row_stable_logits bits)
  // rather than cuBLASLt.
  bool row_stable_logits = true;
  // Token id -> Engram compressed id, as ModelOptions::engram_token_map.
  std::vector<int64_t> engram_token_map;
  // Hold the routed experts of a layer as MXFP4 (packed e2m1 + E8M0 per 32,
  // the checkpoint's own format, 8x less memory than fp32) when every expert
  // of the layer re-encodes exactly (checked on the host); the grouped
  // product dequantizes on load to the same values, so results do not change.
  bool mxfp4_experts = true;
  // kFast routed experts: the CTA tile of both grouped MXFP4 products, by
  // its name in kernels/cuda/moe (w4m8, w4m8s4, w4m8s3, w4m16s4, w4m32, w8m64); empty:
  // chosen from the rows an expert gets (ChooseMxfp4GroupedTile). Tiles move
  // time, never bits (benchmarks: decode_gpu --expert_tile). INVALID_ARGUMENT
  // at Create for another name.
  std::string expert_tile;
  // kFast routed experts: each 32-element block sum on wgmma (sm_90a's FP8
  // tensor-core path; kernels/cuda/moe Mxfp4GemmMath::kWgmma) instead of the
  // f16 mma pair. Changes the low bits of the block sums (FP8 wgmma keeps
  // fewer), keeps batch invariance (every tile of one math gives a row the
  // same bits). Off by default until measured faster end to end.
  bool expert_wgmma = false;
  // kFast routed experts (without expert_wgmma): the f16 mma pair's block
  // sums issued as wgmma m64nNk16 f16 (Mxfp4GemmMath::kWgmmaF16), X widened
  // once a stage for the CTA: the same bits as the mma pair (the f16 wgmma
  // sums as mma.sync does: kernels/cuda/dense/tensor_core_sum_probe_test), so
  // a choice of speed only.
  bool expert_wgmma_f16 = false;
  // kFast FP8 linears: each 32-element block sum on wgmma with both operands
  // read from shared memory by descriptor (kernels/cuda/dense
  // Fp8GemmMath::kWgmma: its own 64-row tiles, and above 256 rows the
  // warp-specialized prefill tile's e4m3 instance) instead of the f16 mma
  // pair. Other low bits, batch invariant on its own. Off: outside issue
  // 20's fidelity bars on the trained tiny (worker/model/README.md).
  bool dense_wgmma = false;
  // kFast FP8 linears of more than kDenseWgmmaF16MinRows rows (prefill
  // chunks): the f16 mma pair's block sums issued as wgmma m64nNk16 f16
  // (Fp8GemmMath::kWgmmaF16, incl. the 128 x 128 prefill tile): the same bits
  // as the mma pair (kernels/cuda/dense/tensor_core_sum_probe_test), so a
  // choice of speed only.
  bool dense_wgmma_f16 = false;
  // kFast FP8 linears of at most kDenseWgmmaF16DecodeRows rows (decode
  // steps) on the same f16 wgmma (kN64M8 / kN64M16): the same bits, a choice
  // of speed only. Off: slower than the mma tiles (EP8 slice of V4.1-Flash,
  // 2026-12-04: 12.66 - 12.75 against 11.95 - 12.03 ms at batch 1).
  bool dense_wgmma_f16_decode = false;
  // kFast: steps whose local experts get at least kExpertTileFormRows rows
  // each (prefill chunks) run the routed experts on Fp8BlockGemm over the
  // weights converted each step to the FP8 tile form
  // (kernels/cuda/moe/README.md design P), in the layers whose experts
  // convert exactly (checked at Create and after SetPlacement), in the
  // MXFP4 kernel's math (e4m3 wgmma with expert_wgmma, else the f16 mma
  // pair) and so with its bits (device_decoder_fast_test
  // SmallBf16TileFormExpertsGiveTheMxfp4KernelsBits, both maths). Its scratch
  // (one layer's local experts in FP8) is in the arena.
  bool expert_prefill_tiles = true;
  // With expert_prefill_tiles: every layer's local experts kept in the tile
  // form in the arena, converted once at Create and after each SetPlacement,
  // instead of converted into one layer's scratch at every prefill step (the
  // same bits). Costs 3 x inter x dim bytes (+1/1024 scales) an expert a
  // layer, about twice the MXFP4 experts' own bytes, taken from the arena
  // before the KV pools. Off by default.
  bool expert_tiles_resident = false;
  // kFast, steps of more than 256 rows: the FP8 products on the
  // warp-specialized prefill tile read X from an f16 panel of its codes
  // (dense::WidenFp8ToF16Panel, made before each such product) instead of
  // widening the codes in every CTA: the same bits, less shared-memory
  // traffic a stage. Costs 2 bytes an element of the FP8 activation scratch
  // (and of the parallel branch's), taken from the arena when the decoder
  // plans steps above 256 rows.
  bool prefill_x16_panel = true;
  // kFast (stored KV): the sparse attention runs one CTA a query for 64 heads
  // on wgmma (kernels::cuda::SparseDecodeKernel::kWgmma64: each listed row
  // gathered and dequantized once a query) instead of one CTA a query and 16
  // heads on mma.sync (kMma16). The two are not bit-identical to each other;
  // each is batch-invariant, so a decoder keeps one for all its steps. On the
  // EP8 slice of V4.1 (one H200, context 4,096, 2026-12-05), against kMma16:
  // at the default ranges (attention_range_tiles 0) decode steps 4.8 % /
  // 2.1 % shorter at batch 1 / 8, 4 % longer at batch 64 (context 64), the
  // 4,096-row prefill chunk unchanged; at one CTA a query (16) the chunk
  // 12 % shorter (attn.sparse 198 -> 85 ms) and decode steps 10.5 % / 7.6 %
  // longer at batch 1 / 8. At batch 64 and context 4,096 the default ranges
  // and kMma16 tie (40.52 / 40.58 ms, one H100, 2026-12-05), so since then it
  // is on by default at the default ranges (decode latency); prefill servers
  // take 16, and false keeps kMma16.
  bool attention_wgmma = true;
  // With attention_wgmma: the least number of 64-entry tiles of a query's
  // list one CTA takes (SparseDecodeAttentionParams::wgmma_range_tiles; a
  // query's ranges are one thread-block cluster). 0 means 2 (five CTAs a
  // query at V4.1's 640-entry lists: the decode latency); 16 or more, one
  // CTA a query (no cluster, no fold: the prefill throughput). Each value
  // gives its own bits, batch-invariant, so a decoder keeps one; >= 0.
  int attention_range_tiles = 0;
  // > 0, with the stored-form pools at head_dim 512: a prompt's positions
  // (SetPromptEnd) run the attention as kWgmma64 with this many tiles a range
  // (16: one CTA a query, the prefill throughput), the other positions as
  // attention_wgmma / attention_range_tiles say (the decode latency). A
  // step holding both runs two launches, each over its role's queries
  // (SparseDecodeAttentionParams::query_role), so a position's bits follow
  // its role alone: batch-invariant, and the same however a prompt is
  // chunked. 0: every position the decode shape. >= 0. On the EP8 slice
  // (one H100, 2026-12-06) 16 takes a 4,096-position prefill from 4,266 to
  // 4,799 tok/s (0.101 -> 0.114 of cuBLASLt FP8), the decode step after it
  // unchanged (10.94 / 10.90 ms).
  int prompt_range_tiles = 16;
  // kFast, unstored pools (head_dims SparseDecodeAttention does not take,
  // e.g. small's 256): the attention's listed rows staged in shared memory
  // (SparseAttentionParams::staged; the same bits). Small on one H100
  // (2026-12-06): 1.403 -> 1.279 ms a step at batch 1, 2.417 -> 2.373 at 64.
  bool staged_attention = true;
  // With staged_attention: the heads of a query one block takes
  // (SparseAttentionParams::heads_per_block; 0: chosen from the launch's
  // size, else 1, 2, 4 or 8 dividing the heads). The same bits at every
  // value. Small's slice on an H100 (thirtieth session), ms at batch 1 / 64:
  // 1 head a block 1.187 / 2.163, the choice (2 at batch 64) 1.192 / 1.973.
  int attention_heads_per_block = 0;
  // With staged_attention, fold_row_ops and fused_rope: the staged kernel
  // writes the attention output straight into the grouped output
  // projection's layout with the inverse RoPE (SparseAttentionParams::
  // grouped; the bits of the SwapAxes it replaces, one launch a layer
  // fewer: sparse_attention_test's StagedGroupedOutputGivesTheSwapAxesBits
  // and device_decoder_fast_test's SmallFusedRowLaunchesGiveTheSeparateLaunchesBits
  // pass on an H100, 2026-12-06).
  bool fused_attention_out = true;
  // kFast, bf16 grouped wo_a (V4.1's checkpoints): the launch before the
  // grouped product (the staged attention's grouped output, or the inverse
  // RoPE's SwapAxes) writes its input as bf16 bits (no ToBf16 launch), and
  // the product writes u's [batch, groups, rank] rows itself
  // (Bf16GemmParams::y_row_stride; no SwapAxes after it): two launches a
  // layer fewer, the same bits.
  // On since 2026-12-06 (H100, decode_gpu, worker/model/README.md "The
  // twenty-third session's A/B"): the EP8 slice with V4.1's bf16 wo_a at
  // batch 1 / 64 13.63 -> 11.22 / 46.19 -> 37.93 ms, small 1.235 -> 1.213 /
  // 2.331 -> 2.321 ms over bf16_branches + fused_swiglu_fp8.
  bool direct_wo_a = true;
  // kFast, FP8 shared expert: the SwiGLU between its w1/w3 and w2 products
  // writes w2's FP8 input itself (SwigluParams::codes; ActQuantFp8's bits,
  // one launch a layer fewer).
  // On since 2026-12-06: small's step the same (1.276 / 2.355 against
  // 1.274 / 2.356 ms), 12 launches fewer (H100, decode_gpu).
  bool fused_swiglu_fp8 = true;
  // kFast with concurrent_branches: the attention's collapse-norm also makes
  // h's bf16 form where a bf16 product reads h (the compressor's wkv and
  // wgate, the indexer's weights: one ToBf16 launch a layer fewer), and the
  // window-KV / compressor branch runs beside the query projections with
  // bf16 weights too (the branch stages its other bf16 inputs, the index
  // keys' latent, in its own scratch). V4.1's and small's compressors are
  // bf16, so without it their layers never branch. The same bits.
  // On since 2026-12-06: small at batch 1 / 64 1.274 -> 1.235 / 2.356 ->
  // 2.341 ms (H100, decode_gpu).
  bool bf16_branches = true;
  // kFast: gates of at most this many multiply-adds a token (experts x dim)
  // sum their logits inside MoeGate's block (one launch a layer fewer, the
  // same bits: both kernels sum a logit by one warp's WarpLaneSum); wider
  // ones run MoeGateLogits first. 0: every gate runs MoeGateLogits.
  // 0: the same bits at 65,536 on an H100 (2026-12-06), but slower: small
  // at batch 1 / 64 1.274 -> 1.317 / 2.356 -> 2.380 ms (decode_gpu).
  int64_t gate_logits_in_block_macs = 0;
  // With direct_wo_a: where the grouped wo_a splits K, its second kernel
  // also writes u's FP8 form, which wo_b reads (ActQuantFp8's bits, one
  // launch a layer fewer).
  // On since 2026-12-06: the EP8 slice with V4.1's bf16 wo_a at batch 1 /
  // 64 11.22 -> 10.90 / 37.93 -> 37.95 ms over direct_wo_a (H100).
  bool reduce_fp8_out = true;
  // Steps of at least this many rows (a prefill chunk) run the compressor's
  // decode kernel in its parallel form (CompressorDecodeParams::
  // parallel_rows: a thread per row and channel instead of a run's rows
  // walked on one; the same latents and state). 0: never. 256 since
  // 2026-12-06 (compressor_decode_test passes on an H100): the EP8 slice's
  // 4,096-row chunk 0.857 -> 0.840 s (the serial walk took 6 ms a launch).
  int64_t parallel_compressor_rows = 256;
  // expert_prefill_tiles: tile rows one CTA of the experts' MXFP4 -> FP8
  // conversion walks (Mxfp4Fp8TilesParams::tile_rows_per_cta; the same
  // codes). 1, the old grid: 8 made the EP8 slice's 4,096-row chunk slower,
  // 0.857 -> 0.876 s (H100, 2026-12-06; mxfp4_fp8_tiles_test passes).
  int tile_conversion_rows = 1;
  // kFast, bf16 wo_a: each group held in the FP8 form V4.1's checkpoint
  // stores (e4m3 codes + UE8M0 per 32 x 32) where its bf16 values re-encode
  // exactly, half the bytes a step reads for it; the grouped product widens
  // the codes in shared memory (Bf16GemmParams::w_codes), and a prefill chunk
  // on the warp-specialized tile widens the layer's wo_a into the x16
  // scratch first (Fp8WeightBf16). The bits of the bf16 form.
  bool stored_wo_a = false;
  // kFast, stored pools on the wgmma attention (attention_wgmma): the
  // attention writes the grouped output projection's input itself,
  // transposed to [groups, batch, group width] with the inverse RoPE (as
  // bf16 bits with direct_wo_a): SparseDecodeAttentionParams::grouped, the
  // bits of the SwapAxes it replaces, one launch a layer fewer. On since the
  // twenty-fourth session (H100: the EP8 prefill chunk 0.868 -> 0.851 s, decode
  // unchanged).
  bool attention_grouped_out = true;
  // fast_mhc: HcMixSplitK's prefill grid for calls of kHcMixSplitOnYTokens
  // tokens and more (kernels/cuda/moe/hc_mix_split.h; the same bits). Off: its
  // GPU test passes, but the EP8 prefill chunk was slower with it (H100, 0.894
  // s against 0.872, twenty-fourth session).
  bool hc_mix_prefill_grid = false;
  // fast_mhc: HcMixSplitK's warp sums with the reduction transposed (the
  // same bits, ~2.5x fewer shuffles and adds; kernels/cuda/moe/hc_mix_split.h).
  // On since the twenty-fifth session (H100: the EP8 prefill chunk 0.853 ->
  // 0.832 s and 0.842 -> 0.837 s in two rounds; EP8 decode at context 64
  // 11.03 -> 10.88 ms at batch 1, 38.43 -> 38.12 ms at batch 64).
  bool hc_mix_transposed = true;
  // fast_mhc: calls of kHcMixLoopMinTokens and more take HcMixSplitK's token
  // loop (16 tokens a CTA, hc_fn held in registers; the same bits). Off: its
  // GPU test passes, but the EP8 prefill chunk was slower with it (H100,
  // twenty-fifth session: 0.856 s against 0.853 / 0.842 for the defaults).
  bool hc_mix_token_loop = false;
  // With prompt_range_tiles, on steps launched eagerly (prefill chunks: past
  // graph_max_rows, or without graphs): before each layer's prompt
  // attention, the rows the step's prompt sequences may read (their rings,
  // staging rows and compressed entries) are dequantized once into bf16
  // mirrors of the layer's pools (kernels/cuda/attention/kv_mirror.h), and
  // the prompt launch copies rows from them instead of dequantizing every
  // listed row once a query. The same bits. Costs the arena a mirror of one
  // layer's window region and of its largest compressed region (1 KB a row).
  // No faster while the prompt launch's epilogue was unrolled (H100, 0.846
  // -> 0.844 s, twenty-fourth session); on since the twenty-ninth session,
  // after the epilogue became a compact loop (H100: the EP8 slice's
  // 4,096-row chunk 0.735 / 0.735 -> 0.705 / 0.706 s, alternated in one call).
  bool prompt_kv_mirror = true;
  // kWgmma64 attention launches issue the next tile's Q K^T behind the
  // current tile's P V (SparseDecodeAttentionParams::wgmma_overlap; the
  // same bits). Off: no faster (H100, prefill 0.848 / 0.848 s, decode at
  // context 64 unchanged; twenty-fourth session). Rescheduled in the
  // thirtieth (the next Q K^T beside this tile's softmax), still no faster:
  // the EP8 chunk 0.705 / 0.704 s on against 0.699 / 0.698 off, decode at
  // batch 1 and context 64 10.82 against 10.65 ms (H100).
  bool attention_overlap = false;
  // expert_prefill_tiles: the experts' MXFP4 -> FP8 conversion in its
  // row-major form (Mxfp4Fp8TilesParams::coalesced: a thread a (row, K
  // block), a warp's loads and stores contiguous along rows; the same codes).
  // On since the twenty-fifth session (H100: the conversion of a layer's 48
  // experts 2.899 -> 1.109 ms, 0.30 -> 0.78 of copy; the EP8 slice's
  // 4,096-row chunk 0.825 / 0.827 -> 0.802 / 0.797 s).
  bool coalesced_tile_conversion = true;
  // The FP8 products on the warp-specialized prefill tile issue each K
  // block's sums as two halves of 64 X rows and fold one while the other
  // runs (Fp8BlockGemmParams::ws_halves; the same bits). Off: slower (H100,
  // twenty-fifth session: the EP8 slice's chunk 0.818 / 0.816 s against
  // 0.801 / 0.802 s).
  bool fp8_ws_halves = false;
  // The routed experts' SwiGLU and FP8 quantizations on the grouped rows
  // stop at the rows in use (group_offsets[experts], or [2 x experts] for
  // prompt_bf16_experts' role-major groups, read on the device:
  // SwigluParams / ActQuantFp8Params::row_count) instead of the step's
  // capacity, b x topk rows (with an exchange, world x b x topk). The same
  // bits: rows past the groups' end are never read (swiglu_test,
  // act_quant_fp8_test, SmallBf16TileFormExpertsGiveTheMxfp4KernelsBits on an
  // H100). The EP8 slice routes every pair to its 48 local experts, so there
  // it changes nothing (0.776 s against 0.771 s without, one round); it
  // matters where an exchange leaves most of the capacity empty.
  bool used_rows_only = true;
  // Expert parallelism over NCCL on device buffers (see the file comment):
  // this decoder is rank communicator->rank() of communicator->world_size().
  // Not owned; must outlive the decoder and live on `device`. Null: every
  // routed expert is local and nothing is exchanged.
  parallel::NcclCommunicator* communicator = nullptr;
  // With a communicator: the MoE exchange written by the device into the
  // peers' NCCL symmetric windows (kernels/cuda/moe/moe_exchange_lsa.h)
  // instead of NCCL sends of fixed blocks: a token's row goes only to the
  // ranks that serve one of its pairs and each served pair's output goes back
  // once, so a prefill chunk moves about (ranks hit a token) / world of the
  // rows; the same bits. Its receive windows (world x batch rows x (dim + 2
  // topk) floats, batch rows x topk x dim floats back) are NCCL memory
  // outside the arena. Needs every rank load/store accessible (one node on
  // NVLink): Create returns FAILED_PRECONDITION otherwise. Off by default
  // until it has run on several GPUs.
  bool ep_lsa_exchange = false;
  // With a communicator: the expert map, world_size equal to the
  // communicator's (num_layers 0 = IdentityPlacement over that world). The
  // model must hold the routed experts of this rank's slots.
  ExpertPlacement placement;
  // Take the arena from this shared allocation (on `device`) rather than
  // cudaMalloc; with arena_budget_bytes 0 the budget is what it has left.
  std::shared_ptr<DeviceArena> memory;
  // IndexerScore launches of at least kIndexerSharedKeysMinRows (512) rows,
  // a prefill chunk's, take the shared-keys form
  // (kernels::cuda::IndexerScoreForm::kSharedKeys: a block of 4 queries over
  // key tiles staged once for all four; the same bits). Steps of fewer rows
  // (decode batches, whose rows each read their own sequence's keys) keep
  // the per-query form. On since the twenty-fifth session (H100: the
  // 4,096-row chunk's IndexerScore 2.45 -> 1.22 ms a launch,
  // indexer_score_bench; the EP8 slice's chunk 0.800 / 0.799 -> 0.769 /
  // 0.773 s).
  bool indexer_shared_keys = true;
  // With indexer_shared_keys: those launches' heads' dots on the tensor
  // cores where q's MXFP4 form and the MXFP4 index keys (the stored KV pools)
  // are their inputs (IndexerScoreForm::kSharedKeysMma: mma.sync over the
  // exact bf16 values, the terms and head sum as the CPU's): the same bits
  // wherever a dot's exact sum fits fp32, which the MXFP4 blocks' narrow
  // products make nearly everywhere. On since the thirty-ninth session (H100:
  // indexer_score_bench's 4,096-row launch 1.218 -> 1.076 ms; the EP8 chunk
  // with the prompt's gate and TF32 mHC 0.481 / 0.481 -> 0.478 / 0.476 s;
  // its tests pass).
  bool indexer_mma = true;
  // With indexer_mma: the head sum through each warp's shared scratch
  // (IndexerScoreForm::kSharedKeysMmaSum) instead of the lanes' shuffle
  // chain, which issued about 1,000 instructions a pass and lane against its
  // 128 mma (the indexer took 21 ms of the EP8 chunk on an H200). The same
  // bits. Built in the forty-second session after its device calls: off
  // until a GPU runs indexer_score_test.
  bool indexer_mma_sum = false;
  // With indexer_mma: kSharedKeysMmaSum with q's MXFP4 form and the key tiles
  // staged once as bf16, the mma fragments loaded by ldmatrix, and a term's
  // two bf16 roundings one conversion for two values
  // (IndexerScoreForm::kSharedKeysMmaBf16; ptxas: 157 registers, no spills;
  // the 16-channel step 79 -> 28 SASS instructions; 61 KB a block, three an
  // SM). The same bits. On since the forty-third session (H100:
  // indexer_score_test passes every form against the CPU's bits; the EP8
  // chunk 0.419 / 0.419 -> 0.404 / 0.405 s, two rounds, against 0.410 with
  // indexer_mma_sum). Takes precedence over indexer_mma_sum.
  bool indexer_mma_bf16 = true;
  // IndexerScore launches of fewer than kIndexerSharedKeysMinRows rows (decode
  // steps, each row over its own sequence's keys) on the tensor cores where
  // q's MXFP4 form and the MXFP4 index keys are their inputs
  // (IndexerScoreForm::kDecodeMmaBf16: a block a query and a range of 64-key
  // tiles, its four warps 16 keys each over every head; the arithmetic of
  // kSharedKeysMmaBf16, so the same bits). The per-query form runs its dots
  // on the CUDA cores: 240 us a launch at the EP8 slice's batch 64 (1.8 ms
  // of the step; H100, forty-fifth session). Built in the forty-sixth
  // session: off until a GPU runs indexer_score_test.
  bool indexer_decode_mma = false;
  // The sparse attention's top-k of rows of up to 8,192 visible entries with
  // each row held in registers (kernels/cuda/attention TopkParams::in_registers:
  // read once instead of about six times, a tie and the output one prefix
  // sum each). The same positions. At batch 1 a decode step's 8 selects took
  // about 34 us each on one SM (H100, context 4,096). Built in the
  // forty-third session: topk_test passes (H100), but EP8 decode at batch 1
  // measured 10.86 ms without and 10.93 with it (one round each): off.
  bool topk_in_registers = false;
  // With prefill_x16_panel: the panel is made with X's scales
  // (dense::Fp8F16PanelParams::scales: each block whose UE8M0 scale is in
  // 2^-21 .. 2 written as code x 2^(e + 6)), and the product told so
  // (Fp8BlockGemmParams::x_f16_scaled), so a stage whose rows are all in
  // range folds with one factor a warp instead of the table of scale
  // products. The same bits (fp8_block_gemm_sm90_test
  // ScaledPanelGivesTheMmaBits). Not with fp8_ws_halves (ignored then).
  // Off: no faster (H100, twenty-sixth session: the EP8 slice's chunk 0.756 /
  // 0.756 s against 0.751 / 0.751 s; kernels/cuda/dense/README.md "The scaled
  // panel").
  bool scaled_x16_panel = false;
  // kFast: the FP8 linears of a prompt's positions (SetPromptEnd) run as
  // Bf16Gemm over their operands dequantized exactly to bf16 (an e4m3 code
  // times a UE8M0 scale is always a bf16 value): X by dense::Fp8ActBf16
  // after the reference's act_quant, W widened in the product's stages
  // (w_codes, up to 256 rows) or into a scratch first (Fp8WeightBf16, then
  // the warp-specialized bf16 tile). No per-32 fold: the bf16 tile runs at
  // the bf16 tensor rate where the FP8 tile's f16 block sums and fp32 fold
  // are issue-bound. Other low bits than the generated positions' FP8
  // linears (fp32 sums over all of K), so like prompt_range_tiles the math
  // follows a row's role: a step with both roles runs the FP8 product for
  // every row, then this one writing the prompt's rows only
  // (Bf16GemmParams::row_role); batch-invariant, the same however a prompt
  // is chunked. The routed experts' tile form keeps its math. Costs the
  // arena a bf16 copy of X's FP8 scratch (and the branch's) and, for steps
  // above 256 rows, of the largest FP8 weight. On since the thirty-fourth
  // session (an H100: the EP8 slice's 4,096-position chunk 0.699 / 0.692 s
  // -> 0.666 / 0.666 s; worker/model/README.md).
  bool prompt_bf16_linears = true;
  // With prompt_bf16_linears: the routed experts' rows of a prompt's
  // positions on the bf16 maths too (kernels/cuda/moe
  // Mxfp4Bf16GroupedGemm: X's FP8 codes dequantized into rx16, the MXFP4
  // codes widened to bf16 in the product's stages, fp32 sums over all of K),
  // the gate and up products, the SwiGLU and FP8 quantization of h as the
  // tile form does them, h dequantized, then the down product. The experts
  // are about half of a V4.1 prefill chunk's FLOPs, which the FP8 tile form
  // runs after converting every local expert to FP8 tiles each chunk and
  // folding each 32-block with two scales. A grouped row takes its token's
  // role: a step of both roles groups its rows role-major
  // (MoeGroupRowsParams::token_role: the generated rows' groups, then the
  // prompt's), runs the FP8 experts over the first and this route over the
  // second, so each row pays for one maths and a row's bits never depend on
  // the step around it. Layers with an
  // expert exchange (a communicator), or whose dims are not multiples of
  // 128, keep the FP8 maths for every row. On since the thirty-fourth
  // session (an H100: the EP8 slice's 4,096-position chunk 0.666 -> 0.623 s
  // over prompt_bf16_linears alone; worker/model/README.md).
  bool prompt_bf16_experts = true;
  // With prompt_bf16_linears, an eager step of both roles runs its FP8
  // products over the generated rows' ranges alone (whole 16-row ranges,
  // at most 4) rather than over every row before the bf16 products rewrite
  // the prompt's rows. A choice of time, not of bits; false runs them over
  // every row (graph steps always do).
  bool fp8_span_products = true;
  // The routed experts' prefill forms (the FP8 tile form, the bf16 route):
  // the SwiGLU writes h's FP8 form in its own launch (SwigluParams::codes,
  // ActQuantFp8's bits) instead of h in fp32 and a quantization pass after
  // it. The same bits (the kernel's and the decoder's tests on an H100,
  // thirty-sixth session; the EP8 chunk 0.635 -> 0.630 s).
  bool fused_expert_swiglu_fp8 = true;
  // prompt_bf16_experts: the warps widening the MXFP4 codes in each CTA of
  // Mxfp4Bf16GroupedGemm (4 or 8; 0 the kernel's default, 8). The same bits.
  int bf16_route_widener_warps = 0;
  // prompt_bf16_experts: the route's second form
  // (Mxfp4Bf16GroupedGemmParams::register_a): no widener warps; the
  // consumers widen their own wgmma A fragments in registers. The same bits
  // (tests on an H100, thirty-sixth session); the EP8 chunk 0.635 -> 0.596 s,
  // the route's bench 2.20 -> 1.99 ms.
  bool bf16_route_register_a = true;
  // With bf16_route_register_a: X rows a CTA of the route, 128 (0) or 80
  // (experts of up to 80 rows in one tile; Mxfp4Bf16GroupedGemmParams::
  // x_rows). The same bits; slower on the EP8 chunk (0.687 s against
  // 0.596, thirty-sixth session), so 128. Or 256, the default since the
  // forty-first session: wgmma N 256 over two consumer warpgroups with the
  // deep ring and the one scale test a stage, so each stage's widened
  // fragments feed twice the products (the route's loop at the EP8 chunk's
  // 512 rows an expert had its tensor pipe 45 % busy, a third of its issue
  // slots widening); taken where the step's rows give a local expert 64 or
  // more on average and the register form is on, else 128. Its kernel and
  // decoder form tests passed (H100); the EP8 chunk 0.457 / 0.459 ->
  // 0.422 / 0.421 s, the route 214 -> 150 ms of it.
  int bf16_route_x_rows = 256;
  // With the 256-row tile: the route's gate and up products and the SwiGLU
  // in one launch (Mxfp4Bf16GroupedGemmParams::swiglu): each CTA's W tile
  // is 64 rows of the gate over the same 64 of up, and h's FP8 form is made
  // from their fp32 sums staged in the ring, instead of writing gate and up
  // in fp32 for a SwiGLU launch (the EP8 chunk: 453 MB a layer, the SwiGLU
  // 13.7 ms). The same bits. Built in the forty-first session; on since the
  // forty-second, whose GPU (an H200) passed its kernel and decoder tests
  // and timed the EP8 chunk 0.408 / 0.408 -> 0.403 / 0.403 s (the launch's
  // bench at the chunk's shape: 2.990 ms apart, 2.886 fused).
  bool bf16_route_swiglu = true;
  // With the 256-row tile: an expert's last tile holds up to 32 rows past
  // 256 (Mxfp4Bf16GroupedGemmParams::tail_rows), so an expert of 513 - 544
  // rows takes two tiles instead of two and a tile of a few rows that
  // widens its W as a full one does (the EP8 chunk's 512 rows an expert on
  // average left about half its experts such a tile). The same bits by
  // design. Built in the forty-second session; on an H100 in the
  // forty-third it hung (mxfp4_bf16_gemm_sm90_test's first case and the EP8
  // chunk with it ran into their timeouts): its setmaxnreg pair, 80 / 216,
  // asked for 65,536 registers where the CTA got 384 x 168 = 64,512 at
  // launch, so the consumers' increase waited forever. Now 72 / 216 (a
  // static_assert holds both pairs to the launch's registers; ptxas: 20 - 28
  // bytes of spills). Its tests pass on an H100 (forty-fifth session), but
  // the EP8 chunk is slower with it (0.433 / 0.433 s against 0.408 / 0.407):
  // off.
  bool bf16_route_tail_rows = false;
  // With the 256-row tile: the route's grid in clusters of two CTAs over two
  // W tiles of the same X tile, each bringing half of every X stage into both
  // by a TMA multicast (Mxfp4Bf16GroupedGemmParams::x_multicast), so X comes
  // from L2 once for two CTAs: the route's consumers wait on their ring at
  // about 5 TB/s of L2 reads (forty-second session's ncu). The same bits by
  // design. Built in the forty-fourth session; its tests pass on an H100
  // (forty-fifth: the kernel test's forms, the decoder's route form 12), but
  // the EP8 chunk is much slower with it (0.464 / 0.466 s against 0.408 /
  // 0.407): off.
  bool bf16_route_multicast = false;
  // MoeGroupRows' numbering past 4,096 pairs by each warp of its block in
  // parallel (MoeGroupRowsParams::wide): the same offsets and rows, so the
  // same bits; prefill chunks only (a decode step has fewer pairs). Built in
  // the forty-second session; moe_permute_test passed on an H100 in the
  // forty-third; on since the forty-fifth (H100, the EP8 chunk 0.408 /
  // 0.407 -> 0.405 / 0.405 s in two rounds, 0.419 -> 0.417 in the
  // forty-third's one).
  bool wide_group_rows = true;
  // MoeCombine over prefill's whole rows 16 bytes of columns a thread
  // (MoeCombineParams::vec16): the same sums; built in the forty-second
  // session, moe_permute_test passed on an H100 in the forty-third; on since
  // the forty-fifth (the EP8 chunk 0.408 / 0.407 -> 0.405 / 0.405 s, and
  // 0.419 -> 0.417 in the forty-third).
  bool combine_vec16 = true;
  // With bf16_route_register_a: the route's producer completes its copies on
  // the ring's barriers, every free slot in flight
  // (Mxfp4Bf16GroupedGemmParams::deep_ring). The same bits; no faster on
  // the EP8 chunk (0.580 -> 0.578 s, H100, thirty-seventh session), so off.
  // Beside bf16_route_stage_scale_test it takes the one scale test a stage
  // only over three warpgroups without the fitted N (the defaults: that
  // instance built in the thirty-ninth session, after the route's ncu found
  // a third of its loop's samples waiting on the ring); else the per-group
  // tests. Fortieth session (H100): the EP8 chunk 0.481 -> 0.477 s beside
  // the walk, 0.470 -> 0.465 / 0.465 s beside the ballot search. On by
  // default since the forty-first session, after the pair with the ballot
  // search passed its kernel and decoder form tests (the chunk 0.470 ->
  // 0.466 / 0.466 s alone).
  bool bf16_route_deep_ring = true;
  // With bf16_route_register_a (not with the deep ring): the consumers test
  // a stage's four scale bytes once and widen its four 8-code groups
  // branch-free (Mxfp4Bf16GroupedGemmParams::stage_scale_test), and with it
  // the wgmma N fit to each 128-row tile's rows (fit_tile_rows: 80 for 65).
  // The same bits. The one test a stage is on (the EP8 chunk 0.576 ->
  // 0.569 s alone; H100, thirty-eighth session); the fitted N stays off
  // (0.569 alone, and 0.517 -> 0.528 s beside three warpgroups and CUTLASS).
  bool bf16_route_stage_scale_test = true;
  bool bf16_route_fit_tile_rows = false;
  // With bf16_route_stage_scale_test: the route's consumer warpgroups a CTA,
  // 2 (0) or 3 (192 W rows; Mxfp4Bf16GroupedGemmParams::consumer_
  // warpgroups). The same bits; 3 (the EP8 chunk 0.569 -> 0.559 s over the
  // one test a stage, 0.528 -> 0.517 s beside CUTLASS; thirty-eighth).
  int bf16_route_warpgroups = 3;
  // The route's CTAs find their expert and row tile by a warp's ballot
  // (Mxfp4Bf16GroupedGemmParams::ballot_group_search) instead of walking the
  // experts in turn: the same bits. The route's ncu (H100, thirty-ninth
  // session) put a fifth to a third of its warps' samples in that walk.
  // On since the fortieth session (H100: the EP8 chunk 0.481 -> 0.470 s,
  // two rounds each; the kernel's and the decoder's route-form tests pass).
  bool bf16_route_ballot_search = true;
  // With fused_expert_swiglu_fp8 and the bf16 activations: the route's
  // gate and up products write bf16 bits (dense::Fp8GemmOutput::kBf16)
  // and the SwiGLU reads them (SwigluParams::gate_bf16): the SwiGLU rounds
  // g and u to bf16 first, so the same bits, with half the bytes between
  // the products and the SwiGLU (at a 4,096-row chunk of the EP8 slice,
  // 24,576 rows x 2,304 x 2 products: about 450 MB a layer fewer written
  // and read). Built in the fortieth session; its tests passed on an H100 in
  // the forty-first, but the EP8 chunk moved nothing measurable (0.470 ->
  // 0.469 / 0.470 s): off.
  bool bf16_route_gate_up_bf16 = false;
  // Every row's routed experts on the bf16 route, the generated rows' too
  // (decode steps: the register form over 8 - 64 X rows a CTA, picked from
  // a step's rows an expert): one maths for a row's experts whatever the
  // step holds, so batch invariance holds. Unlike the prompt options this
  // changes decode's numerics (the FP8 experts' per-32 block sums give way
  // to bf16 sums over all of K), so it is held to the fidelity bars like any
  // fast-path change. Off: within the bars and batch-invariant on an H100,
  // but slower (small at batch 1 / 64: 1.197 / 2.074 -> 1.473 / 2.238 ms,
  // thirty-seventh session).
  bool bf16_experts_every_row = false;
  // With bf16_experts_every_row: a decode step's experts (a step of
  // generated rows only, at most 16 rows a local expert on average) on the
  // route's decode form (kernels::cuda::Mxfp4Bf16GroupedGemmParams::
  // decode_mma: mma.sync over 8 or 16 X rows a CTA, each warp's W through
  // its own ring, widened in registers) instead of the register form's
  // narrow wgmma tiles; with bf16_route_swiglu its gate / up / SwiGLU
  // launch (h's FP8 form made in the product's epilogue) instead of two
  // products and a SwiGLU. The same bits (the route's sums in the same
  // order); time only. Built in the forty-seventh session with no device time: not
  // yet run on a GPU, so off.
  bool bf16_route_decode_mma = false;
  // The bf16 products' warp-specialized prefill tile (above 256 rows: the
  // prompt's linears, the bf16 weights' products) over 256 X rows a CTA
  // (dense::Bf16GemmParams::ws_m256: wgmma m64n256k16) instead of 128. The
  // same bits; slower on the EP8 chunk (0.666 s against 0.635, H100,
  // thirty-sixth session; 0.587 against 0.580 without its stack, thirty-
  // seventh), so off.
  bool bf16_ws_m256 = false;
  // The same tile only where dense::Bf16GemmWsM256Pays (2,048 rows and more,
  // weights of 32 Mi elements and more: V4.1's wq_b and wo_b), where it
  // measured faster in fp8_gemm_bench's prefill table (thirty-seventh
  // session); elsewhere the 128-row tile. The same bits. Off until the EP8
  // chunk times it (`decode_gpu --bf16_ws_m256_large`).
  bool bf16_ws_m256_large = false;
  // The bf16 products that would take the warp-specialized prefill tile (the
  // prompt's linears, the bf16 weights' products above 256 rows) and that
  // dense::Bf16GemmCutlassTakes (unsplit: the prompt's with
  // prompt_bf16_unsplit, or a weight that splits nothing; no row_role) on
  // CUTLASS's Hopper GEMM (dense::Bf16GemmCutlass: 128 x 256 tiles, two-CTA
  // clusters). The
  // unsplit tile's bits (bf16_gemm_cutlass_test). On: 0.83 - 0.93 of
  // cuBLASLt's bf16 GEMM on the prefill shapes against the tile's 0.48 -
  // 0.66, the EP8 chunk 0.567 -> 0.535 s over the unsplit products (H100,
  // thirty-eighth session).
  bool bf16_cutlass = true;
  // With bf16_cutlass: CUTLASS's CTA tile over W rows chosen for the
  // product's waves (Bf16GemmParams::cutlass_tile_n -1: 128 x 128 where the
  // 128 x 256 tiles leave a wave's SMs idle, e.g. wkv and wq_a at a 4,096-row
  // chunk, most products at shorter chunks). The same bits. Built in the
  // forty-second session after its device calls: off until a GPU runs
  // bf16_gemm_cutlass_test.
  bool bf16_cutlass_fit_tile = false;
  // With prompt_bf16_linears: the prompt rows' FP8 products on cuBLASLt's
  // FP8 GEMM with DeepSeek-style block scales (dense::Fp8LtGemm: X by a
  // scale per row and 128 of K, W per row and 128 of K or per 128 x 128
  // block) at the FP8 tensor rate, twice the bf16 maths'. The operands are
  // the stored forms re-blocked (dense::ReblockFp8Rows / ReblockFp8Tiles:
  // each code moved to its block's largest power-of-two scale, exact unless
  // it falls below e4m3's normal range there), X into rx16, W in slices of
  // 4,096 rows into w16. Other low bits than the bf16 maths (the library's
  // sums, its accumulator promoted every 128 of K); batch-invariant (one
  // algorithm a slice shape, chosen at 4,096 rows, no split-K; a step of
  // both roles computes every row into lt_y and copies the prompt's).
  // Costs the arena lt_y (the step's rows x 4,096 floats). Off: on an
  // H100 (forty-fifth session) its rows were batch-invariant but the
  // trained tiny missed the bars with it (top-1 0.973, median row
  // error 0.032: the FP8 tensor core's sums or the re-blocking), and its
  // speed is not yet measured (cuBLASLt wanted 4 bytes of workspace the
  // first version refused).
  bool prompt_fp8_lt = false;
  // With prompt_fp8_lt: W's scales per 128 x 128 block (true) or per row
  // and 128 of K (false: four scales to a row's 128 span instead of
  // sixteen, so fewer codes move far).
  bool prompt_fp8_lt_blocks = false;
  // With prompt_bf16_linears and bf16 activations: the prompt rows' gate
  // logits as one bf16 GEMM (the unsplit Bf16Gemm, or CUTLASS's where
  // bf16_cutlass takes it) instead of MoeGateLogits, for gates whose weight
  // holds bf16 values (V4.1's and the trained models' checkpoints store it in
  // bf16) over a normed input that the bf16 model rounds to bf16: every
  // product x w is then exact in fp32 and only the order of the sum changes
  // (the tensor core's over K against the CPU's lane-strided fp32 one), so a
  // logit moves by about 1e-7 of its terms' size and expert choices only at
  // near-ties, for prompt rows (generated rows keep MoeGateLogits). A prompt
  // row's bits are its own at every chunk length (unsplit: batch-invariant).
  // MoeGateLogits is at its fp32 issue bound on the EP8 chunk (about 0.55 ms
  // a layer, 22 ms of the 0.52 s chunk; kernels/cuda/moe/README.md item 8);
  // the GEMM has 16 GFLOP a layer there. On since the thirty-ninth session
  // (H100: the EP8 chunk 0.514 -> 0.497 s alone; moe_gate_bench's 4,096
  // tokens 4.67 ms -> 0.09 - 0.17 ms; its tests and the trained tiny's bars
  // pass).
  bool prompt_bf16_gate = true;
  // With prompt_bf16_gate: the FFN's collapse-norm writes h's bf16 bits in
  // its own launch (HcCollapseNormParams::bf16, ToBf16's bits) and the
  // prompt's gate GEMM reads them, instead of a ToBf16 launch of h before it
  // (80 us a layer at the EP8 slice's 4,096-row chunk, 3.2 ms of the chunk).
  // The same bits. On by default since the forty-first session (H100: its
  // test passed, the chunk 0.470 -> 0.468 / 0.468 s alone).
  bool prompt_gate_norm_bf16 = true;
  // kFast prompt products of h's FP8 form (prompt_bf16_linears: wq_a, the
  // KV and compressor products, the shared expert's): the collapse-norm
  // writes the bf16 values the FP8 form stands for beside its codes
  // (HcCollapseNormParams::dq16, Fp8ActBf16's bits) and each such product
  // reads them instead of widening the codes into its own scratch first:
  // one write a layer where there were five or six widenings of the same
  // codes. The same bits; costs the arena h's bf16 copy. Built in the
  // fortieth session; its test passed on an H100 in the forty-first, but
  // the EP8 chunk moved nothing measurable (0.470 / 0.470 s): off.
  bool prompt_norm_dequant_bf16 = false;
  // fast_mhc: the prompt rows' mHC coefficients on tensor cores
  // (kernels::cuda::HcMixTf32: 64 tokens x one split a CTA, each fp32
  // operand as two TF32 parts and three products a pair, so each product is
  // v w to about 2^-21 relative and x is read once a call) instead of
  // HcMixSplitK, which reads hc_fn again every four tokens (0.42 ms a call,
  // 32.5 ms of the EP8 chunk against about 0.11 ms to read x once). Generated
  // rows keep HcMixSplitK; in a step of both roles HcMixTf32 writes the prompt
  // rows over it (row_role). A prompt row's bits are its own at every chunk
  // length (batch-invariant). Needs prompt_bf16_linears (the rows' roles).
  // On since the thirty-ninth session (H100: the EP8 chunk 0.514 -> 0.496 s
  // alone, with the gate 0.481; the trained tiny's bars pass: one step on a
  // shared history top-1 0.998, expert choices differing 17 of 12,288; the
  // coefficients within 1.6e-5 of the CPU's against HcMixSplitK's 3.3e-6).
  bool prompt_tf32_mhc = true;
  // With prompt_tf32_mhc: HcMixTf32's promoted sums (each 16-element step's
  // products summed from zero on the tensor core, then added to the running
  // sums by FADD), so no long chain rides the tensor core's accumulation,
  // which does not round to nearest (without it the coefficients measured
  // 1.6e-5 from the CPU's, 5x HcMixSplitK's distance; the trained tiny's
  // expert choices differing 17 of 12,288 against 6). Other bits for prompt
  // rows; built after the thirty-ninth session's last device call: off until
  // a GPU runs it.
  bool prompt_tf32_mhc_promote = false;
  // With prompt_tf32_mhc: HcMixTf32 with two m16 tiles a warp (tile_rows 2:
  // 128 tokens a CTA, one an SM), each step's hc_fn TF32 pairs made once for
  // both tiles (they were 60 of a step's ~140 instructions a tile) and
  // hc_fn's L2 reads halved. The same bits. HcMixTf32 took 16.5 ms of the
  // H200's EP8 chunk (286 us a launch against ~80 us to read x once). Built
  // in the forty-third session: hc_mix_split_test passes (H100, the one-tile
  // form's bits), but the EP8 chunk took 0.426 s with it against 0.419 /
  // 0.420 (one round; one CTA an SM hides less): off.
  bool prompt_tf32_mhc_wide = false;
  // The same tile persistent (dense::Bf16GemmParams::ws_persistent: a CTA
  // an SM at most, taking tiles in turn, the next tile's loads under the
  // last one's stores). The same bits; faster in every row of
  // fp8_gemm_bench's prefill table (1 - 11 %) and the EP8 chunk 0.635 ->
  // 0.631 s (H100, thirty-sixth session).
  bool bf16_ws_persistent = true;
  // kBf16 activations, no exchange: where one of the experts' prefill forms
  // (the bf16 route for a step of prompt rows only, the FP8 tile form with
  // no route beside it) writes every grouped row's output, w2 writes them as
  // bf16 bits (they are bf16 values) and the combine widens them
  // (MoeCombineParams::y_grouped_bf16): half of those bytes written and read.
  // The same bits (tests on an H100); the EP8 chunk 0.635 -> 0.630 s
  // (thirty-sixth session).
  bool expert_out_bf16 = true;
};

// The fewest rows for which indexer_shared_keys takes the shared-keys form.
inline constexpr int64_t kIndexerSharedKeysMinRows = 512;

// One KV pool of the decoder's arena, for the bytes-per-entry report against
// the model's stored form (spec model-v41 "FP8/FP4 storage").
struct DeviceKvPool {
  std::string name;                    // window, compressed, index_keys, compressor_state
  size_t bytes = 0;                    // as held in the arena
  int64_t entries = 0;                 // rows (window / compressed entries, index keys) or, for the
                                       // compressor state, sequence slots x compressed layers
  int64_t stored_bytes_per_entry = 0;  // the model's stored form of one entry
};

struct DeviceDecoderStats {
  int64_t steps = 0;
  int64_t rows = 0;             // real rows stepped (padding excluded)
  int64_t graph_captures = 0;
  int64_t graph_launches = 0;
  int64_t graph_nodes = 0;      // nodes (kernels, copies) of the last captured graph
  int64_t programmatic_edges = 0;  // of its edges, made programmatic
  int64_t eager_steps = 0;
  int64_t x16_panels = 0;       // prefill_x16_panel: FP8 products enqueued on an f16 panel
  int64_t fused_ropes = 0;      // fused_rope: RoPEs enqueued inside another launch
  int64_t fused_kv_rows = 0;    // fused_kv_rows: KvRowFinish launches enqueued
  int64_t folded_row_ops = 0;   // fold_row_ops: passes folded into another launch
  int64_t direct_wo_a = 0;      // direct_wo_a: grouped wo_a products run in place (since start)
  int64_t fused_swiglu_fp8 = 0;   // fused_swiglu_fp8: SwiGLUs that made w2's FP8 input
  int64_t fused_expert_swiglus = 0;  // fused_expert_swiglu_fp8: the experts' prefill SwiGLUs so run
  int64_t bf16_gate_up_layers = 0;   // bf16_route_gate_up_bf16: route layers with bf16 gate / up
  int64_t route_x256_layers = 0;     // bf16_route_x_rows 256: route layers on the 256-row tile
  int64_t route_swiglu_layers = 0;   // bf16_route_swiglu: route layers with the SwiGLU fused
  int64_t bf16_branches = 0;      // bf16_branches: KV branches with a bf16 product
  int64_t reduce_fp8_out = 0;     // reduce_fp8_out: wo_b inputs made by wo_a's reduce
  int64_t widened_wo_a = 0;       // stored_wo_a: products that widened wo_a to bf16 first (prefill)
  int64_t prompt_bf16_products = 0;  // prompt_bf16_linears: FP8 products run as bf16
  int64_t cutlass_products = 0;      // bf16_cutlass: bf16 products run on Bf16GemmCutlass
  int64_t fp8_lt_products = 0;       // prompt_fp8_lt: FP8 products run on Fp8LtGemm
  int64_t prompt_gate_products = 0;  // prompt_bf16_gate: layers' prompt gate logits as a bf16 GEMM
  int64_t prompt_gate_norm_inputs = 0;  // prompt_gate_norm_bf16: those reading the norm's bf16 form
  int64_t prompt_norm_dequant_inputs = 0;  // prompt_norm_dequant_bf16: prompt products so fed
  int64_t prompt_tf32_mixes = 0;     // prompt_tf32_mhc: mHC coefficients made by HcMixTf32
  int64_t prompt_bf16_expert_layers = 0;  // prompt_bf16_experts: layers' experts on the bf16 route
  // prompt_bf16_linears, eager steps of both roles: FP8 calls over the
  // generated rows' ranges alone (a product may take several)
  int64_t fp8_span_products = 0;
  int64_t prompt_shape_rows = 0;  // rows stepped in the prompt's attention shape
  int64_t kv_mirrors = 0;         // prompt_kv_mirror: layers' mirror passes enqueued
  int64_t shared_key_scores = 0;  // indexer_shared_keys: IndexerScore launches in that form
  int64_t mma_key_scores = 0;     // indexer_mma: of those, the launches on the tensor cores
  // indexer_decode_mma: decode IndexerScore launches on the tensor cores
  int64_t decode_mma_key_scores = 0;
  // bf16_route_decode_mma: route layers of decode steps on the decode form
  int64_t route_decode_mma_layers = 0;
  // ... of which the down product read h's bf16 values from the SwiGLU
  // launch (no widening launch between)
  int64_t route_h_bf16_layers = 0;
  // ... and route layers whose X's bf16 values the gather made (no
  // widening launch before the products)
  int64_t route_x_gathered_layers = 0;
  int64_t expert_out_bf16_layers = 0;  // expert_out_bf16: MoE layers whose outputs went as bf16
  int64_t drafts = 0;           // sequences drafted (DraftBatch)
  double draft_seconds = 0;     // wall time inside DraftBatch
  int64_t draft_launches = 0;   // DraftBatch's device passes (batch_cap / block sequences each)
  double host_seconds = 0;      // wall time inside Step
  double device_seconds = 0;    // device time of the steps (events around the graph)
  size_t arena_bytes = 0;       // the one device allocation
  size_t weight_bytes = 0;
  size_t pool_bytes = 0;
  std::vector<DeviceKvPool> kv_pools;  // the KV part of pool_bytes, by kind
  size_t expert_bytes = 0;      // routed experts, as held (MXFP4 or fp32)
  size_t embed_bytes = 0;
  int mxfp4_layers = 0;         // layers whose experts are held as MXFP4
  int tile_form_layers = 0;     // expert_prefill_tiles: layers whose experts convert exactly
  int64_t tile_resident_bytes = 0;  // expert_tiles_resident: the arena's converted experts
  // Numerics kFast: dense linears held as FP8 codes + scales (tensor cores)
  // and those left on the reference kernel (fp32); MoE layers whose routed
  // experts run on Mxfp4ExpertFfn.
  int fast_dense = 0;
  int bf16_dense = 0;  // of fast_dense: held in bf16 on Bf16Gemm (the head counts)
  int reference_dense = 0;
  int fast_moe_layers = 0;
  bool stored_kv = false;       // the pools hold the stored form (options.stored_kv applied)
  int stored_wo_a = 0;          // of bf16_dense: wo_a groups held as FP8 (stored_wo_a)
  int64_t exchange_bytes = 0;   // expert parallelism: bytes sent to other ranks (fixed
                                // blocks; 0 with ep_lsa_exchange, which is not counted)
  // With DeviceDecoderOptions::profile: device seconds per section name.
  std::map<std::string, double> section_seconds;
};

class DeviceDecoder : public DecodeBackend {
 public:
  // Uploads `model`'s backbone weights and carves the pools. `precision`
  // must be the model's activation precision. INVALID_ARGUMENT on options out
  // of range or a model this decoder does not cover (see above);
  // UNAVAILABLE without a usable device; RESOURCE_EXHAUSTED when the arena
  // does not fit. REQUIRES: `model` outlives the decoder and its weights do
  // not change while it exists.
  static absl::StatusOr<std::unique_ptr<DeviceDecoder>> Create(
      const Model& model, ActivationPrecision precision, const DeviceDecoderOptions& options = {});
  // The largest max_positions (at most options.max_positions, at least 2)
  // whose arena fits `budget_bytes` with the other options as given, found by
  // dry runs of the arena layout (no device needed); the arena size at it in
  // *arena_bytes if not null. INVALID_ARGUMENT as Create; RESOURCE_EXHAUSTED
  // when not even 2 positions fit.
  static absl::StatusOr<int64_t> MaxPositionsFor(const Model& model,
                                                 ActivationPrecision precision,
                                                 const DeviceDecoderOptions& options,
                                                 size_t budget_bytes,
                                                 size_t* arena_bytes = nullptr);
  // The most KV blocks (options.kv_blocks, at most max_sequences full
  // tables) whose arena fits `budget_bytes` with the other options as given,
  // by dry runs of the layout (no device). INVALID_ARGUMENT as Create;
  // RESOURCE_EXHAUSTED when not even one block fits.
  static absl::StatusOr<int64_t> MaxKvBlocksFor(const Model& model, ActivationPrecision precision,
                                                const DeviceDecoderOptions& options,
                                                size_t budget_bytes);
  ~DeviceDecoder() override;
  DeviceDecoder(const DeviceDecoder&) = delete;
  DeviceDecoder& operator=(const DeviceDecoder&) = delete;

  // Copies `state` (a prefilled sequence of the same model, not broken, at
  // least one position, shorter than max_positions) into `slot`, replacing
  // what it held. INVALID_ARGUMENT on a bad slot or state.
  absl::Status Import(int slot, const SequenceState& state) override;
  // Starts an empty sequence in `slot` (its first Step runs position 0: a
  // prompt can be fed one token per step). INVALID_ARGUMENT on a bad slot.
  absl::Status Start(int slot) override;
  // Writes the sequence of `slot` back into `state` (the state Imported into
  // it, advanced or not): window rings, compressed KV, index keys, the
  // compressor's partial group and the Engram history, then advances it to
  // the slot's length. The DSpark rings are not restored (Draft on the result
  // is not valid). INVALID_ARGUMENT on an empty slot or a state of another
  // model or longer than the slot; INTERNAL on a CUDA failure.
  absl::Status Export(int slot, SequenceState& state) override;
  // Forgets the sequence of `slot` (its pools are simply overwritten later)
  // and its block table (own blocks go back to the free list).
  absl::Status Release(int slot) override;
  // Positions of `slot` below `positions` run the prompt's attention shape
  // (options.prompt_range_tiles; without it nothing changes). INVALID_ARGUMENT
  // for a slot out of range or holding no sequence, or positions < 0.
  absl::Status SetPromptEnd(int slot, int64_t positions) override;
  // options.external_block_tables: `slot`'s block table becomes `blocks`
  // (pool blocks, in the order of the sequence's positions; at most
  // table_width() of them), replacing the one it had; the entries already in
  // blocks the slot keeps are kept (a table that grows, or a sequence
  // imported or started after it is set). INVALID_ARGUMENT (nothing changes)
  // without that option, for a bad slot, a block outside the pool or held by
  // another slot, a repeated block, or a table shorter than the slot's
  // sequence needs.
  absl::Status SetBlockTable(int slot, std::span<const int32_t> blocks) override;
  bool takes_block_tables() const override { return options_.external_block_tables; }
  // The paged pools: positions a block covers, blocks a table holds at most
  // (max_positions), blocks in the pool and how many no slot holds.
  int kv_block_tokens() const;
  int64_t table_width() const;
  int64_t kv_blocks() const;
  int64_t free_kv_blocks() const;
  // Blocks a sequence of `positions` positions holds (the coordinator's
  // BlocksForTokens rule over this model's ratios).
  int64_t BlocksFor(int64_t positions) const;
  // Positions held by `slot` (0 when empty).
  int64_t length(int slot) const;
  // Undoes the positions of `slot` from `length` on (the rejected drafts of a
  // verification step): the window rings, compressed entries, index keys and
  // compressor state of the kept positions are as if the undone ones had
  // never been stepped, and the slot's next row takes position `length`.
  // INVALID_ARGUMENT (nothing changes) for a bad or empty slot, a length
  // past the slot's, or more than options.max_rollback positions undone.
  absl::Status Rollback(int slot, int64_t length) override;
  int64_t max_rollback() const override { return options_.max_rollback; }

  // options.drafting: the drafts after next_tokens[i] for the sequence of
  // slots[i], as Model::DraftBatch gives for the same sequence (its block
  // of dspark_block_size rows through the stages over the slot's stage
  // rings, the head, the Markov head and the confidence head; bit for bit
  // with kReference numerics). One result a slot: INVALID_ARGUMENT for a
  // slot that holds no sequence, holds fewer than 2 positions, appears
  // twice, or a token outside the vocabulary; FAILED_PRECONDITION for all
  // without options.drafting. Nothing of a slot changes. Not collective.
  // Without `with_logits` the draft logits stay on the device (empty in the
  // results).
  bool drafts() const override { return options_.drafting; }
  std::vector<absl::StatusOr<DraftResult>> DraftBatch(std::span<const int> slots,
                                                      std::span<const int64_t> next_tokens,
                                                      bool with_logits = true) override;

  // Row i appends tokens[i] to the sequence of slots[i] at its next position
  // and returns the logits [rows, vocab]. With a communicator of a world > 1
  // the call is collective (every rank calls it for every step, an empty
  // batch when it has no rows). INVALID_ARGUMENT (nothing changes) for an
  // empty batch in a world of 1, an oversize batch, a slot that is out of range, empty or
  // repeated, or a token outside the vocabulary; OUT_OF_RANGE when a slot is
  // full (max_positions) or its sequence needs more KV blocks than the pool
  // has free (own tables) or its table holds (external tables), nothing
  // changed; INTERNAL on a CUDA failure, UNAVAILABLE on an NCCL
  // failure or timeout (every slot of the step is then released; after an
  // NCCL failure the communicator is broken for good).
  absl::StatusOr<std::vector<float>> Step(std::span<const int> slots,
                                          std::span<const int64_t> tokens) override;
  // Step's logits in the decoder's pinned host buffer (valid until the next
  // Step or StepView); Step is this plus a copy.
  absl::StatusOr<std::span<const float>> StepView(std::span<const int> slots,
                                                  std::span<const int64_t> tokens) override;
  // StepView with several consecutive positions of a sequence in one step
  // (device-resident prefill chunks, verification of drafts): the rows of
  // one slot are adjacent, at most max_rows_per_slot of them, and take the
  // slot's next positions in row order; each row attends to its slot's
  // earlier rows of the step (KV, compressed entries, Engram n-grams) as
  // if they had been stepped one at a time, and the step is bit-identical
  // to that on kReference (batch-invariant on kFast). `logit_rows`
  // (ascending row indices; nullopt: every row) names the rows whose logits
  // come back, [logit_rows.size(), vocab]; the head runs only for them.
  // INVALID_ARGUMENT as Step, plus rows of a slot that are not adjacent,
  // too many of them, or a bad logit row; OUT_OF_RANGE when the slot's
  // rows pass max_positions.
  absl::StatusOr<std::span<const float>> StepRows(
      std::span<const int> slots, std::span<const int64_t> tokens,
      std::optional<std::span<const int>> logit_rows) override;
  // StepRows whose asked rows come back as their argmax token (ArgmaxRows
  // after the step, on the device: kernels/cuda/dense/sampling.h, the CPU
  // sampler's greedy choice and its NaN / all-masked cases as the
  // DecodeBackend::kGreedy* codes), 4 bytes a row copied back instead of the
  // row's logits; in the decoder's pinned buffer until the next step.
  absl::StatusOr<std::span<const int32_t>> StepRowsGreedy(
      std::span<const int> slots, std::span<const int64_t> tokens,
      std::optional<std::span<const int>> logit_rows) override;
  int max_rows_per_slot() const override { return options_.max_rows_per_slot; }
  int max_batch() const override { return options_.max_batch; }
  int max_sequences() const override { return options_.max_sequences; }
  int64_t max_positions() const override { return options_.max_positions; }
  // A communicator of more than one rank.
  bool collective() const override;
  // Switches to another expert map of the same shape (an EPLB commit, between
  // steps, on every rank): uploads the routed experts of this rank's new
  // slots from the model's weights (which must hold them by now, e.g. after
  // InstallPlacement) over the old ones, and the new replica tables. Sequences
  // and captured graphs carry over. INVALID_ARGUMENT (nothing changes) without
  // a communicator, for synthetic weights, another slot count, or a new
  // expert the model does not hold; FAILED_PRECONDITION when an expert of an
  // MXFP4 layer does not re-encode exactly; INTERNAL on a CUDA failure.
  absl::Status SetPlacement(const ExpertPlacement& placement);
  // The decoder's load counters (device-side, per MoE layer of every step;
  // served = pairs computed by this rank's experts, every rank's pairs in an
  // expert-parallel group). INTERNAL on a CUDA failure.
  absl::Status TakeExpertLoad(std::span<int64_t> routed, std::span<int64_t> served) override;

  const DeviceDecoderStats& stats() const { return stats_; }
  const DeviceDecoderOptions& options() const { return options_; }

 private:
  struct Impl;
  // The testonly synthetic slice generator (device_decoder_synthetic.h)
  // builds its decoder on Impl.
  friend absl::StatusOr<std::unique_ptr<DeviceDecoder>> CreateSyntheticDeviceDecoder(
      const ModelConfig& config, ActivationPrecision precision, const DeviceDecoderOptions& options,
      uint64_t seed, bool bf16_wo_a);
  explicit DeviceDecoder(std::unique_ptr<Impl> impl);
  // Launches the graph of `key` on the decoder's stream, capturing
  // `enqueue` into it on first use (with programmatic edges per options).
  absl::Status LaunchGraph(int64_t key, absl::FunctionRef<absl::Status()> enqueue);
  // StepRows and StepRowsGreedy: runs the step, then copies back the asked
  // rows' logits or (greedy) their argmax ids; returns how many rows.
  absl::StatusOr<int64_t> StepInto(std::span<const int> slots, std::span<const int64_t> tokens,
                                   std::optional<std::span<const int>> logit_rows, bool greedy);
  std::unique_ptr<Impl> impl_;
  DeviceDecoderOptions options_;
  DeviceDecoderStats stats_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_DEVICE_DECODER_H_
