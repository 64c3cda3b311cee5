// parallel/reduce.cc

#include "parallel/reduce.h"

#include <type_traits>

namespace weir::parallel {
namespace {

template <typename T>
void ReduceTyped(ReduceOp op, T* acc, const T* in, int64_t count) {
  switch (op) {
    case ReduceOp::kSum:
      if constexpr (std::is_integral_v<T>) {
        // Wrapping (two's complement) sum: defined for every input.
        using U = std::make_unsigned_t<T>;
        for (int64_t i = 0; i < count; ++i) {
          acc[i] = static_cast<T>(static_cast<U>(static_cast<U>(acc[i]) + static_cast<U>(in[i])));
        }
      } else {
        for (int64_t i = 0; i < count; ++i) acc[i] = acc[i] + in[i];
      }
      return;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < count; ++i) {
        if (in[i] < acc[i]) acc[i] = in[i];
      }
      return;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < count; ++i) {
        if (in[i] > acc[i]) acc[i] = in[i];
      }
      return;
  }
}

}  // namespace

void ReduceInto(DataType dtype, ReduceOp op, void* acc, const void* in, int64_t count) {
  switch (dtype) {
    case DataType::kUint8:
      return ReduceTyped(op, static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(in), count);
    case DataType::kInt32:
      return ReduceTyped(op, static_cast<int32_t*>(acc), static_cast<const int32_t*>(in), count);
    case DataType::kInt64:
      return ReduceTyped(op, static_cast<int64_t*>(acc), static_cast<const int64_t*>(in), count);
    case DataType::kFloat32:
      return ReduceTyped(op, static_cast<float*>(acc), static_cast<const float*>(in), count);
    case DataType::kFloat64:
      return ReduceTyped(op, static_cast<double*>(acc), static_cast<const double*>(in), count);
  }
}

}  // namespace weir::parallel
