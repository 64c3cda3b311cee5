// indexer_score_bench: IndexerScore's forms (per query, grouped, shared
// keys, shared keys with the dots on mma.sync and its two refinements, and
// the decode form of those dots: IndexerScoreForm) timed on V4.1-Flash's
// indexer (32 heads x 128, MXFP4 keys through block tables, q's MXFP4 form
// and the weights' scale made in the launch, bf16 roundings): a prefill
// chunk (--queries rows of one sequence, visible lengths growing with the
// position at --ratio) and decode batches (each row its own sequence at
// --context). Prints us a call of each form, the speedup of the grouped,
// shared-keys, mma and decode forms over the per-query one, and for the
// first two the visible dots' fp32 operations a second over the device's
// rate of separate multiplies and adds (SMs x 128 lanes x the SM clock: the
// data-sheet ceiling of the CPU's order, which allows no fused
// multiply-add), and whether all forms wrote the same bits (the mma forms'
// where every dot's exact sum fits fp32, as on these inputs).
//
//   indexer_score_bench [--queries=4096] [--context=4096] [--ratio=4]

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention/indexer_score.h"
#include "kernels/cuda/bench_util.h"

namespace weir::kernels::cuda {
namespace {

int64_t Flag(int argc, char** argv, const char* name, int64_t fallback) {
  return BenchFlag(argc, argv, name, fallback);
}

struct Case {
  const char* name;
  int64_t queries;
  bool prefill;  // one sequence, causal; else one sequence a row at the context
};

void Run(const Case& c, int64_t context, int64_t ratio, double op_rate) {
  constexpr int kHeads = 32, kDim = 128, kEntries = 32;
  const int64_t keys = context / ratio + 2;  // the decoder's max entries: a little slack
  const int64_t slots = c.prefill ? 1 : c.queries;
  const int table_width = static_cast<int>((keys + kEntries - 1) / kEntries);
  const int64_t pool_rows = slots * table_width * kEntries;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(c.queries * kHeads * kDim), w(c.queries * kHeads);
  for (float& v : q) v = normal(rng);
  for (float& v : w) v = normal(rng);
  std::vector<uint8_t> codes(pool_rows * kDim / 2), scales(pool_rows * kDim / 32);
  for (uint8_t& b : codes) b = static_cast<uint8_t>(rng());
  for (uint8_t& b : scales) b = static_cast<uint8_t>(120 + rng() % 10);
  std::vector<int32_t> table(slots * table_width), slot(c.queries);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int64_t> visible(c.queries);
  double dots = 0;
  for (int64_t s = 0; s < c.queries; ++s) {
    slot[s] = static_cast<int32_t>(c.prefill ? 0 : s);
    const int64_t position = c.prefill ? context - c.queries + s : context;
    visible[s] = std::min(keys, (position + 1) / ratio);
    dots += static_cast<double>(visible[s]) * kHeads;
  }
  float* dq = BenchUpload(q);
  float* dw = BenchUpload(w);
  uint8_t* dcodes = BenchUpload(codes);
  uint8_t* dscales = BenchUpload(scales);
  int32_t* dtable = BenchUpload(table);
  int32_t* dslot = BenchUpload(slot);
  int64_t* dvisible = BenchUpload(visible);
  float* dout = nullptr;
  WEIR_BENCH_CHECK(cudaMalloc(&dout, c.queries * keys * sizeof(float)));
  cudaStream_t stream;
  WEIR_BENCH_CHECK(cudaStreamCreate(&stream));
  IndexerScoreParams p{.q = dq,
                       .weights = dw,
                       .visible_len = dvisible,
                       .out = dout,
                       .queries = c.queries,
                       .heads = kHeads,
                       .dim = kDim,
                       .keys = keys,
                       .round_bf16 = true,
                       .block_table = dtable,
                       .table_slot = dslot,
                       .table_width = table_width,
                       .entries_per_block = kEntries,
                       .k_codes = dcodes,
                       .k_scales = dscales,
                       .q_mxfp4 = true,
                       .weights_factor = 0.0078125f};
  constexpr int kForms = 7;
  double ms[kForms];
  std::vector<float> out[kForms];
  const IndexerScoreForm forms[kForms] = {
      IndexerScoreForm::kPerQuery,         IndexerScoreForm::kGrouped,
      IndexerScoreForm::kSharedKeys,       IndexerScoreForm::kSharedKeysMma,
      IndexerScoreForm::kSharedKeysMmaSum, IndexerScoreForm::kSharedKeysMmaBf16,
      IndexerScoreForm::kDecodeMmaBf16};
  for (int f = 0; f < kForms; ++f) {
    p.form = forms[f];
    ms[f] = MedianMs(
        [&] {
          if (absl::Status s = IndexerScore(p, stream); !s.ok()) {
            std::fprintf(stderr, "%s\n", s.ToString().c_str());
            std::exit(1);
          }
        },
        stream, c.prefill ? 5 : 50);
    out[f].resize(c.queries * keys);
    WEIR_BENCH_CHECK(
        cudaMemcpy(out[f].data(), dout, out[f].size() * sizeof(float), cudaMemcpyDeviceToHost));
  }
  bool same = true;
  for (int f = 1; f < kForms; ++f) {
    same = same && std::memcmp(out[0].data(), out[f].data(), out[0].size() * sizeof(float)) == 0;
  }
  const double ops = dots * kDim * 2;  // a multiply and an add a channel
  std::printf(
      "%-9s %6lld %6lld %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %8.2f %8.2f %8.2f %8.2f "
      "%8.3f %8.3f %6s\n",
      c.name, static_cast<long long>(c.queries), static_cast<long long>(keys), ms[0] * 1e3,
      ms[1] * 1e3, ms[2] * 1e3, ms[3] * 1e3, ms[4] * 1e3, ms[5] * 1e3, ms[6] * 1e3, ms[0] / ms[1],
      ms[0] / ms[2], ms[0] / ms[3], ms[0] / ms[6], ops / (ms[1] * 1e-3) / op_rate,
      ops / (ms[2] * 1e-3) / op_rate, same ? "yes" : "NO");
  for (void* ptr : std::vector<void*>{dq, dw, dcodes, dscales, dtable, dslot, dvisible, dout}) {
    cudaFree(ptr);
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace weir::kernels::cuda

int main(int argc, char** argv) {
  using weir::kernels::cuda::Flag;
  const int64_t queries = Flag(argc, argv, "queries", 4096);
  const int64_t context = Flag(argc, argv, "context", 4096);
  const int64_t ratio = Flag(argc, argv, "ratio", 4);
  cudaDeviceProp prop;
  WEIR_BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  WEIR_BENCH_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double op_rate = static_cast<double>(prop.multiProcessorCount) * 128 * clock_khz * 1e3;
  std::printf("%s: %d SMs at %d MHz, fp32 multiply/add rate %.1f T ops/s\n", prop.name,
              prop.multiProcessorCount, clock_khz / 1000, op_rate * 1e-12);
  std::printf("%-9s %6s %6s %12s %12s %12s %12s %12s %12s %12s %8s %8s %8s %8s %8s %8s %6s\n",
              "case", "rows", "keys", "per_query_us", "grouped_us", "shared_us", "mma_us",
              "mma_sum_us", "mma_bf16_us", "decode_us", "x_grp", "x_shared", "x_mma", "x_decode",
              "fp32_grp", "fp32_shr", "same");
  const weir::kernels::cuda::Case cases[] = {{"prefill", queries, true},
                                             {"decode", 1, false},
                                             {"decode", 8, false},
                                             {"decode", 64, false},
                                             {"decode", 256, false}};
  for (const auto& c : cases) weir::kernels::cuda::Run(c, context, ratio, op_rate);
  return 0;
}
