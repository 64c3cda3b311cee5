// CPU forward throughput of the V4.1 model on a generated checkpoint (default
// the `tiny` config): prefill tokens/s (one chunk from position 0), decode
// tokens/s (one token per forward), DSpark drafts/s, and the fraction of
// forward time spent in matrix products (Ops::Matmul / Logits, measured by
// the ops themselves). As an in-process baseline it also times the
// batch-invariant RowStableGemm against OpenBLAS sgemm on the model's
// largest per-layer shape. With --ced_replay it also times the prefill with
// CED bounded replay (spec §4.4: the decoder layers over the last window
// positions only) beside the exact one.
//
//   tools/bazel run -c opt //tools/bench:model_cpu -- --prompt=128 --decode=64
//   tools/bazel run -c opt //tools/bench:model_cpu -- --prompt=4000 --decode=2 --ced_replay
//
// The checkpoint is generated into --dir (a temporary directory by default).

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "base/init.h"
#include "base/logging.h"
#include "tokenizer/engram_vocab.h"
#include "tokenizer/tokenizer.h"
#include "worker/model/model.h"
#include "worker/model/row_gemm.h"
#include "worker/model/tiny_checkpoint.h"

ABSL_FLAG(std::string, config, "models/random/tiny/config.json", "config.json of the model.");
ABSL_FLAG(std::string, dir, "", "Where to generate the checkpoint (default: a temp dir).");
ABSL_FLAG(int, prompt, 128, "Prompt tokens (prefill, one chunk).");
ABSL_FLAG(int, decode, 64, "Decoded tokens (one forward each).");
ABSL_FLAG(int, runs, 3, "Repetitions; the best run is reported.");
ABSL_FLAG(bool, ced_replay, false,
          "Also time the prefill with CED bounded replay (Model::StartCedReplay).");

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

struct Run {
  double prefill_s = 0, prefill_mm_s = 0, decode_s = 0, decode_mm_s = 0, draft_s = 0;
  double replay_s = 0;  // --ced_replay: the prefill with bounded replay
  // The prefill as serving runs it: logits of the last position only
  // (Model::ForwardBatch logits_from), against prefill_s's every position.
  double last_only_s = 0;
};

Run OneRun(weir::model::Model& model, const std::vector<int64_t>& tokens, int prompt,
           int decode) {
  Run r;
  if (absl::GetFlag(FLAGS_ced_replay)) {
    auto seq = model.NewSequence();
    WEIR_CHECK_OK(model.StartCedReplay(*seq, prompt));
    const auto t0 = Clock::now();
    auto logits = model.Forward(*seq, std::span(tokens).first(prompt), 0);
    WEIR_CHECK(logits.ok()) << logits.status();
    r.replay_s = Seconds(t0);
  }
  {
    auto last = model.NewSequence();
    weir::model::SequenceState* states[] = {last.get()};
    const std::span<const int64_t> rows[] = {std::span(tokens).first(prompt)};
    const int64_t starts[] = {0}, from[] = {prompt - 1};
    const auto t0 = Clock::now();
    auto out = model.ForwardBatch(states, rows, starts, from);
    WEIR_CHECK(out.ok()) << out.status();
    r.last_only_s = Seconds(t0);
  }
  auto seq = model.NewSequence();
  double mm0 = model.ops_stats().matmul_seconds;
  auto t0 = Clock::now();
  auto logits = model.Forward(*seq, std::span(tokens).first(prompt), 0);
  WEIR_CHECK(logits.ok()) << logits.status();
  r.prefill_s = Seconds(t0);
  r.prefill_mm_s = model.ops_stats().matmul_seconds - mm0;
  mm0 = model.ops_stats().matmul_seconds;
  t0 = Clock::now();
  for (int i = 0; i < decode; ++i) {
    const int64_t pos = prompt + i;
    auto l = model.Forward(*seq, std::span(tokens).subspan(pos, 1), pos);
    WEIR_CHECK(l.ok()) << l.status();
  }
  r.decode_s = Seconds(t0);
  r.decode_mm_s = model.ops_stats().matmul_seconds - mm0;
  if (model.config().n_mtp_layers > 0) {
    t0 = Clock::now();
    for (int i = 0; i < decode; ++i) WEIR_CHECK(model.Draft(*seq, tokens[i]).ok());
    r.draft_s = Seconds(t0);
  }
  return r;
}

// GFLOP/s of RowStableGemm and of sgemm for x [m, k] * w [n, k]^T.
void GemmBaseline(int64_t m, int64_t n, int64_t k) {
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(m * k), w(n * k), y(m * n);
  for (float& v : x) v = u(gen);
  for (float& v : w) v = u(gen);
  const int reps = std::max<int64_t>(1, 200000000 / (2 * m * n * k));
  double best_row = 1e30, best_blas = 1e30;
  for (int trial = 0; trial < 3; ++trial) {
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
      weir::model::RowStableGemm(x.data(), w.data(), y.data(), m, n, k);
    }
    best_row = std::min(best_row, Seconds(t0));
    t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x.data(), k, w.data(),
                  k, 0.0f, y.data(), n);
    }
    best_blas = std::min(best_blas, Seconds(t0));
  }
  const double flop = 2.0 * m * n * k * reps;
  std::printf("gemm [%lld x %lld] * [%lld x %lld]^T: RowStableGemm %.2f GFLOP/s, sgemm %.2f "
              "GFLOP/s (sgemm / row-stable = %.2fx)\n",
              static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n),
              static_cast<long long>(k), flop / best_row * 1e-9, flop / best_blas * 1e-9,
              best_row / best_blas);
}

}  // namespace

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "CPU model forward benchmark", "model_cpu");
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) dir = (std::filesystem::temp_directory_path() / "weir_model_cpu_bench").string();
  const std::string config_path = absl::GetFlag(FLAGS_config);
  auto ckpt = weir::model::GenerateAndOpenCheckpoint(config_path, dir, 1);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "model_cpu: %s\n", ckpt.status().ToString().c_str());
    return 1;
  }
  // A config with a compressed Engram vocabulary (a trained model's, e.g.
  // models/tiny) needs the map of the tokenizer beside it.
  weir::model::ModelOptions options;
  const std::string config_dir = std::filesystem::path(config_path).parent_path().string();
  if (auto tok = weir::tokenizer::Tokenizer::FromDirectory(config_dir); tok.ok()) {
    auto map =
        weir::tokenizer::EngramTokenMap(**tok, (*ckpt)->config().engram_compressed_vocab_size);
    if (map.ok()) options.engram_token_map = *std::move(map);
  }
  auto model = weir::model::Model::Create((*ckpt)->config(), **ckpt, options);
  if (!model.ok()) {
    std::fprintf(stderr, "model_cpu: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const weir::model::ModelConfig& c = (*model)->config();
  const int prompt = absl::GetFlag(FLAGS_prompt), decode = absl::GetFlag(FLAGS_decode);
  WEIR_CHECK(prompt >= 2 && decode >= 1) << "need --prompt >= 2 and --decode >= 1";
  std::mt19937 gen(7);
  std::vector<int64_t> tokens(prompt + decode);
  for (int64_t& t : tokens) t = static_cast<int64_t>(gen() % c.vocab_size);

  Run best;
  best.prefill_s = best.decode_s = best.draft_s = best.replay_s = best.last_only_s = 1e30;
  for (int i = 0; i < absl::GetFlag(FLAGS_runs); ++i) {
    const Run r = OneRun(**model, tokens, prompt, decode);
    if (r.prefill_s < best.prefill_s) {
      best.prefill_s = r.prefill_s;
      best.prefill_mm_s = r.prefill_mm_s;
    }
    if (r.decode_s < best.decode_s) {
      best.decode_s = r.decode_s;
      best.decode_mm_s = r.decode_mm_s;
    }
    best.draft_s = std::min(best.draft_s, r.draft_s);
    best.replay_s = std::min(best.replay_s, r.replay_s);
    best.last_only_s = std::min(best.last_only_s, r.last_only_s);
  }
  std::printf("model %s: dim %lld, %d layers + %d DSpark stages, vocab %lld\n",
              absl::GetFlag(FLAGS_config).c_str(), static_cast<long long>(c.dim), c.n_layers,
              c.n_mtp_layers, static_cast<long long>(c.vocab_size));
  std::printf("prefill %d tokens: %.1f tokens/s (%.1f ms), matmul %.0f%% of the time\n", prompt,
              prompt / best.prefill_s, best.prefill_s * 1e3,
              100.0 * best.prefill_mm_s / best.prefill_s);
  std::printf("prefill %d tokens, logits of the last position only (as serving asks): %.1f "
              "tokens/s (%.1f ms), %.2fx the all-positions prefill's speed\n",
              prompt, prompt / best.last_only_s, best.last_only_s * 1e3,
              best.prefill_s / best.last_only_s);
  if (absl::GetFlag(FLAGS_ced_replay)) {
    std::printf("prefill %d tokens with CED replay (decoder layers %d.. over the last %lld): "
                "%.1f ms, %.2fx the exact prefill's speed\n",
                prompt, c.decoder_start(), static_cast<long long>(c.window_size),
                best.replay_s * 1e3, best.prefill_s / best.replay_s);
  }
  std::printf("decode %d tokens:  %.1f tokens/s (%.2f ms/token), matmul %.0f%% of the time\n",
              decode, decode / best.decode_s, best.decode_s / decode * 1e3,
              100.0 * best.decode_mm_s / best.decode_s);
  std::printf("prefill / decode throughput: %.2fx\n",
              (prompt / best.prefill_s) / (decode / best.decode_s));
  if (c.n_mtp_layers > 0) {
    std::printf("DSpark draft (%lld tokens): %.2f ms per draft\n",
                static_cast<long long>(c.dspark_block_size), best.draft_s / decode * 1e3);
  }
  GemmBaseline(prompt, c.n_heads * c.head_dim, c.q_lora_rank);
  GemmBaseline(prompt, c.dim, c.o_groups * c.o_lora_rank);
  return 0;
}
