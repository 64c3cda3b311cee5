// parallel/point_to_point_communicator.h
//
// PointToPointCommunicator implements every Communicator operation for host
// memory on top of one transport primitive, Exchange(): post a set of tagged
// sends and receives to peers and wait for all of them. UcxCommunicator and
// FakeCommunicator differ only in that primitive, so the collective algorithms
// (and their tests through the fake) are shared.
//
// Algorithms (all deterministic; n = world size, r = this rank):
//  * AllToAllV, AllGather: direct exchange, peers visited in the order
//    r+1, r+2, ... (mod n); the self block is a local copy.
//  * AllReduce: direct reduce-scatter (chunk c goes to rank c, which reduces the
//    n contributions in rank order 0..n-1) followed by a direct all-gather of
//    the reduced chunks; the result is bitwise identical on every rank.
//  * Broadcast: the root sends to every rank.
//  * Barrier: dissemination, ceil(log2 n) rounds of zero-byte messages.
//
// Thread safety: as Communicator (one caller thread at a time).

#ifndef WEIR_PARALLEL_POINT_TO_POINT_COMMUNICATOR_H_
#define WEIR_PARALLEL_POINT_TO_POINT_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "parallel/communicator.h"

namespace weir::parallel {

// One message of an Exchange. `tag` uses the low kTagBits bits; the transport
// adds the sender's rank so that (sender, tag) identifies a message.
struct Transfer {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  int peer = 0;          // never this rank
  void* data = nullptr;  // kSend: read only
  size_t bytes = 0;      // kRecv: the exact size expected
  uint64_t tag = 0;
};

inline constexpr int kTagBits = 40;

class PointToPointCommunicator : public Communicator {
 public:
  Rank rank() const override { return Rank(rank_); }
  int world_size() const override { return world_size_; }

  absl::Status AllToAllV(const AllToAllVArgs& args, const ExecContext& ctx = {}) override;
  absl::Status AllReduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op,
                         const ExecContext& ctx = {}) override;
  absl::Status AllGather(const void* send, void* recv, int64_t count, DataType dtype,
                         const ExecContext& ctx = {}) override;
  absl::Status Broadcast(void* data, int64_t count, DataType dtype, Rank root,
                         const ExecContext& ctx = {}) override;
  absl::Status Barrier(const ExecContext& ctx = {}) override;
  absl::Status GroupSendRecv(std::span<const P2POp> ops, const ExecContext& ctx = {}) override;

 protected:
  // REQUIRES: 0 <= rank < world_size.
  PointToPointCommunicator(int rank, int world_size);

  // Posts every transfer of `transfers` at once and waits until all completed.
  // Returns INVALID_ARGUMENT if a received message's size differs from
  // `bytes`, UNAVAILABLE (naming the outstanding peers and `what`) on timeout
  // or peer failure. On return no transfer's buffer is accessed any more.
  virtual absl::Status Exchange(std::span<const Transfer> transfers, const std::string& what) = 0;

 private:
  enum class OpCode : uint64_t {
    kAllToAllV = 1,
    kAllReduce = 2,
    kAllGather = 3,
    kBroadcast = 4,
    kBarrier = 5,
    kP2P = 6,
  };
  // Builds the 40-bit tag: op (4 bits) | sequence (24 bits) | step (12 bits).
  static uint64_t MakeTag(OpCode op, uint64_t seq, uint64_t step);

  // Returns broken_ or UNIMPLEMENTED for non-host memory; else starts a
  // collective: bumps seq_ and fills what_.
  absl::Status Begin(const ExecContext& ctx, const char* name);
  // Runs Exchange and marks the communicator broken on any error.
  absl::Status Run(std::span<const Transfer> transfers, const std::string& what);
  absl::Status CheckPeer(Rank peer, const char* role) const;

  const int rank_;
  const int world_size_;
  uint64_t seq_ = 0;                    // collectives started so far
  std::vector<uint64_t> p2p_send_seq_;  // [world_size] sends posted to each peer
  std::vector<uint64_t> p2p_recv_seq_;  // [world_size] receives posted from each peer
  absl::Status broken_;                 // UNAVAILABLE once broken, sticky
  std::string what_;                    // "all_reduce #12", for error messages
  std::vector<std::byte> scratch_;      // AllReduce staging, reused
};

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_POINT_TO_POINT_COMMUNICATOR_H_
