// parallel/ucx_connect.cc
//
// UcxCommunicator's connection lifecycle: endpoint creation from the address
// table, wire-up, and closing. Message exchange is in ucx_communicator.cc.

#include <ucp/api/ucp.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "parallel/ucx_communicator.h"

namespace weir::parallel {

absl::StatusOr<std::unique_ptr<UcxCommunicator>> UcxCommunicator::Create(
    UcxContext& context, Rank rank, std::span<const std::string> table, const UcxOptions& options) {
  const int world = static_cast<int>(table.size());
  if (world < 1 || world > (1 << 16)) {
    return absl::InvalidArgumentError(absl::StrCat("address table of ", world, " ranks"));
  }
  if (rank.value() < 0 || rank.value() >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank.value(), " outside [0, ", world, ")"));
  }
  if (table[rank.value()] != context.address()) {
    return absl::InvalidArgumentError(
        absl::StrCat("address_table[", rank.value(), "] is not this context's address"));
  }
  if (options.channel < 0 || options.channel > 255) {
    return absl::InvalidArgumentError(absl::StrCat("channel ", options.channel));
  }
  std::unique_ptr<UcxCommunicator> comm(new UcxCommunicator(context, rank.value(), world, options));
  for (int p = 0; p < world; ++p) {
    Peer& peer = comm->peers_[p];
    peer.self = comm.get();
    peer.rank = p;
    if (p == rank.value()) continue;  // self blocks are local copies
    if (table[p].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("address_table[", p, "] is empty"));
    }
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(table[p].data());
    params.err_mode =
        options.peer_failure_detection ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    params.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t status) {
      Peer* failed = static_cast<Peer*>(arg);
      if (failed->failed) return;
      failed->failed = true;
      failed->failed_at = absl::Now();
      failed->error = ucs_status_string(status);
    };
    params.err_handler.arg = &peer;
    const ucs_status_t st = ucp_ep_create(context.worker(), &params, &peer.ep);
    if (st != UCS_OK) {
      peer.ep = nullptr;
      return absl::UnavailableError(
          absl::StrCat("endpoint to rank ", p, ": ", ucs_status_string(st)));
    }
  }
  RETURN_IF_ERROR(comm->WireUp());
  return comm;
}

absl::Status UcxCommunicator::WireUp() {
  // A zero-byte message each way between every pair (tag 0: no operation uses
  // op code 0), then a flush of every endpoint.
  std::vector<Transfer> transfers;
  for (int s = 1; s < world_size(); ++s) {
    const int me = rank().value();
    transfers.push_back({Transfer::Kind::kSend, (me + s) % world_size(), nullptr, 0, 0});
    transfers.push_back(
        {Transfer::Kind::kRecv, (me - s + world_size()) % world_size(), nullptr, 0, 0});
  }
  RETURN_IF_ERROR(Exchange(transfers, "connecting")) << "while wiring up rank " << rank().value();
  std::vector<std::pair<int, void*>> flushes;
  for (int p = 0; p < world_size(); ++p) {
    if (peers_[p].ep == nullptr) continue;
    ucp_request_param_t param{};
    void* request = ucp_ep_flush_nbx(peers_[p].ep, &param);
    if (UCS_PTR_IS_ERR(request)) {
      return absl::UnavailableError(absl::StrCat("flushing the endpoint to rank ", p, ": ",
                                                 ucs_status_string(UCS_PTR_STATUS(request))));
    }
    if (request != nullptr) flushes.emplace_back(p, request);
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::Status status;
  while (!flushes.empty()) {
    ucp_worker_progress(context_.worker());
    std::erase_if(flushes, [&](const std::pair<int, void*>& f) {
      const ucs_status_t st = ucp_request_check_status(f.second);
      if (st == UCS_INPROGRESS) return false;
      if (st != UCS_OK && status.ok()) {
        status = absl::UnavailableError(
            absl::StrCat("flushing the endpoint to rank ", f.first, ": ", ucs_status_string(st)));
      }
      ucp_request_free(f.second);
      return true;
    });
    if (!flushes.empty() && (absl::Now() > deadline || Aborted())) {
      for (auto& f : flushes) ucp_request_cancel(context_.worker(), f.second);
      if (Aborted()) {
        if (options_.peer_failure_detection) {
          for (int p = 0; p < world_size(); ++p) ForceClose(p);
        }
        return options_.abort->Check("connecting");
      }
      return absl::UnavailableError(
          absl::StrCat("flushing endpoints timed out, e.g. to rank ", flushes.front().first));
    }
  }
  return status;
}

UcxCommunicator::UcxCommunicator(UcxContext& context, int rank, int world_size,
                                 const UcxOptions& options)
    : PointToPointCommunicator(rank, world_size),
      context_(context),
      options_(options),
      peers_(new Peer[world_size]) {}

UcxCommunicator::~UcxCommunicator() {
  // Progressing could complete abandoned receives into freed buffers.
  if (!abandoned_requests_) CloseEndpoints();
}

void UcxCommunicator::CloseEndpoints() {
  ucp_worker_h worker = context_.worker();
  // An aborted group's peers may never answer a flush.
  const bool aborted = Aborted();
  std::vector<void*> requests;
  for (int p = 0; p < world_size(); ++p) {
    Peer& peer = peers_[p];
    if (peer.ep == nullptr) continue;
    ucp_request_param_t param{};
    // Force-closing is defined only with peer error handling on both sides.
    if (options_.peer_failure_detection && (peer.failed || aborted)) {
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    void* request = ucp_ep_close_nbx(peer.ep, &param);
    peer.ep = nullptr;
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) requests.push_back(request);
  }
  const absl::Time deadline = absl::Now() + (aborted ? absl::Seconds(1) : options_.timeout);
  while (!requests.empty()) {
    ucp_worker_progress(worker);
    std::erase_if(requests, [](void* r) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
      ucp_request_free(r);
      return true;
    });
    if (absl::Now() > deadline) {
      WEIR_LOG(WARNING) << "closing " << requests.size() << " UCX endpoints timed out";
      for (void* r : requests) ucp_request_free(r);  // released by UCX when done
      break;
    }
  }
}

void UcxCommunicator::ForceClose(int peer) {
  Peer& p = peers_[peer];
  if (p.ep == nullptr) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* request = ucp_ep_close_nbx(p.ep, &param);
  p.ep = nullptr;
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  while (ucp_request_check_status(request) == UCS_INPROGRESS && absl::Now() < deadline) {
    ucp_worker_progress(context_.worker());
  }
  ucp_request_free(request);  // released by UCX when done
}

}  // namespace weir::parallel
