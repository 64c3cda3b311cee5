// Speculative rows with structured output and logprobs on the random-weight
// tiny: a constrained sequence (a regex, a JSON schema) and an unconstrained
// one decode side by side with logprobs (top 3) and zero-overhead remaps.
// With drafts (the model's own, or injected: the plain continuation with one
// draft replaced by the token the unconstrained argmax prefers, which the
// grammar forbids wherever it differs from the greedy token) every emitted
// token, its sampler log-probability, its scored logprobs and the grammar's
// end equal plain decoding's, greedy and seeded; also with the sequences on
// a drafting decode backend (HostDecodeBackend standing in for a CUDA
// worker's DeviceDecoder: verification runs, drafts and rollbacks there).
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/structured_output.h"
#include "gtest/gtest.h"
#include "tokenizer/tokenizer.h"
#include "worker/model/host_decode_backend.h"
#include "worker/step_executor.h"
#include "worker/step_executor_test_util.h"

namespace weir::worker {
namespace {

constexpr int32_t kDrafts = 4;
constexpr size_t kMaxOutput = 60;

struct Fixture {
  const model::Checkpoint* checkpoint =
      model::DerivedCheckpoint("random/tiny", "random_tiny_seed5", {}, 5);
  std::unique_ptr<model::Model> model =
      checkpoint == nullptr ? nullptr : model::NewModelOrFail(*checkpoint);
  std::unique_ptr<grammar::GrammarCompiler> compiler;

  Fixture() {
    if (model == nullptr) return;
    const std::string dir = std::string(std::getenv("TEST_SRCDIR")) + "/weir/models/random/tiny";
    auto tok = tokenizer::Tokenizer::FromDirectory(dir);
    EXPECT_TRUE(tok.ok()) << tok.status();
    if (!tok.ok()) return;
    auto vocab = grammar::BuildGrammarVocabulary(**tok, model->config().vocab_size, {});
    EXPECT_TRUE(vocab.ok()) << vocab.status();
    if (vocab.ok()) compiler = std::make_unique<grammar::GrammarCompiler>(*vocab);
  }
};

Fixture& Shared() {
  static Fixture* f = new Fixture();
  return *f;
}

// One emitted token and everything reported about it.
struct Emitted {
  int32_t token = 0;
  float logprob = 0.0f;
  TokenLogprob scored;
  bool finished = false;  // the grammar ended with this token
};

bool operator==(const Emitted& a, const Emitted& b) {
  return a.token == b.token && a.logprob == b.logprob && a.scored.token == b.scored.token &&
         a.scored.logprob == b.scored.logprob && a.scored.rank == b.scored.rank &&
         a.scored.top == b.scored.top && a.finished == b.finished;
}

std::ostream& operator<<(std::ostream& os, const Emitted& e) {
  return os << "{" << e.token << " " << e.logprob << " rank " << e.scored.rank << " "
            << e.scored.logprob << (e.finished ? " end" : "") << "}";
}

const std::vector<int64_t> kPrompts[] = {{11, 400, 23, 7}, {3000, 12, 12, 400, 5, 6, 71}};

// kLookup: the model's drafts with prompt lookup beside them (SetNgramLookup(1)).
enum class Drafts { kOff, kModel, kInjected, kLookup };

struct Run {
  std::vector<std::vector<Emitted>> out{2};
  // Plain runs: the unconstrained argmax of the logits each token was
  // sampled from (RowPlan::return_top_k).
  std::vector<std::vector<int32_t>> unmasked_top{2};
  std::vector<int64_t> accepted = {0, 0};  // drafts accepted, by sequence
  int64_t lookups = 0;                     // blocks of drafts from prompt lookup
};

// Decodes kPrompts[0] under `constraint` and kPrompts[1] unconstrained, both
// with logprobs, until the constrained one ends (or kMaxOutput tokens).
// `ngram`: SetNgramLookup's match length (prompt lookup beside the drafts).
Run Decode(const grammar::Constraint& constraint, const sampling::SamplingParams& params,
           Drafts drafts, const Run* reference, model::HostDecodeBackend* backend = nullptr,
           int32_t ngram = 0) {
  Fixture& f = Shared();
  StepExecutor ex(*f.model, 2, f.compiler.get());
  if (backend != nullptr) ex.SetDecodeBackend(backend);
  Run run;
  if (drafts != Drafts::kOff) {
    EXPECT_TRUE(ex.SetSpeculation(kDrafts).ok());
  }
  EXPECT_TRUE(ex.SetNgramLookup(ngram).ok());
  const int32_t draft_tokens = drafts == Drafts::kOff ? -1 : kDrafts;
  std::vector<RowPlan> rows;
  for (int32_t s = 0; s < 2; ++s) {
    RowPlan row{.slot = s,
                .start_pos = 0,
                .tokens = kPrompts[s],
                .sample = true,
                .sampling = params,
                .return_top_k = 1,
                .logprobs = 3,
                .draft_tokens = draft_tokens};
    if (s == 0) {
      row.constraint = constraint;
      row.constrained_from = static_cast<int64_t>(kPrompts[0].size());
    }
    rows.push_back(std::move(row));
  }
  const int64_t vocab = f.model->config().vocab_size;
  for (int step = 0; step < 100; ++step) {
    absl::StatusOr<std::vector<RowOutcome>> r = ex.Execute(rows, {});
    EXPECT_TRUE(FirstError(r).ok()) << FirstError(r);
    if (!FirstError(r).ok()) return run;
    bool ended = false;
    for (int32_t s = 0; s < 2; ++s) {
      const RowOutcome& o = (*r)[s];
      EXPECT_EQ(o.accepted.size(), o.accepted_scored.size());
      for (size_t k = 0; k < o.accepted.size(); ++k) {
        run.out[s].push_back({.token = o.accepted[k],
                              .logprob = o.accepted_logprobs[k],
                              .scored = o.accepted_scored[k]});
      }
      run.accepted[s] += static_cast<int64_t>(o.accepted.size());
      EXPECT_TRUE(o.token.has_value() && o.sampled_logprobs.has_value());
      if (!o.token.has_value() || !o.sampled_logprobs.has_value()) return run;
      run.out[s].push_back({.token = *o.token,
                            .logprob = o.logprob,
                            .scored = *o.sampled_logprobs,
                            .finished = o.finished});
      if (drafts == Drafts::kOff) run.unmasked_top[s].push_back(o.top_ids.at(0));
      if (s == 0) ended = o.finished || run.out[0].size() >= kMaxOutput;
      rows[s] = {.slot = s,
                 .start_pos = static_cast<int64_t>(kPrompts[s].size()),
                 .remap = s,
                 .sample = true,
                 .sampling = params,
                 .return_top_k = 1,
                 .logprobs = 3,
                 .draft_tokens = draft_tokens};
      if (drafts == Drafts::kOff) {
        rows[s].start_pos += static_cast<int64_t>(run.out[s].size()) - 1;
      }
      if (drafts != Drafts::kInjected) continue;
      // The reference's continuation, one draft (cycling) replaced by the
      // unconstrained argmax where that differs, else by another token.
      const std::vector<Emitted>& ref = reference->out[s];
      const size_t at = run.out[s].size();
      std::vector<int64_t> d;
      for (size_t k = at; k < ref.size() && k < at + kDrafts; ++k) d.push_back(ref[k].token);
      const size_t wrong = static_cast<size_t>(step + s) % (kDrafts + 1);
      if (wrong < d.size()) {
        const int32_t top = reference->unmasked_top[s][at + wrong];
        d[wrong] = top != d[wrong] ? top : (d[wrong] + 1) % vocab;
      }
      ex.SetDraftsForTest(s, std::move(d));
    }
    if (ended) break;
  }
  if (drafts != Drafts::kOff) {
    EXPECT_GT(ex.drafts_verified(), 0);
  }
  run.lookups = ex.lookup_drafts();
  return run;
}

// `repeats`: the constraint's text repeats itself, so prompt lookup must
// propose drafts on it.
void ExpectSpeculationChangesNothing(const grammar::Constraint& constraint,
                                     const sampling::SamplingParams& params, bool repeats = false) {
  ASSERT_NE(Shared().compiler, nullptr);
  const Run plain = Decode(constraint, params, Drafts::kOff, nullptr);
  ASSERT_FALSE(plain.out[0].empty());
  EXPECT_TRUE(plain.out[0].back().finished) << "the constraint did not end";
  // Somewhere the grammar overrules the unconstrained argmax: injecting that
  // token as a draft checks the mask on verified positions.
  int overruled = 0;
  for (size_t k = 0; k < plain.out[0].size(); ++k) {
    overruled += plain.unmasked_top[0][k] != plain.out[0][k].token;
  }
  EXPECT_GT(overruled, 2);
  for (const bool on_backend : {false, true}) {
    for (Drafts drafts : {Drafts::kModel, Drafts::kInjected, Drafts::kLookup}) {
      model::HostDecodeBackend backend(*Shared().model, 2, /*max_batch=*/16,
                                       /*max_positions=*/4096, /*collective=*/false,
                                       /*max_rows_per_slot=*/kDrafts + 1);
      backend.EnableDrafting(kDrafts);
      const Run spec =
          drafts == Drafts::kLookup
              ? Decode(constraint, params, Drafts::kModel, &plain, on_backend ? &backend : nullptr,
                       /*ngram=*/1)
              : Decode(constraint, params, drafts, &plain, on_backend ? &backend : nullptr);
      // Prompt lookup proposed drafts (the grammar's allowed prefix of them on
      // the constrained sequence) where the text repeats, and only with it.
      if (drafts == Drafts::kLookup) {
        if (repeats) {
          EXPECT_GT(spec.lookups, 0);
        }
        std::cout << "prompt lookup: " << spec.lookups << " blocks, " << spec.accepted[0]
                  << " drafts accepted of the constrained sequence's " << plain.out[0].size()
                  << " tokens\n";
      } else {
        EXPECT_EQ(spec.lookups, 0);
      }
      if (on_backend) {  // the sequences verified, drafted and rolled back there
        EXPECT_EQ(backend.stats().starts, 2);
        EXPECT_GT(backend.stats().drafts, 4);
        EXPECT_GT(backend.stats().rollbacks, 0);
        EXPECT_GT(backend.stats().draft_logits, 0);  // the grammar's substitutes read them
      }
      const size_t n = plain.out[0].size();
      // The unconstrained sequence ran as many steps, so at least as many tokens.
      for (int s = 0; s < 2; ++s) {
        const size_t compared = s == 0 ? n : std::min(spec.out[1].size(), plain.out[1].size());
        ASSERT_EQ(spec.out[s].size() >= compared, true) << "sequence " << s;
        EXPECT_EQ(std::vector<Emitted>(spec.out[s].begin(), spec.out[s].begin() + compared),
                  std::vector<Emitted>(plain.out[s].begin(), plain.out[s].begin() + compared))
            << "sequence " << s
            << (drafts == Drafts::kModel    ? " (model drafts)"
                : drafts == Drafts::kLookup ? " (lookup)"
                                            : " (injected)")
            << (on_backend ? " on the backend" : "");
      }
      EXPECT_EQ(spec.out[0].size(), n);  // nothing after the grammar's end
      if (drafts == Drafts::kInjected) {
        // Drafts were accepted under the grammar, and on the other sequence.
        EXPECT_GE(spec.accepted[0], 1);
        EXPECT_GE(spec.accepted[1], 3);
        std::cout << "drafts accepted: " << spec.accepted[0] << " of the constrained sequence's "
                  << n << " tokens, " << spec.accepted[1] << " of the other's\n";
      }
    }
  }
}

const grammar::Constraint kRegex{.kind = grammar::ConstraintKind::kRegex,
                                 .text = "[a-z]{1,8}@[a-z]{1,8}\\.(com|org|net)"};
const grammar::Constraint kSchema{
    .kind = grammar::ConstraintKind::kJsonSchema,
    .text = R"({"type": "object", "properties": {"ok": {"type": "boolean"},
                "n": {"type": "integer", "minimum": 0, "maximum": 999},
                "tag": {"enum": ["red", "green", "blue"]}},
                "required": ["ok", "n", "tag"], "additionalProperties": false})"};

// A text that must repeat itself: prompt lookup proposes its continuation,
// and the grammar's mask cuts the proposal where the repetition ends.
const grammar::Constraint kRepeating{.kind = grammar::ConstraintKind::kRegex,
                                     .text = "(na ){6,10}batman!"};

TEST(StepExecutorSpeculativeGrammarTest, GreedyRepeatingRegex) {
  ExpectSpeculationChangesNothing(kRepeating, GreedySampling(), /*repeats=*/true);
}

TEST(StepExecutorSpeculativeGrammarTest, SeededRepeatingRegex) {
  ExpectSpeculationChangesNothing(kRepeating, SeededSampling(), /*repeats=*/true);
}

TEST(StepExecutorSpeculativeGrammarTest, GreedyRegex) {
  ExpectSpeculationChangesNothing(kRegex, GreedySampling());
}

TEST(StepExecutorSpeculativeGrammarTest, SeededRegex) {
  ExpectSpeculationChangesNothing(kRegex, SeededSampling());
}

TEST(StepExecutorSpeculativeGrammarTest, GreedyJsonSchema) {
  ExpectSpeculationChangesNothing(kSchema, GreedySampling());
}

TEST(StepExecutorSpeculativeGrammarTest, SeededJsonSchema) {
  ExpectSpeculationChangesNothing(kSchema, SeededSampling());
}

}  // namespace
}  // namespace weir::worker
