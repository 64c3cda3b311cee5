#include "base/strong_id.h"

#include <type_traits>
#include <unordered_set>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace weir {
namespace {

TEST(StrongIdTest, DefaultIsInvalid) {
  EXPECT_FALSE(Rank().valid());
  EXPECT_FALSE(RequestId().valid());
  EXPECT_TRUE(Rank(0).valid());
  EXPECT_TRUE(RequestId(0).valid());
}

TEST(StrongIdTest, OrdersAndHashesLikeTheValue) {
  EXPECT_LT(Rank(1), Rank(2));
  EXPECT_EQ(Rank(3), Rank(3));
  EXPECT_NE(Rank(3), Rank(4));
  absl::flat_hash_set<ExpertId> experts = {ExpertId(1), ExpertId(2), ExpertId(1)};
  EXPECT_EQ(experts.size(), 2u);
  std::unordered_set<BlockId> blocks = {BlockId(5), BlockId(5)};
  EXPECT_EQ(blocks.size(), 1u);
}

TEST(StrongIdTest, DistinctTagsAreDistinctTypes) {
  static_assert(!std::is_convertible_v<Rank, ExpertId>);
  static_assert(!std::is_convertible_v<int32_t, Rank>);
  static_assert(!std::is_convertible_v<Rank, int32_t>);
  EXPECT_EQ(Rank(9).value(), 9);
}

}  // namespace
}  // namespace weir
