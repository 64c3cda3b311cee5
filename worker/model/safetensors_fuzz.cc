// libFuzzer entry point for the safetensors header parser. A fuzz build links
// this file with -fsanitize=fuzzer(,address); safetensors_fuzz_test.cc also
// calls it over deterministic mutations so the ordinary test run covers it.

#include <cstddef>
#include <cstdint>
#include <span>

#include "worker/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> file(data, size);
  absl::StatusOr<weir::model::SafetensorsHeader> header =
      weir::model::ParseSafetensorsHeader(file, "fuzz");
  if (!header.ok()) return 0;
  // Touch every accepted byte range so a sanitizer sees any out-of-bounds span.
  uint32_t sum = 0;
  for (const weir::model::TensorInfo& t : header->tensors) {
    const uint8_t* begin = data + header->data_offset + t.begin;
    for (int64_t i = 0; i < t.num_bytes(); ++i) sum += begin[i];
  }
  volatile uint32_t sink = sum;
  (void)sink;
  return 0;
}
