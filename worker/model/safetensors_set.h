// worker/model/safetensors_set.h
//
// SafetensorsSet: the tensors of a sharded checkpoint as one namespace.
// Opened from (a) a single .safetensors file, (b) a
// model.safetensors.index.json ({"weight_map": {tensor: shard file}}), or
// (c) a directory, which uses its model.safetensors.index.json when present
// and otherwise every *.safetensors file in it (sorted by name).
//
// Thread safety: immutable after Open; concurrent const access is safe.

#ifndef WEIR_WORKER_MODEL_SAFETENSORS_SET_H_
#define WEIR_WORKER_MODEL_SAFETENSORS_SET_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "worker/model/safetensors.h"

namespace weir::model {

inline constexpr char kSafetensorsIndexName[] = "model.safetensors.index.json";

class SafetensorsSet {
 public:
  struct Entry {
    const SafetensorsFile* file;  // owned by the set
    const TensorInfo* info;       // owned by `file`
  };

  // Opens `path` as described above. Errors:
  //   NOT_FOUND        path or a shard the index names does not exist;
  //   DATA_LOSS        a shard is corrupt, or the index names a tensor its
  //                    shard does not contain;
  //   INVALID_ARGUMENT the index is malformed or names a shard outside its
  //                    directory, a tensor name occurs in two shards, or a
  //                    directory holds no shards.
  static absl::StatusOr<std::unique_ptr<SafetensorsSet>> Open(const std::string& path);

  // Returns the tensor named `name`, or nullptr.
  const Entry* Find(std::string_view name) const;
  // Returns the bytes of `entry`, valid while the set lives.
  std::span<const uint8_t> Data(const Entry& entry) const { return entry.file->Data(*entry.info); }

  // All tensor names, sorted.
  std::vector<std::string> Names() const;
  size_t size() const { return entries_.size(); }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  SafetensorsSet() = default;
  absl::Status AddFile(std::unique_ptr<SafetensorsFile> file);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  absl::flat_hash_map<std::string, Entry> entries_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_SAFETENSORS_SET_H_
