#include "worker/model/device_arena.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace weir::model {
namespace {

constexpr size_t kAlign = 256;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

absl::StatusOr<std::shared_ptr<DeviceArena>> DeviceArena::Create(int device, size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("DeviceArena: 0 bytes");
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("DeviceArena: device ", device, ": ", cudaGetErrorString(e)));
  }
  char* base = nullptr;
  if (cudaError_t e = cudaMalloc(&base, bytes); e != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("DeviceArena: ", bytes, " bytes on device ",
                                                     device, ": ", cudaGetErrorString(e)));
  }
  return std::shared_ptr<DeviceArena>(new DeviceArena(device, base, bytes));
}

DeviceArena::~DeviceArena() {
  cudaSetDevice(device_);
  cudaFree(base_);
}

absl::StatusOr<char*> DeviceArena::Take(size_t bytes, const char* what) {
  absl::MutexLock lock(&mu_);
  const size_t start = AlignUp(used_);
  if (start > capacity_ || bytes > capacity_ - start) {
    return absl::ResourceExhaustedError(
        absl::StrCat("DeviceArena: ", what, " needs ", bytes, " bytes; ",
                     start > capacity_ ? 0 : capacity_ - start, " of ", capacity_, " are left"));
  }
  used_ = start + bytes;
  return base_ + start;
}

size_t DeviceArena::used() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

size_t DeviceArena::available() const {
  absl::MutexLock lock(&mu_);
  const size_t start = AlignUp(used_);
  return start >= capacity_ ? 0 : capacity_ - start;
}

}  // namespace weir::model
