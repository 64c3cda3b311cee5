// CPU test of the argument checks of ActQuantFp8 and Fp8ActBf16 (no launch,
// no GPU: the pointers are fake device addresses, only their alignment is
// looked at).

#include <cstdint>
#include <initializer_list>

#include "gtest/gtest.h"
#include "kernels/cuda/dense/act_quant_fp8.h"

namespace weir::kernels::cuda::dense {
namespace {

uint8_t* At(uintptr_t address) { return reinterpret_cast<uint8_t*>(address); }

Fp8ActBf16Params GoodFp8ActBf16() {
  return {.codes = At(0x1000),
          .scales = At(0x2001),  // scales are bytes: any alignment
          .out = reinterpret_cast<uint16_t*>(0x3000),
          .rows = 3,
          .cols = 64};
}

TEST(Fp8ActBf16ParamsTest, AcceptsGoodArguments) {
  EXPECT_TRUE(CheckFp8ActBf16Params(GoodFp8ActBf16()).ok());
  Fp8ActBf16Params p = GoodFp8ActBf16();
  p.groups = 4;
  EXPECT_TRUE(CheckFp8ActBf16Params(p).ok());  // packed groups
  p.code_group_stride = 3 * 64 + 16;           // padded groups
  p.scale_group_stride = 3 * 2 + 1;
  EXPECT_TRUE(CheckFp8ActBf16Params(p).ok());
  p.code_group_stride = 3 * 64;  // exactly packed, spelled out
  p.scale_group_stride = 3 * 2;
  EXPECT_TRUE(CheckFp8ActBf16Params(p).ok());
  p.groups = 65535;
  EXPECT_TRUE(CheckFp8ActBf16Params(p).ok());
}

TEST(Fp8ActBf16ParamsTest, RefusesEachBadArgument) {
  using P = Fp8ActBf16Params;
  for (auto bad : std::initializer_list<void (*)(P&)>{
           [](P& p) { p.codes = nullptr; }, [](P& p) { p.scales = nullptr; },
           [](P& p) { p.out = nullptr; }, [](P& p) { p.rows = 0; }, [](P& p) { p.rows = -1; },
           [](P& p) { p.cols = 0; }, [](P& p) { p.cols = 48; },  // not a multiple of 32
           [](P& p) { p.rows = (int64_t{1} << 40) / 64 + 1; },   // rows x cols above 2^40
           [](P& p) { p.groups = 0; }, [](P& p) { p.groups = 65536; },
           [](P& p) { p.codes = At(0x1008); },  // 8-byte aligned only
           [](P& p) { p.out = reinterpret_cast<uint16_t*>(0x3008); },
           [](P& p) { p.code_group_stride = -16; },
           [](P& p) { p.code_group_stride = 3 * 64 + 8; },   // breaks the next group's alignment
           [](P& p) { p.code_group_stride = 3 * 64 - 16; },  // below a group's codes
           [](P& p) { p.scale_group_stride = -1; },
           [](P& p) { p.scale_group_stride = 3 * 2 - 1; },  // below a group's scales
       }) {
    P p = GoodFp8ActBf16();
    p.groups = 2;
    bad(p);
    EXPECT_EQ(CheckFp8ActBf16Params(p).code(), absl::StatusCode::kInvalidArgument)
        << CheckFp8ActBf16Params(p);
  }
}

TEST(ActQuantFp8ParamsTest, RefusesEachBadArgument) {
  const ActQuantFp8Params good{
      .x = At(0x1000), .codes = At(0x2008), .scales = At(0x3001), .rows = 2, .cols = 64};
  EXPECT_TRUE(CheckActQuantFp8Params(good).ok());
  using P = ActQuantFp8Params;
  for (auto bad : std::initializer_list<void (*)(P&)>{
           [](P& p) { p.x = nullptr; },
           [](P& p) { p.codes = nullptr; },
           [](P& p) { p.scales = nullptr; },
           [](P& p) { p.rows = 0; },
           [](P& p) { p.cols = 48; },
           [](P& p) { p.x = At(0x1008); },
           [](P& p) { p.codes = At(0x2004); },
       }) {
    P p = good;
    bad(p);
    EXPECT_EQ(CheckActQuantFp8Params(p).code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
