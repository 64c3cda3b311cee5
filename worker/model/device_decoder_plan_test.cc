// DeviceDecoder's arena planning, on the CPU (dry runs of the layout; no
// device): the largest max_positions that fits a budget, monotone sizes, the
// MXFP4 experts' saving, and the refusals.
#include <array>
#include <cstdint>

#include "gtest/gtest.h"
#include "worker/model/device_decoder.h"
#include "worker/model/model.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

constexpr ActivationPrecision kBf16 = ActivationPrecision::kBf16;

std::unique_ptr<Model> TinyModel() {
  const Checkpoint& ckpt = TinyCheckpoint(11);
  auto m = Model::Create(ckpt.config(), ckpt);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

size_t ArenaAt(const Model& m, DeviceDecoderOptions options, int64_t positions) {
  options.max_positions = positions;
  size_t bytes = 0;
  auto fit = DeviceDecoder::MaxPositionsFor(m, kBf16, options, SIZE_MAX, &bytes);
  EXPECT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(*fit, positions);  // everything fits an unlimited budget
  return bytes;
}

TEST(DeviceDecoderPlanTest, FindsTheLargestMaxPositionsThatFits) {
  auto m = TinyModel();
  ASSERT_NE(m, nullptr);
  // Blocks of 2 positions: the pools grow with max_positions almost position
  // by position (whole 64-position blocks a slot would hide the trade below).
  const DeviceDecoderOptions options{
      .max_sequences = 4, .max_positions = 4096, .kv_block_tokens = 2, .max_batch = 8};
  const size_t at2000 = ArenaAt(*m, options, 2000), at4096 = ArenaAt(*m, options, 4096);
  EXPECT_LT(at2000, at4096);
  EXPECT_LT(ArenaAt(*m, options, 1999), at2000 + 1);
  size_t bytes = 0;
  auto fit = DeviceDecoder::MaxPositionsFor(*m, kBf16, options, at2000, &bytes);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_GE(*fit, 2000);
  EXPECT_LE(bytes, at2000);
  EXPECT_GT(ArenaAt(*m, options, *fit + 1), at2000);  // one more does not fit
  // More sequences, fewer positions each within the same budget (each slot
  // also holds its window rings, whatever its positions).
  DeviceDecoderOptions more = options;
  more.max_sequences = 16;
  auto fewer = DeviceDecoder::MaxPositionsFor(*m, kBf16, more, at2000);
  ASSERT_TRUE(fewer.ok()) << fewer.status();
  EXPECT_LT(*fewer, *fit);
}

// Paged pools: the most blocks a budget holds, by dry runs; one more block
// does not fit, and more than every slot's full table is never asked for.
TEST(DeviceDecoderPlanTest, FindsTheMostKvBlocksThatFit) {
  auto m = TinyModel();
  ASSERT_NE(m, nullptr);
  DeviceDecoderOptions options{
      .max_sequences = 4, .max_positions = 512, .kv_block_tokens = 8, .max_batch = 8};
  auto arena_at = [&](int64_t blocks) {
    DeviceDecoderOptions o = options;
    o.kv_blocks = blocks;
    size_t bytes = 0;
    auto fit = DeviceDecoder::MaxPositionsFor(*m, kBf16, o, SIZE_MAX, &bytes);
    EXPECT_TRUE(fit.ok()) << fit.status();
    return bytes;
  };
  const size_t at50 = arena_at(50), at51 = arena_at(51);
  EXPECT_LT(at50, at51);
  auto most = DeviceDecoder::MaxKvBlocksFor(*m, kBf16, options, at50);
  ASSERT_TRUE(most.ok()) << most.status();
  EXPECT_EQ(*most, 50);
  EXPECT_EQ(*DeviceDecoder::MaxKvBlocksFor(*m, kBf16, options, at51 - 1), 50);
  // Every slot's whole table (512 positions in blocks of 8: 64) at most.
  EXPECT_EQ(*DeviceDecoder::MaxKvBlocksFor(*m, kBf16, options, SIZE_MAX), 4 * 64);
  EXPECT_EQ(DeviceDecoder::MaxKvBlocksFor(*m, kBf16, options, 4096).status().code(),
            absl::StatusCode::kResourceExhausted);
  options.kv_block_tokens = 3;  // not a multiple of tiny's ratio 2
  EXPECT_EQ(DeviceDecoder::MaxKvBlocksFor(*m, kBf16, options, SIZE_MAX).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// prompt_bf16_linears takes its scratch from the arena: X's bf16 values (as
// many as the FP8 activation scratch, at every batch size) and, only where
// steps of more than 256 rows are planned (the warp-specialized bf16 tile),
// the largest FP8 weight's bf16 values, each twice with concurrent branches.
TEST(DeviceDecoderPlanTest, PromptBf16LinearsTakeTheirScratchFromTheArena) {
  auto m = TinyModel();
  ASSERT_NE(m, nullptr);
  auto extra = [&](int max_batch) {
    DeviceDecoderOptions options{.numerics = DecodeNumerics::kFast,
                                 .max_sequences = 2,
                                 .max_batch = max_batch,
                                 .max_rows_per_slot = max_batch};
    options.prompt_bf16_linears = false;  // (on by default)
    const size_t off = ArenaAt(*m, options, 512);
    options.prompt_bf16_linears = true;
    const size_t on = ArenaAt(*m, options, 512);
    EXPECT_GT(on, off) << "max_batch " << max_batch;
    return static_cast<double>(on) - static_cast<double>(off);
  };
  const double at256 = extra(256), at264 = extra(264);
  // X's scratch holds at least a bf16 row of dim for every batch row, twice.
  EXPECT_GE(at256, 2.0 * 256 * m->config().dim * 2);
  // Past 256 rows the weight scratch comes on top of X's, which grows with
  // the batch alone (264 / 256 of it, plus alignment).
  EXPECT_GT(at264, at256 * 264 / 256 + 4096);
  // The reference numerics never take it.
  DeviceDecoderOptions reference{.max_sequences = 2, .max_batch = 264, .max_rows_per_slot = 264};
  reference.prompt_bf16_linears = false;
  const size_t ref_off = ArenaAt(*m, reference, 512);
  reference.prompt_bf16_linears = true;
  EXPECT_EQ(ArenaAt(*m, reference, 512), ref_off);
}

TEST(DeviceDecoderPlanTest, HoldsCheckpointExpertsAsMxfp4) {
  auto m = TinyModel();
  ASSERT_NE(m, nullptr);
  DeviceDecoderOptions options{.max_sequences = 2, .max_positions = 64, .max_batch = 8};
  const size_t mxfp4 = ArenaAt(*m, options, 64);
  options.mxfp4_experts = false;
  const size_t fp32 = ArenaAt(*m, options, 64);
  // Routed experts: 4 bytes per weight in fp32, 0.53 as MXFP4.
  int64_t expert_weights = 0;
  for (int l = 0; l < m->config().n_layers; ++l) {
    for (const ExpertWeightsF32& e : m->weights().layers[l].ffn.experts) {
      expert_weights += e.w1.out * e.w1.in + e.w2.out * e.w2.in + e.w3.out * e.w3.in;
    }
  }
  const double saved = static_cast<double>(fp32 - mxfp4);
  EXPECT_NEAR(saved / static_cast<double>(expert_weights), 4.0 - 0.5 - 1.0 / 32, 0.05);
}

TEST(DeviceDecoderPlanTest, RefusesBudgetsAndOptionsItCannotMeet) {
  auto m = TinyModel();
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(DeviceDecoder::MaxPositionsFor(*m, kBf16, {.max_sequences = 2}, 4096).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(DeviceDecoder::MaxPositionsFor(*m, kBf16, {.max_sequences = 0}, SIZE_MAX)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // The experts' tile by name: one both expert products can run, or refused.
  for (const char* tile : {"w4m9", "w2m8", "W4M8"}) {
    EXPECT_EQ(DeviceDecoder::MaxPositionsFor(*m, kBf16, {.max_sequences = 2, .expert_tile = tile},
                                             SIZE_MAX)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << tile;
  }
  for (const char* tile : {"", "auto", "w4m8", "w4m8s4", "w4m8s3", "w4m16s4", "w4m32", "w8m64"}) {
    EXPECT_TRUE(DeviceDecoder::MaxPositionsFor(*m, kBf16, {.max_sequences = 2, .expert_tile = tile},
                                               SIZE_MAX)
                    .ok())
        << tile;
  }
  // The sparse attention's tiles a range: any count, never negative.
  DeviceDecoderOptions ranged{.max_sequences = 2, .attention_wgmma = true};
  ranged.attention_range_tiles = -1;
  EXPECT_EQ(DeviceDecoder::MaxPositionsFor(*m, kBf16, ranged, SIZE_MAX).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (int tiles : {0, 1, 16, 1 << 20}) {
    ranged.attention_range_tiles = tiles;
    EXPECT_TRUE(DeviceDecoder::MaxPositionsFor(*m, kBf16, ranged, SIZE_MAX).ok()) << tiles;
  }
  // The staged attention's heads a block: 0, or a power of two up to 8
  // dividing the model's heads.
  const int heads = static_cast<int>(m->config().n_heads);
  for (int h : {-1, 3, 16, heads * 2}) {
    EXPECT_EQ(DeviceDecoder::MaxPositionsFor(
                  *m, kBf16, {.max_sequences = 2, .attention_heads_per_block = h}, SIZE_MAX)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << h;
  }
  for (int h : {0, 1, heads % 2 == 0 ? 2 : 1}) {
    EXPECT_TRUE(DeviceDecoder::MaxPositionsFor(
                    *m, kBf16, {.max_sequences = 2, .attention_heads_per_block = h}, SIZE_MAX)
                    .ok())
        << h;
  }
  // The experts' bf16 route: 4 or 8 widener warps (0: the kernel's).
  for (int warps : {-4, 2, 6, 16}) {
    DeviceDecoderOptions o{.max_sequences = 2};
    o.bf16_route_widener_warps = warps;
    EXPECT_EQ(DeviceDecoder::MaxPositionsFor(*m, kBf16, o, SIZE_MAX).status().code(),
              absl::StatusCode::kInvalidArgument)
        << warps;
  }
  for (int warps : {0, 4, 8}) {
    DeviceDecoderOptions o{.max_sequences = 2};
    o.bf16_route_widener_warps = warps;
    EXPECT_TRUE(DeviceDecoder::MaxPositionsFor(*m, kBf16, o, SIZE_MAX).ok()) << warps;
  }
  // Its consumer warpgroups: 0, 2 or 3.
  for (int groups : {-1, 0, 1, 2, 3, 4}) {
    DeviceDecoderOptions o{.max_sequences = 2};
    o.bf16_route_warpgroups = groups;
    EXPECT_EQ(DeviceDecoder::MaxPositionsFor(*m, kBf16, o, SIZE_MAX).ok(),
              groups == 0 || groups == 2 || groups == 3)
        << groups;
  }
  // Its X rows a CTA: 0, 128 or 256 (the 128-row tile outside the register
  // form), 80 only in the register form.
  for (int form = 0; form < 8; ++form) {
    DeviceDecoderOptions o{.max_sequences = 2};
    o.bf16_route_register_a = form % 2 == 1;
    o.bf16_route_x_rows = std::array<int, 4>{0, 80, 64, 256}[form / 2];
    const bool ok = o.bf16_route_x_rows == 0 || o.bf16_route_x_rows == 256 ||
                    (o.bf16_route_x_rows == 80 && o.bf16_route_register_a);
    EXPECT_EQ(DeviceDecoder::MaxPositionsFor(*m, kBf16, o, SIZE_MAX).ok(), ok) << form;
  }
  // The collapse-norms' CTAs a token: a cluster size the kernels have.
  for (int ranks : {-1, 3, 16}) {
    EXPECT_EQ(DeviceDecoder::MaxPositionsFor(
                  *m, kBf16, {.max_sequences = 2, .norm_cluster_ranks = ranks}, SIZE_MAX)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << ranks;
  }
  for (int ranks : {0, 1, 2, 4, 8}) {
    EXPECT_TRUE(DeviceDecoder::MaxPositionsFor(
                    *m, kBf16, {.max_sequences = 2, .norm_cluster_ranks = ranks}, SIZE_MAX)
                    .ok())
        << ranks;
  }
  // ... and a block a token's threads: 0, 256 or 1,024.
  for (int threads : {0, 256, 1024, 128, 512, -1}) {
    EXPECT_EQ(DeviceDecoder::MaxPositionsFor(
                  *m, kBf16, {.max_sequences = 2, .norm_block_threads = threads}, SIZE_MAX)
                  .ok(),
              threads == 0 || threads == 256 || threads == 1024)
        << threads;
  }
  // The twenty-second session's sizes: tile rows a conversion CTA walks (at
  // least one), the in-block gate's and the parallel compressor's thresholds
  // (never negative).
  DeviceDecoderOptions sized{.max_sequences = 2};
  EXPECT_TRUE(DeviceDecoder::MaxPositionsFor(*m, kBf16, sized, SIZE_MAX).ok());
  for (auto edit : {+[](DeviceDecoderOptions& o) { o.tile_conversion_rows = 0; },
                    +[](DeviceDecoderOptions& o) { o.gate_logits_in_block_macs = -1; },
                    +[](DeviceDecoderOptions& o) { o.parallel_compressor_rows = -1; }}) {
    DeviceDecoderOptions bad = sized;
    edit(bad);
    EXPECT_EQ(DeviceDecoder::MaxPositionsFor(*m, kBf16, bad, SIZE_MAX).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace weir::model
