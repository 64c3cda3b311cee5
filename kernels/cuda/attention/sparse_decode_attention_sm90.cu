#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cuda/attention/kv_mirror.cuh"
#include "kernels/cuda/attention/kv_mirror.h"
#include "kernels/cuda/attention/sparse_decode_attention_sm90.cuh"
#include "kernels/cuda/attention/sparse_decode_attention_sm90.h"
#include "kernels/cuda/attention/sparse_decode_attention_wg_sm90.cuh"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda {
namespace {

namespace sd = sparse_decode;
namespace wg = sparse_decode_wg;

static_assert(sd::kHeadDim == kSparseDecodeHeadDim);
static_assert(sd::kFp8Row == kSparseDecodeWindowCodeBytes &&
              sd::kFp8ScaleRow == kSparseDecodeWindowScaleBytes);
static_assert(sd::kFp4Row == kSparseDecodeCompressedCodeBytes &&
              sd::kFp4ScaleRow == kSparseDecodeCompressedScaleBytes);
static_assert(sd::kSharedBytes <= 227 * 1024, "Hopper's shared memory per CTA");
static_assert(wg::kHeadDim == kSparseDecodeHeadDim && wg::kHeads % sd::kHeads == 0);
static_assert(wg::kRawSlotBytes == kSparseDecodeWindowCodeBytes + kSparseDecodeWindowScaleBytes &&
              wg::kFp4ScaleAt == kSparseDecodeCompressedCodeBytes);

// CTAs per query: head groups of 16.
int64_t HeadGroups(int heads) { return (heads + sd::kHeads - 1) / sd::kHeads; }

bool Aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// A pool's pointers, where `queries` rows of `width` entries make them used.
bool PoolOk(int64_t queries, int width, int64_t rows, const int32_t* index, const uint8_t* codes,
            const uint8_t* scales, uintptr_t scale_align) {
  if (width < 0 || width > kSparseDecodeMaxWidth || rows < 0 || rows > INT32_MAX) return false;
  if (queries == 0 || width == 0) return true;
  if (index == nullptr || !Aligned(index, 4)) return false;
  if (rows == 0) return true;
  return codes != nullptr && scales != nullptr && Aligned(codes, 16) &&
         Aligned(scales, scale_align);
}

// kWgmma64's ranges of a list of `entries`: {ranges, tiles a range}.
std::pair<int, int> WgmmaRanges(int64_t entries, int range_tiles) {
  const int64_t tiles = (entries + wg::kTile - 1) / wg::kTile;
  if (tiles <= 1) return {1, 1};
  int64_t per = std::max<int64_t>(range_tiles > 0 ? range_tiles : 2,
                                  (tiles + wg::kMaxRanges - 1) / wg::kMaxRanges);
  per = std::min(per, tiles);
  return {static_cast<int>((tiles + per - 1) / per), static_cast<int>(per)};
}

}  // namespace

bool SupportsSparseDecodeAttention(const SparseDecodeAttentionParams& p) {
  if (p.kernel != SparseDecodeKernel::kAuto && p.kernel != SparseDecodeKernel::kMma16 &&
      p.kernel != SparseDecodeKernel::kWgmma64) {
    return false;
  }
  if (p.wgmma_range_tiles < 0) return false;
  if (p.head_dim != kSparseDecodeHeadDim || p.heads <= 0 || p.heads > (1 << 16) || p.queries < 0 ||
      !std::isfinite(p.scale)) {
    return false;
  }
  if (p.queries > INT32_MAX / HeadGroups(p.heads)) return false;
  if (p.kernel == SparseDecodeKernel::kWgmma64) {  // its blocks: x ceil(heads / 64) x ranges
    const int64_t per_query =
        (p.heads + wg::kHeads - 1) / wg::kHeads *
        WgmmaRanges(int64_t{p.window_width} + p.compressed_width, p.wgmma_range_tiles).first;
    if (p.queries > INT32_MAX / per_query) return false;
  }
  const bool mirror = p.window_bf16 != nullptr || p.compressed_bf16 != nullptr;
  if (mirror) {  // the rows as bf16: kWgmma64 only, in place of the codes and scales
    if (p.kernel != SparseDecodeKernel::kWgmma64 ||
        !PoolOk(p.queries, p.window_width, p.window_rows, p.window_index,
                reinterpret_cast<const uint8_t*>(p.window_bf16),
                reinterpret_cast<const uint8_t*>(p.window_bf16), 16) ||
        !PoolOk(p.queries, p.compressed_width, p.compressed_rows, p.compressed_index,
                reinterpret_cast<const uint8_t*>(p.compressed_bf16),
                reinterpret_cast<const uint8_t*>(p.compressed_bf16), 16)) {
      return false;
    }
  } else if (!PoolOk(p.queries, p.window_width, p.window_rows, p.window_index, p.window_codes,
                     p.window_scales, 4) ||
             !PoolOk(p.queries, p.compressed_width, p.compressed_rows, p.compressed_index,
                     p.compressed_codes, p.compressed_scales, 8)) {
    return false;
  }
  const SparseDecodeAttentionParams::GroupedOut& g = p.grouped;
  if (g.group_width != 0) {  // the grouped output: kWgmma64 only, instead of out
    const int64_t row = int64_t{p.heads} * p.head_dim;
    if (p.kernel != SparseDecodeKernel::kWgmma64 || p.out != nullptr || g.group_width < 0 ||
        g.group_width % p.head_dim != 0 || row % g.group_width != 0 || g.rope_dim <= 0 ||
        g.rope_dim > p.head_dim || g.rope_dim % 2 != 0 || g.cos_sin_rows < 0 ||
        (g.out == nullptr) == (g.out_bf16 == nullptr)) {
      return false;
    }
    if (p.queries == 0) return true;
    if (p.query_role != nullptr && !Aligned(p.query_role, 4)) return false;
    return p.q != nullptr && p.sink != nullptr && g.positions != nullptr && g.cos_sin != nullptr &&
           Aligned(p.q, 8) && Aligned(p.sink, 4) &&
           (g.out != nullptr ? Aligned(g.out, 8) : Aligned(g.out_bf16, 4));
  }
  if (p.queries == 0) return true;
  if (p.query_role != nullptr && !Aligned(p.query_role, 4)) return false;
  return p.q != nullptr && p.sink != nullptr && p.out != nullptr && Aligned(p.q, 8) &&
         Aligned(p.sink, 4) && Aligned(p.out, 8);
}

absl::Status SparseDecodeAttention(const SparseDecodeAttentionParams& p, cudaStream_t stream) {
  if (!SupportsSparseDecodeAttention(p)) {
    return absl::InvalidArgumentError(
        "SparseDecodeAttention: needs a known kernel, wgmma_range_tiles >= 0, head_dim 512, heads "
        "in [1, 65536], queries >= 0 with fewer than 2^31 blocks "
        "(queries * ceil(heads / 16), kWgmma64: queries * ceil(heads / 64) * ranges), widths in "
        "[0, " +
        std::to_string(kSparseDecodeMaxWidth) +
        "], pool rows in [0, 2^31), a finite scale, and non-null aligned pointers where used "
        "(q/out 8 B, codes 16 B, window scales 4 B, compressed scales 8 B); a grouped output "
        "only on kWgmma64, without out, its width a multiple of 512 dividing heads x 512, an "
        "even rope_dim in (0, 512], positions, cos_sin and one of out (8 B) / out_bf16 (4 B)");
  }
  if (p.queries == 0) return absl::OkStatus();
  const bool wgmma = p.kernel == SparseDecodeKernel::kWgmma64;
  const int heads_per_cta = wgmma ? wg::kHeads : sd::kHeads;
  const int groups = (p.heads + heads_per_cta - 1) / heads_per_cta;
  const float scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  const sd::KernelArgs args{
      .q = p.q,
      .sink = p.sink,
      .win_codes = p.window_codes,
      .win_scales = p.window_scales,
      .win_index = p.window_index,
      .comp_codes = p.compressed_codes,
      .comp_scales = p.compressed_scales,
      .comp_index = p.compressed_index,
      .out = p.out,
      .win_rows = p.window_rows,
      .comp_rows = p.compressed_rows,
      .win_width = p.window_width,
      .comp_width = p.compressed_width,
      .heads = p.heads,
      .head_groups = groups,
      .scale_log2 = static_cast<float>(static_cast<double>(scale) * 1.4426950408889634),
      .round_bf16 = p.round_bf16,
      .query_role = p.query_role,
      .role = p.role,
      .g_out = p.grouped.out,
      .g_out_bf16 = p.grouped.out_bf16,
      .g_width = p.grouped.group_width,
      .g_rows = p.queries,
      .g_positions = p.grouped.positions,
      .g_cos_sin = p.grouped.cos_sin,
      .g_cos_sin_rows = p.grouped.cos_sin_rows,
      .g_rope_dim = p.grouped.rope_dim,
      .win_bf16 = p.window_bf16,
      .comp_bf16 = p.compressed_bf16,
  };
  if (wgmma) {
    // The mirror form and the overlap are instances of their own, so the
    // default's code stays as it is.
    const bool mirror = p.window_bf16 != nullptr || p.compressed_bf16 != nullptr;
    void (*const kernel)(sd::KernelArgs) =
        mirror ? (p.wgmma_overlap ? wg::SparseDecodeAttentionWgKernel<true, true>
                                  : wg::SparseDecodeAttentionWgKernel<true, false>)
               : (p.wgmma_overlap ? wg::SparseDecodeAttentionWgKernel<false, true>
                                  : wg::SparseDecodeAttentionWgKernel<false, false>);
    if (absl::Status s = AllowSharedBytes(kernel, wg::kSharedBytes, "SparseDecodeAttention");
        !s.ok()) {
      return s;
    }
    sd::KernelArgs wargs = args;
    std::tie(wargs.ranges, wargs.range_tiles) =
        WgmmaRanges(int64_t{p.window_width} + p.compressed_width, p.wgmma_range_tiles);
    const unsigned blocks = static_cast<unsigned>(p.queries * groups * wargs.ranges);
    if (wargs.ranges == 1) {
      kernel<<<blocks, wg::kThreads, wg::kSharedBytes, stream>>>(wargs);
      return LaunchStatus("SparseDecodeAttention");
    }
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(wg::kThreads);
    config.dynamicSmemBytes = wg::kSharedBytes;
    config.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = static_cast<unsigned>(wargs.ranges);
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    (void)cudaLaunchKernelEx(&config, kernel, wargs);
    return LaunchStatus("SparseDecodeAttention");
  }
  if (absl::Status s = AllowSharedBytes(sd::SparseDecodeAttentionKernel, sd::kSharedBytes,
                                        "SparseDecodeAttention");
      !s.ok()) {
    return s;
  }
  sd::SparseDecodeAttentionKernel<<<static_cast<unsigned>(p.queries * groups), sd::kThreads,
                                    sd::kSharedBytes, stream>>>(args);
  return LaunchStatus("SparseDecodeAttention");
}

bool SupportsKvMirror(const KvMirrorParams& p) {
  if (p.sequences < 0 || p.sequences > 65535 || p.max_rows < 0 || p.ring_rows < 0 ||
      p.window_rows < 0 || p.window_rows > INT32_MAX || p.compressed_rows < 0 ||
      p.compressed_rows > INT32_MAX || p.ratio < 0) {
    return false;
  }
  if (p.sequences == 0 || p.max_rows == 0) return true;
  if (p.max_rows > int64_t{INT32_MAX} * kv_mirror::kWarps) return false;
  if (p.slot == nullptr || p.last_position == nullptr || p.stage_first == nullptr ||
      p.stage_rows == nullptr) {
    return false;
  }
  if (p.window_rows > 0 &&
      (p.window_codes == nullptr || p.window_scales == nullptr || p.window_bf16 == nullptr ||
       !Aligned(p.window_codes, 16) || !Aligned(p.window_bf16, 16))) {
    return false;
  }
  if (p.ratio > 0 && p.compressed_rows > 0 &&
      (p.compressed_codes == nullptr || p.compressed_scales == nullptr ||
       p.compressed_bf16 == nullptr || p.block_table == nullptr || p.table_width <= 0 ||
       p.entries_per_block <= 0 || !Aligned(p.compressed_codes, 8) ||
       !Aligned(p.compressed_bf16, 16))) {
    return false;
  }
  return true;
}

absl::Status DequantizeKvMirror(const KvMirrorParams& p, cudaStream_t stream) {
  if (!SupportsKvMirror(p)) {
    return absl::InvalidArgumentError(
        "DequantizeKvMirror: needs sequences in [0, 65535], max_rows, ring_rows and ratio >= 0, "
        "pool rows in [0, 2^31), the sequence arrays, and for each pool it reads its codes, "
        "scales and mirror (window codes and mirrors 16-byte, compressed codes 8-byte aligned; "
        "the compressed part a block table, table_width > 0 and entries_per_block > 0)");
  }
  if (p.sequences == 0 || p.max_rows == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>((p.max_rows + kv_mirror::kWarps - 1) / kv_mirror::kWarps),
                  static_cast<unsigned>(p.sequences));
  kv_mirror::KvMirrorKernel<<<grid, kv_mirror::kWarps * 32, 0, stream>>>(p);
  return LaunchStatus("DequantizeKvMirror");
}

}  // namespace weir::kernels::cuda
