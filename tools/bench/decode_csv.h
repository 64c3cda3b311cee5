// tools/bench/decode_csv.h
//
// DecodeCsv writes decode_gpu's measurements (`--csv=PATH`) as CSV, one row
// per measured (model, path, numerics, mode, batch), for tools/bench/plot.py's
// `decode` plot (step time against the memory floor by batch size). The
// header is kDecodeCsvHeader; plot.py recognises the file by it and
// tools/bench/plots/decode_sample.csv starts with it (decode_csv_test checks
// both).
//
//   absl::StatusOr<DecodeCsv> csv = DecodeCsv::Open("decode.csv");
//   csv->Add({.model = "small", .path = "device_decoder", .numerics = "fast",
//             .mode = "graph", .batch = 64, .step_ms = 6.4, .floor_ms = 0.0648});
//
// Thread safety: not thread-safe.

#ifndef WEIR_TOOLS_BENCH_DECODE_CSV_H_
#define WEIR_TOOLS_BENCH_DECODE_CSV_H_

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace weir::bench {

// One measured decode configuration. Times are per step, in milliseconds.
struct DecodeRow {
  std::string model;     // e.g. "small", "v41-flash ep8 slice"
  std::string path;      // "cuda_ops", "device_decoder" or "ep_slice"
  std::string numerics;  // "reference", "fast"; the activations' dtype for cuda_ops
  std::string mode;      // "graph", "nccl1", "eager" (DeviceDecoder), "ops" (CudaOps)
  int batch = 0;
  int64_t context = 0;   // mean position of the timed steps
  double step_ms = 0;    // median wall time of a step
  std::optional<double> device_ms;  // device time of its kernels (unknown: empty)
  double floor_ms = 0;              // stored-form floor (decode_floor.h) / copy bandwidth
  std::optional<double> fp32_floor_ms;  // the old floor: fp32 bytes the reference reads
  std::optional<int64_t> graph_nodes;   // nodes of the step's CUDA graph (graph modes)
};

// The header line (no newline). ratio = step_ms / floor_ms, fp32_ratio =
// step_ms / fp32_floor_ms, tokens_per_s = batch / step.
inline constexpr char kDecodeCsvHeader[] =
    "model,path,numerics,mode,batch,context,step_ms,device_ms,floor_ms,ratio,fp32_floor_ms,"
    "fp32_ratio,tokens_per_s,graph_nodes";

// One data line (no newline) for `row`: optional fields left empty, ratios
// empty when their floor is not positive, text fields quoted when they hold
// a comma or a quote.
std::string DecodeCsvLine(const DecodeRow& row);

class DecodeCsv {
 public:
  // Creates (truncates) `path` and writes the header. INVALID_ARGUMENT for
  // an empty path, UNAVAILABLE if the file cannot be written.
  static absl::StatusOr<DecodeCsv> Open(const std::string& path);

  // Appends `row` and flushes (a run cut short keeps its rows). UNAVAILABLE
  // if the write fails.
  absl::Status Add(const DecodeRow& row);

 private:
  explicit DecodeCsv(std::ofstream out) : out_(std::move(out)) {}
  std::ofstream out_;
};

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_DECODE_CSV_H_
