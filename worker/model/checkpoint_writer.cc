#include "worker/model/checkpoint_writer.h"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/weight_quant.h"
#include "nlohmann/json.hpp"
#include "worker/model/safetensors_set.h"
#include "worker/model/safetensors_writer.h"

namespace weir::model {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t NameHash(std::string_view name) {  // FNV-1a
  uint64_t h = 0xCBF29CE484222325ULL;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ULL;
  return h;
}

// Produces the stored bytes of every tensor of one parameter.
absl::Status Encode(const ParamSpec& p, const ModelConfig& c, const GenerateOptions& options,
                    std::vector<std::vector<uint8_t>>& out) {
  std::vector<float> v = GenerateParamValues(p, options.seed);
  if (options.gate_bias_skew != 0 && p.name.starts_with("layers.") &&
      p.name.ends_with(".ffn.gate.bias")) {
    // A skewed router: the first quarter of the experts (at least one) wins more often.
    const size_t hot = std::max<size_t>(1, v.size() / 4);
    for (size_t e = 0; e < hot && e < v.size(); ++e) v[e] += options.gate_bias_skew;
  }
  const std::vector<TensorDecl> decls = StoredTensors(p, c);
  out.assign(decls.size(), {});
  for (size_t i = 0; i < decls.size(); ++i) out[i].assign(decls[i].num_bytes(), 0);
  const int64_t rows = p.shape.empty() ? 0 : p.shape[0];
  const int64_t cols = p.shape.size() < 2 ? 0 : p.shape[1];
  switch (p.format) {
    case ParamFormat::kBf16:
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t bits = kernels::FloatToBf16Bits(v[i]);
        std::memcpy(out[0].data() + 2 * i, &bits, 2);  // little-endian host
      }
      return absl::OkStatus();
    case ParamFormat::kF32:
      std::memcpy(out[0].data(), v.data(), 4 * v.size());
      return absl::OkStatus();
    case ParamFormat::kFp8Block:
      return kernels::cpu::QuantizeFp8Weight(v, rows, cols, static_cast<int>(c.fp8_block_size),
                                             out[0], out[1]);
    case ParamFormat::kMxfp4:
      return kernels::cpu::QuantizeMxfp4Weight(v, rows, cols, out[0], out[1]);
    case ParamFormat::kFp8Rows:
      return kernels::cpu::QuantizeFp8(v, kernels::cpu::kFp8Block, out[0], out[1]);
  }
  return absl::InternalError("unknown parameter format");
}

absl::Status WriteText(const std::string& path, std::string_view text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

std::vector<float> GenerateParamValues(const ParamSpec& p, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : p.shape) n *= d;
  uint64_t state = seed ^ NameHash(p.name);
  const double cols = p.shape.size() >= 2 ? static_cast<double>(p.shape[1]) : 1.0;
  double lo = -1, hi = 1;
  switch (p.init) {
    case ParamInit::kLinear: hi = std::sqrt(3.0 / cols); lo = -hi; break;
    case ParamInit::kNorm: lo = 0.9; hi = 1.1; break;
    case ParamInit::kUnit: hi = std::sqrt(3.0); lo = -hi; break;
    case ParamInit::kSmall: lo = -0.05; hi = 0.05; break;
    case ParamInit::kSigned: lo = -1; hi = 1; break;
    case ParamInit::kPositive: lo = 0.1; hi = 1; break;
  }
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    const double u = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
    x = static_cast<float>(lo + (hi - lo) * u);
  }
  return v;
}

absl::Status GenerateCheckpoint(const ModelConfig& config, std::string_view config_json,
                                const std::string& out_dir, const GenerateOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  // Group parameters into shards, keeping a parameter's weight and scale together.
  const std::vector<ParamSpec> params = ModelParams(config);
  std::vector<std::vector<const ParamSpec*>> shards(1);
  int64_t shard_bytes = 0;
  for (const ParamSpec& p : params) {
    int64_t bytes = 0;
    for (const TensorDecl& t : StoredTensors(p, config)) bytes += t.num_bytes();
    if (shard_bytes > 0 && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&p);
    shard_bytes += bytes;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  int64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards.size());
    std::vector<TensorDecl> decls;
    absl::flat_hash_map<std::string, std::pair<const ParamSpec*, int>> owner;
    for (const ParamSpec* p : shards[s]) {
      std::vector<TensorDecl> stored = StoredTensors(*p, config);
      for (size_t i = 0; i < stored.size(); ++i) {
        owner[stored[i].name] = {p, static_cast<int>(i)};
        weight_map[stored[i].name] = file;
        total += stored[i].num_bytes();
        decls.push_back(std::move(stored[i]));
      }
    }
    // Tensors of one parameter are adjacent: encode once, hand out each part.
    const ParamSpec* cached = nullptr;
    std::vector<std::vector<uint8_t>> encoded;
    auto fill = [&](const TensorDecl& d, std::span<uint8_t> out) -> absl::Status {
      const auto& [param, part] = owner.at(d.name);
      if (param != cached) {
        if (absl::Status st = Encode(*param, config, options, encoded); !st.ok()) return st;
        cached = param;
      }
      std::memcpy(out.data(), encoded[part].data(), out.size());
      return absl::OkStatus();
    };
    absl::Status st = WriteSafetensors((std::filesystem::path(out_dir) / file).string(), decls,
                                       fill, {{"format", "pt"}});
    if (!st.ok()) return st;
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string dir = out_dir + "/";
  if (absl::Status st = WriteText(dir + kSafetensorsIndexName, index.dump(1) + "\n"); !st.ok()) {
    return st;
  }
  return WriteText(dir + "config.json", config_json);
}

}  // namespace weir::model
