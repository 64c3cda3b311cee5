// StepExecutor with a DecodeBackend, on the CPU: HostDecodeBackend decodes
// with the model itself, so every outcome must equal the executor without a
// backend, through imports, batches larger than the backend's max_batch,
// an export for a row of several tokens, a release and a reused slot, and a
// seeded stochastic row. A failed backend step fails that step only: the
// slots it held are broken until released, other slots go on. (On a GPU
// machine step_executor_gpu_test runs the same plans against DeviceDecoder.)
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/host_decode_backend.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/step_executor.h"

namespace weir::worker {
namespace {

struct Fixture {
  std::unique_ptr<model::Checkpoint> checkpoint;
  std::unique_ptr<model::Model> model;

  Fixture() {
    const std::string srcdir = std::getenv("TEST_SRCDIR");
    auto opened = model::GenerateAndOpenCheckpoint(srcdir + "/weir/models/tiny/config.json",
                                                   std::string(std::getenv("TEST_TMPDIR")) +
                                                       "/tiny_backend",
                                                   /*seed=*/4);
    EXPECT_TRUE(opened.ok()) << opened.status();
    checkpoint = std::move(*opened);
    auto created = model::Model::Create(checkpoint->config(), *checkpoint);
    EXPECT_TRUE(created.ok()) << created.status();
    model = std::move(*created);
  }
};

RowPlan Row(int32_t slot, int64_t start, std::vector<int64_t> tokens, int32_t remap = -1) {
  RowPlan row{.slot = slot, .start_pos = start, .tokens = std::move(tokens), .remap = remap,
              .sample = true, .return_top_k = 4};
  row.sampling.temperature = 0.0f;
  return row;
}

void ExpectSame(const std::vector<RowOutcome>& a, const std::vector<RowOutcome>& b, int step) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].status.ok()) << a[i].status;
    ASSERT_TRUE(b[i].status.ok()) << b[i].status;
    EXPECT_EQ(a[i].token, b[i].token) << "step " << step << " row " << i;
    EXPECT_EQ(std::memcmp(&a[i].logprob, &b[i].logprob, sizeof(float)), 0);
    EXPECT_EQ(a[i].top_ids, b[i].top_ids);
    ASSERT_EQ(a[i].top_logits.size(), b[i].top_logits.size());
    EXPECT_EQ(std::memcmp(a[i].top_logits.data(), b[i].top_logits.data(),
                          a[i].top_logits.size() * sizeof(float)),
              0)
        << "step " << step << " row " << i;
  }
}

TEST(StepExecutorBackendTest, DecodeRowsOnTheBackendGiveTheModelsOutcomes) {
  Fixture f;
  model::HostDecodeBackend backend(*f.model, /*max_sequences=*/4, /*max_batch=*/2,
                                   /*max_positions=*/40);
  StepExecutor host(*f.model, 4), dev(*f.model, 4);
  dev.SetDecodeBackend(&backend);
  int steps = 0;
  auto both = [&](const std::vector<RowPlan>& rows, const std::vector<int32_t>& release) {
    auto a = host.Execute(rows, release);
    auto b = dev.Execute(rows, release);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ExpectSame(*a, *b, steps++);
  };
  both({Row(0, 0, {5, 6, 7, 8, 9, 10}), Row(1, 0, {11, 12, 13}), Row(2, 0, {14})}, {});
  EXPECT_EQ(dev.device_rows(), 0);  // prefill stays on the model
  int64_t len[3] = {6, 3, 1};
  for (int s = 0; s < 5; ++s) {  // three decode rows, two backend steps each
    both({Row(0, len[0], {}, 0), Row(1, len[1], {}, 1), Row(2, len[2], {}, 2)}, {});
    for (int64_t& l : len) ++l;
  }
  EXPECT_EQ(dev.device_rows(), 15);
  EXPECT_EQ(backend.stats().imports, 3);
  EXPECT_EQ(backend.stats().steps, 10);
  // Three tokens on slot 2: its sequence comes back to the model first.
  both({Row(0, len[0], {}, 0), Row(1, len[1], {}, 1), Row(2, len[2], {21, 22, 23})}, {});
  len[0]++;
  len[1]++;
  len[2] += 3;
  EXPECT_EQ(backend.stats().exports, 1);
  EXPECT_FALSE(backend.holds(2));
  for (int s = 0; s < 3; ++s) {  // slot 2 is imported again
    both({Row(0, len[0], {}, 0), Row(1, len[1], {}, 1), Row(2, len[2], {}, 2)}, {});
    for (int64_t& l : len) ++l;
  }
  EXPECT_EQ(backend.stats().imports, 4);
  // Release slot 1, a new sequence there; a seeded stochastic row on slot 0.
  both({Row(1, 0, {30, 31, 32, 33})}, {1});
  EXPECT_FALSE(backend.holds(1));
  len[1] = 4;
  for (int s = 0; s < 4; ++s) {
    RowPlan r0 = Row(0, len[0], {}, s == 0 ? -1 : 0);
    if (s == 0) r0.tokens = {40};
    r0.sampling.temperature = 0.8f;
    r0.sampling.seed = 99;
    both({r0, Row(1, len[1], {}, s == 0 ? 0 : 1)}, {});
    ++len[0];
    ++len[1];
  }
  EXPECT_EQ(dev.device_rows(), 15 + 2 + 9 + 8);
}

TEST(StepExecutorBackendTest, SlotsBeyondTheBackendStayOnTheModel) {
  Fixture f;
  model::HostDecodeBackend backend(*f.model, /*max_sequences=*/4, /*max_batch=*/4,
                                   /*max_positions=*/8);
  StepExecutor dev(*f.model, 6);
  dev.SetDecodeBackend(&backend);
  // Slot 5 is past the backend's slots; slot 0 reaches its position limit.
  ASSERT_TRUE(dev.Execute({Row(0, 0, {1, 2, 3, 4, 5, 6}), Row(5, 0, {7, 8})}, {}).ok());
  int64_t l0 = 6, l5 = 2;
  for (int s = 0; s < 4; ++s) {
    auto out = dev.Execute({Row(0, l0, {}, 0), Row(5, l5, {}, 1)}, {});
    ASSERT_TRUE(out.ok()) << out.status();
    ++l0;
    ++l5;
  }
  // Slot 0 decoded on the backend at positions 6 and 7, then came back for
  // position 8, past the backend's limit; slot 5 was never imported.
  EXPECT_EQ(backend.stats().imports, 1);
  EXPECT_EQ(backend.stats().exports, 1);
  EXPECT_EQ(dev.device_rows(), 2);
}

TEST(StepExecutorBackendTest, AFailedBackendStepBreaksOnlyItsSlots) {
  Fixture f;
  model::HostDecodeBackend backend(*f.model, 4, 4, 64);
  StepExecutor dev(*f.model, 4);
  dev.SetDecodeBackend(&backend);
  ASSERT_TRUE(
      dev.Execute({Row(0, 0, {1, 2, 3}), Row(1, 0, {4, 5}), Row(2, 0, {6, 7, 8, 9})}, {}).ok());
  ASSERT_TRUE(dev.Execute({Row(0, 3, {}, 0), Row(1, 2, {}, 1)}, {}).ok());
  backend.fail_next_step();
  auto failed = dev.Execute({Row(0, 4, {10}), Row(1, 3, {11})}, {});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(backend.holds(0));
  // Slot 2 was not in the failed step: it goes on.
  auto other = dev.Execute({Row(2, 4, {12})}, {});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE((*other)[0].token.has_value());
  // Slot 0's sequence is gone (its host state is stale): refused, not wrong.
  EXPECT_FALSE(dev.Execute({Row(0, 4, {10})}, {}).ok());
  // Released and restarted, it serves again.
  auto again = dev.Execute({Row(0, 0, {1, 2, 3})}, {0});
  ASSERT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace weir::worker
