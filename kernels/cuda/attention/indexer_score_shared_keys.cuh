// kernels/cuda/attention/indexer_score_shared_keys.cuh — IndexerScore's
// shared-keys form (IndexerScoreForm::kSharedKeys): a block of 4 queries over
// tiles of 64 keys staged once for all of them, every head's dot and the head
// sum in registers. No host dependencies.
//
// Made for a prefill chunk, whose queries all read one sequence's keys. The
// grouped form (indexer_score_grouped.cuh) runs 4 heads x 4 keys a thread
// and sums the head terms through shared memory behind three barriers a
// tile, in one 136 KB block an SM. Here (IndexerSharedKeysLayout) a lane runs
// 8 heads x 8 keys of its warp's query: a step of 4 channels is 16 float4
// loads for 256 products and 256 sums; a quad's four lanes hold the 32 heads
// of a pass, and the head sum runs through the quad in head order (each lane
// adds its 8 terms to the total it gets from the lane before it, a shuffle).
// A block takes ~100 KB at V4.1's 32 x 128, so two blocks share an SM and
// one's staging overlaps the other's dots; two barriers a tile.
//
// The arithmetic is the CPU's: every dot sums its channels in ascending
// order from 0, each product and sum rounded on its own (no fused
// multiply-add), each head's term is round(relu(round(dot)) * w) with relu as
// d < 0 ? 0 : d, and the terms are added in head order from 0. Tiling moves
// data only.
//
// kMma (IndexerScoreForm::kSharedKeysMma; MXFP4 keys and q made MXFP4 in the
// staging, q_mxfp4): the heads' dots on the tensor cores instead, mma.sync
// m16n8k16 over bf16 operands (every MXFP4 value, e2m1 times a power of two,
// is a bf16 value, so the operands and their products are exact) into fp32.
// A dot is then the exact sum of its products wherever that sum and the
// CPU's partial sums fit fp32's 24 bits (products of e2m1 pairs under one
// 32-channel scale pair are multiples of a quarter of it below 36 times it,
// so a block's sum takes at most 13 bits and the dot's four blocks more only
// as far as their scales differ): there the CPU's rounded chain is exact
// too and the bits are the same; elsewhere the tensor core's sum differs by
// its rounding. The terms and the head sum are the CPU's as above. A warp
// holds its query's 32-head pass x 64 keys as the mma's accumulators (64 a
// lane: heads g and g + 8 of each 16, keys 2 t and 2 t + 1 of each 8, with
// g = lane / 4 and t = lane % 4) and sums the terms in head order along the
// lanes of equal t (each adds its heads' terms to the total the lane before
// it handed on).
#ifndef WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_SHARED_KEYS_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_SHARED_KEYS_CUH_

#include <cstdint>

#include "kernels/cuda/attention/indexer_score.cuh"
#include "kernels/cuda/attention/indexer_score_shared_keys_layout.h"
#include "kernels/cuda/dense/fake_quant.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {

// A group's key sources: per query of the group (kQ at most, nq real) its
// visible length (clamped to keys), key_offset and table row, whether that
// source is bad (a negative offset or, with block tables, no row), the first
// query of its run of equal sources (owner) and, for a run's owner, the
// largest visible length among the run's queries (reach; 0 for a bad run and
// for queries that own none). Every shared-keys kernel stages a tile once a
// run.
template <int kQ>
struct SharedKeysRuns {
  int64_t visible[kQ], offset[kQ], reach[kQ];
  const int32_t* table[kQ];
  int bad[kQ], owner[kQ];
};

// Fills `runs` for the queries s0 .. s0 + nq - 1 (one thread; constant
// indices only, so the working arrays stay in registers).
template <int kQ>
__device__ __forceinline__ void FindSharedKeysRuns(SharedKeysRuns<kQ>& runs, int64_t s0, int nq,
                                                   const int64_t* __restrict__ visible_len,
                                                   const int64_t* __restrict__ key_offset,
                                                   const int32_t* __restrict__ block_table,
                                                   const int32_t* __restrict__ table_slot,
                                                   int table_width, int64_t keys) {
  int64_t visible[kQ], offset[kQ];
  const int32_t* table[kQ];
  int bad[kQ], owner[kQ];
#pragma unroll
  for (int i = 0; i < kQ; ++i) {
    visible[i] = 0;
    offset[i] = 0;
    table[i] = nullptr;
    bad[i] = 1;
    if (i < nq) {
      const int64_t s = s0 + i;
      const int64_t v = visible_len[s];
      visible[i] = v < 0 ? 0 : (v > keys ? keys : v);
      offset[i] = key_offset == nullptr ? 0 : key_offset[s];
      table[i] = block_table == nullptr || table_slot[s] < 0
                     ? nullptr
                     : block_table + static_cast<int64_t>(table_slot[s]) * table_width;
      bad[i] = offset[i] < 0 || (block_table != nullptr && table[i] == nullptr);
    }
  }
  // owner[i]: the first query of i's run of equal sources.
#pragma unroll
  for (int i = 0; i < kQ; ++i) {
    owner[i] = i;
    bool linked = i < nq;
#pragma unroll
    for (int p = i - 1; p >= 0; --p) {
      linked = linked && !bad[p] && offset[p] == offset[i] && table[p] == table[i];
      if (linked) owner[i] = p;
    }
  }
#pragma unroll
  for (int o = 0; o < kQ; ++o) {
    int64_t reach = 0;
#pragma unroll
    for (int i = o; i < kQ; ++i) {
      if (i < nq && owner[i] == o && visible[i] > reach) reach = visible[i];
    }
    runs.visible[o] = visible[o];
    runs.offset[o] = offset[o];
    runs.table[o] = table[o];
    runs.bad[o] = bad[o];
    runs.owner[o] = owner[o];
    runs.reach[o] = bad[o] || owner[o] != o ? 0 : reach;
  }
}

// Stages a group's heads and weights (IndexerScoreSharedKeysKernel's and the
// bf16 form's): a warp an item of 32 channels of a head row (q's MXFP4 form
// made here with q_mxfp4: dim % 32 == 0, so a 32-block of q is one warp's 32
// lanes), kQBatch items' loads in flight, each value handed to store(i, h, c,
// v) (query i of the group, head h, channel c; rows of heads past `heads`
// hand 0); then the weights into ws [kQ][head_rows] (decode's Scale with
// weights_factor; 0 past `heads`). Every thread of the block calls it.
template <int kQ, int kThreads, int kQBatch, typename Round, typename Store>
__device__ __forceinline__ void StageSharedKeysHeads(const float* __restrict__ q,
                                                     const float* __restrict__ weights, float* ws,
                                                     int64_t s0, int nq, int heads, int head_rows,
                                                     int dim, bool q_mxfp4, float weights_factor,
                                                     Round round, int tid, Store store) {
  static_assert(kThreads == 32 * kQ, "a warp a query of the group");
  const int lane = tid % 32, warp = tid / 32;
  const int chunks = (dim + 31) / 32, items = nq * head_rows * chunks;
  for (int base = warp; base < items; base += kQ * kQBatch) {
    float v[kQBatch];
#pragma unroll
    for (int b = 0; b < kQBatch; ++b) {
      const int item = base + b * kQ, row = item / chunks, c = (item - row * chunks) * 32 + lane;
      const int i = row / head_rows, h = row - i * head_rows;
      v[b] = item < items && h < heads && c < dim ? q[((s0 + i) * heads + h) * dim + c] : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kQBatch; ++b) {
      const int item = base + b * kQ, row = item / chunks, c = (item - row * chunks) * 32 + lane;
      const int i = row / head_rows, h = row - i * head_rows;
      if (item >= items) break;    // warp-uniform
      if (q_mxfp4 && h < heads) {  // warp-uniform; every lane in (dim % 32 == 0)
        float amax;
        int nonfinite;
        dense::BlockAmax<32>(v[b], amax, nonfinite);
        v[b] = dense::FakeQuantValue<dense::DeviceFakeQuantFormat::kMxfp4>(v[b], amax, nonfinite);
      }
      if (c < dim) store(i, h, c, v[b]);
    }
  }
  for (int e = tid; e < nq * head_rows; e += kThreads) {
    const int i = e / head_rows, h = e - i * head_rows;
    float w = 0.0f;
    if (h < heads) {
      w = weights[(s0 + i) * heads + h];
      if (weights_factor != 0.0f) w = round(__fmul_rn(w, weights_factor));  // decode's Scale
    }
    ws[e] = w;
  }
}

// Stages run `o`'s keys of the tile at tile_start (`count` of them): key t
// is entry t % e of the run's block t / e through its table (the rows
// written to s_rows first), else row offset + t; stage(row_of, count) does
// the staging with row_of(r) the pool row of the tile's key r. Block-uniform
// (a barrier inside with a table).
template <typename Stage>
__device__ __forceinline__ void StageRunKeys(const int32_t* table, int64_t offset,
                                             int64_t tile_start, int count, int table_width,
                                             int entries_per_block, int64_t* s_rows, int tid,
                                             Stage stage) {
  if (table != nullptr) {  // key t: entry t % e of the slot's block t / e
    if (tid < count) {
      const int64_t t = tile_start + tid, j = t / entries_per_block;
      const int32_t b = j < table_width ? table[j] : -1;
      s_rows[tid] =
          b < 0 ? -1 : static_cast<int64_t>(b) * entries_per_block + t % entries_per_block;
    }
    __syncthreads();  // block-uniform: table is shared
    auto row_of = [s_rows](int r) -> int64_t { return s_rows[r]; };
    stage(row_of, count);
  } else {
    const int64_t first = offset + tile_start;  // offset 0 without key_offset
    auto row_of = [first](int r) -> int64_t { return first + r; };
    stage(row_of, count);
  }
}

// One round of the shared-memory head sum (SmemHeadSum's, and the decode
// form's whole pass): term(mt, q, e) is the term of head 16 mt + (lane >> 2)
// + 8 (e >> 1) of the pass and key 8 q + 2 (lane & 3) + (e & 1) of the
// round's 16; lane (g, t) stores heads 16 mt + 8 h + g, keys 8 q + 2 t + (0,
// 1) into the warp's scratch, and lane k < 16 then adds key k's terms of the
// pass's real heads in head order to `total`. The whole warp calls it.
template <typename Term>
__device__ __forceinline__ void SmemHeadSumRound(Term term, float* sum_scratch, float& total,
                                                 int lane, int heads, int pass) {
  using L = IndexerSharedKeysLayout;
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        float2* at = reinterpret_cast<float2*>(sum_scratch + (16 * mt + 8 * h + g) * L::kSumStride +
                                               8 * q + 2 * t4);
        *at = make_float2(term(mt, q, 2 * h), term(mt, q, 2 * h + 1));
      }
    }
  }
  __syncwarp();
  if (lane < L::kSumKeys) {
    float acc = total;
    const int valid = heads - pass < L::kHeadPass ? heads - pass : L::kHeadPass;
    for (int hh = 0; hh < valid; ++hh) {
      acc = __fadd_rn(acc, sum_scratch[hh * L::kSumStride + lane]);
    }
    total = acc;
  }
  __syncwarp();
}

// The shared-memory head sum of a pass (kSharedKeysMmaSum, kSharedKeysMmaBf16)
// over the terms d (the mma accumulators: d[mt][nt][e] head 16 mt + (lane >>
// 2) + 8 (e >> 1) of the pass, key 8 nt + 2 (lane & 3) + (e & 1)). Round r:
// keys 16 r .. 16 r + 15 (n tiles 2 r, 2 r + 1) through SmemHeadSumRound
// into sum_total[r]. The whole warp calls it.
__device__ __forceinline__ void SmemHeadSum(
    const float (&d)[2][8][4], float* sum_scratch,
    float (&sum_total)[IndexerSharedKeysLayout::kKeys / IndexerSharedKeysLayout::kSumKeys],
    int lane, int heads, int pass) {
  using L = IndexerSharedKeysLayout;
#pragma unroll
  for (int r = 0; r < L::kKeys / L::kSumKeys; ++r) {
    SmemHeadSumRound([&](int mt, int q, int e) { return d[mt][2 * r + q][e]; }, sum_scratch,
                     sum_total[r], lane, heads, pass);
  }
}

// Writes a tile's scores of one query from SmemHeadSum's totals: lane k < 16
// writes keys 16 r + k below `rows`: -inf past the query's visible keys, NaN
// for a bad source, else round(total).
template <typename Round>
__device__ __forceinline__ void WriteSmemSumScores(
    float* row, int lane, int rows, int64_t tile_start, int64_t visible, bool bad,
    const float (&sum_total)[IndexerSharedKeysLayout::kKeys / IndexerSharedKeysLayout::kSumKeys],
    Round round) {
  using L = IndexerSharedKeysLayout;
  if (lane >= L::kSumKeys) return;
#pragma unroll
  for (int r = 0; r < L::kKeys / L::kSumKeys; ++r) {
    const int key = L::kSumKeys * r + lane;
    if (key >= rows) continue;
    const int64_t tk = tile_start + key;
    row[tk] = tk >= visible ? -INFINITY : bad ? __int_as_float(0x7fffffff) : round(sum_total[r]);
  }
}

// Grid: grid.Blocks() blocks of IndexerSharedKeysLayout::kThreads; block b
// takes the queries of group grid.Group(b) and the key tiles of range
// grid.Range(b). kDim > 0 fixes dim at compile time (shared-memory offsets
// become immediates); kDim == 0 reads `dim`. Dynamic shared memory:
// IndexerSharedKeysLayout(heads, dim).Floats() floats.
//
// Queries of a group with the same key source in a row (all of them without
// key_offset and block_table; else equal key_offset, or equal table slot
// row) form a run: each tile is staged once a run, up to the largest visible
// length among the run's queries, and scored by the run's warps. A prefill
// chunk's group is one run; a group of four sequences stages each tile four
// times (correct, but the form is not meant for decode batches).
//
// kSmemSum (with kMma; IndexerScoreForm::kSharedKeysMmaSum): the head sum
// through the warp's own shared scratch instead of the lanes' shuffle chain
// (about 1,000 shuffles and predicated adds a pass and lane against the
// pass's 128 mma): a round of 16 keys at a time, each lane stores its terms
// of the round's keys, then lane k < 16 adds key k's 32 terms in head order
// (the same additions in the same order, so the same bits).
template <int kDim, bool kRoundBf16, bool kMma = false, bool kSmemSum = false>
__global__ void __launch_bounds__(IndexerSharedKeysLayout::kThreads, 2)
    IndexerScoreSharedKeysKernel(
        const float* __restrict__ q, const float* __restrict__ k,
        const uint8_t* __restrict__ k_codes, const uint8_t* __restrict__ k_scales,
        const float* __restrict__ weights, const int64_t* __restrict__ visible_len,
        const int64_t* __restrict__ key_offset, const int32_t* __restrict__ block_table,
        const int32_t* __restrict__ table_slot, int table_width, int entries_per_block,
        float* __restrict__ out, int64_t queries, int heads, int dim_arg, int64_t keys,
        bool q_mxfp4, float weights_factor, IndexerSharedKeysGrid grid) {
  GridDependencyPrologue();
  using L = IndexerSharedKeysLayout;
  constexpr int kQ = L::kQueries, kT = L::kKeys;
  // Loads in flight a thread: a key tile's MXFP4 words (64 x 16 / 128
  // threads, all at once) and 32-channel items of the heads.
  constexpr int kStageBatch = 8, kQBatch = 8;
  extern __shared__ __align__(16) float shared_keys_smem[];
  const int dim = kDim > 0 ? kDim : dim_arg;
  const L layout(heads, dim);
  const int stride = layout.stride, head_rows = layout.head_rows;
  float* qs = shared_keys_smem;      // [kQ][head_rows][stride], head h at row HeadRow(h)
  float* ws = qs + layout.q_floats;  // [kQ][head_rows]
  float* ks = ws + layout.w_floats;  // [kT][stride]
  // kSmemSum: warp w's scratch after the key tile.
  static_assert(!kSmemSum || kMma, "the shared-memory head sum is the mma form's");
  float* const sum_scratch =
      ks + layout.k_floats + static_cast<int>(threadIdx.x / 32) * L::kSumWarpFloats;
  __shared__ SharedKeysRuns<kQ> runs;
  int64_t(&s_visible)[kQ] = runs.visible;
  int64_t(&s_offset)[kQ] = runs.offset;
  int64_t(&s_reach)[kQ] = runs.reach;
  const int32_t*(&s_table)[kQ] = runs.table;
  int(&s_bad)[kQ] = runs.bad;
  int(&s_owner)[kQ] = runs.owner;
  __shared__ int64_t s_rows[kT];  // paged keys: the pool row of each key of the tile
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  const int64_t s0 = grid.Group(blockIdx.x) * kQ;
  const int nq = static_cast<int>(queries - s0 < kQ ? queries - s0 : kQ);
  const int64_t tile_begin = grid.Range(blockIdx.x) * grid.tiles_per_block;
  const int64_t tile_end = tile_begin + grid.tiles_per_block < grid.tiles
                               ? tile_begin + grid.tiles_per_block
                               : grid.tiles;
  auto round = [](float x) { return kRoundBf16 ? RoundToBf16(x) : x; };

  // The group's key sources and runs (thread 0; four queries at most).
  if (tid == 0) {
    FindSharedKeysRuns<kQ>(runs, s0, nq, visible_len, key_offset, block_table, table_slot,
                           table_width, keys);
  }
  __syncthreads();
  bool work = false;  // block-uniform: some run sees a key of the range
#pragma unroll
  for (int o = 0; o < kQ; ++o) work = work || s_reach[o] > tile_begin * kT;

  if (work) {
    // The group's heads at rows HeadRow(h), and the weights. No barrier
    // here: the first run of the first tile begins with one.
    StageSharedKeysHeads<kQ, L::kThreads, kQBatch>(
        q, weights, ws, s0, nq, heads, head_rows, dim, q_mxfp4, weights_factor, round, tid,
        [&](int i, int h, int c, float v) {
          qs[(i * head_rows + L::HeadRow(h)) * stride + c] = v;
        });
  }

  const int hg = L::HeadGroup(lane), kg = L::KeyGroup(lane);
  const int64_t my_visible = warp < nq ? s_visible[warp] : 0;
  const bool my_bad = warp >= nq || s_bad[warp] != 0;
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t tile_start = tile * kT;
    const int rows = static_cast<int>(keys - tile_start < kT ? keys - tile_start : kT);
    float total[L::kLaneKeys];  // this lane's keys' scores once its warp's run has run
#pragma unroll
    for (int i = 0; i < L::kLaneKeys; ++i) total[i] = 0.0f;
    // kMma: keys 8 nt + 2 t + j of the tile, on every lane of its t.
    float mma_total[8][2];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) mma_total[nt][0] = mma_total[nt][1] = 0.0f;
    // kSmemSum: lane k < 16's running sum of key 16 r + k, round r.
    float sum_total[kT / L::kSumKeys];
#pragma unroll
    for (int r = 0; r < kT / L::kSumKeys; ++r) sum_total[r] = 0.0f;
    for (int o = 0; o < nq; ++o) {  // block-uniform: the runs and their reaches are shared
      const int64_t in_tile = s_reach[o] - tile_start;
      if (in_tile <= 0) continue;  // not a run's owner, a bad run, or no key of it here
      const int count = in_tile < rows ? static_cast<int>(in_tile) : rows;
      __syncthreads();  // the heads are staged; the last run's keys and rows are read
      StageRunKeys(s_table[o], s_offset[o], tile_start, count, table_width, entries_per_block,
                   s_rows, tid, [&](auto row_of, int n) {
                     StageIndexerKeys<L::kThreads, decltype(row_of), kStageBatch>(
                         ks, stride, row_of, n, dim, k, k_codes, k_scales, tid);
                   });
      __syncthreads();
      // Warp-uniform: this warp's query is of run o and sees a key of the
      // tile. Rows past `count` hold stale keys; their scores are not kept.
      if (my_bad || s_owner[warp] != o || my_visible <= tile_start) continue;
      if constexpr (kMma) {
        // Lane (g, t): A rows (heads) g and g + 8 of each 16, B columns
        // (keys) g of each 8, channels 2 t, 2 t + 1 and + 8 of each 16.
        const int g = lane >> 2, t4 = lane & 3;
        const float* q_warp = qs + warp * head_rows * stride;
        for (int pass = 0; pass < head_rows; pass += L::kHeadPass) {
          float d[2][8][4];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
              for (int e = 0; e < 4; ++e) d[mt][nt][e] = 0.0f;
            }
          }
          const float* q_rows[2][2];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            q_rows[mt][0] = q_warp + L::HeadRow(pass + 16 * mt + g) * stride + 2 * t4;
            q_rows[mt][1] = q_warp + L::HeadRow(pass + 16 * mt + g + 8) * stride + 2 * t4;
          }
          const float* k_row = ks + g * stride + 2 * t4;
          // Two staged floats as an operand register (exact: bf16 values).
          auto Pack = [](const float* at) {
            const float2 v = *reinterpret_cast<const float2*>(at);
            return PackBf16x2(v.x, v.y);
          };
#pragma unroll 1
          for (int c = 0; c < dim; c += 16) {
            uint32_t a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              a[mt][0] = Pack(q_rows[mt][0] + c);
              a[mt][1] = Pack(q_rows[mt][1] + c);
              a[mt][2] = Pack(q_rows[mt][0] + c + 8);
              a[mt][3] = Pack(q_rows[mt][1] + c + 8);
            }
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
              const float* kp = k_row + nt * 8 * stride + c;
              const uint32_t b0 = Pack(kp);
              const uint32_t b1 = Pack(kp + 8);
              MmaBf16M16N8K16(d[0][nt], a[0], b0, b1);
              MmaBf16M16N8K16(d[1][nt], a[1], b0, b1);
            }
          }
          // The terms, in place: d[mt][nt][e] is head pass + MmaHead(lane,
          // mt, e), key MmaKey(lane, nt, e).
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float w = ws[warp * head_rows + pass + L::MmaHead(lane, mt, 2 * h)];
#pragma unroll
              for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                  const float dd = round(d[mt][nt][2 * h + j]);
                  const float relu = dd < 0.0f ? 0.0f : dd;  // std::max(d, 0.0f)
                  d[mt][nt][2 * h + j] = round(__fmul_rn(relu, w));
                }
              }
            }
          }
          if constexpr (kSmemSum) {
            SmemHeadSum(d, sum_scratch, sum_total, lane, heads, pass);
          } else {
            // The head sum in head order: for each 8 heads (g = 0 .. 7 of a
            // half of an m tile), lane g adds its term to the total lane g - 1
            // handed on; lane 7's total goes back to the lanes of its t. Heads
            // past `heads` hold +0 terms (zero q rows and weights), which leave
            // a total (never -0) as it is; they are skipped all the same.
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int first = pass + 16 * mt + 8 * h;
#pragma unroll
                for (int gg = 0; gg < 8; ++gg) {
                  if (g == gg && first + gg < heads) {
#pragma unroll
                    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                      for (int j = 0; j < 2; ++j) {
                        mma_total[nt][j] = __fadd_rn(mma_total[nt][j], d[mt][nt][2 * h + j]);
                      }
                    }
                  }
                  if (gg < 7) {
#pragma unroll
                    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                      for (int j = 0; j < 2; ++j) {
                        mma_total[nt][j] = __shfl_up_sync(0xffffffffu, mma_total[nt][j], 4);
                      }
                    }
                  }
                }
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                  for (int j = 0; j < 2; ++j) {
                    mma_total[nt][j] = __shfl_sync(0xffffffffu, mma_total[nt][j], 28 | t4);
                  }
                }
              }
            }
          }
        }
      } else {
        const float* q_lane = qs + (warp * head_rows + hg) * stride;  // + HeadRow(h) - hg rows
        const float* k_lane = ks + kg * stride;
        for (int pass = 0; pass < head_rows; pass += L::kHeadPass) {
          float dot[L::kLaneHeads][L::kLaneKeys];
#pragma unroll
          for (int j = 0; j < L::kLaneHeads; ++j) {
#pragma unroll
            for (int i = 0; i < L::kLaneKeys; ++i) dot[j][i] = 0.0f;
          }
          const float* q_pass = q_lane + pass * stride;
#pragma unroll 1
          for (int c = 0; c < dim; c += 4) {
            float4 kv[L::kLaneKeys];
#pragma unroll
            for (int i = 0; i < L::kLaneKeys; ++i) {
              kv[i] = *reinterpret_cast<const float4*>(k_lane + i * L::kLaneKeys * stride + c);
            }
#pragma unroll
            for (int j = 0; j < L::kLaneHeads; ++j) {
              // Head pass + 8 hg + j lives at row pass + 4 j + hg.
              const float4 qv = *reinterpret_cast<const float4*>(q_pass + 4 * j * stride + c);
              // Channel by channel, the 8 keys' products before their sums, so
              // a product is 8 instructions ahead of its sum and a chain's
              // sums 16 apart (two warps a scheduler hide the latencies).
              float p[L::kLaneKeys];
#pragma unroll
              for (int i = 0; i < L::kLaneKeys; ++i) p[i] = __fmul_rn(qv.x, kv[i].x);
#pragma unroll
              for (int i = 0; i < L::kLaneKeys; ++i) dot[j][i] = __fadd_rn(dot[j][i], p[i]);
#pragma unroll
              for (int i = 0; i < L::kLaneKeys; ++i) p[i] = __fmul_rn(qv.y, kv[i].y);
#pragma unroll
              for (int i = 0; i < L::kLaneKeys; ++i) dot[j][i] = __fadd_rn(dot[j][i], p[i]);
#pragma unroll
              for (int i = 0; i < L::kLaneKeys; ++i) p[i] = __fmul_rn(qv.z, kv[i].z);
#pragma unroll
              for (int i = 0; i < L::kLaneKeys; ++i) dot[j][i] = __fadd_rn(dot[j][i], p[i]);
#pragma unroll
              for (int i = 0; i < L::kLaneKeys; ++i) p[i] = __fmul_rn(qv.w, kv[i].w);
#pragma unroll
              for (int i = 0; i < L::kLaneKeys; ++i) dot[j][i] = __fadd_rn(dot[j][i], p[i]);
            }
          }
          // The terms, in place.
#pragma unroll
          for (int j = 0; j < L::kLaneHeads; ++j) {
            const float w = ws[warp * head_rows + pass + hg * L::kLaneHeads + j];
#pragma unroll
            for (int i = 0; i < L::kLaneKeys; ++i) {
              const float d = round(dot[j][i]);
              const float relu = d < 0.0f ? 0.0f : d;  // std::max(d, 0.0f)
              dot[j][i] = round(__fmul_rn(relu, w));
            }
          }
          // The head sum in head order: lane g of the quad adds heads
          // pass + 8 g .. + 7 to the total lane g - 1 handed it.
#pragma unroll
          for (int g = 0; g < 4; ++g) {
            const int valid = hg == g ? heads - pass - g * L::kLaneHeads : 0;  // heads to add
#pragma unroll
            for (int j = 0; j < L::kLaneHeads; ++j) {
              if (j < valid) {
#pragma unroll
                for (int i = 0; i < L::kLaneKeys; ++i) total[i] = __fadd_rn(total[i], dot[j][i]);
              }
            }
            if (g < 3) {
#pragma unroll
              for (int i = 0; i < L::kLaneKeys; ++i) {
                total[i] = __shfl_up_sync(0xffffffffu, total[i], 1);
              }
            }
          }
          // The pass's totals (lane 3 of the quad) to the whole quad.
#pragma unroll
          for (int i = 0; i < L::kLaneKeys; ++i) {
            total[i] = __shfl_sync(0xffffffffu, total[i], lane | 3);
          }
        }
      }
    }
    // Each (query, key) of the tile: lane g of the quad writes keys
    // kg + 8 i for i % 4 == g.
    if (kSmemSum && warp < nq) {  // lane k < 16 writes keys 16 r + k
      WriteSmemSumScores(out + (s0 + warp) * keys, lane, rows, tile_start, my_visible, my_bad,
                         sum_total, round);
    } else if (kMma && warp < nq) {  // lane (g, t) writes keys 8 g + 2 t + j
      float* row = out + (s0 + warp) * keys;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        if (nt != L::MmaWriteTile(lane)) continue;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int r = L::MmaKey(lane, nt, j);
          if (r >= rows) continue;
          const int64_t tk = tile_start + r;
          row[tk] = tk >= my_visible ? -INFINITY
                    : my_bad         ? __int_as_float(0x7fffffff)
                                     : round(mma_total[nt][j]);
        }
      }
    } else if (warp < nq) {
      float* row = out + (s0 + warp) * keys;
#pragma unroll
      for (int i = 0; i < L::kLaneKeys; ++i) {
        const int r = L::LaneKey(lane, i);
        if (i % 4 != hg || r >= rows) continue;
        const int64_t t = tile_start + r;
        row[t] = t >= my_visible ? -INFINITY
                 : my_bad        ? __int_as_float(0x7fffffff)
                                 : round(total[i]);
      }
    }
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_SHARED_KEYS_CUH_
