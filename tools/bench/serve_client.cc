#include "tools/bench/serve_client.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "base/logging.h"

namespace weir::bench {
namespace {

double MsSince(absl::Time from, absl::Time to) { return absl::ToDoubleMilliseconds(to - from); }

// First send -> last completion, in seconds.
double WallSeconds(const std::vector<RequestRecord>& records) {
  if (records.empty()) return 0;
  double first = records[0].start_ms, last = 0;
  for (const RequestRecord& r : records) {
    first = std::min(first, r.start_ms);
    last = std::max(last, r.start_ms + r.e2e_ms);
  }
  return (last - first) / 1000.0;
}

}  // namespace

RequestRecord RunRequest(weir::v1::Inference::Stub& stub, const RequestSpec& spec,
                         const std::string& request_id, const ClientOptions& options,
                         absl::Time level_start) {
  v1::GenerateRequest request;
  request.set_request_id(request_id);
  for (uint32_t id : spec.prompt) request.mutable_tokens()->add_ids(id);
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_stop()->set_max_new_tokens(spec.max_new_tokens);
  request.mutable_stop()->set_ignore_eos(true);
  request.mutable_output()->set_stream_tokens(true);
  request.mutable_output()->set_return_text(false);

  RequestRecord record;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options.request_timeout));
  const absl::Time start = absl::Now();
  record.start_ms = MsSince(level_start, start);
  auto reader = stub.Generate(&context, request);
  v1::GenerateEvent event;
  absl::Time last_token;
  uint32_t streamed = 0;
  int finals = 0;
  uint32_t final_completion = 0;
  while (reader->Read(&event)) {
    const absl::Time now = absl::Now();
    if (event.has_accepted()) {
      record.prompt_tokens = event.accepted().prompt_tokens();
    } else if (event.has_delta() && event.delta().token_ids_size() > 0) {
      const int k = event.delta().token_ids_size();
      if (streamed == 0) {
        record.ttft_ms = MsSince(start, now);
        // Tokens that arrive together with the first share its arrival.
        record.itl_ms.insert(record.itl_ms.end(), k - 1, 0.0);
      } else {
        record.itl_ms.insert(record.itl_ms.end(), k, MsSince(last_token, now) / k);
      }
      last_token = now;
      streamed += k;
    } else if (event.has_final()) {
      ++finals;
      final_completion = event.final().usage().completion_tokens();
    }
  }
  const grpc::Status status = reader->Finish();
  record.e2e_ms = MsSince(start, absl::Now());
  record.output_tokens = streamed;
  if (!status.ok()) {
    record.error = FromGrpcStatus(status).ToString();
  } else if (finals != 1) {
    record.error = absl::StrCat("stream ended with ", finals, " Final events (want 1)");
  } else if (final_completion != streamed) {
    record.error = absl::StrCat("Final reports ", final_completion, " tokens, ", streamed,
                                " were streamed");
  } else if (streamed == 0) {
    record.error = "no tokens streamed";
  } else {
    record.ok = true;
  }
  return record;
}

LevelRun RunClosedLoop(weir::v1::Inference::Stub& stub, const std::vector<RequestSpec>& specs,
                       int concurrency, const ClientOptions& options) {
  WEIR_CHECK_GE(concurrency, 1);
  LevelRun run;
  run.records.resize(specs.size());
  std::atomic<size_t> next{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (size_t i = next++; i < specs.size(); i = next++) {
        run.records[i] = RunRequest(stub, specs[i], absl::StrCat(options.id_prefix, "-", i),
                                    options, start);
      }
    });
  }
  for (std::thread& t : clients) t.join();
  run.wall_s = WallSeconds(run.records);
  return run;
}

LevelRun RunOpenLoop(weir::v1::Inference::Stub& stub, const std::vector<RequestSpec>& specs,
                     const std::vector<double>& arrivals_s, const ClientOptions& options) {
  WEIR_CHECK_EQ(arrivals_s.size(), specs.size());
  LevelRun run;
  run.records.resize(specs.size());
  const absl::Time start = absl::Now();
  std::vector<std::thread> clients;
  for (size_t i = 0; i < specs.size(); ++i) {
    const absl::Time at = start + absl::Seconds(arrivals_s[i]);
    const absl::Time now = absl::Now();
    if (at > now) absl::SleepFor(at - now);
    clients.emplace_back([&, i] {
      run.records[i] =
          RunRequest(stub, specs[i], absl::StrCat(options.id_prefix, "-", i), options, start);
    });
  }
  for (std::thread& t : clients) t.join();
  run.wall_s = WallSeconds(run.records);
  return run;
}

}  // namespace weir::bench
