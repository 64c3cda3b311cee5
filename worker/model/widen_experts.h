// worker/model/widen_experts.h
//
// A checkpoint's experts made wider without changing the function it
// computes: every routed and shared expert gets `inter` intermediate units
// (moe_intermediate_size), the added units' weights zero (their gate and up
// rows, and their columns of the down projection). An added unit's h is
// silu(0) * 0 = 0, its FP8 block of h quantizes to zero codes, and its down
// columns are zero, so every output is the original one: the same values in
// the same order, with zero terms added after them.
//
// What it is for: the trained tiny's experts (64 units) are narrower than the
// device's MXFP4 kernel's K step (256), so the kernel never ran trained
// weights; the widened copy lets the fast numerics' fidelity tests run the
// routed experts' kernels on them (kernels/cuda/moe/README.md).
//
// Thread safety: a pure function over the filesystem.
#ifndef WEIR_WORKER_MODEL_WIDEN_EXPERTS_H_
#define WEIR_WORKER_MODEL_WIDEN_EXPERTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace weir::model {

// Writes into `out_dir` (created if needed) the checkpoint of `src_dir` with
// moe_intermediate_size = `inter`: config.json (the source's with that one
// value changed), one shard, its index, and the source's tokenizer files.
// Each tensor whose shape the new size changes is the source's, padded with
// zero codes (zero weights) and scale 2^0 where the shape grew; every other
// tensor (the unexpected ones too) is copied byte for byte. INVALID_ARGUMENT
// when `inter` is below the source's size or not a multiple of 32, or a
// tensor's shape does not grow as a padding can make it; the errors of
// Checkpoint::Open, ParseModelConfig and the writer otherwise.
absl::Status WriteWidenedExperts(const std::string& src_dir, int64_t inter,
                                 const std::string& out_dir);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_WIDEN_EXPERTS_H_
