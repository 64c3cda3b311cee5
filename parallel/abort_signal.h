// parallel/abort_signal.h
//
// AbortSignal: a one-way "give up now" flag for the operations of one
// communicator group. Its owner raises it from any thread when the group is
// over (a worker Init'ed at a newer group epoch, or a worker that learned it
// was replaced); every wait of a communicator built with it
// (UcxOptions::abort, NcclOptions::abort) polls it, so a collective blocked on
// a peer that will never answer returns ABORTED at once instead of after the
// communicator's timeout.
//
//   parallel::AbortSignal group_over;
//   auto comm = UcxCommunicator::Create(ctx, rank, table, {.abort = &group_over});
//   // step thread: comm->AllToAllV(...) waits for a stopped peer ...
//   // another thread:
//   group_over.Abort("group epoch 2 replaces 1");  // ... and returns ABORTED
//
// Thread safety: thread-safe; Abort, aborted and Check may be called from any
// thread at any time.

#ifndef WEIR_PARALLEL_ABORT_SIGNAL_H_
#define WEIR_PARALLEL_ABORT_SIGNAL_H_

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace weir::parallel {

class AbortSignal {
 public:
  AbortSignal() = default;
  AbortSignal(const AbortSignal&) = delete;
  AbortSignal& operator=(const AbortSignal&) = delete;

  // Raises the signal; `reason` says why (the first reason is kept).
  // Irreversible: a group that was aborted needs a new signal.
  void Abort(absl::string_view reason);

  // True once Abort was called. One atomic load: cheap enough to poll in a
  // wait loop.
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

  // OK before Abort; afterwards ABORTED "<what> aborted: <reason>".
  absl::Status Check(absl::string_view what) const;

 private:
  mutable absl::Mutex mu_;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> aborted_{false};
};

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_ABORT_SIGNAL_H_
