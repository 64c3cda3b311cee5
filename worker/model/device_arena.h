// worker/model/device_arena.h
//
// DeviceArena: the one device allocation of a worker. The worker sizes it at
// start from --gpu_memory_fraction and hands out blocks of it to the users of
// device memory (the CUDA ops' per-call arena and weight region, the device
// decoder's weights, KV pools and activations); blocks are never returned
// one by one, the whole arena is freed when its last user lets go of it
// (users hold a shared_ptr).
//
// What is not in it: memory that libraries allocate for themselves (NCCL's
// channel buffers, cuBLASLt's workspace, the CUDA context) and the host-staged
// communicator's staging buffers.
//
// Thread safety: Take and the accessors may be called from any thread.

#ifndef WEIR_WORKER_MODEL_DEVICE_ARENA_H_
#define WEIR_WORKER_MODEL_DEVICE_ARENA_H_

#include <cstddef>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace weir::model {

class DeviceArena {
 public:
  // One cudaMalloc of `bytes` on `device`. INVALID_ARGUMENT for 0 bytes;
  // UNAVAILABLE without the device; RESOURCE_EXHAUSTED when it does not fit.
  static absl::StatusOr<std::shared_ptr<DeviceArena>> Create(int device, size_t bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A block of `bytes` (aligned to 256 bytes) for `what` (named in errors).
  // RESOURCE_EXHAUSTED when the rest of the arena is smaller.
  absl::StatusOr<char*> Take(size_t bytes, const char* what);

  int device() const { return device_; }
  size_t capacity() const { return capacity_; }
  size_t used() const;
  // Bytes a Take can still get (alignment included).
  size_t available() const;

 private:
  DeviceArena(int device, char* base, size_t capacity)
      : device_(device), base_(base), capacity_(capacity) {}

  const int device_;
  char* const base_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  size_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_DEVICE_ARENA_H_
