#include "worker/model/cuda_ops.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/cuda/attention/compressor_pool.h"
#include "kernels/cuda/attention/indexer_score.h"
#include "kernels/cuda/attention/sparse_attention.h"
#include "kernels/cuda/attention/topk.h"
#include "kernels/cuda/dense/fake_quant.h"
#include "kernels/cuda/dense/gemm_handle.h"
#include "kernels/cuda/dense/row_stable_matmul.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/engram.h"
#include "kernels/cuda/moe/mhc.h"
#include "kernels/cuda/moe/moe_gate.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;
namespace kc = ::weir::kernels::cuda;
namespace dense = ::weir::kernels::cuda::dense;
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kAlign = 256;

#define WEIR_CUDA_OPS_CALL(what, call)                            \
  do {                                                            \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) {             \
      return kc::CudaStatus(e_, absl::StrCat("CudaOps: ", what)); \
    }                                                             \
  } while (0)

template <typename T>
bool Sized(std::span<T> s, int64_t n) {
  return static_cast<int64_t>(s.size()) == n;
}

absl::Status CheckVisible(std::span<const int64_t> visible, int64_t width, const char* op) {
  for (int64_t v : visible) {
    if (v < 0 || v > width) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": visible_len ", v, " outside [0, ", width, "]"));
    }
  }
  return absl::OkStatus();
}

std::array<uint64_t, 8> Samples(const void* host, size_t bytes) {
  std::array<uint64_t, 8> s{};
  if (bytes < sizeof(uint64_t)) {
    std::memcpy(s.data(), host, bytes);
    return s;
  }
  const auto* p = static_cast<const char*>(host);
  const size_t last = bytes - sizeof(uint64_t);
  for (size_t i = 0; i < s.size(); ++i) std::memcpy(&s[i], p + last * i / (s.size() - 1), 8);
  return s;
}

dense::FakeQuantFormat DeviceFormat(FakeQuantFormat f) {
  switch (f) {
    case FakeQuantFormat::kFp8:
      return dense::FakeQuantFormat::kFp8;
    case FakeQuantFormat::kMxfp4:
      return dense::FakeQuantFormat::kMxfp4;
    case FakeQuantFormat::kNvfp4Kv:
      return dense::FakeQuantFormat::kNvfp4Kv;
  }
  return dense::FakeQuantFormat::kFp8;
}

kc::GateScore DeviceScore(cpu::ScoreFunc f) {
  switch (f) {
    case cpu::ScoreFunc::kSqrtSoftplus:
      return kc::GateScore::kSqrtSoftplus;
    case cpu::ScoreFunc::kSigmoid:
      return kc::GateScore::kSigmoid;
    case cpu::ScoreFunc::kSoftmax:
      return kc::GateScore::kSoftmax;
  }
  return kc::GateScore::kSqrtSoftplus;
}

}  // namespace

// One op's round trip: arena allocations and uploads, then the kernels, then
// the downloads, then Finish (synchronize, timing). The destructor waits for
// anything still in flight and resets the arena, so an early error return
// never leaves the arena in use by the device.
class CudaOps::Call {
 public:
  explicit Call(CudaOps& ops) : ops_(ops), start_(Clock::now()) {
    ops_.arena_used_ = 0;
    ++ops_.cuda_stats_.calls;
    cudaSetDevice(ops_.options_.device);
    if (timed()) cudaEventRecord(ops_.events_[0], ops_.stream_);
  }
  ~Call() {
    if (!finished_) cudaStreamSynchronize(ops_.stream_);
    ops_.arena_used_ = 0;
    ops_.cuda_stats_.host_seconds +=
        std::chrono::duration<double>(Clock::now() - start_).count();
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Returns arena room for `n` T (never null, even for n == 0).
  template <typename T>
  absl::StatusOr<T*> Alloc(size_t n) {
    const size_t bytes = (n * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    if (bytes > ops_.options_.arena_bytes - ops_.arena_used_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("CudaOps: the call needs more than the arena's ",
                       ops_.options_.arena_bytes, " bytes (", ops_.arena_used_, " used, ",
                       n * sizeof(T), " more)"));
    }
    T* p = reinterpret_cast<T*>(ops_.arena_ + ops_.arena_used_);
    ops_.arena_used_ += bytes;
    return p;
  }
  // Allocates and enqueues the upload of `host`.
  template <typename T>
  absl::StatusOr<std::remove_const_t<T>*> In(std::span<T> host) {
    using U = std::remove_const_t<T>;
    ASSIGN_OR_RETURN(U* d, Alloc<U>(host.size()));
    if (!host.empty()) {
      WEIR_CUDA_OPS_CALL("upload", cudaMemcpyAsync(d, host.data(), host.size_bytes(),
                                                   cudaMemcpyHostToDevice, ops_.stream_));
      ops_.cuda_stats_.upload_bytes += static_cast<int64_t>(host.size_bytes());
    }
    return d;
  }
  // Marks the start of the kernels (after the uploads).
  void Kernels() {
    if (timed()) cudaEventRecord(ops_.events_[1], ops_.stream_);
  }
  // Enqueues the download of `host.size()` T from `device` (after the kernels).
  template <typename T>
  absl::Status Out(std::span<T> host, const T* device) {
    if (!downloading_) {
      downloading_ = true;
      if (timed()) cudaEventRecord(ops_.events_[2], ops_.stream_);
    }
    if (host.empty()) return absl::OkStatus();
    WEIR_CUDA_OPS_CALL("download", cudaMemcpyAsync(host.data(), device, host.size_bytes(),
                                                   cudaMemcpyDeviceToHost, ops_.stream_));
    ops_.cuda_stats_.download_bytes += static_cast<int64_t>(host.size_bytes());
    return absl::OkStatus();
  }
  // Waits for the call's work; INTERNAL if any of it failed on the device.
  absl::Status Finish() {
    finished_ = true;
    if (timed()) {
      if (!downloading_) cudaEventRecord(ops_.events_[2], ops_.stream_);
      cudaEventRecord(ops_.events_[3], ops_.stream_);
    }
    WEIR_CUDA_OPS_CALL("synchronize", cudaStreamSynchronize(ops_.stream_));
    if (timed()) {
      float ms[3] = {0, 0, 0};
      for (int i = 0; i < 3; ++i) {
        WEIR_CUDA_OPS_CALL("event time", cudaEventElapsedTime(&ms[i], ops_.events_[i],
                                                               ops_.events_[i + 1]));
      }
      ops_.cuda_stats_.upload_seconds += ms[0] * 1e-3;
      ops_.cuda_stats_.kernel_seconds += ms[1] * 1e-3;
      ops_.cuda_stats_.download_seconds += ms[2] * 1e-3;
    }
    return absl::OkStatus();
  }

 private:
  bool timed() const { return ops_.options_.time_ops; }

  CudaOps& ops_;
  Clock::time_point start_;
  bool downloading_ = false;
  bool finished_ = false;
};

CudaOps::CudaOps(ActivationPrecision precision, const CudaOpsOptions& options)
    : precision_(precision),
      options_(options),
      cpu_(precision, CpuOpsOptions{.row_stable_logits = options.row_stable_logits}) {}

absl::StatusOr<std::unique_ptr<CudaOps>> CudaOps::Create(ActivationPrecision precision,
                                                         const CudaOpsOptions& options) {
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return absl::UnavailableError(absl::StrCat(
        "CudaOps: no CUDA device (", e == cudaSuccess ? "none found" : cudaGetErrorString(e),
        ")"));
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::UnavailableError(
        absl::StrCat("CudaOps: device ", options.device, " of ", devices));
  }
  std::unique_ptr<CudaOps> ops(new CudaOps(precision, options));
  WEIR_CUDA_OPS_CALL("cudaSetDevice", cudaSetDevice(options.device));
  WEIR_CUDA_OPS_CALL("stream", cudaStreamCreateWithFlags(&ops->stream_, cudaStreamNonBlocking));
  for (cudaEvent_t& e : ops->events_) WEIR_CUDA_OPS_CALL("event", cudaEventCreate(&e));
  auto allocate = [&](char** p, size_t bytes, const char* what) -> absl::Status {
    if (options.memory != nullptr) {
      if (options.memory->device() != options.device) {
        return absl::InvalidArgumentError(absl::StrCat("CudaOps: the memory is on device ",
                                                       options.memory->device()));
      }
      ASSIGN_OR_RETURN(*p, options.memory->Take(bytes, what));
      return absl::OkStatus();
    }
    if (cudaError_t e = cudaMalloc(p, bytes); e != cudaSuccess) {
      cudaGetLastError();
      *p = nullptr;
      return absl::ResourceExhaustedError(
          absl::StrCat("CudaOps: ", what, " of ", bytes, " bytes: ", cudaGetErrorString(e)));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(allocate(&ops->arena_, options.arena_bytes, "arena"));
  RETURN_IF_ERROR(allocate(&ops->weights_, options.weight_bytes, "weight region"));
  ASSIGN_OR_RETURN(ops->gemm_, dense::GemmHandle::Create(options.gemm_workspace_bytes));
  return ops;
}

CudaOps::~CudaOps() {
  cudaSetDevice(options_.device);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  gemm_.reset();
  if (options_.memory == nullptr) {  // otherwise blocks of the shared arena
    if (arena_ != nullptr) cudaFree(arena_);
    if (weights_ != nullptr) cudaFree(weights_);
  }
  for (cudaEvent_t e : events_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaOps::ForgetWeights() {
  weight_cache_.clear();
  weight_used_ = 0;
}

absl::StatusOr<const void*> CudaOps::Weight(const void* host, size_t bytes) {
  if (bytes == 0) return nullptr;
  cuda_stats_.weight_bytes_read += static_cast<int64_t>(bytes);
  const std::array<uint64_t, 8> samples = Samples(host, bytes);
  WeightEntry& entry = weight_cache_[host];
  if (entry.device != nullptr && entry.bytes == bytes && entry.samples == samples) {
    return entry.device;
  }
  if (entry.device == nullptr || entry.capacity < bytes) {
    const size_t room = (bytes + kAlign - 1) / kAlign * kAlign;
    if (room > options_.weight_bytes - weight_used_) {
      if (entry.device == nullptr) weight_cache_.erase(host);
      return absl::ResourceExhaustedError(
          absl::StrCat("CudaOps: weight of ", bytes, " bytes does not fit the weight region (",
                       weight_used_, " of ", options_.weight_bytes, " bytes used)"));
    }
    entry.device = weights_ + weight_used_;
    entry.capacity = room;
    weight_used_ += room;
  }
  cudaSetDevice(options_.device);
  WEIR_CUDA_OPS_CALL("weight upload", cudaMemcpyAsync(entry.device, host, bytes,
                                                      cudaMemcpyHostToDevice, stream_));
  WEIR_CUDA_OPS_CALL("weight upload", cudaStreamSynchronize(stream_));
  entry.bytes = bytes;
  entry.samples = samples;
  ++cuda_stats_.weight_uploads;
  cuda_stats_.weight_upload_bytes += static_cast<int64_t>(bytes);
  return entry.device;
}

void CudaOps::NoteFallback(const char* op) {
  ++cuda_stats_.cpu_fallbacks;
  if (fallback_logged_.insert(op).second) {
    WEIR_LOG(WARNING) << "CudaOps: " << op
                      << " runs on the CPU for a shape its CUDA kernel does not support";
  }
}

absl::Status CudaOps::Product(const DenseWeight& w, std::span<const float> x, int64_t rows,
                              std::span<float> y, bool logits) {
  const bool row_stable = !logits || options_.row_stable_logits;
  RETURN_IF_ERROR(CheckMatmulShapes(w, x.size(), rows, y.size()));
  const Clock::time_point t0 = Clock::now();
  stats_.matmul_flops += 2 * rows * w.out * w.in;
  absl::Status st = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const float* dw, Weight(std::span<const float>(w.w)));
    Call call(*this);
    ASSIGN_OR_RETURN(const float* dx, call.In(x));
    ASSIGN_OR_RETURN(float* dy, call.Alloc<float>(y.size()));
    const bool fp8 = !logits && w.fp8_activation;
    float* scratch = nullptr;
    if (fp8) {
      ASSIGN_OR_RETURN(scratch, call.Alloc<float>(dense::MatmulScratchFloats(rows, w.in, true)));
    }
    const dense::MatmulParams p{.x = dx, .w = dw, .y = dy, .rows = rows, .out = w.out,
                                .in = w.in, .fp8_activation = fp8, .act_scratch = scratch};
    if (row_stable && !dense::SupportsRowStableMatmul(p)) {
      NoteFallback(logits ? "Logits" : "Matmul");
      return logits ? cpu_.Logits(w, x, rows, y) : cpu_.Matmul(w, x, rows, y);
    }
    call.Kernels();
    RETURN_IF_ERROR(row_stable ? dense::RowStableMatmul(p, stream_) : gemm_->Matmul(p, stream_));
    RETURN_IF_ERROR(call.Out(y, dy));
    return call.Finish();
  }();
  stats_.matmul_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

absl::Status CudaOps::Matmul(const DenseWeight& w, std::span<const float> x, int64_t rows,
                             std::span<float> y) {
  return Product(w, x, rows, y, /*logits=*/false);
}

absl::Status CudaOps::Logits(const DenseWeight& head, std::span<const float> x, int64_t rows,
                             std::span<float> y) {
  return Product(head, x, rows, y, /*logits=*/true);
}

absl::Status CudaOps::RmsNorm(std::span<const float> x, std::span<const float> weight,
                              int64_t rows, int64_t dim, float eps, std::span<float> out) {
  if (rows <= 0 || dim <= 0 || !(eps >= 0.0f) || !Sized(x, rows * dim) ||
      !Sized(out, rows * dim) || !(weight.empty() || Sized(weight, dim))) {
    return absl::InvalidArgumentError(absl::StrCat("RmsNorm: bad shapes rows ", rows, " dim ",
                                                   dim, " x ", x.size(), " out ", out.size(),
                                                   " weight ", weight.size()));
  }
  ASSIGN_OR_RETURN(const float* dw, Weight(weight));
  Call call(*this);
  ASSIGN_OR_RETURN(float* dx, call.In(x));
  const kc::RmsNormParams p{.x = dx, .weight = dw, .out = dx, .rows = rows, .dim = dim,
                            .eps = eps};
  if (!kc::SupportsRmsNorm(p)) {
    NoteFallback("RmsNorm");
    return cpu_.RmsNorm(x, weight, rows, dim, eps, out);
  }
  call.Kernels();
  RETURN_IF_ERROR(kc::RmsNorm(p, stream_));
  RETURN_IF_ERROR(call.Out(out, dx));
  return call.Finish();
}

absl::Status CudaOps::Rope(const cpu::RopeTable& table, const cpu::RopeArgs& args) {
  const int64_t t = args.num_tokens;
  if (t < 0 || args.num_heads <= 0 || args.head_dim < table.rope_dim() ||
      !Sized(args.positions, t) || !Sized(args.x, t * args.num_heads * args.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat("Rope: x ", args.x.size(), " vs [", t, ", ",
                                                   args.num_heads, ", ", args.head_dim,
                                                   "], rope_dim ", table.rope_dim()));
  }
  for (int64_t pos : args.positions) {
    if (pos < 0) return absl::InvalidArgumentError(absl::StrCat("Rope: position ", pos));
  }
  if (t == 0) return absl::OkStatus();
  // The CPU's cos/sin values (bit-identical rotation; t * rope_dim floats).
  std::vector<float> cos_sin(static_cast<size_t>(t) * table.rope_dim());
  RETURN_IF_ERROR(cpu::RopeCosSin(table, args.positions, cos_sin));
  Call call(*this);
  ASSIGN_OR_RETURN(float* dx, call.In(args.x));
  ASSIGN_OR_RETURN(const int64_t* dpos, call.In(args.positions));
  ASSIGN_OR_RETURN(const float* dcs, call.In(std::span<const float>(cos_sin)));
  const kc::RopeParams p{.x = dx, .positions = dpos, .cos_sin = dcs, .num_tokens = t,
                         .num_heads = args.num_heads, .head_dim = args.head_dim,
                         .rope_dim = table.rope_dim(),
                         .inverse = args.direction == cpu::RopeDirection::kInverse};
  if (!kc::SupportsRope(p)) {
    NoteFallback("Rope");
    return cpu_.Rope(table, args);
  }
  call.Kernels();
  RETURN_IF_ERROR(kc::ApplyRope(p, stream_));
  RETURN_IF_ERROR(call.Out(args.x, dx));
  return call.Finish();
}

absl::Status CudaOps::FakeQuant(std::span<float> x, FakeQuantFormat format) {
  Call call(*this);
  ASSIGN_OR_RETURN(float* dx, call.In(x));
  const dense::FakeQuantParams p{.x = dx, .out = dx, .n = static_cast<int64_t>(x.size()),
                                 .format = DeviceFormat(format)};
  if (!dense::SupportsFakeQuant(p)) {
    NoteFallback("FakeQuant");  // also reports the CPU kernel's error for a bad length
    return cpu_.FakeQuant(x, format);
  }
  call.Kernels();
  RETURN_IF_ERROR(dense::FakeQuant(p, stream_));
  RETURN_IF_ERROR(call.Out(x, dx));
  return call.Finish();
}

void CudaOps::RoundBf16(std::span<float> x) { cpu_.RoundBf16(x); }

absl::Status CudaOps::SparseAttention(const cpu::SparseAttentionArgs& a) {
  const int64_t s = a.queries, h = a.heads, d = a.head_dim, k = a.topk;
  if (s < 0 || h <= 0 || d <= 0 || k < 0 || a.kv_len < 0 || !Sized(a.q, s * h * d) ||
      !Sized(a.kv, a.kv_len * d) || !Sized(a.sink, h) || !Sized(a.index, s * k) ||
      !Sized(a.out, s * h * d)) {
    return absl::InvalidArgumentError(absl::StrCat("SparseAttention: bad shapes queries ", s,
                                                   " heads ", h, " head_dim ", d, " kv_len ",
                                                   a.kv_len, " topk ", k));
  }
  int64_t valid = 0;
  for (int32_t t : a.index) {
    if (t < -1 || t >= a.kv_len) {
      return absl::InvalidArgumentError(absl::StrCat("SparseAttention: index ", t, " of ",
                                                     a.kv_len));
    }
    valid += t >= 0;
  }
  if (s == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const float* sink, Weight(a.sink));
  Call call(*this);
  ASSIGN_OR_RETURN(const float* q, call.In(a.q));
  ASSIGN_OR_RETURN(const float* kv, call.In(a.kv));
  ASSIGN_OR_RETURN(const int32_t* index, call.In(a.index));
  ASSIGN_OR_RETURN(float* out, call.Alloc<float>(a.out.size()));
  const kc::SparseAttentionParams p{.q = q, .kv = kv, .sink = sink, .index = index, .out = out,
                                    .queries = s, .heads = a.heads, .head_dim = a.head_dim,
                                    .kv_len = a.kv_len, .topk = a.topk, .scale = a.scale};
  if (!kc::SupportsSparseAttention(p)) {
    NoteFallback("SparseAttention");
    return cpu_.SparseAttention(a);
  }
  cuda_stats_.kv_bytes_read += valid * d * static_cast<int64_t>(sizeof(float));
  call.Kernels();
  RETURN_IF_ERROR(kc::SparseAttention(p, stream_));
  RETURN_IF_ERROR(call.Out(a.out, out));
  return call.Finish();
}

absl::Status CudaOps::CompressorPool(const cpu::CompressorPoolArgs& a) {
  const int64_t r = a.ratio, d = a.dim;
  if (r < 1 || d <= 0 || a.start_pos < 0 || a.tokens < 0 || !Sized(a.kv, a.tokens * d) ||
      !Sized(a.score, a.tokens * d) || !Sized(a.kv_state, r * d) ||
      !Sized(a.score_state, r * d) ||
      !Sized(a.out, cpu::CompressedCount(a.start_pos, a.tokens, a.ratio) * d)) {
    return absl::InvalidArgumentError(absl::StrCat("CompressorPool: bad shapes tokens ",
                                                   a.tokens, " dim ", d, " ratio ", r,
                                                   " start_pos ", a.start_pos, " out ",
                                                   a.out.size()));
  }
  if (a.tokens == 0) return absl::OkStatus();
  Call call(*this);
  ASSIGN_OR_RETURN(const float* kv, call.In(a.kv));
  ASSIGN_OR_RETURN(const float* score, call.In(a.score));
  ASSIGN_OR_RETURN(float* kv_state, call.In(a.kv_state));
  ASSIGN_OR_RETURN(float* score_state, call.In(a.score_state));
  ASSIGN_OR_RETURN(float* out, call.Alloc<float>(a.out.size()));
  const kc::CompressorPoolParams p{.kv = kv, .score = score, .kv_state = kv_state,
                                   .score_state = score_state, .out = out,
                                   .start_pos = a.start_pos, .tokens = a.tokens, .dim = d,
                                   .ratio = a.ratio};
  if (!kc::SupportsCompressorPool(p)) {
    NoteFallback("CompressorPool");
    return cpu_.CompressorPool(a);
  }
  call.Kernels();
  RETURN_IF_ERROR(kc::CompressorPool(p, stream_));
  RETURN_IF_ERROR(call.Out(a.out, out));
  RETURN_IF_ERROR(call.Out(a.kv_state, kv_state));
  RETURN_IF_ERROR(call.Out(a.score_state, score_state));
  return call.Finish();
}

absl::Status CudaOps::IndexerScore(const cpu::IndexerScoreArgs& a) {
  const int64_t s = a.queries, h = a.heads, d = a.dim, keys = a.keys;
  if (s < 0 || h <= 0 || d <= 0 || keys < 0 || !Sized(a.q, s * h * d) ||
      !Sized(a.k, keys * d) || !Sized(a.weights, s * h) || !Sized(a.visible_len, s) ||
      !Sized(a.out, s * keys)) {
    return absl::InvalidArgumentError(absl::StrCat("IndexerScore: bad shapes queries ", s,
                                                   " heads ", h, " dim ", d, " keys ", keys));
  }
  RETURN_IF_ERROR(CheckVisible(a.visible_len, keys, "IndexerScore"));
  if (s * keys == 0) return absl::OkStatus();
  Call call(*this);
  ASSIGN_OR_RETURN(const float* q, call.In(a.q));
  ASSIGN_OR_RETURN(const float* k, call.In(a.k));
  ASSIGN_OR_RETURN(const float* w, call.In(a.weights));
  ASSIGN_OR_RETURN(const int64_t* visible, call.In(a.visible_len));
  ASSIGN_OR_RETURN(float* out, call.Alloc<float>(a.out.size()));
  const kc::IndexerScoreParams p{.q = q, .k = k, .weights = w, .visible_len = visible,
                                 .out = out, .queries = s, .heads = a.heads, .dim = a.dim,
                                 .keys = keys, .round_bf16 = bf16()};
  if (!kc::SupportsIndexerScore(p)) {
    NoteFallback("IndexerScore");
    return cpu_.IndexerScore(a);
  }
  cuda_stats_.kv_bytes_read += keys * d * static_cast<int64_t>(sizeof(float));
  call.Kernels();
  RETURN_IF_ERROR(kc::IndexerScore(p, stream_));
  RETURN_IF_ERROR(call.Out(a.out, out));
  return call.Finish();
}

absl::Status CudaOps::TopkPositions(const cpu::TopkArgs& a) {
  if (a.rows < 0 || a.width < 0 || a.k < 0 || !Sized(a.scores, a.rows * a.width) ||
      !Sized(a.visible_len, a.rows) || !Sized(a.out, a.rows * a.k)) {
    return absl::InvalidArgumentError(absl::StrCat("TopkPositions: bad shapes rows ", a.rows,
                                                   " width ", a.width, " k ", a.k));
  }
  RETURN_IF_ERROR(CheckVisible(a.visible_len, a.width, "TopkPositions"));
  if (a.rows == 0 || a.k == 0) return absl::OkStatus();
  Call call(*this);
  ASSIGN_OR_RETURN(const float* scores, call.In(a.scores));
  ASSIGN_OR_RETURN(const int64_t* visible, call.In(a.visible_len));
  ASSIGN_OR_RETURN(int32_t* out, call.Alloc<int32_t>(a.out.size()));
  const kc::TopkParams p{.scores = scores, .visible_len = visible, .out = out, .rows = a.rows,
                         .width = a.width, .k = a.k, .offset = a.offset};
  if (!kc::SupportsTopkPositions(p)) {
    NoteFallback("TopkPositions");
    return cpu_.TopkPositions(a);
  }
  call.Kernels();
  RETURN_IF_ERROR(kc::TopkPositions(p, stream_));
  RETURN_IF_ERROR(call.Out(a.out, out));
  return call.Finish();
}

absl::Status CudaOps::CandidateBlocks(const cpu::CandidateBlocksArgs& a) {
  if (a.rows < 0 || a.width < 0 || a.block_size <= 0 || a.topk_blocks <= 0 ||
      !Sized(a.scores, a.rows * a.width) || !Sized(a.visible_len, a.rows) ||
      !Sized(a.pool, a.rows * a.width)) {
    return absl::InvalidArgumentError(absl::StrCat("CandidateBlocks: bad shapes rows ", a.rows,
                                                   " width ", a.width, " block ",
                                                   a.block_size));
  }
  RETURN_IF_ERROR(CheckVisible(a.visible_len, a.width, "CandidateBlocks"));
  if (a.rows * a.width == 0) return absl::OkStatus();
  Call call(*this);
  ASSIGN_OR_RETURN(const float* scores, call.In(a.scores));
  ASSIGN_OR_RETURN(const int64_t* visible, call.In(a.visible_len));
  ASSIGN_OR_RETURN(uint8_t* pool, call.Alloc<uint8_t>(a.pool.size()));
  const kc::CandidateBlocksParams p{.scores = scores, .visible_len = visible, .pool = pool,
                                    .rows = a.rows, .width = a.width,
                                    .topk_blocks = a.topk_blocks, .block_size = a.block_size};
  if (!kc::SupportsCandidateBlocks(p)) {
    NoteFallback("CandidateBlocks");
    return cpu_.CandidateBlocks(a);
  }
  call.Kernels();
  RETURN_IF_ERROR(kc::CandidateBlocks(p, stream_));
  RETURN_IF_ERROR(call.Out(a.pool, pool));
  return call.Finish();
}

absl::Status CudaOps::MoeGate(const cpu::MoeGateParams& params, const cpu::MoeGateArgs& a) {
  const int64_t t = a.tokens, d = a.dim, e = params.num_experts, k = params.topk;
  if (t <= 0 || d <= 0 || e <= 0 || k < 1 || k > e || !(params.gate_temp > 0.0f) ||
      !Sized(a.x, t * d) || !Sized(a.weight, e * d) || !(a.bias.empty() || Sized(a.bias, e)) ||
      !(a.bias_vl.empty() || Sized(a.bias_vl, e)) ||
      !(a.image_mask.empty() || Sized(a.image_mask, t)) || !Sized(a.indices, t * k) ||
      !Sized(a.weights, t * k)) {
    return absl::InvalidArgumentError(absl::StrCat("MoeGate: bad shapes tokens ", t, " dim ", d,
                                                   " experts ", e, " topk ", k));
  }
  ASSIGN_OR_RETURN(const float* weight, Weight(a.weight));
  ASSIGN_OR_RETURN(const float* bias, Weight(a.bias));
  ASSIGN_OR_RETURN(const float* bias_vl, Weight(a.bias_vl));
  Call call(*this);
  ASSIGN_OR_RETURN(const float* x, call.In(a.x));
  const uint8_t* mask = nullptr;
  if (!a.image_mask.empty()) {
    ASSIGN_OR_RETURN(mask, call.In(a.image_mask));
  }
  ASSIGN_OR_RETURN(int32_t* indices, call.Alloc<int32_t>(a.indices.size()));
  ASSIGN_OR_RETURN(float* weights, call.Alloc<float>(a.weights.size()));
  const kc::MoeGateParams p{.x = x, .weight = weight, .bias = bias, .bias_vl = bias_vl,
                            .image_mask = mask, .indices = indices, .weights = weights,
                            .tokens = t, .dim = d, .num_experts = params.num_experts,
                            .topk = params.topk, .gate_temp = params.gate_temp,
                            .route_scale = params.route_scale,
                            .norm_topk_prob = params.norm_topk_prob,
                            .score = DeviceScore(params.score_func)};
  if (!kc::SupportsMoeGate(p)) {
    NoteFallback("MoeGate");
    return cpu_.MoeGate(params, a);
  }
  call.Kernels();
  RETURN_IF_ERROR(kc::MoeGate(p, stream_));
  RETURN_IF_ERROR(call.Out(a.indices, indices));
  RETURN_IF_ERROR(call.Out(a.weights, weights));
  return call.Finish();
}

absl::Status CudaOps::HcMix(const cpu::HcParams& params, const cpu::HcMixArgs& a) {
  const int64_t n = params.hc_mult, t = a.tokens, d = a.dim, n_mix = (2 + n) * n;
  if (n < 1 || t <= 0 || d <= 0 || !Sized(a.x, t * n * d) || !Sized(a.hc_fn, n_mix * n * d) ||
      !Sized(a.scale, 3) || !Sized(a.base, n_mix) || !Sized(a.pre, t * n) ||
      !Sized(a.post, t * n) || !Sized(a.comb, t * n * n)) {
    return absl::InvalidArgumentError(absl::StrCat("HcMix: bad shapes for tokens ", t));
  }
  const Clock::time_point t0 = Clock::now();
  stats_.matmul_flops += 2 * t * n_mix * n * d;
  absl::Status st = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const float* fn, Weight(a.hc_fn));
    ASSIGN_OR_RETURN(const float* scale, Weight(a.scale));
    ASSIGN_OR_RETURN(const float* base, Weight(a.base));
    Call call(*this);
    ASSIGN_OR_RETURN(const float* x, call.In(a.x));
    ASSIGN_OR_RETURN(float* pre, call.Alloc<float>(a.pre.size()));
    ASSIGN_OR_RETURN(float* post, call.Alloc<float>(a.post.size()));
    ASSIGN_OR_RETURN(float* comb, call.Alloc<float>(a.comb.size()));
    // The products with the row-stable kernel (CpuOps::HcMix's RowStableGemm
    // bits); the kernel then follows cpu::HcMixFromProducts exactly.
    ASSIGN_OR_RETURN(float* mixes, call.Alloc<float>(t * n_mix));
    const dense::MatmulParams mp{.x = x, .w = fn, .y = mixes, .rows = t, .out = n_mix,
                                 .in = n * d};
    const kc::HcMixParams p{.x = x, .hc_fn = fn, .mixes = mixes, .scale = scale, .base = base, .pre = pre,
                            .post = post, .comb = comb, .tokens = t, .dim = d,
                            .hc_mult = params.hc_mult, .sinkhorn_iters = params.sinkhorn_iters,
                            .hc_eps = params.hc_eps, .norm_eps = params.norm_eps};
    if (!kc::SupportsHcMix(p) || !dense::SupportsRowStableMatmul(mp)) {
      NoteFallback("HcMix");
      return cpu_.HcMix(params, a);
    }
    call.Kernels();
    RETURN_IF_ERROR(dense::RowStableMatmul(mp, stream_));
    RETURN_IF_ERROR(kc::HcMix(p, stream_));
    RETURN_IF_ERROR(call.Out(a.pre, pre));
    RETURN_IF_ERROR(call.Out(a.post, post));
    RETURN_IF_ERROR(call.Out(a.comb, comb));
    return call.Finish();
  }();
  stats_.matmul_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

absl::Status CudaOps::HcCollapse(std::span<const float> x, std::span<const float> pre,
                                 int64_t tokens, int hc_mult, int64_t dim, std::span<float> out) {
  const int64_t n = hc_mult;
  if (n < 1 || tokens <= 0 || dim <= 0 || !Sized(x, tokens * n * dim) ||
      !Sized(pre, tokens * n) || !Sized(out, tokens * dim)) {
    return absl::InvalidArgumentError("HcCollapse: bad shapes");
  }
  Call call(*this);
  ASSIGN_OR_RETURN(const float* dx, call.In(x));
  ASSIGN_OR_RETURN(const float* dpre, call.In(pre));
  ASSIGN_OR_RETURN(float* dout, call.Alloc<float>(out.size()));
  const kc::HcCollapseParams p{.x = dx, .pre = dpre, .out = dout, .tokens = tokens, .dim = dim,
                               .hc_mult = hc_mult, .round_bf16 = bf16()};
  if (!kc::SupportsHcCollapse(p)) {
    NoteFallback("HcCollapse");
    return cpu_.HcCollapse(x, pre, tokens, hc_mult, dim, out);
  }
  call.Kernels();
  RETURN_IF_ERROR(kc::HcCollapse(p, stream_));
  RETURN_IF_ERROR(call.Out(out, dout));
  return call.Finish();
}

absl::Status CudaOps::HcExpand(std::span<const float> x, std::span<const float> y,
                               std::span<const float> post, std::span<const float> comb,
                               int64_t tokens, int hc_mult, int64_t dim, std::span<float> out) {
  const int64_t n = hc_mult;
  if (n < 1 || tokens <= 0 || dim <= 0 || !Sized(x, tokens * n * dim) ||
      !Sized(out, tokens * n * dim) || !Sized(y, tokens * dim) || !Sized(post, tokens * n) ||
      !Sized(comb, tokens * n * n)) {
    return absl::InvalidArgumentError("HcExpand: bad shapes");
  }
  Call call(*this);
  ASSIGN_OR_RETURN(const float* dx, call.In(x));
  ASSIGN_OR_RETURN(const float* dy, call.In(y));
  ASSIGN_OR_RETURN(const float* dpost, call.In(post));
  ASSIGN_OR_RETURN(const float* dcomb, call.In(comb));
  ASSIGN_OR_RETURN(float* dout, call.Alloc<float>(out.size()));
  const kc::HcExpandParams p{.x = dx, .y = dy, .post = dpost, .comb = dcomb, .out = dout,
                             .tokens = tokens, .dim = dim, .hc_mult = hc_mult,
                             .round_bf16 = bf16()};
  if (!kc::SupportsHcExpand(p)) {
    NoteFallback("HcExpand");
    return cpu_.HcExpand(x, y, post, comb, tokens, hc_mult, dim, out);
  }
  call.Kernels();
  RETURN_IF_ERROR(kc::HcExpand(p, stream_));
  RETURN_IF_ERROR(call.Out(out, dout));
  return call.Finish();
}

absl::Status CudaOps::EngramLookup(std::span<const uint8_t> table,
                                   std::span<const uint8_t> scales, int64_t table_rows,
                                   int64_t dim, std::span<const int64_t> ids,
                                   std::span<float> out) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (table_rows <= 0 || dim <= 0 || dim % 32 != 0 || !Sized(table, table_rows * dim) ||
      !Sized(scales, table_rows * (dim / 32)) || !Sized(out, n * dim)) {
    return absl::InvalidArgumentError(absl::StrCat("EngramLookup: bad shapes rows ", table_rows,
                                                   " dim ", dim));
  }
  for (int64_t id : ids) {
    if (id < 0 || id >= table_rows) {
      return absl::InvalidArgumentError(absl::StrCat("EngramLookup: row ", id, " of ",
                                                     table_rows));
    }
  }
  if (n == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const uint8_t* dtable, Weight(table));
  ASSIGN_OR_RETURN(const uint8_t* dscales, Weight(scales));
  // The kernel reads only the looked-up rows: count those, not the table.
  cuda_stats_.weight_bytes_read -= static_cast<int64_t>(table.size_bytes() + scales.size_bytes());
  cuda_stats_.weight_bytes_read += n * (dim + dim / 32);
  Call call(*this);
  ASSIGN_OR_RETURN(const int64_t* dids, call.In(ids));
  ASSIGN_OR_RETURN(float* dout, call.Alloc<float>(out.size()));
  const kc::EngramLookupParams p{.table = dtable, .scales = dscales, .ids = dids, .out = dout,
                                 .table_rows = table_rows, .dim = dim, .num_ids = n};
  if (!kc::SupportsEngramLookup(p)) {
    NoteFallback("EngramLookup");
    return cpu_.EngramLookup(table, scales, table_rows, dim, ids, out);
  }
  call.Kernels();
  RETURN_IF_ERROR(kc::EngramLookup(p, stream_));
  RETURN_IF_ERROR(call.Out(out, dout));
  return call.Finish();
}

absl::Status CudaOps::EngramGate(const cpu::EngramGateArgs& a) {
  const int64_t t = a.tokens, n = a.hc_mult, d = a.dim;
  if (t <= 0 || n <= 0 || d <= 0 || !Sized(a.x, t * n * d) || !Sized(a.key, t * n * d) ||
      !Sized(a.value, t * d) || !Sized(a.weight, n * d) ||
      !(a.token_mask.empty() || Sized(a.token_mask, t))) {
    return absl::InvalidArgumentError(absl::StrCat("EngramGate: bad shapes tokens ", t, " hc ",
                                                   n, " dim ", d));
  }
  ASSIGN_OR_RETURN(const float* weight, Weight(a.weight));
  Call call(*this);
  ASSIGN_OR_RETURN(float* x, call.In(a.x));
  ASSIGN_OR_RETURN(const float* key, call.In(a.key));
  ASSIGN_OR_RETURN(const float* value, call.In(a.value));
  const uint8_t* mask = nullptr;
  if (!a.token_mask.empty()) {
    ASSIGN_OR_RETURN(mask, call.In(a.token_mask));
  }
  const kc::EngramGateParams p{.x = x, .key = key, .value = value, .weight = weight,
                               .token_mask = mask, .tokens = t, .hc_mult = a.hc_mult, .dim = d,
                               .eps = a.eps, .round_bf16 = bf16()};
  if (!kc::SupportsEngramGate(p)) {
    NoteFallback("EngramGate");
    return cpu_.EngramGate(a);
  }
  call.Kernels();
  RETURN_IF_ERROR(kc::EngramGate(p, stream_));
  RETURN_IF_ERROR(call.Out(a.x, x));
  return call.Finish();
}

}  // namespace weir::model
