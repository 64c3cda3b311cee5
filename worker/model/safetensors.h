// worker/model/safetensors.h
//
// Read-only access to one safetensors file through mmap. The format: an 8-byte
// little-endian header length N, N bytes of JSON
//   {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// then the data section; offsets are relative to its start.
//
// Every header field is bounds-checked: a truncated file, malformed JSON, a
// header longer than the file, an unknown dtype, offsets outside the data
// section, overlapping tensors, or a byte range that does not equal
// numel * dtype size returns an error naming the file and tensor. Nothing in
// a file's content can crash the reader. (A file truncated by another process
// *after* it was mapped can still raise SIGBUS; checkpoints are immutable.)
//
// Thread safety: a SafetensorsFile is immutable after Open; concurrent const
// access is safe.

#ifndef WEIR_WORKER_MODEL_SAFETENSORS_H_
#define WEIR_WORKER_MODEL_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace weir::model {

// The safetensors element types (names as in the format: "F8_E4M3", "BF16"...).
enum class DType : uint8_t {
  kBool, kU8, kI8, kF8E4M3, kF8E5M2, kF8E8M0,
  kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kI64, kU64, kF64,
};

std::string_view DTypeName(DType dtype);
std::optional<DType> DTypeFromName(std::string_view name);
// Bytes per element (1, 2, 4 or 8).
int64_t DTypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offsets within the data section, [begin, end)
  int64_t end = 0;

  int64_t num_bytes() const { return end - begin; }
  // Product of `shape` (1 for a scalar).
  int64_t num_elements() const;
};

// "[4, 32]"
std::string ShapeString(const std::vector<int64_t>& shape);

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;
  int64_t data_offset = 0;  // file offset of the data section: 8 + N
  int64_t data_size = 0;    // bytes after the header

  // Returns the tensor named `name`, or nullptr.
  const TensorInfo* Find(std::string_view name) const;

  absl::flat_hash_map<std::string, int> index;  // name -> position in `tensors`
};

// Largest accepted header (as the reference implementation: 100 MB).
inline constexpr int64_t kMaxSafetensorsHeaderBytes = int64_t{100} << 20;

// Parses and validates the header of the complete file image `file`. `label`
// (usually the path) prefixes error messages. Returns DATA_LOSS for a
// truncated or corrupt file (message names the tensor when one is at fault)
// and INVALID_ARGUMENT for a well-formed entry with an unsupported dtype.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file,
                                                         std::string_view label);

class SafetensorsFile {
 public:
  // Maps `path` read-only and parses its header. NOT_FOUND if it cannot be
  // opened; INVALID_ARGUMENT if it is not a regular file; otherwise the
  // errors of ParseSafetensorsHeader.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const TensorInfo* Find(std::string_view name) const { return header_.Find(name); }

  // Returns the bytes of `info` [info.num_bytes()], valid while this file
  // lives. No alignment beyond what the file provides.
  // REQUIRES: `info` belongs to this file's header.
  std::span<const uint8_t> Data(const TensorInfo& info) const;

 private:
  SafetensorsFile(std::string path, const uint8_t* base, size_t size, SafetensorsHeader header)
      : path_(std::move(path)), base_(base), size_(size), header_(std::move(header)) {}

  std::string path_;
  const uint8_t* base_;  // mapping of the whole file; nullptr for an empty file
  size_t size_;
  SafetensorsHeader header_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_SAFETENSORS_H_
