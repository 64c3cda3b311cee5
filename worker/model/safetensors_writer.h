// worker/model/safetensors_writer.h
//
// Writes safetensors files: tensors are laid out in the order given, the JSON
// header is padded with spaces to a multiple of 8 bytes (so the data section
// starts 8-aligned, as the reference writer does). Tensor bytes are produced
// one tensor at a time by a callback, so a file larger than memory can be
// written.
//
// Thread safety: pure functions; the callback runs on the calling thread.

#ifndef WEIR_WORKER_MODEL_SAFETENSORS_WRITER_H_
#define WEIR_WORKER_MODEL_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/safetensors.h"

namespace weir::model {

struct TensorDecl {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;

  int64_t num_bytes() const;
};

// Fills `out` [decl.num_bytes()] with the bytes of `decl`.
using TensorFiller = std::function<absl::Status(const TensorDecl& decl, std::span<uint8_t> out)>;

// Returns the 8-byte length prefix plus the padded JSON header for `tensors`.
// INVALID_ARGUMENT on duplicate or reserved ("__metadata__") names, or
// negative / overflowing shapes.
absl::StatusOr<std::string> BuildSafetensorsHeader(
    const std::vector<TensorDecl>& tensors, const std::map<std::string, std::string>& metadata);

// Writes `path` (through `path`.tmp and a rename). Errors: those of
// BuildSafetensorsHeader, the filler's, or INTERNAL on I/O failure.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorDecl>& tensors,
                              const TensorFiller& fill,
                              const std::map<std::string, std::string>& metadata = {});

// Returns a complete in-memory file image; `data[i]` holds the bytes of
// `tensors[i]`. INVALID_ARGUMENT if a size does not match its declaration.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorDecl>& tensors, const std::vector<std::string>& data,
    const std::map<std::string, std::string>& metadata = {});

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_SAFETENSORS_WRITER_H_
