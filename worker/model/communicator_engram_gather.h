// worker/model/communicator_engram_gather.h
//
// CommunicatorEngramGather: the EngramGather of a row-sharded group. Each
// rank holds only its EngramShardRange of every Engram table; one Gather is a
// collective over a parallel::Communicator that every rank enters for every
// Engram layer of every step, with its own row ids (possibly none):
//   1. sort and de-duplicate the ids; they are then grouped by owner in rank
//      order (contiguous shards);
//   2. all-to-all-v of the id counts (int64, one per peer), then of the ids;
//   3. each owner replies, per requester in request order, with the raw rows
//      [head_dim FP8 e4m3 bytes | head_dim/32 E8M0 scale bytes] (uint8);
//   4. the requester dequantizes the received rows with Ops::EngramLookup --
//      the same function on the same bytes as LocalEngramGather, so the
//      output is bit-identical to it.
// Raw rows travel instead of fp32 rows: head_dim * 33/32 bytes per row
// instead of head_dim * 4. Three all-to-all-v per call, zero-length blocks
// when a rank has nothing to ask or serve.
//
// served() counts the rows this rank sent per Engram layer (after
// de-duplication per requester); requested() the distinct rows it asked for.
//
// Errors: as EngramGather. A peer asking for a row this rank does not own is
// answered with zero bytes (so the exchange completes on every rank) and the
// call returns INTERNAL.
//
// Thread safety: one call at a time, on the communicator's thread.

#ifndef WEIR_WORKER_MODEL_COMMUNICATOR_ENGRAM_GATHER_H_
#define WEIR_WORKER_MODEL_COMMUNICATOR_ENGRAM_GATHER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/communicator.h"
#include "worker/model/config.h"
#include "worker/model/engram_gather.h"
#include "worker/model/ops.h"
#include "worker/model/weights.h"

namespace weir::model {

class CommunicatorEngramGather : public EngramGather {
 public:
  // INVALID_ARGUMENT if an Engram layer of `config` has no table in
  // `weights` or its held rows differ from EngramShardRange(rows, rank,
  // world) of `comm`. Does not take ownership: `comm`, `ops` and `weights`
  // must outlive the gather. Not collective.
  static absl::StatusOr<std::unique_ptr<CommunicatorEngramGather>> Create(
      parallel::Communicator& comm, const ModelConfig& config, Ops& ops,
      const ModelWeights& weights);

  absl::Status Gather(int layer, std::span<const int64_t> ids, std::span<float> out) override;
  bool collective() const override { return true; }

  // Per Engram layer (index into engram_layer_ids): rows sent to requesters
  // (this rank included) and distinct rows requested.
  const std::vector<int64_t>& served() const { return served_; }
  const std::vector<int64_t>& requested() const { return requested_; }

 private:
  CommunicatorEngramGather(parallel::Communicator& comm, Ops& ops, const ModelWeights& weights,
                           std::vector<int> engram_index, int64_t head_dim);

  parallel::Communicator& comm_;
  Ops& ops_;
  const ModelWeights& weights_;
  const std::vector<int> engram_index_;  // [layers] -> index into engram_layer_ids, or -1
  const int64_t head_dim_;
  std::vector<int64_t> served_, requested_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_COMMUNICATOR_ENGRAM_GATHER_H_
