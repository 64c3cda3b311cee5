// kernels/cuda/attention/indexer_score_grouped.cuh — IndexerScore's grouped
// form (IndexerScoreForm::kGrouped): several queries a block, register-tiled
// dots. No host dependencies.
//
// The per-query kernel (indexer_score.cuh) stages one query's heads and a
// tile of 32 keys for every (query, key tile) pair and runs a lane's four
// dots with two shared-memory loads a product. A prefill chunk of the EP8
// slice (4,096 queries, 32 heads x 128) spent 7.4 ms a layer there. Here a
// block stages a group of queries once and walks several key tiles with
// them; each thread owns 4 heads x 4 keys of one query, so a step of four
// channels is 8 float4 loads for 64 products and 64 sums.
//
// The arithmetic is the per-query kernel's, so the CPU's: every dot sums its
// channels in ascending order, each product and sum rounded on its own (the
// 16 dots of a thread are independent chains), each head's term is
// round(relu(round(dot)) * w) and one thread a (query, key) adds the terms
// in head order. Tiling moves data only.
#ifndef WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_GROUPED_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_GROUPED_CUH_

#include <cstdint>

#include "kernels/cuda/attention/indexer_score.cuh"
#include "kernels/cuda/dense/fake_quant.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {

inline constexpr int kIndexerGroupedWarps = 8;
inline constexpr int kIndexerGroupedThreads = kIndexerGroupedWarps * 32;
inline constexpr int kIndexerGroupedMaxHeads = 16 * kIndexerGroupedWarps;  // a warp: 16 heads
inline constexpr int kIndexerGroupedTermStride = 40;  // floats a head's 32 terms take (banks)

// The block's shape and shared-memory layout for `heads` x `dim` (dim % 4 ==
// 0, heads <= kIndexerGroupedMaxHeads): warps_per_query warps of 16 heads
// each serve one query, so a block holds `queries` = 8 / warps_per_query.
// Floats, in order: the queries' heads [queries][heads][dim + 4], their
// weights [queries][heads] (rounded up to 4 floats: the region is read by
// float4), then a region that holds the key tiles
// [queries][32][dim + 4] (one a query: queries of a group may read different
// keys) and, after the dots, the heads' terms [queries][heads][40].
struct IndexerGroupedLayout {
  int warps_per_query = 0;
  int queries = 0;
  int stride = 0;  // dim + 4: consecutive rows start 16 bytes apart mod 128
  int64_t q_floats = 0, w_floats = 0, region_floats = 0;
  __host__ __device__ constexpr IndexerGroupedLayout(int heads, int dim)
      : warps_per_query((heads + 15) / 16),
        queries(kIndexerGroupedWarps / ((heads + 15) / 16)),
        stride(dim + 4),
        q_floats(int64_t{kIndexerGroupedWarps / ((heads + 15) / 16)} * heads * (dim + 4)),
        w_floats((int64_t{kIndexerGroupedWarps / ((heads + 15) / 16)} * heads + 3) & ~int64_t{3}),
        region_floats(Max(int64_t{kIndexerGroupedWarps / ((heads + 15) / 16)} * 32 * (dim + 4),
                          int64_t{kIndexerGroupedWarps / ((heads + 15) / 16)} * heads *
                              kIndexerGroupedTermStride)) {}
  __host__ __device__ constexpr int64_t Floats() const {
    return q_floats + w_floats + region_floats;
  }

 private:
  __host__ __device__ static constexpr int64_t Max(int64_t a, int64_t b) { return a < b ? b : a; }
};

// Grid: x = ranges of `tiles_per_block` key tiles of 32, y = groups of
// layout.queries consecutive queries (blocks loop over groups past
// gridDim.y). Query i of a group reads the key tile staged for the first
// query of its run of queries with the same key source (the shared keys,
// one key_offset or one table slot), so a prefill chunk's queries, all of
// one sequence, stage each tile once. A tile is staged up to the largest
// visible length among the queries that read it: rows past a query's
// visible length are never read for it (its scores there are -inf).
template <bool kRoundBf16>
__global__ void __launch_bounds__(kIndexerGroupedThreads) IndexerScoreGroupedKernel(
    const float* __restrict__ q, const float* __restrict__ k, const uint8_t* __restrict__ k_codes,
    const uint8_t* __restrict__ k_scales, const float* __restrict__ weights,
    const int64_t* __restrict__ visible_len, const int64_t* __restrict__ key_offset,
    const int32_t* __restrict__ block_table, const int32_t* __restrict__ table_slot,
    int table_width, int entries_per_block, float* __restrict__ out, int64_t queries, int heads,
    int dim, int64_t keys, bool q_mxfp4, float weights_factor, int tiles_per_block) {
  GridDependencyPrologue();
  extern __shared__ __align__(16) float grouped_shared[];
  float* shared = grouped_shared;
  const IndexerGroupedLayout layout(heads, dim);
  const int qb = layout.queries, stride = layout.stride;
  float* qs = shared;                    // [qb][heads][stride]
  float* ws = qs + layout.q_floats;      // [qb][heads]
  float* region = ws + layout.w_floats;  // key tiles [qb][32][stride], then terms
  __shared__ int64_t s_visible[kIndexerGroupedWarps];
  __shared__ int64_t s_offset[kIndexerGroupedWarps];
  __shared__ const int32_t* s_table[kIndexerGroupedWarps];
  __shared__ int s_bad[kIndexerGroupedWarps];
  __shared__ int s_buffer[kIndexerGroupedWarps];  // the query whose key tile query i reads
  __shared__ int s_work;                          // a query of the group sees a key of the range
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  const int64_t tiles = (keys + 31) / 32;
  const int64_t tile_begin = static_cast<int64_t>(blockIdx.x) * tiles_per_block;
  const int64_t tile_end =
      tile_begin + tiles_per_block < tiles ? tile_begin + tiles_per_block : tiles;
  const bool per_query = key_offset != nullptr || block_table != nullptr;
  auto round = [](float x) { return kRoundBf16 ? RoundToBf16(x) : x; };
  // This warp's query of the group and its 16 heads; this lane's heads
  // h16 + (lane & 3) + 4 j and keys (lane >> 2) + 8 i of a tile.
  const int my_query = warp / layout.warps_per_query;
  const int h16 = (warp % layout.warps_per_query) * 16;
  const int hg = lane & 3, tg = lane >> 2;

  for (int64_t group = blockIdx.y; group * qb < queries; group += gridDim.y) {
    const int64_t s0 = group * qb;
    const int nq = static_cast<int>(queries - s0 < qb ? queries - s0 : qb);
    __syncthreads();  // the previous group's tiles, heads and terms are used up
    if (tid < nq) {
      const int64_t s = s0 + tid;
      const int64_t v = visible_len[s];
      s_visible[tid] = v < 0 ? 0 : (v > keys ? keys : v);
      s_offset[tid] = key_offset == nullptr ? 0 : key_offset[s];
      const int32_t* table = block_table == nullptr || table_slot[s] < 0
                                 ? nullptr
                                 : block_table + static_cast<int64_t>(table_slot[s]) * table_width;
      s_table[tid] = table;
      s_bad[tid] = s_offset[tid] < 0 || (block_table != nullptr && table == nullptr);
    }
    if (tid == 0) s_work = 0;
    __syncthreads();
    if (tid < nq) {
      // Queries of one key source in a row share the first one's tile.
      int owner = tid;
      if (!per_query) {
        owner = 0;
      } else {
        while (owner > 0 && !s_bad[owner - 1] && s_offset[owner - 1] == s_offset[tid] &&
               s_table[owner - 1] == s_table[tid]) {
          --owner;
        }
      }
      s_buffer[tid] = owner;
      if (!s_bad[tid] && s_visible[tid] > tile_begin * 32) atomicOr(&s_work, 1);
    }
    __syncthreads();
    const bool work = s_work != 0;  // block-uniform
    if (work) {
      // The group's heads (q's MXFP4 form made here with q_mxfp4: a 32-block
      // of q lies in one warp's lanes, heads * dim % 32 == 0) and weights.
      const int64_t qsize = int64_t{heads} * dim;
      for (int64_t e = tid; e < nq * qsize; e += kIndexerGroupedThreads) {
        const int64_t i = e / qsize, r = e % qsize;
        float v = q[(s0 + i) * qsize + r];
        if (q_mxfp4) {
          float amax;
          int nonfinite;
          dense::BlockAmax<32>(v, amax, nonfinite);
          v = dense::FakeQuantValue<dense::DeviceFakeQuantFormat::kMxfp4>(v, amax, nonfinite);
        }
        qs[(i * heads + r / dim) * stride + r % dim] = v;
      }
      for (int e = tid; e < nq * heads; e += kIndexerGroupedThreads) {
        float w = weights[s0 * heads + e];
        if (weights_factor != 0.0f) w = round(__fmul_rn(w, weights_factor));  // decode's Scale
        ws[e] = w;
      }
    }
    for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
      const int64_t tile_start = tile * 32;
      const int rows = static_cast<int>(keys - tile_start < 32 ? keys - tile_start : 32);
      if (work) {
        __syncthreads();  // the heads are staged; the previous tile's terms are summed
        // Stage each owner's tile up to the largest visible length of its readers.
        for (int o = 0; o < nq; ++o) {
          if (s_buffer[o] != o || s_bad[o]) continue;
          int64_t reach = 0;
          for (int i = o; i < nq && s_buffer[i] == o; ++i) {
            reach = s_visible[i] > reach ? s_visible[i] : reach;
          }
          const int64_t in_tile = reach - tile_start;
          const int count = in_tile <= 0 ? 0 : (in_tile < rows ? static_cast<int>(in_tile) : rows);
          float* tile_o = region + int64_t{o} * 32 * stride;
          const int64_t offset = s_offset[o];
          const int32_t* table = s_table[o];
          auto row_of = [&](int r) -> int64_t {
            const int64_t t = tile_start + r;
            if (table == nullptr) return per_query ? offset + t : t;
            const int64_t j = t / entries_per_block;
            const int32_t b = j < table_width ? table[j] : -1;
            return b < 0 ? -1 : static_cast<int64_t>(b) * entries_per_block + t % entries_per_block;
          };
          StageIndexerKeys<kIndexerGroupedThreads>(tile_o, stride, row_of, count, dim, k, k_codes,
                                                   k_scales, tid);
        }
        __syncthreads();
        // The dots: 4 heads x 4 keys a thread, channels ascending.
        float dot[4][4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int i = 0; i < 4; ++i) dot[j][i] = 0.0f;
        }
        const bool active =
            my_query < nq && !s_bad[my_query] && s_visible[my_query] > tile_start;  // warp-uniform
        if (active) {
          const float* qrow[4];
          const float* krow[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int h = h16 + hg + 4 * j;
            qrow[j] = qs + (int64_t{my_query} * heads + (h < heads ? h : heads - 1)) * stride;
          }
          const float* tile_q = region + int64_t{s_buffer[my_query]} * 32 * stride;
#pragma unroll
          for (int i = 0; i < 4; ++i) krow[i] = tile_q + (tg + 8 * i) * stride;
          for (int c = 0; c < dim; c += 4) {
            float4 qv[4], kv[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) qv[j] = *reinterpret_cast<const float4*>(qrow[j] + c);
#pragma unroll
            for (int i = 0; i < 4; ++i) kv[i] = *reinterpret_cast<const float4*>(krow[i] + c);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                dot[j][i] = __fadd_rn(dot[j][i], __fmul_rn(qv[j].x, kv[i].x));
                dot[j][i] = __fadd_rn(dot[j][i], __fmul_rn(qv[j].y, kv[i].y));
                dot[j][i] = __fadd_rn(dot[j][i], __fmul_rn(qv[j].z, kv[i].z));
                dot[j][i] = __fadd_rn(dot[j][i], __fmul_rn(qv[j].w, kv[i].w));
              }
            }
          }
        }
        __syncthreads();  // every dot has read the tiles: the region takes the terms
        if (active) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int h = h16 + hg + 4 * j;
            if (h >= heads) continue;
            const float w = ws[my_query * heads + h];
            float* terms = region + (int64_t{my_query} * heads + h) * kIndexerGroupedTermStride;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float d = round(dot[j][i]);
              const float relu = d < 0.0f ? 0.0f : d;  // std::max(d, 0.0f)
              terms[tg + 8 * i] = round(__fmul_rn(relu, w));
            }
          }
        }
        __syncthreads();
      }
      // Each (query, key) of the tile: lane `lane` of warp i writes query i's key.
      if (warp < nq && lane < rows) {
        const int64_t s = s0 + warp, t = tile_start + lane;
        float v;
        if (t >= s_visible[warp]) {
          v = -INFINITY;
        } else if (s_bad[warp]) {
          v = __int_as_float(0x7fffffff);
        } else {
          const float* terms = region + int64_t{warp} * heads * kIndexerGroupedTermStride + lane;
          float total = 0.0f;
          for (int h = 0; h < heads; ++h) {
            total = __fadd_rn(total, terms[h * kIndexerGroupedTermStride]);
          }
          v = round(total);
        }
        out[s * keys + t] = v;
      }
    }
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_GROUPED_CUH_
