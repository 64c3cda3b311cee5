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

uint64_t UcxCommunicator::FullTag(int sender, uint64_t tag) const {
  return (static_cast<uint64_t>(sender) << 48) | (static_cast<uint64_t>(options_.channel) << 40) |
         tag;
}

absl::Status UcxCommunicator::Exchange(std::span<const Transfer> transfers,
                                       const std::string& what) {
  ucp_worker_h worker = context_.worker();
  const int me = rank().value();
  if (options_.abort != nullptr) RETURN_IF_ERROR(options_.abort->Check(what));
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
      request =
          ucp_tag_send_nbx(peers_[t.peer].ep, NonNull(t.data), t.bytes, FullTag(me, t.tag), &param);
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
  bool timed_out = false, aborted = false;
  int idle = 0;
  while (true) {
    if (Aborted()) {
      aborted = true;
      break;
    }
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
  if (aborted) {
    // The group is over: every endpoint goes, not only the waited-for ones.
    std::set<int> waiting, every;
    for (const Pending& p : pending) {
      if (!p.done) waiting.insert(p.transfer->peer);
    }
    for (int p = 0; p < world_size(); ++p) {
      if (p != me) every.insert(p);
    }
    Abort(pending, every);
    const absl::Status status = options_.abort->Check(what);
    return absl::AbortedError(
        absl::StrCat(status.message(), waiting.empty() ? "" : "; it was waiting for ranks ",
                     absl::StrJoin(waiting, ", ")));
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
        what,
        timed_out ? absl::StrCat(": timed out after ", absl::FormatDuration(options_.timeout))
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

}  // namespace weir::parallel
