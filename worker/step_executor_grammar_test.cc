// Structured output through the StepExecutor on the tiny model: for every
// JSON Schema of the grammar corpus and a set of regexes, choice lists and
// EBNF grammars, several sequences sample at temperature 1 (different seeds,
// batched with an unconstrained row) until the constraint terminates, and
// every output is checked by an independent validator (nlohmann parse +
// schema checker; std::regex full match; exact choices).

#include <cstdlib>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/json_schema_corpus.h"
#include "grammar/schema_checker.h"
#include "grammar/structured_output.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/step_executor.h"

namespace weir::worker {
namespace {

struct Fixture {
  std::unique_ptr<model::Checkpoint> checkpoint;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::shared_ptr<const grammar::Vocabulary> vocab;
  std::unique_ptr<grammar::GrammarCompiler> compiler;
  int32_t eos = -1;

  Fixture() {
    const std::string dir = std::string(std::getenv("TEST_SRCDIR")) + "/weir/models/random/tiny";
    auto opened = model::GenerateAndOpenCheckpoint(
        dir + "/config.json", std::string(std::getenv("TEST_TMPDIR")) + "/tiny", /*seed=*/5);
    EXPECT_TRUE(opened.ok()) << opened.status();
    checkpoint = std::move(*opened);
    auto created = model::Model::Create(checkpoint->config(), *checkpoint);
    EXPECT_TRUE(created.ok()) << created.status();
    model = std::move(*created);
    auto loaded = tokenizer::Tokenizer::FromDirectory(dir);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    tok = std::move(*loaded);
    eos = tok->eos_id().value_or(-1);
    auto built = grammar::BuildGrammarVocabulary(*tok, checkpoint->config().vocab_size, {});
    EXPECT_TRUE(built.ok()) << built.status();
    vocab = *built;
    compiler = std::make_unique<grammar::GrammarCompiler>(vocab);
  }
};

Fixture& Shared() {
  static Fixture* f = new Fixture();
  return *f;
}

// Random weights put no weight on closing a string or container, so outputs
// would run for thousands of tokens; a fixed bias towards the tokens that
// close things (and EOS) keeps them short. The mask still decides validity.
std::vector<std::pair<int32_t, float>> ClosingBias(const Fixture& f) {
  std::vector<std::pair<int32_t, float>> bias;
  for (int32_t id = 0; id < f.vocab->size(); ++id) {
    const std::string_view bytes = f.vocab->token(id);
    if (id == f.eos || bytes.find_first_of("\"]})") != std::string_view::npos) {
      bias.emplace_back(id, 6.0f);
    }
  }
  return bias;
}

struct Generated {
  std::string text;     // decoded bytes, without a final EOS
  bool finished = false;
  absl::Status status;
};

// Runs `seeds.size()` constrained sequences plus one unconstrained row in one
// executor, decoding with zero-overhead remaps, until every constrained row
// finished or `max_tokens` passed.
std::vector<Generated> Generate(const grammar::Constraint& constraint,
                                const std::vector<uint64_t>& seeds, int max_tokens) {
  Fixture& f = Shared();
  const int n = static_cast<int>(seeds.size());
  StepExecutor executor(*f.model, n + 1, f.compiler.get());
  const auto bias = ClosingBias(f);
  const std::vector<int64_t> prompt = {11, 400, 23, 7};
  std::vector<Generated> out(n);
  std::vector<bool> done(n, false);
  std::vector<int64_t> length(n + 1, 0);
  std::vector<int32_t> row_of(n + 1, -1);  // slot -> row in the previous step
  for (int step = 0; step <= max_tokens; ++step) {
    std::vector<RowPlan> rows;
    std::vector<int> slot_of_row;
    for (int s = 0; s <= n; ++s) {
      if (s < n && done[s]) continue;
      RowPlan row{.slot = s, .start_pos = length[s], .sample = true};
      if (step == 0) {
        row.tokens = prompt;
      } else {
        row.remap = row_of[s];
      }
      row.sampling.temperature = 1.0f;
      row.sampling.seed = s < n ? seeds[s] : 99;
      if (s < n) {
        row.sampling.logit_bias = bias;
        row.constraint = constraint;
        row.constrained_from = static_cast<int64_t>(prompt.size());
      }
      rows.push_back(std::move(row));
      slot_of_row.push_back(s);
    }
    if (slot_of_row.size() == 1) break;  // only the unconstrained row left
    auto result = executor.Execute(rows, {});
    if (!result.ok()) {
      for (Generated& g : out) g.status = result.status();
      return out;
    }
    for (size_t r = 0; r < rows.size(); ++r) {
      const int s = slot_of_row[r];
      length[s] += static_cast<int64_t>(rows[r].tokens.size()) + (rows[r].remap >= 0 ? 1 : 0);
      row_of[s] = static_cast<int32_t>(r);
      if (s == n) {
        EXPECT_TRUE((*result)[r].status.ok()) << (*result)[r].status;
        EXPECT_FALSE((*result)[r].finished);
        continue;
      }
      const RowOutcome& o = (*result)[r];
      if (!o.status.ok()) {
        out[s].status = o.status;
        done[s] = true;
        continue;
      }
      EXPECT_TRUE(o.token.has_value());
      if (*o.token != f.eos) out[s].text += *f.tok->DecodedBytes(*o.token);
      if (o.finished) {
        out[s].finished = true;
        done[s] = true;
      }
    }
  }
  return out;
}

constexpr int kSeeds = 3;
constexpr int kMaxTokens = 400;

std::vector<uint64_t> Seeds(uint64_t base) {
  std::vector<uint64_t> seeds;
  for (int i = 0; i < kSeeds; ++i) seeds.push_back(base * 1000 + i);
  return seeds;
}

TEST(StepExecutorGrammarTest, JsonSchemaCorpusOutputsValidate) {
  const auto& corpus = grammar::JsonSchemaCorpus();
  ASSERT_GE(corpus.size(), 50u);
  int finished = 0, total = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const grammar::CorpusSchema& entry = corpus[i];
    grammar::Constraint c{.kind = grammar::ConstraintKind::kJsonSchema, .text = entry.schema};
    const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(entry.schema);
    for (const Generated& g : Generate(c, Seeds(i), kMaxTokens)) {
      ++total;
      ASSERT_TRUE(g.status.ok()) << entry.name << ": " << g.status;
      if (!g.finished) continue;  // hit the token cap; nothing complete to check
      ++finished;
      nlohmann::ordered_json value;
      try {
        // Numbers are bounded by the grammar, so every value fits a double.
        value = nlohmann::ordered_json::parse(g.text);
      } catch (const nlohmann::json::exception& e) {
        ADD_FAILURE() << entry.name << ": not JSON: " << e.what() << ": " << g.text;
        continue;
      }
      EXPECT_EQ(grammar::testing::CheckSchema(value, schema, schema, /*strict_properties=*/true),
                "")
          << entry.name << ": " << g.text;
    }
  }
  // Nearly every sequence ends by itself; the cap is a safety net.
  EXPECT_GE(finished * 10, total * 9) << finished << " of " << total;
  std::cout << finished << " of " << total << " finished, all valid\n";
}

TEST(StepExecutorGrammarTest, RegexChoiceAndEbnfOutputsMatch) {
  const std::vector<std::string> regexes = {
      "[0-9]{3}-[0-9]{4}",
      "(yes|no|maybe)",
      "[a-z]{1,8}@[a-z]{1,8}\\.(com|org|net)",
      "\\d{4}-\\d{2}-\\d{2}",
      "(0|[1-9][0-9]{0,5})(\\.[0-9]{1,3})?",
      "#[0-9a-fA-F]{6}",
      "[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8}){0,2}",
      "(GET|POST|PUT|DELETE) /[a-z]{1,6}(/[a-z0-9]{1,6}){0,3}",
      "[01]{8}",
      "\\(\\d{3}\\) \\d{3}-\\d{4}",
      "v[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}",
      "(ab|cd){0,4}ef",
      "[a-zA-Z_][a-zA-Z0-9_]{0,15}",
      "-?[0-9]{1,4}",
      "\"[^\"\\\\]{0,20}\"",
      "[0-9]{1,3}(\\.[0-9]{1,3}){3}",
      "(true|false)",
      "[a-z]{1,8}(-[a-z]{1,8}){0,3}",
      "\\$[0-9]{1,5}\\.[0-9]{2}",
      "[A-Z]{2}[0-9]{2}( [0-9]{4}){2}",
      "(Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{1,2} (Jan|Feb|Mar|Apr)",
      "[a-f0-9]{8}-[a-f0-9]{4}-4[a-f0-9]{3}-[89ab][a-f0-9]{3}-[a-f0-9]{12}",
      "([01][0-9]|2[0-3]):[0-5][0-9]",
      "https?://[a-z]{1,10}\\.[a-z]{2,3}(/[a-z]{1,5}){0,2}",
      "(\\+|-)?[0-9]{1,6}(e[0-9]{1,2})?",
      "<[a-z]{1,5}>[a-z ]{0,10}</[a-z]{1,5}>",
      "[A-Z][0-9][A-Z] [0-9][A-Z][0-9]",
      "(a|b){0,6}c",
      "x{2,5}y?z{1,4}",
      "[A-Z ]{1,6}",
  };
  for (size_t i = 0; i < regexes.size(); ++i) {
    grammar::Constraint c{.kind = grammar::ConstraintKind::kRegex, .text = regexes[i]};
    const std::regex re(regexes[i], std::regex::ECMAScript);
    for (const Generated& g : Generate(c, Seeds(100 + i), kMaxTokens)) {
      ASSERT_TRUE(g.status.ok()) << regexes[i] << ": " << g.status;
      EXPECT_TRUE(g.finished) << regexes[i] << ": " << g.text;
      if (g.finished) {
        EXPECT_TRUE(std::regex_match(g.text, re)) << regexes[i] << ": " << g.text;
      }
    }
  }
  const std::vector<std::string> choices = {"red", "green", "blue", "light blue"};
  grammar::Constraint choice{.kind = grammar::ConstraintKind::kChoice, .choices = choices};
  for (const Generated& g : Generate(choice, Seeds(200), kMaxTokens)) {
    ASSERT_TRUE(g.status.ok()) << g.status;
    EXPECT_TRUE(g.finished);
    EXPECT_NE(std::find(choices.begin(), choices.end(), g.text), choices.end()) << g.text;
  }
  // EBNF: a list of signed integers, checked by an equivalent regex.
  grammar::Constraint ebnf{.kind = grammar::ConstraintKind::kEbnf,
                           .text = "root ::= \"[\" item (\",\" item)* \"]\"\n"
                                   "item ::= \"-\"? [1-9] [0-9]?\n"};
  const std::regex list("\\[-?[1-9][0-9]?(,-?[1-9][0-9]?)*\\]");
  for (const Generated& g : Generate(ebnf, Seeds(300), kMaxTokens)) {
    ASSERT_TRUE(g.status.ok()) << g.status;
    EXPECT_TRUE(g.finished) << g.text;
    if (g.finished) {
      EXPECT_TRUE(std::regex_match(g.text, list)) << g.text;
    }
  }
}

TEST(StepExecutorGrammarTest, RecomputeReplaysGeneratedTokensAndRejectsViolations) {
  Fixture& f = Shared();
  grammar::Constraint c{.kind = grammar::ConstraintKind::kRegex, .text = "[0-9]{3}-[0-9]{4}"};
  auto tokens_of = [&](const std::string& text) {
    auto ids = f.tok->Encode(text, /*add_special_tokens=*/false);
    EXPECT_TRUE(ids.ok());
    return std::vector<int64_t>(ids->begin(), ids->end());
  };
  const std::vector<int64_t> prompt = {11, 400, 23};
  // The prompt of a recompute holds the generated "123-" after the original
  // prompt: those are replayed through the matcher, so only digits may follow.
  std::vector<int64_t> recompute = prompt;
  for (int64_t t : tokens_of("123-")) recompute.push_back(t);
  StepExecutor executor(*f.model, 2, f.compiler.get());
  RowPlan row{.slot = 0, .start_pos = 0, .tokens = recompute, .sample = true,
              .constraint = c, .constrained_from = 3};
  row.sampling.temperature = 1.0f;
  std::string text = "123-";
  for (int step = 0; step < 10; ++step) {
    auto result = executor.Execute({row}, {});
    ASSERT_TRUE(result.ok()) << result.status();
    const RowOutcome& o = (*result)[0];
    ASSERT_TRUE(o.status.ok()) << o.status;
    if (*o.token != f.eos) text += *f.tok->DecodedBytes(*o.token);
    if (o.finished) break;
    row = RowPlan{.slot = 0, .start_pos = row.start_pos + static_cast<int64_t>(row.tokens.size()) +
                                           (row.remap >= 0 ? 1 : 0),
                  .remap = 0, .sample = true};
    row.sampling.temperature = 1.0f;
  }
  EXPECT_TRUE(std::regex_match(text, std::regex("[0-9]{3}-[0-9]{4}"))) << text;

  // A generated token the grammar forbids is that row's error; an
  // unconstrained row of the same step is unaffected.
  std::vector<int64_t> bad = prompt;
  for (int64_t t : tokens_of("12x")) bad.push_back(t);
  RowPlan violating{.slot = 0, .start_pos = 0, .tokens = bad, .sample = true, .constraint = c,
                    .constrained_from = 3};
  RowPlan plain{.slot = 1, .start_pos = 0, .tokens = prompt, .sample = true};
  auto mixed = executor.Execute({violating, plain}, {});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ((*mixed)[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE((*mixed)[0].token.has_value());
  EXPECT_TRUE((*mixed)[1].status.ok());
  EXPECT_TRUE((*mixed)[1].token.has_value());

  // A constraint that does not compile is that row's error too.
  RowPlan broken{.slot = 0, .start_pos = 0, .tokens = prompt, .sample = true,
                 .constraint = grammar::Constraint{.kind = grammar::ConstraintKind::kRegex,
                                                   .text = "(unclosed"}};
  auto failed = executor.Execute({broken, RowPlan{.slot = 1, .start_pos = 0, .tokens = prompt,
                                                  .sample = true}},
                                 {0, 1});
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ((*failed)[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*failed)[1].status.ok());

  // Without a compiler, constrained rows fail alone.
  StepExecutor plain_executor(*f.model, 1);
  auto refused = plain_executor.Execute({RowPlan{.slot = 0, .start_pos = 0, .tokens = prompt,
                                                 .sample = true, .constraint = c}},
                                        {});
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ((*refused)[0].status.code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace weir::worker
