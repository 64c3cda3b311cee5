// base/strong_id.h
//
// StrongId<Tag, T>: an integer with a type of its own, so a RequestId cannot
// be passed where a Rank is expected. Comparison and hashing work only between
// ids of the same tag; conversion to the raw value is explicit (`value()`).
//
// Thread safety: value type; safe to copy between threads.

#ifndef WEIR_BASE_STRONG_ID_H_
#define WEIR_BASE_STRONG_ID_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>

namespace weir {

template <typename Tag, typename T = int64_t>
class StrongId {
 public:
  using ValueType = T;

  // An id with the sentinel value -1 (or max for unsigned types): "no id".
  constexpr StrongId() : value_(kInvalidValue) {}
  constexpr explicit StrongId(T value) : value_(value) {}

  constexpr T value() const { return value_; }
  constexpr bool valid() const { return value_ != kInvalidValue; }

  friend constexpr bool operator==(StrongId a, StrongId b) { return a.value_ == b.value_; }
  friend constexpr auto operator<=>(StrongId a, StrongId b) { return a.value_ <=> b.value_; }

  template <typename H>
  friend H AbslHashValue(H h, StrongId id) {
    return H::combine(std::move(h), id.value_);
  }

  friend std::ostream& operator<<(std::ostream& os, StrongId id) { return os << id.value_; }

 private:
  static constexpr T kInvalidValue =
      std::numeric_limits<T>::is_signed ? T(-1) : std::numeric_limits<T>::max();
  T value_;
};

// The project's id types. Each tag is an incomplete struct, used only as a name.
using RequestId = StrongId<struct RequestIdTag, uint64_t>;
using SeqSlot = StrongId<struct SeqSlotTag, int32_t>;
using BlockId = StrongId<struct BlockIdTag, int32_t>;
using LayerId = StrongId<struct LayerIdTag, int32_t>;
using ExpertId = StrongId<struct ExpertIdTag, int32_t>;
using Rank = StrongId<struct RankTag, int32_t>;
using DeviceOrdinal = StrongId<struct DeviceOrdinalTag, int32_t>;

}  // namespace weir

template <typename Tag, typename T>
struct std::hash<weir::StrongId<Tag, T>> {
  size_t operator()(weir::StrongId<Tag, T> id) const { return std::hash<T>()(id.value()); }
};

#endif  // WEIR_BASE_STRONG_ID_H_
