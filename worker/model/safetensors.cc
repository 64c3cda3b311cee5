#include "worker/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace weir::model {
namespace {

constexpr int64_t kMaxDimValue = int64_t{1} << 62;

// Debian's Abseil has its own string_view type.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status Corrupt(std::string_view label, std::string_view what) {
  return absl::DataLossError(absl::StrCat(Sv(label), ": ", Sv(what)));
}

absl::Status CorruptTensor(std::string_view label, const std::string& name,
                           std::string_view what) {
  return absl::DataLossError(absl::StrCat(Sv(label), ": tensor '", name, "': ", Sv(what)));
}

bool NonNegativeInt(const nlohmann::json& v, int64_t limit, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(limit)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0 || i > limit) return false;
    *out = i;
    return true;
  }
  return false;
}

absl::Status ParseMetadata(const nlohmann::json& v, std::string_view label,
                           std::map<std::string, std::string>* out) {
  if (!v.is_object()) return Corrupt(label, "__metadata__ is not an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string()) {
      return Corrupt(label, absl::StrCat("__metadata__ value of '", it.key(), "' is not a string"));
    }
    (*out)[it.key()] = it.value().get<std::string>();
  }
  return absl::OkStatus();
}

absl::Status ParseEntry(const std::string& name, const nlohmann::json& v, int64_t data_size,
                        std::string_view label, TensorInfo* info) {
  info->name = name;
  if (!v.is_object()) return CorruptTensor(label, name, "entry is not an object");
  auto dtype_it = v.find("dtype");
  auto shape_it = v.find("shape");
  auto offsets_it = v.find("data_offsets");
  if (dtype_it == v.end() || !dtype_it->is_string()) {
    return CorruptTensor(label, name, "missing or non-string dtype");
  }
  std::optional<DType> dtype = DTypeFromName(dtype_it->get<std::string>());
  if (!dtype) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(label), ": tensor '", name,
                                                   "': unsupported dtype '",
                                                   dtype_it->get<std::string>(), "'"));
  }
  info->dtype = *dtype;
  if (shape_it == v.end() || !shape_it->is_array()) {
    return CorruptTensor(label, name, "missing or non-array shape");
  }
  int64_t numel = 1;
  for (const nlohmann::json& d : *shape_it) {
    int64_t dim = 0;
    if (!NonNegativeInt(d, kMaxDimValue, &dim)) {
      return CorruptTensor(label, name, "shape entry is not a non-negative integer");
    }
    if (dim != 0 && numel > kMaxDimValue / dim) {
      return CorruptTensor(label, name, "shape overflows");
    }
    numel *= dim;
    info->shape.push_back(dim);
  }
  if (offsets_it == v.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    return CorruptTensor(label, name, "data_offsets is not a pair");
  }
  if (!NonNegativeInt((*offsets_it)[0], data_size, &info->begin) ||
      !NonNegativeInt((*offsets_it)[1], data_size, &info->end) || info->begin > info->end) {
    return CorruptTensor(label, name,
                         absl::StrCat("data_offsets outside the data section of ", data_size,
                                      " bytes (file truncated?)"));
  }
  const int64_t size = DTypeSize(info->dtype);
  if (numel > kMaxDimValue / size || numel * size != info->num_bytes()) {
    return CorruptTensor(label, name,
                         absl::StrCat("data_offsets span ", info->num_bytes(), " bytes but ",
                                      Sv(DTypeName(info->dtype)), " ", ShapeString(info->shape),
                                      " needs ", numel, " x ", size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file,
                                                         std::string_view label) {
  if (file.size() < 8) {
    return Corrupt(label, absl::StrCat("file of ", file.size(), " bytes has no header length"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[i];
  const uint64_t available = file.size() - 8;
  if (n == 0 || n > available || n > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    return Corrupt(label, absl::StrCat("header length ", n, " is invalid for a file of ",
                                       file.size(), " bytes"));
  }
  const uint8_t* text = file.data() + 8;
  nlohmann::json root = nlohmann::json::parse(text, text + n, /*cb=*/nullptr,
                                              /*allow_exceptions=*/false);
  if (root.is_discarded()) return Corrupt(label, "header is not valid JSON");
  if (!root.is_object()) return Corrupt(label, "header is not a JSON object");

  SafetensorsHeader header;
  header.data_offset = static_cast<int64_t>(8 + n);
  header.data_size = static_cast<int64_t>(available - n);
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      absl::Status s = ParseMetadata(it.value(), label, &header.metadata);
      if (!s.ok()) return s;
      continue;
    }
    TensorInfo info;
    absl::Status s = ParseEntry(it.key(), it.value(), header.data_size, label, &info);
    if (!s.ok()) return s;
    header.tensors.push_back(std::move(info));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  const TensorInfo* previous = nullptr;
  for (int i = 0; i < static_cast<int>(header.tensors.size()); ++i) {
    const TensorInfo& t = header.tensors[i];
    header.index[t.name] = i;
    if (t.num_bytes() == 0) continue;
    if (previous != nullptr && t.begin < previous->end) {
      return CorruptTensor(label, t.name,
                           absl::StrCat("bytes [", t.begin, ", ", t.end, ") overlap tensor '",
                                        previous->name, "' [", previous->begin, ", ",
                                        previous->end, ")"));
    }
    previous = &t;
  }
  return header;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* base = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    base = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  absl::StatusOr<SafetensorsHeader> header =
      ParseSafetensorsHeader(std::span<const uint8_t>(base, size), path);
  if (!header.ok()) {
    if (base != nullptr) ::munmap(const_cast<uint8_t*>(base), size);
    return header.status();
  }
  return std::unique_ptr<SafetensorsFile>(
      new SafetensorsFile(path, base, size, *std::move(header)));
}

SafetensorsFile::~SafetensorsFile() {
  if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), size_);
}

std::span<const uint8_t> SafetensorsFile::Data(const TensorInfo& info) const {
  if (base_ == nullptr) return {};
  return std::span<const uint8_t>(base_ + header_.data_offset + info.begin,
                                  static_cast<size_t>(info.num_bytes()));
}

}  // namespace weir::model
