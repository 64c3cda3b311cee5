#include "worker/ngram_lookup.h"

#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The proposal by brute force: the latest end e < size - 1 (and e >= size -
// 1 - window) whose n tokens equal the last n, then up to k tokens after it.
std::vector<int64_t> BruteForce(const std::vector<int64_t>& h, int n, int k,
                                int64_t window = kDefaultNgramWindow) {
  const int64_t size = static_cast<int64_t>(h.size());
  for (int64_t e = size - 2; e >= n - 1 && e >= size - 1 - window; --e) {
    bool same = true;
    for (int i = 0; i < n && same; ++i) same = h[e - i] == h[size - 1 - i];
    if (!same) continue;
    // Past the end the sequence is taken to repeat with period size - 1 - e.
    std::vector<int64_t> out;
    std::vector<int64_t> ext = h;
    for (int j = 0; j < k; ++j) {
      ext.push_back(ext[e + 1 + j]);
      out.push_back(ext.back());
    }
    return out;
  }
  return {};
}

// The lengths max_n .. n in turn: the first that matches proposes.
std::vector<int64_t> BruteForceRange(const std::vector<int64_t>& h, int n, int max_n, int k,
                                     int64_t window = kDefaultNgramWindow) {
  for (int len = max_n; len >= n; --len) {
    std::vector<int64_t> out = BruteForce(h, len, k, window);
    if (!out.empty()) return out;
  }
  return {};
}

TEST(NgramIndexTest, ProposesWhatFollowedTheLastOccurrence) {
  NgramIndex index;
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 1, 2};
  EXPECT_THAT(index.Propose(prompt, {}, 3, 3, 5), ElementsAre(4, 5, 1, 2, 3));
  // Two tokens proposed at most.
  NgramIndex two;
  EXPECT_THAT(two.Propose(prompt, {}, 3, 3, 2), ElementsAre(4, 5));
}

TEST(NgramIndexTest, TheMostRecentOccurrenceWins) {
  NgramIndex index;
  // "8 9" is followed by 1 first, by 2 later.
  const std::vector<int32_t> prompt = {8, 9, 1, 8, 9, 2, 8};
  EXPECT_THAT(index.Propose(prompt, {}, 9, 2, 1), ElementsAre(2));
}

TEST(NgramIndexTest, AContinuationPastTheEndRepeatsTheLoop) {
  NgramIndex index;
  const std::vector<int32_t> prompt = {7, 8, 9, 7, 8};
  EXPECT_THAT(index.Propose(prompt, {}, 9, 2, 5), ElementsAre(7, 8, 9, 7, 8));
}

TEST(NgramIndexTest, NothingWithoutARepeatOrWithBadArguments) {
  NgramIndex index;
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  EXPECT_THAT(index.Propose(prompt, {}, 5, 2, 5), IsEmpty());
  EXPECT_THAT(index.Propose({}, {}, 5, 1, 5), IsEmpty());  // one token: nothing before
  const std::vector<int32_t> loop = {1, 1, 1};
  EXPECT_THAT(index.Propose(loop, {}, 1, 0, 5), IsEmpty());
  EXPECT_THAT(index.Propose(loop, {}, 1, kMaxNgramMatch + 1, 5), IsEmpty());
  EXPECT_THAT(index.Propose(loop, {}, 1, 2, 0), IsEmpty());
  EXPECT_THAT(index.Propose(loop, {}, 1, 2, 5), ElementsAre(1, 1, 1, 1, 1));
}

TEST(NgramIndexTest, OutputAndLastTokenAreHistoryToo) {
  NgramIndex index;
  const std::vector<int32_t> prompt = {5, 6};
  const std::vector<int32_t> output = {7, 5};
  EXPECT_THAT(index.Propose(prompt, output, 6, 2, 4), ElementsAre(7, 5, 6, 7));
}

// Growing histories (the executor's pattern: a prompt in chunks, then a few
// tokens a step) give what a fresh index and brute force give, for every n.
// A range of lengths: the longest match wins over a more recent shorter
// one, and a shorter one proposes where no longer one matches.
TEST(NgramIndexTest, TheLongestMatchWins) {
  // "2 3" last occurred before 8; "1 2 3" before 7.
  const std::vector<int32_t> prompt = {1, 2, 3, 7, 5, 2, 3, 8, 1, 2};
  NgramIndex longest;
  EXPECT_THAT(longest.Propose(prompt, {}, 3, 1, 1, 3), ElementsAre(7));
  NgramIndex two;
  EXPECT_THAT(two.Propose(prompt, {}, 3, 2, 1), ElementsAre(8));
  // No length of 1 .. 3 ends in "1 2 6" before: nothing.
  NgramIndex none;
  EXPECT_THAT(none.Propose(prompt, {}, 6, 1, 1, 3), IsEmpty());
  // "5 9 4 5 4": neither "4 5 4" nor "5 4" occurred before; "4" did, and 5, 4
  // followed it.
  const std::vector<int32_t> fives = {5, 9, 4, 5};
  NgramIndex one;
  EXPECT_THAT(one.Propose(fives, {}, 4, 1, 2, 3), ElementsAre(5, 4));
  // Lengths past kMaxNgramMatch propose nothing.
  EXPECT_THAT(one.Propose(fives, {}, 4, 1, 2, kMaxNgramMatch + 1), IsEmpty());
}

// Propose reports how far the match reaches back, past the length that
// matched, up to kMaxNgramMatch; the lookup confidence grows with it.
TEST(NgramIndexTest, TheExtentOfAMatch) {
  // "4 5 6" before 9, and again at the end: a 1-token lookup matches "6",
  // which reaches 3 tokens back.
  const std::vector<int32_t> prompt = {1, 4, 5, 6, 9, 2, 4, 5};
  NgramIndex index;
  int extent = -1;
  EXPECT_THAT(index.Propose(prompt, {}, 6, 1, 2, 0, &extent), ElementsAre(9, 2));
  EXPECT_EQ(extent, 3);
  // A loop reaches as far as the index allows.
  const std::vector<int32_t> loop(40, 7);
  NgramIndex looping;
  EXPECT_THAT(looping.Propose(loop, {}, 7, 2, 1, 0, &extent), ElementsAre(7));
  EXPECT_EQ(extent, kMaxNgramMatch);
  float previous = -100;
  for (int e = 1; e <= kMaxNgramMatch; ++e) {
    EXPECT_GE(LookupDraftConfidence(e, 0), previous) << e;
    previous = LookupDraftConfidence(e, 0);
    EXPECT_GE(LookupDraftConfidence(e, 1), LookupDraftConfidence(e, 0)) << e;
  }
}

TEST(NgramIndexTest, IncrementalEqualsFreshAndBruteForce) {
  std::mt19937 rng(7);
  const std::pair<int, int> ranges[] = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {1, 4}, {2, 3}};
  // The default window (all of these histories), and one of 7 positions:
  // older occurrences are forgotten, and so are their entries.
  for (const int64_t window : {kDefaultNgramWindow, int64_t{7}}) {
    for (const auto& [n, max_n] : ranges) {
      for (int trial = 0; trial < 20; ++trial) {
        std::uniform_int_distribution<int> token(0, 2 + trial % 4);
        std::uniform_int_distribution<int> grow(1, 6);
        std::vector<int32_t> prompt, output;
        NgramIndex incremental(window);
        int proposals = 0;
        for (int step = 0; step < 60; ++step) {
          std::vector<int32_t>& into = step < 5 ? prompt : output;
          for (int g = grow(rng); g > 0; --g) into.push_back(token(rng));
          const int64_t last = token(rng);
          std::vector<int64_t> h(prompt.begin(), prompt.end());
          h.insert(h.end(), output.begin(), output.end());
          h.push_back(last);
          const std::vector<int64_t> want = BruteForceRange(h, n, max_n, 5, window);
          NgramIndex fresh(window);
          ASSERT_EQ(fresh.Propose(prompt, output, last, n, 5, max_n), want)
              << "n " << n << ".." << max_n << " window " << window << " step " << step;
          // As the executor does while a prompt's chunks arrive: index what
          // is known first (sometimes), then propose after the sample.
          if (step % 3 != 1) {
            incremental.Index(prompt, output, n, max_n);
            const int64_t known = static_cast<int64_t>(prompt.size() + output.size());
            if (known >= n) {
              EXPECT_EQ(incremental.indexed(), known);
            }
          }
          ASSERT_EQ(incremental.Propose(prompt, output, last, n, 5, max_n), want)
              << "n " << n << ".." << max_n << " window " << window << " step " << step;
          if (static_cast<int>(h.size()) > n) {
            EXPECT_EQ(incremental.indexed(), static_cast<int64_t>(h.size()) - 1);
          }
          EXPECT_LE(incremental.entries(), window * (max_n - n + 1));
          proposals += want.empty() ? 0 : 1;
          // `last` becomes history only if the next step's output took it.
          if (step % 2 == 0) output.push_back(static_cast<int32_t>(last));
        }
        // (A 7-position window may see no repeat of 4 tokens in a history.)
        if (window == kDefaultNgramWindow) {
          EXPECT_GT(proposals, 0);
        }
      }
    }
  }
}

// A window keeps the latest end positions only: an occurrence further back
// is forgotten (and its entry dropped), a newer one within it still found.
TEST(NgramIndexTest, AWindowForgetsOlderOccurrences) {
  // "1 2" ends at 1, then the history runs 6 positions on; the last "1 2"
  // looks back over ends 3 .. 7 with a window of 5.
  const std::vector<int32_t> prompt = {1, 2, 9, 5, 5, 5, 5, 1};
  NgramIndex near(5);
  EXPECT_THAT(near.Propose(prompt, {}, 2, 2, 1), IsEmpty());
  NgramIndex far(6);  // ends 2 .. 7: still not 1
  EXPECT_THAT(far.Propose(prompt, {}, 2, 2, 1), IsEmpty());
  NgramIndex whole(7);  // ends 1 .. 7
  EXPECT_THAT(whole.Propose(prompt, {}, 2, 2, 1), ElementsAre(9));
  // Entries: one a position of the window, for each length.
  NgramIndex bounded(4);
  const std::vector<int32_t> distinct = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  EXPECT_THAT(bounded.Propose(distinct, {}, 20, 1, 1, 2), IsEmpty());
  EXPECT_EQ(bounded.entries(), 4 + 4);
}

// Index alone, then Propose with the sample: the same as Propose alone.
TEST(NgramIndexTest, IndexThenProposeEqualsPropose) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 1, 2, 3, 9, 1, 2};
  NgramIndex indexed, direct;
  indexed.Index(std::span(prompt).first(4), {}, 2);  // a first chunk
  indexed.Index(prompt, {}, 2);                      // the whole prompt
  EXPECT_EQ(indexed.indexed(), static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(indexed.Propose(prompt, {}, 3, 2, 3), direct.Propose(prompt, {}, 3, 2, 3));
  EXPECT_THAT(direct.Propose(prompt, {}, 3, 2, 3), ElementsAre(9, 1, 2));
}

// A history that is not the previous one extended (another sequence, or a
// prompt that grew after output was indexed) is indexed afresh.
TEST(NgramIndexTest, AChangedHistoryIsIndexedAfresh) {
  NgramIndex index;
  const std::vector<int32_t> a = {1, 2, 3, 1, 2, 3, 1, 2};
  EXPECT_THAT(index.Propose(a, {}, 3, 3, 1), ElementsAre(1));
  const std::vector<int32_t> shorter = {4, 5, 4};
  EXPECT_THAT(index.Propose(shorter, {}, 5, 2, 3), ElementsAre(4, 5, 4));
  const std::vector<int32_t> prompt = {1, 2};
  const std::vector<int32_t> output = {9, 1, 2};
  EXPECT_THAT(index.Propose(prompt, output, 9, 2, 1), ElementsAre(1));
  const std::vector<int32_t> grown = {1, 2, 7};  // the prompt took a token: positions move
  EXPECT_THAT(index.Propose(grown, output, 9, 2, 1), IsEmpty());  // "2 9" never occurred
}

}  // namespace
}  // namespace weir::worker
