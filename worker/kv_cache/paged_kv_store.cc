#include "worker/kv_cache/paged_kv_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/logging.h"

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

void PagedKvStore::CopyOut(const KvLayerLayout& l, int64_t offset, int64_t dim, int64_t first,
                           std::span<float> rows) const {
  const int64_t count = static_cast<int64_t>(rows.size()) / dim;
  for (int64_t done = 0; done < count;) {
    const int64_t e = first + done;
    const int64_t in_block = e % l.entries_per_block;
    const int64_t run = std::min(count - done, l.entries_per_block - in_block);
    const float* src = pool_.block(table_[e / l.entries_per_block]).data() + offset + in_block * dim;
    std::copy_n(src, run * dim, rows.data() + done * dim);
    done += run;
  }
}

void PagedKvStore::CopyIn(const KvLayerLayout& l, int64_t offset, int64_t dim, int64_t first,
                          std::span<const float> rows) {
  const int64_t count = static_cast<int64_t>(rows.size()) / dim;
  for (int64_t done = 0; done < count;) {
    const int64_t e = first + done;
    const int64_t in_block = e % l.entries_per_block;
    const int64_t run = std::min(count - done, l.entries_per_block - in_block);
    float* dst = pool_.block(table_[e / l.entries_per_block]).data() + offset + in_block * dim;
    std::copy_n(rows.data() + done * dim, run * dim, dst);
    done += run;
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
  CopyIn(l, l.kv_offset, l.kv_dim, first, kv);
  CopyIn(l, l.index_offset, l.index_dim, first, index_k);
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
  CopyOut(l, l.kv_offset, l.kv_dim, first, out);
}

void PagedKvStore::ReadIndexK(int layer, int64_t first, std::span<float> out) const {
  const int index = pool_.layout().layer_index[layer];
  WEIR_DCHECK(index >= 0);
  const KvLayerLayout& l = pool_.layout().layers[index];
  WEIR_DCHECK(first >= 0 &&
              first + static_cast<int64_t>(out.size()) / l.index_dim <= entries_[index]);
  CopyOut(l, l.index_offset, l.index_dim, first, out);
}

}  // namespace weir::worker::kv_cache
