#include "worker/model/communicator_engram_gather.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace weir::model {
namespace {

using parallel::DataType;

std::vector<int64_t> Offsets(std::span<const int64_t> counts) {
  std::vector<int64_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

std::vector<int64_t> Scaled(std::span<const int64_t> counts, int64_t factor) {
  std::vector<int64_t> out(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) out[i] = counts[i] * factor;
  return out;
}

int64_t Sum(std::span<const int64_t> counts) {
  int64_t s = 0;
  for (int64_t c : counts) s += c;
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CommunicatorEngramGather>> CommunicatorEngramGather::Create(
    parallel::Communicator& comm, const ModelConfig& config, Ops& ops,
    const ModelWeights& weights) {
  const int rank = comm.rank().value(), world = comm.world_size();
  std::vector<int> index(weights.layers.size(), -1);
  for (size_t l = 0; l < config.engram_layer_ids.size(); ++l) {
    const int layer = config.engram_layer_ids[l];
    if (layer < 0 || layer >= static_cast<int>(weights.layers.size()) ||
        !weights.layers[layer].has_engram) {
      return absl::InvalidArgumentError(absl::StrCat("Engram layer ", layer, " not in weights"));
    }
    const EngramWeights& e = weights.layers[layer].engram;
    const EngramRowRange want = EngramShardRange(e.rows, rank, world);
    if (e.row_begin != want.begin || e.row_end != want.end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Engram table of layer ", layer, " holds rows [", e.row_begin, ", ", e.row_end,
          "), rank ", rank, " of ", world, " owns [", want.begin, ", ", want.end, ")"));
    }
    index[layer] = static_cast<int>(l);
  }
  return std::unique_ptr<CommunicatorEngramGather>(
      new CommunicatorEngramGather(comm, ops, weights, std::move(index), config.engram_head_dim));
}

CommunicatorEngramGather::CommunicatorEngramGather(parallel::Communicator& comm, Ops& ops,
                                                   const ModelWeights& weights,
                                                   std::vector<int> engram_index, int64_t head_dim)
    : comm_(comm),
      ops_(ops),
      weights_(weights),
      engram_index_(std::move(engram_index)),
      head_dim_(head_dim) {
  const int layers = static_cast<int>(
      std::count_if(engram_index_.begin(), engram_index_.end(), [](int i) { return i >= 0; }));
  served_.assign(layers, 0);
  requested_.assign(layers, 0);
}

absl::Status CommunicatorEngramGather::Gather(int layer, std::span<const int64_t> ids,
                                              std::span<float> out) {
  if (layer < 0 || layer >= static_cast<int>(engram_index_.size()) || engram_index_[layer] < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("EngramGather: layer ", layer, " has no Engram"));
  }
  const EngramWeights& e = weights_.layers[layer].engram;
  if (out.size() != ids.size() * head_dim_) {
    return absl::InvalidArgumentError("EngramGather: output size");
  }
  for (int64_t id : ids) {
    if (id < 0 || id >= e.rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("EngramGather: layer ", layer, " row ", id, " of ", e.rows));
    }
  }
  const int world = comm_.world_size();
  std::vector<int64_t> wanted(ids.begin(), ids.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::vector<int64_t> send_counts(world, 0), recv_counts(world, 0);
  for (int64_t id : wanted) ++send_counts[EngramShardOwner(id, e.rows, world)];
  // Counts, then ids (sorted ids are grouped by owner in rank order).
  const std::vector<int64_t> ones(world, 1), index = Offsets(ones);
  RETURN_IF_ERROR(comm_.AllToAllV({.send = send_counts.data(),
                                   .send_counts = ones,
                                   .send_offsets = index,
                                   .recv = recv_counts.data(),
                                   .recv_counts = ones,
                                   .recv_offsets = index,
                                   .dtype = DataType::kInt64}));
  for (int64_t c : recv_counts) {
    if (c < 0) return absl::InternalError("EngramGather: a peer sent a negative count");
  }
  std::vector<int64_t> asked(Sum(recv_counts));
  RETURN_IF_ERROR(comm_.AllToAllV({.send = wanted.data(),
                                   .send_counts = send_counts,
                                   .send_offsets = Offsets(send_counts),
                                   .recv = asked.data(),
                                   .recv_counts = recv_counts,
                                   .recv_offsets = Offsets(recv_counts),
                                   .dtype = DataType::kInt64}));
  // Replies: raw rows [head_dim codes | head_dim/32 scales] in request order.
  const int64_t blocks = head_dim_ / 32, row_bytes = head_dim_ + blocks;
  std::vector<uint8_t> reply(asked.size() * row_bytes, 0);
  int64_t bad = 0;
  for (size_t i = 0; i < asked.size(); ++i) {
    const int64_t local = asked[i] - e.row_begin;
    if (asked[i] < e.row_begin || asked[i] >= e.row_end) {
      ++bad;  // answered with zeros so that every rank completes the exchange
      continue;
    }
    std::memcpy(reply.data() + i * row_bytes, e.table.data() + local * head_dim_, head_dim_);
    std::memcpy(reply.data() + i * row_bytes + head_dim_, e.scales.data() + local * blocks, blocks);
  }
  std::vector<uint8_t> got(wanted.size() * row_bytes);
  const std::vector<int64_t> reply_counts = Scaled(recv_counts, row_bytes);
  const std::vector<int64_t> got_counts = Scaled(send_counts, row_bytes);
  RETURN_IF_ERROR(comm_.AllToAllV({.send = reply.data(),
                                   .send_counts = reply_counts,
                                   .send_offsets = Offsets(reply_counts),
                                   .recv = got.data(),
                                   .recv_counts = got_counts,
                                   .recv_offsets = Offsets(got_counts),
                                   .dtype = DataType::kUint8}));
  const int e_index = engram_index_[layer];
  served_[e_index] += static_cast<int64_t>(asked.size()) - bad;
  requested_[e_index] += static_cast<int64_t>(wanted.size());
  if (bad > 0) {
    return absl::InternalError(absl::StrCat("EngramGather: layer ", layer, ": peers asked for ",
                                            bad, " rows this rank does not own"));
  }
  if (ids.empty()) return absl::OkStatus();
  // The received rows as a small table, looked up with the local function.
  const int64_t n = static_cast<int64_t>(wanted.size());
  std::vector<uint8_t> table(n * head_dim_), scales(n * blocks);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(table.data() + i * head_dim_, got.data() + i * row_bytes, head_dim_);
    std::memcpy(scales.data() + i * blocks, got.data() + i * row_bytes + head_dim_, blocks);
  }
  std::vector<int64_t> at(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    at[i] = std::lower_bound(wanted.begin(), wanted.end(), ids[i]) - wanted.begin();
  }
  return ops_.EngramLookup(table, scales, n, head_dim_, at, out);
}

}  // namespace weir::model
