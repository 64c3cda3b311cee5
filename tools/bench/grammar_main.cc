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
#include "grammar/compiled_grammar.h"
#include "grammar/constraint.h"
#include "grammar/json_schema_corpus.h"
#include "grammar/matcher.h"
#include "grammar/pda.h"
#include "grammar/vocabulary.h"
#include "tools/bench/grammar_vocab.h"

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

bool IsCloser(std::string_view t) { return t.find_first_of("\"}],") != std::string_view::npos; }

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

struct ModeStats {
  std::vector<double> all, cold, warm, compiles, precomputes, naive, fast_same_steps;
  int64_t caches = 0;
};

// Compiles every corpus schema and samples sequences under it. With
// `precompute`, all token caches are built right after compiling (timed
// separately), as the compiler's worker threads do before a request starts.
bool RunMode(const std::shared_ptr<const grammar::Vocabulary>& vocab, bool precompute,
             bool print_rows, ModeStats& st) {
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::vector<char> closer(vocab->size());
  for (int32_t id = 0; id < vocab->size(); ++id) {
    closer[id] = vocab->is_stop(id) || IsCloser(vocab->token(id));
  }
  std::vector<uint32_t> mask(vocab->mask_words()), naive_mask(mask.size());
  std::vector<int32_t> allowed, closers;
  for (const grammar::CorpusSchema& entry : grammar::JsonSchemaCorpus()) {
    grammar::Constraint c{grammar::ConstraintKind::kJsonSchema, entry.schema, {}};
    std::vector<double> compile_times;
    std::shared_ptr<const CompiledGrammar> compiled;
    for (int r = 0; r < absl::GetFlag(FLAGS_compile_reps); ++r) {
      auto start = Clock::now();
      auto g = grammar::ConstraintToGrammar(c, {});
      auto pda = g.ok() ? grammar::Pda::Build(*g) : absl::StatusOr<grammar::Pda>(g.status());
      if (!pda.ok())
        return std::printf("%s: %s\n", entry.name.c_str(), pda.status().ToString().c_str()), false;
      compiled = std::make_shared<const CompiledGrammar>(*std::move(pda), vocab);
      compile_times.push_back(Micros(Clock::now() - start));
    }
    st.compiles.push_back(Percentile(compile_times, 0.5));
    if (precompute) {
      auto start = Clock::now();
      compiled->PrecomputeTokenCaches(absl::InfiniteDuration());
      st.precomputes.push_back(Micros(Clock::now() - start));
    }
    std::vector<double> times, cold;
    for (int s = 0; s < absl::GetFlag(FLAGS_sequences); ++s) {
      Matcher m(compiled);
      for (int step = 0; step < absl::GetFlag(FLAGS_max_tokens) && !m.IsTerminated(); ++step) {
        auto start = Clock::now();
        m.FillNextTokenBitmask(mask);
        const double us = Micros(Clock::now() - start);
        times.push_back(us);
        (s == 0 ? cold : st.warm).push_back(us);
        if (!precompute && s == 1 && step < absl::GetFlag(FLAGS_baseline_steps)) {
          auto nstart = Clock::now();
          NaiveMask(m, naive_mask);
          st.naive.push_back(Micros(Clock::now() - nstart));
          st.fast_same_steps.push_back(us);
          if (naive_mask != mask)
            return std::printf("%s: naive mask differs\n", entry.name.c_str()), false;
        }
        allowed.clear();
        closers.clear();
        for (int32_t w = 0; w < static_cast<int32_t>(mask.size()); ++w) {
          for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
            const int32_t id = w * 32 + __builtin_ctz(bits);
            allowed.push_back(id);
            if (closer[id]) closers.push_back(id);
          }
        }
        if (allowed.empty()) return std::printf("%s: empty mask\n", entry.name.c_str()), false;
        const bool late = step > 32 && !closers.empty() && rng() % 5 != 0;
        const std::vector<int32_t>& from = late ? closers : allowed;
        if (!m.AcceptToken(from[rng() % from.size()]).ok()) {
          return std::printf("%s: masked-in token rejected\n", entry.name.c_str()), false;
        }
      }
    }
    st.all.insert(st.all.end(), times.begin(), times.end());
    st.cold.insert(st.cold.end(), cold.begin(), cold.end());
    st.caches += compiled->num_token_caches();
    if (print_rows) {
      std::printf("%-20s %10.0f %7zu %7d %10.1f %10.1f %10.1f\n", entry.name.c_str(),
                  st.compiles.back(), times.size(), compiled->num_token_caches(),
                  Percentile(times, 0.5), Percentile(times, 0.99), Percentile(cold, 0.99));
    }
  }
  return true;
}

void PrintMode(const char* title, const ModeStats& st) {
  std::printf("\n%s: %zu masks (%zu schemas x %d sequences), %lld token caches built\n", title,
              st.all.size(), grammar::JsonSchemaCorpus().size(), absl::GetFlag(FLAGS_sequences),
              static_cast<long long>(st.caches));
  std::printf("  per-token mask: median %.1f us  p90 %.1f us  p99 %.1f us  max %.1f us\n",
              Percentile(st.all, 0.5), Percentile(st.all, 0.9), Percentile(st.all, 0.99),
              Percentile(st.all, 1.0));
  std::printf("  first sequence per schema: median %.1f us  p99 %.1f us\n",
              Percentile(st.cold, 0.5), Percentile(st.cold, 0.99));
  std::printf("  later sequences:           median %.1f us  p99 %.1f us\n",
              Percentile(st.warm, 0.5), Percentile(st.warm, 0.99));
  std::printf("  compile (front-end + PDA) per schema: median %.0f us  p99 %.0f us  max %.0f us\n",
              Percentile(st.compiles, 0.5), Percentile(st.compiles, 0.99),
              Percentile(st.compiles, 1.0));
  if (!st.precomputes.empty()) {
    std::printf(
        "  token-cache precompute per schema:    median %.0f us  p99 %.0f us  max %.0f us\n",
        Percentile(st.precomputes, 0.5), Percentile(st.precomputes, 0.99),
        Percentile(st.precomputes, 1.0));
  }
  if (!st.naive.empty()) {
    std::printf(
        "  baseline, naive per-token check on %zu of the same steps: median %.0f us vs"
        " %.1f us (%.0fx)\n",
        st.naive.size(), Percentile(st.naive, 0.5), Percentile(st.fast_same_steps, 0.5),
        Percentile(st.naive, 0.5) / std::max(1e-3, Percentile(st.fast_same_steps, 0.5)));
  }
}

int Run() {
  const SyntheticVocab synth =
      MakeSyntheticVocab(absl::GetFlag(FLAGS_vocab_size), absl::GetFlag(FLAGS_seed));
  size_t total_len = 0;
  for (const std::string& t : synth.tokens) total_len += t.size();
  auto t0 = Clock::now();
  auto vocab = grammar::Vocabulary::Create(synth.tokens, synth.stop_ids, synth.special_ids);
  if (!vocab.ok()) return std::printf("vocab: %s\n", vocab.status().ToString().c_str()), 1;
  std::printf("vocabulary: %zu tokens, mean %.2f bytes, trie %zu nodes, built in %.1f ms\n",
              synth.tokens.size(), double(total_len) / synth.tokens.size(), (*vocab)->trie().size(),
              Micros(Clock::now() - t0) / 1000);
  std::printf("lazy token caches, per schema:\n%-20s %10s %7s %7s %10s %10s %10s\n", "schema",
              "compile_us", "steps", "caches", "p50_us", "p99_us", "first_p99");
  ModeStats lazy, pre;
  if (!RunMode(*vocab, /*precompute=*/false, /*print_rows=*/true, lazy)) return 1;
  if (!RunMode(*vocab, /*precompute=*/true, /*print_rows=*/false, pre)) return 1;
  PrintMode("lazy token caches (built on first use during decoding)", lazy);
  PrintMode("precomputed token caches (built after compile, off the step loop)", pre);
  return 0;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "Grammar engine: compile time and per-token mask time",
                    "grammar_bench");
  return weir::bench::Run();
}
