// parallel/fake_communicator_test.cc
//
// The Communicator contract through FakeCommunicator: collective semantics on
// random data (shared conformance checks), argument errors, timeouts and dead
// peers.

#include "parallel/fake_communicator.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/collective_checks.h"

namespace weir::parallel {
namespace {

using ::testing::HasSubstr;

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r)
    EXPECT_TRUE(statuses[r].ok()) << r << ": " << statuses[r];
}

TEST(FakeCommunicatorTest, EveryCollectiveMatchesTheContract) {
  for (int world : {1, 2, 3, 5, 8}) {
    auto comms = FakeCommunicator::CreateWorld(world, {.timeout = absl::Seconds(20)});
    ExpectAllOk(RunOnRankThreads(
        comms, [&](Communicator& c) { return CheckEveryCollective(c, 1000 + world); }));
  }
}

TEST(FakeCommunicatorTest, BarrierWaitsForEveryRank) {
  auto comms = FakeCommunicator::CreateWorld(6, {});
  std::atomic<int> entered{0};
  ExpectAllOk(RunOnRankThreads(comms, [&](Communicator& c) -> absl::Status {
    absl::SleepFor(absl::Milliseconds(5 * c.rank().value()));
    entered.fetch_add(1);
    absl::Status s = c.Barrier();
    if (s.ok() && entered.load() != 6) return absl::InternalError("left barrier early");
    return s;
  }));
}

TEST(FakeCommunicatorTest, RejectsBadArgumentsWithoutSending) {
  auto comms = FakeCommunicator::CreateWorld(2, {.timeout = absl::Milliseconds(100)});
  Communicator& c = *comms[0];
  std::vector<int64_t> one = {4}, two = {4, 4}, neg = {4, -1};
  std::vector<float> buf(16);
  EXPECT_EQ(c.AllToAllV({.send = buf.data(),
                         .send_counts = one,
                         .send_offsets = one,
                         .recv = buf.data(),
                         .recv_counts = two,
                         .recv_offsets = two})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AllToAllV({.send = buf.data(),
                         .send_counts = neg,
                         .send_offsets = two,
                         .recv = buf.data(),
                         .recv_counts = two,
                         .recv_offsets = two})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AllReduce(nullptr, buf.data(), 4, DataType::kFloat32, ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AllGather(buf.data(), buf.data(), -1, DataType::kFloat32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Broadcast(buf.data(), 4, DataType::kFloat32, Rank(2)).code(),
            absl::StatusCode::kInvalidArgument);
  const P2POp bad_peer{P2POp::Kind::kSend, Rank(5), buf.data(), 1};
  EXPECT_EQ(c.GroupSendRecv({&bad_peer, 1}).code(), absl::StatusCode::kInvalidArgument);
  const P2POp lonely_self{P2POp::Kind::kSend, Rank(0), buf.data(), 1};
  EXPECT_EQ(c.GroupSendRecv({&lonely_self, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Barrier({.memory = MemoryKind::kDevice}).code(), absl::StatusCode::kUnimplemented);
  // Nothing was sent and the communicator still works.
  ExpectAllOk(RunOnRankThreads(comms, [](Communicator& c) { return CheckEveryCollective(c, 7); }));
}

TEST(FakeCommunicatorTest, MissingPeerTimesOutNamingItAndBreaksTheCommunicator) {
  auto comms = FakeCommunicator::CreateWorld(3, {.timeout = absl::Milliseconds(200)});
  std::vector<absl::Status> st = RunOnRankThreads(comms, [](Communicator& c) -> absl::Status {
    if (c.rank() == Rank(2)) return absl::OkStatus();  // never joins
    float x = 1;
    const absl::Time start = absl::Now();
    absl::Status s = c.AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    // The timeout never fires early; the upper bound only catches a hang.
    const absl::Duration took = absl::Now() - start;
    if (took < absl::Milliseconds(200)) return absl::InternalError("timed out early");
    if (took > absl::Seconds(60)) return absl::InternalError("hung");
    return s;
  });
  for (int r : {0, 1}) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kUnavailable) << st[r];
    EXPECT_THAT(st[r].message(), HasSubstr("all_reduce #1"));
    EXPECT_THAT(st[r].message(), HasSubstr("2"));
  }
  EXPECT_EQ(comms[0]->Barrier().code(), absl::StatusCode::kUnavailable);
}

TEST(FakeCommunicatorTest, KilledPeerFailsWaitersBeforeTheTimeout) {
  // A timeout no loaded machine reaches: the waiters must be woken by the kill.
  auto comms = FakeCommunicator::CreateWorld(4, {.timeout = absl::Seconds(600)});
  std::vector<absl::Status> st = RunOnRankThreads(comms, [&](Communicator& c) -> absl::Status {
    if (c.rank() == Rank(3)) {
      absl::SleepFor(absl::Milliseconds(50));
      comms[3]->Kill();
      return absl::OkStatus();
    }
    std::vector<int64_t> v(64, c.rank().value());
    const absl::Time start = absl::Now();
    absl::Status s = c.AllGather(v.data(), std::vector<int64_t>(256).data(), 64, DataType::kInt64);
    if (absl::Now() - start > absl::Seconds(300)) return absl::InternalError("waited for timeout");
    return s;
  });
  for (int r : {0, 1, 2}) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kUnavailable) << st[r];
    EXPECT_THAT(st[r].message(), HasSubstr("3"));
  }
}

TEST(FakeCommunicatorTest, PeerSizeMismatchIsInvalidArgument) {
  auto comms = FakeCommunicator::CreateWorld(2, {.timeout = absl::Seconds(5)});
  std::vector<absl::Status> st = RunOnRankThreads(comms, [](Communicator& c) {
    std::vector<uint8_t> buf(8);
    const int64_t count = c.rank() == Rank(0) ? 8 : 4;  // ranks disagree
    return c.Broadcast(buf.data(), count, DataType::kUint8, Rank(0));
  });
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_EQ(st[1].code(), absl::StatusCode::kInvalidArgument) << st[1];
  EXPECT_EQ(comms[1]->Barrier().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace weir::parallel
