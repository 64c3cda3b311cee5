#include <cuda_runtime.h>

#include "kernels/cuda/decode/kv_rows.cuh"
#include "kernels/cuda/decode/kv_rows.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::decode {

namespace {

constexpr int kRowThreads = 128;

template <DeviceKvStore kStore>
void Launch(const KvRowFinishParams& p, cudaStream_t stream) {
  KvRowFinishKernel<kRowThreads, kStore>
      <<<static_cast<unsigned>(p.rows), kRowThreads, static_cast<size_t>(p.dim * 4), stream>>>(
          p.x, p.norm_weight, p.eps, p.round_bf16, p.positions, p.cos_sin, p.cos_sin_rows,
          p.rope_dim, p.out, p.rope_out, p.dst_rows, p.pool_rows, p.pool, p.codes, p.scales, p.dim);
}

}  // namespace

bool SupportsKvRowFinish(const KvRowFinishParams& p) {
  if (p.rows == 0) return true;
  if (p.rows < 0 || p.rows > 0x7FFFFFFF || p.x == nullptr || p.dim <= 0 || p.dim % 32 != 0 ||
      p.dim > kKvRowMaxDim || p.pool_rows < 0) {
    return false;
  }
  if (p.positions != nullptr && (p.cos_sin == nullptr || p.cos_sin_rows <= 0 || p.rope_dim <= 0 ||
                                 p.rope_dim % 2 != 0 || p.rope_dim > p.dim)) {
    return false;
  }
  switch (p.store) {
    case KvRowStore::kNone:
      return true;
    case KvRowStore::kFloatFp8:
    case KvRowStore::kFloatMxfp4:
    case KvRowStore::kFloatNvfp4:
      return p.pool != nullptr;
    case KvRowStore::kCodesFp8:
      return p.codes != nullptr && p.scales != nullptr &&
             reinterpret_cast<uintptr_t>(p.codes) % 8 == 0;
    case KvRowStore::kCodesMxfp4:
    case KvRowStore::kCodesNvfp4:
      return p.codes != nullptr && p.scales != nullptr;
  }
  return false;
}

absl::Status KvRowFinish(const KvRowFinishParams& p, cudaStream_t stream) {
  if (!SupportsKvRowFinish(p)) {
    return absl::InvalidArgumentError(
        "KvRowFinish: needs x, dim a positive multiple of 32 up to 8192, with positions a "
        "cos_sin table and an even rope_dim in (0, dim], and the pool (or 8-byte aligned codes "
        "and scales) its store writes");
  }
  if (p.rows == 0) return absl::OkStatus();
  switch (p.store) {
    case KvRowStore::kNone:
      Launch<DeviceKvStore::kNone>(p, stream);
      break;
    case KvRowStore::kFloatFp8:
      Launch<DeviceKvStore::kFloatFp8>(p, stream);
      break;
    case KvRowStore::kFloatMxfp4:
      Launch<DeviceKvStore::kFloatMxfp4>(p, stream);
      break;
    case KvRowStore::kFloatNvfp4:
      Launch<DeviceKvStore::kFloatNvfp4>(p, stream);
      break;
    case KvRowStore::kCodesFp8:
      Launch<DeviceKvStore::kCodesFp8>(p, stream);
      break;
    case KvRowStore::kCodesMxfp4:
      Launch<DeviceKvStore::kCodesMxfp4>(p, stream);
      break;
    case KvRowStore::kCodesNvfp4:
      Launch<DeviceKvStore::kCodesNvfp4>(p, stream);
      break;
  }
  return LaunchStatus("KvRowFinish");
}

}  // namespace weir::kernels::cuda::decode
