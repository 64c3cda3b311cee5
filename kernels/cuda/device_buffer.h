// kernels/cuda/device_buffer.h
//
// DeviceBuffer: the owning device array of the GPU tests (testonly), filled
// from and read back to host vectors, so a GPU-vs-CPU test stays about the
// comparison. Every CUDA call is checked: a failure fails the current test
// (ADD_FAILURE / ASSERT, naming the call and the CUDA error) and leaves the
// buffer null, which ok() reports.
//
//   DeviceBuffer<float> x(host_x), y(n);
//   y.Poison();                       // NaN until the kernel writes it
//   ASSERT_TRUE(Kernel({.x = x.get(), .y = y.get(), .n = n}, nullptr).ok());
//   EXPECT_EQ(y.Download(), want);    // synchronizes the device first
//
// Thread safety: not thread-safe; one test thread owns each buffer. Work is
// enqueued on the legacy default stream; Download waits for the whole device.

#ifndef WEIR_KERNELS_CUDA_DEVICE_BUFFER_H_
#define WEIR_KERNELS_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cuda::testing {

// `size` elements of T on the current device; null data when size is 0.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t size) : size_(size) {
    if (size_ == 0) return;
    if (cudaError_t e = cudaMalloc(&data_, size_ * sizeof(T)); e != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc of " << size_ * sizeof(T) << " bytes: " << cudaGetErrorString(e);
      data_ = nullptr;
    }
  }
  // Allocates host.size() elements and copies `host` in.
  explicit DeviceBuffer(std::span<const T> host) : DeviceBuffer(host.size()) { Upload(host); }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(std::span<const T>(host)) {}
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // False when the allocation failed (the test has already failed then).
  bool ok() const { return size_ == 0 || data_ != nullptr; }
  // The device pointer; null when size() is 0 or the allocation failed.
  T* get() const { return data_; }
  size_t size() const { return size_; }

  // Copies `host` in. REQUIRES: host.size() == size().
  void Upload(const std::vector<T>& host) { Upload(std::span<const T>(host)); }
  void Upload(std::span<const T> host) {
    ASSERT_EQ(host.size(), size_) << "DeviceBuffer::Upload";
    if (data_ == nullptr) return;
    const cudaError_t e = cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice);
    ASSERT_EQ(e, cudaSuccess) << "upload: " << cudaGetErrorString(e);
  }
  // Fills every byte with `byte` (0xFF: NaN for floats, -1 for integers), so
  // an element a kernel should write and does not shows.
  void Poison(int byte = 0xFF) {
    if (data_ == nullptr) return;
    const cudaError_t e = cudaMemset(data_, byte, size_ * sizeof(T));
    ASSERT_EQ(e, cudaSuccess) << "cudaMemset: " << cudaGetErrorString(e);
  }
  // Waits for the device (so a kernel's error surfaces here) and returns the
  // contents; zeros where a failure left nothing to read.
  std::vector<T> Download() const {
    std::vector<T> host(size_);
    const cudaError_t synced = cudaDeviceSynchronize();
    EXPECT_EQ(synced, cudaSuccess) << "synchronize: " << cudaGetErrorString(synced);
    if (data_ != nullptr) {
      const cudaError_t e =
          cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost);
      EXPECT_EQ(e, cudaSuccess) << "download: " << cudaGetErrorString(e);
    }
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace weir::kernels::cuda::testing

#endif  // WEIR_KERNELS_CUDA_DEVICE_BUFFER_H_
