// kernels/cuda/attention/topk.cuh — device code of TopkPositions and
// CandidateBlocks: a block-wide radix select with the CPU's tie-breaking.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_ATTENTION_TOPK_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_TOPK_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda {

inline constexpr int kTopkThreads = 512;
// TopkPositionsRegKernel's items a thread: 512 threads of 16, rows of up to
// 8,192 entries (topk.h's kTopkRegMaxWidth).
inline constexpr int kTopkRegItems = 16;

__device__ __forceinline__ int64_t ClampTo(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// Order-preserving key of a float that is not NaN: a > b iff key(a) > key(b),
// with -0 and +0 equal (the CPU compares values, not bits).
__device__ __forceinline__ uint32_t OrderedKey(float x) {
  const uint32_t bits = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
}

template <int kThreads>
struct SelectShared {
  uint32_t hist[256];
  uint32_t scan[kThreads / 32];
  uint32_t prefix;
  uint32_t want;
  uint32_t equal;
  uint32_t count;
};

// Returns the number of i in [0, n) with key_of(i, key) true. Every thread
// of the block calls it and gets the result.
template <int kThreads, typename KeyOf>
__device__ uint32_t BlockCount(int64_t n, KeyOf key_of, SelectShared<kThreads>& sm) {
  if (threadIdx.x == 0) sm.count = 0;
  __syncthreads();
  uint32_t local = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    uint32_t key;
    local += key_of(i, key) ? 1u : 0u;
  }
  if (local > 0) atomicAdd(&sm.count, local);
  __syncthreads();
  const uint32_t count = sm.count;
  __syncthreads();
  return count;
}

// Returns the exclusive prefix sum of `value` over the block's threads in
// thread order, and the block total in `total`. Every thread calls it.
template <int kThreads>
__device__ uint32_t BlockExclusiveScan(uint32_t value, uint32_t& total, SelectShared<kThreads>& sm) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kWarps <= 32, "one warp scans the warp totals");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t x = value;
  for (int offset = 1; offset < 32; offset *= 2) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, x, offset);
    if (lane >= offset) x += y;
  }
  if (lane == 31) sm.scan[warp] = x;
  __syncthreads();
  if (warp == 0) {
    uint32_t w = lane < kWarps ? sm.scan[lane] : 0u;
    for (int offset = 1; offset < 32; offset *= 2) {
      const uint32_t y = __shfl_up_sync(0xffffffffu, w, offset);
      if (lane >= offset) w += y;
    }
    if (lane < kWarps) sm.scan[lane] = w;
  }
  __syncthreads();
  const uint32_t before = (warp > 0 ? sm.scan[warp - 1] : 0u) + x - value;
  total = sm.scan[kWarps - 1];
  __syncthreads();
  return before;
}

// One radix pass's bin: thread t < 256 gives `count`, the items of the pass
// in bin 255 - t. The bin holding the want-th largest key is, walking the
// bins from the top, the first b whose count from the top (above(b) +
// hist[b]) reaches want, else bin 0; a block scan gives each bin its count
// from the top, so the walk is one scan instead of up to 256 dependent
// steps on one thread. Sets sm.prefix (prefix with the bin's digit at
// `shift`), sm.want (want less the items above the bin) and sm.equal (the
// bin's items); every thread calls it and may read them on return.
template <int kThreads>
__device__ __forceinline__ void ChooseRadixBin(uint32_t count, uint32_t prefix, int shift,
                                               uint32_t want, SelectShared<kThreads>& sm) {
  const int t = static_cast<int>(threadIdx.x);
  uint32_t total = 0;
  const uint32_t above = BlockExclusiveScan<kThreads>(count, total, sm);
  if (t < 256) {
    const bool reached = above + count >= want;
    const bool before = above >= want;  // bin 256 - t, the one walked first, reached already
    if ((reached && (t == 0 || !before)) || (t == 255 && !reached)) {
      sm.prefix = prefix | (static_cast<uint32_t>(255 - t) << shift);
      sm.want = want - above;
      sm.equal = count;
    }
  }
  __syncthreads();
}

// Radix select, 8 bits per pass from the top: returns the want-th largest key
// (1-based) among the i in [0, n) with key_of(i, key) true. On return `want`
// is how many items holding exactly that key rank among the best (1 ..
// equal) and `equal` how many items hold it. REQUIRES: 1 <= want <= that
// number of items. Every thread calls it and gets the results.
template <int kThreads, typename KeyOf>
__device__ uint32_t RadixSelectLargest(int64_t n, KeyOf key_of, uint32_t& want, uint32_t& equal,
                                       SelectShared<kThreads>& sm) {
  static_assert(kThreads >= 256, "a thread a bin");
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) sm.hist[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      uint32_t key;
      if (key_of(i, key) && (key & mask) == prefix) {
        atomicAdd(&sm.hist[(key >> shift) & 0xFFu], 1u);
      }
    }
    __syncthreads();
    const int t = static_cast<int>(threadIdx.x);
    ChooseRadixBin<kThreads>(t < 256 ? sm.hist[255 - t] : 0u, prefix, shift, want, sm);
    prefix = sm.prefix;
    want = sm.want;
    mask |= 0xFFu << shift;
  }
  equal = sm.equal;
  __syncthreads();
  return prefix;
}

// The selection of a row: item i with key `key` is kept iff Selected(i, key).
struct Selection {
  bool none = false;       // k == 0
  bool all = false;        // no more candidates than k
  uint32_t key = 0;        // the k-th best key
  int64_t last_equal = 0;  // items holding `key` are kept up to this index

  __device__ bool Selected(int64_t i, uint32_t item_key) const {
    return !none && (all || item_key > key || (item_key == key && i <= last_equal));
  }
};

// Selects the k best of the items i in [0, n) that key_of accepts, ordered by
// key descending, then index ascending. Every thread calls it.
template <int kThreads, typename KeyOf>
__device__ Selection SelectBest(int64_t n, int64_t k, KeyOf key_of, SelectShared<kThreads>& sm) {
  Selection s;
  if (k <= 0) {
    s.none = true;
    return s;
  }
  if (BlockCount<kThreads>(n, key_of, sm) <= k) {
    s.all = true;
    return s;
  }
  uint32_t want = static_cast<uint32_t>(k), equal = 0;
  const uint32_t threshold = RadixSelectLargest<kThreads>(n, key_of, want, equal, sm);
  s.key = threshold;
  s.last_equal = n;
  if (want < equal) {
    // Ties at the threshold: keep the `want` lowest indices among them.
    auto index_key = [&](int64_t i, uint32_t& key) {
      uint32_t item_key;
      if (!key_of(i, item_key) || item_key != threshold) return false;
      key = ~static_cast<uint32_t>(i);
      return true;
    };
    uint32_t equal_indices = 0;
    s.last_equal = ~RadixSelectLargest<kThreads>(n, index_key, want, equal_indices, sm);
  }
  return s;
}

// One row's selection read from memory (TopkPositionsKernel's, and
// TopkPositionsRegKernel's for rows past its registers): the select rereads
// the row each pass, the kept positions go out a block-width at a time.
// Every thread of the block calls it.
template <int kThreads>
__device__ __forceinline__ void TopkRowFromMemory(const float* __restrict__ sc,
                                                  int32_t* __restrict__ o, int64_t visible,
                                                  int64_t width, int k, int32_t offset,
                                                  bool masked_past_visible,
                                                  SelectShared<kThreads>& sm) {
  auto key_of = [sc](int64_t i, uint32_t& key) {
    const float v = sc[i];
    if (!(v > -INFINITY)) return false;  // -inf and NaN
    key = OrderedKey(v);
    return true;
  };
  const Selection selection =
      SelectBest<kThreads>(masked_past_visible ? visible : width, k, key_of, sm);
  uint32_t written = 0;
  for (int64_t base = 0; base < visible; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    uint32_t key = 0;
    const bool keep = i < visible && key_of(i, key) && selection.Selected(i, key);
    uint32_t total = 0;
    const uint32_t before = BlockExclusiveScan<kThreads>(keep ? 1u : 0u, total, sm);
    if (keep) o[written + before] = static_cast<int32_t>(i) + offset;
    written += total;
  }
  for (int64_t j = written + threadIdx.x; j < k; j += kThreads) o[j] = -1;
}

// One block per row.
template <int kThreads>
__global__ void TopkPositionsKernel(const float* __restrict__ scores,
                                    const int64_t* __restrict__ visible_len,
                                    int32_t* __restrict__ out, int64_t width, int k, int32_t offset,
                                    bool masked_past_visible) {
  GridDependencyPrologue();
  __shared__ SelectShared<kThreads> sm;
  const int64_t row = blockIdx.x;
  TopkRowFromMemory<kThreads>(scores + row * width, out + row * k,
                              ClampTo(visible_len[row], 0, width), width, k, offset,
                              masked_past_visible, sm);
}

// TopkPositions with each row's keys held in registers
// (TopkParams::in_registers): thread t holds items t * kItems .. + kItems - 1
// of the row's n selectable entries (n <= kThreads * kItems; a row with more
// takes TopkRowFromMemory), read once. The same selection as
// SelectBest, found with fewer passes over less: the count and each radix
// pass read registers (each warp counts into its own histogram, one atomic
// a digit its lanes share, the bins summed by the thread that scans them), a
// tie at the threshold is resolved by one prefix sum of each thread's equal
// items (its items are consecutive indices, so the want-th lowest index
// among them is found directly), and the kept positions are written after
// one prefix sum of each thread's kept count instead of one a block-width of
// items.
template <int kThreads, int kItems>
struct TopkRegShared {
  SelectShared<kThreads> select;
  uint32_t warp_hist[kThreads / 32][256];
  int64_t last_equal;
};

template <int kThreads, int kItems>
__global__ void __launch_bounds__(kThreads)
    TopkPositionsRegKernel(const float* __restrict__ scores,
                           const int64_t* __restrict__ visible_len, int32_t* __restrict__ out,
                           int64_t width, int k, int32_t offset, bool masked_past_visible) {
  GridDependencyPrologue();
  static_assert(kItems <= 32, "a thread's items are one bit mask");
  constexpr int kWarps = kThreads / 32;
  __shared__ TopkRegShared<kThreads, kItems> sh;
  SelectShared<kThreads>& sm = sh.select;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int64_t row = blockIdx.x;
  const float* sc = scores + row * width;
  int32_t* o = out + row * k;
  const int64_t visible = ClampTo(visible_len[row], 0, width);
  const int64_t n = masked_past_visible ? visible : width;
  if (n > int64_t{kThreads} * kItems) {  // block-uniform: past the registers, from memory
    TopkRowFromMemory<kThreads>(sc, o, visible, width, k, offset, masked_past_visible, sm);
    return;
  }
  const int64_t first = static_cast<int64_t>(tid) * kItems;
  uint32_t key[kItems];
  uint32_t valid = 0;  // bit j: item first + j is a candidate (below n, above -inf, not NaN)
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    key[j] = 0;
    if (first + j < n) {
      const float v = sc[first + j];
      if (v > -INFINITY) {
        key[j] = OrderedKey(v);
        valid |= 1u << j;
      }
    }
  }
  uint32_t total = 0;
  BlockExclusiveScan<kThreads>(static_cast<uint32_t>(__popc(valid)), total, sm);
  Selection selection;
  if (k <= 0) {
    selection.none = true;
  } else if (total <= static_cast<uint32_t>(k)) {
    selection.all = true;
  } else {
    // The radix select of RadixSelectLargest over the registers' keys.
    uint32_t want = static_cast<uint32_t>(k), prefix = 0, mask = 0, equal = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = lane; b < 256; b += 32) sh.warp_hist[warp][b] = 0;
      __syncwarp();
      // A warp's lanes of one digit add once (scores crowd into a few top
      // bytes, and same-address atomics of a warp serialize).
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        const bool active = ((valid >> j) & 1u) != 0u && (key[j] & mask) == prefix;
        const unsigned lanes = __ballot_sync(0xffffffffu, active);
        if (active) {
          const uint32_t digit = (key[j] >> shift) & 0xFFu;
          const unsigned peers = __match_any_sync(lanes, digit);
          if (lane == __ffs(peers) - 1) {
            atomicAdd(&sh.warp_hist[warp][digit], static_cast<uint32_t>(__popc(peers)));
          }
        }
      }
      __syncthreads();
      uint32_t count = 0;
      if (tid < 256) {
#pragma unroll
        for (int w = 0; w < kWarps; ++w) count += sh.warp_hist[w][255 - tid];
      }
      ChooseRadixBin<kThreads>(count, prefix, shift, want, sm);
      prefix = sm.prefix;
      want = sm.want;
      equal = sm.equal;
      mask |= 0xFFu << shift;
    }
    selection.key = prefix;
    selection.last_equal = n;
    if (want < equal) {
      // Ties at the threshold: the `want` lowest indices among them. A
      // thread's equal items are consecutive in index order.
      uint32_t mine = 0;
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        mine += ((valid >> j) & 1u) != 0u && key[j] == prefix ? 1u : 0u;
      }
      uint32_t equal_total = 0;
      const uint32_t before = BlockExclusiveScan<kThreads>(mine, equal_total, sm);
      if (before < want && before + mine >= want) {
        uint32_t seen = before;
#pragma unroll
        for (int j = 0; j < kItems; ++j) {
          if (((valid >> j) & 1u) != 0u && key[j] == prefix && ++seen == want) {
            sh.last_equal = first + j;
          }
        }
      }
      __syncthreads();
      selection.last_equal = sh.last_equal;
    }
  }
  // The kept positions below visible_len, ascending: one prefix sum of the
  // threads' kept counts.
  uint32_t keep = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (((valid >> j) & 1u) != 0u && first + j < visible && selection.Selected(first + j, key[j])) {
      keep |= 1u << j;
    }
  }
  uint32_t written = 0;
  uint32_t at = BlockExclusiveScan<kThreads>(static_cast<uint32_t>(__popc(keep)), written, sm);
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (((keep >> j) & 1u) != 0u) o[at++] = static_cast<int32_t>(first + j) + offset;
  }
  for (int64_t j = written + tid; j < k; j += kThreads) o[j] = -1;
}

// One block per row; the block scores are recomputed from the row on each
// pass (no workspace).
template <int kThreads>
__global__ void CandidateBlocksKernel(const float* __restrict__ scores,
                                      const int64_t* __restrict__ visible_len,
                                      uint8_t* __restrict__ pool, int64_t width, int topk_blocks,
                                      int block_size, bool masked_past_visible) {
  GridDependencyPrologue();
  __shared__ SelectShared<kThreads> sm;
  const int64_t row = blockIdx.x;
  const float* sc = scores + row * width;
  uint8_t* p = pool + row * width;
  const int64_t visible = ClampTo(visible_len[row], 0, width);
  const int64_t n_blocks = (width + block_size - 1) / block_size;
  const int64_t pinned = visible > 0 ? (visible - 1) / block_size : -1;
  auto key_of = [=](int64_t b, uint32_t& key) {
    float m = -INFINITY;
    if (b == pinned) {
      m = INFINITY;
    } else {
      const int64_t end = ClampTo((b + 1) * block_size, 0, width);
      for (int64_t t = b * block_size; t < end; ++t) {
        const float v = sc[t];
        m = m < v ? v : m;  // std::max(m, v): NaN never taken
      }
    }
    if (!(m > -INFINITY)) return false;
    key = OrderedKey(m);
    return true;
  };
  // Masked: the blocks past the visible ones hold only -inf (never kept).
  const int64_t n_select = masked_past_visible ? (visible + block_size - 1) / block_size : n_blocks;
  const Selection selection = SelectBest<kThreads>(n_select, topk_blocks, key_of, sm);
  for (int64_t b = threadIdx.x; b < n_blocks; b += kThreads) {
    uint32_t key = 0;
    const uint8_t keep = b < n_select && key_of(b, key) && selection.Selected(b, key) ? 1 : 0;
    const int64_t end = ClampTo((b + 1) * block_size, 0, width);
    for (int64_t t = b * block_size; t < end; ++t) p[t] = keep;
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_TOPK_CUH_
