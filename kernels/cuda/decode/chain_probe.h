// kernels/cuda/decode/chain_probe.h
//
// A latency probe for benchmarks: one thread runs n dependent additions
// (fp32 __fadd_rn or fp64 __dadd_rn), the shape of the reference order's
// serial sums, and records the SM cycles they took (clock64), so a benchmark
// can state the chain floor of a row-stable kernel in measured cycles.
//
// Thread safety: one probe result buffer per process; not for concurrent use.

#ifndef WEIR_KERNELS_CUDA_DECODE_CHAIN_PROBE_H_
#define WEIR_KERNELS_CUDA_DECODE_CHAIN_PROBE_H_

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::decode {

// Enqueues the probe (n > 0) on `stream`; INTERNAL on a CUDA error.
absl::Status EnqueueChainProbe(bool fp64, int n, cudaStream_t stream);
// Waits for the device and returns the last probe's cycle count.
absl::Status ChainProbeCycles(long long* cycles);

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_CHAIN_PROBE_H_
