// worker/model/cuda_ops.h
//
// CudaOps: the Ops interface (ops.h) on one CUDA device, over the kernels of
// kernels/cuda. Every op takes host spans, as the model hands them over, and
// runs as one synchronous round trip on the ops' own stream:
//   copy the host inputs into a device arena -> launch the kernel(s) ->
//   copy the outputs back -> cudaStreamSynchronize -> reset the arena.
// Activations therefore cross PCIe on every op: this backend proves the
// kernels inside the whole forward and is the harness for measuring it, not a
// fast path (that keeps activations and KV resident and replays CUDA graphs).
//
// Kernels per op (all batch-invariant except Logits, as ops.h requires):
//   Matmul            dense::RowStableMatmul (RowStableGemm's order; the FP8
//                     activation fake-quant inside)
//   Logits            dense::RowStableMatmul (no activation quantization;
//                     bit-identical to CpuOps with row_stable_logits), or
//                     dense::GemmHandle (cuBLASLt) when
//                     CudaOpsOptions::row_stable_logits is false
//   RmsNorm, Rope     cuda::RmsNorm, cuda::ApplyRope (with the CPU's cos/sin
//                     values, cpu::RopeCosSin, computed on the host)
//   HcMix             dense::RowStableMatmul for the products, then
//                     cuda::HcMix on them
//   FakeQuant         dense::FakeQuant (FP8 / MXFP4 / NVFP4-KV)
//   SparseAttention, CompressorPool, IndexerScore, TopkPositions,
//   CandidateBlocks   kernels/cuda/attention
//   MoeGate, HcMix, HcCollapse, HcExpand, EngramLookup, EngramGate
//                     kernels/cuda/moe
//   RoundBf16         ON THE HOST (it rounds host spans in place; no copy is
//                     worth it).
// CPU FALLBACK: every op has a CUDA kernel, but a call whose shape the kernel
// does not support (its Supports* check fails: e.g. RmsNorm with dim not a
// multiple of 4, FakeQuant with a length not a multiple of the block, MoeGate
// with more than 1024 experts or top-k > 64, SparseAttention with top-k >
// 4096, Matmul with out >= 2^22) runs the CpuOps kernel instead. Each such
// call is counted in CudaOpsStats::cpu_fallbacks and logged (WARNING) once
// per op name. The model's shipped configs (tiny, small) never take it.
//
// Device memory: two blocks, both in Create, none on the op path: two
// cudaMallocs, or with CudaOpsOptions::memory two blocks of that arena.
//   * The arena (CudaOpsOptions::arena_bytes) holds one call's inputs,
//     outputs and scratch, bump-allocated and reset when the call returns. A
//     call that does not fit returns RESOURCE_EXHAUSTED (nothing is written).
//   * The weight region (CudaOpsOptions::weight_bytes) holds weights uploaded on
//     first use and kept: DenseWeight::w, RmsNorm weights, the attention sink,
//     MoeGate weight / bias / bias_vl, HcMix hc_fn / scale / base, Engram
//     table / scales and gate weight. A single region
//     (rather than one cudaMalloc per weight) keeps the op path free of
//     allocation and makes the device footprint one number the caller sizes;
//     RESOURCE_EXHAUSTED when it is full. Entries are keyed by the host data
//     pointer and byte size, and each use compares 8 sampled 8-byte words of
//     the host data with those seen at upload: a mismatch (the host buffer
//     was freed and its address reused, or the weight was rewritten) uploads
//     the weight again. Changes that miss the samples are not detected:
//     call ForgetWeights() after changing weights in place; Model::
//     WeightsChanged (called after expert moves) reaches it through
//     Ops::InvalidateWeights.
//
// Thread safety: not thread-safe; one forward at a time (like CpuOps). All
// device work is on the stream the instance owns, and every op has finished
// on the device when it returns.

#ifndef WEIR_WORKER_MODEL_CUDA_OPS_H_
#define WEIR_WORKER_MODEL_CUDA_OPS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "worker/model/cpu_ops.h"
#include "worker/model/device_arena.h"
#include "worker/model/ops.h"

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace weir::kernels::cuda::dense {
class GemmHandle;
}  // namespace weir::kernels::cuda::dense

namespace weir::model {

struct CudaOpsOptions {
  // CUDA device ordinal (made current by Create and by every op).
  int device = 0;
  // Per-call device arena: the largest single op's inputs + outputs + scratch.
  size_t arena_bytes = size_t{512} << 20;
  // Weight cache region; the fp32 weights the forward touches must fit (the
  // `small` config needs about 1.8 GiB, `tiny` a few MiB).
  size_t weight_bytes = size_t{4} << 30;
  // cuBLASLt workspace of the Logits product (a third allocation, made by the
  // GemmHandle in Create).
  size_t gemm_workspace_bytes = size_t{32} << 20;
  // Logits with the row-stable kernel (RowStableGemm's bits) rather than
  // cuBLASLt; the CPU fallback backend gets the same choice.
  bool row_stable_logits = true;
  // Record CUDA events around each op's uploads, kernels and downloads and
  // add their elapsed times to CudaOpsStats (costs two event queries per op).
  bool time_ops = false;
  // Take the arena and the weight region from this shared allocation (on
  // `device`) instead of allocating them; kept alive while the ops live.
  std::shared_ptr<DeviceArena> memory;
};

// What the ops did since construction or ResetCudaStats().
struct CudaOpsStats {
  int64_t calls = 0;             // Ops method calls (RoundBf16 not counted)
  double host_seconds = 0;       // wall time inside the ops' methods
  // Device time, only with time_ops: host->device copies, kernels, device->host copies.
  double upload_seconds = 0;
  double kernel_seconds = 0;
  double download_seconds = 0;
  int64_t upload_bytes = 0;      // activations copied in (weights not included)
  int64_t download_bytes = 0;
  int64_t weight_bytes_read = 0;  // bytes of cached weights the kernels were given
  // KV bytes the attention kernels read: gathered rows of SparseAttention
  // (valid index entries x head_dim x 4) and the keys IndexerScore scans.
  int64_t kv_bytes_read = 0;
  int64_t weight_uploads = 0;     // weight cache misses (first use or re-upload)
  int64_t weight_upload_bytes = 0;
  int64_t cpu_fallbacks = 0;      // calls run by the CPU kernel (see the file comment)
};

class CudaOps : public Ops {
 public:
  // Creates the stream, the arena, the weight region and the cuBLASLt handle
  // on `options.device`. UNAVAILABLE when no CUDA device is usable (none
  // present, or the ordinal is out of range); RESOURCE_EXHAUSTED when the
  // device memory cannot be allocated; INTERNAL for other CUDA failures.
  static absl::StatusOr<std::unique_ptr<CudaOps>> Create(ActivationPrecision precision,
                                                         const CudaOpsOptions& options = {});
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  ActivationPrecision precision() const override { return precision_; }

  // The Ops contract (ops.h). In addition to the CPU kernels' errors:
  // RESOURCE_EXHAUSTED when the call does not fit the arena or a new weight
  // does not fit the weight region; INTERNAL with the CUDA error string when
  // a copy or launch fails (the instance stays usable unless the device
  // context is lost). Spans are validated on the host before anything is
  // copied, with the CPU kernels' rules (index entries, ids, visible_len and
  // positions included), so bad input returns INVALID_ARGUMENT as on the CPU.
  absl::Status Matmul(const DenseWeight& w, std::span<const float> x, int64_t rows,
                      std::span<float> y) override;
  absl::Status Logits(const DenseWeight& head, std::span<const float> x, int64_t rows,
                      std::span<float> y) override;
  absl::Status RmsNorm(std::span<const float> x, std::span<const float> weight, int64_t rows,
                       int64_t dim, float eps, std::span<float> out) override;
  absl::Status Rope(const kernels::cpu::RopeTable& table,
                    const kernels::cpu::RopeArgs& args) override;
  absl::Status FakeQuant(std::span<float> x, FakeQuantFormat format) override;
  void RoundBf16(std::span<float> x) override;
  absl::Status SparseAttention(const kernels::cpu::SparseAttentionArgs& args) override;
  absl::Status CompressorPool(const kernels::cpu::CompressorPoolArgs& args) override;
  absl::Status IndexerScore(const kernels::cpu::IndexerScoreArgs& args) override;
  absl::Status TopkPositions(const kernels::cpu::TopkArgs& args) override;
  absl::Status CandidateBlocks(const kernels::cpu::CandidateBlocksArgs& args) override;
  absl::Status MoeGate(const kernels::cpu::MoeGateParams& params,
                       const kernels::cpu::MoeGateArgs& args) override;
  absl::Status HcMix(const kernels::cpu::HcParams& params,
                     const kernels::cpu::HcMixArgs& args) override;
  absl::Status HcCollapse(std::span<const float> x, std::span<const float> pre, int64_t tokens,
                          int hc_mult, int64_t dim, std::span<float> out) override;
  absl::Status HcExpand(std::span<const float> x, std::span<const float> y,
                        std::span<const float> post, std::span<const float> comb, int64_t tokens,
                        int hc_mult, int64_t dim, std::span<float> out) override;
  absl::Status EngramLookup(std::span<const uint8_t> table, std::span<const uint8_t> scales,
                            int64_t table_rows, int64_t dim, std::span<const int64_t> ids,
                            std::span<float> out) override;
  absl::Status EngramGate(const kernels::cpu::EngramGateArgs& args) override;

  // Drops every cached weight; the next use of each uploads it again. Call it
  // after changing weights in place (the sampled check may miss a change).
  void ForgetWeights();
  void InvalidateWeights() override { ForgetWeights(); }

  const CudaOpsStats& cuda_stats() const { return cuda_stats_; }
  void ResetCudaStats() { cuda_stats_ = {}; }
  // Bytes of the weight region in use.
  size_t weight_bytes_used() const { return weight_used_; }
  // The stream every op runs on (owned by this instance).
  cudaStream_t stream() const { return stream_; }

 private:
  class Call;
  struct WeightEntry {
    void* device = nullptr;
    size_t bytes = 0;
    size_t capacity = 0;  // bytes reserved in the region (>= bytes)
    std::array<uint64_t, 8> samples{};
  };

  CudaOps(ActivationPrecision precision, const CudaOpsOptions& options);
  bool bf16() const { return precision_ == ActivationPrecision::kBf16; }
  // Matmul (RowStableMatmul with the FP8 activation) and Logits (no
  // activation quantization; RowStableMatmul or cuBLASLt).
  absl::Status Product(const DenseWeight& w, std::span<const float> x, int64_t rows,
                       std::span<float> y, bool logits);

  // Returns the device copy of `bytes` host bytes at `host`, uploading it on
  // a miss. Null for bytes == 0. Counts the bytes in weight_bytes_read.
  absl::StatusOr<const void*> Weight(const void* host, size_t bytes);
  template <typename T>
  absl::StatusOr<const T*> Weight(std::span<const T> host) {
    absl::StatusOr<const void*> p = Weight(host.data(), host.size_bytes());
    if (!p.ok()) return p.status();
    return static_cast<const T*>(*p);
  }
  // Counts a CPU fallback of `op` and logs it once per op name.
  void NoteFallback(const char* op);

  ActivationPrecision precision_;
  CudaOpsOptions options_;
  CpuOps cpu_;  // the fallback kernels (and RoundBf16)
  cudaStream_t stream_ = nullptr;
  std::array<cudaEvent_t, 4> events_{};  // time_ops: begin, uploaded, launched, downloaded
  char* arena_ = nullptr;                // device, owned unless options_.memory
  size_t arena_used_ = 0;
  char* weights_ = nullptr;              // device, owned unless options_.memory
  size_t weight_used_ = 0;
  absl::flat_hash_map<const void*, WeightEntry> weight_cache_;
  std::unique_ptr<kernels::cuda::dense::GemmHandle> gemm_;
  absl::flat_hash_set<std::string> fallback_logged_;
  CudaOpsStats cuda_stats_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_CUDA_OPS_H_
