// grammar/compiler_test.cc

#include "grammar/compiler.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grammar/matcher.h"
#include "grammar/test_util.h"
#include "gtest/gtest.h"

namespace weir::grammar {
namespace {

Constraint Regex(std::string text) {
  Constraint c;
  c.kind = ConstraintKind::kRegex;
  c.text = std::move(text);
  return c;
}

TEST(CompilerTest, CompilesEveryKindAndCachesByValue) {
  GrammarCompiler compiler(testing::TestVocabulary());
  Constraint schema{ConstraintKind::kJsonSchema, R"({"type":"integer"})", {}};
  Constraint object{ConstraintKind::kJsonObject, "", {}};
  Constraint ebnf{ConstraintKind::kEbnf, "root ::= \"a\"+", {}};
  Constraint choice{ConstraintKind::kChoice, "", {"yes", "no"}};
  for (const Constraint& c : {Regex("[0-9]+"), schema, object, ebnf, choice}) {
    CompileResult r = compiler.Compile(c);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(compiler.Compile(c)->get(), r->get());  // cache hit: same grammar
  }
  EXPECT_EQ(compiler.cache_entries(), 5);
  Matcher m(*compiler.Compile(choice));
  EXPECT_TRUE(m.AcceptBytes("yes").ok());
  EXPECT_TRUE(m.IsTerminated());
}

TEST(CompilerTest, ErrorsReachOnlyTheirRequestAndAreCached) {
  GrammarCompiler compiler(testing::TestVocabulary());
  CompileFuture bad = compiler.CompileAsync(Regex("(unclosed"));
  CompileFuture good = compiler.CompileAsync(Regex("ok"));
  EXPECT_EQ(bad.Wait().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(good.Wait().ok());
  EXPECT_TRUE(bad.Ready());
  EXPECT_TRUE(bad.WaitFor(absl::ZeroDuration()));
  EXPECT_EQ(compiler.cache_entries(), 2);
}

TEST(CompilerTest, HugeAlternationsAreTooComplex) {
  CompilerOptions options;
  options.grammar_limits.max_exprs = 20000;
  GrammarCompiler compiler(testing::TestVocabulary(), options);
  std::string schema = R"({"enum":[)";
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&schema, i ? "," : "", "\"value_", i, "\"");
  schema += "]}";
  CompileResult r = compiler.Compile(Constraint{ConstraintKind::kJsonSchema, schema, {}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("GRAMMAR_TOO_COMPLEX"), std::string::npos);
  r = compiler.Compile(Regex("((a{1000}){1000}){1000}"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("GRAMMAR_TOO_COMPLEX"), std::string::npos);
}

TEST(CompilerTest, CompileTimeLimit) {
  CompilerOptions options;
  options.compile_timeout = absl::ZeroDuration();
  GrammarCompiler compiler(testing::TestVocabulary(), options);
  CompileResult r = compiler.Compile(Regex("abc"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("GRAMMAR_TOO_COMPLEX: compile exceeded"),
            std::string::npos);
}

TEST(CompilerTest, CacheStaysWithinByteBudget) {
  CompilerOptions options;
  options.cache_bytes = 64 << 10;
  // Caches are built below by the test itself, so the sizes are deterministic.
  options.precompute_budget = absl::ZeroDuration();
  GrammarCompiler compiler(testing::TestVocabulary(), options);
  std::vector<std::shared_ptr<const CompiledGrammar>> held;
  for (int i = 0; i < 200; ++i) {
    CompileResult r = compiler.Compile(Regex(absl::StrCat("[a-z]{", i % 50 + 1, "}x", i)));
    ASSERT_TRUE(r.ok()) << r.status();
    Matcher m(*r);  // builds a token cache, so entries grow after insertion
    std::vector<uint32_t> mask((*r)->vocab().mask_words());
    m.FillNextTokenBitmask(mask);
    if (i == 0) held.push_back(*r);
  }
  compiler.Compile(Regex("final")).IgnoreError();
  EXPECT_LE(compiler.cache_bytes(), options.cache_bytes);
  EXPECT_LT(compiler.cache_entries(), 200);
  // An evicted grammar stays usable by whoever still holds it.
  Matcher m(held[0]);
  EXPECT_TRUE(m.AcceptBytes("ax0").ok());
}

TEST(CompilerTest, MatchersOnManyThreadsShareOneGrammar) {
  // Token caches are built lazily by whichever thread needs them first.
  CompilerOptions options;
  options.precompute_budget = absl::ZeroDuration();
  GrammarCompiler compiler(testing::TestVocabulary(), options);
  Constraint c{ConstraintKind::kJsonSchema,
               R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array",)"
               R"("items":{"type":"integer"}}},"required":["a","b"]})",
               {}};
  auto g = compiler.Compile(c);
  ASSERT_TRUE(g.ok());
  const std::string text = R"({"a":"xyz","b":[1,22,333]})";
  std::vector<std::vector<uint32_t>> masks(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Matcher m(*g);
      std::vector<uint32_t> mask((*g)->vocab().mask_words());
      for (char ch : text) {
        m.FillNextTokenBitmask(mask);
        masks[t].insert(masks[t].end(), mask.begin(), mask.end());
        if (!m.AcceptBytes(std::string(1, ch)).ok()) return;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(masks[t], masks[0]);
  EXPECT_EQ(masks[0].size(), text.size() * (*g)->vocab().mask_words());
}

TEST(CompilerTest, PendingQueueIsBounded) {
  CompilerOptions options;
  options.num_threads = 1;
  options.max_pending = 4;
  GrammarCompiler compiler(testing::TestVocabulary(), options);
  int exhausted = 0, first_exhausted = -1;
  std::vector<CompileFuture> futures;
  for (int i = 0; i < 200; ++i) {
    futures.push_back(compiler.CompileAsync(Regex(absl::StrCat("p", i))));
  }
  for (int i = 0; i < 200; ++i) {
    CompileResult r = futures[i].Wait();
    if (r.ok()) continue;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
    if (first_exhausted < 0) first_exhausted = i;
    ++exhausted;
  }
  ASSERT_GT(exhausted, 0);
  EXPECT_EQ(compiler.cache_entries(), 200 - exhausted);
  // Not cached as an error: once the queue drained, the same constraint compiles.
  EXPECT_TRUE(compiler.Compile(Regex(absl::StrCat("p", first_exhausted))).ok());
}

TEST(CompilerTest, ShutdownWithQueuedWorkReleasesWaiters) {
  std::vector<CompileFuture> futures;
  {
    CompilerOptions options;
    options.num_threads = 1;
    GrammarCompiler compiler(testing::TestVocabulary(), options);
    for (int i = 0; i < 50; ++i)
      futures.push_back(compiler.CompileAsync(Regex(absl::StrCat("q", i))));
  }
  for (const CompileFuture& f : futures) {
    CompileResult r = f.Wait();  // never hangs: compiled or cancelled
    EXPECT_TRUE(r.ok() || r.status().code() == absl::StatusCode::kCancelled) << r.status();
  }
}

}  // namespace
}  // namespace weir::grammar
