// Decode throughput with DSpark speculative decoding on and off, in process
// on the CPU model through the worker's StepExecutor (the code a worker runs
// for a plan; no gRPC): B sequences prefilled together, then decoded greedily
// with zero-overhead remap rows until each has --new_tokens tokens. Prints
// per batch size decode tokens/s off, with every draft verified (fixed) and
// with the verify length chosen from the DSpark confidence against the
// model's cost curve (confidence), the mean verify length (drafts a
// speculative row verified), the mean accepted length (tokens it emits: 1 +
// accepted drafts), for the confidence runs the share of decode rows whose
// slot had paused drafting (worker/verify_length.h DraftPacer: drafts that
// did not pay lately; such a row verifies nothing, and counts in the verify
// and accept means as 0 and 1) and whether the outputs equal off's (batch 1: every
// prompt decoded alone in turn, summed). Before that, per
// batch size, the time to draft B sequences one Model::Draft at a time and in
// one Model::DraftBatch (what the executor does per step). --lookup_alone
// adds a run of prompt lookup without DSpark (the workers of
// --speculative=ngram) a line per batch.
//
//   tools/bazel run -c opt //tools/bench:speculative -- --dir=MODEL_DIR
//
// --profile_verify first measures the cost curve (a step of B rows of L
// positions each, L = 1 .. 1 + drafts, and one Model::Draft, for every B of
// --batches) and writes it to MODEL_DIR/verify_cost.json
// (worker/verify_length.h), which the workers load for
// --verify_length=confidence; without it the confidence runs use that file
// when the directory has one and are skipped otherwise.
//
// MODEL_DIR holds config.json and a checkpoint (a tokenizer too, for text
// prompts and the Engram map); without --dir the random-weight tiny is
// generated into a temporary directory (drafts are then rarely accepted).
//
// speculative_gpu (the same source built with WEIR_SPECULATIVE_DEVICE, tag
// gpu; .gpu_bundle/tools/) runs the same loops with the executor's decode
// backend a DeviceDecoder, as a CUDA worker of one rank does: prompts as
// device chunks, verification runs, drafts (DeviceDecoderOptions::drafting)
// and rollbacks on the device; --numerics=fast|reference. One decoder per
// mode and batch size, which every prompt of the mode reuses (a slot released
// after each run), its graphs captured by an untimed warm-up run first: a
// serving worker's decoder lives across requests, so a request does not pay
// for capturing the graphs of its shapes (--warm_decoder=false: a fresh
// decoder for every run, captures inside the timed loop, as the figures
// before 2026-12-05). Its confidence runs use the decoder's own curve, measured
// first (worker/verify_profile.h ProfileVerifyCost at B = 1, 2, 4 .. the
// largest batch), as a CUDA worker measures it at load.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/init.h"
#include "base/logging.h"
#include "tokenizer/engram_vocab.h"
#include "tokenizer/tokenizer.h"
#include "worker/model/checkpoint.h"
#include "worker/model/model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/step_executor.h"
#include "worker/verify_length.h"
#ifdef WEIR_SPECULATIVE_DEVICE
#include "worker/model/device_decoder.h"
#include "worker/verify_profile.h"
#endif

ABSL_FLAG(std::string, dir, "", "Model directory with a checkpoint (default: random tiny).");

#ifdef WEIR_SPECULATIVE_DEVICE
constexpr bool kOnDevice = true;
#else
constexpr bool kOnDevice = false;
#endif
ABSL_FLAG(std::string, config, "models/random/tiny/config.json",
          "Without --dir: the config whose random weights are generated.");
ABSL_FLAG(std::string, batches, "1,8,32,64", "Batch sizes, comma-separated.");
ABSL_FLAG(int, new_tokens, 64, "Tokens decoded per sequence.");
ABSL_FLAG(int, num_draft_tokens, 0, "Drafts verified per row; 0 = the DSpark block size.");
ABSL_FLAG(bool, profile_verify, false,
          "Measure the verify cost curve at --batches and write DIR/verify_cost.json first.");
ABSL_FLAG(std::string, machine, "", "With --profile_verify: the machine, for measured_on.");
ABSL_FLAG(std::string, prompts_file, "",
          "Text whose documents (separated by a form feed and newline, as the training "
          "corpus) are the prompts instead of the built-in ones; needs a tokenizer in --dir.");
ABSL_FLAG(int, prompt_tokens, 0,
          "With --prompts_file: each prompt is its document's first N tokens (BOS included); "
          "shorter documents are skipped. 0 = whole documents.");
ABSL_FLAG(int, max_prompts, 8, "With --prompts_file: at most this many prompts.");
ABSL_FLAG(int, ngram_lookup, 0,
          "Prompt lookup beside DSpark in the speculative runs (StepExecutor::SetNgramLookup): "
          "the match length, 0 = off.");
ABSL_FLAG(int, ngram_lookup_tokens, 0,
          "With --ngram_lookup or --lookup_alone: how many tokens a lookup proposes (0 = the "
          "drafts a row).");
ABSL_FLAG(int, ngram_lookup_max, 0,
          "With prompt lookup: the longest match tried first (lengths this .. --ngram_lookup, "
          "the longest that matches proposes); 0 = --ngram_lookup alone.");
ABSL_FLAG(bool, lookup_alone, false,
          "Also run prompt lookup alone (no DSpark drafts, the workers of --speculative=ngram): "
          "matches of --ngram_lookup tokens (0: 3), --ngram_lookup_tokens a lookup (0: the "
          "drafts a row); a line per batch after the table.");
ABSL_FLAG(std::string, outputs_file, "",
          "Write each batch's `off` outputs there, a line a sequence: the batch size, then "
          "the prompt's ids, a '|', the greedy ids (space-separated).");
#ifdef WEIR_SPECULATIVE_DEVICE
ABSL_FLAG(std::string, numerics, "fast", "The device decoder's numerics: fast or reference.");
ABSL_FLAG(bool, bf16, true, "ActivationPrecision::kBf16 (else kFp32).");
ABSL_FLAG(bool, fused_markov, false,
          "DeviceDecoderOptions::fused_markov: the Markov head of a draft block in one launch.");
ABSL_FLAG(bool, warm_decoder, true,
          "One decoder per mode and batch size, reused by every prompt and warmed by an untimed "
          "run (graphs captured before the clock starts); false: a fresh decoder a run.");
#endif

namespace {

using Clock = std::chrono::steady_clock;
using weir::worker::RowOutcome;
using weir::worker::RowPlan;
using weir::worker::StepExecutor;
using weir::worker::VerifyCostCurve;

// Text prompts (documentation-like, as the trained tiny's corpus).
const char* const kPrompts[] = {
    "NAME\n       ls - list directory contents\n\nSYNOPSIS\n       ls [OPTION]... [FILE]...",
    "The json module provides an API for converting Python objects to JSON.",
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this",
    "DESCRIPTION\n       The grep utility searches input files for lines matching a pattern",
    "This function returns a new list containing all items from the iterable in",
    "GNU GENERAL PUBLIC LICENSE\n   Version 3, 29 June 2007\n\n Copyright (C) 2007",
    "OPTIONS\n       -a, --all\n              do not ignore entries starting with",
    "Return the number of elements in the set. The set must not be modified while",
};

// A device decoder's counters (DeviceDecoderStats), and their difference
// over a timed loop.
struct DeviceCounters {
  int64_t steps = 0, draft_passes = 0, captures = 0;
  double step_seconds = 0;         // host wall time inside its steps
  double step_device_seconds = 0;  // device time of those steps
  double draft_seconds = 0;

  // Adds `sign` times `other` (-1: the counters before a loop).
  void Add(const DeviceCounters& o, int sign) {
    steps += sign * o.steps;
    draft_passes += sign * o.draft_passes;
    captures += sign * o.captures;
    step_seconds += sign * o.step_seconds;
    step_device_seconds += sign * o.step_device_seconds;
    draft_seconds += sign * o.draft_seconds;
  }
  // Steps, ms a step, draft passes, ms a pass, graphs captured.
  std::string Line() const {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%lld steps, %.3f ms a step (device %.3f), %lld draft passes, %.3f ms a pass, "
                  "%lld graphs captured while timed",
                  static_cast<long long>(steps), 1e3 * step_seconds / std::max<int64_t>(1, steps),
                  1e3 * step_device_seconds / std::max<int64_t>(1, steps),
                  static_cast<long long>(draft_passes),
                  1e3 * draft_seconds / std::max<int64_t>(1, draft_passes),
                  static_cast<long long>(captures));
    return line;
  }
};

// What a run speculates with.
struct Mode {
  int dspark = 0;         // DSpark drafts a row (SetSpeculation; 0: none)
  int lookup = 0;         // SetNgramLookup's match length (0: no lookup)
  int lookup_tokens = 0;  // and a lookup's tokens (0: dspark's)
  int lookup_max = 0;     // and the longest match tried first (0: lookup alone)

  // The most drafts a row verifies (0: not speculating).
  int verified() const {
    return lookup > 0 ? std::max(dspark, lookup_tokens > 0 ? lookup_tokens : dspark) : dspark;
  }
};

struct Result {
  double seconds = 0;
  int64_t tokens = 0;
  // Until the first sequence has its tokens (every sequence still decoding):
  // the batch's steady rate, without the tail where the sequences that
  // accepted fewer drafts finish alone.
  double steady_seconds = 0;
  int64_t steady_tokens = 0;
  int64_t rows = 0;      // decode rows run
  int64_t verified = 0;  // drafts those rows verified
  int64_t paused = 0;    // rows whose slot had paused drafting (DraftPacer)
  int64_t lookups = 0;   // blocks of drafts from prompt lookup (--ngram_lookup)
  int64_t dspark = 0;    // blocks drafted by DSpark
  std::vector<std::vector<int64_t>> outputs;
  // The device decoder's work inside the timed loops (speculative_gpu).
  std::optional<DeviceCounters> device;

  // Adds `other`'s counts (a prompt's run into the batch-1 total).
  void Add(const Result& other) {
    seconds += other.seconds;
    tokens += other.tokens;
    rows += other.rows;
    verified += other.verified;
    paused += other.paused;
    lookups += other.lookups;
    dspark += other.dspark;
    if (other.device.has_value()) {
      if (!device.has_value()) device.emplace();
      device->Add(*other.device, 1);
    }
  }
};

// The model's Engram token map (ModelOptions'), for the device decoder.
std::vector<int64_t>& EngramMap() {
  static std::vector<int64_t>* map = new std::vector<int64_t>();
  return *map;
}

// The executor's decode backend for one run of `batch` sequences: none on
// the CPU; a fresh DeviceDecoder (drafting when the mode has DSpark drafts,
// rolling back what it verifies) on the GPU. `min_positions`: at least that
// many positions a sequence.
std::unique_ptr<weir::model::DecodeBackend> MakeBackend(
    weir::model::Model& model, const std::vector<std::vector<int64_t>>& prompts, int batch,
    int new_tokens, const Mode& mode, int64_t min_positions = 0) {
#ifdef WEIR_SPECULATIVE_DEVICE
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, p.size());
  weir::model::DeviceDecoderOptions o;
  absl::StatusOr<weir::model::DecodeNumerics> numerics =
      weir::model::ParseDecodeNumerics(absl::GetFlag(FLAGS_numerics));
  WEIR_CHECK(numerics.ok()) << numerics.status();
  o.numerics = *numerics;
  const int drafts = mode.verified();
  o.max_sequences = batch;
  o.max_positions = std::max(min_positions, longest + new_tokens + 2 * drafts + 8);
  o.max_rollback = drafts;
  o.drafting = mode.dspark > 0;
  o.max_rows_per_slot = static_cast<int>(std::max<int64_t>(longest, drafts + 1));
  o.max_batch = static_cast<int>(std::max<int64_t>(
      {int64_t{batch} * (drafts + 1), o.max_rows_per_slot, model.config().dspark_block_size}));
  o.engram_token_map = EngramMap();
  o.fused_markov = absl::GetFlag(FLAGS_fused_markov);
  auto dd = weir::model::DeviceDecoder::Create(model,
                                               absl::GetFlag(FLAGS_bf16)
                                                   ? weir::model::ActivationPrecision::kBf16
                                                   : weir::model::ActivationPrecision::kFp32,
                                               o);
  WEIR_CHECK(dd.ok()) << dd.status();
  return std::move(*dd);
#else
  (void)mode;
  return nullptr;
#endif
}

std::optional<DeviceCounters> CountersOf(weir::model::DecodeBackend* backend) {
#ifdef WEIR_SPECULATIVE_DEVICE
  if (auto* dd = dynamic_cast<weir::model::DeviceDecoder*>(backend)) {
    const weir::model::DeviceDecoderStats& st = dd->stats();
    return DeviceCounters{.steps = st.steps,
                          .draft_passes = st.draft_launches,
                          .captures = st.graph_captures,
                          .step_seconds = st.host_seconds,
                          .step_device_seconds = st.device_seconds,
                          .draft_seconds = st.draft_seconds};
  }
#endif
  (void)backend;
  return std::nullopt;
}

// `batch` sequences of `prompts` (in turn) prefilled (untimed) and decoded
// to `new_tokens` each. `backend`: the executor's decode backend (null: the
// model alone); its slots 0 .. batch - 1 must be free, and are released at
// the end, so the next run may reuse it.
Result Decode(weir::model::Model& model, const std::vector<std::vector<int64_t>>& prompts,
              int batch, int new_tokens, const Mode& mode, const VerifyCostCurve* curve,
              weir::model::DecodeBackend* backend) {
  // Without a KV pool: each sequence keeps its entries in its own vectors
  // (or on the device decoder).
  StepExecutor ex(model, batch);
  if (backend != nullptr) ex.SetDecodeBackend(backend);
  WEIR_CHECK_OK(ex.SetSpeculation(mode.dspark));
  WEIR_CHECK_OK(ex.SetNgramLookup(mode.lookup, mode.lookup_tokens, mode.lookup_max));
  // What a speculative row may verify: its drafts, or a longer lookup's.
  const bool speculating = ex.max_draft_tokens() > 0;
  const int row_drafts = speculating ? ex.max_draft_tokens() : -1;
  if (curve != nullptr) ex.SetVerifyCostCurve(*curve);
  weir::worker::sampling::SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<RowPlan> rows;
  for (int s = 0; s < batch; ++s) {
    RowPlan row{.slot = s,
                .start_pos = 0,
                .tokens = prompts[s % prompts.size()],
                .sample = true,
                .sampling = greedy,
                .draft_tokens = speculating ? 0 : -1};
    rows.push_back(std::move(row));
  }
  Result r;
  r.outputs.resize(batch);
  absl::StatusOr<std::vector<RowOutcome>> out = ex.Execute(rows, {});  // prefill, untimed
  WEIR_CHECK(out.ok()) << out.status();
  const std::optional<DeviceCounters> before = CountersOf(backend);
  const auto start = Clock::now();
  while (true) {
    std::vector<RowPlan> next;
    for (int s = 0; s < batch; ++s) {
      const RowPlan* previous = nullptr;
      int32_t index = -1;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (rows[i].slot == s) previous = &rows[i], index = static_cast<int32_t>(i);
      }
      if (previous == nullptr) continue;
      const RowOutcome& o = (*out)[index];
      WEIR_CHECK(o.status.ok() && o.token.has_value()) << o.status;
      r.outputs[s].insert(r.outputs[s].end(), o.accepted.begin(), o.accepted.end());
      r.outputs[s].push_back(*o.token);
      if (previous->start_pos > 0) {
        ++r.rows;
        r.tokens += static_cast<int64_t>(o.accepted.size()) + 1;
        r.verified += o.verified_drafts;
        r.paused += o.drafts_paused ? 1 : 0;
      }
      if (static_cast<int>(r.outputs[s].size()) >= new_tokens) {
        if (r.steady_seconds == 0) {
          r.steady_seconds = std::chrono::duration<double>(Clock::now() - start).count();
          r.steady_tokens = r.tokens;
        }
        continue;
      }
      // The slot holds the prompt and every token but the last (its input).
      const int64_t start =
          static_cast<int64_t>(prompts[s % prompts.size()].size() + r.outputs[s].size()) - 1;
      next.push_back({.slot = s,
                      .start_pos = start,
                      .remap = index,
                      .sample = true,
                      .sampling = greedy,
                      .draft_tokens = row_drafts});
    }
    if (next.empty()) break;
    rows = std::move(next);
    out = ex.Execute(rows, {});
    WEIR_CHECK(out.ok()) << out.status();
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.lookups = ex.lookup_drafts();
  r.dspark = ex.dspark_drafts();
  r.device = CountersOf(backend);
  if (r.device.has_value()) r.device->Add(*before, -1);
  if (backend != nullptr) {
    for (int s = 0; s < batch; ++s) WEIR_CHECK_OK(backend->Release(s));
  }
  return r;
}

// The shortest of `runs` runs of `body`, in ms.
template <typename Body>
double BestOf(int runs, Body&& body) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    body();
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return best;
}

// The costs behind the numbers, one sequence: a 1-token forward, a
// (1 + drafts)-token forward (a verification) and one Model::Draft, in ms
// (best of 5 each, on a sequence of `prompt`).
[[maybe_unused]] void PrintCosts(weir::model::Model& model, const std::vector<int64_t>& prompt,
                                 int drafts) {
  auto seq = model.NewSequence();
  WEIR_CHECK(model.Forward(*seq, prompt, 0).ok());
  const int64_t at = seq->length();
  std::vector<int64_t> block(1 + drafts, prompt.back());
  const double one = BestOf(5, [&] {
    WEIR_CHECK(model.Forward(*seq, std::span(block).first(1), at).ok());
    WEIR_CHECK_OK(seq->Rollback(1));
  });
  const double verify = BestOf(5, [&] {
    WEIR_CHECK(model.Forward(*seq, block, at).ok());
    WEIR_CHECK_OK(seq->Rollback(1 + drafts));
  });
  const double draft = BestOf(5, [&] { WEIR_CHECK(model.Draft(*seq, prompt.back()).ok()); });
  std::printf(
      "costs, one sequence: 1-token forward %.2f ms, %d-token verify %.2f ms, "
      "draft %.2f ms\n",
      one, 1 + drafts, verify, draft);
}

// Drafting `batch` sequences (the bench's prompts, prefilled) as the executor
// did before issue 18, one Model::Draft each, and as it does now, one
// Model::DraftBatch; best of 5 each.
[[maybe_unused]] void PrintDraftCosts(weir::model::Model& model,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const std::vector<int>& batches) {
  for (int batch : batches) {
    std::vector<std::unique_ptr<weir::model::SequenceState>> seqs;
    std::vector<const weir::model::SequenceState*> states;
    std::vector<int64_t> tokens;
    for (int s = 0; s < batch; ++s) {
      const std::vector<int64_t>& prompt = prompts[s % prompts.size()];
      seqs.push_back(model.NewSequence());
      WEIR_CHECK(model.Forward(*seqs.back(), prompt, 0).ok());
      states.push_back(seqs.back().get());
      tokens.push_back(prompt.back());
    }
    const double alone = BestOf(5, [&] {
      for (int s = 0; s < batch; ++s) WEIR_CHECK(model.Draft(*states[s], tokens[s]).ok());
    });
    const double together = BestOf(5, [&] {
      for (const auto& r : model.DraftBatch(states, tokens)) WEIR_CHECK(r.ok());
    });
    std::printf(
        "drafts of %d sequences: one Model::Draft each %.2f ms, one Model::DraftBatch "
        "%.2f ms\n",
        batch, alone, together);
    std::fflush(stdout);
  }
}

// The cost curve of `model` at `batches`: best of 2 of a ForwardBatch of B
// sequences (prompts of the bench) with L positions each at their ends, and
// of one Model::DraftBatch of the B sequences, divided by B (a row's share
// of the step's draft, as the executor drafts).
VerifyCostCurve ProfileVerify(weir::model::Model& model,
                              const std::vector<std::vector<int64_t>>& prompts,
                              const std::vector<int>& batches, int drafts) {
  VerifyCostCurve curve;
  for (int batch : batches) {
    std::vector<std::unique_ptr<weir::model::SequenceState>> seqs;
    std::vector<weir::model::SequenceState*> states;
    std::vector<int64_t> starts;
    for (int s = 0; s < batch; ++s) {
      const std::vector<int64_t>& prompt = prompts[s % prompts.size()];
      seqs.push_back(model.NewSequence());
      WEIR_CHECK(model.Forward(*seqs.back(), prompt, 0).ok());
      states.push_back(seqs.back().get());
      starts.push_back(seqs.back()->length());
    }
    VerifyCostCurve::Point point{.batch = batch};
    for (int length = 1; length <= drafts + 1; ++length) {
      std::vector<std::vector<int64_t>> blocks;
      std::vector<std::span<const int64_t>> tokens;
      for (int s = 0; s < batch; ++s) {
        blocks.emplace_back(length, prompts[s % prompts.size()].back());
      }
      for (const auto& b : blocks) tokens.emplace_back(b);
      point.step_ms.push_back(BestOf(2, [&] {
        WEIR_CHECK(model.ForwardBatch(states, tokens, starts).ok());
        for (auto* state : states) WEIR_CHECK_OK(state->Rollback(length));
      }));
    }
    std::vector<const weir::model::SequenceState*> draft_states(states.begin(), states.end());
    std::vector<int64_t> next(batch);
    for (int s = 0; s < batch; ++s) next[s] = prompts[s % prompts.size()].back();
    auto draft_all = [&] {
      for (const auto& r : model.DraftBatch(draft_states, next)) WEIR_CHECK(r.ok()) << r.status();
    };
    point.draft_ms = BestOf(2, draft_all) / batch;
    std::printf("profile batch %d: draft %.2f ms, step", batch, point.draft_ms);
    for (double ms : point.step_ms) std::printf(" %.1f", ms);
    std::printf(" ms (1 .. %d positions a row)\n", drafts + 1);
    std::fflush(stdout);
    curve.points.push_back(std::move(point));
  }
  return curve;
}

int Run() {
  std::string dir = absl::GetFlag(FLAGS_dir);
  absl::StatusOr<std::unique_ptr<weir::model::Checkpoint>> checkpoint;
  if (dir.empty()) {
    const std::string tmp = std::filesystem::temp_directory_path() / "weir_speculative_bench";
    checkpoint = weir::model::GenerateAndOpenCheckpoint(absl::GetFlag(FLAGS_config), tmp, 1);
  } else {
    checkpoint = weir::model::Checkpoint::Open(dir);
  }
  WEIR_CHECK(checkpoint.ok()) << checkpoint.status();
  const weir::model::ModelConfig& config = (*checkpoint)->config();
  weir::model::ModelOptions options;
  std::vector<std::vector<int64_t>> prompts;
  if (auto tok = weir::tokenizer::Tokenizer::FromDirectory(dir); !dir.empty() && tok.ok()) {
    auto map = weir::tokenizer::EngramTokenMap(**tok, config.engram_compressed_vocab_size);
    if (map.ok()) {
      options.engram_token_map = *std::move(map);
      EngramMap() = options.engram_token_map;
    }
    std::vector<std::string> texts(std::begin(kPrompts), std::end(kPrompts));
    if (const std::string path = absl::GetFlag(FLAGS_prompts_file); !path.empty()) {
      std::ifstream in(path, std::ios::binary);
      WEIR_CHECK(in.good()) << "--prompts_file: cannot read " << path;
      const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      texts = absl::StrSplit(all, "\f\n", absl::SkipWhitespace());
    }
    const size_t want = absl::GetFlag(FLAGS_prompt_tokens);
    for (const std::string& text : texts) {
      auto ids = (*tok)->Encode(text, /*add_special_tokens=*/true);
      WEIR_CHECK(ids.ok()) << ids.status();
      if (want > 0 && ids->size() < want) continue;
      prompts.emplace_back(ids->begin(), want > 0 ? ids->begin() + want : ids->end());
      if (!absl::GetFlag(FLAGS_prompts_file).empty() &&
          prompts.size() >= static_cast<size_t>(absl::GetFlag(FLAGS_max_prompts))) {
        break;
      }
    }
    WEIR_CHECK(!prompts.empty()) << "no prompt of " << want << " tokens";
  } else {
    for (int p = 0; p < 8; ++p) {
      std::vector<int64_t> ids;
      for (int t = 0; t < 12 + p; ++t) ids.push_back((37 * p + 101 * t + 5) % config.vocab_size);
      prompts.push_back(std::move(ids));
    }
  }
  // Lookups longer than DSpark's block roll back as many positions.
  const int lookup_tokens =
      absl::GetFlag(FLAGS_ngram_lookup) > 0 || absl::GetFlag(FLAGS_lookup_alone)
          ? absl::GetFlag(FLAGS_ngram_lookup_tokens)
          : 0;
  if (lookup_tokens > config.dspark_block_size + 1) options.max_rollback = lookup_tokens;
  auto model = weir::model::Model::Create(config, **checkpoint, std::move(options));
  WEIR_CHECK(model.ok()) << model.status();
  const int drafts = absl::GetFlag(FLAGS_num_draft_tokens) > 0
                         ? absl::GetFlag(FLAGS_num_draft_tokens)
                         : static_cast<int>(config.dspark_block_size);
  const int new_tokens = absl::GetFlag(FLAGS_new_tokens);
  std::printf("model %s, greedy, %d new tokens a sequence, %d drafts a row\n",
              dir.empty() ? "random tiny" : dir.c_str(), new_tokens, drafts);
#ifndef WEIR_SPECULATIVE_DEVICE  // the model's costs on the CPU
  PrintCosts(**model, prompts[0], drafts);
#endif
  std::vector<int> batches;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int batch = 0;
    WEIR_CHECK(absl::SimpleAtoi(part, &batch) && batch > 0) << "--batches: " << part;
    batches.push_back(batch);
  }
#ifndef WEIR_SPECULATIVE_DEVICE
  PrintDraftCosts(**model, prompts, batches);
#endif
  std::optional<VerifyCostCurve> curve;
  if (absl::GetFlag(FLAGS_profile_verify)) {
    WEIR_CHECK(!dir.empty()) << "--profile_verify writes DIR/verify_cost.json: set --dir";
    std::vector<int> sorted = batches;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    curve = ProfileVerify(**model, prompts, sorted, drafts);
    curve->backend = "cpu";
    curve->model = std::filesystem::path(dir).filename().string();
    curve->measured_on = absl::GetFlag(FLAGS_machine);
    const std::string path = (std::filesystem::path(dir) / weir::worker::kVerifyCostFile).string();
    std::ofstream(path) << weir::worker::VerifyCostCurveToJson(*curve);
    std::printf("wrote %s\n", path.c_str());
  } else if (kOnDevice) {
    // As a CUDA worker does at load: the decoder's own curve (the model
    // directory's was measured on the CPU and says nothing about it).
#ifdef WEIR_SPECULATIVE_DEVICE
    std::vector<int64_t> sizes;
    const int largest = *std::max_element(batches.begin(), batches.end());
    for (int b = 1; b <= largest; b *= 2) sizes.push_back(b);
    if (sizes.back() != largest) sizes.push_back(largest);
    weir::worker::VerifyProfileOptions profile{
        .drafts = drafts, .reps = 3, .backend = "cuda", .measured_on = "speculative_gpu"};
    std::unique_ptr<weir::model::DecodeBackend> backend = MakeBackend(
        **model, prompts, largest, new_tokens, Mode{.dspark = drafts},
        weir::worker::ProfileVerifyPositions(static_cast<int64_t>(sizes.size()), profile) + drafts +
            2);
    absl::StatusOr<VerifyCostCurve> measured =
        weir::worker::ProfileVerifyCost(*backend, sizes, profile);
    WEIR_CHECK(measured.ok()) << measured.status();
    std::printf("the decoder's verify cost curve (for the conf columns): %s\n",
                weir::worker::VerifyCostCurveToJson(*measured).c_str());
    curve = std::move(*measured);
#endif
  } else if (!dir.empty()) {
    absl::StatusOr<VerifyCostCurve> loaded = weir::worker::LoadVerifyCostCurve(dir);
    if (loaded.ok()) {
      curve = std::move(*loaded);
    } else {
      std::printf("no confidence runs: %s\n", loaded.status().ToString().c_str());
    }
  }
  // Per mode: tokens/s, mean verify length, mean accepted length.
#ifdef WEIR_SPECULATIVE_DEVICE
  const bool warm_decoder = absl::GetFlag(FLAGS_warm_decoder);
  std::printf("decoders: %s\n", warm_decoder ? "one a mode and batch, warmed untimed"
                                             : "a fresh one a run, captures timed");
#else
  constexpr bool warm_decoder = false;
#endif
  std::printf("%6s %10s | %10s %6s %6s | %10s %6s %6s %6s | %5s | steady tok/s: off fixed\n",
              "batch", "off tok/s", "fixed tok/s", "verify", "accept", "conf tok/s", "verify",
              "accept", "paused", "equal");
  for (int batch : batches) {
    // Batch 1 decodes each prompt alone in turn (one prompt's acceptance is
    // not the model's); larger batches take the prompts in turn.
    auto run = [&](const Mode& d, const VerifyCostCurve* c) {
      // On the device with --warm_decoder: one decoder for the mode, its
      // graphs captured by the same run untimed (batch 1: the first prompt).
      std::unique_ptr<weir::model::DecodeBackend> shared;
      if (kOnDevice && warm_decoder) {
        shared = MakeBackend(**model, prompts, batch, new_tokens, d);
        (void)Decode(**model, batch > 1 ? prompts : std::vector<std::vector<int64_t>>{prompts[0]},
                     batch, new_tokens, d, c, shared.get());
      }
      auto decode = [&](const std::vector<std::vector<int64_t>>& ps) {
        if (shared != nullptr) return Decode(**model, ps, batch, new_tokens, d, c, shared.get());
        std::unique_ptr<weir::model::DecodeBackend> fresh =
            MakeBackend(**model, ps, batch, new_tokens, d);
        return Decode(**model, ps, batch, new_tokens, d, c, fresh.get());
      };
      if (batch > 1) return decode(prompts);
      Result all;
      for (const std::vector<int64_t>& prompt : prompts) {
        Result one = decode({prompt});
        all.Add(one);
        all.steady_seconds += one.seconds;
        all.steady_tokens += one.tokens;
        all.outputs.push_back(std::move(one.outputs[0]));
      }
      return all;
    };
    const Result off = run(Mode{}, nullptr);
    if (const std::string path = absl::GetFlag(FLAGS_outputs_file); !path.empty()) {
      std::ofstream out(path, std::ios::app);
      for (size_t s = 0; s < off.outputs.size(); ++s) {
        out << batch;
        for (int64_t id : prompts[s % prompts.size()]) out << ' ' << id;
        out << " |";
        for (int64_t id : off.outputs[s]) out << ' ' << id;
        out << '\n';
      }
      WEIR_CHECK(out.good()) << "--outputs_file: cannot write " << path;
    }
    const Mode dspark{.dspark = drafts,
                      .lookup = absl::GetFlag(FLAGS_ngram_lookup),
                      .lookup_tokens = absl::GetFlag(FLAGS_ngram_lookup_tokens),
                      .lookup_max = absl::GetFlag(FLAGS_ngram_lookup_max)};
    const Result fixed = run(dspark, nullptr);
    std::optional<Result> conf;
    if (curve.has_value()) conf = run(dspark, &*curve);
    // Prompt lookup alone, without DSpark's drafts.
    std::optional<Result> alone, alone_conf;
    if (absl::GetFlag(FLAGS_lookup_alone)) {
      const Mode lookup{
          .lookup = absl::GetFlag(FLAGS_ngram_lookup) > 0 ? absl::GetFlag(FLAGS_ngram_lookup) : 3,
          .lookup_tokens = absl::GetFlag(FLAGS_ngram_lookup_tokens) > 0
                               ? absl::GetFlag(FLAGS_ngram_lookup_tokens)
                               : drafts,
          .lookup_max = absl::GetFlag(FLAGS_ngram_lookup_max)};
      alone = run(lookup, nullptr);
      if (curve.has_value()) {
        // The confidence length against the same steps without a draft pass
        // (as a worker of lookup alone measures its curve).
        VerifyCostCurve no_pass = *curve;
        for (VerifyCostCurve::Point& p : no_pass.points) p.draft_ms = 0;
        alone_conf = run(lookup, &no_pass);
      }
    }
    bool equal = true;
    for (size_t s = 0; s < off.outputs.size(); ++s) {
      const auto& a = off.outputs[s];
      equal = equal && std::equal(a.begin(), a.begin() + new_tokens, fixed.outputs[s].begin());
      if (conf.has_value()) {
        equal = equal && std::equal(a.begin(), a.begin() + new_tokens, conf->outputs[s].begin());
      }
      for (const std::optional<Result>* r : {&alone, &alone_conf}) {
        if (r->has_value()) {
          equal = equal && std::equal(a.begin(), a.begin() + new_tokens, (*r)->outputs[s].begin());
        }
      }
    }
    auto per_row = [](int64_t n, const Result& r) {
      return static_cast<double>(n) / static_cast<double>(std::max<int64_t>(1, r.rows));
    };
    std::printf("%6d %10.1f | %10.1f %6.2f %6.2f |", batch, off.tokens / off.seconds,
                fixed.tokens / fixed.seconds, per_row(fixed.verified, fixed),
                per_row(fixed.tokens, fixed));
    if (conf.has_value()) {
      std::printf(" %10.1f %6.2f %6.2f %5.0f%% |", conf->tokens / conf->seconds,
                  per_row(conf->verified, *conf), per_row(conf->tokens, *conf),
                  100 * per_row(conf->paused, *conf));
    } else {
      std::printf(" %10s %6s %6s %6s |", "-", "-", "-", "-");
    }
    auto steady = [](const Result& r) {
      return r.steady_seconds > 0 ? r.steady_tokens / r.steady_seconds : r.tokens / r.seconds;
    };
    std::printf(" %5s | %10.1f %10.1f\n", equal ? "yes" : "NO", steady(off), steady(fixed));
    if (absl::GetFlag(FLAGS_ngram_lookup) > 0) {
      for (const Result* run :
           {&fixed, conf.has_value() ? &*conf : static_cast<const Result*>(nullptr)}) {
        if (run == nullptr) continue;
        std::printf("       %s: %lld blocks of drafts from prompt lookup, %lld from DSpark\n",
                    run == &fixed ? "fixed" : "conf", static_cast<long long>(run->lookups),
                    static_cast<long long>(run->dspark));
      }
    }
    for (const std::optional<Result>* r : {&alone, &alone_conf}) {
      if (!r->has_value()) continue;
      const Result& a = **r;
      std::printf(
          "       lookup alone, %s: %.1f tok/s (%.2fx off), verify %.2f, accept %.2f, %lld "
          "lookups over %lld decode rows (steady %.1f tok/s)\n",
          r == &alone ? "fixed" : "conf", a.tokens / a.seconds,
          (a.tokens / a.seconds) / (off.tokens / off.seconds), per_row(a.verified, a),
          per_row(a.tokens, a), static_cast<long long>(a.lookups), static_cast<long long>(a.rows),
          steady(a));
    }
    // The decoders' work in the timed loops; conf's too: rows verifying
    // different lengths make steps of other sizes, whose graphs a warm-up
    // may not have captured.
    const std::pair<const char*, const Result*> decoders[] = {
        {"off", &off},
        {"fixed", &fixed},
        {"conf", conf.has_value() ? &*conf : nullptr},
        {"alone", alone.has_value() ? &*alone : nullptr}};
    for (const auto& [name, run] : decoders) {
      if (run != nullptr && run->device.has_value()) {
        std::printf("       %s: %s\n", name, run->device->Line().c_str());
      }
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  weir::InitProcess(argc, argv, "speculative [--dir=MODEL_DIR] [--batches=1,8,32,64]",
                    "speculative");
  return Run();
}
