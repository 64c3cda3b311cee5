#include "worker/kv_cache/paged_kv_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/cpu/quant.h"

namespace weir::worker::kv_cache {

PagedKvStore::PagedKvStore(BlockPool& pool, SeqSlot slot)
    : pool_(pool), slot_(slot), entries_(pool.layout().layers.size(), 0) {
  WEIR_CHECK(slot.valid());
}

PagedKvStore::~PagedKvStore() { ReleaseAll(); }

absl::Status PagedKvStore::AddBlocks(std::span<const BlockId> blocks) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (absl::Status s = pool_.Claim(slot_, blocks[i]); !s.ok()) {
      for (size_t k = 0; k < i; ++k) WEIR_CHECK_OK(pool_.Release(slot_, blocks[k]));
      return s;
    }
  }
  table_.insert(table_.end(), blocks.begin(), blocks.end());
  return absl::OkStatus();
}

void PagedKvStore::ReleaseAll() {
  // Every block of the table was claimed by this slot (AddBlocks), so
  // releasing it cannot fail.
  for (BlockId b : table_) WEIR_CHECK_OK(pool_.Release(slot_, b));
  table_.clear();
  std::fill(entries_.begin(), entries_.end(), 0);
}

int64_t PagedKvStore::covered_positions() const {
  return static_cast<int64_t>(table_.size()) * pool_.layout().block_tokens;
}

int64_t PagedKvStore::entries(int layer) const {
  const int index = pool_.layout().layer_index[layer];
  WEIR_DCHECK(index >= 0);
  return entries_[index];
}

namespace {

// The stored form of one region's entries: FP4 e2m1 codes + E4M3 scales per
// 16 for the compressed KV, MXFP4 (E8M0 per 32) for the index keys.
int ScaleBlock(bool kv) { return kv ? 16 : 32; }
kernels::cpu::Fp4Scale ScaleKind(bool kv) {
  return kv ? kernels::cpu::Fp4Scale::kE4m3 : kernels::cpu::Fp4Scale::kE8m0;
}

bool SameValue(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

}  // namespace

PagedKvStore::Region PagedKvStore::RegionOf(const KvLayerLayout& l, bool kv) const {
  const int64_t dim = kv ? l.kv_dim : l.index_dim;
  const int64_t given = kv ? l.kv_entry_bytes : l.index_entry_bytes;
  return {.kv = kv, .dim = dim, .offset = kv ? l.kv_offset : l.index_offset,
          .entry_bytes = given != 0 ? given : dim * static_cast<int64_t>(sizeof(float))};
}

uint8_t* PagedKvStore::EntryBytes(const KvLayerLayout& l, const Region& r, int64_t e) const {
  float* block = pool_.block(table_[e / l.entries_per_block]).data();
  return reinterpret_cast<uint8_t*>(block) + r.offset + (e % l.entries_per_block) * r.entry_bytes;
}

void PagedKvStore::CopyOut(const KvLayerLayout& l, const Region& r, int64_t first,
                           std::span<float> rows) const {
  const int64_t count = static_cast<int64_t>(rows.size()) / r.dim;
  const bool packed = pool_.layout().packed;
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* src = EntryBytes(l, r, first + i);
    std::span<float> out = rows.subspan(i * r.dim, r.dim);
    if (!packed) {
      std::memcpy(out.data(), src, r.dim * sizeof(float));
      continue;
    }
    const int block = ScaleBlock(r.kv);
    const absl::Status st = kernels::cpu::DequantizeFp4(
        std::span<const uint8_t>(src, r.dim / 2),
        std::span<const uint8_t>(src + r.dim / 2, r.dim / block), block, ScaleKind(r.kv), out);
    WEIR_DCHECK(st.ok());
  }
}

absl::Status PagedKvStore::Encode(const Region& r, std::span<const float> rows,
                                  std::vector<uint8_t>& bytes) const {
  const int64_t count = static_cast<int64_t>(rows.size()) / r.dim;
  bytes.resize(count * r.entry_bytes);
  if (!pool_.layout().packed) {
    std::memcpy(bytes.data(), rows.data(), rows.size_bytes());
    return absl::OkStatus();
  }
  const int block = ScaleBlock(r.kv);
  std::vector<float> back(r.dim);
  for (int64_t i = 0; i < count; ++i) {
    std::span<const float> row = rows.subspan(i * r.dim, r.dim);
    std::span<uint8_t> codes(bytes.data() + i * r.entry_bytes, r.dim / 2);
    std::span<uint8_t> scales(bytes.data() + i * r.entry_bytes + r.dim / 2, r.dim / block);
    RETURN_IF_ERROR(kernels::cpu::QuantizeFp4(row, block, ScaleKind(r.kv), codes, scales));
    RETURN_IF_ERROR(kernels::cpu::DequantizeFp4(codes, scales, block, ScaleKind(r.kv), back));
    for (int64_t k = 0; k < r.dim; ++k) {
      if (!SameValue(back[k], row[k])) {
        return absl::InternalError(absl::StrCat(
            "slot ", slot_.value(), ": a ", r.kv ? "compressed KV" : "index key",
            " row is not a value of its stored format (element ", k, " = ", row[k],
            " decodes as ", back[k], "); packed KV blocks hold only quantized rows"));
      }
    }
  }
  return absl::OkStatus();
}

void PagedKvStore::CopyIn(const KvLayerLayout& l, const Region& r, int64_t first,
                          std::span<const uint8_t> bytes) {
  const int64_t count = static_cast<int64_t>(bytes.size()) / r.entry_bytes;
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(EntryBytes(l, r, first + i), bytes.data() + i * r.entry_bytes, r.entry_bytes);
  }
}

absl::Status PagedKvStore::Append(int layer, std::span<const float> kv,
                                  std::span<const float> index_k) {
  const int index = pool_.layout().layer_index[layer];
  WEIR_DCHECK(index >= 0);
  const KvLayerLayout& l = pool_.layout().layers[index];
  const int64_t count = static_cast<int64_t>(kv.size()) / l.kv_dim;
  WEIR_DCHECK(static_cast<int64_t>(index_k.size()) == count * l.index_dim);
  const int64_t first = entries_[index];
  const int64_t capacity = static_cast<int64_t>(table_.size()) * l.entries_per_block;
  if (first + count > capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "slot ", slot_.value(), " layer ", layer, ": compressed entries up to ", first + count,
        " need ", (first + count + l.entries_per_block - 1) / l.entries_per_block,
        " KV blocks; the slot holds ", table_.size()));
  }
  // Encoded (and checked) before anything is written: a refused append
  // leaves the blocks as they were.
  const Region kv_region = RegionOf(l, true), index_region = RegionOf(l, false);
  std::vector<uint8_t> kv_bytes, index_bytes;
  RETURN_IF_ERROR(Encode(kv_region, kv, kv_bytes));
  RETURN_IF_ERROR(Encode(index_region, index_k, index_bytes));
  CopyIn(l, kv_region, first, kv_bytes);
  CopyIn(l, index_region, first, index_bytes);
  entries_[index] = first + count;
  return absl::OkStatus();
}

void PagedKvStore::Truncate(int layer, int64_t entries) {
  const int index = pool_.layout().layer_index[layer];
  WEIR_DCHECK(index >= 0 && entries >= 0 && entries <= entries_[index]);
  entries_[index] = entries;
}

void PagedKvStore::ReadKv(int layer, int64_t first, std::span<float> out) const {
  const int index = pool_.layout().layer_index[layer];
  WEIR_DCHECK(index >= 0);
  const KvLayerLayout& l = pool_.layout().layers[index];
  WEIR_DCHECK(first >= 0 && first + static_cast<int64_t>(out.size()) / l.kv_dim <= entries_[index]);
  CopyOut(l, RegionOf(l, true), first, out);
}

void PagedKvStore::ReadIndexK(int layer, int64_t first, std::span<float> out) const {
  const int index = pool_.layout().layer_index[layer];
  WEIR_DCHECK(index >= 0);
  const KvLayerLayout& l = pool_.layout().layers[index];
  WEIR_DCHECK(first >= 0 &&
              first + static_cast<int64_t>(out.size()) / l.index_dim <= entries_[index]);
  CopyOut(l, RegionOf(l, false), first, out);
}

}  // namespace weir::worker::kv_cache
