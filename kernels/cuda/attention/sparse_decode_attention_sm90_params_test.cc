#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "gtest/gtest.h"
#include "kernels/cuda/attention/kv_mirror.h"
#include "kernels/cuda/attention/sparse_decode_attention_sm90.h"

// Runs in CI (no GPU): SparseDecodeAttention validates its parameters before
// it touches the device, so these cases need only the linked library.
namespace weir::kernels::cuda {
namespace {

// Fake device addresses: never dereferenced on these paths.
const float* const kF = reinterpret_cast<const float*>(uintptr_t{4096});
float* const kOut = reinterpret_cast<float*>(uintptr_t{1 << 20});
const uint8_t* const kB = reinterpret_cast<const uint8_t*>(uintptr_t{8192});
const int32_t* const kI = reinterpret_cast<const int32_t*>(uintptr_t{16384});

SparseDecodeAttentionParams Good() {
  return {.q = kF, .sink = kF, .window_codes = kB, .window_scales = kB, .window_index = kI,
          .window_rows = 128, .window_width = 128, .compressed_codes = kB,
          .compressed_scales = kB, .compressed_index = kI, .compressed_rows = 65536,
          .compressed_width = 512, .out = kOut, .queries = 64, .heads = 64};
}

void ExpectRejected(const SparseDecodeAttentionParams& p, const char* what) {
  EXPECT_FALSE(SupportsSparseDecodeAttention(p)) << what;
  EXPECT_EQ(SparseDecodeAttention(p, nullptr).code(), absl::StatusCode::kInvalidArgument) << what;
}

TEST(SparseDecodeAttentionParamsTest, AcceptsTheV41DecodeShape) {
  for (const SparseDecodeKernel k :
       {SparseDecodeKernel::kAuto, SparseDecodeKernel::kMma16, SparseDecodeKernel::kWgmma64}) {
    SparseDecodeAttentionParams p = Good();
    p.kernel = k;
    EXPECT_TRUE(SupportsSparseDecodeAttention(p)) << static_cast<int>(k);
  }
}

// The grouped output (V4.1's wo_a input written by the attention): kWgmma64
// only, instead of out, a width of whole heads dividing the row, an even
// rope_dim within the head, positions, cos_sin and exactly one of the fp32
// and bf16 outputs, aligned.
TEST(SparseDecodeAttentionParamsTest, ChecksTheGroupedOutput) {
  float* const g_out = reinterpret_cast<float*>(uintptr_t{1 << 21});
  uint16_t* const g_bf16 = reinterpret_cast<uint16_t*>(uintptr_t{1 << 22});
  const int64_t* const positions = reinterpret_cast<const int64_t*>(uintptr_t{1 << 23});
  SparseDecodeAttentionParams p = Good();  // 64 heads x 512
  p.kernel = SparseDecodeKernel::kWgmma64;
  p.out = nullptr;
  p.grouped = {.out = g_out,
               .group_width = 4096,  // V4.1: 8 groups of 8 heads
               .positions = positions,
               .cos_sin = kF,
               .cos_sin_rows = 4096,
               .rope_dim = 64};
  EXPECT_TRUE(SupportsSparseDecodeAttention(p));
  p.grouped.out = nullptr;
  p.grouped.out_bf16 = g_bf16;
  EXPECT_TRUE(SupportsSparseDecodeAttention(p));
  for (auto bad : std::initializer_list<void (*)(SparseDecodeAttentionParams&)>{
           [](SparseDecodeAttentionParams& q) { q.kernel = SparseDecodeKernel::kAuto; },
           [](SparseDecodeAttentionParams& q) { q.kernel = SparseDecodeKernel::kMma16; },
           [](SparseDecodeAttentionParams& q) { q.out = kOut; },
           [](SparseDecodeAttentionParams& q) { q.grouped.group_width = 4096 + 512 * 3; },
           [](SparseDecodeAttentionParams& q) { q.grouped.group_width = 1000; },
           [](SparseDecodeAttentionParams& q) { q.grouped.rope_dim = 63; },
           [](SparseDecodeAttentionParams& q) { q.grouped.rope_dim = 514; },
           [](SparseDecodeAttentionParams& q) { q.grouped.positions = nullptr; },
           [](SparseDecodeAttentionParams& q) { q.grouped.cos_sin = nullptr; },
           [](SparseDecodeAttentionParams& q) {
             q.grouped.out = reinterpret_cast<float*>(uintptr_t{1 << 21});  // both outputs
           },
           [](SparseDecodeAttentionParams& q) {
             q.grouped.out_bf16 = reinterpret_cast<uint16_t*>(uintptr_t{(1 << 22) + 2});
           }}) {
    SparseDecodeAttentionParams q = p;
    bad(q);
    ExpectRejected(q, "grouped");
  }
}

// The bf16 mirror form: kWgmma64 only; a pool the launch reads needs its
// mirror, 16-byte aligned, and then not its codes or scales.
TEST(SparseDecodeAttentionParamsTest, ChecksTheMirrorForm) {
  const uint16_t* const m = reinterpret_cast<const uint16_t*>(uintptr_t{1 << 24});
  SparseDecodeAttentionParams p = Good();
  p.kernel = SparseDecodeKernel::kWgmma64;
  p.window_bf16 = m;
  p.compressed_bf16 = m;
  p.window_codes = nullptr;
  p.window_scales = nullptr;
  p.compressed_codes = nullptr;
  p.compressed_scales = nullptr;
  EXPECT_TRUE(SupportsSparseDecodeAttention(p));
  for (const SparseDecodeKernel k : {SparseDecodeKernel::kAuto, SparseDecodeKernel::kMma16}) {
    SparseDecodeAttentionParams bad = p;
    bad.kernel = k;
    ExpectRejected(bad, "a mirror off kWgmma64");
  }
  SparseDecodeAttentionParams bad = p;
  bad.compressed_bf16 = nullptr;  // the compressed pool is read
  ExpectRejected(bad, "a read pool without its mirror");
  bad.compressed_width = 0;  // ... unless it is not
  EXPECT_TRUE(SupportsSparseDecodeAttention(bad));
  bad = p;
  bad.window_bf16 = reinterpret_cast<const uint16_t*>(uintptr_t{(1 << 24) + 8});
  ExpectRejected(bad, "a mirror off 16 bytes");
}

// DequantizeKvMirror's arguments, before any launch.
TEST(SparseDecodeAttentionParamsTest, ChecksTheKvMirror) {
  const int32_t* const i32 = kI;
  const int64_t* const i64 = reinterpret_cast<const int64_t*>(uintptr_t{1 << 25});
  uint16_t* const m = reinterpret_cast<uint16_t*>(uintptr_t{1 << 24});
  const KvMirrorParams good{.window_codes = kB,
                            .window_scales = kB,
                            .window_bf16 = m,
                            .window_rows = 1024,
                            .ring_rows = 128,
                            .compressed_codes = kB,
                            .compressed_scales = kB,
                            .compressed_bf16 = m,
                            .compressed_rows = 4096,
                            .block_table = i32,
                            .table_width = 16,
                            .entries_per_block = 32,
                            .ratio = 4,
                            .slot = i32,
                            .last_position = i64,
                            .stage_first = i32,
                            .stage_rows = i32,
                            .sequences = 3,
                            .max_rows = 2000};
  EXPECT_TRUE(SupportsKvMirror(good));
  auto rejected = [](const KvMirrorParams& p, const char* what) {
    EXPECT_FALSE(SupportsKvMirror(p)) << what;
    EXPECT_EQ(DequantizeKvMirror(p, nullptr).code(), absl::StatusCode::kInvalidArgument) << what;
  };
  KvMirrorParams p = good;
  p.sequences = -1;
  rejected(p, "negative sequences");
  p = good;
  p.sequences = 65536;
  rejected(p, "sequences past grid.y");
  p = good;
  p.max_rows = -1;
  rejected(p, "negative max_rows");
  p = good;
  p.slot = nullptr;
  rejected(p, "no slots");
  p = good;
  p.window_bf16 = nullptr;
  rejected(p, "no window mirror");
  p = good;
  p.window_codes = kB + 8;
  rejected(p, "window codes off 16 bytes");
  p = good;
  p.block_table = nullptr;
  rejected(p, "no block table");
  p = good;
  p.entries_per_block = 0;
  rejected(p, "no entries a block");
  p = good;
  p.compressed_bf16 = m + 4;
  rejected(p, "compressed mirror off 16 bytes");
  p = good;  // no compressed part: its pointers unused
  p.ratio = 0;
  p.compressed_codes = nullptr;
  p.compressed_scales = nullptr;
  p.compressed_bf16 = nullptr;
  p.block_table = nullptr;
  EXPECT_TRUE(SupportsKvMirror(p));
  p = good;  // nothing to do: nothing read
  p.sequences = 0;
  p.slot = nullptr;
  EXPECT_TRUE(SupportsKvMirror(p));
  EXPECT_TRUE(DequantizeKvMirror(p, nullptr).ok());
}

TEST(SparseDecodeAttentionParamsTest, ChecksTheWgmmaRanges) {
  SparseDecodeAttentionParams p = Good();  // 128 + 512 entries: 10 tiles of 64
  p.wgmma_range_tiles = -1;
  ExpectRejected(p, "negative range tiles");
  p.kernel = SparseDecodeKernel::kWgmma64;
  // 1 tile a range would make 10 ranges: raised to 2 tiles (5 ranges), not refused.
  for (const int tiles : {0, 1, 2, 10, 1000}) {
    p.wgmma_range_tiles = tiles;
    EXPECT_TRUE(SupportsSparseDecodeAttention(p)) << tiles;
  }
  p.wgmma_range_tiles = 0;  // the default keeps long lists to 8 ranges
  p.compressed_width = kSparseDecodeMaxWidth;
  EXPECT_TRUE(SupportsSparseDecodeAttention(p));
  p.kernel = SparseDecodeKernel::kMma16;  // kMma16 has no ranges
  p.compressed_width = 512;
  p.wgmma_range_tiles = 1;
  EXPECT_TRUE(SupportsSparseDecodeAttention(p));
  // kWgmma64's blocks: queries x ceil(heads / 64) x ranges below 2^31.
  p.kernel = SparseDecodeKernel::kWgmma64;
  p.wgmma_range_tiles = 2;  // 5 ranges
  p.heads = 1;
  p.queries = INT32_MAX / 4;  // x 5 passes 2^31 (kMma16's x 1 would not)
  ExpectRejected(p, "too many wgmma blocks");
}

TEST(SparseDecodeAttentionParamsTest, RejectsAnUnknownKernel) {
  SparseDecodeAttentionParams p = Good();
  p.kernel = static_cast<SparseDecodeKernel>(7);
  ExpectRejected(p, "kernel 7");
}

TEST(SparseDecodeAttentionParamsTest, RejectsBadShapesBeforeLaunch) {
  SparseDecodeAttentionParams p = Good();
  p.head_dim = 576;
  ExpectRejected(p, "head_dim 576 (latent + rope form is not this model's)");
  p = Good();
  p.heads = 0;
  ExpectRejected(p, "heads 0");
  p = Good();
  p.queries = -1;
  ExpectRejected(p, "negative queries");
  p = Good();
  p.queries = int64_t{1} << 30;  // x 4 head groups passes 2^31 CTAs
  ExpectRejected(p, "too many CTAs");
  p = Good();
  p.window_width = -1;
  ExpectRejected(p, "negative window width");
  p = Good();
  p.compressed_width = kSparseDecodeMaxWidth + 1;
  ExpectRejected(p, "compressed width past the maximum");
  p = Good();
  p.compressed_rows = int64_t{1} << 31;
  ExpectRejected(p, "pool rows past int32");
  p = Good();
  p.scale = NAN;
  ExpectRejected(p, "non-finite scale");
}

TEST(SparseDecodeAttentionParamsTest, RejectsMissingOrMisalignedPointers) {
  SparseDecodeAttentionParams p = Good();
  p.q = nullptr;
  ExpectRejected(p, "null q");
  p = Good();
  p.sink = nullptr;
  ExpectRejected(p, "null sink");
  p = Good();
  p.out = nullptr;
  ExpectRejected(p, "null out");
  p = Good();
  p.compressed_index = nullptr;
  ExpectRejected(p, "null compressed index");
  p = Good();
  p.window_codes = nullptr;
  ExpectRejected(p, "null window codes");
  p = Good();
  p.compressed_scales = nullptr;
  ExpectRejected(p, "null compressed scales");
  p = Good();
  p.window_codes = kB + 8;
  ExpectRejected(p, "window codes not 16-byte aligned");
  p = Good();
  p.compressed_codes = kB + 4;
  ExpectRejected(p, "compressed codes not 16-byte aligned");
  p = Good();
  p.window_scales = kB + 2;
  ExpectRejected(p, "window scales not 4-byte aligned");
  p = Good();
  p.compressed_scales = kB + 4;
  ExpectRejected(p, "compressed scales not 8-byte aligned");
  p = Good();
  p.q = kF + 1;
  ExpectRejected(p, "q not 8-byte aligned");
  p = Good();
  p.out = kOut + 1;
  ExpectRejected(p, "out not 8-byte aligned");
}

TEST(SparseDecodeAttentionParamsTest, UnusedPointersMayBeNull) {
  // No queries: nothing is read or written, nothing is launched.
  SparseDecodeAttentionParams p{.queries = 0, .heads = 64};
  EXPECT_TRUE(SupportsSparseDecodeAttention(p));
  EXPECT_TRUE(SparseDecodeAttention(p, nullptr).ok());
  // A pool with width 0 needs no pointers; one with rows 0 needs only its index.
  p = Good();
  p.compressed_width = 0;
  p.compressed_index = nullptr;
  p.compressed_codes = nullptr;
  p.compressed_scales = nullptr;
  EXPECT_TRUE(SupportsSparseDecodeAttention(p));
  p = Good();
  p.window_rows = 0;
  p.window_codes = nullptr;
  p.window_scales = nullptr;
  EXPECT_TRUE(SupportsSparseDecodeAttention(p));
  // Heads need not be a multiple of 16.
  p = Good();
  p.heads = 20;
  EXPECT_TRUE(SupportsSparseDecodeAttention(p));
}

}  // namespace
}  // namespace weir::kernels::cuda
