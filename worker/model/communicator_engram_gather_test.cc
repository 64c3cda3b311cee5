// CommunicatorEngramGather on FakeCommunicator worlds (ranks as threads, each
// holding only its EngramShardRange of two synthetic tables): every rank's
// gathered rows are bit-identical to LocalEngramGather over the whole tables,
// for 1 to 5 ranks, different id counts per rank (one rank with none),
// repeated ids and tables with fewer rows than ranks; the sharding rule;
// argument errors; a peer asking for a row the rank does not own.
#include "worker/model/communicator_engram_gather.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/fake_communicator.h"
#include "worker/model/cpu_ops.h"

namespace weir::model {
namespace {

using parallel::Communicator;
using parallel::FakeCommunicator;

constexpr int64_t kHeadDim = 64;
constexpr int kLayers = 4;

struct Tables {
  ModelConfig config;
  std::vector<std::vector<uint8_t>> codes, scales;  // per Engram layer, whole tables
};

// Layers 1 and 3 carry Engram tables of `rows_a` and `rows_b` rows with
// finite random FP8 codes and E8M0 scales.
Tables MakeTables(int64_t rows_a, int64_t rows_b) {
  Tables t;
  t.config.engram_layer_ids = {1, 3};
  t.config.engram_num_embeddings = {rows_a, rows_b};
  t.config.engram_head_dim = kHeadDim;
  std::mt19937 gen(7);
  for (int64_t rows : {rows_a, rows_b}) {
    std::vector<uint8_t> c(rows * kHeadDim), s(rows * kHeadDim / 32);
    for (uint8_t& v : c) {
      do v = static_cast<uint8_t>(gen());
      while ((v & 0x7F) == 0x7F);  // no NaN codes
    }
    for (uint8_t& v : s) v = static_cast<uint8_t>(110 + gen() % 30);
    t.codes.push_back(std::move(c));
    t.scales.push_back(std::move(s));
  }
  return t;
}

// Weights holding rows `filter` selects, as LoadModelWeights does.
ModelWeights Held(const Tables& t, const EngramRowFilter& filter) {
  ModelWeights w;
  w.layers.resize(kLayers);
  for (size_t l = 0; l < t.config.engram_layer_ids.size(); ++l) {
    BlockWeights& b = w.layers[t.config.engram_layer_ids[l]];
    const int64_t rows = t.config.engram_num_embeddings[l];
    const EngramRowRange r =
        filter ? filter(t.config.engram_layer_ids[l], rows) : EngramRowRange{0, rows};
    b.has_engram = true;
    b.engram.rows = rows;
    b.engram.row_begin = r.begin;
    b.engram.row_end = r.end;
    b.engram.table = std::span<const uint8_t>(t.codes[l])
                         .subspan(r.begin * kHeadDim, (r.end - r.begin) * kHeadDim);
    b.engram.scales = std::span<const uint8_t>(t.scales[l])
                          .subspan(r.begin * kHeadDim / 32, (r.end - r.begin) * kHeadDim / 32);
  }
  return w;
}

TEST(EngramShardTest, RangesPartitionEveryTable) {
  for (int64_t rows : {0, 1, 3, 5, 37, 12458}) {
    for (int world = 1; world <= 5; ++world) {
      const int64_t per = (rows + world - 1) / world;
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const EngramRowRange range = EngramShardRange(rows, r, world);
        EXPECT_EQ(range.begin, next) << rows << " rows, rank " << r << " of " << world;
        EXPECT_LE(range.end - range.begin, per);
        EXPECT_GE(range.end, range.begin);
        for (int64_t row = range.begin; row < range.end; ++row) {
          ASSERT_EQ(EngramShardOwner(row, rows, world), r) << row;
        }
        next = range.end;
      }
      EXPECT_EQ(next, rows);
    }
  }
}

// Rank r asks for `counts[r]` random ids per layer (with repeats and both
// ends of the table); returns nothing, checks inside.
void GatherAndCompare(int world, int64_t rows_a, int64_t rows_b, std::vector<int> counts) {
  SCOPED_TRACE(testing::Message() << world << " ranks, tables " << rows_a << ", " << rows_b);
  const Tables t = MakeTables(rows_a, rows_b);
  CpuOps ops;
  const ModelWeights all = Held(t, {});
  auto local = LocalEngramGather::Create(t.config, ops, all);
  ASSERT_TRUE(local.ok()) << local.status();
  std::vector<ModelWeights> held(world);
  std::vector<std::vector<int64_t>> served(world), requested(world);
  for (int r = 0; r < world; ++r) held[r] = Held(t, ShardedEngramRowFilter(r, world));
  auto comms = FakeCommunicator::CreateWorld(world, {.timeout = absl::Seconds(20)});
  std::vector<absl::Status> st = parallel::RunOnRankThreads(comms, [&](Communicator& c) {
    const int r = c.rank().value();
    CpuOps rank_ops;
    auto g = CommunicatorEngramGather::Create(c, t.config, rank_ops, held[r]);
    if (!g.ok()) return g.status();
    std::mt19937 gen(100 + r);
    for (int step = 0; step < 3; ++step) {
      for (size_t l = 0; l < t.config.engram_layer_ids.size(); ++l) {
        const int layer = t.config.engram_layer_ids[l];
        const int64_t rows = t.config.engram_num_embeddings[l];
        std::vector<int64_t> ids(counts[r]);
        for (int64_t& id : ids) id = static_cast<int64_t>(gen() % rows);
        if (ids.size() >= 4) {  // both ends and a repeat
          ids[0] = 0;
          ids[1] = rows - 1;
          ids[2] = ids[3];
        }
        std::vector<float> got(ids.size() * kHeadDim, -1.0f), want(ids.size() * kHeadDim);
        if (absl::Status s = (*g)->Gather(layer, ids, got); !s.ok()) return s;
        EXPECT_TRUE((*local)->Gather(layer, ids, want).ok());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "rank " << r << " layer " << layer << " step " << step;
      }
    }
    served[r] = (*g)->served();
    requested[r] = (*g)->requested();
    return absl::OkStatus();
  });
  for (int r = 0; r < world; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  for (size_t l = 0; l < 2; ++l) {
    int64_t total_served = 0, total_requested = 0;
    for (int r = 0; r < world; ++r) {
      total_served += served[r][l];
      total_requested += requested[r][l];
    }
    EXPECT_EQ(total_served, total_requested) << "layer index " << l;
  }
}

TEST(CommunicatorEngramGatherTest, OneRank) { GatherAndCompare(1, 37, 50, {9}); }

TEST(CommunicatorEngramGatherTest, TwoRanksOneIdle) { GatherAndCompare(2, 37, 50, {0, 20}); }

TEST(CommunicatorEngramGatherTest, ThreeRanks) { GatherAndCompare(3, 1001, 997, {5, 1, 40}); }

TEST(CommunicatorEngramGatherTest, FourRanksUnevenShards) {
  GatherAndCompare(4, 37, 113, {12, 0, 7, 30});
}

TEST(CommunicatorEngramGatherTest, MoreRanksThanRows) {
  GatherAndCompare(5, 3, 4, {6, 6, 0, 6, 6});  // ranks 3-4 (table a) own no rows
}

TEST(CommunicatorEngramGatherTest, ArgumentErrors) {
  const Tables t = MakeTables(37, 50);
  CpuOps ops;
  auto comms = FakeCommunicator::CreateWorld(1, {.timeout = absl::Seconds(2)});
  // Held rows that are not the rank's shard.
  const ModelWeights half = Held(t, ShardedEngramRowFilter(0, 2));
  EXPECT_EQ(CommunicatorEngramGather::Create(*comms[0], t.config, ops, half).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LocalEngramGather::Create(t.config, ops, half).status().code(),
            absl::StatusCode::kInvalidArgument);
  const ModelWeights all = Held(t, {});
  auto g = CommunicatorEngramGather::Create(*comms[0], t.config, ops, all);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<float> out(kHeadDim);
  const int64_t past[] = {37}, negative[] = {-1}, fine[] = {36};
  EXPECT_EQ((*g)->Gather(1, past, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*g)->Gather(1, negative, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*g)->Gather(2, fine, out).code(), absl::StatusCode::kInvalidArgument);  // no Engram
  EXPECT_EQ((*g)->Gather(7, fine, out).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> small(kHeadDim - 1);
  EXPECT_EQ((*g)->Gather(1, fine, small).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*g)->Gather(1, fine, out).ok());  // nothing was left half-sent
}

// Rank 1 speaks the protocol by hand and asks rank 0 for a row of rank 1's
// own shard: rank 0 completes the exchange (zeros) and reports INTERNAL.
TEST(CommunicatorEngramGatherTest, PeerAskingForAnUnownedRow) {
  const Tables t = MakeTables(40, 40);
  auto comms = FakeCommunicator::CreateWorld(2, {.timeout = absl::Seconds(20)});
  const ModelWeights held0 = Held(t, ShardedEngramRowFilter(0, 2));
  std::vector<uint8_t> reply(kHeadDim + kHeadDim / 32, 0xAA);
  std::vector<absl::Status> st = parallel::RunOnRankThreads(comms, [&](Communicator& c) {
    if (c.rank().value() == 0) {
      CpuOps ops;
      auto g = CommunicatorEngramGather::Create(c, t.config, ops, held0);
      if (!g.ok()) return g.status();
      return (*g)->Gather(1, {}, {});
    }
    const int64_t ones[] = {1, 1}, index[] = {0, 1};
    int64_t counts[] = {1, 0}, got_counts[] = {-1, -1};
    absl::Status s = c.AllToAllV({.send = counts,
                                  .send_counts = ones,
                                  .send_offsets = index,
                                  .recv = got_counts,
                                  .recv_counts = ones,
                                  .recv_offsets = index,
                                  .dtype = parallel::DataType::kInt64});
    if (!s.ok()) return s;
    const int64_t id = 30;  // rank 1's row
    const int64_t one_zero[] = {1, 0}, zeros[] = {0, 0}, none[] = {0, 0};
    s = c.AllToAllV({.send = &id,
                     .send_counts = one_zero,
                     .send_offsets = zeros,
                     .recv = nullptr,
                     .recv_counts = none,
                     .recv_offsets = zeros,
                     .dtype = parallel::DataType::kInt64});
    if (!s.ok()) return s;
    const int64_t row_bytes[] = {static_cast<int64_t>(reply.size()), 0};
    return c.AllToAllV({.send = nullptr,
                        .send_counts = none,
                        .send_offsets = zeros,
                        .recv = reply.data(),
                        .recv_counts = row_bytes,
                        .recv_offsets = zeros,
                        .dtype = parallel::DataType::kUint8});
  });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kInternal) << st[0];
  EXPECT_TRUE(st[1].ok()) << st[1];
  EXPECT_EQ(reply, std::vector<uint8_t>(reply.size(), 0));
}

}  // namespace
}  // namespace weir::model
