#include "base/status_macros.h"

#include <memory>

#include "gtest/gtest.h"

namespace weir {
namespace {

absl::Status Fails() { return absl::InvalidArgumentError("bad shape"); }
absl::Status Succeeds() { return absl::OkStatus(); }
absl::StatusOr<std::unique_ptr<int>> MakeInt(bool ok) {
  if (!ok) return absl::NotFoundError("no int");
  return std::make_unique<int>(7);
}

absl::Status Chain(bool fail_first, int* reached) {
  RETURN_IF_ERROR(fail_first ? Fails() : Succeeds());
  *reached = 1;
  RETURN_IF_ERROR(Fails()) << "while loading tensor " << 3;
  *reached = 2;
  return absl::OkStatus();
}

absl::StatusOr<int> Unwrap(bool ok) {
  ASSIGN_OR_RETURN(std::unique_ptr<int> value, MakeInt(ok));  // move-only value
  ASSIGN_OR_RETURN(auto again, MakeInt(true));
  return *value + *again;
}

TEST(StatusMacrosTest, ReturnIfErrorStopsAtFirstError) {
  int reached = 0;
  absl::Status status = Chain(/*fail_first=*/true, &reached);
  EXPECT_EQ(reached, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "bad shape");
}

TEST(StatusMacrosTest, StreamedContextIsAppended) {
  int reached = 0;
  absl::Status status = Chain(/*fail_first=*/false, &reached);
  EXPECT_EQ(reached, 1);
  EXPECT_EQ(status.message(), "bad shape; while loading tensor 3");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatusMacrosTest, AssignOrReturnUnwrapsAndPropagates) {
  EXPECT_EQ(*Unwrap(true), 14);
  absl::StatusOr<int> failed = Unwrap(false);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kNotFound);
}

// The macro is one statement: under an unbraced if it neither swallows the
// if's own else nor runs when the condition is false.
absl::Status Guarded(bool check, bool fail, int* branch) {
  if (check)
    RETURN_IF_ERROR(fail ? Fails() : Succeeds()) << "guarded";
  else
    *branch = 2;
  if (*branch == 0) *branch = 1;
  return absl::OkStatus();
}

TEST(StatusMacrosTest, UnbracedIfKeepsItsElse) {
  int branch = 0;
  EXPECT_EQ(Guarded(true, true, &branch).message(), "bad shape; guarded");
  EXPECT_EQ(branch, 0);
  EXPECT_TRUE(Guarded(true, false, &branch).ok());
  EXPECT_EQ(branch, 1);
  branch = 0;
  EXPECT_TRUE(Guarded(false, true, &branch).ok());
  EXPECT_EQ(branch, 2);
}

TEST(StatusMacrosTest, PayloadSurvivesContext) {
  auto with_payload = []() -> absl::Status {
    absl::Status s = absl::ResourceExhaustedError("full");
    s.SetPayload("weir/retry", absl::Cord("100ms"));
    return s;
  };
  auto wrapper = [&]() -> absl::Status {
    RETURN_IF_ERROR(with_payload()) << "admission";
    return absl::OkStatus();
  };
  absl::Status status = wrapper();
  ASSERT_TRUE(status.GetPayload("weir/retry").has_value());
  EXPECT_EQ(std::string(*status.GetPayload("weir/retry")), "100ms");
}

}  // namespace
}  // namespace weir
