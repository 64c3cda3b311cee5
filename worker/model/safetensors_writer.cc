#include "worker/model/safetensors_writer.h"

#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace weir::model {

int64_t TensorDecl::num_bytes() const {
  int64_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::string> BuildSafetensorsHeader(
    const std::vector<TensorDecl>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::json root = nlohmann::json::object();
  if (!metadata.empty()) {
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    root["__metadata__"] = std::move(meta);
  }
  std::set<std::string> names;
  int64_t offset = 0;
  for (const TensorDecl& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor name '", t.name, "' is reserved or repeated"));
    }
    int64_t bytes = DTypeSize(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0 || (d != 0 && bytes > (int64_t{1} << 62) / d)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has invalid shape ", ShapeString(t.shape)));
      }
      bytes *= d;
    }
    root[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = root.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorDecl>& tensors,
                              const TensorFiller& fill,
                              const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> header = BuildSafetensorsHeader(tensors, metadata);
  if (!header.ok()) return header.status();
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot create ", tmp));
  auto fail = [&](absl::Status s) {
    std::fclose(f);
    std::remove(tmp.c_str());
    return s;
  };
  if (std::fwrite(header->data(), 1, header->size(), f) != header->size()) {
    return fail(absl::InternalError(absl::StrCat("write failed: ", tmp)));
  }
  std::vector<uint8_t> buffer;
  for (const TensorDecl& t : tensors) {
    buffer.assign(static_cast<size_t>(t.num_bytes()), 0);
    if (absl::Status s = fill(t, std::span<uint8_t>(buffer)); !s.ok()) return fail(s);
    if (std::fwrite(buffer.data(), 1, buffer.size(), f) != buffer.size()) {
      return fail(absl::InternalError(absl::StrCat("write failed: ", tmp)));
    }
  }
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("close failed: ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorDecl>& tensors, const std::vector<std::string>& data,
    const std::map<std::string, std::string>& metadata) {
  if (tensors.size() != data.size()) {
    return absl::InvalidArgumentError("SerializeSafetensors: one data string per tensor");
  }
  absl::StatusOr<std::string> out = BuildSafetensorsHeader(tensors, metadata);
  if (!out.ok()) return out.status();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (static_cast<int64_t>(data[i].size()) != tensors[i].num_bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensors[i].name, "': ", data[i].size(), " bytes given, ",
                       tensors[i].num_bytes(), " declared"));
    }
    out->append(data[i]);
  }
  return out;
}

}  // namespace weir::model
