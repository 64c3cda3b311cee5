// tools/bench/grammar_main.cc
//
// Grammar engine benchmark: compile time per JSON Schema of the corpus and
// per-token next-token-mask time over a synthetic 129,280-token byte-level
// vocabulary, while random sequences are sampled under each schema.
// Baseline in the same process: the naive mask (every token run through the
// matcher) on the first steps of each schema.
//
//   bazel run -c opt //tools/bench:grammar -- --sequences=4

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "base/init.h"
#include "tools/bench/grammar_vocab.h"
#include "worker/grammar/compiled_grammar.h"
#include "worker/grammar/constraint.h"
#include "worker/grammar/json_schema_corpus.h"
#include "worker/grammar/matcher.h"
#include "worker/grammar/pda.h"
#include "worker/grammar/vocabulary.h"

ABSL_FLAG(int, vocab_size, 129280, "Tokens in the synthetic vocabulary.");
ABSL_FLAG(int, sequences, 4, "Sequences sampled per schema (the first one finds caches cold).");
ABSL_FLAG(int, max_tokens, 256, "Token cap per sequence.");
ABSL_FLAG(int, compile_reps, 5, "Compiles per schema for the compile-time median.");
ABSL_FLAG(int, baseline_steps, 3, "Steps per schema also timed with the naive mask.");
ABSL_FLAG(uint64_t, seed, 1, "Vocabulary and sampling seed.");

namespace weir::bench {
namespace {

using grammar::CompiledGrammar;
using grammar::Matcher;
using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

bool IsCloser(std::string_view t) {
  return t.find_first_of("\"}],") != std::string_view::npos;
}

// The naive mask: every token accepted and rolled back individually.
void NaiveMask(Matcher& m, std::vector<uint32_t>& mask) {
  std::fill(mask.begin(), mask.end(), 0);
  for (int32_t id = 0; id < m.grammar().vocab().size(); ++id) {
    if (m.AcceptToken(id).ok()) {
      mask[id >> 5] |= 1u << (id & 31);
      (void)m.Rollback(1);
    }
  }
}

int Run() {
  const SyntheticVocab synth = MakeSyntheticVocab(absl::GetFlag(FLAGS_vocab_size), absl::GetFlag(FLAGS_seed));
  size_t total_len = 0;
  for (const std::string& t : synth.tokens) total_len += t.size();
  auto t0 = Clock::now();
  auto vocab = grammar::Vocabulary::Create(synth.tokens, synth.stop_ids, synth.special_ids);
  if (!vocab.ok()) return std::printf("vocab: %s\n", vocab.status().ToString().c_str()), 1;
  std::printf("vocabulary: %zu tokens, mean %.2f bytes, trie %zu nodes, built in %.1f ms\n",
              synth.tokens.size(), double(total_len) / synth.tokens.size(), (*vocab)->trie().size(),
              Micros(Clock::now() - t0) / 1000);
  std::printf("%-20s %10s %7s %10s %10s %10s\n", "schema", "compile_us", "steps", "p50_us",
              "p99_us", "cold_p99");
  std::vector<double> all, cold_all, warm_all, compiles, naive, fast_same_steps;
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::vector<uint32_t> mask((*vocab)->mask_words()), naive_mask(mask.size());
  for (const grammar::CorpusSchema& entry : grammar::JsonSchemaCorpus()) {
    grammar::Constraint c{grammar::ConstraintKind::kJsonSchema, entry.schema, {}};
    std::vector<double> compile_times;
    std::shared_ptr<const CompiledGrammar> compiled;
    for (int r = 0; r < absl::GetFlag(FLAGS_compile_reps); ++r) {
      auto start = Clock::now();
      auto g = grammar::ConstraintToGrammar(c, {});
      if (!g.ok()) return std::printf("%s: %s\n", entry.name.c_str(), g.status().ToString().c_str()), 1;
      auto pda = grammar::Pda::Build(*g);
      if (!pda.ok()) return std::printf("%s: %s\n", entry.name.c_str(), pda.status().ToString().c_str()), 1;
      compiled = std::make_shared<const CompiledGrammar>(*std::move(pda), *vocab);
      compile_times.push_back(Micros(Clock::now() - start));
    }
    const double compile_us = Percentile(compile_times, 0.5);
    compiles.push_back(compile_us);
    std::vector<double> times, cold;
    for (int s = 0; s < absl::GetFlag(FLAGS_sequences); ++s) {
      Matcher m(compiled);
      for (int step = 0; step < absl::GetFlag(FLAGS_max_tokens) && !m.IsTerminated(); ++step) {
        auto start = Clock::now();
        m.FillNextTokenBitmask(mask);
        const double us = Micros(Clock::now() - start);
        times.push_back(us);
        (s == 0 ? cold : warm_all).push_back(us);
        if (s == 1 && step < absl::GetFlag(FLAGS_baseline_steps)) {
          auto nstart = Clock::now();
          NaiveMask(m, naive_mask);
          naive.push_back(Micros(Clock::now() - nstart));
          fast_same_steps.push_back(us);
          if (naive_mask != mask) return std::printf("%s: naive mask differs\n", entry.name.c_str()), 1;
        }
        std::vector<int32_t> allowed, closers;
        for (int32_t w = 0; w < static_cast<int32_t>(mask.size()); ++w) {
          for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
            const int32_t id = w * 32 + __builtin_ctz(bits);
            allowed.push_back(id);
            if ((*vocab)->is_stop(id) || IsCloser((*vocab)->token(id))) closers.push_back(id);
          }
        }
        if (allowed.empty()) return std::printf("%s: empty mask\n", entry.name.c_str()), 1;
        const bool late = step > 32 && !closers.empty() && rng() % 5 != 0;
        const std::vector<int32_t>& from = late ? closers : allowed;
        if (!m.AcceptToken(from[rng() % from.size()]).ok()) {
          return std::printf("%s: masked-in token rejected\n", entry.name.c_str()), 1;
        }
      }
    }
    all.insert(all.end(), times.begin(), times.end());
    cold_all.insert(cold_all.end(), cold.begin(), cold.end());
    std::printf("%-20s %10.0f %7zu %10.1f %10.1f %10.1f\n", entry.name.c_str(), compile_us,
                times.size(), Percentile(times, 0.5), Percentile(times, 0.99), Percentile(cold, 0.99));
  }
  std::printf("\nper-token mask time over %zu masks (%zu schemas x %d sequences):\n", all.size(),
              grammar::JsonSchemaCorpus().size(), absl::GetFlag(FLAGS_sequences));
  std::printf("  all:   median %.1f us  p90 %.1f us  p99 %.1f us  max %.1f us\n",
              Percentile(all, 0.5), Percentile(all, 0.9), Percentile(all, 0.99), Percentile(all, 1.0));
  std::printf("  cold (first sequence, builds token caches): median %.1f us  p99 %.1f us\n",
              Percentile(cold_all, 0.5), Percentile(cold_all, 0.99));
  std::printf("  warm (later sequences):                     median %.1f us  p99 %.1f us\n",
              Percentile(warm_all, 0.5), Percentile(warm_all, 0.99));
  std::printf("compile time per schema: median %.0f us  p99 %.0f us  max %.0f us\n",
              Percentile(compiles, 0.5), Percentile(compiles, 0.99), Percentile(compiles, 1.0));
  std::printf("baseline (naive per-token check) on %zu identical steps: median %.0f us vs %.1f us"
              " (%.0fx)\n",
              naive.size(), Percentile(naive, 0.5), Percentile(fast_same_steps, 0.5),
              Percentile(naive, 0.5) / std::max(1e-3, Percentile(fast_same_steps, 0.5)));
  return 0;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "Grammar engine: compile time and per-token mask time",
                    "grammar_bench");
  return weir::bench::Run();
}
