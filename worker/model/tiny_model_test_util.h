// worker/model/tiny_model_test_util.h
//
// Fixtures shared by the model tests: the tiny checkpoint (generated once per
// test binary and seed under TEST_TMPDIR), models over a checkpoint (the
// CPU reference of the GPU tests among them), seeded random token ids, and
// the logit-row comparisons of the backend tests.
//
// Thread safety: TinyCheckpoint is safe to call from several threads.

#ifndef WEIR_WORKER_MODEL_TINY_MODEL_TEST_UTIL_H_
#define WEIR_WORKER_MODEL_TINY_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/model/checkpoint.h"
#include "worker/model/model.h"

namespace weir::model {

// The tiny checkpoint of models/random/tiny/config.json generated with `seed`; lives
// until the process ends. A generation failure is a test failure.
const Checkpoint& TinyCheckpoint(uint64_t seed);

// The same for models/small/config.json (about 2 GB of fp32 weights once
// loaded: GPU tests), or null after a generation failure (a test failure).
const Checkpoint* SmallCheckpoint(uint64_t seed);

// The checkpoint of models/<model>/config.json with `edits` applied (each
// replaces the first occurrence of its JSON text), generated with `seed` once
// per `name` (which must identify the model, the edits and the seed) under
// TEST_TMPDIR. Null, with a test failure, when an edit does not apply or the
// generation fails.
const Checkpoint* DerivedCheckpoint(const std::string& model, const std::string& name,
                                    const std::vector<std::pair<std::string, std::string>>& edits,
                                    uint64_t seed);

// The trained tiny of models/tiny (a test's data must hold //models:tiny),
// opened once and kept for the process; null after a failure (a test
// failure).
const Checkpoint* TrainedTinyCheckpoint();

// Token id -> Engram compressed id of models/tiny's tokenizer
// (tokenizer::BuildEngramVocab, as the worker builds it), for
// ModelOptions::engram_token_map; empty after a failure (a test failure).
std::vector<int64_t> TrainedTinyEngramMap();

// The first eight prompts of the trained tiny's golden file (held-out text,
// 20 to 61 tokens; a test's data must hold //tests/golden:tiny_trained);
// fewer after a failure (a test failure).
std::vector<std::vector<int64_t>> TrainedTinyPrompts();

// A Model over `ckpt` with `options`, or null after a creation failure (a
// test failure).
std::unique_ptr<Model> NewModelOrFail(const Checkpoint& ckpt, ModelOptions options = {});

// The CPU reference of the GPU tests: `ckpt` at `precision` on CpuOps with
// row-stable logits (RowStableGemm's bits, which the device kernels keep) and
// `engram_token_map` (ModelOptions'; empty: the identity); null after a
// creation failure (a test failure).
std::unique_ptr<Model> RowStableCpuModel(const Checkpoint& ckpt, ActivationPrecision precision,
                                         std::vector<int64_t> engram_token_map = {});

// `n` token ids drawn uniformly from [0, max_id] with `seed`.
std::vector<int64_t> RandomTokens(int n, uint32_t seed, int64_t max_id = 4095);

// The greedy token of a logit row [n] (the first maximum).
int64_t ArgmaxRow(const float* row, int64_t n);

// max |a - b| / max |b| over a row [n] (infinity if `a` holds a non-finite value).
double RowRelativeDifference(const float* a, const float* b, int64_t n);

// ||a - b|| / ||b|| (Euclidean) over [n], ||a - b|| when b is all zero;
// infinity if the difference is not finite.
double RelativeL2(const float* a, const float* b, int64_t n);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_TINY_MODEL_TEST_UTIL_H_
