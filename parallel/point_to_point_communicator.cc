// parallel/point_to_point_communicator.cc

#include "parallel/point_to_point_communicator.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "parallel/reduce.h"

namespace weir::parallel {
namespace {

using Kind = Transfer::Kind;

// First element of chunk `c` when `count` elements are split into `n` chunks.
int64_t ChunkBegin(int64_t count, int n, int c) { return count * c / n; }


std::byte* At(void* base, int64_t elems, size_t esize) {
  return static_cast<std::byte*>(base) + elems * static_cast<int64_t>(esize);
}
std::byte* At(const void* base, int64_t elems, size_t esize) {
  // Send buffers are only read; Transfer carries one pointer type for both kinds.
  return At(const_cast<void*>(base), elems, esize);
}

}  // namespace

PointToPointCommunicator::PointToPointCommunicator(int rank, int world_size)
    : rank_(rank),
      world_size_(world_size),
      p2p_send_seq_(world_size, 0),
      p2p_recv_seq_(world_size, 0) {
  WEIR_CHECK(world_size > 0 && rank >= 0 && rank < world_size) << "guaranteed by Create()";
}

uint64_t PointToPointCommunicator::MakeTag(OpCode op, uint64_t seq, uint64_t step) {
  return (static_cast<uint64_t>(op) << 36) | ((seq & 0xFFFFFF) << 12) | (step & 0xFFF);
}

absl::Status PointToPointCommunicator::Begin(const ExecContext& ctx, const char* name) {
  if (!broken_.ok()) return broken_;
  if (ctx.memory != MemoryKind::kHost) {
    return absl::UnimplementedError("this communicator supports host memory only");
  }
  ++seq_;
  what_ = absl::StrCat(name, " #", seq_);
  return absl::OkStatus();
}

absl::Status PointToPointCommunicator::Run(std::span<const Transfer> transfers,
                                           const std::string& what) {
  absl::Status status = Exchange(transfers, what);
  if (!status.ok()) {
    // Some messages may have been delivered and others not: the ranks no
    // longer agree on the message sequence.
    broken_ = absl::UnavailableError(
        absl::StrCat("communicator unusable after an earlier failure: ", status.ToString()));
  }
  return status;
}

absl::Status PointToPointCommunicator::CheckPeer(Rank peer, const char* role) const {
  if (peer.value() < 0 || peer.value() >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(role, " rank ", peer.value(), " is outside [0, ", world_size_, ")"));
  }
  return absl::OkStatus();
}

absl::Status PointToPointCommunicator::AllToAllV(const AllToAllVArgs& a, const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckPeerBlocks(a.send_counts, a.send_offsets, a.send, world_size_, "send"));
  RETURN_IF_ERROR(CheckPeerBlocks(a.recv_counts, a.recv_offsets, a.recv, world_size_, "recv"));
  RETURN_IF_ERROR(Begin(ctx, "all_to_all_v"));
  const size_t es = DataTypeSize(a.dtype);
  if (a.send_counts[rank_] != a.recv_counts[rank_]) {
    return absl::InvalidArgumentError(absl::StrCat("self block: send count ", a.send_counts[rank_],
                                                   " != recv count ", a.recv_counts[rank_]));
  }
  std::vector<Transfer> transfers;
  transfers.reserve(2 * world_size_);
  const uint64_t tag = MakeTag(OpCode::kAllToAllV, seq_, 0);
  for (int s = 1; s < world_size_; ++s) {
    const int to = (rank_ + s) % world_size_;
    const int from = (rank_ - s + world_size_) % world_size_;
    transfers.push_back(
        {Kind::kSend, to, At(a.send, a.send_offsets[to], es), a.send_counts[to] * es, tag});
    transfers.push_back(
        {Kind::kRecv, from, At(a.recv, a.recv_offsets[from], es), a.recv_counts[from] * es, tag});
  }
  if (a.send_counts[rank_] > 0) {
    std::memcpy(At(a.recv, a.recv_offsets[rank_], es), At(a.send, a.send_offsets[rank_], es),
                a.send_counts[rank_] * es);
  }
  return Run(transfers, what_);
}

absl::Status PointToPointCommunicator::AllReduce(const void* send, void* recv, int64_t count,
                                                 DataType dtype, ReduceOp op,
                                                 const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckElementCount(count, send, "send"));
  RETURN_IF_ERROR(CheckElementCount(count, recv, "recv"));
  RETURN_IF_ERROR(Begin(ctx, "all_reduce"));
  const size_t es = DataTypeSize(dtype);
  const int n = world_size_;
  const int64_t my_begin = ChunkBegin(count, n, rank_);
  const int64_t my_len = ChunkBegin(count, n, rank_ + 1) - my_begin;
  // Phase 1: contributions to my chunk land in scratch_ [n, my_len], by rank.
  scratch_.resize(static_cast<size_t>(n * my_len) * es);
  std::vector<Transfer> transfers;
  transfers.reserve(2 * n);
  uint64_t tag = MakeTag(OpCode::kAllReduce, seq_, 0);
  for (int s = 1; s < n; ++s) {
    const int to = (rank_ + s) % n;
    const int from = (rank_ - s + n) % n;
    const int64_t to_begin = ChunkBegin(count, n, to);
    transfers.push_back({Kind::kSend, to, At(send, to_begin, es),
                         (ChunkBegin(count, n, to + 1) - to_begin) * es, tag});
    transfers.push_back(
        {Kind::kRecv, from, At(scratch_.data(), from * my_len, es), my_len * es, tag});
  }
  if (my_len > 0) {
    std::memcpy(At(scratch_.data(), rank_ * my_len, es), At(send, my_begin, es), my_len * es);
  }
  RETURN_IF_ERROR(Run(transfers, what_));
  // Reduce in rank order into rank 0's slot, then publish it in `recv`.
  for (int p = 1; p < n; ++p) {
    ReduceInto(dtype, op, scratch_.data(), At(scratch_.data(), p * my_len, es), my_len);
  }
  if (my_len > 0) std::memcpy(At(recv, my_begin, es), scratch_.data(), my_len * es);
  // Phase 2: all-gather the reduced chunks.
  transfers.clear();
  tag = MakeTag(OpCode::kAllReduce, seq_, 1);
  for (int s = 1; s < n; ++s) {
    const int to = (rank_ + s) % n;
    const int from = (rank_ - s + n) % n;
    const int64_t from_begin = ChunkBegin(count, n, from);
    transfers.push_back({Kind::kSend, to, At(recv, my_begin, es), my_len * es, tag});
    transfers.push_back({Kind::kRecv, from, At(recv, from_begin, es),
                         (ChunkBegin(count, n, from + 1) - from_begin) * es, tag});
  }
  return Run(transfers, what_);
}

absl::Status PointToPointCommunicator::AllGather(const void* send, void* recv, int64_t count,
                                                 DataType dtype, const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckElementCount(count, send, "send"));
  RETURN_IF_ERROR(CheckElementCount(count, recv, "recv"));
  RETURN_IF_ERROR(Begin(ctx, "all_gather"));
  const size_t es = DataTypeSize(dtype);
  const uint64_t tag = MakeTag(OpCode::kAllGather, seq_, 0);
  std::vector<Transfer> transfers;
  transfers.reserve(2 * world_size_);
  for (int s = 1; s < world_size_; ++s) {
    const int to = (rank_ + s) % world_size_;
    const int from = (rank_ - s + world_size_) % world_size_;
    transfers.push_back({Kind::kSend, to, At(send, 0, es), count * es, tag});
    transfers.push_back({Kind::kRecv, from, At(recv, from * count, es), count * es, tag});
  }
  if (count > 0) std::memmove(At(recv, rank_ * count, es), send, count * es);
  return Run(transfers, what_);
}

absl::Status PointToPointCommunicator::Broadcast(void* data, int64_t count, DataType dtype,
                                                 Rank root, const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckElementCount(count, data, "data"));
  RETURN_IF_ERROR(CheckPeer(root, "root"));
  RETURN_IF_ERROR(Begin(ctx, "broadcast"));
  const size_t bytes = count * DataTypeSize(dtype);
  const uint64_t tag = MakeTag(OpCode::kBroadcast, seq_, 0);
  std::vector<Transfer> transfers;
  if (root.value() == rank_) {
    for (int s = 1; s < world_size_; ++s) {
      transfers.push_back({Kind::kSend, (rank_ + s) % world_size_, data, bytes, tag});
    }
  } else {
    transfers.push_back({Kind::kRecv, root.value(), data, bytes, tag});
  }
  return Run(transfers, what_);
}

absl::Status PointToPointCommunicator::Barrier(const ExecContext& ctx) {
  RETURN_IF_ERROR(Begin(ctx, "barrier"));
  for (int k = 0, dist = 1; dist < world_size_; ++k, dist *= 2) {
    const uint64_t tag = MakeTag(OpCode::kBarrier, seq_, k);
    const Transfer round[2] = {
        {Kind::kSend, (rank_ + dist) % world_size_, nullptr, 0, tag},
        {Kind::kRecv, (rank_ - dist + world_size_) % world_size_, nullptr, 0, tag}};
    RETURN_IF_ERROR(Run(round, what_));
  }
  return absl::OkStatus();
}

absl::Status PointToPointCommunicator::GroupSendRecv(std::span<const P2POp> ops,
                                                     const ExecContext& ctx) {
  std::vector<const P2POp*> self_sends, self_recvs;
  RETURN_IF_ERROR(CheckGroupOps(ops, rank_, world_size_, self_sends, self_recvs));
  if (!broken_.ok()) return broken_;
  if (ctx.memory != MemoryKind::kHost) {
    return absl::UnimplementedError("this communicator supports host memory only");
  }
  for (size_t i = 0; i < self_sends.size(); ++i) {
    const size_t bytes = self_sends[i]->count * DataTypeSize(self_sends[i]->dtype);
    if (bytes > 0) std::memmove(self_recvs[i]->data, self_sends[i]->data, bytes);
  }
  std::vector<Transfer> transfers;
  for (const P2POp& op : ops) {
    const int peer = op.peer.value();
    if (peer == rank_) continue;
    const bool send = op.kind == P2POp::Kind::kSend;
    const uint64_t seq = send ? p2p_send_seq_[peer]++ : p2p_recv_seq_[peer]++;
    transfers.push_back({send ? Kind::kSend : Kind::kRecv, peer, op.data,
                         op.count * DataTypeSize(op.dtype), MakeTag(OpCode::kP2P, seq, 0)});
  }
  return Run(transfers, absl::StrCat("group_send_recv of ", ops.size(), " ops"));
}

}  // namespace weir::parallel
