// parallel/nccl_operations.cc
//
// The collectives and point-to-point operations of NcclCommunicator:
// argument checks, then NCCL calls on the caller's stream (set-up, waiting
// and failure handling are in nccl_communicator.cc).

#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "parallel/nccl_communicator.h"

namespace weir::parallel {
namespace {

ncclDataType_t NcclType(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
  }
  return ncclUint8;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}


absl::Status CheckPeer(Rank peer, int world, const char* role) {
  if (peer.value() < 0 || peer.value() >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat(role, " ", peer.value(), " outside [0, ", world, ")"));
  }
  return absl::OkStatus();
}

const std::byte* At(const void* base, int64_t elems, DataType dtype) {
  return static_cast<const std::byte*>(base) + elems * static_cast<int64_t>(DataTypeSize(dtype));
}
std::byte* At(void* base, int64_t elems, DataType dtype) {
  return static_cast<std::byte*>(base) + elems * static_cast<int64_t>(DataTypeSize(dtype));
}

cudaStream_t Stream(const ExecContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

}  // namespace

absl::Status NcclCommunicator::AllToAllV(const AllToAllVArgs& a, const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckPeerBlocks(a.send_counts, a.send_offsets, a.send, world_size_, "send"));
  RETURN_IF_ERROR(CheckPeerBlocks(a.recv_counts, a.recv_offsets, a.recv, world_size_, "recv"));
  if (a.send_counts[rank_] != a.recv_counts[rank_]) {
    return absl::InvalidArgumentError(absl::StrCat("self block sends ", a.send_counts[rank_],
                                                   " elements, receives ", a.recv_counts[rank_]));
  }
  RETURN_IF_ERROR(Begin(ctx));
  const size_t esize = DataTypeSize(a.dtype);
  RETURN_IF_ERROR(Copy(At(a.recv, a.recv_offsets[rank_], a.dtype),
                       At(a.send, a.send_offsets[rank_], a.dtype), a.send_counts[rank_] * esize,
                       ctx.stream, "all_to_all_v self block"));
  const ncclDataType_t type = NcclType(a.dtype);
  ncclResult_t first = ncclGroupStart();
  for (int step = 1; step < world_size_ && first == ncclSuccess; ++step) {
    const int p = (rank_ + step) % world_size_;
    if (a.send_counts[p] > 0) {
      first = ncclSend(At(a.send, a.send_offsets[p], a.dtype), a.send_counts[p], type, p, comm_,
                       Stream(ctx));
    }
    if (first == ncclSuccess && a.recv_counts[p] > 0) {
      first = ncclRecv(At(a.recv, a.recv_offsets[p], a.dtype), a.recv_counts[p], type, p, comm_,
                       Stream(ctx));
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  return Await(first != ncclSuccess ? first : end, "all_to_all_v");
}

absl::Status NcclCommunicator::AllReduce(const void* send, void* recv, int64_t count,
                                         DataType dtype, ReduceOp op, const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckElementCount(count, send, "send"));
  RETURN_IF_ERROR(CheckElementCount(count, recv, "recv"));
  RETURN_IF_ERROR(Begin(ctx));
  if (count == 0) return absl::OkStatus();
  return Await(ncclAllReduce(send, recv, count, NcclType(dtype), NcclOp(op), comm_, Stream(ctx)),
               "all_reduce");
}

absl::Status NcclCommunicator::AllGather(const void* send, void* recv, int64_t count,
                                         DataType dtype, const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckElementCount(count, send, "send"));
  RETURN_IF_ERROR(CheckElementCount(count, recv, "recv"));
  RETURN_IF_ERROR(Begin(ctx));
  if (count == 0) return absl::OkStatus();
  return Await(ncclAllGather(send, recv, count, NcclType(dtype), comm_, Stream(ctx)),
               "all_gather");
}

absl::Status NcclCommunicator::Broadcast(void* data, int64_t count, DataType dtype, Rank root,
                                         const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckElementCount(count, data, "data"));
  RETURN_IF_ERROR(CheckPeer(root, world_size_, "root"));
  RETURN_IF_ERROR(Begin(ctx));
  if (count == 0) return absl::OkStatus();
  return Await(
      ncclBroadcast(data, data, count, NcclType(dtype), root.value(), comm_, Stream(ctx)),
      "broadcast");
}

absl::Status NcclCommunicator::GroupSendRecv(std::span<const P2POp> ops, const ExecContext& ctx) {
  std::vector<const P2POp*> self_sends, self_recvs;
  RETURN_IF_ERROR(CheckGroupOps(ops, rank_, world_size_, self_sends, self_recvs));
  RETURN_IF_ERROR(Begin(ctx));
  for (size_t i = 0; i < self_sends.size(); ++i) {
    RETURN_IF_ERROR(Copy(self_recvs[i]->data, self_sends[i]->data,
                         self_sends[i]->count * DataTypeSize(self_sends[i]->dtype), ctx.stream,
                         "group_send_recv self op"));
  }
  // NCCL matches the sends and receives of one ordered pair in posting order,
  // which is the contract's k-th-send-to-k-th-receive rule.
  ncclResult_t first = ncclGroupStart();
  for (const P2POp& op : ops) {
    if (op.peer.value() == rank_ || op.count == 0 || first != ncclSuccess) continue;
    first = op.kind == P2POp::Kind::kSend
                ? ncclSend(op.data, op.count, NcclType(op.dtype), op.peer.value(), comm_,
                           Stream(ctx))
                : ncclRecv(op.data, op.count, NcclType(op.dtype), op.peer.value(), comm_,
                           Stream(ctx));
  }
  const ncclResult_t end = ncclGroupEnd();
  return Await(first != ncclSuccess ? first : end, "group_send_recv");
}

}  // namespace weir::parallel
