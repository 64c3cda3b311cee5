// kernels/cuda/attention/indexer_score_shared_keys_layout.h
//
// The index arithmetic of IndexerScore's shared-keys form
// (IndexerScoreForm::kSharedKeys, indexer_score_shared_keys.cuh): a block's
// shape and shared-memory layout, each lane's heads and keys, and the order in
// which blocks take (group of queries, key range) pairs. Plain integer
// arithmetic, usable on the host (indexer_score_shared_keys_layout_test
// checks it without a GPU) and on the device.
//
// Thread safety: constexpr values and pure functions.

#ifndef WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_SHARED_KEYS_LAYOUT_H_
#define WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_SHARED_KEYS_LAYOUT_H_

#include <cstdint>

#ifdef __CUDACC__
#define WEIR_SHARED_KEYS_HD __host__ __device__
#else
#define WEIR_SHARED_KEYS_HD
#endif

namespace weir::kernels::cuda {

// A block of kThreads threads: warp w scores query w of a group of kQueries
// consecutive queries against a tile of kKeys keys staged once for all of
// them. Lane l of a warp is the pair (head group l & 3, key group l >> 2) of
// a quad-major layout: it runs the dots of heads 32 c + 8 (l & 3) + j (j < 8)
// of every pass c, with keys (l >> 2) + 8 i (i < 8) of the tile, 64 chains
// in registers. Shared memory, in floats: the queries' heads
// [kQueries][head_rows][stride] (head h at row HeadRow(h); rows of heads >=
// heads are zero), their weights [kQueries][head_rows] (head order), then the
// key tile [kKeys][stride].
struct IndexerSharedKeysLayout {
  static constexpr int kQueries = 4;
  static constexpr int kKeys = 64;
  static constexpr int kThreads = kQueries * 32;
  static constexpr int kHeadPass = 32;  // heads a pass: a quad's 4 lanes x 8
  static constexpr int kLaneHeads = 8;
  static constexpr int kLaneKeys = 8;

  int head_rows = 0;  // heads rounded up to whole passes
  // dim + 4 or dim + 8, whichever makes stride / 4 odd: rows r .. r + 7 start
  // in 8 distinct 16-byte bank groups, so 8 lanes reading 8 consecutive rows
  // (a key load) or 4 (a head load) read in one wavefront.
  int stride = 0;
  int64_t q_floats = 0, w_floats = 0, k_floats = 0;

  WEIR_SHARED_KEYS_HD constexpr IndexerSharedKeysLayout(int heads, int dim)
      : head_rows((heads + kHeadPass - 1) / kHeadPass * kHeadPass),
        stride(dim / 4 % 2 == 0 ? dim + 4 : dim + 8),
        q_floats(int64_t{kQueries} * ((heads + kHeadPass - 1) / kHeadPass * kHeadPass) *
                 (dim / 4 % 2 == 0 ? dim + 4 : dim + 8)),
        w_floats(int64_t{kQueries} * ((heads + kHeadPass - 1) / kHeadPass * kHeadPass)),
        k_floats(int64_t{kKeys} * (dim / 4 % 2 == 0 ? dim + 4 : dim + 8)) {}

  WEIR_SHARED_KEYS_HD constexpr int64_t Floats() const { return q_floats + w_floats + k_floats; }

  // The row of head h among its query's staged heads: within each pass of 32,
  // head 8 g + j at row 4 j + g, so the quad's four lanes (g = 0 .. 3) read
  // four consecutive rows when each reads its j-th head.
  WEIR_SHARED_KEYS_HD static constexpr int HeadRow(int h) {
    return h / kHeadPass * kHeadPass + h % kLaneHeads * 4 + h % kHeadPass / kLaneHeads;
  }
  // Lane l's head group (its heads 8 g .. 8 g + 7 of each pass) and key group
  // (its keys k, k + 8, ..., k + 56 of each tile).
  WEIR_SHARED_KEYS_HD static constexpr int HeadGroup(int lane) { return lane & 3; }
  WEIR_SHARED_KEYS_HD static constexpr int KeyGroup(int lane) { return lane >> 2; }
  WEIR_SHARED_KEYS_HD static constexpr int LaneKey(int lane, int i) {
    return KeyGroup(lane) + kLaneKeys * i;
  }

  // kMma (IndexerScoreForm::kSharedKeysMma): a warp's pass of 32 heads over
  // the tile's 64 keys as mma.sync m16n8k16 accumulators, 2 m tiles (16
  // heads) x 8 n tiles (8 keys) x 4 a lane. Lane (g = lane / 4, t = lane %
  // 4) holds element e of tile (mt, nt) at head MmaHead (within the pass)
  // and key MmaKey: rows g and g + 8, columns 2 t and 2 t + 1 (the mma's C
  // layout). The head sum runs, for each 8 heads 16 mt + 8 h + (0 .. 7),
  // along the lanes of one t (lane g adds head 16 mt + 8 h + g), and lane
  // (g, t) writes the keys of n tile MmaWriteTile(lane).
  static constexpr int kMmaTiles = 2, kMmaKeyTiles = kKeys / 8;
  WEIR_SHARED_KEYS_HD static constexpr int MmaHead(int lane, int mt, int e) {
    return 16 * mt + (lane >> 2) + 8 * (e >> 1);
  }
  WEIR_SHARED_KEYS_HD static constexpr int MmaKey(int lane, int nt, int e) {
    return 8 * nt + 2 * (lane & 3) + (e & 1);
  }
  WEIR_SHARED_KEYS_HD static constexpr int MmaWriteTile(int lane) { return lane >> 2; }
  // kMma with the head sum through shared memory
  // (IndexerScoreForm::kSharedKeysMmaSum): a warp's terms of a pass, 16 keys
  // at a time (a round: n tiles 2 r and 2 r + 1), go to its own scratch of
  // kHeadPass rows (heads) of kSumStride floats (the round's keys, an even
  // stride so a lane's two keys are one 8-byte store), and lane k < 16 then
  // adds key 16 r + k's terms in head order. kSumKeys keys a round.
  static constexpr int kSumKeys = 16, kSumStride = 18;
  static constexpr int kSumWarpFloats = kHeadPass * kSumStride;
  WEIR_SHARED_KEYS_HD static constexpr int64_t SumFloats() {
    return int64_t{kQueries} * kSumWarpFloats;
  }
};

// IndexerScoreForm::kSharedKeysMmaBf16 (indexer_score_shared_keys_bf16.cuh):
// IndexerSharedKeysLayout's block (kQueries warps, tiles of kKeys keys, the
// mma accumulators and the shared-memory head sum of kSharedKeysMmaSum) with
// q's MXFP4 form and the keys staged once as bf16 values instead of fp32, so
// the warps load mma fragments with ldmatrix instead of packing two floats
// an operand register at every use. Shared memory, in bytes from the start:
// the queries' heads as bf16 [kQueries][head_rows][stride] (head h at row h,
// natural order; rows of heads >= heads are zero), their weights as floats
// [kQueries][head_rows], the key tile as bf16 [kKeys][stride], then each
// warp's head-sum scratch (IndexerSharedKeysLayout::SumFloats floats). The
// row stride is dim + 8 bf16 values: with dim % 32 == 0 a row is an odd
// number of 16-byte units, so the 8 rows an ldmatrix phase reads start in 8
// distinct bank groups. About 61 KB at V4.1's 32 heads x 128: three blocks
// an SM.
struct IndexerSharedKeysBf16Layout {
  using L = IndexerSharedKeysLayout;
  int head_rows = 0;
  int stride = 0;  // bf16 values a row
  int64_t q_offset = 0, w_offset = 0, k_offset = 0, sum_offset = 0, bytes = 0;

  WEIR_SHARED_KEYS_HD constexpr IndexerSharedKeysBf16Layout(int heads, int dim)
      : head_rows((heads + L::kHeadPass - 1) / L::kHeadPass * L::kHeadPass),
        stride(dim + 8),
        q_offset(0),
        w_offset(int64_t{L::kQueries} * ((heads + L::kHeadPass - 1) / L::kHeadPass * L::kHeadPass) *
                 (dim + 8) * 2),
        k_offset(RoundUp16(w_offset +
                           int64_t{L::kQueries} *
                               ((heads + L::kHeadPass - 1) / L::kHeadPass * L::kHeadPass) * 4)),
        sum_offset(k_offset + int64_t{L::kKeys} * (dim + 8) * 2),
        bytes(sum_offset + L::SumFloats() * 4) {}

  WEIR_SHARED_KEYS_HD static constexpr int64_t RoundUp16(int64_t b) { return (b + 15) / 16 * 16; }

  // ldmatrix .x4 row addresses, in bf16 values from the warp's first head
  // row (A) or from the tile's first key (B). A: lane l gives row (l & 7) +
  // 8 ((l >> 3) & 1) of a 16-head m tile at channel offset 8 (l >> 4), so
  // the four matrices are the mma's a0 .. a3 (heads g / g + 8, channels
  // 2 t / 2 t + 8). B: for the n tiles 2 p and 2 p + 1, lane l gives key
  // 8 (2 p + (l >> 4)) + (l & 7) at channel offset 8 ((l >> 3) & 1), so the
  // four matrices are b0, b1 of n tile 2 p, then of 2 p + 1.
  WEIR_SHARED_KEYS_HD static constexpr int ARowOffsetAt(int stride, int lane) {
    return ((lane & 7) + 8 * ((lane >> 3) & 1)) * stride + 8 * (lane >> 4);
  }
  WEIR_SHARED_KEYS_HD static constexpr int BRowOffsetAt(int stride, int lane, int pair) {
    return (8 * (2 * pair + (lane >> 4)) + (lane & 7)) * stride + 8 * ((lane >> 3) & 1);
  }
  WEIR_SHARED_KEYS_HD constexpr int ARowOffset(int lane) const {
    return ARowOffsetAt(stride, lane);
  }
  WEIR_SHARED_KEYS_HD constexpr int BRowOffset(int lane, int pair) const {
    return BRowOffsetAt(stride, lane, pair);
  }
};

// IndexerScoreForm::kDecodeMmaBf16 (indexer_score_decode_bf16.cuh): one
// query a block, for decode steps whose rows each read their own sequence's
// keys. The block's four warps split each tile of kKeys keys, warp w taking
// keys 16 w .. 16 w + 15 (n tiles 2 w and 2 w + 1: ldmatrix pair w) over all
// the query's heads; the mma arithmetic, terms and head sum are
// kSharedKeysMmaBf16's. Shared memory, in bytes from the start: the query's
// heads as bf16 [head_rows][stride] (head h at row h; rows past `heads`
// zero), its weights as floats [head_rows], the key tile as bf16
// [kKeys][stride], then each warp's head-sum scratch (kSumWarpFloats floats).
// About 35 KB at V4.1's 32 heads x 128: six blocks an SM.
struct IndexerDecodeBf16Layout {
  using L = IndexerSharedKeysLayout;
  static constexpr int kWarps = L::kThreads / 32;
  static constexpr int kWarpKeys = L::kKeys / kWarps;  // 16: a head-sum round
  static_assert(kWarpKeys == L::kSumKeys, "a warp's keys are one head-sum round");
  int head_rows = 0;
  int stride = 0;  // bf16 values a row
  int64_t q_offset = 0, w_offset = 0, k_offset = 0, sum_offset = 0, bytes = 0;

  WEIR_SHARED_KEYS_HD constexpr IndexerDecodeBf16Layout(int heads, int dim)
      : head_rows((heads + L::kHeadPass - 1) / L::kHeadPass * L::kHeadPass),
        stride(dim + 8),
        q_offset(0),
        w_offset(int64_t{(heads + L::kHeadPass - 1) / L::kHeadPass * L::kHeadPass} * (dim + 8) * 2),
        k_offset(IndexerSharedKeysBf16Layout::RoundUp16(
            w_offset + int64_t{(heads + L::kHeadPass - 1) / L::kHeadPass * L::kHeadPass} * 4)),
        sum_offset(k_offset + int64_t{L::kKeys} * (dim + 8) * 2),
        bytes(sum_offset + int64_t{kWarps} * L::kSumWarpFloats * 4) {}
};

// Which (group of queries, range of key tiles) block b takes: groups of
// kQueries queries, each split into `ranges` ranges of tiles_per_block tiles
// of kKeys. Block b takes group groups - 1 - b / ranges, range b % ranges:
// the last queries first, which in a causal prefill chunk see the most keys,
// so the longest blocks start in the first wave and the short ones fill the
// tail.
struct IndexerSharedKeysGrid {
  int64_t groups = 0;
  int64_t tiles = 0;  // key tiles of kKeys over all keys
  int64_t tiles_per_block = 1;
  int64_t ranges = 0;

  // A grid for `queries` x `keys` of about `target_blocks` blocks (at least
  // one tile a block; one range a group once the groups alone give as many).
  WEIR_SHARED_KEYS_HD static constexpr IndexerSharedKeysGrid Make(int64_t queries, int64_t keys,
                                                                  int64_t target_blocks) {
    IndexerSharedKeysGrid g;
    constexpr int64_t kq = IndexerSharedKeysLayout::kQueries, kk = IndexerSharedKeysLayout::kKeys;
    g.groups = (queries + kq - 1) / kq;
    g.tiles = (keys + kk - 1) / kk;
    g.tiles_per_block = TilesPerBlock(g.tiles, g.groups, target_blocks);
    g.ranges = (g.tiles + g.tiles_per_block - 1) / g.tiles_per_block;
    return g;
  }
  // The tiles a block walks so that `items` rows of `tiles` tiles make about
  // target_blocks blocks: at least 1, at most tiles (1 when there are none).
  WEIR_SHARED_KEYS_HD static constexpr int64_t TilesPerBlock(int64_t tiles, int64_t items,
                                                             int64_t target_blocks) {
    const int64_t want = (tiles * items + target_blocks - 1) / target_blocks;
    return want < 1 ? 1 : (want > tiles ? (tiles < 1 ? 1 : tiles) : want);
  }
  WEIR_SHARED_KEYS_HD constexpr int64_t Blocks() const { return groups * ranges; }
  WEIR_SHARED_KEYS_HD constexpr int64_t Group(int64_t block) const {
    return groups - 1 - block / ranges;
  }
  WEIR_SHARED_KEYS_HD constexpr int64_t Range(int64_t block) const { return block % ranges; }
};

// Which (query, range of key tiles) block b of the decode form takes: each
// query's tiles of kKeys split into `ranges` ranges of tiles_per_block, block
// b query b / ranges, range b % ranges. Host sizes alone fix it, so one
// captured graph serves every step of those sizes, and a key's score never
// depends on the split.
struct IndexerDecodeGrid {
  int64_t queries = 0;
  int64_t tiles = 0;  // key tiles of kKeys over all keys
  int64_t tiles_per_block = 1;
  int64_t ranges = 0;

  // About `target_blocks` blocks (at least one tile a block).
  WEIR_SHARED_KEYS_HD static constexpr IndexerDecodeGrid Make(int64_t queries, int64_t keys,
                                                              int64_t target_blocks) {
    IndexerDecodeGrid g;
    constexpr int64_t kk = IndexerSharedKeysLayout::kKeys;
    g.queries = queries;
    g.tiles = (keys + kk - 1) / kk;
    g.tiles_per_block = IndexerSharedKeysGrid::TilesPerBlock(g.tiles, queries, target_blocks);
    g.ranges = (g.tiles + g.tiles_per_block - 1) / g.tiles_per_block;
    return g;
  }
  WEIR_SHARED_KEYS_HD constexpr int64_t Blocks() const { return queries * ranges; }
  WEIR_SHARED_KEYS_HD constexpr int64_t Query(int64_t block) const { return block / ranges; }
  WEIR_SHARED_KEYS_HD constexpr int64_t Range(int64_t block) const { return block % ranges; }
};

}  // namespace weir::kernels::cuda

#undef WEIR_SHARED_KEYS_HD

#endif  // WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_SHARED_KEYS_LAYOUT_H_
