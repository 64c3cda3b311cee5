// parallel/ucx_communicator_test.cc
//
// UcxCommunicator between real processes: each test forks N ranks that
// exchange worker addresses through files in TEST_TMPDIR, connect, and run
// the shared conformance checks (random data, results computed locally), or
// lose a peer and must fail with UNAVAILABLE within the timeout, or are
// aborted (AbortSignal) while waiting for a silent peer.

#include "parallel/ucx_communicator.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/abort_signal.h"
#include "parallel/collective_checks.h"
#include "parallel/file_rendezvous.h"
#include "parallel/fork_ranks.h"

namespace weir::parallel {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;

// How much later than its timeout a failure may come before a test calls it a
// hang: generous, so that a loaded machine never fails a test by being slow
// (ForkRanks gives the ranks 50 s in all).
constexpr absl::Duration kHangDeadline = absl::Seconds(30);

std::string FreshDir() {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(root != nullptr ? root : "/tmp", "/ucxXXXXXX");
  char* made = mkdtemp(pattern.data());
  return made != nullptr ? std::string(made) : std::string();
}

int Fail(int rank, const absl::Status& status) {
  std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
  return 1;
}

// The rank list of an UNAVAILABLE message: "...; waiting for ranks 1, 3 (...)".
std::string WaitingFor(const absl::Status& status) {
  const std::string message(status.message());
  const std::string key = "waiting for ranks ";
  const size_t begin = message.find(key);
  if (begin == std::string::npos) return "";
  const size_t end = message.find(" (", begin);
  return message.substr(begin + key.size(),
                        end == std::string::npos ? std::string::npos : end - begin - key.size());
}

// Runs body(comm) on `world` forked ranks connected over UCX with
// `transports`; returns the exit code of every rank (0 = body returned OK).
std::vector<int> RunUcxRanks(int world, const std::string& transports, absl::Duration timeout,
                             const std::function<absl::Status(UcxCommunicator&)>& body) {
  const std::string dir = FreshDir();
  EXPECT_FALSE(dir.empty());
  absl::StatusOr<std::vector<int>> outcome = ForkRanks(
      world,
      [&](int rank) {
        absl::StatusOr<std::unique_ptr<UcxContext>> ctx =
            UcxContext::Create({.transports = transports});
        if (!ctx.ok()) return Fail(rank, ctx.status());
        absl::StatusOr<std::vector<std::string>> table =
            ExchangeThroughDirectory(dir, rank, world, (*ctx)->address(), absl::Seconds(20));
        if (!table.ok()) return Fail(rank, table.status());
        absl::StatusOr<std::unique_ptr<UcxCommunicator>> comm = UcxCommunicator::Create(
            **ctx, Rank(rank), *table,
            {.timeout = timeout,
             // UCX 1.13 shared memory has no peer error handling.
             .peer_failure_detection = transports.find("tcp") != std::string::npos});
        if (!comm.ok()) return Fail(rank, comm.status());
        const absl::Status status = body(**comm);
        comm->reset();
        return status.ok() ? 0 : Fail(rank, status);
      },
      absl::Seconds(50));
  EXPECT_TRUE(outcome.ok()) << outcome.status();
  return outcome.ok() ? *outcome : std::vector<int>(world, -1);
}

class UcxCollectivesTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(UcxCollectivesTest, EveryCollectiveMatchesTheContract) {
  const auto& [world, transports] = GetParam();
  EXPECT_THAT(RunUcxRanks(world, transports, absl::Seconds(20),
                          [](UcxCommunicator& c) { return CheckEveryCollective(c, 42); }),
              Each(0));
}

TEST_P(UcxCollectivesTest, LargeBlocksUseEveryProtocol) {
  const auto& [world, transports] = GetParam();
  EXPECT_THAT(RunUcxRanks(world, transports, absl::Seconds(20),
                          [](UcxCommunicator& c) -> absl::Status {
                            // Up to 1 MiB per peer: beyond every eager threshold.
                            RETURN_IF_ERROR(CheckAllToAllV(c, 7, 1 << 18));
                            return CheckAllReduce(c, 8, DataType::kFloat32, ReduceOp::kSum,
                                                  (1 << 18) + 3, /*in_place=*/true);
                          }),
              Each(0));
}

INSTANTIATE_TEST_SUITE_P(Worlds, UcxCollectivesTest,
                         ::testing::Combine(::testing::Values(2, 4, 8),
                                            ::testing::Values("tcp,self", "sm,self")),
                         [](const auto& info) {
                           std::string tls = std::get<1>(info.param);
                           return absl::StrCat("world", std::get<0>(info.param), "_",
                                               tls.substr(0, tls.find(',')));
                         });

TEST(UcxCommunicatorTest, BarrierWaitsForEveryProcess) {
  const std::string dir = FreshDir();
  EXPECT_THAT(RunUcxRanks(4, "tcp,self", absl::Seconds(20),
                          [&](UcxCommunicator& c) -> absl::Status {
                            const int me = c.rank().value();
                            absl::SleepFor(absl::Milliseconds(40 * me));
                            std::ofstream(absl::StrCat(dir, "/entered.", me)).put('x');
                            RETURN_IF_ERROR(c.Barrier());
                            for (int r = 0; r < c.world_size(); ++r) {
                              if (!std::ifstream(absl::StrCat(dir, "/entered.", r)).is_open()) {
                                return absl::InternalError(absl::StrCat("left before ", r));
                              }
                            }
                            return absl::OkStatus();
                          }),
              Each(0));
}

// Rank 3 dies (SIGKILL) while the others are inside an all-to-all-v with it.
TEST(UcxCommunicatorTest, KilledPeerMakesCollectivesUnavailableWithinTheTimeout) {
  for (const char* transports : {"tcp,self", "sm,self"}) {
    SCOPED_TRACE(transports);
    const absl::Duration timeout = absl::Seconds(2);
    std::vector<int> outcome =
        RunUcxRanks(4, transports, timeout, [&](UcxCommunicator& c) -> absl::Status {
          RETURN_IF_ERROR(c.Barrier());
          if (c.rank() == Rank(3)) raise(SIGKILL);
          const int n = c.world_size();
          std::vector<int64_t> counts(n, 1 << 18), offsets(n);
          for (int p = 0; p < n; ++p) offsets[p] = p * counts[p];
          std::vector<float> send(n << 18, 1.0f), recv(n << 18);
          const absl::Time start = absl::Now();
          absl::Status s = c.AllToAllV({.send = send.data(),
                                        .send_counts = counts,
                                        .send_offsets = offsets,
                                        .recv = recv.data(),
                                        .recv_counts = counts,
                                        .recv_offsets = offsets,
                                        .dtype = DataType::kFloat32});
          const absl::Duration took = absl::Now() - start;
          if (!absl::IsUnavailable(s))
            return absl::InternalError(absl::StrCat("got ", s.ToString()));
          // Not a timing check: only a hang (the kill never noticed) fails it.
          if (took > timeout + kHangDeadline) {
            return absl::InternalError(absl::StrCat("took ", absl::FormatDuration(took)));
          }
          std::fprintf(stderr, "rank %d: failed after %s: %s\n", c.rank().value(),
                       absl::FormatDuration(took).c_str(), s.ToString().c_str());
          if (WaitingFor(s) != "3") {
            return absl::InternalError(absl::StrCat("peer not named: ", s.ToString()));
          }
          // Broken from now on: fails at once.
          if (!absl::IsUnavailable(c.Barrier()))
            return absl::InternalError("barrier after failure");
          return absl::OkStatus();
        });
    EXPECT_THAT(outcome, ElementsAre(0, 0, 0, 128 + SIGKILL));
  }
}

// Rank 2 is alive but never joins: the others must give up after the timeout
// (never before it), naming rank 2. Rank 2 stays alive until both have
// checked their failure (a file each in `done`), so that no exit of rank 2
// can end their wait first, however slowly a loaded machine runs them.
TEST(UcxCommunicatorTest, HungPeerTimesOutNamingIt) {
  const absl::Duration timeout = absl::Milliseconds(800);
  const std::string done = FreshDir();
  ASSERT_FALSE(done.empty());
  auto done_file = [&](int rank) { return absl::StrCat(done, "/done", rank); };
  std::vector<int> outcome =
      RunUcxRanks(3, "tcp,self", timeout, [&](UcxCommunicator& c) -> absl::Status {
        RETURN_IF_ERROR(c.Barrier());
        if (c.rank() == Rank(2)) {
          const absl::Time give_up = absl::Now() + kHangDeadline;
          while (!(std::filesystem::exists(done_file(0)) &&
                   std::filesystem::exists(done_file(1)))) {
            if (absl::Now() > give_up) return absl::InternalError("the others never finished");
            absl::SleepFor(absl::Milliseconds(10));
          }
          return absl::OkStatus();
        }
        int64_t x = 5;
        const absl::Time start = absl::Now();
        absl::Status s = c.AllReduce(&x, &x, 1, DataType::kInt64, ReduceOp::kMax);
        const absl::Duration took = absl::Now() - start;
        std::ofstream(done_file(c.rank().value())) << "done\n";
        if (!absl::IsUnavailable(s)) return absl::InternalError(absl::StrCat("got ", s.ToString()));
        // A timeout never fires early; the upper bound only catches a hang.
        if (took < timeout || took > timeout + kHangDeadline) {
          return absl::InternalError(absl::StrCat("took ", absl::FormatDuration(took)));
        }
        if (WaitingFor(s) != "2") {
          return absl::InternalError(absl::StrCat("peer not named: ", s.ToString()));
        }
        return absl::OkStatus();
      });
  EXPECT_THAT(outcome, ElementsAre(0, 0, 0));
}

// Rank 1 is alive but never joins, and rank 0's all-reduce has a timeout far
// beyond the test's: only the abort, raised by another thread of rank 0, can
// end it (with ABORTED naming the reason and the rank it waited for). The
// communicator is broken afterwards and closes without waiting for rank 1.
TEST(UcxCommunicatorTest, AbortEndsABlockedCollective) {
  const std::string dir = FreshDir();
  ASSERT_FALSE(dir.empty());
  const std::string done = absl::StrCat(dir, "/done");
  AbortSignal group_over;  // each forked rank has its own copy
  absl::StatusOr<std::vector<int>> outcome = ForkRanks(
      2,
      [&](int rank) {
        absl::StatusOr<std::unique_ptr<UcxContext>> ctx =
            UcxContext::Create({.transports = "tcp,self"});
        if (!ctx.ok()) return Fail(rank, ctx.status());
        absl::StatusOr<std::vector<std::string>> table =
            ExchangeThroughDirectory(dir, rank, 2, (*ctx)->address(), absl::Seconds(20));
        if (!table.ok()) return Fail(rank, table.status());
        absl::StatusOr<std::unique_ptr<UcxCommunicator>> comm = UcxCommunicator::Create(
            **ctx, Rank(rank), *table,
            {.timeout = rank == 0 ? absl::Hours(1) : absl::Seconds(20),
             .abort = rank == 0 ? &group_over : nullptr});
        if (!comm.ok()) return Fail(rank, comm.status());
        if (absl::Status s = (*comm)->Barrier(); !s.ok()) return Fail(rank, s);
        if (rank == 1) {
          // Silent until rank 0 is done; its end is not what this test is about.
          const absl::Time give_up = absl::Now() + kHangDeadline;
          while (!std::filesystem::exists(done) && absl::Now() < give_up) {
            absl::SleepFor(absl::Milliseconds(10));
          }
          raise(SIGKILL);
        }
        std::thread aborter([&] {
          absl::SleepFor(absl::Milliseconds(300));  // most likely inside the wait by then
          group_over.Abort("the test ends the group");
        });
        int64_t x = 5;
        const absl::Time start = absl::Now();
        const absl::Status s = (*comm)->AllReduce(&x, &x, 1, DataType::kInt64, ReduceOp::kMax);
        const absl::Duration took = absl::Now() - start;
        aborter.join();
        std::ofstream(done) << "done\n";
        if (!absl::IsAborted(s)) return Fail(rank, absl::InternalError(s.ToString()));
        if (s.message().find("the test ends the group") == absl::string_view::npos ||
            WaitingFor(s) != "1") {
          return Fail(rank, absl::InternalError(absl::StrCat("message: ", s.ToString())));
        }
        // Not a timing check: without the abort the wait would last an hour.
        if (took > kHangDeadline) {
          return Fail(rank, absl::InternalError(absl::StrCat("took ", absl::FormatDuration(took))));
        }
        if (!absl::IsUnavailable((*comm)->Barrier())) {
          return Fail(rank, absl::InternalError("a barrier after the abort did not fail"));
        }
        comm->reset();  // force-closes: does not wait for the silent rank
        return 0;
      },
      absl::Seconds(50));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_THAT(*outcome, ElementsAre(0, 128 + SIGKILL));
}

TEST(UcxCommunicatorTest, CreateRejectsBadTables) {
  std::vector<int> outcome = *ForkRanks(
      1,
      [](int) {
        auto ctx = UcxContext::Create({.transports = "tcp,self"});
        if (!ctx.ok()) return Fail(0, ctx.status());
        const std::string mine = (*ctx)->address();
        const std::vector<std::string> good = {mine, mine + "x"};
        const std::vector<std::string> wrong_self = {"not an address", mine};
        const std::vector<std::string> empty;
        int bad = 0;
        for (auto [rank, table] : {std::pair{Rank(2), std::span<const std::string>(good)},
                                   std::pair{Rank(0), std::span<const std::string>(wrong_self)},
                                   std::pair{Rank(0), std::span<const std::string>(empty)}}) {
          auto comm = UcxCommunicator::Create(**ctx, rank, table, {});
          if (comm.status().code() != absl::StatusCode::kInvalidArgument) ++bad;
        }
        if (UcxContext::Create({.transports = "no_such_transport"}).ok()) ++bad;
        // A world of one needs no peers and works.
        auto solo = UcxCommunicator::Create(**ctx, Rank(0), std::span(&mine, 1), {});
        if (!solo.ok() || !CheckEveryCollective(**solo, 3).ok()) ++bad;
        return bad;
      },
      absl::Seconds(30));
  EXPECT_THAT(outcome, ElementsAre(0));
}

}  // namespace
}  // namespace weir::parallel
