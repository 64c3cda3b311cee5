// worker/verify_profile.h
//
// The verify cost curve (verify_length.h VerifyCostCurve) of a drafting
// decode backend, or of one that only rolls back (prompt lookup alone:
// draft_ms 0, no draft pass to pay), measured on it: what a CUDA worker does at start-up for
// --verify_length=confidence, where a curve measured on the CPU model (the
// model directory's verify_cost.json) says nothing about its steps. Per
// batch size B: a step of B sequences of L positions each (the token and
// L - 1 drafts; one StepRows, undone by Rollback) for L = 1 .. drafts + 1,
// and one DraftBatch of the B sequences (a row's share), each the fastest
// of `reps` runs after a first untimed one (which captures the decoder's
// graphs). The steps taken depend only on `batches`, the options and the
// backend's capacities, so on a collective backend (one rank of an
// expert-parallel group, every step a collective) every rank calling it
// alike takes the same steps: a worker of such a group profiles at load on
// every rank.
//
// Thread safety: uses `backend` as its owner would; nothing else.
#ifndef WEIR_WORKER_VERIFY_PROFILE_H_
#define WEIR_WORKER_VERIFY_PROFILE_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/decode_backend.h"
#include "worker/verify_length.h"

namespace weir::worker {

struct VerifyProfileOptions {
  int drafts = 0;                // the curve's max_drafts (>= 1)
  int reps = 3;                  // timed runs a point (>= 1)
  std::string backend = "cuda";  // VerifyCostCurve::backend
  std::string measured_on;       // VerifyCostCurve::measured_on
  std::string model;             // VerifyCostCurve::model
  // A backend that takes block tables (takes_block_tables): the blocks each
  // profiled slot needs for ProfileVerifyPositions positions; slot s gets
  // blocks [s * blocks_per_slot, (s + 1) * blocks_per_slot).
  int64_t blocks_per_slot = 0;
};

// The most positions a profiled slot reaches over `batch_sizes` measured
// batch sizes: it starts with two and keeps one position of every timed step
// (a verification rejecting all its drafts), each step first writing
// drafts + 1.
int64_t ProfileVerifyPositions(int64_t batch_sizes, const VerifyProfileOptions& options);

// Measures the curve at the batch sizes of `batches` (increasing, >= 1) the
// backend can take: B sequences in its slots and B x (drafts + 1) rows in
// one step; larger ones are left out. Uses slots 0 .. B - 1 (started with
// two positions, released at the end, also on failure).
// REQUIRES: the backend holds no sequence in those slots (a worker profiles
// its decoder at load, before serving: Start would replace one).
// FAILED_PRECONDITION when the backend neither drafts nor rolls back
// `drafts` positions, or takes fewer than drafts + 1 rows a slot;
// INVALID_ARGUMENT for bad options or when no batch size fits; a step's or
// draft's error as it comes.
absl::StatusOr<VerifyCostCurve> ProfileVerifyCost(model::DecodeBackend& backend,
                                                  std::span<const int64_t> batches,
                                                  const VerifyProfileOptions& options);

}  // namespace weir::worker

#endif  // WEIR_WORKER_VERIFY_PROFILE_H_
