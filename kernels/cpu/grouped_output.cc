// kernels/cpu/grouped_output.cc

#include "kernels/cpu/grouped_output.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace weir::kernels::cpu {

absl::Status GroupedOutput(const LinearWeight& wo_a, const GroupedOutputArgs& args) {
  const int64_t g_n = args.groups, t_n = args.tokens, w = wo_a.in_features;
  if (g_n <= 0 || t_n <= 0 || wo_a.out_features % std::max<int64_t>(g_n, 1) != 0 ||
      (wo_a.format != WeightFormat::kF32 && wo_a.format != WeightFormat::kBf16)) {
    return absl::InvalidArgumentError(absl::StrCat("GroupedOutput: groups ", g_n, " wo_a rows ",
                                                   wo_a.out_features, " tokens ", t_n));
  }
  const int64_t r = wo_a.out_features / g_n;
  if (static_cast<int64_t>(args.o.size()) != t_n * g_n * w ||
      static_cast<int64_t>(args.u.size()) != t_n * g_n * r) {
    return absl::InvalidArgumentError(absl::StrCat("GroupedOutput: o ", args.o.size(), " u ",
                                                   args.u.size(), " for tokens ", t_n));
  }
  std::vector<float> slice(t_n * w), part(t_n * r);
  for (int64_t g = 0; g < g_n; ++g) {
    LinearWeight block = wo_a;
    block.out_features = r;
    if (wo_a.format == WeightFormat::kF32) {
      block.f32 = wo_a.f32.subspan(g * r * w, r * w);
    } else {
      block.bf16 = wo_a.bf16.subspan(g * r * w, r * w);
    }
    for (int64_t t = 0; t < t_n; ++t) {
      std::copy_n(args.o.data() + (t * g_n + g) * w, w, slice.data() + t * w);
    }
    RETURN_IF_ERROR(Linear(block, {.x = slice, .y = part, .rows = t_n,
                                   .act_quant = ActQuant::kNone}))
        << "group " << g;
    for (int64_t t = 0; t < t_n; ++t) {
      std::copy_n(part.data() + t * r, r, args.u.data() + (t * g_n + g) * r);
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
