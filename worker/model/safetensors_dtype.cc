// DType names and sizes of the safetensors format.

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/model/safetensors.h"

namespace weir::model {
namespace {

struct DTypeRow {
  DType dtype;
  const char* name;
  int64_t size;
};

constexpr DTypeRow kDTypes[] = {
    {DType::kBool, "BOOL", 1},   {DType::kU8, "U8", 1},       {DType::kI8, "I8", 1},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1}, {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kI16, "I16", 2},     {DType::kU16, "U16", 2},     {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},   {DType::kI32, "I32", 4},     {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},     {DType::kI64, "I64", 8},     {DType::kU64, "U64", 8},
    {DType::kF64, "F64", 8},
};

}  // namespace

std::string_view DTypeName(DType dtype) {
  for (const DTypeRow& row : kDTypes) {
    if (row.dtype == dtype) return row.name;
  }
  return "?";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const DTypeRow& row : kDTypes) {
    if (name == row.name) return row.dtype;
  }
  return std::nullopt;
}

int64_t DTypeSize(DType dtype) {
  for (const DTypeRow& row : kDTypes) {
    if (row.dtype == dtype) return row.size;
  }
  return 1;
}

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

const TensorInfo* SafetensorsHeader::Find(std::string_view name) const {
  auto it = index.find(absl::string_view(name.data(), name.size()));
  return it == index.end() ? nullptr : &tensors[it->second];
}

}  // namespace weir::model
