// parallel/communicator.cc

#include "parallel/communicator.h"

#include "absl/strings/str_cat.h"

namespace weir::parallel {

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return 1;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
}

absl::Status CheckElementCount(int64_t count, const void* data, const char* name) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat(name, " count ", count, " < 0"));
  if (count > 0 && data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is null with count ", count));
  }
  return absl::OkStatus();
}

absl::Status CheckPeerBlocks(std::span<const int64_t> counts, std::span<const int64_t> offsets,
                             const void* data, int world, const char* name) {
  if (static_cast<int>(counts.size()) != world || static_cast<int>(offsets.size()) != world) {
    return absl::InvalidArgumentError(absl::StrCat(name, " counts/offsets have ", counts.size(),
                                                   "/", offsets.size(), " entries, want ", world));
  }
  for (int p = 0; p < world; ++p) {
    if (offsets[p] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " offset ", offsets[p], " < 0"));
    }
    if (absl::Status s = CheckElementCount(counts[p], data, name); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(s.message(), " for peer ", p));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGroupOps(std::span<const P2POp> ops, int self, int world,
                           std::vector<const P2POp*>& self_sends,
                           std::vector<const P2POp*>& self_recvs) {
  for (const P2POp& op : ops) {
    if (op.peer.value() < 0 || op.peer.value() >= world) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer ", op.peer.value(), " outside [0, ", world, ")"));
    }
    if (absl::Status s = CheckElementCount(op.count, op.data, "data"); !s.ok()) return s;
    if (op.peer.value() == self) {
      (op.kind == P2POp::Kind::kSend ? self_sends : self_recvs).push_back(&op);
    }
  }
  if (self_sends.size() != self_recvs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(self_sends.size(), " sends to self but ",
                                                   self_recvs.size(), " receives from self"));
  }
  for (size_t i = 0; i < self_sends.size(); ++i) {
    const size_t sb = self_sends[i]->count * DataTypeSize(self_sends[i]->dtype);
    const size_t rb = self_recvs[i]->count * DataTypeSize(self_recvs[i]->dtype);
    if (sb != rb) {
      return absl::InvalidArgumentError(
          absl::StrCat("self send ", i, " has ", sb, " bytes, its receive ", rb));
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::parallel
