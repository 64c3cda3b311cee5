// worker/kv_cache/paged_kv_store.h
//
// PagedKvStore: one sequence slot's block table over a BlockPool, and the
// model::CompressedKvStore the forward reads and writes through it. The
// table holds the blocks the coordinator's plans gave the slot (StepRow
// new_blocks), in position order: block i covers positions
// [i * block_tokens, (i + 1) * block_tokens), so entry j of a ratio-r layer
// lives in table[j / (block_tokens / r)] at index j % (block_tokens / r).
// An entry beyond the table is refused (RESOURCE_EXHAUSTED), never written.
//
// Thread safety: not thread-safe; used by the step executor's thread only.

#ifndef WEIR_WORKER_KV_CACHE_PAGED_KV_STORE_H_
#define WEIR_WORKER_KV_CACHE_PAGED_KV_STORE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "base/strong_id.h"
#include "worker/kv_cache/block_pool.h"
#include "worker/model/compressed_kv_store.h"

namespace weir::worker::kv_cache {

// Usage (the step executor):
//   auto store = std::make_unique<PagedKvStore>(pool, SeqSlot(row.slot));
//   RETURN_IF_ERROR(store->AddBlocks(row.new_blocks));
//   auto state = model.NewSequence(std::move(store));   // the forward writes into the blocks
//   ...                                                   // later rows: AddBlocks again
//   state.reset();                                        // the blocks go back to the pool
//
// Ownership: the store holds its blocks in `pool` (claimed under `slot`)
// until ReleaseAll or its destruction; `pool` must outlive it.
class PagedKvStore final : public model::CompressedKvStore {
 public:
  // An empty table of `slot`. Does not take ownership of `pool`.
  // REQUIRES: slot.valid().
  PagedKvStore(BlockPool& pool, SeqSlot slot);
  // Releases every block of the table.
  ~PagedKvStore() override;

  PagedKvStore(const PagedKvStore&) = delete;
  PagedKvStore& operator=(const PagedKvStore&) = delete;

  // Claims `blocks` for this slot and appends them to the table in order.
  // Errors are BlockPool::Claim's (a foreign block, one held by a slot); on
  // error no block of the call stays claimed and the table is unchanged.
  absl::Status AddBlocks(std::span<const BlockId> blocks);

  // Returns every block to the pool and empties the table and the entries.
  void ReleaseAll();

  SeqSlot slot() const { return slot_; }
  // The block table in position order.
  std::span<const BlockId> blocks() const { return table_; }
  // Positions the table covers: blocks().size() * block_tokens.
  int64_t covered_positions() const;

  // model::CompressedKvStore. REQUIRES (every call): `layer` is a kv source
  // of the pool's layout.
  int64_t entries(int layer) const override;
  absl::Status Append(int layer, std::span<const float> kv,
                      std::span<const float> index_k) override;
  void Truncate(int layer, int64_t entries) override;
  void ReadKv(int layer, int64_t first, std::span<float> out) const override;
  void ReadIndexK(int layer, int64_t first, std::span<float> out) const override;

 private:
  // One region (compressed KV or index keys) of a layer inside a block.
  struct Region {
    bool kv = true;
    int64_t dim = 0;          // elements an entry
    int64_t offset = 0;       // bytes into the block
    int64_t entry_bytes = 0;  // stored bytes an entry
  };
  Region RegionOf(const KvLayerLayout& l, bool kv) const;
  // The stored bytes of entry `e` of region `r` of layer `l`.
  uint8_t* EntryBytes(const KvLayerLayout& l, const Region& r, int64_t e) const;
  // Entries [first, first + rows.size() / dim) of region `r` out of the
  // blocks, decoded to fp32 when the layout is packed.
  void CopyOut(const KvLayerLayout& l, const Region& r, int64_t first,
               std::span<float> rows) const;
  // `rows` in the region's stored form (`bytes`, entry after entry); INTERNAL
  // when the layout is packed and a row does not re-encode exactly.
  absl::Status Encode(const Region& r, std::span<const float> rows,
                      std::vector<uint8_t>& bytes) const;
  // Stored entries into the blocks from entry `first` on.
  void CopyIn(const KvLayerLayout& l, const Region& r, int64_t first,
              std::span<const uint8_t> bytes);

  BlockPool& pool_;
  const SeqSlot slot_;
  std::vector<BlockId> table_;
  std::vector<int64_t> entries_;  // by index into the layout's layers
};

}  // namespace weir::worker::kv_cache

#endif  // WEIR_WORKER_KV_CACHE_PAGED_KV_STORE_H_
