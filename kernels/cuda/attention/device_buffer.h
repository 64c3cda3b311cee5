// kernels/cuda/attention/device_buffer.h
//
// DeviceBuffer: a test-only owning device array with host upload/download,
// so the GPU-vs-CPU tests of this package stay about the comparison. Every
// CUDA call is checked; a failure aborts the test with the CUDA error string.
//
// Thread safety: not thread-safe; one test thread owns each buffer.

#ifndef WEIR_KERNELS_CUDA_ATTENTION_DEVICE_BUFFER_H_
#define WEIR_KERNELS_CUDA_ATTENTION_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

namespace weir::kernels::cuda::testing {

// Aborts with `what` and the CUDA error string unless `err` is cudaSuccess.
inline void CheckCuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::abort();
  }
}

// An array of `size` T on the current device; null data when size is 0.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t size) : size_(size) {
    if (size_ > 0) CheckCuda(cudaMalloc(&data_, size_ * sizeof(T)), "cudaMalloc");
  }
  // Allocates host.size() elements and copies `host` in.
  explicit DeviceBuffer(std::span<const T> host) : DeviceBuffer(host.size()) { Upload(host); }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(std::span<const T>(host)) {}
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // REQUIRES: host.size() == size().
  void Upload(std::span<const T> host) {
    if (size_ > 0) {
      CheckCuda(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
                "upload");
    }
  }
  // Fills every byte with `byte` (0xFF poisons floats with NaN).
  void Poison(int byte = 0xFF) {
    if (size_ > 0) CheckCuda(cudaMemset(data_, byte, size_ * sizeof(T)), "cudaMemset");
  }
  // Waits for the device and returns the contents.
  std::vector<T> Download() const {
    CheckCuda(cudaDeviceSynchronize(), "synchronize");
    std::vector<T> host(size_);
    if (size_ > 0) {
      CheckCuda(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
                "download");
    }
    return host;
  }

  T* get() { return data_; }
  const T* get() const { return data_; }
  size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace weir::kernels::cuda::testing

#endif  // WEIR_KERNELS_CUDA_ATTENTION_DEVICE_BUFFER_H_
