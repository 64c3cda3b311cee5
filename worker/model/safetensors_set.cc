#include "worker/model/safetensors_set.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/read_file.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace weir::model {
namespace {

namespace fs = std::filesystem;

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(),
                                                suffix.data(), suffix.size()) == 0;
}

// Parses an index file into shard file -> tensor names listed for it.
absl::Status ParseIndex(const std::string& path,
                        std::map<std::string, std::vector<std::string>>* shards) {
  ASSIGN_OR_RETURN(const std::string s, ReadFile(path));
  nlohmann::json root = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  auto map = root.find("weight_map");
  if (map == root.end() || !map->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing object 'weight_map'"));
  }
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it.value().is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": weight_map entry of tensor '", it.key(), "' is not a string"));
    }
    const std::string file = it.value().get<std::string>();
    // Shards live next to the index: no absolute paths, no parent references.
    if (file.empty() || file[0] == '/' || absl::StrContains(file, "..")) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", it.key(), "' maps to invalid shard name '", file, "'"));
    }
    (*shards)[file].push_back(it.key());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SafetensorsSet::AddFile(std::unique_ptr<SafetensorsFile> file) {
  for (const TensorInfo& info : file->tensors()) {
    auto [it, inserted] = entries_.try_emplace(info.name, Entry{file.get(), &info});
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", info.name, "' is in both ",
                                                     it->second.file->path(), " and ",
                                                     file->path()));
    }
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsSet>> SafetensorsSet::Open(const std::string& path) {
  std::unique_ptr<SafetensorsSet> set(new SafetensorsSet());
  std::error_code ec;
  std::string index_path;
  std::vector<std::string> shard_paths;
  std::map<std::string, std::vector<std::string>> listed;  // shard -> tensors per the index
  fs::path dir;
  if (fs::is_directory(path, ec)) {
    dir = path;
    if (fs::exists(dir / kSafetensorsIndexName, ec)) {
      index_path = (dir / kSafetensorsIndexName).string();
    } else {
      for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string p = it->path().string();
        if (EndsWith(p, ".safetensors")) shard_paths.push_back(p);
      }
      if (ec) return absl::InternalError(absl::StrCat(path, ": cannot list: ", ec.message()));
      std::sort(shard_paths.begin(), shard_paths.end());
      if (shard_paths.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": no .safetensors files"));
      }
    }
  } else if (EndsWith(path, ".json")) {
    index_path = path;
    dir = fs::path(path).parent_path();
  } else {
    shard_paths.push_back(path);
  }
  if (!index_path.empty()) {
    if (absl::Status s = ParseIndex(index_path, &listed); !s.ok()) return s;
    for (const auto& [file, names] : listed) shard_paths.push_back((dir / file).string());
  }
  for (const std::string& shard : shard_paths) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(shard);
    if (!file.ok()) return file.status();
    if (absl::Status s = set->AddFile(*std::move(file)); !s.ok()) return s;
  }
  for (const auto& [file, names] : listed) {
    const std::string shard = (dir / file).string();
    for (const std::string& name : names) {
      const Entry* e = set->Find(name);
      if (e == nullptr || e->file->path() != shard) {
        return absl::DataLossError(absl::StrCat(index_path, ": tensor '", name,
                                                "' is listed in shard ", file,
                                                " but that shard does not contain it"));
      }
    }
  }
  return set;
}

const SafetensorsSet::Entry* SafetensorsSet::Find(std::string_view name) const {
  auto it = entries_.find(absl::string_view(name.data(), name.size()));
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsSet::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace weir::model
