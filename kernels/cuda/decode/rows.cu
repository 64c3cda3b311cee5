#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "kernels/cuda/decode/launch_util.h"
#include "kernels/cuda/decode/rows.cuh"
#include "kernels/cuda/decode/rows.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::decode {
namespace {

using internal::BlocksFor;
using internal::CheckedProduct;
using internal::kMaxBlocks;
using internal::ThreadsForWidth;

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

bool SupportsEmbedStreams(const EmbedStreamsParams& p) {
  int64_t n = 0;
  if (p.tokens < 0 || p.vocab < 0 || p.dim < 0 || p.copies < 0 || p.tokens > INT_MAX) return false;
  if (!CheckedProduct({p.tokens, p.copies, p.dim}, &n)) return false;
  if (n == 0) return true;
  return p.token_ids != nullptr && p.out != nullptr && (p.vocab == 0 || p.embed != nullptr);
}

absl::Status EmbedStreams(const EmbedStreamsParams& p, cudaStream_t stream) {
  if (!SupportsEmbedStreams(p)) {
    return absl::InvalidArgumentError(
        "EmbedStreams: needs tokens, vocab, dim, copies >= 0 (tokens < 2^31), and token_ids, out "
        "(and embed when vocab > 0) when there is output; got tokens " + Str(p.tokens) +
        " vocab " + Str(p.vocab) + " dim " + Str(p.dim) + " copies " + Str(p.copies));
  }
  if (p.tokens == 0 || p.copies == 0 || p.dim == 0) return absl::OkStatus();
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(p.tokens, kMaxBlocks));
  EmbedStreamsKernel<<<blocks, ThreadsForWidth(p.dim), 0, stream>>>(
      p.embed, p.token_ids, p.out, p.bad_count, p.tokens, p.vocab, p.dim, p.copies);
  return LaunchStatus("EmbedStreams");
}

bool SupportsRoundBf16(const RoundBf16Params& p) { return p.n == 0 || (p.n > 0 && p.x != nullptr); }

absl::Status RoundBf16(const RoundBf16Params& p, cudaStream_t stream) {
  if (!SupportsRoundBf16(p)) {
    return absl::InvalidArgumentError("RoundBf16: needs n >= 0 and x when n > 0; got n " +
                                      Str(p.n));
  }
  if (p.n == 0) return absl::OkStatus();
  RoundBf16Kernel<<<BlocksFor(p.n), internal::kThreads, 0, stream>>>(p.x, p.n);
  return LaunchStatus("RoundBf16");
}

bool SupportsScale(const ScaleParams& p) { return p.n == 0 || (p.n > 0 && p.x != nullptr); }

absl::Status Scale(const ScaleParams& p, cudaStream_t stream) {
  if (!SupportsScale(p)) {
    return absl::InvalidArgumentError("Scale: needs n >= 0 and x when n > 0; got n " + Str(p.n));
  }
  if (p.n == 0) return absl::OkStatus();
  ScaleKernel<<<BlocksFor(p.n), internal::kThreads, 0, stream>>>(p.x, p.n, p.factor, p.round_bf16);
  return LaunchStatus("Scale");
}

bool SupportsRandomFill(const RandomFillParams& p) {
  return p.n == 0 || (p.n > 0 && (p.x != nullptr) != (p.bf16 != nullptr));
}

absl::Status RandomFill(const RandomFillParams& p, cudaStream_t stream) {
  if (!SupportsRandomFill(p)) {
    return absl::InvalidArgumentError(
        "RandomFill: needs n >= 0 and exactly one of x, bf16 when n > 0; got n " + Str(p.n));
  }
  if (p.n == 0) return absl::OkStatus();
  RandomFillKernel<<<BlocksFor(p.n), internal::kThreads, 0, stream>>>(p.x, p.bf16, p.n, p.seed,
                                                                      p.scale);
  return LaunchStatus("RandomFill");
}

bool SupportsToBf16(const ToBf16Params& p) {
  return p.n == 0 || (p.n > 0 && p.x != nullptr && p.out != nullptr);
}

absl::Status ToBf16(const ToBf16Params& p, cudaStream_t stream) {
  if (!SupportsToBf16(p)) {
    return absl::InvalidArgumentError("ToBf16: needs n >= 0 and x, out when n > 0; got n " +
                                      Str(p.n));
  }
  if (p.n == 0) return absl::OkStatus();
  ToBf16Kernel<<<BlocksFor(p.n), internal::kThreads, 0, stream>>>(p.x, p.out, p.n);
  return LaunchStatus("ToBf16");
}

bool SupportsRandomBytes(const RandomBytesParams& p) {
  return p.n == 0 || (p.n > 0 && p.x != nullptr);
}

absl::Status RandomBytes(const RandomBytesParams& p, cudaStream_t stream) {
  if (!SupportsRandomBytes(p)) {
    return absl::InvalidArgumentError("RandomBytes: needs n >= 0 and x when n > 0; got n " +
                                      Str(p.n));
  }
  if (p.n == 0) return absl::OkStatus();
  RandomBytesKernel<<<BlocksFor(p.n), internal::kThreads, 0, stream>>>(p.x, p.n, p.seed, p.mask);
  return LaunchStatus("RandomBytes");
}

bool SupportsCopyRows(const CopyRowsParams& p) {
  if (p.rows < 0 || p.width < 0 || p.src_stride < 0 || p.dst_stride < 0 || p.src_capacity < 0 ||
      p.dst_capacity < 0 || p.rows > INT_MAX) {
    return false;
  }
  if ((p.src_stride != 0 && p.src_stride < p.width) ||
      (p.dst_stride != 0 && p.dst_stride < p.width)) {
    return false;
  }
  if (p.rows == 0 || p.width == 0) return true;
  return p.src != nullptr && p.dst != nullptr;
}

absl::Status CopyRows(const CopyRowsParams& p, cudaStream_t stream) {
  if (!SupportsCopyRows(p)) {
    return absl::InvalidArgumentError(
        "CopyRows: needs rows (< 2^31), width, strides, capacities >= 0, non-zero strides >= "
        "width, src and dst when there is output; got rows " + Str(p.rows) + " width " +
        Str(p.width) + " src_stride " + Str(p.src_stride) + " dst_stride " + Str(p.dst_stride));
  }
  if (p.rows == 0 || p.width == 0) return absl::OkStatus();
  const int64_t src_stride = p.src_stride == 0 ? p.width : p.src_stride;
  const int64_t dst_stride = p.dst_stride == 0 ? p.width : p.dst_stride;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(p.rows, kMaxBlocks));
  CopyRowsKernel<<<blocks, ThreadsForWidth(p.width), 0, stream>>>(
      p.src, p.dst, p.src_rows, p.dst_rows, p.rows, p.width, src_stride, dst_stride,
      p.src_capacity, p.dst_capacity);
  return LaunchStatus("CopyRows");
}

bool SupportsSwapAxes(const SwapAxesParams& p) {
  int64_t n = 0;
  if (p.a < 0 || p.b < 0 || p.width < 0 || !CheckedProduct({p.a, p.b, p.width}, &n)) return false;
  if (p.rope_cos_sin != nullptr &&
      (p.rope_positions == nullptr || p.rope_cos_sin_rows <= 0 || p.rope_dim <= 0 ||
       p.rope_dim % 2 != 0 || p.rope_dim > p.rope_head_dim || p.width % p.rope_head_dim != 0)) {
    return false;
  }
  if ((p.rope_cos_sin != nullptr || p.dst_bf16 != nullptr) &&
      (p.a * p.b >= (int64_t{1} << 31) || p.width >= (int64_t{1} << 26))) {
    return false;
  }
  if (p.dst != nullptr && p.dst_bf16 != nullptr) return false;
  return n == 0 || (p.src != nullptr && (p.dst != nullptr || p.dst_bf16 != nullptr));
}

absl::Status SwapAxes(const SwapAxesParams& p, cudaStream_t stream) {
  if (!SupportsSwapAxes(p)) {
    return absl::InvalidArgumentError(
        "SwapAxes: needs a, b, width >= 0 and src and one of dst, dst_bf16 when there is "
        "output, and with a RoPE its positions, a table of rows > 0, an even rope_dim in (0, "
        "rope_head_dim] with width a multiple of rope_head_dim, and with a RoPE or bf16 output "
        "a * b < 2^31 and width < 2^26; got a " +
        Str(p.a) + " b " + Str(p.b) + " width " + Str(p.width));
  }
  const int64_t n = p.a * p.b * p.width;
  if (n == 0) return absl::OkStatus();
  const int64_t chunks = (p.width + kSwapChunk - 1) / kSwapChunk;
  const dim3 grid(static_cast<unsigned>(p.a * p.b), static_cast<unsigned>(chunks));
  if (p.rope_cos_sin != nullptr) {  // chunks < 65,536 by width < 2^26
    const SwapRope rope{p.rope_positions, p.rope_cos_sin, p.rope_cos_sin_rows, p.rope_head_dim,
                        p.rope_dim,       p.rope_inverse, p.rope_round_bf16};
    if (p.dst_bf16 != nullptr) {
      SwapAxesRowsKernel<true>
          <<<grid, 256, 0, stream>>>(p.src, p.dst_bf16, p.a, p.b, p.width, rope);
    } else {
      SwapAxesRowsKernel<true><<<grid, 256, 0, stream>>>(p.src, p.dst, p.a, p.b, p.width, rope);
    }
  } else if (p.dst_bf16 != nullptr) {  // chunks < 65,536 by width < 2^26
    SwapAxesRowsKernel<false><<<grid, 256, 0, stream>>>(p.src, p.dst_bf16, p.a, p.b, p.width, {});
  } else if (p.a * p.b < (int64_t{1} << 31) && chunks <= 65535) {
    SwapAxesRowsKernel<false><<<grid, 256, 0, stream>>>(p.src, p.dst, p.a, p.b, p.width, {});
  } else {
    SwapAxesKernel<<<BlocksFor(n), internal::kThreads, 0, stream>>>(p.src, p.dst, p.a, p.b,
                                                                    p.width);
  }
  return LaunchStatus("SwapAxes");
}

bool SupportsStreamMean(const StreamMeanParams& p) {
  int64_t n = 0;
  if (p.tokens < 0 || p.dim < 0 || p.out_stride < 0 ||
      (p.out_stride != 0 && p.out_stride < p.dim)) {
    return false;
  }
  int64_t out_size = 0;
  if (!CheckedProduct({p.tokens, p.dim, p.copies < 1 ? 1 : p.copies}, &n) ||
      !CheckedProduct({p.tokens, p.out_stride == 0 ? p.dim : p.out_stride}, &out_size)) {
    return false;
  }
  if (n == 0) return true;
  return p.copies >= 1 && p.x != nullptr && p.out != nullptr;
}

absl::Status StreamMean(const StreamMeanParams& p, cudaStream_t stream) {
  if (!SupportsStreamMean(p)) {
    return absl::InvalidArgumentError(
        "StreamMean: needs tokens, dim >= 0, out_stride 0 or >= dim, and copies >= 1, x and out "
        "when there is output; got tokens " + Str(p.tokens) + " dim " + Str(p.dim) + " copies " +
        Str(p.copies) + " out_stride " + Str(p.out_stride));
  }
  const int64_t n = p.tokens * p.dim;
  if (n == 0) return absl::OkStatus();
  const int64_t out_stride = p.out_stride == 0 ? p.dim : p.out_stride;
  StreamMeanKernel<<<BlocksFor(n), internal::kThreads, 0, stream>>>(p.x, p.out, p.tokens, p.dim,
                                                                    p.copies, out_stride);
  return LaunchStatus("StreamMean");
}

bool SupportsMarkovArgmax(const MarkovArgmaxParams& p) {
  if (p.sequences < 0 || p.sequences > INT_MAX || p.vocab < 1 || p.vocab > INT_MAX || p.step < 0 ||
      p.step >= p.block) {
    return false;
  }
  return p.sequences == 0 ||
         (p.logits != nullptr && p.bias != nullptr && p.tokens != nullptr && p.prev != nullptr);
}

absl::Status MarkovArgmax(const MarkovArgmaxParams& p, cudaStream_t stream) {
  if (!SupportsMarkovArgmax(p)) {
    return absl::InvalidArgumentError(
        "MarkovArgmax: needs 0 <= sequences < 2^31, 1 <= vocab < 2^31, 0 <= step < block and "
        "the pointers; got sequences " +
        Str(p.sequences) + " vocab " + Str(p.vocab) + " step " + Str(p.step) + " block " +
        Str(p.block));
  }
  if (p.sequences == 0) return absl::OkStatus();
  MarkovArgmaxKernel<<<static_cast<unsigned>(p.sequences), kMarkovThreads, 0, stream>>>(
      p.logits, p.bias, p.tokens, p.prev, p.vocab, p.block, p.step);
  return LaunchStatus("MarkovArgmax");
}

}  // namespace weir::kernels::cuda::decode
