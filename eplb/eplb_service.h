// eplb/eplb_service.h
//
// EplbService implements weir.v1.Eplb: workers stream expert-load reports
// into a sliding window, and GetState reports the window, the balance ratio
// under the current placement, and the map version.
//
// Thread safety: gRPC calls it from many threads; the window is guarded by mu_.

#ifndef WEIR_EPLB_EPLB_SERVICE_H_
#define WEIR_EPLB_EPLB_SERVICE_H_

#include <atomic>

#include "absl/synchronization/mutex.h"
#include "eplb/load_window.h"
#include "proto/eplb.grpc.pb.h"

namespace weir::eplb {

class EplbService final : public v1::Eplb::Service {
 public:
  explicit EplbService(int window_size);

  // Sets the number of worker ranks (known after registration). Reports
  // from ranks outside it are refused; until it is set, every report is.
  void SetWorldSize(int world_size) { world_size_.store(world_size); }

  grpc::Status ReportLoad(grpc::ServerContext* context,
                          grpc::ServerReader<v1::LoadReport>* reader,
                          v1::ReportLoadResponse* response) override;
  grpc::Status GetState(grpc::ServerContext* context, const v1::GetEplbStateRequest* request,
                        v1::EplbState* response) override;

 private:
  std::atomic<int> world_size_{0};
  absl::Mutex mu_;
  LoadWindow window_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::eplb

#endif  // WEIR_EPLB_EPLB_SERVICE_H_
