#include "kernels/cuda/decode/kv_rows.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/decode/test_util.h"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/dense/fake_quant.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"

namespace weir::kernels::cuda::decode {
namespace {

using testing::Bits;
using testing::DeviceBuffer;
using testing::SameBits;

struct Case {
  int64_t rows, dim;
  int rope_dim;  // 0: no RoPE
  KvRowStore store;
  bool round_bf16;
  bool rope_out;
};

std::string Name(const Case& c) {
  return "rows " + std::to_string(c.rows) + " dim " + std::to_string(c.dim) + " rope " +
         std::to_string(c.rope_dim) + " store " + std::to_string(static_cast<int>(c.store)) +
         (c.round_bf16 ? " bf16" : " fp32") + (c.rope_out ? " out after rope" : " out before");
}

bool IsFloatStore(KvRowStore s) {
  return s == KvRowStore::kFloatFp8 || s == KvRowStore::kFloatMxfp4 || s == KvRowStore::kFloatNvfp4;
}

// Code and scale bytes a pool row of the stored forms.
int64_t CodeBytes(KvRowStore s, int64_t dim) { return s == KvRowStore::kCodesFp8 ? dim : dim / 2; }
int64_t ScaleBytes(KvRowStore s, int64_t dim) {
  return s == KvRowStore::kCodesNvfp4 ? dim / 16 : dim / 32;
}

// The fused row against the launches it replaces (RmsNorm, ApplyRope,
// FakeQuant / ActQuantFp8 / QuantizeMxfp4 / QuantizeNvfp4Kv, and the scatter
// the decoder does with CopyRows, here on the host): every output bit for bit,
// pools untouched where no row lands. Inputs have rows with a NaN, a position
// past the RoPE table, dst rows < 0 and past the pool.
void CheckCase(const Case& c) {
  SCOPED_TRACE(Name(c));
  std::mt19937 rng(static_cast<uint32_t>(c.rows * 7919 + c.dim * 31 + c.rope_dim +
                                         static_cast<int>(c.store) * 5 + c.round_bf16));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  const int64_t n = c.rows * c.dim;
  std::vector<float> x(n), weight(c.dim);
  for (int64_t i = 0; i < n; ++i) x[i] = std::ldexp(normal(rng), exponent(rng));
  for (float& w : weight) w = 1.0f + 0.25f * normal(rng);
  if (c.rows > 2) x[1 * c.dim + 5] = std::numeric_limits<float>::quiet_NaN();
  const int64_t table_rows = 40;
  const int half = c.rope_dim / 2;
  std::vector<float> cos_sin(std::max<int64_t>(1, table_rows * half * 2));
  for (float& v : cos_sin) v = normal(rng);
  std::vector<int64_t> positions(c.rows);
  std::uniform_int_distribution<int64_t> pos(0, table_rows - 1);
  for (int64_t& p : positions) p = pos(rng);
  if (c.rows > 3) positions[2] = table_rows;  // past the table: NaN rotated elements
  const int64_t pool_rows = c.rows + 5;
  // Distinct pool rows in a shuffled order (two rows never land on one).
  std::vector<int32_t> dst(pool_rows);
  for (int64_t r = 0; r < pool_rows; ++r) dst[r] = static_cast<int32_t>(r);
  std::shuffle(dst.begin(), dst.end(), rng);
  dst.resize(c.rows);
  if (c.rows > 4) dst[3] = -1;
  if (c.rows > 5) dst[4] = static_cast<int32_t>(pool_rows);  // past the pool: no store

  // Reference: the separate launches.
  DeviceBuffer<float> xd(x), wd(weight), cs(cos_sin);
  DeviceBuffer<int64_t> posd(positions);
  DeviceBuffer<int32_t> dstd(dst);
  DeviceBuffer<float> ref(n), refq(n);
  ASSERT_EQ(cudaMemcpy(ref.get(), xd.get(), n * 4, cudaMemcpyDeviceToDevice), cudaSuccess);
  ASSERT_TRUE(RmsNorm({.x = ref.get(),
                       .weight = wd.get(),
                       .out = ref.get(),
                       .rows = c.rows,
                       .dim = c.dim,
                       .eps = 1e-6f,
                       .round_bf16 = c.round_bf16},
                      nullptr)
                  .ok());
  const std::vector<float> normed = ref.Download();
  if (c.rope_dim > 0) {
    RopeParams rp{.x = ref.get(),
                  .positions = posd.get(),
                  .cos_sin = cs.get(),
                  .num_tokens = c.rows,
                  .num_heads = 1,
                  .head_dim = static_cast<int>(c.dim),
                  .rope_dim = c.rope_dim};
    rp.cos_sin_by_position = true;
    rp.cos_sin_rows = table_rows;
    rp.round_bf16 = c.round_bf16;
    ASSERT_TRUE(ApplyRope(rp, nullptr).ok());
  }
  const std::vector<float> roped = ref.Download();
  std::vector<float> want_pool;
  std::vector<uint8_t> want_codes, want_scales;
  const std::vector<float> pool_init(pool_rows * c.dim, -7.25f);
  const int64_t cb = CodeBytes(c.store, c.dim), sb = ScaleBytes(c.store, c.dim);
  const std::vector<uint8_t> codes_init(pool_rows * cb, 0xA5), scales_init(pool_rows * sb, 0x5A);
  auto lands = [&](int64_t r) { return dst[r] >= 0 && dst[r] < pool_rows; };
  if (IsFloatStore(c.store)) {
    const dense::FakeQuantFormat f = c.store == KvRowStore::kFloatFp8 ? dense::FakeQuantFormat::kFp8
                                     : c.store == KvRowStore::kFloatMxfp4
                                         ? dense::FakeQuantFormat::kMxfp4
                                         : dense::FakeQuantFormat::kNvfp4Kv;
    ASSERT_TRUE(
        dense::FakeQuant({.x = ref.get(), .out = refq.get(), .n = n, .format = f}, nullptr).ok());
    const std::vector<float> q = refq.Download();
    want_pool = pool_init;
    for (int64_t r = 0; r < c.rows; ++r) {
      if (!lands(r)) continue;
      std::memcpy(&want_pool[dst[r] * c.dim], &q[r * c.dim], c.dim * 4);
    }
  } else if (c.store != KvRowStore::kNone) {
    DeviceBuffer<uint8_t> qc(c.rows * cb), qs(c.rows * sb);
    if (c.store == KvRowStore::kCodesFp8) {
      ASSERT_TRUE(dense::ActQuantFp8({.x = ref.get(),
                                      .codes = qc.get(),
                                      .scales = qs.get(),
                                      .rows = c.rows,
                                      .cols = c.dim},
                                     nullptr)
                      .ok());
    } else if (c.store == KvRowStore::kCodesMxfp4) {
      ASSERT_TRUE(dense::QuantizeMxfp4(
                      {.x = ref.get(), .codes = qc.get(), .scales = qs.get(), .n = n}, nullptr)
                      .ok());
    } else {
      ASSERT_TRUE(dense::QuantizeNvfp4Kv(
                      {.x = ref.get(), .codes = qc.get(), .scales = qs.get(), .n = n}, nullptr)
                      .ok());
    }
    const std::vector<uint8_t> hc = qc.Download(), hs = qs.Download();
    want_codes = codes_init;
    want_scales = scales_init;
    for (int64_t r = 0; r < c.rows; ++r) {
      if (!lands(r)) continue;
      std::memcpy(&want_codes[dst[r] * cb], &hc[r * cb], cb);
      std::memcpy(&want_scales[dst[r] * sb], &hs[r * sb], sb);
    }
  }

  // The fused launch.
  DeviceBuffer<float> out(n), pool(pool_init);
  DeviceBuffer<uint8_t> codes(codes_init), scales(scales_init);
  out.Poison();
  KvRowFinishParams p{
      .x = xd.get(), .norm_weight = wd.get(), .eps = 1e-6f, .round_bf16 = c.round_bf16};
  if (c.rope_dim > 0) {
    p.positions = posd.get();
    p.cos_sin = cs.get();
    p.cos_sin_rows = table_rows;
    p.rope_dim = c.rope_dim;
  }
  p.out = out.get();
  p.rope_out = c.rope_out;
  p.store = c.store;
  p.dst_rows = dstd.get();
  p.pool_rows = pool_rows;
  if (IsFloatStore(c.store)) p.pool = pool.get();
  if (c.store != KvRowStore::kNone && !IsFloatStore(c.store)) {
    p.codes = codes.get();
    p.scales = scales.get();
  }
  p.rows = c.rows;
  p.dim = c.dim;
  const absl::Status st = KvRowFinish(p, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(SameBits(out.Download(), c.rope_out ? roped : normed));
  if (IsFloatStore(c.store)) {
    EXPECT_TRUE(SameBits(pool.Download(), want_pool));
  }
  if (c.store != KvRowStore::kNone && !IsFloatStore(c.store)) {
    EXPECT_EQ(codes.Download(), want_codes);
    EXPECT_EQ(scales.Download(), want_scales);
  }
}

TEST(KvRowFinishTest, GivesTheBitsOfTheLaunchesItReplaces) {
  const KvRowStore stores[] = {KvRowStore::kNone,       KvRowStore::kFloatFp8,
                               KvRowStore::kFloatMxfp4, KvRowStore::kFloatNvfp4,
                               KvRowStore::kCodesFp8,   KvRowStore::kCodesMxfp4,
                               KvRowStore::kCodesNvfp4};
  for (KvRowStore s : stores) {
    for (bool bf16 : {true, false}) {
      CheckCase({.rows = 7,
                 .dim = 512,
                 .rope_dim = 64,
                 .store = s,
                 .round_bf16 = bf16,
                 .rope_out = true});
      CheckCase({.rows = 9,
                 .dim = 128,
                 .rope_dim = 64,
                 .store = s,
                 .round_bf16 = bf16,
                 .rope_out = false});
      CheckCase(
          {.rows = 1, .dim = 256, .rope_dim = 0, .store = s, .round_bf16 = bf16, .rope_out = true});
    }
  }
  // A prefill chunk's rows; a dim past one pass of the CTA's threads.
  CheckCase({.rows = 300,
             .dim = 512,
             .rope_dim = 64,
             .store = KvRowStore::kCodesFp8,
             .round_bf16 = true,
             .rope_out = true});
  CheckCase({.rows = 6,
             .dim = 1056,
             .rope_dim = 96,
             .store = KvRowStore::kCodesNvfp4,
             .round_bf16 = true,
             .rope_out = true});
}

TEST(KvRowFinishTest, RefusesWhatItCannotDo) {
  DeviceBuffer<float> x(64), pool(64);
  DeviceBuffer<uint8_t> codes(64);
  DeviceBuffer<int64_t> pos(1);
  KvRowFinishParams ok{
      .x = x.get(), .store = KvRowStore::kFloatFp8, .pool = pool.get(), .rows = 1, .dim = 64};
  EXPECT_TRUE(SupportsKvRowFinish(ok));
  KvRowFinishParams p = ok;
  p.dim = 48;  // not a multiple of 32
  EXPECT_EQ(KvRowFinish(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = ok;
  p.pool = nullptr;
  EXPECT_FALSE(SupportsKvRowFinish(p));
  p = ok;
  p.positions = pos.get();  // no table
  EXPECT_FALSE(SupportsKvRowFinish(p));
  p.cos_sin = x.get();
  p.cos_sin_rows = 1;
  p.rope_dim = 66;  // past dim
  EXPECT_FALSE(SupportsKvRowFinish(p));
  p.rope_dim = 32;
  EXPECT_TRUE(SupportsKvRowFinish(p));
  p = ok;
  p.store = KvRowStore::kCodesFp8;
  p.codes = codes.get() + 4;  // not 8-byte aligned
  p.scales = codes.get();
  EXPECT_FALSE(SupportsKvRowFinish(p));
  p.codes = codes.get();
  EXPECT_TRUE(SupportsKvRowFinish(p));
  p = ok;
  p.rows = 0;
  p.x = nullptr;
  EXPECT_TRUE(KvRowFinish(p, nullptr).ok());  // nothing to do
}

}  // namespace
}  // namespace weir::kernels::cuda::decode
