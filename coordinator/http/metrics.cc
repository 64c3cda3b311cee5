#include "coordinator/http/metrics.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace weir::coordinator::http {
namespace {

// Bounds in seconds, as vLLM uses them (plus finer steps at the low end).
std::vector<double> TtftBounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
}
std::vector<double> InterTokenBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,
          0.4,   0.5,    0.75,  1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0, 80.0};
}
std::vector<double> EndToEndBounds() {
  return {0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,    5.0,
          10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 120.0, 240.0, 480.0, 1920.0, 7680.0};
}

std::string Number(double value) { return absl::StrCat(value); }

void Header(absl::string_view name, absl::string_view type, absl::string_view help,
            std::string& out) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

const char* LifecycleName(v1::Lifecycle lifecycle) {
  switch (lifecycle) {
    case v1::LIFECYCLE_STARTING:
      return "starting";
    case v1::LIFECYCLE_READY:
      return "ready";
    case v1::LIFECYCLE_DEGRADED:
      return "degraded";
    case v1::LIFECYCLE_DRAINING:
      return "draining";
    case v1::LIFECYCLE_STOPPING:
      return "stopping";
    default:
      return "unspecified";
  }
}

// Speculative decoding over every rank since start (ServerState.speculation),
// with the method as a label: verifications by accepted drafts, the drafts
// verified and accepted, prompt lookup's share, the steps with drafting
// paused (vLLM's spec_decode counters, from the workers' row results).
void RenderSpeculation(const v1::ServerState::Speculation& spec, std::string& out) {
  const std::string method = absl::StrCat(
      "method=\"", EscapeLabel(spec.method().empty() ? "dspark" : spec.method()), "\"");
  uint64_t accepted = 0;
  for (int a = 0; a < spec.accepted_histogram_size(); ++a) {
    accepted += static_cast<uint64_t>(a) * spec.accepted_histogram(a);
  }
  Header("weir_spec_decode_verifications_total", "counter",
         "Decode steps of speculating sequences that verified drafts, by drafts accepted.", out);
  for (int a = 0; a < spec.accepted_histogram_size(); ++a) {
    absl::StrAppend(&out, "weir_spec_decode_verifications_total{", method, ",accepted=\"", a,
                    "\"} ", spec.accepted_histogram(a), "\n");
  }
  Header("weir_spec_decode_draft_tokens_total", "counter", "Draft tokens the workers verified.",
         out);
  absl::StrAppend(&out, "weir_spec_decode_draft_tokens_total{", method, "} ",
                  spec.verified_drafts(), "\n");
  Header("weir_spec_decode_accepted_tokens_total", "counter",
         "Draft tokens verification accepted (before stop conditions).", out);
  absl::StrAppend(&out, "weir_spec_decode_accepted_tokens_total{", method, "} ", accepted, "\n");
  Header("weir_spec_decode_lookup_verifications_total", "counter",
         "Of the verifications, those of prompt lookup drafts.", out);
  absl::StrAppend(&out, "weir_spec_decode_lookup_verifications_total{", method, "} ",
                  spec.lookup_verifications(), "\n");
  Header("weir_spec_decode_lookup_accepted_tokens_total", "counter",
         "Prompt lookup drafts verification accepted.", out);
  absl::StrAppend(&out, "weir_spec_decode_lookup_accepted_tokens_total{", method, "} ",
                  spec.lookup_accepted_drafts(), "\n");
  Header("weir_spec_decode_paused_steps_total", "counter",
         "Decode steps of speculating sequences whose drafting was paused.", out);
  absl::StrAppend(&out, "weir_spec_decode_paused_steps_total{", method, "} ", spec.paused_steps(),
                  "\n");
}

void RenderState(const v1::ServerState& state, std::string& out) {
  Header("weir_lifecycle", "gauge", "1 for the cluster's lifecycle state, 0 for the others.", out);
  for (v1::Lifecycle l : {v1::LIFECYCLE_STARTING, v1::LIFECYCLE_READY, v1::LIFECYCLE_DEGRADED,
                          v1::LIFECYCLE_DRAINING, v1::LIFECYCLE_STOPPING}) {
    absl::StrAppend(&out, "weir_lifecycle{state=\"", LifecycleName(l), "\"} ",
                    state.lifecycle() == l ? 1 : 0, "\n");
  }
  Header("weir_uptime_seconds", "gauge", "Seconds since the coordinator started.", out);
  absl::StrAppend(&out, "weir_uptime_seconds ", Number(state.uptime_s()), "\n");

  std::map<std::string, int> workers;
  for (int s = v1::WORKER_STATE_REGISTERED; s <= v1::WORKER_STATE_STOPPED; ++s) {
    workers[absl::AsciiStrToLower(
        v1::WorkerState_Name(static_cast<v1::WorkerState>(s)).substr(13))] = 0;
  }
  for (const v1::ServerState::Worker& w : state.workers()) {
    if (w.state() == v1::WORKER_STATE_UNSPECIFIED) continue;
    ++workers[absl::AsciiStrToLower(v1::WorkerState_Name(w.state()).substr(13))];
  }
  Header("weir_workers", "gauge", "Worker processes by state.", out);
  for (const auto& [name, count] : workers) {
    absl::StrAppend(&out, "weir_workers{state=\"", name, "\"} ", count, "\n");
  }

  Header("weir_num_requests_running", "gauge",
         "Sequences admitted on the rank (prefilling or decoding).", out);
  for (const v1::ServerState::Group& g : state.per_group()) {
    absl::StrAppend(&out, "weir_num_requests_running{rank=\"", g.id(), "\"} ", g.running(), "\n");
  }
  Header("weir_num_requests_waiting", "gauge",
         "Requests queued on the rank, not admitted yet (queue depth).", out);
  for (const v1::ServerState::Group& g : state.per_group()) {
    absl::StrAppend(&out, "weir_num_requests_waiting{rank=\"", g.id(), "\"} ", g.waiting(), "\n");
  }
  Header("weir_kv_cache_usage_ratio", "gauge", "Fraction of the rank's KV blocks in use.", out);
  for (const v1::ServerState::Group& g : state.per_group()) {
    absl::StrAppend(&out, "weir_kv_cache_usage_ratio{rank=\"", g.id(), "\"} ", Number(g.kv_usage()),
                    "\n");
  }
  Header("weir_kv_blocks", "gauge",
         "The rank's paged KV blocks: used (held by sequences, including those whose release "
         "waits for an in-flight step) and free.",
         out);
  for (const v1::ServerState::Group& g : state.per_group()) {
    absl::StrAppend(&out, "weir_kv_blocks{rank=\"", g.id(), "\",state=\"used\"} ",
                    g.kv_blocks_used(), "\n", "weir_kv_blocks{rank=\"", g.id(),
                    "\",state=\"free\"} ", g.kv_blocks_free(), "\n");
  }
  Header("weir_seq_slots", "gauge", "The rank's sequence slots: used and free.", out);
  for (const v1::ServerState::Group& g : state.per_group()) {
    const uint32_t free_slots = std::min(g.seq_slots_free(), g.seq_slots_total());
    absl::StrAppend(&out, "weir_seq_slots{rank=\"", g.id(), "\",state=\"used\"} ",
                    g.seq_slots_total() - free_slots, "\n", "weir_seq_slots{rank=\"", g.id(),
                    "\",state=\"free\"} ", free_slots, "\n");
  }
  Header("weir_preemptions_total", "counter",
         "Sequences preempted (KV dropped, recomputed later) since start.", out);
  absl::StrAppend(&out, "weir_preemptions_total ", state.preemptions(), "\n");
  Header("weir_forked_samples_total", "counter",
         "Samples (n > 1) that forked another sample's prefill instead of their own.", out);
  absl::StrAppend(&out, "weir_forked_samples_total ", state.forked_samples(), "\n");
  Header("weir_steps_total", "counter", "Steps the step loop has run since start.", out);
  absl::StrAppend(&out, "weir_steps_total ", state.steps(), "\n");
  Header("weir_recoveries_total", "counter",
         "Worker-group recoveries (a lost worker replaced, its requests resumed) since start.",
         out);
  absl::StrAppend(&out, "weir_recoveries_total ", state.recoveries().count(), "\n");
  Header("weir_expert_map_version", "gauge", "Version of the committed expert map.", out);
  absl::StrAppend(&out, "weir_expert_map_version ", state.expert_map_version(), "\n");
  if (state.has_speculation()) RenderSpeculation(state.speculation(), out);
}

}  // namespace

std::string EscapeLabel(absl::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value, uint64_t count) {
  if (count == 0) return;
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[i] += count;
  sum_ += value * static_cast<double>(count);
  count_ += count;
}

void Histogram::Render(absl::string_view name, std::string& out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i];
    absl::StrAppend(&out, name, "_bucket{le=\"", Number(bounds_[i]), "\"} ", cumulative, "\n");
  }
  cumulative += buckets_.back();
  absl::StrAppend(&out, name, "_bucket{le=\"+Inf\"} ", cumulative, "\n", name, "_sum ",
                  Number(sum_), "\n", name, "_count ", count_, "\n");
}

Metrics::Metrics()
    : ttft_(TtftBounds()), inter_token_(InterTokenBounds()), end_to_end_(EndToEndBounds()) {}

void Metrics::CountCall(absl::string_view method, absl::string_view code) {
  absl::MutexLock lock(&mu_);
  ++calls_[{std::string(method), std::string(code)}];
}

void Metrics::CountFinish(absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  ++finishes_[std::string(reason)];
}

void Metrics::CountItemError(absl::string_view code) {
  absl::MutexLock lock(&mu_);
  ++item_errors_[std::string(code)];
}

void Metrics::AddTokens(uint64_t prompt_tokens, uint64_t generation_tokens,
                        uint64_t accepted_draft_tokens, uint64_t rejected_draft_tokens) {
  absl::MutexLock lock(&mu_);
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generation_tokens;
  accepted_draft_tokens_ += accepted_draft_tokens;
  rejected_draft_tokens_ += rejected_draft_tokens;
}

void Metrics::ObserveTimeToFirstToken(double seconds) {
  absl::MutexLock lock(&mu_);
  ttft_.Observe(seconds);
}

void Metrics::ObserveInterToken(double seconds, uint64_t count) {
  absl::MutexLock lock(&mu_);
  inter_token_.Observe(seconds, count);
}

void Metrics::ObserveEndToEnd(double seconds) {
  absl::MutexLock lock(&mu_);
  end_to_end_.Observe(seconds);
}

void Metrics::CountHttp(absl::string_view route, int status) {
  absl::MutexLock lock(&mu_);
  ++http_[{std::string(route), status}];
}

std::string Metrics::Render(const v1::ServerState* state) const {
  std::string out;
  {
    absl::MutexLock lock(&mu_);
    Header("weir_requests_total", "counter",
           "Generate and GenerateBatch calls (gRPC and HTTP) by final status code.", out);
    for (const auto& [key, n] : calls_) {
      absl::StrAppend(&out, "weir_requests_total{method=\"", EscapeLabel(key.first), "\",code=\"",
                      EscapeLabel(key.second), "\"} ", n, "\n");
    }
    Header("weir_request_success_total", "counter",
           "Samples (and batch item samples) finished, by finish reason.", out);
    for (const auto& [reason, n] : finishes_) {
      absl::StrAppend(&out, "weir_request_success_total{finish_reason=\"", EscapeLabel(reason),
                      "\"} ", n, "\n");
    }
    Header("weir_batch_item_errors_total", "counter", "GenerateBatch items that failed, by code.",
           out);
    for (const auto& [code, n] : item_errors_) {
      absl::StrAppend(&out, "weir_batch_item_errors_total{code=\"", EscapeLabel(code), "\"} ", n,
                      "\n");
    }
    Header("weir_prompt_tokens_total", "counter", "Prompt tokens of finished samples.", out);
    absl::StrAppend(&out, "weir_prompt_tokens_total ", prompt_tokens_, "\n");
    Header("weir_generation_tokens_total", "counter", "Tokens generated by finished samples.", out);
    absl::StrAppend(&out, "weir_generation_tokens_total ", generation_tokens_, "\n");
    Header("weir_accepted_draft_tokens_total", "counter",
           "Generated tokens of finished samples that were accepted speculative drafts.", out);
    absl::StrAppend(&out, "weir_accepted_draft_tokens_total ", accepted_draft_tokens_, "\n");
    Header("weir_rejected_draft_tokens_total", "counter",
           "Speculative drafts of finished samples that verification rejected.", out);
    absl::StrAppend(&out, "weir_rejected_draft_tokens_total ", rejected_draft_tokens_, "\n");
    Header("weir_time_to_first_token_seconds", "histogram",
           "From the request's arrival to its first generated token.", out);
    ttft_.Render("weir_time_to_first_token_seconds", out);
    Header("weir_inter_token_latency_seconds", "histogram",
           "Between consecutive generated tokens of a sample.", out);
    inter_token_.Render("weir_inter_token_latency_seconds", out);
    Header("weir_e2e_request_latency_seconds", "histogram",
           "From the request's arrival to its last token.", out);
    end_to_end_.Render("weir_e2e_request_latency_seconds", out);
    Header("weir_http_requests_total", "counter", "HTTP requests by route and status.", out);
    for (const auto& [key, n] : http_) {
      absl::StrAppend(&out, "weir_http_requests_total{route=\"", EscapeLabel(key.first),
                      "\",status=\"", key.second, "\"} ", n, "\n");
    }
  }
  if (state != nullptr) RenderState(*state, out);
  return out;
}

}  // namespace weir::coordinator::http
