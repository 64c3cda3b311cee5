// kernels/cuda/dense/fp8_lt_gemm.h
//
// Fp8LtGemm: the prompt's FP8 product y [m, n] = X [m, k] W [n, k]^T on
// cuBLASLt's block-scaled FP8 GEMM (Hopper: fp32 scales per 1 x 128 of K,
// VEC128_32F, or per 128 x 128 block, BLK128x128_32F), fed with X and W
// re-blocked from V4.1's stored forms by ReblockFp8Rows / ReblockFp8Tiles
// (fp8_reblock.h; the scale layouts are in fp8_reblock_ref.h). fp32 compute,
// no fast accumulation.
//
// Batch invariance: a row of y depends on its X row and W alone, whatever m
// is. cuBLASLt picks its kernel, and so its summation order, per call unless
// told otherwise, so Fp8LtGemm (1) takes the algorithm from cuBLASLt's
// heuristic once per (n, k, output, weight scale form), at a fixed reference
// row count (kReferenceRows), and reuses it for every m (checked for the
// actual m with cublasLtMatmulAlgoCheck; a refusal is an error, never a
// silent switch to another algorithm); (2) allows no split-K (reduction
// scheme NONE) and gives no workspace; (3) asks for algorithms that need only
// 16-byte aligned pointers, so the choice never depends on where the
// buffers happen to sit. Whether cuBLASLt's kernel then sums a row the same
// way at every m is what fp8_lt_gemm_test's batch case checks on the GPU.
//
// cuBLASLt wants the operands' outer dimensions to be multiples of 4, so X's
// re-blocked codes and scales and y are laid out for Fp8LtPaddedRows(m) rows
// (ReblockFp8Rows writes the pad rows as zeros; y's pad rows come out 0).
//
// Example:
//   ASSIGN_OR_RETURN(std::unique_ptr<Fp8LtGemm> gemm, Fp8LtGemm::Create());
//   RETURN_IF_ERROR(ReblockFp8Rows({.codes = x, .scales = xs, .out_codes = xr,
//                                   .out_scales = xrs, .rows = m, .k = k}, stream));
//   RETURN_IF_ERROR(gemm->Run({.x = xr, .x_scales = xrs, .w = wr, .w_scales = wrs,
//                              .y = y, .m = m, .n = n, .k = k}, stream));
//
// Thread safety: not thread-safe; one caller at a time (Run fills a per-shape
// cache on the first call of a shape). Calls on several streams may overlap
// on the device (no workspace is shared).

#ifndef WEIR_KERNELS_CUDA_DENSE_FP8_LT_GEMM_H_
#define WEIR_KERNELS_CUDA_DENSE_FP8_LT_GEMM_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"

typedef struct CUstream_st* cudaStream_t;
struct cublasLtContext;

namespace weir::kernels::cuda::dense {

// How W's re-blocked scales are laid out (both from the same stored W).
enum class Fp8LtWeightScales {
  kVec128,      // ReblockFp8Rows with rows_per_scale 32: [n] x k / 128, VEC128_32F
  kBlk128x128,  // ReblockFp8Tiles: ceil(n / 128) x k / 128, BLK128x128_32F
};

struct Fp8LtGemmParams {
  // ReblockFp8Rows of X: device [Fp8LtPaddedRows(m), k] e4m3 and
  // Fp8Vec128ScaleFloats(m, k) fp32 scales, both 16-byte aligned.
  const uint8_t* x = nullptr;
  const float* x_scales = nullptr;
  // Re-blocked W: device [n, k] e4m3 and its scales in `w_scales_form`'s
  // layout (Fp8Vec128ScaleFloats(n, k) or Fp8Blk128ScaleFloats(n, k)
  // floats), both 16-byte aligned.
  const uint8_t* w = nullptr;
  const float* w_scales = nullptr;
  Fp8LtWeightScales w_scales_form = Fp8LtWeightScales::kBlk128x128;
  // Device [Fp8LtPaddedRows(m), n] of `output` (float, or bf16 bits rounded
  // to nearest even), row-major, 16-byte aligned. Rows past m are written.
  void* y = nullptr;
  // Elements between y's rows: 0 for n; else at least n with y_ld x the
  // output's bytes a multiple of 16 (a column slice of a wider y: y
  // advanced to the slice's first column, y_ld the whole row).
  int64_t y_ld = 0;
  int64_t m = 0;                               // >= 1
  int64_t n = 0;                               // a positive multiple of 16
  int64_t k = 0;                               // a positive multiple of 128
  Fp8GemmOutput output = Fp8GemmOutput::kF32;  // kF32 or kBf16
  // cuBLASLt's workspace for this call (16-byte aligned), or null for the
  // handle's own (kWorkspaceBytes; then only one stream at a time may use
  // the handle). The H100 asked 4 bytes of it for every shape at 4,096
  // rows (forty-fifth session), though the heuristic was asked for none.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Returns OK or INVALID_ARGUMENT naming the field: a null pointer; m < 1; n
// not a positive multiple of 16; k not a positive multiple of 128; an
// output other than kF32 / kBf16; an unknown w_scales_form; a pointer not
// 16-byte aligned.
absl::Status CheckFp8LtGemmParams(const Fp8LtGemmParams& params);

class Fp8LtGemm {
 public:
  // The row count the algorithm of a shape is chosen at.
  static constexpr int64_t kReferenceRows = 4096;
  // The handle's own workspace, and what a call may be given at most use of.
  static constexpr size_t kWorkspaceBytes = size_t{1} << 20;

  // Creates the cuBLASLt context on the current device. UNIMPLEMENTED when
  // the device is not compute capability 9.0 (cuBLAS documents the 1x128 /
  // 128x128 fp32 block scales for Hopper only); INTERNAL if cuBLASLt or the
  // CUDA runtime fails.
  static absl::StatusOr<std::unique_ptr<Fp8LtGemm>> Create();

  ~Fp8LtGemm();
  Fp8LtGemm(const Fp8LtGemm&) = delete;
  Fp8LtGemm& operator=(const Fp8LtGemm&) = delete;

  // True when Run takes a product of this weight shape and output: n a
  // positive multiple of 16, k a positive multiple of 128, output kF32 or
  // kBf16. (Whether cuBLASLt has an algorithm shows on the first Run.)
  static bool Takes(int64_t n, int64_t k, Fp8GemmOutput output);

  // Enqueues y = X W^T on `stream`: cuBLASLt's TN product with A = W (k-major,
  // op T, its scales per `w_scales_form`), B = X^T (VEC128), D column-major
  // n x Fp8LtPaddedRows(m), i.e. y row-major. The first call of a (n, k,
  // output, w_scales_form) runs cuBLASLt's heuristic on the host (a
  // millisecond or so) and caches the descriptors and the algorithm; later
  // calls allocate nothing and may be captured in a CUDA graph (host work
  // only: descriptor attributes and cublasLtMatmulAlgoCheck). Does not take
  // ownership of any pointer. Returns INVALID_ARGUMENT as
  // CheckFp8LtGemmParams; INTERNAL with cuBLASLt's message when it has no
  // algorithm for the shape at kReferenceRows, when the cached algorithm
  // fails cublasLtMatmulAlgoCheck at this m (or would need a workspace), or
  // when the launch fails.
  absl::Status Run(const Fp8LtGemmParams& params, cudaStream_t stream);

 private:
  struct Key {
    int64_t n, k;
    Fp8GemmOutput output;
    Fp8LtWeightScales w_scales_form;
    bool operator==(const Key&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& key) {
      return H::combine(std::move(h), key.n, key.k, static_cast<int>(key.output),
                        static_cast<int>(key.w_scales_form));
    }
  };
  // One shape's cuBLASLt state (the .cc): the matmul descriptor, W's layout
  // and the chosen algorithm.
  struct Plan;

  explicit Fp8LtGemm(cublasLtContext* lt);  // in the .cc, where Plan is complete

  // Builds the plan of `key` (the heuristic at kReferenceRows), with the
  // scale pointers of `params` set (cuBLASLt wants them set to choose).
  absl::StatusOr<std::unique_ptr<Plan>> MakePlan(const Key& key, const Fp8LtGemmParams& params);

  cublasLtContext* lt_;  // owned
  void* workspace_ = nullptr;  // owned, kWorkspaceBytes
  // Plans by shape; node-based so a Plan never moves (cuBLASLt descriptors
  // are used in place).
  absl::flat_hash_map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FP8_LT_GEMM_H_
