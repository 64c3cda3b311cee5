// parallel/reduce_test.cc

#include "parallel/reduce.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::parallel {
namespace {

using ::testing::ElementsAre;

TEST(ReduceTest, SumMinMaxOverInt64) {
  std::vector<int64_t> acc = {1, -5, 7};
  const std::vector<int64_t> in = {2, -9, 3};
  ReduceInto(DataType::kInt64, ReduceOp::kSum, acc.data(), in.data(), 3);
  EXPECT_THAT(acc, ElementsAre(3, -14, 10));
  ReduceInto(DataType::kInt64, ReduceOp::kMin, acc.data(), in.data(), 3);
  EXPECT_THAT(acc, ElementsAre(2, -14, 3));
  acc = {1, -5, 7};
  ReduceInto(DataType::kInt64, ReduceOp::kMax, acc.data(), in.data(), 3);
  EXPECT_THAT(acc, ElementsAre(2, -5, 7));
}

TEST(ReduceTest, IntegerSumsWrap) {
  std::vector<int32_t> acc = {std::numeric_limits<int32_t>::max()};
  const std::vector<int32_t> in = {1};
  ReduceInto(DataType::kInt32, ReduceOp::kSum, acc.data(), in.data(), 1);
  EXPECT_EQ(acc[0], std::numeric_limits<int32_t>::min());
  std::vector<uint8_t> bytes = {250};
  const std::vector<uint8_t> more = {10};
  ReduceInto(DataType::kUint8, ReduceOp::kSum, bytes.data(), more.data(), 1);
  EXPECT_EQ(bytes[0], 4);
}

TEST(ReduceTest, FloatSumIsPlainAdditionAndNanNeverReplacesMinMax) {
  std::vector<float> acc = {1e8f, 0.5f};
  const std::vector<float> in = {1.0f, 0.25f};
  ReduceInto(DataType::kFloat32, ReduceOp::kSum, acc.data(), in.data(), 2);
  EXPECT_EQ(acc[0], 1e8f + 1.0f);  // rounding of one fp32 addition
  EXPECT_EQ(acc[1], 0.75f);
  std::vector<double> m = {2.0, 2.0};
  const std::vector<double> nan = {std::nan(""), -1.0};
  ReduceInto(DataType::kFloat64, ReduceOp::kMin, m.data(), nan.data(), 2);
  EXPECT_THAT(m, ElementsAre(2.0, -1.0));
  ReduceInto(DataType::kFloat64, ReduceOp::kMax, m.data(), nan.data(), 2);
  EXPECT_THAT(m, ElementsAre(2.0, -1.0));
}

TEST(ReduceTest, CountZeroTouchesNothing) {
  float acc = 3.0f;
  ReduceInto(DataType::kFloat32, ReduceOp::kSum, &acc, nullptr, 0);
  EXPECT_EQ(acc, 3.0f);
}

}  // namespace
}  // namespace weir::parallel
