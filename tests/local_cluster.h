// tests/local_cluster.h
//
// A local weir cluster for end-to-end tests: the coordinator binary as a
// child process (it launches its workers and, with --eplb=true, EPLB), its
// address read from --address_file, ready once health says SERVING.
//
//   Cluster cluster({"--workers=2"});
//   std::vector<uint32_t> tokens;
//   ASSERT_TRUE(cluster.Greedy({10, 20, 30}, 12, tokens).ok());
//
// The destructor sends SIGTERM and expects a clean exit (status 0).
//
// Thread safety: Greedy may be called from several threads at once (each
// call is one Generate stream); construction and destruction are not.

#ifndef WEIR_TESTS_LOCAL_CLUSTER_H_
#define WEIR_TESTS_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "proto/inference.grpc.pb.h"

namespace weir::testing_util {

// A file of the test's runfiles (under the weir workspace).
std::string Runfile(const std::string& path);
// A model cache directory under the test's TEST_TMPDIR.
std::string CacheDir();

// The tiny model with a skewed router (gen_model's gate_bias_skew 0.4, seed 3:
// EPLB has real imbalance to fix), generated once per test process into
// $TEST_TMPDIR/<name>; with `with_tokenizer`, the tiny tokenizer is copied
// beside it (for tests that need text). Fails the current test and returns
// the directory anyway if generation fails.
std::string SkewedTinyModel(const std::string& name, bool with_tokenizer);

// The recovery tests' request mix, request i: a prompt of 3 + i % 11 tokens,
// `max_new` tokens (ignore_eos); greedy, every 4th seeded sampling (the draw
// depends on the position, not the batch); with `constrained`, every 8th
// (from 5) under a regex (the grammar replays the delivered tokens on
// recompute).
v1::GenerateRequest MixedRequest(int i, uint32_t max_new, bool constrained = false);

// One Generate stream's end: its status and the final's full token ids.
struct StreamOutcome {
  grpc::Status status;
  std::vector<uint32_t> tokens;
};
// Runs `request` to its end on `stub` (deadline `deadline_s` seconds).
StreamOutcome RunStream(v1::Inference::Stub& stub, const v1::GenerateRequest& request,
                        int deadline_s);

class Cluster {
 public:
  // Starts `coordinator/main` with a fresh address file, the test cache dir,
  // --eplb=false (flags may override it) and `flags`; waits up to 90 s.
  explicit Cluster(std::vector<std::string> flags);
  ~Cluster();

  v1::Inference::Stub& stub() { return *stub_; }
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // A child process of the coordinator whose command line contains
  // `needle` (e.g. "eplb/main"); -1 if none.
  pid_t ChildPid(const std::string& needle) const;

  // GetServerState (10 s deadline).
  grpc::Status State(v1::ServerState& state);
  // Steps the step loop has run (ServerState.steps), or -1 if the call fails.
  int64_t Steps();

  // Runs one greedy request (ignore_eos); returns the status and fills `tokens`.
  grpc::Status Greedy(const std::vector<uint32_t>& prompt, uint32_t max_new,
                      std::vector<uint32_t>& tokens, v1::FinishReason* reason = nullptr);

 private:
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  std::string address_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

}  // namespace weir::testing_util

#endif  // WEIR_TESTS_LOCAL_CLUSTER_H_
