// worker/model/engram_gather.h
//
// EngramGather: the lookup step of the Engram module (spec §4.7,
// `E = dequant(table[ids])`): rows of an Engram table, dequantized from FP8
// e4m3 with their E8M0 scale per 32 columns. LocalEngramGather reads tables
// held whole by this process (the single-process model, and the reference);
// CommunicatorEngramGather (communicator_engram_gather.h) fetches rows from
// the ranks that own them when the tables are row-sharded.
//
// Also the row-sharding rule of an expert-parallel group: rank r of W owns
// the contiguous rows [r*c, min(N, (r+1)*c)) of a table of N rows, with
// c = ceil(N / W). Contiguous blocks keep each rank's share one sub-span of
// the checkpoint tensor (no copy; other rows' pages are never touched) and
// make sorted row ids sorted by owner. Hash ids are uniform within each of
// the table's (n-gram size, head) segments, so the expected load is even.
//
// Thread safety: EngramGather implementations are used by one thread at a
// time (the model's). The sharding functions are pure.

#ifndef WEIR_WORKER_MODEL_ENGRAM_GATHER_H_
#define WEIR_WORKER_MODEL_ENGRAM_GATHER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/ops.h"
#include "worker/model/weights.h"

namespace weir::model {

class EngramGather {
 public:
  virtual ~EngramGather() = default;

  // Writes rows `ids` [n] of the Engram table of backbone layer `layer` (one
  // of engram_layer_ids), dequantized exactly to fp32, into out [n, head_dim].
  // n may be 0. A collective implementation must be entered by every rank of
  // its group for the same layers in the same order, each with its own ids.
  // Errors: INVALID_ARGUMENT for a layer without Engram, an id outside
  // [0, table rows) or a wrong `out` size (a collective implementation then
  // sends nothing, so the caller must not let that happen on one rank only);
  // UNAVAILABLE from a communicator; INTERNAL if a peer sent bad data.
  virtual absl::Status Gather(int layer, std::span<const int64_t> ids, std::span<float> out) = 0;

  // True if Gather is a collective (every rank must take part in every call).
  virtual bool collective() const = 0;
};

// Rows of a table of `rows` rows that `rank` of `world` owns (see the file
// comment); empty when rank * ceil(rows / world) >= rows.
// REQUIRES: rows >= 0, 0 <= rank < world.
EngramRowRange EngramShardRange(int64_t rows, int rank, int world);

// The rank owning `row` of a table of `rows` rows sharded over `world`.
// REQUIRES: 0 <= row < rows, world >= 1.
int EngramShardOwner(int64_t row, int64_t rows, int world);

// The EngramRowFilter that loads `rank`'s rows of every Engram table.
EngramRowFilter ShardedEngramRowFilter(int rank, int world);

// Gathers from tables held whole in this process (today's single-process
// behaviour): Ops::EngramLookup on the checkpoint's mapping.
class LocalEngramGather : public EngramGather {
 public:
  // INVALID_ARGUMENT if an Engram layer's table is not held whole. Does not
  // take ownership: `ops` and `weights` must outlive the gather.
  static absl::StatusOr<std::unique_ptr<LocalEngramGather>> Create(const ModelConfig& config,
                                                                   Ops& ops,
                                                                   const ModelWeights& weights);

  absl::Status Gather(int layer, std::span<const int64_t> ids, std::span<float> out) override;
  bool collective() const override { return false; }

 private:
  LocalEngramGather(Ops& ops, const ModelWeights& weights, int64_t head_dim)
      : ops_(ops), weights_(weights), head_dim_(head_dim) {}

  Ops& ops_;
  const ModelWeights& weights_;
  const int64_t head_dim_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_ENGRAM_GATHER_H_
