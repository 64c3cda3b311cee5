// EplbService over real gRPC: report streams in, a rebalancing attempt on a
// fake cluster, GetState out.

#include "eplb/eplb_service.h"

#include <memory>
#include <vector>

#include "base/grpc_util.h"
#include "eplb/fake_cluster_link.h"
#include "eplb/rebalancer.h"
#include "gtest/gtest.h"

namespace weir::eplb {
namespace {

constexpr int kWorld = 2;

// One rank's report of [1 layer, 4 experts]: experts 0 and 1 (rank 0's under
// the initial map) are hot.
v1::LoadReport Report(int rank, uint64_t step_id, uint64_t map_version,
                      std::vector<uint64_t> served) {
  v1::LoadReport report;
  report.set_rank(rank);
  report.set_step_id(step_id);
  report.set_num_moe_layers(1);
  report.set_num_logical(4);
  for (uint64_t count : {25, 25, 1, 1}) report.add_counts(count);
  report.set_map_version(map_version);
  for (uint64_t rows : served) report.add_served(rows);
  return report;
}

class EplbServiceTest : public ::testing::Test {
 protected:
  void Start(Rebalancer* rebalancer, int window_size = 100) {
    service_ = std::make_unique<EplbService>(window_size, rebalancer);
    service_->SetWorldSize(kWorld);
    absl::StatusOr<StartedServer> server =
        StartServer({.address = "127.0.0.1:0"}, {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::Eplb::NewStub(MakeChannel(server_.address));
  }

  void TearDown() override {
    if (server_.server != nullptr) server_.server->Shutdown();
  }

  // Streams `reports` on one ReportLoad call; returns its status.
  grpc::Status Send(const std::vector<v1::LoadReport>& reports, uint64_t* accepted = nullptr) {
    grpc::ClientContext context;
    v1::ReportLoadResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::LoadReport>> writer =
        stub_->ReportLoad(&context, &response);
    for (const v1::LoadReport& report : reports) {
      if (!writer->Write(report)) break;
    }
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    if (accepted != nullptr) *accepted = response.reports_accepted();
    return status;
  }

  v1::EplbState State() {
    grpc::ClientContext context;
    v1::EplbState state;
    grpc::Status status = stub_->GetState(&context, v1::GetEplbStateRequest(), &state);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return state;
  }

  FakeClusterLink link_{kWorld, /*epoch=*/9, absl::Seconds(5)};
  std::unique_ptr<EplbService> service_;
  StartedServer server_;
  std::unique_ptr<v1::Eplb::Stub> stub_;
};

TEST_F(EplbServiceTest, RebalancesEveryIntervalAndReportsTheCommittedMap) {
  Rebalancer rebalancer(RebalancerOptions{.rearrange_interval = 2, .min_window_rounds = 2},
                        &link_);
  Start(&rebalancer);
  v1::EplbState state = State();
  EXPECT_EQ(state.window_reports(), 0u);
  EXPECT_FALSE(state.has_current_map());

  // Round 1 alone is not due; round 2 is.
  uint64_t accepted = 0;
  ASSERT_TRUE(Send({Report(0, 128, 0, {50}), Report(1, 128, 0, {2})}, &accepted).ok());
  EXPECT_EQ(accepted, 2u);
  rebalancer.WaitIdle();
  EXPECT_TRUE(link_.commits().empty());
  state = State();
  EXPECT_EQ(state.current_map().version(), 0u);  // The initial map, for now.
  EXPECT_NEAR(state.balance_ratio(), 50.0 / 26.0, 1e-9);
  ASSERT_EQ(state.rank_loads_size(), kWorld);
  EXPECT_EQ(state.rank_loads(0).tokens(), 100u);
  EXPECT_EQ(state.rank_loads(1).tokens(), 4u);
  EXPECT_NEAR(state.measured_ratio(), 50.0 / 26.0, 1e-9);

  ASSERT_TRUE(Send({Report(0, 256, 0, {50}), Report(1, 256, 0, {2})}).ok());
  rebalancer.WaitIdle();
  ASSERT_EQ(link_.commits().size(), 1u);
  ASSERT_EQ(link_.prepare_calls().size(), static_cast<size_t>(kWorld));
  EXPECT_EQ(link_.prepare_calls()[0].epoch, 9u);

  state = State();
  EXPECT_EQ(state.committed_version(), 1u);
  EXPECT_EQ(state.current_map().version(), 1u);
  EXPECT_EQ(state.proposals(), 1u);
  ASSERT_EQ(state.history_size(), 1);
  EXPECT_TRUE(state.history(0).committed());
  EXPECT_NEAR(state.history(0).measured_before(), 50.0 / 26.0, 1e-9);
  EXPECT_NEAR(state.balance_ratio(), 1.0, 1e-9);  // The new map splits the hot pair.
  EXPECT_EQ(state.rank_loads(0).tokens(), state.rank_loads(1).tokens());
  EXPECT_EQ(state.measured_ratio(), 0.0);  // Nothing ran on version 1 yet.
  EXPECT_EQ(state.reports_total(), 4u);

  ASSERT_TRUE(Send({Report(0, 384, 1, {26}), Report(1, 384, 1, {26})}).ok());
  EXPECT_NEAR(State().measured_ratio(), 1.0, 1e-9);
}

TEST_F(EplbServiceTest, RefusesBadReportsAndKeepsTheWindow) {
  Start(nullptr);
  ASSERT_TRUE(Send({Report(0, 1, 0, {})}).ok());
  v1::LoadReport other_shape = Report(1, 1, 0, {});
  other_shape.set_num_logical(2);
  other_shape.clear_counts();
  for (uint64_t count : {1, 2}) other_shape.add_counts(count);
  uint64_t accepted = 0;
  EXPECT_EQ(Send({Report(1, 1, 0, {}), other_shape}, &accepted).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Send({Report(kWorld, 1, 0, {})}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Send({Report(0, 2, 0, {1, 2})}).error_code(),  // Served rows for 2 layers.
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::EplbState state = State();
  EXPECT_EQ(state.window_reports(), 2u);
  // Without a rebalancer: the initial map and nothing rearranged.
  EXPECT_EQ(state.committed_version(), 0u);
  EXPECT_EQ(state.current_map().slots_per_rank(), 2u);
  EXPECT_NEAR(state.balance_ratio(), 50.0 / 26.0, 1e-9);
  EXPECT_EQ(state.history_size(), 0);
}

TEST_F(EplbServiceTest, WindowGrowsToHoldTheRoundsTheRebalancerNeeds) {
  Rebalancer rebalancer(RebalancerOptions{.rearrange_interval = 1, .min_window_rounds = 2},
                        &link_);
  Start(&rebalancer, /*window_size=*/1);
  EXPECT_EQ(State().window_size(), static_cast<uint32_t>(kWorld * 3));
}

}  // namespace
}  // namespace weir::eplb
