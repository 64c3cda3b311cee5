#include "coordinator/http/metrics.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "coordinator/http/metrics_interceptor.h"

namespace weir::coordinator::http {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return absl::StrContains(text, line + "\n");
}

TEST(MetricsTest, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.1);  // a bound is inclusive
  h.Observe(0.5, 2);
  h.Observe(7.0);
  std::string out;
  h.Render("x", out);
  EXPECT_EQ(out,
            "x_bucket{le=\"0.1\"} 2\n"
            "x_bucket{le=\"1\"} 4\n"
            "x_bucket{le=\"+Inf\"} 5\n"
            "x_sum 8.15\n"
            "x_count 5\n");
}

TEST(MetricsTest, RendersCountersHistogramsAndState) {
  Metrics m;
  m.CountCall("Generate", "OK");
  m.CountCall("Generate", "OK");
  m.CountCall("Generate", "RESOURCE_EXHAUSTED");
  m.CountHttp("/v1/completions", 200);
  v1::GenerateEvent::Final final_event;
  final_event.set_reason(v1::FINISH_REASON_MAX_TOKENS);
  final_event.mutable_usage()->set_prompt_tokens(5);
  final_event.mutable_usage()->set_completion_tokens(11);
  final_event.mutable_usage()->set_accepted_draft_tokens(4);
  final_event.mutable_usage()->set_rejected_draft_tokens(9);
  final_event.mutable_timings()->set_ttft_ms(20);
  final_event.mutable_timings()->set_total_ms(120);
  RecordFinal(final_event, /*streamed=*/false, m);

  v1::ServerState state;
  state.set_lifecycle(v1::LIFECYCLE_READY);
  state.set_steps(42);
  state.set_preemptions(3);
  state.set_forked_samples(5);
  v1::ServerState::Group* g = state.add_per_group();
  g->set_id(1);
  g->set_running(2);
  g->set_waiting(7);
  g->set_kv_usage(0.25f);
  g->set_kv_blocks_used(30);
  g->set_kv_blocks_free(90);
  g->set_seq_slots_total(64);
  g->set_seq_slots_free(60);
  state.add_workers()->set_state(v1::WORKER_STATE_READY);
  state.add_workers()->set_state(v1::WORKER_STATE_DEAD);

  const std::string text = m.Render(&state);
  EXPECT_TRUE(Has(text, "# TYPE weir_requests_total counter")) << text;
  EXPECT_TRUE(Has(text, "weir_requests_total{method=\"Generate\",code=\"OK\"} 2")) << text;
  EXPECT_TRUE(Has(text, "weir_requests_total{method=\"Generate\",code=\"RESOURCE_EXHAUSTED\"} 1"));
  EXPECT_TRUE(Has(text, "weir_request_success_total{finish_reason=\"max_tokens\"} 1")) << text;
  EXPECT_TRUE(Has(text, "weir_prompt_tokens_total 5"));
  EXPECT_TRUE(Has(text, "weir_generation_tokens_total 11"));
  EXPECT_TRUE(Has(text, "weir_accepted_draft_tokens_total 4")) << text;
  EXPECT_TRUE(Has(text, "weir_rejected_draft_tokens_total 9")) << text;
  EXPECT_TRUE(Has(text, "weir_time_to_first_token_seconds_count 1"));
  EXPECT_TRUE(Has(text, "weir_time_to_first_token_seconds_bucket{le=\"0.02\"} 1")) << text;
  EXPECT_TRUE(Has(text, "weir_e2e_request_latency_seconds_sum 0.12"));
  // 10 gaps of (120 - 20) / 10 ms each.
  EXPECT_TRUE(Has(text, "weir_inter_token_latency_seconds_count 10")) << text;
  EXPECT_TRUE(Has(text, "weir_inter_token_latency_seconds_bucket{le=\"0.005\"} 0")) << text;
  EXPECT_TRUE(Has(text, "weir_inter_token_latency_seconds_bucket{le=\"0.025\"} 10")) << text;
  EXPECT_TRUE(Has(text, "weir_http_requests_total{route=\"/v1/completions\",status=\"200\"} 1"));
  EXPECT_TRUE(Has(text, "weir_lifecycle{state=\"ready\"} 1"));
  EXPECT_TRUE(Has(text, "weir_lifecycle{state=\"stopping\"} 0"));
  EXPECT_TRUE(Has(text, "weir_workers{state=\"ready\"} 1"));
  EXPECT_TRUE(Has(text, "weir_workers{state=\"dead\"} 1"));
  EXPECT_TRUE(Has(text, "weir_num_requests_running{rank=\"1\"} 2"));
  EXPECT_TRUE(Has(text, "weir_num_requests_waiting{rank=\"1\"} 7"));
  EXPECT_TRUE(Has(text, "weir_kv_cache_usage_ratio{rank=\"1\"} 0.25"));
  EXPECT_TRUE(Has(text, "weir_kv_blocks{rank=\"1\",state=\"used\"} 30"));
  EXPECT_TRUE(Has(text, "weir_kv_blocks{rank=\"1\",state=\"free\"} 90"));
  EXPECT_TRUE(Has(text, "weir_seq_slots{rank=\"1\",state=\"used\"} 4"));
  EXPECT_TRUE(Has(text, "weir_steps_total 42"));
  EXPECT_TRUE(Has(text, "weir_preemptions_total 3"));
  EXPECT_TRUE(Has(text, "weir_forked_samples_total 5"));
  EXPECT_FALSE(absl::StrContains(text, "weir_spec_decode")) << "no speculation: none";
  // With speculation: its counters, the method as a label.
  v1::ServerState::Speculation* spec = state.mutable_speculation();
  spec->set_method("ngram");
  for (uint64_t n : {5, 0, 2, 1}) spec->add_accepted_histogram(n);  // 0..3 accepted
  spec->set_verified_drafts(20);
  spec->set_lookup_verifications(6);
  spec->set_lookup_accepted_drafts(7);
  spec->set_paused_steps(4);
  const std::string with_spec = m.Render(&state);
  EXPECT_TRUE(
      Has(with_spec, "weir_spec_decode_verifications_total{method=\"ngram\",accepted=\"0\"} 5"));
  EXPECT_TRUE(
      Has(with_spec, "weir_spec_decode_verifications_total{method=\"ngram\",accepted=\"3\"} 1"));
  EXPECT_TRUE(Has(with_spec, "weir_spec_decode_draft_tokens_total{method=\"ngram\"} 20"));
  // 2 x 2 + 1 x 3 accepted drafts.
  EXPECT_TRUE(Has(with_spec, "weir_spec_decode_accepted_tokens_total{method=\"ngram\"} 7"))
      << with_spec;
  EXPECT_TRUE(Has(with_spec, "weir_spec_decode_lookup_verifications_total{method=\"ngram\"} 6"));
  EXPECT_TRUE(Has(with_spec, "weir_spec_decode_lookup_accepted_tokens_total{method=\"ngram\"} 7"));
  EXPECT_TRUE(Has(with_spec, "weir_spec_decode_paused_steps_total{method=\"ngram\"} 4"));
  // Without state only the request metrics.
  EXPECT_FALSE(absl::StrContains(m.Render(nullptr), "weir_steps_total"));
}

TEST(MetricsTest, EscapesLabelValues) { EXPECT_EQ(EscapeLabel("a\"b\\c\nd"), "a\\\"b\\\\c\\nd"); }

}  // namespace
}  // namespace weir::coordinator::http
