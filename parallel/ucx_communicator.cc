// parallel/ucx_communicator.cc

#include "parallel/ucx_communicator.h"

#include <sched.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/status_macros.h"

namespace weir::parallel {
namespace {

// After UCX reports a peer's connection failed, its outstanding receives get
// this long for data already in flight before the operation gives up.
constexpr absl::Duration kFailedPeerGrace = absl::Milliseconds(200);
// Idle progress rounds before yielding the CPU (ranks may outnumber cores).
constexpr int kSpinsBeforeYield = 64;

void* NonNull(void* data) {
  static char dummy;
  return data != nullptr ? data : &dummy;
}

}  // namespace

struct UcxCommunicator::Pending {
  const Transfer* transfer = nullptr;
  void* request = nullptr;  // null once completed
  bool done = false;
  ucs_status_t status = UCS_OK;
  ucp_tag_recv_info_t info{};
};

absl::StatusOr<std::unique_ptr<UcxCommunicator>> UcxCommunicator::Create(
    UcxContext& context, Rank rank, std::span<const std::string> table,
    const UcxOptions& options) {
  const int world = static_cast<int>(table.size());
  if (world < 1 || world > (1 << 16)) {
    return absl::InvalidArgumentError(absl::StrCat("address table of ", world, " ranks"));
  }
  if (rank.value() < 0 || rank.value() >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank.value(), " outside [0, ", world, ")"));
  }
  if (table[rank.value()] != context.address()) {
    return absl::InvalidArgumentError(
        absl::StrCat("address_table[", rank.value(), "] is not this context's address"));
  }
  if (options.channel < 0 || options.channel > 255) {
    return absl::InvalidArgumentError(absl::StrCat("channel ", options.channel));
  }
  std::unique_ptr<UcxCommunicator> comm(
      new UcxCommunicator(context, rank.value(), world, options));
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
    params.err_mode = options.peer_failure_detection ? UCP_ERR_HANDLING_MODE_PEER
                                                     : UCP_ERR_HANDLING_MODE_NONE;
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
    transfers.push_back({Transfer::Kind::kRecv, (me - s + world_size()) % world_size(), nullptr, 0,
                         0});
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
        status = absl::UnavailableError(absl::StrCat("flushing the endpoint to rank ", f.first,
                                                     ": ", ucs_status_string(st)));
      }
      ucp_request_free(f.second);
      return true;
    });
    if (!flushes.empty() && absl::Now() > deadline) {
      for (auto& f : flushes) ucp_request_cancel(context_.worker(), f.second);
      return absl::UnavailableError(absl::StrCat("flushing endpoints timed out, e.g. to rank ",
                                                 flushes.front().first));
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
  std::vector<void*> requests;
  for (int p = 0; p < world_size(); ++p) {
    Peer& peer = peers_[p];
    if (peer.ep == nullptr) continue;
    ucp_request_param_t param{};
    // Force-closing is defined only with peer error handling on both sides.
    if (options_.peer_failure_detection && peer.failed) {
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    void* request = ucp_ep_close_nbx(peer.ep, &param);
    peer.ep = nullptr;
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) requests.push_back(request);
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
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

uint64_t UcxCommunicator::FullTag(int sender, uint64_t tag) const {
  return (static_cast<uint64_t>(sender) << 48) | (static_cast<uint64_t>(options_.channel) << 40) |
         tag;
}

absl::Status UcxCommunicator::Exchange(std::span<const Transfer> transfers,
                                       const std::string& what) {
  ucp_worker_h worker = context_.worker();
  const int me = rank().value();
  std::vector<Pending> pending(transfers.size());
  std::set<int> failed_peers;  // a transfer failed or the connection broke
  int remaining = 0;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const Transfer& t = transfers[i];
    Pending& p = pending[i];
    p.transfer = &t;
    ucp_request_param_t param{};
    void* request;
    if (t.kind == Transfer::Kind::kSend) {
      request = ucp_tag_send_nbx(peers_[t.peer].ep, NonNull(t.data), t.bytes, FullTag(me, t.tag),
                                 &param);
    } else {
      // Always get a request: UCX 1.13 does not fill recv_info on immediate
      // completion, and the received length must be checked.
      param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      request = ucp_tag_recv_nbx(worker, NonNull(t.data), t.bytes, FullTag(t.peer, t.tag),
                                 ~uint64_t{0}, &param);
    }
    if (request == nullptr) {
      p.done = true;
    } else if (UCS_PTR_IS_ERR(request)) {
      p.done = true;
      p.status = UCS_PTR_STATUS(request);
      failed_peers.insert(t.peer);
    } else {
      p.request = request;
      ++remaining;
    }
  }
  // Progress until every transfer is done or belongs to a failed peer. Transfers
  // with live peers keep going after a peer failed, so that the survivors of a
  // group finish their mutual messages and only the failed peer's endpoint has
  // to be torn down.
  const absl::Time deadline = absl::Now() + options_.timeout;
  bool timed_out = false;
  int idle = 0;
  while (true) {
    if (ucp_worker_progress(worker) == 0 && ++idle > kSpinsBeforeYield) {
      sched_yield();
      idle = 0;
    }
    const absl::Time now = absl::Now();
    int live_outstanding = 0;
    for (Pending& p : pending) {
      if (p.done) continue;
      const Transfer& t = *p.transfer;
      const ucs_status_t st = t.kind == Transfer::Kind::kSend
                                  ? ucp_request_check_status(p.request)
                                  : ucp_tag_recv_request_test(p.request, &p.info);
      if (st == UCS_INPROGRESS) {
        const Peer& peer = peers_[t.peer];
        if (peer.failed && now - peer.failed_at > kFailedPeerGrace) failed_peers.insert(t.peer);
        if (!failed_peers.contains(t.peer)) ++live_outstanding;
        continue;
      }
      ucp_request_free(p.request);
      p.request = nullptr;
      p.done = true;
      p.status = st;
      --remaining;
      if (st != UCS_OK && st != UCS_ERR_MESSAGE_TRUNCATED) failed_peers.insert(t.peer);
    }
    if (live_outstanding == 0) break;
    if (now > deadline) {
      timed_out = true;
      break;
    }
  }
  if (remaining > 0 || !failed_peers.empty()) {
    std::set<int> waiting = failed_peers;
    for (const Pending& p : pending) {
      if (!p.done) waiting.insert(p.transfer->peer);
    }
    std::vector<std::string> reasons;
    for (int r : waiting) {
      if (peers_[r].failed) reasons.push_back(absl::StrCat("rank ", r, ": ", peers_[r].error));
    }
    Abort(pending, waiting);
    return absl::UnavailableError(absl::StrCat(
        what, timed_out ? absl::StrCat(": timed out after ", absl::FormatDuration(options_.timeout))
                        : ": peer connection failed",
        "; waiting for ranks ", absl::StrJoin(waiting, ", "),
        reasons.empty() ? "" : absl::StrCat(" (", absl::StrJoin(reasons, "; "), ")")));
  }
  for (const Pending& p : pending) {
    const Transfer& t = *p.transfer;
    if (t.kind != Transfer::Kind::kRecv) continue;
    if (p.status == UCS_ERR_MESSAGE_TRUNCATED || p.info.length != t.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": rank ", t.peer, " sent ",
          p.status == UCS_ERR_MESSAGE_TRUNCATED ? "more than" : absl::StrCat(p.info.length),
          " bytes, expected ", t.bytes));
    }
  }
  return absl::OkStatus();
}

void UcxCommunicator::Abort(std::vector<Pending>& pending, const std::set<int>& peers) {
  ucp_worker_h worker = context_.worker();
  for (Pending& p : pending) {
    if (!p.done) ucp_request_cancel(worker, p.request);
  }
  // Sends (and matched receives) cannot be cancelled; force-closing the
  // endpoints completes them with an error. The communicator is broken now.
  if (options_.peer_failure_detection) {
    for (int r : peers) ForceClose(r);
  }
  // Force-closed requests complete at once; without it, give in-flight
  // messages a moment before abandoning what is left.
  const absl::Time deadline =
      absl::Now() + (options_.peer_failure_detection ? absl::Seconds(1) : kFailedPeerGrace);
  bool outstanding = true;
  while (outstanding && absl::Now() < deadline) {
    ucp_worker_progress(worker);
    outstanding = false;
    for (Pending& p : pending) {
      if (p.done) continue;
      if (ucp_request_check_status(p.request) == UCS_INPROGRESS) {
        outstanding = true;
        continue;
      }
      ucp_request_free(p.request);
      p.done = true;
    }
  }
  for (Pending& p : pending) {
    if (p.done) continue;
    WEIR_LOG(WARNING) << "abandoning a UCX request to rank " << p.transfer->peer;
    ucp_request_free(p.request);  // UCX releases it if it ever completes
    abandoned_requests_ = true;
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
