#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/attention/sparse_attention.cuh"
#include "kernels/cuda/attention/sparse_attention.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda {
namespace {

constexpr int kStagedThreads = 256;
constexpr int kStagedMaxChannels = 4;
// Dynamic shared memory of one staged block at most: two blocks an SM.
constexpr int64_t kStagedBytes = 104 * 1024;

// A staged block takes at most this many heads of a query.
constexpr int kStagedMaxHeads = 8;
// kAuto groups heads only while the launch keeps at least this many blocks
// (two staged blocks fit an SM: about two for each of an H100's 132 SMs).
// sparse_attention_bench on an H100 (small's shape, 96 rows of 256), us at
// 1, 2, 4, 8 heads a block: 32 queries 18.8 / 20.3 / 24.6 / 42.1, 64 queries
// 36.5 / 22.0 / 24.7 / 41.8, 128 queries 71.6 / 42.8 / 28.1 / 42.1, 256
// queries 142.0 / 84.4 / 54.7 / 51.2: the most heads that still keep ~256 blocks.
constexpr int64_t kStagedMinBlocks = 256;

// Rows a staged chunk holds with `heads` heads a block (0: the staged kernel
// does not apply).
int StagedChunkRows(const SparseAttentionParams& p, int heads) {
  if (!p.staged || p.head_dim % 4 != 0 || p.head_dim > kStagedThreads * kStagedMaxChannels ||
      reinterpret_cast<uintptr_t>(p.kv) % 16 != 0 || p.heads % heads != 0) {
    return 0;
  }
  const int64_t head = SparseAttentionStagedHead(p.head_dim, p.topk, heads) * 4;
  const int64_t fit = (kStagedBytes - head) / (int64_t{p.head_dim} * 4);
  if (fit < 1) return 0;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(fit, p.topk)));
}

// The heads a staged block takes: SparseAttentionParams::heads_per_block, or
// for 0 the most (a power of two up to kStagedMaxHeads dividing heads) that
// keep kStagedMinBlocks blocks, whose q rows and logits take at most half the
// shared memory, and whose chunk holds the list when one head's does.
int StagedHeads(const SparseAttentionParams& p) {
  if (p.heads_per_block != 0) return p.heads_per_block;
  const int one = StagedChunkRows(p, 1);
  int best = 1;
  for (int h = 2; h <= kStagedMaxHeads; h *= 2) {
    if (p.heads % h != 0 || p.queries * (p.heads / h) < kStagedMinBlocks) break;
    const int chunk = StagedChunkRows(p, h);
    if (chunk == 0 || SparseAttentionStagedHead(p.head_dim, p.topk, h) * 4 > kStagedBytes / 2 ||
        (one >= p.topk && chunk < p.topk)) {
      break;
    }
    best = h;
  }
  return best;
}

// The grouped output's own conditions (SparseAttentionParams::GroupedOut).
bool GroupedOk(const SparseAttentionParams& p) {
  const SparseAttentionParams::GroupedOut& g = p.grouped;
  if (g.group_width == 0) return true;
  const int64_t width = int64_t{p.heads} * p.head_dim;
  return g.group_width > 0 && g.group_width % p.head_dim == 0 && width % g.group_width == 0 &&
         p.head_dim % 2 == 0 && g.rope_dim > 0 && g.rope_dim % 2 == 0 && g.rope_dim <= p.head_dim &&
         g.cos_sin_rows > 0 && (g.out == nullptr || g.out_bf16 == nullptr) &&
         (p.queries == 0 || ((g.out != nullptr || g.out_bf16 != nullptr) &&
                             g.positions != nullptr && g.cos_sin != nullptr));
}

}  // namespace

bool SparseAttentionStages(const SparseAttentionParams& p) {
  return SupportsSparseAttention(p) && StagedChunkRows(p, StagedHeads(p)) > 0;
}

int SparseAttentionStagedHeads(const SparseAttentionParams& p) {
  return SparseAttentionStages(p) ? StagedHeads(p) : 0;
}

bool SupportsSparseAttention(const SparseAttentionParams& p) {
  if (p.queries < 0 || p.heads <= 0 || p.head_dim <= 0 || p.kv_len < 0 || p.topk < 0 ||
      p.topk > kSparseAttentionMaxTopk || p.queries > 0x7fffffff / p.heads) {
    return false;
  }
  if (p.heads_per_block != 0 &&
      (p.heads_per_block < 0 || p.heads_per_block > kStagedMaxHeads ||
       (p.heads_per_block & (p.heads_per_block - 1)) != 0 || p.heads % p.heads_per_block != 0)) {
    return false;
  }
  // The grouped output exists only in the staged kernel.
  if (p.grouped.group_width != 0 && (!GroupedOk(p) || StagedChunkRows(p, StagedHeads(p)) == 0)) {
    return false;
  }
  if (p.queries > 0 &&
      (p.q == nullptr || p.sink == nullptr || (p.out == nullptr && p.grouped.group_width == 0))) {
    return false;
  }
  if (p.queries > 0 && p.topk > 0 && p.index == nullptr) return false;
  return p.kv_len == 0 || p.kv != nullptr;
}

absl::Status SparseAttention(const SparseAttentionParams& p, cudaStream_t stream) {
  if (!SupportsSparseAttention(p)) {
    return absl::InvalidArgumentError(
        "SparseAttention: needs queries >= 0, heads > 0, head_dim > 0, kv_len >= 0, "
        "0 <= topk <= " + std::to_string(kSparseAttentionMaxTopk) +
        ", queries * heads < 2^31 and the pointers the sizes use");
  }
  if (p.queries == 0) return absl::OkStatus();
  constexpr int kThreads = 128;
  const float scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  const int heads = StagedHeads(p);
  if (const int chunk = StagedChunkRows(p, heads); chunk > 0) {
    const StagedGroupedOut grouped{.out = p.grouped.out,
                                   .out_bf16 = p.grouped.out_bf16,
                                   .group_width = p.grouped.group_width,
                                   .positions = p.grouped.positions,
                                   .cos_sin = p.grouped.cos_sin,
                                   .cos_sin_rows = p.grouped.cos_sin_rows,
                                   .rope_dim = p.grouped.rope_dim,
                                   .queries = p.queries};
    const int64_t bytes =
        (SparseAttentionStagedHead(p.head_dim, p.topk, heads) + int64_t{chunk} * p.head_dim) * 4;
    const auto launch = [&](auto* kernel) -> absl::Status {
      if (absl::Status s = AllowSharedBytes(kernel, bytes, "SparseAttention"); !s.ok()) return s;
      kernel<<<static_cast<unsigned>(p.queries * (p.heads / heads)), kStagedThreads, bytes,
               stream>>>(p.q, p.kv, p.sink, p.index, p.out, p.heads, p.head_dim, p.kv_len, p.topk,
                         scale, p.round_bf16, chunk, grouped);
      return LaunchStatus("SparseAttention");
    };
    switch (heads) {
      case 1:
        return launch(SparseAttentionStagedKernel<kStagedThreads, kStagedMaxChannels, 1>);
      case 2:
        return launch(SparseAttentionStagedKernel<kStagedThreads, kStagedMaxChannels, 2>);
      case 4:
        return launch(SparseAttentionStagedKernel<kStagedThreads, kStagedMaxChannels, 4>);
      default:
        return launch(SparseAttentionStagedKernel<kStagedThreads, kStagedMaxChannels, 8>);
    }
  }
  const size_t shared = static_cast<size_t>(p.topk) * (sizeof(float) + sizeof(int32_t));
  SparseAttentionKernel<kThreads>
      <<<static_cast<unsigned>(p.queries * p.heads), kThreads, shared, stream>>>(
          p.q, p.kv, p.sink, p.index, p.out, p.heads, p.head_dim, p.kv_len, p.topk, scale,
          p.round_bf16);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("SparseAttention launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda
