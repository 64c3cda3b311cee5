#include "tests/local_cluster.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "worker/model/checkpoint_writer.h"
#include "worker/model/config.h"

namespace weir::testing_util {

std::string Runfile(const std::string& path) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/weir/" + path;
}

std::string CacheDir() { return std::string(std::getenv("TEST_TMPDIR")) + "/models"; }

Cluster::Cluster(std::vector<std::string> flags) {
  const std::string address_file =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/addr", counter_++);
  std::vector<std::string> argv = {Runfile("coordinator/main"), "--listen=127.0.0.1:0",
                                   "--model_cache_dir=" + CacheDir(),
                                   "--address_file=" + address_file, "--eplb=false"};
  // The random-weight tiny unless the test names a model: the embedded default
  // (models/tiny) is trained, and its outputs move with training.
  if (std::none_of(flags.begin(), flags.end(),
                   [](const std::string& f) { return f.rfind("--model_dir=", 0) == 0; })) {
    argv.push_back("--model_dir=" + Runfile("models/random/tiny"));
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  // vfork, not fork: no pthread_atfork handlers run in this (gRPC-using) test
  // process, so gRPC cannot restart pollers in the child before exec (the
  // coordinator's Launcher and tests/weir_cluster.py avoid fork for the same
  // reason). The child only execs or exits.
  pid_ = vfork();
  if (pid_ == 0) {
    execv(args[0], args.data());
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  while (absl::Now() < deadline) {
    std::ifstream(address_file) >> address_;
    if (!address_.empty()) {
      auto channel = MakeChannel(address_);
      absl::StatusOr<std::string> health =
          CheckHealth(*channel, "weir.v1.Inference", std::chrono::seconds(1));
      if (health.ok() && *health == "SERVING") break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  stub_ = v1::Inference::NewStub(MakeChannel(address_));
}

Cluster::~Cluster() {
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

pid_t Cluster::ChildPid(const std::string& needle) const {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid ...: the comm may hold spaces, so parse after ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = -1;
    rest >> state >> ppid;
    if (ppid != pid_) continue;
    std::ifstream cmdline_file(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(cmdline_file)),
                        std::istreambuf_iterator<char>());
    if (cmdline.find(needle) != std::string::npos) return std::stoi(name);
  }
  return -1;
}

grpc::Status Cluster::State(v1::ServerState& state) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  return stub_->GetServerState(&context, v1::GetServerStateRequest(), &state);
}

int64_t Cluster::Steps() {
  v1::ServerState state;
  return State(state).ok() ? static_cast<int64_t>(state.steps()) : -1;
}

v1::GenerateRequest MixedRequest(int i, uint32_t max_new, bool constrained) {
  v1::GenerateRequest request;
  for (int t = 0; t < 3 + i % 11; ++t) request.mutable_tokens()->add_ids(5 + 13 * i + t);
  request.mutable_stop()->set_max_new_tokens(max_new);
  request.mutable_stop()->set_ignore_eos(true);
  if (i % 4 == 3) {
    request.mutable_sampling()->set_temperature(0.9f);
    request.mutable_sampling()->set_seed(1000 + i);
  } else {
    request.mutable_sampling()->set_temperature(0.0f);
  }
  if (constrained && i % 8 == 5) request.mutable_constraint()->set_regex("[a-z ]{20,400}");
  return request;
}

StreamOutcome RunStream(v1::Inference::Stub& stub, const v1::GenerateRequest& request,
                        int deadline_s) {
  StreamOutcome out;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(deadline_s)));
  auto reader = stub.Generate(&context, request);
  v1::GenerateEvent event;
  while (reader->Read(&event)) {
    if (event.has_final()) {
      out.tokens.assign(event.final().full_token_ids().begin(),
                        event.final().full_token_ids().end());
    }
  }
  out.status = reader->Finish();
  return out;
}

grpc::Status Cluster::Greedy(const std::vector<uint32_t>& prompt, uint32_t max_new,
                             std::vector<uint32_t>& tokens, v1::FinishReason* reason) {
  v1::GenerateRequest request;
  for (uint32_t t : prompt) request.mutable_tokens()->add_ids(t);
  request.mutable_stop()->set_max_new_tokens(max_new);
  request.mutable_stop()->set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0.0f);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(120)));
  auto reader = stub_->Generate(&context, request);
  v1::GenerateEvent event;
  while (reader->Read(&event)) {
    if (event.has_final()) {
      tokens.assign(event.final().full_token_ids().begin(),
                    event.final().full_token_ids().end());
      if (reason != nullptr) *reason = event.final().reason();
    }
  }
  return reader->Finish();
}

std::string SkewedTinyModel(const std::string& name, bool with_tokenizer) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  if (std::filesystem::exists(dir + "/model.safetensors.index.json")) return dir;
  std::filesystem::create_directories(dir);
  if (with_tokenizer) {
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(Runfile(std::string("models/random/tiny/") + file), dir + "/" + file,
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  std::ifstream in(Runfile("models/random/tiny/config.json"));
  std::stringstream json;
  json << in.rdbuf();
  absl::StatusOr<model::ModelConfig> config = model::ParseModelConfig(json.str());
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return dir;
  absl::Status written = model::GenerateCheckpoint(*config, json.str(), dir,
                                                   {.seed = 3, .gate_bias_skew = 0.4f});
  EXPECT_TRUE(written.ok()) << written;
  return dir;
}

}  // namespace weir::testing_util
