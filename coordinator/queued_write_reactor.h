// coordinator/queued_write_reactor.h
//
// QueuedWriteReactor is a gRPC callback-API server-streaming reactor that
// keeps one write in flight and queues the rest, then finishes the call once
// every queued message has been written. The public API's streaming calls
// (Generate, GenerateBatch) derive from it: they hold no thread while they
// wait, and the messages they produce on any thread go out in order.
//
// A derived reactor guards its own state with `mu_`, queues messages and
// the final status under it, and calls Flush() after releasing it; gRPC
// operations (StartWrite, Finish) are only ever started by Flush, never
// under `mu_`. The reactor owns itself (Adopt) until gRPC's OnDone.
//
// Thread safety: every method may be called from any thread.

#ifndef WEIR_COORDINATOR_QUEUED_WRITE_REACTOR_H_
#define WEIR_COORDINATOR_QUEUED_WRITE_REACTOR_H_

#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_callback.h"

namespace weir::coordinator {

template <typename Message>
class QueuedWriteReactor : public grpc::ServerWriteReactor<Message> {
 protected:
  // Keeps `self` alive until OnDone (tasks posted elsewhere may hold more
  // references and outlive the call; they must check finishing()).
  void Adopt(std::shared_ptr<QueuedWriteReactor> self) { self_ = std::move(self); }

  // Queues `message` for writing. Ignored once the call is finishing.
  void QueueWrite(Message message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_.has_value()) return;
    pending_.push_back(std::move(message));
  }
  // Finishes the call with `status` after the queued messages (the first
  // status queued wins).
  void QueueFinish(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!finish_.has_value()) finish_ = std::move(status);
  }
  // Drops the queued messages not yet being written (the call is given up
  // on: its Finish need not wait for a reader that does not read).
  void DropQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (pending_.size() > (writing_ ? 1u : 0u)) pending_.pop_back();
  }
  bool finishing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finish_.has_value(); }
  // Messages queued or being written.
  size_t backlog() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_.size(); }

  // Starts the next write, or the Finish, if nothing is in flight.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_) {
    const Message* write = nullptr;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (!pending_.empty()) {
        writing_ = true;
        write = &pending_.front();  // Stays put until OnWriteDone pops it.
      } else if (finish_.has_value()) {
        finished_ = true;
        finish = *finish_;
      }
    }
    if (write != nullptr) {
      this->StartWrite(write);
    } else if (finish.has_value()) {
      this->Finish(std::move(*finish));
    }
  }

  // Called (under mu_) when a write failed: the client is gone or the call
  // was cancelled. The queue is dropped; the override queues a status.
  virtual void OnWriteFailed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // Called (under mu_) after each successful write: room for more.
  virtual void OnWritten() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}
  // Called once when gRPC is done with the call, before the reactor lets go
  // of itself.
  virtual void OnCallDone() {}

  absl::Mutex mu_;

 private:
  void OnWriteDone(bool ok) final {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (ok) {
        pending_.pop_front();
        OnWritten();
      } else {
        pending_.clear();
        OnWriteFailed();
      }
    }
    Flush();
  }

  void OnDone() final {
    OnCallDone();
    std::shared_ptr<QueuedWriteReactor> self = std::move(self_);
    // `this` may be destroyed when `self` goes out of scope.
  }

  std::shared_ptr<QueuedWriteReactor> self_;
  std::deque<Message> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_QUEUED_WRITE_REACTOR_H_
