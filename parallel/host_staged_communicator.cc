#include "parallel/host_staged_communicator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "base/status_macros.h"
#include "kernels/cuda/launch_status.h"

namespace weir::parallel {
namespace {

using ::weir::kernels::cuda::CudaStatus;

// Elements spanned by per-peer blocks: max(offset + count).
int64_t Extent(std::span<const int64_t> counts, std::span<const int64_t> offsets) {
  int64_t end = 0;
  for (size_t p = 0; p < counts.size(); ++p) end = std::max(end, offsets[p] + counts[p]);
  return end;
}

absl::Status HostOnly(const ExecContext& ctx, int device) {
  if (ctx.memory != MemoryKind::kHost) {
    return absl::UnimplementedError("HostStagedCommunicator takes host buffers only");
  }
  // Staging buffers, copies and growth belong to the communicator's device,
  // whatever the calling thread had current.
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaStatus(e, "cudaSetDevice");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostStagedCommunicator>> HostStagedCommunicator::Create(
    std::unique_ptr<NcclCommunicator> nccl, const HostStagedOptions& options) {
  if (nccl == nullptr) return absl::InvalidArgumentError("HostStagedCommunicator: no NCCL");
  if (options.staging_bytes < 0) {
    return absl::InvalidArgumentError("HostStagedCommunicator: negative staging size");
  }
  if (cudaError_t e = cudaSetDevice(nccl->device().value()); e != cudaSuccess) {
    return CudaStatus(e, "cudaSetDevice");
  }
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    return CudaStatus(e, "cudaStreamCreate");
  }
  std::unique_ptr<HostStagedCommunicator> comm(
      new HostStagedCommunicator(std::move(nccl), stream));
  RETURN_IF_ERROR(comm->Reserve(options.staging_bytes, options.staging_bytes));
  return comm;
}

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<NcclCommunicator> nccl,
                                               void* stream)
    : nccl_(std::move(nccl)), stream_(stream) {}

HostStagedCommunicator::~HostStagedCommunicator() {
  cudaSetDevice(nccl_->device().value());
  nccl_.reset();  // finalizes NCCL work on the stream first
  cudaFree(send_);
  cudaFree(recv_);
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

absl::Status HostStagedCommunicator::Reserve(int64_t send, int64_t recv) {
  auto grow = [](char*& buffer, int64_t& size, int64_t want) -> absl::Status {
    if (want <= size) return absl::OkStatus();
    cudaFree(buffer);
    buffer = nullptr;
    size = 0;
    if (cudaError_t e = cudaMalloc(&buffer, static_cast<size_t>(std::max<int64_t>(want, 1)));
        e != cudaSuccess) {
      return CudaStatus(e, "cudaMalloc of the staging buffer");
    }
    size = want;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(grow(send_, send_bytes_, send));
  return grow(recv_, recv_bytes_, recv);
}

absl::Status HostStagedCommunicator::ToDevice(void* dst, const void* src, int64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  bytes_staged_ += bytes;
  cudaError_t e = cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                  static_cast<cudaStream_t>(stream_));
  return CudaStatus(e, "copy to the staging buffer");
}

absl::Status HostStagedCommunicator::ToHost(void* dst, const void* src, int64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  bytes_staged_ += bytes;
  cudaError_t e = cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                                  static_cast<cudaStream_t>(stream_));
  return CudaStatus(e, "copy from the staging buffer");
}

// Waits for the stream through NCCL (bounded, polling for NCCL errors).
absl::Status HostStagedCommunicator::Wait() { return nccl_->Synchronize(DeviceContext()); }

absl::Status HostStagedCommunicator::AllToAllV(const AllToAllVArgs& args, const ExecContext& ctx) {
  const int world = world_size();
  RETURN_IF_ERROR(CheckPeerBlocks(args.send_counts, args.send_offsets, args.send, world, "send"));
  RETURN_IF_ERROR(CheckPeerBlocks(args.recv_counts, args.recv_offsets, args.recv, world, "recv"));
  RETURN_IF_ERROR(HostOnly(ctx, nccl_->device().value()));
  const int64_t size = static_cast<int64_t>(DataTypeSize(args.dtype));
  const int64_t send_extent = Extent(args.send_counts, args.send_offsets) * size;
  const int64_t recv_extent = Extent(args.recv_counts, args.recv_offsets) * size;
  RETURN_IF_ERROR(Reserve(send_extent, recv_extent));
  RETURN_IF_ERROR(ToDevice(send_, args.send, send_extent));
  AllToAllVArgs device = args;
  device.send = send_;
  device.recv = recv_;
  RETURN_IF_ERROR(nccl_->AllToAllV(device, DeviceContext()));
  const char* recv_host = static_cast<const char*>(args.recv);
  for (int p = 0; p < world; ++p) {
    // Only the blocks: gaps of the caller's buffer stay untouched.
    RETURN_IF_ERROR(ToHost(const_cast<char*>(recv_host) + args.recv_offsets[p] * size,
                           recv_ + args.recv_offsets[p] * size, args.recv_counts[p] * size));
  }
  return Wait();
}

absl::Status HostStagedCommunicator::AllReduce(const void* send, void* recv, int64_t count,
                                               DataType dtype, ReduceOp op,
                                               const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckElementCount(count, send, "send"));
  RETURN_IF_ERROR(CheckElementCount(count, recv, "recv"));
  RETURN_IF_ERROR(HostOnly(ctx, nccl_->device().value()));
  const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
  RETURN_IF_ERROR(Reserve(bytes, bytes));
  RETURN_IF_ERROR(ToDevice(send_, send, bytes));
  RETURN_IF_ERROR(nccl_->AllReduce(send_, recv_, count, dtype, op, DeviceContext()));
  RETURN_IF_ERROR(ToHost(recv, recv_, bytes));
  return Wait();
}

absl::Status HostStagedCommunicator::AllGather(const void* send, void* recv, int64_t count,
                                               DataType dtype, const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckElementCount(count, send, "send"));
  RETURN_IF_ERROR(CheckElementCount(count, recv, "recv"));
  RETURN_IF_ERROR(HostOnly(ctx, nccl_->device().value()));
  const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
  RETURN_IF_ERROR(Reserve(bytes, bytes * world_size()));
  RETURN_IF_ERROR(ToDevice(send_, send, bytes));
  RETURN_IF_ERROR(nccl_->AllGather(send_, recv_, count, dtype, DeviceContext()));
  RETURN_IF_ERROR(ToHost(recv, recv_, bytes * world_size()));
  return Wait();
}

absl::Status HostStagedCommunicator::Broadcast(void* data, int64_t count, DataType dtype,
                                               Rank root, const ExecContext& ctx) {
  RETURN_IF_ERROR(CheckElementCount(count, data, "data"));
  RETURN_IF_ERROR(HostOnly(ctx, nccl_->device().value()));
  const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
  RETURN_IF_ERROR(Reserve(bytes, 0));
  if (root == rank()) RETURN_IF_ERROR(ToDevice(send_, data, bytes));
  RETURN_IF_ERROR(nccl_->Broadcast(send_, count, dtype, root, DeviceContext()));
  RETURN_IF_ERROR(ToHost(data, send_, bytes));
  return Wait();
}

absl::Status HostStagedCommunicator::Barrier(const ExecContext& ctx) {
  RETURN_IF_ERROR(HostOnly(ctx, nccl_->device().value()));
  return nccl_->Barrier(DeviceContext());
}

absl::Status HostStagedCommunicator::GroupSendRecv(std::span<const P2POp> ops,
                                                   const ExecContext& ctx) {
  std::vector<const P2POp*> self_sends, self_recvs;
  RETURN_IF_ERROR(CheckGroupOps(ops, rank().value(), world_size(), self_sends, self_recvs));
  RETURN_IF_ERROR(HostOnly(ctx, nccl_->device().value()));
  // Sends packed into the send buffer, receives into the receive buffer, in op order.
  int64_t send_total = 0, recv_total = 0;
  for (const P2POp& op : ops) {
    const int64_t bytes = op.count * static_cast<int64_t>(DataTypeSize(op.dtype));
    (op.kind == P2POp::Kind::kSend ? send_total : recv_total) += bytes;
  }
  RETURN_IF_ERROR(Reserve(send_total, recv_total));
  std::vector<P2POp> device(ops.begin(), ops.end());
  int64_t send_at = 0, recv_at = 0;
  for (P2POp& op : device) {
    const int64_t bytes = op.count * static_cast<int64_t>(DataTypeSize(op.dtype));
    if (op.kind == P2POp::Kind::kSend) {
      RETURN_IF_ERROR(ToDevice(send_ + send_at, op.data, bytes));
      op.data = send_ + send_at;
      send_at += bytes;
    } else {
      op.data = recv_ + recv_at;
      recv_at += bytes;
    }
  }
  RETURN_IF_ERROR(nccl_->GroupSendRecv(device, DeviceContext()));
  recv_at = 0;
  for (const P2POp& op : ops) {
    if (op.kind != P2POp::Kind::kRecv) continue;
    const int64_t bytes = op.count * static_cast<int64_t>(DataTypeSize(op.dtype));
    RETURN_IF_ERROR(ToHost(op.data, recv_ + recv_at, bytes));
    recv_at += bytes;
  }
  return Wait();
}

}  // namespace weir::parallel
