// parallel/fake_communicator.cc

#include "parallel/fake_communicator.h"

#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/logging.h"

namespace weir::parallel {

class FakeFabric {
 public:
  explicit FakeFabric(int world_size) : dead_(world_size, false) {}

  absl::Mutex mu;
  // (source, destination, tag) -> messages in send order.
  std::map<std::tuple<int, int, uint64_t>, std::deque<std::vector<std::byte>>> mailboxes
      ABSL_GUARDED_BY(mu);
  std::vector<bool> dead_ ABSL_GUARDED_BY(mu);
};

FakeCommunicator::FakeCommunicator(int rank, int world_size, std::shared_ptr<FakeFabric> fabric,
                                   const FakeOptions& options)
    : PointToPointCommunicator(rank, world_size), fabric_(std::move(fabric)), options_(options) {}

FakeCommunicator::~FakeCommunicator() = default;

std::vector<std::unique_ptr<FakeCommunicator>> FakeCommunicator::CreateWorld(
    int world_size, const FakeOptions& options) {
  WEIR_CHECK(world_size >= 1) << "world_size " << world_size;
  auto fabric = std::make_shared<FakeFabric>(world_size);
  std::vector<std::unique_ptr<FakeCommunicator>> comms;
  for (int r = 0; r < world_size; ++r) {
    comms.push_back(
        std::unique_ptr<FakeCommunicator>(new FakeCommunicator(r, world_size, fabric, options)));
  }
  return comms;
}

void FakeCommunicator::Kill() {
  absl::MutexLock lock(&fabric_->mu);
  fabric_->dead_[rank().value()] = true;
}

absl::Status FakeCommunicator::Exchange(std::span<const Transfer> transfers,
                                        const std::string& what) {
  const int me = rank().value();
  FakeFabric& f = *fabric_;
  absl::MutexLock lock(&f.mu);
  if (f.dead_[me]) return absl::UnavailableError(absl::StrCat(what, ": rank ", me, " is dead"));
  for (const Transfer& t : transfers) {
    if (t.kind != Transfer::Kind::kSend) continue;
    if (f.dead_[t.peer]) {
      return absl::UnavailableError(absl::StrCat(what, ": send to dead rank ", t.peer));
    }
    const auto* data = static_cast<const std::byte*>(t.data);
    f.mailboxes[{me, t.peer, t.tag}].emplace_back(data, data + t.bytes);
  }
  // Receives complete in the order given; each waits for its own message.
  const absl::Time deadline = absl::Now() + options_.timeout;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const Transfer& t = transfers[i];
    if (t.kind != Transfer::Kind::kRecv) continue;
    auto& box = f.mailboxes[{t.peer, me, t.tag}];
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(f.mu) { return !box.empty() || f.dead_[t.peer]; };
    f.mu.AwaitWithDeadline(absl::Condition(&ready), deadline);
    if (box.empty()) {
      std::vector<int> waiting;
      for (size_t j = i; j < transfers.size(); ++j) {
        if (transfers[j].kind == Transfer::Kind::kRecv &&
            f.mailboxes[{transfers[j].peer, me, transfers[j].tag}].empty()) {
          waiting.push_back(transfers[j].peer);
        }
      }
      return absl::UnavailableError(
          absl::StrCat(what, ": ", f.dead_[t.peer] ? "peer died" : "timed out",
                       "; waiting for ranks ", absl::StrJoin(waiting, ", ")));
    }
    std::vector<std::byte> message = std::move(box.front());
    box.pop_front();
    if (message.size() != t.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", t.peer, " sent ",
                                                     message.size(), " bytes, expected ", t.bytes));
    }
    if (t.bytes > 0) std::memcpy(t.data, message.data(), t.bytes);
  }
  return absl::OkStatus();
}

std::vector<absl::Status> RunOnRankThreads(std::span<const std::unique_ptr<FakeCommunicator>> comms,
                                           const std::function<absl::Status(Communicator&)>& fn) {
  std::vector<absl::Status> statuses(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] { statuses[r] = fn(*comms[r]); });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

}  // namespace weir::parallel
