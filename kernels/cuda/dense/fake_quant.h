// kernels/cuda/dense/fake_quant.h
//
// FakeQuant: quantize->dequantize of fp32 values in the block formats of
// DeepSeek-V4.1 (spec §4.9), on the GPU, bit-identical to
// kernels/cpu/quant.h FakeQuantFp8 / FakeQuantFp4 (same amax floors, same
// ceil(log2) read off the fp32 bits, same fp32 division x / s, same
// round-to-nearest-even saturating element and scale casts; a block holding
// any NaN or +-Inf becomes all NaN):
//   kFp8      e4m3 elements, 32-blocks, UE8M0 scale   (activations, SWA KV)
//   kMxfp4    e2m1 elements, 32-blocks, E8M0 scale    (index keys and queries)
//   kNvfp4Kv  e2m1 elements, 16-blocks, E4M3 scale    (main compressed KV)
// Blocks are consecutive runs of FakeQuantBlock(format) elements of `x`, so a
// row length that is a multiple of the block keeps every block inside one row
// ("blocks along the last dimension").
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DENSE_FAKE_QUANT_H_
#define WEIR_KERNELS_CUDA_DENSE_FAKE_QUANT_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::dense {

enum class FakeQuantFormat {
  kFp8,      // e4m3, 32-blocks, UE8M0 scale
  kMxfp4,    // e2m1, 32-blocks, E8M0 scale
  kNvfp4Kv,  // e2m1, 16-blocks, E4M3 scale
};

// Returns the block length of `format` (32, 32 or 16).
int FakeQuantBlock(FakeQuantFormat format);

struct FakeQuantParams {
  const float* x = nullptr;  // device [n]
  float* out = nullptr;      // device [n]; may equal x (in place), must not partly overlap it
  int64_t n = 0;
  FakeQuantFormat format = FakeQuantFormat::kFp8;
};

// True for non-null pointers, n a positive multiple of FakeQuantBlock(format)
// and a known format.
bool SupportsFakeQuant(const FakeQuantParams& params);

// Enqueues out = Dequantize(Quantize(x)) on `stream` (nullptr = the legacy
// default stream). No allocation. INVALID_ARGUMENT when !SupportsFakeQuant;
// INTERNAL with the CUDA error string if the launch fails.
absl::Status FakeQuant(const FakeQuantParams& params, cudaStream_t stream);

// The input of a product whose reference quantizes its activation to FP8
// first (kernels/cpu Linear's act_quant; MatmulParams::fp8_activation): with
// `fp8`, enqueues FakeQuant kFp8 of x [n] into `scratch` [n] and sets *input
// to scratch; otherwise sets *input to x and enqueues nothing. Errors as
// FakeQuant.
absl::Status Fp8ActivationInput(const float* x, float* scratch, int64_t n, bool fp8,
                                const float** input, cudaStream_t stream);

// The stored form of the compressed KV (kNvfp4Kv): x [n] -> e2m1 codes
// packed two per byte (element 2k in the low nibble) [n / 2] and one E4M3
// scale per 16 elements [n / 16], bit-identical to kernels/cpu/quant.h
// QuantizeFp4(x, 16, Fp4Scale::kE4m3) (a block with a non-finite element
// gets the NaN scale 0x7F and zero codes), so DequantizeFp4 of the result
// equals FakeQuant kNvfp4Kv of x.
struct QuantizeNvfp4KvParams {
  const float* x = nullptr;   // device [n]
  uint8_t* codes = nullptr;   // device [n / 2]
  uint8_t* scales = nullptr;  // device [n / 16]
  int64_t n = 0;              // a multiple of 16
};
bool SupportsQuantizeNvfp4Kv(const QuantizeNvfp4KvParams& params);
absl::Status QuantizeNvfp4Kv(const QuantizeNvfp4KvParams& params, cudaStream_t stream);

// The stored form of MXFP4 activations (kMxfp4: the indexer's keys in the
// decoder's pool): x [n] -> e2m1 codes packed two per byte (element 2k in the
// low nibble) [n / 2] and one E8M0 scale per 32 elements [n / 32], as
// kernels/cpu/quant.h QuantizeFp4(x, 32, Fp4Scale::kE8m0) (a block with a
// non-finite element gets the NaN scale 0xFF and zero codes), so
// DequantizeFp4 of the result equals FakeQuant kMxfp4 of x. INVALID_ARGUMENT
// unless n is a non-negative multiple of 32 with x, codes, scales when n > 0.
struct QuantizeMxfp4Params {
  const float* x = nullptr;   // device [n]
  uint8_t* codes = nullptr;   // device [n / 2]
  uint8_t* scales = nullptr;  // device [n / 32]
  int64_t n = 0;              // a multiple of 32
};
absl::Status QuantizeMxfp4(const QuantizeMxfp4Params& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FAKE_QUANT_H_
