#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/attention/indexer_score.cuh"
#include "kernels/cuda/attention/indexer_score.h"
#include "kernels/cuda/attention/indexer_score_decode_bf16.cuh"
#include "kernels/cuda/attention/indexer_score_grouped.cuh"
#include "kernels/cuda/attention/indexer_score_shared_keys.cuh"
#include "kernels/cuda/attention/indexer_score_shared_keys_bf16.cuh"
#include "kernels/cuda/attention/indexer_score_shared_keys_layout.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda {
namespace {

constexpr size_t kDefaultSharedBytes = 48 * 1024;
constexpr size_t kHopperMaxSharedBytes = 227 * 1024;

size_t GroupedSharedBytes(int heads, int dim) {
  return static_cast<size_t>(IndexerGroupedLayout(heads, dim).Floats()) * sizeof(float);
}

bool GroupedApplies(const IndexerScoreParams& p) {
  return p.dim % 4 == 0 && p.heads <= kIndexerGroupedMaxHeads &&
         GroupedSharedBytes(p.heads, p.dim) <= kHopperMaxSharedBytes;
}

template <bool kRoundBf16>
absl::Status LaunchGrouped(const IndexerScoreParams& p, cudaStream_t stream) {
  const size_t shared = GroupedSharedBytes(p.heads, p.dim);
  if (shared > kDefaultSharedBytes) {
    if (absl::Status s = AllowSharedBytes(IndexerScoreGroupedKernel<kRoundBf16>,
                                          static_cast<int64_t>(shared), "IndexerScore grouped");
        !s.ok()) {
      return s;
    }
  }
  const IndexerGroupedLayout layout(p.heads, p.dim);
  const int64_t tiles = (p.keys + 31) / 32;
  const int64_t groups = (p.queries + layout.queries - 1) / layout.queries;
  // Enough blocks to fill the device several times over; past that a block
  // walks more tiles with the heads it staged (at most 8, so the causal
  // prefill's late queries do not leave one block with most of the work).
  const int64_t per_block = std::clamp<int64_t>(tiles * groups / 2048, 1, 8);
  const dim3 grid(static_cast<unsigned>((tiles + per_block - 1) / per_block),
                  static_cast<unsigned>(std::min<int64_t>(groups, 65535)));
  IndexerScoreGroupedKernel<kRoundBf16><<<grid, kIndexerGroupedThreads, shared, stream>>>(
      p.q, p.k, p.k_codes, p.k_scales, p.weights, p.visible_len, p.key_offset, p.block_table,
      p.table_slot, p.table_width, p.entries_per_block, p.out, p.queries, p.heads, p.dim, p.keys,
      p.q_mxfp4, p.weights_factor, static_cast<int>(per_block));
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("IndexerScore launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

// The shared-keys kernel's dynamic shared memory plus its static arrays.
size_t SharedKeysDynamicBytes(int heads, int dim, bool smem_sum = false) {
  return static_cast<size_t>(IndexerSharedKeysLayout(heads, dim).Floats() +
                             (smem_sum ? IndexerSharedKeysLayout::SumFloats() : 0)) *
         sizeof(float);
}
constexpr size_t kSharedKeysStaticBytes = 1024;  // the run table and 64 rows: 672 bytes

bool SharedKeysApplies(const IndexerScoreParams& p) {
  return p.dim % 4 == 0 &&
         SharedKeysDynamicBytes(p.heads, p.dim) + kSharedKeysStaticBytes <= kHopperMaxSharedBytes;
}

// About four waves of two blocks on each of an H100's 132 SMs: a prefill
// chunk's groups then take their whole key range a block (its heads staged
// once), and small launches split their keys into more blocks.
constexpr int64_t kSharedKeysTargetBlocks = 1024;

template <int kDim, bool kRoundBf16, bool kMma, bool kSmemSum>
absl::Status LaunchSharedKeysAs(const IndexerScoreParams& p, cudaStream_t stream) {
  const auto kernel = IndexerScoreSharedKeysKernel<kDim, kRoundBf16, kMma, kSmemSum>;
  const size_t shared = SharedKeysDynamicBytes(p.heads, p.dim, kSmemSum);
  if (shared > kDefaultSharedBytes) {
    if (absl::Status s =
            AllowSharedBytes(kernel, static_cast<int64_t>(shared), "IndexerScore shared keys");
        !s.ok()) {
      return s;
    }
  }
  const IndexerSharedKeysGrid grid =
      IndexerSharedKeysGrid::Make(p.queries, p.keys, kSharedKeysTargetBlocks);
  if (grid.Blocks() > 0x7fffffff) {
    return absl::InvalidArgumentError("IndexerScore shared keys: too many blocks");
  }
  kernel<<<static_cast<unsigned>(grid.Blocks()), IndexerSharedKeysLayout::kThreads, shared,
           stream>>>(p.q, p.k, p.k_codes, p.k_scales, p.weights, p.visible_len, p.key_offset,
                     p.block_table, p.table_slot, p.table_width, p.entries_per_block, p.out,
                     p.queries, p.heads, p.dim, p.keys, p.q_mxfp4, p.weights_factor, grid);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("IndexerScore launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

// V4.1's dim (128) with the shared-memory offsets as immediates; any other
// dim % 4 == 0 through the runtime-dim instance.
template <bool kRoundBf16, bool kMma = false, bool kSmemSum = false>
absl::Status LaunchSharedKeys(const IndexerScoreParams& p, cudaStream_t stream) {
  return p.dim == 128 ? LaunchSharedKeysAs<128, kRoundBf16, kMma, kSmemSum>(p, stream)
                      : LaunchSharedKeysAs<0, kRoundBf16, kMma, kSmemSum>(p, stream);
}

// The tensor-core form takes q's MXFP4 form (made in its staging) and MXFP4
// keys: both bf16 values.
bool SharedKeysMmaApplies(const IndexerScoreParams& p) {
  return SharedKeysApplies(p) && p.q_mxfp4 && p.k_codes != nullptr && p.dim % 32 == 0;
}
// The mma form with the head sum through shared memory: its scratch fits too.
bool SharedKeysMmaSumApplies(const IndexerScoreParams& p) {
  return SharedKeysMmaApplies(p) &&
         SharedKeysDynamicBytes(p.heads, p.dim, true) + kSharedKeysStaticBytes <=
             kHopperMaxSharedBytes;
}

// The bf16-staged form (kSharedKeysMmaBf16): the mma form's inputs and its
// own shared memory within the SM's (its static run table and rows beside
// it), whether or not the fp32 staging's would fit.
bool SharedKeysMmaBf16Applies(const IndexerScoreParams& p) {
  return p.q_mxfp4 && p.k_codes != nullptr && p.dim % 32 == 0 &&
         static_cast<size_t>(IndexerSharedKeysBf16Layout(p.heads, p.dim).bytes) +
                 kSharedKeysStaticBytes <=
             kHopperMaxSharedBytes;
}

template <int kDim, bool kRoundBf16>
absl::Status LaunchSharedKeysBf16As(const IndexerScoreParams& p, cudaStream_t stream) {
  const auto kernel = IndexerScoreSharedKeysBf16Kernel<kDim, kRoundBf16>;
  const size_t shared = static_cast<size_t>(IndexerSharedKeysBf16Layout(p.heads, p.dim).bytes);
  if (shared > kDefaultSharedBytes) {
    if (absl::Status s =
            AllowSharedBytes(kernel, static_cast<int64_t>(shared), "IndexerScore shared keys bf16");
        !s.ok()) {
      return s;
    }
  }
  const IndexerSharedKeysGrid grid =
      IndexerSharedKeysGrid::Make(p.queries, p.keys, kSharedKeysTargetBlocks);
  if (grid.Blocks() > 0x7fffffff) {
    return absl::InvalidArgumentError("IndexerScore shared keys bf16: too many blocks");
  }
  kernel<<<static_cast<unsigned>(grid.Blocks()), IndexerSharedKeysLayout::kThreads, shared,
           stream>>>(p.q, p.k_codes, p.k_scales, p.weights, p.visible_len, p.key_offset,
                     p.block_table, p.table_slot, p.table_width, p.entries_per_block, p.out,
                     p.queries, p.heads, p.dim, p.keys, p.weights_factor, grid);
  return LaunchStatus("IndexerScore shared keys bf16");
}

template <bool kRoundBf16>
absl::Status LaunchSharedKeysBf16(const IndexerScoreParams& p, cudaStream_t stream) {
  return p.dim == 128 ? LaunchSharedKeysBf16As<128, kRoundBf16>(p, stream)
                      : LaunchSharedKeysBf16As<0, kRoundBf16>(p, stream);
}

// The decode form (kDecodeMmaBf16): the mma forms' inputs and its block's
// shared memory within the SM's.
bool DecodeMmaBf16Applies(const IndexerScoreParams& p) {
  return p.q_mxfp4 && p.k_codes != nullptr && p.dim % 32 == 0 &&
         static_cast<size_t>(IndexerDecodeBf16Layout(p.heads, p.dim).bytes) +
                 kSharedKeysStaticBytes <=
             kHopperMaxSharedBytes;
}

// About a wave of the decode form's blocks (~35 KB each at V4.1's 32 x 128,
// several an SM): a batch of 64 rows at 1,026 keys takes two tiles a block,
// a single row a tile a block.
constexpr int64_t kDecodeTargetBlocks = 1024;

template <int kDim, bool kRoundBf16>
absl::Status LaunchDecodeBf16As(const IndexerScoreParams& p, cudaStream_t stream) {
  const auto kernel = IndexerScoreDecodeBf16Kernel<kDim, kRoundBf16>;
  const size_t shared = static_cast<size_t>(IndexerDecodeBf16Layout(p.heads, p.dim).bytes);
  if (shared > kDefaultSharedBytes) {
    if (absl::Status s =
            AllowSharedBytes(kernel, static_cast<int64_t>(shared), "IndexerScore decode bf16");
        !s.ok()) {
      return s;
    }
  }
  const IndexerDecodeGrid grid = IndexerDecodeGrid::Make(p.queries, p.keys, kDecodeTargetBlocks);
  if (grid.Blocks() > 0x7fffffff) {
    return absl::InvalidArgumentError("IndexerScore decode bf16: too many blocks");
  }
  kernel<<<static_cast<unsigned>(grid.Blocks()), IndexerSharedKeysLayout::kThreads, shared,
           stream>>>(p.q, p.k_codes, p.k_scales, p.weights, p.visible_len, p.key_offset,
                     p.block_table, p.table_slot, p.table_width, p.entries_per_block, p.out,
                     p.heads, p.dim, p.keys, p.weights_factor, grid);
  return LaunchStatus("IndexerScore decode bf16");
}

template <bool kRoundBf16>
absl::Status LaunchDecodeBf16(const IndexerScoreParams& p, cudaStream_t stream) {
  return p.dim == 128 ? LaunchDecodeBf16As<128, kRoundBf16>(p, stream)
                      : LaunchDecodeBf16As<0, kRoundBf16>(p, stream);
}

template <bool kRoundBf16>
absl::Status Launch(const IndexerScoreParams& p, cudaStream_t stream) {
  switch (ResolveIndexerScoreForm(p)) {
    case IndexerScoreForm::kDecodeMmaBf16:
      return LaunchDecodeBf16<kRoundBf16>(p, stream);
    case IndexerScoreForm::kGrouped:
      return LaunchGrouped<kRoundBf16>(p, stream);
    case IndexerScoreForm::kSharedKeys:
      return LaunchSharedKeys<kRoundBf16>(p, stream);
    case IndexerScoreForm::kSharedKeysMma:
      return LaunchSharedKeys<kRoundBf16, true>(p, stream);
    case IndexerScoreForm::kSharedKeysMmaSum:
      return LaunchSharedKeys<kRoundBf16, true, true>(p, stream);
    case IndexerScoreForm::kSharedKeysMmaBf16:
      return LaunchSharedKeysBf16<kRoundBf16>(p, stream);
    default:
      break;
  }
  const size_t shared = IndexerScoreSharedBytes(p.heads, p.dim);
  if (shared > kDefaultSharedBytes) {
    if (absl::Status s = AllowSharedBytes(IndexerScoreKernel<kRoundBf16>,
                                          static_cast<int64_t>(shared), "IndexerScore");
        !s.ok()) {
      return s;
    }
  }
  const dim3 grid(static_cast<unsigned>((p.keys + kIndexerKeyTile - 1) / kIndexerKeyTile),
                  static_cast<unsigned>(std::min<int64_t>(p.queries, 65535)));
  IndexerScoreKernel<kRoundBf16><<<grid, kIndexerThreads, shared, stream>>>(
      p.q, p.k, p.k_codes, p.k_scales, p.weights, p.visible_len, p.key_offset, p.block_table,
      p.table_slot, p.table_width, p.entries_per_block, p.out, p.queries, p.heads, p.dim, p.keys,
      p.q_mxfp4, p.weights_factor);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("IndexerScore launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace

IndexerScoreForm ResolveIndexerScoreForm(const IndexerScoreParams& p) {
  if (p.form == IndexerScoreForm::kGrouped && GroupedApplies(p)) return IndexerScoreForm::kGrouped;
  if (p.form == IndexerScoreForm::kDecodeMmaBf16) {
    return DecodeMmaBf16Applies(p) ? IndexerScoreForm::kDecodeMmaBf16 : IndexerScoreForm::kPerQuery;
  }
  if (p.form == IndexerScoreForm::kSharedKeysMmaBf16 && SharedKeysMmaBf16Applies(p)) {
    return IndexerScoreForm::kSharedKeysMmaBf16;
  }
  const bool mma_sum = p.form == IndexerScoreForm::kSharedKeysMmaSum ||
                       p.form == IndexerScoreForm::kSharedKeysMmaBf16;
  if (mma_sum && SharedKeysMmaSumApplies(p)) return IndexerScoreForm::kSharedKeysMmaSum;
  if ((p.form == IndexerScoreForm::kSharedKeysMma || mma_sum) && SharedKeysMmaApplies(p)) {
    return IndexerScoreForm::kSharedKeysMma;
  }
  if ((p.form == IndexerScoreForm::kSharedKeys || p.form == IndexerScoreForm::kSharedKeysMma ||
       mma_sum) &&
      SharedKeysApplies(p)) {
    return IndexerScoreForm::kSharedKeys;
  }
  return IndexerScoreForm::kPerQuery;
}

size_t IndexerScoreSharedBytes(int heads, int dim) {
  const size_t floats = static_cast<size_t>(kIndexerKeyTile) * (static_cast<size_t>(dim) + 1) +
                        static_cast<size_t>(heads) * dim +
                        static_cast<size_t>(heads) * kIndexerKeyTile;
  return ((floats + 1) & ~size_t{1}) * sizeof(float) + kIndexerKeyTile * sizeof(int64_t);
}

bool SupportsIndexerScore(const IndexerScoreParams& p) {
  if (p.queries < 0 || p.heads <= 0 || p.dim <= 0 || p.keys < 0) return false;
  if (p.heads > (1 << 20) || p.dim > (1 << 20) ||
      IndexerScoreSharedBytes(p.heads, p.dim) > kHopperMaxSharedBytes) {
    return false;
  }
  if (p.queries == 0 || p.keys == 0) return true;
  // Keys: fp32 rows, or (k null) MXFP4 codes + scales with dim % 32 == 0.
  const bool fp32_keys = p.k != nullptr && p.k_codes == nullptr && p.k_scales == nullptr;
  const bool mxfp4_keys = p.k == nullptr && p.k_codes != nullptr && p.k_scales != nullptr &&
                          p.dim % 32 == 0 && reinterpret_cast<uintptr_t>(p.k_codes) % 4 == 0;
  // Paged keys: a table row per query's slot, never with key_offset.
  const bool paging_ok =
      p.block_table == nullptr || (p.key_offset == nullptr && p.table_slot != nullptr &&
                                   p.table_width > 0 && p.entries_per_block > 0);
  return p.q != nullptr && (fp32_keys || mxfp4_keys) && p.weights != nullptr &&
         p.visible_len != nullptr && p.out != nullptr && paging_ok &&
         (!p.q_mxfp4 || p.dim % 32 == 0);
}

absl::Status IndexerScore(const IndexerScoreParams& p, cudaStream_t stream) {
  if (!SupportsIndexerScore(p)) {
    return absl::InvalidArgumentError(
        "IndexerScore: needs queries >= 0, heads > 0, dim > 0, keys >= 0, shared memory " +
        std::to_string(IndexerScoreSharedBytes(std::max(p.heads, 0), std::max(p.dim, 0))) +
        " <= " + std::to_string(kHopperMaxSharedBytes) +
        " bytes and the pointers (keys as fp32 k, or MXFP4 k_codes (4-byte aligned) + "
        "k_scales with dim % 32 == 0; a block_table with table_slot, table_width > 0, "
        "entries_per_block > 0 and no key_offset)");
  }
  if (p.queries == 0 || p.keys == 0) return absl::OkStatus();
  return p.round_bf16 ? Launch<true>(p, stream) : Launch<false>(p, stream);
}

}  // namespace weir::kernels::cuda
