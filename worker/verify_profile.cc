#include "worker/verify_profile.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace weir::worker {
namespace {

using Clock = std::chrono::steady_clock;

// The fastest of reps timed runs of `body` after one untimed run, in ms.
template <typename Body>
absl::StatusOr<double> Fastest(int reps, Body&& body) {
  double best = 0;
  for (int i = 0; i <= reps; ++i) {
    const auto t0 = Clock::now();
    if (absl::Status s = body(); !s.ok()) return s;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i == 1 || (i > 1 && ms < best)) best = ms;
  }
  return best;
}

}  // namespace

int64_t ProfileVerifyPositions(int64_t batch_sizes, const VerifyProfileOptions& options) {
  const int64_t rows = options.drafts + 1;
  return 2 + batch_sizes * rows * (options.reps + 1) + rows;
}

absl::StatusOr<VerifyCostCurve> ProfileVerifyCost(model::DecodeBackend& backend,
                                                  std::span<const int64_t> batches,
                                                  const VerifyProfileOptions& options) {
  const int drafts = options.drafts;
  if (drafts < 1 || options.reps < 1 || options.blocks_per_slot < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ProfileVerifyCost: drafts ", drafts,
                                                   " and reps ", options.reps,
                                                   " must be >= 1, blocks_per_slot >= 0"));
  }
  // A backend that only rolls back (prompt lookup alone) is measured without
  // a draft pass: draft_ms 0.
  const bool drafting = backend.drafts();
  if ((!drafting && backend.max_rollback() < drafts) || backend.max_rows_per_slot() < drafts + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ProfileVerifyCost: the backend must draft or roll back ", drafts, " positions, and take ",
        drafts + 1, " rows a slot (drafts: ", drafting, ", rollback ", backend.max_rollback(),
        ", rows a slot ", backend.max_rows_per_slot(), ")"));
  }
  if (backend.takes_block_tables() && options.blocks_per_slot < 1) {
    return absl::InvalidArgumentError("ProfileVerifyCost: a paged backend needs blocks_per_slot");
  }
  std::vector<int64_t> sizes;
  int64_t previous = 0;
  for (int64_t b : batches) {
    if (b <= previous) {
      return absl::InvalidArgumentError("ProfileVerifyCost: batch sizes must increase from 1");
    }
    previous = b;
    if (b <= backend.max_sequences() && b * (drafts + 1) <= backend.max_batch()) {
      sizes.push_back(b);
    }
  }
  if (sizes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ProfileVerifyCost: no batch size fits the backend (", backend.max_sequences(),
        " sequences, ", backend.max_batch(), " rows a step, ", drafts + 1, " rows a sequence)"));
  }
  const int slots = static_cast<int>(sizes.back());
  int touched = 0;  // slots given a table or started: released on every return
  absl::Cleanup release = [&] {
    for (int s = 0; s < touched; ++s) backend.Release(s).IgnoreError();
  };
  // Every slot holds two positions (a sequence drafts from two on), then
  // one more after each timed step.
  std::vector<int64_t> held(slots, 2);
  for (int s = 0; s < slots; ++s) {
    touched = s + 1;
    if (backend.takes_block_tables()) {
      std::vector<int32_t> table(options.blocks_per_slot);
      std::iota(table.begin(), table.end(), static_cast<int32_t>(s * options.blocks_per_slot));
      if (absl::Status st = backend.SetBlockTable(s, table); !st.ok()) return st;
    }
    if (absl::Status st = backend.Start(s); !st.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("ProfileVerifyCost: slot ", s, ": ", st.message()));
    }
    const int rows[] = {s, s};
    const int64_t tokens[] = {1, 2};
    if (absl::StatusOr<std::span<const float>> out =
            backend.StepRows(rows, tokens, std::span<const int>());
        !out.ok()) {
      return out.status();
    }
  }
  VerifyCostCurve curve{
      .measured_on = options.measured_on, .backend = options.backend, .model = options.model};
  for (int64_t b : sizes) {
    VerifyCostCurve::Point point{.batch = b};
    for (int length = 1; length <= drafts + 1; ++length) {
      std::vector<int> rows;
      std::vector<int64_t> tokens;
      for (int s = 0; s < b; ++s) {
        for (int j = 0; j < length; ++j) {
          rows.push_back(s);
          tokens.push_back(3 + j);
        }
      }
      absl::StatusOr<double> ms = Fastest(options.reps, [&]() -> absl::Status {
        // Every position's logits, as a verification asks.
        absl::StatusOr<std::span<const float>> out = backend.StepRows(rows, tokens, std::nullopt);
        if (!out.ok()) return out.status();
        // As a verification that rejects every draft: the token stays (a
        // rollback undoes at most the drafts).
        for (int s = 0; s < b; ++s) {
          if (absl::Status st = backend.Rollback(s, ++held[s]); !st.ok()) return st;
        }
        return absl::OkStatus();
      });
      if (!ms.ok()) return ms.status();
      point.step_ms.push_back(*ms);
    }
    if (!drafting) {
      curve.points.push_back(std::move(point));
      continue;
    }
    std::vector<int> draft_slots(b);
    std::iota(draft_slots.begin(), draft_slots.end(), 0);
    const std::vector<int64_t> next(b, 4);
    absl::StatusOr<double> ms = Fastest(options.reps, [&]() -> absl::Status {
      // Without logits, as the executor drafts for unconstrained rows.
      for (const absl::StatusOr<model::DraftResult>& r :
           backend.DraftBatch(draft_slots, next, /*with_logits=*/false)) {
        if (!r.ok()) return r.status();
      }
      return absl::OkStatus();
    });
    if (!ms.ok()) return ms.status();
    point.draft_ms = *ms / static_cast<double>(b);
    curve.points.push_back(std::move(point));
  }
  return curve;
}

}  // namespace weir::worker
