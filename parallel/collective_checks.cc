// parallel/collective_checks.cc

#include "parallel/collective_checks.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "parallel/reduce.h"

namespace weir::parallel {
namespace {

std::mt19937_64 RankRng(uint64_t seed, int rank, uint64_t salt) {
  return std::mt19937_64(seed * 1000003 + static_cast<uint64_t>(rank) * 7919 + salt);
}

// `count` random elements of `dtype` as bytes; floats are finite, of mixed sign
// and magnitude so that reduction order matters.
std::vector<std::byte> RandomBytes(std::mt19937_64& rng, DataType dtype, int64_t count) {
  std::vector<std::byte> out(count * DataTypeSize(dtype));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t bits = rng();
    std::byte* dst = out.data() + i * DataTypeSize(dtype);
    if (dtype == DataType::kFloat32) {
      const float v = static_cast<float>(static_cast<int64_t>(bits >> 11) - (1LL << 52)) *
                      (1.0f / (1LL << 40)) * static_cast<float>(1 + (bits & 7));
      std::memcpy(dst, &v, sizeof(v));
    } else if (dtype == DataType::kFloat64) {
      const double v = static_cast<double>(static_cast<int64_t>(bits >> 11) - (1LL << 52)) / 3e12;
      std::memcpy(dst, &v, sizeof(v));
    } else {
      std::memcpy(dst, &bits, DataTypeSize(dtype));
    }
  }
  return out;
}

absl::Status Compare(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                     const std::string& what) {
  if (got.size() != want.size()) {
    return absl::InternalError(absl::StrCat(what, ": size ", got.size(), " vs ", want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return absl::InternalError(absl::StrCat(what, ": byte ", i, " differs"));
  }
  return absl::OkStatus();
}

// counts[src][dst] of the all-to-all-v check, identical on every rank.
std::vector<std::vector<int64_t>> CountMatrix(uint64_t seed, int n, int64_t max_count) {
  std::mt19937_64 rng(seed ^ 0x5eed);
  std::vector<std::vector<int64_t>> c(n, std::vector<int64_t>(n));
  for (auto& row : c) {
    for (int64_t& v : row) v = (rng() % 4 == 0) ? 0 : static_cast<int64_t>(rng() % (max_count + 1));
  }
  return c;
}

}  // namespace

absl::Status CheckAllToAllV(Communicator& comm, uint64_t seed, int64_t max_count) {
  const int n = comm.world_size(), me = comm.rank().value();
  const auto counts = CountMatrix(seed, n, max_count);
  // Every rank's send buffer, blocks packed in peer order with a gap of 3.
  auto send_layout = [&](int src, std::vector<int64_t>& offsets) {
    offsets.assign(n, 0);
    int64_t at = 0;
    for (int p = 0; p < n; ++p) offsets[p] = at, at += counts[src][p] + 3;
    return at;
  };
  std::vector<int64_t> send_offsets, recv_offsets(n), recv_counts(n);
  const int64_t send_total = send_layout(me, send_offsets);
  std::mt19937_64 rng = RankRng(seed, me, 1);
  const std::vector<std::byte> send = RandomBytes(rng, DataType::kInt32, send_total);
  // Receive blocks in reverse peer order, to exercise arbitrary offsets.
  int64_t at = 0;
  for (int p = n - 1; p >= 0; --p)
    recv_counts[p] = counts[p][me], recv_offsets[p] = at, at += counts[p][me];
  std::vector<std::byte> recv(at * 4), want(at * 4);
  for (int p = 0; p < n; ++p) {
    std::vector<int64_t> p_offsets;
    const int64_t p_total = send_layout(p, p_offsets);
    std::mt19937_64 prng = RankRng(seed, p, 1);
    const std::vector<std::byte> p_send = RandomBytes(prng, DataType::kInt32, p_total);
    std::memcpy(want.data() + recv_offsets[p] * 4, p_send.data() + p_offsets[me] * 4,
                counts[p][me] * 4);
  }
  RETURN_IF_ERROR(comm.AllToAllV({.send = send.data(),
                                  .send_counts = counts[me],
                                  .send_offsets = send_offsets,
                                  .recv = recv.data(),
                                  .recv_counts = recv_counts,
                                  .recv_offsets = recv_offsets,
                                  .dtype = DataType::kInt32}));
  return Compare(recv, want, absl::StrCat("all_to_all_v seed ", seed));
}

absl::Status CheckAllReduce(Communicator& comm, uint64_t seed, DataType dtype, ReduceOp op,
                            int64_t count, bool in_place) {
  const int n = comm.world_size(), me = comm.rank().value();
  std::vector<std::byte> want;
  std::vector<std::byte> mine;
  for (int p = 0; p < n; ++p) {
    std::mt19937_64 rng = RankRng(seed, p, 2);
    std::vector<std::byte> data = RandomBytes(rng, dtype, count);
    if (p == me) mine = data;
    if (p == 0) {
      want = data;
    } else {
      ReduceInto(dtype, op, want.data(), data.data(), count);
    }
  }
  std::vector<std::byte> recv(mine.size());
  if (in_place) {
    recv = mine;
    RETURN_IF_ERROR(comm.AllReduce(recv.data(), recv.data(), count, dtype, op));
  } else {
    RETURN_IF_ERROR(comm.AllReduce(mine.data(), recv.data(), count, dtype, op));
  }
  return Compare(recv, want,
                 absl::StrCat("all_reduce ", DataTypeName(dtype), " ", ReduceOpName(op), " count ",
                              count, in_place ? " in place" : ""));
}

absl::Status CheckAllGather(Communicator& comm, uint64_t seed, DataType dtype, int64_t count) {
  const int n = comm.world_size(), me = comm.rank().value();
  std::vector<std::byte> want, mine;
  for (int p = 0; p < n; ++p) {
    std::mt19937_64 rng = RankRng(seed, p, 3);
    std::vector<std::byte> data = RandomBytes(rng, dtype, count);
    if (p == me) mine = data;
    want.insert(want.end(), data.begin(), data.end());
  }
  std::vector<std::byte> recv(want.size());
  RETURN_IF_ERROR(comm.AllGather(mine.data(), recv.data(), count, dtype));
  return Compare(recv, want, absl::StrCat("all_gather count ", count));
}

absl::Status CheckBroadcast(Communicator& comm, uint64_t seed, Rank root, int64_t count) {
  std::mt19937_64 rng = RankRng(seed, root.value(), 4);
  const std::vector<std::byte> want = RandomBytes(rng, DataType::kFloat64, count);
  std::vector<std::byte> data(want.size(), std::byte{0xAB});
  if (comm.rank() == root) data = want;
  RETURN_IF_ERROR(comm.Broadcast(data.data(), count, DataType::kFloat64, root));
  return Compare(data, want, absl::StrCat("broadcast root ", root.value(), " count ", count));
}

absl::Status CheckGroupSendRecv(Communicator& comm, uint64_t seed, int64_t max_count) {
  const int n = comm.world_size(), me = comm.rank().value();
  const int right = (me + 1) % n, left = (me - 1 + n) % n;
  // Message k from rank src to its right (k = 0, 1) or to itself (k = 2).
  auto message = [&](int src, int k) {
    std::mt19937_64 rng = RankRng(seed, src, 10 + k);
    return RandomBytes(rng, DataType::kUint8, static_cast<int64_t>(rng() % (max_count + 1)));
  };
  std::vector<std::byte> out[3] = {message(me, 0), message(me, 1), message(me, 2)};
  std::vector<std::byte> want[3] = {message(left, 0), message(left, 1), message(me, 2)};
  std::vector<std::byte> in[3];
  std::vector<P2POp> ops;
  for (int k = 0; k < 3; ++k) {
    in[k].resize(want[k].size());
    const Rank to(k < 2 ? right : me), from(k < 2 ? left : me);
    ops.push_back({P2POp::Kind::kRecv, from, in[k].data(), static_cast<int64_t>(in[k].size())});
    ops.push_back({P2POp::Kind::kSend, to, out[k].data(), static_cast<int64_t>(out[k].size())});
  }
  RETURN_IF_ERROR(comm.GroupSendRecv(ops));
  for (int k = 0; k < 3; ++k) {
    RETURN_IF_ERROR(Compare(in[k], want[k], absl::StrCat("group_send_recv message ", k)));
  }
  return absl::OkStatus();
}

absl::Status CheckEveryCollective(Communicator& comm, uint64_t seed) {
  const int n = comm.world_size();
  for (int64_t max_count : {0, 1, 5, 300}) {
    RETURN_IF_ERROR(CheckAllToAllV(comm, seed++, max_count));
  }
  for (DataType dtype : {DataType::kFloat32, DataType::kInt64, DataType::kFloat64, DataType::kInt32,
                         DataType::kUint8}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{1000 + n}}) {
        RETURN_IF_ERROR(CheckAllReduce(comm, seed++, dtype, op, count, count % 2 == 1));
      }
    }
  }
  for (int64_t count : {0, 1, 257}) {
    RETURN_IF_ERROR(CheckAllGather(comm, seed++, DataType::kFloat32, count));
  }
  for (int root = 0; root < n; ++root) {
    RETURN_IF_ERROR(CheckBroadcast(comm, seed++, Rank(root), root % 2 == 0 ? 33 : 0));
  }
  RETURN_IF_ERROR(comm.Barrier());
  for (int64_t max_count : {0, 64, 5000}) {
    RETURN_IF_ERROR(CheckGroupSendRecv(comm, seed++, max_count));
  }
  return comm.Barrier();
}

}  // namespace weir::parallel
