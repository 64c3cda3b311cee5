// weir: the command-line client of a weir server.
//
//   weir health [--server=HOST:PORT] [--service=weir.v1.Inference]
//   weir info   [--server=HOST:PORT]
//
// Exit code 0 on success (for `health`: the service is SERVING), 1 otherwise.

#include <algorithm>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "base/init.h"
#include "base/read_file.h"
#include "coordinator/batch_client.h"
#include "proto/eplb.grpc.pb.h"
#include "proto/inference.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "Coordinator address.");
ABSL_FLAG(std::string, service, "weir.v1.Inference",
          "health: service to check (\"\" = process liveness).");
ABSL_FLAG(int, timeout_ms, 5000, "Deadline of each call (generate: 10x).");
ABSL_FLAG(std::string, ids, "", "generate: comma-separated prompt token ids instead of text.");
ABSL_FLAG(int, max_new_tokens, 32, "generate: tokens to generate at most.");
ABSL_FLAG(double, temperature, 0.0, "generate: 0 = greedy.");
ABSL_FLAG(std::string, output, "", "batch: where result lines go (default stdout).");
ABSL_FLAG(bool, chat, false, "generate: send TEXT as one user turn through the chat template.");
ABSL_FLAG(int, interval_ms, 1000, "eplb-watch: time between samples.");
ABSL_FLAG(int, duration_s, 60, "eplb-watch: how long to sample (0 = until interrupted).");

namespace weir {
namespace {

constexpr char kUsage[] =
    "weir client.\n"
    "  weir health [--server=HOST:PORT] [--service=NAME]   readiness of a service\n"
    "  weir info   [--server=HOST:PORT]                    model and cluster state\n"
    "  weir tokenize TEXT [--server=HOST:PORT]             token ids and pieces of TEXT\n"
    "  weir generate TEXT | --ids=1,2,3 [--max_new_tokens=N] [--temperature=T] [--chat]\n"
    "                                                      stream a generation\n"
    "  weir batch FILE.jsonl [--output=results.jsonl]      run a JSON Lines batch\n"
    "  weir eplb-watch [--interval_ms=1000] [--duration_s=60]\n"
    "                                                      EPLB balance over time, as CSV";

int Health(grpc::Channel& channel) {
  const std::string service = absl::GetFlag(FLAGS_service);
  absl::StatusOr<std::string> status = CheckHealth(
      channel, service, std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms)));
  if (!status.ok()) {
    std::cerr << "health: " << status.status() << "\n";
    return 1;
  }
  std::cout << (service.empty() ? "(liveness)" : service) << ": " << *status << "\n";
  return *status == "SERVING" ? 0 : 1;
}

int Info(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::Inference::NewStub(channel);
  const auto deadline = std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  v1::ModelInfo info;
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(deadline));
    grpc::Status status = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    if (!status.ok()) {
      std::cerr << "info: GetModelInfo: " << FromGrpcStatus(status) << "\n";
      return 1;
    }
  }
  v1::ServerState state;
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(deadline));
    grpc::Status status = stub->GetServerState(&context, v1::GetServerStateRequest(), &state);
    if (!status.ok()) {
      std::cerr << "info: GetServerState: " << FromGrpcStatus(status) << "\n";
      return 1;
    }
  }
  std::cout << absl::StrFormat(
      "model      %s (revision %s, %s)\n"
      "vocab      %d tokens, context %d, %d routed experts\n"
      "server     %s, %s, up %.1f s\n"
      "parallel   DP %d x EP %d; expert map version %d\n"
      "eplb       %s\n",
      info.name(), info.revision(), info.quantization(), info.vocab_size(),
      info.max_context_tokens(), info.parallelism().num_experts(), state.version(),
      v1::Lifecycle_Name(state.lifecycle()), state.uptime_s(), info.parallelism().dp(),
      info.parallelism().ep(), state.expert_map_version(),
      state.eplb_address().empty() ? "(none)" : state.eplb_address());
  if (!state.failure().empty()) {
    std::cout << "FAILED     the step loop stopped: " << state.failure() << "\n";
  }
  if (state.has_speculation()) {
    const v1::ServerState::Speculation& spec = state.speculation();
    uint64_t rows = 0, accepted = 0;
    std::string hist;
    for (int a = 0; a < spec.accepted_histogram_size(); ++a) {
      rows += spec.accepted_histogram(a);
      accepted += a * spec.accepted_histogram(a);
      absl::StrAppend(&hist, a == 0 ? "" : " ", spec.accepted_histogram(a));
    }
    const double per = rows > 0 ? 1.0 / static_cast<double>(rows) : 0.0;
    std::cout << absl::StrFormat(
        "speculate  %s, %d drafts, verify length %s; %d verifications, mean verify length "
        "%.2f, mean accepted length %.2f; accepted 0..%d: %s; %d steps with drafting paused "
        "(drafts that did not pay); %d verifications of prompt lookup drafts, %d of them "
        "accepted\n",
        spec.method() == "ngram" ? "prompt lookup alone" : "DSpark", spec.num_draft_tokens(),
        spec.verify_length().empty() ? "fixed" : spec.verify_length(), rows,
        spec.mean_verify_length(), 1.0 + accepted * per, spec.num_draft_tokens(), hist,
        spec.paused_steps(), spec.lookup_verifications(), spec.lookup_accepted_drafts());
  }
  if (state.recoveries().count() > 0) {
    std::cout << absl::StrFormat(
        "recovered  %d times; last: serving again %.2f s after its detection (the group "
        "replaced in %.2f s), after: %s\n",
        state.recoveries().count(), state.recoveries().last_detect_to_serving_s(),
        state.recoveries().last_seconds(), state.recoveries().last_cause());
  }
  if (state.recoveries().group_epoch() > 0) {
    std::cout << "group      epoch " << state.recoveries().group_epoch()
              << " (one per bring-up of the workers)\n";
  }
  if (!state.eplb_address().empty()) {
    auto eplb = v1::Eplb::NewStub(MakeChannel(state.eplb_address()));
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(deadline));
    v1::EplbState eplb_state;
    if (eplb->GetState(&context, v1::GetEplbStateRequest(), &eplb_state).ok()) {
      if (eplb_state.reports_total() == 0) {
        std::cout << "expert load no reports yet (they come every --eplb_stat_interval steps)\n";
      } else {
        std::cout << absl::StrFormat(
            "expert load %d reports (%d in the window of %d), rank balance max/mean %.3f "
            "predicted, %s measured under map %d\n",
            eplb_state.reports_total(), eplb_state.window_reports(), eplb_state.window_size(),
            eplb_state.balance_ratio(),
            eplb_state.measured_ratio() > 0 ? absl::StrFormat("%.3f", eplb_state.measured_ratio())
                                            : std::string("not yet"),
            eplb_state.committed_version());
      }
      std::cout << absl::StrFormat("rebalances %d proposed, %d skipped (gain below threshold)\n",
                                   eplb_state.proposals(), eplb_state.skipped_low_gain());
      for (const v1::EplbState::Rebalance& r : eplb_state.history()) {
        std::cout << absl::StrFormat(
            "  map %-4d %-9s predicted %.3f -> %.3f, measured before %s, %d bytes moved, "
            "prepare %.1f ms, commit %.1f ms%s\n",
            r.version(), r.committed() ? "committed" : "refused", r.ratio_before(),
            r.ratio_after(),
            // 0: no report had come in under the map being replaced.
            r.measured_before() > 0 ? absl::StrFormat("%.3f", r.measured_before())
                                    : std::string("not yet"),
            r.bytes_moved(), r.prepare_ms(), r.commit_ms(),
            r.detail().empty() ? "" : " (" + r.detail() + ")");
      }
    }
  }
  std::cout << "workers\n";
  for (const v1::ServerState::Worker& w : state.workers()) {
    std::cout << absl::StrFormat("  rank %-3d %-22s pid %-8d %s%s\n", w.rank(), w.address(),
                                 w.pid(), v1::WorkerState_Name(w.state()),
                                 w.detail().empty() ? "" : " (" + w.detail() + ")");
  }
  // Ranks whose lost worker a recovery waits to see replaced.
  const double now_s = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  for (const v1::ServerState::WaitingRank& w : state.waiting_ranks()) {
    const double since_s = static_cast<double>(w.since().seconds()) + w.since().nanos() * 1e-9;
    const double deadline_s =
        static_cast<double>(w.deadline().seconds()) + w.deadline().nanos() * 1e-9;
    std::cout << absl::StrFormat(
        "  rank %-3d WAITING for a worker to rejoin: lost %.1f s ago (was %s), the recovery "
        "gives up in %.1f s (at %s)\n",
        w.rank(), now_s - since_s, w.previous_address().empty() ? "?" : w.previous_address(),
        deadline_s - now_s,
        absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::FromUnixSeconds(w.deadline().seconds()),
                         absl::LocalTimeZone()));
  }
  if (state.per_group_size() > 0 && state.per_group(0).kv_blocks_total() > 0) {
    std::cout << "kv cache (blocks of " << state.per_group(0).kv_block_tokens()
              << " positions)\n";
    for (const v1::ServerState::Group& g : state.per_group()) {
      std::cout << absl::StrFormat(
          "  rank %-3d blocks %d used / %d free of %d, slots %d free of %d, %d running, %d "
          "waiting\n",
          g.id(), g.kv_blocks_used(), g.kv_blocks_free(), g.kv_blocks_total(), g.seq_slots_free(),
          g.seq_slots_total(), g.running(), g.waiting());
    }
  }
  return 0;
}

int Tokenize(const std::shared_ptr<grpc::Channel>& channel, const std::string& text) {
  auto stub = v1::Inference::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms))));
  v1::TokenizeRequest request;
  request.set_text(text);
  request.set_return_pieces(true);
  v1::TokenizeResponse response;
  grpc::Status status = stub->Tokenize(&context, request, &response);
  if (!status.ok()) {
    std::cerr << "tokenize: " << FromGrpcStatus(status) << "\n";
    return 1;
  }
  std::cout << response.count() << " tokens\n";
  for (int i = 0; i < response.ids_size(); ++i) {
    std::cout << absl::StrFormat("  %6d  %s\n", response.ids(i),
                                 i < response.pieces_size() ? response.pieces(i) : "");
  }
  return 0;
}

int Generate(const std::shared_ptr<grpc::Channel>& channel, const std::string& text) {
  auto stub = v1::Inference::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(
      DeadlineIn(std::chrono::milliseconds(10 * absl::GetFlag(FLAGS_timeout_ms))));
  v1::GenerateRequest request;
  if (!absl::GetFlag(FLAGS_ids).empty()) {
    for (absl::string_view piece : absl::StrSplit(absl::GetFlag(FLAGS_ids), ',')) {
      uint32_t id = 0;
      if (!absl::SimpleAtoi(piece, &id)) {
        std::cerr << "generate: bad id \"" << piece << "\"\n";
        return 2;
      }
      request.mutable_tokens()->add_ids(id);
    }
  } else if (absl::GetFlag(FLAGS_chat)) {
    v1::ChatMessage* message = request.mutable_chat()->add_messages();
    message->set_role("user");
    message->set_content(text);
  } else {
    request.set_text(text);
  }
  request.mutable_stop()->set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  request.mutable_sampling()->set_temperature(absl::GetFlag(FLAGS_temperature));
  request.mutable_output()->set_stream_tokens(true);
  auto reader = stub->Generate(&context, request);
  v1::GenerateEvent event;
  std::vector<uint32_t> ids;
  while (reader->Read(&event)) {
    if (event.has_delta()) {
      std::cout << event.delta().text() << std::flush;
      ids.insert(ids.end(), event.delta().token_ids().begin(), event.delta().token_ids().end());
    } else if (event.has_final()) {
      std::cout << "\n[" << v1::FinishReason_Name(event.final().reason()) << ", "
                << event.final().usage().prompt_tokens() << " prompt + "
                << event.final().usage().completion_tokens() << " generated tokens, "
                << absl::StrFormat("%.0f ms, ids %s]", event.final().timings().total_ms(),
                                   absl::StrJoin(ids, ","))
                << "\n";
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    std::cerr << "generate: " << FromGrpcStatus(status) << "\n";
    return 1;
  }
  return 0;
}

int Batch(const std::shared_ptr<grpc::Channel>& channel, const std::string& path) {
  const absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    std::cerr << "batch: " << text.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<coordinator::BatchCounts> counts =
      coordinator::RunJsonlBatchToOutput(channel, *text, absl::GetFlag(FLAGS_output));
  if (!counts.ok()) {
    std::cerr << "batch: " << counts.status() << "\n";
    // An unwritable --output is a usage error, found before any request.
    return counts.status().code() == absl::StatusCode::kFailedPrecondition ? 2 : 1;
  }
  std::cerr << counts->completed << " completed, " << counts->failed << " failed\n";
  return counts->failed == 0 ? 0 : 1;
}

// CSV of the EPLB service's state every --interval_ms (tools/bench/plot.py
// draws it): time_s, committed_version, balance_ratio (predicted over the
// window), measured_ratio (0 = not measured yet), reports_total.
int EplbWatch(const std::shared_ptr<grpc::Channel>& channel) {
  const auto deadline = std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  v1::ServerState state;
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(deadline));
    grpc::Status status = v1::Inference::NewStub(channel)->GetServerState(
        &context, v1::GetServerStateRequest(), &state);
    if (!status.ok()) {
      std::cerr << "eplb-watch: GetServerState: " << FromGrpcStatus(status) << "\n";
      return 1;
    }
  }
  if (state.eplb_address().empty()) {
    std::cerr << "eplb-watch: the server runs no EPLB service\n";
    return 1;
  }
  auto eplb = v1::Eplb::NewStub(MakeChannel(state.eplb_address()));
  const absl::Duration interval = absl::Milliseconds(std::max(1, absl::GetFlag(FLAGS_interval_ms)));
  const int duration_s = absl::GetFlag(FLAGS_duration_s);
  const absl::Time start = absl::Now();
  std::cout << "time_s,committed_version,balance_ratio,measured_ratio,reports_total\n";
  for (absl::Time next = start; duration_s <= 0 || next - start <= absl::Seconds(duration_s);
       next += interval) {
    absl::SleepFor(next - absl::Now());
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(deadline));
    v1::EplbState eplb_state;
    grpc::Status status = eplb->GetState(&context, v1::GetEplbStateRequest(), &eplb_state);
    if (!status.ok()) {
      std::cerr << "eplb-watch: GetState: " << FromGrpcStatus(status) << "\n";
      return 1;
    }
    std::cout << absl::StrFormat("%.3f,%d,%.4f,%.4f,%d\n",
                                 absl::ToDoubleSeconds(absl::Now() - start),
                                 eplb_state.committed_version(), eplb_state.balance_ratio(),
                                 eplb_state.measured_ratio(), eplb_state.reports_total())
              << std::flush;
  }
  return 0;
}

int Run(int argc, char** argv) {
  std::vector<std::string> args = InitProcess(argc, argv, kUsage, "weir");
  if (args.size() < 2) {
    std::cerr << kUsage << "\n";
    return 2;
  }
  auto channel = MakeChannel(absl::GetFlag(FLAGS_server));
  if (args[1] == "tokenize" && args.size() == 3) return Tokenize(channel, args[2]);
  if (args[1] == "generate") return Generate(channel, args.size() >= 3 ? args[2] : "");
  if (args[1] == "batch" && args.size() == 3) return Batch(channel, args[2]);
  if (args[1] == "health") return Health(*channel);
  if (args[1] == "eplb-watch") return EplbWatch(channel);
  if (args[1] == "info") return Info(channel);
  std::cerr << "unknown command \"" << args[1] << "\"\n" << kUsage << "\n";
  return 2;
}

}  // namespace
}  // namespace weir

int main(int argc, char** argv) { return weir::Run(argc, argv); }
