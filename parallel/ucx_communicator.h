// parallel/ucx_communicator.h
//
// UcxCommunicator: the host-memory Communicator between processes over UCX
// (tag API). Phase two of the set-up in ucx_context.h: given the table of
// every rank's worker address, it creates one endpoint per peer and runs the
// algorithms of PointToPointCommunicator over tagged messages.
//
// Messages: every send carries the 64-bit tag
//   sender rank (16 bits) | channel (8 bits) | op (4) | sequence (24) | step (12)
// and every receive matches the full tag, so messages of different
// collectives, senders and communicators never mix.
//
// Failure: a peer whose transfer failed or whose connection UCX reported
// failed is given up on (after a short grace period for data in flight);
// transfers with the other peers continue, so the survivors of a group finish
// their mutual messages. When only given-up transfers remain, or the timeout
// passes, the outstanding requests are cancelled, the endpoints of the peers
// involved are force-closed (with peer_failure_detection, the default) and the
// operation returns UNAVAILABLE naming those peers.
//
// Abort: with UcxOptions::abort, every wait (connecting, each operation,
// closing) also polls that signal; once it is raised the waiting operation
// cancels its requests, force-closes every endpoint (the group is over; with
// peer_failure_detection) and returns ABORTED naming the reason and the
// ranks it was waiting for, and the communicator is broken. UCX runs in
// single-thread mode, so the raiser only sets the flag: the cancelling and
// closing happen on the thread that is waiting.
//
// Thread safety: not thread-safe; use it from the thread that uses its
// UcxContext (see ucx_context.h).

#ifndef WEIR_PARALLEL_UCX_COMMUNICATOR_H_
#define WEIR_PARALLEL_UCX_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/abort_signal.h"
#include "parallel/point_to_point_communicator.h"
#include "parallel/ucx_context.h"

typedef struct ucp_ep* ucp_ep_h;

namespace weir::parallel {

struct UcxOptions {
  // How long one operation may wait for its messages before UNAVAILABLE.
  absl::Duration timeout = absl::Seconds(30);
  // Distinguishes communicators built on one UcxContext (e.g. world and EP
  // group); each must use its own value in [0, 255].
  int channel = 0;
  // Use UCX peer error handling, so a peer's lost connection fails operations
  // before the timeout and an aborted operation force-closes its endpoints.
  // Only some transports support it (tcp does; shared memory in UCX 1.13 does
  // not, and Create then returns UNAVAILABLE). Without it a dead peer is
  // detected by the timeout alone, and sends still outstanding when an
  // operation is aborted are abandoned to UCX.
  bool peer_failure_detection = true;
  // Polled by every wait (see "Abort" above); null = never aborted. Not
  // owned; must outlive the communicator.
  const AbortSignal* abort = nullptr;
};

class UcxCommunicator final : public PointToPointCommunicator {
 public:
  // Connects rank `rank` of `address_table.size()` ranks; address_table[r] is
  // rank r's UcxContext::address(). Collective: every rank calls Create, which
  // exchanges a message with every peer and flushes every endpoint, so the
  // connections are fully wired up before the first operation.
  // Returns INVALID_ARGUMENT if the table is empty or larger than 65536, `rank`
  // is outside it, address_table[rank] is not `context`'s address, or the
  // channel is out of range; UNAVAILABLE if an endpoint cannot be created or a
  // peer does not connect within the timeout; ABORTED if options.abort is
  // raised before every peer connected.
  // Does not take ownership; `context` must outlive the communicator.
  static absl::StatusOr<std::unique_ptr<UcxCommunicator>> Create(
      UcxContext& context, Rank rank, std::span<const std::string> address_table,
      const UcxOptions& options);

  // Flushes and closes the endpoints (force-closes them when broken or when
  // options.abort is raised), waiting at most one timeout. After an abort
  // without peer failure detection the endpoints are left to ~UcxContext
  // instead. In both cases, after
  // UNAVAILABLE destroy every communicator of the context, then the context.
  ~UcxCommunicator() override;

 protected:
  absl::Status Exchange(std::span<const Transfer> transfers, const std::string& what) override;

 private:
  struct Peer {
    UcxCommunicator* self = nullptr;
    int rank = 0;
    ucp_ep_h ep = nullptr;
    bool failed = false;  // UCX reported the connection failed
    absl::Time failed_at;
    std::string error;
  };
  struct Pending;

  UcxCommunicator(UcxContext& context, int rank, int world_size, const UcxOptions& options);
  uint64_t FullTag(int sender, uint64_t tag) const;
  // Exchanges a message with every peer and flushes every endpoint.
  absl::Status WireUp();
  // Cancels outstanding requests of `pending`, force-closes the endpoints of
  // `peers` (with peer failure detection) and waits, bounded, until UCX has
  // released every buffer.
  void Abort(std::vector<Pending>& pending, const std::set<int>& peers);
  void ForceClose(int peer);
  // True once options_.abort is raised.
  bool Aborted() const { return options_.abort != nullptr && options_.abort->aborted(); }
  // Flush-closes every endpoint still open (force-closes failed ones).
  void CloseEndpoints();

  UcxContext& context_;
  UcxOptions options_;
  std::unique_ptr<Peer[]> peers_;  // [world_size]; stable addresses for callbacks
  // An operation was aborted without peer failure detection: UCX may still
  // hold abandoned requests, so the worker must not be progressed again.
  bool abandoned_requests_ = false;
};

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_UCX_COMMUNICATOR_H_
