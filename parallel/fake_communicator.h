// parallel/fake_communicator.h
//
// FakeCommunicator: N ranks inside one process, each driven by its own
// thread, exchanging messages through shared in-memory mailboxes. It has the
// exact semantics of the host Communicator contract (same algorithms and
// reduction order as UcxCommunicator), so higher layers can test their
// distributed logic without processes or a network.
//
//   auto comms = FakeCommunicator::CreateWorld(4, {.timeout = absl::Seconds(2)});
//   std::vector<absl::Status> st = RunOnRankThreads(comms, [&](Communicator& c) {
//     return c.AllReduce(in[c.rank().value()], out[c.rank().value()], n,
//                        DataType::kFloat32, ReduceOp::kSum);
//   });
//
// Thread safety: each FakeCommunicator is used by one thread at a time; the
// communicators of one world may be used concurrently (that is the point).
// Kill() may be called from any thread.

#ifndef WEIR_PARALLEL_FAKE_COMMUNICATOR_H_
#define WEIR_PARALLEL_FAKE_COMMUNICATOR_H_

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "parallel/point_to_point_communicator.h"

namespace weir::parallel {

struct FakeOptions {
  // How long one operation waits for its messages before UNAVAILABLE.
  absl::Duration timeout = absl::Seconds(10);
};

class FakeFabric;  // mailboxes shared by the ranks of one world

class FakeCommunicator final : public PointToPointCommunicator {
 public:
  // Returns `world_size` communicators, element r being rank r.
  // REQUIRES: world_size >= 1 (checked).
  static std::vector<std::unique_ptr<FakeCommunicator>> CreateWorld(int world_size,
                                                                    const FakeOptions& options);

  ~FakeCommunicator() override;

  // Simulates this rank's process dying: its later operations return
  // UNAVAILABLE, sends to it fail, and peers waiting for its messages get
  // UNAVAILABLE at once (without waiting for the timeout). Irreversible.
  void Kill();

 protected:
  absl::Status Exchange(std::span<const Transfer> transfers, const std::string& what) override;

 private:
  // The fabric is shared by every rank of the world; each rank's owner may
  // destroy its communicator at any time, so ownership is shared.
  FakeCommunicator(int rank, int world_size, std::shared_ptr<FakeFabric> fabric,
                   const FakeOptions& options);

  std::shared_ptr<FakeFabric> fabric_;
  FakeOptions options_;
};

// Runs fn(communicator) for every communicator on its own thread and returns
// the statuses, indexed by rank. Blocks until all threads have finished.
std::vector<absl::Status> RunOnRankThreads(std::span<const std::unique_ptr<FakeCommunicator>> comms,
                                           const std::function<absl::Status(Communicator&)>& fn);

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_FAKE_COMMUNICATOR_H_
