#include "coordinator/speculation_flags.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

model::ModelConfig Tiny() {
  absl::StatusOr<model::ModelConfig> c = model::LoadModelConfig("models/random/tiny/config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : model::ModelConfig{};
}

absl::StatusOr<Speculation> Resolve(SpeculationFlags f, const model::ModelConfig& c) {
  return SpeculationFromFlags(f, c);
}

// The flag named in a refusal of `f`.
void ExpectRefused(const SpeculationFlags& f, const model::ModelConfig& c, std::string_view flag) {
  absl::StatusOr<Speculation> r = SpeculationFromFlags(f, c);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
      << f.mode << " " << f.num_draft_tokens;
  EXPECT_NE(std::string(r.status().message()).find(flag), std::string::npos) << r.status();
}

TEST(SpeculationFlagsTest, OffIsZeroAndDsparkDefaultsToTheBlock) {
  const model::ModelConfig c = Tiny();
  ASSERT_EQ(c.dspark_block_size, 5);
  const Speculation off = *Resolve({}, c);
  EXPECT_FALSE(off.on());
  EXPECT_EQ(off.dspark_drafts, 0);
  EXPECT_EQ(off.ngram_lookup, 0);
  EXPECT_EQ(off.max_draft_tokens(), 0);
  EXPECT_EQ(off.verify_length, "fixed");
  EXPECT_EQ(Resolve({.mode = "dspark"}, c)->dspark_drafts, 5);
  EXPECT_EQ(Resolve({.mode = "dspark", .num_draft_tokens = 1}, c)->dspark_drafts, 1);
  EXPECT_EQ(Resolve({.mode = "dspark", .num_draft_tokens = 5}, c)->dspark_drafts, 5);
}

TEST(SpeculationFlagsTest, BadValuesAreInvalidArgumentNamingTheFlag) {
  model::ModelConfig c = Tiny();
  ExpectRefused({.mode = "eagle"}, c, "--speculative");
  ExpectRefused({.mode = ""}, c, "--speculative");
  ExpectRefused({.mode = "DSPARK"}, c, "--speculative");
  ExpectRefused({.mode = "dspark", .num_draft_tokens = 6}, c, "--num_draft_tokens");
  ExpectRefused({.mode = "dspark", .num_draft_tokens = -1}, c, "--num_draft_tokens");
  ExpectRefused({.mode = "off", .num_draft_tokens = 3}, c, "--num_draft_tokens");
  c.n_mtp_layers = 0;
  ExpectRefused({.mode = "dspark"}, c, "--speculative=dspark");
}

TEST(SpeculationFlagsTest, VerifyLengthConfidenceNeedsSpeculation) {
  const model::ModelConfig c = Tiny();
  for (const char* mode : {"off", "dspark", "ngram"}) {
    EXPECT_EQ(Resolve({.mode = mode}, c)->verify_length, "fixed") << mode;
    EXPECT_EQ(Resolve({.mode = mode, .verify_length = "fixed"}, c)->verify_length, "fixed");
    ExpectRefused({.mode = mode, .verify_length = "longest"}, c, "--verify_length");
  }
  EXPECT_EQ(Resolve({.mode = "dspark", .verify_length = "confidence"}, c)->verify_length,
            "confidence");
  EXPECT_EQ(Resolve({.mode = "ngram", .verify_length = "confidence"}, c)->verify_length,
            "confidence");
  ExpectRefused({.mode = "off", .verify_length = "confidence"}, c, "--verify_length");
}

TEST(SpeculationFlagsTest, MaxBatchNeedsSpeculationAndIsNotNegative) {
  const model::ModelConfig c = Tiny();
  EXPECT_EQ(Resolve({.mode = "off"}, c)->max_batch, 0);
  EXPECT_EQ(Resolve({.mode = "dspark", .max_batch = 4}, c)->max_batch, 4);
  EXPECT_EQ(Resolve({.mode = "ngram", .max_batch = 4}, c)->max_batch, 4);
  ExpectRefused({.mode = "dspark", .max_batch = -1}, c, "--speculative_max_batch");
  ExpectRefused({.mode = "off", .max_batch = 4}, c, "--speculative_max_batch");
}

// --ngram_lookup: unset means 3 with speculation on and off without it; 0
// turns it off beside DSpark and is refused alone; out of range, or set with
// speculation off, is refused.
TEST(SpeculationFlagsTest, NgramLookup) {
  const model::ModelConfig c = Tiny();
  EXPECT_EQ(Resolve({.mode = "dspark"}, c)->ngram_lookup, kDefaultNgramLookup);
  EXPECT_EQ(Resolve({.mode = "ngram"}, c)->ngram_lookup, kDefaultNgramLookup);
  EXPECT_EQ(Resolve({.mode = "off"}, c)->ngram_lookup, 0);
  EXPECT_EQ(Resolve({.mode = "dspark", .ngram_lookup = 0}, c)->ngram_lookup, 0);
  EXPECT_EQ(Resolve({.mode = "dspark", .ngram_lookup = 2}, c)->ngram_lookup, 2);
  EXPECT_EQ(Resolve({.mode = "off", .ngram_lookup = 0}, c)->ngram_lookup, 0);
  for (int bad : {-2, worker::kMaxNgramMatch + 1}) {
    ExpectRefused({.mode = "dspark", .ngram_lookup = bad}, c, "--ngram_lookup");
  }
  ExpectRefused({.mode = "off", .ngram_lookup = 3}, c, "--ngram_lookup");
  ExpectRefused({.mode = "ngram", .ngram_lookup = 0}, c, "--ngram_lookup");
}

// --ngram_lookup_max: the longest match tried first, in [match length, 16];
// unset it is the match length.
TEST(SpeculationFlagsTest, NgramLookupMax) {
  const model::ModelConfig c = Tiny();
  const Speculation dspark = *Resolve({.mode = "dspark"}, c);
  EXPECT_EQ(dspark.ngram_lookup, kDefaultNgramLookup);
  EXPECT_EQ(dspark.ngram_lookup_max, kDefaultNgramLookup);
  const Speculation ranged = *Resolve({.mode = "dspark", .ngram_lookup_max = 5}, c);
  EXPECT_EQ(ranged.ngram_lookup, kDefaultNgramLookup);
  EXPECT_EQ(ranged.ngram_lookup_max, 5);
  const Speculation alone = *Resolve({.mode = "ngram"}, c);
  EXPECT_EQ(alone.ngram_lookup, kDefaultNgramLookup);
  EXPECT_EQ(alone.ngram_lookup_max, kDefaultNgramLookup);
  const Speculation one_to_four =
      *Resolve({.mode = "ngram", .ngram_lookup = 1, .ngram_lookup_max = 4}, c);
  EXPECT_EQ(one_to_four.ngram_lookup, 1);
  EXPECT_EQ(one_to_four.ngram_lookup_max, 4);
  EXPECT_EQ(Resolve({.mode = "off"}, c)->ngram_lookup_max, 0);
  for (int bad : {-1, worker::kMaxNgramMatch + 1}) {
    ExpectRefused({.mode = "dspark", .ngram_lookup_max = bad}, c, "--ngram_lookup_max");
  }
  ExpectRefused({.mode = "dspark", .ngram_lookup = 3, .ngram_lookup_max = 2}, c,
                "--ngram_lookup_max");
  ExpectRefused({.mode = "dspark", .ngram_lookup = 0, .ngram_lookup_max = 4}, c,
                "--ngram_lookup_max");
  ExpectRefused({.mode = "off", .ngram_lookup_max = 4}, c, "--ngram_lookup_max");
}

// --ngram_lookup_tokens: in [0, 16], only with lookup beside DSpark; the
// rows are booked for the longer of DSpark's drafts and a lookup's.
TEST(SpeculationFlagsTest, NgramLookupTokens) {
  const model::ModelConfig c = Tiny();
  const Speculation longer = *Resolve({.mode = "dspark", .ngram_lookup_tokens = 8}, c);
  EXPECT_EQ(longer.lookup_tokens, 8);
  EXPECT_EQ(longer.max_draft_tokens(), 8);
  EXPECT_EQ(Resolve({.mode = "dspark"}, c)->max_draft_tokens(), 5);
  EXPECT_EQ(Resolve({.mode = "dspark", .ngram_lookup_tokens = 4}, c)->max_draft_tokens(), 5);
  EXPECT_EQ(Resolve({.mode = "dspark", .ngram_lookup = 0}, c)->max_draft_tokens(), 5);
  for (int bad : {-1, worker::kMaxNgramMatch + 1}) {
    ExpectRefused({.mode = "dspark", .ngram_lookup_tokens = bad}, c, "--ngram_lookup_tokens");
  }
  ExpectRefused({.mode = "dspark", .ngram_lookup = 0, .ngram_lookup_tokens = 8}, c,
                "--ngram_lookup_tokens");
  ExpectRefused({.mode = "off", .ngram_lookup_tokens = 8}, c, "--ngram_lookup_tokens");
}

// --speculative=ngram: lookup alone, no DSpark drafts, on a model with stages
// or without; --num_draft_tokens is a lookup's tokens (0: 5, at most 16).
TEST(SpeculationFlagsTest, NgramAloneOnAnyModel) {
  model::ModelConfig c = Tiny();
  for (int stages : {3, 0}) {
    c.n_mtp_layers = stages;
    const Speculation s = *Resolve({.mode = "ngram"}, c);
    EXPECT_TRUE(s.on());
    EXPECT_EQ(s.dspark_drafts, 0);
    EXPECT_EQ(s.ngram_lookup, kDefaultNgramLookup);
    EXPECT_EQ(s.lookup_tokens, kDefaultLookupTokens);
    EXPECT_EQ(s.max_draft_tokens(), kDefaultLookupTokens);
    const Speculation longer =
        *Resolve({.mode = "ngram", .num_draft_tokens = 12, .ngram_lookup = 2}, c);
    EXPECT_EQ(longer.lookup_tokens, 12);
    EXPECT_EQ(longer.ngram_lookup, 2);
    EXPECT_EQ(longer.max_draft_tokens(), 12);
    ExpectRefused({.mode = "ngram", .num_draft_tokens = 17}, c, "--num_draft_tokens");
    ExpectRefused({.mode = "ngram", .num_draft_tokens = -1}, c, "--num_draft_tokens");
    ExpectRefused({.mode = "ngram", .ngram_lookup_tokens = 8}, c, "--ngram_lookup_tokens");
  }
}

// CPU workers measure the curve at load when the model directory has none;
// CUDA workers always measure their own (not this flag).
TEST(SpeculationFlagsTest, CpuWorkersMeasureWithoutACostCurve) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/verify_length_flags";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir + "/verify_cost.json");
  EXPECT_TRUE(MeasureVerifyCost("confidence", "cpu", dir));
  EXPECT_FALSE(MeasureVerifyCost("fixed", "cpu", dir));
  EXPECT_FALSE(MeasureVerifyCost("confidence", "cuda", dir));
  std::ofstream(dir + "/verify_cost.json") << "{}";
  EXPECT_FALSE(MeasureVerifyCost("confidence", "cpu", dir));
}

}  // namespace
}  // namespace weir::coordinator
