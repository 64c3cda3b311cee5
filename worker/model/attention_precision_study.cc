// A CPU study (manual; prints, asserts nothing about quality): how far the
// V4.1 model's logits move when its sparse attention takes the numerics of
// the `fast` SparseDecodeAttention kernel — softmax weights rounded to bf16
// before P.V, the denominator summing the rounded weights — with everything
// else the CPU reference. Run on `models/small` with head_dim 512 and no
// discrete choices (16 of 16 experts, index_topk 128), the model of
// device_decoder_fast_test's StoredKvIsCloseWhenNothingIsChosen, so the
// kernel-vs-reference difference measured there on the GPU can be compared
// with what the numerics alone cause.
//
//   tools/bazel test //worker/model:attention_precision_study --test_output=all

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "worker/model/cpu_ops.h"
#include "worker/model/model.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

// CpuOps whose sparse attention rounds the softmax weights to bf16 (the
// kernel's P) and sums the rounded weights into the denominator.
class BfPOps : public CpuOps {
 public:
  using CpuOps::CpuOps;
  absl::Status SparseAttention(const kernels::cpu::SparseAttentionArgs& a) override {
    const int64_t d = a.head_dim;
    const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<float> logits(a.topk);
    for (int64_t q = 0; q < a.queries; ++q) {
      const int32_t* idx = a.index.data() + q * a.topk;
      for (int h = 0; h < a.heads; ++h) {
        const float* qv = a.q.data() + (q * a.heads + h) * d;
        float* out = a.out.data() + (q * a.heads + h) * d;
        float m = -INFINITY;
        for (int t = 0; t < a.topk; ++t) {
          if (idx[t] < 0) continue;
          const float* k = a.kv.data() + idx[t] * d;
          float s = 0;
          for (int64_t c = 0; c < d; ++c) s += qv[c] * k[c];
          logits[t] = s * scale;
          m = std::max(m, logits[t]);
        }
        std::fill(out, out + d, 0.0f);
        if (m == -INFINITY) continue;
        float sum = 0;
        for (int t = 0; t < a.topk; ++t) {
          if (idx[t] < 0) continue;
          const float p = kernels::RoundToBf16(std::exp(logits[t] - m));
          sum += p;
          const float* v = a.kv.data() + idx[t] * d;
          for (int64_t c = 0; c < d; ++c) out[c] += p * v[c];
        }
        const float denom = sum + std::exp(a.sink[h] - m);
        for (int64_t c = 0; c < d; ++c) out[c] /= denom;
      }
    }
    return absl::OkStatus();
  }
};

std::unique_ptr<Model> MakeModel(const Checkpoint& ckpt, bool bf16_p) {
  ModelOptions options;
  options.precision = ActivationPrecision::kBf16;
  options.make_ops = [bf16_p](ActivationPrecision p) -> absl::StatusOr<std::unique_ptr<Ops>> {
    if (bf16_p) return std::unique_ptr<Ops>(new BfPOps(p, {.row_stable_logits = true}));
    return std::unique_ptr<Ops>(new CpuOps(p, {.row_stable_logits = true}));
  };
  return NewModelOrFail(ckpt, std::move(options));
}

TEST(AttentionPrecisionStudy, Bf16SoftmaxWeightsOnTheContinuousModel) {
  // The model of device_decoder_fast_test's StoredKvIsCloseWhenNothingIsChosen.
  const Checkpoint* ckpt =
      DerivedCheckpoint("small", "small_hd512_continuous",
                        {{"\"head_dim\": 256", "\"head_dim\": 512"},
                         {"\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 16"},
                         {"\"index_topk\": 64", "\"index_topk\": 128"}},
                        3);
  ASSERT_NE(ckpt, nullptr);
  auto ref = MakeModel(*ckpt, false);
  auto bfp = MakeModel(*ckpt, true);
  ASSERT_NE(ref, nullptr);
  ASSERT_NE(bfp, nullptr);
  const int64_t v = ckpt->config().vocab_size;
  std::vector<double> one_step, own;
  int top1_one = 0, top1_own = 0, n = 0;
  for (int s = 0; s < 4; ++s) {
    auto a = ref->NewSequence();
    auto b = bfp->NewSequence();
    const std::vector<int64_t> prompt = RandomTokens(9 + 8 * s, 900 + s, v - 1);
    auto la = ref->Forward(*a, prompt, 0);
    auto lb = bfp->Forward(*b, prompt, 0);
    ASSERT_TRUE(la.ok() && lb.ok());
    int64_t token = ArgmaxRow(la->data() + (prompt.size() - 1) * v, v);
    for (int step = 0; step < 16; ++step) {
      // One step from the reference's own state (a copy), and the study
      // model on its own history.
      auto synced = bfp->NewSequence();
      ASSERT_TRUE(synced->CopyFrom(*a).ok());
      const int64_t pos = a->length();
      const std::vector<int64_t> next = {token};
      auto ra = ref->Forward(*a, next, pos);
      auto rs = bfp->Forward(*synced, next, pos);
      auto rb = bfp->Forward(*b, next, pos);
      ASSERT_TRUE(ra.ok() && rs.ok() && rb.ok());
      one_step.push_back(RelativeL2(rs->data(), ra->data(), v));
      own.push_back(RelativeL2(rb->data(), ra->data(), v));
      const int64_t want = ArgmaxRow(ra->data(), v);
      top1_one += ArgmaxRow(rs->data(), v) == want;
      top1_own += ArgmaxRow(rb->data(), v) == want;
      ++n;
      token = want;
    }
  }
  std::sort(one_step.begin(), one_step.end());
  std::sort(own.begin(), own.end());
  std::printf("bf16 softmax weights vs the reference, %d positions: one step top-1 %.4f, "
              "median row error %.3g (p90 %.3g); own history top-1 %.4f, median %.3g (p90 %.3g)\n",
              n, double(top1_one) / n, one_step[n / 2], one_step[n * 9 / 10],
              double(top1_own) / n, own[n / 2], own[n * 9 / 10]);
}

}  // namespace
}  // namespace weir::model
