// kernels/cuda/dense/gemm_handle.h
//
// GemmHandle: the cuBLASLt implementation of the dense product of
// matmul_params.h, y [rows, out] = act(x) [rows, in] * W^T, fp32 in and out
// with fp32 compute (CUBLAS_COMPUTE_32F: TF32 is never used). cuBLASLt picks
// its kernel, and so its summation order, per shape: a row's result may
// change with the number of rows. Use it where that is allowed (the
// vocabulary head, Ops::Logits) and RowStableMatmul (row_stable_matmul.h)
// where the model needs batch invariance.
//
// The handle owns the cuBLASLt context and a device workspace, both made once
// in Create; Matmul allocates no device memory (it caches the chosen
// algorithm per shape and pointer alignment on the host, a small map).
//
// Example:
//   ASSIGN_OR_RETURN(std::unique_ptr<GemmHandle> gemm, GemmHandle::Create());
//   RETURN_IF_ERROR(gemm->Matmul({.x = x, .w = w, .y = y, .rows = r, .out = o, .in = i},
//                                stream));
//
// Thread safety: not thread-safe; one thread at a time. Launches on several
// streams share the one workspace, so they must not run concurrently: keep
// one GemmHandle per stream.

#ifndef WEIR_KERNELS_CUDA_DENSE_GEMM_HANDLE_H_
#define WEIR_KERNELS_CUDA_DENSE_GEMM_HANDLE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/dense/matmul_params.h"

typedef struct CUstream_st* cudaStream_t;
struct cublasLtContext;

namespace weir::kernels::cuda::dense {

class GemmHandle {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // Creates the cuBLASLt context and a device workspace of `workspace_bytes`
  // on the current device. INTERNAL if either fails (no device, out of
  // memory).
  static absl::StatusOr<std::unique_ptr<GemmHandle>> Create(
      size_t workspace_bytes = kDefaultWorkspaceBytes);

  ~GemmHandle();
  GemmHandle(const GemmHandle&) = delete;
  GemmHandle& operator=(const GemmHandle&) = delete;

  // Enqueues on `stream`: with fp8_activation, FakeQuant kFp8 of x into
  // act_scratch; then y = act(x) W^T through cuBLASLt. INVALID_ARGUMENT as
  // CheckMatmulParams; INTERNAL with the cuBLASLt or CUDA message when no
  // algorithm fits or a launch fails.
  absl::Status Matmul(const MatmulParams& params, cudaStream_t stream);

  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  // The cached cublasLtMatmulAlgo_t of one (out, rows, in, alignments) case.
  using Algo = std::array<uint64_t, 8>;
  struct Key {
    int64_t out, rows, in;
    int align_x, align_w, align_y;
    bool operator==(const Key&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.out, k.rows, k.in, k.align_x, k.align_w, k.align_y);
    }
  };

  GemmHandle(cublasLtContext* lt, void* workspace, size_t workspace_bytes)
      : lt_(lt), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

  cublasLtContext* lt_;
  void* workspace_;  // device, owned
  size_t workspace_bytes_;
  absl::flat_hash_map<Key, Algo> algos_;
};

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_GEMM_HANDLE_H_
