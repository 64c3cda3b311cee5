#include "worker/model/widen_experts.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "worker/model/checkpoint.h"
#include "worker/model/checkpoint_layout.h"
#include "worker/model/config.h"
#include "worker/model/safetensors.h"
#include "worker/model/safetensors_set.h"
#include "worker/model/safetensors_writer.h"

namespace weir::model {
namespace {

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << f.rdbuf();
  return text.str();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// The config text with its intermediate size set to `inter` (at the top level
// or in text_config, under either of the names config.cc accepts).
absl::StatusOr<std::string> WidenedConfig(const std::string& text, int64_t inter) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("WriteWidenedExperts: config.json is not a JSON object");
  }
  int set = 0;
  auto widen = [&](nlohmann::json& o) {
    for (const char* key : {"moe_intermediate_size", "moe_inter_dim"}) {
      if (o.contains(key)) {
        o[key] = inter;
        ++set;
      }
    }
  };
  widen(j);
  if (j.contains("text_config") && j["text_config"].is_object()) widen(j["text_config"]);
  if (set == 0) {
    return absl::InvalidArgumentError("WriteWidenedExperts: config.json has no intermediate size");
  }
  return j.dump(2) + "\n";
}

// `src` [rows, cols] of `element` bytes each, into `out` [new_rows, new_cols],
// the added rows and columns filled with `fill` bytes.
void Pad(std::span<const uint8_t> src, int64_t rows, int64_t cols, int64_t new_cols,
         int64_t element, uint8_t fill, std::span<uint8_t> out) {
  std::fill(out.begin(), out.end(), fill);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.data() + r * new_cols * element, src.data() + r * cols * element,
                static_cast<size_t>(cols * element));
  }
}

}  // namespace

absl::Status WriteWidenedExperts(const std::string& src_dir, int64_t inter,
                                 const std::string& out_dir) {
  auto source = Checkpoint::Open(src_dir);
  if (!source.ok()) return source.status();
  const Checkpoint& src = **source;
  if (inter < src.config().moe_inter_dim || inter % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("WriteWidenedExperts: intermediate size ", inter,
                                                   " (a multiple of 32, at least the source's ",
                                                   src.config().moe_inter_dim, ")"));
  }
  auto text = ReadText(src_dir + "/config.json");
  if (!text.ok()) return text.status();
  auto widened_text = WidenedConfig(*text, inter);
  if (!widened_text.ok()) return widened_text.status();
  auto widened = ParseModelConfig(*widened_text);
  if (!widened.ok()) return widened.status();

  std::map<std::string, TensorDecl> expected;
  for (TensorDecl& d : ExpectedTensors(*widened)) expected.emplace(d.name, std::move(d));
  std::vector<TensorDecl> decls;
  std::vector<std::string> missing;
  for (const auto& [name, decl] : expected) {
    if (src.tensors().Find(name) == nullptr) missing.push_back(name);
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteWidenedExperts: the source lacks ", absl::StrJoin(missing, ", ")));
  }
  for (const std::string& name : src.tensors().Names()) {
    const TensorInfo& info = *src.tensors().Find(name)->info;
    const auto it = expected.find(name);
    if (it == expected.end() || it->second.shape == info.shape) {
      decls.push_back({name, info.dtype, info.shape});
      continue;
    }
    const TensorDecl& d = it->second;
    if (d.dtype != info.dtype || d.shape.size() != 2 || info.shape.size() != 2 ||
        d.shape[0] < info.shape[0] || d.shape[1] < info.shape[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("WriteWidenedExperts: ", name, " [", absl::StrJoin(info.shape, ", "),
                       "] cannot be padded to [", absl::StrJoin(d.shape, ", "), "]"));
    }
    decls.push_back(d);
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  const std::string shard = "model-00001-of-00001.safetensors";
  auto fill = [&](const TensorDecl& d, std::span<uint8_t> out) -> absl::Status {
    const SafetensorsSet::Entry& entry = *src.tensors().Find(d.name);
    const std::span<const uint8_t> bytes = src.tensors().Data(entry);
    const TensorInfo& info = *entry.info;
    if (d.shape == info.shape) {
      std::memcpy(out.data(), bytes.data(), out.size());
      return absl::OkStatus();
    }
    // Zero codes and weights; the scales of the added blocks 2^0 (E8M0 127),
    // which leaves those blocks' values zero.
    const uint8_t pad = d.dtype == DType::kF8E8M0 ? 0x7F : 0x00;
    Pad(bytes, info.shape[0], info.shape[1], d.shape[1], DTypeSize(d.dtype), pad, out);
    return absl::OkStatus();
  };
  const std::string dir = out_dir + "/";
  if (absl::Status st = WriteSafetensors(dir + shard, decls, fill, {{"format", "pt"}}); !st.ok()) {
    return st;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  int64_t total = 0;
  for (const TensorDecl& d : decls) {
    weight_map[d.name] = shard;
    total += d.num_bytes();
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  if (absl::Status st = WriteText(dir + kSafetensorsIndexName, index.dump(1) + "\n"); !st.ok()) {
    return st;
  }
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    if (!std::filesystem::exists(src_dir + "/" + file)) continue;
    std::filesystem::copy_file(src_dir + "/" + file, dir + file,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot copy ", file, ": ", ec.message()));
  }
  return WriteText(dir + "config.json", *widened_text);
}

}  // namespace weir::model
