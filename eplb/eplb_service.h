// eplb/eplb_service.h
//
// EplbService implements weir.v1.Eplb: workers' expert-load reports stream
// into a sliding window; every `rearrange_interval` complete report rounds
// the service hands a snapshot of the window to the Rebalancer, and GetState
// reports the window, the balance under the committed map (predicted from
// the routed counts and measured from the served rows), and the rebalancing
// history.
//
// Thread safety: gRPC calls it from many threads; the window is guarded by
// mu_, the rebalancer is thread-safe.

#ifndef WEIR_EPLB_EPLB_SERVICE_H_
#define WEIR_EPLB_EPLB_SERVICE_H_

#include <atomic>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "eplb/load_window.h"
#include "eplb/rebalancer.h"
#include "proto/eplb.grpc.pb.h"

namespace weir::eplb {

class EplbService final : public v1::Eplb::Service {
 public:
  // Keeps the last `window_size` reports. `rebalancer` (not owned, may be
  // null: no rearranging) must outlive the service.
  // REQUIRES: window_size >= 1.
  EplbService(int window_size, Rebalancer* rebalancer);

  // Sets the number of worker ranks (known after registration) and grows the
  // window to hold min_window_rounds + 1 rounds of them. Reports from ranks
  // outside it are refused; until it is set, every report is.
  void SetWorldSize(int world_size);

  // Reads reports until the stream ends. INVALID_ARGUMENT (the stream ends;
  // reports accepted so far stay) for a rank outside the world, a malformed
  // report or one whose shape differs from the window's.
  grpc::Status ReportLoad(grpc::ServerContext* context,
                          grpc::ServerReader<v1::LoadReport>* reader,
                          v1::ReportLoadResponse* response) override;
  grpc::Status GetState(grpc::ServerContext* context, const v1::GetEplbStateRequest* request,
                        v1::EplbState* response) override;

 private:
  // Adds one report; returns a snapshot when a rebalancing attempt is due.
  absl::StatusOr<std::optional<LoadSnapshot>> Accept(const v1::LoadReport& report)
      ABSL_LOCKS_EXCLUDED(mu_);

  Rebalancer* const rebalancer_;
  std::atomic<int> world_size_{0};
  absl::Mutex mu_;
  LoadWindow window_ ABSL_GUARDED_BY(mu_);
  uint64_t rounds_seen_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace weir::eplb

#endif  // WEIR_EPLB_EPLB_SERVICE_H_
